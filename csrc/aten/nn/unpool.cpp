// max_unpool2d / max_unpool3d (F.max_unpool1d goes through the 2-d op): each
// input element is written at its pooling index inside its output plane, the
// rest is zero. CPU's loops are CPU-only; on oxide the planes are flattened and
// written with the device's scatter. CPU's argument checks are repeated with its
// messages; an index outside its plane raises (CPU's message, naming the first
// such index in memory order) before anything is written.
#include "common/device_check.h"

#include <ATen/ops/empty.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include <sstream>

namespace oxide {
namespace {

void check_unpool_input(const at::Tensor& self, const at::Tensor& indices, const char* fn_name) {
  TORCH_CHECK(self.sizes() == indices.sizes(), "Expected shape of indices to be same as that of the input tensor (",
              self.sizes(), ") but got indices tensor with shape: ", indices.sizes());
  for (const auto i : c10::irange(1, self.dim())) {
    TORCH_CHECK(self.size(i) > 0, fn_name, ": Expected input to have non-zero size for non-batch dimensions, but got ",
                self.sizes(), " with dimension ", i, " being empty.");
  }
}

// Scatters every plane of `self` (the last `spatial` dims) into `output` (resized
// to the leading dims + output_size, zeroed).
at::Tensor& unpool_into(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size,
                        at::Tensor& output) {
  const int64_t spatial = static_cast<int64_t>(output_size.size());
  auto shape = self.sizes().slice(0, self.dim() - spatial).vec();
  shape.insert(shape.end(), output_size.begin(), output_size.end());
  output.resize_(shape);
  output.zero_();
  if (output.numel() == 0 || self.numel() == 0) {
    return output;
  }
  int64_t plane = 1;
  for (const auto s : output_size) {
    plane *= s;
  }
  const auto idx = indices.flatten(self.dim() - spatial);
  const auto bad = idx.lt(0).logical_or_(idx.ge(plane));
  if (bad.any().item<bool>()) {
    const auto first = idx.masked_select(bad).reshape({-1})[0].item<int64_t>();
    std::ostringstream sizes;
    for (const auto i : c10::irange(spatial)) {
      sizes << (i > 0 ? "x" : "") << output_size[i];
    }
    TORCH_CHECK(false, "Found an invalid max index: ", first, " (output volumes are of size ", sizes.str());
  }
  auto target = output.is_contiguous() ? output : at::empty(shape, output.options());
  target.flatten(self.dim() - spatial).scatter_(-1, idx, self.flatten(self.dim() - spatial));
  if (!target.is_same(output)) {
    output.copy_(target);
  }
  return output;
}

at::Tensor& max_unpool2d_out(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size,
                             at::Tensor& output) {
  TORCH_CHECK(indices.scalar_type() == at::kLong,
              "elements in indices should be type int64 but got: ", indices.scalar_type());
  TORCH_CHECK(output_size.size() == 2, "There should be exactly two elements (height, width) in output_size, but got ",
              output_size.size(), " elements.");
  TORCH_CHECK(self.dim() == 3 || self.dim() == 4,
              "Input to max_unpooling2d should be a 3d or 4d Tensor, but got a tensor with ", self.dim(),
              " dimensions.");
  check_unpool_input(self, indices, "max_unpooling2d_forward_out_cpu()");
  return unpool_into(self, indices, output_size, output);
}

at::Tensor max_unpool2d(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size) {
  auto output = at::empty({0}, self.options());
  return max_unpool2d_out(self, indices, output_size, output);
}

at::Tensor& max_unpool3d_out(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size,
                             at::IntArrayRef stride, at::IntArrayRef padding, at::Tensor& output) {
  TORCH_CHECK(indices.scalar_type() == at::kLong, "elements in indices should be type int64");
  TORCH_CHECK(self.dim() == 4 || self.dim() == 5,
              "Input to max_unpooling3d should be a 4d or 5d Tensor, but got a tensor with ", self.dim(),
              " dimensions.");
  TORCH_CHECK(output_size.size() == 3,
              "There should be exactly three elements (depth, height, width) in output_size, but got ",
              output_size.size(), " elements.");
  TORCH_CHECK(stride.size() == 3,
              "There should be exactly three elements (depth, height, width) in stride, but got: ", stride.size(),
              " elements.");
  TORCH_CHECK(padding.size() == 3,
              "There should be exactly three elements (depth, height, width) in padding, but got: ", padding.size(),
              " elements.");
  check_unpool_input(self, indices, "max_unpooling3d_forward_out_cpu()");
  TORCH_CHECK(stride[0] > 0 && stride[1] > 0 && stride[2] > 0, "strides should be greater than zero, but got stride ",
              "sD: ", stride[0], " sH: ", stride[1], " sW: ", stride[2]);
  return unpool_into(self, indices, output_size, output);
}

at::Tensor max_unpool3d(const at::Tensor& self, const at::Tensor& indices, at::IntArrayRef output_size,
                        at::IntArrayRef stride, at::IntArrayRef padding) {
  auto output = at::empty({0}, self.options());
  return max_unpool3d_out(self, indices, output_size, stride, padding, output);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "max_unpool2d", TORCH_FN(max_unpool2d));
  OXIDE_IMPL(m, "max_unpool2d.out", TORCH_FN(max_unpool2d_out));
  OXIDE_IMPL(m, "max_unpool3d", TORCH_FN(max_unpool3d));
  OXIDE_IMPL(m, "max_unpool3d.out", TORCH_FN(max_unpool3d_out));
}

}  // namespace oxide
