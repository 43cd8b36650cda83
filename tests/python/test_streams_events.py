"""Generic torch.Stream / torch.Event / torch.accelerator stream calls on oxide (DeviceGuardImpl)."""

import time

import pytest
import torch


def test_default_and_new_streams():
    default = torch.accelerator.current_stream()
    assert default.device_type == torch._C._autograd.DeviceType.PrivateUse1 or default.device.type == "oxide"
    assert default.stream_id == 0
    s1, s2 = torch.Stream(device="oxide"), torch.Stream(device="oxide:1")
    assert s1.stream_id != 0 and s1.device.index == 0
    assert s2.device.index == 1
    assert s1.query()
    s1.synchronize()


def test_set_stream_is_thread_and_device_local():
    s = torch.Stream(device="oxide")
    prev = torch.accelerator.current_stream()
    torch.accelerator.set_stream(s)
    try:
        assert torch.accelerator.current_stream().stream_id == s.stream_id
        assert torch.accelerator.current_stream(1).stream_id == 0
        x = torch.ones(8, device="oxide") * 2  # work enqueued on s
        s.synchronize()
        assert x.sum().item() == 16
    finally:
        torch.accelerator.set_stream(prev)
    assert torch.accelerator.current_stream().stream_id == 0


def test_event_elapsed_time_is_real():
    s = torch.accelerator.current_stream()
    start, end = torch.Event(device="oxide", enable_timing=True), torch.Event(device="oxide", enable_timing=True)
    start.record(s)
    time.sleep(0.02)
    end.record(s)
    end.synchronize()
    assert end.query()
    ms = start.elapsed_time(end)
    assert 15.0 <= ms < 5000.0


def test_elapsed_time_needs_timing():
    a, b = torch.Event(device="oxide", enable_timing=False), torch.Event(device="oxide", enable_timing=False)
    a.record()
    b.record()
    # torch 2.15 raises ValueError here for CUDA too (CUDAEvent and InlineEvent use TORCH_CHECK_VALUE).
    with pytest.raises(ValueError, match="created with argument 'enable_timing=True'"):
        a.elapsed_time(b)


def test_elapsed_time_needs_recorded_events():
    a, b = torch.Event(device="oxide", enable_timing=True), torch.Event(device="oxide", enable_timing=True)
    with pytest.raises(ValueError, match="Both events must be recorded"):
        a.elapsed_time(b)
    a.record()
    with pytest.raises(ValueError, match="Both events must be recorded"):
        a.elapsed_time(b)
    with pytest.raises(ValueError, match="Both events must be recorded"):
        b.elapsed_time(a)
    b.record()
    assert a.elapsed_time(b) >= 0.0


def test_wait_event_wait_stream_record_stream():
    s1, s2 = torch.Stream(device="oxide"), torch.Stream(device="oxide")
    e = torch.Event(device="oxide")
    e.record(s1)
    s2.wait_event(e)
    s2.wait_stream(s1)
    x = torch.ones(4, device="oxide")
    x.record_stream(s2)
    del x
    torch.accelerator.synchronize()


def test_record_stream_with_another_devices_stream():
    # CUDA accepts a stream of another device (a peer reads the tensor there) and just
    # records the use; the tensor stays as it was and can be freed and reused.
    s0 = torch.oxide.Stream(0)
    y = torch.arange(6.0, device="oxide:1")
    y.record_stream(s0)
    y.record_stream(torch.oxide.default_stream(0))
    y.record_stream(torch.oxide.Stream(1))
    assert y.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    del y
    torch.oxide.synchronize(1)
    z = torch.full((6,), 2.0, device="oxide:1")
    assert z.sum().item() == 12.0


def test_invalid_device_index_is_refused_by_stream_functions():
    count = torch.oxide.device_count()
    for call in (
        lambda: torch.oxide.default_stream(count + 5),
        lambda: torch.oxide.current_stream(count),
        lambda: torch.oxide.Stream(count),
        lambda: torch.oxide.default_stream(-2),
    ):
        with pytest.raises(RuntimeError, match="invalid device index"):
            call()
    # -1 and None mean the current device, as with torch.cuda.
    assert torch.oxide.default_stream(-1).device_index == torch.oxide.current_device()
    assert torch.oxide.default_stream("oxide:1").device_index == 1


def test_new_streams_come_from_a_bounded_pool():
    # As torch.cuda.Stream(): streams are handed out round-robin from a fixed pool per
    # priority, so making streams never grows what the runtime tracks or synchronises.
    from torch_oxide import _C

    tracked = _C._stream_count(0)
    first = [torch.oxide.Stream(0) for _ in range(32)]
    ids = [s.stream_id for s in first]
    assert len(set(ids)) == 32 and 0 not in ids
    again = torch.oxide.Stream(0)
    assert again.stream_id in ids, "the 33rd stream reuses a pool stream"
    high = {torch.oxide.Stream(0, priority=-1).stream_id for _ in range(64)}
    assert len(high) == 32 and not high & set(ids), "high priority has its own pool"
    generic = {torch.Stream(device="oxide:0").stream_id for _ in range(1000)}
    assert generic <= set(ids)
    assert _C._stream_count(0) == tracked
    # A reused stream still orders its work.
    with torch.oxide.stream(again):
        x = torch.arange(4.0, device="oxide") * 2
    again.synchronize()
    torch.oxide.synchronize()
    assert x.cpu().tolist() == [0.0, 2.0, 4.0, 6.0]


def test_oxide_stream_api():
    s = torch.oxide.Stream()
    assert isinstance(s, torch.Stream) and s.device_index == 0 and s.oxide_stream > 0
    assert torch.oxide.current_stream() == torch.oxide.default_stream()
    assert torch.oxide.default_stream(1).device_index == 1
    with torch.oxide.stream(s):
        assert torch.oxide.current_stream() == s
        y = torch.ones(4, device="oxide") * 3
    assert torch.oxide.current_stream().oxide_stream == 0
    s.synchronize()
    assert s.query() and y.cpu().tolist() == [3.0] * 4
    with torch.oxide.stream(torch.oxide.Stream(1)):  # switches device too, and restores it
        assert torch.oxide.current_device() == 1
    assert torch.oxide.current_device() == 0
    with torch.oxide.stream(None):
        assert torch.oxide.current_stream().oxide_stream == 0
    torch.oxide.set_stream(s)
    try:
        assert torch.oxide.current_stream() == s
    finally:
        torch.oxide.set_stream(torch.oxide.default_stream())
    with pytest.raises(RuntimeError, match="invalid device index"):
        torch.oxide.Stream(9)


def test_oxide_event_api():
    s1, s2 = torch.oxide.Stream(), torch.oxide.Stream()
    start, end = torch.oxide.Event(enable_timing=True), torch.oxide.Event(enable_timing=True)
    start.record()
    time.sleep(0.01)
    end.record()
    end.synchronize()
    assert end.query() and start.elapsed_time(end) >= 8.0
    ev = s1.record_event()
    s2.wait_event(ev)
    s2.wait_stream(s1)
    assert ev.query()
    x = torch.ones(3, device="oxide")
    x.record_stream(s2)
    torch.oxide.synchronize()


def test_elapsed_time_across_devices_is_rejected():
    a = torch.Event(device="oxide:0", enable_timing=True)
    b = torch.Event(device="oxide:1", enable_timing=True)
    a.record(torch.accelerator.current_stream(0))
    b.record(torch.accelerator.current_stream(1))
    # A CUDA error (cudaErrorInvalidResourceHandle) on CUDA: a RuntimeError.
    with pytest.raises(RuntimeError, match="same device"):
        a.elapsed_time(b)
