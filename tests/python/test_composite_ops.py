"""Operators oxide composes on the device from its other kernels, against CPU PyTorch,
natively (`native_only`: a call that reaches the CPU fallback fails):

- the order statistics kthvalue, median, nanmedian and mode (a stable sort and gathers);
- torch.norm with dims (PyTorch's structured norm over linalg_vector_norm);
- max_unpool1d/2d/3d (a scatter per plane), nonzero_static, complex and polar, renorm,
  _batch_norm_with_update, embedding's max_norm renormalisation, nearest-exact
  interpolation.

The order statistics name one of several equal elements by their index; which one is
implementation-defined (CPU's nth_element picks its own), so their indices are checked
to select CPU's values, and compared exactly only where the values are distinct.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from test_native_ops import FLOATS, INTS, check, dname, make, with_out


@pytest.fixture(autouse=True)
def _native(native_only):
    yield


def with_nans(x, seed=0):
    """x (floating) with a few NaNs, a whole row of them included."""
    x = x.clone()
    g = torch.Generator().manual_seed(seed)
    flat = x.view(-1)
    flat[torch.randint(0, flat.numel(), (3,), generator=g)] = math.nan
    if x.dim() == 2:
        x[1] = math.nan
    return x


def selection_inputs(dtype):
    """(label, tensor) pairs with ties (few distinct values), a transposed view and, for
    floats, NaNs."""
    x = make((5, 7), dtype, seed=1, kind="few")
    inputs = [("ties", x), ("transposed", make((7, 5), dtype, seed=2, kind="few").t()), ("scalar", x[2, 3])]
    inputs.append(("distinct", torch.randperm(35, generator=torch.Generator().manual_seed(3)).reshape(5, 7).to(dtype)))
    if dtype.is_floating_point:
        inputs.append(("nan", with_nans(x)))
    return inputs


def assert_selects(name, x, dim, keepdim, actual, expected):
    """actual (oxide) = CPU's values exactly; its indices select them along dim."""
    values, indices = actual
    expected_values, expected_indices = expected
    assert values.device.type == "oxide" and indices.dtype == torch.int64
    torch.testing.assert_close(values.cpu(), expected_values, rtol=0, atol=0, equal_nan=True, msg=name)
    assert indices.shape == expected_indices.shape, name
    if x.dim() == 0:
        assert int(indices) == 0, name
        return
    index = indices.cpu() if keepdim else indices.cpu().unsqueeze(dim)
    picked = x.gather(dim, index)
    picked = picked if keepdim else picked.squeeze(dim)
    torch.testing.assert_close(picked, expected_values, rtol=0, atol=0, equal_nan=True, msg=name)


ORDER_STATS = {
    "kthvalue": lambda x, dim, keepdim, **out: torch.kthvalue(
        x, min(3, x.shape[dim] if x.dim() else 1), dim, keepdim, **out
    ),
    "median": lambda x, dim, keepdim, **out: torch.median(x, dim, keepdim, **out),
    "nanmedian": lambda x, dim, keepdim, **out: torch.nanmedian(x, dim, keepdim, **out),
    "mode": lambda x, dim, keepdim, **out: torch.mode(x, dim, keepdim, **out),
}


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=dname)
@pytest.mark.parametrize("op", ORDER_STATS)
def test_order_statistics(op, dtype):
    fn = ORDER_STATS[op]
    for label, x in selection_inputs(dtype):
        if op == "mode" and label == "nan":
            continue  # CPU's mode sorts with a comparator NaN breaks: its answer is unspecified
        for dim in [0, -1] if x.dim() else [0]:
            for keepdim in (False, True):
                name = f"{op} {label} dim={dim} keepdim={keepdim}"
                expected = fn(x, dim, keepdim)
                actual = fn(x.to("oxide"), dim, keepdim)
                assert_selects(name, x, dim, keepdim, actual, expected)
                if label == "distinct":  # no ties: the indices are CPU's exactly
                    assert torch.equal(actual[1].cpu(), expected[1]), name
                # out=, into oxide tensors of the wrong size
                outs = (torch.empty(0, dtype=dtype, device="oxide"), torch.empty(0, dtype=torch.int64, device="oxide"))
                result = fn(x.to("oxide"), dim, keepdim, out=outs)
                assert result[0] is outs[0] and result[1] is outs[1]
                assert_selects(name + " out=", x, dim, keepdim, result, expected)


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=dname)
def test_median_of_all_elements(dtype):
    for label, x in selection_inputs(dtype) + [("empty", torch.empty(0, dtype=dtype))]:
        if dtype.is_floating_point or label != "empty":
            check(torch.median, x, where=f"median {label}", exact=True)
            check(torch.nanmedian, x, where=f"nanmedian {label}", exact=True)


def test_order_statistics_errors_match_cpu():
    x = make((3, 4), torch.float32)
    check(lambda t: torch.kthvalue(t, 5, 1), x, where="k out of range")
    check(lambda t: torch.kthvalue(t, 0, 1), x, where="k = 0")
    check(lambda t: torch.median(t, 1), torch.empty(2, 0), where="median over an empty dim")
    check(lambda t: torch.mode(t, 1), torch.empty(2, 0), where="mode over an empty dim")
    check(lambda t: torch.mode(t, 0), torch.empty(0, 3), where="mode of an empty tensor")
    check(lambda t: torch.kthvalue(t, 1), x[0, 0], where="kthvalue of a 0-d tensor")
    wrong = torch.empty(0, dtype=torch.int32)
    check(lambda t, w: torch.median(t, 1, out=(torch.empty(0), w)), x, wrong, where="median indices dtype")
    check(lambda t, w: torch.mode(t, 1, out=(w, torch.empty(0, dtype=torch.int64))), x, wrong, where="mode dtype")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=dname)
def test_norm_with_dims(dtype):
    x = make((4, 5, 3), dtype, seed=4)
    for p in [None, 1, 2, 3.5, math.inf, -math.inf, 0]:
        for dim in [1, (0, 2), -1]:
            for keepdim in (False, True):
                check(lambda t: torch.norm(t, p, dim, keepdim), x, where=f"norm p={p} dim={dim} keepdim={keepdim}")
    check(lambda t: torch.norm(t, 2, 1, dtype=torch.float64), x, where="norm dtype=float64")
    check(with_out(lambda t, out: torch.norm(t, 2, 1, out=out)), x, torch.empty(0, dtype=dtype), where="norm out=")
    check(lambda t: F.pairwise_distance(t[0], t[1], p=3.0), x, where="pairwise_distance")


@pytest.mark.parametrize("dtype", FLOATS, ids=dname)
def test_max_unpool_inverts_max_pool(dtype):
    x = make((2, 3, 6, 8), dtype, seed=5)
    y, i = F.max_pool2d(x, 2, return_indices=True)
    check(lambda a, b: F.max_unpool2d(a, b, 2), y, i, where="max_unpool2d", exact=True)
    check(lambda a, b: F.max_unpool2d(a, b, 2, output_size=(7, 9)), y, i, where="max_unpool2d output_size", exact=True)
    check(lambda a, b: F.max_unpool2d(a[0], b[0], 2), y, i, where="max_unpool2d unbatched", exact=True)
    y1, i1 = F.max_pool1d(x[0], 3, stride=2, return_indices=True)
    check(lambda a, b: F.max_unpool1d(a, b, 3, stride=2), y1, i1, where="max_unpool1d", exact=True)
    x3 = make((2, 2, 4, 4, 6), dtype, seed=6)
    y3, i3 = F.max_pool3d(x3, 2, return_indices=True)
    check(lambda a, b: F.max_unpool3d(a, b, 2), y3, i3, where="max_unpool3d", exact=True)
    check(lambda a, b: F.max_unpool3d(a.transpose(3, 4), b.transpose(3, 4), 2), y3, i3, where="strided", exact=True)
    check(
        lambda a, b, o: torch._C._nn.max_unpool2d(a, b, (6, 8), out=o),
        y,
        i,
        torch.empty(0, dtype=dtype),
        where="max_unpool2d out=",
        exact=True,
    )


def test_max_unpool_errors_match_cpu():
    y = make((1, 1, 2, 2), torch.float32)
    bad = torch.tensor([[[[0, 1], [2, 99]]]])
    check(lambda a, b: F.max_unpool2d(a, b, 2), y, bad, where="index outside the plane")
    check(lambda a, b: F.max_unpool2d(a, b, 2), y, bad.neg(), where="negative index")
    check(lambda a, b: F.max_unpool2d(a, b, 2), y, bad.int(), where="int32 indices")
    check(lambda a, b: F.max_unpool2d(a, b, 2), y, bad[..., :1], where="indices of another shape")
    check(lambda a, b: torch._C._nn.max_unpool2d(a, b, (4,)), y, bad, where="one output size")
    with pytest.raises(RuntimeError, match="Found an invalid max index: 99"):
        F.max_unpool2d(y.to("oxide"), bad.to("oxide"), 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=dname)
def test_nonzero_static(dtype):
    x = make((4, 5), dtype, seed=7, kind="few")
    n = int(torch.count_nonzero(x))
    for size in [0, 1, n, n + 3]:
        check(lambda t: torch.nonzero_static(t, size=size), x, where=f"size={size}", exact=True)
        check(lambda t: torch.nonzero_static(t, size=size, fill_value=7), x, where="fill_value", exact=True)
    check(lambda t: torch.nonzero_static(t, size=2), x[0, 0], where="0-d", exact=True)
    check(
        with_out(lambda t, out: torch.nonzero_static(t, size=n, out=out)),
        x,
        torch.empty(0, dtype=torch.int64),
        where="out=",
        exact=True,
    )
    check(lambda t: torch.nonzero_static(t, size=-1), x, where="negative size")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16], ids=dname)
def test_complex_and_polar(dtype):
    a, b = make((3, 1), dtype, seed=8), make((1, 4), dtype, seed=9)
    check(torch.complex, a, b, where="complex broadcast", exact=True)
    check(
        with_out(torch.complex),
        a,
        b,
        torch.empty(0, dtype=torch.complex64 if dtype != torch.float64 else torch.complex128),
        where="complex out=",
    )
    check(torch.complex, a, b.to(torch.float64), where="mixed dtypes")
    if dtype != torch.float16:  # CPU has no complex32 polar
        check(torch.polar, a.abs(), b, where="polar")
        check(lambda r, t: torch.polar(r, t.t()), a.abs(), b, where="polar transposed angle")


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64], ids=dname
)
def test_renorm(dtype):
    x = make((4, 3, 5), dtype, seed=10) if not dtype.is_complex else torch.randn(4, 3, 5, dtype=dtype)
    for p, dim, maxnorm in [(2, 0, 1.0), (1, 1, 2.5), (math.inf, 2, 0.5), (3, -1, 100.0)]:
        check(lambda t: torch.renorm(t, p, dim, maxnorm), x, where=f"renorm p={p} dim={dim} maxnorm={maxnorm}")
    check(lambda t: t.renorm_(2, 0, 1.0), x.clone(), where="renorm_")
    check(with_out(lambda t, out: torch.renorm(t, 2, 0, 1.0, out=out)), x, torch.empty(0, dtype=dtype), where="out=")
    check(lambda t: torch.renorm(t, -1, 0, 1.0), x, where="negative p")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16], ids=dname)
def test_batch_norm_with_update(dtype):
    x = make((4, 3, 5), dtype, seed=11).requires_grad_(dtype != torch.float16)
    w, b = torch.rand(3, dtype=dtype) + 0.5, torch.rand(3, dtype=dtype)
    rm, rv = torch.rand(3, dtype=dtype), torch.rand(3, dtype=dtype) + 0.5

    def run(x, w, b, rm, rv):
        out = torch.ops.aten._batch_norm_with_update(x, w, b, rm, rv, 0.1, 1e-5)
        if x.requires_grad:
            (out[0] * torch.arange(out[0].numel(), device=x.device).view_as(out[0])).sum().backward()
            return out[:3], x.grad
        return out[:3]

    check(
        run,
        x,
        w,
        b,
        rm,
        rv,
        where="_batch_norm_with_update",
        rtol=1e-3 if dtype == torch.float16 else None,
        atol=1e-3 if dtype == torch.float16 else None,
    )


@pytest.mark.parametrize("dtype", FLOATS, ids=dname)
def test_embedding_max_norm_renormalises_rows(dtype):
    weight = make((10, 4), dtype, seed=12) * 3
    indices = torch.tensor([[1, 3, 3], [9, 0, 1]])
    check(lambda w, i: F.embedding(i, w, max_norm=1.0), weight, indices, where="max_norm=1")
    check(lambda w, i: F.embedding(i, w, max_norm=2.0, norm_type=1.0), weight, indices.int(), where="norm_type=1")
    check(
        lambda w, i: torch.embedding_renorm_(w, i, 1.0, 2.0),
        weight,
        torch.empty(0, dtype=torch.int64),
        where="no indices",
    )
    check(lambda w, i: torch.embedding_renorm_(w, i, 1.0, 2.0), weight, indices.float(), where="float indices")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.uint8], ids=dname)
def test_nearest_exact_interpolation(dtype):
    for shape, size in [((2, 3, 7), 5), ((1, 2, 5, 6), (7, 4)), ((1, 1, 3, 4, 5), (5, 3, 8))]:
        x = make(shape, dtype, seed=13)
        check(lambda t: F.interpolate(t, size=size, mode="nearest-exact"), x, where=f"size={size}", exact=True)
        check(lambda t: F.interpolate(t, scale_factor=1.7, mode="nearest-exact"), x, where="scale", exact=True)
        if dtype.is_floating_point:
            g = x.clone().requires_grad_()

            def backward(t):
                y = F.interpolate(t, size=size, mode="nearest-exact")
                (y * torch.arange(y.numel(), device=t.device, dtype=y.dtype).view_as(y)).sum().backward()
                return t.grad

            check(backward, g, where=f"backward size={size}")
