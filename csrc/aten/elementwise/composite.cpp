// rsub, linalg_cross, trace, channel_shuffle, complex, polar and renorm on
// oxide: operators whose CPU kernels are CPU-only loops but whose results are a
// few pointwise kernels, views or a reduction away. Composed here from those, so
// they run natively with CPU's checks (PyTorch's meta function for linalg_cross
// and renorm, PyTorch's own functions over oxide stubs for complex and polar,
// CPU's messages for the others).
#include "common/device_check.h"
#include "common/structured.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Normalization.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/channel_shuffle_native.h>
#include <ATen/ops/complex_native.h>
#include <ATen/ops/polar_native.h>
#include <ATen/ops/renorm_native.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/view_as_real.h>
#include <ATen/ops/where.h>
#include <ATen/ops/linalg_cross_meta.h>
#include <ATen/ops/rsub_native.h>
#include <ATen/ops/stack.h>
#include <torch/library.h>

namespace oxide {
namespace {

// Component i of a x b is a[i+1] b[i+2] - a[i+2] b[i+1]; all three are formed before
// anything is written, since out may be one of the inputs.
struct LinalgCross : at::meta::structured_linalg_cross {
  void impl(const at::Tensor& self, const at::Tensor& other, int64_t dim, const at::Tensor& out) {
    // CPU's iterator refuses an out= that overlaps an input.
    at::assert_no_overlap(out, self);
    at::assert_no_overlap(out, other);
    if (out.numel() == 0) {
      return;
    }
    // Bool has no subtraction: CPU raises for it, through the fallback.
    OXIDE_CHECK_DTYPE(out.scalar_type() != at::kBool, "linalg_cross: dtype Bool is not supported on oxide");
    const int64_t d = at::maybe_wrap_dim(dim, out.dim());
    const auto a = self.expand(out.sizes());
    const auto b = other.expand(out.sizes());
    const auto component = [&](int64_t i) {
      const int64_t j = (i + 1) % 3;
      const int64_t k = (i + 2) % 3;
      return a.select(d, j).mul(b.select(d, k)).sub_(a.select(d, k).mul(b.select(d, j)));
    };
    out.copy_(at::stack({component(0), component(1), component(2)}, d));
  }
};

// The sum of the diagonal; integral inputs give int64, as CPU's trace does (sum's promotion).
at::Tensor trace(const at::Tensor& self) {
  OXIDE_CHECK_DTYPE(self.scalar_type() != at::kBool, "trace: dtype Bool is not supported on oxide");
  TORCH_CHECK(self.dim() == 2, "trace: expected a matrix, but got tensor with dim ", self.dim());
  return self.diagonal().sum();
}

// PyTorch's composite reshapes with views, which a permuted input cannot take: it gets
// a contiguous copy first, as CPU's kernel makes one, and the result CPU's memory format.
at::Tensor channel_shuffle(const at::Tensor& self, int64_t groups) {
  return at::native::channel_shuffle(self.contiguous(), groups).contiguous(self.suggest_memory_format());
}

// complex_stub / polar_stub: PyTorch's complex_out and polar_out check the dtypes
// and build the iterator (broadcast output); the real and imaginary planes of the
// output are written as views. CPU's polar is abs * cos(angle), abs * sin(angle).
void complex_kernel(at::TensorIterator& iter) {
  const auto planes = at::view_as_real(iter.tensor(0));
  planes.select(-1, 0).copy_(iter.tensor(1));
  planes.select(-1, 1).copy_(iter.tensor(2));
}
void polar_kernel(at::TensorIterator& iter) {
  const auto& abs = iter.tensor(1);
  const auto& angle = iter.tensor(2);
  const auto planes = at::view_as_real(iter.tensor(0));
  planes.select(-1, 0).copy_(abs.mul(angle.cos()));
  planes.select(-1, 1).copy_(abs.mul(angle.sin()));
}

// renorm_scale_factor_stub: CPU's factor maxnorm / (norm + 1e-7) where the norm
// exceeds maxnorm, else 1, in the iterator's (real accumulation) type.
void renorm_scale_factor_kernel(at::TensorIteratorBase& iter, double maxnorm) {
  const auto& norm = iter.tensor(1);
  const auto max = at::scalar_tensor(maxnorm, norm.options());
  iter.tensor(0).copy_(at::where(norm.gt(max), max.div(norm.add(1e-7)), at::scalar_tensor(1, norm.options())));
}

}  // namespace
}  // namespace oxide

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(complex_stub, &::oxide::complex_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(polar_stub, &::oxide::polar_kernel)
REGISTER_PRIVATEUSE1_DISPATCH(renorm_scale_factor_stub, &::oxide::renorm_scale_factor_kernel)
}  // namespace at::native

namespace oxide {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using T = const at::Tensor&;
  OXIDE_STRUCTURED(m, LinalgCross, "linalg_cross", "", "linalg_cross.out", T, int64_t);
  OXIDE_IMPL(m, "trace", TORCH_FN(trace));
  // rsub is CPU's own device-generic function: sub with the operands swapped.
  OXIDE_IMPL(m, "rsub.Tensor", TORCH_FN(static_cast<at::Tensor (*)(T, T, const c10::Scalar&)>(&at::native::rsub)));
  OXIDE_IMPL(m, "channel_shuffle", TORCH_FN(channel_shuffle));
  OXIDE_IMPL(m, "complex", TORCH_FN(at::native::complex));
  OXIDE_IMPL(m, "complex.out", TORCH_FN(at::native::complex_out));
  OXIDE_IMPL(m, "polar", TORCH_FN(at::native::polar));
  OXIDE_IMPL(m, "polar.out", TORCH_FN(at::native::polar_out));
  using S = const c10::Scalar&;
  OXIDE_STRUCTURED(m, at::native::structured_renorm_out, "renorm", "renorm_", "renorm.out", S, int64_t, S);
}

}  // namespace oxide
