"""Resampling operators on oxide against CPU PyTorch, the oracle: F.unfold / F.fold
(im2col / col2im), embedding bags (F.embedding_bag, nn.EmbeddingBag), linear, trilinear
and bicubic upsampling, and F.grid_sample (2-d), forward values and gradients for every
floating dtype CPU supports, non-contiguous inputs, and the exception types of bad
arguments.

Every test runs with OXIDE_FALLBACK=error semantics (`native_only`), so an operator (or
its backward) that fell back to the CPU would fail here.
"""

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.usefixtures("native_only")

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def make(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def tol(dtype):
    # Half types: oxide accumulates in float32 and rounds once; CPU sometimes rounds between steps.
    return {
        torch.bfloat16: dict(rtol=3e-2, atol=3e-2),
        torch.float16: dict(rtol=5e-3, atol=5e-3),
        torch.float32: dict(rtol=1e-5, atol=1e-5),
    }.get(dtype, dict(rtol=1e-7, atol=1e-7))


def strided(x):
    """A non-contiguous view of a copy of `x` with the same shape and values."""
    return torch.stack([x, x], dim=-1)[..., 0] if x.dim() else x


HALF = (torch.bfloat16, torch.float16)


def compare(fn, *inputs, grad=True, kind="contiguous", tols=None, grad_inputs=None):
    """Runs `fn` on CPU and on oxide copies of `inputs` (floating ones requiring grad when `grad`),
    compares every floating output and the gradients of the first output.

    For float16/bfloat16 the CPU side computes in float32 on the (exactly widened) same values and
    its results are rounded to the half type: oxide computes half types in float32 and rounds once,
    while some CPU half kernels round after every step (their error, not a reference)."""
    dtype = next(x.dtype for x in inputs if isinstance(x, torch.Tensor) and x.dtype.is_floating_point)
    results = []
    for device in ("cpu", "oxide"):
        widen = device == "cpu" and dtype in HALF
        xs = []
        for x in inputs:
            if isinstance(x, torch.Tensor):
                xd = x.to(device)
                if widen and x.dtype.is_floating_point:
                    xd = xd.float()
                if kind == "strided" and x.dtype.is_floating_point:
                    xd = strided(xd)
                    assert not xd.is_contiguous() or xd.numel() <= 1
                if grad and x.dtype.is_floating_point:
                    xd = xd.detach().requires_grad_(True)
                xs.append(xd)
            else:
                xs.append(x)
        out = fn(*xs)
        outs = out if isinstance(out, tuple) else (out,)
        grads = None
        wrt = [x for x in xs if isinstance(x, torch.Tensor) and x.requires_grad]
        if grad_inputs is not None:
            wrt = [xs[i] for i in grad_inputs]
        if grad and wrt:
            go = make(outs[0].shape, dtype, seed=7).to(device, outs[0].dtype)
            grads = torch.autograd.grad(outs[0], wrt, go)
        if widen:
            rounded = lambda ts: tuple(t.to(dtype) if t.dtype.is_floating_point else t for t in ts)  # noqa: E731
            outs, grads = rounded(outs), grads and rounded(grads)
        results.append((outs, grads))
    (cpu, gcpu), (oxi, goxi) = results
    t = tols or tol(dtype)
    for c, o in zip(cpu, oxi):
        assert o.device.type == "oxide"
        assert (o.dtype, o.shape) == (c.dtype, c.shape)
        if c.dtype.is_floating_point:
            torch.testing.assert_close(o.cpu(), c, **t)
    if gcpu is not None:
        for c, o in zip(gcpu, goxi):
            torch.testing.assert_close(o.cpu(), c, **t)
    return cpu, oxi


def check_raises(fn, *inputs):
    """The oxide call raises the exception type the CPU call raises."""
    with pytest.raises(Exception) as cpu:
        fn(*inputs)
    with pytest.raises(type(cpu.value)):
        fn(*[x.to("oxide") if isinstance(x, torch.Tensor) else x for x in inputs])


# ---- unfold / fold ----

UNFOLD = [
    dict(kernel_size=2),
    dict(kernel_size=(2, 3), stride=(1, 2), padding=1),
    dict(kernel_size=3, dilation=2, padding=(2, 1), stride=2),
    dict(kernel_size=(1, 1)),
]


@pytest.mark.parametrize("args", UNFOLD, ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kind", ["contiguous", "strided"])
def test_unfold(args, dtype, kind):
    compare(lambda x: F.unfold(x, **args), make((2, 3, 7, 8), dtype), kind=kind)
    compare(lambda x: F.unfold(x, **args), make((3, 6, 9), dtype), kind=kind)


@pytest.mark.parametrize("args", UNFOLD, ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kind", ["contiguous", "strided"])
def test_fold(args, dtype, kind):
    size = (7, 8)
    cols = F.unfold(make((2, 3, *size)), **args)
    compare(lambda c: F.fold(c, size, **args), make(cols.shape, dtype), kind=kind)
    compare(lambda c: F.fold(c, size, **args), make(cols.shape[1:], dtype), kind=kind)


def test_unfold_integers_and_empty_batch():
    # CPU raises NotImplementedError for integer im2col; oxide unfolds them (a copy), exactly as floats.
    x = torch.randint(-50, 50, (2, 3, 5, 5))
    assert torch.equal(F.unfold(x.to("oxide"), 2, padding=1).cpu(), F.unfold(x.double(), 2, padding=1).long())
    compare(lambda x: F.unfold(x, 2), make((0, 3, 5, 5)))
    compare(lambda c: F.fold(c, (4, 4), 2), make((0, 12, 9)))


def test_unfold_fold_bad_arguments():
    x = make((1, 2, 4, 4))
    check_raises(lambda x: F.unfold(x, 5), x)  # window larger than the image
    check_raises(lambda x: F.unfold(x, 2, stride=0), x)
    check_raises(lambda x: torch._C._nn.im2col(x, (2,), (1, 1), (0, 0), (1, 1)), x)
    check_raises(lambda x: F.unfold(x, 2, padding=-1), x)
    check_raises(lambda c: F.fold(c, (4, 4), 2), make((1, 7, 9)))  # channels not divisible by the kernel
    check_raises(lambda c: F.fold(c, (4, 4), 2), make((1, 8, 8)))  # wrong number of blocks


# ---- embedding bags ----


def bags_case(n_idx=11, num_weights=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, num_weights, (n_idx,), generator=g)
    offsets = torch.tensor([0, 3, 3, 7])  # one empty bag
    return idx, offsets


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_bag(mode, dtype, padding_idx):
    idx, offsets = bags_case()
    idx[4] = 2  # at least one padding index in a bag
    w = make((9, 5), dtype)
    for ilo in [False, True]:
        offs = torch.cat([offsets, torch.tensor([idx.numel()])]) if ilo else offsets

        def fn(w):
            return F.embedding_bag(
                idx.to(w.device),
                w,
                offs.to(w.device),
                mode=mode,
                padding_idx=padding_idx,
                include_last_offset=ilo,
            )

        compare(fn, w)
        compare(fn, w, kind="strided")


@pytest.mark.parametrize("dtype", FLOATS)
def test_embedding_bag_per_sample_weights(dtype):
    idx, offsets = bags_case()
    w, psw = make((9, 5), dtype), make((idx.numel(),), dtype, seed=3)
    for padding_idx in [None, int(idx[0])]:

        def fn(w, p):
            return F.embedding_bag(
                idx.to(w.device),
                w,
                offsets.to(w.device),
                mode="sum",
                per_sample_weights=p,
                padding_idx=padding_idx,
            )

        compare(fn, w, psw)
        compare(fn, w, psw, kind="strided")


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_2d_input_freq_and_int32_indices(mode):
    w = make((7, 4))
    idx = torch.tensor([[1, 2, 4], [4, 3, 1], [6, 6, 0]])
    # CPU (Python) refuses scale_grad_by_freq for max mode.
    compare(lambda w: F.embedding_bag(idx.to(w.device), w, mode=mode, scale_grad_by_freq=mode != "max"), w)
    compare(lambda w: F.embedding_bag(idx.to(w.device, torch.int32), w, mode=mode), w)
    bag = torch.nn.EmbeddingBag(7, 4, mode=mode)
    out = bag.to("oxide")(idx.to("oxide"))
    torch.testing.assert_close(out.cpu(), bag.cpu()(idx))


def test_embedding_bag_auxiliary_outputs_match_cpu_where_meaningful():
    w = make((9, 3))
    idx = torch.tensor([0, 1, 4, 2, 2, 8])
    offsets = torch.tensor([0, 2, 2, 5])
    for mode in (1, 2):  # mean, max: CPU fills offset2bag, bag_size (and max_indices)
        cpu = torch._embedding_bag(w, idx, offsets, False, mode, False, None, False, 4)
        oxi = torch._embedding_bag(
            w.to("oxide"), idx.to("oxide"), offsets.to("oxide"), False, mode, False, None, False, 4
        )
        # CPU's max_indices is uninitialised outside max mode.
        for c, o in zip(cpu[:3] if mode == 1 else cpu, oxi):
            torch.testing.assert_close(o.cpu(), c)
    for ti, to in [(torch.int32, torch.int32), (torch.int32, torch.int64)]:
        cpu = torch._embedding_bag(w, idx.to(ti), offsets.to(to), False, 2)
        oxi = torch._embedding_bag(w.to("oxide"), idx.to("oxide", ti), offsets.to("oxide", to), False, 2)
        assert [t.dtype for t in oxi] == [t.dtype for t in cpu]
        torch.testing.assert_close(oxi[3].cpu(), cpu[3])


def test_embedding_bag_forward_only_and_empty():
    w = make((5, 3))
    with torch.no_grad():
        compare(
            lambda w: F.embedding_bag(torch.tensor([0, 4, 4]).to(w.device), w, torch.tensor([0, 1]).to(w.device)),
            w,
            grad=False,
        )
    compare(
        lambda w: F.embedding_bag(
            torch.tensor([], dtype=torch.long).to(w.device), w, torch.tensor([0, 0]).to(w.device), mode="mean"
        ),
        w,
    )


@pytest.mark.usefixtures("launch_blocking")  # a data-dependent kernel check, compared at the call
def test_embedding_bag_bad_arguments():
    w = make((5, 3))
    eb = lambda w, i, o, **kw: F.embedding_bag(i, w, o, **kw)  # noqa: E731
    check_raises(eb, w, torch.tensor([0, 7]), torch.tensor([0]))  # index out of range
    check_raises(eb, w, torch.tensor([0, 1]), torch.tensor([1]))  # offsets[0] != 0
    check_raises(eb, w, torch.tensor([0, 1]), torch.tensor([0, 3]))  # last offset past the input
    check_raises(eb, w, torch.tensor([0.0, 1.0]), torch.tensor([0]))  # float indices
    check_raises(eb, w.long(), torch.tensor([0, 1]), torch.tensor([0]))  # integer weight
    check_raises(
        lambda w, i, o, p: F.embedding_bag(i, w, o, mode="max", per_sample_weights=p),
        w,
        torch.tensor([0, 1]),
        torch.tensor([0]),
        torch.ones(2),
    )
    check_raises(
        lambda w, i, o, p: torch._embedding_bag(w, i, o, False, 0, False, p),
        w,
        torch.tensor([0, 1]),
        torch.tensor([0]),
        torch.ones(3),
    )
    check_raises(lambda w, i, o: torch._embedding_bag(w, i, o, False, 3), w, torch.tensor([0, 1]), torch.tensor([0]))


# ---- upsampling: linear 1d, trilinear 3d, bicubic 2d ----

UPSAMPLE = [
    ("linear", (2, 3, 7), [dict(size=11), dict(scale_factor=2.5), dict(size=4), dict(scale_factor=0.6), dict(size=7)]),
    ("trilinear", (2, 2, 3, 4, 5), [dict(size=(5, 3, 8)), dict(scale_factor=(1.5, 2, 0.7)), dict(size=(3, 4, 5))]),
    (
        "bicubic",
        (2, 3, 5, 6),
        [
            dict(size=(9, 4)),
            dict(scale_factor=2.3),
            dict(scale_factor=(0.6, 1.7)),
            dict(size=(5, 6)),
            dict(size=(1, 1)),
        ],
    ),
]
UP_CASES = [(mode, shape, kw) for mode, shape, kws in UPSAMPLE for kw in kws]


@pytest.mark.parametrize("mode,shape,kw", UP_CASES, ids=str)
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("dtype", FLOATS)
def test_upsample(mode, shape, kw, align_corners, dtype):
    # recompute_scale_factor=False keeps the given scale, which changes the source index rule.
    extra = dict(recompute_scale_factor=False) if "scale_factor" in kw and not align_corners else {}
    fn = lambda x: F.interpolate(x, mode=mode, align_corners=align_corners, **kw, **extra)  # noqa: E731
    compare(fn, make(shape, dtype))
    compare(fn, make(shape, dtype), kind="strided")


def test_upsample_channels_last_and_bad_arguments():
    x = make((2, 3, 5, 6)).contiguous(memory_format=torch.channels_last)
    compare(lambda x: F.interpolate(x, size=(7, 9), mode="bicubic"), x)
    check_raises(lambda x: F.interpolate(x, size=(0, 3), mode="bicubic"), make((1, 2, 4, 4)))
    check_raises(lambda x: F.interpolate(x, size=5, mode="linear"), torch.ones(1, 2, 4, dtype=torch.long))
    check_raises(lambda x: torch._C._nn.upsample_bicubic2d(x, (3, 3), False), make((2, 4, 4)))


# ---- grid_sample ----

GRID = [
    (m, p, a)
    for m in ["bilinear", "nearest", "bicubic"]
    for p in ["zeros", "border", "reflection"]
    for a in [False, True]
]


@pytest.mark.parametrize("mode,padding_mode,align_corners", GRID, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_grid_sample(mode, padding_mode, align_corners, dtype):
    x = make((2, 3, 5, 7), dtype)
    # Points inside and outside [-1, 1] (padding rules), away from pixel edges for nearest.
    grid = (make((2, 4, 6, 2), dtype, seed=2) * 0.8).clamp(-1.6, 1.6)

    def fn(x, g):
        return F.grid_sample(
            x,
            g,
            mode=mode,
            padding_mode=padding_mode,
            align_corners=align_corners,
        )

    # float32: the grid gradient sums ~50 terms of magnitude ~10 (bicubic), so cancellation leaves ~1e-5 absolute.
    t = dict(rtol=1e-5, atol=1e-4) if dtype == torch.float32 else None
    compare(fn, x, grid, tols=t)
    compare(fn, x, grid, kind="strided", tols=t)
    # Only the input's gradient requested (output_mask[0]) and only the grid's.
    compare(fn, x, grid, grad_inputs=[0], tols=t)
    compare(fn, x, grid, grad_inputs=[1], tols=t)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("dtype", HALF)
def test_grid_sample_half_types(mode, dtype):
    # CPU's own half kernels are off by up to ~0.1 in bfloat16 bicubic: compare() uses CPU float32.
    x = make((2, 2, 6, 5), dtype)
    grid = (make((2, 3, 4, 2), dtype, seed=3) * 0.7).to(dtype)
    for padding_mode in ["zeros", "border", "reflection"]:

        def fn(x, g):
            return F.grid_sample(
                x,
                g,
                mode=mode,
                padding_mode=padding_mode,
                align_corners=False,
            )

        t = tol(dtype)
        # The grid gradient sums over channels and taps before the final rounding: a few units in the last place.
        compare(fn, x, grid, tols=dict(rtol=t["rtol"], atol=4 * t["atol"]))


def test_affine_grid_and_grid_sample_pipeline():
    theta = torch.tensor([[[0.9, -0.2, 0.1], [0.3, 1.1, -0.2]]], dtype=torch.float64)
    x = make((1, 2, 6, 6), torch.float64)
    compare(
        lambda x, t: F.grid_sample(x, F.affine_grid(t, (1, 2, 5, 4), align_corners=False), align_corners=False),
        x,
        theta,
    )


def test_grid_sample_bad_arguments():
    x, g = make((2, 3, 5, 5)), make((2, 4, 4, 2))
    check_raises(lambda x, g: F.grid_sample(x, g, align_corners=False), x, make((1, 4, 4, 2)))  # batch mismatch
    check_raises(lambda x, g: F.grid_sample(x, g, align_corners=False), x, make((2, 4, 4, 3)))  # last dim
    check_raises(lambda x, g: F.grid_sample(x, g, align_corners=False), make((2, 3, 0, 5)), g)  # empty spatial
    check_raises(lambda x, g: F.grid_sample(x, g, align_corners=False), x, g.double())  # dtype mismatch
    check_raises(lambda x, g: torch.grid_sampler_2d(x, g, 0, 0, False), x.long(), g.long())


@pytest.mark.parametrize("mode", ["bilinear", "bicubic", "linear", "trilinear"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16], ids=str)
def test_integer_interpolation_matches_cpu_through_the_fallback(mode, dtype):
    """The weighted modes compute in floating types only; an integer input once ran the
    float formula in the integer type, every weight truncated to 0, and bilinear uint8
    returned zeros. Integer inputs now go to the counted CPU fallback: CPU computes
    uint8 bilinear/bicubic its own way and raises NotImplementedError for the rest."""
    dims = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}[mode]
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 250, (2, 3) + (5,) * dims, generator=g).to(dtype)
    size = (4,) * dims
    previous = torch.oxide.get_fallback_mode()
    torch.oxide.set_fallback_mode("silent")
    try:
        try:
            expected = F.interpolate(x, size=size, mode=mode, align_corners=False)
        except NotImplementedError:
            with pytest.raises(NotImplementedError):
                F.interpolate(x.to("oxide"), size=size, mode=mode, align_corners=False)
            return
        before = sum(torch.oxide.fallback_stats().values())
        actual = F.interpolate(x.to("oxide"), size=size, mode=mode, align_corners=False)
        assert sum(torch.oxide.fallback_stats().values()) > before
    finally:
        torch.oxide.set_fallback_mode(previous)
    torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0)
