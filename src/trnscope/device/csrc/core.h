// trnscope's C++ core of the `neuron` device: what PyTorch expects an out-of-tree PrivateUse1
// backend to register in C++ (device guard, allocator, hooks, generator, pinned host memory).
// Python keeps the runtime: the calls back into it go through one object, the bridge
// (src/trnscope/device/_core.py), and only on cold paths (events, synchronisation, capacity).
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>
#include <c10/core/Stream.h>

#include <Python.h>

#include <cstdint>
#include <string>
#include <vector>

namespace trnscope {

constexpr c10::DeviceType kNeuron = c10::DeviceType::PrivateUse1;

// --- the bridge to the Python runtime (module.cpp) -----------------------------------------------
// Each call takes the GIL; a Python exception becomes a c10::Error with its message.
namespace bridge {
bool ready();
int64_t call_int(const char* method, std::vector<int64_t> args);
void call_void(const char* method, std::vector<int64_t> args);
std::string call_str(const char* method, std::vector<int64_t> args);
} // namespace bridge

// --- devices and streams (guard.cpp) -------------------------------------------------------------
int device_count();  // NeuronCores of the emulated chip (asks the runtime's hardware spec)
int current_device();  // this thread's
void set_device(int index);  // validated: an out-of-range index raises the runtime's message
int64_t current_stream_id(int index);
void set_stream_id(int index, int64_t id);  // from Python: no call back
int64_t new_stream_id(int index);
void install_guard();

// --- device memory (allocator.cpp) ---------------------------------------------------------------
struct CoreStats {
  int64_t allocated = 0, peak = 0, allocated_total = 0, freed_total = 0;
  int64_t num_allocs = 0, num_frees = 0, num_ooms = 0, blocks = 0, peak_blocks = 0, peak_reserved = 0;
};
c10::Allocator* device_allocator();
c10::Storage allocate(int64_t nbytes, int device, int64_t capacity);
c10::Storage adopt(const c10::Storage& cpu, int device, int64_t capacity);
// the CPU storage over a neuron storage's bytes; false if trnscope did not allocate it
bool host_storage(const c10::Storage& neuron, c10::Storage* out);
// storage.resize_(n) (FSDP2 frees and re-allocates unsharded parameters so): a new block of n bytes
void resize_bytes(const c10::Storage& storage, int64_t nbytes);
CoreStats stats(int device);
int64_t cached_bytes(int device);
bool take_pooled(int64_t size, int device);
void reset_peak(int device);
void reset_accumulated(int device);
void empty_cache(int device);  // -1: every device
bool multicore();
std::vector<std::vector<int64_t>> live_blocks(int device);  // -1: every device
void set_pool_limits(int64_t pool_bytes, int64_t pool_floor);
int device_of(const void* ptr);  // -1: not a live block
void install_allocator();

// --- pinned host memory, hooks, generator (hooks.cpp) ---------------------------------------------
bool is_pinned_ptr(const void* ptr);
std::vector<int64_t> pinned_stats();  // current, peak, allocated, freed, count
const at::Generator& default_generator(int index);
void install_hooks();

} // namespace trnscope
