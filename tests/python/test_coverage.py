"""``torch_oxide.coverage``: native vs CPU-fallback classification, the API and the CLI.

The fallback and native operators used here are checked first (``native_only``:
OXIDE_FALLBACK=error), so a test fails with a clear precondition message, not a wrong
classification, once a native kernel lands for the fallback example.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_oxide.coverage as coverage


def _falls_back(fn) -> bool:
    previous = torch.oxide.get_fallback_mode()
    torch.oxide.set_fallback_mode("error")
    try:
        fn()
        return False
    except NotImplementedError:
        return True
    finally:
        torch.oxide.set_fallback_mode(previous)


@pytest.fixture
def matrix():
    return torch.randn(4, 4).to("oxide")


def test_preconditions(matrix):
    for name, fn in (
        ("linalg_qr", lambda: torch.linalg.qr(matrix)),
        ("_linalg_eigh", lambda: torch.linalg.eigvalsh(matrix)),
        ("igamma", lambda: torch.igamma(matrix, matrix)),
    ):
        assert _falls_back(fn), f"{name} is native now: pick another fallback example for these tests"
    assert not _falls_back(lambda: torch.empty(3, device="oxide").fill_(1))
    assert not _falls_back(lambda: torch.ones(3).to("oxide"))


def test_fallback_and_native_are_told_apart(matrix):
    with coverage.record() as cov:
        torch.linalg.qr(matrix)
        for _ in range(3):
            torch.empty(3, device="oxide").fill_(1)
        torch.ones(3).to("oxide")
    assert cov.fallback == {"aten::linalg_qr": 1}
    assert cov.fallback_via == {"aten::linalg_qr": {"aten::linalg_qr.out": 1}}
    assert cov.native == {"aten::empty.memory_format": 3, "aten::fill_.Scalar": 3, "aten::_to_copy": 1}
    assert cov.totals() == {"operators_native": 3, "operators_fallback": 1, "calls_native": 7, "calls_fallback": 1}


def test_fallback_under_a_native_name_lists_the_inner_operator(matrix):
    with coverage.record() as cov:
        torch.linalg.eigvalsh(matrix)
        torch.igamma(matrix, matrix)
    # eigvalsh reaches the dispatch mode as _linalg_eigh (linalg_eigvalsh itself
    # decomposes above it); igamma falls back through its out= variant.
    assert cov.fallback == {"aten::_linalg_eigh": 1, "aten::igamma": 1}
    assert cov.fallback_via["aten::igamma"] == {"aten::igamma.out": 1}
    assert cov.native == {}


def test_cpu_only_work_is_not_recorded():
    with coverage.record() as cov:
        (torch.ones(3) + 1).exp().sum()
    assert cov.native == {} and cov.fallback == {}


def test_backward_is_recorded(matrix):
    layer = torch.nn.Linear(4, 2).oxide()
    with coverage.record() as cov:
        layer(matrix).sum().backward()
    recorded = {**cov.native, **cov.fallback}  # mm/addmm may become native: only presence is tested
    assert recorded["aten::addmm"] == 1  # forward of linear
    assert recorded["aten::mm"] == 1  # its weight gradient, run by the autograd engine
    assert recorded["aten::sum.dim_IntList"] == 1  # its bias gradient
    assert layer.weight.grad is not None


def test_refused_call_counts_as_fallback(matrix, native_only):
    with coverage.record() as cov:
        with pytest.raises(NotImplementedError):
            torch.linalg.qr(matrix)
        with pytest.raises(RuntimeError):  # a shape error is not a fallback and is not counted
            torch.empty(2, 3, device="oxide").view(7)
    assert cov.fallback == {"aten::linalg_qr": 1}
    assert cov.native == {"aten::empty.memory_format": 1}


def test_record_leaves_fallback_mode_and_stats_alone(matrix):
    torch.oxide.set_fallback_mode("warn")
    try:
        torch.oxide.reset_fallback_stats()
        with coverage.record():
            assert torch.oxide.get_fallback_mode() == "warn"
            with pytest.warns(UserWarning, match="'aten::igamma.out' has no native oxide kernel"):
                torch.igamma(matrix, matrix)
        assert torch.oxide.get_fallback_mode() == "warn"
        assert torch.oxide.fallback_stats() == {"aten::igamma.out": 1}
    finally:
        torch.oxide.set_fallback_mode("silent")


def test_report_and_dict(matrix):
    with coverage.record() as cov:
        torch.linalg.qr(matrix)
        torch.linalg.qr(matrix)
        torch.empty(3, device="oxide").fill_(1)
    text = cov.report()
    native, fallback = text.index("Native (2 operators, 2 calls)"), text.index("CPU fallback (1 operator, 2 calls)")
    assert native < text.index("aten::fill_.Scalar") < fallback < text.index("aten::linalg_qr.out")
    assert "Totals: operators native 2 / fallback 1, calls native 2 / fallback 2" in text
    data = cov.to_dict()
    assert data["fallback"] == {"aten::linalg_qr": {"calls": 2, "via": {"aten::linalg_qr.out": 2}}}
    assert data["native"] == {"aten::empty.memory_format": 1, "aten::fill_.Scalar": 1}


def test_package_attribute():
    import torch_oxide

    assert torch_oxide.coverage.record is coverage.record


# The command line, in fresh interpreters.

SCRIPT = """
    import sys
    import torch

    print("argv:", sys.argv[1:])
    x = torch.randn(4, 4).to("oxide")
    torch.linalg.qr(x)
    torch.empty(3, device="oxide").fill_(1)
    sys.exit(int(sys.argv[1]))
"""


def _cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "OXIDE_FALLBACK"}  # the CLI's own default: silent
    return subprocess.run(
        [sys.executable, "-m", "torch_oxide.coverage", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=180,
    )


def test_cli_script(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(SCRIPT))
    out_json = tmp_path / "out" / "coverage.json"
    result = _cli("--json", str(out_json), str(script), "0", "--flag")
    assert result.returncode == 0, result.stderr
    assert "argv: ['0', '--flag']" in result.stdout
    native = result.stdout.index("Native (")
    fallback = result.stdout.index("CPU fallback (")
    assert native < result.stdout.index("aten::fill_.Scalar") < fallback
    assert fallback < result.stdout.index("aten::linalg_qr") < result.stdout.index("Totals:")
    assert "CPU fallback" not in result.stderr  # silent mode: no per-operator warning

    data = json.loads(out_json.read_text())
    assert {"tool", "command", "exit_status", "fallback_mode", "torch_version", "totals", "native", "fallback"} <= set(
        data
    )
    assert data["command"] == [str(script), "0", "--flag"]
    assert data["exit_status"] == 0 and data["fallback_mode"] == "silent"
    assert data["native"]["aten::fill_.Scalar"] == 1
    assert data["fallback"]["aten::linalg_qr"] == {"calls": 1, "via": {"aten::linalg_qr.out": 1}}
    assert "aten::linalg_qr" not in data["native"]
    totals = data["totals"]
    assert totals["operators_fallback"] == len(data["fallback"]) and totals["operators_native"] == len(data["native"])
    assert totals["calls_native"] == sum(data["native"].values())


def test_cli_keeps_exit_status(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(SCRIPT))
    result = _cli(str(script), "3")
    assert result.returncode == 3
    assert "Totals: operators native" in result.stdout  # reported all the same


def test_cli_module_pytest(tmp_path):
    (tmp_path / "test_tiny.py").write_text(
        textwrap.dedent(
            """
            import torch

            def test_igamma():
                z = torch.ones(2, device="oxide")
                assert torch.igamma(z, 0 * z).cpu().tolist() == [0.0, 0.0]
            """
        )
    )
    result = _cli("-m", "pytest", "-q", "-p", "no:cacheprovider", "test_tiny.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
    assert "aten::igamma.out" in result.stdout.split("CPU fallback (")[1]


def test_cli_usage():
    result = _cli()
    assert result.returncode == 2 and "usage: python -m torch_oxide.coverage" in result.stderr
