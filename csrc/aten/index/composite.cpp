// tril/triu, flip, roll, take, put_, index_reduce and repeat_interleave on
// oxide: operators with no kernel of their own (CPU's loops for them are
// CPU-only), composed on the device from the index family's kernels: a
// broadcast comparison with where / masked_fill_, index_select, cat of two
// narrowed slices, index, index_put_, scatter_reduce_, searchsorted. They live
// in index/ because that is what they run on; checks come from PyTorch's meta
// functions or repeat CPU's.
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/structured.h"

#include <ATen/WrapDimUtils.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/index.h>
#include <ATen/ops/index_reduce_meta.h>
#include <ATen/ops/searchsorted.h>
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

// put_: index_put_ on the flattened tensor, with CPU's checks and messages.
at::Tensor& put_(at::Tensor& self, const at::Tensor& index, const at::Tensor& source, bool accumulate) {
  TORCH_CHECK_INDEX(index.scalar_type() == at::kLong, "put_(): Expected a long tensor for index, but got ",
                    index.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(),
              "put_(): self and source expected to have the same dtype, but got self.dtype = ", self.scalar_type(),
              " and source.dtype = ", source.scalar_type());
  TORCH_CHECK_INDEX(source.numel() == index.numel(),
                    "put_(): Expected source and index to have the same number of elements, but got source.numel() = ",
                    source.numel(), ", index.numel() = ", index.numel());
  TORCH_CHECK_INDEX(!(self.numel() == 0 && index.numel() != 0), "put_(): Tried to put elements into an empty tensor");
  at::assert_no_internal_overlap(self);
  at::assert_no_overlap(self, index);
  at::assert_no_overlap(self, source);
  if (index.numel() == 0) {
    return self;
  }
  const int64_t n = self.numel();
  if (!stream_is_capturing(index.device())) {
    const auto lo = index.min().item<int64_t>();
    const auto hi = index.max().item<int64_t>();
    TORCH_CHECK_INDEX(lo >= -n && hi < n, "out of range: tried to access index ", lo < -n ? lo : hi, " on a tensor of ",
                      n, " elements.");
  }
  Indices idx;
  idx.push_back(index.reshape({-1}));
  if (self.is_contiguous()) {
    self.view({-1}).index_put_(idx, source.reshape({-1}), accumulate);
  } else {
    auto flat = self.reshape({-1}).clone();
    flat.index_put_(idx, source.reshape({-1}), accumulate);
    self.copy_(flat.view(self.sizes()));
  }
  return self;
}

// index_reduce: scatter_reduce_ with the index broadcast over source's other dims
// (source slice i along `dim` goes to self slice index[i]); the reductions and
// include_self mean the same in both.
void index_reduce_into(const at::Tensor& out, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                       const at::Tensor& source, c10::string_view reduce, bool include_self) {
  // Bool: CPU runs some reductions and raises for others; the fallback decides.
  OXIDE_CHECK_DTYPE(self.scalar_type() != at::kBool, "index_reduce: dtype Bool is not supported on oxide");
  if (!out.is_same(self)) {
    out.copy_(self);
  }
  if (index.numel() == 0) {
    return;
  }
  auto target = out.dim() == 0 ? out.reshape({1}) : out;
  const auto src = source.dim() == 0 ? source.reshape({1}) : source;
  if (!stream_is_capturing(index.device())) {
    const auto lo = index.min().item<int64_t>();
    const auto hi = index.max().item<int64_t>();
    TORCH_CHECK_INDEX(lo >= 0 && hi < target.size(dim), "index out of range in self");
  }
  std::vector<int64_t> shape(src.dim(), 1);
  shape[dim] = index.numel();
  const auto expanded = index.reshape(shape).expand(src.sizes());
  target.scatter_reduce_(dim, expanded, src, reduce, include_self);
}
at::Tensor index_reduce(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                        c10::string_view reduce, bool include_self) {
  structured::Wrapper<at::meta::structured_index_reduce, structured::Kind::Functional, 1> op;
  auto pre = op.meta(self, dim, index, source, reduce, include_self);
  index_reduce_into(op.outputs_[0], self, pre.dim, index, source, reduce, include_self);
  return std::move(op.outputs_[0]);
}
at::Tensor& index_reduce_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                          c10::string_view reduce, bool include_self) {
  structured::Wrapper<at::meta::structured_index_reduce, structured::Kind::Inplace, 1> op(self);
  auto pre = op.meta(self, dim, index, source, reduce, include_self);
  index_reduce_into(op.maybe_get_output(0), self, pre.dim, index, source, reduce, include_self);
  op.commit();
  return self;
}
at::Tensor& index_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                             c10::string_view reduce, bool include_self, at::Tensor& out) {
  structured::Wrapper<at::meta::structured_index_reduce, structured::Kind::Out, 1> op(out);
  auto pre = op.meta(self, dim, index, source, reduce, include_self);
  index_reduce_into(op.maybe_get_output(0), self, pre.dim, index, source, reduce, include_self);
  op.commit();
  return out;
}

// repeat_interleave(repeats): element i repeated repeats[i] times, i.e. for each
// output position p the first i whose running total exceeds p (searchsorted, right).
at::Tensor repeat_interleave(const at::Tensor& repeats, std::optional<int64_t> output_size) {
  TORCH_CHECK(repeats.dim() == 1, "repeat_interleave only accept 1D vector as repeat");
  OXIDE_CHECK_DTYPE(repeats.scalar_type() == at::kLong || repeats.scalar_type() == at::kInt,
                    "repeat_interleave: repeats of dtype ", repeats.scalar_type(), " are not supported on oxide");
  if (repeats.numel() == 0) {
    return at::empty({0}, repeats.options());
  }
  const auto ends = repeats.cumsum(0, repeats.scalar_type());
  TORCH_CHECK(repeats.min().item<int64_t>() >= 0, "repeats can not be negative");
  const int64_t total = ends[-1].item<int64_t>();
  TORCH_CHECK(!output_size || *output_size == total, "allocated size does not match required size");
  const auto positions = at::arange(total, repeats.options());
  return at::searchsorted(ends, positions, /*out_int32=*/repeats.scalar_type() == at::kInt, /*right=*/true);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "put_", TORCH_FN(put_));
  OXIDE_IMPL(m, "index_reduce", TORCH_FN(index_reduce));
  OXIDE_IMPL(m, "index_reduce_", TORCH_FN(index_reduce_));
  OXIDE_IMPL(m, "index_reduce.out", TORCH_FN(index_reduce_out));
  OXIDE_IMPL(m, "repeat_interleave.Tensor", TORCH_FN(repeat_interleave));
  OXIDE_STRUCTURED(m, Tril, "tril", "tril_", "tril.out", int64_t);
  OXIDE_STRUCTURED(m, Triu, "triu", "triu_", "triu.out", int64_t);
  OXIDE_IMPL(m, "flip", TORCH_FN(flip));
  OXIDE_IMPL(m, "roll", TORCH_FN(roll));
  OXIDE_IMPL(m, "take", TORCH_FN(take_impl));
  OXIDE_IMPL(m, "take.out", TORCH_FN(take_out));
}

}  // namespace oxide
