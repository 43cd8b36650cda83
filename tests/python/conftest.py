"""Shared fixtures. CPU PyTorch is the oracle throughout."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_oxide  # noqa: F401

# The warning per operator is tested in test_fallback.py; elsewhere it is noise.
torch.oxide.set_fallback_mode("silent")


@pytest.fixture
def native_only():
    """Run the test with OXIDE_FALLBACK=error semantics: any CPU fallback raises."""
    previous = torch.oxide.get_fallback_mode()
    torch.oxide.set_fallback_mode("error")
    try:
        yield
    finally:
        torch.oxide.set_fallback_mode(previous)


def run_python(code: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter (so aborts, autoload and fork are observable).

    `env` adds variables to this process's environment; a value of None removes one.
    """
    full_env = dict(os.environ)
    for name, value in (env or {}).items():
        if value is None:
            full_env.pop(name, None)
        else:
            full_env[name] = value
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )


@pytest.fixture(autouse=True)
def queued_errors_belong_to_their_test():
    """After each test, wait for both devices: a queued kernel's error fails the test that launched it.

    Kernel errors are reported at the next synchronization; without this, an error
    left on a stream would surface in whichever later test synchronizes first.
    """
    yield
    for device in range(torch.oxide.device_count()):
        torch.oxide.synchronize(device)


@pytest.fixture
def launch_blocking():
    """Kernels run at the call and raise their errors there (``OXIDE_LAUNCH_BLOCKING=1`` for one test).

    For tests that compare a data-dependent kernel error (an index out of range, an
    invalid probability) with CPU's exception at the call, as PyTorch's own test suite
    runs CUDA's device-side checks under ``CUDA_LAUNCH_BLOCKING=1``.
    """
    with torch.oxide._LaunchBlocking():
        yield
