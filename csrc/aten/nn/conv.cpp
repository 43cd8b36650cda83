// Native convolution: conv1d/2d/3d and conv_transpose1d/2d/3d, forward and
// backward, in Rust (oxide_kernels::ops::nn::conv: im2col/col2im + GEMM).
//
// Registration point: convolution_overrideable and
// convolution_backward_overrideable, not convolution / convolution_backward.
// Every entry point (F.conv*, nn.Conv*, conv_transpose*, padding="same"/"valid"
// through _convolution_mode, unbatched inputs through conv*d's unsqueeze)
// reaches aten::convolution, whose CompositeExplicitAutograd kernel runs
// _convolution: it checks shapes, dtypes and parameters exactly as on CPU
// (check_shape_forward, same exception types and messages), turns 1-d into
// 2-d, sends zero-batch/zero-channel inputs to its own empty path, and then,
// for a device that is neither CPU, CUDA nor another in-tree backend, calls
// convolution_overrideable: PyTorch's documented hook for out-of-tree
// backends. The backward is the same: aten::convolution_backward's generic
// kernel checks (check_shape_backward), handles empty inputs and calls
// convolution_backward_overrideable with the output_mask. Autograd stays on
// aten::convolution's derivative (convolution_backward, and
// _convolution_double_backward built from convolutions), so everything a user
// can call is differentiable and native. Registering aten::convolution itself
// would skip all of those checks and cases and re-derive them here.
//
// Dtypes: float32/64, float16/bfloat16 (computed in float32), integers
// (wrapping, a plain GEMM loop; CPU convolves them too).
#include "common/device_check.h"
#include "common/launch.h"
#include "common/oxide.h"

#include <algorithm>
#include <ATen/Parallel.h>
#include <ATen/native/ConvUtils.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <array>
#include <tuple>

namespace oxide {
namespace {

// The ABI description of one convolution; `output` is the output or its gradient.
OxideConv describe(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& output, at::IntArrayRef stride,
                   at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed, int64_t groups) {
  const int64_t nd = input.dim() - 2;
  // Reached through _convolution these hold by construction; a direct call of the overrideable op is checked here.
  TORCH_CHECK(nd >= 1 && nd <= 3 && weight.dim() == input.dim() && output.dim() == input.dim(),
              "convolution on oxide expects input, weight and output of 3 to 5 dimensions alike, got ", input.sizes(),
              ", ", weight.sizes(), " and ", output.sizes());
  TORCH_CHECK(static_cast<int64_t>(stride.size()) == nd && static_cast<int64_t>(padding.size()) == nd &&
                  static_cast<int64_t>(dilation.size()) == nd,
              "convolution expects stride, padding and dilation of ", nd, " values, got ", stride, ", ", padding,
              " and ", dilation);
  // CPU's message (aten::convolution checks it only on some of its paths).
  TORCH_CHECK(std::all_of(dilation.begin(), dilation.end(), [](int64_t d) { return d > 0; }),
              "dilation should be greater than zero, but got ", dilation);
  TORCH_CHECK(weight.scalar_type() == input.scalar_type() && output.scalar_type() == input.scalar_type(),
              "convolution expects input, weight and output of one dtype, got ", input.scalar_type(), ", ",
              weight.scalar_type(), " and ", output.scalar_type());
  OxideConv c{};
  c.ndim = static_cast<size_t>(nd);
  c.batch = input.size(0);
  c.in_channels = input.size(1);
  c.out_channels = output.size(1);
  c.groups = groups;
  c.transposed = transposed;
  for (int64_t d = 0; d < nd; ++d) {
    c.input[d] = input.size(d + 2);
    c.output[d] = output.size(d + 2);
    c.kernel[d] = weight.size(d + 2);
    c.stride[d] = stride[d];
    c.padding[d] = padding[d];
    c.dilation[d] = dilation[d];
  }
  return c;
}

// The kernels read contiguous memory without a negative bit.
at::Tensor dense(const at::Tensor& t) { return t.resolve_neg().contiguous(); }

at::Tensor convolution(const at::Tensor& input_in, const at::Tensor& weight_in,
                       const std::optional<at::Tensor>& bias_in, at::IntArrayRef stride, at::IntArrayRef padding,
                       at::IntArrayRef dilation, bool transposed, at::IntArrayRef output_padding, int64_t groups) {
  const auto input = dense(input_in);
  const auto weight = dense(weight_in);
  const auto bias = bias_in.has_value() && bias_in->defined() ? dense(*bias_in) : at::Tensor();
  TORCH_CHECK(input.dim() == weight.dim() && input.dim() >= 3, "convolution on oxide expects input and weight of ",
              "equal dimension (3 to 5), got ", input.sizes(), " and ", weight.sizes());
  // A transposed convolution's output is the input its adjoint convolution would take.
  const auto sizes = transposed
                         ? at::native::conv_input_size(input.sizes(), weight.sizes(), padding, output_padding, stride,
                                                       dilation, groups)
                         : at::native::conv_output_size(input.sizes(), weight.sizes(), padding, stride, dilation);
  auto output = at::empty(sizes, input.options());
  const auto c = describe(input, weight, output, stride, padding, dilation, transposed, groups);
  if (transposed) {
    // Checked by CPU's and CUDA's transposed kernels rather than _convolution: larger output
    // padding would add output positions no input position reaches.
    for (size_t d = 0; d < output_padding.size(); ++d) {
      TORCH_CHECK(output_padding[d] < stride[d] || output_padding[d] < dilation[d],
                  "output padding must be smaller than either stride or dilation, got output_padding ", output_padding,
                  ", stride ", stride, " and dilation ", dilation);
    }
  }
  TORCH_CHECK(!bias.defined() ||
                  (bias.dim() == 1 && bias.size(0) == c.out_channels && bias.scalar_type() == input.scalar_type()),
              "convolution expects a bias of shape [", c.out_channels, "] and dtype ", input.scalar_type(), ", got ",
              bias.sizes(), " and ", bias.scalar_type());
  OXIDE_CHECK(oxide_convolution(launch_on(output), out_arg(output), in_arg(input), in_arg(weight), in_arg(bias), &c));
  return output;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(const at::Tensor& grad_output_in,
                                                                    const at::Tensor& input_in,
                                                                    const at::Tensor& weight_in, at::IntArrayRef stride,
                                                                    at::IntArrayRef padding, at::IntArrayRef dilation,
                                                                    bool transposed, at::IntArrayRef /*output_padding*/,
                                                                    int64_t groups, std::array<bool, 3> output_mask) {
  const auto grad_output = dense(grad_output_in);
  // The input is read only for the weight gradient and the weight only for the input gradient.
  const auto input = output_mask[1] ? dense(input_in) : input_in;
  const auto weight = output_mask[0] ? dense(weight_in) : weight_in;
  const auto c = describe(input, weight, grad_output, stride, padding, dilation, transposed, groups);
  at::Tensor grad_input, grad_weight, grad_bias;
  if (output_mask[0]) {
    grad_input = at::empty(input.sizes(), grad_output.options());
  }
  if (output_mask[1]) {
    grad_weight = at::empty(weight.sizes(), grad_output.options());
  }
  if (output_mask[2]) {
    grad_bias = at::empty({c.out_channels}, grad_output.options());
  }
  // Unread operands are absent: they need not be dense.
  OXIDE_CHECK(oxide_convolution_backward(
      launch_on(grad_output), out_arg(grad_input), out_arg(grad_weight), out_arg(grad_bias), in_arg(grad_output),
      in_arg(output_mask[1] ? input : at::Tensor()), in_arg(output_mask[0] ? weight : at::Tensor()), &c));
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "convolution_overrideable", TORCH_FN(convolution));
  OXIDE_IMPL(m, "convolution_backward_overrideable", TORCH_FN(convolution_backward));
}

}  // namespace oxide
