// Operators whose CPU kernels are CPU-specific but which compose exactly from
// oxide's native kernels: gather/scatter/index_add/index_copy through
// advanced indexing (index, index_put_), tril/triu through a broadcast
// comparison and where, flip/roll/take through indexing and cat. Argument
// checks and output sizing come from PyTorch's structured meta functions;
// the compositions never leave the device.
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/structured.h"

#include <ATen/ScalarOps.h>
#include <string_view>
#include <ATen/WrapDimUtils.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/floor_divide_native.h>
#include <ATen/ops/gather_meta.h>
#include <ATen/ops/index.h>
#include <ATen/ops/index_add_meta.h>
#include <ATen/ops/index_copy_meta.h>
#include <ATen/ops/remainder.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/scatter_add_meta.h>
#include <ATen/ops/scatter_meta.h>
#include <ATen/ops/tril_meta.h>
#include <ATen/ops/triu_meta.h>
#include <ATen/ops/where.h>
#include <torch/library.h>

namespace oxide {
namespace {

using Indices = c10::List<std::optional<at::Tensor>>;

// 0-dim tensors take part as one-element vectors (gather/scatter/index_* address dim 0 of them).
at::Tensor as_vector(const at::Tensor& t) {
  return t.dim() == 0 ? t.reshape({1}) : t;
}

// Index tensors that address, for every position of `index`, the element of a
// tensor with `index` substituted along `dim` (the gather/scatter addressing).
Indices along(const at::Tensor& index, int64_t dim) {
  Indices out;
  const auto nd = index.dim();
  for (int64_t d = 0; d < nd; ++d) {
    if (d == dim) {
      out.push_back(index);
      continue;
    }
    std::vector<int64_t> shape(nd, 1);
    shape[d] = index.size(d);
    out.push_back(at::arange(index.size(d), index.options().dtype(at::kLong)).view(shape));
  }
  return out;
}

// gather/scatter do not wrap negative indices; check the range as CPU does.
void check_range(const at::Tensor& index, int64_t size, int64_t dim, const char* op) {
  if (index.numel() == 0) {
    return;
  }
  const auto lo = index.min().item<int64_t>();
  const auto hi = index.max().item<int64_t>();
  const auto bad = lo < 0 ? lo : hi;
  // CPU's types and messages: index_copy_ raises IndexError naming itself; gather,
  // scatter and index_add raise RuntimeError.
  if (std::string_view(op) == "index_copy") {
    TORCH_CHECK_INDEX(lo >= 0 && hi < size, "index_copy_(): index ", bad, " is out of bounds for dimension ", dim,
                      " with size ", size);
  }
  TORCH_CHECK(lo >= 0 && hi < size, "index ", bad, " is out of bounds for dimension ", dim, " with size ", size);
}

// `src` narrowed to `index`'s shape (scatter reads only that corner of src).
at::Tensor corner(const at::Tensor& src, const at::Tensor& index) {
  auto s = src;
  for (int64_t d = 0; d < index.dim(); ++d) {
    s = s.narrow(d, 0, index.size(d));
  }
  return s;
}

struct Gather : at::meta::structured_gather {
  void impl(const at::Tensor& self, int64_t dim, const at::Tensor& index, bool, const at::Tensor& out) {
    if (index.numel() == 0) {
      return;
    }
    dim = at::maybe_wrap_dim(dim, self.dim());
    const auto source = as_vector(self);
    check_range(index, source.size(dim), dim, "gather");
    out.copy_(at::index(source, along(as_vector(index), dim)).view(out.sizes()));
  }
};

void scatter_into(const at::Tensor& out, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                  const at::Tensor& values, bool accumulate) {
  if (!out.is_same(self)) {
    out.copy_(self);
  }
  if (index.numel() == 0) {
    return;
  }
  dim = at::maybe_wrap_dim(dim, self.dim());
  auto target = as_vector(out);
  const auto idx = as_vector(index);
  check_range(idx, target.size(dim), dim, "scatter");
  target.index_put_(along(idx, dim), values, accumulate);
}

// scatter / scatter_add with a source tensor: only the corner of src that index covers is read.
void scatter_src(const at::Tensor& out, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                 const at::Tensor& src, bool accumulate) {
  scatter_into(out, self, dim, index, corner(as_vector(src), as_vector(index)), accumulate);
}

struct ScatterSrc : at::meta::structured_scatter_src {
  void impl(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src, const at::Tensor& out) {
    scatter_src(out, self, dim, index, src, false);
  }
};
struct ScatterValue : at::meta::structured_scatter_value {
  void impl(const at::Tensor& self, int64_t dim, const at::Tensor& index, const c10::Scalar& value, const at::Tensor& out) {
    scatter_into(out, self, dim, index, at::scalar_tensor(value, self.options()), false);
  }
};
struct ScatterAdd : at::meta::structured_scatter_add {
  void impl(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src, const at::Tensor& out) {
    scatter_src(out, self, dim, index, src, true);
  }
};

// index_add / index_copy: x[..., index, ...] (+)= source along `dim` (precomputed, wrapped).
void index_along(const at::Tensor& out, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                 const at::Tensor& source, bool accumulate) {
  if (!out.is_same(self)) {
    out.copy_(self);
  }
  if (index.numel() == 0) {
    return;
  }
  auto target = as_vector(out);
  check_range(index, target.size(dim), dim, accumulate ? "index_add" : "index_copy");
  Indices idx;
  for (int64_t d = 0; d < dim; ++d) {
    idx.push_back(std::nullopt);
  }
  idx.push_back(index.reshape({-1}));
  target.index_put_(idx, as_vector(source), accumulate);
}

// alpha * source in self's dtype (index_add keeps self's dtype; alpha 1 is the common case).
at::Tensor scaled(const at::Tensor& source, const c10::Scalar& alpha, const at::Tensor& self) {
  const bool one = alpha.isBoolean() ? alpha.toBool() : alpha.equal(1);
  return (one ? source : source.mul(alpha)).to(self.scalar_type());
}

template <class Base>
at::Tensor index_add_functional(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                const at::Tensor& source, const c10::Scalar& alpha) {
  structured::Wrapper<Base, structured::Kind::Functional, 1> op;
  auto pre = op.meta(self, dim, index, source, alpha);
  index_along(op.outputs_[0], self, pre.dim, index, scaled(source, alpha, self), true);
  return std::move(op.outputs_[0]);
}
template <class Base>
at::Tensor& index_add_inplace(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                              const c10::Scalar& alpha) {
  structured::Wrapper<Base, structured::Kind::Inplace, 1> op(self);
  auto pre = op.meta(self, dim, index, source, alpha);
  index_along(op.maybe_get_output(0), self, pre.dim, index, scaled(source, alpha, self), true);
  op.commit();
  return self;
}
template <class Base>
at::Tensor& index_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                          const c10::Scalar& alpha, at::Tensor& out) {
  structured::Wrapper<Base, structured::Kind::Out, 1> op(out);
  auto pre = op.meta(self, dim, index, source, alpha);
  index_along(op.maybe_get_output(0), self, pre.dim, index, scaled(source, alpha, self), true);
  op.commit();
  return out;
}
template <class Base>
at::Tensor index_copy_functional(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source) {
  structured::Wrapper<Base, structured::Kind::Functional, 1> op;
  auto pre = op.meta(self, dim, index, source);
  index_along(op.outputs_[0], self, pre.dim, index, source, false);
  return std::move(op.outputs_[0]);
}
template <class Base>
at::Tensor& index_copy_inplace(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source) {
  structured::Wrapper<Base, structured::Kind::Inplace, 1> op(self);
  auto pre = op.meta(self, dim, index, source);
  index_along(op.maybe_get_output(0), self, pre.dim, index, source, false);
  op.commit();
  return self;
}
template <class Base>
at::Tensor& index_copy_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                           at::Tensor& out) {
  structured::Wrapper<Base, structured::Kind::Out, 1> op(out);
  auto pre = op.meta(self, dim, index, source);
  index_along(op.maybe_get_output(0), self, pre.dim, index, source, false);
  op.commit();
  return out;
}

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
  TORCH_CHECK(index.scalar_type() == at::kLong, "take(): Expected a long tensor for index, but got ", index.scalar_type());
  TORCH_CHECK(self.device() == index.device(), "take(): self and index must be on the same device. self.device() = ",
              self.device(), ", index.device() = ", index.device());
  TORCH_CHECK_INDEX(!(self.numel() == 0 && index.numel() != 0), "take(): tried to take from an empty tensor");
  Indices idx;
  idx.push_back(index);
  return at::index(self.reshape({-1}), idx);
}

at::Tensor& take_out(const at::Tensor& self, const at::Tensor& index, at::Tensor& out) {
  const auto r = take_impl(self, index);
  at::native::resize_output(out, r.sizes());
  out.copy_(r);
  return out;
}

// Scalar % tensor: the scalar as a wrapped number, so it does not take part in type promotion.
// index_fill_: the slices of `dim` selected by `index` set to `value` (what `x[idx] = 7` runs).
at::Tensor& index_fill_scalar(at::Tensor& self, int64_t dim, const at::Tensor& index, const c10::Scalar& value) {
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_fill_(): Index is supposed to be a vector");
  TORCH_CHECK(index.scalar_type() == at::kLong, "index_fill_(): Expected dtype int64 for index.");
  TORCH_CHECK(self.device() == index.device(), "index_fill_(): self and index must be on the same device");
  check_scalar_fits(value, self.scalar_type());
  dim = at::maybe_wrap_dim(dim, self.dim());
  auto target = as_vector(self);
  Indices idx;
  for (int64_t d = 0; d < dim; ++d) {
    idx.push_back(std::nullopt);
  }
  idx.push_back(index.reshape({-1}));
  target.index_put_(idx, at::scalar_tensor(value, self.options()));
  return self;
}

at::Tensor& index_fill_tensor(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "index_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  return index_fill_scalar(self, dim, index, value.item());
}

at::Tensor remainder_scalar_tensor(const c10::Scalar& self, const at::Tensor& other) {
  auto wrapped = c10::scalar_to_tensor(self);
  wrapped.unsafeGetTensorImpl()->set_wrapped_number(true);
  return at::remainder(wrapped, other);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using T = const at::Tensor&;
  using S = const c10::Scalar&;
  OXIDE_STRUCTURED(m, Gather, "gather", "", "gather.out", int64_t, T, bool);
  OXIDE_STRUCTURED(m, ScatterSrc, "scatter.src", "scatter_.src", "scatter.src_out", int64_t, T, T);
  OXIDE_STRUCTURED(m, ScatterValue, "scatter.value", "scatter_.value", "scatter.value_out", int64_t, T, S);
  OXIDE_STRUCTURED(m, ScatterAdd, "scatter_add", "scatter_add_", "scatter_add.out", int64_t, T, T);
  OXIDE_IMPL(m, "index_add", TORCH_FN(index_add_functional<at::meta::structured_index_add>));
  OXIDE_IMPL(m, "index_add_", TORCH_FN(index_add_inplace<at::meta::structured_index_add>));
  OXIDE_IMPL(m, "index_add.out", TORCH_FN(index_add_out<at::meta::structured_index_add>));
  OXIDE_IMPL(m, "index_copy", TORCH_FN(index_copy_functional<at::meta::structured_index_copy>));
  OXIDE_IMPL(m, "index_copy_", TORCH_FN(index_copy_inplace<at::meta::structured_index_copy>));
  OXIDE_IMPL(m, "index_copy.out", TORCH_FN(index_copy_out<at::meta::structured_index_copy>));
  OXIDE_STRUCTURED(m, Tril, "tril", "tril_", "tril.out", int64_t);
  OXIDE_STRUCTURED(m, Triu, "triu", "triu_", "triu.out", int64_t);
  OXIDE_IMPL(m, "flip", TORCH_FN(flip));
  OXIDE_IMPL(m, "roll", TORCH_FN(roll));
  OXIDE_IMPL(m, "take", TORCH_FN(take_impl));
  OXIDE_IMPL(m, "take.out", TORCH_FN(take_out));
  OXIDE_IMPL(m, "floor_divide", TORCH_FN(static_cast<at::Tensor (*)(T, T)>(&at::native::floor_divide)));
  OXIDE_IMPL(m, "floor_divide_.Tensor", TORCH_FN(static_cast<at::Tensor& (*)(at::Tensor&, T)>(&at::native::floor_divide_)));
  OXIDE_IMPL(m, "floor_divide.out", TORCH_FN(at::native::floor_divide_out));
  OXIDE_IMPL(m, "remainder.Scalar_Tensor", TORCH_FN(remainder_scalar_tensor));
  OXIDE_IMPL(m, "index_fill_.int_Scalar", TORCH_FN(index_fill_scalar));
  OXIDE_IMPL(m, "index_fill_.int_Tensor", TORCH_FN(index_fill_tensor));
}

} // namespace oxide
