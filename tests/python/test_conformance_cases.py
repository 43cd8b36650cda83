"""Cases that must hold beyond PyTorch's databases (each its own test), CPU as the oracle."""

import pytest
import torch
from conftest import run_python

ALL_DTYPES = [
    "bool",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
]


def test_first_call_in_fresh_interpreter():
    out = run_python("""
        import torch
        x = torch.ones(2, device="oxide")
        assert hasattr(torch, "oxide") and torch.oxide.is_available()
        print(x.device, x.cpu().tolist())
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "oxide:0 [1.0, 1.0]"


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_dtype_round_trip_or_python_exception_in_subprocess(dtype):
    out = run_python(f"""
        import torch
        dt = torch.{dtype}
        if dt.is_complex:
            x = torch.randn(4, 3, dtype=dt)
        elif dt.is_floating_point:
            x = torch.randn(4, 3).to(dt)
        elif dt == torch.bool:
            x = torch.rand(4, 3) > 0.5
        else:
            x = torch.randint(0, 100, (4, 3)).to(dt)
        try:
            back = x.to("oxide").cpu()
            print("exact" if torch.equal(back, x) and back.dtype == dt else "MISMATCH")
        except Exception as e:
            print("raised", type(e).__name__)
    """)
    assert out.returncode == 0, f"process died: {out.returncode} {out.stderr[-2000:]}"
    assert out.stdout.strip() == "exact" or out.stdout.startswith("raised"), out.stdout


@pytest.mark.parametrize(
    "factory",
    [
        lambda out: torch.eye(3, out=out),
        lambda out: torch.eye(2, 4, out=out),
        lambda out: torch.arange(5, out=out),
        lambda out: torch.arange(1.0, 3.0, 0.5, out=out),
        lambda out: torch.linspace(0, 1, 7, out=out),
        lambda out: torch.logspace(0, 2, 4, out=out),
    ],
    ids=["eye", "eye-rect", "arange", "arange-float", "linspace", "logspace"],
)
def test_factories_with_wrong_size_out(factory):
    cpu_out = torch.empty(9)
    dev_out = torch.empty(9, device="oxide")
    expected = factory(cpu_out)
    result = factory(dev_out)
    assert result.data_ptr() == dev_out.data_ptr()
    assert dev_out.shape == cpu_out.shape
    torch.testing.assert_close(dev_out.cpu(), expected)


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4)], ids=str)
def test_empty_shapes_for_factories_and_random(shape):
    for make in [torch.zeros, torch.ones, torch.empty, torch.rand, torch.randn]:
        t = make(shape, device="oxide")
        assert t.shape == shape and t.device.type == "oxide"
    assert torch.full(shape, 2.0, device="oxide").shape == shape
    assert torch.randint(0, 3, shape, device="oxide").shape == shape
    assert torch.empty(shape, device="oxide").uniform_().shape == shape
    assert torch.empty(shape, device="oxide").normal_().shape == shape
    assert torch.bernoulli(torch.empty(shape, device="oxide")).shape == shape


def test_empty_reductions_cat_matmul_and_pinned():
    assert torch.zeros(0, device="oxide").sum().item() == 0
    c = torch.cat([torch.ones(2, 3, device="oxide"), torch.empty(0, 3, device="oxide")])
    torch.testing.assert_close(c.cpu(), torch.ones(2, 3))
    c2 = torch.cat([torch.empty(0, device="oxide"), torch.arange(3.0).to("oxide")])
    assert c2.cpu().tolist() == [0.0, 1.0, 2.0]
    m = torch.empty(2, 0, device="oxide") @ torch.empty(0, 3, device="oxide")
    assert m.shape == (2, 3)
    torch.testing.assert_close(m.cpu(), torch.zeros(2, 3))
    p = torch.empty(0, pin_memory=True)
    assert p.numel() == 0


def test_writes_through_views_are_visible():
    x = torch.zeros(3, 5, device="oxide")
    x[:, 1:4] = torch.arange(9.0).view(3, 3).to("oxide")
    v = x[0]
    v.add_(1)
    expected = torch.zeros(3, 5)
    expected[:, 1:4] = torch.arange(9.0).view(3, 3)
    expected[0] += 1
    torch.testing.assert_close(x.cpu(), expected)


def test_transpose_contiguous_and_copies_in_all_directions():
    base = torch.arange(24.0).view(4, 6)
    d = base.to("oxide")
    t = d.transpose(0, 1).contiguous()
    assert t.is_contiguous()
    torch.testing.assert_close(t.cpu(), base.t().contiguous())
    # host -> device, device -> host, device -> device, all with non-contiguous source and destination
    dst_dev = torch.zeros(12, 8, device="oxide")[::2, 1:5]
    dst_dev.copy_(base.t())
    torch.testing.assert_close(dst_dev.cpu(), base.t())
    dst_host = torch.zeros(6, 12)[:, ::3]
    dst_host.copy_(d.t())
    torch.testing.assert_close(dst_host, base.t())
    dst_dev2 = torch.zeros(6, 8, device="oxide:1")[:, 2:6]
    dst_dev2.copy_(d.t())
    torch.testing.assert_close(dst_dev2.cpu(), base.t())


def test_storage_resize_keeps_bytes_and_reports_nbytes():
    t = torch.arange(8, dtype=torch.int16).to("oxide")
    s = t.untyped_storage()
    s.resize_(40)
    assert s.nbytes() == 40
    kept = torch.tensor([], dtype=torch.int16, device="oxide").set_(s, 0, (8,), (1,))
    assert kept.cpu().tolist() == list(range(8))


def test_autocast_disabled_is_a_no_op():
    a = torch.randn(3, 3, device="oxide")
    with torch.autocast("oxide", enabled=False):
        assert not torch.is_autocast_enabled("oxide")
        y = a @ a
    assert y.dtype == torch.float32
    torch.testing.assert_close(y.cpu(), a.cpu() @ a.cpu())
