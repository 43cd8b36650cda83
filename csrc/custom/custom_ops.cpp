// The `oxide::` operator namespace: operators PyTorch does not have. Schemas
// live here; kernels are registered per dispatch key next to their
// implementations (runtime/serialization.cpp, custom/autograd.cpp).
#include <torch/library.h>

TORCH_LIBRARY(oxide, m) {
  m.def("get_format(Tensor self) -> int");
  m.def("set_format_(Tensor(a!) self, int format) -> Tensor(a!)");
  // x * sigmoid(x), with its own autograd and meta kernels (autograd.cpp).
  m.def("swish(Tensor self) -> Tensor");
  m.def("swish_backward(Tensor grad_output, Tensor self) -> Tensor");
  // A CPU tensor over the same memory as an oxide tensor, for host libraries
  // that read and write it in place (Gloo's collectives; runtime/host_view.cpp).
  // The caller waits for the device's queued work first.
  m.def("_host_view(Tensor self) -> Tensor");
}
