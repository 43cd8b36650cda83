// The profiler interfaces for PrivateUse1:
// - a Kineto child profiler (REGISTER_PRIVATEUSE1_PROFILER) that turns the
//   runtime's activity records (crates/oxide-runtime/src/profiler.rs) into
//   Kineto activities: one per kernel and copy on a lane per stream, linked to
//   the operator that launched it, plus the host side of each launch with a
//   flow arrow to the kernel, as CUPTI's runtime and kernel records are;
// - the legacy profiler's stubs (registerPrivateUse1Methods), which time each
//   operator with a pair of timing events on the current stream.
// The caching allocator's reports to profile_memory are in allocator.cpp.
#define USE_KINETO 1

#include "common/oxide.h"

#include <c10/core/DeviceGuard.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <GenericTraceActivity.h>
#include <IActivityProfiler.h>
#include <ThreadUtil.h>
#include <libkineto.h>
#include <output_base.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace oxide {
namespace {

using libkineto::ActivityType;

// Trace lanes of a device sort after the host's threads, as GPUs do in Kineto's traces.
constexpr int64_t kDeviceSortBase = 0x1000000;

void collect(void* ctx, const OxideActivity* a) {
  // Called from Rust: nothing may unwind into it.
  try {
    static_cast<std::vector<OxideActivity>*>(ctx)->push_back(*a);
  } catch (...) {
  }
}

class OxideProfilerSession final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    oxide_profiler_start();
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    if (oxide_profiler_stop() != OXIDE_STATUS_SUCCESS) {
      errors_.push_back("oxide: waiting for the streams failed: " + last_error());
    }
    oxide_profiler_drain(&activities_, &collect);
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; }, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked,
                    int64_t /*startTime*/, int64_t /*endTime*/) override {
    const int64_t pid = libkineto::processId();
    std::set<int32_t> devices;
    std::set<std::pair<int32_t, int64_t>> streams;
    // Flow ids start at 1 (0 means "no flow") and are unique per trace.
    uint32_t flow = 0;
    for (const OxideActivity& a : activities_) {
      const std::string name(a.name, a.name_len);
      const auto* op = a.correlation != 0 ? linked(static_cast<int32_t>(a.correlation)) : nullptr;
      ++flow;

      // The host's side: the launch call on the launching thread, where the arrow starts.
      libkineto::GenericTraceActivity launch(
          span_, ActivityType::PRIVATEUSE1_RUNTIME,
          a.kind == OXIDE_ACTIVITY_KERNEL ? "oxideLaunchKernel" : "oxideMemcpyAsync");
      launch.startTime = a.launch_start_ns;
      launch.endTime = a.launch_end_ns;
      launch.id = static_cast<int32_t>(a.correlation);
      launch.device = static_cast<int32_t>(pid);
      launch.resource = a.thread;
      launch.threadId = static_cast<int32_t>(a.thread);
      launch.linked = op;
      launch.flow.id = flow;
      launch.flow.type = libkineto::kLinkAsyncCpuGpu;
      launch.flow.start = 1;
      launch.addTypedMetadata("correlation", a.correlation);
      logger.handleGenericActivity(launch);

      // The device's side: the kernel or copy on its stream's lane.
      libkineto::GenericTraceActivity work(
          span_, a.kind == OXIDE_ACTIVITY_KERNEL ? ActivityType::CONCURRENT_KERNEL : ActivityType::GPU_MEMCPY, name);
      work.startTime = a.start_ns;
      work.endTime = a.end_ns;
      work.id = static_cast<int32_t>(a.correlation);
      work.device = a.device;
      work.resource = a.stream;
      work.threadId = static_cast<int32_t>(a.stream);
      work.linked = op;
      work.flow.id = flow;
      work.flow.type = libkineto::kLinkAsyncCpuGpu;
      work.flow.start = 0;
      // Typed values: addMetadata would format with fmt, whose functions torch does not export.
      work.addTypedMetadata("device", static_cast<int64_t>(a.device));
      work.addTypedMetadata("stream", a.stream);
      work.addTypedMetadata("correlation", a.correlation);
      logger.handleGenericActivity(work);

      devices.insert(a.device);
      streams.insert({a.device, a.stream});
    }
    // Device 0's name is getDeviceInfo()'s (Kineto adds it in finalizeTrace); other devices' are named here.
    for (const int32_t d : devices) {
      if (d != 0) {
        logger.handleDeviceInfo(device_info(d), span_.startTime);
      }
    }
    for (const auto& [device, stream] : streams) {
      resources_.push_back({stream, stream, device, "stream " + std::to_string(stream)});
    }
    activities_.clear();
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(device_info(0));
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override { return resources_; }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

  void pushCorrelationId(uint64_t id) override { oxide_profiler_push_correlation(id); }

  void popCorrelationId() override { oxide_profiler_pop_correlation(); }

 private:
  static libkineto::DeviceInfo device_info(int32_t d) {
    return {d, kDeviceSortBase + d, "oxide " + std::to_string(d), "oxide " + std::to_string(d)};
  }

  libkineto::TraceSpan span_{0, 0, "oxide", ""};
  std::vector<OxideActivity> activities_;
  std::vector<libkineto::ResourceInfo> resources_;
  std::vector<std::string> errors_;
};

class OxideActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<ActivityType>& availableActivities() const override { return activities_; }

  // A session only when device activities are asked for (ProfilerActivity.PrivateUse1):
  // a CPU-only profile costs launches nothing.
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<ActivityType>& activity_types,
                                                                 const libkineto::Config& /*config*/) override {
    if (activity_types.count(ActivityType::CONCURRENT_KERNEL) == 0) {
      return nullptr;
    }
    return std::make_unique<OxideProfilerSession>();
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t /*ts_ms*/, int64_t /*duration_ms*/,
                                                                 const std::set<ActivityType>& activity_types,
                                                                 const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_{"oxide"};
  std::set<ActivityType> activities_{ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY,
                                     ActivityType::PRIVATEUSE1_RUNTIME};
};

REGISTER_PRIVATEUSE1_PROFILER(OxideActivityProfiler);

// The legacy profiler (torch.autograd.profiler.profile(use_device="oxide")):
// each operator records a timing event on the current stream as it starts and
// ends, and its device time is the time the stream took between the two.
struct OxideProfilerStubs final : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, torch::profiler::impl::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    const c10::DeviceIndex d = current_device();
    if (device != nullptr) {
      *device = d;
    }
    OxideEvent* raw = nullptr;
    OXIDE_CHECK(oxide_event_create(/*enable_timing=*/true, &raw));
    std::shared_ptr<void> owned(raw, [](void* e) { oxide_event_destroy(static_cast<OxideEvent*>(e)); });
    if (cpu_ns != nullptr) {
      *cpu_ns = c10::getTime();
    }
    OXIDE_CHECK(oxide_event_record(raw, d, current_stream(d)));
    *event = std::move(owned);
  }

  // Microseconds, as the CUDA stubs return.
  float elapsed(const torch::profiler::impl::ProfilerVoidEventStub* event,
                const torch::profiler::impl::ProfilerVoidEventStub* event2) const override {
    const auto* start = static_cast<const OxideEvent*>(event->get());
    const auto* end = static_cast<const OxideEvent*>(event2->get());
    OXIDE_CHECK(oxide_event_synchronize(start));
    OXIDE_CHECK(oxide_event_synchronize(end));
    double ms = 0;
    OXIDE_CHECK(oxide_event_elapsed_ms(start, end, &ms));
    return static_cast<float>(ms * 1000.0);
  }

  // NVTX's marks and ranges have no counterpart on oxide.
  void mark(const char* /*name*/) const override {}
  void rangePush(const char* /*name*/) const override {}
  void rangePop() const override {}

  bool enabled() const override { return true; }

  void onEachDevice(std::function<void(int)> op) const override {
    const c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, current_device()));
    for (int d = 0; d < oxide_device_count(); ++d) {
      OXIDE_CHECK(oxide_set_device(d));
      op(d);
    }
  }

  void synchronize() const override { OXIDE_CHECK(oxide_device_synchronize(current_device())); }
};

struct RegisterStubs {
  RegisterStubs() {
    static OxideProfilerStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  }
};
RegisterStubs register_stubs;

}  // namespace
}  // namespace oxide
