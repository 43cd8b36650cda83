// Reflection / replication padding (1-3d) and nearest / bilinear upsampling,
// forward and backward, composed from native gather/scatter kernels.
//
// Each of these ops is separable: along every resampled dimension, output
// index i reads input index src[i] (padding, nearest) or a weighted pair of
// them (bilinear). The forward is one index_select per dimension (times
// weights); the backward is its adjoint, one index_add_ per dimension in
// reverse order, which accumulates serially and so is deterministic. The
// index maps and weights come from PyTorch's own helpers (ATen/native/Padding.h,
// UpSample.h), so edge rules (align_corners, scales, the nearest rounding) match CPU.
#include "kernels.h"

#include <torch/library.h>

#include <ATen/TensorOperators.h>
#include <ATen/native/Padding.h>
#include <ATen/native/Resize.h>
#include <ATen/native/UpSample.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <vector>

namespace oxide {
namespace {

using T = const at::Tensor&;
using IA = at::IntArrayRef;
using OptD = std::optional<double>;

// One resampled dimension: output index i reads src0[i] (weight w0[i]) and, when
// interpolating, src1[i] (weight w1[i]).
struct Axis {
  int64_t dim;
  int64_t in;
  std::vector<int64_t> src0, src1;
  std::vector<double> w0, w1;
  int64_t out() const { return static_cast<int64_t>(src0.size()); }
  bool weighted() const { return !w0.empty(); }
};

at::Tensor index_tensor(const std::vector<int64_t>& v, const at::Tensor& like) {
  return at::tensor(v, at::kLong).to(like.device());
}

// A weight vector shaped to broadcast along `dim` of a `ndim`-dimensional tensor.
at::Tensor weight_tensor(const std::vector<double>& w, const at::Tensor& like, int64_t dim) {
  std::vector<int64_t> shape(like.dim(), 1);
  shape[dim] = static_cast<int64_t>(w.size());
  return at::tensor(w, at::kDouble).to(like.scalar_type()).to(like.device()).view(shape);
}

// Half types compute in float, as CPU's kernels do.
at::Tensor widened(const at::Tensor& x) {
  return at::isReducedFloatingType(x.scalar_type()) ? x.to(at::kFloat) : x;
}

at::Tensor resample_forward(const at::Tensor& input, const std::vector<Axis>& axes) {
  at::Tensor x = widened(input);
  for (const auto& a : axes) {
    const auto i0 = index_tensor(a.src0, x);
    if (!a.weighted()) {
      x = x.index_select(a.dim, i0);
    } else {
      x = x.index_select(a.dim, i0) * weight_tensor(a.w0, x, a.dim) +
          x.index_select(a.dim, index_tensor(a.src1, x)) * weight_tensor(a.w1, x, a.dim);
    }
  }
  return x.to(input.scalar_type()).contiguous(input.suggest_memory_format());
}

at::Tensor resample_backward(const at::Tensor& grad_output, c10::IntArrayRef input_size, const std::vector<Axis>& axes) {
  at::Tensor g = widened(grad_output);
  for (auto it = axes.rbegin(); it != axes.rend(); ++it) {
    const auto& a = *it;
    auto shape = g.sizes().vec();
    shape[a.dim] = a.in;
    at::Tensor acc = at::zeros(shape, g.options());
    if (!a.weighted()) {
      acc.index_add_(a.dim, index_tensor(a.src0, g), g);
    } else {
      acc.index_add_(a.dim, index_tensor(a.src0, g), g * weight_tensor(a.w0, g, a.dim));
      acc.index_add_(a.dim, index_tensor(a.src1, g), g * weight_tensor(a.w1, g, a.dim));
    }
    g = acc;
  }
  TORCH_CHECK(g.sizes() == input_size, "resample backward: expected a gradient of size ", input_size, ", got ", g.sizes());
  return g.to(grad_output.scalar_type());
}

// ---- padding ----

std::vector<Axis> pad_axes(const at::Tensor& self, IA padding, bool reflect) {
  const int64_t k = static_cast<int64_t>(padding.size()) / 2;
  std::vector<Axis> axes;
  for (int64_t j = 0; j < k; ++j) {
    // padding lists (left, right) pairs from the last dimension backwards.
    const int64_t dim = self.dim() - 1 - j;
    const int64_t n = self.size(dim);
    const int64_t left = padding[2 * j], right = padding[2 * j + 1];
    Axis a{dim, n, {}, {}, {}, {}};
    for (int64_t i = 0; i < n + left + right; ++i) {
      int64_t s = i - left;
      if (reflect) {
        // Reflection about the edge elements (edges not repeated).
        s = s < 0 ? -s : s;
        s = s >= n ? 2 * (n - 1) - s : s;
      } else {
        s = std::clamp<int64_t>(s, 0, n - 1);
      }
      a.src0.push_back(s);
    }
    axes.push_back(std::move(a));
  }
  return axes;
}

template <int64_t K, bool Reflect>
at::Tensor pad(T self, IA padding) {
  // PyTorch's checks (padding length, empty dimensions, reflection within the input, output size).
  const auto shape = at::native::padding::pad_shape_check(self, padding, K, Reflect);
  auto out = resample_forward(self, pad_axes(self, padding, Reflect));
  TORCH_INTERNAL_ASSERT(out.sizes() == c10::IntArrayRef(shape));
  return out;
}
template <int64_t K, bool Reflect>
at::Tensor& pad_out(T self, IA padding, at::Tensor& out) {
  const auto r = pad<K, Reflect>(self, padding);
  at::native::resize_output(out, r.sizes());
  return out.copy_(r);
}
template <int64_t K, bool Reflect>
at::Tensor pad_backward(T grad_output, T self, IA padding) {
  return resample_backward(grad_output, self.sizes(), pad_axes(self, padding, Reflect));
}
template <int64_t K, bool Reflect>
at::Tensor& pad_backward_out(T grad_output, T self, IA padding, at::Tensor& grad_input) {
  const auto r = pad_backward<K, Reflect>(grad_output, self, padding);
  at::native::resize_output(grad_input, r.sizes());
  return grad_input.copy_(r);
}

// ---- upsampling ----

// Nearest: PyTorch's nearest_idx (float scale, floor, clamp) per output index.
std::vector<Axis> nearest_axes(IA input_size, IA output_size, std::initializer_list<OptD> scales) {
  std::vector<Axis> axes;
  const int64_t k = static_cast<int64_t>(output_size.size());
  auto sc = scales.begin();
  for (int64_t j = 0; j < k; ++j, ++sc) {
    const int64_t dim = 2 + j;
    Axis a{dim, input_size[dim], {}, {}, {}, {}};
    for (int64_t i = 0; i < output_size[j]; ++i) {
      a.src0.push_back(at::native::nearest_idx(i, input_size[dim], output_size[j], *sc));
    }
    axes.push_back(std::move(a));
  }
  return axes;
}

// Bilinear along one axis: PyTorch's source index and lambda rule (align_corners,
// scales), computed in the opmath type of the input (float, or double for double).
template <class F>
Axis linear_axis_in(int64_t dim, int64_t in, int64_t out, bool align_corners, OptD scale) {
  Axis a{dim, in, {}, {}, {}, {}};
  const F s = at::native::area_pixel_compute_scale<F>(in, out, align_corners, scale);
  for (int64_t i = 0; i < out; ++i) {
    int64_t i0 = 0, i1 = 0;
    F l0 = 0, l1 = 0;
    at::native::compute_source_index_and_lambda<F, F>(i0, i1, l0, l1, s, i, in, out, align_corners);
    a.src0.push_back(i0);
    a.src1.push_back(i1);
    a.w0.push_back(l0);
    a.w1.push_back(l1);
  }
  return a;
}
Axis linear_axis(bool dbl, int64_t dim, int64_t in, int64_t out, bool align_corners, OptD scale) {
  return dbl ? linear_axis_in<double>(dim, in, out, align_corners, scale)
             : linear_axis_in<float>(dim, in, out, align_corners, scale);
}

at::Tensor nearest2d(T self, IA output_size, OptD sh, OptD sw) {
  at::native::upsample_2d_common_check(self.sizes(), output_size);
  return resample_forward(self, nearest_axes(self.sizes(), output_size, {sh, sw}));
}
at::Tensor& nearest2d_out(T self, IA output_size, OptD sh, OptD sw, at::Tensor& out) {
  const auto r = nearest2d(self, output_size, sh, sw);
  at::native::resize_output(out, r.sizes());
  return out.copy_(r);
}
at::Tensor nearest2d_backward(T grad, IA output_size, IA input_size, OptD sh, OptD sw) {
  return resample_backward(grad, input_size, nearest_axes(input_size, output_size, {sh, sw}));
}
at::Tensor& nearest2d_backward_out(T grad, IA output_size, IA input_size, OptD sh, OptD sw, at::Tensor& gi) {
  const auto r = nearest2d_backward(grad, output_size, input_size, sh, sw);
  at::native::resize_output(gi, r.sizes());
  return gi.copy_(r);
}
at::Tensor nearest1d(T self, IA output_size, OptD s) {
  at::native::upsample_1d_common_check(self.sizes(), output_size);
  return resample_forward(self, nearest_axes(self.sizes(), output_size, {s}));
}
at::Tensor nearest1d_backward(T grad, IA output_size, IA input_size, OptD s) {
  return resample_backward(grad, input_size, nearest_axes(input_size, output_size, {s}));
}
at::Tensor nearest3d(T self, IA output_size, OptD sd, OptD sh, OptD sw) {
  at::native::upsample_3d_common_check(self.sizes(), output_size);
  return resample_forward(self, nearest_axes(self.sizes(), output_size, {sd, sh, sw}));
}
at::Tensor nearest3d_backward(T grad, IA output_size, IA input_size, OptD sd, OptD sh, OptD sw) {
  return resample_backward(grad, input_size, nearest_axes(input_size, output_size, {sd, sh, sw}));
}

std::vector<Axis> bilinear_axes(bool dbl, IA input_size, IA output_size, bool align_corners, OptD sh, OptD sw) {
  return {linear_axis(dbl, 2, input_size[2], output_size[0], align_corners, sh),
          linear_axis(dbl, 3, input_size[3], output_size[1], align_corners, sw)};
}
at::Tensor bilinear2d(T self, IA output_size, bool align_corners, OptD sh, OptD sw) {
  at::native::upsample_2d_common_check(self.sizes(), output_size);
  return resample_forward(self, bilinear_axes(self.scalar_type() == at::kDouble, self.sizes(), output_size, align_corners, sh, sw));
}
at::Tensor& bilinear2d_out(T self, IA output_size, bool align_corners, OptD sh, OptD sw, at::Tensor& out) {
  const auto r = bilinear2d(self, output_size, align_corners, sh, sw);
  at::native::resize_output(out, r.sizes());
  return out.copy_(r);
}
at::Tensor bilinear2d_backward(T grad, IA output_size, IA input_size, bool align_corners, OptD sh, OptD sw) {
  return resample_backward(grad, input_size,
                           bilinear_axes(grad.scalar_type() == at::kDouble, input_size, output_size, align_corners, sh, sw));
}
at::Tensor& bilinear2d_backward_out(T grad, IA output_size, IA input_size, bool align_corners, OptD sh, OptD sw,
                                    at::Tensor& gi) {
  const auto r = bilinear2d_backward(grad, output_size, input_size, align_corners, sh, sw);
  at::native::resize_output(gi, r.sizes());
  return gi.copy_(r);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
#define OXIDE_PAD(name, K, R)                                                          \
  m.impl(#name, TORCH_FN((pad<K, R>)));                                               \
  m.impl(#name ".out", TORCH_FN((pad_out<K, R>)));                                    \
  m.impl(#name "_backward", TORCH_FN((pad_backward<K, R>)));                          \
  m.impl(#name "_backward.grad_input", TORCH_FN((pad_backward_out<K, R>)))
  OXIDE_PAD(reflection_pad1d, 1, true);
  OXIDE_PAD(reflection_pad2d, 2, true);
  OXIDE_PAD(reflection_pad3d, 3, true);
  OXIDE_PAD(replication_pad1d, 1, false);
  OXIDE_PAD(replication_pad2d, 2, false);
  OXIDE_PAD(replication_pad3d, 3, false);
#undef OXIDE_PAD
  m.impl("upsample_nearest1d", TORCH_FN(nearest1d));
  m.impl("upsample_nearest1d_backward", TORCH_FN(nearest1d_backward));
  m.impl("upsample_nearest2d", TORCH_FN(nearest2d));
  m.impl("upsample_nearest2d.out", TORCH_FN(nearest2d_out));
  m.impl("upsample_nearest2d_backward", TORCH_FN(nearest2d_backward));
  m.impl("upsample_nearest2d_backward.grad_input", TORCH_FN(nearest2d_backward_out));
  m.impl("upsample_nearest3d", TORCH_FN(nearest3d));
  m.impl("upsample_nearest3d_backward", TORCH_FN(nearest3d_backward));
  m.impl("upsample_bilinear2d", TORCH_FN(bilinear2d));
  m.impl("upsample_bilinear2d.out", TORCH_FN(bilinear2d_out));
  m.impl("upsample_bilinear2d_backward", TORCH_FN(bilinear2d_backward));
  m.impl("upsample_bilinear2d_backward.grad_input", TORCH_FN(bilinear2d_backward_out));
}

} // namespace oxide
