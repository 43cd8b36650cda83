"""OXIDE_SANITIZE=1: each detector catches a seeded bug, and correct code passes.

The mode is read once per process, so every case runs in a fresh interpreter.
"""

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
