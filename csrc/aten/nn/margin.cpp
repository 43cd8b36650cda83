// multilabel_margin_loss on oxide, forward and backward. CPU's argument checks
// (at::native::multilabel_margin_loss_shape_check from ATen/native/LossMulti.h, and
// the checks ATen/native/LossMultiLabelMargin.cpp makes around its loops, with its
// messages), output allocation, then the Rust loops (oxide_kernels::ops::nn::margin)
// on contiguous operands. The kernels check the target and is_target values.
#include "aten/nn/contiguous.h"
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/launch.h"

#include <ATen/TensorUtils.h>
#include <ATen/core/Reduction.h>
#include <ATen/native/LossMulti.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <tuple>

namespace oxide {
namespace {

using T = const at::Tensor&;

// CPU reads these operands through data_ptr<scalar_t>, which raises this message.
void check_scalar_type(const at::Tensor& t, at::ScalarType expected) {
  TORCH_CHECK(t.scalar_type() == expected, "expected scalar type ", expected, " but found ", t.scalar_type());
}

// The sample count and class count CPU derives, after its shape checks.
std::tuple<int64_t, int64_t> shape_check(T self, T target) {
  int64_t nframe = 0;
  int64_t dim = 0;
  const int64_t ndims = self.dim();
  at::native::multilabel_margin_loss_shape_check(nframe, dim, ndims, self, target);
  return {nframe, dim};
}

std::tuple<at::Tensor&, at::Tensor&> forward_out(T self, T target, int64_t reduction, at::Tensor& output,
                                                 at::Tensor& is_target) {
  const auto [nframe, dim] = shape_check(self, target);
  // As on CPU, a 0-d or 1-d target gives a 0-d output even without reduction.
  if (reduction != at::Reduction::None || target.dim() <= 1) {
    output.resize_({});
  } else {
    output.resize_({nframe});
  }
  is_target.resize_as_(target);
  TORCH_CHECK(is_target.is_contiguous(), "is_target must be contiguous");
  check_scalar_type(target, at::kLong);
  check_scalar_type(output, self.scalar_type());
  check_scalar_type(is_target, self.scalar_type());
  const auto x = self.contiguous();
  const auto t = target.contiguous();
  into_contiguous(output, [&](const at::Tensor& out) {
    OXIDE_CHECK(
        oxide_multilabel_margin_loss(launch_on(x), out_arg(out), out_arg(is_target), in_arg(x), in_arg(t), reduction));
  });
  return {output, is_target};
}

std::tuple<at::Tensor, at::Tensor> forward(T self, T target, int64_t reduction) {
  at::Tensor output = at::empty({0}, self.options());
  at::Tensor is_target = at::empty({0}, self.options());
  forward_out(self, target, reduction, output, is_target);
  return {output, is_target};
}

at::Tensor& backward_out(T grad_output, T self, T target, int64_t reduction, T is_target, at::Tensor& grad_input) {
  const auto [nframe, dim] = shape_check(self, target);
  at::checkSameSize("multilabel_margin_loss_backward_cpu_template", at::TensorArg(target, "target", 3),
                    at::TensorArg(is_target, "is_target", 5));
  grad_input.resize_as_(self);
  if (grad_input.numel() == 0) {
    return grad_input;
  }
  TORCH_CHECK(grad_input.is_contiguous(), "grad_input must be contiguous");
  check_scalar_type(target, at::kLong);
  check_scalar_type(is_target, self.scalar_type());
  check_scalar_type(grad_output, self.scalar_type());
  check_scalar_type(grad_input, self.scalar_type());
  // CPU scales every sample by grad_output's one value when reducing or when it is
  // 0-d, else by the sample's own value: the kernel takes nframe values without
  // reduction, one otherwise.
  const bool per_sample = reduction == at::Reduction::None && grad_output.dim() != 0;
  if (per_sample) {
    at::check_dim_size(grad_output, 1, 0, nframe);
  }
  const at::Tensor g = per_sample ? grad_output.contiguous()
                                  : grad_output.reshape({-1})
                                        .narrow(0, 0, 1)
                                        .expand({reduction == at::Reduction::None ? nframe : 1})
                                        .contiguous();
  const auto x = self.contiguous();
  const auto t = target.contiguous();
  const auto m = is_target.contiguous();
  OXIDE_CHECK(oxide_multilabel_margin_loss_backward(launch_on(grad_input), out_arg(grad_input), in_arg(g), in_arg(x),
                                                    in_arg(t), in_arg(m), reduction));
  return grad_input;
}

at::Tensor backward(T grad_output, T self, T target, int64_t reduction, T is_target) {
  at::Tensor grad_input = at::empty({0}, self.options());
  return backward_out(grad_output, self, target, reduction, is_target, grad_input);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "multilabel_margin_loss_forward", TORCH_FN(forward));
  OXIDE_IMPL(m, "multilabel_margin_loss_forward.output", TORCH_FN(forward_out));
  OXIDE_IMPL(m, "multilabel_margin_loss_backward", TORCH_FN(backward));
  OXIDE_IMPL(m, "multilabel_margin_loss_backward.grad_input", TORCH_FN(backward_out));
}

}  // namespace oxide
