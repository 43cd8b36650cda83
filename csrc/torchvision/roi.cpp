// torchvision's detection operators on oxide: nms, roi_align, roi_pool, ps_roi_align,
// ps_roi_pool and their backwards, registered for the torchvision namespace. They are
// live once torchvision (optional) defines the operators, in either import order;
// torchvision's Autograd kernels call the backwards through the dispatcher, so
// training runs here too.
//
// torchvision's CPU kernels (torchvision/csrc/ops/cpu/) are the reference: their
// argument checks with their messages and in their order, their results for empty
// inputs, their dtypes (float32, float64, float16; nms float32 and float64) refused
// with their dispatch messages. Where CPU reads out of bounds (a roi's batch index
// outside the batch, an argmax or channel mapping outside the plane) the kernel
// raises instead. The Rust kernels (oxide_kernels::ops::torchvision::{nms, roi}) run
// on contiguous operands; nms runs at the call, since its output size is the host's.
#include "common/launch.h"
#include "common/oxide.h"
#include "torchvision/checks.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <tuple>

namespace oxide {
namespace {

using T = const at::Tensor&;

OxideRoiPool params(double spatial_scale, int64_t pooled_height, int64_t pooled_width, int64_t sampling_ratio = 0,
                    bool aligned = false) {
  return OxideRoiPool{spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned};
}

void check_rois(T rois, const char* message) {
  TORCH_CHECK(rois.dim() == 2 && rois.size(1) == 5, message, ", got sizes ", rois.sizes());
}

void check_4d(T t, const char* op, const char* what) {
  TORCH_CHECK(t.dim() == 4, op, ": ", what, " must be a 4-d tensor (N, C, H, W), got ", t.dim(), "-d");
}

// The output channels of a position-sensitive op, checked as torchvision does (and
// refusing an empty pooling grid, where its CPU kernel divides by zero).
int64_t channels_out(int64_t channels, int64_t pooled_height, int64_t pooled_width) {
  const int64_t bins = pooled_height * pooled_width;
  TORCH_CHECK(bins > 0 && channels % bins == 0, "input channels must be a multiple of pooling height * pooling width");
  return channels / bins;
}

at::Tensor nms(T dets, T scores, double iou_threshold) {
  check_devices("torchvision::nms", {{&dets, "dets"}, {&scores, "scores"}});
  TORCH_CHECK(dets.dim() == 2, "boxes should be a 2d tensor, got ", dets.dim(), "D");
  TORCH_CHECK(dets.size(1) == 4, "boxes should have 4 elements in dimension 1, got ", dets.size(1));
  TORCH_CHECK(scores.dim() == 1, "scores should be a 1d tensor, got ", scores.dim(), "D");
  TORCH_CHECK(dets.size(0) == scores.size(0),
              "boxes and scores should have same number of elements in dimension 0, got ", dets.size(0), " and ",
              scores.size(0));
  check_torchvision_dtype("nms_kernel", dets, /*half=*/false);
  TORCH_CHECK(dets.scalar_type() == scores.scalar_type(), "dets should have the same type as scores");
  if (dets.numel() == 0) {
    return at::empty({0}, dets.options().dtype(at::kLong));
  }
  auto keep = at::empty({dets.size(0)}, dets.options().dtype(at::kLong));
  size_t kept = 0;
  OXIDE_CHECK(oxide_nms(launch_on(dets), out_arg(keep), in_arg(dets.contiguous()), in_arg(scores.contiguous()),
                        iou_threshold, &kept));
  return keep.narrow(0, 0, static_cast<int64_t>(kept));
}

at::Tensor roi_align(T input, T rois, double spatial_scale, int64_t pooled_height, int64_t pooled_width,
                     int64_t sampling_ratio, bool aligned) {
  check_devices("torchvision::roi_align", {{&input, "input"}, {&rois, "rois"}});
  check_rois(rois, "rois must have shape as Tensor[K, 5]");
  TORCH_CHECK(input.scalar_type() == rois.scalar_type(), "input should have the same type as rois");
  check_4d(input, "roi_align", "input");
  auto output = at::empty({rois.size(0), input.size(1), pooled_height, pooled_width}, input.options());
  if (output.numel() == 0) {
    return output;
  }
  check_torchvision_dtype("roi_align_forward_kernel", input);
  if (input.numel() == 0) {
    return output.zero_();
  }
  OXIDE_CHECK(oxide_roi_align(launch_on(input), out_arg(output), in_arg(input.contiguous()), in_arg(rois.contiguous()),
                              params(spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned)));
  return output;
}

at::Tensor roi_align_backward(T grad, T rois, double spatial_scale, int64_t pooled_height, int64_t pooled_width,
                              int64_t batch_size, int64_t channels, int64_t height, int64_t width,
                              int64_t sampling_ratio, bool aligned) {
  check_devices("torchvision::_roi_align_backward", {{&grad, "grad"}, {&rois, "rois"}});
  TORCH_CHECK(grad.scalar_type() == rois.scalar_type(), "grad should have the same type as rois");
  auto grad_input = at::empty({batch_size, channels, height, width}, grad.options());
  if (grad.numel() == 0) {
    return grad_input.zero_();
  }
  check_torchvision_dtype("roi_align_backward_kernel", grad);
  check_rois(rois, "rois must have shape as Tensor[K, 5]");
  check_4d(grad, "_roi_align_backward", "grad");
  if (grad_input.numel() == 0) {
    return grad_input.zero_();
  }
  OXIDE_CHECK(oxide_roi_align_backward(launch_on(grad), out_arg(grad_input), in_arg(grad.contiguous()),
                                       in_arg(rois.contiguous()),
                                       params(spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned)));
  return grad_input;
}

std::tuple<at::Tensor, at::Tensor> roi_pool(T input, T rois, double spatial_scale, int64_t pooled_height,
                                            int64_t pooled_width) {
  check_devices("torchvision::roi_pool", {{&input, "input"}, {&rois, "rois"}});
  check_rois(rois, "Tensor rois should have shape as Tensor[K, 5]");
  TORCH_CHECK(input.scalar_type() == rois.scalar_type(), "input should have the same type as rois");
  check_4d(input, "roi_pool", "input");
  const std::vector<int64_t> sizes{rois.size(0), input.size(1), pooled_height, pooled_width};
  auto output = at::empty(sizes, input.options());
  auto argmax = at::empty(sizes, input.options().dtype(at::kInt));
  if (output.numel() == 0) {
    return {output, argmax};
  }
  check_torchvision_dtype("roi_pool_forward_kernel", input);
  if (input.numel() == 0) {
    // Every bin is empty: 0, and argmax -1 (nothing to send a gradient to).
    output.zero_();
    argmax.fill_(-1);
    return {output, argmax};
  }
  OXIDE_CHECK(oxide_roi_pool(launch_on(input), out_arg(output), out_arg(argmax), in_arg(input.contiguous()),
                             in_arg(rois.contiguous()), params(spatial_scale, pooled_height, pooled_width)));
  return {output, argmax};
}

at::Tensor roi_pool_backward(T grad, T rois, T argmax, double spatial_scale, int64_t pooled_height,
                             int64_t pooled_width, int64_t batch_size, int64_t channels, int64_t height,
                             int64_t width) {
  check_devices("torchvision::_roi_pool_backward", {{&grad, "grad"}, {&rois, "rois"}, {&argmax, "argmax"}});
  check_rois(rois, "Tensor rois should have shape as Tensor[K, 5]");
  TORCH_CHECK(grad.scalar_type() == rois.scalar_type(), "grad should have the same type as rois");
  auto grad_input = at::empty({batch_size, channels, height, width}, grad.options());
  if (grad.numel() == 0) {
    return grad_input.zero_();
  }
  check_torchvision_dtype("roi_pool_backward_kernel", grad);
  check_4d(grad, "_roi_pool_backward", "grad");
  TORCH_CHECK(argmax.scalar_type() == at::kInt, "_roi_pool_backward: argmax must be an int32 tensor, got ",
              argmax.scalar_type());
  if (grad_input.numel() == 0) {
    return grad_input.zero_();
  }
  OXIDE_CHECK(oxide_roi_pool_backward(launch_on(grad), out_arg(grad_input), in_arg(grad.contiguous()),
                                      in_arg(rois.contiguous()), in_arg(argmax.contiguous()),
                                      params(spatial_scale, pooled_height, pooled_width)));
  return grad_input;
}

// ps_roi_align (ps = 0) and ps_roi_pool (ps = 1) share everything but their names.
std::tuple<at::Tensor, at::Tensor> ps_roi(int32_t ps, T input, T rois, double spatial_scale, int64_t pooled_height,
                                          int64_t pooled_width, int64_t sampling_ratio) {
  check_devices(ps == 0 ? "torchvision::ps_roi_align" : "torchvision::ps_roi_pool",
                {{&input, "input"}, {&rois, "rois"}});
  check_rois(rois, "Tensor rois should have shape as Tensor[K, 5]");
  TORCH_CHECK(input.scalar_type() == rois.scalar_type(), "input should have the same type as rois");
  check_4d(input, ps == 0 ? "ps_roi_align" : "ps_roi_pool", "input");
  const std::vector<int64_t> sizes{rois.size(0), channels_out(input.size(1), pooled_height, pooled_width),
                                   pooled_height, pooled_width};
  auto output = at::empty(sizes, input.options());
  auto mapping = at::empty(sizes, input.options().dtype(at::kInt));
  if (output.numel() == 0) {
    return {output, mapping};
  }
  check_torchvision_dtype(ps == 0 ? "ps_roi_align_forward_kernel" : "ps_roi_pool_forward_kernel", input);
  if (input.numel() == 0) {
    // torchvision's zeros; the mapping is the fixed bin-to-channel order.
    mapping.copy_(at::arange(mapping.numel() / rois.size(0), mapping.options()).repeat({rois.size(0)}).view(sizes));
    return {output.zero_(), mapping};
  }
  OXIDE_CHECK(oxide_ps_roi(launch_on(input), out_arg(output), out_arg(mapping), in_arg(input.contiguous()),
                           in_arg(rois.contiguous()),
                           params(spatial_scale, pooled_height, pooled_width, sampling_ratio), ps));
  return {output, mapping};
}

at::Tensor ps_roi_backward(int32_t ps, T grad, T rois, T mapping, double spatial_scale, int64_t pooled_height,
                           int64_t pooled_width, int64_t sampling_ratio, int64_t batch_size, int64_t channels,
                           int64_t height, int64_t width) {
  check_devices(ps == 0 ? "torchvision::_ps_roi_align_backward" : "torchvision::_ps_roi_pool_backward",
                {{&grad, "grad"}, {&rois, "rois"}, {&mapping, "channel_mapping"}});
  TORCH_CHECK(grad.scalar_type() == rois.scalar_type(), "grad should have the same type as rois");
  auto grad_input = at::empty({batch_size, channels, height, width}, grad.options());
  if (grad.numel() == 0) {
    return grad_input.zero_();
  }
  check_torchvision_dtype(ps == 0 ? "ps_roi_align_backward_kernel" : "ps_roi_pool_backward_kernel", grad);
  check_rois(rois, "Tensor rois should have shape as Tensor[K, 5]");
  check_4d(grad, ps == 0 ? "_ps_roi_align_backward" : "_ps_roi_pool_backward", "grad");
  channels_out(channels, pooled_height, pooled_width);
  TORCH_CHECK(mapping.scalar_type() == at::kInt, "channel_mapping must be an int32 tensor, got ",
              mapping.scalar_type());
  if (grad_input.numel() == 0) {
    return grad_input.zero_();
  }
  OXIDE_CHECK(oxide_ps_roi_backward(launch_on(grad), out_arg(grad_input), in_arg(grad.contiguous()),
                                    in_arg(rois.contiguous()), in_arg(mapping.contiguous()),
                                    params(spatial_scale, pooled_height, pooled_width, sampling_ratio), ps));
  return grad_input;
}

std::tuple<at::Tensor, at::Tensor> ps_roi_align(T input, T rois, double spatial_scale, int64_t pooled_height,
                                                int64_t pooled_width, int64_t sampling_ratio) {
  return ps_roi(0, input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio);
}

at::Tensor ps_roi_align_backward(T grad, T rois, T mapping, double spatial_scale, int64_t pooled_height,
                                 int64_t pooled_width, int64_t sampling_ratio, int64_t batch_size, int64_t channels,
                                 int64_t height, int64_t width) {
  return ps_roi_backward(0, grad, rois, mapping, spatial_scale, pooled_height, pooled_width, sampling_ratio, batch_size,
                         channels, height, width);
}

std::tuple<at::Tensor, at::Tensor> ps_roi_pool(T input, T rois, double spatial_scale, int64_t pooled_height,
                                               int64_t pooled_width) {
  return ps_roi(1, input, rois, spatial_scale, pooled_height, pooled_width, 0);
}

at::Tensor ps_roi_pool_backward(T grad, T rois, T mapping, double spatial_scale, int64_t pooled_height,
                                int64_t pooled_width, int64_t batch_size, int64_t channels, int64_t height,
                                int64_t width) {
  return ps_roi_backward(1, grad, rois, mapping, spatial_scale, pooled_height, pooled_width, 0, batch_size, channels,
                         height, width);
}

}  // namespace

// m.impl rather than OXIDE_IMPL: see csrc/torchvision/README.md.
TORCH_LIBRARY_IMPL(torchvision, PrivateUse1, m) {
  m.impl("nms", TORCH_FN(nms));
  m.impl("roi_align", TORCH_FN(roi_align));
  m.impl("_roi_align_backward", TORCH_FN(roi_align_backward));
  m.impl("roi_pool", TORCH_FN(roi_pool));
  m.impl("_roi_pool_backward", TORCH_FN(roi_pool_backward));
  m.impl("ps_roi_align", TORCH_FN(ps_roi_align));
  m.impl("_ps_roi_align_backward", TORCH_FN(ps_roi_align_backward));
  m.impl("ps_roi_pool", TORCH_FN(ps_roi_pool));
  m.impl("_ps_roi_pool_backward", TORCH_FN(ps_roi_pool_backward));
}

}  // namespace oxide
