// im2col / col2im (F.unfold / F.fold) on oxide, forward only: autograd's
// formulas make each the other's backward, so both directions run here.
// PyTorch's own argument and shape checks (ATen/native/im2col_shape_check.h),
// then the unfold/fold loops convolution uses (oxide_kernels::ops::nn::conv::unfold / fold).
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/launch.h"

#include <ATen/native/Resize.h>
#include <ATen/native/im2col_shape_check.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

namespace oxide {
namespace {

using IA = c10::IntArrayRef;

void check_pairs(IA kernel_size, IA dilation, IA padding, IA stride) {
  TORCH_CHECK(kernel_size.size() == 2, "It is expected kernel_size equals to 2, but got size ", kernel_size.size());
  TORCH_CHECK(dilation.size() == 2, "It is expected dilation equals to 2, but got size ", dilation.size());
  TORCH_CHECK(padding.size() == 2, "It is expected padding equals to 2, but got size ", padding.size());
  TORCH_CHECK(stride.size() == 2, "It is expected stride equals to 2, but got size ", stride.size());
}

// Runs the kernel from contiguous `src` into `dst` (contiguous, or through a temporary).
void run(const at::Tensor& src, const at::Tensor& dst, const OxideUnfold& u, bool fold) {
  if (dst.numel() == 0) {
    return;
  }
  auto out = dst.is_contiguous() ? dst : at::empty(dst.sizes(), dst.options());
  OXIDE_CHECK(oxide_unfold(launch_on(out), out_arg(out), in_arg(src), &u, fold));
  if (!out.is_same(dst)) {
    dst.copy_(out);
  }
}

// The window; batch, channels and image extents come from the image operand.
OxideUnfold geometry(IA kernel_size, IA dilation, IA padding, IA stride) {
  return OxideUnfold{
      {kernel_size[0], kernel_size[1]}, {stride[0], stride[1]}, {padding[0], padding[1]}, {dilation[0], dilation[1]}};
}

at::Tensor& im2col_out(const at::Tensor& self, IA kernel_size, IA dilation, IA padding, IA stride, at::Tensor& out) {
  check_pairs(kernel_size, dilation, padding, stride);
  at::native::im2col_shape_check(self, at::Tensor(), kernel_size[0], kernel_size[1], dilation[0], dilation[1],
                                 padding[0], padding[1], stride[0], stride[1]);
  const bool batched = self.dim() == 4;
  const auto input = (batched ? self : self.unsqueeze(0)).contiguous();
  const int64_t n = input.size(0), c = input.size(1), h = input.size(2), w = input.size(3);
  const int64_t oh = at::native::sliding_window_count(h, padding[0], dilation[0], kernel_size[0], stride[0]);
  const int64_t ow = at::native::sliding_window_count(w, padding[1], dilation[1], kernel_size[1], stride[1]);
  std::vector<int64_t> shape{n, c * kernel_size[0] * kernel_size[1], oh * ow};
  if (!batched) {
    shape.erase(shape.begin());
  }
  at::native::resize_output(out, shape);
  run(input, batched ? out : out.unsqueeze(0), geometry(kernel_size, dilation, padding, stride), false);
  return out;
}

at::Tensor im2col(const at::Tensor& self, IA kernel_size, IA dilation, IA padding, IA stride) {
  auto out = at::empty({0}, self.options());
  return im2col_out(self, kernel_size, dilation, padding, stride, out);
}

at::Tensor& col2im_out(const at::Tensor& self, IA output_size, IA kernel_size, IA dilation, IA padding, IA stride,
                       at::Tensor& out) {
  TORCH_CHECK(output_size.size() == 2, "It is expected output_size equals to 2, but got size ", output_size.size());
  check_pairs(kernel_size, dilation, padding, stride);
  at::native::col2im_shape_check(self, at::Tensor(), output_size[0], output_size[1], kernel_size[0], kernel_size[1],
                                 dilation[0], dilation[1], padding[0], padding[1], stride[0], stride[1]);
  const bool batched = self.dim() == 3;
  const auto input = (batched ? self : self.unsqueeze(0)).contiguous();
  const int64_t n = input.size(0), c = input.size(1) / (kernel_size[0] * kernel_size[1]);
  std::vector<int64_t> shape{n, c, output_size[0], output_size[1]};
  if (!batched) {
    shape.erase(shape.begin());
  }
  at::native::resize_output(out, shape);
  run(input, batched ? out : out.unsqueeze(0), geometry(kernel_size, dilation, padding, stride), true);
  return out;
}

at::Tensor col2im(const at::Tensor& self, IA output_size, IA kernel_size, IA dilation, IA padding, IA stride) {
  auto out = at::empty({0}, self.options());
  return col2im_out(self, output_size, kernel_size, dilation, padding, stride, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "im2col", TORCH_FN(im2col));
  OXIDE_IMPL(m, "im2col.out", TORCH_FN(im2col_out));
  OXIDE_IMPL(m, "col2im", TORCH_FN(col2im));
  OXIDE_IMPL(m, "col2im.out", TORCH_FN(col2im_out));
}

}  // namespace oxide
