"""Pinned host memory: the PrivateUse1 host allocator, pin_memory paths and DataLoader."""

import warnings

import torch
from torch.utils.data import DataLoader, TensorDataset


def test_pin_memory_and_is_pinned():
    x = torch.randn(100)
    p = x.pin_memory()
    assert p.is_pinned() and not x.is_pinned()
    torch.testing.assert_close(p, x)
    assert torch.empty(16, pin_memory=True).is_pinned()
    assert torch.ones(8).untyped_storage().pin_memory().is_pinned()
    e = torch.empty(0, pin_memory=True)  # zero bytes: works, nothing to pin
    assert e.numel() == 0


def test_non_blocking_copy_from_pinned(native_only):
    p = torch.arange(1000.0).pin_memory()
    d = p.to("oxide", non_blocking=True)
    back = torch.empty(1000).pin_memory()
    back.copy_(d, non_blocking=True)
    torch.oxide.synchronize()
    torch.testing.assert_close(back, torch.arange(1000.0))


def test_dataloader_pins_for_oxide():
    ds = TensorDataset(torch.arange(20.0).view(10, 2), torch.arange(10))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # pin_memory_device is deprecated in favour of the accelerator
        loader = DataLoader(ds, batch_size=4, pin_memory=True, pin_memory_device="oxide")
        batches = list(loader)
    assert all(x.is_pinned() and y.is_pinned() for x, y in batches)
    plain = list(DataLoader(ds, batch_size=4, pin_memory=True))  # the current accelerator: oxide
    assert all(x.is_pinned() for x, _ in plain)
    moved = [x.to("oxide", non_blocking=True) for x, _ in batches]
    torch.testing.assert_close(torch.cat([m.cpu() for m in moved]), torch.arange(20.0).view(10, 2))


def test_host_allocator_registered():
    # pin_memory asks the hooks for the pinned allocator, which is at::getHostAllocator(PrivateUse1):
    # that lookup raises when REGISTER_HOST_ALLOCATOR was dropped by the linker.
    p = torch.ones(1000).pin_memory()
    assert p.is_pinned()
    torch._C._accelerator_emptyHostCache()  # HostAllocator::empty_cache: no cache, must not disturb live blocks
    assert p.is_pinned() and p.sum().item() == 1000
