// Data movement that CPU PyTorch implements with CPU-only loops: scatter with
// reductions, masked_scatter_, unique, searchsorted/bucketize, bincount and
// histc. Where PyTorch's operator is device-generic code around a
// DispatchStub (scatter_reduce, scatter(reduce=), histc), we register the
// stub and reuse the operator, so argument checks, output sizing,
// `include_self` and `mean`'s division are PyTorch's own. masked_scatter_'s
// CPU entry point refuses other devices, so its few checks are restated
// around the stub kernel; the rest glue PyTorch's checks
// (BucketizationUtils.h, the unique/bincount rules) to the Rust loops in
// oxide_kernels::{scatter, unique, search, histogram}.
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/structured.h"

#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/BucketizationUtils.h>
#include <ATen/native/Histogram.h>
#include <ATen/native/IndexKernel.h>
#include <ATen/native/ReductionType.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorAdvancedIndexing.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/histc_native.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/scatter_native.h>
#include <ATen/ops/scatter_reduce_native.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>

namespace oxide {
namespace {

using at::native::ReductionType;
static_assert(static_cast<int>(ReductionType::MAX) == OXIDE_REDUCE_MAX);
static_assert(static_cast<int>(ReductionType::MEAN) == OXIDE_REDUCE_MEAN);
static_assert(static_cast<int>(ReductionType::MIN) == OXIDE_REDUCE_MIN);
static_assert(static_cast<int>(ReductionType::SUM) == OXIDE_REDUCE_SUM);
static_assert(static_cast<int>(ReductionType::PROD) == OXIDE_REDUCE_PROD);

using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// 0-dim tensors take part as one-element vectors (scatter addresses dim 0 of them).
at::Tensor as_vector(const at::Tensor& t) {
  return t.dim() == 0 ? t.reshape({1}) : t;
}

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
  const std::vector<int64_t> zeros(index.dim(), 0);
  const auto device = self.device().index();
  OXIDE_CHECK(oxide_scatter_reduce(
      device, current_stream(device), static_cast<int32_t>(reduce), static_cast<int32_t>(self.scalar_type()),
      static_cast<size_t>(index.dim()), index.sizes().data(), static_cast<size_t>(dim), self.size(dim),
      self.mutable_data_ptr(), self.strides().data(), src.const_data_ptr(), scalar ? zeros.data() : src.strides().data(),
      static_cast<int32_t>(index.scalar_type()), index.const_data_ptr(), index.strides().data(),
      static_cast<int32_t>(at::get_num_threads())));
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
  const auto device = iter.device(0).index();
  OXIDE_CHECK(oxide_masked_scatter(device, current_stream(device), &args.abi, source.const_data_ptr(),
                                   static_cast<size_t>(source.numel())));
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

// histogramdd_linear_stub for histc's one dimension (input reshaped to (N, 1),
// edges from linspace). torch.histogram/histogramdd reach it only on CPU tensors.
void histogram_linear_kernel(const at::Tensor& self, const std::optional<at::Tensor>& weight, bool density,
                             at::Tensor& hist, const at::TensorList& bin_edges, bool local_search) {
  TORCH_CHECK_NOT_IMPLEMENTED(!weight.has_value() && !density && bin_edges.size() == 1 && self.dim() == 2 &&
                                  self.size(1) == 1,
                              "oxide: weighted, normalised or multi-dimensional histograms have no native kernel");
  const auto edges = bin_edges[0].contiguous();
  auto dst = hist.is_contiguous() ? hist : at::empty(hist.sizes(), hist.options());
  const auto device = hist.device().index();
  OXIDE_CHECK(oxide_histc(device, current_stream(device), static_cast<int32_t>(self.scalar_type()),
                          static_cast<size_t>(self.size(0)), self.const_data_ptr(), self.stride(0),
                          edges.const_data_ptr(), static_cast<size_t>(edges.numel()), local_search ? 1 : 0,
                          dst.mutable_data_ptr(), static_cast<int32_t>(at::get_num_threads())));
  if (!dst.is_same(hist)) {
    hist.copy_(dst);
  }
}

// ---- unique ------------------------------------------------------------------------

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
  const auto m = rows.size(1);
  const auto opts = rows.options().dtype(at::kLong);
  const auto device = rows.device().index();
  const auto stream = current_stream(device);
  const auto dt = static_cast<int32_t>(rows.scalar_type());
  at::Tensor perm;
  if (sort) {
    perm = at::empty({n}, opts);
    OXIDE_CHECK(oxide_argsort_rows(device, stream, dt, n, m, rows.const_data_ptr(), perm.mutable_data_ptr<int64_t>(),
                                   static_cast<int32_t>(at::get_num_threads())));
  }
  Groups g;
  g.reps = at::empty({n}, opts);
  g.inverse = want_inverse ? at::empty({n}, opts) : at::Tensor();
  g.counts = want_counts ? at::empty({n}, opts) : at::Tensor();
  size_t k = 0;
  OXIDE_CHECK(oxide_unique_consecutive(device, stream, dt, n, m, rows.const_data_ptr(),
                                       sort ? perm.const_data_ptr<int64_t>() : nullptr, g.reps.mutable_data_ptr<int64_t>(),
                                       want_inverse ? g.inverse.mutable_data_ptr<int64_t>() : nullptr,
                                       want_counts ? g.counts.mutable_data_ptr<int64_t>() : nullptr, &k));
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
    const auto device = self.device().index();
    size_t k = 0;
    OXIDE_CHECK(oxide_unique_bytes(device, current_stream(device), static_cast<int32_t>(dt), flat.numel(),
                                   flat.const_data_ptr(), values.mutable_data_ptr(),
                                   return_inverse ? inverse.mutable_data_ptr<int64_t>() : nullptr,
                                   return_counts ? counts.mutable_data_ptr<int64_t>() : nullptr, &k));
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

Triple unique_dim_impl(const at::Tensor& self, int64_t dim, bool /*sorted*/, bool /*return_inverse*/, bool /*return_counts*/) {
  return unique_along(self, dim, true);
}

Triple unique_dim_consecutive_impl(const at::Tensor& self, int64_t dim, bool /*return_inverse*/, bool /*return_counts*/) {
  return unique_along(self, dim, false);
}

Triple unique_consecutive_impl(const at::Tensor& self, bool return_inverse, bool return_counts, std::optional<int64_t> dim) {
  if (!dim.has_value() || (*dim == 0 && self.dim() == 1)) {
    return unique_flat(self, false, return_inverse, return_counts);
  }
  return unique_along(self, *dim, false);
}

// ---- searchsorted / bucketize -------------------------------------------------------

at::Tensor& searchsorted_tensor_out(const at::Tensor& boundaries, const at::Tensor& self, bool out_int32, bool right,
                             std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter_opt,
                             at::Tensor& result) {
  const auto sorter = sorter_opt.has_value() ? *sorter_opt : at::Tensor();
  at::native::searchsorted_pre_check(boundaries, self, result, out_int32, right, side, sorter);
  at::native::resize_output(result, self.sizes());
  if (self.numel() == 0) {
    return result;
  }
  const bool is_right = side.has_value() ? *side == "right" : right;
  // Contiguous operands of one common dtype, exactly as CPU prepares them.
  at::Tensor in, bd, srt;
  at::native::searchsorted_maybe_trim_input_tensors(in, bd, srt, self, boundaries, sorter);
  const auto& values = in.defined() ? in : self;
  const auto& seq = bd.defined() ? bd : boundaries;
  const auto& order = srt.defined() ? srt : sorter;
  auto dst = result.is_contiguous() ? result : at::empty(result.sizes(), result.options());
  const auto len = seq.size(-1);
  // Value i searches boundary row i / per_row: one row for 1-d boundaries.
  const auto per_row = seq.dim() == 1 ? values.numel() : values.size(-1);
  const auto device = dst.device().index();
  OXIDE_CHECK(oxide_searchsorted(device, current_stream(device), static_cast<int32_t>(values.scalar_type()),
                                 values.const_data_ptr(), static_cast<size_t>(values.numel()), static_cast<size_t>(per_row),
                                 seq.const_data_ptr(), static_cast<size_t>(len),
                                 order.defined() ? order.const_data_ptr<int64_t>() : nullptr, is_right ? 1 : 0,
                                 static_cast<int32_t>(dst.scalar_type()), dst.mutable_data_ptr(),
                                 static_cast<int32_t>(at::get_num_threads())));
  if (!dst.is_same(result)) {
    result.copy_(dst);
  }
  return result;
}

at::Tensor searchsorted_result(const at::Tensor& like, bool out_int32) {
  return at::empty({0}, like.options().dtype(out_int32 ? at::kInt : at::kLong));
}

at::Tensor searchsorted_tensor(const at::Tensor& boundaries, const at::Tensor& self, bool out_int32, bool right,
                        std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter) {
  auto result = searchsorted_result(self, out_int32);
  return searchsorted_tensor_out(boundaries, self, out_int32, right, side, sorter, result);
}

at::Tensor& searchsorted_scalar_out(const at::Tensor& boundaries, const c10::Scalar& self, bool out_int32, bool right,
                                    std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter,
                                    at::Tensor& result) {
  return searchsorted_tensor_out(boundaries, at::native::searchsorted_scalar_tensor(self, boundaries.device()), out_int32,
                          right, side, sorter, result);
}

at::Tensor searchsorted_scalar(const at::Tensor& boundaries, const c10::Scalar& self, bool out_int32, bool right,
                               std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter) {
  return searchsorted_tensor(boundaries, at::native::searchsorted_scalar_tensor(self, boundaries.device()), out_int32, right,
                      side, sorter);
}

at::Tensor& bucketize_tensor_out(const at::Tensor& self, const at::Tensor& boundaries, bool out_int32, bool right,
                          at::Tensor& result) {
  TORCH_CHECK(boundaries.dim() == 1, "boundaries tensor must be 1 dimension, but got dim(", boundaries.dim(), ")");
  return searchsorted_tensor_out(boundaries, self, out_int32, right, std::nullopt, std::nullopt, result);
}

at::Tensor bucketize_tensor(const at::Tensor& self, const at::Tensor& boundaries, bool out_int32, bool right) {
  auto result = searchsorted_result(self, out_int32);
  return bucketize_tensor_out(self, boundaries, out_int32, right, result);
}

at::Tensor bucketize_scalar(const c10::Scalar& self, const at::Tensor& boundaries, bool out_int32, bool right) {
  return bucketize_tensor(at::native::searchsorted_scalar_tensor(self, boundaries.device()), boundaries, out_int32, right);
}

// ---- bincount ----------------------------------------------------------------------

at::Tensor bincount_impl(const at::Tensor& self, const std::optional<at::Tensor>& weights_opt, int64_t minlength) {
  // CPU's checks, in CPU's order: dtype (AT_DISPATCH_INTEGRAL_TYPES), minlength, emptiness, rank and sign, weights.
  const auto st = self.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(st == at::kByte || st == at::kChar || st == at::kShort || st == at::kInt || st == at::kLong,
                              "\"bincount\" not implemented for '", st, "'");
  TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
  if (self.dim() == 1 && self.numel() == 0) {
    return at::zeros({minlength}, self.options().dtype(at::kLong));
  }
  const auto device = self.device().index();
  const auto stream = current_stream(device);
  int64_t lo = 0, hi = -1;
  bool any = false;
  if (self.dim() == 1) {
    OXIDE_CHECK(oxide_bincount_range(device, stream, static_cast<int32_t>(st), static_cast<size_t>(self.numel()),
                                     self.const_data_ptr(), self.stride(0), &lo, &hi, &any));
  }
  TORCH_CHECK(self.dim() == 1 && lo >= 0, "bincount only supports 1-d non-negative integral inputs.");
  TORCH_CHECK(hi < std::numeric_limits<int64_t>::max(), "maximum value of input overflowed, it should be < ",
              std::numeric_limits<int64_t>::max(), " but got ", hi);
  at::Tensor weights = weights_opt.has_value() ? *weights_opt : at::Tensor();
  TORCH_CHECK(!weights.defined() || (weights.dim() == 1 && weights.size(0) == self.size(0)),
              "weights should be 1-d and have the same length as input");
  const auto nbins = std::max(hi + 1, minlength);
  // float32 weights sum in float; any other dtype is summed as float64.
  if (weights.defined() && weights.scalar_type() != at::kFloat) {
    weights = weights.to(at::kDouble);
  }
  auto out = at::empty({nbins}, self.options().dtype(weights.defined() ? weights.scalar_type() : at::kLong));
  OXIDE_CHECK(oxide_bincount(device, stream, static_cast<int32_t>(st), static_cast<size_t>(self.numel()),
                             self.const_data_ptr(), self.stride(0),
                             weights.defined() ? static_cast<int32_t>(weights.scalar_type()) : -1,
                             weights.defined() ? weights.const_data_ptr() : nullptr,
                             weights.defined() ? weights.stride(0) : 0, out.mutable_data_ptr(), static_cast<size_t>(nbins)));
  return out;
}

} // namespace
} // namespace oxide

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(scatter_reduce_stub, &::oxide::scatter_reduce_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(scatter_reduce_two_stub, &::oxide::scatter_reduce_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(scatter_scalar_reduce_stub, &::oxide::scatter_scalar_reduce_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(masked_scatter_stub, &::oxide::masked_scatter_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(histogramdd_linear_stub, &::oxide::histogram_linear_kernel)
} // namespace at::native

namespace oxide {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace at::native;
  using T = const at::Tensor&;
  using S = const c10::Scalar&;
  using Str = c10::string_view;
  OXIDE_STRUCTURED(m, structured_scatter_reduce_two, "scatter_reduce.two", "scatter_reduce_.two",
                   "scatter_reduce.two_out", int64_t, T, T, Str, bool);
  OXIDE_STRUCTURED(m, structured_scatter_reduce_out, "scatter.reduce", "scatter_.reduce", "scatter.reduce_out", int64_t,
                   T, T, Str);
  OXIDE_STRUCTURED(m, structured_scatter_value_reduce_out, "scatter.value_reduce", "scatter_.value_reduce",
                   "scatter.value_reduce_out", int64_t, T, S, Str);
  // masked_scatter (functional) is CompositeExplicitAutograd over masked_scatter_.
  OXIDE_IMPL(m, "masked_scatter_", TORCH_FN(masked_scatter_inplace));
  OXIDE_IMPL(m, "histc", TORCH_FN(histogram_histc));
  OXIDE_IMPL(m, "histc.out", TORCH_FN(histogram_histc_out));
  OXIDE_IMPL(m, "_unique2", TORCH_FN(unique2));
  OXIDE_IMPL(m, "_unique", TORCH_FN(unique_legacy));
  OXIDE_IMPL(m, "unique_dim", TORCH_FN(unique_dim_impl));
  OXIDE_IMPL(m, "unique_consecutive", TORCH_FN(unique_consecutive_impl));
  OXIDE_IMPL(m, "unique_dim_consecutive", TORCH_FN(unique_dim_consecutive_impl));
  OXIDE_IMPL(m, "searchsorted.Tensor", TORCH_FN(searchsorted_tensor));
  OXIDE_IMPL(m, "searchsorted.Tensor_out", TORCH_FN(searchsorted_tensor_out));
  OXIDE_IMPL(m, "searchsorted.Scalar", TORCH_FN(searchsorted_scalar));
  OXIDE_IMPL(m, "searchsorted.Scalar_out", TORCH_FN(searchsorted_scalar_out));
  OXIDE_IMPL(m, "bucketize.Tensor", TORCH_FN(bucketize_tensor));
  OXIDE_IMPL(m, "bucketize.Tensor_out", TORCH_FN(bucketize_tensor_out));
  OXIDE_IMPL(m, "bucketize.Scalar", TORCH_FN(bucketize_scalar));
  OXIDE_IMPL(m, "bincount", TORCH_FN(bincount_impl));
}

} // namespace oxide
