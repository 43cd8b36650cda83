"""DLPack: oxide tensors through torch.utils.dlpack capsules, zero-copy."""

import pytest
import torch
from torch.utils.dlpack import from_dlpack, to_dlpack

DTYPES = [
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.bool,
    torch.complex64,
    torch.complex128,
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip_is_zero_copy(dtype):
    t = torch.arange(6, device="oxide").to(dtype)
    y = from_dlpack(to_dlpack(t))
    assert y.device == t.device and y.dtype == dtype and y.data_ptr() == t.data_ptr()
    assert torch.equal(y.cpu(), t.cpu())


def test_views_keep_offset_and_strides():
    x = torch.arange(12.0, device="oxide:1").reshape(3, 4)
    for view in (x[:, 1:3], x.t(), x[1], x[::2, ::3]):
        y = from_dlpack(to_dlpack(view))
        assert y.device == view.device
        assert (y.shape, y.stride(), y.data_ptr()) == (view.shape, view.stride(), view.data_ptr())
        assert torch.equal(y.cpu(), view.cpu())
    # Same memory: a write through one is seen through the other.
    y = from_dlpack(to_dlpack(x))
    y[0, 0] = -1.0
    assert x[0, 0].item() == -1.0


def test_queued_work_is_ordered_for_a_consumer_on_the_same_device():
    # The capsule's consumer here is oxide itself: its kernels queue behind the producer's.
    a = torch.randn(256, 256, device="oxide")
    b = a @ a
    y = from_dlpack(to_dlpack(b))
    torch.testing.assert_close((y + 0).cpu(), (a.cpu() @ a.cpu()), rtol=1e-4, atol=1e-3)


def test_dlpack_device_limitation_of_torch_2_15():
    # torch 2.15's __dlpack_device__ (and so torch.from_dlpack(tensor)) compares the
    # device type with the literal "privateuse1" and refuses a renamed backend; the
    # capsule functions above are the call that works (README, "More than one process").
    x = torch.ones(2, device="oxide")
    with pytest.raises((RuntimeError, ValueError, BufferError), match="oxide"):
        x.__dlpack_device__()
