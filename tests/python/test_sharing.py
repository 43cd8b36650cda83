"""oxide tensors sent to other processes through torch.multiprocessing share device memory.

Each case runs a script in a fresh interpreter (spawn and forkserver re-import the
script in the child, which ``python -c`` code cannot offer); the script asserts and
prints OK. ``make sanitize`` runs these too, with guarded device memory in both
processes.
"""

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="sharing maps memory files (Linux)")

PRELUDE = """
import gc, os, sys, time, types
import torch, torch_oxide
import torch.multiprocessing as mp
from multiprocessing.reduction import ForkingPickler

def expect_error(fn, *parts):
    try:
        fn()
    except RuntimeError as e:
        assert all(p in str(e) for p in parts), str(e)
        return
    raise AssertionError("no error")
"""


def run_script(tmp_path, code: str, *args: str, timeout: float = 240) -> None:
    script = tmp_path / "sharing_case.py"
    script.write_text(PRELUDE + textwrap.dedent(code))
    r = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=timeout, cwd=tmp_path
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), r.stdout + r.stderr


VALUES_AND_VIEWS = """
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
          torch.int32, torch.int8, torch.uint8, torch.bool, torch.complex64]

def child(inbox, outbox, arg):
    # Through the Process arguments (the start method's own descriptor passing).
    outbox.put(("arg", arg.cpu(), str(arg.device)))
    arg.fill_(7)
    torch.oxide.synchronize()
    outbox.put("arg written")
    got = inbox.get()
    outbox.put([(t.cpu(), str(t.device), t.stride(), t.storage_offset()) for t in got["tensors"]])
    outbox.put((type(got["param"]).__name__, got["param"].requires_grad, got["storage"].nbytes(),
                got["empty"].numel(), str(got["empty"].device)))
    for t in got["tensors"]:
        if t.dtype == torch.bool:
            t.logical_not_()
        else:
            t.add_(1)
    torch.oxide.synchronize()
    outbox.put("written")
    # Received memory cannot be sent on: refused at the call, in this process.
    received = got["tensors"][0]
    for obj in (received, received[1:], got["storage"], [received]):
        expect_error(lambda: ForkingPickler.dumps(obj), "received from another process", "clone")
    expect_error(lambda: outbox.put({"k": [received]}), "received from another process")
    ForkingPickler.dumps(received.clone())  # a clone is this process's memory
    # Hidden inside another object, Queue.put misses it; the receiver gets the error.
    outbox.put(types.SimpleNamespace(t=received))
    # The same storage received twice is one storage (one mapping).
    a, b = inbox.get(), inbox.get()
    outbox.put(a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())
    del got, received, a, b, obj
    gc.collect()
    outbox.put("released")

if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[1])
    inbox, outbox = ctx.Queue(), ctx.Queue()
    arg = torch.arange(5.0, device="oxide:1")
    p = ctx.Process(target=child, args=(inbox, outbox, arg))
    p.start()
    tag, seen, device = outbox.get(timeout=120)
    assert tag == "arg" and seen.tolist() == [0, 1, 2, 3, 4] and device == "oxide:1", (seen, device)
    assert outbox.get(timeout=120) == "arg written"
    assert arg.tolist() == [7] * 5, "the child's write is the parent's memory"

    base = torch.arange(24, device="oxide", dtype=torch.int16).view(4, 6)
    tensors = [base.to(dt) for dt in DTYPES]  # copies: none is int16
    tensors += [base[1:, ::2], base.t(), base[2], base.to(torch.float32)[:, 3:5].t()]
    expected = [t.cpu() for t in tensors]
    meta = [(str(t.device), t.stride(), t.storage_offset()) for t in tensors]
    param = torch.nn.Parameter(torch.ones(3, device="oxide"))
    storage = torch.arange(10.0, device="oxide").untyped_storage()
    empty = torch.empty(0, device="oxide:1")
    inbox.put({"tensors": tensors, "param": param, "storage": storage, "empty": empty})
    got = outbox.get(timeout=120)
    for (cpu, device, stride, offset), want, m in zip(got, expected, meta):
        assert (device, stride, offset) == m, ((device, stride, offset), m)
        assert cpu.dtype == want.dtype and torch.equal(cpu, want), (cpu, want)
    assert outbox.get(timeout=120) == ("Parameter", True, 40, 0, "oxide:1")
    assert outbox.get(timeout=120) == "written"
    for t, want in zip(tensors[: len(DTYPES)], expected):
        want = want.logical_not() if want.dtype == torch.bool else want + 1
        assert torch.equal(t.cpu(), want), (t, want)
    # The views' adds landed on their elements of base's storage, in the parent.
    want = expected[0].to(torch.int16) + 1  # base.t() covers every element
    want[1:, ::2] += 1
    want[2] += 1
    assert torch.equal(base.cpu(), want), (base, want)
    expect_error(lambda: outbox.get(timeout=120), "received from another process")
    x = torch.ones(4, device="oxide")
    inbox.put(x)
    inbox.put(x)
    assert outbox.get(timeout=120) is True
    assert outbox.get(timeout=120) == "released"
    p.join(60)
    assert p.exitcode == 0, p.exitcode
    assert torch_oxide._multiprocessing.ipc_collect() >= 1
    assert torch_oxide._multiprocessing.sent_count() == 0, "every receiver released its storages"
    print("OK")
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_values_views_and_writes_are_shared_both_ways(tmp_path, method):
    run_script(tmp_path, VALUES_AND_VIEWS, method)


LIFETIME = """
def child(inbox, outbox):
    x = inbox.get()
    outbox.put("received")
    assert inbox.get(timeout=120) == "check"
    outbox.put(bool((x == 3).all().item()))
    del x
    gc.collect()
    outbox.put("dropped")

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=child, args=(inbox, outbox))
    p.start()
    torch.oxide.empty_cache()
    before = torch.oxide.memory_allocated()
    x = torch.full((1 << 16,), 3.0, device="oxide")
    ptr = x.data_ptr()
    inbox.put(x)
    assert outbox.get(timeout=120) == "received"
    del x
    # The sender dropped its tensor; its block must not be handed out while the child maps it.
    ys = [torch.full((1 << 16,), 9.0, device="oxide") for _ in range(8)]
    assert all(y.data_ptr() != ptr for y in ys)
    assert torch.oxide.memory_allocated() - before == 9 * (1 << 18)
    assert torch_oxide._multiprocessing.ipc_collect() == 0, "the child still holds it"
    inbox.put("check")
    assert outbox.get(timeout=120) is True, "the child saw the sender's values, not a reused block"
    assert outbox.get(timeout=120) == "dropped"
    del ys
    torch.oxide.ipc_collect()
    assert torch.oxide.memory_allocated() == before, (torch.oxide.memory_allocated(), before)
    p.join(60)
    assert p.exitcode == 0
    print("OK")
"""


def test_the_sender_keeps_memory_until_the_receiver_drops_it(tmp_path):
    run_script(tmp_path, LIFETIME)


RESIZED = """
def child(inbox, outbox):
    xs = [inbox.get(), inbox.get()]
    outbox.put("received")
    assert inbox.get(timeout=120) == "check"
    outbox.put([x[:4].tolist() for x in xs])

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=child, args=(inbox, outbox))
    p.start()
    a = torch.full((1 << 16,), 3.0, device="oxide")
    b = torch.full((1 << 16,), 4.0, device="oxide")
    inbox.put(a)
    inbox.put(b)
    assert outbox.get(timeout=120) == "received"
    old = {a.data_ptr(), b.data_ptr()}
    # The sender frees the sent memory while its storages live on (FSDP frees
    # parameters this way): the blocks must wait for the receiver.
    a.untyped_storage().resize_(0)
    b.resize_(1 << 20)
    torch.oxide.empty_cache()
    ys = [torch.full((1 << 16,), 9.0, device="oxide") for _ in range(8)]
    assert not old & {y.data_ptr() for y in ys}, "a sent block was handed out again"
    assert torch_oxide._multiprocessing.sent_count() == 2
    inbox.put("check")
    assert outbox.get(timeout=120) == [[3.0] * 4, [4.0] * 4]
    p.join(60)
    assert p.exitcode == 0
    torch.oxide.ipc_collect()
    assert torch_oxide._multiprocessing.sent_count() == 0
    print("OK")
"""


def test_memory_freed_by_the_sender_waits_for_the_receiver(tmp_path):
    run_script(tmp_path, RESIZED)


CAPTURE = """
def child(inbox, outbox):
    outbox.put(inbox.get().tolist())

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=child, args=(inbox, outbox))
    p.start()
    x = torch.full((2,), 2.0, device="oxide")
    y = torch.ones(2, device="oxide")
    g = torch.accelerator.Graph()
    s = torch.oxide.Stream()
    with torch.oxide.stream(s):
        g.capture_begin()
        y.add_(1)
        # Sending waits for the streams that use x, not for the capturing stream.
        inbox.put(x)
        assert outbox.get(timeout=120) == [2.0, 2.0]
        g.capture_end()
    g.replay()
    assert y.tolist() == [2.0, 2.0]
    p.join(60)
    print("OK")
"""


def test_a_send_during_a_capture_on_another_stream_leaves_the_capture_alone(tmp_path):
    run_script(tmp_path, CAPTURE)


def test_errors_a_queue_would_only_print_are_raised_by_put():
    import torch

    ctx = torch.multiprocessing.get_context("spawn")
    q = ctx.Queue()
    w = torch.ones(3, device="oxide", requires_grad=True)
    with pytest.raises(RuntimeError, match="non-leaf tensor which requires_grad"):
        q.put([w * 2])
    q.close()
    q.join_thread()


def test_a_forkserver_child_removes_its_memory_counter_file(tmp_path):
    run_script(
        tmp_path,
        """
def child():
    torch.ones(1, device="oxide")

if __name__ == "__main__":
    ctx = mp.get_context("forkserver")
    p = ctx.Process(target=child)
    p.start()
    p.join(120)
    assert p.exitcode == 0
    from torch_oxide.__main__ import _directory
    leftover = [f for f in os.listdir(_directory()) if f == f"torch-oxide-{p.pid}.mem"]
    assert not leftover, "the child left its /dev/shm file behind (it ends with os._exit)"
    print("OK")
""",
    )


NO_LEAKS = """
N = 100

def fds():
    return len(os.listdir("/proc/self/fd"))

def child(inbox, outbox):
    first = inbox.get()
    del first
    gc.collect()
    start = fds()
    for i in range(N):
        t = inbox.get()
        assert t[0].item() == i and t.shape == (1000,)
        del t
    gc.collect()
    outbox.put((start, fds()))

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=child, args=(inbox, outbox))
    p.start()
    inbox.put(torch.zeros(1000, device="oxide"))  # starts the feeder and the descriptor sharer
    time.sleep(1)
    torch.oxide.ipc_collect()
    start, shm = fds(), set(os.listdir("/dev/shm"))
    allocated = torch.oxide.memory_allocated()
    for i in range(N):
        inbox.put(torch.full((1000,), float(i), device="oxide"))
    child_start, child_end = outbox.get(timeout=180)
    assert child_end == child_start, ("the receiver leaked descriptors", child_start, child_end)
    p.join(60)
    assert p.exitcode == 0
    torch.oxide.ipc_collect()
    assert torch_oxide._multiprocessing.sent_count() == 0
    assert torch.oxide.memory_allocated() <= allocated, "every sent block was released"
    assert fds() <= start, ("the sender leaked descriptors", start, fds())  # (the child's pipes closed)
    # New files, less the live-memory counter files of other running processes: under
    # `pytest -n 2` (make sanitize) another test's processes publish theirs meanwhile,
    # and each removes its own at exit. The child's must be gone: it has exited.
    def other_live(name):
        pid = name.removeprefix("torch-oxide-").removesuffix(".mem")
        return name.endswith(".mem") and pid.isdigit() and int(pid) != p.pid and os.path.exists(f"/proc/{pid}")
    leaked = {n for n in set(os.listdir("/dev/shm")) - shm if not other_live(n)}
    assert not leaked, leaked
    print("OK")
"""


def test_a_hundred_tensors_through_a_queue_leak_nothing(tmp_path):
    run_script(tmp_path, NO_LEAKS)


STREAM_ORDER = """
def child(inbox, outbox):
    torch.ones(1, device="oxide").item()
    outbox.put("ready")
    x = inbox.get()
    outbox.put(x[-1].item())

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=child, args=(inbox, outbox))
    p.start()
    assert outbox.get(timeout=120) == "ready"
    x = torch.zeros(1 << 23, device="oxide")
    torch.oxide.synchronize()
    # Queued: about 0.3 s of work that still runs on the stream when put() is called.
    for _ in range(300):
        x.add_(1)
    assert not torch.oxide.current_stream().query()
    inbox.put(x)
    assert outbox.get(timeout=120) == 300.0, "the receiver read the memory before the queued work ran"
    p.join(60)
    print("OK")
"""


def test_the_receiver_sees_the_work_queued_before_the_send(tmp_path):
    run_script(tmp_path, STREAM_ORDER)


def test_a_tensor_through_pickling_in_one_process_is_the_same_memory():
    import multiprocessing.reduction

    import torch

    x = torch.arange(6.0, device="oxide")
    y = multiprocessing.reduction.ForkingPickler.loads(multiprocessing.reduction.ForkingPickler.dumps(x[2:]))
    assert y.tolist() == [2.0, 3.0, 4.0, 5.0]
    y.fill_(0)
    assert x.tolist() == [0.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    del y
    import gc

    gc.collect()
    import torch_oxide

    assert torch_oxide._multiprocessing.ipc_collect() >= 1
    assert torch_oxide._multiprocessing.sent_count() == 0


def test_fork_after_init_is_still_refused(tmp_path):
    run_script(
        tmp_path,
        """
def child(q):
    try:
        torch.ones(1, device="oxide")
        q.put("no error")
    except RuntimeError as e:
        q.put(str(e))

if __name__ == "__main__":
    torch.ones(1, device="oxide")
    ctx = mp.get_context("fork")
    q = ctx.SimpleQueue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    msg = q.get()
    p.join(60)
    assert "forked subprocess" in msg and "spawn" in msg, msg
    print("OK")
""",
    )


def test_a_receiver_on_a_missing_device_gets_a_clear_error(tmp_path):
    run_script(
        tmp_path,
        """
def child(q, out):
    try:
        q.get()
        out.put("no error")
    except RuntimeError as e:
        out.put(str(e))

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q, out = ctx.Queue(), ctx.Queue()
    x = torch.ones(2, device="oxide:1")      # the parent has two devices
    os.environ["OXIDE_DEVICE_COUNT"] = "1"   # the child has one
    p = ctx.Process(target=child, args=(q, out))
    p.start()
    q.put(x)
    msg = out.get(timeout=120)
    assert "invalid device index 1" in msg, msg
    p.join(60)
    assert torch.oxide.ipc_collect() is None and torch_oxide._multiprocessing.sent_count() == 0, "a failed receive holds nothing"
    print("OK")
""",
    )
