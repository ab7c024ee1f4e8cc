// clusterjit._clusterjit: the Python extension module over the C API (include/clusterjit/clusterjit.h), built
// with pybind11. The ONNX Runtime-shaped classes are in Python (python/clusterjit/__init__.py); this module
// converts arrays, releases the GIL around runs and raises the library's errors as the exception classes
// of clusterjit._errors (one per cjit_code).
//
// Inputs: a C-contiguous, aligned numpy array is wrapped without a copy (cjit_value_wrap); an object with
// __dlpack__ (CPU memory, compact row-major) likewise, through DLPack (dlpack/dlpack.h, v0.6 ABI); anything
// else goes through numpy.ascontiguousarray (a copy). Outputs are numpy arrays over the library's buffers,
// which they own through a capsule (no copy). bfloat16 is ml_dtypes.bfloat16 when importable, else uint16.
//
// Thread-safety: runs release the GIL, so Python threads run one session concurrently (the C API allows
// it). On the main thread a run polls Python's pending signals every 20 ms (cjit_interrupt_check), so
// Ctrl-C stops it at the next step boundary and raises KeyboardInterrupt.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <ctime>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "clusterjit/clusterjit.h"
#include "dlpack/dlpack.h"

namespace py = pybind11;

namespace {

// Module-lifetime references, never released (no static destructor runs after the interpreter ends).
py::handle g_errors_by_code;   // clusterjit._errors.BY_CODE: {code: exception class}
py::handle g_bfloat16;         // ml_dtypes.bfloat16's numpy dtype, or None
unsigned long g_main_thread = 0;
py::handle g_numpy_generic;    // numpy.generic (the numpy scalar types)
// The run options of main-thread runs (used with the GIL held around each run's start and end).
cjit_run_options* g_main_options = nullptr;
bool g_main_options_busy = false;

// numpy.ascontiguousarray(x): a copy only when needed.
py::array AsContiguous(const py::handle& x) {
  static py::handle ascontiguous = py::object(py::module_::import("numpy").attr("ascontiguousarray")).release();
  return py::reinterpret_steal<py::array>(ascontiguous(x).release());
}

// Raises the status as its clusterjit exception class (and frees it); no-op for NULL.
void Check(cjit_status* st) {
  if (st == nullptr) return;
  const int code = static_cast<int>(cjit_status_code(st));
  std::string message = cjit_status_message(st);
  cjit_status_free(st);
  py::object cls = g_errors_by_code.attr("get")(code, g_errors_by_code[py::int_(2)]);
  PyErr_SetString(cls.ptr(), message.c_str());
  throw py::error_already_set();
}

// Text out of a (buffer, size, length) C API function, sized on a first call.
template <typename F>
std::string TextOut(F&& fn) {
  size_t length = 0;
  std::string buf(4096, '\0');
  cjit_status* st = fn(buf.data(), buf.size(), &length);
  if (st != nullptr && length + 1 > buf.size()) {
    cjit_status_free(st);
    buf.assign(length + 1, '\0');
    st = fn(buf.data(), buf.size(), &length);
  }
  Check(st);
  buf.resize(length);
  return buf;
}

// ---- dtypes ----

py::dtype NumpyDtypeUncached(int32_t code) {
  switch (code) {
    case CJIT_FLOAT32: return py::dtype("float32");
    case CJIT_UINT8: return py::dtype("uint8");
    case CJIT_INT8: return py::dtype("int8");
    case CJIT_UINT16: return py::dtype("uint16");
    case CJIT_INT16: return py::dtype("int16");
    case CJIT_INT32: return py::dtype("int32");
    case CJIT_INT64: return py::dtype("int64");
    case CJIT_BOOL: return py::dtype("bool");
    case CJIT_FLOAT16: return py::dtype("float16");
    case CJIT_FLOAT64: return py::dtype("float64");
    case CJIT_UINT32: return py::dtype("uint32");
    case CJIT_UINT64: return py::dtype("uint64");
    case CJIT_INT4: return py::dtype("int8");  // one element per byte (include/clusterjit/clusterjit.h)
    case CJIT_UINT4: return py::dtype("uint8");
    case CJIT_BFLOAT16:
      return g_bfloat16.is_none() ? py::dtype("uint16") : py::reinterpret_borrow<py::dtype>(g_bfloat16);
    default: break;
  }
  PyErr_SetString(PyExc_TypeError, ("clusterjit: no numpy dtype for element type " + std::to_string(code)).c_str());
  throw py::error_already_set();
}

// The numpy dtype of each ONNX element type, made once (building one from its name costs a microsecond).
py::handle g_dtypes[17];

py::dtype NumpyDtype(int32_t code) {
  if (code >= 0 && code < 17 && g_dtypes[code]) return py::reinterpret_borrow<py::dtype>(g_dtypes[code]);
  return NumpyDtypeUncached(code);
}

// The cjit dtype of a numpy dtype (0 when none); `declared` (the model's, 0 unknown) lets uint16 stand for
// bfloat16 where numpy has no bfloat16, and int8 / uint8 for int4 / uint4 (one element per byte).
int32_t CjitDtype(const py::dtype& dt, int32_t declared) {
  const char kind = dt.kind();
  const ssize_t size = dt.itemsize();
  if (!g_bfloat16.is_none() && dt.is(g_bfloat16)) return CJIT_BFLOAT16;
  if (kind == 'f') return size == 4 ? CJIT_FLOAT32 : size == 2 ? CJIT_FLOAT16 : size == 8 ? CJIT_FLOAT64 : 0;
  if (kind == 'i' && size == 1 && declared == CJIT_INT4) return CJIT_INT4;
  if (kind == 'u' && size == 1 && declared == CJIT_UINT4) return CJIT_UINT4;
  if (kind == 'i')
    return size == 1 ? CJIT_INT8 : size == 2 ? CJIT_INT16 : size == 4 ? CJIT_INT32 : size == 8 ? CJIT_INT64 : 0;
  if (kind == 'u') {
    if (size == 2 && declared == CJIT_BFLOAT16) return CJIT_BFLOAT16;
    return size == 1 ? CJIT_UINT8 : size == 2 ? CJIT_UINT16 : size == 4 ? CJIT_UINT32 : size == 8 ? CJIT_UINT64 : 0;
  }
  if (kind == 'b' && size == 1) return CJIT_BOOL;
  if (kind == 'V' && size == 2 && declared == CJIT_BFLOAT16) return CJIT_BFLOAT16;  // ml_dtypes-like bfloat16
  return 0;
}

int32_t DlpackDtype(const DLDataType& t, int32_t declared) {
  if (t.lanes != 1) return 0;
  switch (t.code) {
    case kDLFloat: return t.bits == 32 ? CJIT_FLOAT32 : t.bits == 16 ? CJIT_FLOAT16 : t.bits == 64 ? CJIT_FLOAT64 : 0;
    case kDLInt:
      if (t.bits == 8 && declared == CJIT_INT4) return CJIT_INT4;
      return t.bits == 8    ? CJIT_INT8
             : t.bits == 16 ? CJIT_INT16
             : t.bits == 32 ? CJIT_INT32
             : t.bits == 64 ? CJIT_INT64
                            : 0;
    case kDLUInt:
      if (t.bits == 16 && declared == CJIT_BFLOAT16) return CJIT_BFLOAT16;
      if (t.bits == 8 && declared == CJIT_UINT4) return CJIT_UINT4;
      return t.bits == 8    ? CJIT_UINT8
             : t.bits == 16 ? CJIT_UINT16
             : t.bits == 32 ? CJIT_UINT32
             : t.bits == 64 ? CJIT_UINT64
                            : 0;
    case kDLBfloat: return t.bits == 16 ? CJIT_BFLOAT16 : 0;
    case 6 /* kDLBool (DLPack >= 0.8) */: return t.bits == 8 ? CJIT_BOOL : 0;
    default: return 0;
  }
}

struct ValueDeleter {
  void operator()(cjit_value* v) const { cjit_value_free(v); }
};
using ValuePtr = std::unique_ptr<cjit_value, ValueDeleter>;

// One input (or bound output) of a run: the wrapped value and what keeps its memory alive.
struct Wrapped {
  ValuePtr value;
  py::object keep;                    // the array (or DLPack capsule) the value points into
  DLManagedTensor* dl = nullptr;      // a consumed DLPack tensor, released after the run
  const void* data = nullptr;
  std::vector<Wrapped> parts;         // a sequence's or optional's wrapped elements
  Wrapped() = default;
  Wrapped(Wrapped&& o) noexcept
      : value(std::move(o.value)), keep(std::move(o.keep)), dl(std::exchange(o.dl, nullptr)), data(o.data),
        parts(std::move(o.parts)) {}
  Wrapped& operator=(Wrapped&& o) = delete;
  ~Wrapped() {
    value.reset();
    if (dl != nullptr && dl->deleter != nullptr) dl->deleter(dl);  // with the GIL (the producer may need it)
  }
};

[[noreturn]] void Raise(PyObject* type, const std::string& message) {
  PyErr_SetString(type, message.c_str());
  throw py::error_already_set();
}

Wrapped WrapArray(const std::string& what, py::array arr, int32_t declared, bool writable) {
  const bool contiguous = (arr.flags() & py::array::c_style) != 0 && (arr.flags() & 0x0100 /*NPY_ARRAY_ALIGNED*/) != 0;
  if (!contiguous) {
    if (writable) Raise(PyExc_ValueError, what + ": a bound output array must be C-contiguous and aligned");
    arr = AsContiguous(arr);
  }
  if (writable && !arr.writeable()) Raise(PyExc_ValueError, what + ": a bound output array must be writable");
  const int32_t dtype = CjitDtype(arr.dtype(), declared);
  if (dtype == 0) {
    Raise(PyExc_TypeError, what + ": numpy dtype " + py::str(arr.dtype()).cast<std::string>() +
                               " has no ONNX tensor element type clusterjit runs");
  }
  std::vector<int64_t> dims(arr.shape(), arr.shape() + arr.ndim());
  Wrapped w;
  cjit_value* v = nullptr;
  void* data = const_cast<void*>(arr.data());
  Check(cjit_value_wrap(static_cast<cjit_dtype>(dtype), dims.data(), dims.size(), data,
                        static_cast<size_t>(arr.nbytes()), &v));
  w.value.reset(v);
  w.data = data;
  w.keep = std::move(arr);
  return w;
}

Wrapped WrapDlpack(const std::string& what, const py::object& obj, int32_t declared) {
  py::object capsule = obj.attr("__dlpack__")();
  auto* t = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (t == nullptr) throw py::error_already_set();
  const DLTensor& d = t->dl_tensor;
  if (d.device.device_type != kDLCPU && d.device.device_type != kDLCUDAHost) {
    Raise(PyExc_ValueError, what + ": a __dlpack__ tensor on device type " + std::to_string(d.device.device_type) +
                                " (clusterjit's Python runs take CPU memory)");
  }
  const int32_t dtype = DlpackDtype(d.dtype, declared);
  if (dtype == 0) Raise(PyExc_TypeError, what + ": the __dlpack__ tensor's element type is not one clusterjit runs");
  std::vector<int64_t> dims(d.shape, d.shape + d.ndim);
  if (d.strides != nullptr) {
    int64_t expect = 1;
    for (int i = d.ndim - 1; i >= 0; --i) {
      if (dims[i] != 1 && d.strides[i] != expect) {
        Raise(PyExc_ValueError, what + ": the __dlpack__ tensor is not compact row-major (C-contiguous)");
      }
      expect *= dims[i];
    }
  }
  // Consumed: the producer's capsule no longer frees it; we call the deleter after the run.
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");
  Wrapped w;
  w.dl = t;
  w.keep = capsule;
  size_t bytes = (d.dtype.bits / 8);
  for (int64_t x : dims) bytes *= static_cast<size_t>(x);
  void* data = static_cast<char*>(d.data) + d.byte_offset;
  cjit_value* v = nullptr;
  Check(cjit_value_wrap(static_cast<cjit_dtype>(dtype), dims.data(), dims.size(), data, bytes, &v));
  w.value.reset(v);
  w.data = data;
  return w;
}

// A string input (numpy str / bytes / object arrays, or declared tensor(string)): copies of the UTF-8 bytes.
Wrapped WrapStrings(const std::string& what, const py::handle& obj) {
  py::array arr = py::module_::import("numpy").attr("asarray")(obj, py::arg("dtype") = py::dtype("O"));
  std::vector<int64_t> dims(arr.shape(), arr.shape() + arr.ndim());
  py::list flat = arr.attr("ravel")().attr("tolist")();
  std::vector<std::string> bytes;
  bytes.reserve(flat.size());
  for (const py::handle item : flat) {
    if (PyUnicode_Check(item.ptr())) {
      Py_ssize_t n = 0;
      const char* p = PyUnicode_AsUTF8AndSize(item.ptr(), &n);
      if (p == nullptr) throw py::error_already_set();
      bytes.emplace_back(p, static_cast<size_t>(n));
    } else if (PyBytes_Check(item.ptr())) {
      bytes.emplace_back(PyBytes_AS_STRING(item.ptr()), static_cast<size_t>(PyBytes_GET_SIZE(item.ptr())));
    } else {
      Raise(PyExc_TypeError, what + ": a string tensor holds str or bytes, not " +
                                 py::str(py::type::handle_of(item).attr("__name__")).cast<std::string>());
    }
  }
  std::vector<const char*> ptrs;
  std::vector<size_t> lengths;
  for (const std::string& b : bytes) {
    ptrs.push_back(b.data());
    lengths.push_back(b.size());
  }
  cjit_value* v = nullptr;
  Check(cjit_value_create_strings(dims.data(), dims.size(), ptrs.data(), lengths.data(), &v));
  Wrapped w;
  w.value.reset(v);
  return w;
}

Wrapped WrapInput(const std::string& name, const py::handle& obj, int32_t declared) {
  const std::string what = "input '" + name + "'";
  if (declared == CJIT_STRING) return WrapStrings(what, obj);
  if (py::isinstance<py::array>(obj)) {
    const char kind = py::reinterpret_borrow<py::array>(obj).dtype().kind();
    if (kind == 'U' || kind == 'S' || kind == 'O') return WrapStrings(what, obj);
  }
  if (py::isinstance<py::array>(obj)) return WrapArray(what, py::reinterpret_borrow<py::array>(obj), declared, false);
  // numpy scalars and Python numbers / sequences: numpy's conversion, without probing for __dlpack__.
  if (PyObject_IsInstance(obj.ptr(), g_numpy_generic.ptr()) == 1 || PyLong_Check(obj.ptr()) ||
      PyFloat_Check(obj.ptr()) || PyList_Check(obj.ptr()) || PyTuple_Check(obj.ptr())) {
    return WrapArray(what, AsContiguous(obj), declared, false);
  }
  if (py::hasattr(obj, "__dlpack__") && py::hasattr(obj, "__dlpack_device__")) {
    return WrapDlpack(what, py::reinterpret_borrow<py::object>(obj), declared);
  }
  // Lists, scalars, buffer-protocol objects: numpy's conversion (a copy).
  return WrapArray(what, AsContiguous(obj), declared, false);
}

// An input of declared `kind`: a tensor (WrapInput); a sequence from a list or tuple of array-likes (ONNX
// Runtime's Python convention); an optional from None (empty) or its element.
Wrapped WrapInputValue(const std::string& name, const py::handle& obj, int32_t declared, int32_t kind) {
  if (kind == CJIT_KIND_TENSOR) return WrapInput(name, obj, declared);
  Wrapped w;
  if (kind == CJIT_KIND_SEQUENCE) {
    if (!PyList_Check(obj.ptr()) && !PyTuple_Check(obj.ptr())) {
      Raise(PyExc_TypeError, "input '" + name + "' is a sequence: give a list of arrays");
    }
    std::vector<const cjit_value*> items;
    int32_t elem = declared;
    size_t k = 0;
    for (const py::handle item : py::reinterpret_borrow<py::sequence>(obj)) {
      w.parts.push_back(WrapInput(name + "[" + std::to_string(k++) + "]", item, declared));
      items.push_back(w.parts.back().value.get());
      if (elem == 0) elem = static_cast<int32_t>(cjit_value_dtype(items.back()));
    }
    cjit_value* v = nullptr;
    Check(cjit_value_create_sequence(static_cast<cjit_dtype>(elem == 0 ? CJIT_FLOAT32 : elem), items.data(),
                                     items.size(), &v));
    w.value.reset(v);
    return w;
  }
  const int32_t elem = declared == 0 ? CJIT_FLOAT32 : declared;
  cjit_value* v = nullptr;
  if (obj.is_none()) {
    Check(cjit_value_create_optional(static_cast<cjit_value_kind>(kind), static_cast<cjit_dtype>(elem), nullptr, &v));
  } else {
    w.parts.push_back(WrapInputValue(name, obj, declared,
                                     kind == CJIT_KIND_OPTIONAL_SEQUENCE ? CJIT_KIND_SEQUENCE : CJIT_KIND_TENSOR));
    const cjit_value* e = w.parts.back().value.get();
    Check(cjit_value_create_optional(static_cast<cjit_value_kind>(kind), cjit_value_dtype(e), e, &v));
  }
  w.value.reset(v);
  return w;
}

py::array ToNumpy(cjit_value* v);

// An output as Python: an array for a tensor, a list of arrays for a sequence, None or the element for an
// optional. Takes ownership of `v`.
py::object ToPython(cjit_value* v) {
  const cjit_value_kind kind = cjit_value_get_kind(v);
  if (kind == CJIT_KIND_TENSOR) return ToNumpy(v);
  ValuePtr owned(v);
  py::list items;
  for (size_t i = 0; i < cjit_value_count(v); ++i) {
    cjit_value* e = nullptr;
    Check(cjit_value_get_element(v, i, &e));
    items.append(ToPython(e));
  }
  if (kind == CJIT_KIND_SEQUENCE) return items;
  return items.empty() ? py::object(py::none()) : py::object(items[0]);
}

// A numpy array that owns `v` (no copy): the capsule frees the value with the array. String tensors become
// object arrays of str (as ONNX Runtime returns them; invalid UTF-8 bytes decode to U+FFFD).
py::array ToNumpy(cjit_value* v) {
  const size_t rank = cjit_value_rank(v);
  const int64_t* d = cjit_value_dims(v);
  std::vector<ssize_t> shape(d, d + rank);
  if (cjit_value_dtype(v) == CJIT_STRING) {
    ValuePtr owned(v);
    py::array out(py::dtype("O"), shape);
    size_t n = 1;
    for (ssize_t x : shape) n *= static_cast<size_t>(x);
    py::list items;
    for (size_t i = 0; i < n; ++i) {
      const char* p = nullptr;
      size_t len = 0;
      Check(cjit_value_get_string(v, i, &p, &len));
      PyObject* u = PyUnicode_DecodeUTF8(p, static_cast<Py_ssize_t>(len), "replace");
      if (u == nullptr) throw py::error_already_set();
      items.append(py::reinterpret_steal<py::object>(u));
    }
    if (n > 0) out.attr("reshape")(-1).attr("__setitem__")(py::slice(0, static_cast<ssize_t>(n), 1), items);
    return out;
  }
  py::dtype dt = NumpyDtype(static_cast<int32_t>(cjit_value_dtype(v)));
  void* data = cjit_value_data(v);
  if (data == nullptr) {  // an empty tensor
    cjit_value_free(v);
    return py::array(dt, shape);
  }
  py::capsule owner(v, [](void* p) { cjit_value_free(static_cast<cjit_value*>(p)); });
  return py::array(dt, shape, data, owner);
}

// ---- options ----

// A Python automatic-mixed-precision rule (SessionOptions.amp_rule): rule(op_type, node_name) returns
// "allow" / "infer" / "deny" / "clear", optionally as (class, output_float32), or None for no decision.
// Called while a signature is specialized, inside a run whose GIL is released, possibly from several
// threads: each call takes the GIL. An exception in the rule is reported as unraisable and counts as no
// decision.
struct AmpRule {
  py::object fn;
  ~AmpRule() {
    py::gil_scoped_acquire gil;
    fn = py::object();
  }
  static cjit_amp_class Call(const char* op_type, const char* node_name, int* output_float32, void* user) {
    auto* self = static_cast<AmpRule*>(user);
    py::gil_scoped_acquire gil;
    try {
      py::object r = self->fn(op_type, node_name);
      if (r.is_none()) return CJIT_AMP_NO_DECISION;
      py::object cls = r;
      if (py::isinstance<py::tuple>(r)) {
        auto t = py::reinterpret_borrow<py::tuple>(r);
        if (t.size() != 2) throw py::value_error("amp_rule: return a class or (class, output_float32)");
        cls = t[0];
        *output_float32 = py::bool_(t[1]) ? 1 : 0;
      }
      const std::string c = py::str(cls);
      if (c == "allow") return CJIT_AMP_ALLOW;
      if (c == "infer") return CJIT_AMP_INFER;
      if (c == "deny") return CJIT_AMP_DENY;
      if (c == "clear") return CJIT_AMP_CLEAR;
      throw py::value_error("amp_rule returned '" + c + "': expected allow, infer, deny, clear or None");
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("clusterjit amp_rule");
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
      PyErr_WriteUnraisable(nullptr);
    }
    return CJIT_AMP_NO_DECISION;
  }
};

class Options {
 public:
  Options() { Check(cjit_options_create(&o_)); }
  ~Options() { cjit_options_free(o_); }
  Options(const Options&) = delete;
  Options& operator=(const Options&) = delete;
  void Set(const std::string& name, const std::string& value) {
    Check(cjit_options_set(o_, name.c_str(), value.c_str()));
  }
  std::string Get(const std::string& name) const {
    return TextOut([&](char* b, size_t n, size_t* len) { return cjit_options_get(o_, name.c_str(), b, n, len); });
  }
  void SetFlags(const std::string& text) { Check(cjit_options_set_flags(o_, text.c_str())); }
  void UseEnvironment(bool on) { Check(cjit_options_use_environment(o_, on ? 1 : 0)); }
  void SetAmpRule(const py::object& fn) {
    if (fn.is_none()) {
      amp_rule_.reset();
      Check(cjit_options_set_amp_rule(o_, nullptr, nullptr));
      return;
    }
    if (!PyCallable_Check(fn.ptr())) Raise(PyExc_TypeError, "amp_rule must be callable(op_type, node_name)");
    amp_rule_ = std::make_shared<AmpRule>();
    amp_rule_->fn = fn;
    Check(cjit_options_set_amp_rule(o_, &AmpRule::Call, amp_rule_.get()));
  }
  const cjit_options* get() const { return o_; }
  // Sessions made from these options keep the rule alive.
  std::shared_ptr<AmpRule> amp_rule() const { return amp_rule_; }

 private:
  cjit_options* o_ = nullptr;
  std::shared_ptr<AmpRule> amp_rule_;
};

class RunOptions {
 public:
  RunOptions() { Check(cjit_run_options_create(&o_)); }
  ~RunOptions() { cjit_run_options_free(o_); }
  RunOptions(const RunOptions&) = delete;
  RunOptions& operator=(const RunOptions&) = delete;
  bool terminate() const { return cjit_run_options_get_terminate(o_) != 0; }
  void set_terminate(bool t) { cjit_run_options_set_terminate(o_, t ? 1 : 0); }
  cjit_run_options* get() { return o_; }

 private:
  cjit_run_options* o_ = nullptr;
};

// The per-run state of the main thread's interrupt check: Python's pending signals, polled with the GIL
// every 20 ms; a raised exception (KeyboardInterrupt) is kept and re-raised after the run.
// CLOCK_MONOTONIC_COARSE (a few ns, 1-4 ms resolution): the check runs at every step of a run.
int64_t CoarseNowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

struct InterruptCheck {
  int64_t next_ns = 0;
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;

  static int Poll(void* user) {
    auto* self = static_cast<InterruptCheck*>(user);
    if (self->type != nullptr) return 1;
    const int64_t now = CoarseNowNs();
    if (now < self->next_ns) return 0;
    self->next_ns = now + 20000000;
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() == 0) return 0;
    PyErr_Fetch(&self->type, &self->value, &self->traceback);
    return 1;
  }
};

// ---- sessions ----

class Session {
 public:
  Session(const py::object& model, const Options* options) {
    if (options != nullptr) amp_rule_ = options->amp_rule();
    cjit_status* st;
    if (py::isinstance<py::bytes>(model)) {
      std::string_view bytes = py::reinterpret_borrow<py::bytes>(model);
      py::gil_scoped_release release;
      st = cjit_session_create_from_bytes(bytes.data(), bytes.size(), nullptr, options ? options->get() : nullptr, &s_);
    } else {
      std::string path = py::str(model).cast<std::string>();
      py::gil_scoped_release release;
      st = cjit_session_create(path.c_str(), options ? options->get() : nullptr, &s_);
    }
    Check(st);
    for (size_t i = 0; i < cjit_session_input_count(s_); ++i) {
      in_names_.push_back(cjit_session_input_name(s_, i));
      int32_t dt = 0;
      int64_t rank = 0;
      Check(cjit_session_input_info(s_, i, &dt, nullptr, 0, &rank));
      in_dtypes_.push_back(dt);
      cjit_value_kind kind = CJIT_KIND_TENSOR;
      Check(cjit_session_input_kind(s_, i, &kind));
      in_kinds_.push_back(kind);
    }
    for (size_t i = 0; i < cjit_session_output_count(s_); ++i) out_names_.push_back(cjit_session_output_name(s_, i));
  }
  ~Session() {
    py::gil_scoped_release release;  // waits for runs in progress on other threads
    cjit_session_free(s_);
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // [(name, elem_type, [dim | symbol | None, ...] or None)]
  py::list Infos(bool inputs) const {
    py::list out;
    const size_t n = inputs ? in_names_.size() : out_names_.size();
    for (size_t i = 0; i < n; ++i) {
      int32_t dt = 0;
      int64_t rank = -1;
      std::vector<int64_t> dims(64);
      Check(inputs ? cjit_session_input_info(s_, i, &dt, dims.data(), dims.size(), &rank)
                   : cjit_session_output_info(s_, i, &dt, dims.data(), dims.size(), &rank));
      py::object shape = py::none();
      if (rank >= 0) {
        py::list l;
        for (int64_t a = 0; a < rank; ++a) {
          if (dims[a] >= 0) {
            l.append(dims[a]);
            continue;
          }
          const char* sym = inputs ? cjit_session_input_dim_name(s_, i, a) : cjit_session_output_dim_name(s_, i, a);
          if (sym != nullptr && *sym != '\0') l.append(py::str(sym));
          else l.append(py::none());
        }
        shape = l;
      }
      cjit_value_kind kind = CJIT_KIND_TENSOR;
      Check(inputs ? cjit_session_input_kind(s_, i, &kind) : cjit_session_output_kind(s_, i, &kind));
      out.append(py::make_tuple(inputs ? in_names_[i] : out_names_[i], dt, shape, static_cast<int>(kind)));
    }
    return out;
  }

  // feed: {name: array-like}; output_names: None/[] for all; bound: {output name: writable array} (io
  // binding). Returns the outputs asked for, in order (bound ones as the caller's arrays).
  py::list Run(const py::object& output_names, const py::dict& feed, RunOptions* run_options, const py::dict& bound) {
    std::vector<Wrapped> inputs;
    std::vector<const char*> names;
    std::vector<const cjit_value*> values;
    inputs.reserve(feed.size());
    names.reserve(feed.size());
    values.reserve(feed.size());
    for (auto item : feed) {
      if (!PyUnicode_Check(item.first.ptr())) Raise(PyExc_TypeError, "input names must be str");
      const char* name = PyUnicode_AsUTF8(item.first.ptr());
      if (name == nullptr) throw py::error_already_set();
      int32_t declared = 0, kind = CJIT_KIND_TENSOR;
      for (size_t i = 0; i < in_names_.size(); ++i) {
        if (in_names_[i] == name) {
          declared = in_dtypes_[i];
          kind = in_kinds_[i];
        }
      }
      inputs.push_back(WrapInputValue(name, item.second, declared, kind));
      names.push_back(name);
      values.push_back(inputs.back().value.get());
    }
    std::vector<std::string> asked;
    if (!output_names.is_none()) {
      for (auto n : output_names) asked.push_back(py::str(n).cast<std::string>());
    }
    const std::vector<std::string>& want = asked.empty() ? out_names_ : asked;
    std::vector<const char*> out_names;
    out_names.reserve(want.size());
    std::vector<cjit_value*> outs(want.size(), nullptr);
    std::vector<Wrapped> bound_values;
    bound_values.reserve(want.size());
    std::vector<py::object> bound_arrays(want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      out_names.push_back(want[i].c_str());
      if (bound.size() > 0 && bound.contains(want[i])) {
        py::object arr = bound[py::str(want[i])];
        if (!py::isinstance<py::array>(arr))
          Raise(PyExc_TypeError, "bound output '" + want[i] + "' must be a numpy array");
        bound_values.push_back(
            WrapArray("bound output '" + want[i] + "'", py::reinterpret_borrow<py::array>(arr), 0, true));
        outs[i] = bound_values.back().value.get();
        bound_arrays[i] = arr;
      }
    }
    InterruptCheck interrupt;
    struct Both {
      InterruptCheck* interrupt;
      cjit_run_options* shared;
    } both{&interrupt, run_options ? run_options->get() : nullptr};
    const bool main_thread = PyThread_get_thread_ident() == g_main_thread;
    cjit_run_options* ro = run_options ? run_options->get() : nullptr;
    cjit_run_options* own = nullptr;
    bool own_is_main = false;
    if (main_thread) {
      // The main thread receives KeyboardInterrupt: poll for it during the run. Run options shared with
      // other threads are not modified: the main thread's own options carry the check (and follow the
      // caller's terminate flag through it). A run nested in a signal handler gets fresh ones.
      if (!g_main_options_busy) {
        own = g_main_options;
        own_is_main = g_main_options_busy = true;
      } else {
        Check(cjit_run_options_create(&own));
      }
      Check(cjit_run_options_set_interrupt_check(
          own,
          [](void* user) -> int {
            auto* b = static_cast<Both*>(user);
            if (b->shared != nullptr && cjit_run_options_get_terminate(b->shared)) return 1;
            return InterruptCheck::Poll(b->interrupt);
          },
          &both));
      interrupt.next_ns = CoarseNowNs() + 20000000;
    }
    cjit_status* st;
    {
      py::gil_scoped_release release;
      st = cjit_session_run_with_options(s_, own ? own : ro, names.data(), values.data(), values.size(),
                                         out_names.data(), outs.data(), outs.size());
    }
    if (own_is_main) {
      g_main_options_busy = false;
    } else if (own != nullptr) {
      cjit_run_options_free(own);
    }
    if (interrupt.type != nullptr) {
      if (st != nullptr) cjit_status_free(st);
      for (size_t i = 0; i < outs.size(); ++i) {
        if (outs[i] != nullptr && !bound_arrays[i]) cjit_value_free(outs[i]);
      }
      PyErr_Restore(interrupt.type, interrupt.value, interrupt.traceback);
      throw py::error_already_set();
    }
    if (st != nullptr && own != nullptr && ro != nullptr && cjit_status_code(st) == CJIT_CANCELLED &&
        cjit_run_options_get_terminate(ro)) {
      // Stopped through the copy: say so in the words of the caller's own options.
      cjit_status_free(st);
      Raise(g_errors_by_code[py::int_(static_cast<int>(CJIT_CANCELLED))].ptr(),
            "run cancelled by RunOptions.terminate");
    }
    Check(st);
    py::list result;
    for (size_t i = 0; i < outs.size(); ++i) {
      if (bound_arrays[i]) {
        result.append(bound_arrays[i]);
      } else {
        result.append(ToPython(outs[i]));
      }
    }
    return result;
  }

  // Benchmark baseline (tools/python-bench.py): `runs` runs of the C API alone on these inputs, as a C host
  // does them — wrap the input buffers, run with library-allocated outputs, free the values — timed one
  // by one, GIL released. Seconds.
  std::vector<double> TimeCApiRuns(const py::dict& feed, int runs) {
    std::vector<Wrapped> inputs;
    std::vector<const char*> names;
    std::vector<const cjit_value*> values;
    std::vector<std::string> keys;
    for (auto item : feed) keys.push_back(py::str(item.first).cast<std::string>());
    inputs.reserve(keys.size());
    size_t k = 0;
    for (auto item : feed) {
      int32_t declared = 0;
      for (size_t i = 0; i < in_names_.size(); ++i) {
        if (in_names_[i] == keys[k]) declared = in_dtypes_[i];
      }
      inputs.push_back(WrapInput(keys[k], item.second, declared));
      names.push_back(keys[k].c_str());
      values.push_back(inputs.back().value.get());
      ++k;
    }
    std::vector<double> seconds;
    seconds.reserve(runs);
    std::vector<cjit_value*> outs(out_names_.size(), nullptr);
    cjit_status* st = nullptr;
    {
      py::gil_scoped_release release;
      std::vector<cjit_value*> fresh(values.size(), nullptr);
      for (int r = 0; r < runs && st == nullptr; ++r) {
        const auto start = std::chrono::steady_clock::now();
        // As a C host with new data each run: wrap the inputs, run, free everything.
        for (size_t i = 0; i < values.size() && st == nullptr; ++i) {
          cjit_value* v = const_cast<cjit_value*>(values[i]);
          st = cjit_value_wrap(cjit_value_dtype(v), cjit_value_dims(v), cjit_value_rank(v), cjit_value_data(v),
                               cjit_value_bytes(v), &fresh[i]);
        }
        if (st == nullptr) {
          st = cjit_session_run(s_, names.data(), const_cast<const cjit_value* const*>(fresh.data()), fresh.size(),
                                nullptr, outs.data(), outs.size());
        }
        for (cjit_value*& v : fresh) {
          cjit_value_free(v);
          v = nullptr;
        }
        for (cjit_value*& v : outs) {
          cjit_value_free(v);
          v = nullptr;
        }
        seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
    }
    Check(st);
    return seconds;
  }

  std::string EndProfiling() {
    return TextOut([&](char* b, size_t n, size_t* len) { return cjit_session_end_profiling(s_, b, n, len); });
  }
  std::string MetadataJson() const {
    return TextOut([&](char* b, size_t n, size_t* len) { return cjit_session_metadata_json(s_, b, n, len); });
  }
  std::string StatsJson() const {
    return TextOut([&](char* b, size_t n, size_t* len) { return cjit_session_stats_json(s_, b, n, len); });
  }
  std::string Device() const { return cjit_session_device(s_); }

 private:
  cjit_session* s_ = nullptr;
  std::shared_ptr<AmpRule> amp_rule_;  // alive until s_ is freed (in ~Session's body)
  std::vector<std::string> in_names_, out_names_;
  std::vector<int32_t> in_dtypes_, in_kinds_;
};

// The pointer an input would be read from (tests check that wrapping did not copy).
uintptr_t InputDataPointer(const py::handle& obj) {
  Wrapped w = WrapInput("x", obj, 0);
  return reinterpret_cast<uintptr_t>(w.data);
}

}  // namespace

PYBIND11_MODULE(_clusterjit, m) {
  m.doc() = "clusterjit's C API for Python (use the clusterjit package, not this module)";
  g_errors_by_code = py::object(py::module_::import("clusterjit._errors").attr("BY_CODE")).release();
  try {
    g_bfloat16 =
        py::module_::import("numpy").attr("dtype")(py::module_::import("ml_dtypes").attr("bfloat16")).release();
  } catch (py::error_already_set&) {
    g_bfloat16 = py::none().release();
  }
  for (int32_t code : {CJIT_FLOAT32, CJIT_UINT8, CJIT_INT8, CJIT_UINT16, CJIT_INT16, CJIT_INT32, CJIT_INT64, CJIT_BOOL,
                       CJIT_FLOAT16, CJIT_FLOAT64, CJIT_UINT32, CJIT_UINT64, CJIT_BFLOAT16}) {
    g_dtypes[code] = NumpyDtypeUncached(code).release();
  }
  Check(cjit_run_options_create(&g_main_options));
  g_numpy_generic = py::object(py::module_::import("numpy").attr("generic")).release();
  g_main_thread = py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();

  m.def("version", [] { return std::string(cjit_version()); });
  m.def("flags_json",
        [] { return TextOut([](char* b, size_t n, size_t* len) { return cjit_flags_json(b, n, len); }); });
  m.def("input_data_pointer", &InputDataPointer);
  m.attr("HAS_BFLOAT16_DTYPE") = !g_bfloat16.is_none();

  py::class_<Options>(m, "Options")
      .def(py::init<>())
      .def("set", &Options::Set)
      .def("get", &Options::Get)
      .def("set_flags", &Options::SetFlags)
      .def("use_environment", &Options::UseEnvironment)
      .def("set_amp_rule", &Options::SetAmpRule);

  py::class_<RunOptions>(m, "RunOptions")
      .def(py::init<>())
      .def_property("terminate", &RunOptions::terminate, &RunOptions::set_terminate);

  py::class_<Session>(m, "Session")
      .def(py::init<const py::object&, const Options*>(), py::arg("model"), py::arg("options") = nullptr)
      .def("inputs", [](const Session& s) { return s.Infos(true); })
      .def("outputs", [](const Session& s) { return s.Infos(false); })
      .def("run", &Session::Run, py::arg("output_names"), py::arg("feed"), py::arg("run_options") = nullptr,
           py::arg("bound") = py::dict())
      .def("time_c_api_runs", &Session::TimeCApiRuns)
      .def("end_profiling", &Session::EndProfiling)
      .def("metadata_json", &Session::MetadataJson)
      .def("stats_json", &Session::StatsJson)
      .def("device", &Session::Device);
}
