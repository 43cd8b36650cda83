"""oxide tensors and storages sent to other processes through ``torch.multiprocessing``.

``torch.multiprocessing`` registers reducers with ``ForkingPickler``: CPU storages move
to shared memory, CUDA ones travel as IPC handles. torch 2.15 has no hook for another
device, so this module wraps torch's storage reducers (as ``torch_npu`` does) and sends
an oxide storage the way CUDA sends its own (see ``oxide_runtime::ipc``):

- **Sender.** The work queued on the streams that use the storage's block is
  waited for (the receiver reads the bytes as they are now; only those streams, so
  a graph capture on another stream goes on), the storage is named by its device's
  memory file and an offset in it, and the file travels as a duplicated descriptor
  (``multiprocessing``'s ``DupFd``: the spawn/forkserver start arguments or its
  resource sharer). The runtime counts the send in a shared counter file.
- **Receiver.** The same range of the file is mapped into the receiver's device
  range (``_C._ipc_open``), and the storage is made from a DLPack capsule, so
  PyTorch owns the mapping: when the storage dies, the mapping goes and the sender's
  count drops by one. A storage received again while the first copy lives is the
  same storage (torch's ``shared_cache``), as for CUDA.
- **Release.** A sent block that its tensors free (the storage deleted, or
  resized) while a receiver may still use it is kept aside, not reused, as CUDA's
  sent-data limbo; the sender frees it once the count is back at zero, at its next
  send or at ``torch.oxide.ipc_collect()`` / ``empty_cache()``.

Tensors need nothing of their own: torch's ``reduce_tensor`` sends a storage and
the view's offset, sizes and strides. A storage received from another process
cannot be sent on (CUDA refuses it too); that error is raised in the sender. Errors
raised in ``multiprocessing.Queue``'s feeder thread only reach stderr there, and the
receiver would wait forever; so ``Queue.put`` checks the object first, and an error
the check misses travels as a placeholder that raises where it is received.

``torch.save`` uses its own pickler (storages become persistent ids), not these
reducers, so saving oxide tensors is unaffected.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import torch

_RESEND_MESSAGE = (
    "an oxide {what} whose memory was received from another process cannot be sent to "
    "another process (as with CUDA tensors): its sender owns that memory. Send a clone "
    "instead (tensor.clone())."
)

# How much of a queued object Queue.put inspects: containers nested this deep and
# this many elements in all. Larger objects are left to the feeder-thread placeholder.
_MAX_DEPTH = 8
_MAX_ITEMS = 10_000


def _oxide_device(obj: Any):
    """The device of an oxide tensor or storage, else None."""
    if isinstance(obj, torch.TypedStorage):
        obj = obj._untyped_storage  # (its .device warns that TypedStorage is deprecated)
    if isinstance(obj, (torch.Tensor, torch.UntypedStorage)):
        try:
            device = obj.device
        except Exception:  # noqa: BLE001  a tensor subclass without a device: not ours
            return None
        if device.type == "oxide":
            return device
    return None


def _is_received(obj: Any) -> bool:
    """True for an oxide tensor or storage whose memory came from another process."""
    from . import _C

    storage = obj.untyped_storage() if isinstance(obj, torch.Tensor) else obj
    if isinstance(storage, torch.TypedStorage):
        storage = storage._untyped_storage
    return storage.nbytes() > 0 and _C._ipc_is_imported(storage.data_ptr())


def _resend_error(obj: Any) -> RuntimeError:
    what = "tensor" if isinstance(obj, torch.Tensor) else "storage (or a tensor on it)"
    return RuntimeError(_RESEND_MESSAGE.format(what=what))


def _raise_unshareable(message: str):
    """Unpickling target of the feeder-thread placeholder: fails in the receiver."""
    raise RuntimeError(message)


def ipc_collect() -> int:
    """Releases the sent blocks every receiver has released (freeing those their
    tensors freed meanwhile); returns how many."""
    from . import _C

    if not _C.is_initialized():
        return 0
    return _C._ipc_collect()


def sent_count() -> int:
    """Blocks sent to other processes that some receiver may still use."""
    from . import _C

    return _C._ipc_sent_count() if _C.is_initialized() else 0


def _reduce_oxide_storage(storage: torch.UntypedStorage):
    from multiprocessing.reduction import DupFd

    from . import _C

    index = storage.device.index or 0
    nbytes = storage.nbytes()
    if nbytes == 0:
        return (_rebuild_empty_storage, (index,))
    ipc_collect()
    # Waits for the streams that use the block (the receiver reads the memory as it
    # is now: CUDA's sender records an event the receiver waits on) and counts the
    # send; refuses memory this process received (it is the sender's to share).
    device, fd, offset, slot = _C._ipc_send(storage.data_ptr())
    token, counts_fd = _C._ipc_counts()
    return (_rebuild_storage, (device, DupFd(fd), offset, nbytes, token, DupFd(counts_fd), slot))


def _rebuild_empty_storage(index: int) -> torch.UntypedStorage:
    return torch.UntypedStorage(0, device=torch.device("oxide", index))


def _rebuild_storage(device, memory_fd, offset, nbytes, token, counts_fd, slot) -> torch.UntypedStorage:
    from torch.multiprocessing.reductions import StorageWeakRef, shared_cache, storage_from_cache
    from torch.utils.dlpack import from_dlpack

    from . import _C

    fd, cfd = memory_fd.detach(), counts_fd.detach()
    try:
        key = ("oxide", token, device, offset, nbytes)
        cached = storage_from_cache(torch.UntypedStorage, key)
        if cached is not None:
            # One mapping per storage: this receive's count is not needed.
            _C._ipc_release_send(token, cfd, slot)
            return cached
        capsule = _C._ipc_open(device, fd, offset, nbytes, token, cfd, slot)
    finally:
        os.close(fd)
        os.close(cfd)
    storage = from_dlpack(capsule).untyped_storage()
    shared_cache[key] = StorageWeakRef(storage)
    _release_at_process_exit()
    return storage


# Functions run when a multiprocessing child ends, and their current finalizers.
_EXIT_CALLS: list[Callable[[], Any]] = []
_FINALIZERS: list = []


class _ExitHookOwner:
    """Key of the after-fork registration (``multiprocessing.util`` keeps it weakly)."""


_EXIT_HOOK_OWNER = _ExitHookOwner()


def at_process_exit(fn: Callable[[], Any]) -> None:
    """Runs ``fn`` when this process ends normally, ``multiprocessing`` children
    included: under forkserver (and for Pool workers) a child leaves with
    ``os._exit``, so ``atexit`` never runs, but ``multiprocessing.util``'s
    finalizers do. A child's bootstrap clears the finalizers after unpickling its
    Process arguments and then runs the after-fork hooks, which register them again."""
    if fn not in _EXIT_CALLS:
        _EXIT_CALLS.append(fn)
        _register_finalizers()


def _register_finalizers() -> None:
    import multiprocessing.util

    _FINALIZERS[:] = [multiprocessing.util.Finalize(None, fn, exitpriority=0) for fn in _EXIT_CALLS]


def _release_at_process_exit() -> None:
    """Gives the senders' counts back when this process ends, for storages still
    alive then (the runtime also does it from ``atexit``)."""
    from . import _C

    at_process_exit(_C._ipc_release_all_opened)


def _share(reduce: Callable) -> Callable:
    def reduce_oxide_storage_or(obj):
        if _oxide_device(obj) is None or isinstance(obj, torch.TypedStorage):
            return reduce(obj)  # torch sends a typed storage as its untyped storage
        try:
            return _reduce_oxide_storage(obj)
        except RuntimeError as err:
            if threading.current_thread().name == "QueueFeederThread":
                # Raising here only prints to stderr and the receiver would block forever;
                # send something that raises the same error where it is received.
                return (_raise_unshareable, (str(err),))
            raise

    reduce_oxide_storage_or.__wrapped__ = reduce  # type: ignore[attr-defined]
    reduce_oxide_storage_or.__name__ = f"{reduce.__name__}_or_oxide"
    return reduce_oxide_storage_or


def _unsendable(o: Any) -> RuntimeError | None:
    """The error pickling the oxide tensor or storage ``o`` for another process raises, if any."""
    if _is_received(o):
        return _resend_error(o)
    if isinstance(o, torch.Tensor) and o.requires_grad and not o.is_leaf:
        # torch's reduce_tensor refuses it too, but only in the feeder thread.
        return RuntimeError(
            "Cowardly refusing to serialize non-leaf tensor which requires_grad, since autograd does "
            "not support crossing process boundaries. If you just want to transfer the data, call "
            "detach() on the tensor before serializing (e.g., putting it on the queue)."
        )
    return None


def find_unsendable(obj: Any) -> RuntimeError | None:
    """The error of the first oxide tensor or storage in ``obj`` and its nested lists,
    tuples, dicts and sets (bounded walk) that cannot be sent, or None."""
    budget = [_MAX_ITEMS]

    def walk(o: Any, depth: int):
        budget[0] -= 1
        if budget[0] < 0:
            return None
        if _oxide_device(o) is not None:
            return _unsendable(o)
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
    error = find_unsendable(obj)
    if error is not None:
        raise error


def _guard_put(put: Callable) -> Callable:
    def put_checked(self, obj, *args, **kwargs):
        _check_put(obj)
        return put(self, obj, *args, **kwargs)

    put_checked.__wrapped__ = put  # type: ignore[attr-defined]
    put_checked.__name__ = put.__name__
    put_checked.__doc__ = put.__doc__
    return put_checked


def install() -> None:
    """Wraps torch's multiprocessing storage reducers and the queues' ``put`` (idempotent)."""
    import multiprocessing.queues
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing.reductions as reductions

    torch_reducers = {
        getattr(reductions, name)
        for name in ("reduce_storage", "reduce_typed_storage", "reduce_typed_storage_child")
        if hasattr(reductions, name)
    }
    for cls, reduce in list(ForkingPickler._extra_reducers.items()):
        if reduce in torch_reducers:
            ForkingPickler.register(cls, _share(reduce))
    for queue_cls in (multiprocessing.queues.Queue, multiprocessing.queues.JoinableQueue):
        put = queue_cls.__dict__.get("put")
        if put is not None and not hasattr(put, "__wrapped__"):
            queue_cls.put = _guard_put(put)
    import multiprocessing.util

    from . import _C

    multiprocessing.util.register_after_fork(_EXIT_HOOK_OWNER, lambda _owner: _register_finalizers())
    at_process_exit(_C._remove_published)
