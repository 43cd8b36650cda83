"""Which build of the extension this CPU runs.

The package ships one build of ``torch_oxide._C`` per CPU capability, as PyTorch
compiles its own CPU kernels once per capability and picks one at run time:

- ``default``: ``_C.abi3.so``, compiled for x86-64-v2 (SSE4.2, POPCNT), the minimum;
- ``avx2``: ``_C.avx2.abi3.so``, x86-64-v3 (AVX2, FMA, BMI2, F16C);
- ``avx512``: ``_C.avx512.abi3.so``, x86-64-v4 (AVX-512 F/BW/CD/DQ/VL).

Importing the package loads the best build that both exists and runs on this CPU.
``OXIDE_CPU_CAPABILITY`` forces one (as ``ATEN_CPU_CAPABILITY`` does for PyTorch),
for instance to test the portable path on a machine with AVX-512. A build compiled
for instructions the CPU lacks would die of SIGILL, so this is decided from the
CPU's flags before anything is loaded, and refused with an ImportError otherwise.

This module imports nothing but the standard library: ``build_backend/`` loads it by
path to decide which builds the building machine can test.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType

ENV = "OXIDE_CPU_CAPABILITY"

# Lowest first. Each level's /proc/cpuinfo flags, on top of the levels below it; they
# are the features of rustc's x86-64-v2/v3/v4 target CPUs (`abm` is LZCNT, `pni` SSE3).
CAPABILITIES = ("default", "avx2", "avx512")
_LEVEL_FLAGS = {
    "default": ("cx16", "lahf_lm", "popcnt", "pni", "ssse3", "sse4_1", "sse4_2"),
    "avx2": ("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"),
    "avx512": ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"),
}
# rustc's target CPU for each build (build_backend/torch_oxide_build.py).
TARGET_CPU = {"default": "x86-64-v2", "avx2": "x86-64-v3", "avx512": "x86-64-v4"}


def required_flags(capability: str) -> set[str]:
    """Every CPU flag a build for ``capability`` may use."""
    flags: set[str] = set()
    for level in CAPABILITIES[: CAPABILITIES.index(capability) + 1]:
        flags.update(_LEVEL_FLAGS[level])
    return flags


def cpu_flags() -> set[str]:
    """This CPU's feature flags as the kernel reports them (Linux x86-64).

    The kernel leaves out the AVX/AVX-512 flags when it does not save their
    registers, so a flag here is usable, not only present in CPUID."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def file_name(capability: str) -> str:
    """The extension file of one build, inside the package."""
    return "_C.abi3.so" if capability == "default" else f"_C.{capability}.abi3.so"


def built(package_dir: str) -> list[str]:
    """The capabilities whose build is installed in ``package_dir``, lowest first."""
    return [c for c in CAPABILITIES if os.path.exists(os.path.join(package_dir, file_name(c)))]


def supported(flags: set[str]) -> list[str]:
    """The capabilities a CPU with ``flags`` runs, lowest first."""
    return [c for c in CAPABILITIES if required_flags(c) <= flags]


def select(requested: str | None, flags: set[str], present: list[str]) -> str:
    """The build to load: ``requested`` (the environment variable's value, if set),
    else the best one both present and supported. Raises ImportError saying why
    when there is none."""
    if requested:
        requested = requested.strip().lower()
        if requested not in CAPABILITIES:
            raise ImportError(f"{ENV}={requested!r} is not a CPU capability of torch_oxide; use one of {CAPABILITIES}")
        missing = sorted(required_flags(requested) - flags)
        if missing:
            raise ImportError(
                f"{ENV}={requested} needs CPU features this CPU lacks ({', '.join(missing)}); "
                f"it runs {supported(flags) or 'none of them'}"
            )
        if requested not in present:
            raise ImportError(
                f"{ENV}={requested}: this installation has no {requested} build ({file_name(requested)}); "
                f"it has {present}. `make build` builds every capability this machine runs."
            )
        return requested
    runnable = [c for c in present if c in supported(flags)]
    if not runnable:
        missing = sorted(required_flags("default") - flags)
        raise ImportError(
            "torch_oxide needs an x86-64-v2 CPU (SSE4.2, POPCNT); this CPU lacks " + ", ".join(missing)
            if "default" in present
            else f"torch_oxide has no extension build in its package (found {present})"
        )
    return runnable[-1]


def load(package: str, package_dir: str) -> ModuleType:
    """Loads the selected build as ``<package>._C`` and returns it."""
    capability = select(os.environ.get(ENV), cpu_flags(), built(package_dir))
    name = f"{package}._C"
    path = os.path.join(package_dir, file_name(capability))
    # Every build defines PyInit__C: loading another file under the name `_C` is the
    # import system's own mechanism (the init function is named by the last part).
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    compiled_for = getattr(module, "_cpu_capability", None)
    if compiled_for != capability:
        raise ImportError(f"{path} was built for {compiled_for!r}, not {capability!r}: rebuild the package")
    return module
