// Native reductions: PyTorch's structured reduction kernels and native
// functions set up the reduction TensorIterator (make_reduction: dims,
// keepdim, dtype, out= resizing); their DispatchStubs land here and go to
// oxide_kernels::ops::reduce::reduce. max/min along a dim and aminmax, whose stubs take
// tensors rather than an iterator, build the iterator with make_reduction.
// sum, mean and prod read a narrower input (bool and integers into int64, a float
// into a wider float) in its own dtype: the kernel widens elements as it loads
// them, where PyTorch's make_reduction would first copy the input to the output's
// dtype.
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/launch.h"
#include "common/structured.h"

#include <ATen/native/ReduceAllOps.h>
#include <ATen/native/ReduceOps.h>
#include <ATen/native/ReduceOpsUtils.h>
#include <ATen/native/TensorCompare.h>
#include <ATen/ops/all_native.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/amax_native.h>
#include <ATen/ops/amin.h>
#include <ATen/ops/amin_native.h>
#include <ATen/ops/aminmax_native.h>
#include <ATen/ops/any_native.h>
#include <ATen/ops/argmax_native.h>
#include <ATen/ops/argmin_native.h>
#include <ATen/ops/linalg_vector_norm_native.h>
#include <ATen/ops/norm_native.h>
#include <ATen/ops/max_native.h>
#include <ATen/ops/mean_native.h>
#include <ATen/ops/min_native.h>
#include <ATen/ops/all.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/nansum_native.h>
#include <ATen/ops/prod_native.h>
#include <ATen/ops/std_mean_native.h>
#include <ATen/ops/std_native.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/sum_native.h>
#include <ATen/ops/var_mean_native.h>
#include <ATen/ops/var_native.h>
#include <torch/library.h>

namespace oxide {

void reduce(at::TensorIteratorBase& iter, OxideReduction reduction) {
  // Empty reductions still reach the kernel: outputs of an empty reduction get the identity.
  IterArgs args(iter);
  OXIDE_CHECK(oxide_reduce(launch_on(iter), reduction, &args.abi));
}

namespace {

template <int32_t Op>
void reduce_stub(at::TensorIterator& iter) {
  reduce(iter, Op);
}

void std_var(at::TensorIterator& iter, double correction, bool take_sqrt) {
  reduce(iter, OxideReduction{OXIDE_REDUCE_STD_VAR, correction, take_sqrt, 0.0});
}

void norm(at::TensorIterator& iter, const c10::Scalar& p) {
  reduce(iter, OxideReduction{OXIDE_REDUCE_NORM, 0.0, false, p.toDouble()});
}

// max/min along `dim` with indices (first occurrence, NaN propagating).
template <int32_t Op>
void minmax_dim(const at::Tensor& values, const at::Tensor& indices, const at::Tensor& self, int64_t dim,
                bool keepdim) {
  auto v = values;
  auto i = indices;
  const char* name = Op == OXIDE_REDUCE_MAX ? "max" : "min";
  auto iter =
      at::native::make_reduction(name, v, i, self, at::IntArrayRef(dim), keepdim, self.scalar_type(), at::kLong);
  reduce(iter, Op);
}

void aminmax_dim(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& min, at::Tensor& max) {
  at::amin_out(min, self, dim, keepdim);
  at::amax_out(max, self, dim, keepdim);
}

// max()/min() of a whole tensor (the max_all/min_all stubs).
void max_all(at::Tensor& result, const at::Tensor& self) { at::amax_out(result, self, at::IntArrayRef{}, false); }
void min_all(at::Tensor& result, const at::Tensor& self) { at::amin_out(result, self, at::IntArrayRef{}, false); }

void aminmax_all(const at::Tensor& self, at::Tensor& min, at::Tensor& max) {
  at::amin_out(min, self);
  at::amax_out(max, self);
}

// max.dim / min.dim: meta precomputes the wrapped dim that impl takes.
template <class Base>
std::tuple<at::Tensor, at::Tensor> minmax_functional(const at::Tensor& self, int64_t dim, bool keepdim) {
  structured::Wrapper<Base, structured::Kind::Functional, 2> op;
  auto pre = op.meta(self, dim, keepdim);
  op.impl(self, pre.dim, keepdim, op.outputs_[0], op.outputs_[1]);
  return {std::move(op.outputs_[0]), std::move(op.outputs_[1])};
}

template <class Base>
std::tuple<at::Tensor&, at::Tensor&> minmax_out(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& v,
                                                at::Tensor& i) {
  structured::Wrapper<Base, structured::Kind::Out, 2> op(v, i);
  auto pre = op.meta(self, dim, keepdim);
  op.impl(self, pre.dim, keepdim, op.maybe_get_output(0), op.maybe_get_output(1));
  op.commit();
  return {v, i};
}

// count_nonzero counts in the kernel, reading the input in its own dtype (no mask,
// no int64 copy); complex inputs go through a mask.
at::Tensor count_nonzero(const at::Tensor& self, at::IntArrayRef dims) {
  if (self.is_complex()) {
    return at::sum(at::ne(self, 0), dims, false, at::kLong);
  }
  auto result = at::native::create_reduction_result(self, dims, false, at::kLong);
  auto iter = at::native::make_reduction("count_nonzero", result, self, dims, false, self.scalar_type(), at::kLong);
  reduce(iter, OXIDE_REDUCE_COUNT_NONZERO);
  return result;
}

// Whether reading `in` and converting each element to `out` as it is loaded gives
// exactly what reducing a copy of the input in `out` would: the conversion is exact.
bool widens_exactly(at::ScalarType in, at::ScalarType out) {
  using S = at::ScalarType;
  const bool small_int = in == S::Bool || in == S::Byte || in == S::Char || in == S::Short || in == S::Int;
  const bool small_float = in == S::Half || in == S::BFloat16 || in == S::Float;
  return (small_int && out == S::Long) ||
         (small_float && (out == S::Float || out == S::Double) && c10::elementSize(in) < c10::elementSize(out));
}

// The reduction iterator of `self` into `result` (already sized by the meta function),
// as PyTorch's make_reduction_from_out_ty builds it, except that an input that widens
// exactly to the result's dtype is not copied first.
at::TensorIterator reduction_iter(const at::Tensor& self, const at::Tensor& result, at::OptionalIntArrayRef dims,
                                  bool keepdim) {
  const auto out = result.scalar_type();
  const auto mask = at::native::make_dim_mask(dims, self.dim());
  auto viewed = at::native::review_reduce_result(result, self.dim(), mask, keepdim);
  if (self.scalar_type() == out || widens_exactly(self.scalar_type(), out)) {
    return at::TensorIterator::reduce_op(viewed, self);
  }
  return at::TensorIterator::reduce_op(viewed, self.to(out));
}

}  // namespace

// The structured sum, mean and prod of PyTorch (meta: result shape and dtype) with
// impls that build the iterator through reduction_iter. Declared in namespace oxide,
// these names shadow at::native's in the registrations below.
struct structured_sum_out : at::native::structured_sum_out {
  void impl(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim, std::optional<at::ScalarType>,
            const at::Tensor& result) {
    auto iter = reduction_iter(self, result, dims, keepdim);
    if (iter.numel() == 0) {
      result.zero_();
    } else {
      reduce(iter, OXIDE_REDUCE_SUM);
    }
  }
};

struct structured_mean_out : at::native::structured_mean_out {
  void impl(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim, std::optional<at::ScalarType>,
            const at::Tensor& result) {
    auto iter = reduction_iter(self, result, dims, keepdim);
    if (iter.numel() == 0) {
      result.fill_(std::numeric_limits<double>::quiet_NaN());
    } else {
      reduce(iter, OXIDE_REDUCE_MEAN);
    }
  }
};

struct structured_prod_out : at::native::structured_prod_out {
  void impl(const at::Tensor& self, int64_t dim, bool keepdim, std::optional<at::ScalarType>,
            const at::Tensor& result) {
    auto iter = reduction_iter(self, result, dim, keepdim);
    if (iter.numel() == 0) {
      result.fill_(1);
    } else {
      reduce(iter, OXIDE_REDUCE_PROD);
    }
  }
};

// prod() of the whole tensor, in the dtype PyTorch's prod gives.
at::Tensor prod(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  auto result = at::native::create_reduction_result(self, at::IntArrayRef{}, false,
                                                    at::native::get_dtype_from_self(self, dtype, true));
  auto iter = reduction_iter(self, result, at::IntArrayRef{}, false);
  if (iter.numel() == 0) {
    result.fill_(1);
  } else {
    reduce(iter, OXIDE_REDUCE_PROD);
  }
  return result;
}

}  // namespace oxide

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(sum_stub, &::oxide::reduce_stub<OXIDE_REDUCE_SUM>)
REGISTER_PRIVATEUSE1_DISPATCH(nansum_stub, &::oxide::reduce_stub<OXIDE_REDUCE_NANSUM>)
REGISTER_PRIVATEUSE1_DISPATCH(prod_stub, &::oxide::reduce_stub<OXIDE_REDUCE_PROD>)
REGISTER_PRIVATEUSE1_DISPATCH(mean_stub, &::oxide::reduce_stub<OXIDE_REDUCE_MEAN>)
REGISTER_PRIVATEUSE1_DISPATCH(and_stub, &::oxide::reduce_stub<OXIDE_REDUCE_ALL>)
REGISTER_PRIVATEUSE1_DISPATCH(or_stub, &::oxide::reduce_stub<OXIDE_REDUCE_ANY>)
REGISTER_PRIVATEUSE1_DISPATCH(max_values_stub, &::oxide::reduce_stub<OXIDE_REDUCE_AMAX>)
REGISTER_PRIVATEUSE1_DISPATCH(min_values_stub, &::oxide::reduce_stub<OXIDE_REDUCE_AMIN>)
REGISTER_PRIVATEUSE1_DISPATCH(argmax_stub, &::oxide::reduce_stub<OXIDE_REDUCE_ARGMAX>)
REGISTER_PRIVATEUSE1_DISPATCH(argmin_stub, &::oxide::reduce_stub<OXIDE_REDUCE_ARGMIN>)
REGISTER_PRIVATEUSE1_DISPATCH(std_var_stub, &::oxide::std_var)
REGISTER_PRIVATEUSE1_DISPATCH(norm_stub, &::oxide::norm)
REGISTER_PRIVATEUSE1_DISPATCH(max_stub, &::oxide::minmax_dim<OXIDE_REDUCE_MAX>)
REGISTER_PRIVATEUSE1_DISPATCH(min_stub, &::oxide::minmax_dim<OXIDE_REDUCE_MIN>)
REGISTER_PRIVATEUSE1_DISPATCH(aminmax_stub, &::oxide::aminmax_dim)
REGISTER_PRIVATEUSE1_DISPATCH(max_all_stub, &::oxide::max_all)
REGISTER_PRIVATEUSE1_DISPATCH(min_all_stub, &::oxide::min_all)
REGISTER_PRIVATEUSE1_DISPATCH(aminmax_allreduce_stub, &::oxide::aminmax_all)
}  // namespace at::native

namespace oxide {
namespace {
using T = const at::Tensor&;
using OptDims = at::OptionalIntArrayRef;
using OptDtype = std::optional<at::ScalarType>;
}  // namespace

// torch.equal: the same sizes and every element equal (so NaN makes it false), as
// CPU's; the comparison and the reduction run on the device, and one byte is read back.
bool equal_on_device(const at::Tensor& self, const at::Tensor& other) {
  if (self.sizes() != other.sizes()) {
    return false;
  }
  if (self.numel() == 0) {
    return true;
  }
  return at::eq(self, other).all().item<bool>();
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace at::native;
  OXIDE_IMPL(m, "equal", TORCH_FN(equal_on_device));
  OXIDE_STRUCTURED(m, structured_sum_out, "sum.dim_IntList", "", "sum.IntList_out", OptDims, bool, OptDtype);
  OXIDE_STRUCTURED(m, structured_mean_out, "mean.dim", "", "mean.out", OptDims, bool, OptDtype);
  OXIDE_STRUCTURED(m, structured_prod_out, "prod.dim_int", "", "prod.int_out", int64_t, bool, OptDtype);
  OXIDE_IMPL(m, "prod", TORCH_FN(static_cast<at::Tensor (*)(T, OptDtype)>(&prod)));
  OXIDE_IMPL(m, "nansum", TORCH_FN(nansum));
  OXIDE_IMPL(m, "nansum.out", TORCH_FN(nansum_out));
  OXIDE_STRUCTURED(m, structured_amax_out, "amax", "", "amax.out", at::IntArrayRef, bool);
  OXIDE_STRUCTURED(m, structured_amin_out, "amin", "", "amin.out", at::IntArrayRef, bool);
  OXIDE_STRUCTURED(m, structured_argmax_out, "argmax", "", "argmax.out", std::optional<int64_t>, bool);
  OXIDE_STRUCTURED(m, structured_argmin_out, "argmin", "", "argmin.out", std::optional<int64_t>, bool);
  OXIDE_STRUCTURED(m, structured_any_out, "any.dim", "", "any.out", int64_t, bool);
  OXIDE_STRUCTURED(m, structured_any_dims_out, "any.dims", "", "any.dims_out", OptDims, bool);
  OXIDE_STRUCTURED(m, structured_any_all_out, "any", "", "any.all_out");
  OXIDE_STRUCTURED(m, structured_all_out, "all.dim", "", "all.out", int64_t, bool);
  OXIDE_STRUCTURED(m, structured_all_dims_out, "all.dims", "", "all.dims_out", OptDims, bool);
  OXIDE_STRUCTURED(m, structured_all_all_out, "all", "", "all.all_out");
  OXIDE_STRUCTURED(m, structured_linalg_vector_norm_out, "linalg_vector_norm", "", "linalg_vector_norm.out",
                   const c10::Scalar&, OptDims, bool, OptDtype);
  // torch.norm with dims: PyTorch's structured norm, whose impl is linalg_vector_norm.
  using OptP = const std::optional<c10::Scalar>&;
  OXIDE_STRUCTURED(m, structured_norm_out, "norm.ScalarOpt_dim", "", "norm.out", OptP, at::IntArrayRef, bool);
  OXIDE_STRUCTURED(m, structured_norm_dtype_out, "norm.ScalarOpt_dim_dtype", "", "norm.dtype_out", OptP,
                   at::IntArrayRef, bool, at::ScalarType);
  OXIDE_IMPL(m, "max.dim", TORCH_FN(minmax_functional<structured_max_out>));
  OXIDE_IMPL(m, "max.dim_max", TORCH_FN(minmax_out<structured_max_out>));
  OXIDE_IMPL(m, "min.dim", TORCH_FN(minmax_functional<structured_min_out>));
  OXIDE_IMPL(m, "min.dim_min", TORCH_FN(minmax_out<structured_min_out>));
  OXIDE_IMPL(m, "max", TORCH_FN(static_cast<at::Tensor (*)(T)>(&max)));
  OXIDE_IMPL(m, "min", TORCH_FN(static_cast<at::Tensor (*)(T)>(&min)));
  OXIDE_IMPL(m, "aminmax",
             TORCH_FN((structured::functional2<structured_aminmax_out, T, std::optional<int64_t>, bool>)));
  OXIDE_IMPL(m, "aminmax.out", TORCH_FN((structured::out2<structured_aminmax_out, T, std::optional<int64_t>, bool>)));
  using OptS = const std::optional<c10::Scalar>&;
  using Reduce = at::Tensor (*)(T, OptDims, OptS, bool);
  using ReduceOut = at::Tensor& (*)(T, OptDims, OptS, bool, at::Tensor&);
  using ReducePair = std::tuple<at::Tensor, at::Tensor> (*)(T, OptDims, OptS, bool);
  OXIDE_IMPL(m, "var.correction", TORCH_FN(static_cast<Reduce>(&at::native::var)));
  OXIDE_IMPL(m, "var.correction_out", TORCH_FN(static_cast<ReduceOut>(&at::native::var_out)));
  OXIDE_IMPL(m, "std.correction", TORCH_FN(static_cast<Reduce>(&at::native::std)));
  OXIDE_IMPL(m, "std.correction_out", TORCH_FN(static_cast<ReduceOut>(&at::native::std_out)));
  OXIDE_IMPL(m, "var_mean.correction", TORCH_FN(static_cast<ReducePair>(&at::native::var_mean)));
  OXIDE_IMPL(m, "std_mean.correction", TORCH_FN(static_cast<ReducePair>(&at::native::std_mean)));
  OXIDE_IMPL(m, "count_nonzero.dim_IntList", TORCH_FN(count_nonzero));
}

}  // namespace oxide
