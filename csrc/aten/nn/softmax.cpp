// softmax and log_softmax on oxide, forward and backward. The operators are
// structured: PyTorch's meta functions check the arguments and size the
// outputs, and the impl classes here (whose CPU counterparts call kCPU kernels
// by name) hand contiguous [outer, dim, inner] views to oxide_softmax /
// oxide_softmax_backward.
#include "aten/nn/contiguous.h"
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/launch.h"
#include "common/structured.h"

#include <ATen/ops/_log_softmax_backward_data_meta.h>
#include <ATen/ops/_log_softmax_meta.h>
#include <ATen/ops/_softmax_backward_data_meta.h>
#include <ATen/ops/_softmax_meta.h>
#include <torch/library.h>

namespace oxide {
namespace {

using T = const at::Tensor&;

void softmax_forward(T input, int64_t dim, T out, bool log) {
  const auto x = input.contiguous();
  into_contiguous(
      out, [&](const at::Tensor& y) { OXIDE_CHECK(oxide_softmax(launch_on(y), out_arg(y), in_arg(x), dim, log)); });
}

void softmax_backward(T grad, T output, int64_t dim, T grad_input, bool log) {
  const auto g = grad.contiguous();
  const auto y = output.contiguous();
  TORCH_CHECK(g.scalar_type() == y.scalar_type(),
              "softmax backward: grad_output and output must have the same dtype, got ", g.scalar_type(), " and ",
              y.scalar_type());
  into_contiguous(grad_input, [&](const at::Tensor& gi) {
    OXIDE_CHECK(oxide_softmax_backward(launch_on(gi), out_arg(gi), in_arg(g), in_arg(y), dim, log));
  });
}

struct Softmax : at::meta::structured__softmax {
  void impl(T input, int64_t dim, bool, T out) { softmax_forward(input, dim, out, false); }
};
struct LogSoftmax : at::meta::structured__log_softmax {
  void impl(T input, int64_t dim, bool, T out) { softmax_forward(input, dim, out, true); }
};
struct SoftmaxBackward : at::meta::structured__softmax_backward_data {
  void impl(T grad, T output, int64_t dim, at::ScalarType, T grad_input) {
    softmax_backward(grad, output, dim, grad_input, false);
  }
};
struct LogSoftmaxBackward : at::meta::structured__log_softmax_backward_data {
  void impl(T grad, T output, int64_t dim, at::ScalarType, T grad_input) {
    softmax_backward(grad, output, dim, grad_input, true);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_STRUCTURED(m, Softmax, "_softmax", "", "_softmax.out", int64_t, bool);
  OXIDE_STRUCTURED(m, LogSoftmax, "_log_softmax", "", "_log_softmax.out", int64_t, bool);
  OXIDE_STRUCTURED(m, SoftmaxBackward, "_softmax_backward_data", "", "_softmax_backward_data.out", T, int64_t,
                   at::ScalarType);
  OXIDE_STRUCTURED(m, LogSoftmaxBackward, "_log_softmax_backward_data", "", "_log_softmax_backward_data.out", T,
                   int64_t, at::ScalarType);
}

}  // namespace oxide
