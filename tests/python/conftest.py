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
    """Run `code` in a fresh interpreter (so aborts, autoload and fork are observable)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )
