"""Operator benchmarks: oxide against CPU PyTorch, side by side in one process.

    python benchmarks/ops.py [--out benchmarks/results] [--only NAME] [--threads N]

(``make bench-ops`` runs it with the defaults.) Each case runs the same operator on
the same data on an oxide device and on the CPU, with the same
``torch.get_num_threads()``. After a warm-up, each timed repetition runs the operator
``calls`` times and ends with ``torch.oxide.synchronize()`` (a no-op for the CPU);
each side runs its repetitions in ``ROUNDS`` blocks that alternate with the other
side's, each block after a 50 ms pause and then its own warm-up. Blocks rather than single
alternating repetitions: PyTorch's OpenMP workers and oxide's team workers keep
spinning briefly after work, so interleaving single repetitions makes each side pay
for the other's busy threads on these 2-core machines. Rounds rather than one block
per side: this shared machine drifts between slower and faster phases lasting seconds
(one whole run measured CPU's per-call time at half its usual value), and one block
per side could put a phase on one side only. A case
reports the median time per call, the ratio oxide/CPU (lower is better) and, when the
case has a target, whether the ratio meets it.

Groups and targets:

- elementwise, 1e7 float32: add, mul, exp, sigmoid; ratio <= 1.1. ``add`` into a
  preallocated ``out=`` at 1e7 and 1e8 elements (12 bytes moved per element), <= 1.1,
  with its bandwidth as a share of the machine's (below). The in-place forms an
  optimizer step is made of, <= 1.1: ``mul_`` by a Python scalar (-1, so that the
  values do not drift over the repetitions) and ``add_`` of a tensor with ``alpha``.
- reductions over 1e7 float32 (1000x10000): sum, sum(0), sum(1), mean, amax; <= 1.2.
  These warm up for 8 repetitions: on both devices the first 5 to 8 repetitions of a
  40 MB pass run up to twice as slow as the steady state (the L3 cache fills up over
  several passes, and the machine comes back slowly from the pause between blocks),
  which with 2 warm-ups put a different mix of cold repetitions into each side's
  median. The warm-up runs after the pause, not before it: before, every block's
  first four repetitions still ran slow on both sides.
- float32 GEMM ``torch.mm``, square 512/1024/2048, with GFLOP/s; <= 1.25
- per-call overhead on 1-element tensors: add, mul, sum, 1x1 mm, timed over many
  calls; <= 1.5. Once in the default (asynchronous) mode, where each call queues a
  launch record for the stream's worker, and once with launch blocking (kernels run
  at the call, ``OXIDE_LAUNCH_BLOCKING=1``), informative.
- convolution: ``Conv2d(64, 64, 3, padding=1)`` on (8, 64, 32, 32) float32, forward
  plus backward (input, weight and bias gradients); <= 1.3
- informative, no target: contiguous copy of a transposed 4096x4096, float32->float16
  cast, softmax.
- optimizer steps, no target: the single passes torch.optim's ``SGD(fused=True)``
  (momentum) and ``Adam(fused=True)`` make over ResNet-18's 11.2M float32 parameters
  (``_fused_sgd_``, ``_fused_adam_``), with bytes moved per step as GB/s.
- norms and softmax, float32, no target: layer_norm on (512, 256), batch_norm in
  training mode on (8, 64, 32, 32), softmax and log_softmax along the last dimension
  of (512, 1000); each forward alone and forward plus backward (input, and for the
  norms weight and bias, gradients; the input gradient is compared).

A case is *native* when ``torch.oxide.fallback_stats()`` did not change while its oxide
runs ran; otherwise the table marks it ``fallback`` and names the operators that fell
back, since its ratio then measures the CPU fallback (copies to the host and back),
not an oxide kernel. Each case also checks once that oxide's result matches the CPU's.
The fallback mode is ``silent`` for the run, so that fallback cases are measured
rather than refused or warned about.

The machine's limits are measured in the same run, before and after the cases (the
better of the two is kept), on ``torch.get_num_threads()`` threads of oxide's kernel
team: a STREAM-style probe of memory bandwidth (copy, scale, add, triad over float32
arrays of 1e7 and 1e8 elements, ordinary stores) and an FMA peak probe (independent
vector FMAs, the widest the CPU has). The ``add out=`` rows report their bandwidth as a
share of STREAM add at the same size (target >= 90% for oxide at 1e8, beyond the
caches) and the GEMM rows their GFLOP/s as a share of the FMA peak (target >= 85% at
2048); CPU PyTorch's shares are printed beside them.

Writes ``ops.md`` (a Markdown table) and ``ops.json`` (every number, plus torch
version, thread count, CPU model and date) into ``--out``. The whole run takes about
half a minute on a 2-core machine.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

import torch_oxide

OXIDE = torch.device("oxide")
CPU = torch.device("cpu")


@dataclass
class Case:
    """One benchmark: ``op(*inputs)`` on both devices.

    ``inputs`` makes the CPU tensors (seeded); oxide gets copies of the same data.
    ``calls`` operator calls make one timed repetition (many for overhead cases).
    """

    name: str
    group: str
    shape: str
    inputs: Callable[[], Sequence[torch.Tensor]]
    op: Callable[..., torch.Tensor]
    target: float | None = None
    reps: int = 10
    warmup: int = 2
    calls: int = 1
    flops: float | None = None  # per call, for GFLOP/s
    bytes: float | None = None  # per call, bytes read and written, for GB/s
    # Timed inside torch.profiler: oxide with its device activities, CPU with CPU's.
    profiled: bool = False
    blocking: bool = False  # oxide side with launch blocking (kernels run at the call)


@dataclass
class Result:
    name: str
    group: str
    shape: str
    target: float | None
    oxide_ms: float
    cpu_ms: float
    ratio: float
    ok: bool | None  # None: no target
    native: bool
    fallback_ops: dict[str, int]  # fallback counters that grew during the oxide runs
    matches_cpu: bool
    reps: int
    warmup: int
    calls_per_rep: int
    oxide_rep_ms: list[float] = field(default_factory=list)
    cpu_rep_ms: list[float] = field(default_factory=list)
    gflops_oxide: float | None = None
    gflops_cpu: float | None = None
    gbs_oxide: float | None = None
    gbs_cpu: float | None = None
    bytes_per_call: float | None = None


N = 10_000_000
LARGE = 100_000_000  # beyond the last-level cache: the memory-bandwidth case
OVERHEAD_CALLS = 2000


def _randn(*shape: int) -> Callable[[], Sequence[torch.Tensor]]:
    return lambda: (torch.randn(*shape),)


def _randn2(*shape: int) -> Callable[[], Sequence[torch.Tensor]]:
    return lambda: (torch.randn(*shape), torch.randn(*shape))


def _conv_inputs() -> Sequence[torch.Tensor]:
    x, w, b, gy = (
        torch.randn(8, 64, 32, 32),
        torch.randn(64, 64, 3, 3) / 24,
        torch.randn(64),
        torch.randn(8, 64, 32, 32),
    )
    return (x.requires_grad_(), w.requires_grad_(), b.requires_grad_(), gy)


def _conv_train_step(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, gy: torch.Tensor) -> torch.Tensor:
    # On oxide the inputs are copies of CPU leaves: gradients are taken with respect to the copies.
    y = torch.nn.functional.conv2d(x, w, b, padding=1)
    _, grad_w, _ = torch.autograd.grad(y, (x, w, b), gy)
    return grad_w


def _norm_inputs(shape: Sequence[int], channels: int) -> Callable[[], Sequence[torch.Tensor]]:
    def make() -> Sequence[torch.Tensor]:
        w, b = torch.rand(channels) + 0.5, torch.randn(channels)
        return (torch.randn(*shape).requires_grad_(), w.requires_grad_(), b.requires_grad_(), torch.randn(*shape))

    return make


def _layer_norm(x, w, b, gy, backward=False):
    y = torch.nn.functional.layer_norm(x, x.shape[-1:], w, b)
    return torch.autograd.grad(y, (x, w, b), gy)[0] if backward else y


def _batch_norm(x, w, b, gy, backward=False):
    # Training mode on batch statistics (no running statistics, so repetitions are identical).
    y = torch.nn.functional.batch_norm(x, None, None, w, b, training=True)
    return torch.autograd.grad(y, (x, w, b), gy)[0] if backward else y


def _softmax_inputs(*shape: int) -> Callable[[], Sequence[torch.Tensor]]:
    return lambda: (torch.randn(*shape).requires_grad_(), torch.randn(*shape))


def _softmax(fn, backward=False):
    def run(x, gy):
        y = fn(x, -1)
        return torch.autograd.grad(y, x, gy)[0] if backward else y

    return run


def _roi_inputs() -> Sequence[torch.Tensor]:
    # A detection head's pooling: 1000 proposals over two 256-channel 50x50 feature maps.
    g = torch.Generator().manual_seed(0)
    xy = torch.rand(1000, 2, generator=g) * 40
    boxes = torch.cat([xy, xy + torch.rand(1000, 2, generator=g) * 20 + 1], 1)
    rois = torch.cat([torch.randint(0, 2, (1000, 1), generator=g).float(), boxes], 1)
    return torch.randn(2, 256, 50, 50, generator=g), rois, torch.randn(1000, 256, 7, 7, generator=g)


def _roi_align_step(x: torch.Tensor, rois: torch.Tensor, gy: torch.Tensor) -> torch.Tensor:
    import torchvision

    x = x.detach().requires_grad_()
    (gx,) = torch.autograd.grad(torchvision.ops.roi_align(x, rois, 7, 1.0, 2), x, gy)
    return gx


def _nms_inputs() -> Sequence[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    xy = torch.rand(5000, 2, generator=g) * 500
    return torch.cat([xy, xy + torch.rand(5000, 2, generator=g) * 60 + 1], 1), torch.rand(5000, generator=g)


def _torchvision_cases() -> list[Case]:
    """torchvision's operators (native on oxide), when torchvision is installed."""
    try:
        import torchvision
    except ImportError:
        return []
    return [
        Case(
            "roi_align",
            "torchvision",
            "1000 rois, 2x256x50x50",
            _roi_inputs,
            lambda x, r, gy: torchvision.ops.roi_align(x, r, 7, 1.0, 2),
        ),
        Case("roi_align fwd+bwd", "torchvision", "1000 rois, 2x256x50x50", _roi_inputs, _roi_align_step, reps=6),
        Case("nms", "torchvision", "5000 boxes", _nms_inputs, lambda b, s: torchvision.ops.nms(b, s, 0.5), reps=15),
    ]


def _add_out_inputs(n: int) -> Callable[[], Sequence[torch.Tensor]]:
    return lambda: (torch.randn(n), torch.randn(n), torch.empty(n))


def _add_out(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    return torch.add(a, b, out=out)


def _mul_inplace(x: torch.Tensor) -> torch.Tensor:
    return x.mul_(-1.0)


def _add_inplace(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.add_(b, alpha=-1e-3)


# Parameter sizes of ResNet-18 with 10 classes (conv weights, the fc layer, and each
# batch norm's weight and bias), 11.2M float32 elements: the optimizer cases step them.
RESNET18_PARAMS = (
    [64 * 3 * 49]
    + [64 * 64 * 9] * 4
    + [128 * 64 * 9, 128 * 64]
    + [128 * 128 * 9] * 3
    + [256 * 128 * 9, 256 * 128]
    + [256 * 256 * 9] * 3
    + [512 * 256 * 9, 512 * 256]
    + [512 * 512 * 9] * 3
    + [512 * 10, 10]
    + [c for c in (64,) * 10 + (128,) * 10 + (256,) * 10 + (512,) * 10]
)


def _optim_inputs(lists: int) -> Callable[[], Sequence[torch.Tensor]]:
    """``lists`` tensors per parameter (parameters, gradients, state), flattened."""
    return lambda: tuple(torch.randn(n) for _ in range(lists) for n in RESNET18_PARAMS)


def _fused_sgd_step(*ts: torch.Tensor) -> torch.Tensor:
    k = len(RESNET18_PARAMS)
    torch._fused_sgd_(
        list(ts[:k]),
        list(ts[k : 2 * k]),
        list(ts[2 * k :]),
        weight_decay=0.0,
        momentum=0.9,
        lr=1e-3,
        dampening=0.0,
        nesterov=False,
        maximize=False,
        is_first_step=False,
    )
    return ts[0]


def _fused_adam_step(*ts: torch.Tensor) -> torch.Tensor:
    k = len(RESNET18_PARAMS)
    params, grads, avgs, sqs = (list(ts[i * k : (i + 1) * k]) for i in range(4))
    steps = [torch.ones((), device=p.device) for p in params]
    torch._fused_adam_(
        params,
        grads,
        avgs,
        [s.abs_() for s in sqs],
        [],
        steps,
        lr=1e-3,
        beta1=0.9,
        beta2=0.999,
        weight_decay=0.0,
        eps=1e-8,
        amsgrad=False,
        maximize=False,
    )
    return ts[0]


def cases() -> list[Case]:
    mat = (1000, 10_000)  # 1e7 elements
    out: list[Case] = [
        Case("add", "elementwise", "1e7", _randn2(N), torch.add, target=1.1, reps=15),
        Case("add out=", "elementwise", "1e7", _add_out_inputs(N), _add_out, target=1.1, reps=15, bytes=12.0 * N),
        Case(
            "add out=",
            "elementwise",
            "1e8",
            _add_out_inputs(LARGE),
            _add_out,
            target=1.1,
            reps=6,
            bytes=12.0 * LARGE,
        ),
        Case("mul", "elementwise", "1e7", _randn2(N), torch.mul, target=1.1, reps=15),
        # Five calls a repetition, as an optimizer step issues them: a lone sub-millisecond
        # call would mostly time the stream worker's wake-up after the synchronize.
        Case("mul_ scalar", "elementwise", "1e7", _randn(N), _mul_inplace, target=1.1, reps=15, calls=5, bytes=8.0 * N),
        Case("add_", "elementwise", "1e7", _randn2(N), _add_inplace, target=1.1, reps=15, calls=5, bytes=12.0 * N),
        Case("exp", "elementwise", "1e7", _randn(N), torch.exp, target=1.1, reps=15),
        Case("sigmoid", "elementwise", "1e7", _randn(N), torch.sigmoid, target=1.1, reps=15),
        Case("sum", "reduction", "1000x10000", _randn(*mat), torch.sum, target=1.2, reps=15, warmup=8),
        Case("sum(dim=0)", "reduction", "1000x10000", _randn(*mat), lambda x: x.sum(0), target=1.2, reps=15, warmup=8),
        Case("sum(dim=1)", "reduction", "1000x10000", _randn(*mat), lambda x: x.sum(1), target=1.2, reps=15, warmup=8),
        Case("mean", "reduction", "1000x10000", _randn(*mat), torch.mean, target=1.2, reps=15, warmup=8),
        Case("amax", "reduction", "1000x10000", _randn(*mat), torch.amax, target=1.2, reps=15, warmup=8),
    ]
    # The steps torch.optim's SGD(fused=True) and Adam(fused=True) take, over ResNet-18's
    # parameters: one pass reading and writing every list.
    elems = sum(RESNET18_PARAMS)
    out += [
        Case("SGD(fused) step", "optim", "ResNet-18", _optim_inputs(3), _fused_sgd_step, reps=10, bytes=20.0 * elems),
        Case("Adam(fused) step", "optim", "ResNet-18", _optim_inputs(4), _fused_adam_step, reps=10, bytes=28.0 * elems),
    ]
    for n, reps in ((512, 20), (1024, 10), (2048, 5)):
        out.append(
            Case(f"mm {n}", "gemm", f"{n}x{n}", _randn2(n, n), torch.mm, target=1.25, reps=reps, flops=2.0 * n**3)
        )
    for blocking in (False, True):
        for name, op in (("add", torch.add), ("mul", torch.mul), ("sum", lambda a, b: a.sum()), ("mm", torch.mm)):
            shape = (1, 1) if name == "mm" else (1,)
            out.append(
                Case(
                    f"{name} (per call{', blocking' if blocking else ''})",
                    "overhead",
                    "x".join(map(str, shape)),
                    _randn2(*shape),
                    op,
                    target=None if blocking else 1.5,
                    reps=7,
                    warmup=1,
                    calls=OVERHEAD_CALLS,
                    blocking=blocking,
                )
            )
    # A kernel that checks its operands' values (a divisor of 0) records the Python line
    # that launched it when queued (ARCHITECTURE.md, "Errors"): its cost next to mul's.
    for name, op in (("mul int64", torch.mul), ("floor_divide int64", torch.floor_divide)):
        out.append(
            Case(
                f"{name} (per call)",
                "overhead",
                "1",
                lambda: (torch.tensor([7]), torch.tensor([2])),
                op,
                target=None,
                reps=7,
                warmup=1,
                calls=OVERHEAD_CALLS,
            )
        )
    # The profiler's cost per kernel event: inside torch.profiler, oxide recording its
    # kernels (ARCHITECTURE.md, "Observability") against CPU recording its operators.
    out.append(
        Case(
            "add (per call, profiled)",
            "overhead",
            "1",
            _randn2(1),
            torch.add,
            target=None,
            reps=7,
            warmup=1,
            calls=OVERHEAD_CALLS,
            profiled=True,
        )
    )
    conv_flops = 3 * 2.0 * 8 * 64 * 64 * 9 * 32 * 32  # forward, grad input, grad weight
    out.append(
        Case(
            "conv2d fwd+bwd",
            "conv",
            "8x64x32x32, 3x3",
            _conv_inputs,
            _conv_train_step,
            target=1.3,
            reps=10,
            flops=conv_flops,
        )
    )
    out += [
        Case("transpose.contiguous", "info", "4096x4096", _randn(4096, 4096), lambda x: x.t().contiguous()),
        Case("to(float16)", "info", "1e7", _randn(N), lambda x: x.to(torch.float16)),
        Case("softmax(dim=1)", "info", "1000x10000", _randn(*mat), lambda x: torch.softmax(x, 1)),
    ]
    ln, bn = _norm_inputs((512, 256), 256), _norm_inputs((8, 64, 32, 32), 64)
    out += [
        Case("layer_norm", "norm", "512x256", ln, _layer_norm, reps=15, calls=10),
        Case("layer_norm fwd+bwd", "norm", "512x256", ln, lambda *a: _layer_norm(*a, backward=True), reps=15, calls=10),
        Case("batch_norm train", "norm", "8x64x32x32", bn, _batch_norm, reps=15, calls=5),
        Case(
            "batch_norm train fwd+bwd",
            "norm",
            "8x64x32x32",
            bn,
            lambda *a: _batch_norm(*a, backward=True),
            reps=15,
            calls=5,
        ),
    ]
    for name, fn in (("softmax", torch.softmax), ("log_softmax", torch.log_softmax)):
        out += [
            Case(f"{name}(dim=-1)", "norm", "512x1000", _softmax_inputs(512, 1000), _softmax(fn), reps=15, calls=10),
            Case(
                f"{name}(dim=-1) fwd+bwd",
                "norm",
                "512x1000",
                _softmax_inputs(512, 1000),
                _softmax(fn, True),
                reps=15,
                calls=10,
            ),
        ]
    return out + _torchvision_cases()


# Alternating blocks of repetitions per side (see the module docstring); each side's
# median is taken over all its repetitions (``reps`` rounded up to a multiple of this).
ROUNDS = 3


def _sync_oxide() -> None:
    torch.oxide.synchronize()


def _sync_cpu() -> None:
    pass


def _time_rep(fn: Callable[[], torch.Tensor], calls: int, sync: Callable[[], None]) -> float:
    """Seconds per call over one repetition of ``calls`` calls, device work included."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - start) / calls


def _matches(oxide_out: torch.Tensor, cpu_out: torch.Tensor) -> bool:
    got = oxide_out.cpu()
    if got.dtype != cpu_out.dtype or got.shape != cpu_out.shape:
        return False
    got, want = got.double(), cpu_out.double()
    # Summation order differs between implementations: scale atol by the magnitude.
    scale = max(1.0, want.abs().max().item())
    return torch.allclose(got, want, rtol=1e-3, atol=1e-4 * scale)


def run_case(case: Case) -> Result:
    torch.manual_seed(0)
    cpu_in = case.inputs()
    oxide_in = tuple(t.to(OXIDE) for t in cpu_in)
    torch.oxide.synchronize()

    def run_cpu():
        return case.op(*cpu_in)

    def run_oxide():
        return case.op(*oxide_in)

    before = torch.oxide.fallback_stats()
    matches = _matches(run_oxide(), run_cpu())
    oxide_s: list[float] = []
    cpu_s: list[float] = []
    per_round = -(-case.reps // ROUNDS)
    for _ in range(ROUNDS):
        for run, sync, times in ((run_oxide, _sync_oxide, oxide_s), (run_cpu, _sync_cpu, cpu_s)):
            blocking = case.blocking and run is run_oxide
            profiler = contextlib.nullcontext()
            if case.profiled:
                activities = [torch.profiler.ProfilerActivity.CPU]
                if run is run_oxide:
                    activities.append(torch.profiler.ProfilerActivity.PrivateUse1)
                profiler = torch.profiler.profile(activities=activities)
            with torch.oxide._LaunchBlocking() if blocking else contextlib.nullcontext(), profiler:
                # Let the other side's worker threads go idle, then warm this side up:
                # after the pause both devices' first repetitions of a 1 ms reduction
                # ran up to twice as slow, settling only by the fifth (per-repetition
                # data, 2026-12-07), so warming up before the pause put that ramp
                # inside the timed repetitions.
                time.sleep(0.05)
                for _ in range(case.warmup):
                    run()
                sync()
                for _ in range(per_round):
                    times.append(_time_rep(run, case.calls, sync))
    after = torch.oxide.fallback_stats()
    grown = {op: n - before.get(op, 0) for op, n in after.items() if n != before.get(op, 0)}

    oxide_t, cpu_t = statistics.median(oxide_s), statistics.median(cpu_s)
    ratio = oxide_t / cpu_t
    return Result(
        name=case.name,
        group=case.group,
        shape=case.shape,
        target=case.target,
        oxide_ms=oxide_t * 1e3,
        cpu_ms=cpu_t * 1e3,
        ratio=ratio,
        ok=None if case.target is None else ratio <= case.target,
        native=not grown,
        fallback_ops=grown,
        matches_cpu=matches,
        reps=case.reps,
        warmup=case.warmup,
        calls_per_rep=case.calls,
        oxide_rep_ms=[t * 1e3 for t in oxide_s],
        cpu_rep_ms=[t * 1e3 for t in cpu_s],
        gflops_oxide=case.flops / oxide_t / 1e9 if case.flops else None,
        gflops_cpu=case.flops / cpu_t / 1e9 if case.flops else None,
        gbs_oxide=case.bytes / oxide_t / 1e9 if case.bytes else None,
        gbs_cpu=case.bytes / cpu_t / 1e9 if case.bytes else None,
        bytes_per_call=case.bytes,
    )


# The machine's limits (module docstring): STREAM sizes, FMA rounds per thread.
STREAM_SIZES = (N, LARGE)
FMA_ITERS = 20_000_000
BANDWIDTH_TARGET = 0.9  # share of STREAM add reached by oxide's add out= at LARGE
GEMM_TARGET = 0.85  # share of the FMA peak reached by oxide's mm 2048


def probe_limits(threads: int) -> dict[str, object]:
    """STREAM bandwidth (bytes/s per kernel and size) and FMA peak of ``threads`` threads."""
    stream = {str(n): torch_oxide._C._probe_memory_bandwidth(n, 5 if n <= N else 3, threads) for n in STREAM_SIZES}
    flops, isa = torch_oxide._C._probe_fma_peak(FMA_ITERS, 3, threads)
    return {"stream": stream, "fma_peak_flops": flops, "fma_isa": isa}


def best_limits(a: dict[str, object], b: dict[str, object]) -> dict[str, object]:
    """The better of two probes, kernel by kernel (STREAM reports each kernel's best pass)."""
    stream = {
        n: {k: max(v, b["stream"][n][k]) for k, v in kernels.items()}  # type: ignore[index]
        for n, kernels in a["stream"].items()  # type: ignore[union-attr]
    }
    return {
        "stream": stream,
        "fma_peak_flops": max(a["fma_peak_flops"], b["fma_peak_flops"]),  # type: ignore[type-var]
        "fma_isa": a["fma_isa"],
    }


@dataclass
class LimitRow:
    case: str
    measure: str  # "bandwidth" or "flops"
    limit: float  # the machine's, bytes/s or flop/s
    oxide: float
    cpu: float
    target: float | None

    @property
    def oxide_share(self) -> float:
        return self.oxide / self.limit

    @property
    def cpu_share(self) -> float:
        return self.cpu / self.limit

    @property
    def ok(self) -> bool | None:
        return None if self.target is None else self.oxide_share >= self.target


def limit_rows(results: list[Result], limits: dict[str, object]) -> list[LimitRow]:
    rows = []
    for r in results:
        # Only the add out= rows: an in-place add_ moves no write-allocate traffic, so
        # STREAM add (which does) is not its limit.
        if r.gbs_oxide is not None and r.bytes_per_call and r.name == "add out=":
            numel = str(int(r.bytes_per_call // 12))
            if numel in limits["stream"]:  # type: ignore[operator]
                target = BANDWIDTH_TARGET if numel == str(LARGE) else None
                add = limits["stream"][numel]["add"]  # type: ignore[index]
                rows.append(
                    LimitRow(f"{r.name} {r.shape}", "bandwidth", add, r.gbs_oxide * 1e9, r.gbs_cpu * 1e9, target)
                )
        if r.group == "gemm" and r.gflops_oxide is not None:
            target = GEMM_TARGET if r.name == "mm 2048" else None
            peak = limits["fma_peak_flops"]
            rows.append(LimitRow(r.name, "flops", peak, r.gflops_oxide * 1e9, r.gflops_cpu * 1e9, target))  # type: ignore[arg-type]
    return rows


def limits_lines(limits: dict[str, object], rows: list[LimitRow]) -> list[str]:
    stream = limits["stream"]
    lines = [
        "## The machine's limits",
        "",
        "Measured in this run on the same threads (best of a probe before and one after the cases).",
        "",
        "| STREAM (float32, ordinary stores) | copy GB/s | scale GB/s | add GB/s | triad GB/s |",
        "|---|---|---|---|---|",
    ]
    for n, k in stream.items():  # type: ignore[union-attr]
        lines.append(
            f"| {int(n):.0e} elements | {k['copy'] / 1e9:.1f} | {k['scale'] / 1e9:.1f} | "
            f"{k['add'] / 1e9:.1f} | {k['triad'] / 1e9:.1f} |"
        )
    lines += [
        "",
        f"FMA peak: {limits['fma_peak_flops'] / 1e9:.1f} GFLOP/s float32 ({limits['fma_isa']}).",  # type: ignore[operator]
        "",
        "| case | limit | oxide | share | cpu | share | target (oxide) | ok |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        unit, scale = ("GB/s", 1e9) if r.measure == "bandwidth" else ("GFLOP/s", 1e9)
        what = "STREAM add" if r.measure == "bandwidth" else "FMA peak"
        lines.append(
            f"| {r.case} | {what} {r.limit / scale:.1f} {unit} | {r.oxide / scale:.1f} | {r.oxide_share:.0%} | "
            f"{r.cpu / scale:.1f} | {r.cpu_share:.0%} | "
            f"{'-' if r.target is None else f'>= {r.target:.0%}'} | "
            f"{'-' if r.ok is None else ('yes' if r.ok else 'no')} |"
        )
    return lines + [""]


def _ms(x: float) -> str:
    return f"{x:.4g}"


def _notes(r: Result) -> str:
    notes = []
    if r.calls_per_rep > 1:
        notes.append(f"per call: oxide {r.oxide_ms * 1e3:.3g} us, cpu {r.cpu_ms * 1e3:.3g} us")
    if r.gflops_oxide is not None:
        notes.append(f"GFLOP/s: oxide {r.gflops_oxide:.1f}, cpu {r.gflops_cpu:.1f}")
    if r.gbs_oxide is not None:
        notes.append(f"GB/s: oxide {r.gbs_oxide:.1f}, cpu {r.gbs_cpu:.1f}")
    if not r.native:
        notes.append("fell back: " + ", ".join(sorted(r.fallback_ops)))
    if not r.matches_cpu:
        notes.append("RESULT DIFFERS FROM CPU")
    return "; ".join(notes)


def _ok(r: Result) -> str:
    return "-" if r.ok is None else ("yes" if r.ok else "no")


COLUMNS = ("case", "shape", "oxide ms", "cpu ms", "ratio", "target", "ok", "oxide path", "notes")


def _row(r: Result) -> list[str]:
    return [
        f"{r.group}: {r.name}",
        r.shape,
        _ms(r.oxide_ms),
        _ms(r.cpu_ms),
        f"{r.ratio:.2f}",
        "-" if r.target is None else f"<= {r.target:g}",
        _ok(r),
        "native" if r.native else "**fallback**",
        _notes(r),
    ]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _summary(results: list[Result]) -> list[str]:
    targeted = [r for r in results if r.target is not None]
    native = [r for r in targeted if r.native]
    return [
        f"targets met: {sum(bool(r.ok) for r in targeted)}/{len(targeted)} cases; "
        f"native cases with a target: {len(native)}, of which {sum(bool(r.ok) for r in native)} meet it",
        f"fallback cases: {sum(not r.native for r in results)}/{len(results)} "
        "(their ratio measures the CPU fallback, not an oxide kernel)",
    ]


def write_markdown(path: str, env: dict[str, object], results: list[Result], extra: Sequence[str] = ()) -> None:
    lines = [
        "# oxide vs CPU operator benchmarks",
        "",
        f"Generated by `benchmarks/ops.py` on {env['date']}: torch {env['torch_version']}, "
        f"torch-oxide {env['torch_oxide_version']}, {env['threads']} torch threads, "
        f"{env['cpu_model']} ({env['cpu_count']} CPUs).",
        "",
        "Median time per call; ratio = oxide / CPU, lower is better. `fallback` rows ran "
        "through the CPU fallback, so their ratio is not an oxide kernel's.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---" for _ in COLUMNS) + "|",
    ]
    lines += ["| " + " | ".join(_row(r)) + " |" for r in results]
    lines += [""] + [f"- {s}" for s in _summary(results)] + [""] + list(extra)
    with open(path, "w") as f:
        f.write("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out",
        default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"),
        help="directory for ops.md and ops.json (created if missing)",
    )
    parser.add_argument(
        "--only", action="append", default=[], help="run only cases whose 'group: name' contains this text (repeatable)"
    )
    parser.add_argument("--threads", type=int, help="torch.set_num_threads() first (default: torch's choice)")
    args = parser.parse_args(argv)

    if args.threads:
        torch.set_num_threads(args.threads)
    selected = [c for c in cases() if not args.only or any(s in f"{c.group}: {c.name}" for s in args.only)]
    if not selected:
        parser.error(f"no case matches {args.only}")

    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch_version": torch.__version__,
        "torch_oxide_version": torch_oxide.__version__,
        "threads": torch.get_num_threads(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "fallback_mode": "silent",
    }
    print(
        f"torch {env['torch_version']}, torch-oxide {env['torch_oxide_version']}, "
        f"torch.get_num_threads() = {env['threads']} (oxide and CPU alike), {env['cpu_model']}"
    )

    start = time.perf_counter()
    limits_before = probe_limits(env["threads"])  # type: ignore[arg-type]
    previous_mode = torch.oxide.get_fallback_mode()
    torch.oxide.set_fallback_mode("silent")
    results: list[Result] = []
    try:
        widths = (34, 10, 10, 10, 7, 8, 4, 13)
        print("  ".join(h.ljust(w) for h, w in zip(COLUMNS, widths)) + "  notes")
        for case in selected:
            r = run_case(case)
            results.append(r)
            row = _row(r)
            row[7] = row[7].strip("*")
            print("  ".join(v.ljust(w) for v, w in zip(row, widths)) + "  " + row[8], flush=True)
    finally:
        torch.oxide.set_fallback_mode(previous_mode)
    limits = best_limits(limits_before, probe_limits(env["threads"]))  # type: ignore[arg-type]
    rows = limit_rows(results, limits)
    extra = limits_lines(limits, rows)
    print("\n".join(extra))
    for line in _summary(results):
        print(line)
    print(f"ran {len(results)} cases in {time.perf_counter() - start:.0f} s")

    os.makedirs(args.out, exist_ok=True)
    md_path, json_path = os.path.join(args.out, "ops.md"), os.path.join(args.out, "ops.json")
    write_markdown(md_path, env, results, extra)
    with open(json_path, "w") as f:
        limit_json = [{**r.__dict__, "oxide_share": r.oxide_share, "cpu_share": r.cpu_share, "ok": r.ok} for r in rows]
        json.dump(
            {**env, "limits": {**limits, "rows": limit_json}, "cases": [r.__dict__ for r in results]}, f, indent=2
        )
        f.write("\n")
    print(f"wrote {md_path} and {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
