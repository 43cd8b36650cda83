// isin on oxide: PyTorch's structured isin (its meta function, its choice between
// the pairwise comparison and the sort-based path, and the sort-based path itself,
// which runs on oxide's sort and searchsorted); the pairwise comparison is this
// file's isin_default_stub entry, device comparisons instead of CPU's element loop.
// Hugging Face generation calls isin at every step (the stopping criteria).
#include "common/device_check.h"
#include "common/structured.h"

#include <ATen/ScalarOps.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/TensorCompare.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/isin.h>
#include <ATen/ops/isin_native.h>
#include <ATen/ops/logical_or.h>
#include <ATen/ops/zeros_like.h>
#include <ATen/ops/result_type.h>
#include <torch/library.h>

namespace oxide {
namespace {

// Comparisons held at once by the broadcast path: above this, one comparison per
// test element keeps the temporary at the size of `elements`.
constexpr int64_t kBroadcastLimit = int64_t{1} << 24;

// `out` (bool, the shape of `elements`) = invert XOR (element in test_elements),
// in the dtype both promote to, as CPU's kernel compares.
void isin_default(const at::Tensor& elements, const at::Tensor& test_elements, bool invert, const at::Tensor& out) {
  const auto common = at::result_type(elements, test_elements);
  const auto values = elements.to(common);
  const auto tests = test_elements.to(common).reshape({-1});
  at::Tensor found;
  if (values.numel() * tests.numel() <= kBroadcastLimit) {
    found = at::eq(values.unsqueeze(-1), tests).any(-1);
  } else {
    found = at::zeros_like(out);
    for (int64_t j = 0; j < tests.numel(); ++j) {
      found.logical_or_(at::eq(values, tests[j]));
    }
  }
  out.copy_(invert ? found.logical_not() : found);
}

at::Tensor isin_scalar_tensor(const c10::Scalar& element, const at::Tensor& test_elements, bool assume_unique,
                              bool invert) {
  return at::isin(at::native::wrapped_scalar_tensor(element, test_elements.device()), test_elements, assume_unique,
                  invert);
}

at::Tensor& isin_scalar_tensor_out(const c10::Scalar& element, const at::Tensor& test_elements, bool assume_unique,
                                   bool invert, at::Tensor& out) {
  return at::isin_out(out, at::native::wrapped_scalar_tensor(element, test_elements.device()), test_elements,
                      assume_unique, invert);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace at::native;
  OXIDE_STRUCTURED(m, structured_isin_Tensor_Tensor_out, "isin.Tensor_Tensor", "", "isin.Tensor_Tensor_out",
                   const at::Tensor&, bool, bool);
  OXIDE_STRUCTURED(m, structured_isin_Tensor_Scalar_out, "isin.Tensor_Scalar", "", "isin.Tensor_Scalar_out",
                   const c10::Scalar&, bool, bool);
  OXIDE_IMPL(m, "isin.Scalar_Tensor", TORCH_FN(isin_scalar_tensor));
  OXIDE_IMPL(m, "isin.Scalar_Tensor_out", TORCH_FN(isin_scalar_tensor_out));
}

}  // namespace oxide

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(isin_default_stub, &oxide::isin_default)
}  // namespace at::native
