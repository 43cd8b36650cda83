// fill_ and zero_ on oxide, behind every factory such as zeros, ones and full:
// the value is converted to the tensor's dtype exactly as CPU converts it (and
// raises where CPU raises), then oxide_kernels::ops::elementwise::fill writes those bytes through
// the tensor's strides.
#include "common/device_check.h"
#include "common/kernels.h"

#include <ATen/Dispatch_v2.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cstring>

namespace oxide {
namespace {

at::Tensor& fill_scalar(at::Tensor& self, const at::Scalar& value) {
  // The scalar converted to self's dtype with Scalar::to<T>, which raises on
  // overflow exactly as CPU's fill_ does; the kernel then copies those bytes.
  alignas(16) unsigned char element[16] = {};
  AT_DISPATCH_V2(self.scalar_type(), "fill_", AT_WRAP([&] {
                   const scalar_t v = value.to<scalar_t>();
                   std::memcpy(element, &v, sizeof(scalar_t));
                 }),
                 AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), AT_EXPAND(AT_FLOAT8_TYPES),
                 AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES), at::kHalf, at::kBFloat16, at::kBool, at::kComplexHalf);
  if (self.numel() == 0) {
    return self;
  }
  const c10::DeviceGuard guard(self.device());
  OXIDE_CHECK(oxide_fill_strided(launch_on(self), self.element_size(), out_arg(self), element));
  return self;
}

at::Tensor& fill_tensor_(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ", value.dim(),
              " dimensions.");
  return self.fill_(value.item());  // self may be a CPU tensor filled from a 0-dim oxide value
}

at::Tensor& zero_(at::Tensor& self) { return fill_scalar(self, 0); }

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "fill_.Scalar", TORCH_FN(fill_scalar));
  OXIDE_IMPL(m, "fill_.Tensor", TORCH_FN(fill_tensor_));
  OXIDE_IMPL(m, "zero_", TORCH_FN(zero_));
}

}  // namespace oxide
