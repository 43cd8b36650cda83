// nll_loss and nll_loss2d on oxide, forward and backward. nll_loss (1-d) is
// structured: PyTorch's meta functions check the arguments and size the
// outputs, and the impl classes hand contiguous [n, c, s] views to
// oxide_nll_loss / oxide_nll_loss_backward. nll_loss2d is not structured: its
// CPU shape checks are restated here around the same kernels.
#include "aten/nn/contiguous.h"
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/launch.h"
#include "common/structured.h"

#include <ATen/TensorOperators.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/nll_loss_backward_meta.h>
#include <ATen/ops/nll_loss_forward_meta.h>
#include <torch/library.h>

#include <array>
#include <tuple>

namespace oxide {
namespace {

using T = const at::Tensor&;
using OptT = const std::optional<at::Tensor>&;

// Targets as the kernels take them: contiguous int64 (CPU also accepts uint8 class indices).
at::Tensor targets(const at::Tensor& target) {
  TORCH_CHECK(target.scalar_type() == at::kLong || target.scalar_type() == at::kByte,
              "nll_loss: expected target of dtype Long (or Byte), got ", target.scalar_type());
  return target.to(at::kLong).contiguous();
}

std::optional<at::Tensor> weights(const at::Tensor& input, const at::Tensor* weight) {
  if (weight == nullptr || !weight->defined()) {
    return std::nullopt;
  }
  TORCH_CHECK(weight->scalar_type() == input.scalar_type(), "expected scalar type ", input.scalar_type(), " but found ",
              weight->scalar_type());
  return weight->contiguous();
}

void nll_forward(T self, T target, const at::Tensor* weight, int64_t reduction, int64_t ignore_index, T output,
                 T total_weight) {
  const auto x = self.contiguous();
  const auto t = targets(target);
  const auto w = weights(self, weight);
  into_contiguous(output, [&](const at::Tensor& out) {
    OXIDE_CHECK(oxide_nll_loss(launch_on(x), out_arg(out), out_arg(total_weight), in_arg(x), in_arg(t), in_arg(w),
                               reduction, ignore_index));
  });
}

void nll_backward(T grad_output, T self, T target, const at::Tensor* weight, int64_t reduction, int64_t ignore_index,
                  T total_weight, T grad_input) {
  const auto t = targets(target);
  const auto w = weights(self, weight);
  const auto g = grad_output.contiguous();
  const auto tw = total_weight.contiguous();
  into_contiguous(grad_input, [&](const at::Tensor& gi) {
    gi.zero_();
    // The kernel adds into the zeroed gradient.
    OXIDE_CHECK(oxide_nll_loss_backward(launch_on(gi), inout_arg(gi), in_arg(g), in_arg(t), in_arg(w), in_arg(tw),
                                        reduction, ignore_index));
  });
}

struct NllLoss : at::meta::structured_nll_loss_forward {
  void impl(T self, T target, at::OptionalTensorRef weight, int64_t reduction, int64_t ignore_index, T output,
            T total_weight) {
    nll_forward(self, target, weight.has_value() ? &weight.getTensorRef() : nullptr, reduction, ignore_index, output,
                total_weight);
  }
};
struct NllLossBackward : at::meta::structured_nll_loss_backward {
  void impl(T grad_output, T self, T target, at::OptionalTensorRef weight, int64_t reduction, int64_t ignore_index,
            T total_weight, T grad_input) {
    nll_backward(grad_output, self, target, weight.has_value() ? &weight.getTensorRef() : nullptr, reduction,
                 ignore_index, total_weight, grad_input);
  }
};

// nll_loss2d is not structured: its shape checks, as CPU makes them.
void check_2d(T self, T target, OptT weight) {
  TORCH_CHECK(target.dim() == 3,
              "only batches of spatial targets supported (3D tensors) but got targets of dimension: ", target.dim());
  TORCH_CHECK(self.dim() == 4,
              "only batches of spatial inputs supported (4D tensors), but got input of dimension: ", self.dim());
  TORCH_CHECK(!weight.has_value() || !weight->defined() || weight->numel() == self.size(1),
              "weight tensor should be defined either for all or no classes");
  TORCH_CHECK(self.size(0) == target.size(0) && self.size(2) == target.size(1) && self.size(3) == target.size(2),
              "input and target batch or spatial sizes don't match: target ", target.sizes(), ", input ", self.sizes());
}

std::tuple<at::Tensor&, at::Tensor&> nll_loss2d_out(T self, T target, OptT weight, int64_t reduction,
                                                    int64_t ignore_index, at::Tensor& output,
                                                    at::Tensor& total_weight) {
  check_2d(self, target, weight);
  if (reduction == 0) {
    at::native::resize_output(output, target.sizes());
  } else {
    at::native::resize_output(output, {});
  }
  at::native::resize_output(total_weight, {});
  nll_forward(self, target, weight.has_value() ? &*weight : nullptr, reduction, ignore_index, output, total_weight);
  return {output, total_weight};
}
std::tuple<at::Tensor, at::Tensor> nll_loss2d(T self, T target, OptT weight, int64_t reduction, int64_t ignore_index) {
  at::Tensor output = at::empty({0}, self.options());
  at::Tensor total_weight = at::empty({0}, self.options());
  nll_loss2d_out(self, target, weight, reduction, ignore_index, output, total_weight);
  return {output, total_weight};
}
at::Tensor& nll_loss2d_backward_out(T grad_output, T self, T target, OptT weight, int64_t reduction,
                                    int64_t ignore_index, T total_weight, at::Tensor& grad_input) {
  check_2d(self, target, weight);
  at::native::resize_output(grad_input, self.sizes());
  nll_backward(grad_output, self, target, weight.has_value() ? &*weight : nullptr, reduction, ignore_index,
               total_weight, grad_input);
  return grad_input;
}
at::Tensor nll_loss2d_backward(T grad_output, T self, T target, OptT weight, int64_t reduction, int64_t ignore_index,
                               T total_weight) {
  at::Tensor grad_input = at::empty_like(self);
  return nll_loss2d_backward_out(grad_output, self, target, weight, reduction, ignore_index, total_weight, grad_input);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "nll_loss_forward", TORCH_FN((structured::functional2<NllLoss, T, T, OptT, int64_t, int64_t>)));
  OXIDE_IMPL(m, "nll_loss_forward.output", TORCH_FN((structured::out2<NllLoss, T, T, OptT, int64_t, int64_t>)));
  OXIDE_IMPL(m, "nll_loss_backward",
             TORCH_FN((structured::functional<NllLossBackward, T, T, T, OptT, int64_t, int64_t, T>)));
  OXIDE_IMPL(m, "nll_loss_backward.grad_input",
             TORCH_FN((structured::out<NllLossBackward, T, T, T, OptT, int64_t, int64_t, T>)));
  OXIDE_IMPL(m, "nll_loss2d_forward", TORCH_FN(nll_loss2d));
  OXIDE_IMPL(m, "nll_loss2d_forward.output", TORCH_FN(nll_loss2d_out));
  OXIDE_IMPL(m, "nll_loss2d_backward", TORCH_FN(nll_loss2d_backward));
  OXIDE_IMPL(m, "nll_loss2d_backward.grad_input", TORCH_FN(nll_loss2d_backward_out));
}

}  // namespace oxide
