"""Per-operator time of one bench-models workload, CPU PyTorch against oxide.

    python benchmarks/opprofile.py NAME [--top N] [--steps S]

NAME is any part of a workload name in ``models.py`` (``digits``, ``ResNet``, ``GPT``,
``LSTM``). Each device runs two warm-up steps, then ``--steps`` steps under
``torch.profiler``, oxide's launches blocking (so that an operator's self time is its
kernel's, not its launch's); the table lists operators by oxide self time (milliseconds, summed
over the profiled steps) beside the CPU's. Operators each device implements differently
(CPU's flash attention, oxide's overrideable attention) appear on separate rows.

(Not named profile.py: the script's folder comes first on sys.path and would shadow
the standard library's `profile`, which torch.profiler imports.)
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import pathlib
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import torch_oxide  # noqa: F401

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import models  # noqa: E402  (also puts tests/python on sys.path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    names = [n for n in models.WORKLOADS if args.name.lower() in n.lower()]
    if len(names) != 1:
        parser.error(f"{args.name!r} matches {names or 'no workload'}; choose one of {list(models.WORKLOADS)}")
    model, step, make_opt, _ = models.WORKLOADS[names[0]]()
    self_ms = {}
    for dev in ("cpu", "oxide"):
        m = copy.deepcopy(model).to(dev)
        opt = make_opt(m.parameters())
        for _ in range(2):
            step(m, opt, dev)
        torch.oxide.synchronize()  # else the first profiled operator waits for the warm-up's queue
        # Oxide launches blocking: with asynchronous streams an operator's self time is
        # its launch, and a synchronising call (.item(), a copy to the host) would carry
        # the queued kernels' time.
        blocking = torch.oxide._LaunchBlocking() if dev == "oxide" else contextlib.nullcontext()
        with blocking, profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.steps):
                step(m, opt, dev)
        self_ms[dev] = {e.key: e.self_cpu_time_total / 1e3 for e in prof.key_averages()}
    cpu, ox = self_ms["cpu"], self_ms["oxide"]
    print(
        f"{names[0]}, {args.steps} steps: total self time CPU {sum(cpu.values()):.0f} ms, oxide {sum(ox.values()):.0f} ms"
    )
    for key in sorted(set(cpu) | set(ox), key=lambda k: -ox.get(k, 0.0))[: args.top]:
        print(f"{key[:64]:64s} cpu {cpu.get(key, 0.0):8.1f} ms  oxide {ox.get(key, 0.0):8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
