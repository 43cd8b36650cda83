"""Main job of torch-oxide: train a small CNN on scikit-learn's handwritten digits.

The data set is the UCI optical digits set shipped inside scikit-learn (1797 real
8x8 scans, 10 classes). The same model, initial weights and batch order are trained
on ``oxide:0`` and on the CPU; the script prints loss and test accuracy per epoch
for both, their wall times side by side (the first epoch, which pays one-time costs
such as allocator growth and first-call set-up, apart from the steady epochs after it),
and which aten operators ran through the CPU fallback on oxide (and how often).

Run: ``make demo`` (or ``python examples/digits_cnn.py --epochs 12``).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from tqdm import tqdm

import torch_oxide  # noqa: F401  (explicit, although the torch.backends entry point loads it too)


class DigitsCNN(nn.Module):
    """(N, 1, 8, 8) float32 images -> (N, 10) logits."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, padding=1)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def load_data(seed: int):
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    idx_train, idx_test = train_test_split(range(len(y)), test_size=0.25, random_state=seed, stratify=digits.target)
    return x[idx_train], y[idx_train], x[idx_test], y[idx_test]


def train(model: nn.Module, data, device: str, epochs: int, batch_size: int, lr: float, seed: int):
    x_train, y_train, x_test, y_test = (t.to(device) for t in data)
    model = model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    order = torch.Generator().manual_seed(seed)
    history, epoch_times = [], []
    start = time.perf_counter()
    for epoch in range(1, epochs + 1):
        epoch_start = time.perf_counter()
        model.train()
        perm = torch.randperm(len(y_train), generator=order).to(device)
        total, batches = 0.0, range(0, len(y_train), batch_size)
        bar = tqdm(batches, desc=f"{device:>7} epoch {epoch:2d}/{epochs}", leave=False, unit="batch")
        for i in bar:
            sel = perm[i : i + batch_size]
            loss = F.cross_entropy(model(x_train[sel]), y_train[sel])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(sel)
        model.eval()
        with torch.no_grad():
            acc = (model(x_test).argmax(1) == y_test).float().mean().item()
        # ``.item()`` above waited for the device, so the epoch's work is done here.
        epoch_times.append(time.perf_counter() - epoch_start)
        history.append((total / len(y_train), acc))
        tqdm.write(f"{device:>7} epoch {epoch:2d}: train loss {history[-1][0]:.4f}  test accuracy {acc:6.2%}")
    if device.startswith("oxide"):
        torch.oxide.synchronize()
    return history, time.perf_counter() - start, epoch_times


def epoch_summary(epoch_times: list[float]) -> tuple[float, float, float]:
    """(first epoch, median steady epoch, warm-up cost) in seconds.

    The warm-up cost is what the first epoch took beyond a steady one; with a single
    epoch there is no steady epoch to compare with, and it is reported as 0.
    """
    first = epoch_times[0]
    steady = statistics.median(epoch_times[1:] or [first])
    return first, steady, first - steady


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    data = load_data(args.seed)
    model = DigitsCNN()
    print(f"digits: {len(data[1])} training and {len(data[3])} test images of 8x8, 10 classes")
    print(
        f"devices: {torch.oxide.device_count()} x oxide ({torch.oxide.get_device_name(0)}), torch {torch.__version__}"
    )

    # The fallback report is printed below; warnings per operator would only repeat it.
    mode = torch.oxide.get_fallback_mode()
    if mode == "warn":
        torch.oxide.set_fallback_mode("silent")
    torch.oxide.reset_fallback_stats()
    oxide_hist, oxide_time, oxide_epochs = train(
        copy.deepcopy(model), data, "oxide:0", args.epochs, args.batch_size, args.lr, args.seed
    )
    fallbacks = torch.oxide.fallback_stats()
    torch.oxide.set_fallback_mode(mode)
    cpu_hist, cpu_time, cpu_epochs = train(
        copy.deepcopy(model), data, "cpu", args.epochs, args.batch_size, args.lr, args.seed
    )

    print("\nepoch | oxide loss  acc     | cpu loss    acc")
    for e, ((ol, oa), (cl, ca)) in enumerate(zip(oxide_hist, cpu_hist), 1):
        print(f"{e:5d} | {ol:.4f}  {oa:7.2%} | {cl:.4f}  {ca:7.2%}")
    print(f"\nwall time: oxide {oxide_time:.2f} s | cpu {cpu_time:.2f} s | ratio oxide/cpu {oxide_time / cpu_time:.2f}")
    (o_first, o_steady, o_warm), (c_first, c_steady, c_warm) = epoch_summary(oxide_epochs), epoch_summary(cpu_epochs)
    print(
        f"first epoch (warm-up): oxide {o_first:.3f} s | cpu {c_first:.3f} s | ratio oxide/cpu {o_first / c_first:.2f}"
    )
    print(
        f"steady epoch (median of epochs 2-{len(oxide_epochs)}): oxide {o_steady:.3f} s | cpu {c_steady:.3f} s"
        f" | ratio oxide/cpu {o_steady / c_steady:.2f}"
    )
    print(f"warm-up cost (first epoch - steady epoch): oxide {o_warm:.3f} s | cpu {c_warm:.3f} s")
    print(f"final test accuracy: oxide {oxide_hist[-1][1]:.2%} | cpu {cpu_hist[-1][1]:.2%}")
    print(f"peak oxide memory allocated: {torch.oxide.max_memory_allocated(0) / 2**20:.2f} MiB")

    total = sum(fallbacks.values())
    if total == 0:
        print("\nCPU fallback: none, every operator ran natively on oxide.")
    else:
        print(f"\nCPU fallback: {len(fallbacks)} operators ran on the CPU fallback, {total} calls in all:")
        for name, n in sorted(fallbacks.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"  {n:7d}  {name}")


if __name__ == "__main__":
    main()
