// The eager hot path: every op on `neuron` tensors enters here (a boxed kernel for PrivateUse1).
//
// A call whose signature has a dispatch plan is served without entering Python:
//   dispatch -> cached plan -> host numerics -> runtime submit
// that is: the call's key (the op, the geometry and dtype of its tensors, the values of its other
// arguments but those its kernel takes as runtime scalars) finds the plan the Python runtime built
// for it on its first call (the NEFF's id and simulated duration, and how the host computes it);
// the host numbers come from ATen's CPU kernel on zero-copy host views of the device memory (a
// functional op's outputs allocated from the device allocator with the remembered geometry and
// computed by its out= kernel, as the Python path does); then the emulated clock and the core's
// queue advance by the host-cost model exactly as NeuronCoreRuntime.submit_kernel does (runtime.h):
// numbers first, so that an op that fails (out of memory) leaves no execution behind, as in Python.
// Allocation (empty, empty_strided), the view ops (view, as_strided, _reshape_alias) and copies
// between two tensors of one core are served here too.
//
// Everything else is a cold path: the call is redispatched to PrivateUse2, where the Python
// kernels of src/trnscope/device/kernels.py are registered (lowering, simulation, the first call
// of a signature, copies, fallbacks, scalar reads). When a kernel call misses its plan, its key
// waits in a thread-local slot; the Python runtime, having served the call, hands the plan to
// learn(), and the next call with that key stays in C++.
#include "core.h"
#include "runtime.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/record_function.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/DynamicCast.h>
#include <torch/library.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <pthread.h>
#include <string>

namespace trnscope {

struct rt::Plan {
  PyObject* obj = nullptr;  // the Python runtime's plan (label, Program, timeline), for records
  uint64_t neff_id = 0;
  int64_t duration = 0;
  bool functional = false;  // outputs allocated here and computed by out_op, else results are arguments
  bool copy = false;  // _copy_from between two tensors of one NeuronCore: a copy between host views
  std::optional<c10::OperatorHandle> out_op;
  std::vector<int> out_positions;  // where out_op takes its outputs
  int out_args = 0;  // out_op's argument count
  std::vector<Geometry> outs;
  // Whether the host numerics call ATen ops of their own (a CPU kernel built from others, as mean's
  // from sum and div): -1 not known yet, then 0 or 1 (see Span)
  std::atomic<int8_t> nested{-1};
  ~Plan() { py_decref(obj); }
};

namespace {

using Stack = torch::jit::Stack;
using rt::Plan;

enum class Kind : uint8_t { COLD, EMPTY, EMPTY_STRIDED, VIEW, COMPUTE, COPY };

std::mutex g_ops_mu;
std::unordered_map<c10::OperatorHandle, Kind> g_kinds;
// the arguments an op's device kernel takes as runtime scalars (position -> the values it
// specialises on): their values stay out of the key, as host.runtime_signature leaves them out
using ScalarSlots = std::vector<std::pair<int, std::vector<double>>>;
std::unordered_map<c10::OperatorHandle, std::shared_ptr<const ScalarSlots>> g_scalars;
std::atomic<bool> g_enabled{false};  // set_eager(): the runtime executor is installed
std::atomic<int64_t> g_hot{0}, g_cold{0};

const c10::DispatchKeySet kCPU(c10::DispatchKey::CPU);
const c10::DispatchKeySet kPython(c10::DispatchKey::PrivateUse2);

Kind classify(const c10::OperatorHandle& op) {
  const auto& name = op.operator_name();
  const std::string& n = name.name;
  const std::string& o = name.overload_name;
  if (n == "aten::empty" && o == "memory_format") return Kind::EMPTY;
  if (n == "aten::empty_strided" && o.empty()) return Kind::EMPTY_STRIDED;
  if ((n == "aten::view" || n == "aten::as_strided" || n == "aten::_reshape_alias") && o.empty()) return Kind::VIEW;
  if (n == "aten::_copy_from" && o.empty()) return Kind::COPY;  // planned when both sides are on one core
  // copies, scalar reads, resize/set and the rest of the Python kernels' special ops; random ops
  // (each core's generator is swapped in by the Python host); views other than the three above
  static const char* cold[] = {"aten::_copy_from", "aten::_copy_from_and_resize", "aten::_local_scalar_dense",
                               "aten::resize_", "aten::set_", "aten::record_stream",
                               "aten::convolution_overrideable", "aten::convolution_backward_overrideable",
                               "aten::empty", "aten::empty_strided"};
  for (const char* c : cold)
    if (n == c) return Kind::COLD;
  if (op.hasTag(at::Tag::nondeterministic_seeded)) return Kind::COLD;
  for (const auto& r : op.schema().returns())
    if (r.alias_info() && !r.alias_info()->isWrite()) return Kind::COLD;  // a view op
  return Kind::COMPUTE;
}

Kind kind_of(const c10::OperatorHandle& op, std::shared_ptr<const ScalarSlots>* scalars) {
  std::lock_guard<std::mutex> lock(g_ops_mu);
  auto it = g_kinds.find(op);
  if (it == g_kinds.end()) it = g_kinds.emplace(op, classify(op)).first;
  auto s = g_scalars.find(op);
  if (s != g_scalars.end()) *scalars = s->second;
  return it->second;
}

// --- the call's key -------------------------------------------------------------------------------
//
// Everything that decides a call's plan and its outputs' geometry, as host.signature() says for the
// Python path: the values of the arguments a kernel takes as runtime scalars stay out once the
// Python runtime has said which they are (set_runtime_scalars, with an op's first plan); until
// then, and wherever it is stricter (wrapped-number flags), a new value costs one more trip
// through Python, never a wrong plan.

enum Tag : int64_t { T_UNDEF = 1, T_CPU0, T_DEV, T_DOUBLE, T_INT, T_BOOL, T_COMPLEX, T_NONE, T_INTS, T_DOUBLES,
                     T_BOOLS, T_TENSORS, T_STRING, T_DEVICE, T_RUNTIME };

// scalars.special_of: the value when the kernel specialises on it (a signed zero only as itself)
bool special(double v, const std::vector<double>& specials) {
  for (double s : specials)
    if (v == s && !(v == 0 && std::signbit(v) != std::signbit(s))) return true;
  return false;
}

struct KeyBuilder {
  std::vector<int64_t> w;
  int device = -1;
  bool ok = true;

  void add(int64_t v) { w.push_back(v); }

  void tensor(const at::Tensor& t) {
    if (!t.defined()) return add(T_UNDEF);
    if (t.layout() != c10::kStrided) {
      ok = false;
      return;
    }
    auto dev = t.device();
    if (dev.is_cpu()) {
      // a 0-dim CPU tensor is a value next to device tensors (a wrapped number): its value counts
      if (t.dim() != 0) {
        ok = false;
        return;
      }
      add(T_CPU0);
      add(static_cast<int64_t>(t.scalar_type()));
      add(t.unsafeGetTensorImpl()->is_wrapped_number());
      int64_t bits[2] = {0, 0};
      std::memcpy(bits, t.const_data_ptr(), std::min<size_t>(t.element_size(), sizeof bits));
      add(bits[0]);
      add(bits[1]);
      return;
    }
    if (dev.type() != kNeuron) {
      ok = false;
      return;
    }
    int index = dev.index();
    if (device < 0) {
      device = index;
    } else if (index != device) {  // two NeuronCores: the Python path raises the error
      ok = false;
      return;
    }
    add(T_DEV);
    add(static_cast<int64_t>(t.scalar_type()));
    add(t.dim());
    for (auto s : t.sizes()) add(s);
    for (auto s : t.strides()) add(s);
    add((t.is_conj() ? 1 : 0) | (t.is_neg() ? 2 : 0));
  }

  // an argument the kernel takes as a runtime scalar: its type, and its value only if special
  void runtime_scalar(const c10::IValue& v, const std::vector<double>& specials) {
    if (v.isDouble() || v.isInt()) {
      double d = v.isDouble() ? v.toDouble() : static_cast<double>(v.toInt());
      if (special(d, specials)) return value(v);
      add(v.isDouble() ? T_DOUBLE : T_INT);
      return add(T_RUNTIME);
    }
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      auto st = t.defined() ? t.scalar_type() : c10::ScalarType::Undefined;
      if (t.defined() && t.device().is_cpu() && t.dim() == 0 && st != c10::kBool && !c10::isComplexType(st)) {
        double d = c10::fetch_and_cast<double>(st, t.const_data_ptr());  // no dispatcher call
        if (special(d, specials)) return value(v);
        add(T_CPU0);
        add(static_cast<int64_t>(st));
        add(t.unsafeGetTensorImpl()->is_wrapped_number());
        return add(T_RUNTIME);
      }
    }
    value(v);
  }

  void value(const c10::IValue& v) {
    if (v.isTensor()) return tensor(v.toTensor());
    if (v.isNone()) return add(T_NONE);
    if (v.isDouble()) {
      double d = v.toDouble();
      int64_t bits;
      std::memcpy(&bits, &d, sizeof bits);
      add(T_DOUBLE);
      return add(bits);
    }
    if (v.isInt()) {
      add(T_INT);
      return add(v.toInt());
    }
    if (v.isBool()) {
      add(T_BOOL);
      return add(v.toBool());
    }
    if (v.isComplexDouble()) {
      auto c = v.toComplexDouble();
      double parts[2] = {c.real(), c.imag()};
      int64_t bits[2];
      std::memcpy(bits, parts, sizeof bits);
      add(T_COMPLEX);
      add(bits[0]);
      return add(bits[1]);
    }
    if (v.isIntList()) {
      auto l = v.toIntList();
      add(T_INTS);
      add(static_cast<int64_t>(l.size()));
      for (int64_t x : l) add(x);
      return;
    }
    if (v.isDoubleList()) {
      auto l = v.toDoubleList();
      add(T_DOUBLES);
      add(static_cast<int64_t>(l.size()));
      for (double d : l) {
        int64_t bits;
        std::memcpy(&bits, &d, sizeof bits);
        add(bits);
      }
      return;
    }
    if (v.isBoolList()) {
      auto l = v.toBoolList();
      add(T_BOOLS);
      add(static_cast<int64_t>(l.size()));
      for (bool b : l) add(b);
      return;
    }
    if (v.isTensorList()) {
      auto l = v.toTensorList();
      add(T_TENSORS);
      add(static_cast<int64_t>(l.size()));
      for (const at::Tensor& t : l) tensor(t);
      return;
    }
    if (v.isString()) {
      add(T_STRING);
      return add(static_cast<int64_t>(std::hash<std::string>()(v.toStringRef())));
    }
    if (v.isDevice()) {
      auto d = v.toDevice();
      add(T_DEVICE);
      add(static_cast<int64_t>(d.type()));
      return add(d.index());
    }
    ok = false;  // generators, lists of optional tensors, symbolic sizes...: the Python path
  }
};

size_t hash_words(const std::vector<int64_t>& w) {
  uint64_t h = 1469598103934665603ULL;
  for (int64_t x : w) {
    h ^= static_cast<uint64_t>(x) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  }
  return static_cast<size_t>(h);
}

// the key of a kernel call that missed its plan, waiting for the Python runtime to learn() it
struct Pending {
  bool set = false;
  std::optional<c10::OperatorHandle> op;
  std::vector<int64_t> key;
  size_t hash = 0;
  int device = -1;
};
thread_local Pending t_pending;
thread_local int t_serving = 0;  // Python serve calls in progress on this thread

struct PendingReset {
  ~PendingReset() { t_pending.set = false; }
};

std::shared_ptr<Plan> find_plan(rt::Queue& q, const std::vector<int64_t>& key, size_t h) {
  std::lock_guard<std::mutex> lock(q.mu);
  auto it = q.plans.find(h);
  if (it == q.plans.end()) return nullptr;
  for (auto& entry : it->second)
    if (entry.first == key) return entry.second;
  return nullptr;
}

// --- host views ------------------------------------------------------------------------------------

struct HostArgs {
  std::vector<std::pair<c10::TensorImpl*, at::Tensor>> views;  // host view -> its neuron tensor

  at::Tensor host(const at::Tensor& t) {
    if (!t.defined() || t.device().type() != kNeuron) return t;
    at::Tensor v = host_view(t);
    views.emplace_back(v.unsafeGetTensorImpl(), t);
    return v;
  }

  c10::IValue host(const c10::IValue& v) {
    if (v.isTensor()) return host(v.toTensor());
    if (v.isTensorList()) {
      c10::List<at::Tensor> out;
      auto l = v.toTensorList();
      out.reserve(l.size());
      for (const at::Tensor& t : l) out.push_back(host(t));
      return out;
    }
    return v;
  }

  // a result of the kernel: one of the host views becomes its neuron tensor again (with the
  // kernel's metadata change, as host._sync_geometry does)
  at::Tensor back(const at::Tensor& r) {
    if (!r.defined()) return r;
    for (auto& [impl, n] : views) {
      if (impl != r.unsafeGetTensorImpl()) continue;
      TORCH_CHECK(r.storage().data() == n.storage().data(), "trnscope: a kernel moved a neuron tensor onto memory "
                  "that is not device memory");
      if (r.sizes() != n.sizes() || r.strides() != n.strides() || r.storage_offset() != n.storage_offset())
        n.unsafeGetTensorImpl()->set_sizes_and_strides(r.sizes(), r.strides(), r.storage_offset());
      return n;
    }
    TORCH_CHECK(false, "trnscope: the eager plan of an op whose results are its arguments got a new tensor");
  }

  c10::IValue back(const c10::IValue& v) {
    if (v.isTensor()) return back(v.toTensor());
    if (v.isTensorList()) {
      c10::List<at::Tensor> out;
      for (const at::Tensor& t : v.toTensorList()) out.push_back(back(t));
      return out;
    }
    return v;
  }
};

int64_t capacity_of(const rt::Queue& q) {
  int64_t o = rt::capacity_override();
  return o >= 0 ? o : q.capacity;
}

uint64_t thread_ident() { return static_cast<uint64_t>(pthread_self()); }  // Python's threading.get_ident()
int64_t native_tid() {
  static thread_local int64_t tid = static_cast<int64_t>(syscall(SYS_gettid));
  return tid;
}

// The dispatch span around one device call (trnscope::dispatch#<n>, as the profiler's window opens
// it on the Python path in its dispatch_begin), while deferred observers watch (runtime/observe.py).
// Inside it, RecordFunction is off for the thread, as the window switches it off: the ATen calls
// the host numerics make are the emulator's, not the user's ops. Switching it off and on again
// copies the thread's RecordFunction state and rebuilds its callback lists twice (about as costly
// as the span's own record in the profile), so it is done only where it keeps something out of
// the profile: the profiler records on this thread (the span is active) and the call's host
// numerics are not known to make no ATen call of their own (`quiet`: allocations and views make
// none; a plan learns whether its kernel does the first time it is served unprofiled, see probe()).
// What the guard keeps out would be dropped from the profile anyway (everything inside a span is
// emulator machinery, profiling/correlate.py), so it is a cost, never a difference in the profile.
struct Span {
  int64_t n = 0;
  std::optional<at::RecordFunction> rf;
  std::optional<at::RecordFunctionGuard> quiet;
  explicit Span(bool may_nest) {
    if (!rt::spans()) return;
    n = rt::next_span();
    rf.emplace(at::RecordScope::FUNCTION);
    if (!rf->isActive()) return;
    static constexpr char kPrefix[] = "trnscope::dispatch#";
    thread_local std::string name;
    name.assign(kPrefix, sizeof kPrefix - 1);
    name += std::to_string(n);  // short: no allocation after the buffer's first growth
    rf->before(std::string_view(name));
    if (may_nest) quiet.emplace(false);
  }
  ~Span() { quiet.reset(); }  // on again before the span ends
};

// Whether a plan's host numerics call ATen ops of their own, found out on a call served while no
// profiler span is open: a RecordFunction callback of this thread counts the calls the kernel makes
// (registering one rebuilds the thread's callback lists, once per plan).
thread_local int64_t t_nested_calls = 0;

std::unique_ptr<at::ObserverContext> count_nested(const at::RecordFunction&) {
  ++t_nested_calls;
  return nullptr;
}

struct Probe {
  at::CallbackHandle handle = at::INVALID_CALLBACK_HANDLE;
  int64_t before = 0;
  explicit Probe(bool on) {
    if (!on) return;
    before = t_nested_calls;
    handle = at::addThreadLocalCallback(at::RecordFunctionCallback(&count_nested));
  }
  // whether calls were counted (the callback removed first)
  bool nested() {
    at::removeCallback(handle);
    handle = at::INVALID_CALLBACK_HANDLE;
    return t_nested_calls != before;
  }
  ~Probe() {
    if (handle != at::INVALID_CALLBACK_HANDLE) at::removeCallback(handle);
  }
};

// --- serving ---------------------------------------------------------------------------------------

void host_cost(rt::Clock& clock, int64_t ns) {
  if (clock.mode() == rt::MODELLED) clock.advance(rt::costs().framework_op_ns);  // PyTorch's side of the op
  clock.advance(ns);
}

bool serve_empty(const c10::OperatorHandle& op, Kind kind, Stack* stack) {
  size_t n = op.schema().arguments().size();
  auto args = torch::jit::last(stack, n);
  size_t i = 0;
  if (!args[i].isIntList()) return false;
  std::vector<int64_t> size = args[i++].toIntVector();
  std::vector<int64_t> stride;
  if (kind == Kind::EMPTY_STRIDED) {
    if (!args[i].isIntList()) return false;
    stride = args[i++].toIntVector();
  }
  c10::ScalarType dtype = args[i].isNone() ? c10::get_default_dtype_as_scalartype() : args[i].toScalarType();
  ++i;
  if (!args[i].isNone() && args[i].toLayout() != c10::kStrided) return false;  // the Python path says why
  ++i;
  int index = current_device();
  if (!args[i].isNone()) {
    auto d = args[i].toDevice();
    if (d.type() != kNeuron) return false;
    if (d.has_index()) index = d.index();
  }
  ++i;
  ++i;  // pin_memory: device memory is never pinned
  if (kind == Kind::EMPTY) {
    if (!args[i].isNone()) {
      auto mf = args[i].toMemoryFormat();
      if (mf != c10::MemoryFormat::Contiguous && mf != c10::MemoryFormat::Preserve) return false;
    }
    stride = contiguous_strides(size);
  }
  auto q = rt::queue(index);
  auto clock = rt::clock();
  if (!q || !clock) return false;
  rt::Cut cut(*clock);
  Span span(false);
  host_cost(*clock, rt::costs().alloc_ns);
  at::Tensor t = empty_strided(size, stride, dtype, index, capacity_of(*q));
  torch::jit::drop(stack, n);
  stack->emplace_back(std::move(t));
  return true;
}

bool serve_view(const c10::OperatorHandle& op, Stack* stack) {
  auto clock = rt::clock();
  if (!clock) return false;
  rt::Cut cut(*clock);
  Span span(false);  // ATen's metadata kernels of view, as_strided, _reshape_alias call no other op
  host_cost(*clock, rt::costs().view_ns);
  op.redispatchBoxed(kCPU, stack);  // ATen's metadata kernel on the neuron tensor itself
  return true;
}

void compute(const c10::OperatorHandle& op, const Plan& plan, Stack* stack, size_t n, int device,
             const rt::Queue& q) {
  auto args = torch::jit::last(stack, n);
  HostArgs h;
  Stack hs;
  if (plan.copy) {  // _copy_from(self, dst, non_blocking) -> dst
    at::Tensor dst = args[1].toTensor();
    host_view(dst).copy_(host_view(args[0].toTensor()));
    torch::jit::drop(stack, n);
    stack->emplace_back(std::move(dst));
    return;
  }
  if (plan.functional) {
    std::vector<at::Tensor> outs;
    outs.reserve(plan.outs.size());
    for (const auto& g : plan.outs) outs.push_back(empty_strided(g.sizes, g.strides, g.dtype, device, capacity_of(q)));
    hs.reserve(plan.out_args);
    size_t a = 0, o = 0;
    for (int p = 0; p < plan.out_args; ++p) {
      if (o < plan.out_positions.size() && plan.out_positions[o] == p) {
        hs.emplace_back(host_view(outs[o++]));
      } else {
        hs.push_back(h.host(args[a++]));
      }
    }
    plan.out_op->redispatchBoxed(kCPU, &hs);
    torch::jit::drop(stack, n);
    for (auto& t : outs) stack->emplace_back(std::move(t));
    return;
  }
  hs.reserve(n);
  for (const auto& v : args) hs.push_back(h.host(v));
  op.redispatchBoxed(kCPU, &hs);
  torch::jit::drop(stack, n);
  for (const auto& r : hs) stack->push_back(h.back(r));
}

bool serve_compute(const c10::OperatorHandle& op, Stack* stack, bool copy,
                   const std::shared_ptr<const ScalarSlots>& scalars) {
  size_t n = op.schema().arguments().size();
  auto args = torch::jit::last(stack, n);
  if (copy) {  // a copy from or to the host, or between cores, is a transfer: the Python runtime's
    const at::Tensor& src = args[0].toTensor();
    const at::Tensor& dst = args[1].toTensor();
    if (src.device().type() != kNeuron || dst.device().type() != kNeuron || src.device() != dst.device())
      return false;
  }
  KeyBuilder kb;
  kb.w.reserve(8 + 12 * n);
  kb.add(reinterpret_cast<int64_t>(&op.schema()));
  kb.add(static_cast<int64_t>(c10::get_default_dtype_as_scalartype()));
  size_t slot = 0;
  for (size_t i = 0; i < n; ++i) {
    if (scalars && slot < scalars->size() && (*scalars)[slot].first == static_cast<int>(i)) {
      kb.runtime_scalar(args[i], (*scalars)[slot++].second);
    } else {
      kb.value(args[i]);
    }
    if (!kb.ok) return false;
  }
  if (kb.device < 0) return false;
  auto q = rt::queue(kb.device);
  auto clock = rt::clock();
  if (!q || !clock) return false;
  size_t h = hash_words(kb.w);
  std::shared_ptr<Plan> plan = find_plan(*q, kb.w, h);
  if (!plan) {
    t_pending.set = true;
    t_pending.op = op;
    t_pending.key = std::move(kb.w);
    t_pending.hash = h;
    t_pending.device = kb.device;
    return false;
  }
  rt::Cut cut(*clock);
  int8_t nested = plan->nested.load(std::memory_order_relaxed);
  Span span(nested != 0);
  if (clock->mode() == rt::MODELLED) clock->advance(rt::costs().framework_op_ns);
  if (nested < 0 && !span.n && at::isRecordFunctionEnabled()) {  // else the callback would see nothing
    Probe probe(true);
    compute(op, *plan, stack, n, kb.device, *q);
    plan->nested.store(probe.nested() ? 1 : 0, std::memory_order_relaxed);
  } else {
    compute(op, *plan, stack, n, kb.device, *q);
  }
  q->submit(*clock, plan->neff_id, plan->duration, 0, &plan, span.n, thread_ident(), native_tid());
  return true;
}

void neuron_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet, Stack* stack) {
  bool outer = t_serving == 0;  // not an op the Python runtime issued while serving another
  if (outer && g_enabled.load(std::memory_order_relaxed)) {
    std::shared_ptr<const ScalarSlots> scalars;
    Kind kind = kind_of(op, &scalars);
    bool served = false;
    switch (kind) {
      case Kind::EMPTY:
      case Kind::EMPTY_STRIDED:
        served = serve_empty(op, kind, stack);
        break;
      case Kind::VIEW:
        served = serve_view(op, stack);
        break;
      case Kind::COMPUTE:
      case Kind::COPY:
        served = serve_compute(op, stack, kind == Kind::COPY, scalars);
        break;
      case Kind::COLD:
        break;
    }
    if (served) {
      g_hot.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  g_cold.fetch_add(1, std::memory_order_relaxed);
  if (!outer) return op.redispatchBoxed(kPython, stack);
  PendingReset reset;  // the key waits for learn() only during this call
  op.redispatchBoxed(kPython, stack);
}

std::vector<std::unique_ptr<torch::Library>> g_libraries;

}  // namespace

namespace eager {

void register_kernels(const std::vector<std::string>& names) {
  auto fallback = std::make_unique<torch::Library>(torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1,
                                                   __FILE__, __LINE__);
  fallback->fallback(torch::CppFunction::makeFromBoxedFunction<&neuron_kernel>());
  auto impl = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                               __FILE__, __LINE__);
  for (const auto& name : names) impl->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&neuron_kernel>());
  g_libraries.push_back(std::move(fallback));
  g_libraries.push_back(std::move(impl));
}

// the runtime scalars of the op whose call waits on this thread for learn() (see g_scalars)
void set_runtime_scalars(ScalarSlots slots) {
  if (!t_pending.set || t_serving != 1) return;
  auto ptr = std::make_shared<const ScalarSlots>(std::move(slots));
  std::lock_guard<std::mutex> lock(g_ops_mu);
  g_scalars[*t_pending.op] = std::move(ptr);
}

bool enter_serve() { return t_serving++ == 0; }
void exit_serve() { --t_serving; }

bool learn(PyObject* obj, uint64_t neff_id, int64_t duration, const std::string& out_op, const std::string& overload,
           std::vector<int> out_positions, int out_args, std::vector<Geometry> outs) {
  if (!t_pending.set || t_serving != 1) return false;
  auto q = rt::queue(t_pending.device);
  if (!q) return false;
  auto plan = std::make_shared<Plan>();
  plan->neff_id = neff_id;
  plan->duration = duration;
  if (out_op == "aten::_copy_from") {
    plan->copy = true;
  } else if (!out_op.empty()) {
    auto handle = c10::Dispatcher::singleton().findOp({out_op, overload});
    if (!handle) return false;
    plan->functional = true;
    plan->out_op = *handle;
    plan->out_positions = std::move(out_positions);
    plan->out_args = out_args;
    plan->outs = std::move(outs);
  }
  py_incref(obj);
  plan->obj = obj;
  std::vector<std::shared_ptr<Plan>> dropped;  // released after the lock
  {
    std::lock_guard<std::mutex> lock(q->mu);
    if (q->plan_count >= kPlanCacheSize) {  // as the Python plan cache: bounded, the oldest go
      for (auto& kv : q->plans)
        for (auto& e : kv.second) dropped.push_back(std::move(e.second));
      q->plans.clear();
      q->plan_count = 0;
    }
    q->plans[t_pending.hash].emplace_back(std::move(t_pending.key), std::move(plan));
    q->plan_count += 1;
  }
  t_pending.set = false;
  return true;
}

void set_enabled(bool on) { g_enabled = on; }
bool enabled() { return g_enabled; }
std::pair<int64_t, int64_t> counters() { return {g_hot.load(), g_cold.load()}; }

PyObject* plan_object(const rt::Plan& plan) { return plan.obj; }

}  // namespace eager
}  // namespace trnscope
