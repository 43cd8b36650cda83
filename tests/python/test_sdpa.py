"""scaled_dot_product_attention on oxide: the fused Rust kernel behind PyTorch's
"overrideable" SDPA backend (csrc/aten/nn/attention.cpp, oxide_kernels::ops::nn::attention), against
CPU's F.scaled_dot_product_attention, the oracle.

Forward values and the gradients of query, key, value and a float mask for shapes
with L != S, E != Ev and sizes that are not multiples of the kernel's 64-row tiles,
broadcast bool and float masks, causal masking, an explicit scale, grouped-query
attention, transposed ([B, L, H, E]) inputs, unbatched inputs and every floating
dtype; that the fused operator (not the math composite) ran; dropout reproducibility,
keep rate and a backward consistent with the forward's mask; the peak memory of a
long sequence; and errors of the same type as CPU for bad inputs.

Every test runs with OXIDE_FALLBACK=error semantics (`native_only`).
"""

import math

import pytest
import torch
import torch.nn.functional as F

import torch_oxide.coverage

pytestmark = pytest.mark.usefixtures("native_only")

FUSED = "_scaled_dot_product_fused_attention_overrideable"

# Forward and gradient tolerances (rtol, atol). float16/bfloat16: CPU rounds its
# intermediate products to the half type, oxide accumulates in float32.
TOL = {
    torch.float64: ((1e-9, 1e-10), (1e-8, 1e-9)),
    torch.float32: ((1e-4, 1e-5), (1e-3, 1e-4)),
    torch.float16: ((5e-3, 5e-3), (2e-2, 2e-2)),
    torch.bfloat16: ((3e-2, 3e-2), (8e-2, 8e-2)),
}
DTYPES = list(TOL)


def rand(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def run(device, q, k, v, mask=None, grad_mask=False, grad_out=None, **kw):
    """SDPA on `device` from CPU tensors; returns the output and the q, k, v (and mask) gradients."""
    leaves = [t.to(device).detach().requires_grad_(True) for t in (q, k, v)]
    m = None
    if mask is not None:
        m = mask.to(device).detach()
        if grad_mask:
            m.requires_grad_(True)
            leaves.append(m)
    out = F.scaled_dot_product_attention(*leaves[:3], attn_mask=m, **kw)
    go = grad_out if grad_out is not None else rand(out.shape, out.dtype, 99)
    grads = torch.autograd.grad(out, leaves, go.to(device))
    return out, grads


def compare(q, k, v, mask=None, grad_mask=False, transform=None, **kw):
    dtype = q.dtype
    (frtol, fatol), (grtol, gatol) = TOL[dtype]
    if transform is not None:
        # The same (non-contiguous) view on both devices.
        fn = lambda *a, **k2: F.scaled_dot_product_attention(*[transform(t) for t in a[:3]], **k2)  # noqa: E731
    else:
        fn = F.scaled_dot_product_attention
    results = []
    for device in ("cpu", "oxide"):
        leaves = [t.to(device).detach().requires_grad_(True) for t in (q, k, v)]
        m = None
        if mask is not None:
            m = mask.to(device).detach().requires_grad_(grad_mask)
        out = fn(*leaves, attn_mask=m, **kw)
        go = rand(out.shape, out.dtype, 99).to(device)
        wrt = leaves + ([m] if grad_mask else [])
        results.append((out, torch.autograd.grad(out, wrt, go)))
    (oc, gc), (oo, go_) = results
    assert oo.device.type == "oxide"
    torch.testing.assert_close(oo.cpu(), oc, rtol=frtol, atol=fatol)
    for name, a, b in zip(("dq", "dk", "dv", "dmask"), go_, gc):
        assert a.shape == b.shape, name
        torch.testing.assert_close(a.cpu(), b, rtol=grtol, atol=gatol, msg=name)


@pytest.mark.parametrize("dtype", DTYPES)
def test_odd_sizes_l_ne_s_e_ne_ev(dtype):
    compare(rand((2, 3, 67, 24), dtype, 0), rand((2, 3, 131, 24), dtype, 1), rand((2, 3, 131, 40), dtype, 2))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lq,lk", [(70, 45), (45, 70), (129, 129)])
def test_causal(dtype, lq, lk):
    compare(
        rand((1, 2, lq, 16), dtype, 3), rand((1, 2, lk, 16), dtype, 4), rand((1, 2, lk, 8), dtype, 5), is_causal=True
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask_shape", [(2, 1, 33, 70), (33, 70), (1, 3, 1, 70), (2, 3, 33, 70)])
def test_bool_mask_broadcast(dtype, mask_shape):
    g = torch.Generator().manual_seed(6)
    mask = torch.rand(mask_shape, generator=g) > 0.3
    compare(rand((2, 3, 33, 16), dtype, 7), rand((2, 3, 70, 16), dtype, 8), rand((2, 3, 70, 12), dtype, 9), mask=mask)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask_shape", [(2, 1, 33, 70), (33, 70), (1, 3, 1, 70), (2, 3, 33, 70)])
def test_float_mask_with_gradient(dtype, mask_shape):
    mask = rand(mask_shape, dtype, 10)
    compare(
        rand((2, 3, 33, 16), dtype, 11),
        rand((2, 3, 70, 16), dtype, 12),
        rand((2, 3, 70, 12), dtype, 13),
        mask=mask,
        grad_mask=True,
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_explicit_scale(dtype):
    compare(rand((2, 2, 20, 8), dtype, 14), rand((2, 2, 30, 8), dtype, 15), rand((2, 2, 30, 8), dtype, 16), scale=0.3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_grouped_query_attention(dtype):
    compare(
        rand((2, 8, 40, 16), dtype, 17),
        rand((2, 2, 50, 16), dtype, 18),
        rand((2, 2, 50, 24), dtype, 19),
        enable_gqa=True,
        is_causal=True,
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_transposed_inputs(dtype):
    # What attention modules pass: [B, L, H, E] buffers viewed as [B, H, L, E].
    t = lambda x: x.transpose(1, 2)  # noqa: E731
    compare(
        rand((2, 37, 4, 16), dtype, 20),
        rand((2, 75, 4, 16), dtype, 21),
        rand((2, 75, 4, 16), dtype, 22),
        transform=t,
        is_causal=True,
    )


def test_unbatched_inputs():
    compare(
        rand((3, 20, 8), torch.float32, 23),
        rand((3, 25, 8), torch.float32, 24),
        rand((3, 25, 6), torch.float32, 25),
        mask=rand((20, 25), torch.float32, 26),
        grad_mask=True,
    )


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_fully_masked_rows_give_zero(kind):
    # PyTorch's math path uses a safe softmax: a row without any allowed key yields 0.
    mask = torch.ones(10, 12, dtype=torch.bool)
    mask[3] = False
    mask[7, ::2] = False
    if kind == "float":
        mask = torch.zeros(10, 12).masked_fill(~mask, -math.inf)
    q, k, v = (
        rand((1, 2, 10, 8), torch.float32, 27),
        rand((1, 2, 12, 8), torch.float32, 28),
        rand((1, 2, 12, 8), torch.float32, 29),
    )
    compare(q, k, v, mask=mask)
    out, grads = run("oxide", q, k, v, mask=mask)
    assert torch.all(out[:, :, 3].cpu() == 0)
    assert torch.all(grads[0][:, :, 3].cpu() == 0)


def test_fused_path_taken():
    q, k, v = (rand((1, 2, 16, 8), torch.float32, s).to("oxide").requires_grad_(True) for s in (30, 31, 32))
    with torch_oxide.coverage.record() as cov:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.sum().backward()
    ops = set(cov.native) | set(cov.fallback)
    assert any(FUSED in op and "backward" not in op for op in ops), ops
    assert any(FUSED + "_backward" in op for op in ops), ops
    # The math composite would have run bmm/matmul and softmax.
    assert not any("bmm" in op or "softmax" in op for op in ops), ops
    assert not cov.fallback


def test_math_disabled_backend_choice_respected():
    # With only the math backend enabled, the choice must not pick the fused kernel.
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (rand((1, 2, 16, 8), torch.float32, s).to("oxide") for s in (33, 34, 35))
    with sdpa_kernel(SDPBackend.MATH), torch_oxide.coverage.record() as cov:
        F.scaled_dot_product_attention(q, k, v)
    assert not any(FUSED in op for op in cov.native), cov.native


def test_returned_logsumexp_matches_definition():
    q, k, v = (
        rand((2, 2, 9, 8), torch.float64, 36),
        rand((2, 2, 11, 8), torch.float64, 37),
        rand((2, 2, 11, 5), torch.float64, 38),
    )
    res = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q.to("oxide"), k.to("oxide"), v.to("oxide"))
    out, lse = res[0], res[1]
    scores = q @ k.transpose(-1, -2) / math.sqrt(8)
    torch.testing.assert_close(lse.cpu(), torch.logsumexp(scores, -1))
    torch.testing.assert_close(out.cpu(), torch.softmax(scores, -1) @ v)


# ---- dropout ----


def dropout_mask(p, seed, shape):
    """The keep mask oxide draws for `shape` = (B, H, L, S) under `seed`: with a zero
    query every probability is 1/S, and with v = I the output row is mask / ((1-p) S)."""
    b, h, nl, s = shape
    torch.manual_seed(seed)
    q = torch.zeros(b, h, nl, 4, device="oxide")
    k = torch.randn(b, h, s, 4).to("oxide")
    v = torch.eye(s).expand(b, h, s, s).contiguous().to("oxide")
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=p).cpu().double()
    scaled = out * (1 - p) * s
    keep = scaled.round()
    torch.testing.assert_close(scaled, keep, rtol=0, atol=1e-4)  # only 0 or 1/((1-p)S)
    return keep


def test_dropout_reproducible_and_keep_rate():
    p = 0.3
    a = dropout_mask(p, 123, (2, 2, 64, 96))
    b = dropout_mask(p, 123, (2, 2, 64, 96))
    c = dropout_mask(p, 124, (2, 2, 64, 96))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    rate = a.mean().item()
    n = a.numel()
    assert abs(rate - (1 - p)) < 5 * math.sqrt(p * (1 - p) / n), rate


def test_dropout_backward_consistent_with_forward():
    p, seed = 0.4, 7
    shape = (2, 2, 33, 70)
    keep = dropout_mask(p, seed, shape)
    q, k, v = (
        rand((2, 2, 33, 8), torch.float64, 40),
        rand((2, 2, 70, 8), torch.float64, 41),
        rand((2, 2, 70, 6), torch.float64, 42),
    )
    # Same seed and shape: the same mask is drawn (the Philox counter starts where it did above).
    torch.manual_seed(seed)
    out, grads = run("oxide", q, k, v, dropout_p=p)
    # Reference: PyTorch's formula with that mask, differentiated by CPU autograd.
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    attn = torch.softmax(leaves[0] @ leaves[1].transpose(-1, -2) / math.sqrt(8), -1)
    ref = (attn * keep / (1 - p)) @ leaves[2]
    go = rand(ref.shape, ref.dtype, 99)
    ref_grads = torch.autograd.grad(ref, leaves, go)
    torch.testing.assert_close(out.cpu(), ref)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a.cpu(), b)


def test_dropout_one_gives_zeros():
    q, k, v = (rand((1, 1, 5, 4), torch.float32, s).to("oxide") for s in (43, 44, 45))
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=1.0)
    assert torch.all(out.cpu() == 0)


# ---- memory ----


def test_long_sequence_memory_stays_linear():
    L = S = 2048
    B, H, E = 1, 2, 64
    q, k, v = (torch.randn(B, H, L, E).to("oxide") for _ in range(3))
    torch.oxide.synchronize()
    base = torch.oxide.memory_allocated()
    torch.oxide.reset_peak_memory_stats()
    with torch.no_grad():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    peak = torch.oxide.max_memory_allocated() - base
    per_head_scores = L * S * 4
    # Output + logsumexp is about 1 MiB here; the math path would need several B*H*L*S buffers.
    assert peak < per_head_scores / 8, peak
    ref = F.scaled_dot_product_attention(
        q[:, :, -64:].cpu(), k.cpu(), v.cpu(), attn_mask=torch.ones(L, S, dtype=torch.bool).tril()[-64:]
    )
    torch.testing.assert_close(out[:, :, -64:].cpu(), ref, rtol=1e-4, atol=1e-5)


# ---- errors: the same exception type as CPU ----


def same_error(fn, *tensors, **kw):
    errors = []
    for device in ("cpu", "oxide"):
        with pytest.raises(Exception) as e:
            fn(*[t.to(device) for t in tensors], **kw)
        errors.append(type(e.value))
    assert errors[0] is errors[1], errors


def test_errors_match_cpu():
    q, k, v = (
        rand((1, 2, 4, 8), torch.float32, 0),
        rand((1, 2, 3, 8), torch.float32, 1),
        rand((1, 2, 3, 8), torch.float32, 2),
    )
    sdpa = F.scaled_dot_product_attention
    same_error(sdpa, q, k[..., :5], v)  # E mismatch
    same_error(sdpa, q.double(), k, v)  # mixed dtypes
    same_error(sdpa, q, k, v, torch.zeros(4, 3, dtype=torch.float64))  # mask dtype
    same_error(sdpa, q, k, v, torch.zeros(5, 3))  # mask shape
    same_error(sdpa, q, k, v, torch.zeros(4, 3), is_causal=True)  # mask with is_causal
    same_error(lambda a, b, c: sdpa(a, b, c, enable_gqa=True), rand((1, 3, 4, 8), torch.float32, 3), k, v)
    same_error(lambda a, b, c: sdpa(a, b, c, dropout_p=1.5), q, k, v)


def test_heads_mismatch_without_gqa_goes_through_math_like_cpu():
    # Hkv = 1 broadcasts in the math composite (no enable_gqa); oxide must agree, not use the kernel.
    q, k, v = (
        rand((1, 4, 6, 8), torch.float32, 50),
        rand((1, 1, 7, 8), torch.float32, 51),
        rand((1, 1, 7, 8), torch.float32, 52),
    )
    compare(q, k, v)
