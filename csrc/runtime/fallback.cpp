// The boxed CPU fallback for every aten operator without a native oxide
// kernel. Each call is counted per operator in the Rust runtime
// (torch.oxide.fallback_stats()); OXIDE_FALLBACK decides whether it runs
// silently, warns once per operator (default) or raises.
#include "common/device_check.h"
#include "common/oxide.h"

#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

namespace oxide {
namespace {

void oxide_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& name = op.schema().operator_name();
  const std::string full = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
  // cpu_fallback moves every tensor to the CPU, which would silently accept tensors
  // on different devices: check them as a native kernel's registration does.
  device_check::check_boxed(op, *stack);
  switch (oxide_fallback_record(full.c_str())) {
    case OXIDE_FALLBACK_ERROR:
      TORCH_CHECK_NOT_IMPLEMENTED(false, "oxide: operator '", full,
                                  "' has no native oxide kernel, and OXIDE_FALLBACK=error forbids running it "
                                  "on the CPU fallback");
    case OXIDE_FALLBACK_WARN:
      TORCH_WARN("oxide: operator '", full,
                 "' has no native oxide kernel and runs on the CPU fallback (its tensors are copied to the host "
                 "and back). See torch.oxide.fallback_stats(); OXIDE_FALLBACK=silent hides this warning, "
                 "OXIDE_FALLBACK=error forbids the fallback.");
      break;
    default:
      break;
  }
  // cpu_fallback returns new tensors on the device of the *first* tensor argument;
  // when that is a CPU scalar (0-dim, allowed above) the results would land on
  // the CPU. Put them on the oxide device of the other arguments instead.
  const auto& schema = op.schema();
  std::optional<c10::Device> first, oxide;
  for (size_t i = stack->size() - schema.arguments().size(); i < stack->size(); ++i) {
    const auto& v = (*stack)[i];
    std::vector<at::Tensor> ts;
    if (v.isTensor()) {
      ts.push_back(v.toTensor());
    } else if (v.isTensorList()) {
      ts = v.toTensorVector();
    }
    for (const auto& t : ts) {
      if (!t.defined()) {
        continue;
      }
      first = first.value_or(t.device());
      if (!oxide && t.is_privateuseone()) {
        oxide = t.device();
      }
    }
  }
  at::native::cpu_fallback(op, stack);
  if (first && first->is_cpu() && oxide) {
    for (size_t i = stack->size() - schema.returns().size(); i < stack->size(); ++i) {
      auto& v = (*stack)[i];
      if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_cpu()) {
        v = v.toTensor().to(*oxide);
      }
    }
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&oxide_cpu_fallback>()); }

// conj_physical_ runs natively: aten/elementwise/pointwise.cpp registers conj_physical.out and its stub.

}  // namespace oxide
