// torch.autocast("oxide") for torchvision's operators: as torchvision's CUDA autocast
// kernels do, every floating tensor argument runs in float32 (float64 stays) and the
// floating results come back in the first tensor argument's dtype. nms returns
// indices, so only its inputs are cast. Without this the operators would see float16
// inputs from autocast regions (detection heads under AMP) and run them in float16.
// The backwards are not listed: autograd calls them outside autocast.
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <optional>

namespace oxide {
namespace {

void float32_autocast(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  std::optional<at::ScalarType> input_type;
  for (auto it = stack->end() - static_cast<std::ptrdiff_t>(schema.arguments().size()); it != stack->end(); ++it) {
    if (it->isTensor()) {
      const at::Tensor& t = it->toTensor();
      if (!input_type) {
        input_type = t.scalar_type();
      }
      *it = at::autocast::cached_cast(at::kFloat, t, c10::DeviceType::PrivateUse1);
    }
  }
  {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastPrivateUse1);
    op.callBoxed(stack);
  }
  for (auto it = stack->end() - static_cast<std::ptrdiff_t>(schema.returns().size()); it != stack->end(); ++it) {
    if (it->isTensor() && input_type && it->toTensor().is_floating_point()) {
      *it = it->toTensor().to(*input_type);
    }
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(torchvision, AutocastPrivateUse1, m) {
  for (const char* name : {"nms", "roi_align", "roi_pool", "ps_roi_align", "ps_roi_pool", "deform_conv2d"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&float32_autocast>());
  }
}

}  // namespace oxide
