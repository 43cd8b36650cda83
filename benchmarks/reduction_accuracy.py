"""Accuracy of oxide's float32 reductions next to CPU PyTorch's.

For each case: the relative error (max abs difference / max abs reference) of
oxide's and of CPU's float32 result against the same reduction in float64 on the
CPU. Prints a markdown table. Not a test: tests/python/test_reduction_accuracy.py
asserts the bound; this shows the numbers (issue "No silent wrong answers").

    .venv/bin/python benchmarks/reduction_accuracy.py
"""

import torch
import torch.nn.functional as F

import torch_oxide  # noqa: F401

torch.oxide.set_fallback_mode("silent")
gen = torch.Generator().manual_seed(0)


def const(n):
    return lambda: torch.full((n,), 0.1)


def rand(*shape):
    return lambda: torch.rand(*shape, generator=gen)


CASES = [
    ("full(1e7, 0.1).sum()", const(10**7), torch.sum, None),
    ("full(2^24, 0.1).mean()", const(2**24), torch.mean, None),
    ("full(1e7, 0.1).nansum()", const(10**7), torch.nansum, None),
    ("full(1e7, 0.1).nanmean()", const(10**7), torch.nanmean, None),
    ("rand(1e7).sum()", rand(10**7), torch.sum, None),
    ("rand(1e7) vector_norm p=1", rand(10**7), lambda x: torch.linalg.vector_norm(x, 1), None),
    ("rand(1e7) vector_norm p=2", rand(10**7), lambda x: torch.linalg.vector_norm(x, 2), None),
    ("rand(1e7).logsumexp(0)", rand(10**7), lambda x: x.logsumexp(0), None),
    ("rand(1e7).var()", rand(10**7), torch.var, None),
    ("rand(1e6) mse_loss", rand(2, 10**6), lambda x: F.mse_loss(x[0], x[1]), None),
    ("rand(1e6) l1_loss", rand(2, 10**6), lambda x: F.l1_loss(x[0], x[1]), None),
    ("rand(2^20, 4).sum(0)", rand(2**20, 4), lambda x: x.sum(0), None),
    ("rand(4, 2^20).t().sum(0)", rand(4, 2**20), lambda x: x.t().sum(0), None),
    ("rand(1000, 10000).sum(0)", rand(1000, 10000), lambda x: x.sum(0), None),
    ("rand(1000, 10000).sum(1)", rand(1000, 10000), lambda x: x.sum(1), None),
    ("rand(2e6)[::2].sum()", rand(2 * 10**6), lambda x: x[::2].sum(), None),
    (
        "full(1e7, 0.1, float16).sum(dtype=float32)",
        lambda: torch.full((10**7,), 0.1, dtype=torch.float16),
        lambda x: x.sum(dtype=torch.float32),
        torch.sum,
    ),
    ("rand(1e7).trapezoid()", rand(10**7), torch.trapezoid, None),
]


def error(out, ref):
    out = out.double().cpu()
    return float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-300))


def main():
    print("| case | oxide rel. error | CPU rel. error |")
    print("|---|---|---|")
    for name, make, fn, ref_fn in CASES:
        x = make()
        ref = (ref_fn or fn)(x.double())
        print(f"| {name} | {error(fn(x.to('oxide')), ref):.2e} | {error(fn(x), ref):.2e} |", flush=True)


if __name__ == "__main__":
    main()
