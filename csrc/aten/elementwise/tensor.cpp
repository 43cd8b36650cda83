// The minimal native operator set every PrivateUse1 backend needs before
// anything else works: allocation (empty, empty_strided), views (as_strided,
// view, _reshape_alias), resizing (resize_, set_), copies between host and
// devices (_copy_from, _copy_from_and_resize), _local_scalar_dense, and
// fill_/zero_ (needed by every factory such as zeros, ones, full).
// View semantics (also view_as_real, view_as_complex, unfold: views whose only
// kernels are per backend) are PyTorch's own device-generic implementations; only
// memory and copies are ours.
#include "common/device_check.h"
#include "common/kernels.h"

#include <ATen/EmptyTensor.h>
#include <ATen/Dispatch_v2.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/_conj.h>
#include <ATen/ops/_neg_view.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_local_scalar_dense.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cstring>

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

int64_t stream_of(const at::Tensor& t) {
  return current_stream(t.device().index());
}

void memcpy_on(const at::Tensor& device_side, void* dst, const void* src, size_t bytes, int32_t kind) {
  const auto index = device_side.device().index();
  const int64_t stream = current_stream(index);
  OXIDE_CHECK(oxide_memcpy_async(dst, src, bytes, kind, index, stream));
  OXIDE_CHECK(oxide_stream_synchronize(index, stream));
}

// Same dtype, both on oxide (possibly different devices), src already expanded to dst's shape.
void copy_device_to_device(const at::Tensor& src, const at::Tensor& dst) {
  if (src.device() != dst.device()) {
    OXIDE_CHECK(oxide_device_synchronize(src.device().index()));
  }
  const c10::DeviceGuard guard(dst.device());
  const auto ndim = static_cast<size_t>(dst.dim());
  OXIDE_CHECK(oxide_copy_strided(dst.device().index(), stream_of(dst), dst.element_size(), ndim,
                                 dst.sizes().data(), dst.data_ptr(), dst.strides().data(), src.const_data_ptr(),
                                 src.strides().data()));
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
  OXIDE_CHECK(oxide_cast(dst.device().index(), stream_of(dst), &args.abi));
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
      cast_on_device(self, dst);
      return dst;
    }
    // CPU's copy_ rejects any overlap except the identical view (TensorIterator's check).
    const bool identical = self.data_ptr() == dst.data_ptr() && self.strides() == dst.strides() &&
                           self.sizes() == dst.sizes();
    if (identical) {
      return dst;
    }
    at::assert_no_overlap(dst, self);
    copy_device_to_device(self.expand(dst.sizes()), dst);
    return dst;
  }

  if (dst_dev) {  // host -> device
    const c10::DeviceGuard guard(dst.device());
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
  const at::Tensor src = self.is_non_overlapping_and_dense() ? self : self.contiguous();
  at::Tensor host = at::empty_strided(src.sizes(), src.strides(), src.options().device(at::kCPU));
  memcpy_on(src, host.data_ptr(), src.const_data_ptr(), host.nbytes(), OXIDE_MEMCPY_DEVICE_TO_HOST);
  dst.copy_(host);
  return dst;
}

at::Tensor& fill_scalar(at::Tensor& self, const at::Scalar& value) {
  // The scalar converted to self's dtype with Scalar::to<T>, which raises on
  // overflow exactly as CPU's fill_ does; the kernel then copies those bytes.
  alignas(16) unsigned char element[16] = {};
  AT_DISPATCH_V2(
      self.scalar_type(), "fill_", AT_WRAP([&] {
        const scalar_t v = value.to<scalar_t>();
        std::memcpy(element, &v, sizeof(scalar_t));
      }),
      AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), AT_EXPAND(AT_FLOAT8_TYPES), AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES),
      at::kHalf, at::kBFloat16, at::kBool, at::kComplexHalf);
  if (self.numel() == 0) {
    return self;
  }
  const c10::DeviceGuard guard(self.device());
  OXIDE_CHECK(oxide_fill_strided(self.device().index(), stream_of(self), self.element_size(),
                                 static_cast<size_t>(self.dim()), self.sizes().data(), self.data_ptr(),
                                 self.strides().data(), element));
  return self;
}

at::Tensor& fill_tensor_(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ",
              value.dim(), " dimensions.");
  return self.fill_(value.item());  // self may be a CPU tensor filled from a 0-dim oxide value
}

at::Tensor& zero_(at::Tensor& self) {
  return fill_scalar(self, 0);
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

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (!dst.sizes().equals(self.sizes())) {
    dst.resize_(self.sizes());
  }
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  return at::_local_scalar_dense(self.to(at::kCPU));
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) {
  return at::native::view(self, size);
}

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

} // namespace

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
  OXIDE_IMPL(m, "_copy_from", TORCH_FN(copy_from));
  OXIDE_IMPL(m, "_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  OXIDE_IMPL(m, "_local_scalar_dense", TORCH_FN(local_scalar_dense));
  OXIDE_IMPL(m, "fill_.Scalar", TORCH_FN(fill_scalar));
  OXIDE_IMPL(m, "fill_.Tensor", TORCH_FN(fill_tensor_));
  OXIDE_IMPL(m, "zero_", TORCH_FN(zero_));
  OXIDE_IMPL(m, "record_stream", TORCH_FN(record_stream));
  OXIDE_IMPL(m, "_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
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

} // namespace oxide
