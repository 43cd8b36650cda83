// at::HostAllocator for PrivateUse1 (REGISTER_HOST_ALLOCATOR): pinned host
// memory from the runtime (page-aligned, tracked so is_pinned() can answer).
// Behind tensor.pin_memory(), torch.empty(..., pin_memory=True) and
// DataLoader(pin_memory=True, pin_memory_device="oxide").
// Blocks are returned to the runtime on free (no cache). A non-blocking copy
// between a pinned block and a device is queued on a stream; the runtime itself
// keeps the block until that copy has run (oxide-runtime's host.rs records a
// fence per queued copy), so record_event has nothing left to do.
#include "common/oxide.h"

#include <ATen/core/CachingHostAllocator.h>

namespace oxide {
namespace {

void pinned_free(void* ptr) {
  if (oxide_host_free(ptr) != OXIDE_STATUS_SUCCESS) {
    TORCH_WARN("oxide: freeing pinned host memory failed: ", last_error());
  }
}

struct OxideHostAllocator final : at::HostAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nullptr;
    OXIDE_CHECK(oxide_host_malloc(nbytes, &ptr));
    return {ptr, ptr, &pinned_free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &pinned_free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
  bool record_event(void* /*ptr*/, void* /*ctx*/, c10::Stream /*stream*/) override { return true; }
  void empty_cache() override {}
  at::HostStats get_stats() override {
    size_t bytes = 0, blocks = 0;
    OXIDE_CHECK(oxide_host_stats(&bytes, &blocks));
    at::HostStats stats;
    stats.active_bytes.current = stats.allocated_bytes.current = static_cast<int64_t>(bytes);
    stats.active_requests.current = stats.allocations.current = static_cast<int64_t>(blocks);
    return stats;
  }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}
};

OxideHostAllocator g_host_allocator;

}  // namespace
}  // namespace oxide

REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &oxide::g_host_allocator)
