"""torch.fft, stft and istft natively on oxide against CPU PyTorch, the oracle.

Every torch.fft function reduces to three primitives, `_fft_c2c`, `_fft_r2c` and
`_fft_c2r` (csrc/aten/fft/spectral.cpp over oxide_kernels::ops::fft); istft also needs
`unfold_backward` (its overlap-add). Every test runs under OXIDE_FALLBACK=error semantics
(`native_only`), so an operator that would run on the CPU fallback fails here.

Covered: fft/ifft/rfft/irfft/hfft/ihfft and their 2-d and n-d forms; every norm; `n=`/`s=`
padding and truncation; dimension orders; transposed, step-sliced, offset, expanded and
conjugated inputs; float32/float64/complex64/complex128 and integer inputs; out=; the
result's strides against CPU's (MKL's layout); backward against CPU's gradients;
stft/istft; and float16/bfloat16/complex32, which CPU refuses, raising as on CPU.
"""

import pytest
import torch
from test_native_ops import check, to_oxide


@pytest.fixture(autouse=True)
def _native(native_only):
    yield


FLOATS = [torch.float32, torch.float64]
COMPLEX = [torch.complex64, torch.complex128]
NORMS = [None, "backward", "forward", "ortho"]
SIZES = [1, 2, 3, 5, 8, 12, 17, 64]


def dname(dtype):
    return str(dtype).removeprefix("torch.")


def make(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_complex:
        return torch.randn(shape, dtype=torch.complex128, generator=g).to(dtype)
    if dtype.is_floating_point:
        return torch.randn(shape, dtype=torch.float64, generator=g).to(dtype)
    return torch.randint(-5, 6, shape, generator=g).to(dtype)


def tol(dtype):
    """Single precision: MKL (CPU) and rustfft (oxide) round differently, by about
    eps * log2(n) * |x|; double keeps assert_close's defaults."""
    if dtype in (torch.float32, torch.complex64) or not (dtype.is_floating_point or dtype.is_complex):
        return {"rtol": 1e-4, "atol": 1e-4}
    return {}


def layouts(shape, dtype, seed=0):
    """(label, tensor of `shape`) in several memory layouts."""
    rev = tuple(reversed(range(len(shape))))
    padded = tuple(s + 1 for s in shape[:-1]) + (2 * shape[-1],)
    return [
        ("contiguous", make(shape, dtype, seed)),
        ("transposed", make(tuple(reversed(shape)), dtype, seed + 1).permute(*rev)),
        (
            "step-sliced, offset",
            make(padded, dtype, seed + 2)[tuple(slice(1, None) for _ in shape[:-1]) + (slice(None, None, 2),)],
        ),
    ]


# ---------------------------------------------------------------------------------------
# The primitives: values and CPU's layout of the result
# ---------------------------------------------------------------------------------------


PRIMITIVE_DIMS = [[0], [2], [1], [0, 2], [2, 0], [2, 1, 0], [1, 2]]


@pytest.mark.parametrize("dtype", COMPLEX, ids=dname)
@pytest.mark.parametrize("dims", PRIMITIVE_DIMS, ids=str)
def test_c2c_primitive_values_and_strides(dims, dtype):
    for label, x in layouts((3, 4, 5), dtype, 1):
        for norm in (0, 1, 2):
            for forward in (True, False):
                check(
                    lambda a: torch._fft_c2c(a, dims, norm, forward),
                    x,
                    where=f"_fft_c2c {label} dims={dims} norm={norm} forward={forward}",
                    strides=True,
                    **tol(dtype),
                )


@pytest.mark.parametrize("dtype", FLOATS, ids=dname)
@pytest.mark.parametrize("dims", PRIMITIVE_DIMS, ids=str)
def test_r2c_primitive_values_and_strides(dims, dtype):
    for label, x in layouts((3, 4, 6), dtype, 2):
        for norm in (0, 1, 2):
            for onesided in (True, False):
                check(
                    lambda a: torch._fft_r2c(a, dims, norm, onesided),
                    x,
                    where=f"_fft_r2c {label} dims={dims} norm={norm} onesided={onesided}",
                    strides=True,
                    **tol(dtype),
                )


@pytest.mark.parametrize("dtype", COMPLEX, ids=dname)
@pytest.mark.parametrize("dims", PRIMITIVE_DIMS, ids=str)
def test_c2r_primitive_values_and_strides(dims, dtype):
    for n in (5, 6):
        shape = [3, 4, 5]
        shape[dims[-1]] = n // 2 + 1  # CPU reads exactly n / 2 + 1 values along the last dim
        for label, x in layouts(tuple(shape), dtype, 3):
            for norm in (0, 1, 2):
                check(
                    lambda a: torch._fft_c2r(a, dims, norm, n),
                    x,
                    where=f"_fft_c2r {label} dims={dims} n={n} norm={norm}",
                    strides=True,
                    **tol(dtype),
                )


def test_primitives_on_empty_and_expanded_inputs():
    c = torch.complex64
    check(lambda a: torch._fft_c2c(a, [1], 0, True), make((0, 4), c), where="c2c empty batch", strides=True)
    check(lambda a: torch._fft_c2c(a, [1], 0, True), make((3, 0), c), where="c2c empty signal", strides=True)
    check(lambda a: torch._fft_c2c(a, [], 1, True), make((4, 3), c).t(), where="c2c no dim: a copy", strides=True)
    check(lambda a: torch._fft_r2c(a, [2], 1, True), make((2, 0, 4), torch.float32), where="r2c empty", strides=True)
    check(lambda a: torch._fft_c2r(a, [1], 2, 8), make((0, 5), c), where="c2r empty batch", strides=True)
    check(lambda a: torch._fft_c2r(a, [1], 2, 0), make((3, 1), c), where="c2r last_dim_size 0", strides=True)
    check(
        lambda a: torch._fft_c2c(a, [0], 2, True),
        make((4, 1), c).expand(4, 5),
        where="c2c expanded input",
        strides=True,
        **tol(c),
    )
    check(
        lambda a: torch._fft_r2c(a, [1], 0, False),
        make((5,), torch.float64).expand(3, 5),
        where="r2c expanded input",
        strides=True,
    )


@pytest.mark.parametrize("dtype", FLOATS, ids=dname)
def test_primitive_out_variants(dtype):
    cdt = torch.complex64 if dtype == torch.float32 else torch.complex128
    x, z = make((4, 6), dtype, 4), make((4, 6), cdt, 5)
    outs = lambda d: [  # noqa: E731
        ("out empty", torch.empty(0, dtype=d)),
        ("out of the wrong size", make((2,), d, 6)),
        ("out non-contiguous", make((6, 4), d, 7).t()),
    ]
    for label, o in outs(cdt):
        check(lambda a, o: torch._fft_c2c(a, [1, 0], 1, True, out=o), z, o, where=f"_fft_c2c.out {label}", **tol(dtype))
        check(lambda a, o: torch._fft_r2c(a, [0, 1], 2, True, out=o), x, o, where=f"_fft_r2c.out {label}", **tol(dtype))
        check(lambda a, o: torch._fft_r2c(a, [1], 0, False, out=o), x, o, where=f"_fft_r2c.out two-sided {label}")
    for label, o in outs(dtype):
        check(lambda a, o: torch._fft_c2r(a, [0, 1], 2, 10, out=o), z, o, where=f"_fft_c2r.out {label}", **tol(dtype))
    # An out= of another dtype is converted into, as on CPU.
    other = torch.complex128 if cdt == torch.complex64 else torch.complex64
    check(
        lambda a, o: torch._fft_c2c(a, [1], 0, False, out=o),
        z,
        torch.empty(0, dtype=other),
        where="c2c.out cast",
        **tol(torch.complex64),
    )


# ---------------------------------------------------------------------------------------
# torch.fft functions
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS + COMPLEX, ids=dname)
@pytest.mark.parametrize("fn", ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"])
def test_one_dimensional(fn, dtype):
    f = getattr(torch.fft, fn)
    if fn in ("rfft", "ihfft") and dtype.is_complex:
        pytest.skip("rfft/ihfft take real inputs (CPU raises; covered by test_errors_match_cpu)")
    for size in SIZES:
        x = make((3, size), dtype, size)
        for norm in NORMS:
            for n in (None, size + 3, max(1, size - 1)):
                check(
                    lambda a: f(a, n=n, norm=norm),
                    x,
                    where=f"{fn} size={size} n={n} norm={norm}",
                    strides=True,
                    **tol(dtype),
                )
        check(
            lambda a: f(a, dim=0), x.t().contiguous().t(), where=f"{fn} dim=0 size={size}", strides=True, **tol(dtype)
        )
    for label, x in layouts((4, 3, 10), dtype, 9):
        for dim in (0, 1, -1):
            check(lambda a: f(a, dim=dim), x, where=f"{fn} {label} dim={dim}", strides=True, **tol(dtype))


@pytest.mark.parametrize("dtype", FLOATS + COMPLEX, ids=dname)
@pytest.mark.parametrize(
    "fn", ["fft2", "ifft2", "fftn", "ifftn", "rfft2", "irfft2", "rfftn", "irfftn", "hfft2", "hfftn", "ihfft2", "ihfftn"]
)
def test_multi_dimensional(fn, dtype):
    f = getattr(torch.fft, fn)
    if fn.startswith(("rfft", "ihfft")) and dtype.is_complex:
        pytest.skip("rfft*/ihfft* take real inputs")
    two = fn.endswith("2")
    dim_cases = [(-2, -1), (0, 2), (2, 0), (-1, -3)] if two else [None, (0, 2), (2, 0), (1, 2, 0), (-1,)]
    for label, x in layouts((4, 5, 6), dtype, 10):
        for dim in dim_cases:
            for norm in NORMS:
                kw = {"norm": norm} if dim is None else {"dim": dim, "norm": norm}
                check(lambda a: f(a, **kw), x, where=f"{fn} {label} {kw}", strides=True, **tol(dtype))
    # s= pads and truncates per dimension.
    x = make((4, 5, 6), dtype, 11)
    for s in [(3, 8), (7, 2)]:
        dims = (0, 2)
        check(lambda a: f(a, s=s, dim=dims), x, where=f"{fn} s={s} dim={dims}", strides=True, **tol(dtype))
    if not two:
        check(lambda a: f(a, s=(2, 3, 9)), x, where=f"{fn} s=(2, 3, 9)", strides=True, **tol(dtype))
        check(lambda a: f(a), make((2, 3, 2, 4, 3), dtype, 12), where=f"{fn} 5-d", strides=True, **tol(dtype))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool], ids=dname)
def test_integer_inputs_promote_like_cpu(dtype):
    x = make((3, 8), dtype, 13)
    for fn in ("fft", "rfft", "ihfft", "fft2", "rfftn", "ifftn"):
        check(lambda a: getattr(torch.fft, fn)(a), x, where=f"{fn} {dname(dtype)}", strides=True, **tol(dtype))


@pytest.mark.parametrize("cdt", COMPLEX, ids=dname)
def test_conjugated_and_negated_views(cdt):
    x = make((4, 6), cdt, 14)
    check(lambda a: torch.fft.fft(a.conj()), x, where="fft of a conj view", **tol(cdt))
    check(lambda a: torch.fft.irfft(a.conj(), n=9), x, where="irfft of a conj view", **tol(cdt))
    check(lambda a: torch.fft.hfft(a), x, where="hfft (conjugates its input)", **tol(cdt))
    check(lambda a: torch.fft.fftn(torch._neg_view(a)), x, where="fftn of a negative view", **tol(cdt))
    check(lambda a: torch.fft.ihfft(a.real).conj().resolve_conj(), x, where="ihfft resolved", **tol(cdt))


@pytest.mark.parametrize("dtype", FLOATS + COMPLEX, ids=dname)
def test_out_variants(dtype):
    x = make((4, 6), dtype, 15)
    cdt = dtype if dtype.is_complex else (torch.complex64 if dtype == torch.float32 else torch.complex128)
    rdt = cdt.to_real()
    cases = [
        ("fft", cdt, {}),
        ("ifft2", cdt, {}),
        ("irfft", rdt, {"n": 7}),
        ("hfftn", rdt, {}),
        ("fftn", cdt, {"s": (3, 8)}),
    ]
    if not dtype.is_complex:
        cases += [("rfft", cdt, {}), ("rfft2", cdt, {"norm": "ortho"}), ("ihfft", cdt, {})]
    for fn, odt, kw in cases:
        f = getattr(torch.fft, fn)
        rows, cols = f(x, **kw).shape
        for label, o in [
            ("empty", torch.empty(0, dtype=odt)),
            ("wrong size", make((3,), odt, 16)),
            ("transposed, right size", make((cols, rows), odt, 17).t()),
        ]:
            check(lambda a, o: f(a, out=o, **kw), x, o, where=f"{fn}(out=) {label} {kw}", **tol(dtype))


def test_errors_match_cpu():
    """Bad arguments raise CPU's exception type (the frontends' checks run before any kernel)."""
    c, r = make((3, 4), torch.complex64), make((3, 4), torch.float32)
    check(lambda a: torch.fft.rfft(a), c, where="rfft of a complex input")
    check(lambda a: torch.fft.fft(a, n=0), c, where="n=0")
    check(lambda a: torch.fft.fft(a, dim=2), c, where="dim out of range")
    check(lambda a: torch.fft.fftn(a, dim=(0, 0)), c, where="repeated dim")
    check(lambda a: torch.fft.fft(a), make((3, 0), torch.complex64), where="empty signal")
    check(lambda a: torch.fft.irfft(a, n=-1), c, where="negative n")
    check(lambda a: torch.fft.fft(a, norm="bogus"), r, where="unknown norm")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=dname)
def test_half_types_raise_like_cpu(dtype):
    x = make((4, 8), dtype, 18)
    for fn in ("fft", "rfft", "ifft", "irfft", "fft2", "rfftn", "hfft", "ihfft"):
        check(lambda a: getattr(torch.fft, fn)(a), x, where=f"{fn} {dname(dtype)}")
    # The primitives themselves refuse half types (CPU's NotImplementedError).
    check(lambda a: torch._fft_r2c(a, [1], 0, True), x, where=f"_fft_r2c {dname(dtype)}")


def test_complex32_goes_to_the_fallback_which_raises_cpus_error():
    x = make((4, 8), torch.complex64, 19).to(torch.complex32)
    # Under OXIDE_FALLBACK=error: NotImplementedError, as CPU raises.
    check(lambda a: torch._fft_c2c(a, [1], 0, True), x, where="_fft_c2c complex32")
    check(lambda a: torch._fft_c2r(a, [1], 0, 14), x, where="_fft_c2r complex32")
    # With the fallback allowed, the refusal is counted and CPU's own error comes back.
    with pytest.raises(NotImplementedError) as on_cpu:
        torch._fft_c2c(x, [1], 0, True)
    torch.oxide.set_fallback_mode("silent")
    try:
        torch.oxide.reset_fallback_stats()
        with pytest.raises(NotImplementedError) as on_oxide:
            torch._fft_c2c(to_oxide(x), [1], 0, True)
        assert str(on_cpu.value).splitlines()[0] in str(on_oxide.value)
        assert torch.oxide.fallback_stats().get("aten::_fft_c2c", 0) >= 1, torch.oxide.fallback_stats()
    finally:
        torch.oxide.set_fallback_mode("error")


def test_no_fallback_is_counted():
    """A mixed sequence of transforms and their backward leaves the fallback counter at zero."""
    torch.oxide.set_fallback_mode("silent")
    try:
        torch.oxide.reset_fallback_stats()
        x = make((4, 16), torch.float32, 20).to("oxide").requires_grad_()
        y = torch.fft.irfft(torch.fft.rfft(x) * 2, n=16) + torch.fft.ifft2(torch.fft.fftn(x)).real
        z = torch.fft.hfft(torch.fft.ihfft(x), n=16)
        (y + z).sum().backward()
        window = torch.hann_window(8).to("oxide")
        s = torch.stft(x.detach(), 8, 2, window=window, return_complex=True)
        torch.istft(s, 8, 2, window=window, length=16).cpu()
        assert torch.oxide.fallback_stats() == {}
    finally:
        torch.oxide.set_fallback_mode("error")


# ---------------------------------------------------------------------------------------
# Backward
# ---------------------------------------------------------------------------------------


def check_grad(fn, x, where, **kw):
    """fn's gradient with respect to `x` for a random cotangent, on oxide and on CPU."""
    xc = x.detach().clone().requires_grad_()
    xd = to_oxide(x.detach().clone()).requires_grad_()
    yc = fn(xc)
    cot = make(tuple(yc.shape), yc.dtype, 99)
    yc.backward(cot)
    yd = fn(xd)
    yd.backward(to_oxide(cot))
    torch.oxide.synchronize()
    assert yd.device.type == "oxide" and xd.grad.device.type == "oxide", where
    torch.testing.assert_close(yd.detach().cpu(), yc.detach(), msg=lambda m: f"{where}: forward: {m}", **kw)
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, msg=lambda m: f"{where}: gradient: {m}", **kw)


BACKWARD_CASES = {
    "fft": (True, lambda a: torch.fft.fft(a, n=10, norm="ortho")),
    "ifft": (True, lambda a: torch.fft.ifft(a, dim=0)),
    "fftn": (True, lambda a: torch.fft.fftn(a, s=(3, 7))),
    "rfft": (False, lambda a: torch.fft.rfft(a, n=9)),
    "rfftn": (False, lambda a: torch.fft.rfftn(a, norm="forward")),
    "rfft2 transposed": (False, lambda a: torch.fft.rfft2(a.t())),
    "irfft": (True, lambda a: torch.fft.irfft(a, n=11)),
    "irfftn": (True, lambda a: torch.fft.irfftn(a, s=(4, 6), norm="ortho")),
    "hfft": (True, lambda a: torch.fft.hfft(a, n=8)),
    "ihfft": (False, lambda a: torch.fft.ihfft(a)),
    "ihfft2": (False, lambda a: torch.fft.ihfft2(a)),
    "fft of real": (False, lambda a: torch.fft.fft(a, dim=0)),
}


@pytest.mark.parametrize("precision", ["single", "double"])
@pytest.mark.parametrize("case", list(BACKWARD_CASES))
def test_backward_matches_cpu(case, precision):
    complex_input, fn = BACKWARD_CASES[case]
    if complex_input:
        dtype = torch.complex64 if precision == "single" else torch.complex128
    else:
        dtype = torch.float32 if precision == "single" else torch.float64
    check_grad(fn, make((5, 6), dtype, 21), case, **tol(dtype))


# ---------------------------------------------------------------------------------------
# stft / istft
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS, ids=dname)
@pytest.mark.parametrize("center", [True, False])
@pytest.mark.parametrize("normalized", [False, True])
def test_stft_istft(dtype, center, normalized):
    x = make((2, 64), dtype, 22)
    window = torch.hann_window(16, dtype=dtype)
    kw = dict(n_fft=16, hop_length=4, center=center, normalized=normalized)
    check(
        lambda a, w: torch.stft(a, window=w, return_complex=True, **kw),
        x,
        window,
        where=f"stft {kw}",
        **tol(dtype),
    )
    check(
        lambda a, w: torch.stft(a, window=w, return_complex=True, onesided=False, **kw),
        x,
        window,
        where=f"stft two-sided {kw}",
        **tol(dtype),
    )
    spec = torch.stft(x, window=window, return_complex=True, **kw)
    check(lambda s, w: torch.istft(s, window=w, length=64, **kw), spec, window, where=f"istft {kw}", **tol(dtype))
    check(lambda s, w: torch.istft(s, window=w, **kw), spec, window, where=f"istft no length {kw}", **tol(dtype))
    # Complex signals: two-sided stft and istft with return_complex.
    zc = make((64,), torch.complex64 if dtype == torch.float32 else torch.complex128, 23)
    zspec = torch.stft(zc, window=window, return_complex=True, **kw)
    check(
        lambda s, w: torch.istft(s, window=w, onesided=False, return_complex=True, **kw),
        zspec,
        window,
        where=f"istft complex {kw}",
        **tol(dtype),
    )
    # Gradients through both.
    check_grad(
        lambda a: torch.stft(a, window=window.to(a.device), return_complex=True, **kw),
        x,
        f"stft grad {kw}",
        **tol(dtype),
    )
    if center:  # without centering, the window's zero ends fail istft's NOLA check (on CPU too)
        check_grad(
            lambda s: torch.istft(s, window=window.to(s.device), length=64, **kw),
            spec,
            f"istft grad {kw}",
            **tol(dtype),
        )


def test_unfold_backward_matches_cpu():
    """istft's overlap-add: unfold's backward for overlapping, touching and gapped windows."""
    for length, size, step in [(16, 4, 1), (16, 4, 3), (17, 5, 5), (20, 3, 7), (9, 9, 2), (1, 1, 1)]:
        for dim in (0, 1, -1):
            shape = [3, 4]
            d = dim % 2
            shape[d] = length
            x = make(tuple(shape), torch.float64, 24)
            windows = x.unfold(d, size, step)
            g = make(tuple(windows.shape), torch.float64, 25)
            check(
                lambda g: torch.ops.aten.unfold_backward(g, shape, dim, size, step),
                g,
                where=f"unfold_backward length={length} size={size} step={step} dim={dim}",
            )
            check_grad(lambda a: a.unfold(d, size, step) * 2, x, f"unfold grad {length} {size} {step} {dim}")
    check(lambda g: torch.ops.aten.unfold_backward(g, [], 0, 1, 1), make((1,), torch.float32, 26), where="0-dim input")
