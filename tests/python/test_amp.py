"""torch.autocast("oxide") policies, the device module's autocast hooks, and GradScaler("oxide")."""

import warnings

import pytest
import torch
import torch.nn as nn


@pytest.fixture
def ab():
    return torch.randn(4, 4, device="oxide"), torch.randn(4, 4, device="oxide")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_lower_precision_ops(ab, dtype):
    a, b = ab
    with torch.autocast("oxide", dtype=dtype):
        assert torch.mm(a, b).dtype == dtype
        assert (a @ b).dtype == dtype
        assert nn.functional.linear(a, b).dtype == dtype
        assert torch.addmm(a, a, b).dtype == dtype


def test_fp32_and_promote_ops(ab):
    a, _ = ab
    low = a.to(torch.bfloat16)
    with torch.autocast("oxide", dtype=torch.bfloat16):
        assert torch.exp(low).dtype == torch.float32
        assert torch.softmax(low, 0).dtype == torch.float32
        assert torch.sum(low).dtype == torch.float32
        assert nn.functional.mse_loss(low, low).dtype == torch.float32
        assert torch.addcmul(a, low, a).dtype == torch.float32  # promote to the widest input
        assert (low + low).dtype == torch.bfloat16  # no policy: falls through


def test_binary_cross_entropy_is_banned():
    p, y = torch.rand(3, device="oxide"), torch.rand(3, device="oxide")
    with torch.autocast("oxide"):
        with pytest.raises(RuntimeError, match="unsafe in lower precision"):
            nn.functional.binary_cross_entropy(p, y)
        nn.functional.binary_cross_entropy_with_logits(p, y)


def test_module_hooks_and_defaults():
    assert torch.oxide.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert not torch.oxide.is_autocast_enabled()
    assert torch.oxide.get_autocast_dtype() == torch.float16
    torch.oxide.set_autocast_dtype(torch.bfloat16)
    torch.oxide.set_autocast_enabled(True)
    try:
        assert torch.is_autocast_enabled("oxide")
        assert torch.get_autocast_dtype("oxide") == torch.bfloat16
    finally:
        torch.oxide.set_autocast_enabled(False)
        torch.oxide.set_autocast_dtype(torch.float16)


def test_unsupported_dtype_warns_and_disables(ab):
    a, b = ab
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autocast("oxide", dtype=torch.float64):
            assert not torch.is_autocast_enabled("oxide")
            assert torch.mm(a, b).dtype == torch.float32
    assert any("not supported" in str(w.message) for w in caught)


def test_disabled_autocast_is_a_no_op(ab):
    a, b = ab
    with torch.autocast("oxide", enabled=False):
        assert torch.mm(a, b).dtype == torch.float32


def test_grad_scaler_end_to_end_matches_cpu():
    def run(device):
        torch.manual_seed(0)
        model = nn.Linear(4, 2).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler(device, init_scale=2.0**16, growth_interval=2)
        x = torch.randn(8, 4).to(device)
        scales = []
        for _ in range(4):
            opt.zero_grad()
            loss = model(x).pow(2).mean()  # float32 on both devices: results comparable
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
        return [p.detach().cpu() for p in model.parameters()], scales

    dev_params, dev_scales = run("oxide")
    cpu_params, cpu_scales = run("cpu")
    assert dev_scales == cpu_scales == [65536.0, 131072.0, 131072.0, 262144.0]
    for d, c in zip(dev_params, cpu_params):
        torch.testing.assert_close(d, c)


def test_grad_scaler_skips_step_on_inf(native_only):
    grads = [torch.tensor([1.0, float("inf")], device="oxide"), torch.tensor([4.0], device="oxide")]
    found = torch.zeros(1, device="oxide")
    inv = torch.full((1,), 0.5, device="oxide")
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
    assert found.cpu().item() == 1.0 and grads[1].cpu().item() == 2.0
    scale = torch.full((1,), 8.0, device="oxide")
    tracker = torch.zeros(1, dtype=torch.int32, device="oxide")
    torch._amp_update_scale_(scale, tracker, found, 2.0, 0.5, 3)
    assert scale.cpu().item() == 4.0 and tracker.cpu().item() == 0
    with pytest.raises(RuntimeError, match="found_inf must be a float tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_(grads, torch.zeros(1, dtype=torch.int32, device="oxide"), inv)
