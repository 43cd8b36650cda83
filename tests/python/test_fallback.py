"""The counted CPU fallback: counts per operator, reset, and the three OXIDE_FALLBACK modes.

The operators used here (igamma, igammac) have no native kernel yet;
the exact counts asserted below fail if one becomes native, so pick another then."""

import warnings

import pytest
import torch
from conftest import run_python


def test_counts_and_reset():
    torch.oxide.reset_fallback_stats()
    x = torch.arange(6.0).to("oxide")
    (torch.igamma(x, x) + torch.igamma(x, x) + torch.igammac(x, x)).cpu()
    stats = torch.oxide.fallback_stats()
    assert stats == {"aten::igamma.out": 2, "aten::igammac.out": 1}
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
    with pytest.raises(NotImplementedError, match=r"aten::igamma(\.out)?' has no native oxide kernel"):
        torch.igamma(x, x)
    assert x.cpu().tolist() == [1.0, 1.0, 1.0]


def test_warn_mode_warns_once_per_operator():
    torch.oxide.set_fallback_mode("warn")
    torch.oxide.reset_fallback_stats()
    try:
        x = torch.ones(3, device="oxide")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.igammac(x, x)
            torch.igammac(x, x)
        msgs = [str(w.message) for w in caught if "CPU fallback" in str(w.message)]
        assert len(msgs) == 1 and "aten::igammac" in msgs[0]
        assert torch.oxide.fallback_stats()["aten::igammac.out"] == 2
    finally:
        torch.oxide.set_fallback_mode("silent")


def test_set_mode_rejects_unknown():
    with pytest.raises(ValueError, match="invalid fallback mode"):
        torch.oxide.set_fallback_mode("loud")


def test_env_var_modes():
    code = """
        import torch
        try:
            torch.ones(2, device="oxide").igamma(torch.ones(2, device="oxide"))
        except NotImplementedError as e:
            print("refused", torch.oxide.get_fallback_mode())
    """
    out = run_python(code, env={"OXIDE_FALLBACK": "error"})
    assert out.returncode == 0, out.stderr
    assert "refused error" in out.stdout
    bad = run_python("import torch_oxide", env={"OXIDE_FALLBACK": "sometimes"})
    assert bad.returncode != 0 and "OXIDE_FALLBACK='sometimes' is invalid" in bad.stderr


# A native kernel without a loop for the call's dtypes hands the whole call to the
# counted CPU fallback (the registration wrapper in csrc/common/device_check.h): each
# case runs an operator whose native kernel refuses these dtypes, checks the answer
# against CPU and that the fallback counted the operator. Pick another case if one of
# these kernels gains the dtype (the count assertion then fails).
def _mask(shape):
    return torch.arange(12).reshape(shape) % 3 == 0


DTYPE_FALLBACK_CASES = {
    "masked_fill complex64": (
        "aten::masked_fill_.Scalar",
        lambda t: t(torch.randn(4, 3, dtype=torch.complex64)).masked_fill(t(_mask((4, 3))), 2 + 1j),
    ),
    "cumsum complex64": ("aten::cumsum", lambda t: t(torch.randn(4, 3, dtype=torch.complex64)).cumsum(0)),
    "cumprod complex128": ("aten::cumprod", lambda t: t(torch.randn(4, 3, dtype=torch.complex128)).cumprod(1)),
    "linspace complex64 between complex end points": (
        "aten::linspace.out",
        lambda t: torch.linspace(0, 1 + 2j, 5, dtype=torch.complex64, device=t(torch.empty(0)).device),
    ),
    "add complex32": ("aten::add.Tensor", lambda t: t(torch.randn(5, dtype=torch.complex32)) * 1 + 1),
    "in-place mul complex32": (
        "aten::mul_.Tensor",
        lambda t: t(torch.randn(5, dtype=torch.complex32)).mul_(t(torch.randn(5, dtype=torch.complex32))),
    ),
    "sub complex32": ("aten::sub.Tensor", lambda t: t(torch.randn(5, dtype=torch.complex32)) - 1),
}


@pytest.mark.parametrize("case", list(DTYPE_FALLBACK_CASES))
def test_refused_dtypes_fall_back_and_match_cpu(case):
    op, fn = DTYPE_FALLBACK_CASES[case]
    torch.manual_seed(0)
    want = fn(lambda x: x)
    torch.manual_seed(0)
    torch.oxide.reset_fallback_stats()
    got = fn(lambda x: x.to("oxide"))
    assert got.device.type == "oxide" and got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, equal_nan=True)
    assert torch.oxide.fallback_stats().get(op, 0) >= 1, torch.oxide.fallback_stats()


def test_refused_dtype_warns_with_the_reason_and_obeys_error_mode():
    x = torch.randn(4, 3, dtype=torch.complex64).to("oxide")
    torch.oxide.set_fallback_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.oxide.reset_fallback_stats()
            x.cumprod(0)
        msgs = [str(w.message) for w in caught if "CPU fallback" in str(w.message)]
        assert any("aten::cumprod" in m and "for these dtypes" in m and "complex64" in m for m in msgs), msgs
        torch.oxide.set_fallback_mode("error")
        before = x.cpu()
        with pytest.raises(NotImplementedError, match=r"aten::cumprod_' has no native oxide kernel for these dtypes"):
            x.cumprod_(0)
        assert torch.equal(x.cpu(), before)  # refused before writing
        with pytest.raises(NotImplementedError, match="aten::mul"):
            x.to(torch.complex32) * 2
    finally:
        torch.oxide.set_fallback_mode("silent")
