// Scans on oxide: cumsum and cumprod (PyTorch's structured kernels, through
// their stubs) and cummax / cummin (the _cummax_helper / _cummin_helper that
// PyTorch's device-generic cummax and cummin call). One Rust loop serves all
// four: oxide_kernels::ops::reduce::scan.
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/launch.h"
#include "common/structured.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/ReduceOps.h>
#include <ATen/ops/cumprod_native.h>
#include <ATen/ops/cumsum_native.h>
#include <torch/library.h>

namespace oxide {
namespace {

// One scan along `dim` of `self` into `out` (same shape) and optionally `indices`.
void scan(int32_t op, const at::Tensor& out, const at::Tensor& self, int64_t dim, const at::Tensor* indices) {
  if (self.numel() == 0) {
    return;
  }
  // 0-dim tensors scan as one-element vectors.
  const auto s = self.dim() == 0 ? self.view({1}) : self;
  const auto o = out.dim() == 0 ? out.view({1}) : out;
  const auto i = indices == nullptr ? at::Tensor() : (indices->dim() == 0 ? indices->view({1}) : *indices);
  dim = at::maybe_wrap_dim(dim, s.dim());
  OXIDE_CHECK(oxide_scan(launch_on(o), op, static_cast<size_t>(dim), out_arg(o), in_arg(s), out_arg(i)));
}

// A scan reads elements it has already written past: an out= that partly overlaps
// the input would read results. CPU refuses it; the same tensor (in place) is fine.
void cumsum_kernel(const at::Tensor& result, const at::Tensor& self, int64_t dim) {
  at::assert_no_partial_overlap(result, self);
  scan(OXIDE_SCAN_CUMSUM, result, self, dim, nullptr);
}
void cumprod_kernel(const at::Tensor& result, const at::Tensor& self, int64_t dim) {
  at::assert_no_partial_overlap(result, self);
  scan(OXIDE_SCAN_CUMPROD, result, self, dim, nullptr);
}

void cummax_helper(const at::Tensor& self, at::Tensor& values, at::Tensor& indices, int64_t dim) {
  scan(OXIDE_SCAN_CUMMAX, values, self, dim, &indices);
}
void cummin_helper(const at::Tensor& self, at::Tensor& values, at::Tensor& indices, int64_t dim) {
  scan(OXIDE_SCAN_CUMMIN, values, self, dim, &indices);
}

}  // namespace
}  // namespace oxide

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(cumsum_stub, &::oxide::cumsum_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(cumprod_stub, &::oxide::cumprod_kernel)
}  // namespace at::native

namespace oxide {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace at::native;
  using OptDtype = std::optional<at::ScalarType>;
  OXIDE_STRUCTURED(m, structured_cumsum_out, "cumsum", "cumsum_", "cumsum.out", int64_t, OptDtype);
  OXIDE_STRUCTURED(m, structured_cumprod_out, "cumprod", "cumprod_", "cumprod.out", int64_t, OptDtype);
  OXIDE_IMPL(m, "_cummax_helper", TORCH_FN(cummax_helper));
  OXIDE_IMPL(m, "_cummin_helper", TORCH_FN(cummin_helper));
}

}  // namespace oxide
