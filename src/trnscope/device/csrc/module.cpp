// The Python module of trnscope's C++ core: installs the registrations and exposes the allocator,
// host views and device state to src/trnscope/device (memory.py, _devices.py, streams.py, rng.py).
#include "core.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/TensorImpl.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/Storage.h>
#include <torch/extension.h>

namespace py = pybind11;

namespace trnscope {

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

at::Tensor make_tensor(c10::Storage storage, c10::DispatchKey key, c10::ScalarType dtype,
                       c10::IntArrayRef size, c10::IntArrayRef stride, int64_t offset) {
  auto t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key),
                                                    c10::scalarTypeToTypeMeta(dtype));
  t.unsafeGetTensorImpl()->set_sizes_and_strides(size, stride, offset);
  return t;
}

// A CPU tensor over the same bytes as neuron tensor t (same dtype, geometry, conj/neg bits); it
// shares the host buffer, so writes through it are writes to t.
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

int64_t storage_nbytes(c10::IntArrayRef size, c10::IntArrayRef stride, int64_t itemsize) {
  int64_t n = 1;
  for (size_t i = 0; i < size.size(); ++i) {
    if (size[i] == 0) return 0;
    n += (size[i] - 1) * stride[i];
  }
  return n * itemsize;
}

} // namespace
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
                            int64_t cap) {
    auto st = unpack_dtype(dtype);
    auto storage = allocate(storage_nbytes(size, stride, c10::elementSize(st)), device, cap);
    return make_tensor(std::move(storage), c10::DispatchKey::PrivateUse1, st, size, stride, 0);
  });
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
}
