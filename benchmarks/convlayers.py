"""ResNet-18's 3x3 convolution layers one by one, oxide against CPU PyTorch (oneDNN).

    python benchmarks/convlayers.py [--batch 8] [--threads 2] [--rounds 4] [--layers 64:16,128:8] [--stem]

`make bench-models` times whole ResNet-18 steps (8x3x64x64 images); this splits
out the layers that decide them: the stride-1 3x3 convolutions of each stage, at
the spatial size they see in that step (64 channels at 16x16 down to 512 at 2x2).
For each it times the forward alone and forward + backward (input and weight
gradients), median milliseconds per call with a synchronize after each, the two
devices alternating in blocks (``--rounds`` of them) so that a slow phase of the
machine lands on both. Prints one table row per layer and the ratio oxide / CPU
(lower is better). ``--layers`` times other 3x3 "same" layers instead, as
``channels:size`` pairs (``64:56`` is ImageNet ResNet's first stage); ``--stem``
adds ResNet-18's 7x7 stride-2 stem (3 to 64 channels on the 64x64 images; its
backward is the weight gradient alone, as in training, where the images need none). Numbers from it are quoted in ARCHITECTURE.md (Measurements).
"""

from __future__ import annotations

import argparse
import statistics
import time

# (channels, spatial size) of ResNet-18's stride-1 3x3 layers on 64x64 images.
LAYERS = ((64, 16), (128, 8), (256, 4), (512, 2))


def _time(fn, sync, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        sync()
        out.append(time.perf_counter() - start)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4, help="alternating blocks per device")
    parser.add_argument("--reps", type=int, default=10, help="timed calls per block")
    parser.add_argument(
        "--layers",
        type=lambda v: tuple(tuple(int(n) for n in p.split(":")) for p in v.split(",")),
        default=LAYERS,
        help="channels:size pairs, comma-separated (default: ResNet-18's on 64x64 images)",
    )
    parser.add_argument("--stem", action="store_true", help="also time the 7x7 stride-2 stem")
    args = parser.parse_args(argv)
    # (label, in channels, out channels, size, kernel, stride, padding, input gradient)
    layers = [(f"{c} ch, {n}x{n}", c, c, n, 3, 1, 1, True) for c, n in args.layers]
    if args.stem:
        layers.append(("stem 7x7/2, 3->64 ch, 64x64", 3, 64, 64, 7, 2, 3, False))

    import torch

    import torch_oxide  # noqa: F401

    torch.set_num_threads(args.threads)
    print("| layer | fwd cpu ms | fwd oxide ms | ratio | fwd+bwd cpu ms | fwd+bwd oxide ms | ratio |")
    print("|---|---|---|---|---|---|---|")
    for label, cin, cout, size, k, stride, pad, input_grad in layers:
        gen = torch.Generator().manual_seed(0)
        x0 = torch.randn((args.batch, cin, size, size), generator=gen)
        w0 = torch.randn(cout, cin, k, k, generator=gen) / (k * cin**0.5)
        gy0 = torch.randn(torch.nn.functional.conv2d(x0, w0, stride=stride, padding=pad).shape, generator=gen)
        cases = {}
        for dev in ("cpu", "oxide"):
            x = x0.to(dev).requires_grad_(input_grad)
            w = w0.to(dev).requires_grad_()
            gy = gy0.to(dev)
            sync = torch.oxide.synchronize if dev == "oxide" else (lambda: None)
            wrt = (x, w) if input_grad else (w,)

            def fwd(x=x, w=w, stride=stride, pad=pad):
                torch.nn.functional.conv2d(x, w, stride=stride, padding=pad)

            def fwd_bwd(x=x, w=w, gy=gy, wrt=wrt, stride=stride, pad=pad):
                torch.autograd.grad(torch.nn.functional.conv2d(x, w, stride=stride, padding=pad), wrt, gy)

            cases[dev] = (fwd, fwd_bwd, sync)
        times = {(dev, kind): [] for dev in cases for kind in (0, 1)}
        for _ in range(args.rounds):
            for dev, (fwd, fwd_bwd, sync) in cases.items():
                for kind, fn in enumerate((fwd, fwd_bwd)):
                    time.sleep(0.02)
                    _time(fn, sync, 3)  # warm-up after the pause
                    times[(dev, kind)] += _time(fn, sync, args.reps)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        cells = []
        for kind in (0, 1):
            c, o = med[("cpu", kind)], med[("oxide", kind)]
            cells += [f"{c:.3f}", f"{o:.3f}", f"{o / c:.2f}"]
        print(f"| {label} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
