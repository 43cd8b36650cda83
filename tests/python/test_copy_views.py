"""Creation, host/device copies, views, resizing, printing and .item(), against CPU."""

import pytest
import torch

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.complex64,
]


def _sample(dtype, shape=(5, 7)):
    g = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(0, 100, shape, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip_every_dtype(dtype, native_only):
    x = _sample(dtype)
    d = x.to("oxide")
    assert d.device.type == "oxide" and d.dtype == dtype
    torch.testing.assert_close(d.cpu(), x, rtol=0, atol=0)


def test_empty_and_strided_factories(native_only):
    e = torch.empty(3, 4, device="oxide")
    assert e.shape == (3, 4) and e.is_contiguous()
    s = torch.empty_strided((2, 3), (1, 2), device="oxide")
    assert s.stride() == (1, 2)
    cl = torch.empty(2, 3, 4, 5, device="oxide", memory_format=torch.channels_last)
    assert cl.is_contiguous(memory_format=torch.channels_last)
    z = torch.empty(0, device="oxide")
    assert z.numel() == 0 and z.cpu().shape == (0,)
    with pytest.raises(RuntimeError, match="pinned"):
        torch.empty(2, device="oxide", pin_memory=True)


def test_host_device_host_non_contiguous(native_only):
    x = torch.arange(24.0).reshape(4, 6)
    src = x.t()  # non-contiguous host source
    d = src.to("oxide")
    torch.testing.assert_close(d.cpu(), src)
    # non-contiguous device destination
    dst = torch.zeros(6, 8, device="oxide")[:, 1:5]
    dst.copy_(x.t())
    torch.testing.assert_close(dst.cpu(), x.t())
    torch.testing.assert_close(dst._base.cpu()[:, 0], torch.zeros(6))
    # non-contiguous device source to non-contiguous host destination
    host = torch.zeros(8, 6)[::2]
    host.copy_(torch.arange(24.0).reshape(6, 4).to("oxide").t())
    torch.testing.assert_close(host, torch.arange(24.0).reshape(6, 4).t())


def test_device_to_device_copies(native_only):
    x = torch.randn(5, 6)
    a = x.to("oxide:0")
    b = a.to("oxide:1")
    assert b.device.index == 1
    torch.testing.assert_close(b.cpu(), x)
    c = torch.empty(6, 5, device="oxide:1")
    c.copy_(a.t())  # cross-device, strided source
    torch.testing.assert_close(c.cpu(), x.t())
    clone = a.t().contiguous()
    assert clone.is_contiguous() and clone.device == a.device
    torch.testing.assert_close(clone.cpu(), x.t())


def test_copy_broadcasts_and_converts_dtype():
    dst = torch.zeros(3, 4, device="oxide")
    dst.copy_(torch.arange(4))  # int64 host -> float32 device, broadcast
    torch.testing.assert_close(dst.cpu(), torch.arange(4.0).expand(3, 4))
    d64 = torch.zeros(3, 4, dtype=torch.float64, device="oxide")
    d64.copy_(dst)  # device cast (staged through the host for now)
    torch.testing.assert_close(d64.cpu(), torch.arange(4.0, dtype=torch.float64).expand(3, 4))
    x = torch.arange(6.0, device="oxide").reshape(2, 3)
    x.copy_(x.t().t())  # same memory
    torch.testing.assert_close(x.cpu(), torch.arange(6.0).reshape(2, 3))
    for make in (lambda: torch.arange(9.0).reshape(3, 3), lambda: torch.arange(9.0, device="oxide").reshape(3, 3)):
        sq = make()  # overlapping source and destination: rejected on CPU and on oxide alike
        with pytest.raises(RuntimeError, match="refer to a single memory location"):
            sq.copy_(sq.t())
    a = torch.arange(10.0, device="oxide")
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        a[1:].copy_(a[:-1])


def test_non_blocking_copies():
    x = torch.randn(1000)
    d = x.to("oxide", non_blocking=True)
    back = d.to("cpu", non_blocking=True)
    torch.oxide.synchronize()
    torch.testing.assert_close(back, x)


def test_as_strided_with_storage_offset(native_only):
    base = torch.arange(20.0)
    d = base.to("oxide")
    v = d.as_strided((3, 2), (4, 1), 5)
    torch.testing.assert_close(v.cpu(), base.as_strided((3, 2), (4, 1), 5))
    assert v.storage_offset() == 5
    assert v.untyped_storage().data_ptr() == d.untyped_storage().data_ptr()


def test_inplace_write_through_view_is_visible_in_base(native_only):
    d = torch.zeros(4, 5, device="oxide")
    row = d[1]
    row.copy_(torch.arange(5.0))
    col = d[:, 3]
    col.copy_(torch.full((4,), 7.0))
    expected = torch.zeros(4, 5)
    expected[1] = torch.arange(5.0)
    expected[:, 3] = 7.0
    torch.testing.assert_close(d.cpu(), expected)
    flat = d.view(20)
    assert flat.data_ptr() == d.data_ptr()
    r = d.t().reshape(20)  # not viewable: copies through _reshape_alias / clone
    torch.testing.assert_close(r.cpu(), expected.t().reshape(20))


def test_view_ops_agree_with_cpu():
    x = torch.randn(2, 3, 4)
    d = x.to("oxide")
    for f in [
        lambda t: t.view(6, 4),
        lambda t: t.permute(2, 0, 1),
        lambda t: t[:, 1:, ::2],
        lambda t: t.unsqueeze(1).expand(2, 5, 3, 4),
        lambda t: t.transpose(0, 2).unbind(0)[1],
        lambda t: t.reshape(-1),
        lambda t: t.narrow(2, 1, 2).squeeze(),
    ]:
        torch.testing.assert_close(f(d).cpu(), f(x))


def test_resize_(native_only):
    d = torch.arange(6.0).to("oxide")
    d.resize_(2, 3)
    assert d.shape == (2, 3)
    torch.testing.assert_close(d.cpu(), torch.arange(6.0).reshape(2, 3))
    d.resize_(4, 5)  # grows: the first 6 elements survive
    assert d.shape == (4, 5) and d.untyped_storage().nbytes() >= 80
    torch.testing.assert_close(d.view(-1)[:6].cpu(), torch.arange(6.0))
    d.resize_(2, 2, 2, 2, memory_format=torch.channels_last)
    assert d.is_contiguous(memory_format=torch.channels_last)
    with pytest.raises(RuntimeError, match="negative dimension"):  # RuntimeError, as on CPU
        d.resize_(-1)


def test_untyped_storage_resize_keeps_bytes(native_only):
    d = torch.arange(4, dtype=torch.int32).to("oxide")
    s = d.untyped_storage()
    s.resize_(64)
    assert s.nbytes() == 64
    assert torch.tensor([], dtype=torch.int32, device="oxide").set_(s, 0, (4,), (1,)).cpu().tolist() == [0, 1, 2, 3]
    s.resize_(8)
    assert s.nbytes() == 8
    assert torch.tensor([], dtype=torch.int32, device="oxide").set_(s, 0, (2,), (1,)).cpu().tolist() == [0, 1]


def test_set_overloads(native_only):
    src = torch.arange(10.0).to("oxide")
    t = torch.empty(0, device="oxide")
    t.set_(src)  # set_.source_Tensor
    assert t.data_ptr() == src.data_ptr() and t.shape == (10,)
    u = torch.empty(0, device="oxide")
    u.set_(src.untyped_storage())  # set_.source_Storage
    assert u.shape == (10,)
    w = torch.empty(0, device="oxide")
    w.set_(src.untyped_storage(), 2, (2, 3), (3, 1))  # set_.source_Storage_storage_offset
    torch.testing.assert_close(w.cpu(), torch.arange(10.0).as_strided((2, 3), (3, 1), 2))
    w.set_()  # set_ (empty storage)
    assert w.numel() == 0 and w.device.type == "oxide"


def test_item_and_local_scalar(native_only):
    assert torch.tensor(3.5).to("oxide").item() == 3.5
    assert torch.tensor(True).to("oxide").item() is True
    assert torch.tensor([[7]], dtype=torch.int64).to("oxide").item() == 7
    assert torch.tensor(1.5, dtype=torch.bfloat16).to("oxide").item() == 1.5


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.empty(0),
        lambda: torch.tensor(2.5),
        lambda: torch.tensor([True, False, True]),
        lambda: torch.tensor([1.5, -2.25], dtype=torch.bfloat16),
        lambda: torch.arange(1500.0).reshape(30, 50),
        lambda: torch.arange(12, dtype=torch.int16).reshape(3, 4),
    ],
    ids=["empty", "0-dim", "bool", "bf16", "more-than-1000", "int16"],
)
def test_printing_matches_cpu(make):
    x = make()
    d = x.to("oxide")
    text = repr(d)
    assert "device='oxide:0'" in text
    assert text.replace(", device='oxide:0'", "") == repr(x)


def test_conjugate_and_negative_views_copy_correctly():
    z = torch.tensor([1 + 1j, 2 - 1j])
    d = z.to("oxide")
    torch.testing.assert_close(d.conj().cpu(), z.conj())
    torch.testing.assert_close((d.conj().imag + 1).cpu(), z.conj().imag + 1)
    torch.testing.assert_close(d.conj().to("oxide:1").cpu(), z.conj())
    torch.testing.assert_close(d.conj().clone().cpu(), z.conj())
    dst = torch.zeros(2, dtype=torch.complex64, device="oxide")
    dst.conj().copy_(d)  # writing through a conjugated view
    torch.testing.assert_close(dst.cpu(), z.conj())


def test_real_imag_view_as_real_complex_and_unfold_are_views():
    z = torch.zeros(3, dtype=torch.complex64, device="oxide")
    z.real.fill_(1)
    z.imag.add_(2)
    torch.view_as_real(z)[:, 0].mul_(3)
    assert z.cpu().tolist() == [3 + 2j] * 3
    y = torch.zeros(3, 2, device="oxide")
    torch.view_as_complex(y).fill_(1 + 1j)
    assert y.cpu().tolist() == [[1.0, 1.0]] * 3
    x = torch.zeros(6, device="oxide")
    x.unfold(0, 2, 2).fill_(1)
    assert x.cpu().tolist() == [1.0] * 6


def test_fill_checks_overflow_and_accepts_expanded_views():
    with pytest.raises(RuntimeError, match="cannot be converted to type c10::Half without overflow"):
        torch.zeros(2, dtype=torch.float16, device="oxide").fill_(1e40)
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.zeros(2, dtype=torch.int8, device="oxide").fill_(300)
    e = torch.zeros(1, device="oxide")
    e.expand(4).fill_(2)  # every element is the same memory: legal, as on CPU
    assert e.cpu().item() == 2
    cpu = torch.zeros(3)
    cpu.fill_(torch.tensor(5.0, device="oxide"))  # a CPU tensor filled from a 0-dim oxide value
    assert cpu.tolist() == [5.0] * 3
