"""torch.profiler and the legacy autograd profiler on oxide: per-kernel device
time from the Kineto child profiler, trace lanes and flow arrows, memory events."""

import json
import pickle
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from conftest import run_python
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function

DEVICE = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def _inputs():
    x = torch.randn(64, 64, device="oxide")
    w = torch.randn(8, 3, 3, 3, device="oxide")
    img = torch.randn(2, 3, 16, 16, device="oxide")
    # Warm up: the first launch of each kernel signature runs at the call.
    torch.mm(x, x), torch.nn.functional.conv2d(img, w)
    torch.oxide.synchronize()
    return x, w, img


def _trace(prof, tmp_path):
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return json.loads(path.read_text())["traceEvents"]


def test_device_time_per_operator():
    x, w, img = _inputs()
    with profile(activities=DEVICE) as prof:
        torch.mm(x, x)
        torch.nn.functional.conv2d(img, w)
    avg = {e.key: e for e in prof.key_averages()}
    assert avg["aten::mm"].device_time_total > 0
    assert avg["aten::mm"].self_device_time_total > 0
    # conv2d reaches the backend as convolution_overrideable, under aten::convolution.
    assert avg["aten::convolution"].device_time_total > 0
    assert avg["aten::convolution"].device_time_total >= avg["aten::convolution_overrideable"].self_device_time_total
    # The kernels themselves are rows too (as CUDA's kernel names are), on the oxide device.
    assert avg["oxide_gemm"].self_device_time_total > 0
    kernels = [e for e in prof.events() if e.name == "oxide_gemm"]
    assert kernels and all(e.device_type == DeviceType.PrivateUse1 for e in kernels)
    table = prof.key_averages().table(sort_by="device_time_total", row_limit=5)
    assert "Self OXIDE" in table and "OXIDE total" in table


def test_kernels_not_yet_run_at_exit_are_in_the_profile():
    # No synchronize inside the block: stopping the profiler waits for queued work.
    x, _, _ = _inputs()
    with profile(activities=DEVICE) as prof:
        for _ in range(20):
            torch.mm(x, x)
    assert sum(e.count for e in prof.key_averages() if e.key == "oxide_gemm") == 20


def test_chrome_trace_has_lanes_kernels_and_flows(tmp_path):
    x, _, _ = _inputs()
    side = torch.Stream(device="oxide")
    with profile(activities=DEVICE) as prof:
        with record_function("my_range"):
            torch.mm(x, x)
            with side:
                torch.add(x, 1)
            side.synchronize()
            torch.ones(100).to("oxide")
    events = _trace(prof, tmp_path)
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert {"oxide_gemm", "oxide_pointwise"} <= {e["name"] for e in kernels}
    assert any(e.get("cat") == "gpu_memcpy" and e["name"].startswith("Memcpy HtoD") for e in events)
    # One lane per stream on the device's process, named after it.
    assert {e["tid"] for e in kernels} == {0, side.stream_id}
    assert all(e["pid"] == 0 for e in kernels)
    names = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"
    }
    assert names[(0, side.stream_id)] == f"stream {side.stream_id}"
    assert any(e.get("ph") == "M" and e["name"] == "process_name" and e["args"]["name"] == "oxide 0" for e in events)
    # Each kernel is linked to the operator that launched it and has a launch-to-kernel arrow.
    mm = next(e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::mm")
    gemm = next(e for e in kernels if e["name"] == "oxide_gemm")
    assert gemm["args"]["External id"] == mm["args"]["External id"]
    assert gemm["ts"] >= mm["ts"]  # one clock for host and device
    starts = {e["id"]: e for e in events if e.get("cat") == "ac2g" and e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e.get("cat") == "ac2g" and e["ph"] == "f"}
    assert len(ends) >= 3 and starts.keys() == ends.keys()
    assert all(ends[i]["pid"] == 0 and starts[i]["pid"] != 0 for i in ends)
    assert any(e.get("cat") == "user_annotation" and e["name"] == "my_range" for e in events)
    assert any(e.get("cat") == "privateuse1_runtime" and e["name"] == "oxideLaunchKernel" for e in events)


def test_second_device_has_its_own_lanes(tmp_path):
    if torch.oxide.device_count() < 2:
        pytest.skip("needs two oxide devices (OXIDE_DEVICE_COUNT >= 2)")
    y = torch.randn(32, 32, device="oxide:1")
    torch.mm(y, y)
    torch.oxide.synchronize(1)
    with profile(activities=DEVICE) as prof:
        torch.mm(y, y)
    events = _trace(prof, tmp_path)
    assert any(e.get("cat") == "kernel" and e["pid"] == 1 for e in events)
    assert any(e.get("ph") == "M" and e["name"] == "process_name" and e["args"]["name"] == "oxide 1" for e in events)


def test_backward_kernels_on_autograd_thread_are_linked():
    x = torch.randn(32, 32, device="oxide", requires_grad=True)
    (x @ x).sum().backward()
    with profile(activities=DEVICE) as prof:
        (x @ x).sum().backward()
    avg = {e.key: e for e in prof.key_averages()}
    assert avg["MmBackward0"].device_time_total > 0


def test_cpu_only_profile_records_no_device_activity(tmp_path):
    x, _, _ = _inputs()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.mm(x, x)
    events = _trace(prof, tmp_path)
    assert not [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "privateuse1_runtime")]
    assert all(e.self_device_time_total == 0 for e in prof.key_averages())


def test_profiles_do_not_leak_into_each_other():
    x, _, _ = _inputs()
    with profile(activities=DEVICE):
        torch.mm(x, x)
    for _ in range(5):
        torch.mm(x, x)  # between profiles: not recorded
    with profile(activities=DEVICE) as prof:
        torch.add(x, 1)
    keys = {e.key for e in prof.key_averages()}
    assert "oxide_pointwise" in keys and "oxide_gemm" not in keys


def test_profile_memory_reports_device_allocations():
    torch.oxide.synchronize()
    with profile(activities=DEVICE, profile_memory=True) as prof:
        a = torch.empty(1 << 20, dtype=torch.uint8, device="oxide")
        del a
    rows = {e.key: e for e in prof.key_averages()}
    assert rows["aten::empty"].device_memory_usage == 1 << 20
    # The free happens outside any operator: a bare memory event, as CUDA's are.
    freed = [e.device_memory_usage for e in prof.events() if e.name == "[memory]"]
    assert freed == [-(1 << 20)]


def test_legacy_profiler_without_warnings():
    out = run_python(
        """
        import torch, torch_oxide
        x = torch.randn(64, 64, device="oxide")
        torch.mm(x, x)
        with torch.autograd.profiler.profile(use_device="oxide") as prof:
            y = torch.mm(x, x)
            y.sum().item()
        avg = {e.key: e for e in prof.key_averages()}
        assert avg["aten::mm"].device_time_total > 0, avg["aten::mm"]
        print("ok")
        """
    )
    assert out.returncode == 0, out.stderr
    assert "ok" in out.stdout
    assert "not enabled" not in out.stderr and "PrivateUse1 used in profiler" not in out.stderr


def test_profiling_from_threads():
    x, _, _ = _inputs()
    errors = []

    def work():
        try:
            for _ in range(10):
                torch.mm(x, x)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    with profile(activities=DEVICE) as prof:
        ts = [threading.Thread(target=work) for _ in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert not errors
    assert sum(e.count for e in prof.key_averages() if e.key == "oxide_gemm") == 20


def test_make_profile_writes_the_pictures(tmp_path):
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, str(root / "examples" / "profile_digits.py"), "--steps", "1", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert sum(e.get("cat") == "kernel" for e in events) > 10
    assert "<html" in (tmp_path / "memory_timeline.html").read_text().lower()
    assert "<html" in (tmp_path / "memory_trace.html").read_text().lower()
    snapshot = pickle.loads((tmp_path / "memory_snapshot.pickle").read_bytes())
    assert any(e["action"] == "alloc" for e in snapshot["device_traces"][0])
    assert "oxide_gemm" in (tmp_path / "operators.txt").read_text()
