// Histograms on oxide: histc is PyTorch's own operator around
// histogramdd_linear_stub (one dimension, edges from linspace), registered here;
// bincount restates CPU's checks in CPU's order. Loops in Rust:
// oxide_kernels::ops::reduce::histogram.
#include "common/device_check.h"
#include "common/kernels.h"

#include <ATen/native/Histogram.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/histc_native.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>

namespace oxide {
namespace {

// histogramdd_linear_stub for histc's one dimension (input reshaped to (N, 1),
// edges from linspace). torch.histogram/histogramdd reach it only on CPU tensors.
void histogram_linear_kernel(const at::Tensor& self, const std::optional<at::Tensor>& weight, bool density,
                             at::Tensor& hist, const at::TensorList& bin_edges, bool local_search) {
  TORCH_CHECK_NOT_IMPLEMENTED(!weight.has_value() && !density && bin_edges.size() == 1 && self.dim() == 2 &&
                                  self.size(1) == 1,
                              "oxide: weighted, normalised or multi-dimensional histograms have no native kernel");
  const auto edges = bin_edges[0].contiguous();
  auto dst = hist.is_contiguous() ? hist : at::empty(hist.sizes(), hist.options());
  const auto device = hist.device().index();
  OXIDE_CHECK(oxide_histc(device, current_stream(device), static_cast<int32_t>(self.scalar_type()),
                          static_cast<size_t>(self.size(0)), self.const_data_ptr(), self.stride(0),
                          edges.const_data_ptr(), static_cast<size_t>(edges.numel()), local_search ? 1 : 0,
                          dst.mutable_data_ptr(), static_cast<int32_t>(at::get_num_threads())));
  if (!dst.is_same(hist)) {
    hist.copy_(dst);
  }
}

at::Tensor bincount_impl(const at::Tensor& self, const std::optional<at::Tensor>& weights_opt, int64_t minlength) {
  // CPU's checks, in CPU's order: dtype (AT_DISPATCH_INTEGRAL_TYPES), minlength, emptiness, rank and sign, weights.
  const auto st = self.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(st == at::kByte || st == at::kChar || st == at::kShort || st == at::kInt || st == at::kLong,
                              "\"bincount\" not implemented for '", st, "'");
  TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
  if (self.dim() == 1 && self.numel() == 0) {
    return at::zeros({minlength}, self.options().dtype(at::kLong));
  }
  const auto device = self.device().index();
  const auto stream = current_stream(device);
  int64_t lo = 0, hi = -1;
  bool any = false;
  if (self.dim() == 1) {
    OXIDE_CHECK(oxide_bincount_range(device, stream, static_cast<int32_t>(st), static_cast<size_t>(self.numel()),
                                     self.const_data_ptr(), self.stride(0), &lo, &hi, &any));
  }
  TORCH_CHECK(self.dim() == 1 && lo >= 0, "bincount only supports 1-d non-negative integral inputs.");
  TORCH_CHECK(hi < std::numeric_limits<int64_t>::max(), "maximum value of input overflowed, it should be < ",
              std::numeric_limits<int64_t>::max(), " but got ", hi);
  at::Tensor weights = weights_opt.has_value() ? *weights_opt : at::Tensor();
  TORCH_CHECK(!weights.defined() || (weights.dim() == 1 && weights.size(0) == self.size(0)),
              "weights should be 1-d and have the same length as input");
  const auto nbins = std::max(hi + 1, minlength);
  // float32 weights sum in float; any other dtype is summed as float64.
  if (weights.defined() && weights.scalar_type() != at::kFloat) {
    weights = weights.to(at::kDouble);
  }
  auto out = at::empty({nbins}, self.options().dtype(weights.defined() ? weights.scalar_type() : at::kLong));
  OXIDE_CHECK(oxide_bincount(device, stream, static_cast<int32_t>(st), static_cast<size_t>(self.numel()),
                             self.const_data_ptr(), self.stride(0),
                             weights.defined() ? static_cast<int32_t>(weights.scalar_type()) : -1,
                             weights.defined() ? weights.const_data_ptr() : nullptr,
                             weights.defined() ? weights.stride(0) : 0, out.mutable_data_ptr(), static_cast<size_t>(nbins)));
  return out;
}

} // namespace
} // namespace oxide

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(histogramdd_linear_stub, &::oxide::histogram_linear_kernel)
} // namespace at::native

namespace oxide {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace at::native;
  OXIDE_IMPL(m, "histc", TORCH_FN(histogram_histc));
  OXIDE_IMPL(m, "histc.out", TORCH_FN(histogram_histc_out));
  OXIDE_IMPL(m, "bincount", TORCH_FN(bincount_impl));
}

} // namespace oxide
