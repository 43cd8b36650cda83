"""``torch.oxide``: the device module of the oxide backend, shaped like ``torch.cuda``.

Devices are numbered ``0..device_count()-1`` (``OXIDE_DEVICE_COUNT``, default 2);
each has ``OXIDE_DEVICE_MEMORY`` bytes of memory (default 4 GiB). The runtime starts
lazily on first use. A process forked after that cannot use oxide (use the ``spawn``
start method), as with CUDA.

Memory functions take ``device`` as an int, ``"oxide:N"``, a ``torch.device`` or
None (current device) and report bytes. Invalid devices raise ``RuntimeError``
(bad index) or ``ValueError`` (not an oxide device).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import torch

from .. import _C

__all__ = [
    "is_available",
    "is_initialized",
    "init",
    "device_count",
    "current_device",
    "set_device",
    "device",
    "synchronize",
    "get_device_name",
    "get_device_properties",
    "get_device_capability",
    "is_bf16_supported",
    "get_cpu_capability",
    "fallback_stats",
    "reset_fallback_stats",
    "get_fallback_mode",
    "set_fallback_mode",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "initial_seed",
    "get_rng_state",
    "get_rng_state_all",
    "set_rng_state",
    "set_rng_state_all",
    "get_amp_supported_dtype",
    "is_autocast_enabled",
    "set_autocast_enabled",
    "get_autocast_dtype",
    "set_autocast_dtype",
]

_DeviceLike = int | str | torch.device | None


def _check_fallback_env() -> None:
    value = os.environ.get("OXIDE_FALLBACK")
    if value is not None and value.strip().lower() not in ("silent", "warn", "error"):
        raise ValueError(f"OXIDE_FALLBACK={value!r} is invalid: expected 'silent', 'warn' or 'error'")


_check_fallback_env()


def _is_in_bad_fork() -> bool:
    """True in a child forked after the parent started the runtime (used by torch.manual_seed)."""
    return _C.is_in_bad_fork()


def _lazy_init() -> None:
    if _C.is_in_bad_fork():
        raise RuntimeError(
            "Cannot re-initialize oxide in a forked subprocess. To use oxide with "
            "multiprocessing, use the 'spawn' start method."
        )
    _C.init()


def init() -> None:
    """Start the oxide runtime now instead of on first use.

    Raises RuntimeError in a forked child, ValueError for a bad OXIDE_* setting.
    """
    _lazy_init()


def is_initialized() -> bool:
    """True once the runtime has started in this process."""
    return _C.is_initialized() and not _C.is_in_bad_fork()


def is_available() -> bool:
    """True when at least one oxide device exists (the runtime can start)."""
    return _C.device_count() > 0


def device_count() -> int:
    """Number of oxide devices (0 if the runtime cannot start)."""
    return _C.device_count()


def _device_index(dev: _DeviceLike, optional: bool = True) -> int:
    if dev is None:
        if not optional:
            raise ValueError("an oxide device is required")
        return current_device()
    if isinstance(dev, int) and not isinstance(dev, bool):
        return dev
    if isinstance(dev, str):
        dev = torch.device(dev)
    if isinstance(dev, torch.device):
        if dev.type != "oxide":
            raise ValueError(f"expected an oxide device, got {dev}")
        return current_device() if dev.index is None else dev.index
    raise TypeError(f"expected an int, str or torch.device, got {type(dev).__name__}")


def current_device() -> int:
    """Index of the calling thread's current oxide device."""
    _lazy_init()
    return _C.current_device()


def set_device(device: _DeviceLike) -> None:
    """Set the calling thread's current oxide device. Raises RuntimeError for a bad index."""
    _lazy_init()
    _C.set_device(_device_index(device))


class device:
    """Context manager that makes ``device`` current and restores the previous one on exit.

    ``device(None)`` and ``device(-1)`` change nothing, as with ``torch.cuda.device``.
    """

    def __init__(self, device: _DeviceLike):
        self.idx = -1 if device is None else _device_index(device)
        self.prev_idx = -1

    def __enter__(self):
        if self.idx != -1:
            self.prev_idx = current_device()
            if self.prev_idx != self.idx:
                set_device(self.idx)
        return self

    def __exit__(self, *exc: Any) -> bool:
        if self.idx != -1 and self.prev_idx != self.idx:
            set_device(self.prev_idx)
        return False


def synchronize(device: _DeviceLike = None) -> None:
    """Wait until all work on every stream of ``device`` has finished."""
    _lazy_init()
    _C.synchronize(_device_index(device))


def _sync_current_stream(device: int) -> None:
    """Wait for the work queued on the current stream of ``oxide:device`` (compiled graphs call it)."""
    _C._sync_current_stream(device)


_KERNEL_ADDRESSES: dict = {}
# Most arguments a C++ kernel launched as a record may take (abi::host_kernel::MAX_HOST_KERNEL_ARGS).
_MAX_HOST_KERNEL_ARGS = 64


def _kernel_address(kernel) -> int:
    """The address of the C function behind a compiled graph's kernel binding (0 if none is found).

    Inductor loads each C++ kernel as an extension module whose ``kernel`` binding
    parses Python arguments and calls the exported C function ``kernel``.
    """
    address = _KERNEL_ADDRESSES.get(kernel)
    if address is None:
        address = 0
        path = getattr(getattr(kernel, "__self__", None), "__file__", None)
        if path:
            import ctypes

            try:
                address = ctypes.cast(ctypes.CDLL(path).kernel, ctypes.c_void_p).value or 0
            except (OSError, AttributeError):
                address = 0
        _KERNEL_ADDRESSES[kernel] = address
    return address


def _launch_cpp_kernel(kernel, device: int, pointers: int, *args) -> None:
    """Queues a compiled graph's C++ kernel on the current stream of ``oxide:device``.

    The generated wrapper calls this for kernels whose parameters are all pointers or
    64-bit integers; bit ``k`` of ``pointers`` marks argument ``k`` as a tensor. The
    stream worker runs the kernel in stream order, so the host does not wait for the
    launches before it (see ``crates/torch-oxide-ext/src/abi/host_kernel.rs``). A
    kernel whose C function is not found, or one given a CPU tensor, is called on the
    host thread after the stream's queued work, as before.
    """
    address = _kernel_address(kernel)
    if not address or any(a.is_cpu for a in args if isinstance(a, torch.Tensor)):
        _C._sync_current_stream(device)
        kernel(*args)
        return
    _C._launch_host_kernel(
        device,
        address,
        pointers,
        [a.data_ptr() if isinstance(a, torch.Tensor) else int(a) & 0xFFFF_FFFF_FFFF_FFFF for a in args],
    )


def _host_kernel_call(kernel, *args):
    """Calls a compiled graph's C++ kernel with host views of its oxide tensors (under the sanitizer).

    With guarded device memory (``OXIDE_SANITIZE=1``) a device address is not readable
    by host code; a C++ kernel Inductor generated is host code by design, so it gets
    ``oxide::_host_view`` tensors over the same bytes at their host addresses.
    """
    view = torch.ops.oxide._host_view
    return kernel(*(view(a) if isinstance(a, torch.Tensor) and a.device.type == "oxide" else a for a in args))


def _launch_blocking() -> bool:
    """Whether kernels run at the call (``OXIDE_LAUNCH_BLOCKING=1``) instead of on the stream workers."""
    _lazy_init()
    return _C._launch_blocking()


class _LaunchBlocking:
    """Context manager: kernels launched inside run at the call and raise their errors there.

    What ``OXIDE_LAUNCH_BLOCKING=1`` does for a whole process, for a block of code (tests
    that expect a data-dependent kernel error at the launching call use it). Work queued
    before the block still runs on the stream workers; nothing is synchronised on entry.
    """

    def __enter__(self) -> _LaunchBlocking:
        _lazy_init()
        self.prev = _C._launch_blocking()
        _C._set_launch_blocking(True)
        return self

    def __exit__(self, *exc: Any) -> bool:
        _C._set_launch_blocking(self.prev)
        return False


def get_device_name(device: _DeviceLike = None) -> str:
    """Name of the device: the emulated accelerator and its memory size."""
    _lazy_init()
    idx = _device_index(device)
    gib = _C.device_capacity(idx) / 2**30
    return f"oxide:{idx} (Rust runtime on host CPU, {gib:g} GiB)"


# oxide's device generation, what CUDA calls the compute capability: (1, 0) for the
# first. Not comparable with CUDA's numbers; code that gates features on CUDA's
# capability asks torch.cuda, never this.
_CAPABILITY = (1, 0)


@dataclasses.dataclass(frozen=True)
class OxideDeviceProperties:
    """What :func:`get_device_properties` reports, named as ``torch.cuda``'s properties."""

    name: str
    major: int
    minor: int
    total_memory: int
    # Threads a kernel splits its work over: the kernel thread team, at most
    # torch.get_num_threads() (CUDA: streaming multiprocessors).
    multi_processor_count: int
    # Device memory is host memory (CUDA: an integrated GPU sharing the host's memory).
    is_integrated: bool


def get_device_properties(device: _DeviceLike = None) -> OxideDeviceProperties:
    """Properties of ``device``, with ``torch.cuda.get_device_properties``'s field names."""
    _lazy_init()
    idx = _device_index(device)
    return OxideDeviceProperties(
        name=get_device_name(idx),
        major=_CAPABILITY[0],
        minor=_CAPABILITY[1],
        total_memory=_C.device_capacity(idx),
        multi_processor_count=min(_C.kernel_threads(), torch.get_num_threads()),
        is_integrated=True,
    )


def get_device_capability(device: _DeviceLike = None) -> tuple[int, int]:
    """``(major, minor)`` of ``device``'s generation (see ``_CAPABILITY``)."""
    props = get_device_properties(device)
    return props.major, props.minor


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """True: oxide's kernels compute in bfloat16 (accumulating in float32 as CPU PyTorch does)."""
    return is_available()


def get_cpu_capability() -> str:
    """The build of the kernels this process loaded, named as
    ``torch.backends.cpu.get_cpu_capability()`` names PyTorch's: ``"AVX512"``,
    ``"AVX2"`` or ``"DEFAULT"`` (the portable x86-64-v2 build). The best one this CPU
    runs unless ``OXIDE_CPU_CAPABILITY`` chose another (README, "Installing")."""
    return _C._cpu_capability.upper()


def __getattr__(name: str) -> Any:
    # torch.cuda._initialized is a module attribute read by libraries; here it follows the runtime.
    if name == "_initialized":
        return is_initialized()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def fallback_stats() -> dict[str, int]:
    """``{aten operator: calls}`` for operators that ran through the CPU fallback."""
    return dict(_C.fallback_stats())


def reset_fallback_stats() -> None:
    """Forget the fallback counts (and warn again on the next fallback of each operator)."""
    _C.reset_fallback_stats()


def get_fallback_mode() -> str:
    """``"warn"`` (default: warn once per operator), ``"silent"`` or ``"error"`` (``OXIDE_FALLBACK``)."""
    return _C.get_fallback_mode()


def set_fallback_mode(mode: str) -> None:
    """Set the fallback mode for this process. Raises ValueError for an unknown mode."""
    _C.set_fallback_mode(mode)


# The autocast hooks the PrivateUse1 tutorial asks of a device module; torch.autocast("oxide") checks for them.


def get_amp_supported_dtype() -> list[torch.dtype]:
    """Lower-precision dtypes torch.autocast("oxide") accepts."""
    return [torch.float16, torch.bfloat16]


def is_autocast_enabled() -> bool:
    """True inside an enabled ``torch.autocast("oxide")`` region."""
    return torch.is_autocast_enabled("oxide")


def set_autocast_enabled(enabled: bool) -> None:
    """Enable or disable oxide autocast for the calling thread."""
    torch.set_autocast_enabled("oxide", enabled)


def get_autocast_dtype() -> torch.dtype:
    """The dtype oxide autocast casts to (default torch.float16)."""
    return torch.get_autocast_dtype("oxide")


def set_autocast_dtype(dtype: torch.dtype) -> None:
    """Set the dtype oxide autocast casts to; one of :func:`get_amp_supported_dtype`."""
    torch.set_autocast_dtype("oxide", dtype)


from . import memory, streams  # noqa: E402
from .memory import *  # noqa: E402, F403  (the names of memory.__all__)
from .random import (  # noqa: E402  (needs the helpers above)
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .streams import *  # noqa: E402, F403  (the names of streams.__all__)

# The memory and stream functions are listed once, in their modules' __all__.
__all__ += memory.__all__
__all__ += streams.__all__

# torch.cuda keeps these three in torch.cuda.memory only; torch.oxide has them at both places.
_record_memory_history = memory._record_memory_history
_snapshot = memory._snapshot
_dump_snapshot = memory._dump_snapshot
