"""The counted CPU fallback: counts per operator, reset, and the three OXIDE_FALLBACK modes.

The operators used here (digamma, i0, special_i0e) have no native kernel yet;
the exact counts asserted below fail if one becomes native, so pick another then."""

import warnings

import pytest
import torch
from conftest import run_python


def test_counts_and_reset():
    torch.oxide.reset_fallback_stats()
    x = torch.arange(6.0).to("oxide")
    (torch.digamma(x) + torch.digamma(x) + torch.i0(x)).cpu()
    stats = torch.oxide.fallback_stats()
    assert stats == {"aten::digamma.out": 2, "aten::i0.out": 1}
    torch.oxide.reset_fallback_stats()
    assert torch.oxide.fallback_stats() == {}


def test_native_ops_are_not_counted():
    torch.oxide.reset_fallback_stats()
    x = torch.zeros(3, 4).to("oxide")
    x.t().contiguous().view(-1).cpu()
    assert torch.oxide.fallback_stats() == {}


def test_results_match_cpu():
    a, b = torch.randn(5, 3), torch.randn(3, 4)
    torch.testing.assert_close((a.oxide() @ b.oxide()).cpu(), a @ b)
    torch.testing.assert_close(torch.softmax(a.oxide(), 1).cpu(), torch.softmax(a, 1))


def test_error_mode_raises_and_keeps_state(native_only):
    x = torch.ones(3, device="oxide")
    with pytest.raises(NotImplementedError, match=r"aten::digamma(\.out)?' has no native oxide kernel"):
        torch.digamma(x)
    assert x.cpu().tolist() == [1.0, 1.0, 1.0]


def test_warn_mode_warns_once_per_operator():
    torch.oxide.set_fallback_mode("warn")
    torch.oxide.reset_fallback_stats()
    try:
        x = torch.ones(3, device="oxide")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.special.i0e(x)
            torch.special.i0e(x)
        msgs = [str(w.message) for w in caught if "CPU fallback" in str(w.message)]
        assert len(msgs) == 1 and "aten::special_i0e" in msgs[0]
        assert torch.oxide.fallback_stats()["aten::special_i0e.out"] == 2
    finally:
        torch.oxide.set_fallback_mode("silent")


def test_set_mode_rejects_unknown():
    with pytest.raises(ValueError, match="invalid fallback mode"):
        torch.oxide.set_fallback_mode("loud")


def test_env_var_modes():
    code = """
        import torch
        try:
            torch.ones(2, device="oxide").digamma()
        except NotImplementedError as e:
            print("refused", torch.oxide.get_fallback_mode())
    """
    out = run_python(code, env={"OXIDE_FALLBACK": "error"})
    assert out.returncode == 0, out.stderr
    assert "refused error" in out.stdout
    bad = run_python("import torch_oxide", env={"OXIDE_FALLBACK": "sometimes"})
    assert bad.returncode != 0 and "OXIDE_FALLBACK='sometimes' is invalid" in bad.stderr
