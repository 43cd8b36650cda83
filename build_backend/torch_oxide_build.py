"""The package's build backend (PEP 517): maturin, plus one build of the extension
per CPU capability, plus a check that torch is importable before anything compiles.

pip calls the hooks below (``pyproject.toml``: ``build-backend``). Each wheel hook
first compiles the avx2 (x86-64-v3) and avx512 (x86-64-v4) builds of
``torch_oxide._C`` into ``python/torch_oxide/`` as ``_C.avx2.abi3.so`` and
``_C.avx512.abi3.so``, then hands over to maturin, which compiles the portable
default build (x86-64-v2, ``.cargo/config.toml``) and packs all three. At import the
package loads the best one the CPU runs (``python/torch_oxide/_capability.py``).

The glue is C++ compiled against the installed torch's headers, so the build needs
torch importable by the building interpreter: ``pip install --no-build-isolation .``
after torch. In pip's default isolated environment torch is missing and
``get_requires_for_build_wheel`` says so at once, before compiling anything.

``python build_backend/torch_oxide_build.py [--all] [CAPABILITY ...]`` builds the
capabilities alone; ``make build`` runs it for those this machine's CPU runs.
"""

from __future__ import annotations

import argparse
import base64
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Mapping
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE_DIR = os.path.join(ROOT, "python", "torch_oxide")


@functools.cache
def _capability_module() -> Any:
    """``torch_oxide._capability``, loaded by path: importing the package would load torch and the extension."""
    path = os.path.join(PACKAGE_DIR, "_capability.py")
    spec = importlib.util.spec_from_file_location("_torch_oxide_capability", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rustflags(capability: str) -> str:
    flags = ["-C", f"target-cpu={_capability_module().TARGET_CPU[capability]}"]
    if capability == "avx512":
        # LLVM otherwise keeps auto-vectorised loops at 256 bits on AVX-512 CPUs; full
        # width ran the transcendental loops faster (ARCHITECTURE.md, "CPU capabilities").
        flags += ["-C", "target-feature=-prefer-256-bit"]
    return " ".join(flags)


def _target_dir() -> str:
    return os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")


def _glue_cache() -> str:
    """Where build.rs keeps the compiled glue, shared by every capability's build."""
    return os.environ.get("OXIDE_GLUE_CACHE") or os.path.join(_target_dir(), "glue-cache")


def build_capability(capability: str, python: str) -> str:
    """Compiles one non-default capability's build of the extension into the package; returns its path."""
    mod = _capability_module()
    if capability not in mod.CAPABILITIES or capability == "default":
        raise ValueError(f"not a capability with its own build: {capability!r} (choose from {mod.CAPABILITIES[1:]})")
    env = dict(
        os.environ,
        RUSTFLAGS=_rustflags(capability),
        # Its own target directory: flags that differ would otherwise rebuild everything each time.
        CARGO_TARGET_DIR=os.path.join(_target_dir(), f"capability-{capability}"),
        OXIDE_GLUE_CACHE=_glue_cache(),
        OXIDE_PYTHON=python,
        PYO3_PYTHON=python,
    )
    command = [
        "cargo",
        "build",
        "--release",
        "--lib",
        "-p",
        "torch-oxide-ext",
        "--message-format=json-render-diagnostics",
    ]
    print(f"building the {capability} extension ({env['RUSTFLAGS']})", file=sys.stderr, flush=True)
    proc = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"cargo failed building the {capability} extension (exit status {proc.returncode})")
    library = None
    for line in proc.stdout.splitlines():
        message = json.loads(line) if line.startswith("{") else {}
        if message.get("reason") == "compiler-artifact" and message["target"]["name"] == "torch_oxide_ext":
            library = next(f for f in message["filenames"] if f.endswith(".so"))
    if library is None:
        raise SystemExit(f"cargo reported no torch_oxide_ext library for the {capability} build")
    destination = os.path.join(PACKAGE_DIR, mod.file_name(capability))
    # Copied, then renamed over the old file: a process that has the old one loaded keeps it.
    partial = f"{destination}.{os.getpid()}.partial"
    shutil.copyfile(library, partial)
    os.replace(partial, destination)
    return destination


def build_capabilities(capabilities: list[str], python: str = sys.executable) -> None:
    for capability in capabilities:
        build_capability(capability, python)


def _all_capabilities() -> list[str]:
    return [c for c in _capability_module().CAPABILITIES if c != "default"]


def _add_to_wheel(wheel: str, files: Mapping[str, str]) -> None:
    """Adds ``{path in the wheel: file}`` to a built wheel and to its RECORD.

    maturin packs only the extension it compiled and the package's files that git
    does not ignore (.gitignore ignores every ``*.so``), so the other capabilities'
    builds are added here, with the hashes the wheel format asks for."""
    partial = f"{wheel}.partial"
    with zipfile.ZipFile(wheel) as old, zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as new:
        record_name = next(n for n in old.namelist() if n.endswith(".dist-info/RECORD"))
        record = [
            line
            for line in old.read(record_name).decode().splitlines()
            if line.split(",")[0] not in files and line.split(",")[0] != record_name
        ]
        for info in old.infolist():
            if info.filename != record_name and info.filename not in files:
                new.writestr(info, old.read(info.filename))
        for arcname, path in files.items():
            with open(path, "rb") as f:
                data = f.read()
            info = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o755 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            new.writestr(info, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{arcname},sha256={digest},{len(data)}")
        record.append(f"{record_name},,")
        new.writestr(zipfile.ZipInfo(record_name, date_time=(1980, 1, 1, 0, 0, 0)), "\n".join(record) + "\n")
    os.replace(partial, wheel)


def _require_build_tools() -> None:
    """Fails at once, saying what to install, when the build environment lacks torch,
    maturin or cargo (before minutes of compiling)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__)"],
        env=dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0"),
        capture_output=True,
        text=True,
        check=False,
    )
    problems = []
    if probe.returncode != 0 or not probe.stdout.startswith("2.15."):
        found = f"torch {probe.stdout.strip()}" if probe.returncode == 0 else "no torch"
        problems.append(
            f"the C++ glue is compiled against the installed torch 2.15, and this build environment has {found} "
            "(pip builds in an isolated environment without torch unless told --no-build-isolation)"
        )
    if importlib.util.find_spec("maturin") is None:
        problems.append("maturin (the Rust extension builder) is not installed")
    if shutil.which("cargo") is None:
        problems.append("Rust's cargo is not on PATH (install it with rustup: https://rustup.rs)")
    if problems:
        raise SystemExit(
            f"cannot build torch-oxide with {sys.executable}:\n  - "
            + "\n  - ".join(problems)
            + "\nInstall torch and maturin first, then build without isolation:\n"
            "    pip install 'torch==2.15.*' 'maturin>=1.5,<2'\n"
            "    pip install --no-build-isolation .        (or: pip wheel --no-build-isolation .)"
        )


# PEP 517 hooks: maturin's, with the check and the capability builds in front. maturin
# is imported inside them, so that a missing maturin gets the message above.


def get_requires_for_build_wheel(config_settings: Mapping[str, Any] | None = None) -> list[str]:
    _require_build_tools()
    import maturin

    return maturin.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_editable(config_settings: Mapping[str, Any] | None = None) -> list[str]:
    _require_build_tools()
    import maturin

    return maturin.get_requires_for_build_editable(config_settings)


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Mapping[str, Any] | None = None) -> str:
    import maturin

    return maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def _prepare() -> list[str]:
    """What both wheel hooks do before maturin: check the tools, compile the other
    capabilities' builds (sharing the glue with maturin's); returns those capabilities."""
    _require_build_tools()
    os.environ.setdefault("OXIDE_GLUE_CACHE", _glue_cache())
    capabilities = _all_capabilities()
    build_capabilities(capabilities)
    return capabilities


def build_wheel(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    capabilities = _prepare()
    import maturin

    name = maturin.build_wheel(wheel_directory, config_settings, metadata_directory)
    mod = _capability_module()
    _add_to_wheel(
        os.path.join(wheel_directory, name),
        {f"torch_oxide/{mod.file_name(c)}": os.path.join(PACKAGE_DIR, mod.file_name(c)) for c in capabilities},
    )
    return name


def build_editable(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    _prepare()
    import maturin

    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory: str, config_settings: Mapping[str, Any] | None = None) -> str:
    import maturin

    return maturin.build_sdist(sdist_directory, config_settings)


def get_requires_for_build_sdist(config_settings: Mapping[str, Any] | None = None) -> list[str]:
    import maturin

    return maturin.get_requires_for_build_sdist(config_settings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("capabilities", nargs="*", help="avx2, avx512 (default: those this machine's CPU runs)")
    parser.add_argument("--all", action="store_true", help="every capability, whether this CPU runs it or not")
    parser.add_argument(
        "--python", default=sys.executable, help="the interpreter whose torch the glue is built against"
    )
    args = parser.parse_args()
    mod = _capability_module()
    if args.all:
        wanted = _all_capabilities()
    elif args.capabilities:
        wanted = args.capabilities
    else:
        wanted = [c for c in mod.supported(mod.cpu_flags()) if c != "default"]
    build_capabilities(wanted, args.python)


if __name__ == "__main__":
    main()
