// Histograms on oxide: histc is PyTorch's own operator around
// histogramdd_linear_stub (one dimension, edges from linspace), registered here;
// bincount restates CPU's checks in CPU's order. Loops in Rust:
// oxide_kernels::ops::reduce::histogram.
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/launch.h"

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
  TORCH_CHECK_NOT_IMPLEMENTED(
      !weight.has_value() && !density && bin_edges.size() == 1 && self.dim() == 2 && self.size(1) == 1,
      "oxide: weighted, normalised or multi-dimensional histograms have no native kernel");
  const auto edges = bin_edges[0].contiguous();
  auto dst = hist.is_contiguous() ? hist : at::empty(hist.sizes(), hist.options());
  // The (N, 1) input as the 1-d column of N values the kernel counts.
  OXIDE_CHECK(oxide_histc(launch_on(dst), out_arg(dst), in_arg(self.select(1, 0)), in_arg(edges), local_search));
  if (!dst.is_same(hist)) {
    hist.copy_(dst);
  }
}

at::Tensor bincount_impl(const at::Tensor& self, const std::optional<at::Tensor>& weights_opt, int64_t minlength) {
  // CPU's checks, in CPU's order: dtype (AT_DISPATCH_INTEGRAL_TYPES), minlength, emptiness, rank and sign, weights.
  const auto st = self.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(
      st == at::kByte || st == at::kChar || st == at::kShort || st == at::kInt || st == at::kLong,
      "\"bincount\" not implemented for '", st, "'");
  TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
  if (self.dim() == 1 && self.numel() == 0) {
    return at::zeros({minlength}, self.options().dtype(at::kLong));
  }
  int64_t lo = 0, hi = -1;
  bool any = false;
  if (self.dim() == 1) {
    OXIDE_CHECK(oxide_bincount_range(launch_on(self), in_arg(self), &lo, &hi, &any));
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
  OXIDE_CHECK(oxide_bincount(launch_on(self), out_arg(out), in_arg(self), in_arg(weights)));
  return out;
}

}  // namespace
}  // namespace oxide

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(histogramdd_linear_stub, &::oxide::histogram_linear_kernel)
}  // namespace at::native

namespace oxide {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace at::native;
  OXIDE_IMPL(m, "histc", TORCH_FN(histogram_histc));
  OXIDE_IMPL(m, "histc.out", TORCH_FN(histogram_histc_out));
  OXIDE_IMPL(m, "bincount", TORCH_FN(bincount_impl));
}

}  // namespace oxide
