// oxide::_host_view: a CPU tensor over an oxide tensor's memory (device memory
// is host memory here), so host libraries can work on it in place without a
// copy: the collectives hand Gloo these views (runtime/oxgloo.cpp)
// and, under the sanitizer, Inductor's C++ kernels get them (_inductor.py).
// The view is at the memory's host address (oxide_host_address): with guarded
// device memory (OXIDE_SANITIZE=1) the device address itself is not readable.
// The view keeps the oxide storage alive; it does not wait for the device, so
// its user synchronizes the stream that writes the tensor first.
#include "common/device_check.h"
#include "common/oxide.h"

#include <ATen/ops/from_blob.h>
#include <torch/library.h>

namespace oxide {

at::Tensor host_view(const at::Tensor& self) {
  TORCH_CHECK(self.is_privateuseone(), "oxide::_host_view expects an oxide tensor, got one on ", self.device());
  c10::Storage storage = self.storage();
  void* host = nullptr;
  OXIDE_CHECK(oxide_host_address(self.data_ptr(), &host));
  return at::for_blob(host, self.sizes())
      .strides(self.strides())
      .deleter([storage](void* /*data*/) mutable { storage = {}; })
      .options(self.options().device(at::kCPU))
      .make_tensor();
}

TORCH_LIBRARY_IMPL(oxide, PrivateUse1, m) { OXIDE_IMPL(m, "_host_view", TORCH_FN(host_view)); }

}  // namespace oxide
