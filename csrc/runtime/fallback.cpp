// The boxed CPU fallback for every aten operator without a native oxide
// kernel. Each call is counted per operator in the Rust runtime
// (torch.oxide.fallback_stats()); OXIDE_FALLBACK decides whether it runs
// silently, warns once per operator (default) or raises.
#include "common/device_check.h"
#include "common/oxide.h"

#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <string>
#include <utility>

namespace oxide {
namespace {

// Why the current thread's call is on the fallback when a native kernel refused its
// dtypes (set by cpu_fallback_for_dtype), empty for operators without a native kernel.
thread_local std::string t_dtype_reason;

// Counts a fallback of `full` and warns or raises as OXIDE_FALLBACK says; `why` is
// the native kernel's refusal, empty for an operator without a native kernel.
void announce(const std::string& full, const std::string& why) {
  const std::string what =
      why.empty() ? "has no native oxide kernel" : "has no native oxide kernel for these dtypes (" + why + ")";
  // The fallback copies to the host and back at the call: it cannot be a graph node.
  const auto device = current_device();
  OXIDE_CHECK(
      oxide_capture_refuse(device, current_stream(device),
                           ("operator '" + full + "', which " + what + " and runs on the CPU fallback").c_str()));
  switch (oxide_fallback_record(full.c_str())) {
    case OXIDE_FALLBACK_ERROR:
      TORCH_CHECK_NOT_IMPLEMENTED(false, "oxide: operator '", full, "' ", what,
                                  ", and OXIDE_FALLBACK=error forbids running it on the CPU fallback");
    case OXIDE_FALLBACK_WARN:
      TORCH_WARN("oxide: operator '", full, "' ", what,
                 " and runs on the CPU fallback (its tensors are copied to the host "
                 "and back). See torch.oxide.fallback_stats(); OXIDE_FALLBACK=silent hides this warning, "
                 "OXIDE_FALLBACK=error forbids the fallback.");
      break;
    default:
      break;
  }
}

void oxide_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& name = op.schema().operator_name();
  const std::string full = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
  const std::string why = std::exchange(t_dtype_reason, std::string());
  // cpu_fallback moves every tensor to the CPU, which would silently accept tensors
  // on different devices: check them as a native kernel's registration does.
  device_check::check_boxed(op, *stack);
  announce(full, why);
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

void note_dtype_fallback(const std::string& op, const UnsupportedDtype& refused) { announce(op, refused.msg()); }

namespace device_check {

c10::BoxedKernel dtype_fallback_kernel(const UnsupportedDtype& refused) {
  t_dtype_reason = refused.msg();
  return c10::BoxedKernel::makeFromFunction<&oxide_cpu_fallback>();
}

}  // namespace device_check

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&oxide_cpu_fallback>()); }

// conj_physical_ runs natively: aten/elementwise/pointwise.cpp registers conj_physical.out and its stub.

}  // namespace oxide
