"""Native operator kernels against CPU PyTorch, the oracle.

Families: copies/casts/factories, unary, binary and ternary elementwise ops, reductions,
data movement (indexing, scatter/gather, sorting, ...), linear algebra, and a few
backward passes. Every test runs with OXIDE_FALLBACK=error semantics (the `native_only`
fixture): an operator that would silently run on the CPU fallback fails the test.

OXIDE_TEST_ALLOW_FALLBACK=1 keeps the fallback (mode "silent") instead, so that the
comparisons themselves run before every operator has a native kernel.

`check(fn, *args)` is the workhorse: it copies the CPU arguments to oxide keeping their
layout (sizes, strides, storage offset, so transposed, step-sliced and expanded inputs stay
non-contiguous), runs `fn` on both devices and compares the results (values, dtype, shape,
device type oxide) and the arguments afterwards (in-place ops on views, `out=`). When the
CPU call raises, the oxide call must raise the same exception type (and not merely refuse
to run on the fallback).
"""

import math
import os
import warnings

import pytest
import torch

ALLOW_FALLBACK = os.environ.get("OXIDE_TEST_ALLOW_FALLBACK", "0") not in ("", "0")
REFUSED = "has no native oxide kernel"  # the NotImplementedError of OXIDE_FALLBACK=error
# TypeErrors of Python argument parsing: a mistake in the test, not behaviour to compare.
PARSER_ERRORS = (
    "invalid combination of arguments",
    "must be Tensor, not",
    "unexpected keyword argument",
    "positional argument",
)


@pytest.fixture(autouse=True)
def native_or_allowed(request):
    """`native_only` for every test of this file, unless OXIDE_TEST_ALLOW_FALLBACK=1."""
    if not ALLOW_FALLBACK:
        request.getfixturevalue("native_only")
        yield
        return
    previous = torch.oxide.get_fallback_mode()
    torch.oxide.set_fallback_mode("silent")
    try:
        yield
    finally:
        torch.oxide.set_fallback_mode(previous)


FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
DTYPES = FLOATS + INTS + [torch.bool]


def dname(dtype):
    return str(dtype).removeprefix("torch.")


# ---------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------

SPECIALS = [math.nan, math.inf, -math.inf, 0.0, -0.0]
INT_RANGES = {  # inclusive ranges per kind; uint8 clips the low end at 0
    "any": (-10, 10),
    "nonzero": (-10, 10),
    "small": (-3, 3),
    "few": (-3, 3),
    "exponent": (0, 3),
    "shift": (0, 7),
    "unit": (0, 1),
    "nonneg": (0, 9),
}


def make(shape, dtype, seed=0, kind="any", special=False):
    """A deterministic contiguous CPU tensor.

    kind: "any"; "nonzero" (integer divisors); "small" (integer pow bases); "few" (values
    from a small set, so sorting/unique/searchsorted see ties); "exponent"; "shift"
    (shift amounts 0..7); "unit" (floats in [0, 1], lerp weights); "nonneg".
    special: the first five elements of a float tensor are nan, inf, -inf, 0, -0.
    """
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        if kind == "nonzero":
            return torch.ones(shape, dtype=torch.bool)
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        if kind == "unit":
            t = torch.rand(shape, generator=g, dtype=torch.float64)
        elif kind == "exponent":
            t = torch.rand(shape, generator=g, dtype=torch.float64) * 4 - 2
        elif kind == "few":
            t = torch.randint(-3, 4, shape, generator=g).double() * 0.5
        elif kind == "nonneg":
            t = torch.rand(shape, generator=g, dtype=torch.float64) * 9
        else:
            t = torch.randn(shape, generator=g, dtype=torch.float64) * 1.5
        t = t.to(dtype)
        if special and t.numel() >= len(SPECIALS):
            t.view(-1)[: len(SPECIALS)] = torch.tensor(SPECIALS, dtype=dtype)
        return t
    lo, hi = INT_RANGES[kind]
    if dtype == torch.uint8:
        lo = max(lo, 0)
    t = torch.randint(lo, hi + 1, shape, generator=g).to(dtype)
    if kind == "nonzero":
        t[t == 0] = 1
    return t


def idx(*values):
    return torch.tensor(values, dtype=torch.int64)


def unique_rows(rows, cols, k, seed):
    """(rows, k) int64 indices, distinct within each row (scatter/index_copy targets)."""
    g = torch.Generator().manual_seed(seed)
    return torch.rand(rows, cols, generator=g).argsort(1)[:, :k]


def randidx(shape, high, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, high, shape, generator=g)


def layouts(dtype, kind="any"):
    """The same op on contiguous, transposed, step-sliced, offset, expanded, 0-dim and
    empty inputs; floats carry nan/inf/-inf/0/-0."""
    m = lambda shape, seed, special=False: make(shape, dtype, seed, kind, special)  # noqa: E731
    return [
        ("contiguous (3,5)", m((3, 5), 0, True)),
        ("transposed", m((5, 3), 1, True).t()),
        ("sliced with step", m((3, 10), 2)[:, ::2]),
        ("storage offset", m((4, 6), 3, True)[1:, 2:]),
        ("expanded (stride 0)", m((5,), 4).expand(3, 5)),
        ("0-dim", m((), 5)),
        ("empty (0,)", m((0,), 6)),
        ("empty (3,0)", m((3, 0), 7)),
    ]


def pairs(dtype, lhs="any", rhs="any"):
    """Operand pairs: same shape, non-contiguous, broadcasting, 0-dim, empty."""
    a = lambda shape, seed, special=False: make(shape, dtype, seed, lhs, special)  # noqa: E731
    b = lambda shape, seed, special=False: make(shape, dtype, seed, rhs, special)  # noqa: E731
    return [
        ("same shape, specials in lhs", a((3, 5), 0, True), b((3, 5), 1)),
        ("specials in rhs", a((3, 5), 2), b((3, 5), 3, True)),
        ("transposed op sliced with step", a((5, 3), 4, True).t(), b((3, 10), 5)[:, ::2]),
        ("broadcast (4,1,5) op (3,1)", a((4, 1, 5), 6), b((3, 1), 7)),
        ("broadcast against expanded", a((3, 5), 8), b((5,), 9).expand(3, 5)),
        ("0-dim op tensor", a((), 10), b((3, 5), 11)),
        ("tensor op 0-dim", a((3, 5), 12), b((), 13)),
        ("0-dim op 0-dim", a((), 14), b((), 15)),
        ("empty (0,)", a((0,), 16), b((0,), 17)),
        ("empty (3,0) op (1,)", a((3, 0), 18), b((1,), 19)),
    ]


def out_buffers(shape, dtype):
    """out= tensors: wrong size (resized like on CPU), empty, right shape but strided."""
    rev = tuple(reversed(range(len(shape))))
    bufs = [
        ("out of wrong size (2,)", make((2,), dtype, 50)),
        ("out empty", torch.empty(0, dtype=dtype)),
        ("out non-contiguous", make(tuple(reversed(shape)), dtype, 51).permute(*rev)),
    ]
    if dtype.is_floating_point:  # a float result into an integer out: CPU refuses
        bufs.append(("out int64 for a float result", make(shape, torch.int64, 52)))
    return bufs


def cpu_result_dtype(fn, *args, default):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            r = fn(*args)
        except Exception:
            return default
    r = r[0] if isinstance(r, tuple) else r
    return r.dtype if isinstance(r, torch.Tensor) else default


# ---------------------------------------------------------------------------------------
# Running and comparing
# ---------------------------------------------------------------------------------------


def to_oxide(x):
    """The same values on oxide with the same sizes, strides and storage offset (x.to()
    would make step-sliced inputs contiguous): the whole storage moves, the view is rebuilt."""
    if isinstance(x, torch.Tensor):
        if x.device.type != "cpu":
            return x
        storage = x.detach().untyped_storage()
        flat = torch.empty(0, dtype=x.dtype).set_(storage, 0, (storage.nbytes() // x.element_size(),), (1,))
        d = flat.to("oxide").as_strided(x.size(), x.stride(), x.storage_offset())
        return d.requires_grad_() if x.requires_grad else d
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*[to_oxide(v) for v in x])
    if isinstance(x, (list, tuple)):
        return type(x)(to_oxide(v) for v in x)
    if isinstance(x, dict):
        return {k: to_oxide(v) for k, v in x.items()}
    return x


def assert_same(actual, expected, what, exact=False, rtol=None, atol=None, strides=False):
    """`actual` (oxide) matches `expected` (CPU): structure, device, dtype, shape, values."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{what}: expected a tensor, got {type(actual).__name__}"
        assert actual.device.type == "oxide", f"{what}: result on {actual.device}, expected oxide"
        assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype}, CPU gives {expected.dtype}"
        assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)}, CPU gives {tuple(expected.shape)}"
        if strides:
            assert actual.stride() == expected.stride(), (
                f"{what}: strides {actual.stride()}, CPU gives {expected.stride()}"
            )
        tol = {"rtol": 0, "atol": 0} if exact else ({"rtol": rtol, "atol": atol} if rtol is not None else {})
        torch.testing.assert_close(
            actual.detach().cpu(), expected.detach(), equal_nan=True, msg=lambda m: f"{what}: {m}", **tol
        )
    elif isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected), f"{what}: {type(actual).__name__}, CPU gives {type(expected).__name__}"
        assert len(actual) == len(expected), f"{what}: {len(actual)} items, CPU gives {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{what}[{i}]", exact, rtol, atol, strides)
    elif isinstance(expected, float) and math.isnan(expected):
        assert isinstance(actual, float) and math.isnan(actual), f"{what}: {actual!r}, CPU gives nan"
    else:
        assert actual == expected, f"{what}: {actual!r}, CPU gives {expected!r}"


def _same_error(run_oxide, cpu_error, where):
    """CPU raised `cpu_error`: oxide must raise the same type, natively."""
    try:
        run_oxide()
    except Exception as e:  # noqa: BLE001  comparing exception types is the point
        # A kernel that refused the dtype (the fallback was then refused) raised
        # NotImplementedError natively, which is what CPU raises for a dtype it lacks.
        dtype_refused = "for these dtypes" in str(e) and isinstance(cpu_error, NotImplementedError)
        if REFUSED in str(e) and not dtype_refused:
            pytest.fail(f"{where}: CPU raises {type(cpu_error).__name__}({cpu_error}); oxide has no native kernel: {e}")
        assert type(e) is type(cpu_error), (
            f"{where}: CPU raises {type(cpu_error).__name__}({cpu_error}), oxide raises {type(e).__name__}({e})"
        )
    else:
        pytest.fail(f"{where}: CPU raises {type(cpu_error).__name__}({cpu_error}), oxide returned a result")


def _run_blocking(run_oxide):
    with torch.oxide._LaunchBlocking():
        return run_oxide()


def _run_both(run_cpu, run_oxide, where):
    """(expected, actual); None when the CPU call raised and oxide raised the same type.

    When CPU raises, the oxide side runs with launch blocking: a data-dependent check
    (an index out of range) then raises CPU's exception at the call, as PyTorch's tests
    run CUDA's under CUDA_LAUNCH_BLOCKING. Otherwise the oxide side runs asynchronously
    and the device is synchronized before the results are compared, so a queued
    kernel's error is reported for this case.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # resized non-empty out=, var of one element, ...
        try:
            expected = run_cpu()
        except Exception as e:  # noqa: BLE001
            if isinstance(e, TypeError) and any(m in str(e) for m in PARSER_ERRORS):
                pytest.fail(f"{where}: bad test, the CPU call does not parse: {e}")
            _same_error(lambda: _run_blocking(run_oxide), e, where)
            return None
        try:
            actual = run_oxide()
            torch.oxide.synchronize()
        except Exception as e:  # noqa: BLE001
            e.add_note(f"[oxide side of: {where}]")
            raise
    return expected, actual


def check(fn, *args, where="", exact=False, rtol=None, atol=None, strides=False):
    """Run fn on the CPU arguments and on their oxide copies; compare results and arguments."""
    where = where or getattr(fn, "__name__", "call")
    dev_args = to_oxide(args)  # before the CPU call, which may modify its arguments
    both = _run_both(lambda: fn(*args), lambda: fn(*dev_args), where)
    if both is not None:
        kw = dict(exact=exact, rtol=rtol, atol=atol)
        assert_same(both[1], both[0], f"{where}: result", strides=strides, **kw)
        assert_same(dev_args, args, f"{where}: arguments after the call", **kw)


def check_factory(fn, where):
    """fn(device) on "cpu" and on "oxide"."""
    both = _run_both(lambda: fn("cpu"), lambda: fn("oxide"), where)
    if both is not None:
        assert_same(both[1], both[0], f"{where}: result")


def run_cases(cases, **kw):
    """cases: (label, fn, *cpu_args) tuples."""
    for label, fn, *args in cases:
        check(fn, *args, where=label, **kw)


def with_out(fn):
    """fn(*args, out=o) as a function of (*args, o) returning (result, result is o)."""

    def run(*args):
        *args, out = args
        result = fn(*args, out=out)
        if isinstance(out, tuple):
            return result, all(r is o for r, o in zip(result, out))
        return result, result is out

    return run


def _assign(a, key, value):
    a[key] = value
    return a


def op_id(name, kw):
    return name + "".join(f"-{k}={v}" for k, v in kw.items())


def _parses(call):
    """Whether torch's argument parser accepts the call (an overload exists)."""
    try:
        call()
    except TypeError as e:
        return not any(m in str(e) for m in PARSER_ERRORS)
    except Exception:  # noqa: BLE001  a dtype or value error: the overload exists
        return True
    return True


# ---------------------------------------------------------------------------------------
# Copies, casts, fill, factories
# ---------------------------------------------------------------------------------------


def cast_source(src, dst, shape, seed):
    """Values every cast src -> dst defines (no float -> integer overflow or negative ->
    uint8, which are undefined in C++); nan/inf/-0 and 1e5 (float16 overflow) only into
    floating and bool destinations."""
    g = torch.Generator().manual_seed(seed)
    if src == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if src.is_floating_point:
        lo = 0.0 if dst == torch.uint8 else -100.0
        t = (torch.rand(shape, generator=g, dtype=torch.float64) * (100.0 - lo) + lo).to(src)
        if (dst.is_floating_point or dst == torch.bool) and t.numel() >= 6:
            t.view(-1)[:6] = torch.tensor([math.nan, math.inf, -math.inf, -0.0, 1e5, 0.5]).to(src)
        return t
    lo, hi = (0, 200) if src == torch.uint8 else (-100, 100)
    return torch.randint(lo, hi, shape, generator=g).to(src)


@pytest.mark.parametrize("dst", DTYPES, ids=dname)
@pytest.mark.parametrize("src", DTYPES, ids=dname)
def test_cast(src, dst):
    cases = [
        ("sliced with step", cast_source(src, dst, (3, 10), 0)[:, ::2]),
        ("transposed", cast_source(src, dst, (5, 3), 1).t()),
        ("expanded", cast_source(src, dst, (5,), 2).expand(3, 5)),
        ("0-dim", cast_source(src, dst, (), 3)),
        ("empty (3,0)", cast_source(src, dst, (3, 0), 4)),
    ]
    for where, x in cases:
        check(lambda x: x.to(dst), x, where=f"x.to: {where}", exact=True)
    check(
        lambda d, s: d.t().copy_(s),
        make((6, 5), dst, 5),
        cast_source(src, dst, (10, 12), 6)[::2, ::2],
        where="strided copy_ into a transposed destination",
        exact=True,
    )
    check(
        lambda d, s: d[:, ::2].copy_(s),
        make((3, 10), dst, 7),
        cast_source(src, dst, (5,), 8),
        where="broadcasting copy_ into a step-sliced view",
        exact=True,
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_copy_fill_zero(dtype):
    x = lambda shape, seed=0: make(shape, dtype, seed, special=True)  # noqa: E731
    run_cases(
        [
            ("clone of a step-sliced tensor", lambda a: a.clone(), x((3, 10))[:, ::2]),
            ("contiguous of a transposed tensor", lambda a: a.contiguous(), x((5, 3)).t()),
            (
                "clone contiguous_format of an offset view",
                lambda a: a.clone(memory_format=torch.contiguous_format),
                x((4, 6))[1:, 2:],
            ),
            ("clone 0-dim", lambda a: a.clone(), x(())),
            ("clone empty", lambda a: a.clone(), x((3, 0))),
            ("fill_ 3 on x[:, ::2]", lambda a: a[:, ::2].fill_(3), x((4, 6))),
            ("fill_ 2.5 on x.t()", lambda a: a.t().fill_(2.5), x((4, 6))),
            ("fill_ True", lambda a: a.fill_(True), x((3, 5))),
            ("fill_ with a 0-dim tensor", lambda a, v: a[1:, 2:].fill_(v), x((4, 6)), x((), 1)),
            ("fill_ with a 1-element tensor raises", lambda a, v: a.fill_(v), x((4, 6)), x((2,), 1)),
            ("fill_ 0-dim", lambda a: a.fill_(1), x(())),
            ("fill_ empty", lambda a: a.fill_(1), x((0,))),
            ("zero_ on x[1:, 2:]", lambda a: a[1:, 2:].zero_(), x((4, 6))),
            ("zero_ on a row x[1]", lambda a: a[1].zero_(), x((4, 6))),
            ("zero_ 0-dim", lambda a: a.zero_(), x(())),
        ]
    )
    run_cases(
        [
            ("clone keeps the strides of a dense transposed tensor", lambda a: a.clone(), x((5, 3)).t()),
            ("contiguous", lambda a: a.t().contiguous(), x((5, 3))),
        ],
        strides=True,
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_factories(dtype):
    dt = dtype
    cases = [
        ("zeros (3,4)", lambda d: torch.zeros(3, 4, dtype=dt, device=d)),
        ("zeros (0,)", lambda d: torch.zeros(0, dtype=dt, device=d)),
        ("ones (2,0)", lambda d: torch.ones(2, 0, dtype=dt, device=d)),
        ("ones ()", lambda d: torch.ones((), dtype=dt, device=d)),
        ("full 7", lambda d: torch.full((3, 2), 7, dtype=dt, device=d)),
        ("full True", lambda d: torch.full((2,), True, dtype=dt, device=d)),
        ("full -2.5", lambda d: torch.full((2, 2), -2.5, dtype=dt, device=d)),
        ("full 0-dim", lambda d: torch.full((), 3, dtype=dt, device=d)),
        ("arange(10)", lambda d: torch.arange(10, dtype=dt, device=d)),
        ("arange(1, 10, 3)", lambda d: torch.arange(1, 10, 3, dtype=dt, device=d)),
        ("arange(5, 0, -1)", lambda d: torch.arange(5, 0, -1, dtype=dt, device=d)),
        ("arange(0, 2, 0.25)", lambda d: torch.arange(0, 2, 0.25, dtype=dt, device=d)),
        ("arange empty", lambda d: torch.arange(3, 3, dtype=dt, device=d)),
        ("linspace(0, 10, 5)", lambda d: torch.linspace(0, 10, 5, dtype=dt, device=d)),
        # Integer linspace truncates values computed in floating point; CPU's rounding of the
        # intermediate values is not reproduced bit for bit (e.g. -3 + 3 * 10/6 gives 2 on oxide,
        # 1 on CPU), so integer dtypes are compared within 1 in test_integer_linspace below.
        *(
            []
            if not (dt.is_floating_point or dt == torch.bool)
            else [("linspace(-3, 7, 7)", lambda d: torch.linspace(-3, 7, 7, dtype=dt, device=d))]
        ),
        ("linspace steps=1", lambda d: torch.linspace(-2, 2, 1, dtype=dt, device=d)),
        ("linspace steps=0", lambda d: torch.linspace(0, 1, 0, dtype=dt, device=d)),
        ("logspace(0, 2, 3)", lambda d: torch.logspace(0, 2, 3, dtype=dt, device=d)),
        ("logspace base 2", lambda d: torch.logspace(0, 3, 4, base=2, dtype=dt, device=d)),
        ("eye(3)", lambda d: torch.eye(3, dtype=dt, device=d)),
        ("eye(2, 4)", lambda d: torch.eye(2, 4, dtype=dt, device=d)),
        ("eye(0)", lambda d: torch.eye(0, dtype=dt, device=d)),
    ]
    for where, fn in cases:
        check_factory(fn, where)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8], ids=dname)
def test_integer_linspace(dtype):
    """Integer linspace: exact end points and every value within 1 of CPU's (see test_factories)."""
    for start, end, steps in [(-3, 7, 7), (0, 10, 5), (1, 100, 9), (0, 1, 7)]:
        if dtype == torch.uint8 and start < 0:
            continue
        cpu = torch.linspace(start, end, steps, dtype=dtype)
        dev = torch.linspace(start, end, steps, dtype=dtype, device="oxide")
        assert dev.device.type == "oxide" and dev.dtype == dtype
        assert dev[0].item() == cpu[0].item() and dev[-1].item() == cpu[-1].item()
        assert (dev.cpu().long() - cpu.long()).abs().max().item() <= 1


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_like_factories(dtype):
    def empty_like_meta(a):
        e = torch.empty_like(a)
        return tuple(e.shape), e.dtype, e.stride(), e.device.type == a.device.type

    for where, x in [
        ("transposed", make((5, 3), dtype).t()),
        ("sliced with step", make((3, 10), dtype)[:, ::2]),
        ("0-dim", make((), dtype)),
        ("empty", make((3, 0), dtype)),
    ]:
        check(empty_like_meta, x, where=f"empty_like {where}")
        run_cases(
            [
                (f"zeros_like {where}", lambda a: torch.zeros_like(a), x),
                (f"ones_like {where}", lambda a: torch.ones_like(a), x),
                (f"full_like 3 {where}", lambda a: torch.full_like(a, 3), x),
                (f"full_like float64 {where}", lambda a: torch.full_like(a, 1.5, dtype=torch.float64), x),
            ],
            strides=True,
        )


def test_factory_dtype_inference():
    for where, fn in [
        ("full with a float value", lambda d: torch.full((2, 3), 1.5, device=d)),
        ("full with an int value", lambda d: torch.full((2, 3), 2, device=d)),
        ("full with a bool value", lambda d: torch.full((2,), False, device=d)),
        ("arange of ints", lambda d: torch.arange(4, device=d)),
        ("arange with a float step", lambda d: torch.arange(0, 1, 0.1, device=d)),
        ("linspace default dtype", lambda d: torch.linspace(0, 1, 11, device=d)),
        ("tensor from a list", lambda d: torch.tensor([[1, 2], [3, 4]], device=d)),
        ("zeros float64", lambda d: torch.zeros(2, 2, dtype=torch.float64, device=d)),
    ]:
        check_factory(fn, where)


# ---------------------------------------------------------------------------------------
# Unary
# ---------------------------------------------------------------------------------------

UNARY = [
    (n, {})
    for n in [
        "abs",
        "neg",
        "sign",
        "sgn",
        "exp",
        "exp2",
        "expm1",
        "log",
        "log2",
        "log10",
        "log1p",
        "sqrt",
        "rsqrt",
        "sin",
        "cos",
        "tan",
        "asin",
        "acos",
        "atan",
        "sinh",
        "cosh",
        "tanh",
        "asinh",
        "acosh",
        "atanh",
        "sigmoid",
        "erf",
        "erfc",
        "erfinv",
        "floor",
        "ceil",
        "round",
        "trunc",
        "frac",
        "reciprocal",
        "isnan",
        "isinf",
        "isfinite",
        "nan_to_num",
        "logical_not",
        "bitwise_not",
        "square",
        "signbit",
        "positive",
        "relu",
    ]
] + [
    ("round", {"decimals": 2}),
    ("nan_to_num", {"nan": 1.5, "posinf": 100.0, "neginf": -100.0}),
    ("logit", {}),
    ("logit", {"eps": 0.25}),
]
UNARY_PARAMS = [pytest.param(n, kw, id=op_id(n, kw)) for n, kw in UNARY]


UNARY_OUT_PARAMS = [
    pytest.param(n, kw, id=op_id(n, kw))
    for n, kw in UNARY  # not positive, relu, isnan, ...
    if _parses(lambda: getattr(torch, n)(torch.ones(1), out=torch.empty(1), **kw))
]
UNARY_INPLACE_PARAMS = [pytest.param(n, kw, id=op_id(n, kw)) for n, kw in UNARY if hasattr(torch.Tensor, n + "_")]

VIEWS = [
    ("x.t()", lambda b: b.t()),
    ("x[:, ::2]", lambda b: b[:, ::2]),
    ("x[1:, 2:]", lambda b: b[1:, 2:]),
    ("x[1] (a row)", lambda b: b[1]),
    ("x[:, 3] (a column)", lambda b: b[:, 3]),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("name,kw", UNARY_PARAMS)
def test_unary(name, kw, dtype):
    op = getattr(torch, name)
    for where, x in layouts(dtype):
        check(lambda x: op(x, **kw), x, where=where)


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("name,kw", UNARY_OUT_PARAMS)
def test_unary_out(name, kw, dtype):
    op = getattr(torch, name)
    x = make((3, 5), dtype, special=True)
    result_dtype = cpu_result_dtype(lambda x: op(x, **kw), x, default=dtype)
    for where, out in out_buffers((3, 5), result_dtype):
        check(with_out(lambda x, out: op(x, out=out, **kw)), x, out, where=where)


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("name,kw", UNARY_INPLACE_PARAMS)
def test_unary_inplace_on_views(name, kw, dtype):
    method = getattr(torch.Tensor, name + "_")
    for where, view in VIEWS:
        check(lambda b: method(view(b), **kw), make((4, 6), dtype, special=True), where=f"{name}_ on {where}")


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("name,kw", UNARY_PARAMS)
def test_unary_aliasing(name, kw, dtype):
    """Written tensors that overlap: out= the input itself is fine; partial overlap between
    out= and the input, or an in-place op on an expanded view, raises on CPU."""
    op = getattr(torch, name)
    cases = []
    if _parses(lambda: op(torch.ones(1), out=torch.empty(1), **kw)):
        cases += [
            ("out is the input", lambda x: op(x, out=x, **kw), make((3, 5), dtype, 1, special=True)),
            ("out partially overlaps the input: raises", lambda x: op(x[:3], out=x[1:4], **kw), make((6,), dtype, 2)),
        ]
    if hasattr(torch.Tensor, name + "_"):
        cases.append(
            (
                f"{name}_ on x[0:1].expand(4,6), whose elements overlap: raises",
                lambda x: getattr(x[0:1].expand(4, 6), name + "_")(**kw),
                make((4, 6), dtype, 3),
            )
        )
    run_cases(cases)


# ---------------------------------------------------------------------------------------
# Binary and ternary
# ---------------------------------------------------------------------------------------

BINARY = [  # name, kwargs, lhs kind, rhs kind
    ("add", {}, "any", "any"),
    ("add", {"alpha": 2}, "any", "any"),
    ("sub", {}, "any", "any"),
    ("sub", {"alpha": 2}, "any", "any"),
    ("mul", {}, "any", "any"),
    ("div", {}, "any", "any"),
    ("div", {"rounding_mode": "trunc"}, "any", "nonzero"),
    ("div", {"rounding_mode": "floor"}, "any", "nonzero"),
    ("true_divide", {}, "any", "any"),
    ("floor_divide", {}, "any", "nonzero"),
    ("pow", {}, "small", "exponent"),
    ("maximum", {}, "any", "any"),
    ("minimum", {}, "any", "any"),
    ("fmax", {}, "any", "any"),
    ("fmin", {}, "any", "any"),
    ("fmod", {}, "any", "nonzero"),
    ("remainder", {}, "any", "nonzero"),
    ("atan2", {}, "any", "any"),
    ("hypot", {}, "any", "any"),
    ("copysign", {}, "any", "any"),
    ("bitwise_and", {}, "any", "any"),
    ("bitwise_or", {}, "any", "any"),
    ("bitwise_xor", {}, "any", "any"),
    ("bitwise_left_shift", {}, "any", "shift"),
    ("bitwise_right_shift", {}, "any", "shift"),
    ("logical_and", {}, "any", "any"),
    ("logical_or", {}, "any", "any"),
    ("logical_xor", {}, "any", "any"),
    ("eq", {}, "any", "any"),
    ("ne", {}, "any", "any"),
    ("lt", {}, "any", "any"),
    ("le", {}, "any", "any"),
    ("gt", {}, "any", "any"),
    ("ge", {}, "any", "any"),
]
BINARY_PARAMS = [pytest.param(n, kw, lk, rk, id=op_id(n, kw)) for n, kw, lk, rk in BINARY]


# (tensor, scalar) / (scalar, tensor) overloads: maximum, atan2, logical_and, ... have neither.
SCALAR_RHS = {op_id(n, kw): _parses(lambda: getattr(torch, n)(torch.ones(2), 2, **kw)) for n, kw, _, _ in BINARY}
SCALAR_LHS = {op_id(n, kw): _parses(lambda: getattr(torch, n)(2, torch.ones(2), **kw)) for n, kw, _, _ in BINARY}
BINARY_SCALAR_PARAMS = [p for p in BINARY_PARAMS if SCALAR_RHS[p.id] or SCALAR_LHS[p.id]]
BINARY_INPLACE_PARAMS = [
    pytest.param(n, kw, lk, rk, id=op_id(n, kw)) for n, kw, lk, rk in BINARY if hasattr(torch.Tensor, n + "_")
]
SCALARS = {  # Python scalars per rhs kind (int, negative int, float, bool)
    "any": [3, -2, 2.5, True],
    "nonzero": [3, -2, 2.5, True],
    "exponent": [2, 3, 0.5, -1, -0.5, -2],
    "shift": [1, 3],
}
PROMOTIONS = [
    (torch.int64, torch.float32),
    (torch.int32, torch.float64),
    (torch.float32, torch.float64),
    (torch.float16, torch.float32),
    (torch.bfloat16, torch.float16),
    (torch.uint8, torch.int8),
    (torch.bool, torch.int16),
    (torch.bool, torch.float32),
    (torch.int8, torch.int64),
]
ZERO_DIM_PROMOTIONS = [  # (0-dim dtype, tensor dtype): the tensor's category wins
    (torch.float64, torch.float32),
    (torch.float32, torch.int64),
    (torch.int64, torch.int8),
    (torch.float64, torch.float16),
    (torch.int32, torch.bool),
    (torch.float32, torch.bfloat16),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("name,kw,lhs,rhs", BINARY_PARAMS)
def test_binary(name, kw, lhs, rhs, dtype):
    op = getattr(torch, name)
    for where, a, b in pairs(dtype, lhs, rhs):
        check(lambda a, b: op(a, b, **kw), a, b, where=where)


@pytest.mark.parametrize("name,kw,lhs,rhs", BINARY_PARAMS)
def test_binary_promotion(name, kw, lhs, rhs):
    op = getattr(torch, name)
    fn = lambda a, b: op(a, b, **kw)  # noqa: E731
    for da, db in PROMOTIONS:
        check(fn, make((3, 5), da, 0, lhs), make((3, 5), db, 1, rhs), where=f"{dname(da)} op {dname(db)}")
        check(fn, make((3, 1), db, 2, lhs), make((5,), da, 3, rhs), where=f"{dname(db)} op {dname(da)}, broadcast")
    for dz, dt in ZERO_DIM_PROMOTIONS:
        check(fn, make((), dz, 4, lhs), make((3, 5), dt, 5, rhs), where=f"0-dim {dname(dz)} op {dname(dt)} tensor")
        check(fn, make((3, 5), dt, 6, lhs), make((), dz, 7, rhs), where=f"{dname(dt)} tensor op 0-dim {dname(dz)}")


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("name,kw,lhs,rhs", BINARY_SCALAR_PARAMS)
def test_binary_scalars(name, kw, lhs, rhs, dtype):
    op, key = getattr(torch, name), op_id(name, kw)
    a, b = make((3, 5), dtype, 0, lhs, special=True), make((3, 5), dtype, 1, rhs)
    for s in SCALARS[rhs]:
        if SCALAR_RHS[key]:
            check(lambda a: op(a, s, **kw), a, where=f"tensor op {s!r}")
            check(lambda a: op(a[:, ::2], s, **kw), a, where=f"sliced tensor op {s!r}")
            check(lambda a: op(a[0, 0], s, **kw), a, where=f"0-dim tensor op {s!r}")
        if SCALAR_LHS[key]:  # pow, remainder, bitwise ops
            check(lambda b: op(s, b, **kw), b, where=f"{s!r} op tensor")


PY_OPERATORS = [  # label, fn, kind of x
    ("2 + x", lambda x: 2 + x, "any"),
    ("x + 1.5", lambda x: x + 1.5, "any"),
    ("2 - x", lambda x: 2 - x, "any"),
    ("3 * x", lambda x: 3 * x, "any"),
    ("x * 0.5", lambda x: x * 0.5, "any"),
    ("2 / x", lambda x: 2 / x, "any"),
    ("7 // x", lambda x: 7 // x, "nonzero"),
    ("x // 2.5", lambda x: x // 2.5, "any"),
    ("2 ** x", lambda x: 2**x, "exponent"),
    ("x ** 2", lambda x: x**2, "any"),
    ("x ** 0.5", lambda x: x**0.5, "any"),
    ("7 % x", lambda x: 7 % x, "nonzero"),
    ("x % -3", lambda x: x % -3, "any"),
    ("6 & x", lambda x: 6 & x, "any"),
    ("6 | x", lambda x: 6 | x, "any"),
    ("6 ^ x", lambda x: 6 ^ x, "any"),
    ("1 << x", lambda x: 1 << x, "shift"),
    ("x >> 1", lambda x: x >> 1, "any"),
    ("2 < x", lambda x: 2 < x, "any"),
    ("x == 1", lambda x: x == 1, "any"),
    ("x != 0.5", lambda x: x != 0.5, "any"),
    ("-x", lambda x: -x, "any"),
    ("~x", lambda x: ~x, "any"),
    ("abs(x)", lambda x: abs(x), "any"),
    ("x += 1 on x.t()", lambda x: x.t().__iadd__(1), "any"),
    ("x *= 2 on x[:, ::2]", lambda x: x[:, ::2].__imul__(2), "any"),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
def test_python_operators(dtype):
    for label, fn, kind in PY_OPERATORS:
        check(fn, make((4, 6), dtype, 0, kind, special=True), where=label)


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("name,kw,lhs,rhs", BINARY_PARAMS)
def test_binary_out(name, kw, lhs, rhs, dtype):
    op = getattr(torch, name)
    a, b = make((3, 1), dtype, 0, lhs), make((5,), dtype, 1, rhs)
    result_dtype = cpu_result_dtype(lambda a, b: op(a, b, **kw), a, b, default=dtype)
    for where, out in out_buffers((3, 5), result_dtype):
        check(with_out(lambda a, b, out: op(a, b, out=out, **kw)), a, b, out, where=where)


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("name,kw,lhs,rhs", BINARY_PARAMS)
def test_binary_aliasing(name, kw, lhs, rhs, dtype):
    """Written tensors that are, or overlap, an input. out= an input works in place when the
    shapes agree; CPU raises when such an out would need a resize, or overlaps partially."""
    op = getattr(torch, name)
    if hasattr(torch.Tensor, name + "_"):
        method = getattr(torch.Tensor, name + "_")
        run_cases(
            [
                ("x.op_(x)", lambda x: method(x, x, **kw), make((4, 6), dtype, 8, rhs)),
                (
                    "x[1:].op_(x[:-1]) partially overlapping: raises",
                    lambda x: method(x[1:], x[:-1], **kw),
                    make((4, 6), dtype, 9, rhs),
                ),
            ]
        )
    run_cases(
        [
            (
                "out is the first input",
                lambda a, b: op(a, b, out=a, **kw),
                make((3, 5), dtype, 0, lhs),
                make((5,), dtype, 1, rhs),
            ),
            (
                "out is the second input, a step-sliced view",
                lambda a, b: op(a, b[:, ::2], out=b[:, ::2], **kw),
                make((3, 1), dtype, 2, lhs),
                make((3, 10), dtype, 3, rhs),
            ),
            (
                "out is the first input and would need a resize: raises",
                lambda a, b: op(a, b, out=a, **kw),
                make((4, 3), dtype, 4, lhs),
                make((2, 4, 3), dtype, 5, rhs),
            ),
            (
                "out partially overlaps the first input: raises",
                lambda a, b: op(a[:3], b, out=a[1:4], **kw),
                make((6,), dtype, 6, lhs),
                make((3,), dtype, 7, rhs),
            ),
        ]
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("name,kw,lhs,rhs", BINARY_INPLACE_PARAMS)
def test_binary_inplace_on_views(name, kw, lhs, rhs, dtype):
    method = getattr(torch.Tensor, name + "_")
    base = lambda: make((4, 6), dtype, 0, lhs, special=True)  # noqa: E731
    y = lambda shape, seed, dt=dtype: make(shape, dt, seed, rhs)  # noqa: E731
    s = SCALARS[rhs][0]
    scalar_case = [(f"x[:, ::2].op_({s!r})", lambda x: method(x[:, ::2], s, **kw), base())]
    run_cases(scalar_case if SCALAR_RHS[op_id(name, kw)] else [])
    run_cases(
        [
            ("x.t().op_(row), broadcast", lambda x, y: method(x.t(), y, **kw), base(), y((4,), 1)),
            ("x[:, ::2].op_(transposed)", lambda x, y: method(x[:, ::2], y.t(), **kw), base(), y((3, 4), 2)),
            ("x[1:, 2:].op_(0-dim)", lambda x, y: method(x[1:, 2:], y, **kw), base(), y((), 3)),
            (
                "x[1].op_(float64 row): CPU decides the cast",
                lambda x, y: method(x[1], y, **kw),
                base(),
                y((6,), 4, torch.float64),
            ),
            ("x[0].op_(int64 row)", lambda x, y: method(x[0], y, **kw), base(), y((6,), 5, torch.int64)),
            (
                "x[:, ::2].op_(y) that would broadcast self raises",
                lambda x, y: method(x[:, ::2], y, **kw),
                base(),
                y((2, 4, 3), 6),
            ),
        ]
    )


def where_cases(dt):
    c = lambda shape, seed: make(shape, torch.bool, seed)  # noqa: E731
    x = lambda shape, seed, special=False: make(shape, dt, seed, special=special)  # noqa: E731
    return [
        ("same shape", torch.where, c((3, 5), 0), x((3, 5), 1, True), x((3, 5), 2)),
        ("broadcast cond (3,1), x (1,5), y 0-dim", torch.where, c((3, 1), 3), x((1, 5), 4), x((), 5)),
        ("transposed and step-sliced", torch.where, c((5, 3), 6).t(), x((5, 3), 7).t(), x((3, 10), 8)[:, ::2]),
        ("scalar y 0.5", lambda c, a: torch.where(c, a, 0.5), c((3, 5), 9), x((3, 5), 10)),
        ("scalar y 2", lambda c, a: torch.where(c, a, 2), c((3, 5), 11), x((3, 5), 12)),
        ("scalar x 1.0 and y 0.0", lambda c: torch.where(c, 1.0, 0.0), c((3, 5), 13)),
        ("promotion with float64 y", torch.where, c((3, 5), 14), x((3, 5), 15), make((3, 5), torch.float64, 16)),
        ("promotion with int64 y", torch.where, c((3, 5), 17), x((3, 5), 18), make((3, 5), torch.int64, 19)),
        ("0-dim x, tensor y", torch.where, c((3, 5), 20), x((), 21), x((3, 5), 22)),
        ("non-bool cond raises", torch.where, make((3, 5), torch.float32, 23), x((3, 5), 24), x((3, 5), 25)),
        ("empty", torch.where, c((0,), 26), x((0,), 27), x((0,), 28)),
        ("empty (3,0) broadcast", torch.where, c((3, 0), 29), x((1, 0), 30), x((3, 1), 31)),
        ("out of wrong size", with_out(torch.where), c((3, 5), 32), x((3, 5), 33), x((3, 5), 34), make((2,), dt, 35)),
    ]


def clamp_cases(dt):
    x = lambda shape, seed, special=False: make(shape, dt, seed, special=special)  # noqa: E731
    f64 = lambda shape, seed: make(shape, torch.float64, seed, special=True)  # noqa: E731
    return [
        ("scalar min/max", lambda a: torch.clamp(a, -1, 1), x((3, 5), 0, True)),
        ("float scalar bounds, transposed", lambda a: torch.clamp(a, 0.5, 2.5), x((5, 3), 1, True).t()),
        ("only min, step-sliced", lambda a: torch.clamp(a, min=0), x((3, 10), 2)[:, ::2]),
        ("only max", lambda a: torch.clamp(a, max=0), x((3, 5), 3, True)),
        ("min > max", lambda a: torch.clamp(a, 2, -2), x((3, 5), 4)),
        (
            "tensor min/max, broadcast",
            lambda a, lo, hi: torch.clamp(a, lo, hi),
            x((3, 5), 5, True),
            x((5,), 6),
            x((3, 1), 7),
        ),
        ("tensor min only", lambda a, lo: torch.clamp(a, min=lo), x((3, 5), 8), x((3, 5), 9, True)),
        ("tensor max only, transposed", lambda a, hi: torch.clamp(a, max=hi), x((5, 3), 10).t(), x((3, 5), 11)),
        (
            "float64 tensor bounds (promotion)",
            lambda a, lo, hi: torch.clamp(a, lo, hi),
            x((3, 5), 12),
            f64((3, 5), 13),
            make((), torch.float64, 14),
        ),
        ("neither bound raises", lambda a: torch.clamp(a), x((3, 5), 15)),
        ("clamp_min scalar", lambda a: torch.clamp_min(a, 0), x((3, 5), 16, True)),
        ("clamp_max scalar", lambda a: torch.clamp_max(a, 0), x((3, 5), 17, True)),
        ("clamp_min tensor", lambda a, b: torch.clamp_min(a, b), x((3, 5), 18), x((5,), 19)),
        ("clamp_max tensor", lambda a, b: torch.clamp_max(a, b), x((5, 3), 20).t(), x((3, 1), 21)),
        ("clamp_ on x.t()", lambda a: a.t().clamp_(-1, 1), x((4, 6), 22, True)),
        ("clamp_min_ on x[:, ::2] with a tensor", lambda a, b: a[:, ::2].clamp_min_(b), x((4, 6), 23), x((3,), 24)),
        ("clamp_max_ on x[1]", lambda a: a[1].clamp_max_(1), x((4, 6), 25)),
        ("0-dim", lambda a: torch.clamp(a, -1, 1), x((), 26)),
        ("empty", lambda a: torch.clamp(a, -1, 1), x((3, 0), 27)),
        (
            "out of wrong size",
            with_out(lambda a, out: torch.clamp(a, -1, 1, out=out)),
            x((3, 5), 28),
            make((2,), dt, 29),
        ),
    ]


def addcmul_cases(dt, op=torch.addcmul, divisor="any"):
    x = lambda shape, seed, kind="any": make(shape, dt, seed, kind)  # noqa: E731
    name = op.__name__
    return [
        (f"{name} default value", lambda a, b, c: op(a, b, c), x((3, 5), 0), x((3, 5), 1), x((3, 5), 2, divisor)),
        (
            f"{name} value=0.5",
            lambda a, b, c: op(a, b, c, value=0.5),
            x((3, 5), 3),
            x((3, 5), 4),
            x((3, 5), 5, divisor),
        ),
        (
            f"{name} value=2, broadcast with 0-dim",
            lambda a, b, c: op(a, b, c, value=2),
            x((3, 1), 6),
            x((1, 5), 7),
            x((), 8, divisor),
        ),
        (
            f"{name} transposed and step-sliced",
            lambda a, b, c: op(a, b, c),
            x((5, 3), 9).t(),
            x((3, 10), 10)[:, ::2],
            x((3, 5), 11, divisor),
        ),
        (
            f"{name}_ on x.t()",
            lambda a, b, c: getattr(a.t(), name + "_")(b, c, value=2),
            x((4, 6), 12),
            x((6, 4), 13),
            x((4,), 14, divisor),
        ),
        (
            f"{name} with float64 tensor1 (promotion)",
            lambda a, b, c: op(a, b, c),
            x((3, 5), 15),
            make((3, 5), torch.float64, 16),
            x((3, 5), 17, divisor),
        ),
        (f"{name} empty", lambda a, b, c: op(a, b, c), x((0,), 18), x((0,), 19), x((0,), 20, divisor)),
        (
            f"{name} out of wrong size",
            with_out(lambda a, b, c, out: op(a, b, c, value=2, out=out)),
            x((3, 5), 21),
            x((3, 5), 22),
            x((3, 5), 23, divisor),
            make((2,), dt, 24),
        ),
    ]


def lerp_cases(dt):
    x = lambda shape, seed, kind="any": make(shape, dt, seed, kind)  # noqa: E731
    return [
        ("scalar weight 0.3", lambda a, b: torch.lerp(a, b, 0.3), x((3, 5), 0), x((3, 5), 1)),
        ("scalar weight 0.8 (the other formula)", lambda a, b: torch.lerp(a, b, 0.8), x((3, 5), 2), x((3, 5), 3)),
        ("tensor weight", lambda a, b, w: torch.lerp(a, b, w), x((3, 5), 4), x((3, 5), 5), x((3, 5), 6, "unit")),
        (
            "tensor weight, broadcast",
            lambda a, b, w: torch.lerp(a, b, w),
            x((3, 1), 7),
            x((1, 5), 8),
            x((5,), 9, "unit"),
        ),
        (
            "0-dim weight, transposed",
            lambda a, b, w: torch.lerp(a, b, w),
            x((5, 3), 10).t(),
            x((3, 10), 11)[:, ::2],
            x((), 12, "unit"),
        ),
        ("lerp_ on x[:, ::2]", lambda a, b: a[:, ::2].lerp_(b, 0.25), x((4, 6), 13), x((4, 3), 14)),
        ("empty", lambda a, b: torch.lerp(a, b, 0.5), x((3, 0), 15), x((3, 0), 16)),
        (
            "out of wrong size",
            with_out(lambda a, b, out: torch.lerp(a, b, 0.5, out=out)),
            x((3, 5), 17),
            x((3, 5), 18),
            make((2,), dt, 19),
        ),
    ]


TERNARY = {
    "where": where_cases,
    "clamp": clamp_cases,
    "addcmul": addcmul_cases,
    "addcdiv": lambda dt: addcmul_cases(dt, torch.addcdiv, divisor="nonzero"),
    "lerp": lerp_cases,
}


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("op", list(TERNARY))
def test_ternary(op, dtype):
    run_cases(TERNARY[op](dtype))


# ---------------------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------------------

INF = math.inf
REDUCTIONS = {
    "sum": [
        ("all", lambda x: x.sum()),
        ("dim 0", lambda x: x.sum(0)),
        ("dim -1 keepdim", lambda x: x.sum(-1, keepdim=True)),
        ("dims (0,-1)", lambda x: x.sum((0, -1))),
        ("dtype float64", lambda x: x.sum(dtype=torch.float64)),
        ("dim=None keepdim", lambda x: torch.sum(x, None, keepdim=True)),
    ],
    "mean": [
        ("all", lambda x: x.mean()),
        ("dim 0", lambda x: x.mean(0)),
        ("dims (0,-1) keepdim", lambda x: x.mean((0, -1), keepdim=True)),
        ("dtype float64", lambda x: x.mean(dtype=torch.float64)),
        ("dim -1 dtype float32", lambda x: x.mean(-1, dtype=torch.float32)),
    ],
    "prod": [
        ("all", lambda x: x.prod()),
        ("dim 0", lambda x: x.prod(0)),
        ("dim -1 keepdim", lambda x: x.prod(-1, keepdim=True)),
        ("dim 0 dtype float64", lambda x: x.prod(0, dtype=torch.float64)),
    ],
    "amax": [
        ("all", lambda x: x.amax()),
        ("dim 0", lambda x: x.amax(0)),
        ("dims (0,-1) keepdim", lambda x: x.amax((0, -1), keepdim=True)),
    ],
    "amin": [
        ("all", lambda x: x.amin()),
        ("dim 0", lambda x: x.amin(0)),
        ("dims (0,-1) keepdim", lambda x: x.amin((0, -1), keepdim=True)),
    ],
    "max": [
        ("all", lambda x: x.max()),
        ("dim 0", lambda x: x.max(0)),
        ("dim -1 keepdim", lambda x: x.max(-1, keepdim=True)),
    ],
    "min": [
        ("all", lambda x: x.min()),
        ("dim 0", lambda x: x.min(0)),
        ("dim -1 keepdim", lambda x: x.min(-1, keepdim=True)),
    ],
    "argmax": [
        ("all", lambda x: x.argmax()),
        ("dim 0", lambda x: x.argmax(0)),
        ("dim -1 keepdim", lambda x: x.argmax(-1, keepdim=True)),
    ],
    "argmin": [
        ("all", lambda x: x.argmin()),
        ("dim 0", lambda x: x.argmin(0)),
        ("dim -1 keepdim", lambda x: x.argmin(-1, keepdim=True)),
    ],
    "var": [
        ("all", lambda x: x.var()),
        ("dim 0", lambda x: x.var(0)),
        ("dim -1 correction=0 keepdim", lambda x: x.var(-1, correction=0, keepdim=True)),
        ("dims (0,-1) unbiased=False", lambda x: x.var((0, -1), unbiased=False)),
        ("dim 0 unbiased=True", lambda x: x.var(0, unbiased=True)),
    ],
    "std": [
        ("all", lambda x: x.std()),
        ("dim 0", lambda x: x.std(0)),
        ("dim -1 correction=0 keepdim", lambda x: x.std(-1, correction=0, keepdim=True)),
        ("dims (0,-1) unbiased=False", lambda x: x.std((0, -1), unbiased=False)),
        ("correction=1", lambda x: x.std(correction=1)),
    ],
    "var_mean": [
        ("all", lambda x: torch.var_mean(x)),
        ("dim 0 correction=0", lambda x: torch.var_mean(x, 0, correction=0)),
        ("dims (0,-1) keepdim", lambda x: torch.var_mean(x, (0, -1), keepdim=True)),
    ],
    "std_mean": [
        ("all", lambda x: torch.std_mean(x)),
        ("dim -1 unbiased=False", lambda x: torch.std_mean(x, -1, unbiased=False)),
        ("dims (0,-1) keepdim", lambda x: torch.std_mean(x, (0, -1), keepdim=True)),
    ],
    "norm": [
        ("p=2", lambda x: x.norm()),
        ("p=1", lambda x: x.norm(p=1)),
        ("p=inf", lambda x: x.norm(p=INF)),
        ("p=2 dim 0", lambda x: x.norm(p=2, dim=0)),
        ("p=1 dim -1 keepdim", lambda x: torch.norm(x, 1, -1, keepdim=True)),
        ("p=inf dims (0,-1)", lambda x: x.norm(p=INF, dim=(0, -1))),
    ],
    "vector_norm": [
        ("ord 2", lambda x: torch.linalg.vector_norm(x)),
        ("ord 1", lambda x: torch.linalg.vector_norm(x, 1)),
        ("ord inf", lambda x: torch.linalg.vector_norm(x, INF)),
        ("ord -inf", lambda x: torch.linalg.vector_norm(x, -INF)),
        ("ord 0", lambda x: torch.linalg.vector_norm(x, 0)),
        ("ord 3 dim 0", lambda x: torch.linalg.vector_norm(x, 3, 0)),
        ("dims (0,-1) keepdim", lambda x: torch.linalg.vector_norm(x, 2, (0, -1), keepdim=True)),
        ("dtype float64", lambda x: torch.linalg.vector_norm(x, dtype=torch.float64)),
    ],
    "logsumexp": [
        ("dim 0", lambda x: x.logsumexp(0)),
        ("dim -1 keepdim", lambda x: x.logsumexp(-1, keepdim=True)),
        ("dims (0,-1)", lambda x: x.logsumexp((0, -1))),
    ],
    "any": [
        ("all", lambda x: x.any()),
        ("dim 0", lambda x: x.any(0)),
        ("dim -1 keepdim", lambda x: x.any(-1, keepdim=True)),
        ("dims (0,-1)", lambda x: x.any((0, -1))),
    ],
    "all": [
        ("all", lambda x: x.all()),
        ("dim 0", lambda x: x.all(0)),
        ("dim -1 keepdim", lambda x: x.all(-1, keepdim=True)),
        ("dims (0,-1)", lambda x: x.all((0, -1))),
    ],
    "count_nonzero": [
        ("all", lambda x: torch.count_nonzero(x)),
        ("dim 0", lambda x: torch.count_nonzero(x, 0)),
        ("dims (0,-1)", lambda x: torch.count_nonzero(x, (0, -1))),
    ],
    "cumsum": [
        ("dim 0", lambda x: x.cumsum(0)),
        ("dim -1", lambda x: x.cumsum(-1)),
        ("dim 0 dtype float64", lambda x: x.cumsum(0, dtype=torch.float64)),
    ],
    "cumprod": [
        ("dim 0", lambda x: x.cumprod(0)),
        ("dim -1", lambda x: x.cumprod(-1)),
        ("dim 0 dtype float64", lambda x: x.cumprod(0, dtype=torch.float64)),
    ],
    "cummax": [("dim 0", lambda x: x.cummax(0)), ("dim -1", lambda x: x.cummax(-1))],
    "cummin": [("dim 0", lambda x: x.cummin(0)), ("dim -1", lambda x: x.cummin(-1))],
    "aminmax": [
        ("all", lambda x: torch.aminmax(x)),
        ("dim 0", lambda x: torch.aminmax(x, dim=0)),
        ("dim -1 keepdim", lambda x: torch.aminmax(x, dim=-1, keepdim=True)),
    ],
}


def reduction_inputs(dtype):
    return [
        ("(3,5)", make((3, 5), dtype, 0)),
        ("transposed", make((5, 3), dtype, 1).t()),
        ("(2,3,4) permuted", make((4, 2, 3), dtype, 2).permute(1, 2, 0)),
        ("ties", make((3, 5), dtype, 3, "few")),
        ("sliced with step, nan/inf", make((3, 10), dtype, 4, special=True)[:, ::2]),
        ("0-dim", make((), dtype, 5)),
        ("empty (0,)", make((0,), dtype, 6)),
        ("empty (3,0)", make((3, 0), dtype, 7)),
    ]


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("op", list(REDUCTIONS))
def test_reduction(op, dtype):
    for input_label, x in reduction_inputs(dtype):
        for label, fn in REDUCTIONS[op]:
            check(fn, x, where=f"{op} {label} of {input_label}")


REDUCTION_OUTS = {  # fn(x, out) with out of wrong size; tuple outs for the (values, indices) ops
    "sum": (lambda x, out: torch.sum(x, 0, out=out), 1),
    "mean": (lambda x, out: torch.mean(x, -1, keepdim=True, out=out), 1),
    "prod": (lambda x, out: torch.prod(x, 0, out=out), 1),
    "amax": (lambda x, out: torch.amax(x, 0, out=out), 1),
    "amin": (lambda x, out: torch.amin(x, (0, 1), out=out), 1),
    "max": (lambda x, out: torch.max(x, 0, out=out), 2),
    "min": (lambda x, out: torch.min(x, -1, keepdim=True, out=out), 2),
    "argmax": (lambda x, out: torch.argmax(x, 1, out=out), 1),
    "var": (lambda x, out: torch.var(x, 0, out=out), 1),
    "std": (lambda x, out: torch.std(x, 0, correction=0, out=out), 1),
    "norm": (lambda x, out: torch.norm(x, 2, 0, out=out), 1),
    "vector_norm": (lambda x, out: torch.linalg.vector_norm(x, 1, 0, out=out), 1),
    "logsumexp": (lambda x, out: torch.logsumexp(x, 1, out=out), 1),
    "any": (lambda x, out: torch.any(x, 0, out=out), 1),
    "all": (lambda x, out: torch.all(x, 1, out=out), 1),
    "cumsum": (lambda x, out: torch.cumsum(x, 0, out=out), 1),
    "cumprod": (lambda x, out: torch.cumprod(x, 1, out=out), 1),
    "cummax": (lambda x, out: torch.cummax(x, 0, out=out), 2),
    "aminmax": (lambda x, out: torch.aminmax(x, dim=0, out=out), 2),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize("op", list(REDUCTION_OUTS))
def test_reduction_out(op, dtype):
    fn, n_out = REDUCTION_OUTS[op]
    x = make((5, 3), dtype, 0).t()
    r = cpu_result_dtype(lambda x: fn(x, None), x, default=dtype)
    if n_out == 1:
        out = make((2,), r, 1)
    else:  # values (the op's dtype) and indices, or aminmax's (min, max)
        second = r if op == "aminmax" else torch.int64
        out = (make((2,), r, 1), make((7,), second, 2))
    check(with_out(fn), x, out, where=f"{op} out of wrong size")


def test_reduction_of_empty_tensors():
    e, e2 = make((0,), torch.float32), make((3, 0), torch.float32)
    run_cases(
        [
            ("sum of (0,) is 0", lambda a: a.sum(), e),
            ("prod of (0,) is 1", lambda a: a.prod(), e),
            ("mean of (0,) is nan", lambda a: a.mean(), e),
            ("max of (0,) raises", lambda a: a.max(), e),
            ("amax of (0,) raises", lambda a: a.amax(), e),
            ("argmax of (0,) raises", lambda a: a.argmax(), e),
            ("max over the empty dim raises", lambda a: a.max(1), e2),
            ("max over the non-empty dim is empty", lambda a: a.amax(0), e2),
            ("sum over the empty dim is zeros", lambda a: a.sum(1), e2),
            ("cumsum of empty", lambda a: a.cumsum(1), e2),
            ("any/all of empty", lambda a: (a.any(), a.all()), e),
            ("std of (0,) is nan", lambda a: a.std(), e),
            ("logsumexp over the empty dim is -inf", lambda a: a.logsumexp(1), e2),
        ]
    )


# ---------------------------------------------------------------------------------------
# Data movement
# ---------------------------------------------------------------------------------------


def _sorted(t, dim=-1):
    return t.sort(dim=dim, stable=True).values


def _topk(a, *args, **kw):
    """topk values, and the input gathered at the returned indices: tie order is unspecified."""
    values, indices = a.topk(*args, **kw)
    dim = kw.get("dim", args[1] if len(args) > 1 else -1)
    return values, a.gather(dim, indices)


def data_movement_cases(op, dt):
    x = lambda shape, seed=0, special=False: make(shape, dt, seed, special=special)  # noqa: E731
    few = lambda shape, seed=0: make(shape, dt, seed, "few")  # noqa: E731
    mask = lambda shape, seed=0: make(shape, torch.bool, seed + 100)  # noqa: E731
    o = lambda: make((2,), dt, 99)  # noqa: E731  an out= of the wrong size
    f64 = lambda shape: make(shape, torch.float64, 77)  # noqa: E731
    if op == "cat":
        return [
            ("dim 0", lambda a, b: torch.cat([a, b]), x((3, 5), 0, True), x((2, 5), 1)),
            (
                "dim 1, transposed and step-sliced",
                lambda a, b: torch.cat((a, b), 1),
                x((5, 3), 2).t(),
                x((3, 4), 3)[:, ::2],
            ),
            (
                "dim -1, three 3-d tensors",
                lambda a, b, c: torch.cat([a, b, c], -1),
                x((2, 3, 1), 4),
                x((4, 2, 3), 5).permute(1, 2, 0),
                x((2, 3, 2), 6),
            ),
            ("legacy empty (0,) is skipped", lambda a, b: torch.cat([a, b]), x((3, 5), 7), x((0,), 8)),
            ("all empty", lambda a, b: torch.cat([a, b]), x((0, 3), 9), x((0, 3), 10)),
            ("promotes with float64", lambda a, b: torch.cat([a, b]), x((2, 5), 11), f64((1, 5))),
            ("promotes with int64", lambda a, b: torch.cat([a, b], 1), x((2, 5), 12), make((2, 1), torch.int64, 13)),
            ("0-dim raises", lambda a: torch.cat([a, a]), x((), 14)),
            (
                "out of wrong size",
                with_out(lambda a, b, out: torch.cat([a, b], out=out)),
                x((3, 5), 15),
                x((2, 5), 16),
                o(),
            ),
        ]
    if op == "stack":
        return [
            ("dim 0", lambda a, b: torch.stack([a, b]), x((3, 5), 0, True), x((5, 3), 1).t()),
            ("dim 1", lambda a, b: torch.stack([a, b], 1), x((3, 5), 2), x((3, 10), 3)[:, ::2]),
            ("dim -1", lambda a, b: torch.stack((a, b), -1), x((3, 5), 4), x((3, 5), 5)),
            ("0-dim", lambda a, b: torch.stack([a, b]), x((), 6), x((), 7)),
            ("empty", lambda a, b: torch.stack([a, b]), x((0,), 8), x((0,), 9)),
            ("promotes with float64", lambda a, b: torch.stack([a, b]), x((2, 5), 10), f64((2, 5))),
            ("shape mismatch raises", lambda a, b: torch.stack([a, b]), x((3, 5), 11), x((3, 4), 12)),
            (
                "out of wrong size",
                with_out(lambda a, b, out: torch.stack([a, b], out=out)),
                x((3, 5), 13),
                x((3, 5), 14),
                o(),
            ),
        ]
    if op == "index_select":
        return [
            ("dim 0 repeated index", lambda a, i: a.index_select(0, i), x((3, 5), 0, True), idx(2, 0, 2)),
            ("dim 1 transposed", lambda a, i: torch.index_select(a, 1, i), x((5, 3), 1).t(), idx(4, 0, 1, 1)),
            ("int32 index", lambda a, i: a.index_select(1, i), x((3, 5), 2), idx(3, 1).int()),
            ("step-sliced index", lambda a, i: a.index_select(1, i[::2]), x((3, 5), 3), idx(0, 4, 1, 4, 2, 4)),
            ("empty index", lambda a, i: a.index_select(0, i), x((3, 5), 4), idx()),
            ("0-dim input", lambda a, i: a.index_select(0, i), x((), 5), idx(0)),
            ("0-dim input, two indices raises", lambda a, i: a.index_select(0, i), x((), 5), idx(0, 0)),
            ("empty input", lambda a, i: a.index_select(1, i), x((0, 3), 6), idx(2, 0)),
            ("index out of range raises", lambda a, i: a.index_select(0, i), x((3, 5), 7), idx(5)),
            (
                "out of wrong size",
                with_out(lambda a, i, out: torch.index_select(a, 0, i, out=out)),
                x((3, 5), 8),
                idx(1, 2),
                o(),
            ),
        ]
    if op == "gather":
        return [
            ("dim 1", lambda a, i: a.gather(1, i), x((3, 5), 0, True), randidx((3, 2), 5, 1)),
            ("dim 0, transposed input", lambda a, i: torch.gather(a, 0, i), x((5, 3), 2).t(), randidx((2, 5), 3, 3)),
            ("transposed index", lambda a, i: a.gather(1, i.t()), x((3, 5), 4), randidx((4, 3), 5, 5)),
            ("index smaller in the other dim", lambda a, i: a.gather(1, i), x((3, 5), 6), randidx((2, 7), 5, 7)),
            ("empty index", lambda a, i: a.gather(1, i), x((3, 5), 8), randidx((3, 0), 5, 9)),
            ("0-dim", lambda a, i: a.gather(0, i), x((), 10), idx(0)[0]),
            ("index out of range raises", lambda a, i: a.gather(1, i), x((3, 5), 11), idx(7).reshape(1, 1)),
            (
                "out of wrong size",
                with_out(lambda a, i, out: torch.gather(a, 1, i, out=out)),
                x((3, 5), 12),
                randidx((3, 2), 5, 13),
                o(),
            ),
        ]
    if op == "scatter":
        return [
            (
                "src dim 1",
                lambda a, i, s: a.scatter(1, i, s),
                x((3, 5), 0, True),
                unique_rows(3, 5, 3, 1),
                x((3, 4), 2),
            ),
            (
                "src dim 0, transposed self",
                lambda a, i, s: a.scatter(0, i, s),
                x((5, 3), 3).t(),
                unique_rows(5, 3, 2, 4).t(),
                x((2, 5), 5),
            ),
            ("value 2", lambda a, i: a.scatter(1, i, 2), x((3, 5), 6), unique_rows(3, 5, 2, 7)),
            ("value 0.5", lambda a, i: a.scatter(1, i, 0.5), x((3, 5), 8), unique_rows(3, 5, 2, 9)),
            (
                "scatter_ on x.t()",
                lambda a, i, s: a.t().scatter_(1, i, s),
                x((4, 6), 10),
                unique_rows(6, 4, 2, 11),
                x((6, 2), 12),
            ),
            ("empty index", lambda a, i, s: a.scatter(1, i, s), x((3, 5), 13), randidx((3, 0), 5, 14), x((3, 0), 15)),
            (
                "index out of range raises",
                lambda a, i, s: a.scatter(1, i, s),
                x((3, 5), 16),
                idx(9).reshape(1, 1),
                x((1, 1), 17),
            ),
            (
                "out of wrong size",
                with_out(lambda a, i, s, out: torch.scatter(a, 1, i, s, out=out)),
                x((3, 5), 18),
                unique_rows(3, 5, 2, 19),
                x((3, 2), 20),
                o(),
            ),
        ]
    if op == "scatter_add":
        return [
            (
                "duplicate indices dim 1",
                lambda a, i, s: a.scatter_add(1, i, s),
                x((3, 5), 0),
                randidx((3, 4), 5, 1),
                x((3, 4), 2),
            ),
            (
                "dim 0 transposed self",
                lambda a, i, s: a.scatter_add(0, i, s),
                x((5, 3), 3).t(),
                randidx((4, 5), 3, 4),
                x((4, 5), 5),
            ),
            (
                "scatter_add_ on x[:, ::2]",
                lambda a, i, s: a[:, ::2].scatter_add_(0, i, s),
                x((4, 6), 6),
                randidx((5, 3), 4, 7),
                x((5, 3), 8),
            ),
            (
                "out of wrong size",
                with_out(lambda a, i, s, out: torch.scatter_add(a, 1, i, s, out=out)),
                x((3, 5), 9),
                randidx((3, 4), 5, 10),
                x((3, 4), 11),
                o(),
            ),
        ]
    if op == "scatter_reduce":
        cases = []
        for reduce in ["sum", "prod", "mean", "amax", "amin"]:
            for include_self in [True, False]:
                cases.append(
                    (
                        f"reduce={reduce} include_self={include_self}",
                        lambda a, i, s, r=reduce, inc=include_self: a.scatter_reduce(1, i, s, r, include_self=inc),
                        x((3, 5), 0, True),
                        randidx((3, 6), 5, 1),
                        x((3, 6), 2),
                    )
                )
            cases.append(
                (
                    f"scatter_reduce_ {reduce} on x.t()",
                    lambda a, i, s, r=reduce: a.t().scatter_reduce_(0, i, s, r, include_self=False),
                    x((4, 6), 3),
                    randidx((3, 4), 6, 4),
                    x((3, 4), 5),
                )
            )
            cases.append(
                (
                    f"{reduce} dim 0, transposed source, specials",
                    lambda a, i, s, r=reduce: a.scatter_reduce(0, i, s.t(), r),
                    x((4, 5), 6, True),
                    randidx((3, 5), 4, 7),
                    x((5, 3), 8, True),
                )
            )
        return cases + [
            (
                "int32 index",
                lambda a, i, s: a.scatter_reduce(1, i.int(), s, "sum"),
                x((3, 5), 9),
                randidx((3, 4), 5, 10),
                x((3, 4), 11),
            ),
            (
                "expanded index",
                lambda a, i, s: a.scatter_reduce(0, i.expand(3, 5), s, "sum"),
                x((4, 5), 12),
                randidx((3, 1), 4, 13),
                x((3, 5), 14),
            ),
            (
                "0-dim",
                lambda a, i, s: a.scatter_reduce(0, i, s, "amax", include_self=False),
                x((), 15),
                idx(0)[0],
                x((), 16),
            ),
            (
                "empty index",
                lambda a, i, s: a.scatter_reduce(1, i, s, "prod"),
                x((3, 5), 17),
                randidx((3, 0), 5, 18),
                x((3, 0), 19),
            ),
            (
                "index out of range raises",
                lambda a, i, s: a.scatter_reduce(1, i, s, "sum"),
                x((3, 5), 20),
                idx(5).reshape(1, 1),
                x((1, 1), 21),
            ),
            (
                "negative index raises",
                lambda a, i, s: a.scatter_reduce(1, i, s, "amin"),
                x((3, 5), 22),
                idx(-1).reshape(1, 1),
                x((1, 1), 23),
            ),
            (
                "unknown reduce raises",
                lambda a, i, s: a.scatter_reduce(1, i, s, "max"),
                x((3, 5), 24),
                randidx((3, 2), 5, 25),
                x((3, 2), 26),
            ),
            (
                "out of wrong size",
                with_out(lambda a, i, s, out: torch.scatter_reduce(a, 1, i, s, "mean", out=out)),
                x((3, 5), 27),
                randidx((3, 4), 5, 28),
                x((3, 4), 29),
                o(),
            ),
            (
                "scatter reduce='add'",
                lambda a, i, s: a.scatter(1, i, s, reduce="add"),
                x((3, 5), 30),
                randidx((3, 4), 5, 31),
                x((3, 4), 32),
            ),
            (
                "scatter_ reduce='multiply' on x.t()",
                lambda a, i, s: a.t().scatter_(0, i, s, reduce="multiply"),
                x((4, 6), 33),
                randidx((3, 4), 6, 34),
                x((3, 4), 35),
            ),
            (
                "scatter value reduce='add'",
                lambda a, i: a.scatter(1, i, 2, reduce="add"),
                x((3, 5), 36),
                randidx((3, 4), 5, 37),
            ),
            (
                "scatter value reduce='multiply'",
                lambda a, i: a.scatter(1, i, 3, reduce="multiply"),
                x((3, 5), 38),
                randidx((3, 4), 5, 39),
            ),
        ]
    if op == "index_add":
        return [
            (
                "dim 0 duplicate index",
                lambda a, i, s: a.index_add(0, i, s),
                x((5, 3), 0),
                idx(0, 2, 2, 4),
                x((4, 3), 1),
            ),
            (
                "dim 1 alpha=2 transposed",
                lambda a, i, s: torch.index_add(a, 1, i, s, alpha=2),
                x((5, 3), 2).t(),
                idx(1, 1, 0),
                x((3, 3), 3),
            ),
            (
                "index_add_ on x[:, ::2]",
                lambda a, i, s: a[:, ::2].index_add_(0, i, s),
                x((4, 6), 4),
                idx(3, 0, 3),
                x((3, 3), 5),
            ),
            (
                "out of wrong size",
                with_out(lambda a, i, s, out: torch.index_add(a, 0, i, s, out=out)),
                x((5, 3), 6),
                idx(1, 1),
                x((2, 3), 7),
                o(),
            ),
        ]
    if op == "index_copy":
        return [
            ("dim 0", lambda a, i, s: a.index_copy(0, i, s), x((5, 3), 0), idx(4, 0, 2), x((3, 3), 1)),
            ("dim 1 transposed", lambda a, i, s: a.index_copy(1, i, s), x((5, 3), 2).t(), idx(4, 1), x((3, 2), 3)),
            ("index_copy_ on x.t()", lambda a, i, s: a.t().index_copy_(0, i, s), x((4, 6), 4), idx(5, 0), x((2, 4), 5)),
            (
                "out of wrong size",
                with_out(lambda a, i, s, out: torch.index_copy(a, 0, i, s, out=out)),
                x((5, 3), 6),
                idx(3),
                x((1, 3), 7),
                o(),
            ),
        ]
    if op == "index_put":
        return [
            ("accumulate=False", lambda a, i, v: a.index_put_((i,), v), x((5, 3), 0), idx(4, 0, 2), x((3, 3), 1)),
            (
                "accumulate=True duplicates",
                lambda a, i, v: a.index_put_((i,), v, accumulate=True),
                x((5, 3), 2),
                idx(1, 1, 3),
                x((3, 3), 3),
            ),
            (
                "two index tensors, 0-dim value",
                lambda a, i, j, v: a.index_put_((i, j), v),
                x((3, 5), 4),
                idx(0, 2, 1),
                idx(4, 4, 0),
                x((), 5),
            ),
            (
                "two index tensors, accumulate=True",
                lambda a, i, j, v: a.index_put_((i, j), v, accumulate=True),
                x((3, 5), 6),
                idx(0, 0, 1),
                idx(4, 4, 0),
                x((3,), 7),
            ),
            ("bool mask index", lambda a, m, v: a.index_put_((m,), v), x((3, 5), 8), mask((3, 5), 9), x((), 10)),
            (
                "on x.t() accumulate=True",
                lambda a, i, v: a.t().index_put_((i,), v, accumulate=True),
                x((4, 6), 11),
                idx(5, 5, 0),
                x((4,), 12),
            ),
            (
                "out-of-place index_put",
                lambda a, i, v: torch.index_put(a, (i,), v),
                x((5, 3), 13),
                idx(0, 3),
                x((3,), 14),
            ),
            ("float64 values", lambda a, i, v: a.index_put_((i,), v), x((5, 3), 15), idx(0, 3), f64((2, 3))),
        ]
    if op == "indexing":
        return [
            ("x[idx] with a negative index", lambda a, i: a[i], x((5, 3), 0, True), idx(4, 0, -1, 0)),
            ("x[mask]", lambda a, m: a[m], x((3, 5), 1, True), mask((3, 5), 2)),
            ("x[idx1, idx2]", lambda a, i, j: a[i, j], x((3, 5), 3), idx(0, 2, 2), idx(4, 0, 1)),
            ("x[:, idx] on a transposed x", lambda a, i: a[:, i], x((5, 3), 4).t(), idx(1, 3, 1)),
            ("x[idx, 1:]", lambda a, i: a[i, 1:], x((3, 5), 5), idx(2, 1)),
            ("x[2-d idx]", lambda a, i: a[i], x((3, 5), 6), idx(0, 1, 2, 2).reshape(2, 2)),
            ("x[row mask]", lambda a, m: a[m], x((3, 5), 7), mask((3,), 8)),
            ("x[idx] on a step-sliced x", lambda a, i: a[:, ::2][i], x((3, 10), 9), idx(2, 0)),
            ("x[idx] with an out-of-range index raises", lambda a, i: a[i], x((3, 5), 10), idx(7)),
            ("x[idx] = v", lambda a, i, v: _assign(a, i, v), x((5, 3), 11), idx(4, 0), x((2, 3), 12)),
            ("x[mask] = 0", lambda a, m: _assign(a, m, 0), x((3, 5), 13), mask((3, 5), 14)),
            (
                "x[idx1, idx2] = 0-dim",
                lambda a, i, j, v: _assign(a, (i, j), v),
                x((3, 5), 15),
                idx(0, 2),
                idx(4, 1),
                x((), 16),
            ),
            (
                "x[:, idx] = v broadcast",
                lambda a, i, v: _assign(a, (slice(None), i), v),
                x((3, 5), 17),
                idx(3, 0),
                x((2,), 18),
            ),
            ("x.t()[idx] = 7 (through a view)", lambda a, i: _assign(a.t(), i, 7), x((4, 6), 19), idx(5, 1)),
            (
                "x[:, ::2][mask] = v (through a view)",
                lambda a, m, v: _assign(a[:, ::2], m, v),
                x((4, 6), 20),
                mask((4, 3), 21),
                x((), 22),
            ),
        ]
    if op == "masked_fill":
        return [
            ("scalar 2", lambda a, m: a.masked_fill(m, 2), x((3, 5), 0, True), mask((3, 5), 1)),
            ("scalar 0.5", lambda a, m: a.masked_fill(m, 0.5), x((3, 5), 2), mask((3, 5), 3)),
            ("broadcast mask (1,5)", lambda a, m: a.masked_fill(m, -1), x((3, 5), 4), mask((1, 5), 5)),
            (
                "0-dim tensor value, transposed input",
                lambda a, m, v: a.masked_fill(m, v),
                x((5, 3), 6).t(),
                mask((3, 5), 7),
                x((), 8),
            ),
            ("masked_fill_ on x[:, ::2]", lambda a, m: a[:, ::2].masked_fill_(m, 3), x((4, 6), 9), mask((4, 3), 10)),
            ("non-bool mask raises", lambda a, m: a.masked_fill(m, 1), x((3, 5), 11), make((3, 5), torch.int64, 12)),
            ("empty", lambda a, m: a.masked_fill(m, 1), x((3, 0), 13), mask((3, 0), 14)),
        ]
    if op == "masked_select":
        return [
            ("same shape", lambda a, m: a.masked_select(m), x((3, 5), 0, True), mask((3, 5), 1)),
            ("broadcast mask (5,)", lambda a, m: torch.masked_select(a, m), x((3, 5), 2), mask((5,), 3)),
            ("transposed input", lambda a, m: a.masked_select(m), x((5, 3), 4).t(), mask((3, 5), 5)),
            ("empty", lambda a, m: a.masked_select(m), x((0,), 6), mask((0,), 7)),
            (
                "out of wrong size",
                with_out(lambda a, m, out: torch.masked_select(a, m, out=out)),
                x((3, 5), 8),
                mask((3, 5), 9),
                o(),
            ),
        ]
    if op == "masked_scatter":
        return [
            ("same shape", lambda a, m, s: a.masked_scatter(m, s), x((3, 5), 0), mask((3, 5), 1), x((3, 5), 2)),
            (
                "broadcast mask (1,5), 1-d source",
                lambda a, m, s: a.masked_scatter(m, s),
                x((3, 5), 3),
                mask((1, 5), 4),
                x((15,), 5),
            ),
            (
                "masked_scatter_ on x.t()",
                lambda a, m, s: a.t().masked_scatter_(m, s),
                x((4, 6), 6),
                mask((6, 4), 7),
                x((5, 5), 8),
            ),
            (
                "transposed source",
                lambda a, m, s: a.masked_scatter(m, s.t()),
                x((3, 5), 9),
                mask((3, 5), 10),
                x((5, 3), 11),
            ),
            (
                "masked_scatter_ on x[:, ::2], broadcast mask",
                lambda a, m, s: a[:, ::2].masked_scatter_(m, s),
                x((4, 6), 12),
                mask((3,), 13),
                x((12,), 14),
            ),
            ("0-dim", lambda a, m, s: a.masked_scatter(m, s), x((), 15), mask((), 16), x((2,), 17)),
            ("empty", lambda a, m, s: a.masked_scatter(m, s), x((0, 3), 18), mask((0, 3), 19), x((0,), 20)),
            (
                "too few source elements raises",
                lambda a, m, s: a.masked_scatter(m, s),
                x((3,), 21),
                torch.ones(3, dtype=torch.bool),
                x((2,), 22),
            ),
            (
                "source of another dtype raises",
                lambda a, m, s: a.masked_scatter(m, s),
                x((3,), 23),
                mask((3,), 24),
                f64((3,)),
            ),
        ]
    if op == "nonzero":
        return [
            ("(3,5)", lambda a: a.nonzero(), few((3, 5), 0)),
            ("transposed", lambda a: torch.nonzero(a), few((5, 3), 1).t()),
            ("as_tuple", lambda a: torch.nonzero(a, as_tuple=True), few((3, 5), 2)),
            ("3-d step-sliced", lambda a: a[:, :, ::2].nonzero(), few((2, 3, 4), 3)),
            ("0-dim", lambda a: a.nonzero(), few((), 4)),
            ("empty", lambda a: a.nonzero(), few((3, 0), 5)),
            ("out of wrong size", with_out(lambda a, out: torch.nonzero(a, out=out)), few((3, 5), 6), idx(1, 2, 3)),
        ]
    if op == "take":
        return [
            (
                "2-d index with a negative index",
                lambda a, i: a.take(i),
                x((3, 5), 0, True),
                idx(0, 14, -1, 7).reshape(2, 2),
            ),
            ("transposed input", lambda a, i: torch.take(a, i), x((5, 3), 1).t(), idx(1, 5, 9)),
            ("empty index", lambda a, i: a.take(i), x((3, 5), 2), idx()),
            ("index out of range raises", lambda a, i: a.take(i), x((3, 5), 3), idx(15)),
        ]
    if op == "put":
        return [
            (
                "put_ with a negative index",
                lambda a, i, v: a.put_(i, v),
                x((3, 5), 0, True),
                idx(0, 14, -1),
                x((3,), 1),
            ),
            ("put, 2-d index", lambda a, i, v: a.put(i, v), x((3, 5), 2), idx(1, 4, 7, 9).reshape(2, 2), x((2, 2), 3)),
            (
                "accumulate with duplicates",
                lambda a, i, v: a.put_(i, v, accumulate=True),
                few((3, 5), 4),
                idx(1, 1, 7, 1),
                few((4,), 5),
            ),
            ("transposed self", lambda a, i, v: a.t().put_(i, v), x((5, 3), 6), idx(0, 2, 13), x((3,), 7)),
            ("empty index", lambda a, i, v: a.put_(i, v), x((3, 5), 8), idx(), x((0,), 9)),
            ("index out of range raises", lambda a, i, v: a.put_(i, v), x((3, 5), 10), idx(15), x((1,), 11)),
            ("too negative raises", lambda a, i, v: a.put_(i, v), x((3, 5), 12), idx(-16), x((1,), 13)),
            ("size mismatch raises", lambda a, i, v: a.put_(i, v), x((3, 5), 14), idx(1, 2), x((3,), 15)),
            ("into an empty tensor raises", lambda a, i, v: a.put_(i, v), x((0,), 16), idx(0), x((1,), 17)),
            ("source of another dtype raises", lambda a, i, v: a.put_(i, v), x((3,), 18), idx(0), f64((1,))),
        ]
    if op == "index_reduce":
        if dt == torch.bool:
            pytest.skip("bool index_reduce is refused and runs on the CPU fallback, which raises for some reductions")
        cases = []
        for reduce in ("prod", "mean", "amax", "amin"):
            cases += [
                (
                    f"{reduce} dim 0, duplicates",
                    lambda a, i, s, r=reduce: a.index_reduce(0, i, s, r),
                    few((4, 3), 0),
                    idx(0, 2, 0, 3, 0),
                    few((5, 3), 1),
                ),
                (
                    f"{reduce}_ dim 1 without self, transposed",
                    lambda a, i, s, r=reduce: a.t().index_reduce_(1, i, s, r, include_self=False),
                    few((5, 3), 2),
                    idx(4, 1, 1),
                    few((3, 3), 3),
                ),
                (
                    f"{reduce} out=",
                    with_out(lambda a, i, s, out, r=reduce: torch.index_reduce(a, -1, i, s, r, out=out)),
                    few((2, 3), 4),
                    idx(2, 2),
                    few((2, 2), 5),
                    o(),
                ),
            ]
        if dt != torch.bool:
            cases += [
                ("0-dim", lambda a, i, s: a.index_reduce(0, i, s, "amax"), few((), 6), idx(0), few((), 7)),
                (
                    "index out of range raises",
                    lambda a, i, s: a.index_reduce(0, i, s, "amax"),
                    x((3,), 8),
                    idx(3),
                    x((1,), 9),
                ),
                (
                    "negative index raises",
                    lambda a, i, s: a.index_reduce(0, i, s, "amin"),
                    x((3,), 10),
                    idx(-1),
                    x((1,), 11),
                ),
                (
                    "unknown reduction raises",
                    lambda a, i, s: a.index_reduce(0, i, s, "sum"),
                    x((3,), 12),
                    idx(0),
                    x((1,), 13),
                ),
            ]
        return cases
    if op == "repeat_interleave":
        reps = lambda *v, dtype=torch.int64: torch.tensor(v, dtype=dtype)  # noqa: E731
        return [
            (
                "self, repeats tensor, dim 0",
                lambda a, r: a.repeat_interleave(r, dim=0),
                x((3, 4), 0, True),
                reps(2, 0, 3),
            ),
            ("self, int repeats, flattened", lambda a: a.repeat_interleave(2), x((2, 3), 1)),
            (
                "transposed, dim 1",
                lambda a, r: torch.repeat_interleave(a, r, dim=1),
                x((4, 3), 2).t(),
                reps(1, 2, 1, 0),
            ),
            ("repeats only, int32", lambda r: torch.repeat_interleave(r), reps(3, 1, 0, 2, dtype=torch.int32)),
            ("with output_size", lambda r: torch.repeat_interleave(r, output_size=6), reps(3, 1, 0, 2)),
            ("empty repeats", lambda r: torch.repeat_interleave(r), reps()),
            ("negative repeats raise", lambda r: torch.repeat_interleave(r), reps(1, -1)),
            ("2-d repeats raise", lambda r: torch.repeat_interleave(r), reps(1, 2).reshape(1, 2)),
            ("wrong output_size raises", lambda r: torch.repeat_interleave(r, output_size=4), reps(1, 2)),
        ]
    if op == "trace":
        return [
            ("(3,5)", lambda a: torch.trace(a), x((3, 5), 0, True)),
            ("transposed", lambda a: a.trace(), x((5, 3), 1).t()),
            ("step-sliced", lambda a: a.trace(), x((4, 10), 2)[:, ::3]),
            ("empty", lambda a: a.trace(), x((0, 3), 3)),
            ("1-d raises", lambda a: a.trace(), x((3,), 4)),
        ]
    if op == "cross":
        return [
            ("dim 1", lambda a, b: torch.linalg.cross(a, b), x((4, 3), 0, True), x((4, 3), 1)),
            ("dim 0, broadcast", lambda a, b: torch.linalg.cross(a, b, dim=0), x((3, 1), 2), x((3, 5), 3)),
            ("torch.cross, transposed", lambda a, b: torch.cross(a, b, dim=1), x((3, 4), 4).t(), x((4, 3), 5)),
            ("out= aliasing an input", lambda a, b: torch.linalg.cross(a, b, out=a), x((2, 3), 6), x((2, 3), 7)),
            (
                "out of wrong size",
                with_out(lambda a, b, out: torch.linalg.cross(a, b, out=out)),
                x((2, 3), 8),
                x((2, 3), 9),
                o(),
            ),
            ("size 2 dim raises", lambda a, b: torch.linalg.cross(a, b), x((3, 2), 10), x((3, 2), 11)),
        ]
    if op == "rsub":
        return [
            ("tensor", lambda a, b: torch.rsub(a, b), x((3, 5), 0, True), x((3, 5), 1)),
            ("alpha 2, broadcast", lambda a, b: torch.rsub(a, b, alpha=2), x((3, 5), 2), x((5,), 3)),
            ("scalar", lambda a: torch.rsub(a, 3), x((5, 3), 4).t()),
            ("python scalar minus tensor", lambda a: 2 - a, x((3, 5), 5)),
        ]
    if op == "channel_shuffle":
        return [
            ("groups 2", lambda a: torch.nn.functional.channel_shuffle(a, 2), x((2, 4, 3), 0, True)),
            ("groups 3, 4-d permuted", lambda a: torch.channel_shuffle(a, 3), x((2, 3, 6, 2), 1).permute(0, 2, 1, 3)),
            ("groups not dividing channels raise", lambda a: torch.channel_shuffle(a, 3), x((2, 4, 3), 2)),
        ]
    if op == "flip":
        return [
            ("dim 0", lambda a: a.flip(0), x((3, 5), 0, True)),
            ("dims (0,1), transposed", lambda a: a.flip((0, 1)), x((5, 3), 1).t()),
            ("dim -1 of 3-d permuted", lambda a: a.flip(-1), x((4, 2, 3), 2).permute(1, 2, 0)),
            ("step-sliced", lambda a: a.flip(1), x((3, 10), 3)[:, ::2]),
            ("0-dim", lambda a: a.flip(()), x((), 4)),
            ("empty", lambda a: a.flip(0), x((0, 3), 5)),
        ]
    if op == "roll":
        return [
            ("flat shift 2", lambda a: a.roll(2), x((3, 5), 0, True)),
            ("shift 1 dim 0", lambda a: a.roll(1, 0), x((3, 5), 1)),
            ("shifts (1,-2) dims (0,1)", lambda a: a.roll((1, -2), (0, 1)), x((3, 5), 2)),
            ("shift -7 dim 1, transposed", lambda a: a.roll(-7, 1), x((5, 3), 3).t()),
            ("step-sliced", lambda a: a.roll(1, -1), x((3, 10), 4)[:, ::2]),
            ("empty", lambda a: a.roll(1, 0), x((0, 3), 5)),
        ]
    if op == "repeat":
        return [
            ("(2,1)", lambda a: a.repeat(2, 1), x((3, 5), 0, True)),
            ("(1,2,3) adds a dim", lambda a: a.repeat(1, 2, 3), x((5, 3), 1).t()),
            ("0-dim", lambda a: a.repeat(3), x((), 2)),
            ("zero repeats", lambda a: a.repeat(0, 2), x((3, 5), 3)),
            ("step-sliced", lambda a: a.repeat(2, 2), x((3, 10), 4)[:, ::2]),
            ("fewer repeats than dims raises", lambda a: a.repeat(2), x((3, 5), 5)),
        ]
    if op in ("tril", "triu"):
        return [
            (f"{op}()", lambda a: getattr(a, op)(), x((3, 5), 0, True)),
            (f"{op}(1)", lambda a: getattr(a, op)(1), x((3, 5), 1)),
            (f"{op}(-1) transposed", lambda a: getattr(a, op)(-1), x((5, 3), 2).t()),
            (f"{op} batched permuted", lambda a: getattr(a, op)(), x((4, 2, 3), 3).permute(1, 2, 0)),
            (f"{op}_ on x.t()", lambda a: getattr(a.t(), op + "_")(), x((4, 6), 4)),
            (f"{op} empty", lambda a: getattr(a, op)(), x((3, 0), 5)),
            (f"{op} of 1-d raises", lambda a: getattr(a, op)(), x((5,), 6)),
            (f"{op} out of wrong size", with_out(lambda a, out: getattr(torch, op)(a, 1, out=out)), x((3, 5), 7), o()),
        ]
    if op == "sort":
        return [
            ("stable", lambda a: a.sort(stable=True), few((3, 5), 0)),
            ("dim 0 descending stable", lambda a: a.sort(dim=0, descending=True, stable=True), few((3, 5), 1)),
            ("transposed, nan/inf", lambda a: torch.sort(a, dim=-1, stable=True), x((5, 3), 2, True).t()),
            ("3-d dim 1", lambda a: a.sort(dim=1, stable=True), few((2, 3, 4), 3)),
            ("0-dim", lambda a: a.sort(stable=True), x((), 4)),
            ("empty", lambda a: a.sort(stable=True), x((3, 0), 5)),
            ("unstable: values only", lambda a: a.sort(descending=True).values, x((3, 5), 6, True)),
        ]
    if op == "argsort":
        return [
            ("stable", lambda a: a.argsort(stable=True), few((3, 5), 0)),
            (
                "dim 0 descending stable",
                lambda a: torch.argsort(a, dim=0, descending=True, stable=True),
                few((5, 3), 1).t(),
            ),
            ("nan/inf", lambda a: a.argsort(stable=True), x((3, 5), 2, True)),
        ]
    if op == "topk":
        return [
            ("k=2", lambda a: _topk(a, 2), x((3, 5), 0, True)),
            ("k=3 dim 0", lambda a: _topk(a, 3, dim=0), x((5, 3), 1).t()),
            ("k=2 smallest", lambda a: _topk(a, 2, largest=False), few((3, 5), 2)),
            ("k=0", lambda a: _topk(a, 0), x((3, 5), 3)),
            ("k larger than the dim raises", lambda a: a.topk(6), x((3, 5), 4)),
        ]
    if op == "unique":
        return [
            ("sorted", lambda a: torch.unique(a), few((3, 5), 0)),
            (
                "return_inverse and return_counts",
                lambda a: torch.unique(a, return_inverse=True, return_counts=True),
                few((5, 3), 1).t(),
            ),
            ("dim 0", lambda a: torch.unique(a, dim=0, return_counts=True), few((6, 2), 2)),
            ("empty", lambda a: torch.unique(a, return_inverse=True, return_counts=True), x((0,), 3)),
            (
                "nan/inf, sorted=False",
                lambda a: torch.unique(a, sorted=False, return_inverse=True, return_counts=True),
                x((3, 5), 4, True),
            ),
            ("0-dim", lambda a: torch.unique(a, return_inverse=True), x((), 5)),
            (
                "dim 1 of a 3-d tensor",
                lambda a: torch.unique(a, dim=1, return_inverse=True, return_counts=True),
                few((2, 6, 2), 6),
            ),
            ("dim -1 transposed", lambda a: torch.unique(a, dim=-1), few((5, 2), 7).t()),
            ("dim 0 of an empty (0, 3)", lambda a: torch.unique(a, dim=0, return_counts=True), x((0, 3), 8)),
            ("dim 0 with another empty dim raises", lambda a: torch.unique(a, dim=0), x((3, 0), 9)),
            (
                "consecutive",
                lambda a: torch.unique_consecutive(a, return_inverse=True, return_counts=True),
                few((12,), 10).sort().values,
            ),
            ("consecutive transposed", lambda a: torch.unique_consecutive(a, return_counts=True), few((4, 3), 11).t()),
            (
                "consecutive dim 0",
                lambda a: torch.unique_consecutive(a, return_inverse=True, return_counts=True, dim=0),
                few((6, 2), 12).repeat_interleave(2, 0),
            ),
            ("consecutive empty", lambda a: torch.unique_consecutive(a, return_inverse=True), x((0,), 13)),
        ]
    if op == "searchsorted":
        seq = _sorted(few((7,), 0))
        return [
            ("left", lambda s, v: torch.searchsorted(s, v), seq, few((3, 4), 1)),
            ("right=True", lambda s, v: torch.searchsorted(s, v, right=True), seq, few((3, 4), 2)),
            (
                "side='right', out_int32",
                lambda s, v: torch.searchsorted(s, v, side="right", out_int32=True),
                seq,
                few((3, 4), 3),
            ),
            ("batched sequence", lambda s, v: torch.searchsorted(s, v), _sorted(few((3, 6), 4)), few((3, 4), 5)),
            (
                "sorter",
                lambda s, v, srt: torch.searchsorted(s, v, sorter=srt),
                few((7,), 6),
                few((4,), 7),
                few((7,), 6).argsort(stable=True),
            ),
            ("scalar value", lambda s: torch.searchsorted(s, 1), seq),
            ("transposed values", lambda s, v: torch.searchsorted(s, v), seq, few((4, 3), 8).t()),
            ("empty values", lambda s, v: torch.searchsorted(s, v), seq, x((0,), 9)),
            (
                "batched sorter, right",
                lambda s, v, srt: torch.searchsorted(s, v, right=True, sorter=srt),
                few((3, 7), 10),
                few((3, 4), 11),
                few((3, 7), 10).argsort(stable=True),
            ),
            (
                "non-contiguous sequence and values",
                lambda s, v: torch.searchsorted(s[::2], v.t()),
                _sorted(few((14,), 12)),
                few((4, 3), 13),
            ),
            ("values with nan/inf", lambda s, v: torch.searchsorted(s, v), seq, x((3, 5), 14, True)),
            ("float64 values promote", lambda s, v: torch.searchsorted(s, v), seq, f64((3,))),
            ("empty sequence", lambda s, v: torch.searchsorted(s, v), x((0,), 15), few((3,), 16)),
            ("out=", with_out(lambda s, v, out: torch.searchsorted(s, v, out=out)), seq, few((3, 4), 17), idx(1, 2)),
            (
                "out= of the wrong dtype raises",
                with_out(lambda s, v, out: torch.searchsorted(s, v, out_int32=True, out=out)),
                seq,
                few((3, 4), 18),
                idx(1, 2),
            ),
            (
                "side and right conflict raises",
                lambda s, v: torch.searchsorted(s, v, right=True, side="left"),
                seq,
                few((3,), 19),
            ),
            (
                "sorter out of range raises",
                lambda s, v, srt: torch.searchsorted(s, v, sorter=srt),
                few((3,), 20),
                few((2,), 21),
                idx(0, 3, 1),
            ),
            ("bucketize", lambda v, b: torch.bucketize(v, b), few((3, 4), 22), seq),
            (
                "bucketize right out_int32",
                lambda v, b: torch.bucketize(v, b, right=True, out_int32=True),
                few((3, 4), 23),
                seq,
            ),
            ("bucketize scalar", lambda b: torch.bucketize(1, b), seq),
            (
                "bucketize 2-d boundaries raises",
                lambda v, b: torch.bucketize(v, b),
                few((3,), 24),
                _sorted(few((2, 3), 25)),
            ),
        ]
    if op == "bincount":
        v = make((12,), dt, 0, "nonneg")
        return [
            ("plain", lambda a: torch.bincount(a), v),
            ("minlength=12", lambda a: torch.bincount(a, minlength=12), v),
            ("float32 weights", lambda a, w: torch.bincount(a, w), v, make((12,), torch.float32, 1)),
            ("float64 weights", lambda a, w: a.bincount(weights=w), v, make((12,), torch.float64, 2)),
            ("step-sliced", lambda a: a[::2].bincount(), v),
            ("empty", lambda a: a.bincount(), make((0,), dt, 3)),
            ("negative values raise (signed)", lambda a: a.bincount(), make((12,), dt, 4, "any")),
            ("int64 weights sum as float64", lambda a, w: a.bincount(w), v, make((12,), torch.int64, 5)),
            ("weights of the wrong length raise", lambda a, w: a.bincount(w), v, make((5,), torch.float32, 6)),
            (
                "empty with minlength and weights",
                lambda a, w: a.bincount(w, minlength=4),
                make((0,), dt, 7),
                make((0,), torch.float64, 8),
            ),
            ("negative minlength raises", lambda a: a.bincount(minlength=-1), v),
            ("2-d raises", lambda a: torch.bincount(a), make((3, 4), dt, 9, "nonneg")),
        ]
    if op == "histc":
        return [
            ("bins=4 min=-2 max=2", lambda a: torch.histc(a, bins=4, min=-2, max=2), x((3, 5), 0)),
            ("bins=5 data range", lambda a: torch.histc(a, bins=5), x((5, 3), 1).t()),
            ("values on the edges", lambda a: torch.histc(a, bins=3, min=-1, max=1), few((3, 5), 2)),
            ("nan with an explicit range", lambda a: torch.histc(a, bins=4, min=-3, max=3), x((3, 5), 3, True)),
            ("empty", lambda a: torch.histc(a, bins=3, min=0, max=1), x((0,), 4)),
            ("values outside a narrow range", lambda a: torch.histc(a, bins=7, min=-0.5, max=1), x((4, 6), 5)[1:, ::2]),
            ("min == max picks the data range", lambda a: torch.histc(a, bins=6, min=1.5, max=1.5), few((3, 5), 6)),
            ("constant input widens by 1", lambda a: torch.histc(a, bins=4), torch.ones(5, dtype=dt)),
            ("empty with min == max", lambda a: torch.histc(a, bins=2), x((0,), 7)),
            (
                "out of wrong size",
                with_out(lambda a, out: torch.histc(a, bins=4, min=-1, max=1, out=out)),
                x((3, 5), 8),
                o(),
            ),
            ("bins=0 raises", lambda a: torch.histc(a, bins=0), x((3,), 9)),
            ("min > max raises", lambda a: torch.histc(a, bins=3, min=2, max=1), x((3,), 10)),
            ("nan with the data range raises", lambda a: torch.histc(a, bins=3), x((3, 5), 11, True)),
        ]
    raise AssertionError(op)


DATA_MOVEMENT = [
    "cat",
    "stack",
    "index_select",
    "gather",
    "scatter",
    "scatter_add",
    "scatter_reduce",
    "index_add",
    "index_copy",
    "index_put",
    "indexing",
    "masked_fill",
    "masked_select",
    "masked_scatter",
    "nonzero",
    "take",
    "put",
    "index_reduce",
    "repeat_interleave",
    "trace",
    "cross",
    "rsub",
    "channel_shuffle",
    "flip",
    "roll",
    "repeat",
    "tril",
    "triu",
    "sort",
    "argsort",
    "topk",
    "unique",
    "searchsorted",
    "bincount",
    "histc",
]


# Operators that still run on the CPU fallback: under native_only they must raise. strict=True
# makes a newly native operator fail here until it is moved out of this set.
STILL_FALLBACK = set()


@pytest.mark.parametrize("dtype", DTYPES, ids=dname)
@pytest.mark.parametrize(
    "op",
    [
        pytest.param(
            op, marks=pytest.mark.xfail(strict=True, reason="no native oxide kernel yet: runs on the CPU fallback")
        )
        if op in STILL_FALLBACK
        else op
        for op in DATA_MOVEMENT
    ],
)
def test_data_movement(op, dtype):
    run_cases(data_movement_cases(op, dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool, torch.complex64], ids=dname)
def test_equal_runs_on_the_device_and_matches_cpu(dtype):
    base = torch.tensor([[1, 0, 2], [3, 1, 0]]).to(dtype)
    changed = base.clone()
    changed[1, 2] = 1
    pairs = [
        (base, base.clone()),
        (base, changed),
        (base, base.t().contiguous().t()),  # same values, other strides
        (base[:, ::2], base[:, ::2].clone()),
        (base, base[:1]),  # other sizes
        (base.reshape(-1), base),  # same elements, other shape
        (base[:0], base[:0].clone()),
        (base, base.to(torch.float64)),  # other dtype: compared by value, as on the CPU
    ]
    if dtype.is_floating_point or dtype.is_complex:
        nan = base.clone()
        nan[0, 0] = float("nan")
        pairs += [(nan, nan.clone()), (nan, nan)]  # NaN is never equal, even to itself
    for a, b in pairs:
        assert torch.equal(a.to("oxide"), b.to("oxide")) == torch.equal(a, b), (a, b)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.float32, torch.float16], ids=dname)
def test_isin_matches_cpu(dtype):
    g = torch.Generator().manual_seed(0)
    elements = torch.randint(0, 20, (5, 7), generator=g).to(dtype)
    few = torch.randint(0, 20, (4,), generator=g).to(dtype)  # the pairwise path
    many = torch.randint(0, 20, (300,), generator=g).to(dtype)  # the sort-based path
    unique = torch.tensor([3, 7, 11]).to(dtype)
    cases = [(elements, few, False), (elements, many, False), (elements[:, ::2], few.view(2, 2), False)]
    cases += [(elements, unique, True), (elements, torch.tensor([2.5, 3.0]), False)]  # promoted to float
    cases += [(elements[:0], few, False), (elements, few[:0], False)]
    for e, t, unique_only in cases:
        for invert in (False, True):
            for assume_unique in {False, unique_only}:
                want = torch.isin(e, t, assume_unique=assume_unique, invert=invert)
                got = torch.isin(e.to("oxide"), t.to("oxide"), assume_unique=assume_unique, invert=invert)
                assert torch.equal(got.cpu(), want), (e, t, invert, assume_unique)
    x = elements.to("oxide")
    assert torch.equal(torch.isin(x, 3).cpu(), torch.isin(elements, 3))
    assert torch.equal(torch.isin(3, x).cpu(), torch.isin(3, elements))
    out = torch.empty(5, 7, dtype=torch.bool, device="oxide")
    torch.isin(x, few.to("oxide"), out=out)
    assert torch.equal(out.cpu(), torch.isin(elements, few))


def test_isin_with_nan_and_many_elements():
    a, b = torch.tensor([1.0, float("nan"), 3.0]), torch.tensor([float("nan"), 3.0])
    assert torch.equal(torch.isin(a.to("oxide"), b.to("oxide")).cpu(), torch.isin(a, b))
    # Past the broadcast limit the pairwise path compares one test element at a time.
    g = torch.Generator().manual_seed(1)
    big, tests = torch.randint(0, 1000, (1 << 20,), generator=g), torch.randint(0, 1000, (40,), generator=g)
    assert torch.equal(torch.isin(big.to("oxide"), tests.to("oxide")).cpu(), torch.isin(big, tests))


# ---------------------------------------------------------------------------------------
# Linear algebra
# ---------------------------------------------------------------------------------------

LINALG_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
LOOSE = {torch.float16: dict(rtol=1e-2, atol=1e-2), torch.bfloat16: dict(rtol=1e-2, atol=1e-2)}


def linalg_cases(op, dt):
    x = lambda shape, seed=0, special=False: make(shape, dt, seed, special=special)  # noqa: E731
    o = lambda: make((2,), dt, 99)  # noqa: E731
    other = torch.float64 if dt != torch.float64 else torch.float32
    if op == "mm":
        return [
            ("(3,4)@(4,5)", torch.mm, x((3, 4), 0), x((4, 5), 1)),
            ("transposed operands", torch.mm, x((4, 3), 2).t(), x((5, 4), 3).t()),
            ("step-sliced", lambda a, b: a[:, ::2].mm(b), x((3, 8), 4), x((4, 5), 5)),
            ("(2,0)@(0,3)", torch.mm, x((2, 0), 6), x((0, 3), 7)),
            ("(0,3)@(3,2)", torch.mm, x((0, 3), 8), x((3, 2), 9)),
            ("mixed dtypes raise", torch.mm, x((3, 4), 10), make((4, 5), other, 11)),
            ("shape mismatch raises", torch.mm, x((3, 4), 12), x((5, 4), 13)),
            ("out of wrong size", with_out(torch.mm), x((3, 4), 14), x((4, 5), 15), o()),
        ]
    if op == "bmm":
        return [
            ("(2,3,4)@(2,4,5)", torch.bmm, x((2, 3, 4), 0), x((2, 4, 5), 1)),
            ("transposed operands", torch.bmm, x((2, 4, 3), 2).transpose(1, 2), x((2, 5, 4), 3).transpose(1, 2)),
            ("empty batch", torch.bmm, x((0, 3, 4), 4), x((0, 4, 5), 5)),
            ("K=0", torch.bmm, x((2, 3, 0), 6), x((2, 0, 5), 7)),
            ("out of wrong size", with_out(torch.bmm), x((2, 3, 4), 8), x((2, 4, 5), 9), o()),
        ]
    if op == "addmm":
        return [
            (
                "beta=0.5 alpha=2, broadcast bias",
                lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2),
                x((5,), 0),
                x((3, 4), 1),
                x((4, 5), 2),
            ),
            ("default, transposed operands", torch.addmm, x((3, 5), 3), x((4, 3), 4).t(), x((5, 4), 5).t()),
            (
                "beta=0 ignores nan in input",
                lambda c, a, b: torch.addmm(c, a, b, beta=0),
                x((3, 5), 6, True),
                x((3, 4), 7),
                x((4, 5), 8),
            ),
            ("K=0", lambda c, a, b: torch.addmm(c, a, b, beta=2), x((3, 5), 9), x((3, 0), 10), x((0, 5), 11)),
            (
                "addmm_ on x.t()",
                lambda c, a, b: c.t().addmm_(a, b, alpha=0.5),
                x((5, 3), 12),
                x((3, 4), 13),
                x((4, 5), 14),
            ),
            (
                "out of wrong size",
                with_out(lambda c, a, b, out: torch.addmm(c, a, b, alpha=2, out=out)),
                x((3, 5), 15),
                x((3, 4), 16),
                x((4, 5), 17),
                o(),
            ),
        ]
    if op == "addmv":
        return [
            (
                "beta=0.5 alpha=2",
                lambda c, a, v: torch.addmv(c, a, v, beta=0.5, alpha=2),
                x((3,), 0),
                x((3, 4), 1),
                x((4,), 2),
            ),
            ("transposed matrix, step-sliced vector", torch.addmv, x((3,), 3), x((4, 3), 4).t(), x((8,), 5)[::2]),
            ("broadcast 0-dim input", torch.addmv, x((), 6), x((3, 4), 7), x((4,), 8)),
            ("out of wrong size", with_out(torch.addmv), x((3,), 9), x((3, 4), 10), x((4,), 11), o()),
        ]
    if op == "mv":
        return [
            ("(3,4)@(4,)", torch.mv, x((3, 4), 0), x((4,), 1)),
            ("transposed", torch.mv, x((4, 3), 2).t(), x((8,), 3)[::2]),
            ("(3,0)@(0,)", torch.mv, x((3, 0), 4), x((0,), 5)),
            ("out of wrong size", with_out(torch.mv), x((3, 4), 6), x((4,), 7), o()),
        ]
    if op in ("dot", "vdot"):
        f = getattr(torch, op)
        return [
            (f"{op}", f, x((4,), 0), x((4,), 1)),
            (f"{op} step-sliced", lambda a, b: f(a[::2], b[1::2]), x((8,), 2), x((8,), 3)),
            (f"{op} empty", f, x((0,), 4), x((0,), 5)),
            (f"{op} mixed dtypes raise", f, x((4,), 6), make((4,), other, 7)),
            (f"{op} 2-d raises", f, x((2, 2), 8), x((2, 2), 9)),
            (f"{op} out of wrong size", with_out(f), x((4,), 10), x((4,), 11), o()),
        ]
    if op == "baddbmm":
        return [
            (
                "beta=0.5 alpha=2",
                lambda c, a, b: torch.baddbmm(c, a, b, beta=0.5, alpha=2),
                x((2, 3, 5), 0),
                x((2, 3, 4), 1),
                x((2, 4, 5), 2),
            ),
            (
                "broadcast input (3,5), transposed operands",
                torch.baddbmm,
                x((3, 5), 3),
                x((2, 4, 3), 4).transpose(1, 2),
                x((2, 5, 4), 5).transpose(1, 2),
            ),
            (
                "beta=0 ignores nan",
                lambda c, a, b: torch.baddbmm(c, a, b, beta=0),
                x((2, 3, 5), 6, True),
                x((2, 3, 4), 7),
                x((2, 4, 5), 8),
            ),
            ("out of wrong size", with_out(torch.baddbmm), x((2, 3, 5), 9), x((2, 3, 4), 10), x((2, 4, 5), 11), o()),
        ]
    if op == "addbmm":
        return [
            (
                "beta=0.5 alpha=2",
                lambda c, a, b: torch.addbmm(c, a, b, beta=0.5, alpha=2),
                x((3, 5), 0),
                x((2, 3, 4), 1),
                x((2, 4, 5), 2),
            ),
            (
                "broadcast input (5,), transposed operands",
                torch.addbmm,
                x((5,), 3),
                x((2, 4, 3), 4).transpose(1, 2),
                x((2, 5, 4), 5).transpose(1, 2),
            ),
            ("out of wrong size", with_out(torch.addbmm), x((3, 5), 6), x((2, 3, 4), 7), x((2, 4, 5), 8), o()),
        ]
    if op == "matmul":
        return [
            ("1d@1d", torch.matmul, x((4,), 0), x((4,), 1)),
            ("2d@1d", torch.matmul, x((3, 4), 2), x((4,), 3)),
            ("1d@2d", torch.matmul, x((4,), 4), x((4, 5), 5)),
            ("batched broadcast (2,1,3,4)@(3,4,5)", torch.matmul, x((2, 1, 3, 4), 6), x((3, 4, 5), 7)),
            ("(3,4)@(2,4,5)", torch.matmul, x((3, 4), 8), x((2, 4, 5), 9)),
            ("(2,3,4)@(4,)", torch.matmul, x((2, 3, 4), 10), x((4,), 11)),
            ("transposed operands", lambda a, b: a.t() @ b.t(), x((4, 3), 12), x((5, 4), 13)),
            ("(2,0)@(0,3)", torch.matmul, x((2, 0), 14), x((0, 3), 15)),
            ("out of wrong size", with_out(torch.matmul), x((3, 4), 16), x((4, 5), 17), o()),
        ]
    raise AssertionError(op)


LINALG = ["mm", "bmm", "addmm", "addmv", "mv", "dot", "vdot", "baddbmm", "addbmm", "matmul"]


@pytest.mark.parametrize("dtype", LINALG_DTYPES, ids=dname)
@pytest.mark.parametrize("op", LINALG)
def test_linalg(op, dtype):
    run_cases(linalg_cases(op, dtype), **LOOSE.get(dtype, {}))


# ---------------------------------------------------------------------------------------
# Backward
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS + [torch.int64, torch.int8, torch.bool, torch.complex64], ids=dname)
def test_addr(dtype):
    """beta * self + (alpha * vec1) * vec2 in CPU's order, beta and alpha converted to the
    element type first: exact in float16 and bfloat16, where CPU rounds every step."""
    x = lambda shape, seed: make(shape, dtype, seed)  # noqa: E731
    exact = dtype in (torch.float16, torch.bfloat16) or not (dtype.is_floating_point or dtype.is_complex)
    scalars = dict(beta=2, alpha=3) if not (dtype.is_floating_point or dtype.is_complex) else dict(beta=0.6, alpha=0.2)
    if dtype == torch.bool:
        scalars = dict(beta=True, alpha=True)
    run_cases(
        [
            ("addr", lambda s, a, b: torch.addr(s, a, b, **scalars), x((5, 10), 0), x((5,), 1), x((10,), 2)),
            ("broadcast self", lambda s, a, b: torch.addr(s, a, b, **scalars), x((10,), 3), x((5,), 4), x((10,), 5)),
            (
                "addr_ on a transposed self",
                lambda s, a, b: s.t().addr_(a, b, **scalars),
                x((10, 5), 6),
                x((5,), 7),
                x((10,), 8),
            ),
            (
                "out=",
                with_out(lambda s, a, b, out: torch.addr(s, a, b, out=out, **scalars)),
                x((5, 10), 9),
                x((5,), 10),
                x((10,), 11),
                x((2,), 12),
            ),
            (
                "beta 0 ignores self",
                lambda s, a, b: torch.addr(s, a, b, beta=0),
                make((5, 10), dtype, 13, special=True),
                x((5,), 14),
                x((10,), 15),
            ),
            ("2-d vec1 raises", lambda s, a, b: torch.addr(s, a, b), x((5, 10), 16), x((5, 1), 17), x((10,), 18)),
        ],
        exact=exact,
    )


def check_grad(fn, *args, where=""):
    """Forward and the gradients of the floating arguments, on CPU and on oxide."""
    cpu = [a.detach().clone().requires_grad_() if a.is_floating_point() else a for a in args]
    dev = [to_oxide(a.detach()).requires_grad_() if a.is_floating_point() else to_oxide(a) for a in args]
    out_c, out_d = fn(*cpu), fn(*dev)
    assert_same(out_d, out_c, f"{where}: forward")
    grad_out = make(out_c.shape, out_c.dtype, 123)
    leaves_c = [a for a in cpu if a.requires_grad]
    leaves_d = [a for a in dev if a.requires_grad]
    grads_c = torch.autograd.grad(out_c, leaves_c, grad_out)
    grads_d = torch.autograd.grad(out_d, leaves_d, to_oxide(grad_out))
    assert_same(grads_d, grads_c, f"{where}: gradients")


BACKWARD = {  # fn, input shapes, input kind
    "unary chain": (lambda a: torch.tanh(a.exp() * a.sin()).sigmoid().log1p().abs().sqrt(), [(3, 5)], "any"),
    "broadcasting binary": (lambda a, b: (a * b + a / (b.abs() + 1) - b).pow(2), [(3, 1), (1, 5)], "any"),
    "sum": (lambda a: a.sum(0), [(3, 5)], "any"),
    "mean keepdim": (lambda a: a.mean(-1, keepdim=True), [(3, 5)], "any"),
    "amax with ties": (lambda a: a.amax(1), [(3, 5)], "few"),
    "mm": (lambda a, b: a.t().mm(b), [(4, 3), (4, 5)], "any"),
    "index_select, repeated index": (lambda a: a.index_select(0, idx(2, 0, 2).to(a.device)), [(3, 5)], "any"),
    "gather, repeated index": (
        lambda a: a.gather(1, idx(0, 0, 4, 1, 1, 3).reshape(3, 2).to(a.device)),
        [(3, 5)],
        "any",
    ),
    "cat": (lambda a, b: torch.cat([a, b.t()], 0), [(3, 5), (5, 2)], "any"),
    "logit": (lambda a: torch.logit(a), [(3, 5)], "unit"),
    "logit, inputs outside [0, 1]: NaN gradients": (lambda a: torch.logit(a * 2 - 0.5), [(3, 5)], "unit"),
    "logit with eps, inputs outside [eps, 1 - eps]: zero gradients": (
        lambda a: torch.logit(a, eps=0.2),
        [(3, 5)],
        "unit",
    ),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=dname)
@pytest.mark.parametrize("case", list(BACKWARD))
def test_backward(case, dtype):
    fn, shapes, kind = BACKWARD[case]
    check_grad(fn, *[make(shape, dtype, i, kind) for i, shape in enumerate(shapes)], where=case)


OVERFLOWING_SCALARS = [
    ("add alpha float32", lambda a, b: torch.add(a, b, alpha=1e300), torch.float32),
    ("sub alpha float32", lambda a, b: torch.sub(a, b, alpha=1e300), torch.float32),
    ("add_ alpha float16", lambda a, b: a.add_(b, alpha=1e6), torch.float16),
    ("add alpha bfloat16", lambda a, b: torch.add(a, b, alpha=1e300), torch.bfloat16),
    ("add alpha uint8", lambda a, b: torch.add(a, b, alpha=300), torch.uint8),
    ("add alpha int8", lambda a, b: torch.add(a, b, alpha=-129), torch.int8),
    ("add alpha int32", lambda a, b: torch.add(a, b, alpha=2**40), torch.int32),
    ("add alpha complex64", lambda a, b: torch.add(a, b, alpha=1e300), torch.complex64),
    ("addcmul value", lambda a, b: torch.addcmul(a, a, b, value=1e300), torch.float32),
    ("addcdiv value", lambda a, b: torch.addcdiv(a, a, b, value=1e300), torch.float32),
    ("lerp weight", lambda a, b: torch.lerp(a, b, 1e300), torch.float32),
]


@pytest.mark.parametrize("label,fn,dtype", OVERFLOWING_SCALARS, ids=[c[0] for c in OVERFLOWING_SCALARS])
def test_scalar_that_overflows_the_dtype_raises_like_cpu(label, fn, dtype):
    # CPU converts alpha/value/weight with c10's checked conversion; oxide must not
    # turn the value into inf or wrap it.
    a, b = torch.ones(3, dtype=dtype), torch.full((3,), 2, dtype=dtype)
    with pytest.raises(RuntimeError, match="without overflow") as cpu_error:
        fn(a, b)
    with pytest.raises(RuntimeError, match="without overflow") as oxide_error:
        fn(a.to("oxide"), b.to("oxide"))
    assert str(oxide_error.value).splitlines()[0] == str(cpu_error.value).splitlines()[0]


def test_scalar_at_the_edge_of_the_dtype_still_runs():
    check(lambda a, b: torch.add(a, b, alpha=255), torch.zeros(3, dtype=torch.uint8), torch.ones(3, dtype=torch.uint8))
    check(
        lambda a, b: torch.add(a, b, alpha=1e300),
        torch.ones(3, dtype=torch.float64),
        torch.ones(3, dtype=torch.float64),
    )
    check(
        lambda a, b: torch.add(a, b, alpha=60000.0),
        torch.zeros(3, dtype=torch.float16),
        torch.ones(3, dtype=torch.float16),
    )


@pytest.mark.parametrize("shape", [(8, 16), (3, 0), (), (2, 3, 4)], ids=str)
def test_nonzero_result_layout_matches_cpu(shape):
    # CPU (and PyTorch's meta kernel, which torch.compile checks against) returns a
    # column-major result: strides (1, n).
    a = (torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape) % 3) if shape else torch.tensor(1.0)
    check(lambda t: t.nonzero(), a, strides=True)
    check(with_out(lambda t, out: torch.nonzero(t, out=out)), a, torch.empty(0, dtype=torch.long), strides=True)
