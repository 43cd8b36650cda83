// Whole RNN layers: `aten::lstm.input` and `aten::gru.input` (nn.LSTM / nn.GRU
// on padded, non-packed input) for oxide tensors.
//
// Why: ATen's own layer code (RNN.cpp) projects the whole input sequence
// through W_ih in one GEMM only for CPU tensors; for every other device it
// runs one small [B, I] x [I, G*H] GEMM per time step before the fused cell.
// Here the input projection is one GEMM over all T*B rows per layer and
// direction; only the recurrent [B, H] x [H, G*H] GEMM and the fused cell
// (`_thnn_fused_lstm_cell` / `_thnn_fused_gru_cell`, rnn.cpp) run per step.
//
// Where: both operators are CompositeImplicitAutograd, so PyTorch runs its
// composite for every backend unless a backend registers at its Autograd key:
// a kernel at PrivateUse1 alone is reached only where autograd is not in the
// key set (inference mode). So the layer is registered at AutogradPrivateUse1
// (normal use) and PrivateUse1 (inference tensors). When a gradient is
// wanted, each layer and direction is one autograd node (`LayerFunction`):
// its backward runs per step only the fused cell backward and one GEMM, then
// the weight, bias and input gradients as whole-sequence GEMMs;
// create_graph=True differentiates the composite instead. The composite (the
// same ops, autograd building the graph) also runs without gradients, under
// autocast, forward-mode AD and functorch transforms (see `run_direction`).
//
// Numerics: the same operations as ATen's path in a different grouping (the
// biases are added in the projections, the LSTM's two biases folded into
// one), so results match CPU to rounding.
//
// Not handled here (ATen's composite runs them, through at::native): LSTM
// projections (proj_size > 0) and packed sequences (`lstm.data` / `gru.data`,
// not registered), whose per-step batch shrinks.
#include "common/device_check.h"
#include "common/kernels.h"

#include <torch/library.h>

#include <ATen/ops/_thnn_fused_gru_cell.h>
#include <ATen/ops/_thnn_fused_gru_cell_backward.h>
#include <ATen/ops/_thnn_fused_lstm_cell.h>
#include <ATen/ops/_thnn_fused_lstm_cell_backward_impl.h>
#include <ATen/ops/add.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/dropout.h>
#include <ATen/ops/gru_native.h>
#include <ATen/ops/lstm_native.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/sum.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

namespace oxide {
namespace {

enum class Cell { LSTM, GRU };

// The weights of one layer and direction; biases are undefined without bias.
struct Weights {
  at::Tensor w_ih, w_hh, b_ih, b_hh;
};

// Layer-major, direction-minor parameter groups of nn.LSTM / nn.GRU: (w_ih, w_hh[, b_ih, b_hh]).
std::vector<Weights> unpack(at::TensorList params, bool has_biases, int64_t groups) {
  const size_t per = has_biases ? 4 : 2;
  std::vector<Weights> out;
  for (int64_t i = 0; i < groups; ++i) {
    const auto* p = params.data() + i * per;
    out.push_back(has_biases ? Weights{p[0], p[1], p[2], p[3]} : Weights{p[0], p[1], {}, {}});
  }
  return out;
}

// Shape and device checks a caller can get wrong (nn.LSTM/GRU build the right
// shapes; direct torch.lstm / torch._VF calls may not). `x` is [T, B, I].
void check_args(const char* op, const at::Tensor& x, at::TensorList hx, const std::vector<Weights>& w, int64_t H,
                int64_t gates, int64_t num_layers, int64_t dirs) {
  const int64_t B = x.size(1);
  for (const auto& h : hx) {
    TORCH_CHECK(h.dim() == 3 && h.size(0) == num_layers * dirs && h.size(1) == B && h.size(2) == H, op,
                ": expected hidden state of shape [", num_layers * dirs, ", ", B, ", ", H, "], got ", h.sizes());
    TORCH_CHECK(h.device() == x.device(), op, ": input and hidden state must be on the same device, got ", x.device(),
                " and ", h.device());
    TORCH_CHECK(h.scalar_type() == x.scalar_type(), op, ": input and hidden state must have the same dtype, got ",
                x.scalar_type(), " and ", h.scalar_type());
  }
  for (size_t i = 0; i < w.size(); ++i) {
    const int64_t in = i < static_cast<size_t>(dirs) ? x.size(2) : dirs * H;
    TORCH_CHECK(w[i].w_ih.dim() == 2 && w[i].w_ih.size(0) == gates * H && w[i].w_ih.size(1) == in, op,
                ": expected weight_ih of layer ", i / dirs, " of shape [", gates * H, ", ", in, "], got ",
                w[i].w_ih.sizes());
    TORCH_CHECK(w[i].w_hh.dim() == 2 && w[i].w_hh.size(0) == gates * H && w[i].w_hh.size(1) == H, op,
                ": expected weight_hh of layer ", i / dirs, " of shape [", gates * H, ", ", H, "], got ",
                w[i].w_hh.sizes());
    for (const auto* t : {&w[i].w_ih, &w[i].w_hh, &w[i].b_ih, &w[i].b_hh}) {
      if (t->defined()) {
        TORCH_CHECK(t->device() == x.device(), op, ": input and parameters must be on the same device, got ",
                    x.device(), " and ", t->device());
      }
    }
    for (const auto* b : {&w[i].b_ih, &w[i].b_hh}) {
      TORCH_CHECK(!b->defined() || (b->dim() == 1 && b->size(0) == gates * H), op, ": expected biases of shape [",
                  gates * H, "], got ", b->sizes());
    }
  }
}

// The whole-sequence input projection x W_ih^T + bias as one 2-D GEMM over
// all T * B rows: [T, B, G]. (at::linear on a 3-D input that is not
// contiguous, such as a batch_first input, would broadcast W_ih into a bmm.)
at::Tensor project(const at::Tensor& x, const at::Tensor& w_ih, const at::Tensor& bias) {
  const auto rows = x.reshape({x.size(0) * x.size(1), x.size(2)});
  const auto y = bias.defined() ? at::addmm(bias, rows, w_ih.t()) : at::mm(rows, w_ih.t());
  return y.view({x.size(0), x.size(1), w_ih.size(0)});
}

// The time steps of one direction of one layer over the whole sequence `x`
// [T, B, I] from the initial states `h`, `c` ([B, H]; `c` undefined for GRU):
// per step (in time order) the hidden state, and with `keep` the cell state
// (LSTM) and the fused cell's workspace; and the final states. Differentiable
// at:: ops: under autograd they build the layer's per-step graph.
struct Steps {
  std::vector<at::Tensor> hs, cs, ws;
  at::Tensor h, c;
};

Steps run_steps(Cell cell, const at::Tensor& x, at::Tensor h, at::Tensor c, const Weights& w, bool reverse, bool keep) {
  const int64_t T = x.size(0);
  const bool lstm = cell == Cell::LSTM;
  // The whole-sequence input projection. The LSTM adds both biases here (the
  // cell only sums the two gate inputs); the GRU's b_hh must stay with the
  // hidden gates, where the reset gate scales it.
  at::Tensor bias_ih = w.b_ih;
  if (lstm && w.b_ih.defined()) {
    bias_ih = at::add(w.b_ih, w.b_hh);
  }
  const auto igates = project(x, w.w_ih, bias_ih);
  const auto w_hh_t = w.w_hh.t();
  Steps st{std::vector<at::Tensor>(T),
           std::vector<at::Tensor>(keep && lstm ? T : 0),
           std::vector<at::Tensor>(keep ? T : 0),
           {},
           {}};
  for (int64_t s = 0; s < T; ++s) {
    const int64_t t = reverse ? T - 1 - s : s;
    at::Tensor workspace;
    if (lstm) {
      std::tie(h, c, workspace) = at::_thnn_fused_lstm_cell(igates[t], at::mm(h, w_hh_t), c);
      if (keep) {
        st.cs[t] = c;
      }
    } else {
      const auto hgates = w.b_hh.defined() ? at::addmm(w.b_hh, h, w_hh_t) : at::mm(h, w_hh_t);
      std::tie(h, workspace) = at::_thnn_fused_gru_cell(igates[t], hgates, h);
    }
    if (keep) {
      st.ws[t] = workspace;
    }
    st.hs[t] = h;
  }
  st.h = h;
  st.c = c;
  return st;
}

// One direction of one layer from differentiable ops: the outputs [T, B, H]
// and the final state(s). Runs where LayerFunction does not (see
// `run_direction`) and rebuilds a differentiable graph for its double backward.
std::tuple<at::Tensor, at::Tensor, at::Tensor> run_direction_composite(Cell cell, const at::Tensor& x,
                                                                       const at::Tensor& h, const at::Tensor& c,
                                                                       const Weights& w, bool reverse) {
  auto st = run_steps(cell, x, h, c, w, reverse, /*keep=*/false);
  return {at::stack(st.hs, 0), st.h, st.c};
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// One direction of one layer as a single autograd node (what cuDNN's and
// oneDNN's RNN layers are to CUDA and CPU). Built from the ops above, the
// layer's graph has ~5 nodes per time step, and its backward runs two small
// GEMMs per step plus a [4H, H] weight-gradient accumulation per step. Here
// the backward runs per step only the fused cell backward and one
// [B, G*H] x [G*H, H] GEMM (the hidden-state gradient), collects the gate
// gradients of all steps, and computes the weight, bias and input gradients
// as whole-sequence GEMMs and sums (backpropagation through time, Werbos 1990).
//
// Forward inputs: x [T, B, I], h0 [B, H], c0 [B, H] (a placeholder for GRU),
// the weights (placeholder biases without bias), then `lstm`, `has_bias` and
// `reverse`. Outputs: (out [T, B, H], h_n [B, H]) plus c_n for LSTM.
struct LayerFunction : torch::autograd::Function<LayerFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& h0, const at::Tensor& c0_in,
                               const at::Tensor& w_ih, const at::Tensor& w_hh, const at::Tensor& b_ih_in,
                               const at::Tensor& b_hh_in, bool lstm, bool has_bias, bool reverse) {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    // Absent operands arrive as placeholders (see `run_direction`).
    const at::Tensor c0 = lstm ? c0_in : at::Tensor();
    const at::Tensor b_ih = has_bias ? b_ih_in : at::Tensor(), b_hh = has_bias ? b_hh_in : at::Tensor();
    const int64_t T = x.size(0);
    auto st = run_steps(lstm ? Cell::LSTM : Cell::GRU, x, h0, c0, Weights{w_ih, w_hh, b_ih, b_hh}, reverse,
                        /*keep=*/true);
    const auto& hs = st.hs;
    auto out = at::stack(hs, 0);
    // Saved: the inputs, the stacked cell states and workspaces, then the hidden
    // state each step's recurrent product read (h0 first, in forward order), not
    // `out` or h_n: like the composite's graph, the backward then does not
    // depend on outputs the caller may modify in place.
    variable_list saved{
        x, h0, c0, w_ih, w_hh, b_ih, b_hh, lstm ? at::stack(st.cs, 0) : at::Tensor(), at::stack(st.ws, 0)};
    for (int64_t s = 0; s + 1 < T; ++s) {
      saved.push_back(hs[reverse ? T - 1 - s : s]);
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["lstm"] = lstm;
    ctx->saved_data["reverse"] = reverse;
    if (lstm) {
      return {out, st.h, st.c};
    }
    return {out, st.h};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &h0 = saved[1], &c0 = saved[2], &w_ih = saved[3], &w_hh = saved[4], &b_ih = saved[5],
               &b_hh = saved[6], &cs = saved[7], &ws = saved[8];
    const bool lstm = ctx->saved_data["lstm"].toBool();
    const bool reverse = ctx->saved_data["reverse"].toBool();
    if (at::GradMode::is_enabled()) {
      return double_backward(ctx, saved, lstm, reverse, grads);
    }
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    const int64_t T = x.size(0), B = x.size(1), I = x.size(2), H = h0.size(1);
    const int64_t G = (lstm ? 4 : 3) * H;
    const auto& g_out = grads[0];
    // `gh`: the whole gradient reaching step t's hidden output (from h_n or the
    // next step, plus the step's own output); `dc` the cell state's.
    at::Tensor gh, dc = lstm ? grads[2] : at::Tensor();
    std::vector<at::Tensor> d_ig(T), d_hg(lstm ? 0 : T);
    for (int64_t s = 0; s < T; ++s) {
      // Steps in reverse of the forward order; `prev` is the step that ran before t.
      const int64_t t = reverse ? s : T - 1 - s;
      const int64_t prev = reverse ? t + 1 : t - 1;
      const bool first = prev < 0 || prev >= T;
      if (s == 0) {
        gh = at::add(grads[1], g_out[t]);
      }
      at::Tensor d_h_direct;
      if (lstm) {
        auto r = at::_thnn_fused_lstm_cell_backward_impl(gh, dc, first ? c0 : cs[prev], cs[t], ws[t], false);
        d_ig[t] = std::get<0>(r);
        dc = std::get<1>(r);
      } else {
        auto r = at::_thnn_fused_gru_cell_backward(gh, ws[t], false);
        d_ig[t] = std::get<0>(r);
        d_hg[t] = std::get<1>(r);
        d_h_direct = std::get<2>(r);
      }
      const auto& d_rec = lstm ? d_ig[t] : d_hg[t];  // the gradient of this step's h x W_hh^T
      if (lstm) {
        gh = first ? at::mm(d_rec, w_hh) : at::addmm(g_out[prev], d_rec, w_hh);
      } else {
        gh = at::addmm(d_h_direct, d_rec, w_hh);
        if (!first) {
          gh.add_(g_out[prev]);
        }
      }
    }
    // Whole-sequence products: rows are (t, b) pairs.
    const auto dIG = at::stack(d_ig, 0).view({T * B, G});
    const auto dHG = lstm ? dIG : at::stack(d_hg, 0).view({T * B, G});
    // The hidden state each step's recurrent product read.
    std::vector<at::Tensor> read(T);  // in time order
    for (int64_t s = 0; s < T; ++s) {
      read[reverse ? T - 1 - s : s] = s == 0 ? h0 : saved[9 + s - 1];
    }
    const auto h_prev = at::stack(read, 0);
    at::Tensor dx, dw_ih, dw_hh, db_ih, db_hh;
    if (ctx->needs_input_grad(0)) {
      dx = at::mm(dIG, w_ih).view({T, B, I});
    }
    if (ctx->needs_input_grad(3)) {
      dw_ih = at::mm(dIG.t(), x.reshape({T * B, I}));
    }
    if (ctx->needs_input_grad(4)) {
      dw_hh = at::mm(dHG.t(), h_prev.view({T * B, H}));
    }
    if (b_ih.defined() && (ctx->needs_input_grad(5) || (lstm && ctx->needs_input_grad(6)))) {
      db_ih = dIG.sum(0);
    }
    if (b_hh.defined() && ctx->needs_input_grad(6)) {
      db_hh = lstm ? db_ih : dHG.sum(0);  // the LSTM's two biases enter as one sum
    }
    return {dx, gh, lstm ? dc : at::Tensor(), dw_ih, dw_hh, db_ih, db_hh, at::Tensor(), at::Tensor(), at::Tensor()};
  }

  // create_graph=True: differentiate a graph rebuilt from differentiable ops
  // (the composite layer) so that higher-order gradients are exact; the fused
  // cell backward kernels have no derivative of their own.
  static variable_list double_backward(AutogradContext* ctx, const variable_list& saved, bool lstm, bool reverse,
                                       const variable_list& grads) {
    const Weights w{saved[3], saved[4], saved[5], saved[6]};
    auto [out, h, c] = run_direction_composite(lstm ? Cell::LSTM : Cell::GRU, saved[0], saved[1], saved[2], w, reverse);
    variable_list outputs{out, h}, grad_outputs{grads[0], grads[1]};
    if (lstm) {
      outputs.push_back(c);
      grad_outputs.push_back(grads[2]);
    }
    variable_list inputs;
    std::vector<size_t> slots;
    for (size_t i = 0; i < 7; ++i) {
      if (saved[i].defined() && saved[i].requires_grad() && ctx->needs_input_grad(i)) {
        inputs.push_back(saved[i]);
        slots.push_back(i);
      }
    }
    variable_list result(10);
    if (inputs.empty()) {
      return result;
    }
    const auto got = torch::autograd::grad(outputs, inputs, grad_outputs, /*retain_graph=*/true,
                                           /*create_graph=*/true, /*allow_unused=*/true);
    for (size_t k = 0; k < slots.size(); ++k) {
      result[slots[k]] = got[k];
    }
    return result;
  }
};

// One direction of one layer: a single autograd node when a gradient is
// wanted, else the composite (nothing to save).
std::tuple<at::Tensor, at::Tensor, at::Tensor> run_direction(Cell cell, const at::Tensor& x, const at::Tensor& h,
                                                             const at::Tensor& c, const Weights& w, bool reverse) {
  bool wants_grad = false, forward_ad = false;
  if (at::GradMode::is_enabled()) {
    for (const auto* t : {&x, &h, &c, &w.w_ih, &w.w_hh, &w.b_ih, &w.b_hh}) {
      wants_grad = wants_grad || (t->defined() && t->requires_grad());
      forward_ad = forward_ad || (t->defined() && t->_fw_grad(/*level=*/0).defined());
    }
  }
  // The composite where the node cannot serve: nothing to differentiate; a
  // functorch transform (torch.func.grad/vjp: C++ Functions are refused there);
  // forward-mode AD (a C++ Function has no jvp); autocast (its casts inside the
  // forward must be recorded in the graph, as the composite's are, or the
  // backward would mix the cast and uncast dtypes).
  // (functorch includes its dynamic-layer keys in this thread while a transform is active.)
  const auto included = c10::impl::tls_local_dispatch_key_set().included_;
  const bool functorch = included.has(c10::DispatchKey::FuncTorchDynamicLayerFrontMode) ||
                         included.has(c10::DispatchKey::FuncTorchDynamicLayerBackMode);
  if (!wants_grad || forward_ad || functorch || at::autocast::is_autocast_enabled(c10::DeviceType::PrivateUse1)) {
    return run_direction_composite(cell, x, h, c, w, reverse);
  }
  const bool lstm = cell == Cell::LSTM;
  const bool has_bias = w.b_ih.defined();
  // Function::apply records every tensor argument's device and dtype, so an
  // absent one (GRU's cell state, biases) travels as an empty placeholder.
  const auto absent = [&](const at::Tensor& t) { return t.defined() ? t : at::empty({0}, x.options()); };
  auto r =
      LayerFunction::apply(x, h, absent(c), w.w_ih, w.w_hh, absent(w.b_ih), absent(w.b_hh), lstm, has_bias, reverse);
  return {r[0], r[1], lstm ? r[2] : at::Tensor()};
}

// The stacked layers: returns (output, h_n, c_n), c_n undefined for GRU.
std::tuple<at::Tensor, at::Tensor, at::Tensor> run_layers(Cell cell, const char* op, const at::Tensor& input,
                                                          const at::Tensor& h0, const at::Tensor& c0,
                                                          at::TensorList params, bool has_biases, int64_t num_layers,
                                                          double dropout, bool train, bool bidirectional,
                                                          bool batch_first) {
  const int64_t gates = cell == Cell::LSTM ? 4 : 3;
  const int64_t dirs = bidirectional ? 2 : 1;
  TORCH_CHECK(input.dim() == 3, op, ": expected a 3-D input (", batch_first ? "[B, T, I]" : "[T, B, I]", "), got ",
              input.sizes());
  TORCH_CHECK(num_layers >= 1, op, ": num_layers must be at least 1, got ", num_layers);
  TORCH_CHECK(input.size(batch_first ? 1 : 0) > 0, "Expected sequence length to be larger than 0 in RNN");
  TORCH_CHECK(h0.dim() == 3, op, ": expected a 3-D hidden state, got ", h0.sizes());
  const int64_t H = h0.size(2);
  auto x = batch_first ? input.transpose(0, 1) : input;
  std::vector<at::Tensor> hx{h0};
  if (c0.defined()) {
    hx.push_back(c0);
  }
  const auto w = unpack(params, has_biases, num_layers * dirs);
  check_args(op, x, hx, w, H, gates, num_layers, dirs);

  std::vector<at::Tensor> h_n, c_n;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    std::vector<at::Tensor> outs;
    for (int64_t d = 0; d < dirs; ++d) {
      const int64_t i = layer * dirs + d;
      auto [out, h, c] = run_direction(cell, x, h0[i], c0.defined() ? c0[i] : at::Tensor(), w[i], d == 1);
      outs.push_back(out);
      h_n.push_back(h);
      if (c.defined()) {
        c_n.push_back(c);
      }
    }
    x = dirs == 1 ? outs[0] : at::cat(outs, 2);
    // Dropout between layers, never after the last (nn.LSTM's `dropout`).
    if (dropout != 0 && train && layer + 1 < num_layers) {
      x = at::dropout(x, dropout, train);
    }
  }
  auto output = batch_first ? x.transpose(0, 1) : x;
  return {output, at::stack(h_n, 0), c_n.empty() ? at::Tensor() : at::stack(c_n, 0)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm(const at::Tensor& input, at::TensorList hx, at::TensorList params,
                                                    bool has_biases, int64_t num_layers, double dropout, bool train,
                                                    bool bidirectional, bool batch_first) {
  const char* op = "lstm";
  TORCH_CHECK(hx.size() == 2, op, ": expected two hidden states (h0, c0), got ", hx.size());
  const int64_t groups = num_layers * (bidirectional ? 2 : 1);
  const size_t per = has_biases ? 4 : 2;
  if (groups > 0 && params.size() == static_cast<size_t>(groups) * (per + 1)) {
    // LSTM with projections (a w_hr per group): ATen's composite.
    return at::native::lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first);
  }
  TORCH_CHECK(groups > 0 && params.size() == static_cast<size_t>(groups) * per, op, ": expected ", groups * per,
              " parameter tensors for ", num_layers, " layer(s)", bidirectional ? ", bidirectional" : "",
              has_biases ? " with biases" : " without biases", ", got ", params.size());
  TORCH_CHECK(hx[0].sizes() == hx[1].sizes(), op, ": h0 and c0 must have the same shape, got ", hx[0].sizes(), " and ",
              hx[1].sizes());
  return run_layers(Cell::LSTM, op, input, hx[0], hx[1], params, has_biases, num_layers, dropout, train, bidirectional,
                    batch_first);
}

std::tuple<at::Tensor, at::Tensor> gru(const at::Tensor& input, const at::Tensor& hx, at::TensorList params,
                                       bool has_biases, int64_t num_layers, double dropout, bool train,
                                       bool bidirectional, bool batch_first) {
  const char* op = "gru";
  const int64_t groups = num_layers * (bidirectional ? 2 : 1);
  const size_t per = has_biases ? 4 : 2;
  TORCH_CHECK(groups > 0 && params.size() == static_cast<size_t>(groups) * per, op, ": expected ", groups * per,
              " parameter tensors for ", num_layers, " layer(s)", bidirectional ? ", bidirectional" : "",
              has_biases ? " with biases" : " without biases", ", got ", params.size());
  auto [output, h_n, c_n] = run_layers(Cell::GRU, op, input, hx, at::Tensor(), params, has_biases, num_layers, dropout,
                                       train, bidirectional, batch_first);
  return {output, h_n};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  OXIDE_IMPL(m, "lstm.input", TORCH_FN(lstm));
  OXIDE_IMPL(m, "gru.input", TORCH_FN(gru));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "lstm.input", TORCH_FN(lstm));
  OXIDE_IMPL(m, "gru.input", TORCH_FN(gru));
}

}  // namespace oxide
