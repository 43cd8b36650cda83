// Backend metadata and its serialization, the seed tutorial's mechanism:
// a c10::BackendMeta subclass on the TensorImpl, written into and read back
// from torch.save's tensor metadata through TensorBackendMetaRegistry.
//
// oxide's metadata is the tensor's storage format tag (as NPU backends tag
// their private layouts): `plain` (0, strided as PyTorch sees it) or `blocked`
// (1, a hint that kernels may keep a packed copy). Set and read with
// torch.ops.oxide.set_format_(t, f) / torch.ops.oxide.get_format(t). The
// serialized map holds bools only (torch's format), hence one flag per field.
#include "common/device_check.h"
#include "common/oxide.h"

#include <ATen/core/Tensor.h>
#include <torch/csrc/jit/serialization/pickler_helper.h>
#include <torch/library.h>

namespace oxide {
namespace {

constexpr const char* kHasMeta = "oxide.meta";
constexpr const char* kBlocked = "oxide.format_blocked";

struct OxideBackendMeta final : c10::BackendMeta {
  int64_t format = 0;  // 0 plain, 1 blocked

  c10::intrusive_ptr<c10::BackendMeta> clone(const c10::intrusive_ptr<c10::BackendMeta>& /*ptr*/) const override {
    auto copy = c10::make_intrusive<OxideBackendMeta>();
    copy->format = format;
    return copy;
  }
};

OxideBackendMeta* meta_of(const at::Tensor& t) {
  return dynamic_cast<OxideBackendMeta*>(t.unsafeGetTensorImpl()->get_backend_meta());
}

void serialize_meta(const at::Tensor& t, std::unordered_map<std::string, bool>& m) {
  if (const auto* meta = meta_of(t)) {
    m[kHasMeta] = true;
    m[kBlocked] = meta->format == 1;
  }
}

void deserialize_meta(const at::Tensor& t, std::unordered_map<std::string, bool>& m) {
  if (m.count(kHasMeta) != 0 && m[kHasMeta]) {
    auto meta = c10::make_intrusive<OxideBackendMeta>();
    meta->format = m.count(kBlocked) != 0 && m[kBlocked] ? 1 : 0;
    t.unsafeGetTensorImpl()->set_backend_meta(meta);
  }
}

int64_t get_format(const at::Tensor& self) {
  const auto* meta = meta_of(self);
  return meta == nullptr ? 0 : meta->format;
}

at::Tensor& set_format_(at::Tensor& self, int64_t format) {
  TORCH_CHECK_VALUE(format == 0 || format == 1, "oxide format must be 0 (plain) or 1 (blocked), got ", format);
  auto meta = c10::make_intrusive<OxideBackendMeta>();
  meta->format = format;
  self.unsafeGetTensorImpl()->set_backend_meta(meta);
  return self;
}

const bool g_registered = [] {
  torch::jit::TensorBackendMetaRegistry(c10::DeviceType::PrivateUse1, &serialize_meta, &deserialize_meta);
  return true;
}();

}  // namespace

TORCH_LIBRARY_IMPL(oxide, PrivateUse1, m) {
  OXIDE_IMPL(m, "get_format", TORCH_FN(get_format));
  OXIDE_IMPL(m, "set_format_", TORCH_FN(set_format_));
}

}  // namespace oxide
