"""Compiled training steps: ``torch.compile(model)`` on oxide against CPU PyTorch, eager and compiled.

    python benchmarks/compiled.py [--out benchmarks/results] [--only NAME] [--reps N]

(``make bench-compiled`` runs it with the defaults.) For the ResNet-18 and GPT-2 steps
of ``models.py`` (same weights, batch, loss and optimizer), four variants run the same
training step: CPU eager, CPU with ``torch.compile(model)``, oxide eager, oxide with
``torch.compile(model)`` (forward and backward compiled by Inductor, the optimizer
eager, as ``model = torch.compile(model)`` gives). Each variant compiles and warms up
first (``WARMUP`` steps), then the variants take turns step by step for ``--reps``
rounds, a ``PAUSE`` between turns so that one variant's spinning worker threads do
not run into the next one's step. Inductor's on-disk caches are off for every variant,
so each compiles the same way whatever ran on the machine before.

Reported: the median seconds per step of each variant, and oxide compiled over CPU
eager (issue 28's target: <= 0.7), over CPU compiled (<= 1.0) and over oxide eager.
Writes ``compiled.md`` and ``compiled.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import pathlib
import statistics
import sys
import time

os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"
os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "0"

import torch  # noqa: E402

import torch_oxide  # noqa: E402, F401

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from models import _gpt2, _resnet  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
WARMUP = 3
PAUSE = 0.05
WORKLOADS = {
    "ResNet-18 step (8x3x64x64)": _resnet,
    "GPT-2 step (4 layers, 256 wide, 4x128 tokens)": _gpt2,
}
VARIANTS = [("cpu", False), ("cpu", True), ("oxide", False), ("oxide", True)]


def _sync(dev: str) -> None:
    if dev != "cpu":
        torch.accelerator.synchronize()


def run(name: str, reps: int) -> dict[str, object]:
    model, step, make_opt, _ = WORKLOADS[name]()
    runners = []
    for dev, compiled in VARIANTS:
        torch._dynamo.reset()
        m = copy.deepcopy(model).to(dev)
        opt = make_opt(m.parameters())
        target = torch.compile(m) if compiled else m
        start = time.perf_counter()
        for _ in range(WARMUP):
            step(target, opt, dev)
        _sync(dev)
        warm = time.perf_counter() - start
        runners.append((dev, compiled, target, opt, warm, []))
    for _ in range(reps):
        for dev, _compiled, target, opt, _warm, times in runners:
            time.sleep(PAUSE)
            start = time.perf_counter()
            step(target, opt, dev)
            _sync(dev)
            times.append(time.perf_counter() - start)
    med = {(dev, compiled): statistics.median(times) for dev, compiled, _t, _o, _w, times in runners}
    oxide_compiled = med[("oxide", True)]
    return {
        "workload": name,
        "seconds": {f"{dev} {'compiled' if c else 'eager'}": round(v, 5) for (dev, c), v in med.items()},
        "warmup_seconds": {f"{dev} {'compiled' if c else 'eager'}": round(w, 1) for dev, c, _t, _o, w, _ in runners},
        "oxide compiled / cpu eager": round(oxide_compiled / med[("cpu", False)], 3),
        "oxide compiled / cpu compiled": round(oxide_compiled / med[("cpu", True)], 3),
        "oxide compiled / oxide eager": round(oxide_compiled / med[("oxide", False)], 3),
    }


def write(out: str, results: list[dict[str, object]], reps: int) -> None:
    path = pathlib.Path(out)
    path.mkdir(parents=True, exist_ok=True)
    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "reps": reps,
    }
    (path / "compiled.json").write_text(json.dumps({"env": env, "results": results}, indent=2) + "\n")
    lines = [
        "# Compiled training steps: oxide against CPU PyTorch",
        "",
        f"`python benchmarks/compiled.py --reps {reps}`, {env['date']}, torch {env['torch']}, "
        f"{env['threads']} threads. Median seconds per step; ratios of oxide compiled (lower is better).",
        "",
        "| workload | CPU eager | CPU compiled | oxide eager | oxide compiled "
        "| / CPU eager | / CPU compiled | / oxide eager |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        s = r["seconds"]
        lines.append(
            f"| {r['workload']} | {s['cpu eager']:.4f} | {s['cpu compiled']:.4f} | {s['oxide eager']:.4f} "
            f"| {s['oxide compiled']:.4f} | {r['oxide compiled / cpu eager']:.2f} "
            f"| {r['oxide compiled / cpu compiled']:.2f} | {r['oxide compiled / oxide eager']:.2f} |"
        )
    (path / "compiled.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--only", default="", help="run the workloads whose name contains this text")
    parser.add_argument("--reps", type=int, default=9, help="timed steps per variant")
    args = parser.parse_args(argv)
    results = [run(name, args.reps) for name in WORKLOADS if args.only.lower() in name.lower()]
    write(args.out, results, args.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
