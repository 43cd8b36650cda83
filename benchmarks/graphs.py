"""Graph replay against eager execution (`make bench-graphs`).

Two small workloads whose time is launch overhead, not arithmetic:
- "200 pointwise ops": 100 rounds of `x = x * a + b` on 256-element float32 tensors (1 KiB);
- "MLP training step": forward, cross-entropy, backward and a capturable Adam step of a
  3-layer MLP (32 -> 64 -> 64 -> 10, batch 16; every tensor 1-16 KiB).

Each is timed three ways in one process: oxide eager, oxide replaying a graph captured
from one step (`torch.accelerator.Graph`), and CPU PyTorch eager, with the same
`torch.get_num_threads()`. Each way runs in blocks of `--steps` steps, the three
alternating over `--rounds` rounds; the median time per step is reported with the
ratios replay / oxide eager (target <= 0.2, i.e. 5x faster) and replay / CPU eager
(target < 1.0). Results go to `--out` (graphs.md, graphs.json).
"""

import argparse
import json
import platform
import statistics
import time
import warnings
from pathlib import Path

import torch
import torch.nn as nn


def pointwise(device):
    x = torch.randn(256, device=device)
    a = torch.full((256,), 0.999, device=device)
    b = torch.full((256,), 1e-3, device=device)

    def step():
        y = x
        for _ in range(100):
            y = y * a + b
        x.copy_(y)

    return step


def mlp(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=device != "cpu")
    x = torch.randn(16, 32, device=device)
    t = torch.randint(0, 10, (16,), device=device)

    def step():
        opt.zero_grad(set_to_none=False)
        loss = nn.functional.cross_entropy(model(x), t)
        loss.backward()
        opt.step()

    # The first step creates the optimizer's state and the gradients, so the
    # captured step (and every timed one) only writes into existing tensors.
    step()
    return step


WORKLOADS = {"200 pointwise ops": pointwise, "MLP training step": mlp}


def sync(device):
    if device == "oxide":
        torch.oxide.synchronize()


def timed(run, device, steps):
    sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        run()
    sync(device)
    return (time.perf_counter() - t0) / steps


def measure(make, steps, rounds):
    eager_oxide = make("oxide")
    cpu = make("cpu")
    captured = make("oxide")
    captured()  # warm-up: every kernel signature known before the capture
    sync("oxide")
    graph = torch.accelerator.Graph()
    with graph:
        captured()
    ways = {"oxide eager": (eager_oxide, "oxide"), "oxide replay": (graph.replay, "oxide"), "CPU eager": (cpu, "cpu")}
    for run, device in ways.values():
        timed(run, device, steps)  # warm-up
    times = {name: [] for name in ways}
    for _ in range(rounds):
        for name, (run, device) in ways.items():
            times[name].append(timed(run, device, steps))
            time.sleep(0.05)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # capturable=True outside a capture warns once per optimizer
    rows, raw = [], {}
    for name, make in WORKLOADS.items():
        times = measure(make, args.steps, args.rounds)
        med = {k: statistics.median(v) for k, v in times.items()}
        speedup = med["oxide replay"] / med["oxide eager"]
        vs_cpu = med["oxide replay"] / med["CPU eager"]
        rows.append(
            f"| {name} | {med['oxide eager'] * 1e6:.0f} | {med['oxide replay'] * 1e6:.0f} | "
            f"{med['CPU eager'] * 1e6:.0f} | {speedup:.3f} {'ok' if speedup <= 0.2 else 'MISS'} | "
            f"{vs_cpu:.3f} {'ok' if vs_cpu < 1.0 else 'MISS'} |"
        )
        raw[name] = times
        print(rows[-1], flush=True)
    header = (
        f"Graph replay vs eager, us per step (median of {args.rounds} blocks of {args.steps} steps), "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}\n\n"
        "| workload | oxide eager | oxide replay | CPU eager | replay / oxide eager (<= 0.2) | "
        "replay / CPU eager (< 1.0) |\n|---|---|---|---|---|---|\n"
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "graphs.md").write_text(header + "\n".join(rows) + "\n")
    meta = {"torch": torch.__version__, "threads": torch.get_num_threads(), "date": time.strftime("%Y-%m-%d")}
    (out / "graphs.json").write_text(json.dumps({"meta": meta, "seconds_per_step": raw}, indent=1))
    print(header + "\n".join(rows))


if __name__ == "__main__":
    main()
