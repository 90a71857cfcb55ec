// trnscope's C++ core of the `neuron` device: what PyTorch expects an out-of-tree PrivateUse1
// backend to register in C++ (device guard, allocator, hooks, generator, pinned host memory).
// Python keeps the runtime: the calls back into it go through one object, the bridge
// (src/trnscope/device/_core.py), and only on cold paths (events, synchronisation, capacity).
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <string>
#include <vector>

struct _object;
typedef _object PyObject;

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
// reference counts of Python objects the C++ side keeps (the eager plans'): take the GIL if needed
void py_incref(PyObject* obj);
void py_decref(PyObject* obj);

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
// tensors over device memory
struct Geometry {
  std::vector<int64_t> sizes, strides;
  c10::ScalarType dtype;
};
std::vector<int64_t> contiguous_strides(c10::IntArrayRef size);
int64_t storage_nbytes(c10::IntArrayRef size, c10::IntArrayRef stride, int64_t itemsize);
at::Tensor make_tensor(c10::Storage storage, c10::DispatchKey key, c10::ScalarType dtype, c10::IntArrayRef size,
                       c10::IntArrayRef stride, int64_t offset);
at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, c10::ScalarType dtype, int device,
                         int64_t capacity);
// a CPU tensor over the same bytes as neuron tensor t (same dtype, geometry, conj/neg bits)
at::Tensor host_view(const at::Tensor& t);

// --- pinned host memory, hooks, generator (hooks.cpp) ---------------------------------------------
bool is_pinned_ptr(const void* ptr);
std::vector<int64_t> pinned_stats();  // current, peak, allocated, freed, count
const at::Generator& default_generator(int index);
void install_hooks();

// --- the eager hot path (eager.cpp) ----------------------------------------------------------------
constexpr int64_t kPlanCacheSize = 8192;  // plans per NeuronCore, as the Python runtime's PLAN_CACHE_SIZE
namespace rt {
struct Plan;
}
namespace eager {
// the PrivateUse1 kernels: a boxed fallback and `names` (the explicit registrations kernels.py lists)
void register_kernels(const std::vector<std::string>& names);
bool enter_serve();  // a Python serve call begins on this thread: true if it is the outermost (charged)
void exit_serve();
// the Python runtime's plan for the kernel call waiting on this thread; out_op empty: the results
// are the call's arguments (in-place, out=); "aten::_copy_from": a copy on one core; else the
// outputs are computed by out_op
bool learn(PyObject* obj, uint64_t neff_id, int64_t duration, const std::string& out_op, const std::string& overload,
           std::vector<int> out_positions, int out_args, std::vector<Geometry> outs);
void set_enabled(bool on);
bool enabled();
std::pair<int64_t, int64_t> counters();  // calls served in C++, calls that entered Python
PyObject* plan_object(const rt::Plan& plan);
} // namespace eager

} // namespace trnscope
