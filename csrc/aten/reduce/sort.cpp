// Sorting on oxide: sort (always stable; argsort and msort go through it) and
// topk, the first k of a stable sort. PyTorch's structured meta functions check
// the arguments and size the outputs; oxide_kernels::ops::reduce::sort sorts the rows.
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/launch.h"
#include "common/structured.h"

#include <ATen/WrapDimUtils.h>
#include <ATen/native/Sorting.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/sort_native.h>
#include <ATen/ops/topk_meta.h>
#include <torch/library.h>

namespace oxide {
namespace {

// sort_stub: `values` already holds a copy of self; sort it along `dim` (always stable).
void sort_kernel(const at::TensorBase& self, const at::TensorBase& values_base, const at::TensorBase& indices_base,
                 int64_t dim, bool descending, bool /*stable*/) {
  at::Tensor values(values_base);
  at::Tensor indices(indices_base);
  if (values.numel() == 0) {
    return;
  }
  auto rows = values.movedim(dim, -1).contiguous();
  auto idx = at::empty(rows.sizes(), rows.options().dtype(at::kLong));
  OXIDE_CHECK(oxide_sort_rows(launch_on(rows), inout_arg(rows), out_arg(idx), descending));
  values.copy_(rows.movedim(-1, dim));
  indices.copy_(idx.movedim(-1, dim));
}

// topk: the k first of a stable sort along `dim` (largest: descending).
struct Topk : at::meta::structured_topk {
  void impl(const at::Tensor& self, int64_t k, int64_t dim, bool largest, bool /*sorted*/, const at::Tensor& values,
            const at::Tensor& indices) {
    dim = at::maybe_wrap_dim(dim, self.dim());
    if (self.dim() == 0) {
      values.copy_(self);
      indices.zero_();
      return;
    }
    if (k == 0) {
      return;
    }
    auto [v, i] = at::sort(self, /*stable=*/true, dim, /*descending=*/largest);
    values.copy_(v.narrow(dim, 0, k));
    indices.copy_(i.narrow(dim, 0, k));
  }
};

}  // namespace
}  // namespace oxide

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(sort_stub, &::oxide::sort_kernel)
}  // namespace at::native

namespace oxide {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace at::native;
  OXIDE_IMPL(
      m, "sort.stable",
      TORCH_FN((
          structured::functional2<structured_sort_stable_out, const at::Tensor&, std::optional<bool>, int64_t, bool>)));
  OXIDE_IMPL(
      m, "sort.values_stable",
      TORCH_FN((structured::out2<structured_sort_stable_out, const at::Tensor&, std::optional<bool>, int64_t, bool>)));
  OXIDE_IMPL(m, "topk", TORCH_FN((structured::functional2<Topk, const at::Tensor&, int64_t, int64_t, bool, bool>)));
  OXIDE_IMPL(m, "topk.values", TORCH_FN((structured::out2<Topk, const at::Tensor&, int64_t, int64_t, bool, bool>)));
}

}  // namespace oxide
