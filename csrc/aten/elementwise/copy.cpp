// Copies on oxide: _copy_from between host and device, between oxide devices
// and between dtypes on a device; _copy_from_and_resize; _local_scalar_dense
// (.item()); and cat, a copy of every input into its slice of the output.
// Lazily conjugated/negated tensors are resolved here (the Conjugate and
// Negative fallthroughs at the end say why). Loops in Rust: oxide_kernels::ops::elementwise::copy, ::cast.
#include "common/device_check.h"
#include "common/kernels.h"
#include "common/structured.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/ops/_conj.h>
#include <ATen/ops/_local_scalar_dense.h>
#include <ATen/ops/_neg_view.h>
#include <ATen/ops/cat_meta.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>

namespace oxide {
namespace {

void memcpy_on(const at::Tensor& device_side, void* dst, const void* src, size_t bytes, int32_t kind,
               bool wait = true) {
  const auto index = device_side.device().index();
  const int64_t stream = current_stream(index);
  OXIDE_CHECK(oxide_memcpy_async(dst, src, bytes, kind, index, stream));
  if (wait) {
    OXIDE_CHECK(oxide_stream_synchronize(index, stream));
  }
}

// A non-blocking copy between a device tensor and a pinned host tensor of the same
// dtype and layout moves the bytes directly and is queued on the current stream
// (CUDA's semantics: the host reads the result after synchronizing; the pinned
// block is kept until the copy has run, even when freed earlier).
bool same_dense_layout(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() && a.strides() == b.strides() &&
         a.is_non_overlapping_and_dense();
}

// Same dtype, both on oxide (possibly different devices), src already expanded to dst's shape.
// A copy between devices runs on dst's current stream after the work queued so far on
// src's current stream, and src's later work runs after the copy: both devices' streams
// are ordered against it, as CUDA orders a peer copy with events. The host does not wait.
void copy_device_to_device(const at::Tensor& src, const at::Tensor& dst) {
  const c10::DeviceGuard guard(dst.device());
  const auto si = src.device().index();
  const auto di = dst.device().index();
  const bool peer = si != di;
  if (peer) {
    OXIDE_CHECK(oxide_stream_wait_stream(di, current_stream(di), si, current_stream(si)));
  }
  OXIDE_CHECK(oxide_copy_strided(launch_on(dst), dst.element_size(), out_arg(dst), in_arg(src)));
  if (peer) {
    OXIDE_CHECK(oxide_stream_wait_stream(si, current_stream(si), di, current_stream(di)));
  }
}

// A converting copy between dtypes on the device (every dtype pair,
// complex included): TensorIterator broadcasts the source, checks overlap and
// gives both layouts; a source on another oxide device first moves there
// unconverted.
void cast_on_device(const at::Tensor& src_in, const at::Tensor& dst) {
  const at::Tensor src = src_in.device() != dst.device() ? src_in.to(dst.device()) : src_in;
  const c10::DeviceGuard guard(dst.device());
  auto iter = at::TensorIteratorConfig()
                  .add_output(dst)
                  .add_const_input(src)
                  .check_all_same_dtype(false)
                  .resize_outputs(false)
                  .build();
  IterArgs args(iter);
  OXIDE_CHECK(oxide_cast(launch_on(dst), &args.abi));
}

// A conversion the cast kernel has no loop for (to or from float8, complex32, ...):
// PyTorch's CPU copy converts a host copy of the source, which then moves to `dst`
// unconverted. Counted and announced as a CPU fallback of aten::_to_copy.
void cast_on_host(const at::Tensor& src, const at::Tensor& dst, const UnsupportedDtype& refused) {
  note_dtype_fallback("aten::_to_copy", refused);
  dst.copy_(src.cpu().to(dst.scalar_type()));
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(self.defined() && dst.defined(), "_copy_from: undefined tensor");
  if (dst.numel() == 0 || self.is_same(dst)) {
    return dst;
  }
  // Lazy conjugate / negative bits: copy the plain data, then apply the bit to the
  // destination (through the dispatcher, so CPU destinations stay on CPU).
  // Going through clone() instead would re-enter _copy_from forever.
  if (self.is_conj() || self.is_neg()) {
    at::Tensor plain = self.is_conj() ? at::_conj(self) : self;
    plain = plain.is_neg() ? at::_neg_view(plain) : plain;
    copy_from(plain, dst, non_blocking);
    if (self.is_conj()) {
      dst.conj_physical_();
    }
    if (self.is_neg()) {
      dst.neg_();
    }
    return dst;
  }
  if (dst.is_conj() || dst.is_neg()) {
    // Writing into a lazily conjugated/negated view: write the transformed source into the plain data.
    at::Tensor plain = dst.is_conj() ? at::_conj(dst) : dst;
    plain = plain.is_neg() ? at::_neg_view(plain) : plain;
    at::Tensor src = dst.is_conj() ? self.conj_physical() : self;
    src = dst.is_neg() ? src.neg() : src;
    copy_from(src, plain, non_blocking);
    return dst;
  }
  const bool src_dev = self.is_privateuseone();
  const bool dst_dev = dst.is_privateuseone();
  TORCH_CHECK((src_dev || self.is_cpu()) && (dst_dev || dst.is_cpu()),
              "oxide copies only between cpu and oxide tensors, got ", self.device(), " -> ", dst.device());
  at::assert_no_internal_overlap(dst);

  if (src_dev && dst_dev) {
    if (self.scalar_type() != dst.scalar_type()) {
      try {
        cast_on_device(self, dst);
      } catch (const UnsupportedDtype& refused) {
        cast_on_host(self, dst, refused);
      }
      return dst;
    }
    // CPU's copy_ rejects any overlap except the identical view (TensorIterator's check).
    const bool identical =
        self.data_ptr() == dst.data_ptr() && self.strides() == dst.strides() && self.sizes() == dst.sizes();
    if (identical) {
      return dst;
    }
    at::assert_no_overlap(dst, self);
    copy_device_to_device(self.expand(dst.sizes()), dst);
    return dst;
  }

  if (dst_dev) {  // host -> device
    const c10::DeviceGuard guard(dst.device());
    if (non_blocking && same_dense_layout(self, dst) && self.is_pinned()) {
      memcpy_on(dst, dst.data_ptr(), self.const_data_ptr(), dst.nbytes(), OXIDE_MEMCPY_HOST_TO_DEVICE, false);
      return dst;
    }
    const at::Tensor src = self.to(dst.scalar_type()).expand(dst.sizes());
    if (!dst.is_non_overlapping_and_dense()) {
      at::Tensor staging = at::empty(dst.sizes(), dst.options());
      copy_from(src, staging, non_blocking);
      copy_device_to_device(staging, dst);
      return dst;
    }
    // Lay the host data out exactly like dst, then move the bytes in one copy.
    at::Tensor host = at::empty_strided(dst.sizes(), dst.strides(), src.options());
    host.copy_(src);
    memcpy_on(dst, dst.data_ptr(), host.const_data_ptr(), host.nbytes(), OXIDE_MEMCPY_HOST_TO_DEVICE);
    return dst;
  }

  // device -> host
  const c10::DeviceGuard guard(self.device());
  if (non_blocking && same_dense_layout(self, dst) && dst.is_pinned()) {
    memcpy_on(self, dst.data_ptr(), self.const_data_ptr(), dst.nbytes(), OXIDE_MEMCPY_DEVICE_TO_HOST, false);
    return dst;
  }
  const at::Tensor src = self.is_non_overlapping_and_dense() ? self : self.contiguous();
  at::Tensor host = at::empty_strided(src.sizes(), src.strides(), src.options().device(at::kCPU));
  memcpy_on(src, host.data_ptr(), src.const_data_ptr(), host.nbytes(), OXIDE_MEMCPY_DEVICE_TO_HOST);
  dst.copy_(host);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (!dst.sizes().equals(self.sizes())) {
    dst.resize_(self.sizes());
  }
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) { return at::_local_scalar_dense(self.to(at::kCPU)); }

// cat: the meta function checks shapes, dtypes and overlap and sizes the output.
// When the output and every input are contiguous, of one dtype and on the
// output's device, one kernel interleaves the inputs' chunks
// (`oxide_cat_contiguous`; `torch.stack` of per-step states in RNN layers
// lands here); otherwise each input is copied into its slice with the native
// strided copy.
bool cat_contiguous(const at::ITensorListRef& tensors, int64_t dim, const at::Tensor& out) {
  if (!out.is_contiguous()) {
    return false;
  }
  std::vector<OxideTensor> parts;
  for (const at::Tensor& t : tensors) {
    if (t.dim() == 1 && t.numel() == 0) {
      continue;  // legacy: skipped, as below
    }
    if (!t.is_contiguous() || t.scalar_type() != out.scalar_type() || t.device() != out.device()) {
      return false;
    }
    parts.push_back(in_arg(t));
  }
  const auto outer = static_cast<size_t>(c10::multiply_integers(out.sizes().begin(), out.sizes().begin() + dim));
  OXIDE_CHECK(
      oxide_cat_contiguous(launch_on(out), out.element_size(), outer, out_arg(out), parts.data(), parts.size()));
  return true;
}

struct Cat : at::meta::structured_cat {
  void impl(const at::ITensorListRef& tensors, int64_t dim, int64_t /*valid*/, bool, bool, bool, at::MemoryFormat,
            const at::Tensor& out) {
    if (out.numel() == 0 || cat_contiguous(tensors, dim, out)) {
      return;
    }
    int64_t offset = 0;
    for (const at::Tensor& t : tensors) {
      // Legacy: 1-d empty tensors are skipped whatever the other shapes are.
      if (t.dim() == 1 && t.numel() == 0) {
        continue;
      }
      const int64_t size = t.size(dim);
      out.narrow(dim, offset, size).copy_(t);
      offset += size;
    }
  }
};

at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim) {
  structured::Wrapper<Cat, structured::Kind::Functional, 1> op;
  auto p = op.meta(tensors, dim);
  op.impl(tensors, p.dim, p.valid, p.all_contiguous, p.all_same_dtype, p.all_same_sizes_and_stride, p.memory_format,
          op.outputs_[0]);
  return std::move(op.outputs_[0]);
}

at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
  structured::Wrapper<Cat, structured::Kind::Out, 1> op(out);
  auto p = op.meta(tensors, dim);
  op.impl(tensors, p.dim, p.valid, p.all_contiguous, p.all_same_dtype, p.all_same_sizes_and_stride, p.memory_format,
          op.maybe_get_output(0));
  op.commit();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "_copy_from", TORCH_FN(copy_from));
  OXIDE_IMPL(m, "_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  OXIDE_IMPL(m, "_local_scalar_dense", TORCH_FN(local_scalar_dense));
  OXIDE_IMPL(m, "cat", TORCH_FN(cat));
  OXIDE_IMPL(m, "cat.out", TORCH_FN(cat_out));
}

// The Conjugate and Negative keys sit above PrivateUse1; their fallbacks would
// materialise a lazily conjugated/negated source with clone(), which copies
// through _copy_from again, forever. Let the bits through: copy_from handles them.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  OXIDE_IMPL(m, "_copy_from", torch::CppFunction::makeFallthrough());
  OXIDE_IMPL(m, "_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  OXIDE_IMPL(m, "_copy_from", torch::CppFunction::makeFallthrough());
  OXIDE_IMPL(m, "_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

}  // namespace oxide
