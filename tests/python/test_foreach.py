"""`_foreach_*` operators on oxide (csrc/aten/optim/foreach.cpp) against CPU PyTorch.

Lists of contiguous float32/float64 tensors take the native multi-tensor path; any
other list goes to PyTorch's per-tensor kernels. Both are compared with CPU, the
fast path is shown to be taken (no per-tensor operator runs), and errors match CPU's.
"""

import pytest
import torch
from torch.profiler import profile

SHAPES = [(5, 3), (), (0,), (7,), (2, 3, 4), (40000,)]  # 40000: above the kernels' threading grain


def make(dtype, seed, positive=False, shapes=SHAPES):
    g = torch.Generator().manual_seed(seed)
    out = []
    for s in shapes:
        t = torch.randn(s, generator=g, dtype=torch.float64).to(dtype)
        out.append(t.abs() + 0.5 if positive else t)
    return out


def to_oxide(ts):
    return [t.to("oxide") for t in ts]


# name -> (function of (lists, scalars), how many tensor lists, positive inputs, in-place)
S = 0.37
CASES = {
    "add_.Scalar": (lambda a: torch._foreach_add_(a[0], S), 1, False, True),
    "add_.Scalar-int": (lambda a: torch._foreach_add_(a[0], 3), 1, False, True),
    "add.Scalar": (lambda a: torch._foreach_add(a[0], S), 1, False, False),
    "add_.ScalarList": (lambda a: torch._foreach_add_(a[0], [0.1 * k for k in range(len(a[0]))]), 1, False, True),
    "add_.List": (lambda a: torch._foreach_add_(a[0], a[1], alpha=-0.25), 2, False, True),
    "add.List": (lambda a: torch._foreach_add(a[0], a[1], alpha=2), 2, False, False),
    "mul_.Scalar": (lambda a: torch._foreach_mul_(a[0], S), 1, False, True),
    "mul_.ScalarList": (lambda a: torch._foreach_mul_(a[0], [1.0 + k for k in range(len(a[0]))]), 1, False, True),
    "mul.ScalarList": (lambda a: torch._foreach_mul(a[0], [1.0 - k for k in range(len(a[0]))]), 1, False, False),
    "mul_.List": (lambda a: torch._foreach_mul_(a[0], a[1]), 2, False, True),
    "mul_.Tensor": (lambda a: torch._foreach_mul_(a[0], a[1][1]), 2, False, True),  # a[1][1] is 0-dim
    "div_.Scalar": (lambda a: torch._foreach_div_(a[0], 3.0), 1, False, True),
    "div_.ScalarList": (lambda a: torch._foreach_div_(a[0], [0.5 + k for k in range(len(a[0]))]), 1, False, True),
    "div_.List": (lambda a: torch._foreach_div_(a[0], a[1]), 2, True, True),
    "lerp_.Scalar": (lambda a: torch._foreach_lerp_(a[0], a[1], 0.1), 2, False, True),
    "lerp_.Scalar-high": (lambda a: torch._foreach_lerp_(a[0], a[1], 0.9), 2, False, True),
    "addcmul_.Scalar": (lambda a: torch._foreach_addcmul_(a[0], a[1], a[2], value=0.5), 3, False, True),
    "addcmul.Scalar": (lambda a: torch._foreach_addcmul(a[0], a[1], a[2], value=-2), 3, False, False),
    "addcdiv_.Scalar": (lambda a: torch._foreach_addcdiv_(a[0], a[1], a[2], value=0.5), 3, True, True),
    "addcdiv_.ScalarList": (
        lambda a: torch._foreach_addcdiv_(a[0], a[1], a[2], [-0.1 * k for k in range(len(a[0]))]),
        3,
        True,
        True,
    ),
    "sqrt": (lambda a: torch._foreach_sqrt(a[0]), 1, True, False),
    "sqrt_": (lambda a: torch._foreach_sqrt_(a[0]), 1, True, True),
    "neg": (lambda a: torch._foreach_neg(a[0]), 1, False, False),
    "abs": (lambda a: torch._foreach_abs(a[0]), 1, False, False),
    "reciprocal_": (lambda a: torch._foreach_reciprocal_(a[0]), 1, True, True),
}


def run_case(name, dtype, device_fn):
    """Runs case `name` on CPU and on oxide, compares, and returns the operators the oxide call ran."""
    fn, nlists, positive, inplace = CASES[name]
    cpu = [make(dtype, 10 * k, positive) for k in range(nlists)]
    dev = [device_fn(ts) for ts in cpu]
    out_c = fn(cpu)
    with profile() as prof:
        out_o = fn(dev)
    if inplace:
        out_c, out_o = cpu[0], dev[0]
    assert len(out_o) == len(out_c)
    for c, o in zip(out_c, out_o):
        assert o.device.type == "oxide" and o.dtype == c.dtype and o.shape == c.shape
        torch.testing.assert_close(
            o.cpu(), c, rtol=1e-6 if dtype == torch.float32 else 1e-12, atol=1e-7, equal_nan=True
        )
    return [e.name for e in prof.events()]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", list(CASES))
def test_foreach_fast_path_matches_cpu(name, dtype, native_only):
    names = run_case(name, dtype, to_oxide)
    # The native path launches the Rust kernels directly: no per-tensor aten operator runs
    # under the foreach call (PyTorch's slow kernel would show aten::add_, aten::mul, ...).
    foreach = [n for n in names if n.startswith("aten::_foreach_")]
    assert foreach, names
    per_tensor = {
        "aten::add_",
        "aten::add",
        "aten::mul_",
        "aten::mul",
        "aten::div_",
        "aten::lerp_",
        "aten::addcmul_",
        "aten::addcmul",
        "aten::addcdiv_",
        "aten::sqrt",
        "aten::sqrt_",
        "aten::neg",
        "aten::abs",
        "aten::reciprocal_",
    }
    assert not per_tensor & set(names), sorted(per_tensor & set(names))


def noncontiguous(ts):
    # Same values, transposed / strided storage on oxide: the per-tensor path.
    out = []
    for t in ts:
        o = t.to("oxide")
        if o.dim() >= 2:
            o = o.transpose(0, 1).contiguous().transpose(0, 1)
        elif o.dim() == 1 and o.numel() > 1:
            o = torch.stack([o, o], 1).to("oxide")[:, 0]
        out.append(o)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", list(CASES))
def test_foreach_other_lists_match_cpu(name, dtype, native_only):
    if dtype == torch.float32:
        assert any(not t.is_contiguous() for t in noncontiguous(make(dtype, 0)))
        names = run_case(name, dtype, noncontiguous)
        assert len([n for n in names if not n.startswith("aten::_foreach_")]) > 0  # the per-tensor path ran
        return
    fn, nlists, positive, inplace = CASES[name]
    cpu = [make(dtype, 10 * k, positive) for k in range(nlists)]
    dev = [to_oxide(ts) for ts in cpu]
    out_c, out_o = fn(cpu), fn(dev)
    if inplace:
        out_c, out_o = cpu[0], dev[0]
    for c, o in zip(out_c, out_o):
        torch.testing.assert_close(o.cpu(), c, equal_nan=True)


def test_foreach_scalar_semantics_match_cpu():
    # An overflowing scalar gives inf (not a conversion error); integer and bool scalars.
    for args in [(1e300,), (True,), (-(2**40),)]:
        c = [torch.ones(3), torch.full((2,), -2.0)]
        o = to_oxide(c)
        torch._foreach_mul_(c, *args)
        torch._foreach_mul_(o, *args)
        for a, b in zip(c, o):
            torch.testing.assert_close(b.cpu(), a)


def test_foreach_aliasing_and_self_reads():
    # The same list as both operands, and a 0-dim scalar tensor that is also a list entry.
    c = make(torch.float32, 1)
    o = to_oxide(c)
    torch._foreach_add_(c, c, alpha=0.5)
    torch._foreach_add_(o, o, alpha=0.5)
    torch._foreach_mul_(c, c[1])
    torch._foreach_mul_(o, o[1])
    for a, b in zip(c, o):
        torch.testing.assert_close(b.cpu(), a)


def test_foreach_partial_overlap_raises_like_cpu():
    base_c = torch.arange(6.0)
    base_o = base_c.to("oxide")
    with pytest.raises(RuntimeError, match="single memory location") as ec:
        torch._foreach_add_([base_c[1:]], [base_c[:-1]])
    with pytest.raises(RuntimeError, match="single memory location") as eo:
        torch._foreach_add_([base_o[1:]], [base_o[:-1]])
    assert str(ec.value).split("\n")[0] == str(eo.value).split("\n")[0]


@pytest.mark.parametrize(
    "call",
    [
        lambda d: torch._foreach_add_([torch.ones(2, device=d)], [torch.ones(2, device=d)] * 2),
        lambda d: torch._foreach_mul_([torch.ones(2, device=d)] * 3, [1.0, 2.0]),
        lambda d: torch._foreach_add_([], 1.0),
        lambda d: torch._foreach_add_([torch.ones(2, device=d)], [torch.ones(3, device=d)]),
        lambda d: torch._foreach_mul_([torch.ones(2, device=d)], torch.ones(2, device=d)),
    ],
    ids=["list-length", "scalarlist-length", "empty", "shape", "tensor-not-0-dim"],
)
def test_foreach_errors_match_cpu(call):
    def message(device):
        with pytest.raises(RuntimeError) as e:
            call(device)
        return str(e.value).split("\n")[0].replace("oxide:0", "DEV").replace("cpu", "DEV").replace("oxide", "DEV")

    assert message("oxide") == message("cpu")


def test_foreach_cpu_operand_raises():
    with pytest.raises(RuntimeError, match="device"):
        torch._foreach_add_([torch.ones(2, device="oxide")], [torch.ones(2)])


def test_foreach_across_two_oxide_devices_matches_cpu():
    c = [torch.randn(4), torch.randn(3)]
    o = [c[0].to("oxide:0"), c[1].to("oxide:1")]
    torch._foreach_mul_(c, 3.0)
    torch._foreach_mul_(o, 3.0)
    assert [t.device.index for t in o] == [0, 1]
    for a, b in zip(c, o):
        torch.testing.assert_close(b.cpu(), a)


FOREACH_OPTIMIZERS = {
    "Adam": dict(lr=1e-2, weight_decay=0.1),
    "AdamW": dict(lr=1e-2, weight_decay=0.05, amsgrad=True),
    "SGD": dict(lr=0.1, momentum=0.9, weight_decay=1e-3, nesterov=True),
    "RMSprop": dict(lr=1e-2, momentum=0.9, centered=True),
    "Adagrad": dict(lr=0.1),
    "NAdam": dict(lr=1e-2),
    "RAdam": dict(lr=1e-2),
    "Adamax": dict(lr=1e-2),
    "Adadelta": dict(lr=1.0),
}


@pytest.mark.parametrize("name", list(FOREACH_OPTIMIZERS))
def test_foreach_optimizers_match_cpu(name, native_only):
    # torch.optim picks foreach=True for oxide parameters by default; CPU runs the for-loop.
    cls = getattr(torch.optim, name)
    shapes = [(5, 3), (7,), (40000,)]
    params_c = [p.requires_grad_(True) for p in make(torch.float32, 3, shapes=shapes)]
    params_o = [p.detach().to("oxide").requires_grad_(True) for p in params_c]
    opt_c = cls(params_c, **FOREACH_OPTIMIZERS[name])
    opt_o = cls(params_o, **FOREACH_OPTIMIZERS[name])
    for step in range(3):
        for pc, po, g in zip(params_c, params_o, make(torch.float32, 100 + step, shapes=shapes)):
            pc.grad, po.grad = g, g.to("oxide")
        opt_c.step()
        opt_o.step()
    for pc, po in zip(params_c, params_o):
        torch.testing.assert_close(po.detach().cpu(), pc.detach(), rtol=1e-5, atol=1e-6)


def test_clip_grad_norm_matches_cpu(native_only):
    params_c = [p.requires_grad_(True) for p in make(torch.float32, 4, shapes=[(5, 3), (40000,)])]
    params_o = [p.detach().to("oxide").requires_grad_(True) for p in params_c]
    for pc, po, g in zip(params_c, params_o, make(torch.float32, 5, shapes=[(5, 3), (40000,)])):
        pc.grad, po.grad = g, g.to("oxide")
    nc = torch.nn.utils.clip_grad_norm_(params_c, 0.5)
    no = torch.nn.utils.clip_grad_norm_(params_o, 0.5)
    torch.testing.assert_close(no.cpu(), nc, rtol=1e-5, atol=1e-6)  # a 40000-element sum in another order
    for pc, po in zip(params_c, params_o):
        torch.testing.assert_close(po.grad.cpu(), pc.grad, rtol=1e-5, atol=1e-6)


def test_foreach_in_place_bumps_versions_like_cpu():
    # Autograd relies on the version counter to refuse a backward through a tensor that
    # an in-place update changed after it was saved.
    for device in ["cpu", "oxide"]:
        a, b = torch.ones(3, device=device), torch.ones(2, device=device)
        torch._foreach_add_([a, b, a], 1.0)
        torch._foreach_mul_([a], torch.tensor(2.0, device=device))
        torch._foreach_sqrt_([b])
        assert (a._version, b._version) == (3, 2), device
        x = torch.ones(3, device=device, requires_grad=True)
        s = x * 1
        w = s * s
        torch._foreach_add_([s], 1.0)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            w.sum().backward()


def test_foreach_in_place_on_inference_tensor_raises_like_cpu():
    for device in ["cpu", "oxide"]:
        with torch.inference_mode():
            t = torch.ones(3, device=device)
        with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
            torch._foreach_add_([t], 1.0)
        # CPU's per-tensor kernel writes before its version bump raises; oxide checks first
        # and leaves the tensor as it was.
        assert t.cpu().tolist() == ([2.0] * 3 if device == "cpu" else [1.0] * 3)


def test_foreach_mul_by_a_view_into_an_entry_raises_like_cpu():
    for device in ["cpu", "oxide"]:
        b = torch.full((200000,), 2.0, device=device)
        with pytest.raises(RuntimeError, match="single memory location"):
            torch._foreach_mul_([b], b[100])
        assert b.unique().cpu().tolist() == [2.0]


def test_foreach_unsigned_64_bit_scalar_matches_cpu():
    c = [torch.randn(4, generator=torch.Generator().manual_seed(0))]
    o = to_oxide(c)
    torch._foreach_add_(c, 2**64 - 1)
    torch._foreach_add_(o, 2**64 - 1)
    torch.testing.assert_close(o[0].cpu(), c[0])


def test_foreach_out_of_place_keeps_strides_like_cpu():
    t = torch.randn(2, 3, 1, 1).to(memory_format=torch.channels_last)
    o = t.to("oxide")
    assert o.is_contiguous() and o.stride() == t.stride()
    assert torch._foreach_add([o], 1.0)[0].stride() == torch._foreach_add([t], 1.0)[0].stride()
