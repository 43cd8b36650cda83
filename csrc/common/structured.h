// Registration of PyTorch structured kernels on oxide.
//
// A structured operator has one meta function (shapes, dtypes, broadcasting,
// output allocation) and one impl; PyTorch's codegen wraps each for a backend
// in three variants: functional (allocates outputs), in-place (checks self),
// and out= (resizes, or computes into a proxy when strides differ). These
// templates are those three wrappers, written once; `Base` is the exported
// `at::native::structured_<kernel>` class, whose impl runs the op's
// DispatchStub, which our REGISTER_PRIVATEUSE1_DISPATCH entries route to Rust.
// The helper semantics mirror torchgen's generated RegisterCPU.cpp
// (create_out, resize_out, check_inplace, maybe_create_proxy).
#pragma once

#include "common/device_check.h"
#include "common/oxide.h"

#include <ATen/EmptyTensor.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>

#include <array>
#include <functional>
#include <optional>
#include <tuple>
#include <type_traits>

namespace oxide::structured {

// Allocates directly from the device allocator, as CPU's structured kernels call
// empty_cpu: going through at::empty cost a dispatcher round trip and a second
// device guard per output, a measurable part of a small op's overhead. The
// wrapper's guard has already made options.device() current, which is where
// the allocator allocates.
inline at::Tensor create_out(c10::IntArrayRef sizes, c10::IntArrayRef strides, const c10::TensorOptions& options) {
  TORCH_INTERNAL_ASSERT(options.device().type() == c10::DeviceType::PrivateUse1);
  const auto dtype = c10::typeMetaToScalarType(options.dtype());
  const c10::DispatchKeySet keys(c10::DispatchKey::PrivateUse1);
  return strides.empty()
             ? at::detail::empty_generic(sizes, device_allocator(), keys, dtype, options.memory_format_opt())
             : at::detail::empty_strided_generic(sizes, strides, device_allocator(), keys, dtype);
}

inline void resize_out(const at::Tensor& out, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                       const c10::TensorOptions& options) {
  TORCH_CHECK(options.dtype() == out.dtype(), "Expected out tensor to have dtype ", options.dtype(), ", but got ",
              out.dtype(), " instead");
  TORCH_CHECK(options.device() == out.device(), "Expected out tensor to have device ", options.device(), ", but got ",
              out.device(), " instead");
  const bool resized = at::native::resize_output(out, sizes);
  // Restride only after a resize; otherwise the out tensor's own strides win (meta strides are advisory).
  if (resized) {
    if (!strides.empty()) {
      TORCH_INTERNAL_ASSERT(!options.memory_format_opt().has_value());
      const_cast<at::Tensor&>(out).as_strided_(sizes, strides);
    } else if (options.memory_format_opt().has_value()) {
      out.unsafeGetTensorImpl()->empty_tensor_restride(*options.memory_format_opt());
    }
  }
}

inline void check_inplace(const at::Tensor& self, c10::IntArrayRef sizes, const c10::TensorOptions& options) {
  TORCH_CHECK(options.dtype() == self.dtype(), "Bad in-place call: input tensor dtype ", self.dtype(),
              " and output tensor dtype ", options.dtype(), " should match");
  TORCH_CHECK(options.device() == self.device(), "Bad in-place call: input tensor device ", self.device(),
              " and output tensor device ", options.device(), " should match");
  TORCH_CHECK(sizes == self.sizes(), "Bad in-place call: input tensor size ", self.sizes(), " and output tensor size ",
              sizes, " should match");
}

inline std::optional<at::Tensor> maybe_create_proxy(const at::Tensor& out, c10::IntArrayRef sizes,
                                                    c10::IntArrayRef strides, const c10::TensorOptions& options) {
  if (out.strides() != strides) {
    return at::empty_strided(sizes, strides, options);
  }
  return std::nullopt;
}

// Argument conversion as the codegen does it: optional Scalars and Tensors
// reach meta/impl as OptionalScalarRef / OptionalTensorRef; all else as is.
template <class T>
T&& ref(T&& x) {
  return std::forward<T>(x);
}
inline at::OptionalScalarRef ref(const std::optional<c10::Scalar>& s) {
  return s.has_value() ? at::OptionalScalarRef(&s.value()) : at::OptionalScalarRef();
}
inline at::OptionalTensorRef ref(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? at::OptionalTensorRef(*t) : at::OptionalTensorRef();
}

enum class Kind { Functional, Inplace, Out };

// One wrapper class for all three kinds; N = number of outputs.
template <class Base, Kind K, size_t N>
struct Wrapper final : Base {
  static constexpr bool kIterator = std::is_base_of_v<at::TensorIteratorBase, Base>;

  Wrapper() = default;
  template <class... T>
  explicit Wrapper(T&... outs) : given_{std::ref(outs)...} {}

  void set_output_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                          c10::TensorOptions options) override {
    set(i, sizes, strides, options, /*proxy=*/true);
  }
  void set_output_raw_strided(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                              c10::TensorOptions options) override {
    set(i, sizes, strides, options, /*proxy=*/false);
  }
  const at::Tensor& maybe_get_output(int64_t i) override {
    if constexpr (K == Kind::Functional) {
      return outputs_[i];
    } else {
      return proxies_[i].has_value() ? *proxies_[i] : given_[i].get();
    }
  }
  // Copies proxy results back into the caller's tensors (in-place and out= kinds).
  void commit() {
    if constexpr (K != Kind::Functional) {
      for (size_t i = 0; i < N; ++i) {
        if (proxies_[i].has_value()) {
          given_[i].get().copy_(*proxies_[i]);
        }
      }
    }
  }

  std::array<at::Tensor, N> outputs_;
  std::array<std::reference_wrapper<at::Tensor>, K == Kind::Functional ? 0 : N> given_;
  std::array<std::optional<at::Tensor>, N> proxies_;
  c10::OptionalDeviceGuard guard_;

 private:
  void set(int64_t i, c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::TensorOptions options, bool proxy) {
    if (!guard_.current_device().has_value()) {
      guard_.reset_device(options.device());
    }
    if constexpr (K == Kind::Functional) {
      outputs_[i] = create_out(sizes, strides, options);
    } else {
      const auto& out = given_[i].get();
      if constexpr (K == Kind::Inplace) {
        check_inplace(out, sizes, options);
      } else {
        resize_out(out, sizes, strides, options);
      }
      if (proxy) {
        auto p = maybe_create_proxy(out, sizes, strides, options);
        if (C10_UNLIKELY(p.has_value())) {
          proxies_[i] = std::move(p);
        }
      }
    }
    if constexpr (kIterator) {
      Base::set_output_raw_strided(i, sizes, strides, options);
    }
  }
};

// op(args...) -> Tensor
template <class Base, class... A>
at::Tensor functional(A... args) {
  Wrapper<Base, Kind::Functional, 1> op;
  op.meta(ref(args)...);
  op.impl(ref(args)..., op.outputs_[0]);
  return std::move(op.outputs_[0]);
}

// op_(self, rest...) -> self
template <class Base, class... A>
at::Tensor& inplace(at::Tensor& self, A... rest) {
  Wrapper<Base, Kind::Inplace, 1> op(self);
  op.meta(self, ref(rest)...);
  op.impl(self, ref(rest)..., op.maybe_get_output(0));
  op.commit();
  return self;
}

// op.out(args..., out) -> out
template <class Base, class... A>
at::Tensor& out(A... args, at::Tensor& result) {
  Wrapper<Base, Kind::Out, 1> op(result);
  op.meta(ref(args)...);
  op.impl(ref(args)..., op.maybe_get_output(0));
  op.commit();
  return result;
}

// Two-output variants (values, indices), e.g. max.dim, sort, topk.
template <class Base, class... A>
std::tuple<at::Tensor, at::Tensor> functional2(A... args) {
  Wrapper<Base, Kind::Functional, 2> op;
  op.meta(ref(args)...);
  op.impl(ref(args)..., op.outputs_[0], op.outputs_[1]);
  return {std::move(op.outputs_[0]), std::move(op.outputs_[1])};
}

template <class Base, class... A>
std::tuple<at::Tensor&, at::Tensor&> out2(A... args, at::Tensor& r0, at::Tensor& r1) {
  Wrapper<Base, Kind::Out, 2> op(r0, r1);
  op.meta(ref(args)...);
  op.impl(ref(args)..., op.maybe_get_output(0), op.maybe_get_output(1));
  op.commit();
  return {r0, r1};
}

}  // namespace oxide::structured

// Registers functional, in-place and out= variants of a structured op whose
// impl takes the meta arguments followed by the output. `...` are the C++
// types of the arguments after `self`. Pass "" as the in-place name for ops without one.
#define OXIDE_STRUCTURED(m, base, fname, iname, oname, ...)                                                          \
  do {                                                                                                               \
    OXIDE_IMPL(m, fname,                                                                                             \
               TORCH_FN((::oxide::structured::functional<base, const at::Tensor & __VA_OPT__(, ) __VA_ARGS__>)));    \
    if constexpr (sizeof(iname) > 1) {                                                                               \
      OXIDE_IMPL(m, iname, TORCH_FN((::oxide::structured::inplace<base __VA_OPT__(, ) __VA_ARGS__>)));               \
    }                                                                                                                \
    OXIDE_IMPL(m, oname, TORCH_FN((::oxide::structured::out<base, const at::Tensor & __VA_OPT__(, ) __VA_ARGS__>))); \
  } while (0)
