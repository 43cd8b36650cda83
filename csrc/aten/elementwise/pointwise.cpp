// Native pointwise operators: PyTorch's structured kernels (meta + impl, run
// through the wrappers in common/structured.h) and non-structured native functions
// that drive a DispatchStub; our REGISTER_PRIVATEUSE1_DISPATCH entries send
// each stub's TensorIterator to oxide_kernels::ops::elementwise::pointwise by op
// id (OXIDE_POINTWISE_*, generated from the Rust table by build.rs).
// complex64/128 operands run the op's complex kernel where one exists; other
// dtypes go to the CPU fallback (check_complex_supported).
#include "common/device_check.h"
#include "common/kernels.h"
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include "common/structured.h"

#include <ATen/ScalarOps.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/Lerp.h>
#include <ATen/native/PointwiseOps.h>
#include <ATen/native/Pow.h>
#include <ATen/native/TensorCompare.h>
#include <ATen/native/UnaryOps.h>
#include <ATen/ops/abs_native.h>
#include <ATen/ops/acos_native.h>
#include <ATen/ops/acosh_native.h>
#include <ATen/ops/add_native.h>
#include <ATen/ops/addcdiv_native.h>
#include <ATen/ops/addcmul_native.h>
#include <ATen/ops/angle_native.h>
#include <ATen/ops/asin_native.h>
#include <ATen/ops/asinh_native.h>
#include <ATen/ops/atan2_native.h>
#include <ATen/ops/atan_native.h>
#include <ATen/ops/atanh_native.h>
#include <ATen/ops/bitwise_and_native.h>
#include <ATen/ops/bitwise_left_shift_native.h>
#include <ATen/ops/bitwise_not_native.h>
#include <ATen/ops/bitwise_or_native.h>
#include <ATen/ops/bitwise_right_shift_native.h>
#include <ATen/ops/bitwise_xor_native.h>
#include <ATen/ops/ceil_native.h>
#include <ATen/ops/clamp_max_native.h>
#include <ATen/ops/clamp_min_native.h>
#include <ATen/ops/clamp_native.h>
#include <ATen/ops/conj_physical_native.h>
#include <ATen/ops/copysign_native.h>
#include <ATen/ops/cos_native.h>
#include <ATen/ops/cosh_native.h>
#include <ATen/ops/digamma_native.h>
#include <ATen/ops/div_native.h>
#include <ATen/ops/eq_native.h>
#include <ATen/ops/erf_native.h>
#include <ATen/ops/erfc_native.h>
#include <ATen/ops/erfinv_native.h>
#include <ATen/ops/exp2_native.h>
#include <ATen/ops/exp_native.h>
#include <ATen/ops/expm1_native.h>
#include <ATen/ops/floor_divide_native.h>
#include <ATen/ops/floor_native.h>
#include <ATen/ops/fmax_native.h>
#include <ATen/ops/fmin_native.h>
#include <ATen/ops/fmod_native.h>
#include <ATen/ops/frac_native.h>
#include <ATen/ops/gcd_native.h>
#include <ATen/ops/ge_native.h>
#include <ATen/ops/gt_native.h>
#include <ATen/ops/heaviside_native.h>
#include <ATen/ops/hypot_native.h>
#include <ATen/ops/i0_native.h>
#include <ATen/ops/isnan_native.h>
#include <ATen/ops/isneginf_native.h>
#include <ATen/ops/isposinf_native.h>
#include <ATen/ops/lcm_native.h>
#include <ATen/ops/le_native.h>
#include <ATen/ops/lerp_native.h>
#include <ATen/ops/lgamma_native.h>
#include <ATen/ops/log10_native.h>
#include <ATen/ops/log1p_native.h>
#include <ATen/ops/log2_native.h>
#include <ATen/ops/log_native.h>
#include <ATen/ops/logaddexp2_native.h>
#include <ATen/ops/logaddexp_native.h>
#include <ATen/ops/logical_and_native.h>
#include <ATen/ops/logical_not_native.h>
#include <ATen/ops/logical_or_native.h>
#include <ATen/ops/logical_xor_native.h>
#include <ATen/ops/logit_backward_native.h>
#include <ATen/ops/logit_native.h>
#include <ATen/ops/lshift_native.h>
#include <ATen/ops/lt_native.h>
#include <ATen/ops/maximum_native.h>
#include <ATen/ops/minimum_native.h>
#include <ATen/ops/mul_native.h>
#include <ATen/ops/nan_to_num_native.h>
#include <ATen/ops/ne_native.h>
#include <ATen/ops/neg_native.h>
#include <ATen/ops/nextafter_native.h>
#include <ATen/ops/polygamma_native.h>
#include <ATen/ops/pow_native.h>
#include <ATen/ops/reciprocal_native.h>
#include <ATen/ops/relu_native.h>
#include <ATen/ops/remainder.h>
#include <ATen/ops/remainder_native.h>
#include <ATen/ops/round_native.h>
#include <ATen/ops/rshift_native.h>
#include <ATen/ops/rsqrt_native.h>
#include <ATen/ops/sgn_native.h>
#include <ATen/ops/sigmoid_backward_native.h>
#include <ATen/ops/sigmoid_native.h>
#include <ATen/ops/sign_native.h>
#include <ATen/ops/signbit_native.h>
#include <ATen/ops/sin_native.h>
#include <ATen/ops/sinc_native.h>
#include <ATen/ops/sinh_native.h>
#include <ATen/ops/special_airy_ai_native.h>
#include <ATen/ops/special_bessel_j0_native.h>
#include <ATen/ops/special_bessel_j1_native.h>
#include <ATen/ops/special_bessel_y0_native.h>
#include <ATen/ops/special_bessel_y1_native.h>
#include <ATen/ops/special_chebyshev_polynomial_t_native.h>
#include <ATen/ops/special_chebyshev_polynomial_u_native.h>
#include <ATen/ops/special_chebyshev_polynomial_v_native.h>
#include <ATen/ops/special_chebyshev_polynomial_w_native.h>
#include <ATen/ops/special_entr_native.h>
#include <ATen/ops/special_erfcx_native.h>
#include <ATen/ops/special_hermite_polynomial_h_native.h>
#include <ATen/ops/special_hermite_polynomial_he_native.h>
#include <ATen/ops/special_i0e_native.h>
#include <ATen/ops/special_i1_native.h>
#include <ATen/ops/special_i1e_native.h>
#include <ATen/ops/special_laguerre_polynomial_l_native.h>
#include <ATen/ops/special_legendre_polynomial_p_native.h>
#include <ATen/ops/special_log_ndtr_native.h>
#include <ATen/ops/special_modified_bessel_i0_native.h>
#include <ATen/ops/special_modified_bessel_i1_native.h>
#include <ATen/ops/special_modified_bessel_k0_native.h>
#include <ATen/ops/special_modified_bessel_k1_native.h>
#include <ATen/ops/special_ndtri_native.h>
#include <ATen/ops/special_scaled_modified_bessel_k0_native.h>
#include <ATen/ops/special_scaled_modified_bessel_k1_native.h>
#include <ATen/ops/special_shifted_chebyshev_polynomial_t_native.h>
#include <ATen/ops/special_shifted_chebyshev_polynomial_u_native.h>
#include <ATen/ops/special_shifted_chebyshev_polynomial_v_native.h>
#include <ATen/ops/special_shifted_chebyshev_polynomial_w_native.h>
#include <ATen/ops/special_spherical_bessel_j0_native.h>
#include <ATen/ops/special_xlog1py_native.h>
#include <ATen/ops/special_zeta_native.h>
#include <ATen/ops/sqrt_native.h>
#include <ATen/ops/sub_native.h>
#include <ATen/ops/tan_native.h>
#include <ATen/ops/tanh_backward_native.h>
#include <ATen/ops/tanh_native.h>
#include <ATen/ops/trunc_native.h>
#include <ATen/ops/where_native.h>
#include <ATen/ops/xlogy_native.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/LinearAlgebra.h>
#include <ATen/ops/add.h>
#include <ATen/ops/addr_native.h>
#include <ATen/ops/addcdiv.h>
#include <ATen/ops/addcmul.h>
#include <ATen/ops/div.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/lerp.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/where.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

namespace oxide {

void check_scalar_fits(const c10::Scalar& s, at::ScalarType t) {
  switch (t) {
#define OXIDE_CHECK_FITS(T, name) \
  case at::ScalarType::name:      \
    (void)s.to<T>();              \
    return;
    AT_FORALL_SCALAR_TYPES_WITH_COMPLEX(OXIDE_CHECK_FITS)
#undef OXIDE_CHECK_FITS
    default:
      return;
  }
}

void pointwise(at::TensorIteratorBase& iter, OxidePointwiseOp op, const ScalarArgs& scalars,
               std::optional<at::ScalarType> compute) {
  // Empty iterators still reach the kernel, which rejects unsupported dtypes as CPU does.
  IterArgs args(iter);
  const auto common = compute ? compute : iter.maybe_common_dtype();
  const auto target = common ? *common : iter.dtype(0);
  if (!at::isComplexType(target)) {
    // A complex scalar for a real computation: Scalar::to raises CPU's overflow error.
    for (size_t k = 0; k < scalars.im.size(); ++k) {
      if (scalars.im[k] != 0) {
        AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, target, "pointwise", [&] {
          (void)c10::Scalar(c10::complex<double>(scalars.f[k], scalars.im[k])).to<scalar_t>();
        });
      }
    }
  }
  OXIDE_CHECK(
      oxide_pointwise(launch_on(iter), op, &args.abi, common ? static_cast<int32_t>(*common) : -1, scalars.abi()));
}

namespace {

// complex64/complex128 operands of an op with a Rust complex kernel
// (oxide_kernels::ops::elementwise::complex) run natively. Other complex cases
// (complex32, ops without a complex kernel) raise UnsupportedDtype, which the
// operator's registration wrapper turns into the counted CPU fallback of the
// whole operator (common/device_check.h).
void check_complex_supported(at::TensorIteratorBase& iter, OxidePointwiseOp id) {
  bool complex = false;
  bool native_dtypes = true;
  c10::ScalarType refused = at::kComplexFloat;  // named in the message: a non-native dtype if any
  for (int k = 0; k < iter.ntensors(); ++k) {
    const auto t = iter.dtype(k);
    if (!at::isComplexType(t)) {
      continue;
    }
    const bool native = t == at::kComplexFloat || t == at::kComplexDouble;
    if (!complex || !native) {
      refused = t;
    }
    complex = true;
    native_dtypes &= native;
  }
  // Real operands (every call on the hot path) return before any lookup or string work.
  if (!complex || (native_dtypes && oxide_pointwise_complex_supported(id))) {
    return;
  }
  OXIDE_THROW_UNSUPPORTED_DTYPE(OXIDE_POINTWISE_NAMES[id], ": dtype ", refused, " is not supported on oxide");
}

template <OxidePointwiseOp Op>
void unary(at::TensorIteratorBase& iter) {
  check_complex_supported(iter, Op);
  pointwise(iter, Op);
}
template <OxidePointwiseOp Op>
void unary_it(at::TensorIterator& iter) {
  unary<Op>(iter);
}
template <OxidePointwiseOp Op>
void with_scalar(at::TensorIteratorBase& iter, const c10::Scalar& s) {
  check_complex_supported(iter, Op);
  ScalarArgs a;
  a.set(0, s);
  pointwise(iter, Op, a);
}

// An op with one int64 argument (polygamma's order n), passed as the first scalar.
template <OxidePointwiseOp Op>
void with_int(at::TensorIteratorBase& iter, int64_t n) {
  check_complex_supported(iter, Op);
  ScalarArgs a;
  a.set(0, c10::Scalar(n));
  pointwise(iter, Op, a);
}

template <OxidePointwiseOp Op>
void with_checked_scalar(at::TensorIteratorBase& iter, const c10::Scalar& s) {
  check_scalar_fits(s, iter.common_dtype());
  with_scalar<Op>(iter, s);
}
template <OxidePointwiseOp Op>
void with_checked_opmath_scalar(at::TensorIteratorBase& iter, const c10::Scalar& s) {
  check_scalar_fits(s, at::toOpMathType(iter.dtype()));
  with_scalar<Op>(iter, s);
}

void clamp_scalar(at::TensorIteratorBase& iter, const c10::Scalar& lo, const c10::Scalar& hi) {
  ScalarArgs a;
  a.set(0, lo);
  a.set(1, hi);
  pointwise(iter, OXIDE_POINTWISE_clamp_scalar, a);
}
void clamp_min_scalar(at::TensorIteratorBase& iter, c10::Scalar lo) {
  ScalarArgs a;
  a.set(0, lo);
  pointwise(iter, OXIDE_POINTWISE_clamp_min_scalar, a);
}
void clamp_max_scalar(at::TensorIteratorBase& iter, c10::Scalar hi) {
  ScalarArgs a;
  a.set(0, hi);
  pointwise(iter, OXIDE_POINTWISE_clamp_max_scalar, a);
}
void round_decimals(at::TensorIteratorBase& iter, int64_t decimals) {
  ScalarArgs a;
  a.set(0, std::pow(10.0, static_cast<double>(decimals < 0 ? -decimals : decimals)));
  a.set(1, decimals < 0 ? 1.0 : 0.0);
  pointwise(iter, OXIDE_POINTWISE_round_decimals, a);
}

// nan_to_num's defaults are the output dtype's finite limits.
void nan_to_num(at::TensorIteratorBase& iter, std::optional<double> nan, std::optional<double> posinf,
                std::optional<double> neginf) {
  double hi = 0;
  switch (iter.dtype(0)) {
    case at::kHalf:
      hi = static_cast<double>(std::numeric_limits<c10::Half>::max());
      break;
    case at::kBFloat16:
      hi = static_cast<double>(std::numeric_limits<c10::BFloat16>::max());
      break;
    case at::kFloat:
      hi = std::numeric_limits<float>::max();
      break;
    default:
      hi = std::numeric_limits<double>::max();
      break;
  }
  ScalarArgs a;
  a.set(0, nan.value_or(0.0));
  a.set(1, posinf.value_or(hi));
  a.set(2, neginf.value_or(-hi));
  pointwise(iter, OXIDE_POINTWISE_nan_to_num, a);
}

// addr's stub: beta and alpha in the element type first, as CPU converts them;
// integers and floats here, bool and complex take PyTorch's composite (see addr below).
void addr_kernel(at::TensorIterator& iter, const c10::Scalar& beta, const c10::Scalar& alpha) {
  const auto dt = iter.common_dtype();
  ScalarArgs a;
  if (at::isFloatingType(dt)) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dt, "addr", [&] {
      a.set(0, static_cast<double>(beta.to<scalar_t>()));
      a.set(1, static_cast<double>(alpha.to<scalar_t>()));
    });
    a.set(2, dt == at::kHalf ? 1.0 : dt == at::kBFloat16 ? 2.0 : 0.0);
    pointwise(iter, OXIDE_POINTWISE_addr_float, a);
    return;
  }
  OXIDE_CHECK_DTYPE(at::isIntegralType(dt, /*includeBool=*/false), "addr: dtype ", dt, " is not supported on oxide");
  check_scalar_fits(beta, dt);
  check_scalar_fits(alpha, dt);
  a.set(0, beta);
  a.set(1, alpha);
  pointwise(iter, OXIDE_POINTWISE_addr_int, a);
}

}  // namespace
}  // namespace oxide

// The structured unary ops with a stub of their own name: this one list drives both the
// DispatchStub (`<op>_stub`) and the three registrations (`op`, `op_`, `op.out`) of each.
// Kept out of clang-format, which re-indents an X-macro list differently on every pass.
// clang-format off
#define OXIDE_UNARY_OPS(X)                                                                              \
  X(acos) X(acosh) X(asin) X(asinh) X(atan) X(atanh) X(ceil) X(cos) X(cosh) X(erf) X(erfc) X(erfinv)    \
  X(exp) X(exp2) X(expm1) X(floor) X(frac) X(log) X(log10) X(log1p) X(log2) X(neg) X(reciprocal)        \
  X(round) X(rsqrt) X(sigmoid) X(sign) X(sgn) X(sin) X(sinc) X(sinh) X(sqrt) X(tan) X(tanh) X(trunc)    \
  X(lgamma) X(bitwise_not) X(i0) X(digamma)
// The structured unary ops of torch.special (stub `<op>_stub`, kernel `structured_<op>_out`),
// which have no in-place variant: `op` and `op.out` only.
#define OXIDE_SPECIAL_UNARY_OPS(X)                                                                      \
  X(special_i0e) X(special_i1) X(special_i1e) X(special_entr) X(special_erfcx) X(special_ndtri)         \
  X(special_log_ndtr) X(special_bessel_j0) X(special_bessel_j1) X(special_bessel_y0)                   \
  X(special_bessel_y1) X(special_modified_bessel_i0) X(special_modified_bessel_i1)                     \
  X(special_modified_bessel_k0) X(special_modified_bessel_k1) X(special_scaled_modified_bessel_k0)      \
  X(special_scaled_modified_bessel_k1) X(special_spherical_bessel_j0) X(special_airy_ai)
// The binary special ops whose stub is `<name>_stub` and whose structured op is
// `special_<name>` (x, n or self, other), without an in-place variant.
#define OXIDE_SPECIAL_BINARY_OPS(X)                                                                     \
  X(zeta) X(xlog1py) X(chebyshev_polynomial_t) X(chebyshev_polynomial_u) X(chebyshev_polynomial_v)     \
  X(chebyshev_polynomial_w) X(shifted_chebyshev_polynomial_t) X(shifted_chebyshev_polynomial_u)        \
  X(shifted_chebyshev_polynomial_v) X(shifted_chebyshev_polynomial_w) X(hermite_polynomial_h)          \
  X(hermite_polynomial_he) X(laguerre_polynomial_l) X(legendre_polynomial_p)
// clang-format on

namespace at::native {
// Stubs: one line each, op = the Rust kernel's name (an OXIDE_POINTWISE_* id: a misspelt name does not compile).
#define OXIDE_STUB(stub, kind, n) REGISTER_PRIVATEUSE1_DISPATCH(stub, &::oxide::kind<OXIDE_POINTWISE_##n>)
#define OXIDE_UNARY_STUB(n) OXIDE_STUB(n##_stub, unary, n)
OXIDE_UNARY_OPS(OXIDE_UNARY_STUB)
OXIDE_SPECIAL_UNARY_OPS(OXIDE_UNARY_STUB)
OXIDE_SPECIAL_BINARY_OPS(OXIDE_UNARY_STUB)
#undef OXIDE_UNARY_STUB
// polygamma(n, x): n (>= 0, checked by the meta function) travels as the first scalar.
OXIDE_STUB(polygamma_stub, with_int, polygamma)
OXIDE_STUB(nextafter_stub, unary, nextafter)
OXIDE_STUB(gcd_stub, unary, gcd)
OXIDE_STUB(lcm_stub, unary, lcm)
OXIDE_STUB(abs_stub, unary, abs)
OXIDE_STUB(signbit_stub, unary, signbit)
OXIDE_STUB(logical_not_stub, unary, logical_not)
OXIDE_STUB(isposinf_stub, unary, isposinf)
OXIDE_STUB(isneginf_stub, unary, isneginf)
OXIDE_STUB(add_stub, with_checked_scalar, add)
OXIDE_STUB(mul_stub, unary, mul)
OXIDE_STUB(div_true_stub, unary, div_true)
OXIDE_STUB(div_floor_stub, unary, div_floor)
OXIDE_STUB(div_trunc_stub, unary, div_trunc)
OXIDE_STUB(atan2_stub, unary, atan2)
OXIDE_STUB(remainder_stub, unary, remainder)
OXIDE_STUB(fmod_stub, unary, fmod)
OXIDE_STUB(bitwise_and_stub, unary, bitwise_and)
OXIDE_STUB(bitwise_or_stub, unary, bitwise_or)
OXIDE_STUB(bitwise_xor_stub, unary, bitwise_xor)
OXIDE_STUB(lshift_stub, unary, lshift)
OXIDE_STUB(rshift_stub, unary, rshift)
OXIDE_STUB(lt_stub, unary, lt)
OXIDE_STUB(le_stub, unary, le)
OXIDE_STUB(gt_stub, unary, gt)
OXIDE_STUB(ge_stub, unary, ge)
OXIDE_STUB(eq_stub, unary, eq)
OXIDE_STUB(ne_stub, unary, ne)
OXIDE_STUB(maximum_stub, unary, maximum)
OXIDE_STUB(minimum_stub, unary, minimum)
OXIDE_STUB(fmax_stub, unary, fmax)
OXIDE_STUB(fmin_stub, unary, fmin)
OXIDE_STUB(logaddexp_stub, unary, logaddexp)
OXIDE_STUB(logaddexp2_stub, unary, logaddexp2)
OXIDE_STUB(xlogy_stub, unary, xlogy)
OXIDE_STUB(hypot_stub, unary, hypot)
OXIDE_STUB(copysign_stub, unary, copysign)
OXIDE_STUB(heaviside_stub, unary, heaviside)
OXIDE_STUB(sigmoid_backward_stub, unary, sigmoid_backward)
OXIDE_STUB(tanh_backward_stub, unary, tanh_backward)
// logit(x, eps) and its gradient: eps travels as the scalar, -1 for none.
OXIDE_STUB(logit_stub, with_scalar, logit)
OXIDE_STUB(logit_backward_stub, with_scalar, logit_backward)
OXIDE_STUB(logical_and_stub, unary_it, logical_and)
OXIDE_STUB(logical_or_stub, unary_it, logical_or)
OXIDE_STUB(logical_xor_stub, unary_it, logical_xor)
OXIDE_STUB(pow_tensor_tensor_stub, unary, pow)
OXIDE_STUB(pow_tensor_scalar_stub, with_scalar, pow_tensor_scalar)
OXIDE_STUB(clamp_stub, unary, clamp)
OXIDE_STUB(addcmul_stub, with_checked_scalar, addcmul)
OXIDE_STUB(addcdiv_stub, with_checked_scalar, addcdiv)
OXIDE_STUB(lerp_kernel_scalar_weight, with_checked_opmath_scalar, lerp_scalar)
OXIDE_STUB(lerp_kernel_tensor_weight, unary, lerp_tensor)
OXIDE_STUB(where_kernel, unary_it, where)
OXIDE_STUB(angle_stub, unary, angle)
OXIDE_STUB(conj_physical_stub, unary, conj_physical)
REGISTER_PRIVATEUSE1_DISPATCH(clamp_scalar_stub, &::oxide::clamp_scalar)
REGISTER_PRIVATEUSE1_DISPATCH(clamp_min_scalar_stub, &::oxide::clamp_min_scalar)
REGISTER_PRIVATEUSE1_DISPATCH(clamp_max_scalar_stub, &::oxide::clamp_max_scalar)
REGISTER_PRIVATEUSE1_DISPATCH(round_decimals_stub, &::oxide::round_decimals)
REGISTER_PRIVATEUSE1_DISPATCH(nan_to_num_stub, &::oxide::nan_to_num)
REGISTER_PRIVATEUSE1_DISPATCH(addr_stub, &::oxide::addr_kernel)
}  // namespace at::native

namespace oxide {
namespace {

using T = const at::Tensor&;
using S = const c10::Scalar&;
using OptS = const std::optional<c10::Scalar>&;
using OptT = const std::optional<at::Tensor>&;

// addr (addr_ is PyTorch's composite over addr.out): CPU's native functions (checks,
// broadcast, iterator) over addr_stub for real dtypes; bool and complex keep PyTorch's composite of outer products,
// which is what they ran before and needs no kernel of its own.
bool addr_composite(T self, T vec1, T vec2) {
  const auto dt = at::promote_types(at::promote_types(self.scalar_type(), vec1.scalar_type()), vec2.scalar_type());
  return dt == at::kBool || at::isComplexType(dt);
}
at::Tensor addr(T self, T vec1, T vec2, S beta, S alpha) {
  return addr_composite(self, vec1, vec2) ? at::native::math_addr(self, vec1, vec2, beta, alpha)
                                          : at::native::addr(self, vec1, vec2, beta, alpha);
}
at::Tensor& addr_out(T self, T vec1, T vec2, S beta, S alpha, at::Tensor& out) {
  return addr_composite(self, vec1, vec2) ? at::native::math_addr_out(self, vec1, vec2, beta, alpha, out)
                                          : at::native::addr_out(self, vec1, vec2, beta, alpha, out);
}

// Scalar % tensor: the scalar as a wrapped number, so it does not take part in type promotion.
at::Tensor remainder_scalar_tensor(const c10::Scalar& self, const at::Tensor& other) {
  auto wrapped = c10::scalar_to_tensor(self);
  wrapped.unsafeGetTensorImpl()->set_wrapped_number(true);
  return at::remainder(wrapped, other);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace at::native;
  // Unary: op(self), op_(self), op.out(self, out).
#define OXIDE_UNARY(n) OXIDE_STRUCTURED(m, structured_##n##_out, #n, #n "_", #n ".out");
  OXIDE_UNARY_OPS(OXIDE_UNARY)
#undef OXIDE_UNARY
#define OXIDE_SPECIAL_UNARY(n) OXIDE_STRUCTURED(m, structured_##n##_out, #n, "", #n ".out");
  OXIDE_SPECIAL_UNARY_OPS(OXIDE_SPECIAL_UNARY)
#undef OXIDE_SPECIAL_UNARY
  // polygamma(int n, Tensor self): n comes first. polygamma_ is composite (polygamma.out into self).
  OXIDE_IMPL(m, "polygamma", TORCH_FN((structured::functional<structured_polygamma_out, int64_t, T>)));
  OXIDE_IMPL(m, "polygamma.out", TORCH_FN((structured::out<structured_polygamma_out, int64_t, T>)));
  OXIDE_STRUCTURED(m, structured_signbit_out, "signbit", "", "signbit.out");
  OXIDE_STRUCTURED(m, structured_isposinf_out, "isposinf", "", "isposinf.out");
  OXIDE_STRUCTURED(m, structured_isneginf_out, "isneginf", "", "isneginf.out");
  OXIDE_STRUCTURED(m, structured_round_decimals_out, "round.decimals", "round_.decimals", "round.decimals_out",
                   int64_t);
  // logit is not structured: PyTorch's native functions build the iterator and call logit_stub.
  OXIDE_IMPL(m, "logit", TORCH_FN(at::native::logit));
  OXIDE_IMPL(m, "logit_", TORCH_FN(at::native::logit_));
  OXIDE_IMPL(m, "logit.out", TORCH_FN(at::native::logit_out));
  OXIDE_STRUCTURED(m, structured_logit_backward_out, "logit_backward", "", "logit_backward.grad_input", T,
                   std::optional<double>);
  OXIDE_IMPL(m, "abs.out", TORCH_FN(abs_out));
  OXIDE_IMPL(m, "logical_not.out", TORCH_FN(logical_not_out));
  OXIDE_IMPL(m, "nan_to_num.out", TORCH_FN(nan_to_num_out));
  OXIDE_IMPL(m, "isnan", TORCH_FN(isnan));
  // angle (complex -> real argument, real -> 0 or pi) and conj_physical (also
  // behind conj_physical_, _conj_physical and resolve_conj): CPU's native functions over our stubs.
  OXIDE_IMPL(m, "angle", TORCH_FN(angle));
  OXIDE_IMPL(m, "angle.out", TORCH_FN(angle_out));
  OXIDE_IMPL(m, "conj_physical.out", TORCH_FN(conj_physical_out));
  // PyTorch's composite conj_physical_ calls the stub directly; registered here so that
  // a dtype the stub refuses (complex32) reaches the fallback through this wrapper.
  OXIDE_IMPL(m, "conj_physical_", TORCH_FN(conj_physical_));
  OXIDE_IMPL(m, "addr", TORCH_FN(addr));
  OXIDE_IMPL(m, "addr.out", TORCH_FN(addr_out));
  OXIDE_IMPL(m, "relu", TORCH_FN(relu));
  OXIDE_IMPL(m, "relu_", TORCH_FN(relu_));

  // Binary: op.Tensor(self, other[, alpha]), op_.Tensor, op.out.
  OXIDE_STRUCTURED(m, structured_ufunc_add_CPU, "add.Tensor", "add_.Tensor", "add.out", T, S);
  OXIDE_STRUCTURED(m, structured_sub_out, "sub.Tensor", "sub_.Tensor", "sub.out", T, S);
  OXIDE_STRUCTURED(m, structured_mul_out, "mul.Tensor", "mul_.Tensor", "mul.out", T);
  OXIDE_STRUCTURED(m, structured_div_out, "div.Tensor", "div_.Tensor", "div.out", T);
  OXIDE_STRUCTURED(m, structured_div_out_mode, "div.Tensor_mode", "div_.Tensor_mode", "div.out_mode", T,
                   std::optional<c10::string_view>);
  OXIDE_STRUCTURED(m, structured_remainder_out, "remainder.Tensor", "remainder_.Tensor", "remainder.Tensor_out", T);
  // floor_divide: PyTorch's native functions over div_floor_stub.
  OXIDE_IMPL(m, "floor_divide", TORCH_FN(static_cast<at::Tensor (*)(T, T)>(&at::native::floor_divide)));
  OXIDE_IMPL(m, "floor_divide_.Tensor",
             TORCH_FN(static_cast<at::Tensor& (*)(at::Tensor&, T)>(&at::native::floor_divide_)));
  OXIDE_IMPL(m, "floor_divide.out", TORCH_FN(at::native::floor_divide_out));
  OXIDE_IMPL(m, "remainder.Scalar_Tensor", TORCH_FN(remainder_scalar_tensor));
  OXIDE_STRUCTURED(m, structured_fmod_out, "fmod.Tensor", "fmod_.Tensor", "fmod.Tensor_out", T);
  OXIDE_STRUCTURED(m, structured_atan2_out, "atan2", "atan2_", "atan2.out", T);
  OXIDE_STRUCTURED(m, structured_hypot_out, "hypot", "hypot_", "hypot.out", T);
  OXIDE_STRUCTURED(m, structured_copysign_out, "copysign.Tensor", "copysign_.Tensor", "copysign.out", T);
  OXIDE_STRUCTURED(m, structured_maximum_out, "maximum", "", "maximum.out", T);
  OXIDE_STRUCTURED(m, structured_minimum_out, "minimum", "", "minimum.out", T);
  OXIDE_STRUCTURED(m, structured_fmax_out, "fmax", "", "fmax.out", T);
  OXIDE_STRUCTURED(m, structured_fmin_out, "fmin", "", "fmin.out", T);
  OXIDE_STRUCTURED(m, structured_logaddexp_out, "logaddexp", "", "logaddexp.out", T);
  OXIDE_STRUCTURED(m, structured_logaddexp2_out, "logaddexp2", "", "logaddexp2.out", T);
  OXIDE_STRUCTURED(m, structured_xlogy_out, "xlogy.Tensor", "xlogy_.Tensor", "xlogy.OutTensor", T);
  OXIDE_STRUCTURED(m, structured_heaviside_out, "heaviside", "heaviside_", "heaviside.out", T);
  // torch.special's binary ops; their Scalar overloads are composite (a wrapped-number tensor).
#define OXIDE_SPECIAL_BINARY(n) \
  OXIDE_STRUCTURED(m, structured_special_##n##_out, "special_" #n, "", "special_" #n ".out", T);
  OXIDE_SPECIAL_BINARY_OPS(OXIDE_SPECIAL_BINARY)
#undef OXIDE_SPECIAL_BINARY
  OXIDE_STRUCTURED(m, structured_nextafter_out, "nextafter", "nextafter_", "nextafter.out", T);
  OXIDE_STRUCTURED(m, structured_gcd_out, "gcd", "gcd_", "gcd.out", T);
  OXIDE_STRUCTURED(m, structured_lcm_out, "lcm", "lcm_", "lcm.out", T);
  OXIDE_STRUCTURED(m, structured_sigmoid_backward_out, "sigmoid_backward", "", "sigmoid_backward.grad_input", T);
  OXIDE_STRUCTURED(m, structured_tanh_backward_out, "tanh_backward", "", "tanh_backward.grad_input", T);
#define OXIDE_BITWISE(n) OXIDE_STRUCTURED(m, structured_##n##_out, #n ".Tensor", #n "_.Tensor", #n ".Tensor_out", T)
  OXIDE_BITWISE(bitwise_and);
  OXIDE_BITWISE(bitwise_or);
  OXIDE_BITWISE(bitwise_xor);
  OXIDE_BITWISE(bitwise_left_shift);
  OXIDE_BITWISE(bitwise_right_shift);
#undef OXIDE_BITWISE
#define OXIDE_COMPARE(n)                                                                              \
  OXIDE_STRUCTURED(m, structured_##n##_Tensor_out, #n ".Tensor", #n "_.Tensor", #n ".Tensor_out", T); \
  OXIDE_STRUCTURED(m, structured_##n##_Scalar_out, #n ".Scalar", #n "_.Scalar", #n ".Scalar_out", S)
  OXIDE_COMPARE(eq);
  OXIDE_COMPARE(ne);
  OXIDE_COMPARE(lt);
  OXIDE_COMPARE(le);
  OXIDE_COMPARE(gt);
  OXIDE_COMPARE(ge);
#undef OXIDE_COMPARE
  OXIDE_IMPL(m, "__lshift__.Scalar", TORCH_FN(static_cast<at::Tensor (*)(T, S)>(&__lshift__)));
  OXIDE_IMPL(m, "__lshift__.Tensor", TORCH_FN(static_cast<at::Tensor (*)(T, T)>(&__lshift__)));
  OXIDE_IMPL(m, "__ilshift__.Scalar", TORCH_FN(static_cast<at::Tensor& (*)(at::Tensor&, S)>(&__ilshift__)));
  OXIDE_IMPL(m, "__ilshift__.Tensor", TORCH_FN(static_cast<at::Tensor& (*)(at::Tensor&, T)>(&__ilshift__)));
  OXIDE_IMPL(m, "__rshift__.Scalar", TORCH_FN(static_cast<at::Tensor (*)(T, S)>(&__rshift__)));
  OXIDE_IMPL(m, "__rshift__.Tensor", TORCH_FN(static_cast<at::Tensor (*)(T, T)>(&__rshift__)));
  OXIDE_IMPL(m, "__irshift__.Scalar", TORCH_FN(static_cast<at::Tensor& (*)(at::Tensor&, S)>(&__irshift__)));
  OXIDE_IMPL(m, "__irshift__.Tensor", TORCH_FN(static_cast<at::Tensor& (*)(at::Tensor&, T)>(&__irshift__)));
  OXIDE_IMPL(m, "logical_and.out", TORCH_FN(logical_and_out));
  OXIDE_IMPL(m, "logical_or.out", TORCH_FN(logical_or_out));
  OXIDE_IMPL(m, "logical_xor.out", TORCH_FN(logical_xor_out));
  OXIDE_STRUCTURED(m, structured_pow_Tensor_Tensor_out, "pow.Tensor_Tensor", "pow_.Tensor", "pow.Tensor_Tensor_out", T);
  OXIDE_STRUCTURED(m, structured_pow_Tensor_Scalar_out, "pow.Tensor_Scalar", "pow_.Scalar", "pow.Tensor_Scalar_out", S);
  OXIDE_IMPL(m, "pow.Scalar", TORCH_FN((structured::functional<structured_pow_Scalar_out, S, T>)));
  OXIDE_IMPL(m, "pow.Scalar_out", TORCH_FN((structured::out<structured_pow_Scalar_out, S, T>)));

  // Clamping, ternary ops.
  OXIDE_STRUCTURED(m, structured_clamp_out, "clamp", "clamp_", "clamp.out", OptS, OptS);
  OXIDE_STRUCTURED(m, structured_clamp_Tensor_out, "clamp.Tensor", "clamp_.Tensor", "clamp.Tensor_out", OptT, OptT);
  OXIDE_STRUCTURED(m, structured_clamp_min_out, "clamp_min", "clamp_min_", "clamp_min.out", S);
  OXIDE_STRUCTURED(m, structured_clamp_max_out, "clamp_max", "clamp_max_", "clamp_max.out", S);
  OXIDE_STRUCTURED(m, structured_clamp_min_Tensor_out, "clamp_min.Tensor", "clamp_min_.Tensor", "clamp_min.Tensor_out",
                   T);
  OXIDE_STRUCTURED(m, structured_clamp_max_Tensor_out, "clamp_max.Tensor", "clamp_max_.Tensor", "clamp_max.Tensor_out",
                   T);
  OXIDE_STRUCTURED(m, structured_addcmul_out, "addcmul", "addcmul_", "addcmul.out", T, T, S);
  OXIDE_STRUCTURED(m, structured_addcdiv_out, "addcdiv", "addcdiv_", "addcdiv.out", T, T, S);
  OXIDE_STRUCTURED(m, structured_lerp_Scalar, "lerp.Scalar", "lerp_.Scalar", "lerp.Scalar_out", T, S);
  OXIDE_STRUCTURED(m, structured_lerp_Tensor, "lerp.Tensor", "lerp_.Tensor", "lerp.Tensor_out", T, T);
  OXIDE_IMPL(m, "where.self", TORCH_FN(static_cast<at::Tensor (*)(T, T, T)>(&where)));
  OXIDE_IMPL(m, "where.self_out", TORCH_FN(where_self_out));
}

}  // namespace oxide
