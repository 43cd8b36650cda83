// tril/triu, flip, roll and take on oxide: operators with no kernel of their
// own (CPU's loops for them are CPU-only), composed on the device from the
// index family's kernels: a broadcast comparison with where / masked_fill_,
// index_select, cat of two narrowed slices, index. They live in index/
// because that is what they run on; checks come from PyTorch's meta functions.
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/structured.h"

#include <ATen/WrapDimUtils.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/index.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/tril_meta.h>
#include <ATen/ops/triu_meta.h>
#include <ATen/ops/where.h>
#include <ATen/MemoryOverlap.h>
#include <torch/library.h>

namespace oxide {
namespace {

using Indices = c10::List<std::optional<at::Tensor>>;

// tril/triu keep element (i, j) of the last two dims when j - i <= k (tril) or >= k (triu).
template <bool Lower>
void triangle(const at::Tensor& self, int64_t k, const at::Tensor& out) {
  if (out.numel() == 0) {
    return;
  }
  const auto opts = self.options().dtype(at::kLong);
  const auto rows = at::arange(self.size(-2), opts).unsqueeze(1);
  const auto cols = at::arange(self.size(-1), opts).unsqueeze(0);
  const auto diff = cols.sub(rows);
  const auto keep = Lower ? diff.le(k) : diff.ge(k);
  if (out.is_same(self)) {
    out.masked_fill_(keep.logical_not(), 0);
  } else {
    out.copy_(at::where(keep, self, at::scalar_tensor(0, self.options())));
  }
}
struct Tril : at::meta::structured_tril {
  void impl(const at::Tensor& self, int64_t k, const at::Tensor& out) { triangle<true>(self, k, out); }
};
struct Triu : at::meta::structured_triu {
  void impl(const at::Tensor& self, int64_t k, const at::Tensor& out) { triangle<false>(self, k, out); }
};

at::Tensor flip(const at::Tensor& self, at::IntArrayRef dims) {
  const auto wrapped = at::dim_list_to_bitset(dims, self.dim());  // raises on duplicates / out of range
  auto result = self;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (wrapped[d] && self.size(d) > 1) {
      const auto n = self.size(d);
      result = result.index_select(d, at::arange(n - 1, -1, -1, self.options().dtype(at::kLong)));
    }
  }
  return result.is_same(self) ? self.clone() : result;
}

at::Tensor roll_dim(const at::Tensor& self, int64_t shift, int64_t dim) {
  const auto n = self.size(dim);
  if (n == 0) {
    return self.clone();
  }
  const auto s = ((shift % n) + n) % n;
  if (s == 0) {
    return self.clone();
  }
  return at::cat({self.narrow(dim, n - s, s), self.narrow(dim, 0, n - s)}, dim);
}

at::Tensor roll(const at::Tensor& self, at::IntArrayRef shifts, at::IntArrayRef dims) {
  TORCH_CHECK(!shifts.empty(), "`shifts` required");
  if (dims.empty() && shifts.size() == 1) {
    return roll_dim(self.flatten(), shifts[0], 0).view(self.sizes());
  }
  TORCH_CHECK(shifts.size() == dims.size(), "shifts and dimensions must align. shifts: ", shifts.size(),
              ", dims:", dims.size());
  auto result = self;
  for (size_t i = 0; i < dims.size(); ++i) {
    result = roll_dim(result, shifts[i], at::maybe_wrap_dim(dims[i], self.dim()));
  }
  return result;
}

at::Tensor take_impl(const at::Tensor& self, const at::Tensor& index) {
  TORCH_CHECK(index.scalar_type() == at::kLong, "take(): Expected a long tensor for index, but got ",
              index.scalar_type());
  TORCH_CHECK(self.device() == index.device(),
              "take(): self and index must be on the same device. self.device() = ", self.device(),
              ", index.device() = ", index.device());
  TORCH_CHECK_INDEX(!(self.numel() == 0 && index.numel() != 0), "take(): tried to take from an empty tensor");
  Indices idx;
  idx.push_back(index);
  return at::index(self.reshape({-1}), idx);
}

at::Tensor& take_out(const at::Tensor& self, const at::Tensor& index, at::Tensor& out) {
  // CPU's checks: an out= that overlaps itself or an input raises.
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, index);
  at::assert_no_overlap(out, self);
  const auto r = take_impl(self, index);
  at::native::resize_output(out, r.sizes());
  out.copy_(r);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_STRUCTURED(m, Tril, "tril", "tril_", "tril.out", int64_t);
  OXIDE_STRUCTURED(m, Triu, "triu", "triu_", "triu.out", int64_t);
  OXIDE_IMPL(m, "flip", TORCH_FN(flip));
  OXIDE_IMPL(m, "roll", TORCH_FN(roll));
  OXIDE_IMPL(m, "take", TORCH_FN(take_impl));
  OXIDE_IMPL(m, "take.out", TORCH_FN(take_out));
}

}  // namespace oxide
