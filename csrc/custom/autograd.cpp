// Autograd kernels, the seed tutorial's pattern: forward/backward pairs as
// torch::autograd::Function registered under AutogradPrivateUse1.
// - aten::selu: PyTorch decomposes it (CompositeImplicitAutograd) into elu;
//   on oxide it is one native kernel forward and one backward instead.
// - oxide::swish: a custom operator with a PrivateUse1 kernel, an
//   AutogradPrivateUse1 kernel and a Meta kernel (so FakeTensor and
//   torch.compile can trace it). Both backward passes are first-order only.
#include "common/device_check.h"
#include "common/launch.h"
#include "common/oxide.h"

#include <ATen/TensorOperators.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/selu.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/where.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

namespace oxide {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor activation_forward(int32_t kind, const at::Tensor& x) {
  const c10::DeviceGuard guard(x.device());
  at::Tensor out = at::empty_like(x);
  OXIDE_CHECK(oxide_activation_forward(launch_on(x), kind, out_arg(out), in_arg(x)));
  return out;
}

at::Tensor activation_backward(int32_t kind, const at::Tensor& grad, const at::Tensor& x) {
  TORCH_CHECK(grad.device() == x.device() && grad.scalar_type() == x.scalar_type(),
              "activation backward: grad_output must match input in device and dtype, got ", grad.device(), " ",
              grad.scalar_type(), " and ", x.device(), " ", x.scalar_type());
  const c10::DeviceGuard guard(x.device());
  const at::Tensor dy = grad.expand(x.sizes());
  at::Tensor dx = at::empty_like(x);
  OXIDE_CHECK(oxide_activation_backward(launch_on(x), kind, out_arg(dx), in_arg(dy), in_arg(x)));
  return dx;
}

at::Tensor selu(const at::Tensor& self) { return activation_forward(OXIDE_ACT_SELU, self); }

struct SeluFunction : torch::autograd::Function<SeluFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& self) {
    ctx->save_for_backward({self});
    const at::AutoDispatchBelowADInplaceOrView guard;
    return at::selu(self);  // reaches the PrivateUse1 kernel below
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    if (at::GradMode::is_enabled()) {
      // create_graph=True: build the backward from differentiable ATen ops so that
      // higher-order gradients are right (the fused kernel has no derivative).
      const double scale = 1.0507009873554804934193349852946;
      const double alpha = 1.6732632423543772848170429916717;
      return {grads[0] * at::where(x > 0, at::full_like(x, scale), at::exp(x) * (scale * alpha))};
    }
    return {activation_backward(OXIDE_ACT_SELU, grads[0], x)};
  }
};

at::Tensor selu_autograd(const at::Tensor& self) { return SeluFunction::apply(self); }

at::Tensor swish(const at::Tensor& self) { return activation_forward(OXIDE_ACT_SWISH, self); }

at::Tensor swish_backward(const at::Tensor& grad, const at::Tensor& self) {
  return activation_backward(OXIDE_ACT_SWISH, grad, self);
}

at::Tensor swish_meta(const at::Tensor& self) {
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), "oxide::swish expects a floating tensor, got ",
              self.scalar_type());
  return at::empty_like(self);
}

at::Tensor swish_backward_meta(const at::Tensor& grad, const at::Tensor& self) { return at::empty_like(self); }

// Forward and backward go through the dispatcher, so the same autograd kernel
// serves real tensors (PrivateUse1 kernels) and fake ones (Meta kernels).
struct SwishFunction : torch::autograd::Function<SwishFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& self) {
    static const auto op =
        c10::Dispatcher::singleton().findSchemaOrThrow("oxide::swish", "").typed<at::Tensor(const at::Tensor&)>();
    ctx->save_for_backward({self});
    const at::AutoDispatchBelowADInplaceOrView guard;
    return op.call(self);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("oxide::swish_backward", "")
                               .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    if (at::GradMode::is_enabled()) {
      // create_graph=True: differentiable formula d/dx[x*s(x)] = s * (1 + x * (1 - s)).
      const at::Tensor s = at::sigmoid(x);
      return {grads[0] * s * (1 + x * (1 - s))};
    }
    return {op.call(grads[0], x)};
  }
};

at::Tensor swish_autograd(const at::Tensor& self) { return SwishFunction::apply(self); }

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { OXIDE_IMPL(m, "selu", TORCH_FN(selu)); }

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) { OXIDE_IMPL(m, "selu", TORCH_FN(selu_autograd)); }

TORCH_LIBRARY_IMPL(oxide, PrivateUse1, m) {
  OXIDE_IMPL(m, "swish", TORCH_FN(swish));
  OXIDE_IMPL(m, "swish_backward", TORCH_FN(swish_backward));
}

TORCH_LIBRARY_IMPL(oxide, AutogradPrivateUse1, m) { OXIDE_IMPL(m, "swish", TORCH_FN(swish_autograd)); }

TORCH_LIBRARY_IMPL(oxide, Meta, m) {
  OXIDE_IMPL(m, "swish", TORCH_FN(swish_meta));
  OXIDE_IMPL(m, "swish_backward", TORCH_FN(swish_backward_meta));
}

}  // namespace oxide
