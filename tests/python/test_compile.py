"""torch.compile on oxide: Dynamo's device interface and the Inductor backend (torch_oxide._inductor).

Each compile runs Inductor's C++ code generation and a C++ compiler (a few seconds
on the CI machine), so the cases are few and each checks several things.
CPU eager PyTorch is the oracle.
"""

import copy
import os
import re

import pytest
import torch
import torch._dynamo
import torch._inductor.config
from conftest import run_python
from torch._dynamo.device_interface import get_interface_for_device
from torch._inductor.utils import run_and_get_code


@pytest.fixture(autouse=True)
def fresh_compiles():
    """No cached graphs between cases: each must generate (and show) its code."""
    torch._dynamo.reset()
    with torch._inductor.config.patch(force_disable_caches=True):
        yield
    torch._dynamo.reset()


def test_import_leaves_dynamo_unimported_until_compile():
    r = run_python(
        """
        import sys, torch, torch_oxide
        before = "torch._dynamo" in sys.modules
        from torch._dynamo.device_interface import get_interface_for_device
        iface = get_interface_for_device("oxide")
        print(before, iface.device_count() == torch.oxide.device_count())
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "True"], r.stdout


def test_dynamo_device_interface_answers_from_torch_oxide():
    iface = get_interface_for_device("oxide")
    assert iface.is_available()
    assert iface.device_count() == torch.oxide.device_count()
    assert iface.current_device() == torch.oxide.current_device()
    props = iface.get_device_properties("oxide:1")
    assert props.multi_processor_count == torch.get_num_threads()
    assert props.total_memory == torch.oxide.mem_get_info(1)[1]
    assert iface.get_multi_processor_count() == torch.get_num_threads()
    assert not iface.is_triton_capable()
    s = torch.oxide.Stream()
    with torch.oxide.stream(s):
        assert iface.get_raw_stream(torch.oxide.current_device()) == s.stream_id
    assert iface.get_raw_stream(0) == torch.oxide.current_stream(0).stream_id
    previous = iface.exchange_device(1)
    try:
        assert torch.oxide.current_device() == 1
    finally:
        iface.set_device(previous)
    with pytest.raises(ValueError, match="expected an oxide device"):
        iface.get_device_properties("cpu")


def _gelu_head(x, w):
    return (torch.nn.functional.gelu(x @ w) * 2.0 + 1.0).sum(dim=1)


def test_compiled_function_runs_fused_cpp_kernels_on_oxide(native_only):
    torch.manual_seed(0)
    x_cpu = torch.randn(16, 32, requires_grad=True)
    w_cpu = torch.randn(32, 8, requires_grad=True)
    x = x_cpu.detach().to("oxide").requires_grad_()
    w = w_cpu.detach().to("oxide").requires_grad_()

    y, codes = run_and_get_code(torch.compile(_gelu_head), x, w)
    forward = codes[0]
    # The pointwise chain and the row sum became one generated C++ kernel; the
    # matmul went to oxide's native mm; buffers were allocated on oxide.
    assert "cpp_fused" in forward
    assert "extern_kernels.mm" in forward
    assert "device='oxide'" in forward
    assert y.device.type == "oxide"

    y.sum().backward()
    y_ref = _gelu_head(x_cpu, w_cpu)
    y_ref.sum().backward()
    torch.testing.assert_close(y.cpu(), y_ref.detach())
    torch.testing.assert_close(x.grad.cpu(), x_cpu.grad)
    torch.testing.assert_close(w.grad.cpu(), w_cpu.grad)


def _four_d_buffers(code: str):
    """(sizes, strides) of every 4-D buffer a generated wrapper allocates."""
    four = r"\((\d+), (\d+), (\d+), (\d+),? ?\)"
    pattern = rf"empty_strided(?:_cpu)?\({four}, {four}"
    for m in re.finditer(pattern, code):
        v = [int(g) for g in m.groups()]
        yield v[:4], v[4:]


def _contiguous(sizes, strides) -> bool:
    expected = 1
    for size, stride in zip(reversed(sizes), reversed(strides)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def test_compiled_convolutions_keep_contiguous_activations_and_serial_cpp_kernels(native_only):
    # Inductor's layout optimisation would hand oxide's NCHW convolution kernels
    # channels-last activations (a copy before every convolution); oxide graphs keep
    # them contiguous. And oxide's generated C++ kernels are single-threaded (no
    # OpenMP threads spinning against the stream's kernels) while CPU graphs keep
    # OpenMP, unless cpp.threads is set.
    torch.manual_seed(0)
    ref = torch.nn.Sequential(
        # More than 64 channels: Inductor's heuristics pick channels-last for such a training graph.
        torch.nn.Conv2d(3, 72, 3, padding=1),
        torch.nn.BatchNorm2d(72),
        torch.nn.ReLU(),
        torch.nn.Conv2d(72, 72, 3),
    )
    model = copy.deepcopy(ref).to("oxide")
    x = torch.randn(2, 3, 8, 8)

    def step(m, inp):
        y = m(inp)
        y.square().mean().backward()
        return y

    y, codes = run_and_get_code(lambda: step(torch.compile(model), x.to("oxide")))
    y_ref = step(ref, x)
    torch.testing.assert_close(y.cpu(), y_ref.detach(), rtol=1e-4, atol=1e-5)
    for p, p_ref in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.cpu(), p_ref.grad, rtol=1e-4, atol=1e-5)
    code = "\n".join(codes)
    buffers = list(_four_d_buffers(code))
    assert buffers, code
    assert all(_contiguous(sizes, strides) for sizes, strides in buffers), buffers
    assert "cpp_fused" in code and "#pragma omp parallel" not in code

    torch._dynamo.reset()
    if torch.get_num_threads() > 1:
        _, cpu_codes = run_and_get_code(lambda: step(torch.compile(copy.deepcopy(ref)), x))
        assert "#pragma omp parallel" in "\n".join(cpu_codes), "CPU graphs keep OpenMP"
        torch._dynamo.reset()
        with torch._inductor.config.patch({"cpp.threads": 2}):
            _, codes = run_and_get_code(lambda: step(torch.compile(model), x.to("oxide")))
        assert "#pragma omp parallel" in "\n".join(codes), "an explicit cpp.threads is honoured"


def test_compiled_module_trains_on_a_second_device(native_only):
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.SiLU(), torch.nn.LayerNorm(24), torch.nn.Linear(24, 3))
    model = copy.deepcopy(ref).to("oxide:1")
    compiled = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    x = torch.randn(10, 12)
    target = torch.randint(0, 3, (10,))
    for _ in range(2):
        loss = torch.nn.functional.cross_entropy(compiled(x.to("oxide:1")), target.to("oxide:1"))
        loss.backward()
        opt.step()
        opt.zero_grad()
        loss_ref = torch.nn.functional.cross_entropy(ref(x), target)
        loss_ref.backward()
        opt_ref.step()
        opt_ref.zero_grad()
        assert loss.device == torch.device("oxide:1")
        torch.testing.assert_close(loss.cpu(), loss_ref.detach())
    for (name, p), p_ref in zip(model.named_parameters(), ref.parameters()):
        assert p.device == torch.device("oxide:1"), name
        torch.testing.assert_close(p.detach().cpu(), p_ref.detach(), msg=name)


def test_compiled_gpt2_forward_matches_cpu(native_only):
    # Embedding lookups (bounds-checked indirect loads), masked softmax, layer norms:
    # the C++ code generation paths that ask Inductor which backend a device uses.
    transformers = pytest.importorskip("transformers", reason="transformers is installed by requirements.txt")
    cfg = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=32, bos_token_id=0, eos_token_id=0
    )
    torch.manual_seed(0)
    ref = transformers.GPT2LMHeadModel(cfg).eval()
    model = copy.deepcopy(ref).to("oxide")
    ids = torch.randint(0, 100, (2, 16))
    with torch.no_grad():
        logits, codes = run_and_get_code(lambda i: torch.compile(model)(i).logits, ids.to("oxide"))
        expected = ref(ids).logits
    assert any("cpp_fused" in code for code in codes)
    assert logits.device.type == "oxide"
    torch.testing.assert_close(logits.cpu(), expected, rtol=1e-4, atol=1e-5)


def test_cpp_wrapper_is_refused_with_a_clear_error():
    x = torch.randn(4, device="oxide")
    compiled = torch.compile(lambda t: t.sin() + 1, options={"cpp_wrapper": True})
    with pytest.raises(Exception, match="cpp_wrapper=True .* is not supported on oxide"):
        compiled(x)


# Under the sanitizer a C++ kernel is called on the host with host views instead
# (torch_oxide._inductor: device addresses are not host memory there).
SANITIZED = os.environ.get("OXIDE_SANITIZE") == "1"
host_calls_under_sanitizer = pytest.mark.skipif(
    SANITIZED, reason="OXIDE_SANITIZE=1 calls C++ kernels on the host with host views, not as launch records"
)


@host_calls_under_sanitizer
def test_cpp_kernels_are_launch_records_in_stream_order(native_only):
    # A compiled graph's C++ kernel is queued on the current stream
    # (torch.oxide._launch_cpp_kernel) instead of being called after the host waits
    # for the stream: it must still read what the launches before it wrote (a large
    # product still queued), and the launches after it must read what it wrote.
    torch.manual_seed(0)

    def f(a, b):
        h = a @ b  # oxide's GEMM, queued
        return (h.relu() * 2 + 1).sum(1)  # a generated C++ kernel reads it

    a, b = torch.randn(384, 384), torch.randn(384, 384)
    y, codes = run_and_get_code(torch.compile(f), a.to("oxide"), b.to("oxide"))
    code = "\n".join(codes)
    assert "torch.oxide._launch_cpp_kernel(cpp_fused" in code and "_sync_current_stream" not in code, code
    z = y * 3  # queued after the C++ kernel
    torch.testing.assert_close(z.cpu(), f(a, b) * 3, rtol=1e-4, atol=1e-3)
    # The same on a side stream, whose queue the default stream does not see.
    side = torch.Stream(device="oxide")
    with side:
        a2, b2 = a.to("oxide"), b.to("oxide")
        y2 = torch.compile(f)(a2, b2) * 3
    side.synchronize()
    torch.testing.assert_close(y2.cpu(), f(a, b) * 3, rtol=1e-4, atol=1e-3)


def test_an_error_in_a_cpp_kernel_is_raised_not_fatal(native_only):
    # Inductor's generated index checks throw C++ exceptions; a launched kernel's
    # exception becomes a RuntimeError (at the call for a kernel's first launch, at the
    # next synchronisation for a queued one), and the process goes on.
    w = torch.randn(10, 4)
    f = torch.compile(lambda w, i: w[i] * 2)
    ok = torch.tensor([1, 9, 0])
    torch.testing.assert_close(f(w.to("oxide"), ok.to("oxide")).cpu(), w[ok] * 2)
    # A launch record's error names the C++ kernel; the sanitizer's host call raises it directly.
    raised = r"index out of bounds" if SANITIZED else r"C\+\+ kernel raised: .*index out of bounds"
    with pytest.raises(RuntimeError, match=raised):
        f(w.to("oxide"), torch.tensor([1, 10, 0], device="oxide"))
        torch.oxide.synchronize()
    torch.testing.assert_close(f(w.to("oxide"), ok.to("oxide")).cpu(), w[ok] * 2)


@host_calls_under_sanitizer
def test_a_compiled_function_can_be_captured_in_a_graph(native_only):
    # Its C++ kernels are launch records, so a capture keeps them as graph nodes.
    f = torch.compile(lambda a: (a.relu() * 2 + 1).sum(1))
    x = torch.randn(64, 64, device="oxide")
    f(x)  # compiled and warmed up outside the capture
    g = torch.accelerator.Graph()
    with g:
        y = f(x)
    fresh = torch.randn(64, 64)
    x.copy_(fresh)
    g.replay()
    torch.testing.assert_close(y.cpu(), (fresh.relu() * 2 + 1).sum(1))
