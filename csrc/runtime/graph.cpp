// torch.accelerator.Graph for oxide: at::GraphImplInterface over the runtime's
// stream capture (crates/oxide-runtime/src/graph.rs) and the allocator's private
// pools; REGISTER_GRAPH_IMPL under the upper-case backend name ("OXIDE").
//
// A capture records the launches aimed at the current stream as graph nodes,
// its allocations come from the graph's private pool, and the generators it
// draws from are registered here: each replay reserves, under the generator's
// lock, the whole capture's Philox blocks from every registered generator and
// hands the states to the replay, so random operators draw new numbers each
// time (CUDA's graph-safe generators).
#include "common/oxide.h"

#include <ATen/core/GraphImplInterface.h>
#include <c10/core/GeneratorImpl.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace oxide {
namespace {

class OxideGraphImpl;

// Captures in progress by (device, stream), for the generators.
std::mutex g_captures_mutex;
std::map<std::pair<c10::DeviceIndex, int64_t>, OxideGraphImpl*> g_captures;

// Pool ids minted for graphs created without one: {0, n}, as CUDA's graph pools.
std::atomic<uint64_t> g_next_pool{1};

// The allocator's key of a pool id: ours are {0, n}; any other id uses its first half.
uint64_t pool_key(const at::MempoolId_t& id) { return id.second != 0 ? id.second : (id.first | (1ULL << 63)); }

class OxideGraphImpl final : public at::GraphImplInterface {
 public:
  explicit OxideGraphImpl(const at::GraphImplArgs& args) : keep_graph_(args.keep_graph) {}

  ~OxideGraphImpl() override {
    if (capturing_) {
      // Destroyed mid-capture (an exception unwound past capture_end): end it quietly.
      unregister_capture();
      OxideGraph* dropped = nullptr;
      (void)oxide_graph_capture_end(device_, stream_, &dropped);
      oxide_graph_destroy(dropped);
    }
    release();
  }

  C10_DISABLE_COPY_AND_ASSIGN(OxideGraphImpl);

  void capture_begin(at::MempoolId_t pool, at::GraphCaptureMode /*mode*/) override {
    // Every mode captures the current stream only; other threads and streams run
    // eagerly (work they do for the capture is not in the graph: see the docs).
    TORCH_CHECK(!capturing_, "oxide graph: capture_begin() while this graph is capturing");
    TORCH_CHECK(graph_ == nullptr,
                "oxide graph: this graph holds a capture already; call reset() before capturing again");
    device_ = current_device();
    stream_ = current_stream(device_);
    pool_ = (pool.first == 0 && pool.second == 0) ? at::MempoolId_t{0, g_next_pool++} : pool;
    generators_.clear();
    OXIDE_CHECK(oxide_graph_capture_begin(device_, stream_, pool_key(pool_)));
    capturing_ = true;
    std::lock_guard<std::mutex> lock(g_captures_mutex);
    g_captures[{device_, stream_}] = this;
  }

  void capture_end() override {
    TORCH_CHECK(capturing_, "oxide graph: capture_end() without capture_begin()");
    TORCH_CHECK(current_stream(device_) == stream_, "oxide graph: capture must end on the stream it began on (stream ",
                stream_, " of oxide:", static_cast<int>(device_), ")");
    unregister_capture();
    // The graph holds its pool from here on; the capture's own hold ends below.
    OXIDE_CHECK(oxide_graph_pool_retain(device_, pool_key(pool_)));
    OxideGraph* graph = nullptr;
    const int status = oxide_graph_capture_end(device_, stream_, &graph);
    if (status != OXIDE_STATUS_SUCCESS) {
      const std::string message = last_error();
      (void)oxide_graph_pool_release(device_, pool_key(pool_));
      generators_.clear();
      TORCH_CHECK(false, message);
    }
    graph_ = graph;
    if (!keep_graph_) {
      instantiate();
    }
  }

  void instantiate() override {
    TORCH_CHECK(graph_ != nullptr, "oxide graph: instantiate() needs a finished capture");
    // The captured launches run as they are: nothing to compile.
    instantiated_ = true;
  }

  void replay() override {
    TORCH_CHECK(graph_ != nullptr, "oxide graph: replay() needs a finished capture");
    if (!instantiated_) {
      instantiate();
    }
    // A replay captured into another graph would freeze this replay's generator
    // states into that graph: every outer replay would draw the same numbers.
    TORCH_CHECK(generators_.empty() || !stream_is_capturing(c10::Device(c10::DeviceType::PrivateUse1, device_)),
                "oxide graph: a graph that draws random numbers cannot be replayed inside another capture "
                "(its generator states would be frozen there); capture its work directly instead");
    std::vector<OxideReplayPhilox> states;
    states.reserve(generators_.size());
    for (auto& [gen, blocks] : generators_) {
      std::lock_guard<std::mutex> lock(gen->mutex_);
      const uint64_t offset = gen->get_offset();
      states.push_back(OxideReplayPhilox{gen->current_seed(), offset});
      gen->set_offset(offset + blocks);
    }
    OXIDE_CHECK(oxide_graph_replay(graph_, device_, current_stream(device_), states.data(), states.size()));
  }

  void reset() override {
    TORCH_CHECK(!capturing_, "oxide graph: reset() during capture; end the capture first");
    release();
  }

  at::MempoolId_t pool() const override { return pool_; }

  void enable_debug_mode() override { debug_ = true; }

  void debug_dump(const std::string& path) override {
    TORCH_CHECK(debug_, "oxide graph: debug_dump() needs enable_debug_mode() before the capture");
    TORCH_CHECK(graph_ != nullptr, "oxide graph: debug_dump() needs a finished capture");
    const std::string header = "oxide graph on oxide:" + std::to_string(device_) + " stream " +
                               std::to_string(stream_) + ", pool (" + std::to_string(pool_.first) + ", " +
                               std::to_string(pool_.second) + "), " + std::to_string(generators_.size()) +
                               " generator(s)";
    OXIDE_CHECK(oxide_graph_dump(graph_, header.c_str(), path.c_str()));
  }

  // Philox state for a random kernel captured on this graph's stream: the
  // generator becomes one of the graph's slots, and `blocks` are reserved from
  // the capture's share of it (relative to the state each replay provides).
  OxidePhilox philox_reserve(c10::GeneratorImpl* gen, uint64_t blocks) {
    for (size_t i = 0; i < generators_.size(); ++i) {
      if (generators_[i].first.get() == gen) {
        const uint64_t offset = generators_[i].second;
        generators_[i].second += blocks;
        return OxidePhilox{0, offset, i + 1};
      }
    }
    generators_.emplace_back(c10::intrusive_ptr<c10::GeneratorImpl>::reclaim_copy(gen), blocks);
    return OxidePhilox{0, 0, generators_.size()};
  }

 private:
  void unregister_capture() {
    capturing_ = false;
    std::lock_guard<std::mutex> lock(g_captures_mutex);
    g_captures.erase({device_, stream_});
  }

  // Frees the captured graph and lets go of its pool (no throw: the destructor calls it).
  void release() noexcept {
    if (graph_ != nullptr) {
      oxide_graph_destroy(graph_);
      graph_ = nullptr;
      (void)oxide_graph_pool_release(device_, pool_key(pool_));
    }
    instantiated_ = false;
    generators_.clear();
  }

  const bool keep_graph_;
  bool capturing_ = false;
  bool instantiated_ = false;
  bool debug_ = false;
  c10::DeviceIndex device_ = 0;
  int64_t stream_ = 0;
  at::MempoolId_t pool_{0, 0};
  OxideGraph* graph_ = nullptr;
  // Generators the capture drew from, with the Philox blocks one replay takes from each.
  std::vector<std::pair<c10::intrusive_ptr<c10::GeneratorImpl>, uint64_t>> generators_;
};

}  // namespace

std::optional<OxidePhilox> graph_philox_reserve(c10::GeneratorImpl* gen, c10::Device device, uint64_t blocks) {
  const auto stream = current_stream(device.index());
  std::lock_guard<std::mutex> lock(g_captures_mutex);
  const auto it = g_captures.find({device.index(), stream});
  if (it == g_captures.end()) {
    return std::nullopt;
  }
  return it->second->philox_reserve(gen, blocks);
}

}  // namespace oxide

namespace at {
// The registry's key is c10::DeviceTypeName(PrivateUse1, false): the backend's name, upper-case.
REGISTER_GRAPH_IMPL(OXIDE, oxide::OxideGraphImpl);
}  // namespace at
