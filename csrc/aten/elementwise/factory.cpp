// Range factories on oxide: arange and linspace are PyTorch's own native
// functions around a DispatchStub (oxide_kernels::ops::elementwise::factory fills the sequence),
// logspace is base ** linspace, eye a zeroed matrix with its diagonal filled.
// empty is in tensor.cpp; zeros, ones and full are empty + fill_ (fill.cpp).
#include "common/device_check.h"
#include "common/kernels.h"

#include <ATen/Dispatch.h>
#include <ATen/native/RangeFactories.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/arange_native.h>
#include <ATen/ops/linspace.h>
#include <ATen/ops/linspace_native.h>
#include <ATen/ops/pow.h>
#include <torch/library.h>

namespace oxide {
namespace {

void sequence(at::TensorIterator& iter, const OxideSequence& seq) {
  if (iter.numel() == 0) {
    return;
  }
  IterArgs args(iter);
  OXIDE_CHECK(oxide_fill_sequence(launch_on(iter), &args.abi, seq));
}

void arange_kernel(at::TensorIterator& iter, const c10::Scalar& start, const c10::Scalar& /*size*/,
                   const c10::Scalar& step) {
  ScalarArgs s;
  s.set(0, start);
  s.set(1, step);
  sequence(iter, OxideSequence{/*linspace=*/false, s.f[0], s.f[1], s.i[0], s.i[1], 0});
}

void linspace_kernel(at::TensorIterator& iter, const c10::Scalar& start, const c10::Scalar& end, int64_t steps) {
  // CPU converts the ends to the output dtype first: an end the dtype cannot hold raises
  // (RuntimeError), and dtypes without a CPU loop (bool, uint16..) raise NotImplementedError.
  AT_DISPATCH_ALL_TYPES_AND_COMPLEX_AND2(at::kHalf, at::kBFloat16, iter.dtype(), "linspace", [&] {
    (void)start.to<scalar_t>();
    (void)end.to<scalar_t>();
  });
  const auto real = [](const c10::Scalar& s) { return !s.isComplex() || s.toComplexDouble().imag() == 0; };
  OXIDE_CHECK_DTYPE(real(start) && real(end),
                    "linspace: complex end points with an imaginary part are not supported "
                    "on oxide");
  const auto value = [](const c10::Scalar& s) { return s.isComplex() ? s.toComplexDouble().real() : s.toDouble(); };
  sequence(iter, OxideSequence{/*linspace=*/true, value(start), value(end), 0, 0, steps});
}

}  // namespace
}  // namespace oxide

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(arange_stub, &::oxide::arange_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(linspace_stub, &::oxide::linspace_kernel)
}  // namespace at::native

namespace oxide {
namespace {

at::Tensor& eye_out(int64_t n, int64_t m, at::Tensor& out) {
  TORCH_CHECK(n >= 0, "n must be greater or equal to 0, got ", n);
  TORCH_CHECK(m >= 0, "m must be greater or equal to 0, got ", m);
  out.resize_({n, m});
  out.zero_();
  out.diagonal().fill_(1);
  return out;
}

at::Tensor& eye_n_out(int64_t n, at::Tensor& out) { return eye_out(n, n, out); }

// logspace: base ** linspace computed in double, then rounded into `out`'s dtype as CPU does.
at::Tensor& logspace_out(const c10::Scalar& start, const c10::Scalar& end, int64_t steps, double base,
                         at::Tensor& out) {
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  TORCH_CHECK_NOT_IMPLEMENTED(out.scalar_type() != at::kBool, "\"logspace_cpu\" not implemented for 'Bool'");
  at::native::resize_output(out, {steps});
  if (steps == 0) {
    return out;
  }
  // Complex outputs: complex exponents (linspace sends end points with an imaginary
  // part to the CPU fallback), then the complex power.
  const auto exponent_dtype = out.is_complex() ? out.scalar_type() : at::kDouble;  // CPU: complex in its own type
  auto exponents = at::linspace(start, end, steps, out.options().dtype(exponent_dtype));
  out.copy_(at::pow(base, exponents));
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(
      m, "arange.start_out",
      TORCH_FN(static_cast<at::Tensor& (*)(const c10::Scalar&, const c10::Scalar&, const c10::Scalar&, at::Tensor&)>(
          &at::native::arange_out)));
  OXIDE_IMPL(m, "linspace.out",
             TORCH_FN(static_cast<at::Tensor& (*)(const c10::Scalar&, const c10::Scalar&, int64_t, at::Tensor&)>(
                 &at::native::linspace_out)));
  OXIDE_IMPL(m, "logspace.out", TORCH_FN(logspace_out));
  OXIDE_IMPL(m, "eye.m_out", TORCH_FN(eye_out));
  OXIDE_IMPL(m, "eye.out", TORCH_FN(eye_n_out));
}

}  // namespace oxide
