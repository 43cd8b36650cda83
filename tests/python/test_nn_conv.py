"""Native convolution (conv1d/2d/3d, conv_transpose1d/2d/3d) against CPU PyTorch, the oracle.

Every test runs with OXIDE_FALLBACK=error semantics (the `native_only` fixture): forward
and backward must reach the oxide kernels (convolution_overrideable and
convolution_backward_overrideable), never the CPU fallback. Outputs and the gradients of
input, weight and bias are compared across stride, padding (incl. "same"/"valid"),
dilation, groups (incl. depthwise), bias, dtypes, unbatched and non-contiguous inputs;
convolution_backward's output_mask; and bad shapes raise what CPU raises.
"""

import pytest
import torch
import torch.nn.functional as F

REFUSED = "has no native oxide kernel"  # the NotImplementedError of OXIDE_FALLBACK=error

TOL = {
    torch.float64: dict(rtol=1e-10, atol=1e-10),
    torch.float32: dict(rtol=1e-4, atol=1e-4),
    # Rounding of the inputs is shared; what differs is the accumulation order and where CPU rounds.
    torch.float16: dict(rtol=1e-2, atol=1e-2),
    torch.bfloat16: dict(rtol=4e-2, atol=4e-2),
}
FLOATS = list(TOL)


@pytest.fixture(autouse=True)
def _native(native_only):
    yield


def make(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


def strided(t):
    """The same values as a step-sliced (non-contiguous, non-dense) view on t's device."""
    big = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)
    big[..., ::2] = t
    return big[..., ::2]


def transposed_layout(t):
    """The same values with the last two dimensions stored transposed."""
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


def compare(fn, tensors, dtype, layout=None, backward=True):
    """Runs fn on CPU and oxide copies of `tensors` (None passes through), compares the
    result and, with `backward`, the gradients of every tensor argument."""
    tol = TOL[dtype]

    def leaves(device):
        out = []
        for t in tensors:
            if t is None:
                out.append(None)
                continue
            t = t.detach().to(device)
            if layout is not None and t.dim() >= 2:
                t = layout(t)
            out.append(t.requires_grad_(backward))
        return out

    cpu, ox = leaves("cpu"), leaves("oxide")
    if layout is not None:
        assert not all(t.is_contiguous() for t in ox if t is not None and t.dim() >= 2)
    expected, got = fn(*cpu), fn(*ox)
    assert got.device.type == "oxide" and got.dtype == expected.dtype
    # Half types: the oracle is the float64 result rounded once to the dtype. CPU's own
    # bfloat16 convolution rounds intermediates and, on AVX2 hosts, its depthwise 3-d
    # input gradient is off by 0.19 where oxide's (float32 accumulation) is off by 0.03.
    reference = cpu
    if dtype in (torch.float16, torch.bfloat16):
        reference = [None if t is None else t.detach().double().requires_grad_(backward) for t in cpu]
        expected = fn(*reference)
    torch.testing.assert_close(got.cpu(), expected.to(dtype), **tol)
    if not backward:
        return
    grad_out = make(got.shape, dtype, seed=99)
    want = torch.autograd.grad(expected, [t for t in reference if t is not None], grad_out.to(expected.dtype))
    have = torch.autograd.grad(got, [t for t in ox if t is not None], grad_out.to("oxide"))
    for name, h, w in zip("input weight bias".split(), have, want):
        assert h.device.type == "oxide", name
        torch.testing.assert_close(h.cpu(), w.to(dtype), **tol, msg=lambda m, name=name: f"grad {name}: {m}")


# (spatial size, kernel, stride, padding, dilation, groups, in, out, bias, output_padding)
CONFIGS = {
    "plain": (5, 3, 1, 0, 1, 1, 3, 4, True, 0),
    "stride_pad": (6, 3, 2, 1, 1, 1, 2, 3, False, 1),
    "dilated_groups": (7, 2, 1, 2, 2, 2, 4, 6, True, 0),
    "depthwise": (6, 3, 1, 1, 1, 4, 4, 8, True, 0),
    "pointwise": (4, 1, 1, 0, 1, 1, 5, 3, False, 0),
}
FN = {
    (1, False): F.conv1d,
    (2, False): F.conv2d,
    (3, False): F.conv3d,
    (1, True): F.conv_transpose1d,
    (2, True): F.conv_transpose2d,
    (3, True): F.conv_transpose3d,
}


def conv_case(dim, transposed, config, dtype, batch=2):
    size, k, stride, pad, dil, groups, cin, cout, bias, out_pad = CONFIGS[config]
    if dim == 3:
        size = max(size - 2, 3 if k == 1 else k * dil)
    x = make((batch, cin) + (size,) * dim, dtype, 1)
    wshape = (cin, cout // groups) if transposed else (cout, cin // groups)
    w = make(wshape + (k,) * dim, dtype, 2)
    b = make((cout,), dtype, 3) if bias else None
    kw = dict(stride=stride, padding=pad, dilation=dil, groups=groups)
    if transposed:
        kw["output_padding"] = out_pad
    fn = FN[(dim, transposed)]
    return (lambda x, w, b: fn(x, w, b, **kw)), [x, w, b]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "transposed"])
@pytest.mark.parametrize("dim", [1, 2, 3])
def test_convolution_forward_and_grads(dim, transposed, config, dtype):
    fn, tensors = conv_case(dim, transposed, config, dtype)
    compare(fn, tensors, dtype)


# Samples whose column matrix (in channels x taps x output positions) passes the
# kernel's cache block (BLOCK_ELEMENTS in crates/oxide-kernels/src/ops/nn/conv/mod.rs, 131072):
# forward and gradients are computed a block of output positions at a time, block
# edges falling inside an output row.
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    "shape,kw",
    [
        ((2, 16, 41, 37), dict(padding=1)),
        ((1, 16, 41, 75), dict(padding=1, stride=(1, 2))),
        ((1, 16, 48, 40), dict(padding=2, dilation=2, groups=2)),
    ],
    ids=["same", "strided", "dilated_groups"],
)
def test_samples_in_cache_sized_column_blocks(shape, kw, dtype):
    x = make(shape, dtype, 1)
    w = make((8, shape[1] // kw.get("groups", 1), 3, 3), dtype, 2)
    b = make((8,), dtype, 3)
    compare(lambda x, w, b: F.conv2d(x, w, b, **kw), [x, w, b], dtype)


@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "transposed"])
@pytest.mark.parametrize("dim", [1, 2, 3])
def test_unbatched_input(dim, transposed):
    fn, (x, w, b) = conv_case(dim, transposed, "stride_pad", torch.float32)
    compare(fn, [x[0], w, b], torch.float32)


@pytest.mark.parametrize("layout", [strided, transposed_layout], ids=["step_sliced", "transposed_strides"])
@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "transposed"])
def test_non_contiguous_operands(layout, transposed):
    fn, tensors = conv_case(2, transposed, "dilated_groups", torch.float32)
    compare(fn, tensors, torch.float32, layout=layout)


def test_channels_last_input():
    x = make((2, 3, 6, 5), torch.float32, 1)
    w = make((4, 3, 3, 3), torch.float32, 2)

    def fn(x, w):
        return F.conv2d(x.contiguous(memory_format=torch.channels_last), w, padding=1)

    compare(fn, [x, w], torch.float32)


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")
@pytest.mark.parametrize("padding", ["same", "valid"])
@pytest.mark.parametrize("dim,kernel,dilation", [(1, 3, 1), (2, 4, 1), (2, 3, 2), (3, 2, 1)])
def test_string_padding(dim, kernel, dilation, padding):
    # An even kernel ("same", kernel 4 / 2) needs asymmetric padding: PyTorch pads the input first.
    x = make((2, 3) + (7,) * dim, torch.float64, 1)
    w = make((4, 3) + (kernel,) * dim, torch.float64, 2)
    b = make((4,), torch.float64, 3)
    fn = FN[(dim, False)]
    compare(lambda x, w, b: fn(x, w, b, padding=padding, dilation=dilation), [x, w, b], torch.float64)


@pytest.mark.parametrize("module", ["Conv2d", "ConvTranspose2d", "Conv1d", "ConvTranspose3d"])
def test_nn_modules(module):
    torch.manual_seed(0)
    cls = getattr(torch.nn, module)
    dim = int(module[-2])
    m = cls(4, 6, 3, stride=2, padding=1, groups=2)
    mo = cls(4, 6, 3, stride=2, padding=1, groups=2).to("oxide")
    mo.load_state_dict(m.state_dict())
    x = make((2, 4) + (5,) * dim, torch.float32, 4)
    y, yo = m(x), mo(x.to("oxide"))
    torch.testing.assert_close(yo.cpu(), y, **TOL[torch.float32])
    y.square().sum().backward()
    yo.square().sum().backward()
    for (name, p), po in zip(m.named_parameters(), mo.parameters()):
        torch.testing.assert_close(po.grad.cpu(), p.grad, **TOL[torch.float32], msg=lambda s, n=name: f"{n}: {s}")


MASKS = [(True, True, True), (True, False, False), (False, True, False), (False, False, True), (False, True, True)]


@pytest.mark.parametrize("mask", MASKS, ids=lambda m: "".join("1" if v else "0" for v in m))
@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "transposed"])
@pytest.mark.parametrize("dim", [2, 3])
def test_convolution_backward_output_mask(dim, transposed, mask):
    cin, cout, groups = 4, 6, 2
    x = make((2, cin) + (5,) * dim, torch.float32, 1)
    w = make(((cin, cout // groups) if transposed else (cout, cin // groups)) + (3,) * dim, torch.float32, 2)
    stride, padding, dilation = [2] * dim, [1] * dim, [1] * dim
    output_padding = [1] * dim if transposed else [0] * dim
    y = torch.ops.aten.convolution(x, w, None, stride, padding, dilation, transposed, output_padding, groups)
    gy = make(y.shape, torch.float32, 3)

    def backward(gy, x, w):
        return torch.ops.aten.convolution_backward(
            gy, x, w, [cout], stride, padding, dilation, transposed, output_padding, groups, list(mask)
        )

    want = backward(gy, x, w)
    have = backward(gy.to("oxide"), x.to("oxide"), w.to("oxide"))
    for requested, h, wt in zip(mask, have, want):
        if not requested:
            # Only the requested gradients are computed (CPU's mkldnn path may return more).
            assert h is None
            continue
        assert h.device.type == "oxide"
        torch.testing.assert_close(h.cpu(), wt, **TOL[torch.float32])


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8], ids=str)
def test_integer_convolution(dtype):
    # CPU convolves integers (forward only; wrapping arithmetic): so does oxide.
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 4, (2, 4, 6, 5), generator=g, dtype=dtype)
    w = torch.randint(0, 3, (6, 2, 3, 3), generator=g, dtype=dtype)
    b = torch.randint(0, 5, (6,), generator=g, dtype=dtype)
    want = F.conv2d(x, w, b, stride=(2, 1), padding=1, groups=2)
    got = F.conv2d(x.to("oxide"), w.to("oxide"), b.to("oxide"), stride=(2, 1), padding=1, groups=2)
    assert got.dtype == dtype
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


def test_zero_batch():
    # _convolution's own empty path (no kernel call), kept native.
    x = torch.empty(0, 3, 5, 5)
    w = make((4, 3, 3, 3), torch.float32, 2)
    b = make((4,), torch.float32, 3)
    compare(lambda x, w, b: F.conv2d(x, w, b, padding=1), [x, w, b], torch.float32)


ERRORS = {
    # wrong channel count: the weight expects 4 input channels
    "channels": (lambda d: F.conv2d(torch.ones(1, 3, 5, 5, device=d), torch.ones(2, 4, 3, 3, device=d))),
    # groups do not divide the input channels
    "groups_in": (lambda d: F.conv2d(torch.ones(1, 5, 5, 5, device=d), torch.ones(4, 2, 3, 3, device=d), groups=2)),
    # groups do not divide the output channels
    "groups_out": (lambda d: F.conv2d(torch.ones(1, 4, 5, 5, device=d), torch.ones(3, 2, 3, 3, device=d), groups=2)),
    "transposed_groups": (
        lambda d: F.conv_transpose2d(torch.ones(1, 3, 5, 5, device=d), torch.ones(3, 2, 3, 3, device=d), groups=2)
    ),
    "kernel_too_large": (lambda d: F.conv2d(torch.ones(1, 1, 2, 2, device=d), torch.ones(1, 1, 3, 3, device=d))),
    "bias_shape": (
        lambda d: F.conv1d(torch.ones(1, 2, 5, device=d), torch.ones(3, 2, 3, device=d), torch.ones(4, device=d))
    ),
    "weight_dims": (lambda d: F.conv2d(torch.ones(1, 2, 5, 5, device=d), torch.ones(3, 2, 3, device=d))),
    "output_padding": (
        lambda d: F.conv_transpose1d(
            torch.ones(1, 2, 5, device=d), torch.ones(2, 3, 3, device=d), stride=2, output_padding=2
        )
    ),
    "dtype_mismatch": (
        lambda d: F.conv1d(torch.ones(1, 2, 5, device=d), torch.ones(3, 2, 3, device=d, dtype=torch.float64))
    ),
    "bool": (
        lambda d: F.conv1d(
            torch.ones(1, 2, 5, device=d, dtype=torch.bool), torch.ones(3, 2, 3, device=d, dtype=torch.bool)
        )
    ),
    "negative_padding": (lambda d: F.conv1d(torch.ones(1, 2, 5, device=d), torch.ones(3, 2, 3, device=d), padding=-1)),
    "zero_spatial": (lambda d: F.conv1d(torch.ones(1, 2, 0, device=d), torch.ones(3, 2, 3, device=d))),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_errors_match_cpu(case):
    fn = ERRORS[case]
    with pytest.raises(Exception) as cpu_error:
        fn("cpu")
    with pytest.raises(Exception) as oxide_error:
        fn("oxide")
    # A kernel refusing a dtype that CPU lacks too raises NotImplementedError natively.
    dtype_refused = "for these dtypes" in str(oxide_error.value) and isinstance(cpu_error.value, NotImplementedError)
    assert REFUSED not in str(oxide_error.value) or dtype_refused
    assert type(oxide_error.value) is type(cpu_error.value), (cpu_error.value, oxide_error.value)
