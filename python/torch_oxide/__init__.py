"""torch-oxide: the ``oxide`` PyTorch device, a PrivateUse1 backend with a Rust runtime.

Importing this package (or just ``import torch``, through the ``torch.backends``
entry point) renames PrivateUse1 to ``oxide``, registers the device module as
``torch.oxide`` and adds the ``Tensor.oxide()`` / ``Module.oxide()`` /
``Storage.oxide()`` / ``PackedSequence.oxide()`` family of methods.
"""


def _autoload() -> None:
    """Entry point of the ``torch.backends`` group: importing this package did the work.

    Defined before ``import torch``: when a program imports ``torch_oxide`` first,
    torch's own autoload looks this function up on the partially imported package.
    """


import atexit  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

if os.environ.get("OXIDE_SANITIZE") == "1":
    # The sanitizer's host-access detector reports a dereferenced device pointer
    # from a SIGSEGV handler, then hands the fault on: faulthandler, enabled before
    # the runtime installs that handler, then prints the Python stack of the access.
    import faulthandler  # noqa: E402

    if not faulthandler.is_enabled():
        faulthandler.enable()

import torch  # noqa: E402  first: the extension resolves c10 and torch_cpu from the loaded torch

from . import _capability  # noqa: E402

# One build of the extension per CPU capability; the best this CPU runs (see _capability).
_C = _capability.load(__name__, os.path.dirname(os.path.abspath(__file__)))

from . import oxide  # noqa: E402

__version__ = _C.__version__
__all__ = ["oxide", "__version__"]

_BACKEND = "oxide"


def _register() -> None:
    if torch._C._get_privateuse1_backend_name() != _BACKEND:
        torch.utils.rename_privateuse1_backend(_BACKEND)
    torch._register_device_module(_BACKEND, oxide)
    if not hasattr(torch.Tensor, _BACKEND):
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
        )


if not hasattr(torch, _BACKEND):
    _register()


def _share_between_processes() -> None:
    """oxide tensors sent through ``torch.multiprocessing`` share their device memory
    with the receiver (see ``_multiprocessing``)."""
    from . import _multiprocessing

    _multiprocessing.install()


_share_between_processes()


def _backward_on_the_calling_thread() -> None:
    """Turns off the autograd engine's device threads for the importing thread.

    By default PyTorch runs the backward pass of non-CPU tensors on one engine thread
    per device (``pt_autograd_N``), so that a CUDA host thread can queue kernels while
    the caller's CPU work goes on. oxide's kernels run on the host cores, so the hand-off
    buys no overlap and costs two thread wake-ups per backward, plus the engine thread's
    release of the finished graph under the GIL while the caller runs on. Measured on
    the 2-core CI machine: a one-element ``(x * 2).sum().backward()`` took 200-250 us
    on the engine thread and 35 us on the caller (CPU tensors: 33 us), and the next
    forward 22-33 us against 10. Turning the engine's multithreading off
    (``torch.autograd.set_multithreading_enabled(False)``) makes the caller run every
    node itself, as it already does for CPU tensors. The setting is thread-local
    (``torch.autograd.is_multithreading_enabled()`` reads it), so it covers the thread
    that imported torch; other threads keep PyTorch's default, as does every thread
    when ``OXIDE_AUTOGRAD_DEVICE_THREAD=1``.
    """
    if os.environ.get("OXIDE_AUTOGRAD_DEVICE_THREAD", "0") != "1":
        torch.autograd.set_multithreading_enabled(False)


_backward_on_the_calling_thread()


def _compile_support() -> None:
    """``torch.compile`` on oxide (see ``_inductor``): lazy hooks, no Dynamo import here."""
    from . import _inductor

    oxide._inductor_backend_init = _inductor.register
    _inductor._install_import_hook()


_compile_support()


def _distributed_support() -> None:
    """The c10d backend ``oxgloo`` (see ``distributed``), registered for cpu and oxide."""
    if torch.distributed.is_available():
        from . import distributed

        distributed.register()


_distributed_support()


# Tensors of the exit drain's graph, kept alive here so that the autograd thread never
# holds the last reference to anything Python owns.
_DRAIN_GRAPH: list = []


def _autograd_threads_started() -> bool:
    """Whether the autograd engine has started its device threads (named ``pt_autograd_N``)."""
    try:
        tasks = os.listdir("/proc/self/task")
        return any(_thread_name(t).startswith("pt_autograd") for t in tasks)
    except OSError:  # no procfs: cannot tell, so assume they have
        return True


def _thread_name(tid: str) -> str:
    try:
        with open(f"/proc/self/task/{tid}/comm") as f:
            return f.read()
    except OSError:  # the thread ended meanwhile
        return ""


def _drain_autograd_device_thread() -> None:
    """Runs at interpreter exit: lets the autograd engine's oxide thread finish its last graph.

    The engine runs a backward pass of oxide tensors on its own thread, which marks the
    graph task complete (waking the caller) and only then drops the task. That drop
    needs the GIL (the task holds Python tensors and thread-local Python state); if the
    main thread has meanwhile reached interpreter finalization, the thread is torn
    down inside a noexcept frame and the process aborts ("terminate called without an
    active exception"). A backward queued on the same thread runs only after the
    previous drop; its own drop follows its completion by microseconds, covered by a
    short sleep with the GIL released. Processes that never ran an oxide backward
    (no ``pt_autograd`` thread) skip all of it.
    """
    if not _autograd_threads_started():
        return
    try:
        x = torch.zeros((), device=_BACKEND, requires_grad=True)
        y = x * 2.0
        _DRAIN_GRAPH.extend((x, y))
        # Through the engine thread, behind whatever it still holds: this thread's default
        # (see _backward_on_the_calling_thread) would run the drain's backward here.
        with torch.autograd.set_multithreading_enabled(True):
            y.backward()
    except Exception:  # noqa: BLE001  exit must not fail because the drain could not run
        pass
    time.sleep(0.02)


atexit.register(_drain_autograd_device_thread)


def __getattr__(name: str):
    # `torch_oxide.coverage` on first use: importing it eagerly would make
    # `python -m torch_oxide.coverage` warn that the module was already imported.
    if name == "coverage":
        import importlib

        return importlib.import_module(".coverage", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
