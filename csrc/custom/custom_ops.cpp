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
}
