"""Pooling on oxide against CPU PyTorch, the oracle: max pooling with indices, average
pooling and adaptive average/max pooling in 1, 2 and 3 spatial dims, forward values,
indices, output layouts and gradients, and the exception types of bad arguments.

Every test runs with OXIDE_FALLBACK=error semantics (`native_only`), so a pooling
operator (or its backward) that fell back to the CPU would fail here.
"""

import math

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.usefixtures("native_only")

CL = {4: torch.channels_last, 5: torch.channels_last_3d}


def make(shape, dtype=torch.float32, seed=0, nan=False):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        # Few distinct values: ties exercise "first maximum wins".
        x = torch.randint(-8, 8, shape, generator=g).to(torch.float64) / 4
        if nan and x.numel() > 3:
            flat = x.view(-1)
            flat[3::7] = math.nan
            flat[1] = -math.inf
        return x.to(dtype)
    return torch.randint(-100 if dtype != torch.uint8 else 0, 100, shape, generator=g, dtype=dtype)


def layout(x, kind, spatial):
    """The same view on either device: contiguous, channels-last (batched input), or a strided slice."""
    if kind == "channels_last":
        return x.contiguous(memory_format=CL[x.dim()]) if x.dim() == spatial + 2 and x.dim() in CL else x
    if kind == "strided":
        return x[..., ::2]
    return x


def tolerance(dtype):
    # float32/float64 sum in the same order as CPU and must agree exactly.
    return {torch.bfloat16: (1.6e-2, 1e-2), torch.float16: (1e-3, 1e-3)}.get(dtype, (0, 0))


def check(fn, x, kind="contiguous", grad=None, spatial=2):
    """Runs `fn` on CPU and oxide copies of `x` viewed as `kind` and compares the outputs
    (values, dtype, strides) and, for floating inputs, the gradient of the first output."""
    grad = x.dtype.is_floating_point if grad is None else grad
    results = []
    for device in ("cpu", "oxide"):
        xd = layout(x.to(device), kind, spatial).detach().requires_grad_(grad)
        out = fn(xd)
        outs = out if isinstance(out, tuple) else (out,)
        gi = None
        if grad:
            go = make(outs[0].shape, outs[0].dtype, seed=1).to(device)
            (gi,) = torch.autograd.grad(outs[0], xd, go)
        results.append((outs, gi))
    (cpu, gcpu), (oxi, goxi) = results
    rtol, atol = tolerance(x.dtype)
    for c, o in zip(cpu, oxi):
        assert o.device.type == "oxide"
        assert (o.dtype, o.shape) == (c.dtype, c.shape)
        if c.dtype == torch.int64 and x.dtype != torch.int64:  # indices
            assert torch.equal(o.cpu(), c)
        else:
            torch.testing.assert_close(o.cpu(), c, rtol=rtol, atol=atol, equal_nan=True)
        if c.numel() > 1:
            assert o.stride() == c.stride()
    if grad:
        torch.testing.assert_close(goxi.cpu(), gcpu, rtol=rtol, atol=atol, equal_nan=True)
        if gcpu.numel() > 1:
            assert goxi.stride() == gcpu.stride()


def check_raises(fn, x):
    """The oxide call raises the exception type the CPU call raises."""
    with pytest.raises(Exception) as cpu:
        fn(x)
    with pytest.raises(type(cpu.value)):
        fn(x.to("oxide"))


# (kernel, stride, padding, dilation, ceil_mode)
MAX2D = [
    (2, None, 0, 1, False),
    (3, 2, 1, 1, False),
    (3, 2, 1, 1, True),
    ((2, 3), (1, 2), (1, 0), (2, 1), True),
    (3, 1, 1, 2, False),
    ((3, 1), 3, (1, 0), 1, True),
]
KINDS = ["contiguous", "channels_last", "strided"]
FLOATS = [torch.float32, torch.float64, torch.bfloat16]


@pytest.mark.parametrize("args", MAX2D, ids=str)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_max_pool2d(args, kind, dtype):
    k, s, p, d, ceil = args
    for shape in [(2, 3, 7, 9), (3, 6, 10)]:
        check(lambda x: F.max_pool2d(x, k, s, p, d, ceil, return_indices=True), make(shape, dtype, nan=True), kind)


@pytest.mark.parametrize("dtype", [torch.float16, torch.int64, torch.int32, torch.int8, torch.uint8])
def test_max_pool2d_other_dtypes(dtype):
    check(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), make((2, 3, 7, 6), dtype, nan=True))
    check(lambda x: F.max_pool2d(x, 2, return_indices=True), make((2, 3, 7, 6), dtype), "channels_last")


@pytest.mark.parametrize(
    "shape, args",
    [
        ((3, 70, 9, 9), (3, 2, 1)),  # 25 outputs a plane: blocks of 20 planes, the last one partial
        ((1, 2, 50, 51), (2, 2, 0)),  # 625 outputs a plane: two blocks a plane, the second partial
        ((64, 32, 8, 8), (2, 2, 0)),  # the demo CNN's pool
        ((1, 1, 600, 600), (2, 1, 0)),  # 599^2 windows x 4 taps: over the table limit, one window at a time
    ],
    ids=str,
)
def test_max_pool2d_blocks(shape, args):
    # The kernel walks several whole planes, or part of one, per block of outputs; a
    # geometry whose tap table would be too large takes the one-window-at-a-time loop.
    check(lambda x: F.max_pool2d(x, *args, return_indices=True), make(shape, nan=True))
    check(lambda x: F.max_pool2d(x, *args, return_indices=True), make(shape, torch.int32))


def test_max_pool_nan_and_ties():
    x = torch.tensor([[[[1.0, math.nan, 3.0, math.nan, 3.0, 3.0, -math.inf, -math.inf]]]])
    check(lambda x: F.max_pool2d(x, (1, 2), return_indices=True), x)
    check(lambda x: F.max_pool2d(x, (1, 4), 1, return_indices=True), x)
    check(lambda x: F.adaptive_max_pool2d(x, (1, 3), return_indices=True), x)


@pytest.mark.parametrize("kind", ["contiguous", "strided"])
def test_max_pool1d(kind):
    for args in [(3, 2, 1, 1, False), (2, 1, 0, 3, True), (4, 3, 2, 1, True)]:
        check(lambda x: F.max_pool1d(x, *args, return_indices=True), make((2, 3, 11), nan=True), kind)
        check(lambda x: F.max_pool1d(x, *args), make((3, 12)), kind)


MAX3D = [(2, None, 0, 1, False), (3, 2, 1, 1, True), ((1, 3, 2), (1, 2, 1), (0, 1, 1), (1, 1, 2), False)]


@pytest.mark.parametrize("args", MAX3D, ids=str)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_max_pool3d(args, kind, dtype):
    k, s, p, d, ceil = args
    for shape in [(2, 2, 5, 6, 7), (3, 4, 5, 6)]:
        check(
            lambda x: F.max_pool3d(x, k, s, p, d, ceil, return_indices=True),
            make(shape, dtype, nan=True),
            kind,
            spatial=3,
        )


def test_pool3d_other_dtypes():
    check(lambda x: F.max_pool3d(x, 2, 1, 1, return_indices=True), make((2, 2, 3, 4, 5), torch.int32))
    x = make((2, 2, 3, 4, 5), torch.bfloat16, nan=True)
    check(lambda x: F.max_pool3d(x, 3, 2, 1, return_indices=True), x, "channels_last", spatial=3)
    check(lambda x: F.adaptive_max_pool3d(x, (2, 3, 2), return_indices=True), x, spatial=3)
    check(lambda x: F.adaptive_avg_pool3d(x, (2, 3, 2)), make((2, 2, 3, 4, 5), torch.bfloat16), spatial=3)


# (kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
AVG2D = [
    (2, None, 0, False, True, None),
    (3, 2, 1, False, True, None),
    (3, 2, 1, True, False, None),
    ((2, 3), (1, 2), (1, 1), True, True, None),
    (3, 2, 1, True, True, 5),
    ((3, 1), 3, (1, 0), True, False, 2),
]


@pytest.mark.parametrize("args", AVG2D, ids=str)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_avg_pool2d(args, kind, dtype):
    for shape in [(2, 3, 7, 9), (3, 6, 10)]:
        check(lambda x: F.avg_pool2d(x, *args), make(shape, dtype), kind)


def test_avg_pool_nan_and_long():
    check(lambda x: F.avg_pool2d(x, 3, 2, 1), make((2, 3, 7, 6), nan=True))
    check(lambda x: F.avg_pool2d(x, 3, 2, 1, True, False), make((2, 3, 7, 6), torch.int64))
    check(lambda x: F.avg_pool3d(x, 2, 1, 1, False, True, 3), make((2, 2, 3, 4, 5), torch.int64))
    check(lambda x: F.avg_pool2d(x, 2), make((2, 3, 6, 6), torch.float16))


@pytest.mark.parametrize("kind", ["contiguous", "strided"])
def test_avg_pool1d(kind):
    for args in [(3, 2, 1, False, True), (2, 1, 0, True, False), (4, 3, 2, True, True)]:
        check(lambda x: F.avg_pool1d(x, *args), make((2, 3, 11)), kind)


AVG3D = [
    (2, None, 0, False, True, None),
    (3, 2, 1, True, False, None),
    ((1, 3, 2), (1, 2, 1), (0, 1, 1), True, True, 4),
]


@pytest.mark.parametrize("args", AVG3D, ids=str)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_avg_pool3d(args, kind, dtype):
    for shape in [(2, 2, 5, 6, 7), (3, 4, 5, 6)]:
        check(lambda x: F.avg_pool3d(x, *args), make(shape, dtype), kind, spatial=3)


ADAPTIVE2D = [(1, 1), (3, 4), (5, 9), (10, 3), (None, 2), 2]


@pytest.mark.parametrize("size", ADAPTIVE2D, ids=str)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_adaptive_pool2d(size, kind, dtype):
    for shape in [(2, 3, 7, 9), (3, 6, 10)]:
        x = make(shape, dtype, nan=True)
        check(lambda x: F.adaptive_max_pool2d(x, size, return_indices=True), x, kind)
        check(lambda x: F.adaptive_avg_pool2d(x, size), make(shape, dtype), kind)


@pytest.mark.parametrize("size", [1, 4, 13], ids=str)
def test_adaptive_pool1d(size):
    for kind in ["contiguous", "strided"]:
        check(lambda x: F.adaptive_max_pool1d(x, size, return_indices=True), make((2, 3, 12), nan=True), kind)
        check(lambda x: F.adaptive_avg_pool1d(x, size), make((3, 12)), kind)


@pytest.mark.parametrize("size", [(1, 1, 1), (2, 3, 4), (5, 7, 9), (None, 2, None)], ids=str)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_adaptive_pool3d(size, kind, dtype):
    for shape in [(2, 2, 5, 6, 8), (3, 4, 5, 6)]:
        check(
            lambda x: F.adaptive_max_pool3d(x, size, return_indices=True), make(shape, dtype, nan=True), kind, spatial=3
        )
        check(lambda x: F.adaptive_avg_pool3d(x, size), make(shape, dtype), kind, spatial=3)


def test_modules_and_empty_batch():
    pool = torch.nn.Sequential(
        torch.nn.MaxPool2d(3, 2, 1),
        torch.nn.AvgPool2d(2, ceil_mode=True),
        torch.nn.AdaptiveAvgPool2d((2, 3)),
        torch.nn.AdaptiveMaxPool2d(1),
    )
    check(pool, make((2, 4, 17, 15)))
    for fn in [
        lambda x: F.max_pool2d(x, 2, return_indices=True),
        lambda x: F.avg_pool2d(x, 2),
        lambda x: F.adaptive_avg_pool2d(x, 3),
        lambda x: F.adaptive_max_pool2d(x, 3, return_indices=True),
        lambda x: F.max_pool3d(x[..., None], (2, 2, 1), return_indices=True),
        lambda x: F.adaptive_avg_pool3d(x[..., None], 2),
    ]:
        check(fn, make((0, 3, 6, 6)), grad=False)


def test_out_variants():
    x = make((2, 3, 7, 8))
    for op, args in [
        (torch.ops.aten.max_pool2d_with_indices.out, (x, [3, 3], [2, 2], [1, 1], [1, 1], True)),
        (torch.ops.aten.adaptive_max_pool2d.out, (x, [3, 5])),
    ]:
        cpu = (torch.empty(0), torch.empty(0, dtype=torch.long))
        oxi = (torch.empty(0, device="oxide"), torch.empty(0, dtype=torch.long, device="oxide"))
        op(*args, out=cpu[0], indices=cpu[1])
        op(*[a.to("oxide") if isinstance(a, torch.Tensor) else a for a in args], out=oxi[0], indices=oxi[1])
        for c, o in zip(cpu, oxi):
            torch.testing.assert_close(o.cpu(), c, rtol=0, atol=0)
    # A transposed out= tensor keeps its strides (the result goes through a temporary).
    out_c, out_o = torch.empty(2, 3, 4, 3).transpose(2, 3), torch.empty(2, 3, 4, 3, device="oxide").transpose(2, 3)
    torch.ops.aten.avg_pool2d.out(x, [2, 2], [2, 2], [0, 0], False, True, None, out=out_c)
    torch.ops.aten.avg_pool2d.out(x.to("oxide"), [2, 2], [2, 2], [0, 0], False, True, None, out=out_o)
    assert out_o.stride() == out_c.stride()
    torch.testing.assert_close(out_o.cpu(), out_c, rtol=0, atol=0)
    out_c, out_o = torch.empty(0), torch.empty(0, device="oxide")
    torch.ops.aten.adaptive_avg_pool3d.out(make((2, 3, 4, 5, 6)), [2, 3, 2], out=out_c)
    torch.ops.aten.adaptive_avg_pool3d.out(make((2, 3, 4, 5, 6)).to("oxide"), [2, 3, 2], out=out_o)
    torch.testing.assert_close(out_o.cpu(), out_c, rtol=0, atol=0)


ERRORS = [
    ("kernel larger than padded input", lambda x: F.max_pool2d(x, 9), (1, 2, 5, 5)),
    ("avg kernel larger than input", lambda x: F.avg_pool2d(x, 7), (1, 2, 5, 5)),
    ("pad over half the kernel", lambda x: F.max_pool2d(x, 2, 1, 2), (1, 2, 5, 5)),
    ("avg pad over half the kernel", lambda x: F.avg_pool2d(x, 2, 1, 2), (1, 2, 5, 5)),
    ("zero stride", lambda x: F.max_pool2d(x, 2, 0), (1, 2, 5, 5)),
    ("zero dilation", lambda x: F.max_pool2d(x, 2, 1, 0, 0), (1, 2, 5, 5)),
    ("zero divisor", lambda x: F.avg_pool2d(x, 2, divisor_override=0), (1, 2, 5, 5)),
    ("negative padding", lambda x: F.avg_pool2d(x, 2, 1, -1), (1, 2, 5, 5)),
    ("2-d pooling of 5-d input", lambda x: F.max_pool2d(x, 2), (1, 1, 2, 5, 5)),
    ("empty spatial dim", lambda x: F.max_pool2d(x, 1), (1, 2, 0, 5)),
    ("3-d pooling of 3-d input", lambda x: F.max_pool3d(x, 2), (2, 5, 5)),
    ("3-d kernel larger than input", lambda x: F.max_pool3d(x, (1, 9, 1)), (1, 2, 3, 5, 5)),
    ("3-d pad over half the kernel", lambda x: F.max_pool3d(x, 2, 1, 2), (1, 2, 3, 5, 5)),
    ("3-d kernel of two ints", lambda x: torch.ops.aten.max_pool3d_with_indices(x, [2, 2]), (1, 2, 3, 5, 5)),
    ("3-d avg of half", lambda x: F.avg_pool3d(x.half(), 2), (1, 2, 3, 5, 5)),
    ("adaptive output of one int too many", lambda x: torch.ops.aten._adaptive_avg_pool2d(x, [2, 2, 2]), (1, 2, 5, 5)),
    ("adaptive avg of empty dims", lambda x: F.adaptive_avg_pool2d(x, 2), (1, 2, 0, 5)),
    ("adaptive avg of 5-d input", lambda x: F.adaptive_avg_pool2d(x, 2), (1, 1, 2, 5, 5)),
    ("adaptive avg 3d of 3-d input", lambda x: F.adaptive_avg_pool3d(x, 2), (2, 5, 5)),
    ("adaptive max of empty dims", lambda x: F.adaptive_max_pool2d(x, 2), (1, 2, 5, 0)),
    ("adaptive max of ints", lambda x: F.adaptive_max_pool2d(x.long(), 2), (1, 2, 5, 5)),
    ("adaptive avg of ints", lambda x: F.adaptive_avg_pool2d(x.long(), 2), (1, 2, 5, 5)),
    ("max pool of bool", lambda x: F.max_pool2d(x.bool(), 2), (1, 2, 5, 5)),
    ("avg pool of int32", lambda x: F.avg_pool2d(x.int(), 2), (1, 2, 5, 5)),
    (
        "backward with short grad",
        lambda x: torch.ops.aten.max_pool2d_with_indices_backward(
            x[..., :1, :2], x, [2, 2], [2, 2], [0, 0], [1, 1], False, x[..., :1, :2].long()
        ),
        (1, 2, 5, 5),
    ),
    (
        "adaptive avg backward of empty grad",
        lambda x: torch.ops.aten._adaptive_avg_pool2d_backward(x[..., :0], x),
        (1, 2, 5, 5),
    ),
]


@pytest.mark.parametrize("fn,shape", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_errors(fn, shape):
    check_raises(fn, make(shape))


def test_coverage_is_native():
    """The forward and backward operators of every pooling family ran natively."""
    from torch_oxide import coverage

    with coverage.record() as rec:
        for fn, shape in [
            (lambda x: F.max_pool2d(x, 3, 2, 1), (2, 3, 7, 7)),
            (lambda x: F.max_pool3d(x, 2), (1, 2, 4, 4, 4)),
            (lambda x: F.avg_pool2d(x, 3, 2, 1), (2, 3, 7, 7)),
            (lambda x: F.avg_pool3d(x, 2), (1, 2, 4, 4, 4)),
            (lambda x: F.adaptive_avg_pool2d(x, 3), (2, 3, 7, 7)),
            (lambda x: F.adaptive_avg_pool3d(x, 3), (1, 2, 4, 4, 4)),
            (lambda x: F.adaptive_max_pool2d(x, 3), (2, 3, 7, 7)),
            (lambda x: F.adaptive_max_pool3d(x, 3), (1, 2, 4, 4, 4)),
        ]:
            x = make(shape).to("oxide").requires_grad_()
            fn(x).sum().backward()
    names = set(rec.native)
    for op in [
        "max_pool2d_with_indices",
        "max_pool2d_with_indices_backward",
        "max_pool3d_with_indices",
        "max_pool3d_with_indices_backward",
        "avg_pool2d",
        "avg_pool2d_backward",
        "avg_pool3d",
        "avg_pool3d_backward",
        "_adaptive_avg_pool2d",
        "_adaptive_avg_pool2d_backward",
        "_adaptive_avg_pool3d",
        "_adaptive_avg_pool3d_backward",
        "adaptive_max_pool2d",
        "adaptive_max_pool2d_backward",
        "adaptive_max_pool3d",
        "adaptive_max_pool3d_backward",
    ]:
        assert any(n.split(".")[0] == f"aten::{op}" or n.split(".")[0] == op for n in names), (op, sorted(names))
