// c10::DeviceAllocator for PrivateUse1: every allocation goes to the Rust
// caching allocator of the current device, on that device's current stream.
// Registered with REGISTER_ALLOCATOR so empty tensors, storages and
// torch.accelerator.memory_* all reach it.
#include "common/oxide.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceGuard.h>

namespace oxide {
namespace {

// profile_memory=True: the profiler's memory events, as CUDA's caching
// allocator reports them (the block's size, then the device's allocated and
// reserved bytes after the change). Only while a profiler asks for them.
void report_to_profiler(void* ptr, int64_t bytes, c10::DeviceIndex device) {
  OxideDeviceStats s{};
  if (oxide_device_stats(device, &s) == OXIDE_STATUS_SUCCESS) {
    c10::reportMemoryUsageToProfiler(ptr, bytes, static_cast<size_t>(s.allocated_bytes.current),
                                     static_cast<size_t>(s.reserved_bytes.current),
                                     c10::Device(c10::DeviceType::PrivateUse1, device));
  }
}

void delete_device_ptr(void* ptr) {
  int32_t device = -1;
  size_t bytes = 0;
  const bool report = ptr != nullptr && C10_UNLIKELY(c10::memoryProfilingEnabled()) &&
                      oxide_block_size(ptr, &device, &bytes) == OXIDE_STATUS_SUCCESS;
  // A deleter must not throw; a failing free means a bookkeeping bug, reported as a warning.
  if (oxide_free(ptr) != OXIDE_STATUS_SUCCESS) {
    TORCH_WARN("oxide: freeing device memory failed: ", last_error());
    return;
  }
  if (report) {
    report_to_profiler(ptr, -static_cast<int64_t>(bytes), static_cast<c10::DeviceIndex>(device));
  }
}

void fill(c10::CachingAllocator::StatArray& dst, const OxideStat& src) {
  auto& s = dst[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  s.current = src.current;
  s.peak = src.peak;
  s.allocated = src.allocated;
  s.freed = src.freed;
}

struct OxideDeviceAllocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    int32_t index = -1;
    void* ptr = nullptr;
    OXIDE_CHECK(oxide_malloc(nbytes, &index, &ptr));
    const auto device = static_cast<c10::DeviceIndex>(index);
    if (C10_UNLIKELY(c10::memoryProfilingEnabled()) && ptr != nullptr) {
      int32_t owner = -1;
      size_t bytes = 0;
      OXIDE_CHECK(oxide_block_size(ptr, &owner, &bytes));
      report_to_profiler(ptr, static_cast<int64_t>(bytes), device);
    }
    return {ptr, ptr, &delete_device_ptr, c10::Device(c10::DeviceType::PrivateUse1, device)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &delete_device_ptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    const c10::DeviceIndex device = current_device();
    OXIDE_CHECK(oxide_memcpy_async(dest, src, count, OXIDE_MEMCPY_DEVICE_TO_DEVICE, device, current_stream(device)));
  }

  bool initialized() override { return oxide_is_initialized(); }

  void emptyCache(c10::MempoolId_t /*mempool_id*/) override { OXIDE_CHECK(oxide_empty_cache()); }

  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    if (ptr.get() != nullptr) {
      OXIDE_CHECK(oxide_record_stream(ptr.get(), stream.device_index(), stream.id()));
    }
  }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    OxideDeviceStats s{};
    OXIDE_CHECK(oxide_device_stats(device, &s));
    c10::CachingDeviceAllocator::DeviceStats out;
    fill(out.allocation, s.allocation);
    fill(out.segment, s.segment);
    fill(out.active, s.allocation);
    fill(out.allocated_bytes, s.allocated_bytes);
    fill(out.reserved_bytes, s.reserved_bytes);
    fill(out.active_bytes, s.allocated_bytes);
    fill(out.requested_bytes, s.requested_bytes);
    out.num_alloc_retries = s.num_alloc_retries;
    out.num_ooms = s.num_ooms;
    out.num_device_alloc = s.num_device_alloc;
    out.num_device_free = s.num_device_free;
    return out;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override { OXIDE_CHECK(oxide_reset_accumulated_stats(device)); }

  void resetPeakStats(c10::DeviceIndex device) override { OXIDE_CHECK(oxide_reset_peak_stats(device)); }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    size_t free = 0, total = 0;
    OXIDE_CHECK(oxide_mem_get_info(device, &free, &total));
    return {free, total};
  }
};

OxideDeviceAllocator g_allocator;

}  // namespace

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

c10::Allocator* device_allocator() { return &g_allocator; }

void resize_storage_bytes(const c10::Storage& storage, size_t nbytes) {
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  const size_t old = storage.nbytes();
  if (nbytes == old) {
    return;
  }
  const c10::Device device = storage.device();
  const c10::DeviceGuard guard(device);
  c10::DataPtr fresh =
      storage.allocator() != nullptr ? storage.allocator()->allocate(nbytes) : g_allocator.allocate(nbytes);
  const size_t keep = std::min(old, nbytes);
  if (keep > 0 && storage.data() != nullptr) {
    OXIDE_CHECK(oxide_memcpy_async(fresh.get(), storage.data(), keep, OXIDE_MEMCPY_DEVICE_TO_DEVICE, device.index(),
                                   current_stream(device.index())));
  }
  storage.set_data_ptr_noswap(std::move(fresh));
  storage.set_nbytes(nbytes);
}

}  // namespace oxide
