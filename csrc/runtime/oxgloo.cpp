// c10d::Backend `oxgloo`: PyTorch's Gloo working on oxide tensors, in C++ so a
// collective costs what Gloo's own costs (ARCHITECTURE.md, "Distributed").
//
// Gloo does all communication; this class hands it zero-copy host views of the oxide
// tensors (host_view) and keeps CUDA's stream semantics: a collective first waits for
// the work queued on the current stream of each oxide tensor's device (as NCCL makes
// its stream wait for the current stream), and its Work is Gloo's, whose wait()
// blocks the host until Gloo is done, so kernels launched afterwards see the results.
// The Work's future holds the oxide tensors, not the views (DDP reads the reduced
// bucket from it). PREMUL_SUM, which Gloo lacks, is composed: scale, then SUM.
//
// python/torch_oxide/distributed.py registers the backend and builds it: it makes
// Gloo's backend, puts it on a holder ProcessGroup for CPU and calls
// oxide::_oxgloo_wrap (below), which adds this wrapper for PrivateUse1; Python then
// reads the wrapper back as a c10d Backend object. That way no pybind11 code (which
// would tie the extension to one Python version) is needed here.
#include "common/oxide.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/mul.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/library.h>

#include <algorithm>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace oxide {
namespace {

using c10d::Work;
using WorkPtr = c10::intrusive_ptr<Work>;
using TensorList = std::vector<at::Tensor>;

// One collective's host views and the oxide tensors they stand for.
class Views {
 public:
  at::Tensor host(const at::Tensor& t) {
    if (!t.defined() || !t.is_privateuseone()) {
      return t;  // CPU tensors (object collectives, CPU all_reduce) go to Gloo as they are
    }
    const int32_t device = t.device().index();
    if (std::find(devices_.begin(), devices_.end(), device) == devices_.end()) {
      // Gloo reads and writes memory that kernels queued before the collective may
      // still write: wait for the device's current stream, once, before any view of
      // it is used.
      OXIDE_CHECK(oxide_stream_synchronize(device, current_stream(static_cast<c10::DeviceIndex>(device))));
      devices_.push_back(device);
    }
    at::Tensor view = host_view(t);
    originals_.emplace_back(view.unsafeGetTensorImpl(), t);
    return view;
  }

  TensorList host(const TensorList& ts) {
    TensorList out;
    out.reserve(ts.size());
    for (const auto& t : ts) {
      out.push_back(host(t));
    }
    return out;
  }

  std::vector<TensorList> host(const std::vector<TensorList>& lists) {
    std::vector<TensorList> out;
    out.reserve(lists.size());
    for (const auto& l : lists) {
      out.push_back(host(l));
    }
    return out;
  }

  bool any() const { return !originals_.empty(); }

  // The oxide tensor a view stands for (other tensors as they are), through lists.
  at::Tensor original(const at::Tensor& v) const {
    for (const auto& [impl, t] : originals_) {
      if (impl == v.unsafeGetTensorImpl()) {
        return t;
      }
    }
    return v;
  }

  c10::IValue original(const c10::IValue& v) const {
    if (v.isTensor()) {
      return original(v.toTensor());
    }
    if (v.isTensorList()) {
      TensorList l = v.toTensorVector();
      for (auto& t : l) {
        t = original(t);
      }
      return l;
    }
    if (v.isList()) {
      c10::List<c10::IValue> in = v.toList();
      c10::impl::GenericList out(in.elementType());
      out.reserve(in.size());
      for (const c10::IValue& e : in) {
        out.push_back(original(e));
      }
      return out;
    }
    return v;
  }

 private:
  std::vector<std::pair<const c10::TensorImpl*, at::Tensor>> originals_;
  std::vector<int32_t> devices_;
};

// Gloo's work on the views; its future and result() give the oxide tensors.
class OxWork final : public Work {
 public:
  // `outputs`: the oxide tensors a work without a future of its own completes its
  // future with (the collective's first argument, as Gloo's works do).
  OxWork(WorkPtr gloo, std::shared_ptr<const Views> views, TensorList outputs)
      : Work(-1, gloo->retrieveOpType()),
        gloo_(std::move(gloo)),
        views_(std::move(views)),
        outputs_(std::move(outputs)) {}

  // Some of Gloo's works (reduce_scatter_single's) set their own completion flag only
  // in wait(): a loop polling is_completed() after async_op=True would spin for ever.
  // Their future (ours, completed by a waiting thread, see make_future) says when.
  bool isCompleted() override {
    if (gloo_->isCompleted()) {
      return true;
    }
    const auto future = getFuture();
    return future && future->completed();
  }

  // False also once the future holds the collective's error (a peer that died).
  bool isSuccess() const override {
    if (!gloo_->isSuccess()) {
      return false;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    return !(future_ && future_->completed() && future_->hasError());
  }
  std::exception_ptr exception() const override { return gloo_->exception(); }
  int sourceRank() const override { return gloo_->sourceRank(); }
  void synchronize() override { gloo_->synchronize(); }
  void abort() override { gloo_->abort(); }
  uint64_t getSequencenumber() const override { return gloo_->getSequencenumber(); }
  std::chrono::milliseconds getTimeout() const override { return gloo_->getTimeout(); }

  TensorList result() override {
    TensorList r = gloo_->result();
    for (auto& t : r) {
      t = views_->original(t);
    }
    return r;
  }

  bool wait(std::chrono::milliseconds timeout) override {
    const bool done = gloo_->wait(timeout);
    std::lock_guard<std::mutex> lock(mutex_);
    waited_ = true;
    return done;
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!future_) {
      future_ = make_future();
    }
    return future_;
  }

 private:
  c10::intrusive_ptr<c10::ivalue::Future> make_future() {
    c10::intrusive_ptr<c10::ivalue::Future> gloo_future;
    try {
      gloo_future = gloo_->getFuture();
    } catch (const c10::Error&) {
      // Some of Gloo's works have no future: complete one with the outputs once the
      // work is done, from a thread of its own, so that asking does not block.
    }
    if (gloo_future) {
      auto views = views_;
      return gloo_future->then([views](c10::ivalue::Future& f) { return views->original(f.value()); },
                               gloo_future->elementType());
    }
    auto future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
    if (waited_) {  // the caller's wait() has returned: the outputs are in memory
      future->markCompleted(c10::IValue(outputs_));
      return future;
    }
    std::thread([gloo = gloo_, future, outputs = outputs_] {
      try {
        gloo->wait();
        future->markCompleted(c10::IValue(outputs));
      } catch (...) {
        future->setError(std::current_exception());
      }
    }).detach();
    return future;
  }

  WorkPtr gloo_;
  std::shared_ptr<const Views> views_;
  TensorList outputs_;
  bool waited_ = false;  // under mutex_
  mutable std::mutex mutex_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// Gloo has no PREMUL_SUM: it is SUM over the inputs scaled by the factor.
bool is_premul_sum(const c10d::ReduceOp& op) { return op.op_ == c10d::ReduceOp::PREMUL_SUM; }

// `t` times the PREMUL_SUM factor of `op`, a double or a tensor (brought to the host:
// the inputs are host views). In place where the reduction overwrites `t` anyway.
at::Tensor scaled(const at::Tensor& t, const c10d::ReduceOp& op, bool in_place) {
  auto* s = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(s != nullptr, "oxgloo: ReduceOp.PREMUL_SUM without its factor");
  if (s->tensor_factor.defined()) {
    const at::Tensor factor = s->tensor_factor.cpu();
    return in_place ? t.mul_(factor) : at::mul(t, factor);
  }
  return in_place ? t.mul_(s->double_factor) : at::mul(t, s->double_factor);
}

// The options Gloo is given for `opts`: a PREMUL_SUM first scales `inputs` (in place
// for all_reduce and reduce, whose inputs are their outputs; copies for the
// reduce_scatter family, whose inputs are the caller's) and becomes a SUM.
template <typename Opts>
Opts premul_as_sum(TensorList& inputs, const Opts& opts, bool in_place) {
  if (!is_premul_sum(opts.reduceOp)) {
    return opts;
  }
  for (auto& t : inputs) {
    t = scaled(t, opts.reduceOp, in_place);
  }
  Opts sum = opts;
  sum.reduceOp = c10d::ReduceOp(c10d::ReduceOp::SUM);
  return sum;
}

class OxGloo final : public c10d::Backend {
 public:
  explicit OxGloo(c10::intrusive_ptr<c10d::Backend> gloo)
      : Backend(gloo->getRank(), gloo->getSize()), gloo_(std::move(gloo)) {}

  const std::string getBackendName() const override { return "oxgloo"; }
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<Options> getBackendOptions() override { return gloo()->getBackendOptions(); }
  void setTimeout(std::chrono::milliseconds timeout) override { gloo()->setTimeout(timeout); }
  c10d::ErrorType getError() override { return gloo()->getError(); }
  void setSequenceNumberForGroup() override { gloo()->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return gloo()->getSequenceNumberForGroup(); }
  void enableCollectivesTiming() override { gloo()->enableCollectivesTiming(); }
  void abort() override { gloo()->abort(); }

  // The group's name reaches Gloo too: Gloo records every collective in c10d's flight
  // recorder under it, which is why distributed.py lists oxgloo among the backends that
  // record themselves (no recording hook, which cost ~8,000 instructions a collective).
  void setGroupUid(const std::string& uid) override {
    Backend::setGroupUid(uid);
    gloo()->setGroupUid(uid);
  }

  // Called by destroy_process_group. Gloo's shutdown leaves its worker threads running
  // until the Gloo backend is destroyed, and works still held by the caller keep this
  // wrapper alive: drop Gloo here, so that its destructor joins them once the group's
  // CPU entry has gone too. A worker left running into interpreter finalization can
  // abort the process.
  void shutdown() override {
    c10::intrusive_ptr<c10d::Backend> gloo = std::move(gloo_);
    if (gloo) {
      gloo->shutdown();
    }
  }

  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    gloo()->monitoredBarrier(opts, wait_all_ranks);
  }

  // The subgroup's Gloo is split from this one under a prefix of its own: a group whose
  // CPU tensors use the same Gloo splits that one too, with the same keys.
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override {
    auto child = gloo()->split(c10::make_intrusive<c10d::PrefixStore>("oxgloo", store), ranks, opts);
    if (!child) {
      return nullptr;
    }
    return c10::make_intrusive<OxGloo>(std::move(child));
  }

  WorkPtr broadcast(TensorList& tensors, const c10d::BroadcastOptions& opts) override {
    return run(tensors, [&](Views& v) {
      TensorList h = v.host(tensors);
      return gloo()->broadcast(h, opts);
    });
  }

  WorkPtr allreduce(TensorList& tensors, const c10d::AllreduceOptions& opts) override {
    return run(tensors, [&](Views& v) {
      TensorList h = v.host(tensors);
      const auto gloo_opts = premul_as_sum(h, opts, /*in_place=*/true);
      return gloo()->allreduce(h, gloo_opts);
    });
  }

  WorkPtr allreduce_coalesced(TensorList& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    return run(tensors, [&](Views& v) {
      TensorList h = v.host(tensors);
      const auto gloo_opts = premul_as_sum(h, opts, /*in_place=*/true);
      return gloo()->allreduce_coalesced(h, gloo_opts);
    });
  }

  WorkPtr reduce(TensorList& tensors, const c10d::ReduceOptions& opts) override {
    return run(tensors, [&](Views& v) {
      TensorList h = v.host(tensors);
      const auto gloo_opts = premul_as_sum(h, opts, /*in_place=*/true);
      return gloo()->reduce(h, gloo_opts);
    });
  }

  WorkPtr allgather(std::vector<TensorList>& outputs, TensorList& inputs, const c10d::AllgatherOptions& opts) override {
    return run(flat(outputs), [&](Views& v) {
      auto o = v.host(outputs);
      TensorList i = v.host(inputs);
      return gloo()->allgather(o, i, opts);
    });
  }

  WorkPtr all_gather_single(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) override {
    return run({output}, [&](Views& v) {
      at::Tensor o = v.host(output);
      at::Tensor i = v.host(input);
      return gloo()->all_gather_single(o, i, opts);
    });
  }

  WorkPtr allgather_coalesced(std::vector<TensorList>& outputs, TensorList& inputs,
                              const c10d::AllgatherOptions& opts) override {
    return run(flat(outputs), [&](Views& v) {
      auto o = v.host(outputs);
      TensorList i = v.host(inputs);
      return gloo()->allgather_coalesced(o, i, opts);
    });
  }

  WorkPtr all_gather_single_coalesced(TensorList& outputs, TensorList& inputs,
                                      const c10d::AllgatherOptions& opts) override {
    return run(outputs, [&](Views& v) {
      TensorList o = v.host(outputs);
      TensorList i = v.host(inputs);
      return gloo()->all_gather_single_coalesced(o, i, opts);
    });
  }

  WorkPtr gather(std::vector<TensorList>& outputs, TensorList& inputs, const c10d::GatherOptions& opts) override {
    return run(flat(outputs), [&](Views& v) {
      auto o = v.host(outputs);
      TensorList i = v.host(inputs);
      return gloo()->gather(o, i, opts);
    });
  }

  WorkPtr scatter(TensorList& outputs, std::vector<TensorList>& inputs, const c10d::ScatterOptions& opts) override {
    return run(outputs, [&](Views& v) {
      TensorList o = v.host(outputs);
      auto i = v.host(inputs);
      return gloo()->scatter(o, i, opts);
    });
  }

  WorkPtr reduce_scatter(TensorList& outputs, std::vector<TensorList>& inputs,
                         const c10d::ReduceScatterOptions& opts) override {
    return run(outputs, [&](Views& v) {
      TensorList o = v.host(outputs);
      auto i = v.host(inputs);
      c10d::ReduceScatterOptions gloo_opts = opts;
      for (auto& list : i) {
        gloo_opts = premul_as_sum(list, opts, /*in_place=*/false);
      }
      return gloo()->reduce_scatter(o, i, gloo_opts);
    });
  }

  WorkPtr reduce_scatter_single(at::Tensor& output, at::Tensor& input,
                                const c10d::ReduceScatterOptions& opts) override {
    return run({output}, [&](Views& v) {
      at::Tensor o = v.host(output);
      TensorList i = {v.host(input)};
      const auto gloo_opts = premul_as_sum(i, opts, /*in_place=*/false);
      return gloo()->reduce_scatter_single(o, i[0], gloo_opts);
    });
  }

  WorkPtr reduce_scatter_single_coalesced(TensorList& outputs, TensorList& inputs,
                                          const c10d::ReduceScatterOptions& opts) override {
    return run(outputs, [&](Views& v) {
      TensorList o = v.host(outputs);
      TensorList i = v.host(inputs);
      const auto gloo_opts = premul_as_sum(i, opts, /*in_place=*/false);
      return gloo()->reduce_scatter_single_coalesced(o, i, gloo_opts);
    });
  }

  WorkPtr all_to_all_single(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                            std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& opts) override {
    return run({output}, [&](Views& v) {
      at::Tensor o = v.host(output);
      at::Tensor i = v.host(input);
      return gloo()->all_to_all_single(o, i, output_splits, input_splits, opts);
    });
  }

  WorkPtr alltoall(TensorList& outputs, TensorList& inputs, const c10d::AllToAllOptions& opts) override {
    return run(outputs, [&](Views& v) {
      TensorList o = v.host(outputs);
      TensorList i = v.host(inputs);
      return gloo()->alltoall(o, i, opts);
    });
  }

  WorkPtr send(TensorList& tensors, int dst, int tag) override {
    return run(tensors, [&](Views& v) {
      TensorList h = v.host(tensors);
      return gloo()->send(h, dst, tag);
    });
  }

  WorkPtr recv(TensorList& tensors, int src, int tag) override {
    return run(tensors, [&](Views& v) {
      TensorList h = v.host(tensors);
      return gloo()->recv(h, src, tag);
    });
  }

  WorkPtr recvAnysource(TensorList& tensors, int tag) override {
    return run(tensors, [&](Views& v) {
      TensorList h = v.host(tensors);
      return gloo()->recvAnysource(h, tag);
    });
  }

  WorkPtr barrier(const c10d::BarrierOptions& opts) override { return gloo()->barrier(opts); }

 private:
  const c10::intrusive_ptr<c10d::Backend>& gloo() const {
    TORCH_CHECK(gloo_, "oxgloo: a collective on a process group that has been shut down");
    return gloo_;
  }

  static TensorList flat(const std::vector<TensorList>& lists) {
    TensorList out;
    for (const auto& l : lists) {
      out.insert(out.end(), l.begin(), l.end());
    }
    return out;
  }

  // `collective` maps its arguments through the Views (which waits for the streams)
  // and runs Gloo on them. `outputs`: the oxide tensors a future-less work completes with.
  template <typename Collective>
  WorkPtr run(TensorList outputs, Collective&& collective) {
    auto views = std::make_shared<Views>();
    WorkPtr work = collective(*views);
    if (!views->any()) {
      return work;
    }
    return c10::make_intrusive<OxWork>(std::move(work), std::move(views), std::move(outputs));
  }

  c10::intrusive_ptr<c10d::Backend> gloo_;
};

// Adds oxgloo for PrivateUse1 to `holder`, around the Gloo backend `holder` has for CPU
// (python/torch_oxide/distributed.py reads it back with _get_backend).
void oxgloo_wrap(const c10::intrusive_ptr<c10d::ProcessGroup>& holder) {
  auto gloo = holder->getBackend(c10::DeviceType::CPU);
  holder->setBackend(c10::DeviceType::PrivateUse1, c10d::ProcessGroup::BackendType::CUSTOM,
                     c10::make_intrusive<OxGloo>(gloo));
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(oxide, m) {
  m.def("_oxgloo_wrap(__torch__.torch.classes.c10d.ProcessGroup holder) -> ()", TORCH_FN(oxgloo_wrap));
}

}  // namespace oxide
