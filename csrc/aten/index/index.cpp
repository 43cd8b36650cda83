// Native data movement and factories: advanced indexing (index, index_put_,
// index_select), masked_fill_, cat, and the range factories (arange,
// linspace, logspace, eye). PyTorch's structured meta functions and native
// functions set up shapes, checks and iterators; the loops are Rust
// (oxide_kernels::index, ::factory, ::pointwise).
#include "common/device_check.h"
#include "common/kernels.h"

#include <ATen/Dispatch.h>
#include "common/structured.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/IndexKernel.h>
#include <ATen/native/RangeFactories.h>
#include <ATen/native/TensorAdvancedIndexing.h>
#include <ATen/ops/_index_put_impl_native.h>
#include <ATen/ExpandUtils.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/arange_native.h>
#include <ATen/ops/cat_meta.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/index.h>
#include <ATen/ops/index_native.h>
#include <ATen/ops/linspace.h>
#include <ATen/ops/linspace_native.h>
#include <ATen/ops/pow.h>
#include <c10/util/ScopeExit.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>

namespace oxide {
namespace {

// index_select (and embedding through it) reach the index stub through at::index,
// whose signature has no room to say that negative indices are out of range
// there (CPU raises "index out of range in self"); index_select sets this for
// the duration of its one call.
thread_local bool t_reject_negative = false;

void run_index(at::TensorIteratorBase& iter, at::IntArrayRef sizes, at::IntArrayRef strides, bool put,
               bool accumulate) {
  if (iter.numel() == 0) {
    return;
  }
  IterArgs args(iter);
  const auto device = iter.device(0).index();
  OXIDE_CHECK(oxide_index(device, current_stream(device), &args.abi, sizes.size(), sizes.data(), strides.data(),
                          iter.element_size(0), put ? 1 : 0, accumulate ? 1 : 0, t_reject_negative ? 0 : 1));
}

void index_kernel(at::TensorIteratorBase& iter, at::IntArrayRef sizes, at::IntArrayRef strides) {
  run_index(iter, sizes, strides, false, false);
}

void index_put_kernel(at::TensorIterator& iter, at::IntArrayRef sizes, at::IntArrayRef strides, bool accumulate) {
  run_index(iter, sizes, strides, true, accumulate);
}

// The accumulate (and deterministic) path of index_put_ on accelerators:
// positions are found with the native `index` over a tensor of linear
// offsets, then added serially by the Rust kernel (repeated indices sum up).
void index_put_with_sort(at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                         const at::Tensor& value, bool accumulate, bool /*unsafe*/) {
  TORCH_CHECK(value.scalar_type() == self.scalar_type(), "Index put requires the source and destination dtypes match, got ",
              self.scalar_type(), " for the destination and ", value.scalar_type(), " for the source.");
  const auto lin = at::arange(self.numel(), self.options().dtype(at::kLong)).view(self.sizes());
  const auto pos = at::index(lin, indices);
  TORCH_CHECK_INDEX(value.numel() == 1 || at::is_expandable_to(value.sizes(), pos.sizes()), "shape mismatch: value tensor of shape ",
                    value.sizes(), " cannot be broadcast to indexing result of shape ", pos.sizes());
  if (pos.numel() == 0) {
    return;
  }
  const auto values = value.expand(pos.sizes()).reshape({-1});
  const auto flat_pos = pos.reshape({-1});
  auto base = self.is_contiguous() ? self : self.contiguous();
  const auto dst = base.view({-1}).as_strided({flat_pos.numel()}, {0});
  auto iter = at::TensorIteratorConfig()
                  .set_check_mem_overlap(false)
                  .check_all_same_dtype(false)
                  .resize_outputs(false)
                  .add_output(dst)
                  .add_const_input(values)
                  .add_const_input(flat_pos)
                  .build();
  const int64_t size = self.numel();
  const int64_t stride = self.element_size();
  run_index(iter, at::IntArrayRef(&size, 1), at::IntArrayRef(&stride, 1), true, accumulate);
  if (!base.is_same(self)) {
    self.copy_(base);
  }
}

void sequence(at::TensorIterator& iter, int32_t kind, double a, double b, int64_t ia, int64_t ib, int64_t steps) {
  if (iter.numel() == 0) {
    return;
  }
  IterArgs args(iter);
  const auto device = iter.device(0).index();
  OXIDE_CHECK(oxide_fill_sequence(device, current_stream(device), &args.abi, kind, a, b, ia, ib, steps));
}

void arange_kernel(at::TensorIterator& iter, const c10::Scalar& start, const c10::Scalar& /*size*/,
                   const c10::Scalar& step) {
  ScalarArgs s;
  s.set(0, start);
  s.set(1, step);
  sequence(iter, 0, s.f[0], s.f[1], s.i[0], s.i[1], 0);
}

void linspace_kernel(at::TensorIterator& iter, const c10::Scalar& start, const c10::Scalar& end, int64_t steps) {
  // CPU converts the ends to the output dtype first: an end the dtype cannot hold raises
  // (RuntimeError), and dtypes without a CPU loop (bool, uint16..) raise NotImplementedError.
  AT_DISPATCH_ALL_TYPES_AND_COMPLEX_AND2(at::kHalf, at::kBFloat16, iter.dtype(), "linspace", [&] {
    (void)start.to<scalar_t>();
    (void)end.to<scalar_t>();
  });
  sequence(iter, 1, start.toDouble(), end.toDouble(), 0, 0, steps);
}

} // namespace
} // namespace oxide

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(index_stub, &::oxide::index_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(index_put_stub, &::oxide::index_put_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(index_put_with_sort_stub, &::oxide::index_put_with_sort)
REGISTER_PRIVATEUSE1_DISPATCH(arange_stub, &::oxide::arange_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(linspace_stub, &::oxide::linspace_kernel)
} // namespace at::native

namespace oxide {
namespace {

using Indices = c10::List<std::optional<at::Tensor>>;

// index.Tensor: the meta function precomputes the indexed sizes and byte strides.
at::Tensor index(const at::Tensor& self, const Indices& indices) {
  structured::Wrapper<at::native::structured_index_out, structured::Kind::Functional, 1> op;
  auto pre = op.meta(self, indices);
  op.impl(self, pre.sizes, pre.strides, op.outputs_[0]);
  return std::move(op.outputs_[0]);
}

at::Tensor& index_out(const at::Tensor& self, const Indices& indices, at::Tensor& out) {
  structured::Wrapper<at::native::structured_index_out, structured::Kind::Out, 1> op(out);
  auto pre = op.meta(self, indices);
  op.impl(self, pre.sizes, pre.strides, op.maybe_get_output(0));
  op.commit();
  return out;
}

at::Tensor& index_select_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, at::Tensor& out) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_select(): Index is supposed to be a vector");
  TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt,
              "index_select(): Expected dtype int32 or int64 for index");
  TORCH_CHECK(self.scalar_type() == out.scalar_type(), "index_select(): self and result must have the same scalar type");
  TORCH_CHECK(!(self.dim() == 0 && index.numel() != 1), "index_select(): Index to scalar can have only 1 value, got ",
              index.numel(), " value(s)");
  TORCH_CHECK(self.dim() == 0 || index.numel() == 0 || self.size(dim) > 0,
              "index_select(): self indexing axis dim should be positive");
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  at::assert_no_overlap(out, index);
  const auto source = self.dim() == 0 ? self.reshape({1}) : self;
  Indices indices;
  for (int64_t d = 0; d < dim; ++d) {
    indices.push_back(std::nullopt);
  }
  indices.push_back(index.reshape({-1}));
  t_reject_negative = true;
  const auto reset = c10::make_scope_exit([] { t_reject_negative = false; });
  auto result = at::index(source, indices);
  if (self.dim() == 0) {
    result = result.reshape({});
  }
  at::native::resize_output(out, result.sizes());
  out.copy_(result);
  return out;
}

at::Tensor index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  auto out = at::empty({0}, self.options());
  return index_select_out(self, dim, index, out);
}

at::Tensor& masked_fill_scalar(at::Tensor& self, const at::Tensor& mask, const c10::Scalar& value) {
  TORCH_CHECK(self.device() == mask.device(), "expected self and mask to be on the same device, but got mask on ",
              mask.device(), " and self on ", self.device());
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_fill_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  if (at::has_internal_overlap(self) == at::MemOverlap::Yes) {
    TORCH_WARN("Use of masked_fill_ on expanded tensors is deprecated. Please clone() the tensor before "
               "performing this operation. This also applies to advanced indexing e.g. tensor[mask] = scalar");
  }
  at::assert_no_partial_overlap(self, mask);
  check_scalar_fits(value, self.scalar_type());
  auto iter = at::TensorIteratorConfig()
                  .set_check_mem_overlap(false)
                  .check_all_same_dtype(false)
                  .resize_outputs(false)
                  .add_output(self)
                  .add_const_input(mask)
                  .add_const_input(self)
                  .build();
  static const int32_t id = pointwise_id("masked_fill");
  ScalarArgs s;
  s.set(0, value);
  pointwise(iter, id, s, self.scalar_type());
  return self;
}

at::Tensor& masked_fill_tensor(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  return masked_fill_scalar(self, mask, value.item());
}

// cat: the meta function checks shapes, dtypes and overlap and sizes the output.
// When the output and every input are contiguous, of one dtype and on the
// output's device, one kernel interleaves the inputs' chunks
// (`oxide_cat_contiguous`; `torch.stack` of per-step states in RNN layers
// lands here); otherwise each input is copied into its slice with the native
// strided copy.
bool cat_contiguous(const at::ITensorListRef& tensors, int64_t dim, const at::Tensor& out) {
  if (!out.is_contiguous()) {
    return false;
  }
  std::vector<const void*> srcs;
  std::vector<size_t> bytes;
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < out.dim(); ++d) {
    inner *= out.size(d);
  }
  for (const at::Tensor& t : tensors) {
    if (t.dim() == 1 && t.numel() == 0) {
      continue;  // legacy: skipped, as below
    }
    if (!t.is_contiguous() || t.scalar_type() != out.scalar_type() || t.device() != out.device()) {
      return false;
    }
    srcs.push_back(t.const_data_ptr());
    bytes.push_back(static_cast<size_t>(t.size(dim) * inner) * out.element_size());
  }
  const auto outer = static_cast<size_t>(c10::multiply_integers(out.sizes().begin(), out.sizes().begin() + dim));
  const auto device = out.device().index();
  OXIDE_CHECK(oxide_cat_contiguous(device, current_stream(device), srcs.size(), srcs.data(), bytes.data(), outer,
                                   out.data_ptr(), at::get_num_threads()));
  return true;
}

struct Cat : at::meta::structured_cat {
  void impl(const at::ITensorListRef& tensors, int64_t dim, int64_t /*valid*/, bool, bool, bool, at::MemoryFormat,
            const at::Tensor& out) {
    if (out.numel() == 0 || cat_contiguous(tensors, dim, out)) {
      return;
    }
    int64_t offset = 0;
    for (const at::Tensor& t : tensors) {
      // Legacy: 1-d empty tensors are skipped whatever the other shapes are.
      if (t.dim() == 1 && t.numel() == 0) {
        continue;
      }
      const int64_t size = t.size(dim);
      out.narrow(dim, offset, size).copy_(t);
      offset += size;
    }
  }
};

at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim) {
  structured::Wrapper<Cat, structured::Kind::Functional, 1> op;
  auto p = op.meta(tensors, dim);
  op.impl(tensors, p.dim, p.valid, p.all_contiguous, p.all_same_dtype, p.all_same_sizes_and_stride, p.memory_format,
          op.outputs_[0]);
  return std::move(op.outputs_[0]);
}

at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
  structured::Wrapper<Cat, structured::Kind::Out, 1> op(out);
  auto p = op.meta(tensors, dim);
  op.impl(tensors, p.dim, p.valid, p.all_contiguous, p.all_same_dtype, p.all_same_sizes_and_stride, p.memory_format,
          op.maybe_get_output(0));
  op.commit();
  return out;
}

at::Tensor& eye_out(int64_t n, int64_t m, at::Tensor& out) {
  TORCH_CHECK(n >= 0, "n must be greater or equal to 0, got ", n);
  TORCH_CHECK(m >= 0, "m must be greater or equal to 0, got ", m);
  out.resize_({n, m});
  out.zero_();
  out.diagonal().fill_(1);
  return out;
}

at::Tensor& eye_n_out(int64_t n, at::Tensor& out) {
  return eye_out(n, n, out);
}

// logspace: base ** linspace computed in double, then rounded into `out`'s dtype as CPU does.
at::Tensor& logspace_out(const c10::Scalar& start, const c10::Scalar& end, int64_t steps, double base, at::Tensor& out) {
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  TORCH_CHECK(!out.is_complex(), "logspace: complex dtypes are not supported on oxide");
  TORCH_CHECK_NOT_IMPLEMENTED(out.scalar_type() != at::kBool, "\"logspace_cpu\" not implemented for 'Bool'");
  at::native::resize_output(out, {steps});
  if (steps == 0) {
    return out;
  }
  auto exponents = at::linspace(start, end, steps, out.options().dtype(at::kDouble));
  out.copy_(at::pow(base, exponents));
  return out;
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "index.Tensor", TORCH_FN(index));
  OXIDE_IMPL(m, "index.Tensor_out", TORCH_FN(index_out));
  OXIDE_IMPL(m, "_index_put_impl_", TORCH_FN(at::native::_index_put_impl_));
  OXIDE_IMPL(m, "index_select", TORCH_FN(index_select));
  OXIDE_IMPL(m, "index_select.out", TORCH_FN(index_select_out));
  OXIDE_IMPL(m, "masked_fill_.Scalar", TORCH_FN(masked_fill_scalar));
  OXIDE_IMPL(m, "masked_fill_.Tensor", TORCH_FN(masked_fill_tensor));
  OXIDE_IMPL(m, "cat", TORCH_FN(cat));
  OXIDE_IMPL(m, "cat.out", TORCH_FN(cat_out));
  OXIDE_IMPL(m, "arange.start_out", TORCH_FN(static_cast<at::Tensor& (*)(const c10::Scalar&, const c10::Scalar&, const c10::Scalar&, at::Tensor&)>(&at::native::arange_out)));
  OXIDE_IMPL(m, "linspace.out", TORCH_FN(static_cast<at::Tensor& (*)(const c10::Scalar&, const c10::Scalar&, int64_t, at::Tensor&)>(&at::native::linspace_out)));
  OXIDE_IMPL(m, "logspace.out", TORCH_FN(logspace_out));
  OXIDE_IMPL(m, "eye.m_out", TORCH_FN(eye_out));
  OXIDE_IMPL(m, "eye.out", TORCH_FN(eye_n_out));
}

} // namespace oxide
