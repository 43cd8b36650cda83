"""Asynchronous execution: kernels are launch records that stream workers run later.

CPU PyTorch is the oracle: every result read back after asynchronous work must equal
what CPU computes. The "long" kernels are large matrix products (hundreds of
milliseconds on the 2-core CI machines), so a host call made right after one
finds it still running.
"""

import os
import threading
import time

import pytest
import torch
from conftest import run_python

N = 1536  # a float32 N x N x N product takes well over 100 ms on two cores


def long_operands(device="oxide", seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(N, N, generator=g)
    b = torch.randn(N, N, generator=g)
    a_dev, b_dev = a.to(device), b.to(device)
    # The first launch of each kernel signature (entry point and dtypes) runs at the
    # call, where its dtype support is decided (ARCHITECTURE.md, "Execution model"):
    # a small product first, so the long ones below are queued.
    a_dev[:2, :2] @ b_dev[:2, :2]
    return a, b, a_dev, b_dev


def test_launch_returns_before_the_kernel_has_run():
    _, _, a, b = long_operands()
    torch.oxide.synchronize()
    stream = torch.oxide.current_stream()
    c = a @ b
    assert not stream.query(), "the product was still running when the call returned"
    stream.synchronize()
    assert stream.query()
    assert c.shape == (N, N)


def test_host_reads_wait_for_the_stream():
    a_cpu, b_cpu, a, b = long_operands(seed=1)
    expected = a_cpu @ b_cpu
    c = a @ b
    # .item() right after a long kernel sees its result.
    assert c[3, 5].item() == pytest.approx(expected[3, 5].item(), rel=1e-4, abs=1e-3)
    c = a @ b
    torch.testing.assert_close(c.cpu(), expected, rtol=1e-4, atol=1e-3)
    c = (a @ b) > 0
    torch.testing.assert_close(torch.nonzero(c).cpu(), torch.nonzero(expected > 0))
    d = a @ b
    assert torch.equal(d > 0, c)
    e = a @ b
    assert str(e[:2, :2].cpu()) == str(e[:2, :2]).replace(", device='oxide:0'", "")


def _launch_line(marker: str) -> int:
    """The line of this file holding `marker` (a comment at a launching call)."""
    with open(__file__) as f:
        return next(n for n, line in enumerate(f, 1) if line.rstrip().endswith(marker) and "def " not in line)


def test_queued_kernel_error_is_raised_at_the_next_synchronization():
    x = torch.arange(6.0, device="oxide")
    bad = torch.tensor([0, 9], device="oxide")
    x[torch.tensor([0, 1], device="oxide")]  # the signature's first launch runs at the call
    y = x[bad]  # launch: index
    z = x + 1  # later work on the stream
    with pytest.raises(RuntimeError) as raised:
        torch.oxide.synchronize()
    message = str(raised.value)
    # The error names the kernel and the Python line that launched it, not the synchronizing line.
    assert "kernel launched earlier failed: oxide_index" in message, message
    where = f"test_async.py:{_launch_line('# launch: index')} (in test_queued_kernel_error_is_raised_at_the_next"
    assert where in message, message
    assert "9" in message and "OXIDE_LAUNCH_BLOCKING" in message, message
    # Not sticky: the stream ran the later work, runs new work, and the error was reported once.
    torch.testing.assert_close(z.cpu(), torch.arange(6.0) + 1)
    w = x * 2
    torch.oxide.synchronize()
    torch.testing.assert_close(w.cpu(), torch.arange(6.0) * 2)
    assert y.shape == (2,)


def _cross_entropy(logits, target):
    return torch.nn.functional.cross_entropy(logits, target)  # launch: nll_loss


def _floor_divide(a, b):
    return a // b  # launch: div_floor


@pytest.mark.parametrize(
    ("name", "launch", "good", "bad"),
    [("nll_loss", _cross_entropy, [0, 1, 2], [0, 1, 7]), ("div_floor", _floor_divide, [1, 2, 3], [1, 0, 3])],
)
def test_queued_value_errors_name_operator_and_user_line(name, launch, good, bad):
    """Errors of kernels that check values name the operator and the first line outside
    torch (F.cross_entropy's caller, not torch/nn/functional.py)."""
    a = torch.randn(3, 4, device="oxide") if name == "nll_loss" else torch.tensor([4, 5, 6], device="oxide")
    launch(a, torch.tensor(good, device="oxide"))  # warm: queued from now on
    torch.oxide.synchronize()
    out = launch(a, torch.tensor(bad, device="oxide"))
    with pytest.raises(RuntimeError) as raised:
        out.cpu()
    message = str(raised.value)
    assert f"{name} (oxide_" in message, message
    assert f"test_async.py:{_launch_line(f'# launch: {name}')} " in message, message
    assert "torch/nn/functional.py" not in message, message


def test_grad_scaler_unscale_does_not_synchronize():
    """found_inf is written by the unscale kernel on the device (CUDA's behaviour), so
    GradScaler.unscale_ queues its work instead of reading a flag on the host."""
    _, _, a, b = long_operands(seed=11)
    model = torch.nn.Linear(4, 4).to("oxide")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("oxide", init_scale=4.0)
    for step, poison in enumerate((False, False, True, False)):
        opt.zero_grad()
        scaler.scale(model(torch.ones(2, 4, device="oxide")).sum()).backward()
        if poison:
            model.weight.grad[0, 0] = float("inf")
        expected = model.weight.grad.cpu() / scaler.get_scale()
        torch.oxide.synchronize()
        c = a @ b  # a long kernel ahead of the unscale
        scaler.unscale_(opt)
        # (Step 0 launches each kernel signature for the first time: those run at the call.)
        assert step == 0 or not torch.oxide.current_stream().query(), "unscale_ waited for the stream"
        found = opt_state_found_inf(scaler, opt)
        assert found == (1.0 if poison else 0.0)
        if not poison:
            torch.testing.assert_close(model.weight.grad.cpu(), expected)
        scaler.step(opt)
        scaler.update()
        del c
    assert scaler.get_scale() == 2.0, "one overflow halved the scale"


@pytest.mark.parametrize("kind", ["adamw", "adam-tensor-lr", "sgd"])
def test_fused_optimizer_steps_are_queued_and_match_cpu(kind):
    """The step counts, a tensor lr, GradScaler's scale and found_inf are read by the fused
    kernels on the device (as CUDA's are), so a step with GradScaler queues its work; the
    parameters still match the same steps on CPU, a skipped (overflowed) step included."""
    _, _, a, b = long_operands(seed=12)

    def make(device):
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 4).to(device)
        if kind == "sgd":
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True)
        else:
            lr = torch.tensor(0.01) if kind == "adam-tensor-lr" else 0.01
            cls = torch.optim.Adam if kind == "adam-tensor-lr" else torch.optim.AdamW
            opt = cls(model.parameters(), lr=lr, fused=True)
        return model, opt, torch.amp.GradScaler(device.split(":")[0], init_scale=8.0)

    results = {}
    for device in ("cpu", "oxide"):
        model, opt, scaler = make(device)
        x = torch.linspace(-1, 1, 16).reshape(2, 8).to(device)
        for step in range(4):
            opt.zero_grad()
            scaler.scale(model(x).square().sum()).backward()
            if step == 2:
                model.bias.grad[0] = float("inf")  # the step is skipped and the scale halves
            if device == "oxide":
                torch.oxide.synchronize()
                c = a @ b  # a long kernel ahead of the step
            scaler.step(opt)
            if device == "oxide" and step > 0:  # step 0 launches each signature for the first time
                assert not torch.oxide.current_stream().query(), "the optimizer step waited for the stream"
            scaler.update()
            if device == "oxide":
                del c
        results[device] = [p.detach().cpu() for p in model.parameters()] + [torch.tensor(scaler.get_scale())]
    torch.testing.assert_close(results["oxide"], results["cpu"])


def opt_state_found_inf(scaler, opt) -> float:
    per_device = scaler._per_optimizer_states[id(opt)]["found_inf_per_device"]
    return sum(v.item() for v in per_device.values())


def test_launch_blocking_raises_at_the_call():
    x = torch.arange(6.0, device="oxide")
    bad = torch.tensor([0, 9], device="oxide")
    x[torch.tensor([0, 1], device="oxide")]  # queued launches from now on, but for the blocking block
    with torch.oxide._LaunchBlocking():
        with pytest.raises(IndexError):
            x[bad]
    torch.oxide.synchronize()


def test_launch_blocking_environment_variable():
    code = """
        import torch, torch_oxide
        assert torch.oxide._launch_blocking()
        x = torch.arange(6.0, device="oxide")
        x[torch.tensor([0, 1], device="oxide")]  # without the variable, later launches would be queued
        try:
            x[torch.tensor([0, 9], device="oxide")]
        except IndexError as e:
            print("raised at the call:", e)
    """
    r = run_python(code, env={"OXIDE_LAUNCH_BLOCKING": "1"})
    assert r.returncode == 0, r.stderr
    assert "raised at the call" in r.stdout
    r = run_python("import torch, torch_oxide; torch.ones(1, device='oxide')", env={"OXIDE_LAUNCH_BLOCKING": "yes"})
    assert r.returncode != 0 and "OXIDE_LAUNCH_BLOCKING" in r.stderr


def test_events_time_device_execution():
    _, _, a, b = long_operands(seed=2)
    torch.oxide.synchronize()
    start = torch.Event(device="oxide", enable_timing=True)
    end = torch.Event(device="oxide", enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    c = a @ b
    end.record()
    enqueued = time.perf_counter() - t0
    assert not end.query(), "recording does not wait for the product"
    end.synchronize()
    wall = time.perf_counter() - t0
    ms = start.elapsed_time(end)
    # The product ran between the two events, after the host had moved on.
    assert ms > enqueued * 1e3
    assert ms >= 0.5 * wall * 1e3
    del c


def test_wait_event_orders_streams_without_blocking_the_host():
    a_cpu, b_cpu, a, b = long_operands(seed=3)
    side = torch.Stream(device="oxide")
    done = torch.Event(device="oxide")
    with torch.oxide.stream(side):
        c = a @ b
        done.record()
    main = torch.oxide.current_stream()
    main.wait_event(done)
    assert not side.query()
    d = c + 1  # on the main stream, after the side stream's product
    torch.testing.assert_close(d.cpu(), a_cpu @ b_cpu + 1, rtol=1e-4, atol=1e-3)


def test_record_stream_keeps_a_block_from_reuse_while_another_stream_reads_it():
    a_cpu, b_cpu, _, _ = long_operands(seed=4)
    expected = a_cpu @ b_cpu
    side = torch.Stream(device="oxide")
    a = a_cpu.to("oxide")
    b = b_cpu.to("oxide")
    torch.oxide.synchronize()
    side.wait_stream(torch.oxide.current_stream())
    with torch.oxide.stream(side):
        c = a @ b  # reads a, allocated on the default stream
    a.record_stream(side)
    address = a.data_ptr()
    del a
    # A block of a's size on the default stream: not a's block while the side stream may read it.
    sentinel = torch.full((N, N), 1e30, device="oxide")
    if sentinel.data_ptr() == address:
        pytest.fail("a block recorded on a busy stream was reused")
    side.synchronize()
    torch.testing.assert_close(c.cpu(), expected, rtol=1e-4, atol=1e-3)
    del sentinel
    # Once the side stream is done, the block returns to the default stream's cache.
    reused = torch.empty(N, N, device="oxide")
    assert reused.data_ptr() == address


def test_freed_block_is_reused_at_once_on_its_own_stream():
    _, _, a, b = long_operands(seed=5)
    c = a @ b
    address = c.data_ptr()
    del c  # the product may still be running: stream order protects the block
    d = torch.ones(N, N, device="oxide")
    assert d.data_ptr() == address
    torch.testing.assert_close(d.cpu(), torch.ones(N, N))


def test_copies_between_devices_are_ordered_against_both_streams():
    a_cpu, b_cpu, a0, b0 = long_operands("oxide:0", seed=6)
    a1, b1 = a_cpu.to("oxide:1"), b_cpu.to("oxide:1")
    expected = a_cpu @ b_cpu
    busy1 = a1 @ b1  # device 1 busy too
    x0 = a0 @ b0
    y1 = x0.to("oxide:1")  # waits for the product on device 0
    x0.zero_()  # device 0's later work waits for the copy
    torch.testing.assert_close(y1.cpu(), expected, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(busy1.cpu(), expected, rtol=1e-4, atol=1e-3)
    assert not x0.cpu().any()


def test_pinned_copies_are_queued_and_keep_their_block():
    a_cpu, b_cpu, a, b = long_operands(seed=9)
    stream = torch.oxide.current_stream()
    host = torch.randn(1 << 20).pin_memory()
    original = host.clone()
    product = a @ b  # the stream is busy: the copies below are queued behind the product
    dev = host.to("oxide", non_blocking=True)
    assert not stream.query(), "a non-blocking copy from pinned memory does not wait"
    address = host.data_ptr()
    del host  # freed while its copy is still queued: the block must outlive the copy
    other = torch.empty(1 << 20).pin_memory().fill_(7.0)
    assert other.data_ptr() != address
    torch.testing.assert_close(dev.cpu(), original)

    out = torch.empty(N, N).pin_memory()
    product = a @ b
    out.copy_(product, non_blocking=True)
    assert not stream.query(), "a non-blocking copy into pinned memory does not wait"
    done = torch.Event(device="oxide")
    done.record()
    done.synchronize()
    torch.testing.assert_close(out, a_cpu @ b_cpu, rtol=1e-4, atol=1e-3)
    # to("cpu", non_blocking=True) makes a pinned destination, as for CUDA: queued too.
    product = a @ b
    to_host = product.to("cpu", non_blocking=True)
    assert to_host.is_pinned()
    stream.synchronize()
    torch.testing.assert_close(to_host, a_cpu @ b_cpu, rtol=1e-4, atol=1e-3)
    # A pageable destination is written before the call returns.
    product = a @ b
    pageable = torch.empty(N, N)
    pageable.copy_(product, non_blocking=True)
    torch.testing.assert_close(pageable, a_cpu @ b_cpu, rtol=1e-4, atol=1e-3)


def test_autograd_with_the_forward_on_a_side_stream():
    g = torch.Generator().manual_seed(7)
    w_cpu = torch.randn(256, 256, generator=g, requires_grad=True)
    x_cpu = torch.randn(64, 256, generator=g)
    w = w_cpu.detach().to("oxide").requires_grad_()
    x = x_cpu.to("oxide")
    side = torch.Stream(device="oxide")
    side.wait_stream(torch.oxide.current_stream())
    with torch.oxide.stream(side):
        loss = torch.tanh(x @ w).sum()
    torch.oxide.current_stream().wait_stream(side)
    loss.backward()
    torch.tanh(x_cpu @ w_cpu).sum().backward()
    torch.testing.assert_close(w.grad.cpu(), w_cpu.grad, rtol=1e-4, atol=1e-4)


def test_compiled_graph_mixed_with_eager_launches():
    def f(x, w):
        return torch.relu(x @ w) * 2 + x.sum(dim=1, keepdim=True)

    compiled = torch.compile(f)
    g = torch.Generator().manual_seed(8)
    x_cpu, w_cpu = torch.randn(512, 512, generator=g), torch.randn(512, 512, generator=g)
    x, w = x_cpu.to("oxide"), w_cpu.to("oxide")
    for _ in range(3):
        y = compiled(x @ w, w)  # the eager product is queued when the graph starts
        x_next = y / y.abs().max()
        x_cpu_next = f(x_cpu @ w_cpu, w_cpu)
        torch.testing.assert_close(y.cpu(), x_cpu_next, rtol=1e-3, atol=1e-2)
        x, x_cpu = x_next, x_cpu_next / x_cpu_next.abs().max()


def test_threads_on_two_devices_against_cpu():
    """4 threads, 2 devices, each on its own stream, for several seconds; every result against CPU."""
    seconds = 30.0
    failures: list[str] = []
    counts = [0] * 4

    def worker(k: int) -> None:
        device = f"oxide:{k % 2}"
        g = torch.Generator().manual_seed(100 + k)
        stream = torch.Stream(device=device)
        deadline = time.monotonic() + seconds
        try:
            with torch.oxide.stream(stream):
                while time.monotonic() < deadline:
                    a = torch.randn(96, 96, generator=g)
                    b = torch.randn(96, 96, generator=g)
                    da, db = a.to(device), b.to(device)
                    got = (torch.softmax(da @ db, dim=1) + da.sin()).sum(dim=0)
                    want = (torch.softmax(a @ b, dim=1) + a.sin()).sum(dim=0)
                    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)
                    counts[k] += 1
        except Exception as e:  # noqa: BLE001  reported below with its thread
            failures.append(f"thread {k}: {e!r}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    assert all(c > 0 for c in counts), counts


def test_interpreter_exit_with_queued_work():
    code = """
        import torch, torch_oxide
        a = torch.randn(1500, 1500, device="oxide")
        for _ in range(4):
            a = a @ a
        print("queued")
    """
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    assert "queued" in r.stdout


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two CPUs for a kernel team of two threads")
def test_queued_kernels_use_the_thread_count_of_their_call():
    # A launch carries at::get_num_threads() of its call: a GEMM queued under
    # torch.set_num_threads(1) runs on one thread, under 2 on two. Observed as the
    # CPU time each of the process's threads spent on the products (/proc), so it
    # does not depend on how fast the machine is.
    proc = run_python(
        """
        import os, torch, torch_oxide

        def ticks():
            out = {}
            for tid in os.listdir("/proc/self/task"):
                try:
                    with open(f"/proc/self/task/{tid}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                out[tid] = int(fields[11]) + int(fields[12])  # utime + stime
            return out

        a, b = (torch.randn(1024, 1024, device="oxide") for _ in range(2))
        for threads in (1, 2):
            torch.set_num_threads(threads)
            torch.mm(a, b)
            torch.oxide.synchronize()
            before = ticks()
            for _ in range(30):
                torch.mm(a, b)
            torch.oxide.synchronize()
            after = ticks()
            grew = sorted((after[t] - before.get(t, 0) for t in after), reverse=True)
            print(threads, grew[0], grew[1])
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = {
        int(t): (int(first), int(second)) for t, first, second in (ln.split() for ln in proc.stdout.split("\n") if ln)
    }
    one, two = runs[1], runs[2]
    assert one[0] >= 10, runs  # at least 0.1 s of products: the figures mean something
    assert one[1] <= one[0] // 10, f"a second thread worked under set_num_threads(1): {runs}"
    assert two[1] >= two[0] // 3, f"the products stayed on one thread under set_num_threads(2): {runs}"
