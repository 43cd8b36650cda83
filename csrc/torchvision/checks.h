// Checks shared by the torchvision operators' glue (csrc/torchvision/*.cpp): the
// device check the dispatcher would generate, and torchvision's CPU dtype refusal.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/op_registration/adaption.h>

#include <initializer_list>
#include <utility>

namespace oxide {

// A tensor argument and its schema name, for the device check's message.
using Named = std::pair<const at::Tensor*, const char*>;

// Every tensor on the device of the first one, else the error the dispatcher's
// generated device check raises (what CUDA ops say), naming `op` and the argument.
// m.impl kernels of another namespace get no generated check, so each makes this one.
inline void check_devices(const char* op, std::initializer_list<Named> tensors) {
  const c10::Device common = tensors.begin()->first->device();
  for (const auto& [t, name] : tensors) {
    if (t->device() != common) {
      c10::impl::common_device_check_failure(common, *t, op, name);
    }
  }
}

// The dtypes torchvision's CPU kernels dispatch on: float32, float64 and (unless
// `half` is false, as for nms) float16; others raise its dispatch message naming `kernel`.
inline void check_torchvision_dtype(const char* kernel, const at::Tensor& t, bool half = true) {
  const c10::ScalarType st = t.scalar_type();
  TORCH_CHECK(st == at::kFloat || st == at::kDouble || (half && st == at::kHalf), "\"", kernel,
              "\" not implemented for '", c10::toString(st), "'");
}

}  // namespace oxide
