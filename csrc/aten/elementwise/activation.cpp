// Activation functions and pointwise losses, forward and backward.
//
// Most are PyTorch structured kernels whose impl calls a DispatchStub with the
// iterator's device type: registering the stub (REGISTER_PRIVATEUSE1_DISPATCH)
// and the structured wrappers (common/structured.h) is all they need, and the meta
// functions keep PyTorch's shape, dtype and argument checks. GELU's CPU impl
// names kCPU explicitly, so it gets an impl class of its own here. Every loop
// is a pointwise op of oxide_kernels::ops::elementwise::pointwise, named like the stub.
#include "common/device_check.h"
#include "common/kernels.h"

#include <torch/library.h>
#include "common/structured.h"

#include <ATen/TensorOperators.h>
#include <ATen/core/Reduction.h>
#include <ATen/native/Activation.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/Gelu.h>
#include <ATen/native/PointwiseOps.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/elu_backward_native.h>
#include <ATen/ops/elu_native.h>
#include <ATen/ops/gelu_backward_meta.h>
#include <ATen/ops/gelu_meta.h>
#include <ATen/ops/glu_native.h>
#include <ATen/ops/hardshrink_backward_native.h>
#include <ATen/ops/hardshrink_native.h>
#include <ATen/ops/hardsigmoid_backward_native.h>
#include <ATen/ops/hardsigmoid_native.h>
#include <ATen/ops/hardswish_backward_native.h>
#include <ATen/ops/hardswish_native.h>
#include <ATen/ops/hardtanh_backward_native.h>
#include <ATen/ops/hardtanh_native.h>
#include <ATen/ops/huber_loss_backward_native.h>
#include <ATen/ops/huber_loss_native.h>
#include <ATen/ops/leaky_relu_backward_native.h>
#include <ATen/ops/leaky_relu_native.h>
#include <ATen/ops/mish_backward_native.h>
#include <ATen/ops/mish_native.h>
#include <ATen/ops/mse_loss_backward_native.h>
#include <ATen/ops/mse_loss_native.h>
#include <ATen/ops/_prelu_kernel_native.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/silu_backward_native.h>
#include <ATen/ops/silu_native.h>
#include <ATen/ops/smooth_l1_loss_backward_native.h>
#include <ATen/ops/smooth_l1_loss_native.h>
#include <ATen/ops/softplus_backward_native.h>
#include <ATen/ops/softplus_native.h>
#include <ATen/ops/softshrink_backward_native.h>
#include <ATen/ops/softshrink_native.h>
#include <ATen/ops/threshold_backward_native.h>
#include <ATen/ops/threshold_native.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>

namespace oxide {
namespace {

using T = const at::Tensor&;
using S = const c10::Scalar&;

template <class... A>
void set_all(ScalarArgs& a, const A&... s) {
  size_t k = 0;
  (a.set(k++, s), ...);
}

// One stub: op name and its scalar arguments in order.
template <class Iter, class... A>
void run(Iter& iter, OxidePointwiseOp id, const A&... s) {
  ScalarArgs a;
  set_all(a, s...);
  pointwise(iter, id, a);
}

// CPU compares against these bounds converted to the element type, not the opmath type:
// for float16/bfloat16 the bound is first rounded to that type.
c10::Scalar storage_rounded(const at::TensorIteratorBase& iter, const c10::Scalar& s) {
  switch (iter.dtype(0)) {
    case at::kHalf:
      return c10::Scalar(static_cast<double>(s.to<c10::Half>()));
    case at::kBFloat16:
      return c10::Scalar(static_cast<double>(s.to<c10::BFloat16>()));
    default:
      return s;
  }
}

void threshold_kernel(at::TensorIteratorBase& iter, S threshold, S value) {
  run(iter, OXIDE_POINTWISE_threshold, storage_rounded(iter, threshold), value);
}
void gelu_kernel(at::TensorIteratorBase& iter, at::native::GeluType type) {
  run(iter, OXIDE_POINTWISE_gelu, type == at::native::GeluType::Tanh ? 1.0 : 0.0);
}
void gelu_backward_kernel(at::TensorIteratorBase& iter, at::native::GeluType type) {
  run(iter, OXIDE_POINTWISE_gelu_backward, type == at::native::GeluType::Tanh ? 1.0 : 0.0);
}
void elu_kernel(at::TensorIteratorBase& iter, S alpha, S scale, S input_scale) {
  run(iter, OXIDE_POINTWISE_elu, alpha, scale, input_scale);
}
void elu_backward_kernel(at::TensorIteratorBase& iter, S alpha, S scale, S input_scale, bool is_result) {
  run(iter, OXIDE_POINTWISE_elu_backward, alpha, scale, input_scale, is_result ? 1.0 : 0.0);
}
void softplus_kernel(at::TensorIteratorBase& iter, S beta, S threshold) {
  run(iter, OXIDE_POINTWISE_softplus, beta, threshold);
}
void softplus_backward_kernel(at::TensorIteratorBase& iter, S beta, S threshold) {
  run(iter, OXIDE_POINTWISE_softplus_backward, beta, threshold);
}
void leaky_relu_kernel(at::TensorIteratorBase& iter, S negval) { run(iter, OXIDE_POINTWISE_leaky_relu, negval); }
void leaky_relu_backward_kernel(at::TensorIteratorBase& iter, S negval) {
  run(iter, OXIDE_POINTWISE_leaky_relu_backward, negval);
}
void hardtanh_backward_kernel(at::TensorIterator& iter, S min, S max) {
  run(iter, OXIDE_POINTWISE_hardtanh_backward, storage_rounded(iter, min), storage_rounded(iter, max));
}
void hardshrink_kernel(at::TensorIteratorBase& iter, S lambd) {
  run(iter, OXIDE_POINTWISE_hardshrink, storage_rounded(iter, lambd));
}
void softshrink_kernel(at::TensorIteratorBase& iter, S lambd) {
  run(iter, OXIDE_POINTWISE_softshrink, storage_rounded(iter, lambd));
}
void shrink_backward_kernel(at::TensorIteratorBase& iter, S lambd) {
  run(iter, OXIDE_POINTWISE_shrink_backward, storage_rounded(iter, lambd));
}
void smooth_l1_kernel(at::TensorIteratorBase& iter, double beta) { run(iter, OXIDE_POINTWISE_smooth_l1, beta); }
void huber_kernel(at::TensorIterator& iter, double delta) { run(iter, OXIDE_POINTWISE_huber, delta); }
void mse_backward_kernel(at::TensorIterator& iter, S norm) { run(iter, OXIDE_POINTWISE_mse_backward, norm); }
void smooth_l1_backward_kernel(at::TensorIterator& iter, S norm, double beta) {
  run(iter, OXIDE_POINTWISE_smooth_l1_backward, norm, beta);
}
void huber_backward_kernel(at::TensorIterator& iter, S norm, double delta) {
  run(iter, OXIDE_POINTWISE_huber_backward, norm, delta);
}

// Stubs without scalar arguments: `<op>_kernel` runs the Rust op `op`.
#define OXIDE_PLAIN(op, Iter) \
  void op##_kernel(at::Iter& iter) { pointwise(iter, OXIDE_POINTWISE_##op); }
OXIDE_PLAIN(silu, TensorIteratorBase)
OXIDE_PLAIN(silu_backward, TensorIteratorBase)
OXIDE_PLAIN(mish, TensorIteratorBase)
OXIDE_PLAIN(mish_backward, TensorIterator)
OXIDE_PLAIN(hardsigmoid, TensorIteratorBase)
OXIDE_PLAIN(hardsigmoid_backward, TensorIteratorBase)
OXIDE_PLAIN(hardswish, TensorIterator)
OXIDE_PLAIN(hardswish_backward, TensorIterator)
OXIDE_PLAIN(glu, TensorIteratorBase)
OXIDE_PLAIN(prelu, TensorIterator)
OXIDE_PLAIN(mse, TensorIteratorBase)
#undef OXIDE_PLAIN

// GELU: PyTorch's CPU impl calls the kCPU stub by name, so the impl is ours.
struct Gelu : at::meta::structured_gelu {
  void impl(T, c10::string_view approximate, T) { gelu_kernel(*this, at::native::get_gelutype_enum(approximate)); }
};
struct GeluBackward : at::meta::structured_gelu_backward {
  void impl(T, T, c10::string_view approximate, T) {
    gelu_backward_kernel(*this, at::native::get_gelutype_enum(approximate));
  }
};

// log_sigmoid: CPU's forward fills a buffer for its backward; ours needs none
// (the backward recomputes exp(-|x|)), so the buffer is returned empty, as on CUDA.
std::tuple<at::Tensor&, at::Tensor&> log_sigmoid_forward_out(T self, at::Tensor& out, at::Tensor& buffer) {
  auto iter = at::TensorIteratorConfig().add_output(out).add_const_input(self).build();
  pointwise(iter, OXIDE_POINTWISE_log_sigmoid);
  return {out, buffer};
}
std::tuple<at::Tensor, at::Tensor> log_sigmoid_forward(T self) {
  at::Tensor out = at::empty_like(self);
  at::Tensor buffer = at::empty({0}, self.options());
  log_sigmoid_forward_out(self, out, buffer);
  return {out, buffer};
}
at::Tensor& log_sigmoid_backward_out(T grad, T self, T /*buffer*/, at::Tensor& grad_input) {
  auto iter = at::TensorIteratorConfig().add_output(grad_input).add_const_input(self).add_const_input(grad).build();
  pointwise(iter, OXIDE_POINTWISE_log_sigmoid_backward);
  return grad_input;
}
at::Tensor log_sigmoid_backward(T grad, T self, T buffer) {
  at::Tensor grad_input = at::empty_like(grad);
  return log_sigmoid_backward_out(grad, self, buffer, grad_input);
}

// glu backward from native ops: d/da = g sigmoid(b), d/db = g a sigmoid(b) (1 - sigmoid(b)).
at::Tensor& glu_backward_out(T grad, T self, int64_t dim, at::Tensor& grad_input) {
  TORCH_CHECK(self.dim() > 0, "glu does not support 0-dimensional tensors");
  const int64_t d = c10::maybe_wrap_dim(dim, self.dim());
  const int64_t n = self.size(d) / 2;
  const auto a = self.narrow(d, 0, n);
  const auto sb = at::sigmoid(self.narrow(d, n, n));
  const auto ga = grad * sb;
  at::cat_out(grad_input, {ga, ga * a * (1 - sb)}, d);
  return grad_input;
}
at::Tensor glu_backward(T grad, T self, int64_t dim) {
  at::Tensor grad_input = at::empty({0}, self.options());
  return glu_backward_out(grad, self, dim, grad_input);
}

// PReLU backward from native ops; grad_weight keeps the broadcast shape (autograd sums it down).
std::tuple<at::Tensor, at::Tensor> prelu_backward(T grad, T self, T weight) {
  const auto positive = self > 0;
  return {at::where(positive, grad, weight * grad), at::where(positive, c10::Scalar(0), self * grad)};
}

// binary_cross_entropy: CPU's loops are inline (no stub); the same semantics on the Rust ops.
at::Tensor apply_reduction(const at::Tensor& loss, int64_t reduction) {
  if (reduction == at::Reduction::Mean) {
    return loss.mean();
  }
  if (reduction == at::Reduction::Sum) {
    return loss.sum();
  }
  return loss;
}
at::Tensor& bce_out(T input, T target, const std::optional<at::Tensor>& weight, int64_t reduction, at::Tensor& loss) {
  at::Tensor elementwise = reduction == at::Reduction::None ? loss : at::empty({0}, input.options());
  auto iter = at::TensorIteratorConfig().add_output(elementwise).add_const_input(input).add_const_input(target).build();
  pointwise(iter, OXIDE_POINTWISE_binary_cross_entropy);
  if (weight.has_value() && weight->defined()) {
    elementwise.mul_(*weight);
  }
  if (reduction != at::Reduction::None) {
    const auto reduced = apply_reduction(elementwise, reduction);
    loss.resize_as_(reduced).copy_(reduced);
  }
  return loss;
}
at::Tensor bce(T input, T target, const std::optional<at::Tensor>& weight, int64_t reduction) {
  at::Tensor loss = at::empty({0}, input.options());
  return bce_out(input, target, weight, reduction, loss);
}
at::Tensor& bce_backward_out(T grad, T input, T target, const std::optional<at::Tensor>& weight, int64_t reduction,
                             at::Tensor& grad_input) {
  auto iter = at::TensorIteratorConfig()
                  .add_output(grad_input)
                  .add_owned_const_input(grad.expand_as(input))
                  .add_const_input(input)
                  .add_const_input(target)
                  .build();
  pointwise(iter, OXIDE_POINTWISE_binary_cross_entropy_backward);
  if (weight.has_value() && weight->defined()) {
    grad_input.mul_(*weight);
  }
  if (reduction == at::Reduction::Mean) {
    grad_input.div_(input.numel());
  }
  return grad_input;
}
at::Tensor bce_backward(T grad, T input, T target, const std::optional<at::Tensor>& weight, int64_t reduction) {
  at::Tensor grad_input = at::empty_like(input);
  return bce_backward_out(grad, input, target, weight, reduction, grad_input);
}

}  // namespace
}  // namespace oxide

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(threshold_stub, &::oxide::threshold_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(GeluKernel, &::oxide::gelu_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(GeluBackwardKernel, &::oxide::gelu_backward_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(elu_stub, &::oxide::elu_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(elu_backward_stub, &::oxide::elu_backward_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(softplus_stub, &::oxide::softplus_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(softplus_backward_stub, &::oxide::softplus_backward_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(leaky_relu_stub, &::oxide::leaky_relu_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(leaky_relu_backward_stub, &::oxide::leaky_relu_backward_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(hardtanh_backward_stub, &::oxide::hardtanh_backward_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(hardshrink_stub, &::oxide::hardshrink_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(softshrink_stub, &::oxide::softshrink_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(shrink_backward_stub, &::oxide::shrink_backward_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(silu_stub, &::oxide::silu_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(silu_backward_stub, &::oxide::silu_backward_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(mish_stub, &::oxide::mish_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(mish_backward_stub, &::oxide::mish_backward_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(hardsigmoid_stub, &::oxide::hardsigmoid_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(hardsigmoid_backward_stub, &::oxide::hardsigmoid_backward_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(hardswish_stub, &::oxide::hardswish_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(hardswish_backward_stub, &::oxide::hardswish_backward_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(glu_stub, &::oxide::glu_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(prelu_stub, &::oxide::prelu_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(mse_stub, &::oxide::mse_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(smooth_l1_stub, &::oxide::smooth_l1_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(huber_stub, &::oxide::huber_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(mse_backward_stub, &::oxide::mse_backward_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(smooth_l1_backward_stub, &::oxide::smooth_l1_backward_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(huber_backward_stub, &::oxide::huber_backward_kernel)
}  // namespace at::native

namespace oxide {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace at::native;
  OXIDE_STRUCTURED(m, structured_threshold_out, "threshold", "threshold_", "threshold.out", S, S);
  OXIDE_STRUCTURED(m, structured_threshold_backward_out, "threshold_backward", "", "threshold_backward.grad_input", T,
                   S);
  OXIDE_STRUCTURED(m, Gelu, "gelu", "gelu_", "gelu.out", c10::string_view);
  OXIDE_STRUCTURED(m, GeluBackward, "gelu_backward", "", "gelu_backward.grad_input", T, c10::string_view);
  OXIDE_STRUCTURED(m, structured_silu_out, "silu", "silu_", "silu.out");
  OXIDE_STRUCTURED(m, structured_silu_backward_out, "silu_backward", "", "silu_backward.grad_input", T);
  OXIDE_STRUCTURED(m, structured_mish_out, "mish", "mish_", "mish.out");
  OXIDE_IMPL(m, "mish_backward", TORCH_FN(at::native::mish_backward));
  OXIDE_STRUCTURED(m, structured_softplus_out, "softplus", "", "softplus.out", S, S);
  OXIDE_STRUCTURED(m, structured_softplus_backward_out, "softplus_backward", "", "softplus_backward.grad_input", T, S,
                   S);
  OXIDE_STRUCTURED(m, structured_elu_out, "elu", "elu_", "elu.out", S, S, S);
  OXIDE_STRUCTURED(m, structured_elu_backward_out, "elu_backward", "", "elu_backward.grad_input", S, S, S, bool, T);
  OXIDE_STRUCTURED(m, structured_leaky_relu_out, "leaky_relu", "leaky_relu_", "leaky_relu.out", S);
  OXIDE_STRUCTURED(m, structured_leaky_relu_backward_out, "leaky_relu_backward", "", "leaky_relu_backward.grad_input",
                   T, S, bool);
  OXIDE_STRUCTURED(m, structured_hardsigmoid_out, "hardsigmoid", "hardsigmoid_", "hardsigmoid.out");
  OXIDE_STRUCTURED(m, structured_hardsigmoid_backward_out, "hardsigmoid_backward", "",
                   "hardsigmoid_backward.grad_input", T);
  OXIDE_IMPL(m, "hardswish", TORCH_FN(at::native::hardswish));
  OXIDE_IMPL(m, "hardswish_", TORCH_FN(at::native::hardswish_));
  OXIDE_IMPL(m, "hardswish.out", TORCH_FN(at::native::hardswish_out));
  OXIDE_IMPL(m, "hardswish_backward", TORCH_FN(at::native::hardswish_backward));
  OXIDE_IMPL(m, "hardswish_backward.out", TORCH_FN(at::native::hardswish_backward_out));
  // hardtanh is clamp; its backward runs the stub.
  OXIDE_IMPL(m, "hardtanh", TORCH_FN(at::native::hardtanh));
  OXIDE_IMPL(m, "hardtanh_", TORCH_FN(at::native::hardtanh_));
  OXIDE_IMPL(m, "hardtanh.out", TORCH_FN(at::native::hardtanh_out));
  OXIDE_IMPL(m, "hardtanh_backward", TORCH_FN(at::native::hardtanh_backward));
  OXIDE_IMPL(m, "hardtanh_backward.grad_input", TORCH_FN(at::native::hardtanh_backward_out));
  OXIDE_STRUCTURED(m, structured_hardshrink_out, "hardshrink", "", "hardshrink.out", S);
  OXIDE_STRUCTURED(m, structured_hardshrink_backward_out, "hardshrink_backward", "", "hardshrink_backward.grad_input",
                   T, S);
  OXIDE_STRUCTURED(m, structured_softshrink_out, "softshrink", "", "softshrink.out", S);
  OXIDE_STRUCTURED(m, structured_softshrink_backward_out, "softshrink_backward", "", "softshrink_backward.grad_input",
                   T, S);
  OXIDE_STRUCTURED(m, structured_glu_out, "glu", "", "glu.out", int64_t);
  OXIDE_IMPL(m, "glu_backward", TORCH_FN(glu_backward));
  OXIDE_IMPL(m, "glu_backward.grad_input", TORCH_FN(glu_backward_out));
  OXIDE_IMPL(m, "_prelu_kernel", TORCH_FN(at::native::_prelu_kernel));
  OXIDE_IMPL(m, "_prelu_kernel_backward", TORCH_FN(prelu_backward));
  OXIDE_IMPL(m, "log_sigmoid_forward", TORCH_FN(log_sigmoid_forward));
  OXIDE_IMPL(m, "log_sigmoid_forward.output", TORCH_FN(log_sigmoid_forward_out));
  OXIDE_IMPL(m, "log_sigmoid_backward", TORCH_FN(log_sigmoid_backward));
  OXIDE_IMPL(m, "log_sigmoid_backward.grad_input", TORCH_FN(log_sigmoid_backward_out));

  // Losses
  OXIDE_STRUCTURED(m, structured_mse_loss_out, "mse_loss", "", "mse_loss.out", T, int64_t);
  OXIDE_IMPL(m, "mse_loss_backward", TORCH_FN(at::native::mse_loss_backward));
  OXIDE_IMPL(m, "mse_loss_backward.grad_input", TORCH_FN(at::native::mse_loss_backward_out));
  OXIDE_STRUCTURED(m, structured_smooth_l1_loss_out, "smooth_l1_loss", "", "smooth_l1_loss.out", T, int64_t, double);
  OXIDE_IMPL(m, "smooth_l1_loss_backward.grad_input", TORCH_FN(at::native::smooth_l1_loss_backward_out));
  OXIDE_IMPL(m, "huber_loss", TORCH_FN(at::native::huber_loss));
  OXIDE_IMPL(m, "huber_loss.out", TORCH_FN(at::native::huber_loss_out));
  OXIDE_IMPL(m, "huber_loss_backward.out", TORCH_FN(at::native::huber_loss_backward_out));
  OXIDE_IMPL(m, "binary_cross_entropy", TORCH_FN(bce));
  OXIDE_IMPL(m, "binary_cross_entropy.out", TORCH_FN(bce_out));
  OXIDE_IMPL(m, "binary_cross_entropy_backward", TORCH_FN(bce_backward));
  OXIDE_IMPL(m, "binary_cross_entropy_backward.grad_input", TORCH_FN(bce_backward_out));
}

}  // namespace oxide
