"""The c10d backend of oxide: ``oxgloo``, PyTorch's Gloo working on oxide memory.

Registered when torch_oxide loads, for the device types ``cpu`` and ``oxide``, so
``torch.distributed.init_process_group()`` with no backend uses it on an oxide
machine, ``init_process_group("oxgloo")`` or ``"cpu:gloo,oxide:oxgloo"`` name it, and
DDP, FSDP2 and DTensor run over it. Gloo does the communication (TCP, across processes
and hosts); the backend, a C++ ``c10d::Backend`` (``csrc/runtime/oxgloo.cpp``), only
hands it zero-copy host views of oxide tensors (device memory is host memory here)
and keeps CUDA's stream semantics:

- **Before**: a collective waits for the work queued on the current stream of each
  oxide tensor's device, so it sees every kernel launched before it (NCCL makes its
  stream wait for the current stream the same way).
- **After**: the returned work is Gloo's; ``work.wait()`` (which ``async_op=False``
  calls at once) blocks the host until Gloo is done, so kernels launched afterwards
  see the results, and raises Gloo's error. The work's future holds the oxide tensors.

Reductions Gloo lacks are composed: ``PREMUL_SUM`` scales the inputs by the factor,
then sums. A group created with the extended API also serves CPU tensors (barrier,
object collectives, CPU all_reduce) with the same Gloo backend, registered for ``cpu``.

The backend is C++ so that a collective costs what Gloo's own does: a Python backend
went through c10d's Python trampoline twice per call (the collective and
``wait()``), which cost about 60 us of host time per small ``all_reduce`` between
two processes on a 2-core machine (ARCHITECTURE.md, "Distributed").
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroupGloo

NAME = "oxgloo"


def _create(dist_opts: Any, backend_options: Any) -> dist.Backend:
    """The c10d creator: Gloo's backend, and around it oxgloo's C++ backend for oxide."""
    gloo = ProcessGroupGloo(dist_opts.store, dist_opts.group_rank, dist_opts.group_size, dist_opts.timeout)
    # The C++ side takes a ProcessGroup (a TorchScript class, so no pybind11 code is
    # needed there): give it Gloo on a holder group, read the wrapper back.
    holder = dist.ProcessGroup(dist_opts.group_rank, dist_opts.group_size)
    holder._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, gloo)
    torch.ops.oxide._oxgloo_wrap(holder.boxed())
    backend = holder._get_backend(torch.device("oxide"))
    # init_process_group() without a backend maps only the accelerator to this backend;
    # serve the group's CPU tensors too, from the same Gloo context. Gloo's own
    # backend: CPU tensors go to it directly.
    pg = dist_opts.process_group
    if pg is not None and not _has_backend(pg, "cpu"):
        pg._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, gloo)
    return backend


def _has_backend(pg: dist.ProcessGroup, device: str) -> bool:
    try:
        pg._get_backend(torch.device(device))
    except RuntimeError:
        return False
    return True


def register() -> None:
    """Registers ``oxgloo`` for ``cpu`` and ``oxide`` (done when torch_oxide loads)."""
    if not dist.is_available() or NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(NAME, _create, extended_api=True, devices=["cpu", "oxide"])
    # Gloo inside the backend records each collective in c10d's flight recorder under the
    # group's name (OxGloo::setGroupUid): say so, or torch attaches a recording hook that
    # records every collective a second time, Python traceback included (a third of a
    # small all_reduce's host instructions).
    from torch.distributed import distributed_c10d

    self_recording = getattr(distributed_c10d, "_FR_SELF_RECORDING_BACKENDS", None)
    if isinstance(self_recording, set):
        self_recording.add(NAME)
