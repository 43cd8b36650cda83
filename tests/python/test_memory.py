"""Caching allocator statistics, empty_cache, out-of-memory, torch.accelerator memory API."""

import gc

import pytest
import torch

MiB = 2**20


def _collect():
    gc.collect()
    torch.oxide.synchronize()


def test_stats_return_to_baseline():
    _collect()
    # A cached block left by an earlier test may be handed out whole for a smaller
    # request (its remainder too small to split, as in CUDA's allocator), which would
    # count more than the request as allocated; start from an empty cache.
    torch.oxide.empty_cache()
    base = torch.oxide.memory_allocated()
    x = torch.empty(MiB, dtype=torch.uint8, device="oxide")
    assert torch.oxide.memory_allocated() == base + MiB
    assert torch.accelerator.memory_allocated() == base + MiB
    assert torch.oxide.memory_reserved() >= torch.oxide.memory_allocated()
    y = x.view(2, -1)  # views share the block
    assert torch.oxide.memory_allocated() == base + MiB
    del x, y
    _collect()
    assert torch.oxide.memory_allocated() == base
    assert torch.accelerator.memory_allocated() == base


def test_peak_and_reset():
    _collect()
    torch.oxide.reset_peak_memory_stats()
    base = torch.oxide.memory_allocated()
    x = torch.empty(4 * MiB, dtype=torch.uint8, device="oxide")
    del x
    _collect()
    assert torch.oxide.max_memory_allocated() >= base + 4 * MiB
    assert torch.accelerator.max_memory_allocated() == torch.oxide.max_memory_allocated()
    torch.oxide.reset_peak_memory_stats()
    assert torch.oxide.max_memory_allocated() == torch.oxide.memory_allocated()
    torch.accelerator.reset_peak_memory_stats()


def test_caching_and_empty_cache():
    _collect()
    x = torch.empty(8 * MiB, dtype=torch.uint8, device="oxide")
    ptr = x.data_ptr()
    del x
    _collect()
    reserved = torch.oxide.memory_reserved()
    y = torch.empty(8 * MiB, dtype=torch.uint8, device="oxide")
    assert y.data_ptr() == ptr, "a freed block is reused from the cache"
    del y
    _collect()
    torch.oxide.empty_cache()
    assert torch.oxide.memory_reserved() <= reserved - 8 * MiB
    torch.accelerator.empty_cache()


def test_memory_stats_shape_and_mem_get_info():
    stats = torch.oxide.memory_stats()
    for key in ["allocated_bytes.all.current", "reserved_bytes.all.peak", "num_ooms", "num_alloc_retries",
                "allocation.all.current", "segment.all.current", "requested_bytes.all.current"]:
        assert key in stats
    acc = torch.accelerator.memory_stats()
    assert acc["allocated_bytes.all.current"] == stats["allocated_bytes.all.current"]
    free, total = torch.oxide.mem_get_info(1)
    assert total == 4 * 2**30 and 0 < free <= total
    assert torch.accelerator.get_memory_info(1) == (free, total)


def test_stats_are_per_device():
    _collect()
    before = torch.oxide.memory_allocated(1)
    x = torch.empty(MiB, dtype=torch.uint8, device="oxide:1")
    assert torch.oxide.memory_allocated(1) == before + MiB
    del x


def test_out_of_memory_raises_and_process_survives():
    keep = torch.arange(1000.0, device="oxide")
    with pytest.raises(torch.OutOfMemoryError) as info:
        torch.empty(5 * 2**30, dtype=torch.uint8, device="oxide")
    msg = str(info.value)
    assert "out of memory" in msg and "oxide:0" in msg and str(5 * 2**30) in msg and "capacity" in msg
    assert torch.oxide.memory_stats()["num_ooms"] >= 1
    # nothing already on the device was lost, and new allocations work
    torch.testing.assert_close(keep.cpu(), torch.arange(1000.0))
    assert torch.ones(10, device="oxide").sum().item() == 10
