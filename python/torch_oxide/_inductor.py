"""``torch.compile`` on oxide: a Dynamo device interface and an Inductor backend.

oxide memory is host memory (one ``mmap`` range per device), so the code Inductor
generates for the CPU (C++ loops vectorised with ``at::vec`` and parallelised with OpenMP, by
``CppScheduling``) can run directly on oxide device pointers: a compiled graph fuses
pointwise and reduction chains into C++ kernels and calls oxide's native ATen
kernels (``extern_kernels.mm``, convolution, ...) for the rest. What this module adds
to Inductor's CPU path:

- ``OxideInterface``: Dynamo's ``DeviceInterface`` for ``oxide`` (device, stream
  and event classes, ``synchronize``, ``device_count``, ``get_raw_stream``, device
  properties with ``multi_processor_count`` = the kernel thread count).
- ``OxideWrapperCodegen``: the Python wrapper of a compiled graph. The stock
  wrapper emits non-Triton kernel calls only for ``cpu`` and ``mps`` (others raise
  ``RuntimeError("device ... nyi")``); on oxide a C++ kernel whose parameters are
  all pointers and 64-bit integers becomes a launch record on the current stream
  (``torch.oxide._launch_cpp_kernel``; ``crates/torch-oxide-ext/src/abi/host_kernel.rs``):
  the stream worker calls its C function in stream order, after the launches whose
  outputs it reads and before those that read its own, while the host goes on with
  the graph. Such kernels can be captured in a ``torch.accelerator.Graph``. Any other
  C++ kernel is called on the host thread after the graph waits for its current
  stream (``torch.oxide._sync_current_stream``), as on the CPU.
  Its buffers are allocated on the graph's own ``oxide:N``: the stock wrapper names
  the device type only and relies on a device guard that Inductor emits for
  GPU-class devices alone.
- Inductor's questions "is this the C++ backend?" (``get_current_backend``,
  ``BaseSchedulerNode.is_cpu``) answer yes for oxide (``_treat_as_cpu_backend``).
- ``OxideDeviceOpOverrides``: the lines the wrapper writes to set the device, guard
  it, synchronise and look up the raw stream, in terms of ``torch.oxide``.
- ``OxideCppScheduling``: the C++ kernels of an oxide graph are single-threaded unless
  ``cpp.threads`` is set (``_serial_kernels`` says why, with measurements), and oxide
  graphs skip Inductor's channels-last layout optimisation
  (``_keep_oxide_convolutions_contiguous``).
- Under the sanitizer (``OXIDE_SANITIZE=1``, device addresses unreadable by host code)
  a C++ kernel is called through ``torch.oxide._host_kernel_call``, with host views of
  its oxide tensors, and Inductor's on-disk caches are off.

Registration is lazy: Inductor calls ``torch.oxide._inductor_backend_init`` the
first time it looks for a backend for the PrivateUse1 device (see
``torch._inductor.codegen.common.init_backend_registration``), so ``import
torch_oxide`` does not import Dynamo (about 1.2 s). Dynamo looks the device interface
up on its own, and the registry must be filled before ``torch._inductor.utils`` is
imported (it snapshots it), so ``_register_dynamo`` also runs from an import hook
right after ``torch._dynamo.device_interface`` loads (``_install_import_hook``).

Not supported (found by probing; each raises, none gives wrong numbers):

- ``cpp_wrapper=True`` and AOTInductor: a NotImplementedError says so.
- Stream and event calls inside a compiled function (``torch.accelerator.synchronize``,
  ``Event.record``, ``with stream:``): Inductor's wrapper orders them wrongly against
  the C++ kernels it holds back (``UnboundLocalError`` / ``NameError`` from the
  generated code). Call them outside the compiled function.
- ``torch.oxide.*`` calls under ``fullgraph=True``: Dynamo has no trace rule for
  them (without ``fullgraph`` they break the graph and run eagerly).
- Activation checkpointing around random ops: ``run_and_save_rng_state`` in
  ``torch/_prims/rng_prims.py`` knows a fixed list of device types.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import os
import sys
import threading
from typing import Any

import torch

_BACKEND = "oxide"
_DYNAMO_MODULE = "torch._dynamo.device_interface"
_lock = threading.RLock()
_registered_dynamo = False
_registered_inductor = False
# Under the sanitizer (guarded device memory) a compiled graph hands its C++ kernels
# host views (``torch.oxide._host_kernel_call``), so its code differs from an
# unsanitized run's; Inductor's caches, whose keys do not know the mode, are off.
_SANITIZE = os.environ.get("OXIDE_SANITIZE") == "1"


def get_raw_stream(device_index: int) -> int:
    """The current stream of ``oxide:device_index`` as an integer handle (its stream id).

    The value generated wrapper code passes around as ``stream0``; oxide's C++
    kernels do not take it (see the module docstring).
    """
    return torch.oxide.current_stream(device_index).stream_id


def _register_dynamo() -> None:
    global _registered_dynamo
    with _lock:
        if _registered_dynamo:
            return
        from torch._dynamo import device_interface as di

        if _SANITIZE:
            import torch._functorch.config as functorch_config
            import torch._inductor.config as inductor_config

            inductor_config.fx_graph_cache = False
            inductor_config.fx_graph_remote_cache = False
            functorch_config.enable_autograd_cache = False

        class OxideInterface(di.DeviceInterface):
            """Dynamo's view of the ``oxide`` device: ``torch.oxide`` under Dynamo's names."""

            device = torch.oxide.device
            Event = torch.Event
            Stream = torch.oxide.Stream

            class Worker:
                @staticmethod
                def set_device(device: int) -> None:
                    torch.oxide.set_device(device)

                @staticmethod
                def current_device() -> int:
                    return torch.oxide.current_device()

                @staticmethod
                def get_device_properties(device: Any = None) -> Any:
                    # multi_processor_count: the threads oxide's kernels run on, which
                    # Inductor's heuristics size parallel loops and reductions by.
                    return torch.oxide.get_device_properties(device)

            @staticmethod
            def current_device() -> int:
                return torch.oxide.current_device()

            @staticmethod
            def set_device(device: Any) -> None:
                torch.oxide.set_device(device)

            @staticmethod
            def maybe_exchange_device(device: int) -> int:
                previous = torch.oxide.current_device()
                if device >= 0 and device != previous:
                    torch.oxide.set_device(device)
                return previous

            @staticmethod
            def exchange_device(device: int) -> int:
                previous = torch.oxide.current_device()
                if device != previous:
                    torch.oxide.set_device(device)
                return previous

            @staticmethod
            def device_count() -> int:
                return torch.oxide.device_count()

            @staticmethod
            def is_available() -> bool:
                return torch.oxide.is_available()

            @staticmethod
            def stream(stream: torch.Stream) -> Any:
                return torch.oxide.stream(stream)

            @staticmethod
            def current_stream() -> torch.Stream:
                return torch.oxide.current_stream()

            @staticmethod
            def set_stream(stream: torch.Stream) -> None:
                torch.oxide.set_stream(stream)

            @staticmethod
            def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
                torch.oxide.set_stream(
                    torch.oxide.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)
                )

            @staticmethod
            def get_raw_stream(device_idx: int) -> int:
                return get_raw_stream(device_idx)

            @staticmethod
            def synchronize(device: Any = None) -> None:
                torch.oxide.synchronize(device)

            @staticmethod
            def get_compute_capability(device: Any = None) -> str:
                # As for the CPU: no compute capability; Inductor only keys caches on it.
                return ""

            @staticmethod
            def is_bf16_supported(including_emulation: bool = False) -> bool:
                return torch.oxide.is_bf16_supported(including_emulation)

            @staticmethod
            def memory_allocated(device: Any = None) -> int:
                return torch.oxide.memory_allocated(device)

            @staticmethod
            def is_triton_capable(device: Any = None) -> bool:
                return False

        di.register_interface_for_device(_BACKEND, OxideInterface)
        _registered_dynamo = True


def _register_inductor() -> None:
    global _registered_inductor
    with _lock:
        if _registered_inductor:
            return
        from torch._inductor import config as inductor_config
        from torch._inductor.codegen import common
        from torch._inductor.codegen.cpp import CppScheduling
        from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
        from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
        from torch._inductor.virtualized import V

        class OxideWrapperMixin:
            """What an oxide graph's Python wrapper does differently from PythonWrapperCodegen."""

            def _generate_kernel_call_helper(self, kernel_name: str, call_args, *, device=None, triton=True, **kwargs):
                device = device or V.graph.get_current_device_or_throw()
                if not triton and device.type == _BACKEND:
                    # A C++ kernel on host-addressable oxide memory, called as on the CPU,
                    # on the host thread: the launches queued before it on the current
                    # stream must have run (it reads their outputs), and nothing it
                    # writes may still be read by queued work. So the stream is
                    # synchronised first (cheap when nothing is queued).
                    index = device.index if device.index is not None else "torch.oxide.current_device()"
                    pointers = _launchable(kwargs.get("arg_types"), len(call_args))
                    if pointers is not None and not _SANITIZE:
                        # A launch record on the current stream (torch.oxide._launch_cpp_kernel).
                        self.writeline(
                            self.wrap_kernel_call(
                                "torch.oxide._launch_cpp_kernel", [kernel_name, str(index), hex(pointers), *call_args]
                            )
                        )
                        return
                    self.writeline(f"torch.oxide._sync_current_stream({index})")
                    if _SANITIZE:
                        # Guarded device memory: the kernel gets host views (see _host_kernel_call).
                        call_args = [kernel_name, *call_args]
                        kernel_name = "torch.oxide._host_kernel_call"
                    self.writeline(self.wrap_kernel_call(kernel_name, call_args))
                    return
                return super()._generate_kernel_call_helper(
                    kernel_name, call_args, device=device, triton=triton, **kwargs
                )

            def make_allocation(self, name, device, dtype, shape, stride, allocation_shape=None, is_pinned=False):
                if device.type != _BACKEND or inductor_config.test_configs.track_memory_lifecycle:
                    return super().make_allocation(name, device, dtype, shape, stride, allocation_shape, is_pinned)
                # The stock line names the device type only and relies on a device
                # guard, which Inductor emits for GPU-class devices alone: a graph on
                # oxide:1 would allocate its buffers on the current device.
                if allocation_shape is None:
                    allocation_shape = shape
                shape_s = self.codegen_python_shape_tuple(shape)
                allocation_s = self.codegen_python_shape_tuple(allocation_shape)
                stride_s = self.codegen_python_shape_tuple(stride)
                where = _BACKEND if device.index is None else f"{_BACKEND}:{device.index}"
                out = f"{name} = empty_strided({allocation_s}, {stride_s}, device='{where}', dtype={dtype})"
                if shape_s != allocation_s:
                    out += f".as_strided({shape_s}, {stride_s})"
                return out

        class OxideSubgraphWrapperCodegen(OxideWrapperMixin, SubgraphPythonWrapperCodegen):
            """A subgraph's wrapper (``torch.cond`` branches, ...) on oxide."""

        class OxideWrapperCodegen(OxideWrapperMixin, PythonWrapperCodegen):
            """The Python wrapper of a compiled graph on oxide (see the module docstring)."""

            @staticmethod
            def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
                if is_subgraph:
                    return OxideSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
                return OxideWrapperCodegen()

        class OxideCppWrapperCodegen(CppWrapperCpu):
            """Refuses the C++ wrapper: oxide has none (no ``cpp_wrapper/oxide.h`` shim)."""

            @staticmethod
            def create(*args, **kwargs):
                raise NotImplementedError(
                    "torch.compile with cpp_wrapper=True (and AOTInductor) is not supported on oxide; "
                    "the default Python wrapper is"
                )

        class OxideDeviceOpOverrides(common.DeviceOpOverrides):
            """The wrapper's device lines, written against ``torch.oxide``."""

            def import_get_raw_stream_as(self, name: str) -> str:
                return f"from torch_oxide._inductor import get_raw_stream as {name}"

            def set_device(self, device_idx: int) -> str:
                return f"torch.oxide.set_device({device_idx})"

            def synchronize(self) -> str:
                return "torch.oxide.synchronize()"

            def device_guard(self, device_idx: int) -> str:
                return f"torch.oxide.device({device_idx})"

            def aten_device_type(self) -> str:
                return "at::kPrivateUse1"

            def cpp_kernel_type(self) -> str:
                return "void*"

        _treat_as_cpu_backend()
        _keep_oxide_convolutions_contiguous()
        common.register_device_op_overrides(_BACKEND, OxideDeviceOpOverrides())

        class OxideCppScheduling(CppScheduling):
            """Inductor's C++ scheduling, generating single-threaded kernels unless ``cpp.threads`` is set.

            See ``_serial_kernels``.
            """

            def codegen_node(self, node):
                with _serial_kernels():
                    return super().codegen_node(node)

            def codegen_template(self, *args, **kwargs):
                with _serial_kernels():
                    return super().codegen_template(*args, **kwargs)

            def flush(self):
                with _serial_kernels():
                    return super().flush()

        common.register_backend_for_device(_BACKEND, OxideCppScheduling, OxideWrapperCodegen, OxideCppWrapperCodegen)
        _registered_inductor = True


# C parameter types a C++ kernel launched as a record may have (see _launchable).
_INTEGER_TYPES = {"int64_t", "const int64_t", "long", "const long", "uint64_t", "const uint64_t"}


def _launchable(arg_types, nargs: int):
    """The pointer mask (bit k: argument k is a pointer) of a C++ kernel that can be a
    launch record, or None when it must be called on the host thread.

    ``torch.oxide._launch_cpp_kernel`` passes every argument as a 64-bit integer
    (``csrc/runtime/host_kernel.cpp``), which is right for pointers and 64-bit
    integers only; a float parameter travels in other registers.
    """
    from torch_oxide.oxide import _MAX_HOST_KERNEL_ARGS

    if arg_types is None or len(arg_types) != nargs or nargs > _MAX_HOST_KERNEL_ARGS:
        return None
    mask = 0
    for k, t in enumerate(arg_types):
        t = str(t).strip()
        if t.endswith("*"):
            mask |= 1 << k
        elif t not in _INTEGER_TYPES:
            return None
    return mask


def _serial_kernels():
    """Inductor's ``cpp.threads`` for the code of an oxide graph: 1 unless the user set it.

    Inductor's C++ kernels parallelise with OpenMP, whose worker threads spin after
    each parallel region (libgomp: up to ``GOMP_SPINCOUNT``, about 3 ms by default)
    before sleeping. On oxide the launches between two C++ kernels (convolutions,
    GEMMs) run on the stream workers and the kernel thread team, so those spinning
    threads take cores from them: a compiled ResNet-18 training step (batch 8,
    64x64, 2-core Xeon, ``TORCHINDUCTOR_FX_GRAPH_CACHE=0``) took 121-133 ms with
    2-thread C++ kernels, 99 ms with ``OMP_WAIT_POLICY=PASSIVE`` (set before torch
    loads, so not ours to set), and 89 ms with single-threaded C++ kernels, against
    72 ms eager. Fused pointwise kernels are the small part of such steps; the
    launches that dominate stay parallel.
    """
    from torch._inductor import config as inductor_config

    if inductor_config.cpp.threads >= 1:
        return contextlib.nullcontext()
    return inductor_config.patch({"cpp.threads": 1})


def _keep_oxide_convolutions_contiguous() -> None:
    """Turns off Inductor's layout optimization (channels-last activations) for oxide graphs.

    Inductor decides it per graph (``GraphLowering.decide_layout_opt``) with heuristics
    made for cuDNN and oneDNN, which prefer channels-last; a graph with convolutions on
    a device it does not know gets channels-last buffers. oxide's convolution kernels
    work on contiguous (NCHW) tensors and copy any other layout first, so a compiled
    ResNet-18 training step paid 94 such copies (37 ms of a 164 ms step) and slower
    convolution backward passes. ``config.force_layout_optimization`` still forces it.
    """
    from torch._inductor import config as inductor_config
    from torch._inductor.graph import GraphLowering

    stock = GraphLowering.decide_layout_opt

    def decide_layout_opt(gm, *, is_inference: bool) -> bool:
        if not inductor_config.force_layout_optimization and any(
            isinstance(v := n.meta.get("val"), torch.Tensor) and v.device.type == _BACKEND
            for n in gm.graph.nodes
            if n.op == "placeholder"
        ):
            return False
        return stock(gm, is_inference=is_inference)

    GraphLowering.decide_layout_opt = staticmethod(decide_layout_opt)


def _treat_as_cpu_backend() -> None:
    """Makes Inductor's "is this the C++ backend?" questions answer yes for oxide.

    Inductor asks them by device type, and any type but ``cpu``, ``mps``, ``xpu``
    and ``tpu`` gets the CUDA answers (``config.cuda_backend``, i.e. Triton):

    - ``get_current_backend()`` decides the dtype of ``masked`` values, fp16/bf16
      upcasts and dtype asserts while C++ code is generated; with "triton" for
      oxide, an embedding's index bounds check failed ("expected var.dtype is not
      None"). It is bound by name in four modules, so each binding is wrapped.
    - ``BaseSchedulerNode.is_cpu()`` gates loop reordering and reindexing that
      assume Triton's (numel, rnumel) groups; without it a reduction next to a
      pointwise node failed ("can't multiply sequence by non-int of type 'tuple'").
    """
    import importlib

    from torch._inductor import config as inductor_config
    from torch._inductor import scheduler

    modules = [
        importlib.import_module(m)
        for m in (
            "torch._inductor.utils",
            "torch._inductor.codegen.common",
            "torch._inductor.scheduler",
            "torch._inductor.lowering",
            "torch._inductor.kernel.mm_common",
        )
    ]
    stock = modules[0].get_current_backend

    def get_current_backend(device_type=None):
        if not device_type:
            from torch._inductor.virtualized import V

            device_type = V.graph.get_current_device_or_throw().type
        if device_type == _BACKEND:
            return inductor_config.cpu_backend
        return stock(device_type)

    for m in modules:
        if getattr(m, "get_current_backend", None) is stock:
            m.get_current_backend = get_current_backend

    def is_cpu(node) -> bool:
        device = node.get_device()
        return device is not None and device.type in ("cpu", _BACKEND)

    scheduler.BaseSchedulerNode.is_cpu = is_cpu


def register() -> None:
    """Registers oxide with Dynamo and Inductor (idempotent; imports both).

    Also Inductor's PrivateUse1 vendor hook, ``torch.oxide._inductor_backend_init``.
    """
    _register_dynamo()
    _register_inductor()


class _DynamoImportHook(importlib.abc.MetaPathFinder):
    """Registers the device interface right after ``torch._dynamo.device_interface`` loads."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _DYNAMO_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original_exec = loader.exec_module

        def exec_module(module):
            original_exec(module)
            # The module is complete; registering now precedes any use by Dynamo
            # and any import of torch._inductor.utils (its GPU-type snapshot).
            _register_dynamo()

        loader.exec_module = exec_module
        return spec


def _install_import_hook() -> None:
    """Arranges for ``_register_dynamo`` to run once Dynamo's device registry exists."""
    if _DYNAMO_MODULE in sys.modules:
        _register_dynamo()
    else:
        sys.meta_path.insert(0, _DynamoImportHook())
