// The Python module of trnscope's C++ core: installs the registrations and exposes the allocator,
// host views and device state to src/trnscope/device (memory.py, _devices.py, streams.py, rng.py).
#include "core.h"

#include "runtime.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/TensorImpl.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/Storage.h>
#include <torch/csrc/utils/pybind.h>

namespace py = pybind11;

namespace trnscope {
namespace eager {
// eager.cpp: the runtime scalars (argument position -> the values its kernel specialises on) of the
// op whose call waits for learn() on this thread
void set_runtime_scalars(std::vector<std::pair<int, std::vector<double>>> slots);
} // namespace eager

// --- the bridge ------------------------------------------------------------------------------------
namespace bridge {
namespace {
PyObject* g_bridge = nullptr;  // never released: C++ may call it until the process ends

PyObject* call(const char* method, const std::vector<int64_t>& args) {
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(args.size()));
  for (size_t i = 0; i < args.size(); ++i) PyTuple_SET_ITEM(tuple, i, PyLong_FromLongLong(args[i]));
  PyObject* fn = PyObject_GetAttrString(g_bridge, method);
  PyObject* out = fn ? PyObject_Call(fn, tuple, nullptr) : nullptr;
  Py_XDECREF(fn);
  Py_DECREF(tuple);
  if (out == nullptr) {
    // the runtime's exception, as a c10::Error (a RuntimeError in Python) with its message
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    std::string msg = "trnscope runtime call failed";
    if (value) {
      PyObject* s = PyObject_Str(value);
      if (s) {
        msg = PyUnicode_AsUTF8(s);
        Py_DECREF(s);
      }
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    TORCH_CHECK(false, msg);
  }
  return out;
}
} // namespace

bool ready() { return g_bridge != nullptr && Py_IsInitialized(); }

int64_t call_int(const char* method, std::vector<int64_t> args) {
  TORCH_CHECK(ready(), "trnscope: the neuron runtime is not available (interpreter shutting down)");
  py::gil_scoped_acquire gil;
  PyObject* out = call(method, args);
  int64_t v = PyLong_AsLongLong(out);
  Py_DECREF(out);
  return v;
}

void call_void(const char* method, std::vector<int64_t> args) {
  if (!ready()) return;  // nothing to wait for once the runtime is gone
  py::gil_scoped_acquire gil;
  Py_DECREF(call(method, args));
}

std::string call_str(const char* method, std::vector<int64_t> args) {
  TORCH_CHECK(ready(), "trnscope: the neuron runtime is not available (interpreter shutting down)");
  py::gil_scoped_acquire gil;
  PyObject* out = call(method, args);
  std::string s = PyUnicode_AsUTF8(out);
  Py_DECREF(out);
  return s;
}
} // namespace bridge

namespace {

py::object wrap_storage(c10::Storage s) { return py::reinterpret_steal<py::object>(THPStorage_Wrap(std::move(s))); }

const c10::Storage& unpack_storage(py::handle obj) {
  TORCH_CHECK(THPStorage_Check(obj.ptr()), "trnscope: expected a torch.UntypedStorage");
  return THPStorage_Unpack(obj.ptr());
}

c10::ScalarType unpack_dtype(py::handle obj) {
  TORCH_CHECK(THPDtype_Check(obj.ptr()), "trnscope: expected a torch.dtype");
  return reinterpret_cast<THPDtype*>(obj.ptr())->scalar_type;
}

// the clock's emulation() context: a cut while inside
struct CutContext {
  std::shared_ptr<rt::Clock> clock;
  void enter() { clock->cut_enter(); }
  bool exit(py::args) {
    clock->cut_exit();
    return false;
  }
};

py::list pairs(const std::vector<std::pair<int64_t, int64_t>>& v) {
  py::list out;
  for (const auto& p : v) out.append(py::make_tuple(p.first, p.second));
  return out;
}

template <typename T>
T locked(rt::Queue& q, T rt::Queue::*field) {
  std::lock_guard<std::mutex> lock(q.mu);
  return q.*field;
}

template <typename T>
void set_locked(rt::Queue& q, T rt::Queue::*field, T value) {
  std::lock_guard<std::mutex> lock(q.mu);
  q.*field = value;
}

} // namespace

void py_incref(PyObject* obj) {
  if (obj == nullptr) return;
  py::gil_scoped_acquire gil;
  Py_INCREF(obj);
}

void py_decref(PyObject* obj) {
  if (obj == nullptr || !Py_IsInitialized()) return;
  py::gil_scoped_acquire gil;
  Py_DECREF(obj);
}

} // namespace trnscope

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace trnscope;
  m.doc() = "trnscope's C++ core of the neuron device (see docs/architecture.md)";

  m.def("hooks_registered", [] { return at::isPrivateUse1HooksRegistered(); });
  m.def("install", [](py::object bridge_obj) {
    bridge::g_bridge = bridge_obj.release().ptr();
    install_guard();
    install_allocator();
    install_hooks();
  });

  // devices and streams
  m.def("current_device", &current_device);
  m.def("set_device", &set_device);
  m.def("current_stream_id", &current_stream_id);
  m.def("set_stream_id", &set_stream_id);
  m.def("new_stream_id", &new_stream_id);

  // memory
  m.def("allocate", [](int64_t nbytes, int device, int64_t cap) { return wrap_storage(allocate(nbytes, device, cap)); });
  m.def("adopt", [](py::handle cpu, int device, int64_t cap) {
    return wrap_storage(adopt(unpack_storage(cpu), device, cap));
  });
  m.def("host_storage", [](py::handle neuron) -> py::object {
    c10::Storage host;
    if (!host_storage(unpack_storage(neuron), &host)) return py::none();
    return wrap_storage(std::move(host));
  });
  m.def("host_view", &host_view);
  m.def("wrap", [](py::handle storage, py::handle dtype, std::vector<int64_t> size, std::vector<int64_t> stride,
                   int64_t offset) {
    return make_tensor(unpack_storage(storage), c10::DispatchKey::PrivateUse1, unpack_dtype(dtype), size, stride,
                       offset);
  });
  m.def("empty_strided", [](std::vector<int64_t> size, std::vector<int64_t> stride, py::handle dtype, int device,
                            int64_t cap) { return empty_strided(size, stride, unpack_dtype(dtype), device, cap); });
  m.def("set_metadata", [](const at::Tensor& t, py::handle storage, int64_t offset, std::vector<int64_t> size,
                           std::vector<int64_t> stride) {
    const c10::Storage& st = unpack_storage(storage);
    TORCH_CHECK(st.device() == t.device(), "Attempted to set the storage of a tensor on device \"", t.device(),
                "\" to a storage on different device \"", st.device(), "\". This is no longer allowed; the "
                "devices must match.");
    auto* impl = t.unsafeGetTensorImpl();
    impl->set_storage_keep_dtype(st);
    impl->set_sizes_and_strides(size, stride, offset);
    return t;
  });
  m.def("stats", [](int device) {
    CoreStats s = stats(device);
    return std::vector<int64_t>{s.allocated, s.peak, s.allocated_total, s.freed_total, s.num_allocs,
                                s.num_frees, s.num_ooms, s.blocks, s.peak_blocks, s.peak_reserved};
  });
  m.def("allocated", [](int device) { return stats(device).allocated; });
  m.def("cached_bytes", &cached_bytes);
  m.def("take_pooled", &take_pooled);
  m.def("reset_peak", &reset_peak);
  m.def("reset_accumulated", &reset_accumulated);
  m.def("empty_cache", &empty_cache);
  m.def("multicore", &multicore);
  m.def("live_blocks", &live_blocks);
  m.def("set_pool_limits", &set_pool_limits);

  // pinned memory, generators
  m.def("is_pinned", [](const at::Tensor& t) {
    return t.device().is_cpu() && is_pinned_ptr(t.storage().data());
  });
  m.def("pinned_stats", &pinned_stats);
  m.def("default_generator", [](int index) {
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(default_generator(index)));
  });

  // the runtime's clock and queues (runtime.h), which runtime/clock.py and runtime/queue.py use on
  // this path
  py::class_<CutContext>(m, "Cut")
      .def("__enter__", &CutContext::enter)
      .def("__exit__", &CutContext::exit);
  py::class_<rt::Clock, std::shared_ptr<rt::Clock>>(m, "Clock")
      .def(py::init<int, int64_t>())
      .def_property_readonly("mode", &rt::Clock::mode)
      .def("set_mode", &rt::Clock::set_mode)
      .def("now", &rt::Clock::now)
      .def("to_emulated", &rt::Clock::to_emulated)
      .def("in_cut", &rt::Clock::in_cut)
      .def("advance", &rt::Clock::advance)
      .def("wait_until", &rt::Clock::wait_until)
      .def("cut", [](std::shared_ptr<rt::Clock> c) { return CutContext{std::move(c)}; })
      .def_property_readonly("cut_depth", &rt::Clock::cut_depth)
      .def("hold", &rt::Clock::hold)
      .def("release", &rt::Clock::release)
      .def_property_readonly("held", &rt::Clock::held)
      .def_property_readonly("waited_ns", &rt::Clock::waited_ns)
      .def_property_readonly("segments", &rt::Clock::segments)
      .def("cuts", [](rt::Clock& c, size_t from) { return pairs(c.cuts(from)); }, py::arg("start") = 0)
      .def("waits", [](rt::Clock& c, size_t from) { return pairs(c.waits(from)); }, py::arg("start") = 0)
      .def_property_readonly("waits_count", &rt::Clock::waits_count);
  m.def("install_clock", [](std::shared_ptr<rt::Clock> c) { rt::set_clock(std::move(c)); });

  py::class_<rt::Queue, std::shared_ptr<rt::Queue>>(m, "Queue")
      .def(py::init<int, int64_t, int64_t>())
      .def_readonly("index", &rt::Queue::index)
      .def_readonly("launch_ns", &rt::Queue::launch_ns)
      .def_property("device_free_ns", [](rt::Queue& q) { return locked(q, &rt::Queue::device_free); },
                    [](rt::Queue& q, int64_t v) { set_locked(q, &rt::Queue::device_free, v); })
      .def_property("current_stream", [](rt::Queue& q) { return locked(q, &rt::Queue::current_stream); },
                    [](rt::Queue& q, int64_t v) { set_locked(q, &rt::Queue::current_stream, v); })
      .def_property("recording", [](rt::Queue& q) { return locked(q, &rt::Queue::recording); },
                    [](rt::Queue& q, bool v) { set_locked(q, &rt::Queue::recording, v); })
      .def_property("sample_hbm", [](rt::Queue& q) { return locked(q, &rt::Queue::sample_hbm); },
                    [](rt::Queue& q, bool v) { set_locked(q, &rt::Queue::sample_hbm, v); })
      .def("submit", [](rt::Queue& q, rt::Clock& clock, uint64_t nid, int64_t duration, int64_t compiled_ns) {
        auto s = q.submit(clock, nid, duration, compiled_ns);
        return py::make_tuple(s.first, s.host_start, s.submit, s.start, s.end, s.ready);
      })
      .def("enqueue", &rt::Queue::enqueue)
      .def("stream_done", &rt::Queue::stream_done)
      .def("stream_wait", &rt::Queue::stream_wait)
      .def("order_after", &rt::Queue::order_after)
      .def("stats", [](rt::Queue& q) {
        std::lock_guard<std::mutex> lock(q.mu);
        return py::make_tuple(q.neffs_executed, q.cache_hits, q.dispatches);
      })
      .def("clear_stats", [](rt::Queue& q) {
        std::lock_guard<std::mutex> lock(q.mu);
        q.neffs_executed = q.cache_hits = q.dispatches = 0;
      })
      .def("take_records", [](rt::Queue& q) {
        std::vector<rt::Record> taken;
        {
          std::lock_guard<std::mutex> lock(q.mu);
          taken.swap(q.records);
        }
        py::list out;
        for (const auto& r : taken) {
          out.append(py::make_tuple(r.seq, py::reinterpret_borrow<py::object>(eager::plan_object(*r.plan)), r.thread,
                                    r.host_start, r.host_end, r.device_start, r.device_end, r.queue_wait, r.span,
                                    r.hbm, r.native_tid));
        }
        return out;
      })
      .def_property_readonly("pending_records", [](rt::Queue& q) { return locked(q, &rt::Queue::records).size(); })
      .def_property_readonly("plan_count", [](rt::Queue& q) { return locked(q, &rt::Queue::plan_count); })
      .def("clear_plans", [](rt::Queue& q) {
        decltype(q.plans) dropped;
        std::lock_guard<std::mutex> lock(q.mu);
        dropped.swap(q.plans);
        q.plan_count = 0;
      });
  m.def("install_queue", [](int index, std::shared_ptr<rt::Queue> q) { rt::set_queue(index, std::move(q)); });
  m.def("clear_queues", &rt::clear_queues);
  m.def("next_seq", &rt::next_seq);
  m.def("next_span", &rt::next_span);
  m.def("set_spans", &rt::set_spans);
  m.def("set_costs", [](int64_t framework, int64_t backend, int64_t submit, int64_t alloc, int64_t view) {
    rt::set_costs(rt::Costs{framework, backend, submit, alloc, view});
  });
  m.def("set_capacity_override", &rt::set_capacity_override);

  // the eager hot path (eager.cpp)
  m.def("register_kernels", &eager::register_kernels);
  m.def("enter_serve", &eager::enter_serve);
  m.def("exit_serve", &eager::exit_serve);
  m.def("learn", [](py::handle plan, uint64_t nid, int64_t duration, const std::string& out_op,
                    const std::string& overload, std::vector<int> positions, int out_args, py::list outs) {
    std::vector<Geometry> geos;
    for (auto g : outs) {
      auto t = g.cast<py::tuple>();
      geos.push_back(Geometry{t[0].cast<std::vector<int64_t>>(), t[1].cast<std::vector<int64_t>>(), unpack_dtype(t[2])});
    }
    return eager::learn(plan.ptr(), nid, duration, out_op, overload, std::move(positions), out_args, std::move(geos));
  });
  m.def("set_runtime_scalars", &eager::set_runtime_scalars);
  m.def("set_eager", &eager::set_enabled);
  m.def("eager", &eager::enabled);
  m.def("counters", &eager::counters);
}
