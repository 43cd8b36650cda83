// Fused LSTM and GRU cells. PyTorch's RNN layers call `_thnn_fused_lstm_cell`
// / `_thnn_fused_gru_cell` for CUDA, XPU and PrivateUse1 inputs (the gate
// matmuls run before, as mm), and CPU has no kernel for them, so without
// these the CPU fallback has nothing to call. The cells are compositions of
// native pointwise kernels; the workspace layouts are the ones the backward
// functions below read:
//   LSTM: [B, 4H] activated gates (i, f, g, o).
//   GRU:  [B, 5H] (r, z, n, hx, hn + b_hn).
#include "kernels.h"

#include <torch/library.h>

#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/zeros_like.h>

namespace oxide {
namespace {

using T = const at::Tensor&;
using OptT = const std::optional<at::Tensor>&;

at::Tensor with_biases(at::Tensor gates, OptT b1, OptT b2) {
  if (b1.has_value() && b1->defined()) {
    gates = gates + *b1;
  }
  if (b2.has_value() && b2->defined()) {
    gates = gates + *b2;
  }
  return gates;
}

void check_gates(T igates, T hgates, int64_t chunks, const char* cell) {
  TORCH_CHECK(igates.dim() == 2 && igates.sizes() == hgates.sizes() && igates.size(1) % chunks == 0, cell,
              ": expected input and hidden gates of equal shape [B, ", chunks, "H], got ", igates.sizes(), " and ",
              hgates.sizes());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(T igates, T hgates, T cx, OptT b_ih, OptT b_hh) {
  check_gates(igates, hgates, 4, "_thnn_fused_lstm_cell");
  const auto gates = with_biases(igates + hgates, b_ih, b_hh).chunk(4, 1);
  const auto i = at::sigmoid(gates[0]);
  const auto f = at::sigmoid(gates[1]);
  const auto g = at::tanh(gates[2]);
  const auto o = at::sigmoid(gates[3]);
  auto cy = f * cx + i * g;
  auto hy = o * at::tanh(cy);
  return {hy, cy, at::cat({i, f, g, o}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(OptT grad_hy_opt, OptT grad_cy_opt, T cx, T cy,
                                                                  T workspace, bool has_bias) {
  const auto w = workspace.chunk(4, 1);
  const auto &i = w[0], &f = w[1], &g = w[2], &o = w[3];
  const auto tanh_cy = at::tanh(cy);
  const bool has_hy = grad_hy_opt.has_value() && grad_hy_opt->defined();
  const bool has_cy = grad_cy_opt.has_value() && grad_cy_opt->defined();
  const at::Tensor grad_hy = has_hy ? *grad_hy_opt : at::zeros_like(cy);
  at::Tensor gcx = grad_hy * o * (1 - tanh_cy * tanh_cy);
  if (has_cy) {
    gcx = gcx + *grad_cy_opt;
  }
  const auto gi = gcx * g * i * (1 - i);
  const auto gf = gcx * cx * f * (1 - f);
  const auto gg = gcx * i * (1 - g * g);
  const auto go = grad_hy * tanh_cy * o * (1 - o);
  auto grad_gates = at::cat({gi, gf, gg, go}, 1);
  auto grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
  return {grad_gates, gcx * f, grad_bias};
}

std::tuple<at::Tensor, at::Tensor> gru_cell(T igates, T hgates, T hx, OptT b_ih, OptT b_hh) {
  check_gates(igates, hgates, 3, "_thnn_fused_gru_cell");
  const auto ig = with_biases(igates, b_ih, std::nullopt).chunk(3, 1);
  const auto hg = with_biases(hgates, b_hh, std::nullopt).chunk(3, 1);
  const auto r = at::sigmoid(ig[0] + hg[0]);
  const auto z = at::sigmoid(ig[1] + hg[1]);
  const auto n = at::tanh(ig[2] + r * hg[2]);
  auto hy = n + z * (hx - n);
  return {hy, at::cat({r, z, n, hx, hg[2]}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(T grad_hy, T workspace,
                                                                                        bool has_bias) {
  const auto w = workspace.chunk(5, 1);
  const auto &r = w[0], &z = w[1], &n = w[2], &hx = w[3], &hn = w[4];
  const auto gn = grad_hy * (1 - z) * (1 - n * n);
  const auto gz = grad_hy * (hx - n) * z * (1 - z);
  const auto gr = gn * hn * r * (1 - r);
  auto grad_input_gates = at::cat({gr, gz, gn}, 1);
  auto grad_hidden_gates = at::cat({gr, gz, gn * r}, 1);
  auto grad_hx = grad_hy * z;
  at::Tensor gib, ghb;
  if (has_bias) {
    gib = grad_input_gates.sum(0);
    ghb = grad_hidden_gates.sum(0);
  }
  return {grad_input_gates, grad_hidden_gates, grad_hx, gib, ghb};
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(lstm_cell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(lstm_cell_backward));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(gru_cell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(gru_cell_backward));
}

} // namespace oxide
