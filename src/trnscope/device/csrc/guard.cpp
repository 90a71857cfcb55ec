// The PrivateUse1 DeviceGuardImpl: the current NeuronCore per thread (as CUDA's current device),
// the current stream per NeuronCore (as trnscope's Python streams keep it), events on the
// emulated device clock. ATen asks it for the device index of `torch.tensor(..., device="neuron")`
// and of `x.to("neuron")`, the autograd engine for its per-device worker threads and each
// node's stream, torch.accelerator for everything device-wide.
#include "core.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <mutex>

namespace trnscope {
namespace {

constexpr int kMaxDevices = 64;  // c10::DeviceIndex is int8; the emulated chips have <= 64 cores
thread_local int tl_device = 0;
std::array<std::atomic<int64_t>, kMaxDevices> g_stream{};  // current stream id per core (0: default)
std::array<std::atomic<int64_t>, kMaxDevices> g_next_stream{};
std::atomic<int> g_count{1};  // last count the runtime gave (for calls that must not fail)

// An event is the device time (ns) at which its NeuronCore's queue reaches it.
struct Event {
  int device = -1;
  int64_t ns = 0;
  bool recorded = false;
};

int checked(c10::DeviceIndex index) {
  int count = device_count();
  if (index < 0 || index >= count) {
    TORCH_CHECK(false, bridge::call_str("invalid_device_message", {index}));
  }
  return index;
}

struct NeuronGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kNeuron; }

  c10::Device exchangeDevice(c10::Device d) const override {
    int old = tl_device;
    if (d.index() >= 0 && d.index() != old) tl_device = checked(d.index());
    return c10::Device(kNeuron, static_cast<c10::DeviceIndex>(old));
  }
  c10::Device getDevice() const override { return c10::Device(kNeuron, static_cast<c10::DeviceIndex>(tl_device)); }
  void setDevice(c10::Device d) const override {
    if (d.index() >= 0) tl_device = checked(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0) tl_device = d.index();
  }

  c10::Stream getStream(c10::Device d) const override {
    int i = d.index() < 0 ? tl_device : d.index();
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kNeuron, i), g_stream[i].load());
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    int i = d.index() < 0 ? tl_device : d.index();
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kNeuron, i), 0);
  }
  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    int i = d.index() < 0 ? tl_device : d.index();
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kNeuron, i), new_stream_id(i));
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    int i = s.device_index();
    c10::Stream old = getStream(s.device());
    if (old.id() != s.id()) {
      g_stream[i] = s.id();
      // the runtime queues work on the current stream: tell it (autograd's stream guards pass
      // here for every backward node, but only a change calls back)
      bridge::call_void("stream_changed", {i, s.id()});
    }
    return old;
  }

  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<Event*>(event);
  }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "Event device index ",
                device_index, " does not match recording stream's device index ", stream.device_index(), ".");
    auto* e = static_cast<Event*>(*event);
    if (e == nullptr) *event = e = new Event();
    e->device = stream.device_index();
    e->ns = bridge::call_int("record_event", {stream.device_index(), stream.id()});
    e->recorded = true;
  }
  void block(void* event, const c10::Stream& stream) const override {
    auto* e = static_cast<Event*>(event);
    if (e == nullptr || !e->recorded) return;
    bridge::call_void("stream_wait", {stream.device_index(), stream.id(), e->ns});
  }
  bool queryEvent(void* event) const override {
    auto* e = static_cast<Event*>(event);
    return e == nullptr || !e->recorded || e->ns <= bridge::call_int("now", {});
  }
  void synchronizeEvent(void* event) const override {
    auto* e = static_cast<Event*>(event);
    if (e != nullptr && e->recorded) bridge::call_void("wait_until", {e->ns});
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    auto* a = static_cast<Event*>(start);
    auto* b = static_cast<Event*>(end);
    TORCH_CHECK(a && b && a->recorded && b->recorded,
                "Both events must be recorded before calculating elapsed time.");
    TORCH_CHECK(queryEvent(a) && queryEvent(b), "Both events must be completed before calculating elapsed "
                "time: call end_event.synchronize() first.");
    return static_cast<double>(b->ns - a->ns) / 1e6;
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    try {
      return static_cast<c10::DeviceIndex>(device_count());
    } catch (...) {
      return static_cast<c10::DeviceIndex>(g_count.load());
    }
  }
  bool queryStream(const c10::Stream& s) const override {
    return bridge::call_int("stream_done_ns", {s.device_index(), s.id()}) <= bridge::call_int("now", {});
  }
  void synchronizeStream(const c10::Stream& s) const override {
    bridge::call_void("synchronize_stream", {s.device_index(), s.id()});
  }
  void synchronizeDevice(const c10::DeviceIndex index) const override {
    bridge::call_void("synchronize", {index < 0 ? tl_device : index});
  }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
};

NeuronGuardImpl g_guard;

} // namespace

int device_count() {
  if (!bridge::ready()) return g_count.load();
  int n = static_cast<int>(bridge::call_int("device_count", {}));
  TORCH_CHECK(n > 0 && n <= kMaxDevices, "trnscope: the emulated chip has ", n, " NeuronCores; at most ",
              kMaxDevices, " are supported");
  g_count = n;
  return n;
}

int current_device() { return tl_device; }
void set_device(int index) { tl_device = checked(static_cast<c10::DeviceIndex>(index)); }
int64_t current_stream_id(int index) { return g_stream.at(index).load(); }
void set_stream_id(int index, int64_t id) { g_stream.at(index) = id; }
int64_t new_stream_id(int index) { return ++g_next_stream.at(index); }

void install_guard() {
  static c10::impl::DeviceGuardImplRegistrar registrar(kNeuron, &g_guard);
}

} // namespace trnscope
