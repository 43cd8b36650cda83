// c10::GeneratorImpl for PrivateUse1: the per-device Philox4x32-10 state
// (seed = key, offset = next counter, in 128-bit blocks), one default generator per device through the hooks
// (getDefaultGenerator / getNewGenerator), and the factory registered with
// REGISTER_GENERATOR_PRIVATEUSE1's mechanism as the seed tutorial describes;
// the hooks' getNewGenerator creates generators through that registry, so
// torch.Generator(device="oxide") proves the registration is live.
// State layout of get_state/set_state: 16 bytes, uint8 CPU tensor
// = [seed: u64 little-endian, offset: u64 little-endian].
#include "common/oxide.h"

#include <ATen/Functions.h>
#include <ATen/core/DistributionsHelper.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/core/TensorImpl.h>

#include <cstring>
#include <deque>
#include <mutex>

namespace oxide {
namespace {

constexpr uint64_t kDefaultSeed = 67280421310721ULL;  // c10::default_rng_seed_val, as CPU and CUDA use.

struct OxideGeneratorImpl final : c10::GeneratorImpl {
  explicit OxideGeneratorImpl(c10::DeviceIndex device)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}

  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  void set_current_seed(uint64_t seed) override {
    seed_ = seed;
    offset_ = 0;
  }
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override {
    const uint64_t s = c10::detail::getNonDeterministicRandom(false);
    set_current_seed(s);
    return s;
  }
  void set_state(const c10::TensorImpl& state) override {
    TORCH_CHECK_TYPE(state.dtype() == caffe2::TypeMeta::Make<uint8_t>(),
                     "oxide generator state must be a torch.uint8 tensor, got ", state.dtype());
    TORCH_CHECK_VALUE(state.numel() == 16 && state.is_contiguous() && state.device().is_cpu(),
                      "oxide generator state must be a contiguous CPU tensor of 16 bytes, got ", state.numel());
    const auto* bytes = static_cast<const uint8_t*>(state.data());
    std::memcpy(&seed_, bytes, 8);
    std::memcpy(&offset_, bytes + 8, 8);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    auto t = at::empty({16}, at::TensorOptions().dtype(at::kByte));
    auto* bytes = t.data_ptr<uint8_t>();
    std::memcpy(bytes, &seed_, 8);
    std::memcpy(bytes + 8, &offset_, 8);
    return t.getIntrusivePtr();
  }
  OxideGeneratorImpl* clone_impl() const override {
    auto* g = new OxideGeneratorImpl(device().index());
    g->seed_ = seed_;
    g->offset_ = offset_;
    return g;
  }

 private:
  uint64_t seed_ = kDefaultSeed;
  uint64_t offset_ = 0;
};

c10::DeviceIndex checked(c10::DeviceIndex device) {
  if (device == -1) {
    return current_device();
  }
  OXIDE_CHECK(oxide_check_device(device));
  return device;
}

}  // namespace

OxidePhilox philox_reserve(const std::optional<at::Generator>& gen, c10::Device device, uint64_t blocks) {
  auto* g = at::get_generator_or_default<OxideGeneratorImpl>(gen, default_generator(device.index()));
  // In a graph capture the generator does not advance: each replay does (graph.cpp).
  if (auto captured = graph_philox_reserve(g, g->device(), blocks)) {
    return *captured;
  }
  std::lock_guard<std::mutex> lock(g->mutex_);
  OxidePhilox state{g->current_seed(), g->get_offset()};
  g->set_offset(state.offset + blocks);
  return state;
}

at::Generator make_generator(c10::DeviceIndex device) {
  return at::make_generator<OxideGeneratorImpl>(checked(device));
}

namespace {
// REGISTER_GENERATOR_PRIVATEUSE1(make_generator) expands to this registration.
// torch 2.15 marks it deprecated and warns to stderr at load time, outside any
// Python call; the warning says to use the hooks, which we also do, so it is
// silenced for this one registration.
struct DiscardWarnings final : c10::WarningHandler {
  void process(const c10::Warning& /*warning*/) override {}
};

const bool g_generator_registered = [] {
  DiscardWarnings quiet;
  const c10::WarningUtils::WarningHandlerGuard guard(&quiet);
  static const at::_GeneratorRegister registration(&make_generator);
  return true;
}();
}  // namespace

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::mutex mutex;
  // A deque keeps references stable while later devices are added.
  static std::deque<at::Generator> generators;
  const auto index = checked(device);
  std::lock_guard<std::mutex> lock(mutex);
  while (generators.size() <= static_cast<size_t>(index)) {
    generators.emplace_back(at::make_generator<OxideGeneratorImpl>(static_cast<c10::DeviceIndex>(generators.size())));
  }
  return generators[index];
}

}  // namespace oxide
