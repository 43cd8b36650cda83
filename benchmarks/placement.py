"""How thread placement on the CPUs changes a synchronised kernel's time, oxide against CPU.

    python benchmarks/placement.py [--runs N]

Asynchronous oxide runs a split kernel on three threads: the stream worker (the
launcher), the kernel team's worker and the host thread that waits for it. On a
2-CPU machine two of them share a CPU. This pins them with ``os.sched_setaffinity``
in each arrangement (stream worker on CPU 0, team worker on CPU 1; the host
unpinned, on CPU 0, or on CPU 1) and times a 40 MB ``mean`` synchronised after each
call against CPU PyTorch's, in alternating blocks. Each arrangement runs in a fresh
interpreter, ``--runs`` times; the median ratio oxide / CPU of each run is printed.
The host on the team worker's CPU is the case the host's "crowding" rule
(``oxide_kernels::engine::team::crowding_a_worker``) is for.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time

ARRANGEMENTS = ("unpinned", "host with stream worker", "host with team worker")


def _measure(arrangement: str) -> float:
    import torch

    import torch_oxide  # noqa: F401

    torch.set_num_threads(2)
    x = torch.randn(1000, 10000)
    xo = x.to("oxide")
    for _ in range(20):  # starts the stream worker and the team
        xo.mean()
    torch.oxide.synchronize()
    tids = {open(f"/proc/self/task/{t}/comm").read().strip(): int(t) for t in os.listdir("/proc/self/task")}
    if arrangement != "unpinned":
        os.sched_setaffinity(tids["oxide0-stream0"], {0})
        os.sched_setaffinity(tids["oxide-team-1"], {1})
        os.sched_setaffinity(threading.get_native_id(), {0 if arrangement == "host with stream worker" else 1})
    times: dict[str, list[float]] = {"cpu": [], "oxide": []}
    for _ in range(6):
        for dev, t in (("cpu", x), ("oxide", xo)):
            time.sleep(0.05)
            for _ in range(8):
                t.mean()
            torch.oxide.synchronize()
            for _ in range(15):
                start = time.perf_counter()
                t.mean()
                torch.oxide.synchronize()
                times[dev].append(time.perf_counter() - start)
    return statistics.median(times["oxide"]) / statistics.median(times["cpu"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--child", choices=ARRANGEMENTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(f"{_measure(args.child):.2f}")
        return 0
    if len(os.sched_getaffinity(0)) < 2:
        print("needs two CPUs", file=sys.stderr)
        return 1
    for arrangement in ARRANGEMENTS:
        ratios = [
            subprocess.run(
                [sys.executable, __file__, "--child", arrangement], capture_output=True, text=True, check=True
            ).stdout.strip()
            for _ in range(args.runs)
        ]
        print(f"{arrangement:24s} oxide / CPU: {' '.join(ratios)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
