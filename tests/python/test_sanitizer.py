"""OXIDE_SANITIZE=1: each detector catches a seeded bug, and correct code passes.

The mode is read once per process, so every case runs in a fresh interpreter.
"""

import signal

import pytest
from conftest import run_python

SANITIZE = {"OXIDE_SANITIZE": "1", "OXIDE_FALLBACK": "silent"}

PRELUDE = """
import torch
import torch_oxide
side = torch.Stream(device="oxide")
default = torch.accelerator.current_stream()
def raises(fn, *needles):
    try:
        fn()
    except RuntimeError as e:
        msg = str(e)
        for n in needles:
            assert n in msg, (n, msg)
        return msg
    raise AssertionError("no sanitizer report")
"""


def sanitized(code: str) -> None:
    r = run_python(PRELUDE + code, env=SANITIZE)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK" in r.stdout, r.stdout + r.stderr


def test_a_read_of_memory_written_on_another_stream_without_a_wait_is_a_race():
    sanitized("""
x = torch.ones(1000, device="oxide")
x.add_(1)                                  # written on the default stream
with side:
    msg = raises(lambda: x * 3, "stream race", "reads it, last written by", "stream 0", "<string>:")
    # both Python lines are named: the read's and the write's
    assert msg.count("launched at <string>:") == 2, msg
print("OK")
""")


def test_a_write_of_memory_read_on_another_stream_without_a_wait_is_a_race():
    sanitized("""
x = torch.ones(1000, device="oxide")
torch.oxide.synchronize()
with side:
    y = x * 2                               # read on the side stream
msg = raises(lambda: x.zero_(), "stream race", "writes it, read by", "stream 1")
print("OK")
""")


def test_waits_and_synchronizations_order_the_streams():
    sanitized("""
x = torch.ones(1000, device="oxide")
x.add_(1)
side.wait_stream(default)                   # wait_stream
with side:
    y = x * 2
    y.add_(1)
e = side.record_event()
default.wait_event(e)                       # wait_event
z = y + 1
z.add_(1)
torch.oxide.synchronize()                   # host synchronization
with side:
    u = z * 3
side.synchronize()
x.copy_(u)                                  # the host saw the side stream's work complete
assert torch.equal(x.cpu(), torch.full((1000,), 21.0))
print("OK")
""")


def test_fresh_memory_is_filled_with_nans_and_a_recognisable_pattern():
    sanitized("""
for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
    e = torch.empty(64, dtype=dtype, device="oxide")
    assert torch.isnan(e.cpu().float()).all(), (dtype, e.cpu())
bits = torch.empty(4, dtype=torch.int64, device="oxide").cpu()
assert (bits == 0x7FF47FA07FA07FA0).all(), [hex(v) for v in bits.tolist()]
# an uninitialised read propagates: the sum of a fresh tensor is NaN, not a plausible number
assert torch.isnan(torch.empty(1000, device="oxide").sum().cpu())
print("OK")
""")


def test_a_block_freed_on_another_thread_is_filled_before_it_is_reused():
    # The fill of a freed block was queued after the block went back to the cache, so
    # a thread that allocated it in between (Gloo's workers drop tensors) saw its data
    # overwritten by NaNs: about 1% of these rounds before the fix.
    sanitized("""
import threading, time
stop = False
def churn():
    while not stop:
        t = torch.empty(256, device="oxide")
        del t
th = threading.Thread(target=churn)
th.start()
rounds = bad = 0
t0 = time.monotonic()
try:
    while time.monotonic() - t0 < 3 or rounds < 2000:
        x = torch.ones(256, device="oxide")
        bad += int(not bool((x.cpu() == 1).all()))
        rounds += 1
finally:
    stop = True
    th.join()
assert bad == 0, (bad, rounds)
print("OK")
""")


def test_memory_allocated_on_one_stream_and_used_on_another_unordered_is_a_race():
    sanitized("""
x = torch.empty(1000, device="oxide")       # allocated (and filled) on the default stream
with side:
    raises(lambda: x.fill_(1), "stream race", "the allocation's fill")
side.wait_stream(default)
with side:
    x.fill_(1)                              # ordered after the allocation: fine
print("OK")
""")


def test_freeing_a_tensor_another_stream_uses_without_record_stream_is_a_race():
    sanitized("""
x = torch.ones(1000, 100, device="oxide")
torch.oxide.synchronize()
with side:
    y = x * 2                               # the side stream reads x
ptr = x.data_ptr()
del x                                       # no x.record_stream(side)
msg = raises(lambda: torch.empty(1000, 100, device="oxide"), "freed while", "record_stream", "stream 1")
# With record_stream the allocator waits for the side stream: no report.
x = torch.ones(1000, 100, device="oxide")
side.wait_stream(default)
with side:
    y = x * 2
x.record_stream(side)
del x
z = torch.empty(1000, 100, device="oxide")
z.fill_(1)
print("OK")
""")


def test_a_graph_replay_is_ordered_with_eager_work_like_a_launch():
    sanitized("""
x = torch.randn(100, device="oxide")
g = torch.accelerator.Graph()
with g:
    y = x * 2
    t = y.exp()                             # a temporary of the graph's pool, freed in the capture
    z = t + 1
del t
with side:
    g.replay()                              # writes y and z on the side stream
raises(lambda: y + 1, "stream race", "oxide_graph_replay")
default.wait_stream(side)
w = z + 1                                   # ordered after the replay
x.fill_(3.0)                                # default writes what the graph reads
with side:
    raises(lambda: g.replay(), "stream race", "oxide_graph_replay")
    side.wait_stream(default)
    g.replay()
torch.oxide.synchronize()
assert torch.equal(y.cpu(), torch.full((100,), 6.0))
print("OK")
""")


def test_a_launch_on_freed_memory_is_a_use_after_free():
    # A library that kept a raw device pointer past the tensor's life: a DLPack
    # view (ctypes) of a block the caching allocator already holds as free.
    sanitized("""
import ctypes
from torch.utils.dlpack import from_dlpack
class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]
class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]
class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]
class DLManaged(ctypes.Structure):
    pass
DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManaged))
DLManaged._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]
x = torch.ones(256, device="oxide")
stale = x.data_ptr()
del x                                        # the block is free (cached)
shape = (ctypes.c_int64 * 1)(256)
keep = DELETER(lambda p: None)
m = DLManaged(DLTensor(stale, DLDevice(12, 0), 1, DLDataType(2, 32, 1), shape, None, 0), None, keep)
ctypes.pythonapi.PyCapsule_New.restype = ctypes.py_object
ctypes.pythonapi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
view = from_dlpack(ctypes.pythonapi.PyCapsule_New(ctypes.addressof(m), b"dltensor", None))
assert view.device.type == "oxide" and view.data_ptr() == stale
# (an output of the same size would take the freed block back from the cache first)
raises(lambda: view.sum(), "reads freed memory", hex(stale), "use after free")
raises(lambda: view.cpu(), "freed memory", "use after free")
del view
print("OK")
""")


def host_access(code: str):
    """Runs `code` (which dereferences a device pointer) under the sanitizer; returns the dead process."""
    r = run_python(PRELUDE + code, env=SANITIZE)
    assert r.returncode == -signal.SIGSEGV, (r.returncode, r.stdout + r.stderr)
    assert "UNREACHED" not in r.stdout, r.stdout
    return r


def test_host_code_reading_device_memory_is_caught_with_the_address_and_code():
    # A library handed a device pointer as if it were host memory (ctypes here; a
    # C++ extension reading data_ptr() is the same bug): it works on a device whose
    # memory is host memory and crashes on a real accelerator.
    code = """
import ctypes
x = torch.arange(8.0, device="oxide")
print("ADDR", hex(x.data_ptr()), flush=True)
value = ctypes.c_float.from_address(x.data_ptr()).value   # the host reads a device pointer
print("UNREACHED", value)
"""
    r = host_access(code)
    line = next(n for n, text in enumerate((PRELUDE + code).splitlines(), 1) if "the host reads" in text)
    address = r.stdout.split("ADDR ")[1].split()[0]
    report = r.stderr
    assert f"oxide sanitizer: host access to device memory: a read of oxide:0 address {address}" in report, report
    assert "by the instruction at 0x" in report and "_ctypes" in report, report  # the accessing code
    # faulthandler then prints the Python stack of the access, down to the line.
    assert "Segmentation fault" in report and f'File "<string>", line {line}' in report, report


def test_host_code_writing_device_memory_is_caught():
    r = host_access("""
import ctypes
x = torch.zeros(1000, device="oxide")
ctypes.memset(x.data_ptr() + 64, 1, 16)                  # the host writes through a device pointer
print("UNREACHED")
""")
    assert "host access to device memory: a write to oxide:0 address 0x" in r.stderr, r.stderr
    assert "libc" in r.stderr, r.stderr  # memset's shared object


def test_kernels_copies_host_views_and_compiled_kernels_reach_guarded_memory():
    # Device addresses are not host memory under the sanitizer (write(2) from one
    # fails with EFAULT instead of faulting); every sanctioned path still works.
    sanitized("""
import ctypes, errno, os
x = torch.arange(1000, dtype=torch.float32, device="oxide")
r, w = os.pipe()
try:
    os.write(w, (ctypes.c_char * 16).from_address(x.data_ptr()))
    raise AssertionError("a device address was readable by the host")
except OSError as e:
    assert e.errno == errno.EFAULT, e
host = torch.ops.oxide._host_view(x)                     # the collectives' zero-copy view
torch.accelerator.synchronize()
assert host.device.type == "cpu" and host.data_ptr() != x.data_ptr() and host[999].item() == 999
os.write(w, (ctypes.c_char * 16).from_address(host.data_ptr()))
y = (x * 2 + 1).sin()                                    # kernels
torch.testing.assert_close(y.cpu(), (torch.arange(1000.0) * 2 + 1).sin())  # copies
assert x[3].item() == 3.0
z = torch.ones(4, 4, device="oxide").T.contiguous() @ torch.ones(4, 4, device="oxide")
assert z.cpu().eq(4).all()
f = torch.compile(lambda a: (a.relu() * 3).sum(0))       # Inductor's C++ kernel on host views
a = torch.randn(64, 8)
torch.testing.assert_close(f(a.to("oxide")).cpu(), f(a))
print(str(y[:2]))                                        # printing copies
print("OK")
""")


def test_the_device_memory_is_host_memory_without_the_sanitizer():
    r = run_python(
        PRELUDE
        + """
import ctypes
x = torch.full((4,), 7.0, device="oxide")
torch.accelerator.synchronize()
print(ctypes.c_float.from_address(x.data_ptr()).value, "OK")  # zero-copy host access is allowed here
""",
        env={"OXIDE_SANITIZE": None},
    )
    assert r.returncode == 0 and "7.0 OK" in r.stdout, r.stdout + r.stderr


def test_a_training_step_on_a_side_stream_passes():
    sanitized("""
import torch.nn as nn
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).oxide()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 16).oxide()
t = torch.randint(0, 4, (8,)).oxide()
side.wait_stream(default)
with side:
    for _ in range(3):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), t).backward()
        opt.step()
default.wait_stream(side)
print(model(x).sum().item())
print("OK")
""")


def test_the_sanitizer_is_off_by_default():
    r = run_python(
        PRELUDE
        + """
x = torch.ones(10, device="oxide")
with side:
    y = x * 2     # unordered, but nothing checks it
print(torch.empty(2, dtype=torch.int64, device="oxide").cpu().tolist() != [0x7FF47FA07FA07FA0] * 2, "OK")
""",
        env={"OXIDE_SANITIZE": None},  # unset, also under `make sanitize`
    )
    assert r.returncode == 0 and "True OK" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("value", ["0", ""])
def test_other_values_leave_it_off(value):
    r = run_python(
        PRELUDE + "x = torch.ones(10, device='oxide')\nwith side:\n    y = x * 2\nprint('OK')",
        env={"OXIDE_SANITIZE": value},
    )
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr
