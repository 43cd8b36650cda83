// grid_sampler_2d (F.grid_sample on 4-d inputs) and its backward on oxide.
// PyTorch's checks (ATen/native/GridSamplerUtils.h), then the Rust loops
// (oxide_kernels::ops::nn::grid_sample) on contiguous operands; the coordinate rules
// follow ATen/native/GridSampler.h (restated in the Rust module).
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/launch.h"

#include <ATen/native/GridSamplerUtils.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

namespace oxide {
namespace {

using T = const at::Tensor&;

void check_dtypes(const at::Tensor& input, const at::Tensor& grid, const char* name) {
  TORCH_CHECK(input.scalar_type() == grid.scalar_type(), "expected scalar type ", input.scalar_type(), " but found ",
              grid.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(input.scalar_type()) && !at::isFloat8Type(input.scalar_type()), "\"",
                              name, "\" not implemented for '", input.scalar_type(), "'");
}

at::Tensor grid_sampler_2d(T input_, T grid_, int64_t interpolation, int64_t padding, bool align_corners) {
  at::native::check_grid_sampler_common(input_, grid_);
  at::native::check_grid_sampler_2d(input_, grid_);
  check_dtypes(input_, grid_, "grid_sampler_2d_cpu");
  const auto input = input_.contiguous();
  const auto grid = grid_.contiguous();
  auto output = at::empty({input.size(0), input.size(1), grid.size(1), grid.size(2)}, input.options());
  if (output.numel() == 0) {
    return output;
  }
  OXIDE_CHECK(oxide_grid_sample_2d(launch_on(input), out_arg(output), in_arg(input), in_arg(grid), interpolation,
                                   padding, align_corners));
  return output;
}

std::tuple<at::Tensor, at::Tensor> grid_sampler_2d_backward(T grad_output_, T input_, T grid_, int64_t interpolation,
                                                            int64_t padding, bool align_corners,
                                                            std::array<bool, 2> output_mask) {
  at::native::check_grid_sampler_2d_backward(input_, grid_, grad_output_);
  check_dtypes(input_, grid_, "grid_sampler_2d_backward_cpu");
  const auto input = input_.contiguous();
  const auto grid = grid_.contiguous();
  const auto grad_output = grad_output_.to(input.scalar_type()).contiguous();
  // CPU always computes the grid gradient (only output_mask[0] is honoured).
  at::Tensor grad_input = output_mask[0] ? at::empty(input.sizes(), input.options()) : at::Tensor();
  auto grad_grid = at::empty(grid.sizes(), grid.options());
  if (grad_input.defined() && grad_output.numel() == 0) {
    grad_input.zero_();
  }
  if (grad_grid.numel() > 0) {
    OXIDE_CHECK(oxide_grid_sample_2d_backward(launch_on(input), out_arg(grad_input), out_arg(grad_grid),
                                              in_arg(grad_output), in_arg(input), in_arg(grid), interpolation, padding,
                                              align_corners));
  }
  return {grad_input, grad_grid};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "grid_sampler_2d", TORCH_FN(grid_sampler_2d));
  OXIDE_IMPL(m, "grid_sampler_2d_backward", TORCH_FN(grid_sampler_2d_backward));
}

}  // namespace oxide
