"""Helpers shared by the conformance tests: moving samples, comparing, and
recording whether a case touched the CPU fallback."""

from __future__ import annotations

import copy
import json
import os

import torch

# Filled by the tests, read by conftest.py's report hook: test method name -> facts.
CASES: dict[str, dict] = {}

MODE = os.environ.get("OXIDE_CONFORMANCE", "subset")  # "subset" (make test) or "full" (make conformance)


def fallback_calls() -> int:
    return sum(torch.oxide.fallback_stats().values())


def to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    if isinstance(x, (list, tuple)):
        return type(x)(to_cpu(v) for v in x) if not hasattr(x, "_fields") else type(x)(*[to_cpu(v) for v in x])
    if isinstance(x, dict):
        return {k: to_cpu(v) for k, v in x.items()}
    return x


def leaf_copy(x, device):
    """A copy of a sample value on `device` whose tensors are leaves keeping requires_grad
    (modules passed as constructor arguments, e.g. a Transformer's layer, are copied too).

    CPU copies of oxide tensors copy the whole storage and rebuild the same view
    (offset, sizes, strides), so ops that look past a view (as_strided on a partial
    view) read the same memory on both sides; device arguments naming oxide become "cpu"."""
    if isinstance(x, torch.nn.Module):
        return copy.deepcopy(x).to(device)
    if device == "cpu" and isinstance(x, torch.device) and x.type == "oxide":
        return torch.device("cpu")
    if device == "cpu" and isinstance(x, str) and (x == "oxide" or x.startswith("oxide:")):
        return "cpu"
    if (
        device == "cpu"
        and isinstance(x, torch.Tensor)
        and x.device.type == "oxide"
        and x.layout == torch.strided
        and not x.is_conj()
        and not x.is_neg()
    ):  # lazy conj/neg views are materialised by the plain copy below
        storage = x.detach().untyped_storage().cpu()
        c = torch.empty(0, dtype=x.dtype).set_(storage, x.storage_offset(), x.size(), x.stride())
        return c.requires_grad_(x.requires_grad) if (c.is_floating_point() or c.is_complex()) else c
    if isinstance(x, torch.Tensor):
        c = x.detach().to(device, copy=True)
        return c.requires_grad_(x.requires_grad) if (c.is_floating_point() or c.is_complex()) else c
    if isinstance(x, (list, tuple)):
        return type(x)(leaf_copy(v, device) for v in x)
    if isinstance(x, dict):
        return {k: leaf_copy(v, device) for k, v in x.items()}
    return x


def cpu_copy(x):
    """A CPU copy of an oxide sample value that keeps requires_grad (a leaf)."""
    return leaf_copy(x, "cpu")


def metadata(x):
    if isinstance(x, torch.Tensor):
        return (tuple(x.shape), x.dtype)
    if isinstance(x, (list, tuple)):
        return [metadata(v) for v in x]
    return type(x).__name__


def tensors_in(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in tensors_in(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in tensors_in(v)]
    return []


REPORT_DIR = os.environ.get("OXIDE_CONFORMANCE_REPORT")


def record(test, kind: str, name: str, dtype, native: bool) -> None:
    """Facts of one case for the report. With a report directory they are also
    appended to a per-process file at once, so parallel workers (and a worker
    that crashes later) hand them to the controller."""
    facts = {"kind": kind, "name": name, "dtype": str(dtype).replace("torch.", ""), "native": native}
    CASES[test._testMethodName] = facts
    if REPORT_DIR:
        with open(os.path.join(REPORT_DIR, f".cases-{os.getpid()}.jsonl"), "a") as f:
            f.write(json.dumps({"test": test._testMethodName, **facts}) + "\n")


def expecting(test, kind: str, key: str, dtype, body):
    """Runs `body`; a case listed in expectations.XFAIL must fail (reported as an
    expected failure), and one that passes fails so the table cannot go stale."""
    from expectations import xfail_reason

    reason = xfail_reason(kind, key, dtype)
    if reason is None:
        return body()
    try:
        body()
    except Exception:  # noqa: BLE001  (any failure is the expected one)
        test.skipTest(f"expected failure: {reason}")
    raise AssertionError(f"unexpected success: remove ({kind!r}, {key!r}) from XFAIL in expectations.py")


def _tie_args(name: str, sample) -> tuple[int, bool]:
    """(dim, stable) of a sort, argsort or topk sample."""
    args, kwargs = sample.args, sample.kwargs
    if name == "topk":
        return (args[1] if len(args) > 1 else kwargs.get("dim", -1)), False
    return (args[0] if args else kwargs.get("dim", -1)), bool(kwargs.get("stable", False))


def assert_equal_up_to_ties(test, name: str, sample, actual, expected) -> None:
    """sort, argsort and topk without stable=True against CPU: the values (or, for
    argsort, the elements the indices select) must equal CPU's exactly, and the
    indices must be a valid answer: they select those values, and sort/argsort's are
    a permutation along the dimension. Only the order among equal elements may
    differ, which an unstable sort leaves to the implementation."""
    dim, stable = _tie_args(name, sample)
    actual = to_cpu(actual)
    if stable:
        test.assertEqual(actual, expected, exact_device=False)
        return
    x = sample.input.detach().cpu()
    if name == "argsort":
        actual_idx, expected_idx = actual, expected
    else:
        (values, actual_idx), (expected_values, expected_idx) = actual, expected
        test.assertEqual(values, expected_values, exact_device=False)
    test.assertEqual(actual_idx.dtype, torch.int64)
    test.assertEqual(actual_idx.shape, expected_idx.shape)
    if x.dim() == 0:
        x, actual_idx, expected_idx, dim = x.reshape(1), actual_idx.reshape(1), expected_idx.reshape(1), 0
    test.assertEqual(x.gather(dim, actual_idx), x.gather(dim, expected_idx))
    sorted_idx = actual_idx.sort(dim).values
    if name == "topk":
        # k distinct positions.
        test.assertTrue(bool((sorted_idx.diff(dim=dim) > 0).all()) if sorted_idx.size(dim) > 1 else True)
    else:
        shape = [1] * x.dim()
        shape[dim] = x.size(dim)
        test.assertEqual(sorted_idx, torch.arange(x.size(dim)).reshape(shape).expand_as(sorted_idx))


# Positional parameters after the input of the order statistics (SELECTION_TIES).
_SELECTION_PARAMS = {
    "kthvalue": ("k", "dim", "keepdim"),
    "median": ("dim", "keepdim"),
    "nanmedian": ("dim", "keepdim"),
    "mode": ("dim", "keepdim"),
}


def assert_selected_up_to_ties(test, name: str, sample, actual, expected) -> None:
    """kthvalue, median, nanmedian and mode against CPU: the values must equal CPU's
    exactly (NaN where CPU has NaN); the indices must select those values along the
    dimension. Which of several equal elements is named is implementation-defined
    (CPU's nth_element and sort pick their own)."""
    actual = to_cpu(actual)
    if isinstance(expected, torch.Tensor):  # median() / nanmedian() of all elements: the value only
        test.assertEqual(actual, expected, exact_device=False)
        return
    params = dict(zip(_SELECTION_PARAMS[name], sample.args))
    params.update(sample.kwargs)
    dim, keepdim = params.get("dim", -1), bool(params.get("keepdim", False))
    (values, actual_idx), (expected_values, expected_idx) = actual, expected
    test.assertEqual(values, expected_values, exact_device=False)
    test.assertEqual(actual_idx.dtype, torch.int64)
    test.assertEqual(actual_idx.shape, expected_idx.shape)
    x = sample.input.detach().cpu()
    if x.dim() == 0:
        test.assertEqual(actual_idx, expected_idx)
        return
    index = actual_idx if keepdim else actual_idx.unsqueeze(dim)
    selected = x.gather(dim, index)
    test.assertEqual(selected if keepdim else selected.squeeze(dim), expected_values, exact_device=False)


def to_float64(x):
    """Floating and complex tensors of a sample in double precision (the accuracy
    reference's inputs)."""
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.double()
    if isinstance(x, torch.Tensor) and x.is_complex():
        return x.to(torch.complex128)
    return x


def to_float64_leaf(x):
    """to_float64 for a gradient reference: a new leaf that requires grad where `x` does
    (SampleInput.transform runs under no_grad)."""
    y = to_float64(x)
    if isinstance(x, torch.Tensor) and y is not x:
        return y.detach().requires_grad_(x.requires_grad)
    return y


def _double(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.complex128) if t.is_complex() else t.double()


def assert_at_least_as_accurate(test, actual, expected, reference, factor: float = 1.0) -> None:
    """Floating outputs: oxide's largest error against `reference` (the operator on
    double-precision copies of the same inputs) is at most `factor` times CPU's, with
    NaN and infinities where CPU has them; other outputs must equal CPU's.

    With factor 1 (the half-type table) oxide must be at least as close as CPU. A
    factor above 1 (expectations.COMPARABLE_ACCURACY) also allows the rounding of the
    largest output element (eps * max |reference|) where CPU happens to be exact."""
    actual = to_cpu(actual)
    outs = zip(tensors_in(actual), tensors_in(expected), tensors_in(reference))
    for a, e, r in outs:
        test.assertEqual(a.dtype, e.dtype)
        test.assertEqual(a.shape, e.shape)
        if not (e.is_floating_point() or e.is_complex()):
            test.assertEqual(a, e)
            continue
        a64, e64, r64 = _double(a), _double(e), _double(r)
        test.assertTrue(torch.equal(a64.isnan(), e64.isnan()), "NaN where CPU has none, or the reverse")
        finite = e64.isfinite()
        test.assertTrue(torch.equal(a64[~finite & ~e64.isnan()], e64[~finite & ~e64.isnan()]), "infinities differ")
        if not bool(finite.any()):
            continue
        err = lambda v: (v[finite] - r64[finite]).abs().max().item()  # noqa: E731
        bound = err(e64)
        if factor != 1.0:
            bound = factor * max(bound, torch.finfo(e.dtype).eps * r64[finite].abs().max().item())
        test.assertLessEqual(
            err(a64), bound, f"oxide is farther from the double-precision result than {factor} x CPU's error"
        )


def float64_sample(key: str, cpu_sample, leaf: bool = False):
    """The accuracy reference's sample: `cpu_sample` in double precision. For the
    operators of expectations.SAME_ALGORITHM the algorithm options are dropped: they
    choose how the work is chunked and which type accumulates, and the chunked path
    refuses double inputs, while the plain path computes the same function."""
    from expectations import SAME_ALGORITHM

    reference = cpu_sample.transform(to_float64_leaf if leaf else to_float64)
    if key in SAME_ALGORITHM:
        reference.kwargs = {k: v for k, v in reference.kwargs.items() if k != "options"}
    return reference


def cpu_reference_sample(key: str, cpu_sample):
    """The CPU sample the reference runs: the same values, and where PyTorch picks an
    algorithm by device type (expectations.SAME_ALGORITHM), the algorithm the oxide
    call resolved, so both sides compute the same thing."""
    from expectations import SAME_ALGORITHM

    if key not in SAME_ALGORITHM:
        return cpu_sample
    import dataclasses

    from torch.nn.modules.linear_cross_entropy_options import _auto_acc_policy

    options = cpu_sample.kwargs.get("options")
    if options is None or options.acc_policy != "auto":
        return cpu_sample
    dtype = cpu_sample.input.dtype
    resolved = copy.copy(cpu_sample)
    resolved.kwargs = dict(
        cpu_sample.kwargs, options=dataclasses.replace(options, acc_policy=_auto_acc_policy("oxide", dtype))
    )
    return resolved
