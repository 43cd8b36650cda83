"""backward() on oxide tensors (through the fallback where kernels are missing) matches CPU."""

import copy

import torch
import torch.nn as nn


def test_backward_simple_expression():
    x_cpu = torch.randn(4, 3, requires_grad=True)
    x = x_cpu.detach().to("oxide").requires_grad_()
    ((x * x).sum() + x.mean()).backward()
    ((x_cpu * x_cpu).sum() + x_cpu.mean()).backward()
    assert x.grad.device.type == "oxide"
    torch.testing.assert_close(x.grad.cpu(), x_cpu.grad)


def test_backward_through_a_module():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    dev_model = copy.deepcopy(model).oxide()
    x = torch.randn(2, 1, 8, 8)
    target = torch.tensor([0, 2])
    nn.functional.cross_entropy(model(x), target).backward()
    nn.functional.cross_entropy(dev_model(x.oxide()), target.oxide()).backward()
    for p_cpu, p_dev in zip(model.parameters(), dev_model.parameters()):
        assert p_dev.grad.device.type == "oxide"
        torch.testing.assert_close(p_dev.grad.cpu(), p_cpu.grad, rtol=1e-4, atol=1e-5)
