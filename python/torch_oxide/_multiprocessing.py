"""Refuses to send oxide tensors and storages to other processes, until sharing exists.

``torch.multiprocessing`` registers reducers with ``ForkingPickler`` that move CPU
storages to shared memory and send CUDA ones as IPC handles. oxide device memory
lives in this process's private address range and has no IPC handle, so an oxide
tensor cannot be shared. Left alone, torch's reducer fails inside
``multiprocessing.Queue``'s feeder thread: ``put`` returns normally, the error only
reaches stderr, and the receiver waits forever.

This module:
- wraps torch's tensor and storage reducers so that pickling an oxide tensor or
  storage for another process raises a RuntimeError saying so (Pipe, SimpleQueue,
  Pool arguments and ``ForkingPickler.dumps`` pickle in the caller, so the caller
  gets it at once);
- makes ``multiprocessing.Queue.put`` (and ``JoinableQueue.put``) look for oxide
  tensors in the object, through lists, tuples, dicts and sets, and raise the same
  error in the caller before the object is queued;
- for an oxide tensor that check does not find (inside another object), the
  feeder thread sends a placeholder whose unpickling raises the error in the
  receiver, so ``get`` fails with the message instead of blocking forever.

``torch.save`` uses its own pickler (storages become persistent ids), not these
reducers, so saving oxide tensors is unaffected.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

_MESSAGE = (
    "oxide tensors cannot be shared between processes yet: got {what} on {device}. "
    "Move it to the CPU first (for example tensor.cpu()) and back to oxide in the receiving process."
)

# How much of a queued object Queue.put inspects: containers nested this deep and
# this many elements in all. Larger objects are left to the feeder-thread placeholder.
_MAX_DEPTH = 8
_MAX_ITEMS = 10_000


def _oxide_device(obj: Any):
    """The device of an oxide tensor or storage, else None."""
    if isinstance(obj, (torch.Tensor, torch.UntypedStorage, torch.TypedStorage)):
        try:
            device = obj.device
        except Exception:  # noqa: BLE001  a tensor subclass without a device: not ours
            return None
        if device.type == "oxide":
            return device
    return None


def _error(obj: Any, device) -> RuntimeError:
    what = "a tensor" if isinstance(obj, torch.Tensor) else "a storage"
    return RuntimeError(_MESSAGE.format(what=what, device=device))


def _raise_unshareable(message: str):
    """Unpickling target of the feeder-thread placeholder: fails in the receiver."""
    raise RuntimeError(message)


def _guard(reduce: Callable) -> Callable:
    def reduce_unless_oxide(obj):
        device = _oxide_device(obj)
        if device is None:
            return reduce(obj)
        err = _error(obj, device)
        if threading.current_thread().name == "QueueFeederThread":
            # Raising here only prints to stderr and the receiver would block forever;
            # send something that raises the same error where it is received.
            return (_raise_unshareable, (str(err),))
        raise err

    reduce_unless_oxide.__wrapped__ = reduce  # type: ignore[attr-defined]
    reduce_unless_oxide.__name__ = f"{reduce.__name__}_unless_oxide"
    return reduce_unless_oxide


def find_oxide(obj: Any) -> Any:
    """The first oxide tensor or storage in ``obj`` and its nested lists, tuples, dicts
    and sets (bounded walk), or None."""
    budget = [_MAX_ITEMS]

    def walk(o: Any, depth: int):
        budget[0] -= 1
        if budget[0] < 0:
            return None
        if _oxide_device(o) is not None:
            return o
        if depth >= _MAX_DEPTH:
            return None
        if isinstance(o, dict):
            items = [*o.keys(), *o.values()]
        elif isinstance(o, (list, tuple, set, frozenset)):
            items = o
        else:
            return None
        for item in items:
            found = walk(item, depth + 1)
            if found is not None:
                return found
            if budget[0] < 0:
                return None
        return None

    return walk(obj, 0)


def _check_put(obj: Any) -> None:
    # No oxide tensor can exist before the runtime starts: processes that never use
    # oxide pay one call here.
    from . import _C

    if not _C.is_initialized():
        return
    found = find_oxide(obj)
    if found is not None:
        raise _error(found, _oxide_device(found))


def _guard_put(put: Callable) -> Callable:
    def put_unless_oxide(self, obj, *args, **kwargs):
        _check_put(obj)
        return put(self, obj, *args, **kwargs)

    put_unless_oxide.__wrapped__ = put  # type: ignore[attr-defined]
    put_unless_oxide.__name__ = put.__name__
    put_unless_oxide.__doc__ = put.__doc__
    return put_unless_oxide


def install() -> None:
    """Wraps torch's multiprocessing reducers and the queues' ``put`` (idempotent)."""
    import multiprocessing.queues
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing.reductions as reductions

    torch_reducers = {
        getattr(reductions, name)
        for name in ("reduce_tensor", "reduce_storage", "reduce_typed_storage", "reduce_typed_storage_child")
        if hasattr(reductions, name)
    }
    for cls, reduce in list(ForkingPickler._extra_reducers.items()):
        if reduce in torch_reducers:
            ForkingPickler.register(cls, _guard(reduce))
    for queue_cls in (multiprocessing.queues.Queue, multiprocessing.queues.JoinableQueue):
        put = queue_cls.__dict__.get("put")
        if put is not None and not hasattr(put, "__wrapped__"):
            queue_cls.put = _guard_put(put)
