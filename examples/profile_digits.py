"""Profile a few training steps of the digits CNN on oxide and write pictures of them.

Runs the main job's model (``digits_cnn.py``) for a few warm-up steps, then profiles
``--steps`` steps with ``torch.profiler`` (CPU and oxide activities, memory, shapes,
stacks) while the caching allocator records its history, and writes under ``--out``:

- ``trace.json``: the Chrome trace: operators on the host threads, kernels and copies
  on one lane per oxide stream, an arrow from each launch to its kernel. Open it in
  https://ui.perfetto.dev (or ``chrome://tracing``).
- ``memory_timeline.html``: device memory over the profiled steps by category
  (parameters, gradients, optimizer state, activations), from the profiler.
- ``memory_trace.html``: every allocation and free with its Python stack, rendered
  by PyTorch's memory visualizer (``torch.cuda._memory_viz.trace_plot``);
  ``memory_snapshot.pickle`` is the same data for https://pytorch.org/memory_viz.
- ``operators.txt``: the operator table sorted by device time.

Run: ``make profile`` (or ``python examples/profile_digits.py --steps 5``).
"""

from __future__ import annotations

import argparse
import pickle
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function

import torch_oxide  # noqa: F401
from digits_cnn import DigitsCNN, load_data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--out", type=Path, default=Path("results/profile"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    torch.manual_seed(0)
    x_train, y_train, _, _ = (t.to("oxide") for t in load_data(0))
    model = DigitsCNN().to("oxide")
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)

    def step(i: int) -> None:
        sel = slice(i * args.batch_size, (i + 1) * args.batch_size)
        with record_function("forward"):
            loss = F.cross_entropy(model(x_train[sel]), y_train[sel])
        with record_function("backward"):
            opt.zero_grad()
            loss.backward()
        with record_function("optimizer"):
            opt.step()

    for i in range(3):  # warm-up: first launches of each kernel, optimizer state
        step(i)
    torch.oxide.synchronize()

    torch.oxide.memory._record_memory_history(max_entries=100_000)
    activities = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
    with profile(activities=activities, profile_memory=True, record_shapes=True, with_stack=True) as prof:
        for i in range(args.steps):
            with record_function(f"step {i}"):
                step(i)
            prof.step()
    snapshot = torch.oxide.memory._snapshot()
    torch.oxide.memory._record_memory_history(enabled=None)

    prof.export_chrome_trace(str(args.out / "trace.json"))
    with warnings.catch_warnings():
        # Deprecated in favour of the allocator's history (written below too), but it is
        # the only view that sorts memory into parameters, gradients, optimizer state
        # and activations.
        warnings.simplefilter("ignore", FutureWarning)
        prof.export_memory_timeline(str(args.out / "memory_timeline.html"), device="oxide:0")
    (args.out / "memory_trace.html").write_text(torch.cuda._memory_viz.trace_plot(snapshot))
    with open(args.out / "memory_snapshot.pickle", "wb") as f:
        pickle.dump(snapshot, f)
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=30)
    (args.out / "operators.txt").write_text(table + "\n")

    print(table)
    kernels = sum(e.count for e in prof.key_averages() if e.device_type != torch.autograd.DeviceType.CPU)
    print(f"{args.steps} steps profiled, {kernels} kernels and copies on oxide")
    for name in ("trace.json", "memory_timeline.html", "memory_trace.html", "memory_snapshot.pickle", "operators.txt"):
        print(f"wrote {args.out / name}")
    print("open trace.json in https://ui.perfetto.dev, the .html files in a browser,")
    print("memory_snapshot.pickle in https://pytorch.org/memory_viz")


if __name__ == "__main__":
    main()
