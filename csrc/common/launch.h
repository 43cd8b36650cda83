// The typed ABI's descriptors built from ATen tensors: where a kernel runs
// (OxideLaunch) and one OxideTensor per operand. The Rust side decodes and
// checks them (crates/torch-oxide-ext/src/abi/mod.rs, `operands`).
#pragma once

#include "common/oxide.h"

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>

#include <optional>

namespace oxide {

// A kernel on `t`'s device, on that device's current stream, with PyTorch's thread count.
inline OxideLaunch launch_on(const at::Tensor& t) {
  const c10::DeviceIndex device = t.device().index();
  return OxideLaunch{device, current_stream(device), static_cast<int32_t>(at::get_num_threads())};
}

// `t` as an operand the kernel accesses as `access` (an OXIDE_ACCESS_*); the
// sizes and strides arrays are `t`'s own, valid while `t` is neither resized nor freed.
// An undefined tensor is an absent optional operand (null data and null sizes); an
// empty tensor may have null data but always has its sizes array.
inline OxideTensor tensor_arg(const at::Tensor& t, int32_t access) {
  if (!t.defined()) {
    return OxideTensor{nullptr, 0, 0, nullptr, nullptr, access};
  }
  void* data = access == OXIDE_ACCESS_READ ? const_cast<void*>(t.const_data_ptr()) : t.mutable_data_ptr();
  return OxideTensor{
      data,  static_cast<int32_t>(t.scalar_type()), static_cast<size_t>(t.dim()), t.sizes().data(), t.strides().data(),
      access};
}

inline OxideTensor in_arg(const at::Tensor& t) { return tensor_arg(t, OXIDE_ACCESS_READ); }
inline OxideTensor out_arg(const at::Tensor& t) { return tensor_arg(t, OXIDE_ACCESS_WRITE); }
inline OxideTensor inout_arg(const at::Tensor& t) { return tensor_arg(t, OXIDE_ACCESS_READ_WRITE); }
inline OxideTensor in_arg(const std::optional<at::Tensor>& t) {
  return t.has_value() ? in_arg(*t) : tensor_arg(at::Tensor(), OXIDE_ACCESS_READ);
}

}  // namespace oxide
