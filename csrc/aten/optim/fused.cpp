// Fused optimizers: `_fused_adam_`, `_fused_adamw_`, `_fused_sgd_` (and their
// tensor-lr forms), which torch.optim.Adam/AdamW/SGD(fused=True) call for
// oxide parameters. One Rust pass per parameter tensor (oxide_kernels::ops::optim::fused).
// GradScaler's `found_inf` skips the step (torch.optim then undoes its step
// count increment); `grad_scale` divides the gradients. Tensor scalars on oxide
// (lr, step counts, grad_scale, found_inf) are read by the kernels when they run.
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/launch.h"

#include <torch/library.h>

namespace oxide {
namespace {

using OptT = const std::optional<at::Tensor>&;

// A one-element tensor argument of a step (lr, step count, grad scale, found_inf). On
// oxide the kernel reads it when its launch runs, as CUDA's fused kernels do, so the
// step never waits for the queue; a CPU tensor's value is read once, here.
struct StepScalar {
  explicit StepScalar(OptT t) {
    if (t.has_value() && t->defined()) {
      if (t->is_privateuseone()) {
        device = *t;
      } else {
        host = t->item<double>();
      }
    }
  }
  // The kernel's operand for `param`'s launch: absent unless the scalar is on oxide,
  // where it must be on the parameter's device.
  OxideTensor arg(const at::Tensor& param, const char* op) const {
    if (!device.defined()) {
      return in_arg(std::optional<at::Tensor>());
    }
    TORCH_CHECK(device.device() == param.device(), op, ": a step tensor on ", device.device(), " for a parameter on ",
                param.device());
    return in_arg(device);
  }
  at::Tensor device;
  std::optional<double> host;
};

// Lists line up with the parameters: same length, sizes, dtype and device.
void check_lists(at::TensorList params, std::initializer_list<at::TensorList> others, const char* op) {
  for (const auto& list : others) {
    TORCH_CHECK(list.empty() || list.size() == params.size(), op, ": every tensor list must have ", params.size(),
                " entries, got ", list.size());
  }
  for (size_t i = 0; i < params.size(); ++i) {
    TORCH_CHECK(params[i].is_privateuseone(), op, ": expected oxide parameters, got ", params[i].device());
    for (const auto& list : others) {
      if (!list.empty()) {
        TORCH_CHECK(list[i].sizes() == params[i].sizes() && list[i].scalar_type() == params[i].scalar_type() &&
                        list[i].device() == params[i].device(),
                    op, ": tensor ", i, " of a state or gradient list does not match its parameter (", list[i].sizes(),
                    " ", list[i].scalar_type(), " vs ", params[i].sizes(), " ", params[i].scalar_type(), ")");
      }
    }
  }
}

// A contiguous tensor to hand the kernel, and whether it must be copied back into the original.
struct Operand {
  explicit Operand(const at::Tensor& t) : original(t), data(t.defined() ? t.contiguous() : t) {}
  void commit() {
    if (data.defined() && !data.is_same(original)) {
      original.copy_(data);
    }
  }
  // The kernel's operand (absent when undefined); it may read and write it.
  OxideTensor arg() const { return inout_arg(data); }
  at::Tensor original;  // shares the caller's storage
  at::Tensor data;
};

bool defined(OptT t) { return t.has_value() && t->defined(); }

void adam(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
          at::TensorList max_exp_avg_sqs, at::TensorList state_steps, double lr, OptT lr_tensor, double beta1,
          double beta2, double weight_decay, double eps, bool amsgrad, bool maximize, OptT grad_scale, OptT found_inf,
          bool decoupled) {
  const char* op = decoupled ? "_fused_adamw_" : "_fused_adam_";
  check_lists(params, {grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs}, op);
  TORCH_CHECK(state_steps.size() == params.size(), op, ": expected one step tensor per parameter");
  TORCH_CHECK(!amsgrad || max_exp_avg_sqs.size() == params.size(), op, ": amsgrad needs max_exp_avg_sqs");
  const StepScalar inf(found_inf), scale(grad_scale), lr_arg(lr_tensor);
  if (inf.host.has_value() && *inf.host != 0) {
    return;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const StepScalar step(state_steps[i]);
    const auto& param = params[i];
    OxideStepScalars sc{lr_arg.arg(param, op), step.arg(param, op), scale.arg(param, op), inf.arg(param, op)};
    OxideAdam h{lr_arg.host.value_or(lr),
                beta1,
                beta2,
                weight_decay,
                eps,
                amsgrad,
                maximize,
                decoupled,
                step.host.value_or(0.0),
                scale.host.value_or(1.0),
                scale.host.has_value()};
    Operand p(params[i]), m(exp_avgs[i]), v(exp_avg_sqs[i]);
    Operand vmax(amsgrad ? max_exp_avg_sqs[i] : at::Tensor());
    // With a grad scale the kernel leaves the unscaled gradient in it, as CPU's and CUDA's fused steps do.
    Operand g(grads[i]);
    OXIDE_CHECK(oxide_fused_adam(launch_on(params[i]), p.arg(), g.arg(), m.arg(), v.arg(), vmax.arg(), sc, &h));
    if (defined(grad_scale)) {
      g.commit();
    }
    p.commit();
    m.commit();
    v.commit();
    vmax.commit();
  }
}

template <bool Decoupled>
void adam_op(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
             at::TensorList max_exp_avg_sqs, at::TensorList state_steps, double lr, double beta1, double beta2,
             double weight_decay, double eps, bool amsgrad, bool maximize, OptT grad_scale, OptT found_inf) {
  adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, std::nullopt, beta1, beta2, weight_decay,
       eps, amsgrad, maximize, grad_scale, found_inf, Decoupled);
}
template <bool Decoupled>
void adam_op_tensor_lr(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                       at::TensorList max_exp_avg_sqs, at::TensorList state_steps, const at::Tensor& lr, double beta1,
                       double beta2, double weight_decay, double eps, bool amsgrad, bool maximize, OptT grad_scale,
                       OptT found_inf) {
  adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, 0.0, lr, beta1, beta2, weight_decay, eps,
       amsgrad, maximize, grad_scale, found_inf, Decoupled);
}

void sgd_impl(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers, double weight_decay,
              double momentum, double lr, OptT lr_tensor, double dampening, bool nesterov, bool maximize,
              bool is_first_step, OptT grad_scale, OptT found_inf) {
  const char* op = "_fused_sgd_";
  check_lists(params, {grads, momentum_buffers}, op);
  TORCH_CHECK(momentum == 0 || momentum_buffers.size() == params.size(), "_fused_sgd_: momentum needs buffers");
  const StepScalar inf(found_inf), scale(grad_scale), lr_arg(lr_tensor);
  if (inf.host.has_value() && *inf.host != 0) {
    return;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& param = params[i];
    OxideStepScalars sc{lr_arg.arg(param, op), in_arg(std::optional<at::Tensor>()), scale.arg(param, op),
                        inf.arg(param, op)};
    OxideSgd h{lr_arg.host.value_or(lr), weight_decay,          momentum, dampening, nesterov, maximize, is_first_step,
               scale.host.value_or(1.0), scale.host.has_value()};
    Operand p(params[i]);
    Operand buf(momentum != 0 ? momentum_buffers[i] : at::Tensor());
    Operand g(grads[i]);
    OXIDE_CHECK(oxide_fused_sgd(launch_on(params[i]), p.arg(), g.arg(), buf.arg(), sc, &h));
    if (defined(grad_scale)) {
      g.commit();
    }
    p.commit();
    buf.commit();
  }
}

void sgd(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers, double weight_decay,
         double momentum, double lr, double dampening, bool nesterov, bool maximize, bool is_first_step,
         OptT grad_scale, OptT found_inf) {
  sgd_impl(params, grads, momentum_buffers, weight_decay, momentum, lr, std::nullopt, dampening, nesterov, maximize,
           is_first_step, grad_scale, found_inf);
}

void sgd_tensor_lr(at::TensorList params, at::TensorList grads, at::TensorList momentum_buffers, double weight_decay,
                   double momentum, const at::Tensor& lr, double dampening, bool nesterov, bool maximize,
                   bool is_first_step, OptT grad_scale, OptT found_inf) {
  sgd_impl(params, grads, momentum_buffers, weight_decay, momentum, 0.0, lr, dampening, nesterov, maximize,
           is_first_step, grad_scale, found_inf);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "_fused_adam_", TORCH_FN(adam_op<false>));
  OXIDE_IMPL(m, "_fused_adam_.tensor_lr", TORCH_FN(adam_op_tensor_lr<false>));
  OXIDE_IMPL(m, "_fused_adamw_", TORCH_FN(adam_op<true>));
  OXIDE_IMPL(m, "_fused_adamw_.tensor_lr", TORCH_FN(adam_op_tensor_lr<true>));
  OXIDE_IMPL(m, "_fused_sgd_", TORCH_FN(sgd));
  OXIDE_IMPL(m, "_fused_sgd_.tensor_lr", TORCH_FN(sgd_tensor_lr));
}

}  // namespace oxide
