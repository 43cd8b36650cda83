// Fused LSTM and GRU cells. PyTorch's RNN layers call `_thnn_fused_lstm_cell`
// / `_thnn_fused_gru_cell` for CUDA, XPU and PrivateUse1 inputs (the gate
// matmuls run before, as mm), and CPU has no kernel for them, so without
// these the CPU fallback has nothing to call. Each operator is one Rust
// kernel (oxide_kernels::ops::nn::rnn) over the batch rows; the workspace layouts are
// CUDA's, the ones the backward functions read:
//   LSTM: [B, 4H] activated gates (i, f, g, o).
//   GRU:  [B, 5H] (r, z, n, hx, hn + b_hn).
// Inputs are passed with their strides (no copies); biases are made
// contiguous in the input's dtype; outputs are new contiguous tensors.
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/launch.h"

#include <torch/library.h>

#include <ATen/ops/empty.h>

namespace oxide {
namespace {

using T = const at::Tensor&;
using OptT = const std::optional<at::Tensor>&;

const at::Tensor& get(OptT t) {
  static const at::Tensor undefined;
  return t.has_value() ? *t : undefined;
}

void check_like(T t, T ref, c10::IntArrayRef sizes, const char* what, const char* op) {
  TORCH_CHECK(t.sizes() == sizes, op, ": expected ", what, " of shape ", sizes, ", got ", t.sizes());
  TORCH_CHECK(t.scalar_type() == ref.scalar_type(), op, ": expected ", what, " of dtype ", ref.scalar_type(), ", got ",
              t.scalar_type());
  TORCH_CHECK(t.device() == ref.device(), op, ": expected ", what, " on ", ref.device(), ", got ", t.device());
}

// A bias as the kernel reads it: contiguous [gates * H] in the gates' dtype (undefined stays undefined).
at::Tensor bias(OptT b, T ref, int64_t n, const char* op) {
  const auto& t = get(b);
  if (!t.defined()) {
    return t;
  }
  TORCH_CHECK(t.dim() == 1 && t.numel() == n, op, ": expected a bias of ", n, " elements, got shape ", t.sizes());
  TORCH_CHECK(t.device() == ref.device(), op, ": expected the bias on ", ref.device(), ", got ", t.device());
  return t.to(ref.scalar_type()).contiguous();
}

// [B, gates * H] input and hidden gates, [B, H] state: returns (B, H).
std::pair<int64_t, int64_t> check_cell(T igates, T hgates, T state, int64_t gates, const char* op) {
  TORCH_CHECK(igates.dim() == 2 && igates.size(1) % gates == 0, op, ": expected input gates of shape [B, ", gates,
              "H], got ", igates.sizes());
  const int64_t B = igates.size(0), H = igates.size(1) / gates;
  check_like(hgates, igates, igates.sizes(), "hidden gates", op);
  check_like(state, igates, {B, H}, "the state", op);
  return {B, H};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(T igates, T hgates, T cx, OptT b_ih, OptT b_hh) {
  const char* op = "_thnn_fused_lstm_cell";
  const auto [B, H] = check_cell(igates, hgates, cx, 4, op);
  const auto bi = bias(b_ih, igates, 4 * H, op);
  const auto bh = bias(b_hh, igates, 4 * H, op);
  auto hy = at::empty({B, H}, igates.options());
  auto cy = at::empty({B, H}, igates.options());
  auto workspace = at::empty({B, 4 * H}, igates.options());
  OXIDE_CHECK(oxide_lstm_cell(launch_on(igates), out_arg(hy), out_arg(cy), out_arg(workspace), in_arg(igates),
                              in_arg(hgates), in_arg(cx), in_arg(bi), in_arg(bh)));
  return {hy, cy, workspace};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(OptT grad_hy_opt, OptT grad_cy_opt, T cx, T cy,
                                                                  T workspace, bool has_bias) {
  const char* op = "_thnn_fused_lstm_cell_backward_impl";
  const auto& grad_hy = get(grad_hy_opt);
  const auto& grad_cy = get(grad_cy_opt);
  if (!grad_hy.defined() && !grad_cy.defined()) {
    return {};  // no gradient flows (as CUDA's kernel answers)
  }
  TORCH_CHECK(cx.dim() == 2, op, ": expected a [B, H] cell state, got ", cx.sizes());
  const int64_t B = cx.size(0), H = cx.size(1);
  check_like(cy, cx, {B, H}, "cy", op);
  check_like(workspace, cx, {B, 4 * H}, "the workspace", op);
  for (const auto* g : {&grad_hy, &grad_cy}) {
    if (g->defined()) {
      check_like(*g, cx, {B, H}, "the output gradients", op);
    }
  }
  auto grad_gates = at::empty({B, 4 * H}, cx.options());
  auto grad_cx = at::empty({B, H}, cx.options());
  auto grad_bias = has_bias ? at::empty({4 * H}, cx.options()) : at::Tensor();
  OXIDE_CHECK(oxide_lstm_cell_backward(launch_on(cx), out_arg(grad_gates), out_arg(grad_cx), out_arg(grad_bias),
                                       in_arg(grad_hy), in_arg(grad_cy), in_arg(cx), in_arg(cy), in_arg(workspace)));
  return {grad_gates, grad_cx, grad_bias};
}

std::tuple<at::Tensor, at::Tensor> gru_cell(T igates, T hgates, T hx, OptT b_ih, OptT b_hh) {
  const char* op = "_thnn_fused_gru_cell";
  const auto [B, H] = check_cell(igates, hgates, hx, 3, op);
  const auto bi = bias(b_ih, igates, 3 * H, op);
  const auto bh = bias(b_hh, igates, 3 * H, op);
  auto hy = at::empty({B, H}, igates.options());
  auto workspace = at::empty({B, 5 * H}, igates.options());
  OXIDE_CHECK(oxide_gru_cell(launch_on(igates), out_arg(hy), out_arg(workspace), in_arg(igates), in_arg(hgates),
                             in_arg(hx), in_arg(bi), in_arg(bh)));
  return {hy, workspace};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(T grad_hy, T workspace,
                                                                                         bool has_bias) {
  const char* op = "_thnn_fused_gru_cell_backward";
  TORCH_CHECK(workspace.dim() == 2 && workspace.size(1) % 5 == 0, op, ": expected a [B, 5H] workspace, got ",
              workspace.sizes());
  const int64_t B = workspace.size(0), H = workspace.size(1) / 5;
  check_like(grad_hy, workspace, {B, H}, "the output gradient", op);
  auto grad_input_gates = at::empty({B, 3 * H}, workspace.options());
  auto grad_hidden_gates = at::empty({B, 3 * H}, workspace.options());
  auto grad_hx = at::empty({B, H}, workspace.options());
  at::Tensor gib, ghb;
  if (has_bias) {
    gib = at::empty({3 * H}, workspace.options());
    ghb = at::empty({3 * H}, workspace.options());
  }
  OXIDE_CHECK(oxide_gru_cell_backward(launch_on(workspace), out_arg(grad_input_gates), out_arg(grad_hidden_gates),
                                      out_arg(grad_hx), out_arg(gib), out_arg(ghb), in_arg(grad_hy),
                                      in_arg(workspace)));
  return {grad_input_gates, grad_hidden_gates, grad_hx, gib, ghb};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "_thnn_fused_lstm_cell", TORCH_FN(lstm_cell));
  OXIDE_IMPL(m, "_thnn_fused_lstm_cell_backward_impl", TORCH_FN(lstm_cell_backward));
  OXIDE_IMPL(m, "_thnn_fused_gru_cell", TORCH_FN(gru_cell));
  OXIDE_IMPL(m, "_thnn_fused_gru_cell_backward", TORCH_FN(gru_cell_backward));
}

}  // namespace oxide
