"""The c10d backend of oxide: ``oxgloo``, PyTorch's Gloo working on oxide memory.

Registered when torch_oxide loads, for the device types ``cpu`` and ``oxide``, so
``torch.distributed.init_process_group()`` with no backend uses it on an oxide
machine, ``init_process_group("oxgloo")`` or ``"cpu:gloo,oxide:oxgloo"`` name it, and
DDP, FSDP2 and DTensor run over it. Gloo does the communication (TCP, across processes
and hosts); this class only hands it zero-copy host views of oxide tensors
(``oxide::_host_view``: device memory is host memory here) and keeps CUDA's stream
semantics:

- **Before**: a collective waits for the work queued on the current stream of each
  oxide tensor's device, so it sees every kernel launched before it (NCCL makes its
  stream wait for the current stream the same way).
- **After**: the returned work completes when Gloo has finished; ``work.wait()``
  (which ``async_op=False`` calls at once) blocks the host until then, so kernels
  launched afterwards see the results, and raises Gloo's error. The work's future
  holds the oxide tensors.

Reductions Gloo lacks are composed: ``PREMUL_SUM`` scales the inputs by the factor,
then sums. A group created with the extended API also serves CPU tensors (barrier,
object collectives, CPU all_reduce) with its Gloo backend, registered for ``cpu``.
(``monitored_barrier`` asks the group's default backend, which is oxgloo once
``device_id`` binds the group to an oxide device; a ``"cpu:gloo,oxide:oxgloo"``
subgroup supports it.)
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend as _C10dBackend
from torch._C._distributed_c10d import ProcessGroupGloo

NAME = "oxgloo"

# The methods torch 2.15's Python backend trampoline (PyBackend) dispatches to, by
# name, with the same names and arguments on ProcessGroupGloo.
_COLLECTIVES = (
    "allreduce",
    "allreduce_coalesced",
    "broadcast",
    "reduce",
    "allgather",
    "all_gather_single",
    "allgather_coalesced",
    "all_gather_single_coalesced",
    "gather",
    "scatter",
    "reduce_scatter",
    "reduce_scatter_single",
    "reduce_scatter_single_coalesced",
    "alltoall",
    "all_to_all_single",
    "send",
    "recv",
    "recv_anysource",
    "barrier",
)


# Collectives with a reduceOp among their options.
_REDUCTIONS = frozenset(
    {
        "allreduce",
        "allreduce_coalesced",
        "reduce",
        "reduce_scatter",
        "reduce_scatter_single",
        "reduce_scatter_single_coalesced",
    }
)


def host_view(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over ``t``'s memory (``oxide::_host_view``)."""
    return torch.ops.oxide._host_view(t)


def sync_current_stream(device: int) -> None:
    torch.oxide._sync_current_stream(device)


def _map(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``obj`` with every tensor replaced by ``fn(tensor)``, through lists and tuples."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, list):
        return [_map(o, fn) for o in obj]
    if isinstance(obj, tuple):
        return tuple([_map(o, fn) for o in obj])
    return obj


def _tensors(obj: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    _map(obj, lambda t: found.append(t) or t)
    return found


class _OxWork(dist.Work):
    """The work of a collective on oxide tensors: Gloo's work, whose future (made
    when first asked for: DDP reads the reduced bucket from it) holds the oxide
    tensors instead of the host views Gloo worked on. ``wait()`` is Gloo's, so it
    raises the collective's error (a peer that died, a timeout)."""

    def __init__(self, backend: ProcessGroupOxGloo, work: dist.Work, views: dict, args: tuple) -> None:
        super().__init__()
        self._backend, self._work, self._views, self._args = backend, work, views, args
        self._future: torch.futures.Future | None = None
        self._waited = False

    def wait(self, timeout: timedelta | None = None) -> bool:
        if timeout is None or timeout == timedelta(0):
            self._work.wait()
        else:
            self._work.wait(timeout)
        self._waited = True
        if self._future is not None:
            self._future.wait()  # its value is there once wait() returns
        return True

    def is_completed(self) -> bool:
        return self._work.is_completed()

    def is_success(self) -> bool:
        return self._work.is_success()

    def get_future(self) -> torch.futures.Future:
        if self._future is None:
            views = self._views
            # Works without a future of their own give their outputs (the first argument).
            self._future = self._backend._future(self._work, _tensors(self._args[0]), self._waited).then(
                lambda f: _map(f.value(), lambda t: views.get(id(t), t))
            )
        return self._future


class ProcessGroupOxGloo(_C10dBackend):
    """A c10d ``Backend`` running Gloo's collectives on oxide (and CPU) tensors."""

    # Read by the trampoline as plain attributes (properties recurse into it).
    supports_splitting = True
    supports_coalescing = False
    _supports_time_estimate = False
    supports_shrinking = False
    supports_reconfigure = False
    supports_window = False

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)
        self._store, self._timeout = store, timeout
        self._gloo = ProcessGroupGloo(store, rank, size, timeout)
        # Waits for the Gloo works that have no future of their own, in issue order.
        self._waiter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="oxgloo-wait")

    def getBackendName(self) -> str:  # noqa: N802  (the C++ virtual's name)
        return NAME

    def shutdown(self) -> None:
        """Called by ``destroy_process_group``. Gloo's ``shutdown`` leaves its worker
        threads running until the ProcessGroupGloo is destroyed, and works still held
        in Python (``work = dist.all_reduce(..., async_op=True)``) keep this backend
        alive: drop Gloo here so its destructor joins them now. A worker left running
        into interpreter finalization releases its last work there and aborts the
        process (the work's tensors need the GIL, which a finalizing interpreter no
        longer hands out)."""
        gloo, self._gloo = self._gloo, None
        self._waiter.shutdown(wait=True)
        if gloo is not None:
            gloo.shutdown()

    @property
    def options(self) -> Any:
        return self._gloo.options

    def _run(self, name: str, args: tuple) -> dist.Work:
        views: dict[int, torch.Tensor] = {}
        devices: set[int] = set()

        def host(t: torch.Tensor) -> torch.Tensor:
            if t.device.type != "oxide":
                return t
            view = host_view(t)
            views[id(view)] = t
            devices.add(t.device.index)
            return view

        host_args = _map(args, host)
        # The collective reads and writes memory that kernels queued before it may still
        # write: wait for each device's current stream first.
        for index in devices:
            sync_current_stream(index)
        if name in _REDUCTIONS:
            host_args = self._compose_unsupported_ops(name, host_args)
        if self._gloo is None:
            raise RuntimeError(f"oxgloo: {name} on a process group that has been shut down")
        work = getattr(self._gloo, name)(*host_args)
        if not views:
            return work
        return _OxWork(self, work, views, host_args)

    def _future(self, work: dist.Work, tensors: list[torch.Tensor], done: bool) -> torch.futures.Future:
        """Gloo's future of ``work``; for the works that have none (reduce_scatter_single
        and others), one completed with ``tensors`` by a thread that waits for the
        work, so that asking for the future does not block."""
        try:
            return work.get_future()
        except RuntimeError:
            pass
        future: torch.futures.Future = torch.futures.Future()
        if done:  # the caller's wait() has returned: the outputs are in memory
            future.set_result(tensors)
            return future

        def wait() -> None:
            try:
                work.wait()
            except Exception as e:  # noqa: BLE001  (handed to the waiter, whatever it is)
                future.set_exception(e)
            else:
                future.set_result(tensors)

        self._waiter.submit(wait)
        return future

    def _compose_unsupported_ops(self, name: str, args: tuple) -> tuple:
        """PREMUL_SUM (Gloo has none): scale the inputs by the factor, then SUM."""
        opts = args[-1]
        op = getattr(opts, "reduceOp", None)
        if op is None or op.op != dist.ReduceOp.RedOpType.PREMUL_SUM:
            return args
        factor = op.factor
        if isinstance(factor, torch.Tensor) and factor.device.type != "cpu":
            factor = factor.cpu()  # the inputs are host views
        scaled = dist.ReduceOptions() if name == "reduce" else type(opts)()
        for attr in ("rootRank", "rootTensor", "timeout", "asyncOp"):
            if hasattr(opts, attr):
                setattr(scaled, attr, getattr(opts, attr))
        scaled.reduceOp = dist.ReduceOp.SUM
        if name in ("allreduce", "allreduce_coalesced", "reduce"):
            # In place, as the reduction itself is.
            for t in _tensors(args[0]):
                t.mul_(factor)
            return (*args[:-1], scaled)
        if name in ("reduce_scatter", "reduce_scatter_single", "reduce_scatter_single_coalesced"):
            # The inputs are the caller's: scale copies.
            inputs = _map(args[1], lambda t: t * factor)
            return (args[0], inputs, scaled)
        raise ValueError(f"ReduceOp.PREMUL_SUM is not supported by {name}")

    def split(self, store: dist.Store, ranks: list[int], opts: Any) -> ProcessGroupOxGloo | None:
        """The backend of a subgroup (``new_group`` / DeviceMesh after ``device_id`` binding)."""
        if self.rank() not in ranks:
            return None
        return ProcessGroupOxGloo(store, ranks.index(self.rank()), len(ranks), self._timeout)


def _forward(name: str) -> Callable[..., dist.Work]:
    def collective(self: ProcessGroupOxGloo, *args: Any) -> dist.Work:
        return self._run(name, args)

    collective.__name__ = name
    collective.__doc__ = f"Gloo's ``{name}`` on host views of the oxide tensors."
    return collective


for _name in _COLLECTIVES:
    setattr(ProcessGroupOxGloo, _name, _forward(_name))


def _create(dist_opts: Any, backend_options: Any) -> ProcessGroupOxGloo:
    backend = ProcessGroupOxGloo(dist_opts.store, dist_opts.group_rank, dist_opts.group_size, dist_opts.timeout)
    # init_process_group() without a backend maps only the accelerator to this backend;
    # serve the group's CPU tensors too, from the same Gloo context.
    # Gloo's own backend: CPU tensors go to it directly.
    pg = dist_opts.process_group
    if pg is not None and not _has_backend(pg, "cpu"):
        pg._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, backend._gloo)
    return backend


def _has_backend(pg: dist.ProcessGroup, device: str) -> bool:
    try:
        pg._get_backend(torch.device(device))
    except RuntimeError:
        return False
    return True


def _work_is_completed_follows_its_future() -> None:
    """Makes ``Work.is_completed()`` true once the work's future is done.

    c10d hands the caller of a Python backend's collective a ``PyWorkHolder`` around
    the returned work (``torch/csrc/distributed/c10d/PyProcessGroup.hpp`` in 2.15):
    it forwards ``wait()`` and ``get_future()`` only, so its ``is_completed()`` is the
    base class's flag, never set, and a loop polling ``work.is_completed()`` after
    ``all_reduce(..., async_op=True)`` on oxide tensors would spin forever (as it
    would for any Python backend). ``is_completed`` falls back to the future where the
    flag says no; works of C++ backends set the flag themselves, and their future is
    done no earlier."""
    original = dist.Work.is_completed
    if getattr(original, "_follows_future", False):
        return

    def is_completed(self: dist.Work) -> bool:
        if original(self):
            return True
        try:
            future = self.get_future()
        except RuntimeError:  # a work without a future: the flag is all there is
            return False
        return future.done()

    is_completed._follows_future = True  # type: ignore[attr-defined]
    is_completed.__doc__ = original.__doc__
    dist.Work.is_completed = is_completed


def _work_is_success_follows_its_future() -> None:
    """Makes ``Work.is_success()`` false once the work's future holds an error.

    The same ``PyWorkHolder`` (see above) answers ``is_success()`` from its own
    exception slot, which nothing fills: a collective whose peer died raised from
    ``wait()`` and still reported success. ``is_success`` now also asks the future
    where it is done: an error there is a failure, as Gloo's own works report it."""
    original = dist.Work.is_success
    if getattr(original, "_follows_future", False):
        return

    def is_success(self: dist.Work) -> bool:
        if not original(self):
            return False
        try:
            future = self.get_future()
        except RuntimeError:  # a work without a future: the flag is all there is
            return True
        if not future.done():
            return True
        try:
            future.value()
        except Exception:  # noqa: BLE001  (any error the collective ended with)
            return False
        return True

    is_success._follows_future = True  # type: ignore[attr-defined]
    is_success.__doc__ = original.__doc__
    dist.Work.is_success = is_success


def register() -> None:
    """Registers ``oxgloo`` for ``cpu`` and ``oxide`` (done when torch_oxide loads)."""
    if not dist.is_available() or NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(NAME, _create, extended_api=True, devices=["cpu", "oxide"])
    _work_is_completed_follows_its_future()
    _work_is_success_follows_its_future()
