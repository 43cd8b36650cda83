"""Neural-network operators against CPU PyTorch: activations, pointwise losses,
softmax / log_softmax, nll_loss (1-d and 2-d), cross_entropy, multilabel_margin_loss,
and the batch, layer, group and RMS norms; forward values, input and parameter
gradients, running statistics, in-place forms, and the errors CPU raises for bad
arguments.

Every test runs under OXIDE_FALLBACK=error (`native_only`), so an operator that would
silently run on the CPU fallback fails it.
"""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

FLOATS = [torch.float32, torch.float64, torch.bfloat16]


@pytest.fixture(autouse=True)
def _native(native_only):
    yield


def tol(dtype):
    if dtype == torch.bfloat16:
        return dict(rtol=2e-2, atol=2e-2)
    if dtype == torch.float16:
        return dict(rtol=1e-2, atol=1e-2)
    return {}


def dname(d):
    return str(d).removeprefix("torch.")


def leaves(args, device):
    """Copies of the CPU arguments on `device`; floating tensors become grad leaves."""
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            b = a.detach().to(device)
            if a.is_floating_point() and a.requires_grad:
                b.requires_grad_(True)
            out.append(b)
        else:
            out.append(a)
    return out


def compare(fn, *args, grad=True, **tolerances):
    """Runs fn on CPU and on oxide; compares outputs and, if `grad`, the gradients of
    every floating leaf for a fixed random output gradient."""
    cpu_args = leaves(args, "cpu")
    ox_args = leaves(args, "oxide")
    expected = fn(*cpu_args)
    actual = fn(*ox_args)
    expected_t = expected if isinstance(expected, tuple) else (expected,)
    actual_t = actual if isinstance(actual, tuple) else (actual,)
    for e, a in zip(expected_t, actual_t):
        assert a.device.type == "oxide"
        torch.testing.assert_close(a.cpu(), e, equal_nan=True, **tolerances)
    if not grad:
        return
    outs = [(e, a) for e, a in zip(expected_t, actual_t) if e.requires_grad]
    g = torch.Generator().manual_seed(7)
    grads = [torch.randn(e.shape, generator=g, dtype=torch.float64).to(e.dtype) for e, _ in outs]
    torch.autograd.backward([e for e, _ in outs], grads)
    torch.autograd.backward([a for _, a in outs], [x.to("oxide") for x in grads])
    for c, o in zip(cpu_args, ox_args):
        if isinstance(c, torch.Tensor) and c.requires_grad:
            assert o.grad is not None, "no gradient reached an oxide input"
            torch.testing.assert_close(o.grad.cpu(), c.grad, equal_nan=True, **tolerances)


def randn(*shape, dtype=torch.float32, seed=0, grad=True, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    t = (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)
    return t.requires_grad_(grad)


# ---------------------------------------------------------------------------------------
# Activations
# ---------------------------------------------------------------------------------------

ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "mish": F.mish,
    "softplus": lambda x: F.softplus(x, beta=2.0, threshold=3.0),
    "elu": lambda x: F.elu(x, alpha=0.5),
    "selu": F.selu,
    "celu": lambda x: F.celu(x, alpha=1.5),
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2),
    "hardsigmoid": F.hardsigmoid,
    "hardswish": F.hardswish,
    "hardtanh": lambda x: F.hardtanh(x, -0.5, 0.75),
    "relu6": F.relu6,
    "threshold": lambda x: F.threshold(x, 0.25, -2.0),
    "hardshrink": lambda x: F.hardshrink(x, 0.3),
    "softshrink": lambda x: F.softshrink(x, 0.3),
    "logsigmoid": F.logsigmoid,
    "tanhshrink": F.tanhshrink,
    "glu": lambda x: F.glu(x, dim=-1),
    "glu_dim0": lambda x: F.glu(x, dim=0),
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
}


def activation_input(dtype):
    # Boundary values of the piecewise activations sit in the first row.
    edges = torch.tensor([-3.0, 3.0, 0.0, 0.25, -0.3, 0.3, -0.5, 0.75, 6.0, 30.0, -30.0, 1.5], dtype=torch.float64)
    x = torch.cat([edges.view(1, 12), randn(5, 12, dtype=torch.float64, grad=False, scale=3.0)])
    return x.to(dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=dname)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation_forward_backward(name, dtype):
    x = activation_input(dtype).requires_grad_(True)
    compare(ACTIVATIONS[name], x, **tol(dtype))


@pytest.mark.parametrize("name", ["gelu", "silu", "leaky_relu", "hardswish", "elu", "threshold"])
def test_activation_on_transposed_input(name):
    x = randn(12, 6).t().detach().requires_grad_(True)
    assert not x.is_contiguous()
    compare(ACTIVATIONS[name], x)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: F.relu_(x),
        lambda x: F.elu_(x),
        lambda x: F.leaky_relu_(x, 0.1),
        lambda x: F.hardtanh_(x, -1, 1),
        lambda x: F.silu(x, inplace=True),
        lambda x: F.hardswish(x, inplace=True),
        lambda x: F.gelu(x).add_(1),
        lambda x: F.threshold_(x, 0.1, 5.0),
        lambda x: F.mish(x, inplace=True),
    ],
    ids=["relu_", "elu_", "leaky_relu_", "hardtanh_", "silu_", "hardswish_", "gelu", "threshold_", "mish_"],
)
def test_inplace_activation_on_a_view(fn):
    base_c = randn(4, 6, grad=False)
    base_o = base_c.to("oxide")
    fn(base_c[:, 1:4])
    fn(base_o[:, 1:4])
    torch.testing.assert_close(base_o.cpu(), base_c)


def test_prelu_per_channel_weight():
    x = randn(3, 4, 5)
    w = torch.tensor([0.25, -0.5, 1.5, 0.0], requires_grad=True)
    compare(F.prelu, x, w)


def test_integer_threshold_matches_cpu():
    x = torch.arange(-5, 5, dtype=torch.int32)
    compare(lambda t: F.threshold(t, 1, 7), x, grad=False)


@pytest.mark.parametrize("case", ["gelu approximate", "softshrink lambda", "glu odd", "celu alpha 0"])
def test_activation_argument_errors_match_cpu(case):
    x = randn(3, 5, grad=False)
    fn = {
        "gelu approximate": lambda t: F.gelu(t, approximate="bad"),
        "softshrink lambda": lambda t: F.softshrink(t, -1.0),
        "glu odd": lambda t: F.glu(t, -1),
        "celu alpha 0": lambda t: F.celu(t, 0.0),
    }[case]
    with pytest.raises(Exception) as cpu_err:
        fn(x)
    with pytest.raises(type(cpu_err.value)):
        fn(x.to("oxide"))


# ---------------------------------------------------------------------------------------
# Softmax family
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS, ids=dname)
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax(log, dim, dtype):
    f = F.log_softmax if log else F.softmax
    x = randn(3, 4, 5, dtype=dtype, scale=4.0)
    compare(lambda t: f(t, dim), x, **tol(dtype))


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_edge_layouts(log):
    f = F.log_softmax if log else F.softmax
    compare(lambda t: f(t, 0), randn(()))  # 0-dim
    compare(lambda t: f(t, 1), randn(0, 3))  # empty
    compare(lambda t: f(t, 0), randn(4, 6).t())  # transposed input
    big = torch.tensor([[1000.0, 0.0, -1000.0], [float("-inf"), 0.0, 1.0]], requires_grad=True)
    compare(lambda t: f(t, 1), big)  # stability, -inf entries
    compare(lambda t: f(t, 1, dtype=torch.float64), randn(2, 5))  # dtype= argument


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_half_to_float(log):
    # CPU refuses half_to_float (a CUDA feature); the oracle is the float32 softmax of the upcast input.
    op = torch._log_softmax if log else torch._softmax
    x = randn(3, 7, dtype=torch.float16, grad=False)
    out = op(x.to("oxide"), 1, True)
    assert out.dtype == torch.float32
    ref = op(x.float(), 1, False)
    torch.testing.assert_close(out.cpu(), ref)
    g = torch.randn(3, 7)
    grad_in = (
        torch.ops.aten._softmax_backward_data(g.to("oxide"), out, 1, torch.bfloat16)
        if not log
        else torch.ops.aten._log_softmax_backward_data(g.to("oxide"), out, 1, torch.bfloat16)
    )
    ref_grad = (torch.ops.aten._log_softmax_backward_data if log else torch.ops.aten._softmax_backward_data)(
        g, ref, 1, torch.float32
    )
    # The grad_input dtype is whatever PyTorch's meta function picks (float32 in 2.15); the values must agree.
    torch.testing.assert_close(grad_in.cpu().float(), ref_grad, **tol(torch.float16))


def test_softmax_out_into_a_strided_tensor():
    # CPU's kernel writes a non-contiguous out= as if it were contiguous, so the oracle is the functional result.
    x = randn(4, 5, grad=False)
    out_o = torch.zeros(5, 4, device="oxide").t()
    torch._softmax(x.to("oxide"), 1, False, out=out_o)
    torch.testing.assert_close(out_o.cpu(), torch.softmax(x, 1))


# ---------------------------------------------------------------------------------------
# Losses
# ---------------------------------------------------------------------------------------

REDUCTIONS = ["mean", "sum", "none"]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("loss", ["mse", "l1", "smooth_l1", "smooth_l1_beta0", "huber"])
def test_regression_losses(loss, reduction):
    f = {
        "mse": F.mse_loss,
        "l1": F.l1_loss,
        "smooth_l1": lambda a, b, reduction: F.smooth_l1_loss(a, b, reduction=reduction, beta=0.5),
        "smooth_l1_beta0": lambda a, b, reduction: F.smooth_l1_loss(a, b, reduction=reduction, beta=0.0),
        "huber": lambda a, b, reduction: F.huber_loss(a, b, reduction=reduction, delta=0.7),
    }[loss]
    a, b = randn(4, 6, seed=1), randn(4, 6, seed=2)
    compare(lambda x, y: f(x, y, reduction=reduction), a, b)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_cross_entropy(reduction):
    p = torch.rand(5, 3, generator=torch.Generator().manual_seed(3)).clamp(0.01, 0.99).requires_grad_(True)
    y = torch.rand(5, 3, generator=torch.Generator().manual_seed(4))
    w = torch.rand(5, 3, generator=torch.Generator().manual_seed(5))
    compare(lambda a, b: F.binary_cross_entropy(a, b, reduction=reduction), p, y)
    compare(lambda a, b, c: F.binary_cross_entropy(a, b, weight=c, reduction=reduction), p, y, w)
    edges = torch.tensor([0.0, 1.0, 0.5, 1.0], requires_grad=True)
    compare(lambda a, b: F.binary_cross_entropy(a, b, reduction=reduction), edges, torch.tensor([0.0, 1.0, 1.0, 0.0]))


@pytest.mark.usefixtures("launch_blocking")  # a data-dependent kernel check, compared at the call
def test_binary_cross_entropy_rejects_probabilities_outside_unit_interval():
    bad = torch.tensor([0.5, 1.5])
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        F.binary_cross_entropy(bad.to("oxide"), torch.ones(2, device="oxide"))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_bce_with_logits_and_kl_div(reduction):
    x, y = randn(4, 5, seed=6), torch.rand(4, 5, generator=torch.Generator().manual_seed(7))
    pw = torch.tensor([1.0, 2.0, 0.5, 1.0, 3.0])
    compare(lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction=reduction), x, y)
    compare(lambda a, b, c: F.binary_cross_entropy_with_logits(a, b, pos_weight=c, reduction=reduction), x, y, pw)
    logp = randn(4, 5, seed=8)
    compare(lambda a, b: F.kl_div(F.log_softmax(a, 1), b, reduction=reduction), logp, F.softmax(y, 1))
    compare(
        lambda a, b: F.kl_div(F.log_softmax(a, 1), b, reduction=reduction, log_target=True), logp, F.log_softmax(y, 1)
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=dname)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_nll_loss(weighted, reduction, dtype):
    x = randn(6, 4, dtype=dtype)
    t = torch.tensor([0, 3, 1, -100, 2, 3])
    w = torch.tensor([0.5, 2.0, 1.0, 0.25], dtype=dtype) if weighted else None
    compare(
        lambda a: F.nll_loss(
            F.log_softmax(a, 1), t.to(a.device), weight=None if w is None else w.to(a.device), reduction=reduction
        ),
        x,
    )


def test_nll_loss_single_sample_and_ignore_index():
    x = randn(5)
    compare(lambda a: F.nll_loss(F.log_softmax(a, 0), torch.tensor(2, device=a.device)), x)
    x2 = randn(3, 4)
    compare(lambda a: F.nll_loss(a, torch.tensor([1, 1, 2], device=a.device), ignore_index=1), x2)
    # Every target ignored: mean is 0/0, NaN on CPU too.
    compare(lambda a: F.nll_loss(a, torch.tensor([1, 1, 1], device=a.device), ignore_index=1), x2)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_nll_loss2d_and_spatial_cross_entropy(reduction):
    x = randn(2, 3, 4, 5)
    t = torch.randint(0, 3, (2, 4, 5), generator=torch.Generator().manual_seed(1))
    t[0, 0, 0] = -100
    w = torch.tensor([1.0, 0.5, 2.0])
    compare(lambda a: F.nll_loss(F.log_softmax(a, 1), t.to(a.device), weight=w.to(a.device), reduction=reduction), x)
    compare(lambda a: F.cross_entropy(a, t.to(a.device), reduction=reduction), x)
    # 3-d input (N, C, L) goes through nll_loss2d on a reshaped view
    compare(lambda a: F.cross_entropy(a, t[:, 0].to(a.device), reduction=reduction), randn(2, 3, 5))


def test_cross_entropy_label_smoothing_and_probability_targets():
    x = randn(5, 4)
    t = torch.tensor([0, 1, 2, 3, 1])
    compare(lambda a: F.cross_entropy(a, t.to(a.device), label_smoothing=0.1), x)
    probs = torch.softmax(randn(5, 4, grad=False, seed=9), 1)
    compare(lambda a: F.cross_entropy(a, probs.to(a.device), label_smoothing=0.2), x)


@pytest.mark.usefixtures("launch_blocking")  # a data-dependent kernel check, compared at the call
def test_nll_loss_errors_match_cpu():
    x = torch.randn(3, 4).log_softmax(1)
    bad = torch.tensor([0, 4, 1])
    with pytest.raises(IndexError, match="out of bounds"):
        F.nll_loss(x.to("oxide"), bad.to("oxide"))
    with pytest.raises(Exception) as cpu_err:
        F.nll_loss(x, torch.tensor([0, 1]))
    with pytest.raises(type(cpu_err.value)):
        F.nll_loss(x.to("oxide"), torch.tensor([0, 1], device="oxide"))


# Targets of a (6, 5) multilabel_margin_loss: each row's class list ends at its first
# negative entry (later entries are ignored but must still be in [-1, C)).
MLM_TARGETS = torch.tensor(
    [
        [3, 0, -1, 1, 2],  # two targets, then the terminator
        [-1, 1, 2, 3, 4],  # no targets
        [4, 3, 2, 1, 0],  # every class is a target
        [1, 1, 2, -1, 0],  # a repeated target
        [0, -1, -1, -1, -1],
        [2, 4, 1, 0, -1],
    ]
)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=dname)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_multilabel_margin_loss(reduction, dtype):
    x = randn(6, 5, dtype=dtype, scale=0.7)
    compare(lambda a: F.multilabel_margin_loss(a, MLM_TARGETS.to(a.device), reduction=reduction), x)
    # one sample: a 1-d input (the output is 0-d even without reduction)
    for row in range(4):
        compare(
            lambda a: F.multilabel_margin_loss(a, MLM_TARGETS[row].to(a.device), reduction=reduction),
            randn(5, dtype=dtype, seed=row, scale=0.7),
        )


@pytest.mark.parametrize("reduction", [0, 1, 2], ids=["none", "mean", "sum"])
def test_multilabel_margin_loss_aten_ops(reduction):
    """The four registered overloads, is_target included, against CPU's."""
    x = randn(6, 5, seed=3, grad=False)
    fwd = torch.ops.aten.multilabel_margin_loss_forward
    bwd = torch.ops.aten.multilabel_margin_loss_backward
    compare(lambda a: fwd(a, MLM_TARGETS.to(a.device), reduction), x, grad=False)
    compare(lambda a: fwd(a.reshape(()), torch.tensor(0, device=a.device), reduction), x[0, :1], grad=False)

    def out_variant(a):
        # a strided output: the kernel's contiguous result is copied into it
        out = torch.empty(12, dtype=a.dtype, device=a.device)[::2]
        is_target = torch.empty(0, dtype=a.dtype, device=a.device)
        fwd.output(a, MLM_TARGETS.to(a.device), reduction, output=out, is_target=is_target)
        return out, is_target

    compare(out_variant, x, grad=False)

    def backward(a, grad_output):
        _, is_target = fwd(a, MLM_TARGETS.to(a.device), reduction)
        return bwd(grad_output, a, MLM_TARGETS.to(a.device), reduction, is_target)

    g = randn(6, seed=4, grad=False) if reduction == 0 else randn((), seed=4, grad=False)
    compare(backward, x, g, grad=False)
    # without reduction CPU also takes a 0-d grad_output, applied to every sample
    compare(backward, x, randn((), seed=5, grad=False), grad=False)

    def backward_out(a, grad_output):
        _, is_target = fwd(a, MLM_TARGETS.to(a.device), reduction)
        grad_input = torch.empty(0, dtype=a.dtype, device=a.device)
        return bwd.grad_input(grad_output, a, MLM_TARGETS.to(a.device), reduction, is_target, grad_input=grad_input)

    compare(backward_out, x, g, grad=False)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=dname)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_multilabel_margin_loss_half(reduction, dtype):
    # CPU has no float16/bfloat16 loop for this loss: the reference is CPU's float32 on
    # the same values. Quarters keep every hinge exact in the half types too.
    values = torch.randint(-8, 9, (6, 5), generator=torch.Generator().manual_seed(6)) / 4
    expected_x = values.clone().requires_grad_(True)
    expected = F.multilabel_margin_loss(expected_x, MLM_TARGETS, reduction=reduction)
    x = values.to(dtype).to("oxide").requires_grad_(True)
    actual = F.multilabel_margin_loss(x, MLM_TARGETS.to("oxide"), reduction=reduction)
    assert actual.dtype == dtype
    torch.testing.assert_close(actual.cpu(), expected.detach().to(dtype), **tol(dtype))
    # A 0-d gradient for mean and sum (randn needs a shape); quarters again, exact in the half types.
    grad = randn(*expected.shape, seed=7, grad=False) if expected.dim() else torch.tensor(0.75)
    expected.backward(grad)
    actual.backward(grad.to(dtype).to("oxide"))
    torch.testing.assert_close(x.grad.cpu(), expected_x.grad.to(dtype), **tol(dtype))


@pytest.mark.usefixtures("launch_blocking")  # a data-dependent kernel check, compared at the call
def test_multilabel_margin_loss_errors_match_cpu():
    x = torch.randn(2, 3)
    fwd = torch.ops.aten.multilabel_margin_loss_forward
    bwd = torch.ops.aten.multilabel_margin_loss_backward

    def same_error(fn, *args):
        with pytest.raises(Exception) as cpu_err:
            fn(*args)
        with pytest.raises(Exception) as oxide_err:
            fn(*[a.to("oxide") if isinstance(a, torch.Tensor) else a for a in args])
        assert type(oxide_err.value) is type(cpu_err.value), oxide_err.value
        assert str(cpu_err.value).splitlines()[0] in str(oxide_err.value)

    # a class index >= C, or < -1 (also after a row's terminator)
    for bad in ([[0, 3, -1], [1, -1, 0]], [[0, -1, -2], [1, -1, 0]], [[-2, 0, 0], [1, -1, 0]]):
        same_error(F.multilabel_margin_loss, x, torch.tensor(bad))
        same_error(bwd, torch.tensor(1.0), x, torch.tensor(bad), 1, torch.zeros(2, 3))
    same_error(F.multilabel_margin_loss, x, torch.zeros(3, 2, dtype=torch.long))
    same_error(F.multilabel_margin_loss, x, torch.zeros(2, 3, dtype=torch.int32))
    same_error(F.multilabel_margin_loss, torch.randn(2, 0), torch.zeros(2, 0, dtype=torch.long))
    t = torch.tensor([[0, -1, 0], [2, 1, -1]])
    _, is_target = fwd(x, t, 1)
    same_error(bwd, torch.tensor(1.0), x, t, 1, is_target * 2)
    same_error(bwd, torch.tensor(1.0), x, t, 1, is_target[:1])
    same_error(bwd, torch.ones(3), x, t, 0, is_target)


# ---------------------------------------------------------------------------------------
# Normalisation
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5), (2, 3, 4, 4)], ids=str)
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_batch_norm(affine, shape, training):
    x = randn(*shape)
    c = shape[1]
    w = randn(c, seed=1) if affine else None
    b = randn(c, seed=2) if affine else None
    rm_c, rv_c = torch.linspace(-1, 1, c), torch.linspace(0.5, 2, c)
    rm_o, rv_o = rm_c.to("oxide"), rv_c.to("oxide")

    def fn(t, *params):
        wb = params if affine else (None, None)
        rm, rv = (rm_c, rv_c) if t.device.type == "cpu" else (rm_o, rv_o)
        return F.batch_norm(t, rm, rv, *wb, training=training, momentum=0.3, eps=1e-4)

    compare(fn, x, *((w, b) if affine else ()))
    torch.testing.assert_close(rm_o.cpu(), rm_c)
    torch.testing.assert_close(rv_o.cpu(), rv_c)


def test_batch_norm_module_channels_last_and_no_running_stats():
    m_c = torch.nn.BatchNorm2d(3)
    m_o = torch.nn.BatchNorm2d(3).oxide()
    x = randn(2, 3, 5, 5).detach().contiguous(memory_format=torch.channels_last).requires_grad_(True)
    compare(lambda t: (m_c if t.device.type == "cpu" else m_o)(t), x)
    torch.testing.assert_close(m_o.running_var.cpu(), m_c.running_var)
    no_stats_c = torch.nn.BatchNorm1d(4, track_running_stats=False)
    no_stats_o = torch.nn.BatchNorm1d(4, track_running_stats=False).oxide()
    compare(lambda t: (no_stats_c if t.device.type == "cpu" else no_stats_o)(t), randn(5, 4))
    compare(lambda t: F.instance_norm(t), randn(2, 3, 6))


@pytest.mark.parametrize("dtype", FLOATS, ids=dname)
@pytest.mark.parametrize("normalized", [(5,), (4, 5)], ids=str)
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_layer_norm(affine, normalized, dtype):
    x = randn(3, 4, 5, dtype=dtype)
    params = (randn(*normalized, dtype=dtype, seed=1), randn(*normalized, dtype=dtype, seed=2)) if affine else ()
    compare(lambda t, *p: F.layer_norm(t, normalized, *p, eps=1e-5), x, *params, **tol(dtype))


def test_layer_norm_errors_match_cpu():
    x = randn(3, 4, grad=False)
    with pytest.raises(RuntimeError, match="normalized_shape"):
        F.layer_norm(x.to("oxide"), (5,))


@pytest.mark.parametrize("groups", [1, 2, 4])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_group_norm(affine, groups):
    x = randn(2, 4, 3, 3)
    params = (randn(4, seed=1), randn(4, seed=2)) if affine else ()
    compare(lambda t, *p: F.group_norm(t, groups, *p), x, *params)


def test_group_norm_rejects_indivisible_groups():
    with pytest.raises(RuntimeError):
        F.group_norm(torch.randn(2, 4, 3, device="oxide"), 3)


def test_rms_norm():
    compare(lambda t, w: F.rms_norm(t, (6,), w), randn(3, 6), randn(6, seed=3))
    compare(lambda t: F.rms_norm(t, (2, 6)), randn(3, 2, 6))


# ---------------------------------------------------------------------------------------
# Recurrent cells
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_recurrent_layers_forward_backward(kind, bias):
    torch.manual_seed(0)
    layer_c = getattr(torch.nn, kind)(4, 5, num_layers=2, bias=bias, batch_first=True)
    layer_o = getattr(torch.nn, kind)(4, 5, num_layers=2, bias=bias, batch_first=True)
    layer_o.load_state_dict(layer_c.state_dict())
    layer_o = layer_o.oxide()
    x = randn(3, 6, 4)
    compare(lambda t: (layer_c if t.device.type == "cpu" else layer_o)(t)[0], x)
    for (name, pc), po in zip(layer_c.named_parameters(), layer_o.parameters()):
        torch.testing.assert_close(po.grad.cpu(), pc.grad, msg=name)


def test_lstm_cell_with_state():
    torch.manual_seed(1)
    cell_c = torch.nn.LSTMCell(3, 4)
    cell_o = torch.nn.LSTMCell(3, 4)
    cell_o.load_state_dict(cell_c.state_dict())
    cell_o = cell_o.oxide()
    x, h, c = randn(2, 3), randn(2, 4, seed=1), randn(2, 4, seed=2)
    compare(lambda a, b, d: (cell_c if a.device.type == "cpu" else cell_o)(a, (b, d)), x, h, c)


ALL_FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def opmath(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def strided_operands(rows, cols, dtype, seed, device):
    """Three [rows, cols] views on `device` with different strides: transposed, every
    other column, a column slice (the same values for every device)."""
    base = lambda r, c, k: randn(r, c, dtype=dtype, seed=seed + k, grad=False).to(device)  # noqa: E731
    a = base(cols, rows, 0).t()
    b = base(rows, 2 * cols, 1)[:, ::2]
    c = base(rows, 3 * cols, 2)[:, cols : 2 * cols]
    assert not (a.is_contiguous() or b.is_contiguous() or c.is_contiguous())
    return a, b, c


def lstm_cell_math(ig, hg, cx, b_ih, b_hh):
    """The fused LSTM cell in CPU ops: (hy, cy, workspace of activated gates)."""
    gates = ig + hg
    for b in (b_ih, b_hh):
        if b is not None:
            gates = gates + b
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    return o * cy.tanh(), cy, torch.cat([i, f, g, o], 1)


def gru_cell_math(ig, hg, hx, b_ih, b_hh):
    """The fused GRU cell in CPU ops: (hy, workspace r, z, n, hx, hn)."""
    ig = ig if b_ih is None else ig + b_ih
    hg = hg if b_hh is None else hg + b_hh
    xr, xz, xn = ig.chunk(3, 1)
    hr, hz, hn = hg.chunk(3, 1)
    r, z = (xr + hr).sigmoid(), (xz + hz).sigmoid()
    n = (xn + r * hn).tanh()
    return n + z * (hx - n), torch.cat([r, z, n, hx, hn], 1)


def on_cpu_in_opmath(fn, dtype, *args):
    """`fn` on CPU copies of `args` in the operator's compute type, results rounded to `dtype` once."""
    up = [None if a is None else a.detach().cpu().to(opmath(dtype)) for a in args]
    return tuple(r.to(dtype) for r in fn(*up))


@pytest.mark.parametrize("dtype", ALL_FLOATS, ids=dname)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_fused_lstm_cell_forward_and_backward_match_cpu_math(dtype, bias):
    B, H = 5, 7
    ig, hg, _ = strided_operands(B, 4 * H, dtype, 10, "cpu")
    cx, grad_hy, grad_cy = strided_operands(B, H, dtype, 20, "cpu")
    b_ih = randn(4 * H, dtype=dtype, seed=30, grad=False) if bias else None
    b_hh = randn(4 * H, dtype=dtype, seed=31, grad=False) if bias else None
    views = dict(
        zip(
            [id(t) for t in (ig, hg, cx, grad_hy, grad_cy)],
            strided_operands(B, 4 * H, dtype, 10, "oxide")[:2] + strided_operands(B, H, dtype, 20, "oxide"),
        )
    )
    # The strided oxide views of the CPU operands; other tensors are copied.
    ox = lambda t: None if t is None else views.get(id(t), t.to("oxide"))  # noqa: E731
    hy, cy, ws = torch.ops.aten._thnn_fused_lstm_cell(ox(ig), ox(hg), ox(cx), ox(b_ih), ox(b_hh))
    want = on_cpu_in_opmath(lstm_cell_math, dtype, ig, hg, cx, b_ih, b_hh)
    for got, exp in zip((hy, cy, ws), want):
        assert got.dtype == dtype and got.device.type == "oxide"
        torch.testing.assert_close(got.cpu(), exp, **tol(dtype))

    # Backward from the CPU workspace (so both sides read the same rounded gates).
    cy_c, ws_c = want[1], want[2]

    def backward_math(ghy, gcy, cx, cy, ws):
        i, f, g, o = ws.chunk(4, 1)
        t = cy.tanh()
        gcx = ghy * o * (1 - t * t) + gcy
        gates = torch.cat(
            [gcx * g * i * (1 - i), gcx * cx * f * (1 - f), gcx * i * (1 - g * g), ghy * t * o * (1 - o)], 1
        )
        return gates, gcx * f, gates.sum(0)

    for ghy, gcy in ((grad_hy, grad_cy), (grad_hy, None), (None, grad_cy)):
        got = torch.ops.aten._thnn_fused_lstm_cell_backward_impl(ox(ghy), ox(gcy), ox(cx), ox(cy_c), ox(ws_c), bias)
        zero = torch.zeros(B, H, dtype=dtype)
        exp = on_cpu_in_opmath(
            backward_math, dtype, zero if ghy is None else ghy, zero if gcy is None else gcy, cx, cy_c, ws_c
        )
        torch.testing.assert_close(got[0].cpu(), exp[0], **tol(dtype))
        torch.testing.assert_close(got[1].cpu(), exp[1], **tol(dtype))
        if bias:
            torch.testing.assert_close(got[2].cpu(), exp[2], **tol(dtype))
        else:
            assert got[2] is None


@pytest.mark.parametrize("dtype", ALL_FLOATS, ids=dname)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_fused_gru_cell_forward_and_backward_match_cpu_math(dtype, bias):
    B, H = 6, 5
    ig, hg, _ = strided_operands(B, 3 * H, dtype, 40, "cpu")
    hx, grad_hy, _ = strided_operands(B, H, dtype, 50, "cpu")
    b_ih = randn(3 * H, dtype=dtype, seed=60, grad=False) if bias else None
    b_hh = randn(3 * H, dtype=dtype, seed=61, grad=False) if bias else None
    views = dict(
        zip(
            [id(t) for t in (ig, hg, hx, grad_hy)],
            strided_operands(B, 3 * H, dtype, 40, "oxide")[:2] + strided_operands(B, H, dtype, 50, "oxide")[:2],
        )
    )
    ox = lambda t: None if t is None else views.get(id(t), t.to("oxide"))  # noqa: E731
    hy, ws = torch.ops.aten._thnn_fused_gru_cell(ox(ig), ox(hg), ox(hx), ox(b_ih), ox(b_hh))
    want = on_cpu_in_opmath(gru_cell_math, dtype, ig, hg, hx, b_ih, b_hh)
    for got, exp in zip((hy, ws), want):
        assert got.dtype == dtype and got.device.type == "oxide"
        torch.testing.assert_close(got.cpu(), exp, **tol(dtype))

    def backward_math(ghy, ws):
        r, z, n, hx, hn = ws.chunk(5, 1)
        gn = ghy * (1 - z) * (1 - n * n)
        gz = ghy * (hx - n) * z * (1 - z)
        gr = gn * hn * r * (1 - r)
        gi, gh = torch.cat([gr, gz, gn], 1), torch.cat([gr, gz, gn * r], 1)
        return gi, gh, ghy * z, gi.sum(0), gh.sum(0)

    got = torch.ops.aten._thnn_fused_gru_cell_backward(ox(grad_hy), ox(want[1]), bias)
    exp = on_cpu_in_opmath(backward_math, dtype, grad_hy, want[1])
    for k in range(5 if bias else 3):
        torch.testing.assert_close(got[k].cpu(), exp[k], **tol(dtype), msg=f"output {k}")


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_recurrent_layers_float64_with_initial_state_and_state_gradients(kind):
    torch.manual_seed(2)
    layer_c = getattr(torch.nn, kind)(3, 4, num_layers=2, dtype=torch.float64)
    layer_o = getattr(torch.nn, kind)(3, 4, num_layers=2, dtype=torch.float64)
    layer_o.load_state_dict(layer_c.state_dict())
    layer_o = layer_o.oxide()
    x = randn(5, 2, 3, dtype=torch.float64)
    h0 = randn(2, 2, 4, dtype=torch.float64, seed=1)
    if kind == "LSTM":
        c0 = randn(2, 2, 4, dtype=torch.float64, seed=2)
        compare(lambda t, h, c: (layer_c if t.device.type == "cpu" else layer_o)(t, (h, c))[0], x, h0, c0)
    else:
        compare(lambda t, h: (layer_c if t.device.type == "cpu" else layer_o)(t, h)[0], x, h0)
    for (name, pc), po in zip(layer_c.named_parameters(), layer_o.parameters()):
        torch.testing.assert_close(po.grad.cpu(), pc.grad, msg=name)


RNN_LAYERS = {
    # name: (constructor kwargs, training mode, initial state given)
    "2layer": (dict(num_layers=2), True, False),
    "bidirectional": (dict(bidirectional=True), True, True),
    "2layer-bidirectional-batch_first": (dict(num_layers=2, bidirectional=True, batch_first=True), True, True),
    "nobias-batch_first": (dict(bias=False, batch_first=True), True, True),
    "dropout0-train": (dict(num_layers=3, dropout=0.0), True, False),
    "dropout-eval": (dict(num_layers=2, dropout=0.5), False, True),
}


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("config", list(RNN_LAYERS))
def test_recurrent_layer_variants_match_cpu(kind, config):
    """Every layer variant oxide's own lstm/gru layer kernels (csrc/aten/nn/rnn_layer.cpp) handle:
    outputs, final states and the gradients of input, initial state and every parameter."""
    kwargs, train, with_state = RNN_LAYERS[config]
    dt = torch.float64
    torch.manual_seed(3)
    layer_c = getattr(torch.nn, kind)(3, 4, dtype=dt, **kwargs)
    layer_o = getattr(torch.nn, kind)(3, 4, dtype=dt, **kwargs)
    layer_o.load_state_dict(layer_c.state_dict())
    layer_o = layer_o.oxide()
    layer_c.train(train)
    layer_o.train(train)
    dirs = 2 if kwargs.get("bidirectional") else 1
    T, B, L = 5, 2, kwargs.get("num_layers", 1)
    x = randn(*((B, T, 3) if kwargs.get("batch_first") else (T, B, 3)), dtype=dt)
    states = (
        [randn(L * dirs, B, 4, dtype=dt, seed=s) for s in ((1, 2) if kind == "LSTM" else (1,))] if with_state else []
    )

    def run(t, *st):
        layer = layer_c if t.device.type == "cpu" else layer_o
        if not st:
            out, hn = layer(t)
        else:
            out, hn = layer(t, tuple(st) if kind == "LSTM" else st[0])
        return (out,) + (tuple(hn) if kind == "LSTM" else (hn,))

    compare(run, x, *states)
    for (name, pc), po in zip(layer_c.named_parameters(), layer_o.parameters()):
        torch.testing.assert_close(po.grad.cpu(), pc.grad, msg=name)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_recurrent_layer_float32_sequence_and_inference(kind):
    """A benchmark-shaped float32 layer (long sequence, wider state), in training and under
    torch.inference_mode (where the PrivateUse1 registration, not the autograd one, runs)."""
    torch.manual_seed(4)
    layer_c = getattr(torch.nn, kind)(16, 32, num_layers=2, batch_first=True)
    layer_o = getattr(torch.nn, kind)(16, 32, num_layers=2, batch_first=True)
    layer_o.load_state_dict(layer_c.state_dict())
    layer_o = layer_o.oxide()
    x = randn(8, 30, 16, scale=1.0)
    compare(lambda t: (layer_c if t.device.type == "cpu" else layer_o)(t)[0], x, rtol=1e-4, atol=1e-5)
    for (name, pc), po in zip(layer_c.named_parameters(), layer_o.parameters()):
        torch.testing.assert_close(po.grad.cpu(), pc.grad, rtol=1e-4, atol=1e-5, msg=name)
    with torch.inference_mode():
        want = layer_c(x.detach())[0]
        got = layer_o(x.detach().to("oxide"))[0]
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)


GEMMS = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default)


class CountGemms(TorchDispatchMode):
    """Counts the GEMM operators (``GEMMS``) dispatched while active."""

    def __init__(self):
        super().__init__()
        self.gemms = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in GEMMS:
            self.gemms += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_recurrent_layer_projects_the_whole_sequence_once(kind):
    """oxide's layer kernel is live: one input projection per layer for all T steps plus one
    hidden GEMM per step (ATen's composite would run two GEMMs per step)."""
    layer = getattr(torch.nn, kind)(3, 4, num_layers=2).oxide()
    x = torch.randn(7, 2, 3, device="oxide")
    with CountGemms() as c:
        layer(x)
    assert c.gemms == 2 * (1 + 7)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_recurrent_layer_backward_is_one_node_per_layer(kind):
    """The fused layer backward (csrc/aten/nn/rnn_layer.cpp's LayerFunction) is live: one autograd node per
    layer, and its backward runs one GEMM per step (the hidden-state gradient) plus three
    whole-sequence GEMMs (input, W_ih and W_hh gradients), where the per-step graph ran two GEMMs
    per step and accumulated W_hh's gradient step by step."""
    T = 7
    layer = getattr(torch.nn, kind)(3, 4, num_layers=2).oxide()
    x = torch.randn(T, 2, 3, device="oxide", requires_grad=True)
    out, _ = layer(x)
    top = out.grad_fn
    bottom = top.next_functions[0][0]  # layer 1's input is layer 0's output
    assert top.name().endswith("::LayerFunction>") and bottom.name().endswith("::LayerFunction>")
    assert all(type(f).__name__ == "AccumulateGrad" for f, _ in bottom.next_functions[3:])
    with CountGemms() as c:
        out.sum().backward()
    assert c.gemms == 2 * (T + 3)
    assert x.grad is not None and all(p.grad is not None for p in layer.parameters())


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "bidirectional"])
def test_recurrent_layer_gradcheck_and_double_backward(kind, reverse):
    """First-order gradients of the fused layer backward and second-order ones (create_graph=True
    rebuilds the layer from differentiable ops) against finite differences, float64 on oxide:
    input, initial state(s) and every parameter."""
    torch.manual_seed(5)
    layer = getattr(torch.nn, kind)(2, 3, bidirectional=reverse, dtype=torch.float64).oxide()
    names = [n for n, _ in layer.named_parameters()]
    params = [p.detach().clone().requires_grad_() for p in layer.parameters()]
    dirs = 2 if reverse else 1
    x = torch.randn(3, 2, 2, dtype=torch.float64, device="oxide", requires_grad=True)
    states = [
        torch.randn(dirs, 2, 3, dtype=torch.float64, device="oxide", requires_grad=True)
        for _ in range(2 if kind == "LSTM" else 1)
    ]

    def run(x, *rest):
        st, ps = rest[: len(states)], rest[len(states) :]
        out, hn = torch.func.functional_call(layer, dict(zip(names, ps)), (x, tuple(st) if kind == "LSTM" else st[0]))
        return (out,) + (tuple(hn) if kind == "LSTM" else (hn,))

    inputs = (x, *states, *params)
    assert torch.autograd.gradcheck(run, inputs)
    assert torch.autograd.gradgradcheck(run, inputs)


def test_lstm_with_projections_still_matches_cpu():
    """proj_size > 0 runs ATen's composite (per-step GEMMs), still natively."""
    torch.manual_seed(5)
    layer_c = torch.nn.LSTM(3, 5, num_layers=2, proj_size=2, dtype=torch.float64)
    layer_o = torch.nn.LSTM(3, 5, num_layers=2, proj_size=2, dtype=torch.float64)
    layer_o.load_state_dict(layer_c.state_dict())
    layer_o = layer_o.oxide()
    compare(lambda t: (layer_c if t.device.type == "cpu" else layer_o)(t)[0], randn(4, 2, 3, dtype=torch.float64))
    for (name, pc), po in zip(layer_c.named_parameters(), layer_o.parameters()):
        torch.testing.assert_close(po.grad.cpu(), pc.grad, msg=name)


def test_recurrent_layers_reject_bad_arguments():
    x = torch.randn(5, 2, 3, device="oxide")
    w = [torch.randn(16, 3, device="oxide"), torch.randn(16, 4, device="oxide")]
    with pytest.raises(RuntimeError, match="hidden state of shape"):
        torch.lstm(
            x,
            (torch.randn(1, 3, 4, device="oxide"), torch.randn(1, 3, 4, device="oxide")),
            w,
            False,
            1,
            0.0,
            False,
            False,
            False,
        )
    with pytest.raises(RuntimeError, match="parameter tensors"):
        torch.lstm(x, (torch.randn(1, 2, 4, device="oxide"),) * 2, w[:1], False, 1, 0.0, False, False, False)
    with pytest.raises(RuntimeError, match="weight_ih"):
        torch.gru(
            x, torch.randn(1, 2, 4, device="oxide"), [w[0][:12, :2], w[1][:12]], False, 1, 0.0, False, False, False
        )
    with pytest.raises(RuntimeError, match="same device"):
        torch.gru(x, torch.randn(1, 2, 4), [w[0][:12], w[1][:12]], False, 1, 0.0, False, False, False)


def test_fused_cells_reject_mismatched_shapes():
    ig = torch.randn(2, 8, device="oxide")
    with pytest.raises(RuntimeError, match="state"):
        torch.ops.aten._thnn_fused_lstm_cell(ig, ig, torch.randn(2, 3, device="oxide"))
    with pytest.raises(RuntimeError, match="bias"):
        torch.ops.aten._thnn_fused_gru_cell(
            ig[:, :6], ig[:, :6], torch.randn(2, 2, device="oxide"), torch.randn(5, device="oxide")
        )


# ---------------------------------------------------------------------------------------
# Fused optimizers
# ---------------------------------------------------------------------------------------

OPTIMIZERS = {
    "Adam": dict(lr=1e-2, weight_decay=0.1),
    "Adam-amsgrad-maximize": dict(lr=1e-2, amsgrad=True, maximize=True),
    "AdamW": dict(lr=1e-2, weight_decay=0.05),
    "SGD-momentum": dict(lr=0.1, momentum=0.9, weight_decay=1e-3),
    "SGD-nesterov": dict(lr=0.1, momentum=0.9, nesterov=True, dampening=0.0),
    "SGD-plain": dict(lr=0.1),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=dname)
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_fused_optimizer_steps_match_cpu(name, dtype):
    cls = getattr(torch.optim, name.split("-")[0])
    kwargs = OPTIMIZERS[name]
    params_c = [randn(5, 3, dtype=dtype, seed=s).detach().requires_grad_(True) for s in range(3)]
    params_o = [p.detach().to("oxide").requires_grad_(True) for p in params_c]
    opt_c = cls(params_c, **kwargs)  # CPU reference: the default (foreach/for-loop) implementation
    opt_o = cls(params_o, fused=True, **kwargs)
    for step in range(3):
        for k, (pc, po) in enumerate(zip(params_c, params_o)):
            g = randn(5, 3, dtype=dtype, seed=100 * step + k, grad=False)
            pc.grad, po.grad = g, g.to("oxide")
        opt_c.step()
        opt_o.step()
    for pc, po in zip(params_c, params_o):
        torch.testing.assert_close(po.detach().cpu(), pc.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["Adam", "Adam-amsgrad-maximize", "AdamW", "SGD-momentum", "SGD-nesterov"])
def test_fused_optimizers_on_large_tensors_match_cpu_fused(name):
    """Tensors above the kernel's parallel grain (split over threads, partial last block) and
    small ones in one list, against CPU's own fused implementation."""
    cls = getattr(torch.optim, name.split("-")[0])
    kwargs = OPTIMIZERS[name]
    shapes = [(300, 257), (70001,), (7,), (16, 3)]
    params_c = [randn(*s, seed=k, scale=1.0).detach().requires_grad_(True) for k, s in enumerate(shapes)]
    params_o = [p.detach().to("oxide").requires_grad_(True) for p in params_c]
    opt_c = cls(params_c, fused=True, **kwargs)
    opt_o = cls(params_o, fused=True, **kwargs)
    for step in range(3):
        for k, (pc, po) in enumerate(zip(params_c, params_o)):
            g = randn(*pc.shape, seed=100 * step + k, grad=False, scale=1.0)
            pc.grad, po.grad = g, g.to("oxide")
        opt_c.step()
        opt_o.step()
    for pc, po in zip(params_c, params_o):
        torch.testing.assert_close(po.detach().cpu(), pc.detach(), rtol=1e-5, atol=1e-6)
    for sc, so in zip(opt_c.state.values(), opt_o.state.values()):
        for key in sc:
            torch.testing.assert_close(so[key].cpu(), sc[key], rtol=1e-5, atol=1e-6, msg=key)


@pytest.mark.parametrize("name", ["Adam", "AdamW", "SGD-momentum"])
def test_fused_step_with_grad_scale_leaves_unscaled_grads_like_cpu(name):
    # GradScaler hands the fused step its scale (optimizer.grad_scale / found_inf); CPU's
    # fused kernels then write the unscaled gradient back into p.grad.
    cls = getattr(torch.optim, name.split("-")[0])
    params_c = [randn(40, 3, seed=k).detach().requires_grad_(True) for k in range(2)]
    params_o = [p.detach().to("oxide").requires_grad_(True) for p in params_c]
    opt_c = cls(params_c, fused=True, **OPTIMIZERS[name])
    opt_o = cls(params_o, fused=True, **OPTIMIZERS[name])
    for opt, dev in ((opt_c, "cpu"), (opt_o, "oxide")):
        opt.grad_scale = torch.tensor(8.0, device=dev)
        opt.found_inf = torch.tensor(0.0, device=dev)
    for k, (pc, po) in enumerate(zip(params_c, params_o)):
        g = randn(40, 3, seed=50 + k, grad=False) * 8
        pc.grad, po.grad = g.clone(), g.to("oxide")
    opt_c.step()
    opt_o.step()
    for pc, po in zip(params_c, params_o):
        torch.testing.assert_close(po.grad.cpu(), pc.grad, rtol=0, atol=0)
        torch.testing.assert_close(po.detach().cpu(), pc.detach(), rtol=1e-5, atol=1e-6)


def test_fused_adam_with_grad_scaler_skips_non_finite_steps():
    p = torch.ones(4, device="oxide", requires_grad=True)
    opt = torch.optim.Adam([p], lr=0.1, fused=True)
    scaler = torch.amp.GradScaler("oxide", init_scale=4.0)
    scaler.scale((p * torch.tensor([1.0, 2.0, 3.0, float("inf")], device="oxide")).sum()).backward()
    scaler.step(opt)
    scaler.update()
    torch.testing.assert_close(p.detach().cpu(), torch.ones(4))
    assert scaler.get_scale() == 2.0
    opt.zero_grad()
    scaler.scale((p * 2.0).sum()).backward()
    scaler.step(opt)
    assert (p.detach().cpu() < 1).all()


# ---------------------------------------------------------------------------------------
# Embedding
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("padding_idx", [None, 2])
@pytest.mark.parametrize("scale", [False, True], ids=["plain", "scale_grad_by_freq"])
def test_embedding_backward(scale, padding_idx):
    w = randn(6, 4)
    idx = torch.tensor([[0, 2, 5], [2, 2, 1]])
    compare(lambda t: F.embedding(idx.to(t.device), t, padding_idx=padding_idx, scale_grad_by_freq=scale), w)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=str)
def test_embedding_backward_many_repeats_int32_indices_and_empty(dtype):
    # Enough rows and repeats that the weight-row split runs on several threads.
    w = randn(50, 40, dtype=dtype)
    idx = torch.randint(0, 50, (16, 64), generator=torch.Generator().manual_seed(3), dtype=torch.int32)
    g = torch.randn(16, 64, 40, generator=torch.Generator().manual_seed(4), dtype=torch.float64).to(dtype)
    # Half-precision rows are summed in float and rounded once (CUDA's accumulation
    # type); CPU's index_add_ rounds after every add, so the oracle for bfloat16 is
    # CPU's float32 gradient rounded to bfloat16.
    ref_dtype = torch.float32 if dtype == torch.bfloat16 else dtype
    wr = w.detach().to(ref_dtype).requires_grad_()
    F.embedding(idx, wr, padding_idx=7).backward(g.to(ref_dtype))
    wo = w.detach().to("oxide").requires_grad_()
    F.embedding(idx.to("oxide"), wo, padding_idx=7).backward(g.to("oxide"))
    assert wo.grad.dtype == dtype
    torch.testing.assert_close(wo.grad.cpu(), wr.grad.to(dtype), atol=0, rtol=0 if dtype == torch.float64 else 8e-3)
    assert (wo.grad[7] == 0).all()
    compare(lambda t: F.embedding(torch.zeros(0, 3, dtype=torch.long, device=t.device), t), randn(5, 4, dtype=dtype))


# ---------------------------------------------------------------------------------------
# Padding and upsampling
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize(
    "shape,pad",
    [((2, 3, 7), (2, 3)), ((3, 7), (1, 0)), ((1, 2, 5, 6), (1, 2, 3, 0)), ((1, 2, 3, 4, 5), (1, 1, 2, 0, 0, 2))],
    ids=str,
)
def test_reflection_and_replication_padding(shape, pad, mode):
    compare(lambda t: F.pad(t, pad, mode=mode), randn(*shape))


def test_reflection_padding_larger_than_input_raises_like_cpu():
    x = torch.randn(1, 1, 3)
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        F.pad(x.to("oxide"), (3, 0), mode="reflect")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=dname)
@pytest.mark.parametrize(
    "kwargs", [dict(scale_factor=2), dict(size=(5, 7)), dict(scale_factor=1.7), dict(size=(3, 2))], ids=str
)
@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bilinear-align"])
def test_upsample_2d(mode, kwargs, dtype):
    extra = dict(mode="bilinear", align_corners=True) if mode == "bilinear-align" else dict(mode=mode)
    compare(lambda t: F.interpolate(t, **kwargs, **extra), randn(2, 3, 4, 5, dtype=dtype), **tol(dtype))


@pytest.mark.parametrize("shape,size", [((2, 3, 5), 9), ((1, 2, 3, 4, 2), (5, 3, 4))], ids=str)
def test_upsample_nearest_1d_3d(shape, size):
    compare(lambda t: F.interpolate(t, size=size, mode="nearest"), randn(*shape))


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_recurrent_layer_where_the_layer_node_steps_aside(kind):
    """Where oxide's single layer node (LayerFunction) cannot serve, the composite runs and the
    results match CPU: backward after a forward under autocast (the casts must be in the graph),
    torch.func.grad (functorch refuses C++ autograd Functions). An empty sequence gets CPU's error;
    a GRU output modified in place after the forward does not break the backward, as on CPU (the
    node saves the per-step states, not its outputs)."""
    torch.manual_seed(6)
    layer_c = getattr(torch.nn, kind)(5, 7)
    layer_o = getattr(torch.nn, kind)(5, 7)
    layer_o.load_state_dict(layer_c.state_dict())
    layer_o = layer_o.oxide()
    x = randn(6, 3, 5)

    grads = {}
    for dev, layer in (("cpu", layer_c), ("oxide", layer_o)):
        layer.zero_grad()
        # CPU's oneDNN has no bfloat16 LSTM primitive on hosts without AVX-512 ("could not
        # create a primitive descriptor"); ATen's own layer code is the oracle there.
        with torch.autocast(dev, dtype=torch.bfloat16), torch.backends.mkldnn.flags(enabled=False):
            out, _ = layer(x.to(dev))
        out.float().sum().backward()
        grads[dev] = [p.grad.cpu() for p in layer.parameters()]
    for got, want in zip(grads["oxide"], grads["cpu"]):
        torch.testing.assert_close(got, want, rtol=5e-2, atol=5e-2)

    def loss(layer, dev):
        params = {n: p.detach() for n, p in layer.named_parameters()}
        fn = lambda p: torch.func.functional_call(layer, p, (x.detach().to(dev),))[0].sum()  # noqa: E731
        return torch.func.grad(fn)(params)

    got, want = loss(layer_o, "oxide"), loss(layer_c, "cpu")
    for name in want:
        torch.testing.assert_close(got[name].cpu(), want[name], rtol=1e-4, atol=1e-5, msg=name)

    with pytest.raises(RuntimeError, match="Expected sequence length to be larger than 0 in RNN"):
        layer_o(torch.randn(0, 3, 5, device="oxide"))

    if kind == "LSTM":
        return  # CPU's oneDNN LSTM saves its output: modifying it in place is an error there too
    layer_c.zero_grad()
    layer_o.zero_grad()
    for dev, layer in (("cpu", layer_c), ("oxide", layer_o)):
        xd = x.detach().to(dev).requires_grad_()
        out, hn = layer(xd)
        out.add_(1)
        (out.sum() + hn.sum()).backward()
        grads[dev] = [xd.grad.cpu()] + [p.grad.cpu() for p in layer.parameters()]
    for got, want in zip(grads["oxide"], grads["cpu"]):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
