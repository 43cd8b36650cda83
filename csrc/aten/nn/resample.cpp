// Reflection / replication padding (1-3d), nearest (1-3d), linear (1-3d) and
// bicubic (2d) upsampling,
// forward and backward, composed from native gather/scatter kernels.
//
// Each of these ops is separable: along every resampled dimension, output
// index i reads input index src[i] (padding, nearest) or a weighted pair of
// them (linear), or four clamped neighbours (bicubic). The forward is one index_select per dimension (times
// weights); the backward is its adjoint, one index_add_ per dimension in
// reverse order, which accumulates serially and so is deterministic. The
// index maps and weights come from PyTorch's own helpers (ATen/native/Padding.h,
// UpSample.h), so edge rules (align_corners, scales, the nearest rounding) match CPU.
#include "common/device_check.h"
#include "common/kernels.h"

#include <torch/library.h>

#include <ATen/TensorOperators.h>
#include <ATen/native/Padding.h>
#include <ATen/native/Resize.h>
#include <ATen/native/UpSample.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <array>
#include <vector>

namespace oxide {
namespace {

using T = const at::Tensor&;
using IA = at::IntArrayRef;
using OptD = std::optional<double>;

// One resampled dimension: output index i reads src[k][i] with weight w[k][i]
// for each tap k (one unweighted tap for padding and nearest, two for linear,
// four for cubic).
struct Axis {
  int64_t dim;
  int64_t in;
  std::vector<std::vector<int64_t>> src;
  std::vector<std::vector<double>> w;
  Axis(int64_t dim_, int64_t in_, size_t taps, bool weighted) : dim(dim_), in(in_), src(taps), w(weighted ? taps : 0) {}
  int64_t out() const { return static_cast<int64_t>(src[0].size()); }
  bool weighted() const { return !w.empty(); }
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
at::Tensor widened(const at::Tensor& x) { return at::isReducedFloatingType(x.scalar_type()) ? x.to(at::kFloat) : x; }

at::Tensor resample_forward(const at::Tensor& input, const std::vector<Axis>& axes) {
  at::Tensor x = widened(input);
  for (const auto& a : axes) {
    if (!a.weighted()) {
      x = x.index_select(a.dim, index_tensor(a.src[0], x));
      continue;
    }
    at::Tensor y;
    for (size_t k = 0; k < a.src.size(); ++k) {
      auto term = x.index_select(a.dim, index_tensor(a.src[k], x)) * weight_tensor(a.w[k], x, a.dim);
      y = k == 0 ? term : y + term;
    }
    x = y;
  }
  return x.to(input.scalar_type()).contiguous(input.suggest_memory_format());
}

at::Tensor resample_backward(const at::Tensor& grad_output, c10::IntArrayRef input_size,
                             const std::vector<Axis>& axes) {
  at::Tensor g = widened(grad_output);
  for (auto it = axes.rbegin(); it != axes.rend(); ++it) {
    const auto& a = *it;
    auto shape = g.sizes().vec();
    shape[a.dim] = a.in;
    at::Tensor acc = at::zeros(shape, g.options());
    for (size_t k = 0; k < a.src.size(); ++k) {
      acc.index_add_(a.dim, index_tensor(a.src[k], g), a.weighted() ? g * weight_tensor(a.w[k], g, a.dim) : g);
    }
    g = acc;
  }
  TORCH_CHECK(g.sizes() == input_size, "resample backward: expected a gradient of size ", input_size, ", got ",
              g.sizes());
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
    Axis a(dim, n, 1, false);
    for (int64_t i = 0; i < n + left + right; ++i) {
      int64_t s = i - left;
      if (reflect) {
        // Reflection about the edge elements (edges not repeated).
        s = s < 0 ? -s : s;
        s = s >= n ? 2 * (n - 1) - s : s;
      } else {
        s = std::clamp<int64_t>(s, 0, n - 1);
      }
      a.src[0].push_back(s);
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

// Nearest: PyTorch's nearest_idx (float scale, floor, clamp) per output index;
// nearest-exact its nearest_exact_idx (pixel centres, rounding half up).
std::vector<Axis> nearest_axes(IA input_size, IA output_size, std::initializer_list<OptD> scales,
                               at::native::nearest_idx_fn_t index = at::native::nearest_idx) {
  std::vector<Axis> axes;
  const int64_t k = static_cast<int64_t>(output_size.size());
  auto sc = scales.begin();
  for (int64_t j = 0; j < k; ++j, ++sc) {
    const int64_t dim = 2 + j;
    Axis a(dim, input_size[dim], 1, false);
    for (int64_t i = 0; i < output_size[j]; ++i) {
      a.src[0].push_back(index(i, input_size[dim], output_size[j], *sc));
    }
    axes.push_back(std::move(a));
  }
  return axes;
}

// Bilinear along one axis: PyTorch's source index and lambda rule (align_corners,
// scales), computed in the opmath type of the input (float, or double for double).
template <class F>
Axis linear_axis_in(int64_t dim, int64_t in, int64_t out, bool align_corners, OptD scale) {
  Axis a(dim, in, 2, true);
  const F s = at::native::area_pixel_compute_scale<F>(in, out, align_corners, scale);
  for (int64_t i = 0; i < out; ++i) {
    int64_t i0 = 0, i1 = 0;
    F l0 = 0, l1 = 0;
    at::native::compute_source_index_and_lambda<F, F>(i0, i1, l0, l1, s, i, in, out, align_corners);
    a.src[0].push_back(i0);
    a.src[1].push_back(i1);
    a.w[0].push_back(l0);
    a.w[1].push_back(l1);
  }
  return a;
}
Axis linear_axis(bool dbl, int64_t dim, int64_t in, int64_t out, bool align_corners, OptD scale) {
  return dbl ? linear_axis_in<double>(dim, in, out, align_corners, scale)
             : linear_axis_in<float>(dim, in, out, align_corners, scale);
}

// Bicubic along one axis: PyTorch's cubic source index (unclamped), its index
// and lambda guard, Keys' coefficients (A = -0.75) and taps clamped to the input.
template <class F>
Axis cubic_axis_in(int64_t dim, int64_t in, int64_t out, bool align_corners, OptD scale) {
  Axis a(dim, in, 4, true);
  const F s = at::native::area_pixel_compute_scale<F>(in, out, align_corners, scale);
  for (int64_t i = 0; i < out; ++i) {
    const F real = at::native::area_pixel_compute_source_index<F>(s, i, align_corners, /*cubic=*/true);
    int64_t i0 = 0;
    F t = 0;
    at::native::guard_index_and_lambda<F, F>(real, in, i0, t);
    F c[4];
    at::native::get_cubic_upsample_coefficients<F>(c, t);
    for (int k = 0; k < 4; ++k) {
      a.src[k].push_back(std::clamp<int64_t>(i0 - 1 + k, 0, in - 1));
      a.w[k].push_back(c[k]);
    }
  }
  return a;
}
Axis cubic_axis(bool dbl, int64_t dim, int64_t in, int64_t out, bool align_corners, OptD scale) {
  return dbl ? cubic_axis_in<double>(dim, in, out, align_corners, scale)
             : cubic_axis_in<float>(dim, in, out, align_corners, scale);
}

// Linear (1-3d) and bicubic (2d) upsampling: one axis per spatial dim, built by
// `make` (linear_axis or cubic_axis) with that dim's scale.
template <int N>
std::vector<Axis> interp_axes(Axis (*make)(bool, int64_t, int64_t, int64_t, bool, OptD), bool dbl, IA input_size,
                              IA output_size, bool align_corners, std::array<OptD, N> scales) {
  std::vector<Axis> axes;
  for (int j = 0; j < N; ++j) {
    axes.push_back(make(dbl, 2 + j, input_size[2 + j], output_size[j], align_corners, scales[j]));
  }
  return axes;
}

void check_common(int n, IA input_size, IA output_size) {
  if (n == 1) {
    at::native::upsample_1d_common_check(input_size, output_size);
  } else if (n == 2) {
    at::native::upsample_2d_common_check(input_size, output_size);
  } else {
    at::native::upsample_3d_common_check(input_size, output_size);
  }
}

// The weighted modes run for floating types only: their weights are fractions, which
// an integer computation would truncate to 0. Other dtypes go to the CPU fallback, where
// CPU computes uint8 (bilinear, bicubic) its own way and raises for the rest.
void check_interp_dtype(const at::Tensor& t, const char* name) {
  OXIDE_CHECK_DTYPE(at::isFloatingType(t.scalar_type()) && !at::isFloat8Type(t.scalar_type()), name, ": dtype ",
                    t.scalar_type(), " is not supported on oxide");
}

template <int N, bool Cubic>
at::Tensor interp_forward(T self, IA output_size, bool align_corners, std::array<OptD, N> scales) {
  check_common(N, self.sizes(), output_size);
  check_interp_dtype(self, Cubic ? "upsample_bicubic2d_channels_first" : "upsample_linear");
  if (self.numel() == 0) {
    auto shape = self.sizes().vec();
    std::copy(output_size.begin(), output_size.end(), shape.end() - N);
    return at::empty(shape, self.options());
  }
  return resample_forward(self, interp_axes<N>(Cubic ? cubic_axis : linear_axis, self.scalar_type() == at::kDouble,
                                               self.sizes(), output_size, align_corners, scales));
}
template <int N, bool Cubic>
at::Tensor interp_backward(T grad, IA output_size, IA input_size, bool align_corners, std::array<OptD, N> scales) {
  check_common(N, input_size, output_size);
  TORCH_CHECK(grad.dim() == N + 2, "Expected grad_output to be a tensor of dimension ", N + 2, " but got: dimension ",
              grad.dim());
  for (int j = 0; j < N + 2; ++j) {
    const int64_t want = j < 2 ? input_size[j] : output_size[j - 2];
    TORCH_CHECK(grad.size(j) == want, "Expected grad_output to have the same shape as output; output.size(", j,
                ") = ", want, " but got grad_output.size(", j, ") = ", grad.size(j));
  }
  if (grad.numel() == 0) {
    return at::zeros(input_size, grad.options());
  }
  return resample_backward(grad, input_size,
                           interp_axes<N>(Cubic ? cubic_axis : linear_axis, grad.scalar_type() == at::kDouble,
                                          input_size, output_size, align_corners, scales));
}

at::Tensor linear1d(T self, IA os, bool ac, OptD s) { return interp_forward<1, false>(self, os, ac, {s}); }
at::Tensor& linear1d_out(T self, IA os, bool ac, OptD s, at::Tensor& out) {
  const auto r = linear1d(self, os, ac, s);
  at::native::resize_output(out, r.sizes());
  return out.copy_(r);
}
at::Tensor linear1d_backward(T grad, IA os, IA is, bool ac, OptD s) {
  return interp_backward<1, false>(grad, os, is, ac, {s});
}
at::Tensor& linear1d_backward_out(T grad, IA os, IA is, bool ac, OptD s, at::Tensor& gi) {
  const auto r = linear1d_backward(grad, os, is, ac, s);
  at::native::resize_output(gi, r.sizes());
  return gi.copy_(r);
}
at::Tensor trilinear3d(T self, IA os, bool ac, OptD sd, OptD sh, OptD sw) {
  return interp_forward<3, false>(self, os, ac, {sd, sh, sw});
}
at::Tensor& trilinear3d_out(T self, IA os, bool ac, OptD sd, OptD sh, OptD sw, at::Tensor& out) {
  const auto r = trilinear3d(self, os, ac, sd, sh, sw);
  at::native::resize_output(out, r.sizes());
  return out.copy_(r);
}
at::Tensor trilinear3d_backward(T grad, IA os, IA is, bool ac, OptD sd, OptD sh, OptD sw) {
  return interp_backward<3, false>(grad, os, is, ac, {sd, sh, sw});
}
at::Tensor& trilinear3d_backward_out(T grad, IA os, IA is, bool ac, OptD sd, OptD sh, OptD sw, at::Tensor& gi) {
  const auto r = trilinear3d_backward(grad, os, is, ac, sd, sh, sw);
  at::native::resize_output(gi, r.sizes());
  return gi.copy_(r);
}
at::Tensor bicubic2d(T self, IA os, bool ac, OptD sh, OptD sw) {
  return interp_forward<2, true>(self, os, ac, {sh, sw});
}
at::Tensor& bicubic2d_out(T self, IA os, bool ac, OptD sh, OptD sw, at::Tensor& out) {
  const auto r = bicubic2d(self, os, ac, sh, sw);
  at::native::resize_output(out, r.sizes());
  return out.copy_(r);
}
at::Tensor bicubic2d_backward(T grad, IA os, IA is, bool ac, OptD sh, OptD sw) {
  return interp_backward<2, true>(grad, os, is, ac, {sh, sw});
}
at::Tensor& bicubic2d_backward_out(T grad, IA os, IA is, bool ac, OptD sh, OptD sw, at::Tensor& gi) {
  const auto r = bicubic2d_backward(grad, os, is, ac, sh, sw);
  at::native::resize_output(gi, r.sizes());
  return gi.copy_(r);
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
constexpr auto kExact = at::native::nearest_exact_idx;
at::Tensor nearest_exact1d(T self, IA output_size, OptD s) {
  at::native::upsample_1d_common_check(self.sizes(), output_size);
  return resample_forward(self, nearest_axes(self.sizes(), output_size, {s}, kExact));
}
at::Tensor nearest_exact1d_backward(T grad, IA output_size, IA input_size, OptD s) {
  return resample_backward(grad, input_size, nearest_axes(input_size, output_size, {s}, kExact));
}
at::Tensor nearest_exact2d(T self, IA output_size, OptD sh, OptD sw) {
  at::native::upsample_2d_common_check(self.sizes(), output_size);
  return resample_forward(self, nearest_axes(self.sizes(), output_size, {sh, sw}, kExact));
}
at::Tensor nearest_exact2d_backward(T grad, IA output_size, IA input_size, OptD sh, OptD sw) {
  return resample_backward(grad, input_size, nearest_axes(input_size, output_size, {sh, sw}, kExact));
}
at::Tensor nearest_exact3d(T self, IA output_size, OptD sd, OptD sh, OptD sw) {
  at::native::upsample_3d_common_check(self.sizes(), output_size);
  return resample_forward(self, nearest_axes(self.sizes(), output_size, {sd, sh, sw}, kExact));
}
at::Tensor nearest_exact3d_backward(T grad, IA output_size, IA input_size, OptD sd, OptD sh, OptD sw) {
  return resample_backward(grad, input_size, nearest_axes(input_size, output_size, {sd, sh, sw}, kExact));
}

std::vector<Axis> bilinear_axes(bool dbl, IA input_size, IA output_size, bool align_corners, OptD sh, OptD sw) {
  return {linear_axis(dbl, 2, input_size[2], output_size[0], align_corners, sh),
          linear_axis(dbl, 3, input_size[3], output_size[1], align_corners, sw)};
}
at::Tensor bilinear2d(T self, IA output_size, bool align_corners, OptD sh, OptD sw) {
  at::native::upsample_2d_common_check(self.sizes(), output_size);
  check_interp_dtype(self, "upsample_bilinear2d");
  return resample_forward(
      self, bilinear_axes(self.scalar_type() == at::kDouble, self.sizes(), output_size, align_corners, sh, sw));
}
at::Tensor& bilinear2d_out(T self, IA output_size, bool align_corners, OptD sh, OptD sw, at::Tensor& out) {
  const auto r = bilinear2d(self, output_size, align_corners, sh, sw);
  at::native::resize_output(out, r.sizes());
  return out.copy_(r);
}
at::Tensor bilinear2d_backward(T grad, IA output_size, IA input_size, bool align_corners, OptD sh, OptD sw) {
  return resample_backward(
      grad, input_size,
      bilinear_axes(grad.scalar_type() == at::kDouble, input_size, output_size, align_corners, sh, sw));
}
at::Tensor& bilinear2d_backward_out(T grad, IA output_size, IA input_size, bool align_corners, OptD sh, OptD sw,
                                    at::Tensor& gi) {
  const auto r = bilinear2d_backward(grad, output_size, input_size, align_corners, sh, sw);
  at::native::resize_output(gi, r.sizes());
  return gi.copy_(r);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
#define OXIDE_PAD(name, K, R)                                       \
  OXIDE_IMPL(m, #name, TORCH_FN((pad<K, R>)));                      \
  OXIDE_IMPL(m, #name ".out", TORCH_FN((pad_out<K, R>)));           \
  OXIDE_IMPL(m, #name "_backward", TORCH_FN((pad_backward<K, R>))); \
  OXIDE_IMPL(m, #name "_backward.grad_input", TORCH_FN((pad_backward_out<K, R>)))
  OXIDE_PAD(reflection_pad1d, 1, true);
  OXIDE_PAD(reflection_pad2d, 2, true);
  OXIDE_PAD(reflection_pad3d, 3, true);
  OXIDE_PAD(replication_pad1d, 1, false);
  OXIDE_PAD(replication_pad2d, 2, false);
  OXIDE_PAD(replication_pad3d, 3, false);
#undef OXIDE_PAD
  OXIDE_IMPL(m, "upsample_nearest1d", TORCH_FN(nearest1d));
  OXIDE_IMPL(m, "upsample_nearest1d_backward", TORCH_FN(nearest1d_backward));
  OXIDE_IMPL(m, "upsample_nearest2d", TORCH_FN(nearest2d));
  OXIDE_IMPL(m, "upsample_nearest2d.out", TORCH_FN(nearest2d_out));
  OXIDE_IMPL(m, "upsample_nearest2d_backward", TORCH_FN(nearest2d_backward));
  OXIDE_IMPL(m, "upsample_nearest2d_backward.grad_input", TORCH_FN(nearest2d_backward_out));
  OXIDE_IMPL(m, "upsample_nearest3d", TORCH_FN(nearest3d));
  OXIDE_IMPL(m, "upsample_nearest3d_backward", TORCH_FN(nearest3d_backward));
  OXIDE_IMPL(m, "_upsample_nearest_exact1d", TORCH_FN(nearest_exact1d));
  OXIDE_IMPL(m, "_upsample_nearest_exact1d_backward", TORCH_FN(nearest_exact1d_backward));
  OXIDE_IMPL(m, "_upsample_nearest_exact2d", TORCH_FN(nearest_exact2d));
  OXIDE_IMPL(m, "_upsample_nearest_exact2d_backward", TORCH_FN(nearest_exact2d_backward));
  OXIDE_IMPL(m, "_upsample_nearest_exact3d", TORCH_FN(nearest_exact3d));
  OXIDE_IMPL(m, "_upsample_nearest_exact3d_backward", TORCH_FN(nearest_exact3d_backward));
  OXIDE_IMPL(m, "upsample_bilinear2d", TORCH_FN(bilinear2d));
  OXIDE_IMPL(m, "upsample_bilinear2d.out", TORCH_FN(bilinear2d_out));
  OXIDE_IMPL(m, "upsample_bilinear2d_backward", TORCH_FN(bilinear2d_backward));
  OXIDE_IMPL(m, "upsample_bilinear2d_backward.grad_input", TORCH_FN(bilinear2d_backward_out));
  OXIDE_IMPL(m, "upsample_linear1d", TORCH_FN(linear1d));
  OXIDE_IMPL(m, "upsample_linear1d.out", TORCH_FN(linear1d_out));
  OXIDE_IMPL(m, "upsample_linear1d_backward", TORCH_FN(linear1d_backward));
  OXIDE_IMPL(m, "upsample_linear1d_backward.grad_input", TORCH_FN(linear1d_backward_out));
  OXIDE_IMPL(m, "upsample_trilinear3d", TORCH_FN(trilinear3d));
  OXIDE_IMPL(m, "upsample_trilinear3d.out", TORCH_FN(trilinear3d_out));
  OXIDE_IMPL(m, "upsample_trilinear3d_backward", TORCH_FN(trilinear3d_backward));
  OXIDE_IMPL(m, "upsample_trilinear3d_backward.grad_input", TORCH_FN(trilinear3d_backward_out));
  OXIDE_IMPL(m, "upsample_bicubic2d", TORCH_FN(bicubic2d));
  OXIDE_IMPL(m, "upsample_bicubic2d.out", TORCH_FN(bicubic2d_out));
  OXIDE_IMPL(m, "upsample_bicubic2d_backward", TORCH_FN(bicubic2d_backward));
  OXIDE_IMPL(m, "upsample_bicubic2d_backward.grad_input", TORCH_FN(bicubic2d_backward_out));
}

}  // namespace oxide
