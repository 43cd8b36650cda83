// c10::impl::DeviceGuardImplInterface for PrivateUse1: current device,
// streams and events, each call forwarded to the Rust runtime. This is what
// DeviceGuard, torch.Stream, torch.Event and torch.accelerator use.
#include "common/oxide.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace oxide {
namespace {

constexpr auto kOxide = c10::DeviceType::PrivateUse1;

c10::Stream make_stream(c10::Device device, int64_t id) { return c10::Stream(c10::Stream::UNSAFE, device, id); }

c10::DeviceIndex index_or_current(c10::Device d) { return d.has_index() ? d.index() : current_device(); }

OxideEvent* as_event(void* e) { return static_cast<OxideEvent*>(e); }

struct OxideGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kOxide; }

  // An index of -1 means "the current device" (c10::Device without an index): no change.
  c10::Device exchangeDevice(c10::Device d) const override {
    TORCH_INTERNAL_ASSERT(d.type() == kOxide);
    const c10::DeviceIndex old = current_device();
    if (d.index() != -1 && d.index() != old) {
      OXIDE_CHECK(oxide_set_device(d.index()));
    }
    return c10::Device(kOxide, old);
  }

  c10::Device getDevice() const override { return c10::Device(kOxide, current_device()); }

  void setDevice(c10::Device d) const override {
    TORCH_INTERNAL_ASSERT(d.type() == kOxide);
    if (d.index() != -1) {
      OXIDE_CHECK(oxide_set_device(d.index()));
    }
  }

  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() != -1) {
      (void)oxide_set_device(d.index());
    }
  }

  c10::Stream getStream(c10::Device d) const override {
    const auto index = index_or_current(d);
    return make_stream(c10::Device(kOxide, index), current_stream(index));
  }

  c10::Stream getDefaultStream(c10::Device d) const override {
    const auto index = index_or_current(d);
    OXIDE_CHECK(oxide_check_device(index));
    return make_stream(c10::Device(kOxide, index), 0);
  }

  c10::Stream getStreamFromGlobalPool(c10::Device d, bool isHighPriority) const override {
    const auto index = index_or_current(d);
    int64_t id = 0;
    OXIDE_CHECK(oxide_stream_from_pool(index, isHighPriority, &id));
    return make_stream(c10::Device(kOxide, index), id);
  }

  // Like CUDA's, a "new" stream comes from the device's fixed pool (round-robin), so
  // creating streams in a loop reuses a bounded set instead of growing the runtime.
  c10::Stream getNewStream(c10::Device d, int priority) const override {
    const auto index = index_or_current(d);
    int64_t id = 0;
    OXIDE_CHECK(oxide_stream_create(index, priority, &id));
    return make_stream(c10::Device(kOxide, index), id);
  }

  c10::Stream exchangeStream(c10::Stream s) const override {
    int64_t old = 0;
    OXIDE_CHECK(oxide_stream_exchange(s.device_index(), s.id(), &old));
    return make_stream(s.device(), old);
  }

  c10::DeviceIndex deviceCount() const noexcept override { return static_cast<c10::DeviceIndex>(oxide_device_count()); }

  // torch.accelerator.get_device_capability: the dtypes a tensor can have on oxide with
  // conversions among all of them, i.e. the ABI's dtype codes (common/oxide.h).
  c10::DeviceCapability getDeviceCapability(c10::Device d) const override {
    const auto index = index_or_current(d);
    TORCH_CHECK(index >= 0 && index < oxide_device_count(), "invalid oxide device index ", index);
    c10::DeviceCapability cap;
    cap.capability_data.capability_bits = 0;
#define OXIDE_CAPABILITY(_1, name)                             \
  if (is_abi_dtype(c10::ScalarType::name)) {                   \
    cap.capability_data.supported_scalar_types.has_##name = 1; \
  }
    AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS(OXIDE_CAPABILITY)
#undef OXIDE_CAPABILITY
    return cap;
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "Event device index ", device_index,
                " does not match recording stream's device index ", stream.device_index(), ".");
    if (*event == nullptr) {
      OxideEvent* created = nullptr;
      OXIDE_CHECK(oxide_event_create(flag == c10::EventFlag::BACKEND_DEFAULT, &created));
      *event = created;
    }
    OXIDE_CHECK(oxide_event_record(as_event(*event), stream.device_index(), stream.id()));
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (event != nullptr) {
      OXIDE_CHECK(oxide_stream_wait_event(stream.device_index(), stream.id(), as_event(event)));
    }
  }

  bool queryEvent(void* event) const override {
    if (event == nullptr) {
      return true;
    }
    bool done = false;
    OXIDE_CHECK(oxide_event_query(as_event(event), &done));
    return done;
  }

  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    oxide_event_destroy(as_event(event));
  }

  bool queryStream(const c10::Stream& stream) const override {
    bool done = false;
    OXIDE_CHECK(oxide_stream_query(stream.device_index(), stream.id(), &done));
    return done;
  }

  bool isStreamCapturing(const c10::Stream& stream) const override {
    bool capturing = false;
    OXIDE_CHECK(oxide_stream_is_capturing(stream.device_index(), stream.id(), &capturing));
    return capturing;
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    OXIDE_CHECK(oxide_stream_synchronize(stream.device_index(), stream.id()));
  }

  void synchronizeEvent(void* event) const override {
    if (event != nullptr) {
      OXIDE_CHECK(oxide_event_synchronize(as_event(event)));
    }
  }

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    OXIDE_CHECK(oxide_device_synchronize(device_index == -1 ? current_device() : device_index));
  }

  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const override {
    if (data_ptr.get() != nullptr) {
      OXIDE_CHECK(oxide_record_stream(data_ptr.get(), stream.device_index(), stream.id()));
    }
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*device_index*/) const override {
    TORCH_CHECK(start != nullptr && end != nullptr, "Both events must be recorded before calculating elapsed time.");
    double ms = 0;
    OXIDE_CHECK(oxide_event_elapsed_ms(as_event(start), as_event(end), &ms));
    return ms;
  }
};

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, OxideGuardImpl);

}  // namespace oxide
