"""Writes special_ref.rs: CPU PyTorch's results of the special-function ops on a
grid of inputs (negatives, zero, large values, +-inf, NaN; polynomial degrees
-1..30 and beyond), the reference of special_tests.rs.

    python crates/oxide-kernels/src/ops/elementwise/special_ref.py  # with torch installed
"""

import math
from pathlib import Path

import numpy
import torch

S = torch.special
GRID = [-math.inf, -100, -30, -26.8, -10.5, -9, -8, -6.5, -6.1, -5, -3.7, -2.5, -2.09, -2, -1.5, -1, -0.75,
        -0.5, -0.3, -1e-3, -1e-6, -0.0, 0.0, 1e-30, 1e-8, 1e-6, 1e-5, 1e-3, 0.01, 0.1, 0.135, 0.2, 0.25,
        0.3, 0.49, 0.5, 0.51, 0.75, 0.8, 0.865, 0.9, 0.99, 0.999999, 1, 1.5, 2, 2.09, 2.5, 3, 4.9, 5, 5.1,
        7.9, 8, 8.1, 9, 10, 12.5, 20, 26.5, 30, 50, 51, 80, 88.5, 100, 103, 110, 1e3, 1e5, 1e10, math.inf,
        math.nan]
GRID += torch.empty(16).uniform_(-12, 12, generator=torch.Generator().manual_seed(0)).tolist()

UNARY = {
    "i0": torch.i0, "special_i0e": S.i0e, "special_i1": S.i1, "special_i1e": S.i1e,
    "special_entr": S.entr, "special_erfcx": S.erfcx, "special_ndtri": S.ndtri,
    "special_log_ndtr": S.log_ndtr, "digamma": torch.digamma,
    "special_bessel_j0": S.bessel_j0, "special_bessel_j1": S.bessel_j1,
    "special_bessel_y0": S.bessel_y0, "special_bessel_y1": S.bessel_y1,
    "special_modified_bessel_i0": S.modified_bessel_i0, "special_modified_bessel_i1": S.modified_bessel_i1,
    "special_modified_bessel_k0": S.modified_bessel_k0, "special_modified_bessel_k1": S.modified_bessel_k1,
    "special_scaled_modified_bessel_k0": S.scaled_modified_bessel_k0,
    "special_scaled_modified_bessel_k1": S.scaled_modified_bessel_k1,
    "special_spherical_bessel_j0": S.spherical_bessel_j0, "special_airy_ai": S.airy_ai,
}
HALF_UNARY = ["i0", "special_i0e", "special_i1", "special_i1e", "special_entr", "digamma"]
POLY = {
    "chebyshev_polynomial_t": S.chebyshev_polynomial_t, "chebyshev_polynomial_u": S.chebyshev_polynomial_u,
    "chebyshev_polynomial_v": S.chebyshev_polynomial_v, "chebyshev_polynomial_w": S.chebyshev_polynomial_w,
    "shifted_chebyshev_polynomial_t": S.shifted_chebyshev_polynomial_t,
    "shifted_chebyshev_polynomial_u": S.shifted_chebyshev_polynomial_u,
    "shifted_chebyshev_polynomial_v": S.shifted_chebyshev_polynomial_v,
    "shifted_chebyshev_polynomial_w": S.shifted_chebyshev_polynomial_w,
    "hermite_polynomial_h": S.hermite_polynomial_h, "hermite_polynomial_he": S.hermite_polynomial_he,
    "laguerre_polynomial_l": S.laguerre_polynomial_l, "legendre_polynomial_p": S.legendre_polynomial_p,
}
PX = [-math.inf, -10, -2, -1.5, -1, -0.999, -0.7, -0.5, -0.3, -1e-3, 0, 1e-3, 0.25, 0.3, 0.5, 0.7, 0.75, 0.999,
      1, 1.2, 2, 5, math.inf, math.nan]
PN = [-1, 0, 1, 2, 5, 6, 7, 8, 9, 10, 30, 2.7, 129, math.nan, math.inf]


def lit(v, dt):
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INF" if v > 0 else "-INF"
    if dt == "f32":
        # The shortest text that parses back to the same float (read as f64, then rounded to f32).
        r = numpy.format_float_positional(numpy.float32(v), unique=True, trim="-") if 1e-4 < abs(v) < 1e7 \
            else numpy.format_float_scientific(numpy.float32(v), unique=True, trim="-")
    else:
        r = repr(v)
    return r if ("." in r or "e" in r) else r + ".0"


# Rust parses "1e-45" and "1.0" alike; a bare integer needs the ".0" to be a float literal.


def row(name, dt, inputs, out):
    cols = ", ".join("&[" + ", ".join(lit(v, dt) for v in col) + "]" for col in inputs)
    return f'    ("{name}", {dt.upper()}, &[{cols}], &[{", ".join(lit(v, dt) for v in out)}]),\n'


def main():
    rows = []
    for dt, tdt in (("f32", torch.float32), ("f64", torch.float64)):
        x = torch.tensor(GRID, dtype=tdt)
        for name, f in UNARY.items():
            rows.append(row(name, dt, [x.tolist()], f(x).tolist()))
        for n in (0, 1, 2, 3, 5):
            rows.append(row(f"polygamma{n}", dt, [x.tolist()], torch.polygamma(n, x).tolist()))
        a, b = torch.meshgrid(torch.tensor(PX, dtype=tdt), torch.tensor(PN, dtype=tdt), indexing="ij")
        a, b = a.flatten(), b.flatten()
        for name, f in POLY.items():
            rows.append(row(name, dt, [a.tolist(), b.tolist()], f(a, b).tolist()))
        zx = [1, 1.5, 2, 3, 4.5, 10, 30, 0.5, -1, math.nan, math.inf]
        zq = [-2.5, -2, -1, -0.5, 0, 0.5, 1, 2, 3.3, 10, 100, 1e5, math.inf, math.nan]
        a, b = torch.meshgrid(torch.tensor(zx, dtype=tdt), torch.tensor(zq, dtype=tdt), indexing="ij")
        a, b = a.flatten(), b.flatten()
        rows.append(row("zeta", dt, [a.tolist(), b.tolist()], S.zeta(a, b).tolist()))
        nx = [0.0, -0.0, 1.0, -1.0, 1e-40 if dt == "f64" else 1e-45, 3.4e38, math.inf, -math.inf, math.nan, 0.1]
        a, b = torch.meshgrid(torch.tensor(nx, dtype=tdt), torch.tensor(nx, dtype=tdt), indexing="ij")
        a, b = a.flatten(), b.flatten()
        rows.append(row("nextafter", dt, [a.tolist(), b.tolist()], torch.nextafter(a, b).tolist()))
        xy = [-1.5, -1, -0.5, 0, 0.5, 2, math.inf, math.nan]
        a, b = torch.meshgrid(torch.tensor(xy, dtype=tdt), torch.tensor(xy, dtype=tdt), indexing="ij")
        a, b = a.flatten(), b.flatten()
        rows.append(row("xlog1py", dt, [a.tolist(), b.tolist()], S.xlog1py(a, b).tolist()))
    half = []
    for dt, tdt in (("f16", torch.float16), ("bf16", torch.bfloat16)):
        x = torch.tensor(GRID, dtype=tdt)
        for name in HALF_UNARY:
            half.append(row(name, dt, [x.float().tolist()], UNARY[name](x).float().tolist()))
        for n in (1, 2, 3):
            half.append(row(f"polygamma{n}", dt, [x.float().tolist()], torch.polygamma(n, x).float().tolist()))
        nx = [0.0, -0.0, 1.0, -1.0, 1e-3, 6e4 if dt == "f16" else 3e38, math.inf, -math.inf, math.nan, 0.1]
        a, b = torch.meshgrid(torch.tensor(nx, dtype=tdt), torch.tensor(nx, dtype=tdt), indexing="ij")
        a, b = a.flatten(), b.flatten()
        half.append(row("nextafter", dt, [a.float().tolist(), b.float().tolist()],
                        torch.nextafter(a, b).float().tolist()))
    ints = []
    for dt in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
        info = torch.iinfo(dt)
        v = sorted(k for k in {info.min, -12, -6, -1, 0, 1, 4, 6, 9, 100, info.max} if info.min <= k <= info.max)
        a, b = torch.meshgrid(torch.tensor(v, dtype=dt), torch.tensor(v, dtype=dt), indexing="ij")
        a, b = a.flatten(), b.flatten()
        tag = str(dt).split(".")[1]
        ints.append(f'    ("gcd", "{tag}", &{a.tolist()}, &{b.tolist()}, &{torch.gcd(a, b).tolist()}),\n')
        # lcm divides by the gcd: int_min / -1 traps on CPU (lcm(int_min, int_max)); left out.
        keep = ~((torch.gcd(a, b) == -1) & (a == info.min))
        a, b = a[keep], b[keep]
        ints.append(f'    ("lcm", "{tag}", &{a.tolist()}, &{b.tolist()}, &{torch.lcm(a, b).tolist()}),\n')
    text = (
        "// Generated by special_ref.py from CPU PyTorch " + torch.__version__.split("+")[0] + ". Do not edit.\n"
        "// (op, compute dtype, input columns, CPU's results); half types are given widened to float.\n"
        "#[rustfmt::skip]\n"
        "pub(super) const FLOAT: &[FloatRow] = &[\n" + "".join(rows) + "];\n"
        "#[rustfmt::skip]\n"
        "pub(super) const HALF: &[FloatRow] = &[\n" + "".join(half) + "];\n"
        "#[rustfmt::skip]\n"
        "pub(super) const INT: &[IntRow] = &[\n" + "".join(ints) + "];\n"
    )
    Path(__file__).with_name("special_ref.rs").write_text(text)


main()
