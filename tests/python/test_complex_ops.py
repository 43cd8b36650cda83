"""complex64 / complex128 natively on oxide against CPU PyTorch, the oracle.

Copies and casts to and from every dtype, views (real/imag/view_as_real/conj), arithmetic
with type promotion and Python complex scalars, the common unary functions, sum/mean/prod,
matrix products with conjugated operands and a few backward passes. Every test runs under
OXIDE_FALLBACK=error semantics (`native_only`), so a complex operator that would run on the
CPU fallback fails here.
"""

import pytest
import torch
from test_native_ops import check, to_oxide, with_out

COMPLEX = [torch.complex64, torch.complex128]
REAL = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.bool,
]


@pytest.fixture(autouse=True)
def _native(native_only):
    yield


def dname(dtype):
    return str(dtype).removeprefix("torch.")


def z(shape, dtype=torch.complex64, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, dtype=dtype, generator=g) * scale


# ---------------------------------------------------------------------------------------
# Copies, casts, views
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("cdt", COMPLEX, ids=dname)
@pytest.mark.parametrize("other", REAL + COMPLEX, ids=dname)
def test_cast_between_complex_and_every_dtype(cdt, other):
    src = z((4, 6), cdt, 1, scale=3.0)
    src[0, 0] = 0  # complex -> bool: zero is False
    src[1, 1] = complex(0, 2)  # a purely imaginary value is True
    # complex -> other and back, contiguous and transposed, on the device.
    check(lambda a: a.to(other), src, where="to")
    check(lambda a: a.t().to(other), src, where="transposed to")
    real = torch.arange(-5, 7).reshape(3, 4).to(other) if other != torch.bool else torch.rand(3, 4) > 0.5
    check(lambda a: a.to(cdt), real, where="real to complex")
    check(lambda a: a.t()[::2].to(cdt), real, where="strided real to complex")
    # copy_ into an existing strided view (broadcast source).
    check(lambda d, s: d[:, ::2].copy_(s), torch.zeros(3, 8, dtype=other), src[0, :4], where="copy_ into view")


@pytest.mark.parametrize("cdt", COMPLEX, ids=dname)
def test_copies_across_devices_fill_zero_clone(cdt):
    x = z((5, 3), cdt, 2)
    d = x.to("oxide")
    torch.testing.assert_close(d.cpu(), x)
    torch.testing.assert_close(d.t().contiguous().cpu(), x.t().contiguous())
    torch.testing.assert_close(d.clone().cpu(), x)
    if torch.oxide.device_count() > 1:
        e = d.to("oxide:1")
        assert e.device.index == 1
        torch.testing.assert_close(e.cpu(), x)
        other = torch.complex128 if cdt == torch.complex64 else torch.complex64
        torch.testing.assert_close(d.to("oxide:1", other).cpu(), x.to(other))
    check(lambda a: a.fill_(1.5 - 2j), torch.zeros(4, 3, dtype=cdt), where="fill_")
    check(lambda a: a[:, 1].fill_(3j), torch.zeros(4, 3, dtype=cdt), where="fill_ view")
    check(lambda a: a.zero_(), x.clone(), where="zero_")
    full = torch.full((2, 3), 1 + 1j, dtype=cdt, device="oxide")
    torch.testing.assert_close(full.cpu(), torch.full((2, 3), 1 + 1j, dtype=cdt))


@pytest.mark.parametrize("cdt", COMPLEX, ids=dname)
def test_views_and_conjugation(cdt):
    x = z((3, 4), cdt, 3)
    check(lambda a: torch.view_as_real(a) * 2, x, where="view_as_real")
    check(lambda a: torch.view_as_complex(torch.view_as_real(a).contiguous()), x, where="view_as_complex")
    check(lambda a: (a.real, a.imag), x, where="real/imag")
    check(lambda a: a.imag.add_(1), x.clone(), where="in-place on imag view")
    check(lambda a: a.conj_physical(), x, where="conj_physical")
    check(lambda a: torch._conj_physical(a), x, where="_conj_physical")
    check(lambda a: a.conj().resolve_conj(), x, where="resolve_conj")
    check(lambda a: a.conj_physical_(), x.clone(), where="conj_physical_")
    check(lambda a: a.t().conj_physical_(), x.clone(), where="conj_physical_ on a transposed view")
    check(lambda a: torch.conj_physical(a, out=torch.empty_like(a)), x, where="conj_physical out=")
    check(lambda a: a.conj().imag, x, where="conj imag")
    # Ops on conjugate-bit (and negative-bit) tensors give CPU's results.
    check(lambda a, b: a.conj() + b, x, z((3, 4), cdt, 4), where="conj + b")
    check(lambda a, b: a.conj() * b.conj(), x, z((3, 4), cdt, 4), where="conj * conj")
    check(lambda a: a.conj().exp(), x, where="exp(conj)")
    check(lambda a: a.conj().sum(), x, where="sum(conj)")
    check(lambda a: a.conj().imag.neg(), x, where="neg of conj imag")
    check(lambda a: torch.real(a.conj()) + torch.imag(a.conj()), x, where="real+imag of conj")
    check(lambda a, b: a.conj().copy_(b), x.clone(), z((3, 4), cdt, 5), where="copy_ into conj view")


# ---------------------------------------------------------------------------------------
# Arithmetic
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("cdt", COMPLEX, ids=dname)
def test_binary_arithmetic(cdt):
    a, b = z((4, 5), cdt, 10), z((4, 5), cdt, 11)
    check(torch.add, a, b)
    check(lambda x, y: torch.add(x, y, alpha=2 - 0.5j), a, b, where="add alpha complex")
    check(lambda x, y: torch.sub(x, y, alpha=3), a, b, where="sub alpha")
    check(torch.mul, a, b)
    check(torch.div, a, b)
    check(lambda x, y: x.t() / y[:, :1].t(), a, b, where="transposed broadcast div")
    check(lambda x: -x, a, where="neg")
    check(torch.reciprocal, a)
    check(torch.eq, a, torch.where(torch.arange(5) % 2 == 0, a, b))
    check(torch.ne, a, torch.where(torch.arange(5) % 2 == 0, a, b))
    check(lambda x, y: x == y.conj().conj(), a, a.clone(), where="eq self")
    check(lambda c, x, y: torch.where(c, x, y), torch.arange(20).reshape(4, 5) % 3 == 0, a, b, where="where")
    check(lambda c, x: torch.where(c, x, 2j), torch.arange(20).reshape(4, 5) % 3 == 0, a, where="where scalar")
    check(lambda x, y, w: torch.addcmul(x, y, w, value=0.5 + 1j), a, b, z((4, 5), cdt, 12))
    check(lambda x, y, w: torch.addcdiv(x, y, w, value=-2j), a, b, z((4, 5), cdt, 12))
    check(lambda x, y: torch.lerp(x, y, 0.3), a, b, where="lerp scalar")
    check(lambda x, y: torch.lerp(x, y, 0.7 + 0.2j), a, b, where="lerp complex scalar")
    check(lambda x, y, w: torch.lerp(x, y, w), a, b, z((4, 5), cdt, 13), where="lerp tensor")


@pytest.mark.parametrize("cdt", COMPLEX, ids=dname)
def test_pow(cdt):
    a, b = z((3, 4), cdt, 20), z((3, 4), cdt, 21, scale=0.5)
    check(torch.pow, a, b, where="tensor ** tensor")
    for e in [2, 3, 0.5, -0.5, -1, -2, 1.7, 2 + 1j, 0, 1]:
        check(lambda x: x**e, a, where=f"tensor ** {e}")
    check(lambda x: 2**x, a, where="2 ** tensor")
    check(lambda x: (1 + 1j) ** x, a, where="complex ** tensor")
    check(lambda r, x: r**x, torch.arange(1.0, 5.0), a, where="real ** complex")


@pytest.mark.parametrize("cdt", COMPLEX, ids=dname)
def test_type_promotion_and_python_scalars(cdt):
    a = z((3, 4), cdt, 30)
    for other in [torch.float32, torch.float64, torch.int64, torch.bool, torch.complex64, torch.complex128]:
        o = z((3, 4), torch.complex128, 31).real.to(other) if not other.is_complex else z((3, 4), other, 31)
        check(torch.add, a, o, where=f"{dname(cdt)} + {dname(other)}")
        check(torch.mul, o, a, where=f"{dname(other)} * {dname(cdt)}")
        # Nonzero divisors: complex division by zero is not what this compares.
        d = o if other.is_complex else (o | True if other == torch.bool else o.abs() + 1)
        check(torch.div, a, d, where=f"{dname(cdt)} / {dname(other)}")
    check(lambda x: x + (1 - 2j), a, where="+ python complex")
    check(lambda x: x * 2.5, a, where="* python float")
    check(lambda x: x - 3, a, where="- python int")
    check(lambda x: (2 + 1j) / x, a, where="python complex / tensor")
    f = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    check(lambda x: x + 1j, f, where="float32 + 1j")
    check(lambda x: x * (2 - 1j), f.double(), where="float64 * complex")
    check(lambda x: x * 1j, torch.arange(6).reshape(2, 3), where="int64 * 1j")
    check(lambda x, o: x.to(torch.complex64) + o, f, torch.ones(3, dtype=torch.float64), where="complex64 + float64")


@pytest.mark.parametrize("cdt", COMPLEX, ids=dname)
def test_out_and_in_place_on_views(cdt):
    a, b = z((4, 6), cdt, 40), z((4, 6), cdt, 41)
    check(lambda x, y, o: torch.mul(x, y, out=o), a, b, torch.empty(4, 6, dtype=cdt), where="mul out=")
    check(
        lambda x, y, o: torch.add(x, y, out=o[:, ::2]),
        a[:, :3],
        b[:, :3],
        torch.zeros(4, 6, dtype=cdt),
        where="add out= strided view",
    )
    check(lambda x, o: torch.exp(x, out=o.t()), a, torch.zeros(6, 4, dtype=cdt), where="exp out= transposed")
    check(lambda x, o: torch.abs(x, out=o), a, torch.empty(4, 6, dtype=cdt.to_real()), where="abs out=")
    check(lambda x, y: x[:, 1:4].mul_(y[:, :3]), a.clone(), b, where="mul_ on a view")
    check(lambda x, y: x.t().add_(y.t(), alpha=1j), a.clone(), b, where="add_ transposed")
    check(lambda x: x[::2].sqrt_(), a.clone(), where="sqrt_ on a view")
    check(lambda x: x.real.mul_(2), a.clone(), where="real view mul_")
    check(lambda x, y, o: torch.div(x, y, out=o), a, b, torch.empty(0, dtype=cdt), where="div out= resized")
    # A float out= of a complex result cannot take it: same error as CPU.
    check(lambda x, y, o: torch.mul(x, y, out=o), a, b, torch.empty(4, 6), where="mul out=float")


# ---------------------------------------------------------------------------------------
# Unary functions
# ---------------------------------------------------------------------------------------

UNARY = [
    "exp",
    "log",
    "log2",
    "log10",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tan",
    "sinh",
    "cosh",
    "tanh",
    "sigmoid",
    "asin",
    "acos",
    "atan",
    "reciprocal",
    "neg",
    "sgn",
    "abs",
    "angle",
    "exp2",
    "asinh",
    "acosh",
    "atanh",
    "expm1",
    "log1p",
]


@pytest.mark.parametrize("cdt", COMPLEX, ids=dname)
@pytest.mark.parametrize("op", ["asinh", "acosh", "atanh", "expm1", "log1p"])
def test_inverse_hyperbolics_on_branch_cuts_and_near_zero(op, cdt):
    # Both sides of each branch cut (signed zero imaginary parts), the real axis inside
    # the cuts, and tiny values where exp(z) - 1 and log(1 + z) would cancel.
    vals = [complex(x, s * 0.0) for x in (-3.0, -1.5, -0.5, 0.0, 0.5, 1.5, 3.0) for s in (1, -1)]
    vals += [complex(s * 0.0, y) for y in (-2.5, -1.0, -0.5, 0.5, 1.0, 2.5) for s in (1, -1)]
    vals += [1e-7 - 3e-8j, -2e-6 + 1e-6j, 0.3 + 0.4j, -0.45 - 0.1j]
    a = torch.tensor(vals, dtype=cdt)
    check(getattr(torch, op), a, where=op)


@pytest.mark.parametrize("cdt", COMPLEX, ids=dname)
@pytest.mark.parametrize("op", UNARY)
def test_unary(op, cdt):
    f = getattr(torch, op)
    a = z((5, 7), cdt, 50, scale=1.5)
    check(f, a, where=op)
    check(lambda x: f(x.t()), a, where=f"{op} transposed")
    check(lambda x: f(x[::2, 1::3]), a, where=f"{op} step-sliced")
    check(f, torch.tensor(0.5 - 0.25j, dtype=cdt), where=f"{op} 0-dim")
    if op != "mean":
        # (mean of nothing: CPU divides 0 by 0, giving nan+nanj; PyTorch's device path fills nan+0j.)
        check(f, torch.empty(0, 3, dtype=cdt), where=f"{op} empty")
    if op not in ("abs", "angle"):
        check(lambda x: getattr(x, op + "_")(), a.clone(), where=f"{op}_ in place")


@pytest.mark.parametrize("cdt", COMPLEX, ids=dname)
def test_special_values(cdt):
    inf, nan = float("inf"), float("nan")
    vals = torch.tensor(
        [
            complex(inf, 0),
            complex(-inf, 0),
            complex(0, inf),
            complex(nan, 0),
            complex(0, nan),
            complex(nan, nan),
            complex(1, 2),
            complex(0, 0),
            complex(-0.0, 0),
            complex(inf, inf),
        ],
        dtype=cdt,
    )
    for f in [
        torch.isnan,
        torch.isinf,
        torch.isfinite,
        torch.abs,
        torch.neg,
        torch.conj_physical,
        lambda x: x == x,
        lambda x: x != x,
        lambda x: x.to(torch.bool),
        lambda x: x.to(torch.float64),
    ]:
        check(f, vals)
    finite = vals[6:9]
    for f in [torch.exp, torch.sqrt, torch.sgn, torch.angle, torch.log, torch.reciprocal]:
        check(f, finite)
    check(torch.sqrt, torch.tensor([complex(-4, 0), complex(-4, -0.0), complex(4, 0), complex(0, -9)], dtype=cdt))
    check(torch.exp, torch.tensor([complex(-inf, 0), complex(inf, 0), complex(700, 0)], dtype=cdt))
    # Division by zero and by huge values (Smith's scaling).
    big = 1e30 if cdt == torch.complex64 else 1e300
    check(
        torch.div,
        torch.tensor([complex(big, big), complex(1, 1)], dtype=cdt),
        torch.tensor([complex(big, big), complex(big, -big)], dtype=cdt),
        where="huge division",
    )
    check(torch.tanh, torch.tensor([complex(30, 1), complex(-50, 2), complex(400, 0.5)], dtype=cdt), where="tanh large")


SPECIAL_UNARY = ["exp", "sin", "cos", "tan", "sinh", "cosh", "tanh", "sigmoid", "asin", "acos", "atan"]
SPECIAL_UNARY += ["asinh", "acosh", "atanh", "log", "sqrt", "reciprocal", "rsqrt", "expm1", "log1p", "sgn"]


@pytest.mark.parametrize("cdt", COMPLEX, ids=dname)
@pytest.mark.parametrize("op", SPECIAL_UNARY)
def test_unary_at_every_special_value(op, cdt):
    """Every pairing of {±0, ±1, ±inf, nan} as real and imaginary parts: CPU's
    std::complex functions follow C99 Annex G there (exp(-inf + i nan) = 0,
    tanh(inf + i inf) = 1, ...), and so must the kernels."""
    parts = [0.0, -0.0, 1.0, -1.0, float("inf"), -float("inf"), float("nan")]
    vals = torch.tensor([complex(a, b) for a in parts for b in parts], dtype=cdt)
    check(getattr(torch, op), vals, where=f"{op} at special values")


@pytest.mark.parametrize("cdt", COMPLEX, ids=dname)
def test_pow_at_every_special_value(cdt):
    """CPU's complex pow is the C library's cpow: `0 ** i` is NaN, `0 ** -1` is
    inf + NaN i, `0 ** 2` is 0 - 0i. Every pairing of special bases and exponents."""
    parts = [0.0, -0.0, 1.0, -1.0, 2.5, float("inf"), -float("inf"), float("nan")]
    zs = [complex(a, b) for a in parts for b in parts]
    base = torch.tensor([z for z in zs for _ in zs], dtype=cdt)
    exponent = torch.tensor([w for _ in zs for w in zs], dtype=cdt)
    check(torch.pow, base, exponent, where="pow at special values", exact=True)
    check(torch.pow, torch.zeros(4, dtype=cdt), torch.tensor([1j, -1, 2, 0.5], dtype=cdt), where="zero base")


# ---------------------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("cdt", COMPLEX, ids=dname)
@pytest.mark.parametrize("op", ["sum", "mean", "prod"])
def test_reductions(op, cdt):
    f = getattr(torch, op)
    a = z((6, 5, 4), cdt, 60, scale=1.0 if op != "prod" else 0.8)
    check(f, a, where=f"{op} full")
    check(lambda x: f(x, 1), a, where=f"{op} dim 1")
    check(lambda x: f(x, 0, keepdim=True), a, where=f"{op} dim 0 keepdim")
    check(lambda x: f(x.transpose(0, 2), 2), a, where=f"{op} transposed")
    check(lambda x: f(x, -1), a[:, ::2], where=f"{op} strided")
    if op != "prod":
        check(lambda x: f(x, (0, 2)), a, where=f"{op} dims (0, 2)")
        check(lambda x: f(x.real.to(torch.float32), 1, dtype=cdt), a, where=f"{op} float -> {dname(cdt)}")
    check(lambda x, o: f(x, 0, out=o), a, torch.empty(0, dtype=cdt), where=f"{op} out=")
    big = z((70000,), cdt, 61, scale=1.0 if op != "prod" else 0.0) + (1 if op == "prod" else 0)
    check(f, big, where=f"{op} large (parallel)", rtol=1e-4, atol=1e-3)
    if op != "mean":
        # (mean of nothing: CPU divides 0 by 0, giving nan+nanj; PyTorch's device path fills nan+0j.)
        check(f, torch.empty(0, 3, dtype=cdt), where=f"{op} empty")


# ---------------------------------------------------------------------------------------
# Matrix products
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("cdt", COMPLEX, ids=dname)
def test_matmul_with_conjugate_inputs(cdt):
    a, b, c = z((3, 4), cdt, 70), z((4, 5), cdt, 71), z((3, 5), cdt, 72)
    check(torch.mm, a, b)
    check(lambda x, y: x.conj() @ y, a, b, where="conj(a) @ b")
    check(lambda x, y: x @ y.conj(), a, b, where="a @ conj(b)")
    check(lambda x, y: x.mH @ y.t().conj().t(), z((4, 3), cdt, 73), b, where="adjoint @ double conj")
    check(lambda x, y: x.t() @ y.t(), z((4, 3), cdt, 74), z((5, 4), cdt, 75), where="transposed")
    check(lambda s, x, y: torch.addmm(s, x, y, beta=0.5, alpha=2), c, a, b, where="addmm")
    check(lambda x, y: torch.bmm(x, y.conj()), z((2, 3, 4), cdt, 76), z((2, 4, 5), cdt, 77), where="bmm conj")
    check(lambda x, y: torch.matmul(x, y), z((2, 3, 4), cdt, 78), b, where="matmul broadcast")
    check(lambda x, y: torch.mv(x, y), a, z((4,), cdt, 79), where="mv")
    check(lambda x, y: torch.dot(x, y), z((6,), cdt, 80), z((6,), cdt, 81), where="dot")
    check(lambda x, y: torch.vdot(x, y), z((6,), cdt, 80), z((6,), cdt, 81), where="vdot")


@pytest.mark.parametrize("cdt", COMPLEX, ids=dname)
@pytest.mark.parametrize(
    "beta, alpha", [(1 + 2j, 2 + 3j), (0.5, 1j), (1j, 2.0), (0j, 2 - 1j)], ids=["both", "alpha", "beta", "beta0"]
)
def test_products_with_complex_scaling_factors(cdt, beta, alpha):
    # alpha and beta with imaginary parts: the GEMM kernel takes real factors, and
    # dropping the imaginary parts gave wrong values silently.
    a, b, c = z((3, 4), cdt, 82), z((4, 5), cdt, 83), z((3, 5), cdt, 84)
    a3, b3, c3 = z((2, 3, 4), cdt, 85), z((2, 4, 5), cdt, 86), z((2, 3, 5), cdt, 87)
    nan_self = torch.full((3, 5), complex(float("nan"), 0), dtype=cdt)
    kw = dict(beta=beta, alpha=alpha)
    check(lambda s, x, y: torch.addmm(s, x, y, **kw), c, a, b, where="addmm")
    check(lambda s, x, y: torch.addmm(s, x, y, **kw), z((5,), cdt, 88), a, b, where="addmm broadcast self")
    check(lambda s, x, y: s.addmm_(x, y, **kw), c, a, b, where="addmm_")
    check(with_out(lambda s, x, y, out: torch.addmm(s, x, y, out=out, **kw)), c, a, b, torch.empty(0, dtype=cdt))
    check(lambda s, x, y: torch.baddbmm(s, x, y, **kw), c3, a3, b3, where="baddbmm")
    check(lambda s, x, y: torch.addbmm(s, x, y, **kw), c, a3, b3, where="addbmm")
    check(lambda s, x, y: torch.addmv(s, x, y, **kw), z((3,), cdt, 89), a, z((4,), cdt, 90), where="addmv")
    check(lambda s, x, y: s.addmv_(x, y, **kw), z((3,), cdt, 89), a, z((4,), cdt, 90), where="addmv_")
    check(lambda s, x, y: torch.addmv(s, x, y, **kw), z((), cdt, 91), a, z((4,), cdt, 90), where="addmv 0-d self")
    if beta == 0:
        check(lambda s, x, y: torch.addmm(s, x, y, **kw), nan_self, a, b, where="beta 0 ignores NaN in self")


# ---------------------------------------------------------------------------------------
# Backward
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("cdt", COMPLEX, ids=dname)
@pytest.mark.parametrize("case", ["mul_exp", "abs", "div_sqrt", "tanh_sigmoid", "matmul"])
def test_backward(case, cdt):
    def f(x, y):
        if case == "mul_exp":
            return ((x * y).exp() * y.conj()).sum().abs()
        if case == "abs":
            return (x.abs() * y.real).sum()
        if case == "div_sqrt":
            return (x / (y + 3)).sqrt().sum().real
        if case == "tanh_sigmoid":
            return (x.tanh() + torch.sigmoid(y)).mean().imag
        return (x @ y.mT).sum().abs()

    x, y = z((3, 4), cdt, 90), z((3, 4), cdt, 91)
    xs = [t.clone().requires_grad_() for t in (x, y)]
    ds = [to_oxide(t.clone()).requires_grad_() for t in (x, y)]
    f(*xs).backward()
    f(*ds).backward()
    for c, d in zip(xs, ds):
        assert d.grad.device.type == "oxide"
        torch.testing.assert_close(d.grad.cpu(), c.grad)


@pytest.mark.parametrize("cdt", COMPLEX, ids=dname)
def test_linspace_and_logspace(cdt):
    """Real end points fill natively (complex linspace once stepped by integers);
    end points with an imaginary part run on the CPU fallback."""
    for start, end, steps in ((0, 10, 10), (-1.5, 2.25, 7), (3, 3, 1), (0, 1, 0)):
        check(lambda d: torch.linspace(start, end, steps, dtype=cdt, device=d.device), torch.empty(0))
        check(lambda d: torch.logspace(start, end, steps, dtype=cdt, device=d.device), torch.empty(0))
    torch.oxide.set_fallback_mode("silent")
    try:
        torch.oxide.reset_fallback_stats()
        check(lambda d: torch.linspace(0, 1 + 2j, 5, dtype=cdt, device=d.device), torch.empty(0))
        assert "aten::linspace.out" in torch.oxide.fallback_stats()
    finally:
        torch.oxide.set_fallback_mode("error")


@pytest.mark.parametrize("out_dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
def test_half_inputs_into_a_wider_out_round_through_the_half_type(half, out_dtype):
    """CPU computes in the inputs' common dtype and copies into `out`: the sum of two
    float16 values lands in a float64 `out` rounded to float16 first."""
    a = torch.tensor([1.0001, 2.0003, 1000.7, -3.3], dtype=half)
    b = torch.tensor([1e-3, 3e-4, 0.3, 7e-3], dtype=half)
    for op in (torch.add, torch.mul, torch.atan2):
        check(lambda x, y: op(x, y, out=torch.empty(4, dtype=out_dtype, device=x.device)), a, b, exact=True)
    check(lambda x: torch.sin(x, out=torch.empty(4, dtype=out_dtype, device=x.device)), a, exact=True)
