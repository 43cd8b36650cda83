// c10d::Timer for PrivateUse1 (TimerRegistry): DistributedDataParallel's
// per-iteration timing (forward, backward compute, communication) of oxide
// modules, which DDP's logger samples (_get_ddp_logging_data). As CUDA's timer
// does, each point is an event with timing recorded on the current stream, so a
// difference is device time, not the time the host spent queuing the work.
// Without a registered timer DDP warns on every run that it has no timer for the device.
#include "common/oxide.h"

#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

#include <array>
#include <memory>

namespace oxide {
namespace {

struct EventDeleter {
  void operator()(OxideEvent* e) const { oxide_event_destroy(e); }
};
using EventPtr = std::unique_ptr<OxideEvent, EventDeleter>;

class OxideTimer final : public c10d::Timer {
 public:
  explicit OxideTimer(c10::Device device) : device_(device.index()) {
    for (auto& e : events_) {
      OxideEvent* raw = nullptr;
      OXIDE_CHECK(oxide_event_create(/*enable_timing=*/true, &raw));
      e.reset(raw);
    }
  }

  void record(Event event) override {
    c10d::Timer::record(event);  // the host timestamp DDP also reports
    OXIDE_CHECK(oxide_event_record(event_of(event), device_, current_stream(device_)));
  }

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    if (!getTimestamp(start) || !getTimestamp(end)) {
      return std::nullopt;
    }
    OXIDE_CHECK(oxide_event_synchronize(event_of(end)));
    double ms = 0;
    if (oxide_event_elapsed_ms(event_of(start), event_of(end), &ms) != OXIDE_STATUS_SUCCESS) {
      return std::nullopt;  // an event recorded on another device, or not recorded
    }
    // Events of one iteration can be recorded out of order (a bucket reduced early).
    return ms < 0 ? std::nullopt : std::optional<int64_t>(static_cast<int64_t>(ms * 1e6));
  }

 private:
  OxideEvent* event_of(Event event) { return events_.at(static_cast<size_t>(event)).get(); }

  c10::DeviceIndex device_;
  std::array<EventPtr, 5> events_;
};

}  // namespace
}  // namespace oxide

// The registry's macros name it unqualified: register from its own namespace.
namespace c10d {
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, oxide::OxideTimer)
}  // namespace c10d
