"""How cost grows with work: oxide against CPU PyTorch over a range of sizes and threads.

    python benchmarks/scaling.py [--out benchmarks/results] [--only GROUP]

(``make bench-scaling`` runs it with the defaults.) Three families, each measured at
1 thread and at ``torch.get_num_threads()`` threads, on oxide and on the CPU:

- elementwise: ``torch.add(a, b, out=c)`` over float32 vectors of 1e4 to 1e8 elements
  (GB/s counting the 12 bytes each element moves);
- GEMM: float32 ``torch.mm`` of square matrices, 64 to 4096 (GFLOP/s);
- a model: one ResNet-18 training step (forward, loss, backward, SGD step) on 64x64
  images, batch 1 to 32 (images per second).

Each point is the median time per call; a repetition runs enough calls to last about
10 ms (at least one), and each side runs its repetitions in ``ROUNDS`` blocks that
alternate with the other side's (after a warm-up and a short pause), as in ``ops.py``.
Writes ``scaling.md`` (tables with ratios oxide / CPU, lower is better, and the speedup
from 1 thread to all), ``scaling.json`` and ``scaling.png`` (throughput against size,
log-log, one panel per family) into ``--out``.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import torch_oxide

OXIDE = torch.device("oxide")
ROUNDS = 3
REP_SECONDS = 0.01  # a repetition runs this long at least (many calls for small sizes)
PAUSE = 0.05  # idle between blocks, so the other side's spinning threads go to sleep

ELEMENTWISE = [10**k for k in range(4, 9)]
GEMM = [64, 128, 256, 512, 1024, 2048, 4096]
BATCHES = [1, 2, 4, 8, 16, 32]


@dataclass
class Point:
    family: str
    size: int
    threads: int
    oxide_s: float  # median seconds per call
    cpu_s: float
    work: float  # bytes, flops or images per call

    @property
    def ratio(self) -> float:
        return self.oxide_s / self.cpu_s


def _per_call(fn: Callable[[], object], sync: Callable[[], None], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - start) / calls


def measure(oxide_fn: Callable[[], object], cpu_fn: Callable[[], object], reps: int) -> tuple[float, float]:
    """Median seconds per call of each side, alternating blocks (module docstring)."""
    sides = [(oxide_fn, torch.oxide.synchronize, []), (cpu_fn, lambda: None, [])]
    calls = []
    for fn, sync, _ in sides:  # warm-up, and how many calls make REP_SECONDS
        calls.append(max(1, min(10_000, round(REP_SECONDS / max(_per_call(fn, sync, 1), 1e-7)))))
    per_round = -(-reps // ROUNDS)
    for _ in range(ROUNDS):
        for (fn, sync, times), n in zip(sides, calls):
            fn()
            sync()
            time.sleep(PAUSE)
            times += [_per_call(fn, sync, n) for _ in range(per_round)]
    return statistics.median(sides[0][2]), statistics.median(sides[1][2])


def elementwise(n: int) -> tuple[Callable, Callable, float, int]:
    a, b = torch.randn(n), torch.randn(n)
    out = torch.empty(n)
    ao, bo, oo = a.to(OXIDE), b.to(OXIDE), out.to(OXIDE)
    reps = 6 if n >= 10**8 else 9
    return (lambda: torch.add(ao, bo, out=oo)), (lambda: torch.add(a, b, out=out)), 12.0 * n, reps


def gemm(n: int) -> tuple[Callable, Callable, float, int]:
    a, b = torch.randn(n, n), torch.randn(n, n)
    ao, bo = a.to(OXIDE), b.to(OXIDE)
    reps = 3 if n >= 4096 else 9
    return (lambda: torch.mm(ao, bo)), (lambda: torch.mm(a, b)), 2.0 * n**3, reps


def resnet_step(batch: int) -> tuple[Callable, Callable, float, int]:
    import torchvision

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(batch, 3, 64, 64, generator=g), torch.randint(0, 10, (batch,), generator=g)
    model = torchvision.models.resnet18(num_classes=10)
    model_o = copy.deepcopy(model).to(OXIDE)
    xo, yo = x.to(OXIDE), y.to(OXIDE)

    def step(m, opt, xb, yb):
        def run():
            opt.zero_grad()
            F.cross_entropy(m(xb), yb).backward()
            opt.step()

        return run

    opt, opt_o = (torch.optim.SGD(p, lr=0.01, momentum=0.9) for p in (model.parameters(), model_o.parameters()))
    return step(model_o, opt_o, xo, yo), step(model, opt, x, y), float(batch), 3 if batch >= 16 else 6


FAMILIES: dict[str, tuple[str, list[int], Callable, str, float]] = {
    # name: (what a size is, sizes, case maker, throughput unit, unit scale)
    "elementwise": ("elements (add out=)", ELEMENTWISE, elementwise, "GB/s", 1e9),
    "gemm": ("n (n x n mm)", GEMM, gemm, "GFLOP/s", 1e9),
    "model": ("batch (ResNet-18 step, 64x64)", BATCHES, resnet_step, "images/s", 1.0),
}


def run(families: list[str], thread_counts: list[int]) -> list[Point]:
    points = []
    default = torch.get_num_threads()
    try:
        for family in families:
            _, sizes, make, unit, scale = FAMILIES[family]
            for size in sizes:
                oxide_fn, cpu_fn, work, reps = make(size)
                for threads in thread_counts:
                    torch.set_num_threads(threads)
                    oxide_s, cpu_s = measure(oxide_fn, cpu_fn, reps)
                    p = Point(family, size, threads, oxide_s, cpu_s, work)
                    points.append(p)
                    print(
                        f"{family:12s} {size:>10d}  {threads} thread(s)  oxide {oxide_s * 1e3:10.4f} ms "
                        f"({work / oxide_s / scale:8.2f} {unit})  cpu {cpu_s * 1e3:10.4f} ms "
                        f"({work / cpu_s / scale:8.2f} {unit})  ratio {p.ratio:.2f}",
                        flush=True,
                    )
                torch.set_num_threads(default)
                del oxide_fn, cpu_fn
                torch.oxide.empty_cache()
    finally:
        torch.set_num_threads(default)
    return points


def markdown(points: list[Point], thread_counts: list[int], env: dict[str, object]) -> list[str]:
    lines = [
        "# Scaling: oxide against CPU PyTorch over sizes and threads",
        "",
        f"Generated by `benchmarks/scaling.py` on {env['date']}: torch {env['torch']}, {env['cpu_model']} "
        f"({env['cpu_count']} CPUs). Median time per call; ratio = oxide / CPU (lower is better); "
        "speedup = time at 1 thread / time at all threads. The plot is `scaling.png`.",
    ]
    for family in dict.fromkeys(p.family for p in points):
        what, _, _, unit, scale = FAMILIES[family]
        head = [what]
        for t in thread_counts:
            head += [f"oxide ms ({t}t)", f"cpu ms ({t}t)", f"oxide {unit} ({t}t)", f"ratio ({t}t)"]
        if len(thread_counts) > 1:
            head += ["oxide speedup", "cpu speedup"]
        lines += ["", f"## {family}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for size in dict.fromkeys(p.size for p in points if p.family == family):
            by_t = {p.threads: p for p in points if p.family == family and p.size == size}
            row = [f"{size:.0e}" if family == "elementwise" else str(size)]
            for t in thread_counts:
                p = by_t[t]
                row += [f"{p.oxide_s * 1e3:.4g}", f"{p.cpu_s * 1e3:.4g}", f"{p.work / p.oxide_s / scale:.4g}"]
                row.append(f"{p.ratio:.2f}")
            if len(thread_counts) > 1:
                one, many = by_t[thread_counts[0]], by_t[thread_counts[-1]]
                row += [f"{one.oxide_s / many.oxide_s:.2f}", f"{one.cpu_s / many.cpu_s:.2f}"]
            lines.append("| " + " | ".join(row) + " |")
    return lines + [""]


def plot(points: list[Point], thread_counts: list[int], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = list(dict.fromkeys(p.family for p in points))
    fig, axes = plt.subplots(1, len(families), figsize=(5.5 * len(families), 4.2), squeeze=False)
    for ax, family in zip(axes[0], families):
        what, _, _, unit, scale = FAMILIES[family]
        for t in thread_counts:
            pts = sorted((p for p in points if p.family == family and p.threads == t), key=lambda p: p.size)
            sizes = [p.size for p in pts]
            ax.plot(sizes, [p.work / p.oxide_s / scale for p in pts], "o-", label=f"oxide, {t} thread(s)")
            ax.plot(sizes, [p.work / p.cpu_s / scale for p in pts], "s--", label=f"CPU, {t} thread(s)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(what)
        ax.set_ylabel(unit)
        ax.set_title(family)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("oxide vs CPU PyTorch: throughput against size (higher is better)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    parser.add_argument("--only", action="append", choices=list(FAMILIES), help="run only this family (repeatable)")
    args = parser.parse_args(argv)
    from ops import _cpu_model

    thread_counts = sorted({1, torch.get_num_threads()})
    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "torch_oxide": torch_oxide.__version__,
        "threads": thread_counts,
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
    }
    torch.oxide.set_fallback_mode("silent")
    points = run(args.only or list(FAMILIES), thread_counts)
    os.makedirs(args.out, exist_ok=True)
    lines = markdown(points, thread_counts, env)
    with open(os.path.join(args.out, "scaling.md"), "w") as f:
        f.write("\n".join(lines))
    with open(os.path.join(args.out, "scaling.json"), "w") as f:
        json.dump({"env": env, "points": [{**p.__dict__, "ratio": p.ratio} for p in points]}, f, indent=2)
        f.write("\n")
    plot(points, thread_counts, os.path.join(args.out, "scaling.png"))
    print("\n".join(lines))
    print(f"wrote scaling.md, scaling.json and scaling.png into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
