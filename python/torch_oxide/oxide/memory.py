"""Device memory of oxide, shaped like ``torch.cuda.memory``: the caching allocator's
statistics, its per-process limit, snapshots and allocation history in CUDA's
schema (rendered unchanged by ``torch.cuda._memory_viz``). ``torch.oxide``
re-exports these, as ``torch.cuda`` does."""

from __future__ import annotations

import sys
from typing import Any

from .. import _C
from . import _device_index, _DeviceLike, _lazy_init, device_count, get_device_name, is_initialized

__all__ = [
    "mem_get_info",
    "memory_stats",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "reset_peak_memory_stats",
    "reset_accumulated_memory_stats",
    "empty_cache",
    "ipc_collect",
    "set_per_process_memory_fraction",
    "get_per_process_memory_fraction",
    "memory_snapshot",
    "memory_summary",
]


def mem_get_info(device: _DeviceLike = None) -> tuple[int, int]:
    """``(free, total)`` device memory in bytes; free excludes memory the caching allocator holds."""
    _lazy_init()
    return _C.mem_get_info(_device_index(device))


def memory_stats(device: _DeviceLike = None) -> dict[str, int]:
    """Caching-allocator statistics, keyed as ``torch.cuda.memory_stats()`` (bytes and counts)."""
    _lazy_init()
    return dict(sorted(_C.memory_stats(_device_index(device)).items()))


def memory_allocated(device: _DeviceLike = None) -> int:
    """Bytes currently held by tensors on ``device``."""
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device: _DeviceLike = None) -> int:
    """Peak of :func:`memory_allocated` since start or the last :func:`reset_peak_memory_stats`."""
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device: _DeviceLike = None) -> int:
    """Bytes held by the caching allocator on ``device`` (in use or cached)."""
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device: _DeviceLike = None) -> int:
    """Peak of :func:`memory_reserved`."""
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: _DeviceLike = None) -> None:
    """Make every peak statistic equal to its current value."""
    _lazy_init()
    _C.reset_peak_memory_stats(_device_index(device))


def reset_accumulated_memory_stats(device: _DeviceLike = None) -> None:
    """Zero the accumulated (allocated/freed totals, retries, OOM) statistics."""
    _lazy_init()
    _C.reset_accumulated_memory_stats(_device_index(device))


def empty_cache() -> None:
    """Release every cached, unused block of every device back to device memory,
    including blocks sent to other processes that every receiver has released."""
    if is_initialized():
        ipc_collect()
        _C.empty_cache()


def ipc_collect() -> None:
    """``torch.cuda.ipc_collect``: drop this process's references to storages it sent
    to other processes (``torch.multiprocessing``) that every receiver has released,
    so that their memory can be reused. Done anyway at each send and in ``empty_cache``."""
    from .._multiprocessing import ipc_collect as collect

    collect()


def set_per_process_memory_fraction(fraction: float, device: _DeviceLike = None) -> None:
    """Limit what the caching allocator of ``device`` may reserve to ``fraction`` of its
    memory (``torch.cuda.set_per_process_memory_fraction``): an allocation past it raises
    ``torch.OutOfMemoryError`` once the cache has been released. 1.0 removes the limit;
    memory reserved already is kept."""
    _lazy_init()
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool):
        raise TypeError(f"invalid type for fraction: {type(fraction).__name__}, expected a float")
    _C.set_memory_fraction(_device_index(device), float(fraction))


def get_per_process_memory_fraction(device: _DeviceLike = None) -> float:
    """The fraction :func:`set_per_process_memory_fraction` set for ``device`` (1.0: none)."""
    _lazy_init()
    return _C.memory_fraction(_device_index(device))


def _record_memory_history(
    enabled: str | None = "all",
    context: str | None = "all",
    stacks: str = "all",
    max_entries: int = sys.maxsize,
    device: _DeviceLike = None,
) -> None:
    """Start (``enabled="all"`` or ``"state"``) or stop (``None``) recording the caching
    allocator's allocations and frees of every device, as ``torch.cuda.memory._record_memory_history``.
    Each event keeps the Python stack that caused it unless ``context`` is None; oxide
    records Python frames only (``stacks="all"`` adds no C++ frames). ``max_entries``
    events are kept, the oldest dropped first. Starting clears what was recorded."""
    if enabled not in (None, "state", "all"):
        raise ValueError(f"enabled must be None, 'state' or 'all', got {enabled!r}")
    if context not in (None, "state", "alloc", "all"):
        raise ValueError(f"context must be None, 'state', 'alloc' or 'all', got {context!r}")
    if stacks not in ("python", "all"):
        raise ValueError(f"stacks must be 'python' or 'all', got {stacks!r}")
    _lazy_init()
    _C.record_memory_history(enabled is not None, context is not None, max(1, min(max_entries, 2**63 - 1)))


def _frames(stack: list[tuple[str, int, str]]) -> list[dict[str, Any]]:
    return [{"filename": f, "line": line, "name": name} for f, line, name in stack]


def _snapshot(device: _DeviceLike = None) -> dict[str, Any]:
    """The caching allocator's state in ``torch.cuda.memory._snapshot()``'s schema:
    ``segments`` (every block of every device; oxide reserves one segment per block)
    and ``device_traces`` (the events recorded by :func:`_record_memory_history`, one
    list per device: ``alloc``, ``free_requested``, ``free_completed``, ``segment_alloc``,
    ``segment_free`` and ``oom``), which ``torch.cuda._memory_viz`` renders."""
    _lazy_init()
    blocks, events = _C.memory_snapshot_raw()
    segments = []
    for dev, addr, size, requested, stream_id, state, stack in blocks:
        active = state != "inactive"
        frames = _frames(stack)
        segments.append(
            {
                "device": dev,
                "address": addr,
                "total_size": size,
                "allocated_size": size if state == "active_allocated" else 0,
                "active_size": size if active else 0,
                "requested_size": requested,
                "stream": stream_id,
                "segment_type": "large" if size > 1 << 20 else "small",
                "segment_pool_id": (0, 0),
                "is_expandable": False,
                "frames": frames,
                "blocks": [
                    {"address": addr, "size": size, "requested_size": requested, "state": state, "frames": frames}
                ],
            }
        )
    traces: list[list[dict[str, Any]]] = [[] for _ in range(device_count())]
    for dev, action, addr, size, stream_id, time_us, stack in events:
        entry = {
            "action": action,
            "addr": addr,
            "size": size,
            "stream": stream_id,
            "time_us": time_us,
            "frames": _frames(stack),
        }
        if action == "oom":  # the runtime passes the free bytes in the address field
            entry["addr"], entry["device_free"] = 0, addr
        traces[dev].append(entry)
    return {"segments": segments, "device_traces": traces}


def memory_snapshot() -> list[dict[str, Any]]:
    """The segments of :func:`_snapshot` (``torch.cuda.memory_snapshot``)."""
    return _snapshot()["segments"]


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Pickle :func:`_snapshot` to ``filename``, for https://pytorch.org/memory_viz or
    ``python -m torch.cuda._memory_viz trace_plot FILE -o FILE.html``."""
    import pickle

    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)


def memory_summary(device: _DeviceLike = None, abbreviated: bool = False) -> str:
    """The caching allocator's statistics of ``device`` as a table (``torch.cuda.memory_summary``'s
    rows: current, peak, allocated and freed totals), for printing."""
    stats = memory_stats(device)
    idx = _device_index(device)

    def size(n: float) -> str:
        if abs(n) < 1024:
            return f"{n:.0f} B"
        for unit in ("KiB", "MiB", "GiB"):
            n /= 1024
            if abs(n) < 1024 or unit == "GiB":
                break
        return f"{n:.2f} {unit}"

    rows = [
        ("Allocated memory", "allocated_bytes", size),
        ("Active memory", "active_bytes", size),
        ("Requested memory", "requested_bytes", size),
        ("Reserved memory", "reserved_bytes", size),
        ("Allocations", "allocation", str),
        ("Active allocs", "active", str),
        ("Segments", "segment", str),
    ]
    if abbreviated:
        rows = rows[:4]
    head = f"{'Metric':<20}{'Current':>14}{'Peak':>14}{'Tot Alloc':>14}{'Tot Freed':>14}"
    rule = "=" * len(head)
    lines = [
        rule,
        f" oxide caching allocator summary, device {idx} ({get_device_name(idx)})",
        rule,
        head,
        "-" * len(head),
    ]
    for label, key, fmt in rows:
        values = [fmt(stats[f"{key}.all.{k}"]) for k in ("current", "peak", "allocated", "freed")]
        lines.append(f"{label:<20}" + "".join(f"{v:>14}" for v in values))
    lines.append("-" * len(head))
    lines.append(f"Allocation retries: {stats['num_alloc_retries']}    Out-of-memory errors: {stats['num_ooms']}")
    lines.append(rule)
    return "\n".join(lines)
