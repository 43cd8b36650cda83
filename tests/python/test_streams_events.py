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
    a, b = torch.Event(device="oxide"), torch.Event(device="oxide")
    a.record()
    b.record()
    with pytest.raises(ValueError, match="enable_timing"):
        a.elapsed_time(b)


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
    with pytest.raises(RuntimeError, match="not on the tensor's device"):
        torch.ones(2, device="oxide:1").record_stream(s1)


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
    with pytest.raises(ValueError, match="same device"):
        a.elapsed_time(b)
