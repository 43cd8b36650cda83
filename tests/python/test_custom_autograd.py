"""The seed's autograd pattern: selu as a torch::autograd::Function under AutogradPrivateUse1, and
the oxide::swish custom operator with its own autograd and meta kernels."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_selu_forward_backward_match_cpu(dtype, native_only):
    x = torch.randn(6, 5, dtype=dtype)
    xd = x.to("oxide").requires_grad_()
    xc = x.clone().requires_grad_()
    g = torch.randn(6, 5, dtype=dtype)
    yd = torch.selu(xd)
    yd.backward(g.to("oxide"))
    yc = torch.selu(xc)
    yc.backward(g)
    torch.testing.assert_close(yd.detach().cpu(), yc.detach())
    torch.testing.assert_close(xd.grad.cpu(), xc.grad)


def test_selu_is_registered_for_autograd_privateuse1():
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::selu", "AutogradPrivateUse1")
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::selu", "PrivateUse1")


def test_selu_gradcheck():
    x = torch.randn(7, dtype=torch.float64, device="oxide", requires_grad=True)
    assert torch.autograd.gradcheck(torch.selu, (x,))


def test_selu_on_non_contiguous_input(native_only):
    x = torch.randn(4, 6)
    y = torch.selu(x.to("oxide").t())
    torch.testing.assert_close(y.cpu(), torch.selu(x.t()))


def _swish_ref(x):
    return x * torch.sigmoid(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_swish_matches_reference(dtype, native_only):
    x = torch.randn(5, 3, dtype=dtype)
    xd = x.to("oxide").requires_grad_()
    y = torch.ops.oxide.swish(xd)
    y.backward(torch.ones(5, 3, dtype=dtype).to("oxide"))
    xc = x.clone().requires_grad_()
    _swish_ref(xc).sum().backward()
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(y.detach().cpu(), _swish_ref(x), **tol)
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, **tol)


def test_swish_gradcheck():
    x = torch.randn(6, dtype=torch.float64, device="oxide", requires_grad=True)
    assert torch.autograd.gradcheck(torch.ops.oxide.swish, (x,))


def test_swish_under_fake_tensor():
    with FakeTensorMode():
        x = torch.empty(3, 4, device="oxide", dtype=torch.float16)
        y = torch.ops.oxide.swish(x)
        assert y.shape == (3, 4) and y.dtype == torch.float16 and y.device.type == "oxide"
        with pytest.raises(RuntimeError, match="expects a floating tensor"):
            torch.ops.oxide.swish(torch.empty(2, dtype=torch.int64, device="oxide"))


def test_swish_opcheck():
    x = torch.randn(4, device="oxide", requires_grad=True)
    # autograd_registration is skipped by opcheck itself for devices other than CPU/CUDA/XPU.
    torch.library.opcheck(
        torch.ops.oxide.swish.default, (x,), test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")
    )


def test_swish_rejects_integers():
    with pytest.raises(NotImplementedError, match="int64"):
        torch.ops.oxide.swish(torch.ones(3, dtype=torch.int64, device="oxide"))


def test_double_backward_selu_and_swish():
    x = torch.randn(5, dtype=torch.float64, device="oxide", requires_grad=True)
    assert torch.autograd.gradgradcheck(torch.selu, (x,))
    assert torch.autograd.gradgradcheck(torch.ops.oxide.swish, (x,))


def test_gradient_penalty_through_selu_matches_cpu():
    import copy

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.SELU(), torch.nn.Linear(4, 1)).double()
    x = torch.randn(6, 3, dtype=torch.float64)

    def penalty_grad(m, inp):
        inp = inp.clone().requires_grad_()
        (g,) = torch.autograd.grad(m(inp).sum(), inp, create_graph=True)
        ((g.norm(dim=1) - 1) ** 2).mean().backward()
        return m[0].weight.grad.detach().cpu()

    expected = penalty_grad(copy.deepcopy(model), x)
    actual = penalty_grad(copy.deepcopy(model).oxide(), x.oxide())
    torch.testing.assert_close(actual, expected)
