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
