// Pooling on oxide: max pooling with indices, average pooling, adaptive
// average and max pooling, 2-d and 3-d, forward and backward. Loops in Rust
// (oxide_kernels::ops::nn::pool, through oxide_max_pool / oxide_max_pool_backward /
// oxide_avg_pool).
//
// Structured ops (max_pool2d_with_indices, avg_pool2d/3d, adaptive_max_pool2d/3d
// and their backwards) subclass PyTorch's exported meta classes, whose CPU
// impls call kCPU stubs: the meta function checks arguments and allocates the
// outputs (in the input's memory format) exactly as on CPU, the impl here runs
// the Rust loop. The others (max_pool3d_with_indices, _adaptive_avg_pool2d/3d
// and backwards) are not structured; their CPU argument checks are repeated
// with PyTorch's shared helpers (Pool.h, PoolingChecks.h).
//
// The kernels take contiguous planes: inputs are made contiguous, and an
// output PyTorch wants in another layout (channels-last) is computed into a
// contiguous temporary and copied.
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/launch.h"
#include "common/structured.h"
#include "aten/nn/contiguous.h"

#include <ATen/native/AdaptivePooling.h>
#include <ATen/native/Pool.h>
#include <ATen/native/PoolingChecks.h>
#include <ATen/ops/adaptive_max_pool2d_backward_meta.h>
#include <ATen/ops/adaptive_max_pool2d_meta.h>
#include <ATen/ops/adaptive_max_pool3d_backward_meta.h>
#include <ATen/ops/adaptive_max_pool3d_meta.h>
#include <ATen/ops/avg_pool2d_backward_meta.h>
#include <ATen/ops/avg_pool2d_meta.h>
#include <ATen/ops/avg_pool3d_backward_meta.h>
#include <ATen/ops/avg_pool3d_meta.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/max_pool2d_with_indices_backward_meta.h>
#include <ATen/ops/max_pool2d_with_indices_meta.h>
#include <torch/library.h>

#include <array>

namespace oxide {
namespace {

using Triple = std::array<int64_t, 3>;

// PyTorch's expansion of a pooling argument of `n` (2 or 3) spatial dims:
// one value for all, or one per dim; `fallback` when empty (stride: the kernel).
// Returned as (depth, height, width) with `unit` for the depth of 2-d pooling.
Triple expand(c10::IntArrayRef v, int n, int64_t unit, const Triple& fallback) {
  Triple r{unit, unit, unit};
  for (int i = 0; i < n; ++i) {
    r[3 - n + i] = v.empty() ? fallback[3 - n + i] : v[v.size() == 1 ? 0 : i];
  }
  return r;
}

// The trailing `n` spatial extents of `t` as (depth, height, width), depth 1 for n = 2.
Triple extents(const at::Tensor& t, int n) {
  Triple r{1, 1, 1};
  for (int i = 0; i < n; ++i) {
    r[3 - n + i] = t.size(t.dim() - n + i);
  }
  return r;
}

// Product of the dims before the `n` spatial ones (batch x channels).
int64_t planes(const at::Tensor& t, int n) {
  int64_t p = 1;
  for (int64_t i = 0; i < t.dim() - n; ++i) {
    p *= t.size(i);
  }
  return p;
}

struct Window {
  Triple kernel{1, 1, 1}, stride{1, 1, 1}, padding{0, 0, 0}, dilation{1, 1, 1};
  bool adaptive = false;
};

// Fixed windows from PyTorch's arguments for `n` spatial dims.
Window fixed(int n, c10::IntArrayRef kernel_size, c10::IntArrayRef stride, c10::IntArrayRef padding,
             c10::IntArrayRef dilation) {
  Window w;
  w.kernel = expand(kernel_size, n, 1, {});
  w.stride = expand(stride, n, 1, w.kernel);
  w.padding = expand(padding, n, 0, {0, 0, 0});
  // avg_pool passes no dilation: 1.
  w.dilation = expand(dilation, n, 1, {1, 1, 1});
  return w;
}

Window adaptive() {
  Window w;
  w.adaptive = true;
  return w;
}

OxidePoolGeometry geometry(const at::Tensor& input, const at::Tensor& output, int n, const Window& w) {
  OxidePoolGeometry g{};
  g.planes = planes(input, n);
  const auto in = extents(input, n);
  const auto out = extents(output, n);
  for (int k = 0; k < 3; ++k) {
    g.input[k] = in[k];
    g.output[k] = out[k];
    g.kernel[k] = w.kernel[k];
    g.stride[k] = w.stride[k];
    g.padding[k] = w.padding[k];
    g.dilation[k] = w.dilation[k];
  }
  g.adaptive = w.adaptive;
  return g;
}

// Max pooling of `input` over `n` spatial dims into `output` and `indices` (allocated by the caller).
void max_pool(const at::Tensor& input_, const at::Tensor& output, const at::Tensor& indices, int n, const Window& w) {
  if (output.numel() == 0) {
    return;
  }
  const auto input = input_.contiguous();
  const auto g = geometry(input, output, n, w);
  into_contiguous(output, [&](const at::Tensor& out) {
    into_contiguous(indices, [&](const at::Tensor& idx) {
      OXIDE_CHECK(oxide_max_pool(launch_on(out), out_arg(out), out_arg(idx), in_arg(input), &g));
    });
  });
}

// Gradient of max pooling: `grad_output` scattered to `grad_input` through `indices`.
void max_pool_backward(const at::Tensor& grad_input, const at::Tensor& grad_output_, const at::Tensor& indices_,
                       int n) {
  if (grad_input.numel() == 0) {
    return;
  }
  TORCH_CHECK(indices_.scalar_type() == at::kLong, "max pooling backward: expected indices of dtype Long, got ",
              indices_.scalar_type());
  const auto grad_output = grad_output_.to(grad_input.scalar_type()).contiguous();
  const auto indices = indices_.contiguous();
  into_contiguous(grad_input, [&](const at::Tensor& gi) {
    OXIDE_CHECK(oxide_max_pool_backward(launch_on(gi), out_arg(gi), in_arg(grad_output), in_arg(indices),
                                        static_cast<size_t>(n)));
  });
}

// Average pooling forward (`backward` false: input -> output) or backward
// (grad_output -> grad_input); `volumes` is the tensor with the input extents.
void avg_pool(const at::Tensor& src_, const at::Tensor& dst, const at::Tensor& volumes, const at::Tensor& pooled, int n,
              const Window& w, bool count_include_pad, std::optional<int64_t> divisor, bool backward) {
  if (dst.numel() == 0) {
    return;
  }
  const auto src = src_.to(dst.scalar_type()).contiguous();
  const auto g = geometry(volumes, pooled, n, w);
  into_contiguous(dst, [&](const at::Tensor& d) {
    OXIDE_CHECK(oxide_avg_pool(launch_on(d), out_arg(d), in_arg(src), &g, backward, count_include_pad,
                               divisor.has_value(), divisor.value_or(0)));
  });
}

// CPU's avg_pool3d loops have no float16/bfloat16 instantiation; raise as its dispatch does.
void check_avg_pool3d_dtype(const at::Tensor& t, const char* name) {
  TORCH_CHECK_NOT_IMPLEMENTED(t.scalar_type() != at::kHalf && t.scalar_type() != at::kBFloat16, "\"", name,
                              "\" not implemented for '", t.scalar_type(), "'");
}

// CPU's adaptive pooling loops are instantiated for floating types only.
void check_floating(const at::Tensor& t, const char* name) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(t.scalar_type()), "\"", name, "\" not implemented for '",
                              t.scalar_type(), "'");
}

// ---- structured ops: PyTorch's meta functions, Rust loops ----

struct MaxPool2d : at::meta::structured_max_pool2d_with_indices {
  void impl(const at::Tensor& input, c10::IntArrayRef kernel_size, c10::IntArrayRef stride, c10::IntArrayRef padding,
            c10::IntArrayRef dilation, bool /*ceil_mode*/, const at::Tensor& output, const at::Tensor& indices) {
    max_pool(input, output, indices, 2, fixed(2, kernel_size, stride, padding, dilation));
  }
};

struct MaxPool2dBackward : at::meta::structured_max_pool2d_with_indices_backward {
  void impl(const at::Tensor& grad_output, const at::Tensor& /*input*/, c10::IntArrayRef, c10::IntArrayRef,
            c10::IntArrayRef, c10::IntArrayRef, bool, const at::Tensor& indices, const at::Tensor& grad_input) {
    max_pool_backward(grad_input, grad_output, indices, 2);
  }
};

template <class Meta, int N>
struct AvgPool : Meta {
  void impl(const at::Tensor& input, c10::IntArrayRef kernel_size, c10::IntArrayRef stride, c10::IntArrayRef padding,
            bool /*ceil_mode*/, bool count_include_pad, std::optional<int64_t> divisor_override,
            const at::Tensor& output) {
    if constexpr (N == 3) {
      check_avg_pool3d_dtype(input, "avg_pool3d_out_frame");
    }
    avg_pool(input, output, input, output, N, fixed(N, kernel_size, stride, padding, {}), count_include_pad,
             divisor_override, /*backward=*/false);
  }
};
using AvgPool2d = AvgPool<at::meta::structured_avg_pool2d, 2>;
using AvgPool3d = AvgPool<at::meta::structured_avg_pool3d, 3>;

template <class Meta, int N>
struct AvgPoolBackward : Meta {
  void impl(const at::Tensor& grad_output, const at::Tensor& input, c10::IntArrayRef kernel_size,
            c10::IntArrayRef stride, c10::IntArrayRef padding, bool /*ceil_mode*/, bool count_include_pad,
            std::optional<int64_t> divisor_override, const at::Tensor& grad_input) {
    if constexpr (N == 3) {
      check_avg_pool3d_dtype(input, "avg_pool3d_backward_out_frame");
    }
    avg_pool(grad_output, grad_input, input, grad_output, N, fixed(N, kernel_size, stride, padding, {}),
             count_include_pad, divisor_override, /*backward=*/true);
  }
};
using AvgPool2dBackward = AvgPoolBackward<at::meta::structured_avg_pool2d_backward, 2>;
using AvgPool3dBackward = AvgPoolBackward<at::meta::structured_avg_pool3d_backward, 3>;

template <class Meta, int N>
struct AdaptiveMaxPool : Meta {
  void impl(const at::Tensor& input, c10::IntArrayRef /*output_size*/, const at::Tensor& output,
            const at::Tensor& indices) {
    check_floating(input, N == 2 ? "adaptive_max_pool2d" : "adaptive_max_pool3d_cpu");
    max_pool(input, output, indices, N, adaptive());
  }
};
using AdaptiveMaxPool2d = AdaptiveMaxPool<at::meta::structured_adaptive_max_pool2d, 2>;
using AdaptiveMaxPool3d = AdaptiveMaxPool<at::meta::structured_adaptive_max_pool3d, 3>;

template <class Meta, int N>
struct AdaptiveMaxPoolBackward : Meta {
  void impl(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& indices,
            const at::Tensor& grad_input) {
    check_floating(input, N == 2 ? "adaptive_max_pool2d_backward" : "adaptive_max_pool3d_backward");
    max_pool_backward(grad_input, grad_output, indices, N);
  }
};
using AdaptiveMaxPool2dBackward = AdaptiveMaxPoolBackward<at::meta::structured_adaptive_max_pool2d_backward, 2>;
using AdaptiveMaxPool3dBackward = AdaptiveMaxPoolBackward<at::meta::structured_adaptive_max_pool3d_backward, 3>;

// ---- max_pool3d_with_indices (not structured): CPU's checks, then the shared loop ----

struct Pool3dArgs {
  Window w;
  int64_t nslices, itime, iheight, iwidth;
};

Pool3dArgs max_pool3d_args(const at::Tensor& input, c10::IntArrayRef kernel_size, c10::IntArrayRef stride,
                           c10::IntArrayRef padding, c10::IntArrayRef dilation) {
  TORCH_CHECK(kernel_size.size() == 1 || kernel_size.size() == 3,
              "max_pool3d: kernel_size must either be a single int, or a tuple of three ints")
  TORCH_CHECK(stride.empty() || stride.size() == 1 || stride.size() == 3,
              "max_pool3d: stride must either be omitted, a single int, or a tuple of three ints")
  TORCH_CHECK(padding.size() == 1 || padding.size() == 3,
              "max_pool3d: padding must either be a single int, or a tuple of three ints");
  TORCH_CHECK(dilation.size() == 1 || dilation.size() == 3,
              "max_pool3d: dilation must be either a single int, or a tuple of three ints");
  TORCH_CHECK(input.dim() == 4 || input.dim() == 5, "non-empty 4D or 5D (batch mode) tensor expected for input");
  const auto w = fixed(3, kernel_size, stride, padding, dilation);
  for (const auto* v : {&w.kernel, &w.stride, &w.padding, &w.dilation}) {
    for (const auto x : *v) {
      (void)at::native::safe_downcast<int, int64_t>(x);
    }
  }
  return {w, input.size(-4), input.size(-3), input.size(-2), input.size(-1)};
}

void max_pool3d_shape_check(const at::Tensor& input, const Pool3dArgs& a, const Triple& out, const char* fn) {
  const auto& w = a.w;
  at::native::pool3d_shape_check(input, a.nslices, w.kernel[0], w.kernel[1], w.kernel[2], w.stride[0], w.stride[1],
                                 w.stride[2], w.padding[0], w.padding[1], w.padding[2], w.dilation[0], w.dilation[1],
                                 w.dilation[2], a.itime, a.iheight, a.iwidth, out[0], out[1], out[2], fn);
}

std::tuple<at::Tensor&, at::Tensor&> max_pool3d_out(const at::Tensor& input, c10::IntArrayRef kernel_size,
                                                    c10::IntArrayRef stride, c10::IntArrayRef padding,
                                                    c10::IntArrayRef dilation, bool ceil_mode, at::Tensor& output,
                                                    at::Tensor& indices) {
  const auto a = max_pool3d_args(input, kernel_size, stride, padding, dilation);
  Triple out{};
  const Triple in{a.itime, a.iheight, a.iwidth};
  for (int k = 0; k < 3; ++k) {
    out[k] = at::native::pooling_output_shape<int64_t>(in[k], a.w.kernel[k], a.w.padding[k], a.w.stride[k],
                                                       a.w.dilation[k], ceil_mode);
  }
  max_pool3d_shape_check(input, a, out, "max_pool3d_with_indices_out_cpu_template()");
  std::vector<int64_t> sizes(input.sizes().begin(), input.sizes().end() - 3);
  sizes.insert(sizes.end(), out.begin(), out.end());
  const auto format = input.dim() == 5 ? input.suggest_memory_format() : at::MemoryFormat::Contiguous;
  output.resize_(sizes, format);
  indices.resize_(sizes, format);
  max_pool(input, output, indices, 3, a.w);
  return {output, indices};
}

std::tuple<at::Tensor, at::Tensor> max_pool3d(const at::Tensor& input, c10::IntArrayRef kernel_size,
                                              c10::IntArrayRef stride, c10::IntArrayRef padding,
                                              c10::IntArrayRef dilation, bool ceil_mode) {
  auto output = at::empty({0}, input.options());
  auto indices = at::empty({0}, input.options().dtype(at::kLong));
  max_pool3d_out(input, kernel_size, stride, padding, dilation, ceil_mode, output, indices);
  return {output, indices};
}

at::Tensor& max_pool3d_backward_out(const at::Tensor& grad_output, const at::Tensor& input,
                                    c10::IntArrayRef kernel_size, c10::IntArrayRef stride, c10::IntArrayRef padding,
                                    c10::IntArrayRef dilation, bool /*ceil_mode*/, const at::Tensor& indices,
                                    at::Tensor& grad_input) {
  const auto a = max_pool3d_args(input, kernel_size, stride, padding, dilation);
  TORCH_CHECK(grad_output.dim() == input.dim(), "max_pool3d_with_indices_backward(): expected grad_output of ",
              input.dim(), " dims, got ", grad_output.sizes());
  const auto& w = a.w;
  at::native::pool3d_backward_shape_check(input, grad_output, indices, a.nslices, w.kernel[0], w.kernel[1], w.kernel[2],
                                          w.stride[0], w.stride[1], w.stride[2], w.padding[0], w.padding[1],
                                          w.padding[2], w.dilation[0], w.dilation[1], w.dilation[2], a.itime, a.iheight,
                                          a.iwidth, grad_output.size(-3), grad_output.size(-2), grad_output.size(-1),
                                          "max_pool3d_with_indices_backward_out_cpu_template()");
  grad_input.resize_(input.sizes(), input.dim() == 5 ? input.suggest_memory_format() : at::MemoryFormat::Contiguous);
  max_pool_backward(grad_input, grad_output, indices, 3);
  return grad_input;
}

at::Tensor max_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& input, c10::IntArrayRef kernel_size,
                               c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
                               bool ceil_mode, const at::Tensor& indices) {
  auto grad_input = at::empty({0}, input.options());
  max_pool3d_backward_out(grad_output, input, kernel_size, stride, padding, dilation, ceil_mode, indices, grad_input);
  return grad_input;
}

// ---- _adaptive_avg_pool2d/3d (not structured) ----

template <int N>
at::Tensor& adaptive_avg_pool_out(const at::Tensor& input, c10::IntArrayRef output_size, at::Tensor& output) {
  const char* fn = N == 2 ? "adaptive_avg_pool2d()" : "adaptive_avg_pool3d()";
  TORCH_CHECK(static_cast<int>(output_size.size()) == N,
              N == 2 ? "adaptive_avg_pool2d: output_size must be 2" : "adaptive_avg_pool3d: output_size must be 3");
  TORCH_CHECK(input.dim() == N + 1 || input.dim() == N + 2, fn, ": Expected ", N + 1, "D or ", N + 2,
              "D tensor, but got ", input.sizes());
  at::native::check_non_empty_dims(input, input.dim() == N + 2 ? 1 : 0, fn, "input");
  for (const auto s : output_size) {
    TORCH_CHECK(s >= 0, fn, ": elements of output_size must be greater than or equal to 0 but got ", output_size);
  }
  TORCH_CHECK(input.dtype() == output.dtype(), "expected dtype ", input.dtype(), " for `output` but got dtype ",
              output.dtype());
  check_floating(input, N == 2 ? "adaptive_avg_pool2d" : "adaptive_avg_pool3d_cpu");
  std::vector<int64_t> sizes(input.sizes().begin(), input.sizes().end() - N);
  sizes.insert(sizes.end(), output_size.begin(), output_size.end());
  // CPU keeps channels-last for 2-d (batched) pooling and writes 3-d results contiguous.
  const auto format = N == 2 && input.dim() == 4 ? input.suggest_memory_format() : at::MemoryFormat::Contiguous;
  output.resize_(sizes, format);
  avg_pool(input, output, input, output, N, adaptive(), false, std::nullopt, /*backward=*/false);
  return output;
}

template <int N>
at::Tensor adaptive_avg_pool(const at::Tensor& input, c10::IntArrayRef output_size) {
  auto output = at::empty({0}, input.options());
  return adaptive_avg_pool_out<N>(input, output_size, output);
}

template <int N>
at::Tensor& adaptive_avg_pool_backward_out(const at::Tensor& grad_output, const at::Tensor& input,
                                           at::Tensor& grad_input) {
  const char* fn = N == 2 ? "adaptive_avg_pool2d_backward" : "adaptive_avg_pool3d_backward";
  at::native::adaptive_pool_empty_output_check(grad_output, fn);
  TORCH_CHECK(input.dim() == N + 1 || input.dim() == N + 2, fn, "(): Expected ", N + 1, "D or ", N + 2,
              "D tensor, but got ", input.sizes());
  TORCH_CHECK(grad_output.dim() == input.dim(), fn, "(): Expected grad_output of ", input.dim(), " dims, but got ",
              grad_output.sizes());
  TORCH_CHECK(input.dtype() == grad_output.dtype(), "expected dtype ", input.dtype(),
              " for `grad_output` but got dtype ", grad_output.dtype());
  TORCH_CHECK(input.dtype() == grad_input.dtype(), "expected dtype ", input.dtype(), " for `grad_input` but got dtype ",
              grad_input.dtype());
  check_floating(input, fn);
  const auto format = N == 2 && input.dim() == 4 ? input.suggest_memory_format() : at::MemoryFormat::Contiguous;
  grad_input.resize_(input.sizes(), format);
  avg_pool(grad_output, grad_input, input, grad_output, N, adaptive(), false, std::nullopt, /*backward=*/true);
  return grad_input;
}

template <int N>
at::Tensor adaptive_avg_pool_backward(const at::Tensor& grad_output, const at::Tensor& input) {
  auto grad_input = at::empty({0}, input.options());
  return adaptive_avg_pool_backward_out<N>(grad_output, input, grad_input);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  namespace s = structured;
  using IA = c10::IntArrayRef;
  using OptI = std::optional<int64_t>;
  using T = const at::Tensor&;
  OXIDE_IMPL(m, "max_pool2d_with_indices", TORCH_FN((s::functional2<MaxPool2d, T, IA, IA, IA, IA, bool>)));
  OXIDE_IMPL(m, "max_pool2d_with_indices.out", TORCH_FN((s::out2<MaxPool2d, T, IA, IA, IA, IA, bool>)));
  OXIDE_IMPL(m, "max_pool2d_with_indices_backward",
             TORCH_FN((s::functional<MaxPool2dBackward, T, T, IA, IA, IA, IA, bool, T>)));
  OXIDE_IMPL(m, "max_pool2d_with_indices_backward.grad_input",
             TORCH_FN((s::out<MaxPool2dBackward, T, T, IA, IA, IA, IA, bool, T>)));
  OXIDE_IMPL(m, "max_pool3d_with_indices", TORCH_FN(max_pool3d));
  OXIDE_IMPL(m, "max_pool3d_with_indices.out", TORCH_FN(max_pool3d_out));
  OXIDE_IMPL(m, "max_pool3d_with_indices_backward", TORCH_FN(max_pool3d_backward));
  OXIDE_IMPL(m, "max_pool3d_with_indices_backward.grad_input", TORCH_FN(max_pool3d_backward_out));

  OXIDE_IMPL(m, "avg_pool2d", TORCH_FN((s::functional<AvgPool2d, T, IA, IA, IA, bool, bool, OptI>)));
  OXIDE_IMPL(m, "avg_pool2d.out", TORCH_FN((s::out<AvgPool2d, T, IA, IA, IA, bool, bool, OptI>)));
  OXIDE_IMPL(m, "avg_pool2d_backward",
             TORCH_FN((s::functional<AvgPool2dBackward, T, T, IA, IA, IA, bool, bool, OptI>)));
  OXIDE_IMPL(m, "avg_pool2d_backward.grad_input",
             TORCH_FN((s::out<AvgPool2dBackward, T, T, IA, IA, IA, bool, bool, OptI>)));
  OXIDE_IMPL(m, "avg_pool3d", TORCH_FN((s::functional<AvgPool3d, T, IA, IA, IA, bool, bool, OptI>)));
  OXIDE_IMPL(m, "avg_pool3d.out", TORCH_FN((s::out<AvgPool3d, T, IA, IA, IA, bool, bool, OptI>)));
  OXIDE_IMPL(m, "avg_pool3d_backward",
             TORCH_FN((s::functional<AvgPool3dBackward, T, T, IA, IA, IA, bool, bool, OptI>)));
  OXIDE_IMPL(m, "avg_pool3d_backward.grad_input",
             TORCH_FN((s::out<AvgPool3dBackward, T, T, IA, IA, IA, bool, bool, OptI>)));

  OXIDE_IMPL(m, "_adaptive_avg_pool2d", TORCH_FN(adaptive_avg_pool<2>));
  OXIDE_IMPL(m, "adaptive_avg_pool2d.out", TORCH_FN(adaptive_avg_pool_out<2>));
  OXIDE_IMPL(m, "_adaptive_avg_pool2d_backward", TORCH_FN(adaptive_avg_pool_backward<2>));
  OXIDE_IMPL(m, "_adaptive_avg_pool3d", TORCH_FN(adaptive_avg_pool<3>));
  OXIDE_IMPL(m, "adaptive_avg_pool3d.out", TORCH_FN(adaptive_avg_pool_out<3>));
  OXIDE_IMPL(m, "_adaptive_avg_pool3d_backward", TORCH_FN(adaptive_avg_pool_backward<3>));
  OXIDE_IMPL(m, "adaptive_avg_pool3d_backward.grad_input", TORCH_FN(adaptive_avg_pool_backward_out<3>));

  OXIDE_IMPL(m, "adaptive_max_pool2d", TORCH_FN((s::functional2<AdaptiveMaxPool2d, T, IA>)));
  OXIDE_IMPL(m, "adaptive_max_pool2d.out", TORCH_FN((s::out2<AdaptiveMaxPool2d, T, IA>)));
  OXIDE_IMPL(m, "adaptive_max_pool2d_backward", TORCH_FN((s::functional<AdaptiveMaxPool2dBackward, T, T, T>)));
  OXIDE_IMPL(m, "adaptive_max_pool2d_backward.grad_input", TORCH_FN((s::out<AdaptiveMaxPool2dBackward, T, T, T>)));
  OXIDE_IMPL(m, "adaptive_max_pool3d", TORCH_FN((s::functional2<AdaptiveMaxPool3d, T, IA>)));
  OXIDE_IMPL(m, "adaptive_max_pool3d.out", TORCH_FN((s::out2<AdaptiveMaxPool3d, T, IA>)));
  OXIDE_IMPL(m, "adaptive_max_pool3d_backward", TORCH_FN((s::functional<AdaptiveMaxPool3dBackward, T, T, T>)));
  OXIDE_IMPL(m, "adaptive_max_pool3d_backward.grad_input", TORCH_FN((s::out<AdaptiveMaxPool3dBackward, T, T, T>)));
}

}  // namespace oxide
