"""float16 and bfloat16 for the normalisation, softmax, NLL and fused-optimizer kernels,
against CPU PyTorch running the same dtype.

These kernels load half inputs into float32 (statistics in double) and round once on
store, as CPU does; the tolerances are one or two half-precision ulps of the values
involved, not a loosened float32 check. Every test runs under OXIDE_FALLBACK=error.
"""

import pytest
import torch
import torch.nn.functional as F
from test_nn_ops import compare, dname, randn, tol

HALVES = [torch.float16, torch.bfloat16]


@pytest.fixture(autouse=True)
def _native(native_only):
    yield


@pytest.mark.parametrize("dtype", HALVES, ids=dname)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("params", ["half", "float32"])
def test_batch_norm_half(params, training, dtype):
    """Both forms autocast and hand-written mixed models produce: half parameters and
    statistics, or half activations with float32 parameters and statistics."""
    pdt = dtype if params == "half" else torch.float32
    x = randn(4, 3, 5, 5, dtype=dtype)
    w, b = randn(3, dtype=pdt, seed=1), randn(3, dtype=pdt, seed=2)
    stats = {
        dev: (torch.linspace(-1, 1, 3, dtype=pdt, device=dev), torch.linspace(0.5, 2, 3, dtype=pdt, device=dev))
        for dev in ("cpu", "oxide")
    }

    def fn(t, weight, bias):
        rm, rv = stats[t.device.type]
        return F.batch_norm(t, rm, rv, weight, bias, training=training, momentum=0.2, eps=1e-3)

    compare(fn, x, w, b, **tol(dtype))
    for got, want in zip(stats["oxide"], stats["cpu"]):
        torch.testing.assert_close(got.cpu(), want, **tol(dtype))


@pytest.mark.parametrize("dtype", [torch.float16], ids=dname)
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_layer_norm_float16(affine, dtype):
    # bfloat16 is covered by test_nn_ops.test_layer_norm.
    x = randn(6, 33, dtype=dtype)
    params = (randn(33, dtype=dtype, seed=1), randn(33, dtype=dtype, seed=2)) if affine else ()
    compare(lambda t, *p: F.layer_norm(t, (33,), *p), x, *params, **tol(dtype))


@pytest.mark.parametrize("dtype", HALVES, ids=dname)
def test_group_norm_half(dtype):
    x = randn(2, 6, 4, 3, dtype=dtype)
    compare(
        lambda t, w, b: F.group_norm(t, 3, w, b),
        x,
        randn(6, dtype=dtype, seed=1),
        randn(6, dtype=dtype, seed=2),
        **tol(dtype),
    )


@pytest.mark.parametrize("dtype", HALVES, ids=dname)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_family_half(dim, dtype):
    x = randn(5, 7, 9, dtype=dtype)
    compare(lambda t: F.softmax(t, dim), x, **tol(dtype))
    compare(lambda t: F.log_softmax(t, dim), x, **tol(dtype))


@pytest.mark.parametrize("dtype", HALVES, ids=dname)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_nll_loss_half(reduction, dtype):
    x = randn(6, 4, dtype=dtype)
    t = torch.tensor([0, 3, 1, -100, 2, 3])
    w = torch.tensor([0.5, 2.0, 1.0, 0.25], dtype=dtype)
    compare(lambda a: F.nll_loss(a, t.to(a.device), weight=w.to(a.device), reduction=reduction), x, **tol(dtype))
    x2 = randn(2, 3, 4, 5, dtype=dtype, seed=3)
    t2 = torch.randint(0, 3, (2, 4, 5), generator=torch.Generator().manual_seed(1))
    compare(lambda a: F.cross_entropy(a, t2.to(a.device), reduction=reduction), x2, **tol(dtype))


@pytest.mark.parametrize("dtype", HALVES, ids=dname)
@pytest.mark.parametrize("name", ["Adam", "AdamW", "SGD"])
def test_fused_optimizers_half_match_cpu_fused(name, dtype):
    """CPU's fused optimizers take half parameters too (computing in float32), so the
    oracle here is CPU fused=True on the same dtype: 3 steps, every parameter and state."""
    kwargs = dict(lr=1e-2, weight_decay=0.01)
    if name == "SGD":
        kwargs.update(momentum=0.9)
    cls = getattr(torch.optim, name)
    params_c = [randn(7, 3, dtype=dtype, seed=s).detach().requires_grad_(True) for s in range(2)]
    params_o = [p.detach().to("oxide").requires_grad_(True) for p in params_c]
    opt_c, opt_o = cls(params_c, fused=True, **kwargs), cls(params_o, fused=True, **kwargs)
    for step in range(3):
        for k, (pc, po) in enumerate(zip(params_c, params_o)):
            g = randn(7, 3, dtype=dtype, seed=50 * step + k, grad=False)
            pc.grad, po.grad = g, g.to("oxide")
        opt_c.step()
        opt_o.step()
    for pc, po in zip(params_c, params_o):
        torch.testing.assert_close(po.detach().cpu(), pc.detach(), **tol(dtype))
        for key, sc in opt_c.state[pc].items():
            torch.testing.assert_close(opt_o.state[po][key].cpu(), sc, **tol(dtype), msg=key)
