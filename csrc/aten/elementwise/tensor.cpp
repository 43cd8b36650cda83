// The tensor itself on oxide: allocation (empty, empty_strided), views
// (as_strided, view, _reshape_alias; view_as_real, view_as_complex, unfold:
// views whose only kernels are per backend), resizing (resize_, set_),
// record_stream and _has_compatible_shallow_copy_type. With copy.cpp and
// fill.cpp, the minimal operator set every PrivateUse1 backend needs before
// anything else works. View semantics are PyTorch's own; only memory is ours.
#include "common/device_check.h"
#include "common/oxide.h"

#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace oxide {
namespace {

constexpr auto kOxideKey = c10::DispatchKey::PrivateUse1;

void check_create_args(c10::Device device, std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_INTERNAL_ASSERT(device.is_privateuseone());
  TORCH_CHECK_NOT_IMPLEMENTED(c10::layout_or_default(layout) == c10::Layout::Strided,
                              "oxide supports only the torch.strided layout, got ", c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "Only dense CPU tensors can be pinned");
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  const auto dev = c10::device_or_default(device);
  check_create_args(dev, layout, pin_memory);
  const c10::DeviceGuard guard(dev);
  return at::detail::empty_generic(size, device_allocator(), c10::DispatchKeySet(kOxideKey),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  const auto dev = c10::device_or_default(device);
  check_create_args(dev, layout, pin_memory);
  const c10::DeviceGuard guard(dev);
  return at::detail::empty_strided_generic(size, stride, device_allocator(), c10::DispatchKeySet(kOxideKey),
                                           c10::dtype_or_default(dtype));
}

// Sets sizes (and strides, or contiguous strides) and grows the storage if
// the new geometry needs more bytes; never shrinks (as CPU's resize_).
void restride_and_grow(const at::Tensor& self, c10::IntArrayRef size, std::optional<c10::IntArrayRef> stride) {
  auto* impl = self.unsafeGetTensorImpl();
  const auto itemsize = self.dtype().itemsize();
  const auto offset = impl->storage_offset();
  size_t nbytes = 0;
  if (stride) {
    impl->set_sizes_and_strides(size, *stride);
    nbytes = at::detail::computeStorageNbytes(size, *stride, itemsize, offset);
  } else {
    impl->set_sizes_contiguous(size);
    nbytes = at::detail::computeStorageNbytesContiguous(size, itemsize, offset);
  }
  if (nbytes > self.storage().nbytes()) {
    resize_storage_bytes(self.storage(), nbytes);
  }
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  for (const auto s : size) {
    // RuntimeError, as CPU's resize_ raises for a negative size.
    TORCH_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s, ": ", size);
  }
  if (!(self.sizes() == size && !memory_format)) {
    restride_and_grow(self, size, std::nullopt);
  }
  if (memory_format) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve, "Unsupported memory format ", *memory_format);
    self.unsafeGetTensorImpl()->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor& set_storage_offset(at::Tensor& self, c10::Storage source, int64_t offset, c10::IntArrayRef size,
                               c10::IntArrayRef stride) {
  at::native::checkSetStorage(self, std::move(source), offset, size, stride);
  self.unsafeGetTensorImpl()->set_storage_offset(offset);
  restride_and_grow(self, size, stride.data() != nullptr ? std::optional<c10::IntArrayRef>(stride) : std::nullopt);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source) {
  const int64_t numel = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage_offset(self, std::move(source), 0, {numel}, {});
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.unsafeGetTensorImpl() != source.unsafeGetTensorImpl()) {
    return set_storage_offset(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
  }
  return self;
}

at::Tensor& set_empty(at::Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, device_allocator(), /*resizable=*/true);
  return set_storage_offset(self, std::move(storage), 0, {0}, {});
}

// Tensor.record_stream: the block must not be reused before `stream`'s work is done.
// The stream may be on another oxide device (a peer reads the tensor there), as CUDA allows.
void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1, "record_stream: stream ", stream,
              " is not an oxide stream (the tensor is on ", self.device(), ")");
  if (self.storage().data() != nullptr) {
    OXIDE_CHECK(oxide_record_stream(self.storage().mutable_data(), stream.device_index(), stream.id()));
  }
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) { return at::native::view(self, size); }

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

// Whether `self`'s TensorImpl may take `from`'s metadata and storage in place
// (`param.data = from`, Module._apply). c10's rule admits dense tensors of a fixed
// list of backends (CPU, CUDA, MPS, HIP, XPU, HPU, MTIA) and leaves PrivateUse1 to
// this operator. Without it `model.to("oxide")` replaced every Parameter by a new
// one per module, so weights tied between modules (GPT-2's lm_head and wte) came
// out untied and trained apart. An oxide tensor is a plain strided TensorImpl, like
// a CPU or CUDA one, so dense oxide tensors pair with dense tensors of those backends.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  if (self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set())) {
    return true;
  }
  auto dense = [](c10::DispatchKeySet ks) {
    constexpr auto backends = c10::DispatchKeySet(
        {c10::BackendComponent::CPUBit, c10::BackendComponent::CUDABit, c10::BackendComponent::MPSBit,
         c10::BackendComponent::HIPBit, c10::BackendComponent::XPUBit, c10::BackendComponent::HPUBit,
         c10::BackendComponent::MTIABit, c10::BackendComponent::PrivateUse1Bit});
    return ks.has_any(c10::DispatchKeySet(c10::DispatchKey::Dense)) && ks.has_any(backends);
  };
  return dense(self.key_set()) && dense(from.key_set());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  OXIDE_IMPL(m, "empty.memory_format", TORCH_FN(empty_memory_format));
  OXIDE_IMPL(m, "empty_strided", TORCH_FN(empty_strided));
  OXIDE_IMPL(m, "as_strided", TORCH_FN(as_strided));
  OXIDE_IMPL(m, "view", TORCH_FN(view));
  OXIDE_IMPL(m, "_reshape_alias", TORCH_FN(reshape_alias));
  OXIDE_IMPL(m, "view_as_real", TORCH_FN(at::native::view_as_real));
  OXIDE_IMPL(m, "view_as_complex", TORCH_FN(at::native::view_as_complex));
  OXIDE_IMPL(m, "unfold", TORCH_FN(at::native::unfold));
  OXIDE_IMPL(m, "resize_", TORCH_FN(resize_));
  OXIDE_IMPL(m, "set_.source_Storage", TORCH_FN(set_storage));
  OXIDE_IMPL(m, "set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset));
  OXIDE_IMPL(m, "set_.source_Tensor", TORCH_FN(set_tensor));
  OXIDE_IMPL(m, "set_", TORCH_FN(set_empty));
  OXIDE_IMPL(m, "record_stream", TORCH_FN(record_stream));
  OXIDE_IMPL(m, "_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
}

}  // namespace oxide
