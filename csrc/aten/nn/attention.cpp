// Scaled dot-product attention on oxide through PyTorch's "overrideable"
// SDPA backend: F.scaled_dot_product_attention asks _fused_sdp_choice_stub
// for the device's backend; ours answers `overrideable` when the fused Rust
// kernel (oxide_kernels::ops::nn::attention, FlashAttention-2 style, through
// oxide_attention_forward / _backward; dropout from the generator's Philox
// stream) supports the inputs and `math` (the composite, which also raises
// PyTorch's errors) otherwise.
//
// What PyTorch does before calling the overrideable op (attention.cpp,
// scaled_dot_product_attention): a bool mask becomes a float mask of the
// query's dtype (-inf where False); is_causal with a mask was already
// rejected by validate_sdpa_input; enable_gqa is not passed on, so the op
// sees Hq query heads and Hkv key/value heads and the choice below only says
// yes when enable_gqa allows Hq != Hkv. Autograd comes from derivatives.yaml:
// the op's output is differentiable, the backward receives the same bias
// (undefined when there was none) and grad_input_mask for (q, k, v, bias).
#include "common/device_check.h"
#include "common/launch.h"
#include "common/oxide.h"

#include <ATen/Context.h>
#include <ATen/ExpandUtils.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <array>
#include <cmath>
#include <limits>

namespace oxide {
namespace {

bool supported_dtype(c10::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

// The mask is one the kernel takes as an additive bias: bool (converted by
// PyTorch before the call) or the query's dtype, at most 4-d and
// broadcastable to [B, Hq, L, S].
bool mask_supported(const sdp::sdp_params& p) {
  if (!p.attn_mask.has_value()) {
    return true;
  }
  const auto& m = *p.attn_mask;
  if (m.layout() != at::kStrided || m.is_nested() || m.device() != p.query.device()) {
    return false;
  }
  if (m.scalar_type() != at::kBool && m.scalar_type() != p.query.scalar_type()) {
    return false;
  }
  const std::array<int64_t, 4> full{p.query.size(0), p.query.size(1), p.query.size(2), p.key.size(2)};
  return m.dim() <= 4 && at::is_expandable_to(m.sizes(), full);
}

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  const auto math = static_cast<int64_t>(sdp::SDPBackend::math);
  if (!at::globalContext().userEnabledOverrideableSDP()) {
    return math;
  }
  auto p =
      sdp::normalize_unbatched_input(sdp::sdp_params{query, key, value, attn_mask, dropout_p, is_causal, enable_gqa});
  constexpr std::array<at::ScalarType, 4> dtypes{at::kFloat, at::kDouble, at::kHalf, at::kBFloat16};
  const bool ok = sdp::has_only_dense_inputs(p) && p.query.layout() == at::kStrided && p.key.layout() == at::kStrided &&
                  p.value.layout() == at::kStrided && p.key.device() == p.query.device() &&
                  p.value.device() == p.query.device() && sdp::check_tensor_shapes(p, false) &&
                  sdp::check_tensor_dtype(p, dtypes, false) &&
                  sdp::check_batch_size_and_num_heads_dense</*supports_gqa=*/true>(p, false) &&
                  sdp::check_nonzero_sequence_lengths_dense(p, false) && p.query.size(-1) > 0 &&
                  p.query.size(-1) == p.key.size(-1) && p.key.size(-2) == p.value.size(-2) && mask_supported(p) &&
                  !(is_causal && attn_mask.has_value());
  return ok ? static_cast<int64_t>(sdp::SDPBackend::overrideable) : math;
}

// Inputs of one call normalised to 4-d: 3-d (unbatched) operands get a batch of 1.
at::Tensor batched(const at::Tensor& t, bool unbatched) { return unbatched && t.defined() ? t.unsqueeze(0) : t; }

struct Problem {
  OxideAttention desc{};
  at::Tensor bias;  // expanded to [B, Hq, L, S], or undefined
};

// Checks what the kernel relies on (the op can be called directly, not only
// through the choice above) and fills the ABI description (the extents come
// from the operands).
Problem describe(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& bias,
                 double dropout_p, bool is_causal, std::optional<double> scale) {
  constexpr const char* op = "_scaled_dot_product_fused_attention_overrideable";
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op,
              ": expected query, key and value to be 3-d or 4-d and of the same rank, got ", q.dim(), ", ", k.dim(),
              " and ", v.dim());
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(), op,
              ": expected query, key and value to have the same dtype, got ", q.scalar_type(), ", ", k.scalar_type(),
              " and ", v.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(supported_dtype(q.scalar_type()), op, ": dtype ", q.scalar_type(),
                              " is not supported on oxide");
  const int64_t B = q.size(0), Hq = q.size(1), L = q.size(2), E = q.size(3);
  const int64_t Hkv = k.size(1), S = k.size(2);
  TORCH_CHECK(k.size(0) == B && v.size(0) == B, op, ": query, key and value must have the same batch size");
  TORCH_CHECK(v.size(1) == Hkv && Hkv > 0 && Hq % Hkv == 0, op, ": key and value heads (", Hkv, ", ", v.size(1),
              ") must be equal and divide the query heads (", Hq, ")");
  TORCH_CHECK(k.size(3) == E, op, ": query and key feature sizes differ (", E, " vs ", k.size(3), ")");
  TORCH_CHECK(v.size(2) == S, op, ": key and value lengths differ (", S, " vs ", v.size(2), ")");
  TORCH_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, op, ": dropout probability has to be between 0 and 1, but got ",
              dropout_p);
  Problem p;
  if (bias.defined()) {
    TORCH_CHECK(bias.scalar_type() == q.scalar_type(), op, ": expected attn_bias of dtype ", q.scalar_type(), ", got ",
                bias.scalar_type());
    TORCH_CHECK(bias.dim() <= 4, op, ": attn_bias must have at most 4 dimensions, got ", bias.dim());
    p.bias = bias.expand({B, Hq, L, S});
  }
  auto& d = p.desc;
  d.causal = is_causal;
  d.scale = sdp::calculate_scale(q, scale).expect_float();
  d.dropout_p = dropout_p;
  return p;
}

// logsumexp is kept in the compute type: float, or double for double inputs.
c10::ScalarType lse_type(c10::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor, at::Tensor, at::Tensor>
fused_attention(const at::Tensor& query_, const at::Tensor& key_, const at::Tensor& value_,
                const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal,
                bool /*return_debug_mask*/, std::optional<double> scale) {
  const c10::DeviceGuard guard(query_.device());
  const bool unbatched = query_.dim() == 3;
  const auto q = batched(query_, unbatched), k = batched(key_, unbatched), v = batched(value_, unbatched);
  at::Tensor bias = attn_bias.has_value() ? *attn_bias : at::Tensor();
  auto p = describe(q, k, v, bias, dropout_p, is_causal, scale);
  const int64_t B = q.size(0), Hq = q.size(1), L = q.size(2), Ev = v.size(3);
  // The output follows the query's layout when it is a transposed [B, L, H, E]
  // buffer (what attention modules pass), as PyTorch's meta function does.
  at::Tensor out = q.stride(1) < q.stride(2) && q.stride(2) > 0 ? at::empty({B, L, Hq, Ev}, q.options()).transpose(1, 2)
                                                                : at::empty({B, Hq, L, Ev}, q.options());
  const auto lse = at::empty({B, Hq, L}, q.options().dtype(lse_type(q.scalar_type())));
  int64_t seed = 0, offset = 0;
  if (dropout_p > 0.0) {
    uint64_t blocks = 0;
    OXIDE_CHECK(oxide_attention_dropout_blocks(in_arg(q), in_arg(k), in_arg(v), &blocks));
    p.desc.philox = philox_reserve(std::nullopt, q.device(), blocks);
    seed = static_cast<int64_t>(p.desc.philox.seed);
    offset = static_cast<int64_t>(p.desc.philox.offset);
  }
  OXIDE_CHECK(oxide_attention_forward(launch_on(q), out_arg(out), out_arg(lse), in_arg(q), in_arg(k), in_arg(v),
                                      in_arg(p.bias), &p.desc));
  // Seed and offset are host scalars: the backward pass reads them without a device round trip.
  const auto host_long = at::TensorOptions().dtype(at::kLong).device(at::kCPU);
  return {unbatched ? out.squeeze(0) : out,
          lse,
          at::Tensor(),
          at::Tensor(),
          c10::SymInt(L),
          c10::SymInt(k.size(2)),
          at::scalar_tensor(seed, host_long),
          at::scalar_tensor(offset, host_long),
          at::empty({0}, q.options())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_attention_backward(
    const at::Tensor& grad_out_, const at::Tensor& query_, const at::Tensor& key_, const at::Tensor& value_,
    const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const at::Tensor& out_,
    const at::Tensor& logsumexp, const at::Tensor& /*cum_seq_q*/, const at::Tensor& /*cum_seq_k*/,
    c10::SymInt /*max_q*/, c10::SymInt /*max_k*/, double dropout_p, bool is_causal, const at::Tensor& philox_seed,
    const at::Tensor& philox_offset, std::optional<double> scale) {
  const c10::DeviceGuard guard(query_.device());
  const bool unbatched = query_.dim() == 3;
  const auto q = batched(query_, unbatched), k = batched(key_, unbatched), v = batched(value_, unbatched);
  const auto out = batched(out_, unbatched);
  const auto grad_out = batched(grad_out_, unbatched).to(q.scalar_type());
  auto p = describe(q, k, v, attn_bias, dropout_p, is_causal, scale);
  TORCH_CHECK(logsumexp.scalar_type() == lse_type(q.scalar_type()) && logsumexp.is_contiguous() &&
                  logsumexp.numel() == q.size(0) * q.size(1) * q.size(2),
              "_scaled_dot_product_fused_attention_overrideable_backward: logsumexp must be the forward's");
  TORCH_CHECK(out.sizes() == grad_out.sizes(),
              "_scaled_dot_product_fused_attention_overrideable_backward: grad_out and out shapes differ");
  if (dropout_p > 0.0) {
    p.desc.philox.seed = static_cast<uint64_t>(philox_seed.item<int64_t>());
    p.desc.philox.offset = static_cast<uint64_t>(philox_offset.item<int64_t>());
  }
  const bool want_bias = grad_input_mask[3] && attn_bias.defined();
  at::Tensor gq = grad_input_mask[0] ? at::empty_like(q) : at::Tensor();
  at::Tensor gk = grad_input_mask[1] ? at::empty_like(k) : at::Tensor();
  at::Tensor gv = grad_input_mask[2] ? at::empty_like(v) : at::Tensor();
  // The kernel writes the gradient of every broadcast bias element; broadcast
  // dims are then summed (sum_to), as autograd would for an expanded input.
  at::Tensor gb_full = want_bias ? at::empty({q.size(0), q.size(1), q.size(2), k.size(2)}, q.options()) : at::Tensor();
  OXIDE_CHECK(oxide_attention_backward(launch_on(q), out_arg(gq), out_arg(gk), out_arg(gv), out_arg(gb_full),
                                       in_arg(grad_out), in_arg(out), in_arg(logsumexp), in_arg(q), in_arg(k),
                                       in_arg(v), in_arg(p.bias), &p.desc));
  at::Tensor gb;
  if (want_bias) {
    gb = gb_full.sizes() == attn_bias.sizes() ? gb_full : at::sum_to(gb_full, attn_bias.sizes());
  }
  auto unbatch = [&](const at::Tensor& t) { return unbatched && t.defined() ? t.squeeze(0) : t; };
  return {unbatch(gq), unbatch(gk), unbatch(gv), gb};
}

}  // namespace
}  // namespace oxide

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &oxide::fused_sdp_choice)
}  // namespace at::native

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "_scaled_dot_product_fused_attention_overrideable", TORCH_FN(oxide::fused_attention));
  OXIDE_IMPL(m, "_scaled_dot_product_fused_attention_overrideable_backward", TORCH_FN(oxide::fused_attention_backward));
}
