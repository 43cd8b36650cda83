// unique on oxide (torch.unique and unique_consecutive, flat or along a dim):
// equal rows are grouped by oxide_kernels::ops::reduce::unique, after a row sort
// (oxide_argsort_rows) when the result is sorted; one-byte dtypes are counted
// instead of sorted. Shapes, and the empty results not asked for, follow CPU.
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/launch.h"

#include <ATen/WrapDimUtils.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <tuple>

namespace oxide {
namespace {

using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

struct Groups {
  at::Tensor reps;     // first row of each group (k)
  at::Tensor inverse;  // group of each row (n), undefined unless asked for
  at::Tensor counts;   // rows per group (k), undefined unless asked for
  int64_t k = 0;
};

// Groups of equal rows of the contiguous (n, m) `rows`, in lexicographic order
// when `sort`, else in order of appearance (consecutive runs).
Groups group_rows(const at::Tensor& rows, bool sort, bool want_inverse, bool want_counts) {
  const auto n = rows.size(0);
  const auto opts = rows.options().dtype(at::kLong);
  at::Tensor perm;  // undefined (absent) unless sorted
  if (sort) {
    perm = at::empty({n}, opts);
    OXIDE_CHECK(oxide_argsort_rows(launch_on(rows), in_arg(rows), out_arg(perm)));
  }
  Groups g;
  g.reps = at::empty({n}, opts);
  g.inverse = want_inverse ? at::empty({n}, opts) : at::Tensor();
  g.counts = want_counts ? at::empty({n}, opts) : at::Tensor();
  size_t k = 0;
  OXIDE_CHECK(oxide_unique_consecutive(launch_on(rows), in_arg(rows), in_arg(perm), out_arg(g.reps), out_arg(g.inverse),
                                       out_arg(g.counts), &k));
  g.k = static_cast<int64_t>(k);
  g.reps.resize_({g.k});
  if (want_counts) {
    g.counts.resize_({g.k});
  }
  return g;
}

// Flat unique (sorted) or unique_consecutive: values, inverse (input's shape), counts;
// results not asked for are empty, as on CPU.
Triple unique_flat(const at::Tensor& self, bool sort, bool return_inverse, bool return_counts) {
  const auto opts = self.options().dtype(at::kLong);
  if (self.numel() == 0) {
    return {at::empty({0}, self.options()), return_inverse ? at::empty(self.sizes(), opts) : at::empty({0}, opts),
            at::empty({0}, opts)};
  }
  const auto flat = self.contiguous().view({-1});
  const auto dt = self.scalar_type();
  if (sort && (dt == at::kBool || dt == at::kByte || dt == at::kChar)) {
    // One-byte values are counted, not sorted: no n-long int64 arrays besides the inverse.
    auto values = at::empty({256}, self.options());
    auto counts = return_counts ? at::empty({256}, opts) : at::Tensor();
    auto inverse = return_inverse ? at::empty(self.sizes(), opts) : at::empty({0}, opts);
    size_t k = 0;
    OXIDE_CHECK(oxide_unique_bytes(launch_on(flat), in_arg(flat), out_arg(values),
                                   out_arg(return_inverse ? inverse : at::Tensor()), out_arg(counts), &k));
    const auto groups = static_cast<int64_t>(k);
    return {values.narrow(0, 0, groups).clone(), inverse,
            return_counts ? counts.narrow(0, 0, groups).clone() : at::empty({0}, opts)};
  }
  auto g = group_rows(flat.view({-1, 1}), sort, return_inverse, return_counts);
  return {flat.index_select(0, g.reps), return_inverse ? g.inverse.view(self.sizes()) : at::empty({0}, opts),
          return_counts ? g.counts : at::empty({0}, opts)};
}

// unique along `dim`: whole slices compared; inverse and counts are always returned (as on CPU).
Triple unique_along(const at::Tensor& self, int64_t dim, bool sort) {
  // Not wrapped as a scalar: CPU raises IndexError for dim 0 of a 0-dim tensor.
  dim = at::maybe_wrap_dim(dim, self.dim(), /*wrap_scalar=*/false);
  const auto opts = self.options().dtype(at::kLong);
  const auto sizes = self.sizes();
  const auto zero_dims = std::count(sizes.begin(), sizes.end(), 0);
  if (self.size(dim) == 0) {
    TORCH_CHECK(zero_dims == 1, "Number of zero sized dimensions is more than one, so unique cannot be applied ");
    return {at::empty(sizes, self.options()), at::empty({0}, opts), at::empty({0}, opts)};
  }
  TORCH_CHECK(zero_dims == 0, "There are 0 sized dimensions, and they aren't selected, so unique cannot be applied");
  const auto moved = self.movedim(dim, 0);
  const auto rows = moved.contiguous().view({moved.size(0), -1});
  auto g = group_rows(rows, sort, true, true);
  auto shape = moved.sizes().vec();
  shape[0] = g.k;
  return {rows.index_select(0, g.reps).view(shape).movedim(0, dim), g.inverse, g.counts};
}

Triple unique2(const at::Tensor& self, bool /*sorted: CPU always sorts*/, bool return_inverse, bool return_counts) {
  return unique_flat(self, true, return_inverse, return_counts);
}

std::tuple<at::Tensor, at::Tensor> unique_legacy(const at::Tensor& self, bool /*sorted*/, bool return_inverse) {
  auto r = unique_flat(self, true, return_inverse, false);
  return {std::get<0>(r), std::get<1>(r)};
}

Triple unique_dim_impl(const at::Tensor& self, int64_t dim, bool /*sorted*/, bool /*return_inverse*/,
                       bool /*return_counts*/) {
  return unique_along(self, dim, true);
}

Triple unique_dim_consecutive_impl(const at::Tensor& self, int64_t dim, bool /*return_inverse*/,
                                   bool /*return_counts*/) {
  return unique_along(self, dim, false);
}

Triple unique_consecutive_impl(const at::Tensor& self, bool return_inverse, bool return_counts,
                               std::optional<int64_t> dim) {
  if (!dim.has_value() || (*dim == 0 && self.dim() == 1)) {
    return unique_flat(self, false, return_inverse, return_counts);
  }
  return unique_along(self, *dim, false);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "_unique2", TORCH_FN(unique2));
  OXIDE_IMPL(m, "_unique", TORCH_FN(unique_legacy));
  OXIDE_IMPL(m, "unique_dim", TORCH_FN(unique_dim_impl));
  OXIDE_IMPL(m, "unique_consecutive", TORCH_FN(unique_consecutive_impl));
  OXIDE_IMPL(m, "unique_dim_consecutive", TORCH_FN(unique_dim_consecutive_impl));
}

}  // namespace oxide
