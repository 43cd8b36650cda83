"""scaled_dot_product_attention forward + backward: oxide (fused kernel, and the math
composite for comparison) against CPU PyTorch.

    python benchmarks/sdpa.py [--reps N] [--causal]

Shapes B=4, H=4, E=64 with L = S = 128 and 1024, float32, same thread count on both
devices. Prints median seconds per forward+backward and the ratios oxide/CPU (lower is
better), and the peak oxide memory of one forward+backward.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import torch_oxide  # noqa: F401


def step(q, k, v, causal):
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    out.backward(torch.ones_like(out))


def timed(dev, shape, causal, reps, overrideable=True):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(shape, generator=g).to(dev).requires_grad_(True) for _ in range(3))
    sync = torch.oxide.synchronize if dev == "oxide" else (lambda: None)
    torch._C._set_sdp_use_overrideable(overrideable)
    try:
        step(q, k, v, causal)
        sync()
        if dev == "oxide":
            torch.oxide.reset_peak_memory_stats()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            step(q, k, v, causal)
            sync()
            times.append(time.perf_counter() - t0)
    finally:
        torch._C._set_sdp_use_overrideable(True)
    peak = torch.oxide.max_memory_allocated() / 2**20 if dev == "oxide" else float("nan")
    return statistics.median(times), peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--causal", action="store_true")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, causal={args.causal}")
    print("| B,H,L,E | CPU s | oxide fused s | ratio | oxide math s | ratio | fused peak MiB | math peak MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for L in (128, 1024):
        shape = (4, 4, L, 64)
        cpu, _ = timed("cpu", shape, args.causal, args.reps)
        fused, fpeak = timed("oxide", shape, args.causal, args.reps, overrideable=True)
        math_, mpeak = timed("oxide", shape, args.causal, args.reps, overrideable=False)
        print(
            f"| 4,4,{L},64 | {cpu:.4f} | {fused:.4f} | {fused / cpu:.2f} | {math_:.4f} | {math_ / cpu:.2f} | "
            f"{fpeak:.1f} | {mpeak:.1f} |"
        )


if __name__ == "__main__":
    main()
