// Device memory of the emulated NeuronCores: host buffers from ATen's CPU allocator, each owned by
// one neuron storage, counted per core against one NeuronCore's HBM capacity; freed buffers are
// cached by exact size for reuse (as device caching allocators do). The policy is the one
// src/trnscope/device/memory.py describes for its Python path, and the counters are the same, so
// torch.neuron's statistics do not depend on the path.
#include "core.h"

#include <ATen/ops/empty_strided.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>

#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>

namespace trnscope {
namespace {

// One device allocation: the CPU storage whose bytes a neuron storage owns.
struct Block {
  c10::Storage host;
  int64_t nbytes;
  int device;
};

struct Pooled {
  uint64_t seq;
  c10::Storage host;
};

std::mutex g_mu;
std::map<int, CoreStats> g_stats;
std::unordered_map<const void*, Block*> g_live;
std::map<std::pair<int, int64_t>, std::deque<Pooled>> g_pool;  // (device, size) -> oldest first
std::map<uint64_t, std::pair<int, int64_t>> g_pool_order;  // seq -> key: the oldest entry overall
std::map<int, int64_t> g_pooled;
int64_t g_pooled_total = 0;
uint64_t g_seq = 0;
int64_t g_pool_bytes = int64_t(4) << 30;
int64_t g_pool_floor = int64_t(64) << 20;
bool g_multicore = false;

std::string fmt(int64_t n) {
  const char* units[] = {"GiB", "MiB", "KiB"};
  const int64_t sizes[] = {int64_t(1) << 30, int64_t(1) << 20, int64_t(1) << 10};
  char buf[64];
  for (int i = 0; i < 3; ++i) {
    if ((n < 0 ? -n : n) >= sizes[i]) {
      std::snprintf(buf, sizeof buf, "%.2f %s", static_cast<double>(n) / sizes[i], units[i]);
      return buf;
    }
  }
  return std::to_string(n) + " bytes";
}

// Account nbytes on device or raise torch.OutOfMemoryError (lock held).
void reserve(int64_t nbytes, int device, int64_t cap) {
  if (device) g_multicore = true;
  CoreStats& st = g_stats[device];
  int64_t free = cap - st.allocated;
  if (nbytes > free) {
    st.num_ooms += 1;
    TORCH_CHECK_WITH(OutOfMemoryError, false, "NEURON out of memory. Tried to allocate ", fmt(nbytes), " (",
                     nbytes, " bytes) on neuron:", device, ". The NeuronCore has a total HBM capacity of ", fmt(cap),
                     " (", cap, " bytes) of which ", fmt(free), " (", free, " bytes) is free; ", fmt(st.allocated),
                     " (", st.allocated, " bytes) is allocated to live tensors.");
  }
  st.allocated += nbytes;
  st.peak = std::max(st.peak, st.allocated);
  st.allocated_total += nbytes;
  st.num_allocs += 1;
  st.blocks += 1;
  st.peak_blocks = std::max(st.peak_blocks, st.blocks);
  int64_t size = nbytes > 0 ? nbytes : 1;  // a cached buffer of the size will be reused, not added
  auto it = g_pool.find({device, size});
  int64_t reserved = st.allocated + g_pooled[device] - (it != g_pool.end() && !it->second.empty() ? size : 0);
  st.peak_reserved = std::max(st.peak_reserved, reserved);
}

void unreserve(int64_t nbytes, int device) {
  CoreStats& st = g_stats[device];
  st.allocated -= nbytes;
  st.blocks -= 1;
  st.num_allocs -= 1;
  st.allocated_total -= nbytes;
}

// Take the entries cached longest ago out of the cache until it holds `budget` bytes (lock held).
void evict(int64_t budget, std::vector<c10::Storage>* out) {
  while (g_pooled_total > budget && !g_pool_order.empty()) {
    auto oldest = g_pool_order.begin();
    auto key = oldest->second;
    g_pool_order.erase(oldest);
    auto& entries = g_pool[key];
    out->push_back(std::move(entries.front().host));
    entries.pop_front();
    if (entries.empty()) g_pool.erase(key);
    g_pooled[key.first] -= key.second;
    g_pooled_total -= key.second;
  }
}

void free_block(void* ctx) {
  auto* blk = static_cast<Block*>(ctx);
  std::vector<c10::Storage> dropped;  // destroyed after the lock is released
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_live.erase(blk->host.data());
    CoreStats& st = g_stats[blk->device];
    st.allocated -= blk->nbytes;
    st.freed_total += blk->nbytes;
    st.num_frees += 1;
    st.blocks -= 1;
    int64_t size = static_cast<int64_t>(blk->host.nbytes());
    std::pair<int, int64_t> key{blk->device, size};
    uint64_t seq = ++g_seq;
    g_pool[key].push_back(Pooled{seq, std::move(blk->host)});
    g_pool_order[seq] = key;
    g_pooled[blk->device] += size;
    g_pooled_total += size;
    int64_t in_use = 0;
    for (auto& kv : g_stats) in_use += kv.second.allocated;
    int64_t budget = std::min(g_pool_bytes, std::max(g_pool_floor, in_use));
    if (g_pooled_total > budget) evict(budget, &dropped);
  }
  delete blk;
}

c10::Storage wrap_block(c10::Storage host, int64_t nbytes, int device);

struct NeuronAllocator final : public c10::DeviceAllocator {
  // ATen's own allocations on the device (torch.UntypedStorage(n, device="neuron:i"), resizes)
  c10::DataPtr allocate(size_t nbytes) override {
    int device = current_device();
    int64_t cap = bridge::call_int("capacity", {device});
    c10::Storage s = trnscope::allocate(static_cast<int64_t>(nbytes), device, cap);
    return std::move(s.unsafeGetStorageImpl()->mutable_data_ptr());
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override { trnscope::empty_cache(-1); }
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    using c10::CachingAllocator::StatType;
    CoreStats s = stats(device);
    int64_t cached = cached_bytes(device);
    c10::CachingDeviceAllocator::DeviceStats out;
    auto fill = [](c10::CachingAllocator::Stat& st, int64_t current, int64_t peak, int64_t allocated,
                   int64_t freed) {
      st.current = current;
      st.peak = peak;
      st.allocated = allocated;
      st.freed = freed;
    };
    const size_t all = static_cast<size_t>(StatType::AGGREGATE);
    for (auto* st : {&out.allocated_bytes[all], &out.active_bytes[all], &out.requested_bytes[all]})
      fill(*st, s.allocated, s.peak, s.allocated_total, s.freed_total);
    fill(out.reserved_bytes[all], s.allocated + cached, std::max(s.peak_reserved, s.allocated + cached),
         s.allocated_total, s.freed_total);
    for (auto* st : {&out.allocation[all], &out.active[all], &out.segment[all]})
      fill(*st, s.blocks, s.peak_blocks, s.num_allocs, s.num_frees);
    out.num_ooms = s.num_ooms;
    out.num_device_alloc = s.num_allocs;
    out.num_device_free = s.num_frees;
    return out;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override { reset_accumulated(device); }
  void resetPeakStats(c10::DeviceIndex device) override { reset_peak(device); }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    int64_t cap = bridge::call_int("capacity", {device});
    return {static_cast<size_t>(cap - stats(device).allocated), static_cast<size_t>(cap)};
  }
};

NeuronAllocator g_allocator;

c10::Storage wrap_block(c10::Storage host, int64_t nbytes, int device) {
  void* ptr = host.mutable_data();
  auto* blk = new Block{std::move(host), nbytes, device};
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_live[ptr] = blk;
  }
  c10::DataPtr data(ptr, blk, &free_block, c10::Device(kNeuron, static_cast<c10::DeviceIndex>(device)));
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes,
                                                            std::move(data), &g_allocator, /*resizable=*/false));
}

} // namespace

c10::Allocator* device_allocator() { return &g_allocator; }

c10::Storage allocate(int64_t nbytes, int device, int64_t capacity) {
  TORCH_CHECK(nbytes >= 0, "trnscope: negative allocation size ", nbytes);
  int64_t size = nbytes > 0 ? nbytes : 1;  // every live block has a distinct, non-null address
  c10::Storage host;
  {
    std::lock_guard<std::mutex> lock(g_mu);  // account first: an oversize request touches no memory
    reserve(nbytes, device, capacity);
    auto it = g_pool.find({device, size});
    if (it != g_pool.end() && !it->second.empty()) {
      Pooled entry = std::move(it->second.back());
      it->second.pop_back();
      if (it->second.empty()) g_pool.erase(it);
      g_pool_order.erase(entry.seq);
      g_pooled[device] -= size;
      g_pooled_total -= size;
      host = std::move(entry.host);
    }
  }
  if (!host) {
    try {
      c10::Allocator* cpu = c10::GetCPUAllocator();
      host = c10::Storage(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), size,
                                                                cpu->allocate(size), cpu, false));
    } catch (...) {
      std::lock_guard<std::mutex> lock(g_mu);
      unreserve(nbytes, device);
      throw;
    }
  }
  return wrap_block(std::move(host), nbytes, device);
}

c10::Storage adopt(const c10::Storage& cpu, int device, int64_t capacity) {
  int64_t nbytes = static_cast<int64_t>(cpu.nbytes());
  if (nbytes == 0) return allocate(0, device, capacity);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    reserve(nbytes, device, capacity);
  }
  // a kernel writing through a host view must not resize the device's bytes away from under it
  // (ATen's out= kernels resize a resizable output storage): device memory has a fixed size
  cpu.unsafeGetStorageImpl()->set_resizable(false);
  return wrap_block(cpu, nbytes, device);
}

bool host_storage(const c10::Storage& neuron, c10::Storage* out) {
  auto* blk = neuron.data_ptr().cast_context<Block>(&free_block);
  if (blk == nullptr) {
    // a storage that does not own its bytes but starts at a live block (ATen's from_blob over a
    // device storage, as torch.save's device-to-host path makes)
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_live.find(neuron.data());
    if (it == g_live.end()) return false;
    blk = it->second;
  }
  *out = blk->host;
  return true;
}

void resize_bytes(const c10::Storage& storage, int64_t nbytes) {
  // as ATen resizes a CUDA storage: a new allocation (counted, OOM-checked), the bytes that fit
  // copied, the storage pointed at it; the old block goes back through its deleter (counted)
  auto* blk = storage.data_ptr().cast_context<Block>(&free_block);
  TORCH_CHECK(blk != nullptr, "trnscope: this neuron storage does not own its bytes (it views another "
                              "storage's), so it cannot be resized");
  TORCH_CHECK(nbytes >= 0, "trnscope: negative storage size ", nbytes);
  int device = blk->device;
  c10::Storage fresh = allocate(nbytes, device, bridge::call_int("capacity", {device}));
  int64_t keep = std::min(nbytes, blk->nbytes);
  if (keep > 0) std::memcpy(fresh.mutable_data(), storage.data(), static_cast<size_t>(keep));
  auto* impl = storage.unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(std::move(fresh.unsafeGetStorageImpl()->mutable_data_ptr()));
  impl->set_nbytes(static_cast<size_t>(nbytes));
}

CoreStats stats(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_stats[device];
}

int64_t cached_bytes(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_pooled.find(device);
  return it == g_pooled.end() ? 0 : it->second;
}

bool take_pooled(int64_t size, int device) {
  c10::Storage taken;
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_pool.find({device, size});
  if (it == g_pool.end() || it->second.empty()) return false;
  taken = std::move(it->second.back().host);
  g_pool_order.erase(it->second.back().seq);
  it->second.pop_back();
  if (it->second.empty()) g_pool.erase(it);
  g_pooled[device] -= size;
  g_pooled_total -= size;
  return true;
}

void reset_peak(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  CoreStats& s = g_stats[device];
  s.peak = s.allocated;
  s.peak_blocks = s.blocks;
  s.peak_reserved = s.allocated + g_pooled[device];
}

void reset_accumulated(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  CoreStats& s = g_stats[device];
  s.allocated_total = s.freed_total = s.num_allocs = s.num_frees = s.num_ooms = 0;
}

void empty_cache(int device) {
  std::vector<c10::Storage> dropped;
  std::lock_guard<std::mutex> lock(g_mu);
  for (auto it = g_pool.begin(); it != g_pool.end();) {
    if (device >= 0 && it->first.first != device) {
      ++it;
      continue;
    }
    for (auto& e : it->second) {
      g_pool_order.erase(e.seq);
      dropped.push_back(std::move(e.host));
    }
    g_pooled[it->first.first] -= it->first.second * static_cast<int64_t>(it->second.size());
    g_pooled_total -= it->first.second * static_cast<int64_t>(it->second.size());
    it = g_pool.erase(it);
  }
}

bool multicore() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_multicore;
}

std::vector<std::vector<int64_t>> live_blocks(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<std::vector<int64_t>> out;
  for (auto& kv : g_live) {
    if (device < 0 || kv.second->device == device)
      out.push_back({reinterpret_cast<int64_t>(kv.first), kv.second->nbytes, kv.second->device});
  }
  return out;
}

void set_pool_limits(int64_t pool_bytes, int64_t pool_floor) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_pool_bytes = pool_bytes;
  g_pool_floor = pool_floor;
}

int device_of(const void* ptr) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_live.find(ptr);
  return it == g_live.end() ? -1 : it->second->device;
}

void install_allocator() { c10::SetAllocator(kNeuron, &g_allocator); }

std::vector<int64_t> contiguous_strides(c10::IntArrayRef size) {
  std::vector<int64_t> strides(size.size(), 1);
  int64_t acc = 1;
  for (int64_t i = static_cast<int64_t>(size.size()) - 1; i >= 0; --i) {
    strides[i] = acc;
    acc *= std::max<int64_t>(size[i], 1);
  }
  return strides;
}

int64_t storage_nbytes(c10::IntArrayRef size, c10::IntArrayRef stride, int64_t itemsize) {
  int64_t n = 1;
  for (size_t i = 0; i < size.size(); ++i) {
    if (size[i] == 0) return 0;
    n += (size[i] - 1) * stride[i];
  }
  return n * itemsize;
}

at::Tensor make_tensor(c10::Storage storage, c10::DispatchKey key, c10::ScalarType dtype, c10::IntArrayRef size,
                       c10::IntArrayRef stride, int64_t offset) {
  auto t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key),
                                                    c10::scalarTypeToTypeMeta(dtype));
  t.unsafeGetTensorImpl()->set_sizes_and_strides(size, stride, offset);
  return t;
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, c10::ScalarType dtype, int device,
                         int64_t capacity) {
  auto storage = allocate(storage_nbytes(size, stride, c10::elementSize(dtype)), device, capacity);
  return make_tensor(std::move(storage), c10::DispatchKey::PrivateUse1, dtype, size, stride, 0);
}

at::Tensor host_view(const at::Tensor& t) {
  c10::Storage host;
  if (!host_storage(t.storage(), &host)) {
    TORCH_CHECK(t.storage().nbytes() == 0, "trnscope: tensor storage was not allocated by trnscope.device");
    return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kCPU));
  }
  auto v = make_tensor(std::move(host), c10::DispatchKey::CPU, t.scalar_type(), t.sizes(), t.strides(),
                       t.storage_offset());
  if (t.is_conj()) v.unsafeGetTensorImpl()->_set_conj(true);
  if (t.is_neg()) v.unsafeGetTensorImpl()->_set_neg(true);
  return v;
}

} // namespace trnscope
