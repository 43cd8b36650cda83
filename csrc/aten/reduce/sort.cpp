// Sorting on oxide: sort (always stable; argsort and msort go through it), topk
// (the first k of a stable sort) and the order statistics kthvalue, median,
// nanmedian and mode, read off a stable sort with device gathers. PyTorch's
// structured meta functions (or CPU's checks, repeated) check the arguments and size
// the outputs; oxide_kernels::ops::reduce::sort sorts the rows.
//
// Which of several equal elements an order statistic's index names is left to the
// implementation (CPU's nth_element / std::sort pick among ties their own way); here
// it is always the stable sort's: kthvalue and median the k-th in stable order,
// mode the last occurrence of the most frequent value (the smallest such value).
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/launch.h"
#include "common/structured.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/TensorUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/ReduceOpsUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/Sorting.h>
#include <ATen/native/SortingUtils.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/cummax.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/where.h>
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

// The element at position `k` (a tensor broadcast along the other dims, keepdim
// shape) of the stable ascending sort of `self` along `dim`, into values/indices.
void pick_sorted(const at::Tensor& sorted, const at::Tensor& order, int64_t dim, const at::Tensor& k, bool keepdim,
                 at::Tensor& values, at::Tensor& indices) {
  auto v = sorted.gather(dim, k);
  auto i = order.gather(dim, k);
  if (!keepdim) {
    v = v.squeeze(dim);
    i = i.squeeze(dim);
  }
  values.copy_(v);
  indices.copy_(i);
}

std::tuple<at::Tensor&, at::Tensor&> kthvalue_out(const at::Tensor& self, int64_t k, int64_t dim_, bool keepdim,
                                                  at::Tensor& values, at::Tensor& indices) {
  // CPU's checks, in CPU's order (kthvalue_out_impl_cpu).
  const int64_t dim = at::maybe_wrap_dim(dim_, self.dim(), /*wrap_scalar=*/true);
  const int64_t size = self.dim() > 0 ? self.size(dim) : 1;
  TORCH_CHECK(k >= 1 && k <= size, "kthvalue(): selected number k out of range for dimension ", dim);
  at::assert_no_overlap(self, values);
  at::native::_reduction_with_indices_allocate_or_resize_output(values, indices, self, dim_, keepdim);
  if (self.dim() == 0 && self.numel() == 1) {
    values.copy_(self);
    indices.zero_();
    return std::forward_as_tuple(values, indices);
  }
  auto [sorted, order] = at::sort(self, /*stable=*/true, dim, /*descending=*/false);
  auto pos = at::full({1}, k - 1, self.options().dtype(at::kLong));
  auto shape = self.sizes().vec();
  shape[dim] = 1;
  pick_sorted(sorted, order, dim, pos.view(std::vector<int64_t>(self.dim(), 1)).expand(shape), /*keepdim=*/true, values,
              indices);
  if (!keepdim) {
    values.squeeze_(dim);
    indices.squeeze_(dim);
  }
  return std::forward_as_tuple(values, indices);
}

// median / nanmedian along `dim`: the ((n - 1) / 2)-th of the stable sort (NaN sorts
// last). median with a NaN in the row picks the first NaN (CPU's answer); nanmedian
// counts only the non-NaN elements (an all-NaN row gives its first NaN).
std::tuple<at::Tensor&, at::Tensor&> median_dim_impl(const at::Tensor& self, int64_t dim_, bool keepdim,
                                                     at::Tensor& values, at::Tensor& indices, bool ignore_nan) {
  const int64_t dim = at::maybe_wrap_dim(dim_, self.dim(), /*wrap_scalar=*/true);
  // CPU's checks and messages (median_with_indices_impl; nanmedian shares them).
  at::native::zero_numel_check_dims(self, dim, "median()");
  at::checkDeviceType("median", {values, indices}, self.device().type());
  at::checkScalarType("median", {indices, "indices", 1}, at::kLong);
  at::checkSameType("median", {values, "values", 0}, {self, "self", 2});
  auto out_shape = self.sizes().vec();
  if (self.dim() > 0) {
    if (keepdim) {
      out_shape[dim] = 1;
    } else {
      out_shape.erase(out_shape.begin() + dim);
    }
  }
  at::native::resize_output(values, out_shape);
  at::native::resize_output(indices, out_shape);
  const auto in = self.dim() > 0 ? self : self.unsqueeze(0);
  const int64_t n = in.size(dim);
  auto [sorted, order] = at::sort(in, /*stable=*/true, dim, /*descending=*/false);
  at::Tensor pos;
  if (at::isFloatingType(self.scalar_type())) {
    const auto nans = in.isnan().sum(dim, /*keepdim=*/true);  // int64
    const auto valid = nans.neg().add_(n);                    // n - #NaN
    pos = ignore_nan ? valid.sub(1).clamp_min_(0).div_(2, "floor")
                     : at::where(nans.gt(0), valid, valid.sub(1).div_(2, "floor"));
  } else {
    auto shape = in.sizes().vec();
    shape[dim] = 1;
    pos = at::full(shape, (n - 1) / 2, in.options().dtype(at::kLong));
  }
  const bool squeeze = self.dim() > 0 && !keepdim;
  auto pv = sorted.gather(dim, pos);
  auto pi = order.gather(dim, pos);
  if (squeeze || self.dim() == 0) {
    pv = pv.squeeze(dim);
    pi = pi.squeeze(dim);
  }
  values.copy_(pv);
  indices.copy_(pi);
  return std::forward_as_tuple(values, indices);
}

std::tuple<at::Tensor&, at::Tensor&> median_dim_out(const at::Tensor& self, int64_t dim, bool keepdim,
                                                    at::Tensor& values, at::Tensor& indices) {
  return median_dim_impl(self, dim, keepdim, values, indices, /*ignore_nan=*/false);
}
std::tuple<at::Tensor&, at::Tensor&> nanmedian_dim_out(const at::Tensor& self, int64_t dim, bool keepdim,
                                                       at::Tensor& values, at::Tensor& indices) {
  return median_dim_impl(self, dim, keepdim, values, indices, /*ignore_nan=*/true);
}

// median() / nanmedian() of all elements; NaN for an empty tensor (CPU's answer).
at::Tensor median_all_impl(const at::Tensor& self, bool ignore_nan) {
  if (self.numel() == 0) {
    return at::full({}, std::numeric_limits<float>::quiet_NaN()).to(self.options());
  }
  auto values = at::empty({}, self.options());
  auto indices = at::empty({}, self.options().dtype(at::kLong));
  median_dim_impl(self.reshape({-1}), 0, false, values, indices, ignore_nan);
  return values;
}
at::Tensor median_all(const at::Tensor& self) { return median_all_impl(self, false); }
at::Tensor nanmedian_all(const at::Tensor& self) { return median_all_impl(self, true); }

// mode along `dim`: in the stable sort, the running length of each run of equal
// values peaks at the run's last element; the first position of the largest peak
// is the end of the most frequent value's run (the smallest such value, as CPU's
// strict comparison picks), and its index the value's last occurrence.
std::tuple<at::Tensor&, at::Tensor&> mode_out(const at::Tensor& self, int64_t dim_, bool keepdim, at::Tensor& values,
                                              at::Tensor& indices) {
  // CPU's checks and trivial cases (mode_out in TensorCompare.cpp).
  TORCH_CHECK(self.device() == values.device(), "expected device '", self.device(), "' but got '", values.device(),
              "' for values output");
  TORCH_CHECK(self.device() == indices.device(), "expected device '", self.device(), "' but got '", indices.device(),
              "' for indices output");
  TORCH_CHECK(self.scalar_type() == values.scalar_type(), "expected scalar type '", self.scalar_type(), "' but got '",
              values.scalar_type(), "' for values output");
  TORCH_CHECK(indices.scalar_type() == at::kLong, "expected scalar type '", at::kLong, "' but got '",
              indices.scalar_type(), "' for indices output");
  const int64_t dim = at::maybe_wrap_dim(dim_, self.dim());
  if (self.numel() == 0) {
    at::native::zero_numel_tensor_resize(values, indices, self, dim, keepdim, "mode()");
    return std::forward_as_tuple(values, indices);
  }
  if (at::native::_dimreduce_return_trivial_no_ident(values, self, dim, keepdim, "mode")) {
    indices.resize_({}).fill_(0);
    return std::forward_as_tuple(values, indices);
  }
  at::native::_reduction_with_indices_allocate_or_resize_output(values, indices, self, dim, keepdim);
  auto [sorted, order] = at::sort(self, /*stable=*/true, dim, /*descending=*/false);
  const int64_t n = self.size(dim);
  std::vector<int64_t> line(self.dim(), 1);
  line[dim] = n;
  const auto pos = at::arange(n, self.options().dtype(at::kLong)).view(line);
  // A run starts where the value differs from its predecessor (NaN differs from
  // everything, as in CPU's scan).
  auto starts = at::ones_like(sorted, sorted.options().dtype(at::kBool));
  if (n > 1) {
    starts.narrow(dim, 1, n - 1).copy_(sorted.narrow(dim, 1, n - 1).ne(sorted.narrow(dim, 0, n - 1)));
  }
  const auto run_start = std::get<0>(at::cummax(at::where(starts, pos, at::zeros_like(pos)), dim));
  const auto running = pos.sub(run_start);
  const auto peak = at::argmax(running, dim, /*keepdim=*/true);
  pick_sorted(sorted, order, dim, peak, /*keepdim=*/true, values, indices);
  if (!keepdim) {
    values.squeeze_(dim);
    indices.squeeze_(dim);
  }
  return std::forward_as_tuple(values, indices);
}

std::tuple<at::Tensor, at::Tensor> mode(const at::Tensor& self, int64_t dim, bool keepdim) {
  at::Tensor values = at::empty({0}, self.options());
  at::Tensor indices = at::empty({0}, self.options().dtype(at::kLong));
  mode_out(self, dim, keepdim, values, indices);
  return {values, indices};
}

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
  OXIDE_IMPL(m, "kthvalue.values", TORCH_FN(kthvalue_out));
  OXIDE_IMPL(m, "median", TORCH_FN(median_all));
  OXIDE_IMPL(m, "median.dim_values", TORCH_FN(median_dim_out));
  OXIDE_IMPL(m, "nanmedian", TORCH_FN(nanmedian_all));
  OXIDE_IMPL(m, "nanmedian.dim_values", TORCH_FN(nanmedian_dim_out));
  OXIDE_IMPL(m, "mode", TORCH_FN(mode));
  OXIDE_IMPL(m, "mode.values", TORCH_FN(mode_out));
}

}  // namespace oxide
