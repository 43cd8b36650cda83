// nonzero and masked_select on oxide. nonzero's output size depends on the
// data: the kernel counts first (the host waits for the device), then writes
// the coordinates (oxide_kernels::ops::reduce::nonzero). masked_select is index with a bool
// mask, which PyTorch's indexing turns into nonzero.
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/launch.h"

#include <ATen/ExpandUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/index.h>
#include <ATen/MemoryOverlap.h>
#include <torch/library.h>

#include <limits>

namespace oxide {
namespace {

at::Tensor& nonzero_out(const at::Tensor& self, at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == at::kLong,
              "nonzero: Expected out tensor to have scalar type Long but got scalar type", out.scalar_type());
  TORCH_CHECK(self.numel() < std::numeric_limits<int>::max(),
              "nonzero is not supported for tensors with more than INT_MAX elements");
  size_t count = 0;
  OXIDE_CHECK(oxide_nonzero(launch_on(self), in_arg(self), out_arg(at::Tensor()), &count));
  const auto n = static_cast<int64_t>(count);
  if (at::native::resize_output(out, {n, self.dim()})) {
    // A freshly sized result is column-major, as CPU's (strides (1, n)); PyTorch's
    // meta/fake kernel assumes that layout, so torch.compile checks it.
    out.as_strided_({n, self.dim()}, {1, n});
  }
  if (count > 0 && self.dim() > 0) {
    // Coordinates are written row-major; a transposed out (as CPU allows) goes through a temporary.
    auto dst = out.is_contiguous() ? out : at::empty(out.sizes(), out.options());
    OXIDE_CHECK(oxide_nonzero(launch_on(self), in_arg(self), out_arg(dst), nullptr));
    if (!dst.is_same(out)) {
      out.copy_(dst);
    }
  }
  return out;
}

at::Tensor nonzero_impl(const at::Tensor& self) {
  auto out = at::empty({0}, self.options().dtype(at::kLong));
  return nonzero_out(self, out);
}

// nonzero_static: nonzero's rows, truncated or padded with fill_value to `size`
// rows (CPU's checks and messages).
at::Tensor& nonzero_static_out(const at::Tensor& self, int64_t size, int64_t fill_value, at::Tensor& out) {
  TORCH_CHECK(size >= 0, "nonzero_static: 'size' must be an non-negative integer");
  TORCH_CHECK(out.scalar_type() == at::kLong,
              "nonzero_static: Expected out tensor to have scalar type Long but got scalar type", out.scalar_type());
  const int64_t ndim = self.dim();
  if (out.dim() != 2 || out.size(0) != size || out.size(1) != ndim) {
    at::native::resize_output(out, {size, ndim});
  }
  if (size == 0 || ndim == 0) {
    return out;
  }
  const auto found = nonzero_impl(self);
  const int64_t copied = std::min(size, found.size(0));
  out.narrow(0, 0, copied).copy_(found.narrow(0, 0, copied));
  if (size > copied) {
    out.narrow(0, copied, size - copied).fill_(fill_value);
  }
  return out;
}

at::Tensor nonzero_static(const at::Tensor& self, int64_t size, int64_t fill_value) {
  TORCH_CHECK(size >= 0, "nonzero_static: 'size' must be an non-negative integer");
  auto out = at::empty({size, self.dim()}, self.options().dtype(at::kLong));
  return nonzero_static_out(self, size, fill_value, out);
}

at::Tensor masked_select_impl(const at::Tensor& self, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  TORCH_CHECK(self.device() == mask.device(), "masked_select(): self and mask must be on the same device");
  auto [m, s] = at::expand_outplace(mask, self);
  // 0-dim operands select from a one-element vector (the result is 1-d either way).
  const auto source = s->dim() == 0 ? s->reshape({1}) : *s;
  c10::List<std::optional<at::Tensor>> idx;
  idx.push_back(m->dim() == 0 ? m->reshape({1}) : *m);
  return at::index(source, idx);
}

at::Tensor& masked_select_out(const at::Tensor& self, const at::Tensor& mask, at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == self.scalar_type(),
              "masked_select(): self and result must have the same scalar type");
  // CPU's checks: an out= that overlaps itself or an input raises.
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  at::assert_no_overlap(out, mask);
  const auto r = masked_select_impl(self, mask);
  at::native::resize_output(out, r.sizes());
  out.copy_(r);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "nonzero", TORCH_FN(nonzero_impl));
  OXIDE_IMPL(m, "nonzero.out", TORCH_FN(nonzero_out));
  OXIDE_IMPL(m, "nonzero_static", TORCH_FN(nonzero_static));
  OXIDE_IMPL(m, "nonzero_static.out", TORCH_FN(nonzero_static_out));
  OXIDE_IMPL(m, "masked_select", TORCH_FN(masked_select_impl));
  OXIDE_IMPL(m, "masked_select.out", TORCH_FN(masked_select_out));
}

}  // namespace oxide
