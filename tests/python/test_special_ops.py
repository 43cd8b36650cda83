"""torch.special's pointwise ops (and i0, digamma, polygamma, nextafter, gcd, lcm) on oxide
against CPU PyTorch, natively: every test runs under OXIDE_FALLBACK=error semantics
(`native_only`), so an operator or dtype that would run on the CPU fallback fails.

Inputs cover every float dtype CPU defines for the op and a few integer dtypes (which
promote to float32), with nan, +-inf, 0 and -0 among the values; the functional, out=
and (where the op has one) in-place forms. Where CPU refuses a dtype (the Bessel
functions on float16) oxide must raise the same error type, natively.
"""

import math

import pytest
import torch
from test_native_ops import check, dname, with_out

S = torch.special


@pytest.fixture(autouse=True)
def _native(native_only):
    yield


FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
SOME_INTS = [torch.int32, torch.uint8, torch.int64, torch.bool]
SPECIALS = [math.nan, math.inf, -math.inf, 0.0, -0.0]


def values(dtype, lo=-12.0, hi=12.0, n=67, seed=0):
    """A (n,) CPU tensor: the specials, then uniform values in [lo, hi] and a few large ones."""
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(n, generator=g, dtype=torch.float64) * (hi - lo) + lo
    t[5:12] = torch.tensor([1.0, -1.0, 0.5, 2.0, 5.0, 8.0, 100.0], dtype=torch.float64)
    if dtype.is_floating_point:
        t = t.to(dtype)
        t[: len(SPECIALS)] = torch.tensor(SPECIALS, dtype=dtype)
        return t
    if dtype == torch.bool:
        return t > 0
    if dtype == torch.uint8:
        return t.abs().to(dtype)
    return t.to(dtype)


# name: (function, low, high, CPU defines float16/bfloat16, has an in-place method)
UNARY = {
    "i0": (torch.i0, -12, 12, True, True),
    "special.i0e": (S.i0e, -12, 12, True, False),
    "special.i1": (S.i1, -12, 12, True, False),
    "special.i1e": (S.i1e, -12, 12, True, False),
    "special.entr": (S.entr, -3, 12, True, False),
    "special.erfcx": (S.erfcx, -8, 60, False, False),
    "special.ndtri": (S.ndtri, -0.1, 1.1, False, False),
    "special.log_ndtr": (S.log_ndtr, -40, 8, False, False),
    "digamma": (torch.digamma, -12, 12, True, True),
    "special.bessel_j0": (S.bessel_j0, -30, 30, False, False),
    "special.bessel_j1": (S.bessel_j1, -30, 30, False, False),
    "special.bessel_y0": (S.bessel_y0, -2, 30, False, False),
    "special.bessel_y1": (S.bessel_y1, -2, 30, False, False),
    "special.modified_bessel_i0": (S.modified_bessel_i0, -12, 12, False, False),
    "special.modified_bessel_i1": (S.modified_bessel_i1, -12, 12, False, False),
    "special.modified_bessel_k0": (S.modified_bessel_k0, -1, 12, False, False),
    "special.modified_bessel_k1": (S.modified_bessel_k1, -1, 12, False, False),
    "special.scaled_modified_bessel_k0": (S.scaled_modified_bessel_k0, -1, 12, False, False),
    "special.scaled_modified_bessel_k1": (S.scaled_modified_bessel_k1, -1, 12, False, False),
    "special.spherical_bessel_j0": (S.spherical_bessel_j0, -20, 20, False, False),
    "special.airy_ai": (S.airy_ai, -15, 15, False, False),
}


@pytest.mark.parametrize("dtype", FLOATS + SOME_INTS, ids=dname)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary(name, dtype):
    fn, lo, hi, halves, inplace = UNARY[name]
    x = values(dtype, lo, hi)
    # Half types: both compute in float and round once, but the float algorithms differ
    # in their last bits, which can put a result one rounding step further: two ulps.
    tol = {torch.float16: dict(rtol=2e-3, atol=1e-3), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2)}.get(dtype, {})
    # CPU raises for the half types some ops lack; check() then wants the same error natively.
    check(fn, x, where=f"{name} {dname(dtype)}", **tol)
    if dtype.is_floating_point and (halves or dtype in (torch.float32, torch.float64)):
        check(with_out(fn), x, torch.empty(0, dtype=dtype), where=f"{name} out= {dname(dtype)}", **tol)
        # A strided input (every other element).
        check(fn, values(dtype, lo, hi, n=134)[::2], where=f"{name} strided {dname(dtype)}", **tol)
    if inplace and dtype.is_floating_point:
        method = getattr(torch.Tensor, name + "_")
        check(method, x.clone(), where=f"{name}_ {dname(dtype)}")


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64], ids=dname)
@pytest.mark.parametrize("n", [0, 1, 2, 3, 5])
def test_polygamma(n, dtype):
    x = values(dtype, -6, 12)
    check(lambda t: torch.polygamma(n, t), x, where=f"polygamma({n}) {dname(dtype)}")
    if dtype.is_floating_point:
        check(with_out(lambda t, out: torch.polygamma(n, t, out=out)), x, torch.empty(0, dtype=dtype), where="out=")
        check(lambda t: t.polygamma_(n), x.clone(), where=f"polygamma_({n}) {dname(dtype)}")


def test_polygamma_negative_order_raises():
    x = values(torch.float32)
    check(lambda t: torch.polygamma(-1, t), x, where="polygamma(-1)")


POLYNOMIALS = [
    "chebyshev_polynomial_t",
    "chebyshev_polynomial_u",
    "chebyshev_polynomial_v",
    "chebyshev_polynomial_w",
    "shifted_chebyshev_polynomial_t",
    "shifted_chebyshev_polynomial_u",
    "shifted_chebyshev_polynomial_v",
    "shifted_chebyshev_polynomial_w",
    "hermite_polynomial_h",
    "hermite_polynomial_he",
    "laguerre_polynomial_l",
    "legendre_polynomial_p",
]
X_POINTS = [-math.inf, -2.0, -1.0, -0.7, -0.3, 0.0, 0.25, 0.5, 0.9, 1.0, 1.5, math.inf, math.nan]
N_POINTS = [-1, 0, 1, 2, 5, 6, 7, 10, 30]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int64], ids=dname)
@pytest.mark.parametrize("name", POLYNOMIALS)
def test_polynomial(name, dtype):
    fn = getattr(S, name)
    if dtype.is_floating_point:
        x = torch.tensor(X_POINTS, dtype=dtype)[:, None]
    else:
        x = torch.tensor([-2, -1, 0, 1, 2, 3], dtype=dtype)[:, None]
    n = torch.tensor(N_POINTS, dtype=dtype if dtype.is_floating_point else torch.int64)[None, :]
    check(fn, x, n, where=f"{name} {dname(dtype)}")  # broadcasting (x column, n row)
    check(with_out(fn), x, n, torch.empty(0, dtype=torch.promote_types(x.dtype, n.dtype)), where="out=")
    # Scalar x or scalar n: composite overloads over the tensor kernel.
    check(lambda t: fn(t, 5), x, where=f"{name} n scalar")
    check(lambda t: fn(0.5, t), n, where=f"{name} x scalar")
    # A non-integral degree (truncated) and int32 degrees with float x.
    check(fn, x, torch.full_like(n, 2.7, dtype=x.dtype) if dtype.is_floating_point else n, where="degree 2.7")


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32], ids=dname)
def test_xlog1py(dtype):
    x, y = values(dtype, -3, 3), values(dtype, -2, 5, seed=1)
    check(S.xlog1py, x, y, where="xlog1py")
    check(S.xlog1py, x[:, None][:5], y[None, :][:, :7], where="xlog1py broadcast")
    if dtype.is_floating_point:
        check(with_out(S.xlog1py), x, y, torch.empty(0, dtype=dtype), where="xlog1py out=")
        check(lambda a: S.xlog1py(a, 2.0), x, where="xlog1py scalar other")
        check(lambda a: S.xlog1py(2.0, a), y, where="xlog1py scalar self")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int32], ids=dname)
def test_zeta(dtype):
    if dtype.is_floating_point:
        x = torch.tensor([1.0, 1.5, 2.0, 3.0, 4.5, 10.0, 0.5, -1.0, math.nan, math.inf], dtype=dtype)[:, None]
        q = torch.tensor([-2.5, -2.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.3, 100.0, math.inf, math.nan], dtype=dtype)[None, :]
    else:
        x = torch.tensor([1, 2, 3, 5], dtype=dtype)[:, None]
        q = torch.tensor([-2, 0, 1, 2, 7], dtype=dtype)[None, :]
    check(S.zeta, x, q, where=f"zeta {dname(dtype)}")
    if dtype in (torch.float32, torch.float64):
        check(with_out(S.zeta), x, q, torch.empty(0, dtype=dtype), where="zeta out=")
        check(lambda t: S.zeta(t, 2.0), x, where="zeta scalar q")


@pytest.mark.parametrize("dtype", FLOATS + [torch.int32], ids=dname)
def test_nextafter(dtype):
    pts = [0.0, -0.0, 1.0, -1.0, 0.1, 1e-3, math.inf, -math.inf, math.nan]
    a = torch.tensor(pts, dtype=torch.float64)[:, None].to(dtype)
    b = torch.tensor(pts, dtype=torch.float64)[None, :].to(dtype)
    # Exact: the neighbour in the dtype itself (float16 and bfloat16 step in their own bits).
    check(torch.nextafter, a, b, where=f"nextafter {dname(dtype)}", exact=True)
    if dtype.is_floating_point:
        check(with_out(torch.nextafter), a, b, torch.empty(0, dtype=dtype), where="out=", exact=True)
        check(lambda s, o: s.nextafter_(o), a.expand(9, 9).clone(), b, where="nextafter_", exact=True)


@pytest.mark.parametrize(
    "dtype", [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool, torch.float32], ids=dname
)
@pytest.mark.parametrize("op", ["gcd", "lcm"])
def test_gcd_lcm(op, dtype):
    fn = getattr(torch, op)
    if dtype == torch.bool:
        a = b = torch.tensor([True, False])
    elif dtype.is_floating_point:
        a = b = torch.tensor([2.0, 4.0])
    else:
        info = torch.iinfo(dtype)
        v = [k for k in (info.min, -12, -6, -1, 0, 1, 4, 6, 9, 100, info.max) if info.min <= k <= info.max]
        a = torch.tensor(v, dtype=dtype)[:, None]
        b = torch.tensor(v, dtype=dtype)[None, :]
        if op == "lcm" and dtype in (torch.int32, torch.int64):
            # CPU's lcm(int_min, int_max) divides int_min by -1, which traps.
            b = b[:, :-1]
    check(fn, a, b, where=f"{op} {dname(dtype)}", exact=True)
    if dtype.is_floating_point or dtype == torch.bool:
        return
    check(with_out(fn), a, b, torch.empty(0, dtype=dtype), where=f"{op} out=", exact=True)
    check(lambda s, o: getattr(s, op + "_")(o), a.expand(a.shape[0], b.shape[1]).clone(), b, where=f"{op}_", exact=True)
