// Native matrix products: the structured meta functions of mm, addmm, bmm,
// baddbmm and addmv check shapes and dtypes and allocate or resize the
// output exactly as on CPU; the product itself is oxide_gemm (Rust, the
// matrixmultiply crate). dot/vdot are 1 x k by k x 1 products; addbmm is
// PyTorch's own device-generic implementation over these.
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/launch.h"
#include "common/structured.h"

#include <ATen/ops/addbmm_native.h>
#include <ATen/ops/addmm_meta.h>
#include <ATen/ops/addmv_meta.h>
#include <ATen/ops/baddbmm_meta.h>
#include <ATen/ops/bmm_meta.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm_meta.h>
#include <torch/library.h>

namespace oxide {
namespace {

// c = alpha * a @ b + beta * c for 2-d or 3-d operands of one dtype.
// A conjugate or negative bit is materialised first; the kernel reads raw memory.
void gemm(const at::Tensor& c, const at::Tensor& a_in, const at::Tensor& b_in, double beta, double alpha) {
  TORCH_CHECK(a_in.scalar_type() == b_in.scalar_type(),
              "expected m1 and m2 to have the same dtype, but got: ", a_in.scalar_type(), " != ", b_in.scalar_type());
  const auto a = a_in.resolve_conj().resolve_neg();
  const auto b = b_in.resolve_conj().resolve_neg();
  // The inner dimension; the kernel reads every size from the descriptors.
  const int64_t k = a.size(c.dim() == 3 ? 2 : 1);
  if (c.numel() == 0) {
    return;
  }
  if (k == 0) {
    // Empty inner dimension: the product is zero, as in BLAS.
    if (beta == 0) {
      c.zero_();
    } else if (beta != 1) {
      c.mul_(c.is_floating_point() || c.is_complex() ? c10::Scalar(beta) : c10::Scalar(static_cast<int64_t>(beta)));
    }
    return;
  }
  // Operands (b, r, c) or (r, c); the kernel reads c only for beta != 0.
  OXIDE_CHECK(oxide_gemm(launch_on(c), beta == 0 ? out_arg(c) : inout_arg(c), alpha, in_arg(a), in_arg(b), beta));
}

bool has_imaginary_part(const c10::Scalar& s) { return s.isComplex() && s.toComplexDouble().imag() != 0; }

// out = beta * self + alpha * (a @ b) where alpha or beta has an imaginary part: the
// kernel takes real scaling factors, so the product is formed unscaled and combined by
// pointwise kernels. beta == 0 ignores self, NaNs included, as BLAS does.
void add_product_complex_scalars(const at::Tensor& out, const at::Tensor& self, const at::Tensor& a,
                                 const at::Tensor& b, const c10::Scalar& beta, const c10::Scalar& alpha) {
  auto product = at::empty(out.sizes(), out.options());
  gemm(product, a, b, 0, 1);
  product.mul_(alpha);
  if (beta.toComplexDouble() == c10::complex<double>(0, 0)) {
    out.copy_(product);
  } else {
    out.copy_(self.expand(out.sizes()).mul(beta).add_(product));
  }
}

// out = beta * self + alpha * (a @ b): self is broadcast into out first unless it is out.
void add_product(const at::Tensor& out, const at::Tensor& self, const at::Tensor& a, const at::Tensor& b,
                 const c10::Scalar& beta, const c10::Scalar& alpha) {
  if (out.numel() > 0 && (has_imaginary_part(alpha) || has_imaginary_part(beta))) {
    add_product_complex_scalars(out, self, a, b, beta, alpha);
    return;
  }
  const double be = beta.toComplexDouble().real();
  if (be != 0 && !self.is_same(out)) {
    out.copy_(self.expand(out.sizes()));
  }
  gemm(out, a, b, be, alpha.toComplexDouble().real());
}

struct Mm : at::meta::structured_mm {
  void impl(const at::Tensor& self, const at::Tensor& mat2, const at::Tensor& out) { gemm(out, self, mat2, 0, 1); }
};
struct Bmm : at::meta::structured_bmm {
  void impl(const at::Tensor& self, const at::Tensor& mat2, const at::Tensor& out) { gemm(out, self, mat2, 0, 1); }
};
struct Addmm : at::meta::structured_addmm {
  void impl(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2, const c10::Scalar& beta,
            const c10::Scalar& alpha, const at::Tensor& out) {
    add_product(out, self, m1, m2, beta, alpha);
  }
};
struct Baddbmm : at::meta::structured_baddbmm {
  void impl(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2, const c10::Scalar& beta,
            const c10::Scalar& alpha, const at::Tensor& out) {
    add_product(out, self, b1, b2, beta, alpha);
  }
};
struct Addmv : at::meta::structured_addmv {
  void impl(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec, const c10::Scalar& beta,
            const c10::Scalar& alpha, const at::Tensor& out) {
    if (out.numel() == 0) {
      return;
    }
    if (has_imaginary_part(alpha) || has_imaginary_part(beta)) {
      add_product_complex_scalars(out.unsqueeze(1), self.dim() == 1 ? self.unsqueeze(1) : self, mat, vec.unsqueeze(1),
                                  beta, alpha);
      return;
    }
    // Not add_product: self may be 0-dim, and the in-place case must see self and out as the same tensor.
    const double be = beta.toComplexDouble().real();
    if (be != 0 && !self.is_same(out)) {
      out.copy_(self.expand(out.sizes()));
    }
    gemm(out.unsqueeze(1), mat, vec.unsqueeze(1), be, alpha.toComplexDouble().real());
  }
};

void check_dot(const at::Tensor& self, const at::Tensor& other, const char* name) {
  TORCH_CHECK(self.dim() == 1 && other.dim() == 1, "1D tensors expected, but got ", self.dim(), "D and ", other.dim(),
              "D tensors");
  TORCH_CHECK(self.scalar_type() == other.scalar_type(), name,
              " : expected both vectors to have same dtype, but found ", self.scalar_type(), " and ",
              other.scalar_type());
  TORCH_CHECK(self.numel() == other.numel(), "inconsistent tensor size, expected tensor [", self.numel(), "] and src [",
              other.numel(), "] to have the same number of elements, but got ", self.numel(), " and ", other.numel(),
              " elements respectively");
}

at::Tensor dot_impl(const at::Tensor& self, const at::Tensor& other) {
  check_dot(self, other, "dot");
  auto out = at::empty({}, self.options());
  gemm(out.view({1, 1}), self.unsqueeze(0), other.unsqueeze(1), 0, 1);
  return out;
}

at::Tensor vdot(const at::Tensor& self, const at::Tensor& other) {
  check_dot(self, other, "vdot");
  return self.is_complex() ? dot_impl(self.conj(), other) : dot_impl(self, other);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using T = const at::Tensor&;
  using S = const c10::Scalar&;
  OXIDE_STRUCTURED(m, Mm, "mm", "", "mm.out", T);
  OXIDE_STRUCTURED(m, Bmm, "bmm", "", "bmm.out", T);
  OXIDE_STRUCTURED(m, Addmm, "addmm", "addmm_", "addmm.out", T, T, S, S);
  OXIDE_STRUCTURED(m, Baddbmm, "baddbmm", "baddbmm_", "baddbmm.out", T, T, S, S);
  OXIDE_STRUCTURED(m, Addmv, "addmv", "addmv_", "addmv.out", T, T, S, S);
  OXIDE_IMPL(m, "dot", TORCH_FN(dot_impl));
  OXIDE_IMPL(m, "vdot", TORCH_FN(vdot));
  OXIDE_IMPL(m, "addbmm", TORCH_FN(at::native::addbmm));
  OXIDE_IMPL(m, "addbmm_", TORCH_FN(at::native::addbmm_));
  OXIDE_IMPL(m, "addbmm.out", TORCH_FN(at::native::addbmm_out));
}

}  // namespace oxide
