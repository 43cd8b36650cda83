"""Caching allocator statistics, empty_cache, out-of-memory, torch.accelerator memory API."""

import gc
import os
import pickle
import signal
import subprocess
import sys

import pytest
import torch
from conftest import run_python

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
    for key in [
        "allocated_bytes.all.current",
        "reserved_bytes.all.peak",
        "num_ooms",
        "num_alloc_retries",
        "allocation.all.current",
        "segment.all.current",
        "requested_bytes.all.current",
    ]:
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


def test_freed_middle_block_does_not_cause_false_out_of_memory():
    # A flat first-fit range of 64 MB had 30 MB free after this sequence but no 24 MiB
    # hole, and the allocation failed; capacity is an accounting limit now.
    out = run_python(
        """
        import torch
        MiB = 2**20
        a, b, c = (torch.full((16 * MiB,), i, dtype=torch.uint8, device="oxide") for i in (1, 2, 3))
        del b
        torch.oxide.empty_cache()
        free, total = torch.oxide.mem_get_info()
        assert free > 24 * MiB, (free, total)
        d = torch.full((24 * MiB,), 4, dtype=torch.uint8, device="oxide")
        print("ok", int(a.cpu().sum()), int(c.cpu().sum()), int(d.cpu().sum()))
        try:
            torch.empty(40 * MiB, dtype=torch.uint8, device="oxide")
        except torch.OutOfMemoryError as e:
            print("OOM", e)
        print("after", int(a.cpu().sum()), int(c.cpu().sum()), int(d.cpu().sum()), torch.oxide.memory_stats()["num_ooms"])
    """,
        env={"OXIDE_DEVICE_MEMORY": "64MB"},
    )
    assert out.returncode == 0, out.stderr
    mib = 2**20
    sums = f"{16 * mib} {3 * 16 * mib} {4 * 24 * mib}"
    lines = out.stdout.splitlines()
    assert lines[0] == f"ok {sums}"
    oom = lines[1]
    for part in (
        f"tried to allocate {40 * mib} bytes on oxide:0",
        "device capacity 64000000 bytes",
        f"{64000000 - 56 * mib} bytes are free",
        f"{56 * mib} bytes allocated by tensors",
    ):
        assert part in oom, (part, oom)
    assert "fragment" not in oom, oom
    assert lines[2] == f"after {sums} 1", "an out-of-memory error leaves the device's tensors intact"


def test_out_of_memory_message_names_the_numbers():
    cap = torch.oxide.mem_get_info(1)[1]
    with pytest.raises(torch.OutOfMemoryError) as info:
        torch.empty(cap + 512, dtype=torch.uint8, device="oxide:1")
    msg = str(info.value)
    assert f"tried to allocate {cap + 512} bytes on oxide:1" in msg, msg
    assert f"device capacity {cap} bytes" in msg and "bytes are free" in msg, msg
    assert "allocated by tensors" in msg and "reserved by the caching allocator" in msg, msg


def _allocate_in_a_named_function(n):
    return torch.empty(n, dtype=torch.uint8, device="oxide:1")


def test_memory_history_and_snapshot_in_cuda_schema(tmp_path):
    from torch.cuda import _memory_viz

    _collect()
    # No collection of earlier tests' garbage between the snapshot and the statistics below.
    gc.disable()
    torch.oxide._record_memory_history(max_entries=10_000)
    try:
        kept = _allocate_in_a_named_function(3 << 20)
        dropped = _allocate_in_a_named_function(5000)
        del dropped
        snap = torch.oxide._snapshot()
        allocated = [torch.oxide.memory_allocated(d) for d in (0, 1)]
        reserved = [torch.oxide.memory_reserved(d) for d in (0, 1)]
    finally:
        torch.oxide._record_memory_history(None)
        gc.enable()
    events = snap["device_traces"][1]
    actions = [(e["action"], e["size"]) for e in events if not e["action"].startswith("segment_")]
    assert actions == [("alloc", 3 << 20), ("alloc", 5000), ("free_requested", 5000), ("free_completed", 5000)]
    frames = next(e for e in events if e["action"] == "alloc")["frames"]
    assert frames[0]["name"] == "_allocate_in_a_named_function"
    assert frames[0]["filename"].endswith("test_memory.py")
    assert any(f["name"] == "test_memory_history_and_snapshot_in_cuda_schema" for f in frames)

    # Segments cover every live tensor and reconcile with the allocator's statistics.
    for device in (0, 1):
        segs = [s for s in snap["segments"] if s["device"] == device]
        active = sum(b["size"] for s in segs for b in s["blocks"] if b["state"] == "active_allocated")
        assert active == allocated[device]
        assert sum(s["total_size"] for s in segs) == reserved[device]
    ours = next(s for s in snap["segments"] if s["address"] == kept.data_ptr())
    assert ours["blocks"][0]["state"] == "active_allocated"
    assert ours["blocks"][0]["requested_size"] == 3 << 20
    assert ours["blocks"][0]["frames"][0]["name"] == "_allocate_in_a_named_function"
    _collect()

    def live_on_1(segments):
        return {s["address"] for s in segments if s["device"] == 1 and s["blocks"][0]["state"] == "active_allocated"}

    assert kept.data_ptr() in live_on_1(torch.oxide.memory_snapshot()) == live_on_1(torch.oxide._snapshot()["segments"])

    # PyTorch's visualizer renders it unchanged.
    assert "segments: " in _memory_viz.segsum(snap)
    assert "_allocate_in_a_named_function" in _memory_viz.memory(snap, format_flamegraph=lambda text: text)
    assert "free completed" in _memory_viz.trace(snap)
    assert "<html" in _memory_viz.trace_plot(snap).lower()
    path = tmp_path / "snapshot.pickle"
    torch.oxide._dump_snapshot(str(path))
    with open(path, "rb") as f:
        assert pickle.load(f)["segments"]

    # Stopped: nothing more is recorded; restarting clears and max_entries keeps the newest.
    _allocate_in_a_named_function(100)
    assert len(torch.oxide._snapshot()["device_traces"][1]) == len(events)
    torch.oxide._record_memory_history(max_entries=2)
    try:
        for n in (100, 200, 300):
            _allocate_in_a_named_function(n)
        sizes = [e["size"] for e in torch.oxide._snapshot()["device_traces"][1]]
    finally:
        torch.oxide._record_memory_history(None)
    assert sizes[-2:] == [300, 300] and len(sizes) == 2
    with pytest.raises(ValueError):
        torch.oxide._record_memory_history(enabled="yes")
    del kept


def test_memory_history_segments_and_oom():
    from torch.cuda import _memory_viz

    _collect()
    torch.oxide.empty_cache()
    torch.oxide._record_memory_history(max_entries=10_000)
    try:
        a = _allocate_in_a_named_function(7 << 20)  # a fresh segment
        addr = a.data_ptr()
        del a
        _collect()
        torch.oxide.empty_cache()  # gives the segment back
        capacity = torch.oxide.mem_get_info(1)[1]
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(2 * capacity, dtype=torch.uint8, device="oxide:1")
        snap = torch.oxide._snapshot()
    finally:
        torch.oxide._record_memory_history(None)
    events = snap["device_traces"][1]
    seen = [(e["action"], e["addr"], e["size"]) for e in events]
    assert seen.index(("segment_alloc", addr, 7 << 20)) < seen.index(("alloc", addr, 7 << 20))
    assert seen.index(("free_completed", addr, 7 << 20)) < seen.index(("segment_free", addr, 7 << 20))
    oom = [e for e in events if e["action"] == "oom"]
    assert len(oom) == 1 and oom[0]["size"] == 2 * capacity
    assert 0 < oom[0]["device_free"] <= capacity
    text = _memory_viz.trace(snap)
    assert "cudaMalloc(" in text and "cudaFree(" in text and "raise OutOfMemoryError" in text
    # Stopped: the allocators no longer keep segment changes.
    b = _allocate_in_a_named_function(9 << 20)
    del b
    assert len(torch.oxide._snapshot()["device_traces"][1]) == len(events)


_HOLDER = """
import sys, torch, torch_oxide
x = torch.empty(5 << 20, dtype=torch.uint8, device="oxide:1")
print("ready", flush=True)
sys.stdin.readline()
"""


def _start_holder(env):
    p = subprocess.Popen(
        [sys.executable, "-c", _HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    assert p.stdout.readline().strip() == "ready"
    return p


def test_live_memory_of_other_processes(tmp_path, monkeypatch):
    from torch_oxide.__main__ import processes

    monkeypatch.setenv("OXIDE_SHM_DIR", str(tmp_path))
    env = dict(os.environ)
    holder = _start_holder(env)
    try:
        out = subprocess.run(
            [sys.executable, "-m", "torch_oxide"], capture_output=True, text=True, env=env, timeout=120
        )
        assert out.returncode == 0, out.stderr
        rows = [line.split() for line in out.stdout.splitlines()]
        row = next(r for r in rows if r[:2] == [str(holder.pid), "oxide:1"])
        assert row[2:4] == ["5.0", "MiB"]
        found = {p.pid: p for p in processes()}
        assert found[holder.pid].devices[1].allocated == 5 << 20
        assert found[holder.pid].devices[1].capacity == torch.oxide.mem_get_info(1)[1]
    finally:
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=60)
    assert holder.returncode == 0
    assert not (tmp_path / f"torch-oxide-{holder.pid}.mem").exists()  # removed at exit

    # A killed process cannot remove its file; the reader skips and removes it.
    killed = _start_holder(env)
    killed.kill()
    killed.wait(timeout=60)
    assert (tmp_path / f"torch-oxide-{killed.pid}.mem").exists()
    assert killed.pid not in {p.pid for p in processes()}
    assert not (tmp_path / f"torch-oxide-{killed.pid}.mem").exists()

    # A process that publishes removes the files that killed ones left behind.
    killed = _start_holder(env)
    killed.kill()
    killed.wait(timeout=60)
    assert (tmp_path / f"torch-oxide-{killed.pid}.mem").exists()
    other = _start_holder(env)
    assert not (tmp_path / f"torch-oxide-{killed.pid}.mem").exists()

    # SIGTERM (how multiprocessing and torchrun stop workers): the file goes with
    # the process, which still dies of the signal.
    other.terminate()
    other.wait(timeout=60)
    assert other.returncode == -signal.SIGTERM
    assert not (tmp_path / f"torch-oxide-{other.pid}.mem").exists()
