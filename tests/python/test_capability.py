"""One build of the extension per CPU capability (README, "Installing").

The selection rules are tested as a function of the CPU's flags; each build this
machine's CPU runs is loaded in a child process and checked against CPU PyTorch on
the kernels that have capability-specific code (transcendental loops, lane
reductions, GEMM, convolution, attention)."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_oxide
from torch_oxide import _C, _capability

PACKAGE_DIR = os.path.dirname(os.path.abspath(torch_oxide.__file__))
V2 = _capability.required_flags("default")
V3 = _capability.required_flags("avx2")
V4 = _capability.required_flags("avx512")


def test_levels_are_cumulative_and_match_rustc_target_cpus():
    assert V2 < V3 < V4
    assert {"sse4_2", "popcnt"} <= V2 and {"avx2", "fma", "bmi2", "f16c"} <= V3 and {"avx512f", "avx512bw"} <= V4
    assert _capability.TARGET_CPU == {"default": "x86-64-v2", "avx2": "x86-64-v3", "avx512": "x86-64-v4"}


@pytest.mark.parametrize(
    "flags, present, expected",
    [
        (V4, ["default", "avx2", "avx512"], "avx512"),
        (V4, ["default", "avx2"], "avx2"),
        (V4, ["default"], "default"),
        (V3, ["default", "avx2", "avx512"], "avx2"),
        (V2, ["default", "avx2", "avx512"], "default"),
        (V3 | {"avx512f"}, ["default", "avx2", "avx512"], "avx2"),  # AVX-512 F alone is not x86-64-v4
    ],
)
def test_the_best_build_the_cpu_runs_is_selected(flags, present, expected):
    assert _capability.select(None, set(flags), present) == expected


def test_a_requested_capability_is_honoured_or_refused_clearly():
    assert _capability.select("default", set(V4), ["default", "avx2", "avx512"]) == "default"
    assert _capability.select(" AVX2 ", set(V4), ["default", "avx2", "avx512"]) == "avx2"
    with pytest.raises(ImportError, match=r"OXIDE_CPU_CAPABILITY='sse9' is not a CPU capability.*'avx512'"):
        _capability.select("sse9", set(V4), ["default"])
    with pytest.raises(ImportError, match=r"avx512 needs CPU features this CPU lacks \(avx512bw, avx512cd"):
        _capability.select("avx512", set(V3) | {"avx512f"}, ["default", "avx2", "avx512"])
    with pytest.raises(ImportError, match=r"no avx2 build \(_C\.avx2\.abi3\.so\)"):
        _capability.select("avx2", set(V4), ["default"])


def test_a_cpu_below_the_baseline_is_refused_not_crashed():
    with pytest.raises(ImportError, match=r"needs an x86-64-v2 CPU.*lacks popcnt, sse4_2"):
        _capability.select(None, set(V2) - {"popcnt", "sse4_2"}, ["default", "avx2"])
    with pytest.raises(ImportError, match="no extension build"):
        _capability.select(None, set(V4), [])


def test_this_process_loaded_the_build_it_reports():
    loaded = _C._cpu_capability
    assert torch.oxide.get_cpu_capability() == loaded.upper()
    expected = _capability.select(
        os.environ.get(_capability.ENV), _capability.cpu_flags(), _capability.built(PACKAGE_DIR)
    )
    assert loaded == expected
    assert os.path.realpath(_C.__file__) == os.path.realpath(os.path.join(PACKAGE_DIR, _capability.file_name(loaded)))


# Runs in a child under OXIDE_CPU_CAPABILITY: prints the loaded capability after
# comparing oxide with CPU on every path that has code specific to a capability.
_CHECK = textwrap.dedent(
    """
    import torch
    import torch.nn.functional as F
    from torch.testing import assert_close

    torch.manual_seed(0)

    def both(fn, *xs):
        expected = fn(*xs)
        actual = fn(*[x.to("oxide") for x in xs])
        return actual.cpu(), expected

    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        for n in (1, 15, 257, 4099):  # tails of every vector width
            x = torch.randn(3, n, dtype=dtype)
            for fn in (torch.exp, torch.tanh, torch.sigmoid, torch.sin, torch.log1p, torch.erf):
                assert_close(*both(lambda t: fn(t.abs() if fn is torch.log1p else t), x))
            assert_close(*both(lambda t: t.sum(1), x))
            assert_close(*both(lambda t: t.amax(1), x))
            assert_close(*both(lambda t: t.amin(1), x))
            assert_close(*both(lambda t: torch.softmax(t, 1), x))
            if n > 1:  # over one element CPU's float16 layer_norm returns rounding noise (1e-5), oxide 0
                assert_close(*both(lambda t: F.layer_norm(t, (n,)), x))
    nan = torch.tensor([1.0, float("nan"), 3.0] * 40)
    assert_close(*both(lambda t: t.amax(), nan), equal_nan=True)
    # float32 <-> float16 / bfloat16 conversions (vectorised per build: engine/convert.rs),
    # bit for bit: every half bit pattern, and floats at every rounding boundary
    # (ties to even, overflow to infinity, subnormals), at a length with a tail,
    # contiguous and strided. A NaN only has to stay a NaN: CPU PyTorch's own payloads
    # differ between its vectorised loop and its scalar tail.
    def same_bits(got, want, ints):
        nan = want.isnan()
        assert torch.equal(got.isnan(), nan)
        assert torch.equal(got[~nan].view(ints), want[~nan].view(ints))

    bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    for half in (torch.float16, torch.bfloat16):
        every = bits.view(half)
        same_bits(every.to("oxide").float().cpu(), every.float(), torch.int32)
    base = torch.arange(0, 2**16, 7, dtype=torch.int32) << 16
    edges = (base.unsqueeze(1) | torch.tensor([0, 0x7FFF, 0x8000, 0x8001, 0x1000, 0xFFFF, 0x2000, 0x3001])).flatten()
    floats = torch.cat([edges, edges[:-3]]).view(torch.float32)
    for half in (torch.float16, torch.bfloat16):
        for make in (lambda t: t, lambda t: t[::3]):
            same_bits(make(floats.to("oxide")).to(half).cpu(), make(floats).to(half), torch.int16)
    a, b = torch.randn(67, 131), torch.randn(131, 45)
    assert_close(*both(torch.mm, a, b))
    img, w = torch.randn(2, 3, 17, 19), torch.randn(8, 3, 3, 3)
    assert_close(*both(lambda i, k: F.conv2d(i, k, padding=1), img, w))
    q, k, v = (torch.randn(2, 4, 37, 24) for _ in range(3))
    assert_close(*both(F.scaled_dot_product_attention, q, k, v))
    assert_close(*both(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v))
    print(torch.oxide.get_cpu_capability())
    """
)

_RUNNABLE = [c for c in _capability.built(PACKAGE_DIR) if c in _capability.supported(_capability.cpu_flags())]


@pytest.mark.parametrize("capability", _capability.CAPABILITIES)
def test_each_build_the_cpu_runs_matches_cpu(capability):
    if capability not in _RUNNABLE:
        pytest.skip(f"the {capability} build is not installed here or this CPU cannot run it (runs {_RUNNABLE})")
    env = dict(os.environ, OXIDE_CPU_CAPABILITY=capability, OXIDE_FALLBACK="error")
    proc = subprocess.run([sys.executable, "-c", _CHECK], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip().splitlines()[-1] == capability.upper()


def test_the_limit_probes_measure_rates_on_the_kernel_threads():
    # benchmarks/ops.py compares kernels with these; a probe that did no work would
    # report an infinite or zero rate.
    bw = _C._probe_memory_bandwidth(1 << 18, 2, 2)
    assert set(bw) == {"copy", "scale", "add", "triad"}
    assert all(0 < v < 1e13 for v in bw.values()), bw  # under 10 TB/s
    flops, isa = _C._probe_fma_peak(100_000, 1, 1)
    assert 1e8 < flops < 1e13, flops  # between 0.1 and 10000 GFLOP/s for one thread
    assert isa in {"avx512f", "avx2+fma", "portable mul+add"}


def test_an_unknown_capability_fails_the_import_with_the_reason():
    env = dict(os.environ, OXIDE_CPU_CAPABILITY="sse9", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    proc = subprocess.run(
        [sys.executable, "-c", "import torch_oxide"], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode != 0
    assert "ImportError: OXIDE_CPU_CAPABILITY='sse9' is not a CPU capability" in proc.stderr
