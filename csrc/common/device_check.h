// The device check of every operator registered for oxide: the check torchgen
// generates into a backend's registration wrappers (RegisterCUDA.cpp), which
// kernels registered by hand with m.impl() would otherwise skip. Without it
// `ones(2, 3, device="oxide:0") @ ones(3, 2, device="oxide:1")` would compute
// a result from another device's memory where CUDA raises.
//
// The rule of each operator comes from PyTorch's native_functions.yaml
// (build.rs generates oxide_device_check.h from the installed torch):
// - Strict (the default): every defined tensor argument, lists included, on one
//   device; CUDA's message from c10::impl::common_device_check_failure.
// - Iterator (`device_check: NoCheck  # TensorIterator` and other NoCheck ops):
//   TensorIterator's rule, CPU 0-dim tensors are scalars and allowed.
// - None: operators whose kernels take tensors on other devices on purpose
//   (copies, indexing with CPU indices, set_, foreach lists, a CPU lr tensor).
// OXIDE_IMPL(m, "name", TORCH_FN(f)) registers f behind the check of "name".
#pragma once

#include "common/oxide.h"
#include "oxide_device_check.h"

#include <ATen/core/boxing/KernelFunction.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/op_registration/adaption.h>
#include <c10/util/ArrayRef.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <string_view>
#include <type_traits>

namespace oxide::device_check {

enum class Rule { Strict, Iterator, None };

// Operators whose kernels check (or deliberately accept) other devices themselves:
// copies, metadata comparisons, fill_ from a 0-dim value anywhere (read with item(),
// as CUDA does), advanced indexing with CPU indices, set_, a CPU learning-rate tensor.
inline constexpr std::string_view k_own_rule[] = {
    "_copy_from",
    "_copy_from_and_resize",
    "_to_copy",
    "copy_",
    "_has_compatible_shallow_copy_type",
    "is_set_to",
    "is_same_size",
    "_has_same_storage_numel",
    "fill_.Tensor",
    "index.Tensor",
    "index.Tensor_out",
    "index_put",
    "index_put_",
    "_index_put_impl_",
    "index.Tensor_hacked_twin",
    "index_put.hacked_twin",
    "index_put_.hacked_twin",
    "_unsafe_index.Tensor",
    "_unsafe_index_put",
    "_unsafe_masked_index",
    "_unsafe_masked_index_put_accumulate",
    "set_.source_Storage",
    "set_.source_Storage_storage_offset",
    "set_.source_Tensor",
    "_fused_adam_.tensor_lr",
    "_fused_adamw_.tensor_lr",
    "_fused_sgd_.tensor_lr",
};

constexpr Rule rule_for(std::string_view name) {
  if (name.starts_with("_foreach_") ||
      std::find(std::begin(k_own_rule), std::end(k_own_rule), name) != std::end(k_own_rule)) {
    return Rule::None;
  }
  // k_no_device_check (generated) is sorted.
  return std::binary_search(std::begin(k_no_device_check), std::end(k_no_device_check), name) ? Rule::Iterator
                                                                                              : Rule::Strict;
}

// Raises CUDA's error for argument `index` of operator `name` (looked up in its schema).
[[noreturn]] void fail(std::string_view name, size_t index, c10::Device common, const at::Tensor& tensor);

// Walks an operator's arguments and remembers the first mismatch.
struct Checker {
  Rule rule;
  std::optional<c10::Device> common;
  std::optional<c10::Device> scalar_device;  // Iterator rule: a CPU scalar seen before any other tensor
  const at::Tensor* bad = nullptr;
  size_t bad_index = 0;

  void tensor(const at::Tensor& t, size_t index) {
    if (bad != nullptr || !t.defined()) {
      return;
    }
    if (rule == Rule::Iterator && t.is_cpu() && t.dim() == 0) {
      return;
    }
    if (!common) {
      common = t.device();
    } else if (*common != t.device()) {
      bad = &t;
      bad_index = index;
    }
  }

  template <class T>
  void arg(const T& a, size_t index) {
    using D = std::decay_t<T>;
    if constexpr (std::is_same_v<D, at::Tensor>) {
      tensor(a, index);
    } else if constexpr (std::is_same_v<D, std::optional<at::Tensor>>) {
      if (a.has_value()) {
        tensor(*a, index);
      }
    } else if constexpr (std::is_same_v<D, at::TensorList> || std::is_same_v<D, at::ITensorListRef>) {
      for (const auto& t : a) {
        tensor(t, index);
      }
    } else if constexpr (std::is_same_v<D, c10::List<std::optional<at::Tensor>>>) {
      for (const std::optional<at::Tensor> t : a) {
        if (t.has_value()) {
          tensor(*t, index);
        }
      }
    } else if constexpr (std::is_same_v<D, at::OptionalTensorRef>) {
      if (a.has_value()) {
        tensor(*a, index);
      }
    }
  }
};

// A string literal usable as a template argument.
template <size_t N>
struct OpName {
  char s[N]{};
  consteval OpName(const char (&a)[N]) { std::copy_n(a, N, s); }
  constexpr std::string_view view() const { return {s, N - 1}; }
};

// Operators whose kernel handles a dtype it cannot compute itself: the copies,
// which are also how the CPU fallback moves tensors (handing them to it would recurse).
constexpr bool handles_dtypes_itself(std::string_view name) {
  return name.starts_with("_copy_from") || name == "copy_" || name == "_to_copy" || name == "_local_scalar_dense";
}

// The aten operator `name` ("add.out"), or nullptr when there is none (an oxide:: operator).
const c10::OperatorHandle* aten_op(std::string_view name);

// The boxed CPU fallback (runtime/fallback.cpp), told that the native kernel refused
// the call's dtypes: it warns, counts and obeys OXIDE_FALLBACK like any fallback.
c10::BoxedKernel dtype_fallback_kernel(const UnsupportedDtype& refused);

template <OpName Name, class Fn>
struct Checked;

// The registration wrapper of every native kernel: the device check, then the kernel;
// a kernel that has no loop for the call's dtypes (UnsupportedDtype) hands the whole
// call to the CPU fallback, with the same arguments, instead of failing. Kernels raise
// it before writing any operand (the first launch of a dtype runs at the call, see
// abi/mod.rs `launch_op`), so the fallback starts from the caller's values.
template <OpName Name, class Ret, class... Args, Ret (*F)(Args...)>
struct Checked<Name, c10::CompileTimeFunctionPointer<Ret(Args...), F>> {
  // A constant: evaluated at compile time, not looked up (a binary search over
  // operator names) at every call, which `callgrind` showed it otherwise was.
  static constexpr Rule k_rule = rule_for(Name.view());

  static Ret call(Args... args) {
    if constexpr (k_rule != Rule::None) {
      Checker c{k_rule};
      size_t index = 0;
      (c.arg(args, index++), ...);
      if (C10_UNLIKELY(c.bad != nullptr)) {
        fail(Name.view(), c.bad_index, *c.common, *c.bad);
      }
    }
    if constexpr (handles_dtypes_itself(Name.view())) {
      return F(std::forward<Args>(args)...);
    } else {
      try {
        // Lvalues: the arguments must survive for the fallback.
        return F(args...);
      } catch (const UnsupportedDtype& refused) {
        const c10::OperatorHandle* op = aten_op(Name.view());
        if (op == nullptr) {
          throw;
        }
        return c10::impl::BoxedKernelWrapper<Ret(Args...)>::call(
            dtype_fallback_kernel(refused), *op, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), args...);
      }
    }
  }
};

template <OpName Name, class Fn>
void impl(torch::Library& m, Fn&& fn) {
  using F = std::decay_t<Fn>;
  if constexpr (c10::is_compile_time_function_pointer<F>::value) {
    m.impl(Name.s, TORCH_FN((Checked<Name, F>::call)));
  } else {
    m.impl(Name.s, std::forward<Fn>(fn));
  }
}

// The boxed form, for the CPU fallback: checks the arguments on `stack` of `op`.
void check_boxed(const c10::OperatorHandle& op, const torch::jit::Stack& stack);

}  // namespace oxide::device_check

#define OXIDE_IMPL(m, name, ...) ::oxide::device_check::impl<name>(m, __VA_ARGS__)
