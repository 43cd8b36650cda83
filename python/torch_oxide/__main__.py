"""``python -m torch_oxide``: an environment report and the live device memory of
every process using oxide (``--watch SECONDS`` refreshes it, as ``nvidia-smi -l`` does)."""

from __future__ import annotations

import argparse
import os
import platform
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

import torch_oxide
from torch_oxide import oxide

# The layout of crates/oxide-runtime/src/publish.rs: a header of four words, then four per device.
_MAGIC = int.from_bytes(b"OXIDEMEM", "little")
_VERSION = 1
_HEADER = struct.Struct("=4Q")
_DEVICE = struct.Struct("=4Q")


@dataclass
class DeviceMemory:
    capacity: int
    allocated: int
    reserved: int
    peak_allocated: int


@dataclass
class ProcessMemory:
    pid: int
    command: str
    devices: list[DeviceMemory]


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _directory() -> Path:
    """Where processes publish their counters (as the runtime chooses it)."""
    if "OXIDE_SHM_DIR" in os.environ:
        return Path(os.environ["OXIDE_SHM_DIR"])
    shm = Path("/dev/shm")
    return shm if shm.is_dir() else Path(tempfile.gettempdir())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)


def processes() -> list[ProcessMemory]:
    """Every live process that uses oxide devices, with each device's memory counters;
    files left by processes that died are removed."""
    found = []
    for path in sorted(_directory().glob("torch-oxide-*.mem")):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if len(data) < _HEADER.size:
            continue
        magic, version, pid, count = _HEADER.unpack_from(data)
        if magic != _MAGIC or version != _VERSION or len(data) < _HEADER.size + count * _DEVICE.size:
            continue
        if not _alive(pid):
            path.unlink(missing_ok=True)  # killed before it could remove its file
            continue
        devices = [DeviceMemory(*_DEVICE.unpack_from(data, _HEADER.size + i * _DEVICE.size)) for i in range(count)]
        found.append(ProcessMemory(pid, _command(pid), devices))
    return found


def _memory_table(own_pid: int) -> list[str]:
    rows = [p for p in processes() if p.pid != own_pid]
    if not rows:
        return ["no other process is using oxide devices"]
    lines = [f"{'pid':>8}  {'device':<8}{'allocated':>12}{'reserved':>12}{'peak':>12}{'capacity':>12}  command"]
    for p in rows:
        for i, d in enumerate(p.devices):
            if d.reserved == 0 and d.peak_allocated == 0 and i > 0:
                continue  # a device the process never used
            command = " ".join(p.command.split())[:60]  # one line, whatever the command held
            lines.append(
                f"{p.pid:>8}  {f'oxide:{i}':<8}{_mib(d.allocated):>12}{_mib(d.reserved):>12}"
                f"{_mib(d.peak_allocated):>12}{_gib(d.capacity):>12}  {command}"
            )
    return lines


def report() -> list[str]:
    lines = [
        f"torch-oxide {torch_oxide.__version__} (kernels built for CPU capability {torch.oxide.get_cpu_capability()})",
        f"torch {torch.__version__} (C++ ABI cxx11={torch._C._GLIBCXX_USE_CXX11_ABI})",
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs",
        f"accelerator: {torch.accelerator.current_accelerator()}",
        f"available: {oxide.is_available()}, devices: {oxide.device_count()}",
    ]
    for i in range(oxide.device_count()):
        free, total = oxide.mem_get_info(i)
        lines.append(
            f"  oxide:{i}: capacity {_gib(total)}, allocated {_gib(oxide.memory_allocated(i))}, "
            f"reserved {_gib(oxide.memory_reserved(i))}, free {_gib(free)} (this process)"
        )
    lines.append(f"fallback mode: {oxide.get_fallback_mode()} (OXIDE_FALLBACK)")
    stats = oxide.fallback_stats()
    lines.append(f"fallback calls so far: {sum(stats.values())} over {len(stats)} operators")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--watch", type=float, metavar="SECONDS", help="refresh the process table every SECONDS")
    args = parser.parse_args()
    if args.watch is not None and args.watch <= 0:
        parser.error("--watch needs a positive number of seconds")
    print("\n".join(report()))
    print(f"\ndevice memory of processes using oxide ({_directory()}/torch-oxide-<pid>.mem):")
    print("\n".join(_memory_table(os.getpid())), flush=True)
    try:
        while args.watch:
            time.sleep(args.watch)
            print(f"\n{time.strftime('%H:%M:%S')}")
            print("\n".join(_memory_table(os.getpid())), flush=True)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
