// Discrete Fourier transforms on oxide: the three primitives every torch.fft function
// (fft, ifft, rfft, irfft, hfft, ihfft and their 2-d and n-d forms, stft, istft) reduces
// to: _fft_c2c, _fft_r2c and _fft_c2r, with their out= forms. PyTorch's composite
// frontends pad, trim and promote; its derivatives are these same operators, so autograd
// runs natively too. The transforms are oxide_kernels::ops::fft::spectral (rustfft).
//
// What is CPU's (aten/src/ATen/native/mkl/SpectralOps.cpp, the MKL build that torch's x86
// wheels use), restated here:
// - dtypes: complex64/complex128 for c2c and c2r, float32/float64 for r2c; the others
//   (complex32, float16, bfloat16 in direct calls; torch.fft's frontend already refuses
//   half types for a device other than CUDA) go to the counted CPU fallback, which raises
//   CPU's error;
// - the result's layout: the untransformed (batch) dimensions outermost, ordered by
//   decreasing input stride, then the transformed ones in the order the transform takes
//   them (sorted by decreasing input stride; r2c keeps the halved dimension last), densely
//   packed: `result_strides` below. An empty result is contiguous. c2r over several
//   dimensions takes the layout of the c2c over all but the last as its input's;
// - no dimension: c2c returns a copy;
// - out=: the result is computed, then `out` resized and copied into, as CPU does (so
//   out's dtype may differ and is converted).
// Dimensions must be non-negative, distinct and in range (the frontends pass them so;
// CPU asserts on others).
// Also here: unfold_backward, the one other operator istft needs (see below).
#include "common/device_check.h"
#include "common/launch.h"
#include "common/oxide.h"

#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/zeros.h>
#include <c10/core/WrapDimMinimal.h>
#include <c10/core/SymIntArrayRef.h>
#include <c10/util/ArrayRef.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <numeric>
#include <utility>
#include <vector>

namespace oxide {
namespace {

using T = const at::Tensor&;
using Dims = std::vector<int64_t>;

// Refuses dimensions that are negative, out of range, repeated, or none (when `need_one`).
void check_dims(const char* op, int64_t ndim, at::IntArrayRef dim, bool need_one) {
  TORCH_CHECK(!need_one || !dim.empty(), op, ": expected at least one dimension to transform");
  for (size_t i = 0; i < dim.size(); ++i) {
    TORCH_CHECK(dim[i] >= 0 && dim[i] < ndim && std::find(dim.begin(), dim.begin() + i, dim[i]) == dim.begin() + i, op,
                ": invalid dimensions ", dim, " for a tensor of ", ndim, " dimensions");
  }
}

void check_norm(const char* op, int64_t normalization) {
  TORCH_CHECK(normalization >= 0 && normalization <= 2, op, ": unknown normalization mode ", normalization);
}

// `dim` sorted by decreasing stride of the input (CPU's `_sort_dims`), all but the last
// when `keep_last` (the halved dimension of r2c stays last). std::sort as CPU: the order
// among equal strides is its order.
Dims sorted_dims(at::IntArrayRef strides, at::IntArrayRef dim, bool keep_last) {
  Dims d(dim.begin(), dim.end());
  std::sort(d.begin(), d.end() - (keep_last ? 1 : 0), [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  return d;
}

// The strides CPU gives a transform's result of `out_sizes` from an input of `in_strides`
// over `dim` (in the order the transform takes them): the batch dimensions outermost, by
// decreasing input stride, then `dim` in order, densely packed. The batch dimensions are
// ordered with std::partition and std::sort as CPU orders them, since among batch
// dimensions of equal stride (extents of 1) that order is what decides their strides.
Dims result_strides(at::IntArrayRef in_strides, at::IntArrayRef out_sizes, at::IntArrayRef dim) {
  const auto ndim = static_cast<int64_t>(out_sizes.size());
  Dims order(ndim);
  std::iota(order.begin(), order.end(), int64_t{0});
  std::vector<bool> transformed(ndim, false);
  for (const int64_t d : dim) {
    transformed[d] = true;
  }
  const auto batch_end = std::partition(order.begin(), order.end(), [&](int64_t d) { return !transformed[d]; });
  std::sort(order.begin(), batch_end, [&](int64_t a, int64_t b) { return in_strides[a] > in_strides[b]; });
  Dims strides(ndim);
  // The transformed dimensions, innermost last; an extent of 0 counts as 1, as in
  // contiguous strides.
  int64_t signal = 1;
  for (auto it = dim.rbegin(); it != dim.rend(); ++it) {
    strides[*it] = signal;
    signal *= std::max<int64_t>(out_sizes[*it], 1);
  }
  // The batch dimensions around them, the last in `order` innermost.
  int64_t batch = 1;
  for (auto it = std::make_reverse_iterator(batch_end); it != order.rend(); ++it) {
    strides[*it] = batch * signal;
    batch *= out_sizes[*it];
  }
  return strides;
}

OxideFftDims fft_dims(const Dims& dim, int64_t normalization) {
  return OxideFftDims{dim.data(), dim.size(), normalization};
}

bool has_zero(at::IntArrayRef sizes) { return std::find(sizes.begin(), sizes.end(), 0) != sizes.end(); }

at::Tensor fft_c2c(T self_in, c10::SymIntArrayRef dim_sym, int64_t normalization, bool forward) {
  const auto dtype = self_in.scalar_type();
  OXIDE_CHECK_DTYPE(dtype == at::kComplexFloat || dtype == at::kComplexDouble,
                    "_fft_c2c: no native oxide kernel for dtype ", dtype);
  const at::IntArrayRef dim = C10_AS_INTARRAYREF_SLOW(dim_sym);
  check_dims("_fft_c2c", self_in.dim(), dim, /*need_one=*/false);
  check_norm("_fft_c2c", normalization);
  if (dim.empty()) {
    return self_in.clone();
  }
  // The kernel reads raw memory: a conjugate or negative view is materialised first.
  const at::Tensor self = self_in.resolve_conj().resolve_neg();
  if (self.numel() == 0) {
    return at::empty(self.sizes(), self.options());
  }
  const Dims sorted = sorted_dims(self.strides(), dim, /*keep_last=*/false);
  auto out = at::empty_strided(self.sizes(), result_strides(self.strides(), self.sizes(), sorted), self.options());
  OXIDE_CHECK(oxide_fft_c2c(launch_on(out), out_arg(out), in_arg(self), fft_dims(sorted, normalization), forward));
  return out;
}

at::Tensor fft_r2c(T self_in, at::IntArrayRef dim, int64_t normalization, bool onesided) {
  const auto dtype = self_in.scalar_type();
  OXIDE_CHECK_DTYPE(dtype == at::kFloat || dtype == at::kDouble, "_fft_r2c: no native oxide kernel for dtype ", dtype);
  check_dims("_fft_r2c", self_in.dim(), dim, /*need_one=*/true);
  check_norm("_fft_r2c", normalization);
  const at::Tensor self = self_in.resolve_neg();
  const int64_t last = dim.back();
  Dims out_sizes(self.sizes().begin(), self.sizes().end());
  if (onesided) {
    out_sizes[last] = self.size(last) / 2 + 1;
  }
  const auto options = self.options().dtype(c10::toComplexType(dtype));
  if (has_zero(out_sizes)) {
    return at::empty(out_sizes, options);
  }
  TORCH_CHECK(self.size(last) > 0, "_fft_r2c: cannot transform a signal of 0 elements along dimension ", last);
  const Dims sorted = sorted_dims(self.strides(), dim, /*keep_last=*/true);
  auto out = at::empty_strided(out_sizes, result_strides(self.strides(), out_sizes, sorted), options);
  OXIDE_CHECK(oxide_fft_r2c(launch_on(out), out_arg(out), in_arg(self), fft_dims(sorted, normalization), onesided));
  return out;
}

at::Tensor fft_c2r(T self_in, at::IntArrayRef dim, int64_t normalization, c10::SymInt last_dim_size_sym) {
  const auto dtype = self_in.scalar_type();
  OXIDE_CHECK_DTYPE(dtype == at::kComplexFloat || dtype == at::kComplexDouble,
                    "_fft_c2r: no native oxide kernel for dtype ", dtype);
  check_dims("_fft_c2r", self_in.dim(), dim, /*need_one=*/true);
  check_norm("_fft_c2r", normalization);
  const int64_t n = last_dim_size_sym.expect_int();
  TORCH_CHECK(n >= 0, "_fft_c2r: expected a non-negative last_dim_size, got ", n);
  const at::Tensor self = self_in.resolve_conj().resolve_neg();
  const int64_t last = dim.back();
  Dims out_sizes(self.sizes().begin(), self.sizes().end());
  out_sizes[last] = n;
  const auto options = self.options().dtype(c10::toRealValueType(dtype));
  if (has_zero(out_sizes)) {
    return at::empty(out_sizes, options);
  }
  TORCH_CHECK(self.size(last) >= n / 2 + 1, "_fft_c2r: expected at least ", n / 2 + 1, " values along dimension ", last,
              " for last_dim_size ", n, ", got ", self.size(last));
  // CPU runs the c2c over all but the last dimension first and lays the result out from
  // that intermediate's strides; the kernel does both passes, so only the layout is
  // derived from the intermediate's.
  Dims layout_in(self.strides().begin(), self.strides().end());
  if (dim.size() > 1) {
    const Dims first = sorted_dims(self.strides(), dim.slice(0, dim.size() - 1), /*keep_last=*/false);
    layout_in = result_strides(self.strides(), self.sizes(), first);
  }
  auto out = at::empty_strided(out_sizes, result_strides(layout_in, out_sizes, at::IntArrayRef(&last, 1)), options);
  Dims order(dim.begin(), dim.end());
  OXIDE_CHECK(oxide_fft_c2r(launch_on(out), out_arg(out), in_arg(self), fft_dims(order, normalization)));
  return out;
}

// The out= forms compute the result, then resize `out` and copy it in, as CPU does.
at::Tensor& fft_c2c_out(T self, c10::SymIntArrayRef dim, int64_t normalization, bool forward, at::Tensor& out) {
  const at::Tensor result = fft_c2c(self, dim, normalization, forward);
  at::native::resize_output(out, result.sizes());
  return out.copy_(result);
}

at::Tensor& fft_r2c_out(T self, at::IntArrayRef dim, int64_t normalization, bool onesided, at::Tensor& out) {
  const at::Tensor result = fft_r2c(self, dim, normalization, onesided);
  at::native::resize_output(out, result.sizes());
  return out.copy_(result);
}

at::Tensor& fft_c2r_out(T self, at::IntArrayRef dim, int64_t normalization, c10::SymInt last_dim_size,
                        at::Tensor& out) {
  const at::Tensor result = fft_c2r(self, dim, normalization, std::move(last_dim_size));
  at::native::resize_output(out, result.sizes());
  return out.copy_(result);
}

// unfold's backward, which istft calls for its overlap-add (twice: the frames and the
// window envelope), so that istft runs natively too. PyTorch has no device-generic
// kernel for it. Position p of the input gathers grad[..., i, ..., k] over the windows i
// and offsets k with i * step + k = p. Split k = j * step + r (0 <= r < step): for one j
// the map (i, r) -> p is one-to-one, so its terms are one add_ into a view of the result
// (an unfold of window min(step, size - j * step) <= step, whose elements are distinct).
// ceil(size / step) launches instead of one per offset; the sums take the terms in order
// of j, so they may round differently from CPU's in the last bit.
at::Tensor unfold_backward(T grad, c10::SymIntArrayRef input_sizes_sym, int64_t dim, int64_t size, int64_t step) {
  const at::IntArrayRef input_sizes = C10_AS_INTARRAYREF_SLOW(input_sizes_sym);
  TORCH_CHECK(step > 0, "unfold_backward: step must be positive, got ", step);
  if (input_sizes.empty()) {
    // A 0-dim input unfolds to one window of size <= 1: its gradient is that window's sum.
    return grad.sum().reshape(input_sizes);
  }
  const int64_t d = c10::maybe_wrap_dim(dim, static_cast<int64_t>(input_sizes.size()));
  auto grad_input = at::zeros(input_sizes, grad.options());
  if (grad.numel() == 0) {
    return grad_input;
  }
  const int64_t windows = grad.size(d);
  for (int64_t j = 0; j * step < size; ++j) {
    const int64_t w = std::min(step, size - j * step);
    grad_input.narrow(d, j * step, (windows - 1) * step + w).unfold(d, w, step).add_(grad.narrow(-1, j * step, w));
  }
  return grad_input;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "_fft_c2c", TORCH_FN(fft_c2c));
  OXIDE_IMPL(m, "_fft_c2c.out", TORCH_FN(fft_c2c_out));
  OXIDE_IMPL(m, "_fft_r2c", TORCH_FN(fft_r2c));
  OXIDE_IMPL(m, "_fft_r2c.out", TORCH_FN(fft_r2c_out));
  OXIDE_IMPL(m, "_fft_c2r", TORCH_FN(fft_c2r));
  OXIDE_IMPL(m, "_fft_c2r.out", TORCH_FN(fft_c2r_out));
  OXIDE_IMPL(m, "unfold_backward", TORCH_FN(unfold_backward));
}

}  // namespace oxide
