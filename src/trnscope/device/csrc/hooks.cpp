// PrivateUse1HooksInterface: how ATen asks whether `neuron` exists, which devices there are, the
// default random generators, and pinned host memory (t.pin_memory(), is_pinned(), every factory's
// pin_memory=True, DataLoader's pinning thread, non-blocking device-to-host copies).
#include "core.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#include <map>
#include <mutex>
#include <unordered_map>

namespace trnscope {
namespace {

// Pinned memory is host memory the device's DMA engines may read directly; here ordinary host
// memory that trnscope allocated and remembers as pinned. A copy between it and the device with
// non_blocking=True does not make the host wait.
std::mutex g_pin_mu;
std::unordered_map<const void*, int64_t> g_pinned;  // address -> bytes
int64_t g_pin_current = 0, g_pin_peak = 0, g_pin_allocated = 0, g_pin_freed = 0;

void free_pinned(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(g_pin_mu);
    auto it = g_pinned.find(ptr);
    if (it != g_pinned.end()) {
      g_pin_current -= it->second;
      g_pin_freed += it->second;
      g_pinned.erase(it);
    }
  }
  c10::free_cpu(ptr);
}

struct PinnedAllocator final : public at::HostAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = c10::alloc_cpu(nbytes > 0 ? nbytes : 1);
    {
      std::lock_guard<std::mutex> lock(g_pin_mu);
      g_pinned[ptr] = static_cast<int64_t>(nbytes);
      g_pin_current += static_cast<int64_t>(nbytes);
      g_pin_allocated += static_cast<int64_t>(nbytes);
      g_pin_peak = std::max(g_pin_peak, g_pin_current);
    }
    return {ptr, ptr, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}  // pinned buffers go back to the host when their tensors die
  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(g_pin_mu);
    at::HostStats s;
    s.allocated_bytes.current = g_pin_current;
    s.allocated_bytes.peak = g_pin_peak;
    s.allocated_bytes.allocated = g_pin_allocated;
    s.allocated_bytes.freed = g_pin_freed;
    s.allocations.current = static_cast<int64_t>(g_pinned.size());
    return s;
  }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(g_pin_mu);
    g_pin_peak = g_pin_current;
  }
};

PinnedAllocator g_pinned_allocator;

// A NeuronCore's random numbers come from ATen's CPU kernels on the host (the numbers equal CPU's
// for the same seed), so its generator is a CPU (Philox-free mt19937) generator labelled with the
// neuron device.
struct NeuronGenerator final : public at::CPUGeneratorImpl {
  explicit NeuronGenerator(int index) {
    device_ = c10::Device(kNeuron, static_cast<c10::DeviceIndex>(index));
    key_set_ = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
  }
};

std::mutex g_gen_mu;
std::map<int, at::Generator> g_generators;  // node-based: references stay valid

struct NeuronHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return static_cast<c10::DeviceIndex>(device_count()); }
  void setCurrentDevice(c10::DeviceIndex d) const override { set_device(d); }
  c10::DeviceIndex getCurrentDevice() const override { return static_cast<c10::DeviceIndex>(current_device()); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    int old = current_device();
    if (d >= 0 && d != old) set_device(d);
    return static_cast<c10::DeviceIndex>(old);
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override { return exchangeDevice(d); }
  bool isPinnedPtr(const void* data) const override { return is_pinned_ptr(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned_allocator; }
  c10::Device getDeviceFromPtr(void* data) const override {
    int d = device_of(data);
    TORCH_CHECK(d >= 0, "trnscope: ", data, " is not the start of a live neuron allocation");
    return c10::Device(kNeuron, static_cast<c10::DeviceIndex>(d));
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index < 0 ? current_device() : index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return at::make_generator<NeuronGenerator>(index < 0 ? current_device() : index);
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    resize_bytes(storage, static_cast<int64_t>(nbytes));
  }
};

NeuronHooks g_hooks;

} // namespace

bool is_pinned_ptr(const void* ptr) {
  std::lock_guard<std::mutex> lock(g_pin_mu);
  return g_pinned.count(ptr) > 0;
}

std::vector<int64_t> pinned_stats() {
  std::lock_guard<std::mutex> lock(g_pin_mu);
  return {g_pin_current, g_pin_peak, g_pin_allocated, g_pin_freed, static_cast<int64_t>(g_pinned.size())};
}

const at::Generator& default_generator(int index) {
  std::lock_guard<std::mutex> lock(g_gen_mu);
  auto it = g_generators.find(index);
  if (it == g_generators.end()) {
    it = g_generators.emplace(index, at::make_generator<NeuronGenerator>(index)).first;
  }
  return it->second;
}

void install_hooks() {
  at::RegisterPrivateUse1HooksInterface(&g_hooks);
  at::setHostAllocator(kNeuron, &g_pinned_allocator);
}

} // namespace trnscope
