// Normalisation layers: native_batch_norm (and the _native_batch_norm_legit
// forms torch.compile uses), native_layer_norm, native_group_norm and their
// backward, on oxide_kernels::ops::nn::norm. Inputs are made contiguous here and
// outputs take the input's suggested memory format, as CPU's do; statistics
// follow CPU's dtype rule (float for half inputs with float parameters).
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/launch.h"

#include <torch/library.h>

#include <ATen/native/Resize.h>
#include <ATen/native/layer_norm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>

namespace oxide {
namespace {

using T = const at::Tensor&;
using OptT = const std::optional<at::Tensor>&;

const at::Tensor& get(OptT t) {
  static const at::Tensor undefined;
  return t.has_value() ? *t : undefined;
}

// CPU's parameter dtype: float when a half/bfloat16 input meets float parameters.
at::ScalarType param_dtype(const at::Tensor& input, std::initializer_list<const at::Tensor*> params) {
  if (at::isReducedFloatingType(input.scalar_type())) {
    for (const auto* p : params) {
      if (p->defined() && p->scalar_type() == at::kFloat) {
        return at::kFloat;
      }
    }
  }
  return input.scalar_type();
}

// A parameter as the kernels read it: contiguous, of `dtype` (undefined stays undefined).
at::Tensor as_param(const at::Tensor& p, at::ScalarType dtype) { return p.defined() ? p.to(dtype).contiguous() : p; }

struct NCS {
  size_t n, c, s;
};
NCS batch_shape(const at::Tensor& input) {
  TORCH_CHECK(input.dim() >= 2, "batch_norm: expected an input with at least 2 dimensions (N, C, ...), got ",
              input.dim());
  const auto n = static_cast<size_t>(input.size(0));
  const auto c = static_cast<size_t>(input.size(1));
  return {n, c, n * c == 0 ? 1 : static_cast<size_t>(input.numel()) / (n * c)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm(T input, OptT weight_opt, OptT bias_opt, OptT rm_opt,
                                                          OptT rv_opt, bool training, double momentum, double eps) {
  const auto& rm = get(rm_opt);
  const auto& rv = get(rv_opt);
  const auto pdt = param_dtype(input, {&get(weight_opt), &get(bias_opt), &rm, &rv});
  const auto x = input.contiguous();
  const auto [n, c, s] = batch_shape(x);
  if (!training) {
    TORCH_CHECK(rm.defined() && rv.defined(), "running_mean and running_var must be defined in evaluation mode");
  }
  for (const auto* r : {&rm, &rv}) {
    TORCH_CHECK(
        !r->defined() || (r->numel() == static_cast<int64_t>(c) && r->is_contiguous() && r->scalar_type() == pdt),
        "batch_norm: running statistics must be contiguous ", pdt, " tensors of ", c, " elements");
  }
  const auto w = as_param(get(weight_opt), pdt);
  const auto b = as_param(get(bias_opt), pdt);
  at::Tensor y = at::empty_like(x);
  at::Tensor save_mean = at::empty({training ? static_cast<int64_t>(c) : 0}, x.options().dtype(pdt));
  at::Tensor save_invstd = at::empty({training ? static_cast<int64_t>(c) : 0}, x.options().dtype(pdt));
  // Evaluation leaves the (empty) saved statistics alone: they are not operands then.
  OXIDE_CHECK(oxide_batch_norm(launch_on(x), out_arg(y), out_arg(training ? save_mean : at::Tensor()),
                               out_arg(training ? save_invstd : at::Tensor()), inout_arg(rm), inout_arg(rv), in_arg(x),
                               in_arg(w), in_arg(b), training, momentum, eps));
  return {y.contiguous(input.suggest_memory_format()), save_mean, save_invstd};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> batch_norm_out(T input, OptT w, OptT b, OptT rm, OptT rv,
                                                                 bool training, double momentum, double eps,
                                                                 at::Tensor& out, at::Tensor& save_mean,
                                                                 at::Tensor& save_invstd) {
  auto [y, m, s] = batch_norm(input, w, b, rm, rv, training, momentum, eps);
  at::native::resize_output(out, y.sizes());
  out.copy_(y);
  at::native::resize_output(save_mean, m.sizes());
  save_mean.copy_(m);
  at::native::resize_output(save_invstd, s.sizes());
  save_invstd.copy_(s);
  return {out, save_mean, save_invstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_legit(T input, OptT w, OptT b, at::Tensor& rm, at::Tensor& rv,
                                                                bool training, double momentum, double eps) {
  return batch_norm(input, w, b, rm, rv, training, momentum, eps);
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_legit_no_stats(T input, OptT w, OptT b, bool training,
                                                                         double momentum, double eps) {
  return batch_norm(input, w, b, std::nullopt, std::nullopt, training, momentum, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward(T grad_out, T input, OptT weight_opt, OptT rm_opt,
                                                                   OptT rv_opt, OptT save_mean_opt,
                                                                   OptT save_invstd_opt, bool train, double eps,
                                                                   std::array<bool, 3> mask) {
  const auto& rm = get(rm_opt);
  const auto& rv = get(rv_opt);
  const auto pdt = param_dtype(input, {&get(weight_opt), &rm, &rv, &get(save_mean_opt)});
  const auto x = input.contiguous();
  const auto g = grad_out.contiguous();
  const auto [n, c, s] = batch_shape(x);
  const auto w = as_param(get(weight_opt), pdt);
  const auto sm = as_param(get(save_mean_opt), pdt);
  const auto si = as_param(get(save_invstd_opt), pdt);
  const auto rmc = as_param(rm, pdt);
  const auto rvc = as_param(rv, pdt);
  TORCH_CHECK(!train || (sm.defined() && si.defined()),
              "batch_norm backward in training mode needs the saved statistics");
  TORCH_CHECK(train || (rmc.defined() && rvc.defined()),
              "batch_norm backward in evaluation mode needs running statistics");
  at::Tensor dx = mask[0] ? at::empty_like(x) : at::Tensor();
  at::Tensor dw = mask[1] ? at::empty({static_cast<int64_t>(c)}, x.options().dtype(pdt)) : at::Tensor();
  at::Tensor db = mask[2] ? at::empty({static_cast<int64_t>(c)}, x.options().dtype(pdt)) : at::Tensor();
  // Training reads the saved statistics, evaluation the running ones (the others may be empty).
  OXIDE_CHECK(oxide_batch_norm_backward(launch_on(x), out_arg(dx), out_arg(dw), out_arg(db), in_arg(g), in_arg(x),
                                        in_arg(w), in_arg(train ? at::Tensor() : rmc),
                                        in_arg(train ? at::Tensor() : rvc), in_arg(train ? sm : at::Tensor()),
                                        in_arg(train ? si : at::Tensor()), train, eps));
  if (dx.defined()) {
    dx = dx.contiguous(input.suggest_memory_format());
  }
  return {dx, dw, db};
}

// Layer norm over the trailing `normalized_shape`: group norm of [M, N, 1] with one group.
std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm(T input, c10::IntArrayRef normalized_shape, OptT weight_opt,
                                                          OptT bias_opt, double eps) {
  const auto& weight = get(weight_opt);
  const auto& bias = get(bias_opt);
  const auto [M, N] = at::native::_check_layer_norm_inputs(input, normalized_shape, weight, bias);
  const auto pdt = param_dtype(input, {&weight, &bias});
  const auto x = input.contiguous();
  const auto w = as_param(weight, pdt);
  const auto b = as_param(bias, pdt);
  at::Tensor y = at::empty_like(x);
  const int64_t axis = input.dim() - static_cast<int64_t>(normalized_shape.size());
  std::vector<int64_t> stat_shape(input.sizes().begin(), input.sizes().begin() + axis);
  stat_shape.resize(input.dim(), 1);
  at::Tensor mean = at::empty(stat_shape, x.options().dtype(pdt));
  at::Tensor rstd = at::empty(stat_shape, x.options().dtype(pdt));
  OXIDE_CHECK(oxide_group_norm(launch_on(x), out_arg(y), out_arg(mean), out_arg(rstd), in_arg(x), in_arg(w), in_arg(b),
                               OxideGroupShape{M, N, 1, 1}, eps));
  return {y, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward(T grad_out, T input,
                                                                   c10::IntArrayRef normalized_shape, T mean, T rstd,
                                                                   OptT weight_opt, OptT bias_opt,
                                                                   std::array<bool, 3> mask) {
  const auto& weight = get(weight_opt);
  const auto& bias = get(bias_opt);
  const auto [M, N] = at::native::_check_layer_norm_inputs(input, normalized_shape, weight, bias);
  const auto pdt = param_dtype(input, {&weight, &bias});
  const auto x = input.contiguous();
  const auto g = grad_out.contiguous();
  const auto w = as_param(weight, pdt);
  const auto m = mean.contiguous();
  const auto r = rstd.contiguous();
  at::Tensor dx = mask[0] ? at::empty_like(x) : at::Tensor();
  at::Tensor dw = mask[1] && weight.defined() ? at::empty(weight.sizes(), weight.options()) : at::Tensor();
  at::Tensor db = mask[2] && bias.defined() ? at::empty(bias.sizes(), bias.options()) : at::Tensor();
  // The kernel writes parameter gradients in the parameter dtype.
  at::Tensor dw_k = dw.defined() && dw.scalar_type() != pdt ? at::empty(dw.sizes(), dw.options().dtype(pdt)) : dw;
  at::Tensor db_k = db.defined() && db.scalar_type() != pdt ? at::empty(db.sizes(), db.options().dtype(pdt)) : db;
  OXIDE_CHECK(oxide_group_norm_backward(launch_on(x), out_arg(dx), out_arg(dw_k), out_arg(db_k), in_arg(g), in_arg(x),
                                        in_arg(m), in_arg(r), in_arg(w), OxideGroupShape{M, N, 1, 1}));
  if (dw_k.defined() && !dw_k.is_same(dw)) {
    dw.copy_(dw_k);
  }
  if (db_k.defined() && !db_k.is_same(db)) {
    db.copy_(db_k);
  }
  return {dx, dw, db};
}

void check_group_norm(T input, int64_t N, int64_t C, int64_t HxW, int64_t group) {
  TORCH_CHECK(group > 0 && C % group == 0,
              "Expected number of channels in input to be divisible by num_groups, but got input of shape ",
              input.sizes(), " and num_groups=", group);
  TORCH_CHECK(input.numel() == N * C * HxW, "Expected the input to have N*C*HxW = ", N * C * HxW, " elements, got ",
              input.numel());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm(T input, OptT weight_opt, OptT bias_opt, int64_t N, int64_t C,
                                                          int64_t HxW, int64_t group, double eps) {
  check_group_norm(input, N, C, HxW, group);
  const auto& weight = get(weight_opt);
  const auto& bias = get(bias_opt);
  const auto pdt = param_dtype(input, {&weight, &bias});
  const auto x = input.contiguous();
  const auto w = as_param(weight, pdt);
  const auto b = as_param(bias, pdt);
  at::Tensor y = at::empty_like(x);
  at::Tensor mean = at::empty({N, group}, x.options().dtype(pdt));
  at::Tensor rstd = at::empty({N, group}, x.options().dtype(pdt));
  OXIDE_CHECK(oxide_group_norm(launch_on(x), out_arg(y), out_arg(mean), out_arg(rstd), in_arg(x), in_arg(w), in_arg(b),
                               OxideGroupShape{N, C, HxW, group}, eps));
  return {y.contiguous(input.suggest_memory_format()), mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_backward(T grad_out, T input, T mean, T rstd, OptT weight_opt,
                                                                   int64_t N, int64_t C, int64_t HxW, int64_t group,
                                                                   std::array<bool, 3> mask) {
  check_group_norm(input, N, C, HxW, group);
  const auto& weight = get(weight_opt);
  const auto pdt = param_dtype(input, {&weight, &mean});
  const auto x = input.contiguous();
  const auto g = grad_out.contiguous();
  const auto w = as_param(weight, pdt);
  const auto m = mean.contiguous();
  const auto r = rstd.contiguous();
  at::Tensor dx = mask[0] ? at::empty_like(x) : at::Tensor();
  at::Tensor dw = mask[1] ? at::empty({C}, x.options().dtype(pdt)) : at::Tensor();
  at::Tensor db = mask[2] ? at::empty({C}, x.options().dtype(pdt)) : at::Tensor();
  OXIDE_CHECK(oxide_group_norm_backward(launch_on(x), out_arg(dx), out_arg(dw), out_arg(db), in_arg(g), in_arg(x),
                                        in_arg(m), in_arg(r), in_arg(w), OxideGroupShape{N, C, HxW, group}));
  if (dx.defined()) {
    dx = dx.contiguous(input.suggest_memory_format());
  }
  return {dx, dw, db};
}

// _batch_norm_with_update (the training form nn.BatchNorm exports to) and its
// backward, as CPU's: native_batch_norm in training mode plus an empty reserve
// tensor (no cuDNN workspace here), and native_batch_norm_backward.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> batch_norm_with_update(T input, OptT w, OptT b,
                                                                                  at::Tensor& rm, at::Tensor& rv,
                                                                                  double momentum, double eps) {
  auto [y, m, s] = batch_norm(input, w, b, rm, rv, /*training=*/true, momentum, eps);
  return {y, m, s, at::empty({0}, input.options().dtype(at::kByte))};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> batch_norm_with_update_out(
    T input, OptT w, OptT b, at::Tensor& rm, at::Tensor& rv, double momentum, double eps, at::Tensor& out,
    at::Tensor& save_mean, at::Tensor& save_invstd, at::Tensor& reserve) {
  batch_norm_out(input, w, b, rm, rv, /*training=*/true, momentum, eps, out, save_mean, save_invstd);
  at::native::resize_output(reserve, {0});
  return {out, save_mean, save_invstd, reserve};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward_with_reserve(T grad_out, T input, T weight, OptT rm,
                                                                                OptT rv, OptT save_mean, OptT save_var,
                                                                                bool update, double eps,
                                                                                std::array<bool, 3> mask,
                                                                                T /*reserve*/) {
  return batch_norm_backward(grad_out, input, weight, rm, rv, save_mean, save_var, update, eps, mask);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "_batch_norm_with_update", TORCH_FN(batch_norm_with_update));
  OXIDE_IMPL(m, "_batch_norm_with_update.out", TORCH_FN(batch_norm_with_update_out));
  OXIDE_IMPL(m, "batch_norm_backward", TORCH_FN(batch_norm_backward_with_reserve));
  OXIDE_IMPL(m, "native_batch_norm", TORCH_FN(batch_norm));
  OXIDE_IMPL(m, "native_batch_norm.out", TORCH_FN(batch_norm_out));
  OXIDE_IMPL(m, "_native_batch_norm_legit", TORCH_FN(batch_norm_legit));
  OXIDE_IMPL(m, "_native_batch_norm_legit.no_stats", TORCH_FN(batch_norm_legit_no_stats));
  OXIDE_IMPL(m, "native_batch_norm_backward", TORCH_FN(batch_norm_backward));
  OXIDE_IMPL(m, "native_layer_norm", TORCH_FN(layer_norm));
  OXIDE_IMPL(m, "native_layer_norm_backward", TORCH_FN(layer_norm_backward));
  OXIDE_IMPL(m, "native_group_norm", TORCH_FN(group_norm));
  OXIDE_IMPL(m, "native_group_norm_backward", TORCH_FN(group_norm_backward));
}

}  // namespace oxide
