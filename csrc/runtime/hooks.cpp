// at::PrivateUse1HooksInterface: the accelerator hooks PyTorch asks about
// device count, current device, generators, pointers, pinned memory and
// storage resizing. Every method is overridden so no base-class
// "not implemented" path is reachable.
#include "common/oxide.h"

#include <ATen/core/CachingHostAllocator.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>

namespace oxide {
namespace {

struct OxideHooks final : at::PrivateUse1HooksInterface {
  void init() const override { OXIDE_CHECK(oxide_init()); }
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return oxide_device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override {
    return oxide_is_initialized() && device_index >= 0 && device_index < oxide_device_count();
  }
  c10::DeviceIndex deviceCount() const override { return static_cast<c10::DeviceIndex>(oxide_device_count()); }
  void setCurrentDevice(c10::DeviceIndex device) const override { OXIDE_CHECK(oxide_set_device(device)); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    const auto old = current_device();
    if (device != old) {
      OXIDE_CHECK(oxide_set_device(device));
    }
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override { return exchangeDevice(device); }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    return default_generator(device_index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    // The factory registered through REGISTER_GENERATOR_PRIVATEUSE1's mechanism (runtime/generator.cpp).
    const auto& factory = at::GetGeneratorPrivate();
    TORCH_INTERNAL_ASSERT(factory.has_value(), "oxide generator factory is not registered");
    return (*factory)(device_index);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    int32_t device = -1;
    OXIDE_CHECK(oxide_pointer_device(data, &device));
    TORCH_CHECK_VALUE(device >= 0, "pointer ", data, " is not oxide device memory");
    return at::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device));
  }
  bool isPinnedPtr(const void* data) const override { return oxide_is_pinned(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return at::getHostAllocator(at::kPrivateUse1); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage_bytes(storage, newsize);
  }
};

// Registered from a static initializer; the archive is linked whole, and
// tests/python/test_registrations.py proves the hooks are live.
const bool g_registered = [] {
  static OxideHooks hooks;
  at::RegisterPrivateUse1HooksInterface(&hooks);
  return true;
}();

}  // namespace
}  // namespace oxide
