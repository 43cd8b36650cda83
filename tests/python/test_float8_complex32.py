"""float8 (e4m3fn, e5m2, e4m3fnuz, e5m2fnuz, e8m0fnu) and complex32 conversions on
the device, bit for bit against CPU PyTorch, with the fallback forbidden: every code
decoded, every float16 value and the rounding boundaries encoded, and the
conversions from and to every other dtype."""

import pytest
import torch

FLOAT8 = [
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    torch.float8_e4m3fnuz,
    torch.float8_e5m2fnuz,
    torch.float8_e8m0fnu,
]
OTHERS = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.bool,
    torch.complex64,
    torch.complex128,
]


_INT_OF_WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t):
    """The elements' bit patterns as integers of the same width, so the sign of zero
    and every rounding compare exactly (complex: the parts)."""
    t = t.contiguous()
    if t.is_complex():
        t = torch.view_as_real(t.to(torch.complex64)) if t.dtype == torch.complex32 else torch.view_as_real(t)
    return t.view(_INT_OF_WIDTH[t.element_size()])


def nans(t):
    if t.is_complex():
        t = torch.view_as_real(t.to(torch.complex64) if t.dtype == torch.complex32 else t)
    return t.float().isnan() if (t.is_floating_point() and t.element_size() == 1) else t.isnan()


def assert_same_bits(got, want):
    """Same bits as CPU for every element; a float8 NaN is one code per format and
    compares as bits too. NaN in the wider float types only has to be NaN: payloads
    are not PyTorch semantics (c10 keeps a float8 NaN's payload bits when it widens,
    oxide widens through double, which quiets them)."""
    assert got.device.type == "oxide" and got.dtype == want.dtype
    got = got.cpu()
    if got.element_size() == 1 or not (got.is_floating_point() or got.is_complex()):
        assert torch.equal(bits(got), bits(want))
        return
    n = nans(want)
    assert torch.equal(nans(got), n)
    assert torch.equal(bits(got)[~n], bits(want)[~n])


def probe_values():
    """Every float16 value as float32, each float8 format's codes decoded, the midpoints
    between neighbouring float8 values (where ties round), values just beside them,
    the formats' limits with a margin, and the specials."""
    halves = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.float16).float()
    grid = [torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dt).float() for dt in FLOAT8]
    grid = torch.cat(grid)
    grid = grid[grid.isfinite()].unique()
    mids = (grid[1:] + grid[:-1]) / 2
    beside = torch.cat([mids.nextafter(torch.tensor(float("inf"))), mids.nextafter(torch.tensor(-float("inf")))])
    limits = torch.tensor([448.0, 464.0, 480.0, 57344.0, 61440.0, 65536.0, 240.0, 248.0, 256.0, 3.4e38, 1e-45])
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), -float("nan")])
    base = torch.cat([halves, grid, mids, beside, limits, -limits, special])
    return torch.cat([base, base * 2.0**-100, base * 2.0**100])


@pytest.mark.filterwarnings("ignore:Casting complex values to real discards")  # as on CPU
@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_every_float8_code_decodes_like_cpu(native_only, dtype):
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype)
    on_device = codes.to("oxide")
    for target in OTHERS + FLOAT8:
        assert_same_bits(on_device.to(target), codes.to(target))


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float32_encodes_like_cpu_at_every_boundary(native_only, dtype):
    x = probe_values()
    assert_same_bits(x.to("oxide").to(dtype), x.to(dtype))


@pytest.mark.filterwarnings("ignore:Casting complex values to real discards")  # as on CPU
@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
@pytest.mark.parametrize("source", OTHERS, ids=str)
def test_every_dtype_encodes_like_cpu(native_only, dtype, source):
    x = probe_values()
    if source.is_complex:
        x = torch.complex(x, x.flip(0))
    elif not source.is_floating_point:
        x = x.nan_to_num(0.0, 0.0, 0.0).clamp(-1e6, 1e6)
    x = x.to(source)
    assert_same_bits(x.to("oxide").to(dtype), x.to(dtype))


def test_float64_rounds_through_float32_like_cpu(native_only):
    # Just above a float8 tie in double, exactly on it once rounded to float32: c10
    # converts a double to float first, so the tie rule decides, not the excess.
    x = torch.tensor([1.0625 + 2**-40, 1.125 + 2**-40, 3.0 + 2**-45, 240.0 * 1.0625 + 2**-30], dtype=torch.float64)
    for dtype in FLOAT8:
        assert_same_bits(x.to("oxide").to(dtype), x.to(dtype))


def test_float8_views_and_strides_convert(native_only):
    x = torch.randn(6, 5) * 50
    for dtype in FLOAT8:
        src = x.to(dtype)
        on_device = src.to("oxide")
        assert_same_bits(on_device.t().to(torch.float32), src.t().to(torch.float32))
        assert_same_bits(on_device[1::2, ::3].to(torch.float16), src[1::2, ::3].to(torch.float16))
        out = torch.empty(5, 6, dtype=dtype, device="oxide")
        out.copy_(x.t().to("oxide"))
        assert_same_bits(out, x.t().to(dtype))


def complex32_probe():
    x = probe_values()
    x = x[(x.abs() < 1e6) | ~x.isfinite()]
    return torch.complex(x, x.roll(7))


@pytest.mark.filterwarnings("ignore:Casting complex values to real discards")  # as on CPU (warned once)
def test_complex32_from_and_to_every_dtype(native_only):
    z = complex32_probe()
    for source in [torch.complex64, torch.complex128]:
        s = z.to(source)
        assert_same_bits(s.to("oxide").to(torch.complex32), s.to(torch.complex32))
    c32 = z.to(torch.complex32)
    on_device = c32.to("oxide")
    for target in [torch.complex64, torch.complex128, torch.float32, torch.float16, torch.float64, torch.int64]:
        if target.is_complex:
            assert_same_bits(on_device.to(target), c32.to(target))
        else:
            got, want = on_device.to(target), c32.to(target)
            if not target.is_floating_point:  # CPU's float -> int of NaN/inf is platform-defined
                keep = c32.real.float().isfinite()
                got, want = got.cpu()[keep], want[keep]
                assert torch.equal(got, want)
            else:
                assert_same_bits(got, want)
    for source in [torch.float32, torch.float16, torch.int64, torch.bool]:
        r = probe_values().nan_to_num(0.0, 0.0, 0.0).clamp(-6e4, 6e4).to(source)
        assert_same_bits(r.to("oxide").to(torch.complex32), r.to(torch.complex32))


def test_complex32_views_round_trip(native_only):
    z = torch.randn(4, 6, dtype=torch.complex64).to(torch.complex32)
    on_device = z.to("oxide")
    assert_same_bits(on_device.t().to(torch.complex64), z.t().to(torch.complex64))
    assert_same_bits(torch.view_as_real(on_device).to(torch.float32), torch.view_as_real(z).to(torch.float32))


def test_arithmetic_in_float8_still_goes_where_cpu_goes():
    # CPU has no float8 add: the device call ends in CPU's own error through the
    # fallback, never an unknown dtype code.
    a = torch.ones(3, dtype=torch.float8_e4m3fn)
    with pytest.raises(Exception) as cpu_error:
        a + a
    d = a.to("oxide")
    with pytest.raises(type(cpu_error.value)):
        d + d
