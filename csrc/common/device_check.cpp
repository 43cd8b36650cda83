// The failure path of the operator device check (device_check.h) and its boxed
// form for the CPU fallback.
#include "common/device_check.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace oxide::device_check {

namespace {

// "add.out" -> ("add", "out"); "mm" -> ("mm", "").
std::pair<std::string, std::string> split_name(std::string_view name) {
  const auto dot = name.find('.');
  if (dot == std::string_view::npos) {
    return {std::string(name), ""};
  }
  return {std::string(name.substr(0, dot)), std::string(name.substr(dot + 1))};
}

}  // namespace

void fail(std::string_view name, size_t index, c10::Device common, const at::Tensor& tensor) {
  const auto [base, overload] = split_name(name);
  std::string method = "aten::" + std::string(name);
  std::string arg = "#" + std::to_string(index);
  for (const char* ns : {"aten::", "oxide::"}) {
    const auto op = c10::Dispatcher::singleton().findSchema({ns + base, overload});
    if (op.has_value()) {
      method = ns + std::string(name);
      const auto& args = op->schema().arguments();
      if (index < args.size()) {
        arg = args[index].name();
      }
      break;
    }
  }
  c10::impl::common_device_check_failure(common, tensor, method.c_str(), arg.c_str());
  TORCH_INTERNAL_ASSERT(false, "common_device_check_failure returned");
}

const c10::OperatorHandle* aten_op(std::string_view name) {
  // Looked up once per operator (the wrapper's template instance calls with one name).
  static std::mutex mutex;
  static std::unordered_map<std::string, std::optional<c10::OperatorHandle>> found;
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = found.find(std::string(name));
  if (it == found.end()) {
    const auto [base, overload] = split_name(name);
    it = found.emplace(std::string(name), c10::Dispatcher::singleton().findSchema({"aten::" + base, overload})).first;
  }
  return it->second.has_value() ? &*it->second : nullptr;
}

void check_boxed(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const auto& schema = op.schema();
  const auto& opname = schema.operator_name();
  std::string name = opname.name.substr(opname.name.find("::") + 2);
  if (!opname.overload_name.empty()) {
    name += "." + opname.overload_name;
  }
  const Rule rule = rule_for(name);
  if (rule == Rule::None) {
    return;
  }
  Checker c{rule};
  const auto num_args = schema.arguments().size();
  const size_t first = stack.size() - num_args;
  for (size_t i = first; i < stack.size(); ++i) {
    const auto& v = stack[i];
    if (v.isTensor()) {
      c.tensor(v.toTensor(), i - first);
    } else if (v.isTensorList() || v.isList()) {
      for (const auto& e : v.toListRef()) {
        if (e.isTensor()) {
          c.tensor(e.toTensor(), i - first);
        }
      }
    }
    if (c.bad != nullptr) {
      // The list element may be a temporary of toListRef(); copy before failing.
      const at::Tensor bad = *c.bad;
      fail(name, c.bad_index, *c.common, bad);
    }
  }
}

}  // namespace oxide::device_check
