// AutocastPrivateUse1: torch.autocast("oxide") casts with the same per-operator
// policies as CUDA, taken from PyTorch's shared op lists in ATen/autocast_mode.h
// (lower precision for matmul/conv/linear..., float32 for exp/log/norms/losses...,
// float32 with an optional dtype for sum/softmax..., widest type for cat-like
// promote ops). binary_cross_entropy is banned as on CUDA (unsafe in float16).
// Every other operator falls through to the next dispatch key.
#include <ATen/Operators.h>
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace {

// The shared op lists spell types unqualified (Tensor, Scalar, ScalarType), as
// inside at::; bring those names in for the registration block only.
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

// As on CUDA: binary_cross_entropy in float16 loses the small probabilities it needs.
at::Tensor binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                       int64_t) {
  TORCH_CHECK(false,
              "oxide autocast: torch.nn.functional.binary_cross_entropy / torch.nn.BCELoss are unsafe in lower "
              "precision and refused under torch.autocast(\"oxide\"). Feed logits to "
              "torch.nn.functional.binary_cross_entropy_with_logits / torch.nn.BCEWithLogitsLoss instead (they "
              "fold the sigmoid in and are autocast-safe).");
}

#define OXIDE_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define OXIDE_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define OXIDE_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define OXIDE_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(OXIDE_LOWER_PRECISION_FP)
  AT_FORALL_FP32(OXIDE_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(OXIDE_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(OXIDE_PROMOTE)
  m.impl("binary_cross_entropy", TORCH_FN(binary_cross_entropy_banned));
}

}  // namespace
