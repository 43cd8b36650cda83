// Embedding bags on oxide (and embedding_renorm_, max_norm's row scaling, composed
// from index_select, a norm and index_copy_): _embedding_bag / _embedding_bag_forward_only and
// the gradients autograd asks for (_embedding_bag_backward, which is PyTorch's
// own device-generic function, dispatching to _embedding_bag_dense_backward
// here, and _embedding_bag_per_sample_weights_backward). The loops are Rust
// (oxide_kernels::ops::nn::embedding); this file repeats CPU's argument checks (not
// exported by ATen) with its messages and hands contiguous int64 indices over.
//
// Auxiliary outputs: offset2bag, bag_size (non-padding indices per bag) and,
// for max mode, max_indices are always computed; CPU leaves offset2bag empty
// and bag_size/max_indices uninitialised on its sum fast path, where its
// backward does not read them. They are returned in the index dtype CPU uses
// (int32 only when indices and offsets are both int32).
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/launch.h"

#include <ATen/OpMathType.h>
#include <ATen/TensorUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_embedding_bag_backward_native.h>
#include <ATen/ops/_unique.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/where.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

namespace oxide {
namespace {

using T = const at::Tensor&;
using OptT = const std::optional<at::Tensor>&;
using Four = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

void check_index_type(const at::Tensor& t, const char* name, int pos) {
  TORCH_CHECK(t.scalar_type() == at::kLong || t.scalar_type() == at::kInt, "Expected tensor for argument #", pos, " '",
              name, "' to have one of the following scalar types: Long, Int; but got ", t.toString(),
              " instead (while checking arguments for embedding_bag)");
}

at::Tensor longs(const at::Tensor& t) { return t.to(at::kLong).contiguous(); }

Four embedding_bag(T weight_, T indices_, T offsets_, bool /*scale_grad_by_freq*/, int64_t mode, bool /*sparse*/,
                   OptT per_sample_weights, bool include_last_offset, int64_t padding_idx) {
  check_index_type(indices_, "indices", 1);
  check_index_type(offsets_, "offsets", 1);
  TORCH_CHECK(offsets_.dim() == 1, "offsets has to be a 1D Tensor, but got Tensor of dimension ", offsets_.dim());
  TORCH_CHECK(weight_.dim() == 2, "weight has to be a 2D Tensor, but got Tensor of dimension ", weight_.dim());
  TORCH_CHECK(at::isFloatingType(weight_.scalar_type()) && !at::isFloat8Type(weight_.scalar_type()),
              "Expected tensor for argument #1 'weight' to have one of the following scalar types: Half, BFloat16, "
              "Float, Double; but got ",
              weight_.toString(), " instead (while checking arguments for embedding_bag)");
  TORCH_CHECK(mode >= 0 && mode <= 2, "`mode` must be sum, mean, or max.");
  TORCH_CHECK(!include_last_offset || offsets_.size(0) >= 1,
              "include_last_offset: number of offset should be at least 1");
  const bool has_psw = per_sample_weights.has_value() && per_sample_weights->defined();
  if (has_psw) {
    TORCH_CHECK(mode == 0, "embedding_bag: per_sample_weights only supported with mode='sum'");
    TORCH_CHECK(per_sample_weights->scalar_type() == weight_.scalar_type(),
                "Expected tensor for argument #1 'weight' to have the same type as tensor for argument #1 "
                "'per_sample_weights'; but type ",
                weight_.toString(), " does not equal ", per_sample_weights->toString(),
                " (while checking arguments for embedding_bag)");
    TORCH_CHECK(per_sample_weights->dim() == 1,
                "per_sample_weights has to be a 1D Tensor, but got Tensor of dimension ", per_sample_weights->dim());
    TORCH_CHECK(per_sample_weights->numel() == indices_.numel(),
                "Expected per_sample_weights.numel() == indices.numel() to be true, but got false.");
  }
  const auto index_type =
      indices_.scalar_type() == at::kInt && offsets_.scalar_type() == at::kInt ? at::kInt : at::kLong;
  const auto indices = longs(indices_.reshape(-1));
  const auto offsets = longs(offsets_);
  const auto weight = weight_.contiguous();
  const auto psw = has_psw ? per_sample_weights->contiguous() : at::Tensor();
  const int64_t num_bags = offsets.size(0) - (include_last_offset ? 1 : 0);
  const int64_t dim = weight.size(1);
  const auto lopt = indices.options();
  auto output = at::empty({num_bags, dim}, weight.options());
  auto offset2bag = at::empty({indices.numel()}, lopt);
  auto bag_size = at::empty({num_bags}, lopt);
  auto max_indices = mode == 2 ? at::empty({num_bags, dim}, lopt) : at::zeros({num_bags}, lopt);
  // max_indices is written in max mode only (the zeros of the other modes are returned as they are).
  OXIDE_CHECK(oxide_embedding_bag(launch_on(weight), out_arg(output), out_arg(offset2bag), out_arg(bag_size),
                                  out_arg(mode == 2 ? max_indices : at::Tensor()), in_arg(indices), in_arg(offsets),
                                  in_arg(weight), in_arg(psw), mode, padding_idx, include_last_offset));
  return {output, offset2bag.to(index_type), bag_size.to(index_type), max_indices.to(index_type)};
}

at::Tensor dense_backward(T grad_, T indices_, T offset2bag_, T bag_size_, T max_indices_, c10::SymInt num_weights,
                          bool scale_grad_by_freq, int64_t mode, OptT per_sample_weights, int64_t padding_idx) {
  TORCH_CHECK(grad_.dim() == 2, "embedding_bag backward: expected a 2-D gradient, got ", grad_.sizes());
  TORCH_CHECK(at::isFloatingType(grad_.scalar_type()), "embedding_bag backward: expected a floating gradient, got ",
              grad_.scalar_type());
  TORCH_CHECK(mode >= 0 && mode <= 2, "`mode` must be sum, mean, or max.");
  const bool has_psw = per_sample_weights.has_value() && per_sample_weights->defined();
  TORCH_CHECK(!has_psw || mode == 0, "embedding_bag_backward: per_sample_weights only supported for mode='sum'");
  const auto grad = grad_.contiguous();
  const auto indices = longs(indices_.reshape(-1));
  const auto offset2bag = longs(offset2bag_);
  const auto bag_size = longs(bag_size_);
  TORCH_CHECK(offset2bag.numel() == indices.numel(), "embedding_bag backward: offset2bag has ", offset2bag.numel(),
              " entries for ", indices.numel(), " indices");
  TORCH_CHECK(bag_size.numel() == grad.size(0), "embedding_bag backward: bag_size has ", bag_size.numel(),
              " entries for ", grad.size(0), " bags");
  const auto max_indices = mode == 2 ? longs(max_indices_) : at::Tensor();
  TORCH_CHECK(mode != 2 || max_indices.numel() == grad.numel(), "embedding_bag backward: max_indices of shape ",
              max_indices_.sizes(), " for a gradient of shape ", grad.sizes());
  const auto psw = has_psw ? per_sample_weights->to(grad.scalar_type()).contiguous() : at::Tensor();
  TORCH_CHECK(!has_psw || psw.numel() == indices.numel(), "embedding_bag backward: per_sample_weights has ",
              psw.numel(), " entries for ", indices.numel(), " indices");
  const int64_t nw = num_weights.guard_int(__FILE__, __LINE__);
  auto grad_weight = at::empty({nw, grad.size(1)}, grad.options());
  OXIDE_CHECK(oxide_embedding_bag_backward(launch_on(grad), out_arg(grad_weight), in_arg(grad), in_arg(indices),
                                           in_arg(offset2bag), in_arg(bag_size), in_arg(max_indices), in_arg(psw), mode,
                                           padding_idx, scale_grad_by_freq));
  return grad_weight;
}

// aten::embedding_dense_backward (nn.Embedding's weight gradient) is the bag
// gradient above with one bag per index in sum mode: the Rust kernel sums the
// gradient rows into each weight row in index order (deterministic, split over
// weight rows), leaves padding_idx's row zero, and with scale_grad_by_freq
// divides each row by its index's count in the batch, as CPU does. Before, the
// gradient went through index_add_ -> index_put_(accumulate=True), whose
// device path materialises the linear offsets of the whole weight (2.4 ms for
// a 2048 x 256 weight and 512 indices against about 0.1 ms here).
at::Tensor embedding_dense_backward(T grad_output, T indices_, c10::SymInt num_weights, c10::SymInt padding_idx,
                                    bool scale_grad_by_freq) {
  TORCH_CHECK(indices_.scalar_type() == at::kLong || indices_.scalar_type() == at::kInt,
              "embedding_backward: expected indices of dtype Long or Int, got ", indices_.scalar_type());
  const int64_t n = indices_.numel();
  const auto grad = grad_output.reshape({n, grad_output.size(-1)});
  const auto lopt = indices_.options().dtype(at::kLong);
  return dense_backward(grad, indices_, at::arange(n, lopt), at::ones({n}, lopt), at::Tensor(), std::move(num_weights),
                        scale_grad_by_freq, 0, std::nullopt, padding_idx.guard_int(__FILE__, __LINE__));
}

at::Tensor per_sample_weights_backward(T grad_, T weight_, T indices_, T /*offsets*/, T offset2bag_, int64_t mode,
                                       int64_t padding_idx) {
  TORCH_CHECK(mode == 0, "embedding_bag_backward: per_sample_weights only supported for mode='sum'");
  TORCH_CHECK(grad_.dim() == 2 && weight_.dim() == 2 && grad_.size(1) == weight_.size(1),
              "embedding_bag backward: gradient ", grad_.sizes(), " and weight ", weight_.sizes(), " do not match");
  const auto grad = grad_.contiguous();
  const auto weight = weight_.to(grad.scalar_type()).contiguous();
  const auto indices = longs(indices_.reshape(-1));
  const auto offset2bag = longs(offset2bag_);
  TORCH_CHECK(offset2bag.numel() == indices.numel(), "embedding_bag backward: offset2bag has ", offset2bag.numel(),
              " entries for ", indices.numel(), " indices");
  auto out = at::empty({indices.numel()}, grad.options());
  OXIDE_CHECK(oxide_embedding_bag_per_sample_weights_backward(
      launch_on(grad), out_arg(out), in_arg(grad), in_arg(weight), in_arg(indices), in_arg(offset2bag), padding_idx));
  return out;
}

// embedding_renorm_ (max_norm): each distinct indexed row whose norm exceeds
// max_norm is scaled by max_norm / (norm + 1e-7). As CPU: the norm in the
// weight's dtype read as a double, the factor formed in double and applied in the
// weight's opmath type (float for half types).
at::Tensor& embedding_renorm_(at::Tensor& self, const at::Tensor& indices, double max_norm, double norm_type) {
  const at::TensorArg self_arg(self, "self", 1);
  const at::TensorArg indices_arg(indices, "indices", 2);
  at::checkDim("embedding_renorm_", self_arg, 2);
  at::checkScalarTypes("embedding_renorm_", indices_arg, {at::kLong, at::kInt});
  if (indices.numel() == 0) {
    return self;
  }
  const auto rows = std::get<0>(at::_unique(indices.reshape({-1}), /*sorted=*/true)).to(at::kLong);
  const auto selected = self.index_select(0, rows);
  const auto norms = at::linalg_vector_norm(selected, norm_type, at::IntArrayRef{1}, /*keepdim=*/true).to(at::kDouble);
  const auto max = at::scalar_tensor(max_norm, norms.options());
  const auto scale = at::where(norms.gt(max), max.div(norms.add(1e-7)), at::scalar_tensor(1.0, norms.options()));
  const auto opmath = at::toOpMathType(self.scalar_type());
  self.index_copy_(0, rows, selected.to(opmath).mul(scale.to(self.scalar_type()).to(opmath)).to(self.scalar_type()));
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "embedding_renorm_", TORCH_FN(embedding_renorm_));
  OXIDE_IMPL(m, "_embedding_bag", TORCH_FN(embedding_bag));
  OXIDE_IMPL(m, "_embedding_bag_forward_only", TORCH_FN(embedding_bag));
  // PyTorch's device-generic implementation: recomputes an empty offset2bag and picks dense or sparse.
  OXIDE_IMPL(m, "_embedding_bag_backward", TORCH_FN(at::native::_embedding_bag_backward_symint));
  OXIDE_IMPL(m, "_embedding_bag_dense_backward", TORCH_FN(dense_backward));
  OXIDE_IMPL(m, "_embedding_bag_per_sample_weights_backward", TORCH_FN(per_sample_weights_backward));
  OXIDE_IMPL(m, "embedding_dense_backward", TORCH_FN(embedding_dense_backward));
}

}  // namespace oxide
