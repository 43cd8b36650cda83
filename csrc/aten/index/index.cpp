// Advanced indexing on oxide: index (x[idx]), index_put_ (x[idx] = v, also
// accumulating), index_select and masked_fill_. PyTorch's structured meta
// function and native functions compute the indexed shape, strides and checks;
// the loops are Rust (oxide_kernels::ops::index::index; masked_fill is a pointwise op).
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/launch.h"
#include "common/structured.h"

#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/IndexKernel.h>
#include <ATen/native/TensorAdvancedIndexing.h>
#include <ATen/ops/_index_put_impl_native.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/index.h>
#include <ATen/ops/index_native.h>
#include <c10/util/ScopeExit.h>
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
  OXIDE_CHECK(oxide_index(launch_on(iter), &args.abi, sizes.size(), sizes.data(), strides.data(), put, accumulate,
                          !t_reject_negative));
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
void index_put_with_sort(at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices, const at::Tensor& value,
                         bool accumulate, bool /*unsafe*/) {
  TORCH_CHECK(value.scalar_type() == self.scalar_type(),
              "Index put requires the source and destination dtypes match, got ", self.scalar_type(),
              " for the destination and ", value.scalar_type(), " for the source.");
  const auto lin = at::arange(self.numel(), self.options().dtype(at::kLong)).view(self.sizes());
  const auto pos = at::index(lin, indices);
  TORCH_CHECK_INDEX(value.numel() == 1 || at::is_expandable_to(value.sizes(), pos.sizes()),
                    "shape mismatch: value tensor of shape ", value.sizes(),
                    " cannot be broadcast to indexing result of shape ", pos.sizes());
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

}  // namespace
}  // namespace oxide

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(index_stub, &::oxide::index_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(index_put_stub, &::oxide::index_put_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(index_put_with_sort_stub, &::oxide::index_put_with_sort)
}  // namespace at::native

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
  TORCH_CHECK(self.scalar_type() == out.scalar_type(),
              "index_select(): self and result must have the same scalar type");
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
    TORCH_WARN(
        "Use of masked_fill_ on expanded tensors is deprecated. Please clone() the tensor before "
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
  ScalarArgs s;
  s.set(0, value);
  pointwise(iter, OXIDE_POINTWISE_masked_fill, s, self.scalar_type());
  return self;
}

at::Tensor& masked_fill_tensor(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  return masked_fill_scalar(self, mask, value.item());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "index.Tensor", TORCH_FN(index));
  OXIDE_IMPL(m, "index.Tensor_out", TORCH_FN(index_out));
  OXIDE_IMPL(m, "_index_put_impl_", TORCH_FN(at::native::_index_put_impl_));
  OXIDE_IMPL(m, "index_select", TORCH_FN(index_select));
  OXIDE_IMPL(m, "index_select.out", TORCH_FN(index_select_out));
  OXIDE_IMPL(m, "masked_fill_.Scalar", TORCH_FN(masked_fill_scalar));
  OXIDE_IMPL(m, "masked_fill_.Tensor", TORCH_FN(masked_fill_tensor));
}

}  // namespace oxide
