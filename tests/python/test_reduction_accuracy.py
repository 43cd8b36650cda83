"""Float reductions as accurate as CPU's, and integer reductions without an int64 copy.

Each accuracy case computes a float32 (or float16-input) reduction on oxide and on the
CPU, and measures both against the same reduction of the same values in float64: oxide's
relative error must stay within a small factor of CPU's (CPU sums in a cascade, so its
error grows with the logarithm of the length; a running sum's grows with the length).
"""

import pytest
import torch
import torch.nn.functional as F

import torch_oxide  # noqa: F401

# Relative error allowed: FACTOR times CPU's, plus FLOOR (a few float32 ulps) so that a
# case where CPU happens to round exactly does not demand the same luck.
FACTOR = 4.0
FLOOR = 1e-6


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out = out.detach().cpu().double()
    return float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-300))


def _check(x: torch.Tensor, fn, ref_fn=None):
    ref = (ref_fn or fn)(x.double())
    e_cpu = _rel_err(fn(x), ref)
    e_ox = _rel_err(fn(x.to("oxide")), ref)
    assert e_ox <= FACTOR * e_cpu + FLOOR, f"oxide relative error {e_ox:.3g}, CPU {e_cpu:.3g}"


def _rand(*shape, seed=0):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


def _const(n):
    return torch.full((n,), 0.1)


# ---- the two findings, literally -----------------------------------------------------


def test_nansum_of_ten_million_tenths():
    got = torch.full((10**7,), 0.1, device="oxide").nansum().item()
    want = torch.full((10**7,), 0.1).nansum().item()
    assert abs(got - want) <= 1.0, (got, want)  # was 956549.6 against 999999.6


def test_mean_of_two_to_the_24_tenths():
    got = torch.full((2**24,), 0.1, device="oxide").mean().item()
    want = torch.full((2**24,), 0.1).mean().item()
    assert abs(got - want) <= 1e-6, (got, want)  # was 0.0997529 against 0.0999999


# ---- accuracy family -------------------------------------------------------------------

FULL = {
    "sum": torch.sum,
    "mean": torch.mean,
    "nansum": torch.nansum,
    "nanmean": torch.nanmean,
    "norm1": lambda x: torch.linalg.vector_norm(x, 1),
    "norm2": lambda x: torch.linalg.vector_norm(x, 2),
    "logsumexp": lambda x: x.logsumexp(0),
    "var": torch.var,
    "std": torch.std,
}


@pytest.mark.parametrize("name", sorted(FULL))
@pytest.mark.parametrize("data", ["const", "rand"])
def test_full_reduction_accuracy(name, data):
    n = 4 * 10**6
    x = _const(n) if data == "const" else _rand(n)
    if name.startswith("nan"):
        x = x.clone()
        x[::1000] = float("nan")
    _check(x, FULL[name])


@pytest.mark.parametrize("name", ["sum", "mean", "nansum", "norm2"])
def test_strided_full_reduction_accuracy(name):
    x = _rand(2 * 10**6, seed=1)
    _check(x, lambda t: FULL[name](t[::2]))
    _check(_rand(1000, 2000, seed=2), lambda t: FULL[name](t.t()[:, ::3]))


@pytest.mark.parametrize("name", ["sum", "mean", "nansum", "norm2", "var"])
@pytest.mark.parametrize(
    "shape,dim,transpose",
    [
        ((2**20, 4), 0, False),  # long columns: the outer schedule
        ((4, 2**20), 1, False),  # long rows: the inner schedule per output
        ((4, 2**20), 0, True),  # long rows read through a transposed view
        ((1000, 3000), 0, False),
        ((1000, 3000), 1, False),
        ((3000, 1000), 1, True),  # columns of a transposed view: the outer schedule
    ],
)
def test_dim_reduction_accuracy(name, shape, dim, transpose):
    def fn(t):
        t = t.t() if transpose else t
        if name == "norm2":
            return torch.linalg.vector_norm(t, 2, dim=dim)
        return getattr(torch, name)(t, dim=dim)

    _check(_rand(*shape, seed=3), fn)
    _check(torch.full(shape, 0.1), fn)


def test_losses_accuracy():
    a, b = _rand(2, 2 * 10**6, seed=4)
    x = torch.stack([a, b])
    _check(x, lambda t: F.mse_loss(t[0], t[1]))
    _check(x, lambda t: F.l1_loss(t[0], t[1]))
    _check(x, lambda t: F.mse_loss(t[0], t[1], reduction="sum"))


def test_trapezoid_accuracy():
    _check(_rand(4 * 10**6, seed=5), lambda t: torch.trapezoid(t))


def test_float16_input_summed_in_float32():
    x = torch.full((4 * 10**6,), 0.1, dtype=torch.float16)
    _check(x, lambda t: t.sum(dtype=torch.float32), lambda t: t.sum())
    _check(x.view(2000, 2000), lambda t: t.sum(0, dtype=torch.float32), lambda t: t.sum(0))
    _check(x, lambda t: t.mean(dtype=torch.float32), lambda t: t.mean())


def test_float64_sum_is_accurate_too():
    x = _rand(4 * 10**6, seed=6).double() * 1e-3 + 0.1
    ref = float(x.sum())
    got = float(x.to("oxide").sum())
    assert abs(got - ref) <= 1e-12 * abs(ref)


# ---- integer and bool reductions read the input as it is -------------------------------


def _peak_extra(fn, x_cpu):
    """Bytes oxide allocates at peak beyond its input while `fn` runs."""
    x = x_cpu.to("oxide")
    torch.oxide.synchronize()
    base = torch.oxide.memory_allocated()
    torch.oxide.reset_peak_memory_stats()
    out = fn(x)
    torch.oxide.synchronize()
    return torch.oxide.max_memory_allocated() - base, out


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int8, torch.int32])
@pytest.mark.parametrize("op", ["sum", "sum0", "prod", "count_nonzero", "count_nonzero1"])
def test_integer_reductions_allocate_no_int64_copy(dtype, op):
    n = 1 << 22
    g = torch.Generator().manual_seed(7)
    if dtype == torch.bool:
        x = torch.rand(n, generator=g) < 0.3
    elif op == "prod":
        # Mostly ones and a few -1 and 2, so the int64 product neither overflows nor is trivial.
        x = torch.ones(n, dtype=dtype)
        x[torch.randint(0, n, (20,), generator=g)] = 2
        if dtype != torch.uint8:
            x[torch.randint(0, n, (7,), generator=g)] = -1
    else:
        x = torch.randint(0, 100, (n,), generator=g).to(dtype)
    fn = {
        "sum": lambda t: t.sum(),
        "sum0": lambda t: t.view(1024, -1).sum(0),
        "prod": lambda t: t.prod(),
        "count_nonzero": lambda t: torch.count_nonzero(t),
        "count_nonzero1": lambda t: torch.count_nonzero(t.view(1024, -1), dim=1),
    }[op]
    extra, out = _peak_extra(fn, x)
    want = fn(x)
    assert out.dtype == want.dtype == torch.int64
    assert torch.equal(out.cpu(), want)
    # An int64 copy of the input is 8 bytes per element; what remains is the output.
    assert extra <= x.numel() * x.element_size() // 4 + 64 * 1024, extra


def test_integer_sum_matches_cpu_in_every_layout():
    g = torch.Generator().manual_seed(8)
    for dtype in (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32):
        x = torch.randint(-100, 100, (64, 300), generator=g).to(dtype)
        d = x.to("oxide")
        for fn in (
            lambda t: t.sum(),
            lambda t: t.sum(0),
            lambda t: t.sum(1, keepdim=True),
            lambda t: t.t().sum(0),
            lambda t: t[:, ::3].sum(1),
            lambda t: t.sum(dtype=torch.int64),
            lambda t: t.prod(1),
            lambda t: t.sum(0, dtype=torch.float32),
            lambda t: torch.count_nonzero(t, dim=0),
            lambda t: torch.count_nonzero(t.t(), dim=(0, 1)),
        ):
            want = fn(x)
            got = fn(d)
            assert got.dtype == want.dtype, (dtype, got.dtype, want.dtype)
            assert torch.equal(got.cpu(), want), dtype


def test_count_nonzero_of_floats_counts_nan_and_not_negative_zero():
    x = torch.tensor([0.0, -0.0, float("nan"), 1e-40, float("inf"), 3.0])
    assert torch.count_nonzero(x.to("oxide")).item() == torch.count_nonzero(x).item() == 4
    h = x.half()
    assert torch.count_nonzero(h.to("oxide")).item() == torch.count_nonzero(h).item()


def test_empty_integer_reductions():
    x = torch.zeros(0, 5, dtype=torch.uint8)
    d = x.to("oxide")
    for fn in (
        lambda t: t.sum(0),
        lambda t: t.prod(0),
        lambda t: t.sum(),
        lambda t: t.prod(),
        lambda t: torch.count_nonzero(t, 0),
    ):
        want = fn(x)
        got = fn(d)
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
    e = torch.zeros(0, 3).to("oxide")
    assert torch.isnan(e.mean(0)).all() and e.mean(0).shape == (3,)


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int8])
def test_unique_of_one_byte_values_counts_instead_of_sorting(dtype):
    n = 1 << 22
    g = torch.Generator().manual_seed(3)
    x = (
        (torch.rand(n, generator=g) < 0.4)
        if dtype == torch.bool
        else torch.randint(-128, 128, (n,), generator=g).to(dtype)
    )
    for inverse, counts in [(False, False), (True, True), (False, True)]:
        extra, out = _peak_extra(lambda t: torch.unique(t, return_inverse=inverse, return_counts=counts), x)
        want = torch.unique(x, return_inverse=inverse, return_counts=counts)
        out, want = (out, want) if isinstance(want, tuple) else ((out,), (want,))
        for o, w in zip(out, want):
            assert torch.equal(o.cpu(), w)
        # Sorting would take n (key, index) pairs and three n-long int64 arrays (40 bytes
        # per element); counting needs only the inverse (8 bytes per element) when it is
        # asked for, which a cached larger block may hold (hence 10).
        assert extra <= (10 * n if inverse else 0) + 64 * 1024, (inverse, counts, extra)
    # A 2-D input, and unique_consecutive / unique(dim=) keep the general path.
    y = x.view(1024, -1)
    torch.testing.assert_close(torch.unique(y.to("oxide"), dim=0).cpu(), torch.unique(y, dim=0))
    assert torch.equal(torch.unique(y.to("oxide")).cpu(), torch.unique(y))
