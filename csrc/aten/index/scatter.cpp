// Scatter and gather on oxide. gather, scatter, scatter_add, index_add,
// index_copy and index_fill_ compose exactly from the native index kernels
// (index, index_put_), with checks and output sizing from PyTorch's structured
// meta functions. scatter with a reduction (scatter_reduce, scatter(reduce=)) and
// masked_scatter_ run PyTorch's own operators around stubs on oxide_kernels::ops::index::scatter.
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/launch.h"
#include "common/structured.h"

#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/IndexKernel.h>
#include <ATen/native/ReductionType.h>
#include <ATen/native/TensorAdvancedIndexing.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/gather_meta.h>
#include <ATen/ops/index.h>
#include <ATen/ops/index_add_meta.h>
#include <ATen/ops/index_copy_meta.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/scatter_add_meta.h>
#include <ATen/ops/scatter_meta.h>
#include <ATen/ops/scatter_native.h>
#include <ATen/ops/scatter_reduce_native.h>
#include <torch/library.h>

#include <string_view>

namespace oxide {
namespace {

using Indices = c10::List<std::optional<at::Tensor>>;

// 0-dim tensors take part as one-element vectors (gather/scatter/index_* address dim 0 of them).
at::Tensor as_vector(const at::Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; }

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

// gather/scatter do not wrap negative indices; check the range as CPU does and return
// the index to lower with. During a graph capture the range cannot be read on the host:
// negative indices become `size` instead, so the indexing kernel of the replay reports
// every out-of-range index (with the indexing kernel's message, not CPU's).
at::Tensor checked_index(const at::Tensor& index, int64_t size, int64_t dim, const char* op) {
  if (index.numel() == 0) {
    return index;
  }
  if (stream_is_capturing(index.device())) {
    return at::where(index.lt(0), at::scalar_tensor(size, index.options()), index);
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
  return index;
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
    const auto idx = checked_index(as_vector(index), source.size(dim), dim, "gather");
    out.copy_(at::index(source, along(idx, dim)).view(out.sizes()));
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
  const auto idx = checked_index(as_vector(index), target.size(dim), dim, "scatter");
  target.index_put_(along(idx, dim), values, accumulate);
}

// scatter / scatter_add with a source tensor: only the corner of src that index covers is read.
void scatter_src(const at::Tensor& out, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                 const at::Tensor& src, bool accumulate) {
  scatter_into(out, self, dim, index, corner(as_vector(src), as_vector(index)), accumulate);
}

struct ScatterSrc : at::meta::structured_scatter_src {
  void impl(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
            const at::Tensor& out) {
    scatter_src(out, self, dim, index, src, false);
  }
};
struct ScatterValue : at::meta::structured_scatter_value {
  void impl(const at::Tensor& self, int64_t dim, const at::Tensor& index, const c10::Scalar& value,
            const at::Tensor& out) {
    scatter_into(out, self, dim, index, at::scalar_tensor(value, self.options()), false);
  }
};
struct ScatterAdd : at::meta::structured_scatter_add {
  void impl(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
            const at::Tensor& out) {
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
  const auto checked = checked_index(index, target.size(dim), dim, accumulate ? "index_add" : "index_copy");
  Indices idx;
  for (int64_t d = 0; d < dim; ++d) {
    idx.push_back(std::nullopt);
  }
  idx.push_back(checked.reshape({-1}));
  target.index_put_(idx, as_vector(source), accumulate);
}

// alpha * source in self's dtype (index_add keeps self's dtype; alpha 1 is the common case).
at::Tensor scaled(const at::Tensor& source, const c10::Scalar& alpha, const at::Tensor& self) {
  const bool one = alpha.isBoolean() ? alpha.toBool() : alpha.equal(1);
  return (one ? source : source.mul(alpha)).to(self.scalar_type());
}

template <class Base>
at::Tensor index_add_functional(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                                const c10::Scalar& alpha) {
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
at::Tensor index_copy_functional(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                 const at::Tensor& source) {
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

// ---- scatter with reductions, masked_scatter_: PyTorch's operators over stubs ----

using at::native::ReductionType;
static_assert(static_cast<int>(ReductionType::MAX) == OXIDE_SCATTER_REDUCE_MAX);
static_assert(static_cast<int>(ReductionType::MEAN) == OXIDE_SCATTER_REDUCE_MEAN);
static_assert(static_cast<int>(ReductionType::MIN) == OXIDE_SCATTER_REDUCE_MIN);
static_assert(static_cast<int>(ReductionType::SUM) == OXIDE_SCATTER_REDUCE_SUM);
static_assert(static_cast<int>(ReductionType::PROD) == OXIDE_SCATTER_REDUCE_PROD);

// The scatter stubs: `self` already holds the result's starting values (PyTorch's
// impl copied the input and, for include_self=False, filled the touched slots).
// A scalar source is one device element read with all-zero strides.
void scatter_reduce_run(const at::Tensor& self_, int64_t dim, const at::Tensor& index_, const at::Tensor& src_,
                        bool scalar, ReductionType reduce) {
  if (index_.numel() == 0) {
    return;
  }
  const auto self = as_vector(self_);
  const auto index = as_vector(index_);
  const auto src = scalar ? src_ : as_vector(src_);
  dim = at::maybe_wrap_dim(dim, self.dim());
  OXIDE_CHECK(oxide_scatter_reduce(launch_on(self), static_cast<int32_t>(reduce), static_cast<size_t>(dim),
                                   inout_arg(self), in_arg(src), in_arg(index)));
}

void scatter_reduce_kernel(const at::Tensor& self, const int64_t dim, const at::Tensor& index, const at::Tensor& src,
                           const ReductionType& reduce) {
  scatter_reduce_run(self, dim, index, src, false, reduce);
}

void scatter_scalar_reduce_kernel(const at::Tensor& self, const int64_t dim, const at::Tensor& index,
                                  const c10::Scalar& value, const ReductionType& reduce) {
  // CPU converts the value to self's dtype before reducing; so does the device scalar.
  scatter_reduce_run(self, dim, index, at::scalar_tensor(value, self.options()), true, reduce);
}

// masked_scatter_stub: PyTorch's masked_scatter_ built the iterator (self, expanded
// bool mask; linear order) and made the source contiguous.
void masked_scatter_kernel(at::TensorIterator& iter, const at::TensorBase& source) {
  IterArgs args(iter);
  OXIDE_CHECK(oxide_masked_scatter(launch_on(iter), &args.abi, in_arg(at::Tensor(source))));
}

// masked_scatter_: PyTorch's checks and iterator (its CPU entry point refuses other
// devices), the loop through the stub kernel above.
at::Tensor& masked_scatter_inplace(at::Tensor& self, const at::Tensor& mask, const at::Tensor& source) {
  at::assert_no_internal_overlap(self);
  TORCH_CHECK(self.scalar_type() == source.scalar_type(),
              "masked_scatter_: expected self and source to have same dtypes but got ", self.scalar_type(), " and ",
              source.scalar_type());
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_scatter_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  TORCH_CHECK(self.device() == mask.device() && self.device() == source.device(),
              "masked_scatter_: expected self, mask and source on the same device, but got ", self.device(), ", ",
              mask.device(), " and ", source.device());
  const auto b_mask = at::expand_inplace(self, mask, "masked_scatter_");
  const auto src = source.contiguous();
  auto iter = at::TensorIteratorConfig()
                  .set_check_mem_overlap(false)
                  .check_all_same_dtype(false)
                  .resize_outputs(false)
                  .enforce_linear_iteration()  // the k-th set element takes source[k]
                  .add_output(self)
                  .add_const_input(*b_mask)
                  .build();
  masked_scatter_kernel(iter, src);
  return self;
}

}  // namespace
}  // namespace oxide

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(scatter_reduce_stub, &::oxide::scatter_reduce_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(scatter_reduce_two_stub, &::oxide::scatter_reduce_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(scatter_scalar_reduce_stub, &::oxide::scatter_scalar_reduce_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(masked_scatter_stub, &::oxide::masked_scatter_kernel)
}  // namespace at::native

namespace oxide {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace at::native;
  using T = const at::Tensor&;
  using S = const c10::Scalar&;
  using Str = c10::string_view;
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
  OXIDE_IMPL(m, "index_fill_.int_Scalar", TORCH_FN(index_fill_scalar));
  OXIDE_IMPL(m, "index_fill_.int_Tensor", TORCH_FN(index_fill_tensor));
  OXIDE_STRUCTURED(m, structured_scatter_reduce_two, "scatter_reduce.two", "scatter_reduce_.two",
                   "scatter_reduce.two_out", int64_t, T, T, Str, bool);
  OXIDE_STRUCTURED(m, structured_scatter_reduce_out, "scatter.reduce", "scatter_.reduce", "scatter.reduce_out", int64_t,
                   T, T, Str);
  OXIDE_STRUCTURED(m, structured_scatter_value_reduce_out, "scatter.value_reduce", "scatter_.value_reduce",
                   "scatter.value_reduce_out", int64_t, T, S, Str);
  // masked_scatter (functional) is CompositeExplicitAutograd over masked_scatter_.
  OXIDE_IMPL(m, "masked_scatter_", TORCH_FN(masked_scatter_inplace));
}

}  // namespace oxide
