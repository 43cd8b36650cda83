// Scans, sorting and selection on oxide: cumsum/cumprod (structured kernels
// + their stubs), cummax/cummin, sort (stable, + argsort/topk through it),
// nonzero and masked_select (through nonzero-based indexing). Loops in Rust:
// oxide_kernels::scan, ::sort, ::nonzero.
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/structured.h"

#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/ReduceOps.h>
#include <ATen/native/Resize.h>
#include <ATen/native/Sorting.h>
#include <ATen/ops/cumprod_native.h>
#include <ATen/ops/cumsum_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/index.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/sort_native.h>
#include <ATen/ops/topk_meta.h>
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
  const auto device = o.device().index();
  OXIDE_CHECK(oxide_scan(device, current_stream(device), op, static_cast<size_t>(s.dim()), s.sizes().data(),
                         static_cast<size_t>(dim), static_cast<int32_t>(s.scalar_type()), s.const_data_ptr(),
                         s.strides().data(), static_cast<int32_t>(o.scalar_type()), o.mutable_data_ptr(),
                         o.strides().data(), i.defined() ? i.mutable_data_ptr<int64_t>() : nullptr,
                         i.defined() ? i.strides().data() : nullptr, static_cast<int32_t>(at::get_num_threads())));
}

// A scan reads elements it has already written past: an out= that partly overlaps
// the input would read results. CPU refuses it; the same tensor (in place) is fine.
void cumsum_kernel(const at::Tensor& result, const at::Tensor& self, int64_t dim) {
  at::assert_no_partial_overlap(result, self);
  scan(0, result, self, dim, nullptr);
}
void cumprod_kernel(const at::Tensor& result, const at::Tensor& self, int64_t dim) {
  at::assert_no_partial_overlap(result, self);
  scan(1, result, self, dim, nullptr);
}

void cummax_helper(const at::Tensor& self, at::Tensor& values, at::Tensor& indices, int64_t dim) {
  scan(2, values, self, dim, &indices);
}
void cummin_helper(const at::Tensor& self, at::Tensor& values, at::Tensor& indices, int64_t dim) {
  scan(3, values, self, dim, &indices);
}

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
  const auto len = rows.size(-1);
  const auto device = rows.device().index();
  OXIDE_CHECK(oxide_sort_rows(device, current_stream(device), static_cast<int32_t>(rows.scalar_type()),
                              static_cast<size_t>(rows.numel() / len), static_cast<size_t>(len), rows.mutable_data_ptr(),
                              idx.mutable_data_ptr<int64_t>(), descending ? 1 : 0,
                              static_cast<int32_t>(at::get_num_threads())));
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

at::Tensor& nonzero_out(const at::Tensor& self, at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == at::kLong, "nonzero: Expected out tensor to have scalar type Long but got scalar type",
              out.scalar_type());
  TORCH_CHECK(self.numel() < std::numeric_limits<int>::max(), "nonzero is not supported for tensors with more than INT_MAX elements");
  const auto device = self.device().index();
  const auto stream = current_stream(device);
  const auto dt = static_cast<int32_t>(self.scalar_type());
  size_t count = 0;
  OXIDE_CHECK(oxide_nonzero(device, stream, dt, self.dim(), self.sizes().data(), self.strides().data(),
                            self.const_data_ptr(), nullptr, &count));
  const auto n = static_cast<int64_t>(count);
  if (at::native::resize_output(out, {n, self.dim()})) {
    // A freshly sized result is column-major, as CPU's (strides (1, n)); PyTorch's
    // meta/fake kernel assumes that layout, so torch.compile checks it.
    out.as_strided_({n, self.dim()}, {1, n});
  }
  if (count > 0 && self.dim() > 0) {
    // Coordinates are written row-major; a transposed out (as CPU allows) goes through a temporary.
    auto dst = out.is_contiguous() ? out : at::empty(out.sizes(), out.options());
    OXIDE_CHECK(oxide_nonzero(device, stream, dt, self.dim(), self.sizes().data(), self.strides().data(),
                              self.const_data_ptr(), dst.mutable_data_ptr<int64_t>(), &count));
    if (!dst.is_same(out)) {
      out.copy_(dst);
    }
  }
  return out;
}

at::Tensor nonzero_impl(const at::Tensor& self) {
  auto out = at::empty({0}, self.options().dtype(at::kLong));
  return nonzero_out(self, out);
}

at::Tensor masked_select_impl(const at::Tensor& self, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  TORCH_CHECK(self.device() == mask.device(), "masked_select(): self and mask must be on the same device");
  auto [m, s] = at::expand_outplace(mask, self);
  // 0-dim operands select from a one-element vector (the result is 1-d either way).
  const auto source = s->dim() == 0 ? s->reshape({1}) : *s;
  c10::List<std::optional<at::Tensor>> idx;
  idx.push_back(m->dim() == 0 ? m->reshape({1}) : *m);
  return at::index(source, idx);
}

at::Tensor& masked_select_out(const at::Tensor& self, const at::Tensor& mask, at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "masked_select(): self and result must have the same scalar type");
  const auto r = masked_select_impl(self, mask);
  at::native::resize_output(out, r.sizes());
  out.copy_(r);
  return out;
}

} // namespace
} // namespace oxide

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(cumsum_stub, &::oxide::cumsum_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(cumprod_stub, &::oxide::cumprod_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(sort_stub, &::oxide::sort_kernel)
} // namespace at::native

namespace oxide {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace at::native;
  using OptDtype = std::optional<at::ScalarType>;
  OXIDE_STRUCTURED(m, structured_cumsum_out, "cumsum", "cumsum_", "cumsum.out", int64_t, OptDtype);
  OXIDE_STRUCTURED(m, structured_cumprod_out, "cumprod", "cumprod_", "cumprod.out", int64_t, OptDtype);
  OXIDE_IMPL(m, "_cummax_helper", TORCH_FN(cummax_helper));
  OXIDE_IMPL(m, "_cummin_helper", TORCH_FN(cummin_helper));
  OXIDE_IMPL(m, "sort.stable", TORCH_FN((structured::functional2<structured_sort_stable_out, const at::Tensor&, std::optional<bool>, int64_t, bool>)));
  OXIDE_IMPL(m, "sort.values_stable", TORCH_FN((structured::out2<structured_sort_stable_out, const at::Tensor&, std::optional<bool>, int64_t, bool>)));
  OXIDE_IMPL(m, "topk", TORCH_FN((structured::functional2<Topk, const at::Tensor&, int64_t, int64_t, bool, bool>)));
  OXIDE_IMPL(m, "topk.values", TORCH_FN((structured::out2<Topk, const at::Tensor&, int64_t, int64_t, bool, bool>)));
  OXIDE_IMPL(m, "nonzero", TORCH_FN(nonzero_impl));
  OXIDE_IMPL(m, "nonzero.out", TORCH_FN(nonzero_out));
  OXIDE_IMPL(m, "masked_select", TORCH_FN(masked_select_impl));
  OXIDE_IMPL(m, "masked_select.out", TORCH_FN(masked_select_out));
}

} // namespace oxide
