"""oxide tensors and storages sent to other processes through ``torch.multiprocessing``.

``torch.multiprocessing`` registers reducers with ``ForkingPickler``: CPU storages move
to shared memory, CUDA ones travel as IPC handles. torch 2.15 has no hook for another
device, so this module wraps torch's storage reducers (as ``torch_npu`` does) and sends
an oxide storage the way CUDA sends its own (see ``oxide_runtime::ipc``):

- **Sender.** The device's queued work is waited for (the receiver reads the bytes
  as they are now), the storage is named by its device's memory file and an offset
  in it, and the file travels as a duplicated descriptor (``multiprocessing``'s
  ``DupFd``: the spawn/forkserver start arguments or its resource sharer). The sender
  keeps the storage (``_SENT``) with a count in its shared counter file: one per send.
- **Receiver.** The same range of the file is mapped into the receiver's device
  range (``_C._ipc_open``), and the storage is made from a DLPack capsule, so
  PyTorch owns the mapping: when the storage dies, the mapping goes and the sender's
  count drops by one. A storage received again while the first copy lives is the
  same storage (torch's ``shared_cache``), as for CUDA.
- **Release.** The sender drops a storage whose count is back at zero at its next
  send, or at ``torch.oxide.ipc_collect()`` / ``empty_cache()``.

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

# Storages sent to other processes, by data pointer: (storage, counter slot). Kept
# alive until every receiver has released them (the slot's count is zero).
_SENT: dict[int, tuple[torch.UntypedStorage, int]] = {}
_LOCK = threading.Lock()


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
    """Drops the sent storages every receiver has released; returns how many."""
    from . import _C

    if not _C.is_initialized():
        return 0
    with _LOCK:
        done = [ptr for ptr, (_, slot) in _SENT.items() if _C._ipc_count(slot) <= 0]
        for ptr in done:
            _, slot = _SENT.pop(ptr)
            _C._ipc_release(slot)
    return len(done)


def _reduce_oxide_storage(storage: torch.UntypedStorage):
    from multiprocessing.reduction import DupFd

    from . import _C

    index = storage.device.index or 0
    nbytes = storage.nbytes()
    if nbytes == 0:
        return (_rebuild_empty_storage, (index,))
    ptr = storage.data_ptr()
    if _C._ipc_is_imported(ptr):
        raise _resend_error(storage)
    # The receiver reads the memory as it is now: the work queued on the device
    # (which may still write it, on any stream) runs first, as CUDA's sender records
    # an event the receiver waits on.
    torch.oxide.synchronize(index)
    device, fd, offset = _C._ipc_export(ptr)
    token, counts_fd = _C._ipc_counts()
    ipc_collect()
    with _LOCK:
        entry = _SENT.get(ptr)
        if entry is None:
            slot = _C._ipc_acquire()
            _SENT[ptr] = (storage, slot)
        else:
            slot = entry[1]
        _C._ipc_add(slot, 1)
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


_EXIT_HOOK: list = []


class _ExitHookOwner:
    """Key of the after-fork registration (``multiprocessing.util`` keeps it weakly)."""


_EXIT_HOOK_OWNER = _ExitHookOwner()


def _release_at_process_exit() -> None:
    """Gives the senders' counts back when this process ends, for storages still
    alive then: a ``multiprocessing`` child ends with ``os._exit`` under forkserver
    (no ``atexit``), but runs ``multiprocessing.util``'s finalizers first. (The
    runtime does the same from ``atexit`` for other processes.) A child's bootstrap
    clears the finalizers after unpickling its Process arguments, and then runs the
    after-fork hooks: the hook registers the finalizer again."""
    if _EXIT_HOOK:
        return
    import multiprocessing.util

    _register_exit_finalizer()
    multiprocessing.util.register_after_fork(_EXIT_HOOK_OWNER, lambda _owner: _register_exit_finalizer())


def _register_exit_finalizer() -> None:
    import multiprocessing.util

    from . import _C

    _EXIT_HOOK[:] = [multiprocessing.util.Finalize(None, _C._ipc_release_all_opened, exitpriority=0)]


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


def find_received(obj: Any) -> Any:
    """The first oxide tensor or storage received from another process in ``obj`` and
    its nested lists, tuples, dicts and sets (bounded walk), or None."""
    budget = [_MAX_ITEMS]

    def walk(o: Any, depth: int):
        budget[0] -= 1
        if budget[0] < 0:
            return None
        if _oxide_device(o) is not None:
            return o if _is_received(o) else None
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
    found = find_received(obj)
    if found is not None:
        raise _resend_error(found)


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
