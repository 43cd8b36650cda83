// Shared by the nn family's registrations (softmax.cpp, nll.cpp, pool.cpp): the Rust
// kernels write contiguous outputs, and PyTorch may hand them a strided out=.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

namespace oxide {

// Runs `kernel(dst)` into `out`, through a contiguous temporary when `out` is not contiguous.
template <class F>
void into_contiguous(const at::Tensor& out, F&& kernel) {
  if (out.is_contiguous()) {
    kernel(out);
  } else {
    at::Tensor tmp = at::empty(out.sizes(), out.options());
    kernel(tmp);
    const_cast<at::Tensor&>(out).copy_(tmp);
  }
}

}  // namespace oxide
