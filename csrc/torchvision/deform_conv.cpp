// torchvision's deformable convolution on oxide: torchvision::deform_conv2d and
// torchvision::_deform_conv2d_backward, registered for the torchvision namespace
// (live once torchvision defines the operators; torchvision's Autograd kernel calls
// the backward through the dispatcher, so training runs here too).
//
// torchvision's CPU kernel (torchvision/csrc/ops/cpu/deform_conv2d_kernel.cpp) is the
// reference: its argument checks with its messages and in its order, its empty-batch
// results, its dtypes (float32, float64, float16; others refused with its dispatch
// message) and its quirks (the mask's batch extent and dtype are checked even without
// use_mask; a bias of another dtype promotes the output, as its `out + bias` does).
// Where CPU would divide by zero (a stride or group count of 0) we raise instead. The
// Rust kernels (oxide_kernels::ops::torchvision::deform_conv) run on contiguous operands.
//
// Registered with m.impl rather than OXIDE_IMPL: OXIDE_IMPL's device check names
// aten::/oxide:: operators and its dtype fallback re-dispatches aten operators, and
// these are neither; the same-device check is made here, naming the torchvision operator.
#include "common/launch.h"
#include "common/oxide.h"
#include "torchvision/checks.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/op_registration/adaption.h>
#include <ATen/ops/add.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <initializer_list>
#include <tuple>
#include <utility>

namespace oxide {
namespace {

using T = const at::Tensor&;

// torchvision's argument checks (the forward's; its backward makes none, and runs the
// same reshapes, so the same checks guard the backward here). Variable names follow
// torchvision's so the messages of its message-less checks read the same. Returns (out_h, out_w).
std::pair<int64_t, int64_t> check_arguments(const at::Tensor& input_c, const at::Tensor& weight_c,
                                            const at::Tensor& offset_c, const at::Tensor& mask_c, int64_t stride_h,
                                            int64_t stride_w, int64_t pad_h, int64_t pad_w, int64_t dilation_h,
                                            int64_t dilation_w, int64_t n_weight_grps, int64_t n_offset_grps,
                                            bool use_mask) {
  TORCH_CHECK(input_c.ndimension() == 4);
  TORCH_CHECK(offset_c.ndimension() == 4);
  TORCH_CHECK(!use_mask || mask_c.ndimension() == 4);
  TORCH_CHECK(weight_c.ndimension() == 4);

  const int64_t in_h = input_c.size(2);
  const int64_t in_w = input_c.size(3);
  const int64_t weight_h = weight_c.size(2);
  const int64_t weight_w = weight_c.size(3);

  TORCH_CHECK(weight_h > 0 && weight_w > 0, "weight_h: ", weight_h, " weight_w: ", weight_w);
  TORCH_CHECK(stride_h > 0 && stride_w > 0, "stride_h: ", stride_h, " stride_w: ", stride_w);
  TORCH_CHECK(pad_h >= 0 && pad_w >= 0, "pad_h: ", pad_h, " pad_w: ", pad_w);
  TORCH_CHECK(dilation_h > 0 && dilation_w > 0, "dilation_h: ", dilation_h, " dilation_w: ", dilation_w);

  // CPU computes these before the stride check (and divides by a zero stride); after
  // it they are the same values. C++ division truncates toward zero, as torchvision's.
  const int64_t ker_h = dilation_h * (weight_h - 1) + 1;
  const int64_t ker_w = dilation_w * (weight_w - 1) + 1;
  const int64_t out_h = ((in_h + 2 * pad_h - ker_h) / stride_h) + 1;
  const int64_t out_w = ((in_w + 2 * pad_w - ker_w) / stride_w) + 1;

  TORCH_CHECK(weight_c.size(1) * n_weight_grps == input_c.size(1));
  // Not in torchvision, whose next line divides by the group count.
  TORCH_CHECK(n_weight_grps > 0, "n_weight_grps: ", n_weight_grps);
  TORCH_CHECK(weight_c.size(0) % n_weight_grps == 0);
  TORCH_CHECK((offset_c.size(1) == n_offset_grps * 2 * weight_h * weight_w),
              "offset.shape[1] is not valid: got: ", offset_c.size(1),
              " expected: ", n_offset_grps * 2 * weight_h * weight_w);
  TORCH_CHECK((!use_mask || mask_c.size(1) == n_offset_grps * weight_h * weight_w),
              "mask.shape[1] is not valid: got: ", mask_c.size(1), " expected: ", n_offset_grps * weight_h * weight_w);
  // Likewise (torchvision divides by it next).
  TORCH_CHECK(n_offset_grps > 0, "n_offset_grps: ", n_offset_grps);
  TORCH_CHECK(input_c.size(1) % n_offset_grps == 0);

  TORCH_CHECK((offset_c.size(0) == input_c.size(0)), "invalid batch size of offset");
  TORCH_CHECK((offset_c.size(2) == out_h && offset_c.size(3) == out_w), "offset output dims: (", offset_c.size(2), ", ",
              offset_c.size(3), ") - ", "computed output dims: (", out_h, ", ", out_w, ")");
  TORCH_CHECK((mask_c.size(0) == input_c.size(0)), "invalid batch size of mask");
  TORCH_CHECK((!use_mask || (mask_c.size(2) == out_h && mask_c.size(3) == out_w)), "mask output dims: (",
              mask_c.size(2), ", ", mask_c.size(3), ") - ", "computed output dims: (", out_h, ", ", out_w, ")");
  TORCH_CHECK(out_h > 0 && out_w > 0, "Calculated output size too small - out_h: ", out_h, " out_w: ", out_w);
  return {out_h, out_w};
}

// The dtypes torchvision's CPU kernel dispatches on (float32, float64, float16),
// refused with its message naming its step `kernel`; then every other operand of the
// input's dtype: CPU reads them as that type and fails on another ("expected scalar type").
void check_dtypes(const char* kernel, const at::Tensor& input_c, std::initializer_list<const at::Tensor*> others) {
  check_torchvision_dtype(kernel, input_c);
  const c10::ScalarType st = input_c.scalar_type();
  for (const at::Tensor* t : others) {
    TORCH_CHECK(t->scalar_type() == st, "expected scalar type ", st, " but found ", t->scalar_type());
  }
}

OxideDeformConv2d params(int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w, int64_t dilation_h,
                         int64_t dilation_w, int64_t n_weight_grps, int64_t n_offset_grps, bool use_mask) {
  return OxideDeformConv2d{.stride = {stride_h, stride_w},
                           .padding = {pad_h, pad_w},
                           .dilation = {dilation_h, dilation_w},
                           .groups = n_weight_grps,
                           .offset_groups = n_offset_grps,
                           .use_mask = use_mask};
}

at::Tensor deform_conv2d(T input, T weight, T offset, T mask, T bias, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                         int64_t pad_w, int64_t dilation_h, int64_t dilation_w, int64_t n_weight_grps,
                         int64_t n_offset_grps, bool use_mask) {
  check_devices("torchvision::deform_conv2d",
                {{&input, "input"}, {&weight, "weight"}, {&offset, "offset"}, {&mask, "mask"}, {&bias, "bias"}});
  const at::Tensor input_c = input.contiguous();
  const at::Tensor offset_c = offset.contiguous();
  const at::Tensor weight_c = weight.contiguous();
  const at::Tensor mask_c = mask.contiguous();
  const at::Tensor bias_c = bias.contiguous();
  const auto [out_h, out_w] = check_arguments(input_c, weight_c, offset_c, mask_c, stride_h, stride_w, pad_h, pad_w,
                                              dilation_h, dilation_w, n_weight_grps, n_offset_grps, use_mask);
  const int64_t batch_sz = input_c.size(0);
  const int64_t out_channels = weight_c.size(0);
  if (batch_sz == 0) {
    // CPU returns before computing anything: zeros, no bias, any dtype.
    return at::zeros({batch_sz, out_channels, out_h, out_w}, input_c.options());
  }
  check_dtypes("deformable_im2col", input_c, {&offset_c, &mask_c, &weight_c});
  // CPU's `out + bias.view(...)`: the view's error for a bias of another size, and a
  // bias of another dtype added (and promoted) after the kernel instead of inside it.
  const at::Tensor bias_v = bias_c.view({1, out_channels, 1, 1});
  const bool fused_bias = bias_c.scalar_type() == input_c.scalar_type();
  at::Tensor output = at::empty({batch_sz, out_channels, out_h, out_w}, input_c.options());
  if (output.numel() > 0) {
    const at::Tensor mask_arg = use_mask ? mask_c : at::Tensor();
    const at::Tensor bias_arg = fused_bias ? bias_c : at::Tensor();
    OXIDE_CHECK(oxide_deform_conv2d(
        launch_on(input_c), out_arg(output), in_arg(input_c), in_arg(weight_c), in_arg(offset_c), in_arg(mask_arg),
        in_arg(bias_arg),
        params(stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, n_weight_grps, n_offset_grps, use_mask)));
  }
  return fused_bias ? output : at::add(output, bias_v);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> deform_conv2d_backward(
    T grad, T input, T weight, T offset, T mask, T bias, int64_t stride_h, int64_t stride_w, int64_t pad_h,
    int64_t pad_w, int64_t dilation_h, int64_t dilation_w, int64_t n_weight_grps, int64_t n_offset_grps,
    bool use_mask) {
  check_devices(
      "torchvision::_deform_conv2d_backward",
      {{&grad, "grad"}, {&input, "input"}, {&weight, "weight"}, {&offset, "offset"}, {&mask, "mask"}, {&bias, "bias"}});
  const at::Tensor grad_out_c = grad.contiguous();
  const at::Tensor input_c = input.contiguous();
  const at::Tensor weight_c = weight.contiguous();
  const at::Tensor offset_c = offset.contiguous();
  const at::Tensor mask_c = mask.contiguous();
  const at::Tensor bias_c = bias.contiguous();
  const auto [out_h, out_w] = check_arguments(input_c, weight_c, offset_c, mask_c, stride_h, stride_w, pad_h, pad_w,
                                              dilation_h, dilation_w, n_weight_grps, n_offset_grps, use_mask);
  const int64_t batch_sz = input_c.size(0);
  const int64_t out_channels = weight_c.size(0);
  TORCH_CHECK(grad_out_c.sizes() == at::IntArrayRef({batch_sz, out_channels, out_h, out_w}), "grad of sizes ",
              grad_out_c.sizes(), " for an output of sizes ", at::IntArrayRef({batch_sz, out_channels, out_h, out_w}));
  if (batch_sz == 0) {
    // CPU's results without a batch: zeros, and the bias gradient as it forms it.
    return {at::zeros_like(input_c), at::zeros_like(weight_c), at::zeros_like(offset_c), at::zeros_like(mask_c),
            at::mul(at::ones_like(bias_c), grad_out_c.sum({0, 2, 3}))};
  }
  check_dtypes("compute_grad_offset_and_mask", input_c, {&grad_out_c, &weight_c, &offset_c, &mask_c});
  at::Tensor grad_input = at::empty(input_c.sizes(), input_c.options());
  at::Tensor grad_weight = at::empty(weight_c.sizes(), weight_c.options());
  at::Tensor grad_offset = at::empty(offset_c.sizes(), offset_c.options());
  // Without use_mask CPU returns zeros shaped like the placeholder mask.
  at::Tensor grad_mask = use_mask ? at::empty(mask_c.sizes(), mask_c.options()) : at::zeros_like(mask_c);
  at::Tensor grad_bias = at::empty({out_channels}, input_c.options());
  const at::Tensor mask_arg = use_mask ? mask_c : at::Tensor();
  const at::Tensor grad_mask_arg = use_mask ? grad_mask : at::Tensor();
  OXIDE_CHECK(oxide_deform_conv2d_backward(
      launch_on(input_c), out_arg(grad_input), out_arg(grad_weight), out_arg(grad_offset), out_arg(grad_mask_arg),
      out_arg(grad_bias), in_arg(grad_out_c), in_arg(input_c), in_arg(weight_c), in_arg(offset_c), in_arg(mask_arg),
      params(stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, n_weight_grps, n_offset_grps, use_mask)));
  // CPU forms `ones_like(bias) * grad.sum({0, 2, 3})`: the same values for a bias of the
  // input's dtype and shape; otherwise its promotion and broadcast.
  if (bias_c.scalar_type() != input_c.scalar_type() || bias_c.sizes() != grad_bias.sizes()) {
    grad_bias = at::mul(at::ones_like(bias_c), grad_bias);
  }
  return {grad_input, grad_weight, grad_offset, grad_mask, grad_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(torchvision, PrivateUse1, m) {
  m.impl("deform_conv2d", TORCH_FN(deform_conv2d));
  m.impl("_deform_conv2d_backward", TORCH_FN(deform_conv2d_backward));
}

}  // namespace oxide
