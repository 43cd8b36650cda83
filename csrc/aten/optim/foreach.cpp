// The `_foreach_*` operators torch.optim's default (foreach) implementations and
// clip_grad_norm_ call on oxide parameters: Adam, AdamW, SGD, RMSprop, Adagrad,
// Adamax, NAdam, RAdam and Adadelta use the arithmetic ones registered here.
//
// PyTorch's own kernels for a backend without multi-tensor kernels (the
// CompositeExplicitAutograd `foreach_tensor_*_slow` functions) call the per-tensor
// operator for each list entry through the dispatcher: a TensorIterator, a
// structured meta function and an output check per tensor, 2-3 us each on the CI
// machine, about 60 calls per Adam step of a small model. Here, each entry whose
// operands are all contiguous, of one floating dtype (float32/float64), of one
// shape and on the same oxide device goes straight to the Rust pointwise kernel of
// the per-tensor operator (oxide_kernels::ops::elementwise::pointwise, the same kernel and the same
// scalar handling that operator uses), described as one flat run of elements. Any
// other list (another dtype, a view, broadcasting, CPU tensors, a complex or
// boolean scalar, partial overlap) goes whole to PyTorch's slow kernel, so its
// checks, promotions and error messages are PyTorch's.
#include "common/device_check.h"
#include "common/kernels.h"

#include <ATen/Parallel.h>
#include <ATen/ops/_foreach_abs_native.h>
#include <ATen/ops/_foreach_add_native.h>
#include <ATen/ops/_foreach_addcdiv_native.h>
#include <ATen/ops/_foreach_addcmul_native.h>
#include <ATen/ops/_foreach_div_native.h>
#include <ATen/ops/_foreach_lerp_native.h>
#include <ATen/ops/_foreach_mul_native.h>
#include <ATen/ops/_foreach_neg_native.h>
#include <ATen/ops/_foreach_reciprocal_native.h>
#include <ATen/ops/_foreach_sqrt_native.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <vector>

namespace oxide {
namespace {

using at::ArrayRef;
using at::Scalar;
using at::Tensor;
using at::TensorList;

// A scalar the fast path can pass as a float: real and not boolean (the per-tensor
// operators promote those differently, so they take the slow path).
bool plain(const Scalar& s) { return s.isFloatingPoint() || s.isIntegral(false); }

bool plain(ArrayRef<Scalar> scalars) {
  for (const auto& s : scalars) {
    if (!plain(s)) {
      return false;
    }
  }
  return true;
}

// Whether entry `i` of every list qualifies for the fast path (see the file comment).
bool fast_entry(const Tensor& self, std::initializer_list<TensorList> others, size_t i) {
  const auto dt = self.scalar_type();
  if (!self.defined() || !self.is_privateuseone() || (dt != at::kFloat && dt != at::kDouble) || !self.is_contiguous() ||
      self.is_neg() || self.is_conj()) {
    return false;
  }
  for (const auto& list : others) {
    const Tensor& t = list[i];
    if (!t.defined() || t.device() != self.device() || t.scalar_type() != dt || !t.is_contiguous() ||
        t.sizes() != self.sizes() || t.is_neg() || t.is_conj()) {
      return false;
    }
    // The same memory (an in-place update that also reads self) is fine elementwise;
    // other overlap gets the per-tensor operator's error.
    if (t.is_alias_of(self) && t.const_data_ptr() != self.const_data_ptr()) {
      return false;
    }
  }
  return true;
}

// Whether every entry qualifies; lists of unequal length or empty lists are left to
// PyTorch's checks.
bool fast(TensorList self, std::initializer_list<TensorList> others, size_t scalars = SIZE_MAX) {
  if (self.empty() || (scalars != SIZE_MAX && scalars != self.size())) {
    return false;
  }
  for (const auto& list : others) {
    if (list.size() != self.size()) {
      return false;
    }
  }
  for (size_t i = 0; i < self.size(); ++i) {
    if (!fast_entry(self[i], others, i) || self[i].device() != self[0].device()) {
      return false;
    }
  }
  return true;
}

// One kernel call: `out = op(inputs...)` over `numel` contiguous elements of `dtype`.
// `broadcast` is an input read at stride 0 (a scalar operand, or a 0-dim tensor).
struct Launch {
  Launch(OxidePointwiseOp op, const Tensor& first) : on(launch_on(first)), op(op) {}

  void run(const Tensor& out, std::initializer_list<const void*> inputs, int64_t numel, at::ScalarType dtype,
           const ScalarArgs& scalars, const void* broadcast = nullptr) {
    std::array<void*, 8> data{};
    std::array<int32_t, 8> dtypes{};
    std::array<int64_t, 8> strides{};
    const int64_t size = static_cast<int64_t>(c10::elementSize(dtype));
    size_t n = 0;
    data[n] = out.data_ptr();
    dtypes[n] = static_cast<int32_t>(dtype);
    strides[n++] = size;
    for (const void* p : inputs) {
      data[n] = const_cast<void*>(p);
      dtypes[n] = static_cast<int32_t>(dtype);
      strides[n++] = p == broadcast ? 0 : size;
    }
    const OxideIter abi{1, &numel, n, 1, data.data(), dtypes.data(), strides.data()};
    OXIDE_CHECK(oxide_pointwise(on, op, &abi, static_cast<int32_t>(dtype), scalars.abi()));
  }

  OxideLaunch on;
  OxidePointwiseOp op;
};

// A scalar as a one-element operand of the tensors' dtype (the per-tensor operator
// converts a wrapped number to the computation dtype the same way).
struct ScalarOperand {
  ScalarOperand(const Scalar& s, at::ScalarType dtype) {
    // Unchecked, as a wrapped number's conversion: 1e300 times a float32 tensor is inf, not an
    // error. Integers convert straight to the element type (no rounding through double first),
    // unsigned 64-bit ones from their unsigned value.
    if (s.isFloatingPoint()) {
      d = s.toDouble();
      f = static_cast<float>(d);
    } else if (s.type() == at::ScalarType::UInt64) {
      const uint64_t u = s.toUInt64();
      d = static_cast<double>(u);
      f = static_cast<float>(u);
    } else {
      const int64_t v = s.toLong();
      d = static_cast<double>(v);
      f = static_cast<float>(v);
    }
    ptr = dtype == at::kFloat ? static_cast<const void*>(&f) : static_cast<const void*>(&d);
  }
  float f = 0;
  double d = 0;
  const void* ptr;
};

// The kernel's first scalar parameter (add's alpha, lerp's weight, addcmul's value), a double or a Scalar.
template <typename T>
ScalarArgs args(const T& a) {
  ScalarArgs s;
  s.set(0, a);
  return s;
}

// Outputs of the out-of-place forms, with the strides the per-tensor operator would
// give (a contiguous tensor with size-1 dimensions may carry channels-last strides).
std::vector<Tensor> empty_like_each(TensorList self) {
  std::vector<Tensor> out;
  out.reserve(self.size());
  for (const auto& t : self) {
    out.push_back(at::empty_like(t));
  }
  return out;
}

// An in-place update of each entry bumps its version counter once, as the per-tensor
// operators do (a tensor listed twice counts twice), so autograd detects a changed saved
// tensor; an inference tensor outside inference mode raises here, before any write.
void bump_versions(TensorList self) {
  for (const auto& t : self) {
    t.unsafeGetTensorImpl()->bump_version();
  }
}

// Binary ops `out[i] = op(self[i], scalar_i)` (scalar_i from `scalar_of(i)`), `add` with alpha 1.
template <typename ScalarOf>
void binary_scalar(OxidePointwiseOp op, TensorList out, TensorList self, ScalarOf scalar_of) {
  Launch k(op, self[0]);
  const auto sa = args(1.0);
  for (size_t i = 0; i < self.size(); ++i) {
    const auto dt = self[i].scalar_type();
    const ScalarOperand s(scalar_of(i), dt);
    k.run(out[i], {self[i].const_data_ptr(), s.ptr}, self[i].numel(), dt, sa, s.ptr);
  }
}

// Binary ops `out[i] = op(self[i], other[i])`, scalar parameter `param` (add's alpha).
void binary_list(OxidePointwiseOp op, TensorList out, TensorList self, TensorList other, const ScalarArgs& param) {
  Launch k(op, self[0]);
  for (size_t i = 0; i < self.size(); ++i) {
    k.run(out[i], {self[i].const_data_ptr(), other[i].const_data_ptr()}, self[i].numel(), self[i].scalar_type(), param);
  }
}

// Ternary ops `out[i] = op(self[i], t1[i], t2[i])` with value `value_of(i)` (addcmul/addcdiv).
template <typename ValueOf>
void ternary(OxidePointwiseOp op, TensorList out, TensorList self, TensorList t1, TensorList t2, ValueOf value_of) {
  Launch k(op, self[0]);
  for (size_t i = 0; i < self.size(); ++i) {
    k.run(out[i], {self[i].const_data_ptr(), t1[i].const_data_ptr(), t2[i].const_data_ptr()}, self[i].numel(),
          self[i].scalar_type(), args(value_of(i)));
  }
}

void unary(OxidePointwiseOp op, TensorList out, TensorList self) {
  Launch k(op, self[0]);
  for (size_t i = 0; i < self.size(); ++i) {
    k.run(out[i], {self[i].const_data_ptr()}, self[i].numel(), self[i].scalar_type(), ScalarArgs{});
  }
}

// A 0-dim tensor operand on the lists' device and of their dtype, read at stride 0.
// It may be a list entry itself (a one-element tensor at the same address), but not a
// view into a larger entry: the per-tensor operator rejects that partial overlap.
bool fast_tensor_scalar(TensorList self, const Tensor& other) {
  if (!fast(self, {}) || !other.defined() || other.dim() != 0 || other.device() != self[0].device() ||
      other.scalar_type() != self[0].scalar_type() || other.is_neg() || other.is_conj()) {
    return false;
  }
  for (const auto& t : self) {
    if (other.is_alias_of(t) && (t.numel() != 1 || t.const_data_ptr() != other.const_data_ptr())) {
      return false;
    }
  }
  return true;
}

// ---- add ----
void add_scalar_(TensorList self, const Scalar& s) {
  if (!fast(self, {}) || !plain(s)) {
    return at::native::foreach_tensor_add_scalar_kernel_slow_(self, s);
  }
  bump_versions(self);
  binary_scalar(OXIDE_POINTWISE_add, self, self, [&](size_t) { return s; });
}
std::vector<Tensor> add_scalar(TensorList self, const Scalar& s) {
  if (!fast(self, {}) || !plain(s)) {
    return at::native::foreach_tensor_add_scalar_kernel_slow(self, s);
  }
  auto out = empty_like_each(self);
  binary_scalar(OXIDE_POINTWISE_add, out, self, [&](size_t) { return s; });
  return out;
}
void add_scalarlist_(TensorList self, ArrayRef<Scalar> s) {
  if (!fast(self, {}, s.size()) || !plain(s)) {
    return at::native::foreach_tensor_add_scalarlist_kernel_slow_(self, s);
  }
  bump_versions(self);
  binary_scalar(OXIDE_POINTWISE_add, self, self, [&](size_t i) { return s[i]; });
}
void add_list_(TensorList self, TensorList other, const Scalar& alpha) {
  if (!fast(self, {other}) || !plain(alpha)) {
    return at::native::foreach_tensor_add_list_kernel_slow_(self, other, alpha);
  }
  bump_versions(self);
  binary_list(OXIDE_POINTWISE_add, self, self, other, args(alpha));
}
std::vector<Tensor> add_list(TensorList self, TensorList other, const Scalar& alpha) {
  if (!fast(self, {other}) || !plain(alpha)) {
    return at::native::foreach_tensor_add_list_kernel_slow(self, other, alpha);
  }
  auto out = empty_like_each(self);
  binary_list(OXIDE_POINTWISE_add, out, self, other, args(alpha));
  return out;
}

// ---- mul ----
void mul_scalar_(TensorList self, const Scalar& s) {
  if (!fast(self, {}) || !plain(s)) {
    return at::native::foreach_tensor_mul_scalar_kernel_slow_(self, s);
  }
  bump_versions(self);
  binary_scalar(OXIDE_POINTWISE_mul, self, self, [&](size_t) { return s; });
}
void mul_scalarlist_(TensorList self, ArrayRef<Scalar> s) {
  if (!fast(self, {}, s.size()) || !plain(s)) {
    return at::native::foreach_tensor_mul_scalarlist_kernel_slow_(self, s);
  }
  bump_versions(self);
  binary_scalar(OXIDE_POINTWISE_mul, self, self, [&](size_t i) { return s[i]; });
}
std::vector<Tensor> mul_scalarlist(TensorList self, ArrayRef<Scalar> s) {
  if (!fast(self, {}, s.size()) || !plain(s)) {
    return at::native::foreach_tensor_mul_scalarlist_kernel_slow(self, s);
  }
  auto out = empty_like_each(self);
  binary_scalar(OXIDE_POINTWISE_mul, out, self, [&](size_t i) { return s[i]; });
  return out;
}
void mul_list_(TensorList self, TensorList other) {
  if (!fast(self, {other})) {
    return at::native::foreach_tensor_mul_list_kernel_slow_(self, other);
  }
  bump_versions(self);
  binary_list(OXIDE_POINTWISE_mul, self, self, other, ScalarArgs{});
}
void mul_tensor_(TensorList self, const Tensor& other) {
  if (!fast_tensor_scalar(self, other)) {
    return at::native::foreach_tensor_mul_tensor_kernel_slow_(self, other);
  }
  bump_versions(self);
  Launch k(OXIDE_POINTWISE_mul, self[0]);
  const void* s = other.const_data_ptr();
  for (const auto& t : self) {
    k.run(t, {t.const_data_ptr(), s}, t.numel(), t.scalar_type(), ScalarArgs{}, s);
  }
}

// ---- div ----
void div_scalar_(TensorList self, const Scalar& s) {
  if (!fast(self, {}) || !plain(s)) {
    return at::native::foreach_tensor_div_scalar_kernel_slow_(self, s);
  }
  bump_versions(self);
  binary_scalar(OXIDE_POINTWISE_div_true, self, self, [&](size_t) { return s; });
}
void div_scalarlist_(TensorList self, ArrayRef<Scalar> s) {
  if (!fast(self, {}, s.size()) || !plain(s)) {
    return at::native::foreach_tensor_div_scalarlist_kernel_slow_(self, s);
  }
  bump_versions(self);
  binary_scalar(OXIDE_POINTWISE_div_true, self, self, [&](size_t i) { return s[i]; });
}
void div_list_(TensorList self, TensorList other) {
  if (!fast(self, {other})) {
    return at::native::foreach_tensor_div_list_kernel_slow_(self, other);
  }
  bump_versions(self);
  binary_list(OXIDE_POINTWISE_div_true, self, self, other, ScalarArgs{});
}

// ---- lerp, addcmul, addcdiv ----
void lerp_scalar_(TensorList self, TensorList end, const Scalar& weight) {
  if (!fast(self, {end}) || !plain(weight)) {
    return at::native::foreach_tensor_lerp_list_kernel_slow_(self, end, weight);
  }
  bump_versions(self);
  binary_list(OXIDE_POINTWISE_lerp_scalar, self, self, end, args(weight));
}
void addcmul_scalar_(TensorList self, TensorList t1, TensorList t2, const Scalar& value) {
  if (!fast(self, {t1, t2}) || !plain(value)) {
    return at::native::foreach_tensor_addcmul_scalar_slow_(self, t1, t2, value);
  }
  bump_versions(self);
  ternary(OXIDE_POINTWISE_addcmul, self, self, t1, t2, [&](size_t) { return value; });
}
std::vector<Tensor> addcmul_scalar(TensorList self, TensorList t1, TensorList t2, const Scalar& value) {
  if (!fast(self, {t1, t2}) || !plain(value)) {
    return at::native::foreach_tensor_addcmul_scalar_slow(self, t1, t2, value);
  }
  auto out = empty_like_each(self);
  ternary(OXIDE_POINTWISE_addcmul, out, self, t1, t2, [&](size_t) { return value; });
  return out;
}
void addcdiv_scalar_(TensorList self, TensorList t1, TensorList t2, const Scalar& value) {
  if (!fast(self, {t1, t2}) || !plain(value)) {
    return at::native::foreach_tensor_addcdiv_scalar_slow_(self, t1, t2, value);
  }
  bump_versions(self);
  ternary(OXIDE_POINTWISE_addcdiv, self, self, t1, t2, [&](size_t) { return value; });
}
void addcdiv_scalarlist_(TensorList self, TensorList t1, TensorList t2, ArrayRef<Scalar> values) {
  if (!fast(self, {t1, t2}, values.size()) || !plain(values)) {
    return at::native::foreach_tensor_addcdiv_scalarlist_slow_(self, t1, t2, values);
  }
  bump_versions(self);
  ternary(OXIDE_POINTWISE_addcdiv, self, self, t1, t2, [&](size_t i) { return values[i]; });
}

// ---- unary ----
std::vector<Tensor> sqrt(TensorList self) {
  if (!fast(self, {})) {
    return at::native::foreach_tensor_sqrt_slow(self);
  }
  auto out = empty_like_each(self);
  unary(OXIDE_POINTWISE_sqrt, out, self);
  return out;
}
void sqrt_(TensorList self) {
  if (!fast(self, {})) {
    return at::native::foreach_tensor_sqrt_slow_(self);
  }
  bump_versions(self);
  unary(OXIDE_POINTWISE_sqrt, self, self);
}
std::vector<Tensor> neg(TensorList self) {
  if (!fast(self, {})) {
    return at::native::foreach_tensor_neg_slow(self);
  }
  auto out = empty_like_each(self);
  unary(OXIDE_POINTWISE_neg, out, self);
  return out;
}
std::vector<Tensor> abs(TensorList self) {
  if (!fast(self, {})) {
    return at::native::foreach_tensor_abs_slow(self);
  }
  auto out = empty_like_each(self);
  unary(OXIDE_POINTWISE_abs, out, self);
  return out;
}
void reciprocal_(TensorList self) {
  if (!fast(self, {})) {
    return at::native::foreach_tensor_reciprocal_slow_(self);
  }
  bump_versions(self);
  unary(OXIDE_POINTWISE_reciprocal, self, self);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "_foreach_add_.Scalar", TORCH_FN(add_scalar_));
  OXIDE_IMPL(m, "_foreach_add.Scalar", TORCH_FN(add_scalar));
  OXIDE_IMPL(m, "_foreach_add_.ScalarList", TORCH_FN(add_scalarlist_));
  OXIDE_IMPL(m, "_foreach_add_.List", TORCH_FN(add_list_));
  OXIDE_IMPL(m, "_foreach_add.List", TORCH_FN(add_list));
  OXIDE_IMPL(m, "_foreach_mul_.Scalar", TORCH_FN(mul_scalar_));
  OXIDE_IMPL(m, "_foreach_mul_.ScalarList", TORCH_FN(mul_scalarlist_));
  OXIDE_IMPL(m, "_foreach_mul.ScalarList", TORCH_FN(mul_scalarlist));
  OXIDE_IMPL(m, "_foreach_mul_.List", TORCH_FN(mul_list_));
  OXIDE_IMPL(m, "_foreach_mul_.Tensor", TORCH_FN(mul_tensor_));
  OXIDE_IMPL(m, "_foreach_div_.Scalar", TORCH_FN(div_scalar_));
  OXIDE_IMPL(m, "_foreach_div_.ScalarList", TORCH_FN(div_scalarlist_));
  OXIDE_IMPL(m, "_foreach_div_.List", TORCH_FN(div_list_));
  OXIDE_IMPL(m, "_foreach_lerp_.Scalar", TORCH_FN(lerp_scalar_));
  OXIDE_IMPL(m, "_foreach_addcmul_.Scalar", TORCH_FN(addcmul_scalar_));
  OXIDE_IMPL(m, "_foreach_addcmul.Scalar", TORCH_FN(addcmul_scalar));
  OXIDE_IMPL(m, "_foreach_addcdiv_.Scalar", TORCH_FN(addcdiv_scalar_));
  OXIDE_IMPL(m, "_foreach_addcdiv_.ScalarList", TORCH_FN(addcdiv_scalarlist_));
  OXIDE_IMPL(m, "_foreach_sqrt", TORCH_FN(sqrt));
  OXIDE_IMPL(m, "_foreach_sqrt_", TORCH_FN(sqrt_));
  OXIDE_IMPL(m, "_foreach_neg", TORCH_FN(neg));
  OXIDE_IMPL(m, "_foreach_abs", TORCH_FN(abs));
  OXIDE_IMPL(m, "_foreach_reciprocal_", TORCH_FN(reciprocal_));
}

}  // namespace oxide
