// clusterjit C++ API: a thin, header-only RAII layer over the C API (clusterjit.h), the recommended C++
// interface. Requires C++17; includes only the C++ standard library and clusterjit.h. Errors throw
// cjit::Error (code + message of the C status); nothing else throws. Thread-safety and ownership are those
// of the C API: Session::Run may be called from many threads at once.
//
//   cjit::Options opt;
//   opt.Set("intra_op_threads", "2");
//   cjit::Session session("model.onnx", opt);
//   std::vector<float> pixels(1 * 3 * 48 * 192);
//   cjit::Value x = cjit::Value::Wrap<float>(pixels.data(), pixels.size(), {1, 3, 48, 192});   // no copy
//   std::vector<cjit::Value> out = session.Run({{"x", &x}});                                   // allocated
//   cjit::Span<const float> probs = out[0].Data<float>();
//   // or bound: cjit::Value y = cjit::Value::Wrap<float>(buf, 2, {1, 2}); session.Run({{"x", &x}}, {{"softmax", &y}});
#ifndef CLUSTERJIT_CLUSTERJIT_HPP_
#define CLUSTERJIT_CLUSTERJIT_HPP_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#if __cplusplus >= 202002L && __has_include(<span>)
#include <span>
#endif

#include "clusterjit/clusterjit.h"

namespace cjit {

// A view of contiguous elements: pointer and count. Converts to std::span under C++20.
template <typename T>
class Span {
 public:
  Span() = default;
  Span(T* data, size_t size) : data_(data), size_(size) {}
  T* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) const { return data_[i]; }
  T* begin() const { return data_; }
  T* end() const { return data_ + size_; }
#if __cplusplus >= 202002L && __has_include(<span>)
  operator std::span<T>() const { return std::span<T>(data_, size_); }
#endif

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

// A failed C API call: its code (cjit_code) and message.
class Error : public std::runtime_error {
 public:
  Error(cjit_code code, const std::string& message) : std::runtime_error(message), code_(code) {}
  cjit_code code() const { return code_; }

 private:
  cjit_code code_;
};

namespace detail {
// Throws for a non-NULL status (freeing it).
inline void Check(cjit_status* status) {
  if (status == nullptr) return;
  cjit_code code = cjit_status_code(status);
  std::string message = cjit_status_message(status);
  cjit_status_free(status);
  throw Error(code, message);
}
template <typename T>
struct DtypeOf;
template <> struct DtypeOf<float> { static constexpr cjit_dtype value = CJIT_FLOAT32; };
template <> struct DtypeOf<double> { static constexpr cjit_dtype value = CJIT_FLOAT64; };
template <> struct DtypeOf<int8_t> { static constexpr cjit_dtype value = CJIT_INT8; };
template <> struct DtypeOf<uint8_t> { static constexpr cjit_dtype value = CJIT_UINT8; };
template <> struct DtypeOf<int16_t> { static constexpr cjit_dtype value = CJIT_INT16; };
template <> struct DtypeOf<uint16_t> { static constexpr cjit_dtype value = CJIT_UINT16; };
template <> struct DtypeOf<int32_t> { static constexpr cjit_dtype value = CJIT_INT32; };
template <> struct DtypeOf<uint32_t> { static constexpr cjit_dtype value = CJIT_UINT32; };
template <> struct DtypeOf<int64_t> { static constexpr cjit_dtype value = CJIT_INT64; };
template <> struct DtypeOf<uint64_t> { static constexpr cjit_dtype value = CJIT_UINT64; };
template <> struct DtypeOf<bool> { static constexpr cjit_dtype value = CJIT_BOOL; };
}  // namespace detail

inline std::string Version() { return cjit_version(); }

// Routes clusterjit's log messages to `callback` (see cjit_set_log_callback); nullptr restores stderr.
inline void SetLogCallback(cjit_log_callback callback, void* user_data) { cjit_set_log_callback(callback, user_data); }

class Options {
 public:
  Options() { detail::Check(cjit_options_create(&handle_)); }
  ~Options() { cjit_options_free(handle_); }
  Options(const Options&) = delete;
  Options& operator=(const Options&) = delete;
  Options(Options&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)) {}
  Options& operator=(Options&& o) noexcept {
    std::swap(handle_, o.handle_);
    return *this;
  }
  // Any CJIT_FLAGS flag by name ("intra_op_threads"), validated.
  Options& Set(const std::string& name, const std::string& value) {
    detail::Check(cjit_options_set(handle_, name.c_str(), value.c_str()));
    return *this;
  }
  Options& SetFlags(const std::string& text) {
    detail::Check(cjit_options_set_flags(handle_, text.c_str()));
    return *this;
  }
  Options& UseEnvironment(bool enable = true) {
    detail::Check(cjit_options_use_environment(handle_, enable ? 1 : 0));
    return *this;
  }
  // The automatic-mixed-precision rule of cjit_options_set_amp_rule (NULL removes it); must be thread-safe.
  Options& SetAmpRule(cjit_amp_rule rule, void* user_data = nullptr) {
    detail::Check(cjit_options_set_amp_rule(handle_, rule, user_data));
    return *this;
  }
  std::string Get(const std::string& name) const {
    size_t length = 0;
    cjit_status* st = cjit_options_get(handle_, name.c_str(), nullptr, 0, &length);
    if (cjit_status_code(st) != CJIT_INVALID_ARGUMENT) detail::Check(st);  // unknown name
    cjit_status_free(st);
    std::string out(length + 1, '\0');
    detail::Check(cjit_options_get(handle_, name.c_str(), &out[0], out.size(), &length));
    out.resize(length);
    return out;
  }
  const cjit_options* get() const { return handle_; }

 private:
  cjit_options* handle_ = nullptr;
};

class Value {
 public:
  Value() = default;
  // Takes ownership of a C handle.
  explicit Value(cjit_value* handle) : handle_(handle) {}
  ~Value() { cjit_value_free(handle_); }
  Value(const Value&) = delete;
  Value& operator=(const Value&) = delete;
  Value(Value&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)) {}
  Value& operator=(Value&& o) noexcept {
    std::swap(handle_, o.handle_);
    return *this;
  }

  // A tensor with a buffer the library allocates.
  static Value Create(cjit_dtype dtype, const std::vector<int64_t>& dims) {
    cjit_value* v = nullptr;
    detail::Check(cjit_value_create(dtype, dims.data(), dims.size(), &v));
    return Value(v);
  }
  // A tensor over the caller's `count` elements at `data`, without a copy (see cjit_value_wrap).
  template <typename T>
  static Value Wrap(T* data, size_t count, const std::vector<int64_t>& dims) {
    cjit_value* v = nullptr;
    detail::Check(cjit_value_wrap(detail::DtypeOf<std::remove_const_t<T>>::value, dims.data(), dims.size(),
                                  const_cast<std::remove_const_t<T>*>(data), count * sizeof(T), &v));
    return Value(v);
  }

  // The same with the dtype given at run time (e.g. read from a file) and the buffer's size in bytes.
  static Value Wrap(cjit_dtype dtype, const std::vector<int64_t>& dims, void* data, size_t bytes) {
    cjit_value* v = nullptr;
    detail::Check(cjit_value_wrap(dtype, dims.data(), dims.size(), data, bytes, &v));
    return Value(v);
  }

  // A sequence of tensors of `elem` (shared, not copied; see cjit_value_create_sequence).
  static Value Sequence(cjit_dtype elem, const std::vector<const Value*>& items) {
    std::vector<const cjit_value*> handles;
    for (const Value* item : items) handles.push_back(item ? item->get() : nullptr);
    cjit_value* v = nullptr;
    detail::Check(cjit_value_create_sequence(elem, handles.data(), handles.size(), &v));
    return Value(v);
  }
  // An optional holding `element` (a tensor or a sequence), or, with element null, an empty optional of
  // `kind` and `elem` (see cjit_value_create_optional).
  static Value Optional(cjit_value_kind kind, cjit_dtype elem, const Value* element) {
    cjit_value* v = nullptr;
    detail::Check(cjit_value_create_optional(kind, elem, element ? element->get() : nullptr, &v));
    return Value(v);
  }

  explicit operator bool() const { return handle_ != nullptr; }
  cjit_value_kind kind() const { return cjit_value_get_kind(handle_); }
  // Tensors in a sequence; 1 or 0 for an optional; 0 for a tensor.
  size_t count() const { return cjit_value_count(handle_); }
  // Element `index` of a sequence, or an optional's element (index 0), sharing its data.
  Value Element(size_t index) const {
    cjit_value* v = nullptr;
    detail::Check(cjit_value_get_element(handle_, index, &v));
    return Value(v);
  }
  cjit_dtype dtype() const { return cjit_value_dtype(handle_); }
  std::vector<int64_t> dims() const {
    const int64_t* d = cjit_value_dims(handle_);
    return std::vector<int64_t>(d, d + cjit_value_rank(handle_));
  }
  size_t bytes() const { return cjit_value_bytes(handle_); }
  // The elements as T (throws when T is not the value's dtype).
  template <typename T>
  Span<T> Data() {
    if (detail::DtypeOf<std::remove_const_t<T>>::value != dtype()) {
      throw Error(CJIT_INVALID_ARGUMENT, "Value::Data: the element type does not match the value's dtype");
    }
    return Span<T>(static_cast<T*>(cjit_value_data(handle_)), bytes() / sizeof(T));
  }
  cjit_value* get() const { return handle_; }
  cjit_value* release() { return std::exchange(handle_, nullptr); }

 private:
  cjit_value* handle_ = nullptr;
};

class Session {
 public:
  Session(const std::string& model_path, const Options& options) {
    detail::Check(cjit_session_create(model_path.c_str(), options.get(), &handle_));
  }
  explicit Session(const std::string& model_path) {
    detail::Check(cjit_session_create(model_path.c_str(), nullptr, &handle_));
  }
  // Waits for runs in progress (see cjit_session_free).
  ~Session() { cjit_session_free(handle_); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  Session(Session&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)) {}
  Session& operator=(Session&& o) noexcept {
    std::swap(handle_, o.handle_);
    return *this;
  }

  std::vector<std::string> InputNames() const {
    std::vector<std::string> out;
    for (size_t i = 0; i < cjit_session_input_count(handle_); ++i) out.push_back(cjit_session_input_name(handle_, i));
    return out;
  }
  std::vector<std::string> OutputNames() const {
    std::vector<std::string> out;
    for (size_t i = 0; i < cjit_session_output_count(handle_); ++i) out.push_back(cjit_session_output_name(handle_, i));
    return out;
  }

  // Runs with named inputs; returns every model output, allocated by the library, in model order.
  std::vector<Value> Run(const std::vector<std::pair<std::string, const Value*>>& inputs) {
    std::vector<const char*> names;
    std::vector<const cjit_value*> values;
    for (const auto& [n, v] : inputs) {
      names.push_back(n.c_str());
      values.push_back(v ? v->get() : nullptr);
    }
    std::vector<cjit_value*> out(cjit_session_output_count(handle_), nullptr);
    detail::Check(cjit_session_run(handle_, names.data(), values.data(), values.size(), nullptr, out.data(), out.size()));
    std::vector<Value> result;
    for (cjit_value* v : out) result.emplace_back(v);
    return result;
  }
  // Runs with named inputs and bound outputs: each result is written into the given value's buffer.
  void Run(const std::vector<std::pair<std::string, const Value*>>& inputs,
           const std::vector<std::pair<std::string, Value*>>& bound) {
    std::vector<const char*> names, out_names;
    std::vector<const cjit_value*> values;
    std::vector<cjit_value*> out;
    for (const auto& [n, v] : inputs) {
      names.push_back(n.c_str());
      values.push_back(v ? v->get() : nullptr);
    }
    for (const auto& [n, v] : bound) {
      if (v == nullptr || !*v) throw Error(CJIT_INVALID_ARGUMENT, "Session::Run: bound output '" + n + "' has no value");
      out_names.push_back(n.c_str());
      out.push_back(v->get());
    }
    detail::Check(cjit_session_run(handle_, names.data(), values.data(), values.size(), out_names.data(), out.data(),
                                   out.size()));
  }
  cjit_session* get() const { return handle_; }

 private:
  cjit_session* handle_ = nullptr;
};

}  // namespace cjit

#endif  // CLUSTERJIT_CLUSTERJIT_HPP_
