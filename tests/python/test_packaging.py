"""The package's build backend (build_backend/torch_oxide_build.py, README "Installing
with pip"): the early refusal without torch, and the wheel's extra builds."""

import base64
import hashlib
import importlib.util
import os
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BACKEND_DIR = os.path.join(ROOT, "build_backend")


@pytest.fixture(scope="module")
def backend():
    spec = importlib.util.spec_from_file_location(
        "torch_oxide_build", os.path.join(BACKEND_DIR, "torch_oxide_build.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_build_environment_without_torch_is_refused_at_once_with_the_commands(tmp_path):
    # pip's isolated build environment has no torch: stand in for it with a torch that cannot be imported.
    (tmp_path / "torch.py").write_text("raise ImportError('no torch in this environment')\n")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{BACKEND_DIR}")
    proc = subprocess.run(
        [sys.executable, "-c", "import torch_oxide_build as b; b.get_requires_for_build_wheel()"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "this build environment has no torch" in proc.stderr
    assert "pip install --no-build-isolation ." in proc.stderr


def test_the_hook_passes_where_torch_maturin_and_cargo_are_present(backend):
    if backend.shutil.which("cargo") is None:
        pytest.skip("cargo is not on PATH here")
    assert isinstance(backend.get_requires_for_build_wheel(), list)


def test_extra_builds_are_added_to_the_wheel_and_its_record(backend, tmp_path):
    wheel = tmp_path / "pkg-0.1-cp310-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("pkg/__init__.py", "")
        z.writestr("pkg-0.1.dist-info/RECORD", "pkg/__init__.py,sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0\n")
    extra = tmp_path / "_C.avx2.abi3.so"
    extra.write_bytes(b"\x7fELF not really")
    backend._add_to_wheel(str(wheel), {"pkg/_C.avx2.abi3.so": str(extra)})
    with zipfile.ZipFile(wheel) as z:
        assert z.read("pkg/_C.avx2.abi3.so") == extra.read_bytes()
        record = z.read("pkg-0.1.dist-info/RECORD").decode().splitlines()
        names = z.namelist()
    digest = base64.urlsafe_b64encode(hashlib.sha256(extra.read_bytes()).digest()).rstrip(b"=").decode()
    assert f"pkg/_C.avx2.abi3.so,sha256={digest},{extra.stat().st_size}" in record
    assert record[-1] == "pkg-0.1.dist-info/RECORD,,"
    assert sorted(line.split(",")[0] for line in record) == sorted(names)
