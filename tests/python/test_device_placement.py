"""Operands on the wrong device fail as they fail on CUDA.

Every operator registered for oxide runs the device check torchgen generates into
a real backend's registration (csrc/common/device_check.h): tensors on another oxide
device, or on the CPU, are refused with CUDA's "Expected all tensors to be on the
same device" error, except where PyTorch's native_functions.yaml lets an operator
take them (TensorIterator's CPU scalars, CPU indices, copies).
"""

import re
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.testing._internal.common_methods_invocations import op_db

SAME_DEVICE = "Expected all tensors to be on the same device"
# inner() checks device types itself before dispatch, with its own message (as on CUDA).
WRONG_DEVICE = SAME_DEVICE + "|Expected tensor to have oxide DeviceType"

a0 = lambda *s: torch.ones(*s, device="oxide:0")  # noqa: E731
a1 = lambda *s: torch.ones(*s, device="oxide:1")  # noqa: E731
cpu = lambda *s: torch.ones(*s)  # noqa: E731


# The operators the adversarial probe found accepting another device's operand.
FOUND = {
    "mm": lambda other: a0(2, 3) @ other(3, 2),
    "bmm": lambda other: torch.bmm(a0(2, 2, 3), other(2, 3, 2)),
    "addmm": lambda other: torch.addmm(a0(2, 2), a0(2, 3), other(3, 2)),
    "dot": lambda other: torch.dot(a0(3), other(3)),
    "vdot": lambda other: torch.vdot(a0(3), other(3)),
    "mv": lambda other: torch.mv(a0(2, 3), other(3)),
    "inner": lambda other: torch.inner(a0(2, 3), other(2, 3)),
    "tensordot": lambda other: torch.tensordot(a0(2, 3), other(3, 2), dims=1),
    "pdist_cdist": lambda other: torch.cdist(a0(2, 3), other(2, 3)),
    "linear": lambda other: F.linear(a0(2, 3), other(4, 3)),
    "conv2d_weight": lambda other: F.conv2d(a0(1, 1, 4, 4), other(1, 1, 2, 2)),
    "cat": lambda other: torch.cat([a0(2), other(2)]),
    "stack": lambda other: torch.stack([a0(2), other(2)]),
    "index_select_index": lambda other: a0(3, 2).index_select(0, other(2).long()),
    "scatter_index": lambda other: a0(3).scatter_(0, other(2).long(), a0(2)),
    "embedding_index": lambda other: F.embedding(other(2).long(), a0(3, 4)),
    "cross_entropy_target": lambda other: F.cross_entropy(a0(2, 3), other(2).long()),
    "nll_loss_target": lambda other: F.nll_loss(a0(2, 3), other(2).long()),
    "layer_norm_weight": lambda other: F.layer_norm(a0(2, 3), (3,), other(3)),
    "batch_norm_running_stats": lambda other: F.batch_norm(a0(2, 3), other(3), other(3), training=False),
    "gather_index": lambda other: a0(3, 3).gather(0, other(1, 3).long()),
    "where_other": lambda other: torch.where(a0(3) > 0, a0(3), other(3)),
}


@pytest.mark.parametrize("other", [a1, cpu], ids=["oxide:1", "cpu"])
@pytest.mark.parametrize("name", sorted(FOUND))
def test_wrong_device_operand_raises_cuda_error(name, other):
    with pytest.raises(RuntimeError, match=WRONG_DEVICE):
        FOUND[name](other)


def test_error_names_the_argument_and_the_devices():
    with pytest.raises(RuntimeError) as info:
        a0(2, 3) @ a1(3, 2)
    message = str(info.value)
    assert "mat2" in message and "oxide:0" in message and "oxide:1" in message


def test_what_pytorch_allows_still_works():
    x = torch.arange(6.0, device="oxide").view(2, 3)
    # TensorIterator operators take CPU scalars (0-dim tensors).
    torch.testing.assert_close((x + torch.tensor(2.0)).cpu(), x.cpu() + 2)
    torch.testing.assert_close(torch.where(x > 2, x, torch.tensor(0.0)).cpu(), torch.where(x.cpu() > 2, x.cpu(), 0.0))
    # Advanced indexing takes CPU indices, as on CUDA.
    torch.testing.assert_close(x[torch.tensor([1, 0])].cpu(), x.cpu()[torch.tensor([1, 0])])
    y = x.clone()
    y[torch.tensor([0])] = 7.0
    assert y[0].tolist() == [7.0, 7.0, 7.0]
    # Copies between devices.
    z = torch.empty(2, 3, device="oxide:1")
    z.copy_(x)
    torch.testing.assert_close(z.cpu(), x.cpu())
    torch.testing.assert_close(x.to("oxide:1").cpu(), x.cpu())
    # Per-tensor device pairs in a foreach list (CUDA's slow path).
    a = [torch.ones(2, device="oxide:0"), torch.ones(2, device="oxide:1")]
    out = torch._foreach_add(a, a)
    assert [t.device for t in out] == [a[0].device, a[1].device]
    assert all(t.tolist() == [2.0, 2.0] for t in out)


def test_fallback_checks_devices_too():
    # An operator without a native kernel runs on the CPU fallback, which would
    # otherwise move everything to the host and compute.
    x = torch.ones(3, 3, device="oxide:0")
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.ops.aten.linalg_cross(x, torch.ones(3, 3, device="oxide:1"))


# Operators of op_db that take an operand on another device on CUDA too (what
# they do with it is device-independent), each with the reason.
ALLOWED = {
    "broadcast_tensors": "only shapes are used",
    "expand_as": "only the other tensor's shape is used",
    "view_as": "only the other tensor's shape is used",
    "reshape_as": "only the other tensor's shape is used",
    "resize_as_": "only the other tensor's shape is used",
    "to": "the conversion target tensor only gives a device and dtype",
    "narrow": "start may be a 0-dim tensor read on the host",
    "diff": "prepend/append are concatenated after a copy to the input's device",
    "linspace": "start/end tensors are scalars read on the host",
    "logspace": "start/end tensors are scalars read on the host",
    "diagonal_scatter": "src is copied into a view (copy_ crosses devices)",
    "select_scatter": "src is copied into a view (copy_ crosses devices)",
    "slice_scatter": "src is copied into a view (copy_ crosses devices)",
    "as_strided_scatter": "src is copied into a view (copy_ crosses devices)",
    "tensor_split": "a CPU tensor of split indices is required",
    "__getitem__": "CPU index tensors are allowed (native_functions.yaml: NoCheck)",
    "nn.functional.ctc_loss": "targets may live on another device (native_functions.yaml: NoCheck)",
}


def _tensor_slots(sample):
    slots = [("input", None)] if isinstance(sample.input, torch.Tensor) else []
    slots += [("args", i) for i, a in enumerate(sample.args) if isinstance(a, torch.Tensor)]
    slots += [("kwargs", k) for k, a in sample.kwargs.items() if isinstance(a, torch.Tensor)]
    return slots


def _get(sample, slot):
    where, key = slot
    return sample.input if where == "input" else (sample.args[key] if where == "args" else sample.kwargs[key])


@pytest.mark.parametrize("target", ["oxide:1", "cpu"])
def test_every_opinfo_refuses_an_operand_on_another_device(target):
    """First float32 sample with two or more tensors of every OpInfo, its last
    tensor operand moved to `target` (for the CPU: one with dim > 0, since CPU
    scalars are allowed where TensorIterator runs)."""
    unexpected = []
    checked = 0
    for op in op_db:
        if op.name.startswith(("jiterator", "sparse.")) or torch.float32 not in op.supported_dtypes("cpu"):
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sample = next((s for s in op.sample_inputs("oxide", torch.float32) if len(_tensor_slots(s)) >= 2), None)
        except Exception:  # noqa: BLE001 - sample generation itself is not under test
            continue
        if sample is None:
            continue
        slots = [s for s in _tensor_slots(sample) if target != "cpu" or _get(sample, s).dim() > 0]
        if not slots:
            continue
        where, key = slots[-1]
        inp, args, kwargs = sample.input, list(sample.args), dict(sample.kwargs)
        if where == "input":
            inp = inp.to(target)
        elif where == "args":
            args[key] = args[key].to(target)
        else:
            kwargs[key] = kwargs[key].to(target)
        checked += 1
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                op(inp, *args, **kwargs)
        except RuntimeError as e:
            # Composite operators check first with messages of their own ("... on the same
            # device", "Expected tensor to have oxide:0 Device", "expected ... to be on cpu").
            if not re.search(r"device|to be on cpu", str(e), re.IGNORECASE):
                unexpected.append(f"{op.name}: {str(e).splitlines()[0][:160]}")
            continue
        except Exception as e:  # noqa: BLE001
            unexpected.append(f"{op.name}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
            continue
        if op.name not in ALLOWED:
            unexpected.append(f"{op.name}: ran with {where}[{key}] on {target}")
    assert checked > 150, checked
    assert not unexpected, "\n".join(unexpected)
