// searchsorted and bucketize on oxide: PyTorch's argument checks and input
// preparation (ATen/native/BucketizationUtils.h), then one binary search per
// value in oxide_kernels::ops::reduce::search. bucketize is searchsorted over 1-d boundaries
// with the arguments in the other order.
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/launch.h"

#include <ATen/native/BucketizationUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

namespace oxide {
namespace {

at::Tensor& searchsorted_tensor_out(const at::Tensor& boundaries, const at::Tensor& self, bool out_int32, bool right,
                                    std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter_opt,
                                    at::Tensor& result) {
  const auto sorter = sorter_opt.has_value() ? *sorter_opt : at::Tensor();
  at::native::searchsorted_pre_check(boundaries, self, result, out_int32, right, side, sorter);
  at::native::resize_output(result, self.sizes());
  if (self.numel() == 0) {
    return result;
  }
  const bool is_right = side.has_value() ? *side == "right" : right;
  // Contiguous operands of one common dtype, exactly as CPU prepares them.
  at::Tensor in, bd, srt;
  at::native::searchsorted_maybe_trim_input_tensors(in, bd, srt, self, boundaries, sorter);
  const auto& values = in.defined() ? in : self;
  const auto& seq = bd.defined() ? bd : boundaries;
  const auto& order = srt.defined() ? srt : sorter;
  auto dst = result.is_contiguous() ? result : at::empty(result.sizes(), result.options());
  OXIDE_CHECK(oxide_searchsorted(launch_on(dst), out_arg(dst), in_arg(values), in_arg(seq), in_arg(order), is_right));
  if (!dst.is_same(result)) {
    result.copy_(dst);
  }
  return result;
}

at::Tensor searchsorted_result(const at::Tensor& like, bool out_int32) {
  return at::empty({0}, like.options().dtype(out_int32 ? at::kInt : at::kLong));
}

at::Tensor searchsorted_tensor(const at::Tensor& boundaries, const at::Tensor& self, bool out_int32, bool right,
                               std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter) {
  auto result = searchsorted_result(self, out_int32);
  return searchsorted_tensor_out(boundaries, self, out_int32, right, side, sorter, result);
}

at::Tensor& searchsorted_scalar_out(const at::Tensor& boundaries, const c10::Scalar& self, bool out_int32, bool right,
                                    std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter,
                                    at::Tensor& result) {
  return searchsorted_tensor_out(boundaries, at::native::searchsorted_scalar_tensor(self, boundaries.device()),
                                 out_int32, right, side, sorter, result);
}

at::Tensor searchsorted_scalar(const at::Tensor& boundaries, const c10::Scalar& self, bool out_int32, bool right,
                               std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter) {
  return searchsorted_tensor(boundaries, at::native::searchsorted_scalar_tensor(self, boundaries.device()), out_int32,
                             right, side, sorter);
}

at::Tensor& bucketize_tensor_out(const at::Tensor& self, const at::Tensor& boundaries, bool out_int32, bool right,
                                 at::Tensor& result) {
  TORCH_CHECK(boundaries.dim() == 1, "boundaries tensor must be 1 dimension, but got dim(", boundaries.dim(), ")");
  return searchsorted_tensor_out(boundaries, self, out_int32, right, std::nullopt, std::nullopt, result);
}

at::Tensor bucketize_tensor(const at::Tensor& self, const at::Tensor& boundaries, bool out_int32, bool right) {
  auto result = searchsorted_result(self, out_int32);
  return bucketize_tensor_out(self, boundaries, out_int32, right, result);
}

at::Tensor bucketize_scalar(const c10::Scalar& self, const at::Tensor& boundaries, bool out_int32, bool right) {
  return bucketize_tensor(at::native::searchsorted_scalar_tensor(self, boundaries.device()), boundaries, out_int32,
                          right);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "searchsorted.Tensor", TORCH_FN(searchsorted_tensor));
  OXIDE_IMPL(m, "searchsorted.Tensor_out", TORCH_FN(searchsorted_tensor_out));
  OXIDE_IMPL(m, "searchsorted.Scalar", TORCH_FN(searchsorted_scalar));
  OXIDE_IMPL(m, "searchsorted.Scalar_out", TORCH_FN(searchsorted_scalar_out));
  OXIDE_IMPL(m, "bucketize.Tensor", TORCH_FN(bucketize_tensor));
  OXIDE_IMPL(m, "bucketize.Tensor_out", TORCH_FN(bucketize_tensor_out));
  OXIDE_IMPL(m, "bucketize.Scalar", TORCH_FN(bucketize_scalar));
}

}  // namespace oxide
