// Native kernels behind torch.amp.GradScaler("oxide"), with CPU/CUDA's
// argument checks: _amp_foreach_non_finite_check_and_unscale_ and
// _amp_update_scale_. The loops are Rust (oxide_kernels::ops::optim::amp).
#include "common/device_check.h"
#include "common/launch.h"
#include "common/oxide.h"

#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace oxide {
namespace {

void non_finite_check_and_unscale(at::TensorList self, at::Tensor& found_inf, const at::Tensor& inv_scale) {
  TORCH_CHECK(inv_scale.numel() == 1, "inv_scale must be a 1-element tensor.");
  TORCH_CHECK(found_inf.numel() == 1, "found_inf must be a 1-element tensor.");
  TORCH_CHECK(inv_scale.scalar_type() == at::kFloat, "inv_scale must be a float tensor.");
  TORCH_CHECK(found_inf.scalar_type() == at::kFloat, "found_inf must be a float tensor.");
  TORCH_CHECK(inv_scale.device() == found_inf.device(), "inv_scale and found_inf must be on the same device.");
  // No host read: each launch reads inv_scale and writes found_inf on the device, in stream order.
  for (const auto& t : self) {
    TORCH_CHECK(t.device() == inv_scale.device(), "One of scaled_grads was not on the same device as inv_scale.");
    TORCH_CHECK(at::isFloatingType(t.scalar_type()), "One of scaled_grads was not a floating-point tensor.");
    TORCH_CHECK(t.layout() == at::kStrided, "One of scaled_grads was not a strided tensor.");
    if (t.numel() == 0) {
      continue;
    }
    const c10::DeviceGuard guard(t.device());
    OXIDE_CHECK(oxide_amp_unscale(launch_on(t), inout_arg(t), in_arg(inv_scale), inout_arg(found_inf)));
  }
}

at::Tensor& update_scale(at::Tensor& self, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                         double growth_factor, double backoff_factor, int64_t growth_interval) {
  TORCH_CHECK(growth_tracker.device() == self.device() && found_inf.device() == self.device(),
              "_amp_update_scale_: all tensors must be on the same device.");
  TORCH_CHECK(self.numel() == 1, "current_scale must be a 1-element tensor.");
  TORCH_CHECK(growth_tracker.numel() == 1, "growth_tracker must be a 1-element tensor.");
  TORCH_CHECK(found_inf.numel() == 1, "found_inf must be a 1-element tensor.");
  TORCH_CHECK(self.scalar_type() == at::kFloat, "current_scale must be a float tensor.");
  TORCH_CHECK(growth_tracker.scalar_type() == at::kInt, "growth_tracker must be an int tensor.");
  TORCH_CHECK(found_inf.scalar_type() == at::kFloat, "found_inf must be a float tensor.");
  const c10::DeviceGuard guard(self.device());
  OXIDE_CHECK(oxide_amp_update_scale(launch_on(self), inout_arg(self), inout_arg(growth_tracker), in_arg(found_inf),
                                     growth_factor, backoff_factor, growth_interval));
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "_amp_foreach_non_finite_check_and_unscale_", TORCH_FN(non_finite_check_and_unscale));
  OXIDE_IMPL(m, "_amp_update_scale_", TORCH_FN(update_scale));
}

}  // namespace oxide
