"""Where a small all_reduce's time goes on oxide: the oxgloo layers one at a time.

    python benchmarks/oxgloo_layers.py [--bytes 1024] [--calls 1500]

Two processes on loopback, one torch thread each (as ``distributed.py``). Rank 0
prints the median microseconds per call of a float32 ``all_reduce`` (SUM), wall time
and the calling thread's CPU time (``time.thread_time``: the host work of the call,
which the machine's scheduling noise affects less), through:

- ``cpu``: CPU tensors through plain Gloo (the reference);
- ``gloo on host views``: the group's CPU Gloo backend on ``oxide::_host_view`` of an
  oxide tensor (what zero-copy costs);
- ``oxgloo backend``: the oxide backend's ``allreduce`` called directly, and its work's
  ``wait()`` (host views, stream sync, the work wrapper);
- ``dist.all_reduce``: the full path, through c10d's ProcessGroup.

Each variant runs its calls in rounds, the rounds alternating between variants.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _worker(rank: int, port: int, numel: int, calls: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    torch.set_num_threads(1)
    import torch_oxide  # noqa: F401

    dist.init_process_group("cpu:gloo,oxide:oxgloo", rank=rank, world_size=2, device_id=torch.device("oxide", rank))
    backend = dist.group.WORLD._get_backend(torch.device("oxide"))
    gloo = dist.group.WORLD._get_backend(torch.device("cpu"))
    variants = {
        "cpu": ("cpu", dist.all_reduce),
        "gloo on host views": ("oxide", lambda t: gloo.allreduce([torch.ops.oxide._host_view(t)]).wait()),
        "oxgloo backend": ("oxide", lambda t: backend.allreduce([t], dist.AllreduceOptions()).wait()),
        "dist.all_reduce": ("oxide", dist.all_reduce),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    cpu_times: dict[str, list[float]] = {name: [] for name in variants}
    rounds = 6
    for _ in range(rounds):
        for name, (device, fn) in variants.items():
            t = torch.ones(numel, device=device)
            for _ in range(20):
                fn(t)
            dist.barrier()
            for _ in range(max(1, calls // rounds)):
                start, cpu_start = time.perf_counter(), time.thread_time()
                fn(t)
                cpu_times[name].append(time.thread_time() - cpu_start)
                times[name].append(time.perf_counter() - start)
    if rank == 0:
        print(f"all_reduce of {numel * 4} bytes, two processes, median us per call:")
        print(f"  {'':20s} {'wall':>8s} {'host CPU':>9s}")
        for name, ts in times.items():
            print(f"  {name:20s} {statistics.median(ts) * 1e6:8.1f} {statistics.median(cpu_times[name]) * 1e6:9.1f}")
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=1024)
    parser.add_argument("--calls", type=int, default=1500)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_worker, args=(port, max(1, args.bytes // 4), args.calls), nprocs=2)


if __name__ == "__main__":
    main()
