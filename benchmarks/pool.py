"""Pooling timing, oxide against CPU PyTorch on the same threads (not a test).

    python benchmarks/pool.py [--threads N]

max_pool2d(3, 2, 1) followed by adaptive_avg_pool2d((1, 1)), forward and backward, on a
(8, 64, 56, 56) float32 input (a ResNet stem), and each part alone. Prints the median
time per iteration of each side and the ratio oxide/CPU (lower is better).
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import torch_oxide  # noqa: F401


def timeit(fn, device, reps=20, warmup=5):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        if device == "oxide":
            torch.oxide.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    x_cpu = torch.randn(8, 64, 56, 56)
    cases = {
        "max_pool2d(3,2,1) fwd": lambda x: F.max_pool2d(x, 3, 2, 1),
        "adaptive_avg_pool2d(1) fwd": lambda x: F.adaptive_avg_pool2d(x, (1, 1)),
        "avg_pool2d(3,2,1) fwd": lambda x: F.avg_pool2d(x, 3, 2, 1),
    }
    grads = {
        "max_pool2d + adaptive_avg_pool2d fwd+bwd": lambda x: F.adaptive_avg_pool2d(F.max_pool2d(x, 3, 2, 1), (1, 1)),
        "max_pool2d(3,2,1) fwd+bwd": lambda x: F.max_pool2d(x, 3, 2, 1),
        "avg_pool2d(3,2,1) fwd+bwd": lambda x: F.avg_pool2d(x, 3, 2, 1),
    }
    print(f"threads={torch.get_num_threads()}  input (8, 64, 56, 56) float32")
    print(f"{'case':45s} {'cpu ms':>8s} {'oxide ms':>9s} {'ratio':>6s}")
    for name, f in {**cases, **grads}.items():
        res = {}
        for device in ("cpu", "oxide"):
            x = x_cpu.to(device).requires_grad_(name in grads)
            if name in grads:

                def run(x=x, f=f):
                    f(x).sum().backward()
                    x.grad = None
            else:

                def run(x=x, f=f):
                    f(x)

            res[device] = timeit(run, device)
        print(f"{name:45s} {res['cpu'] * 1e3:8.2f} {res['oxide'] * 1e3:9.2f} {res['oxide'] / res['cpu']:6.2f}")


if __name__ == "__main__":
    main()
