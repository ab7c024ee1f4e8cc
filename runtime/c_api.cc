// The C API (include/clusterjit/clusterjit.h) over the internal Session. Every entry point catches every
// exception (CatchAsStatus), checks its pointers, and converts absl::Status into cjit_status.
#include "clusterjit/clusterjit.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "base/status_macros.h"
#include "compiler/onnx/tensor_proto.h"
#include "flags/flags.h"
#include "base/logging.h"
#include "runtime/session.h"
#include "runtime/stats_json.h"
#include "base/mutex.h"

struct cjit_status {
  cjit_code code;
  std::string message;
};

struct cjit_options {
  cjit::Flags flags;
  bool use_environment = false;
  // Flags set through this object, re-applied on top of CJIT_FLAGS when use_environment is on.
  std::vector<std::pair<std::string, std::string>> set;
  cjit_amp_rule amp_rule = nullptr;
  void* amp_user_data = nullptr;
};

struct cjit_value {
  cjit::Tensor tensor;
  bool wrapped = false;
};

struct cjit_run_options {
  std::atomic<bool> terminate{false};
  cjit_interrupt_check check = nullptr;
  void* check_user_data = nullptr;
};

struct cjit_session {
  struct Guts {
    std::unique_ptr<cjit::Session> session;
    std::vector<std::string> input_names, output_names;
    std::string device;
    cjit::Mutex mu;
    cjit::CondVar idle;  // signalled when `active` drops
    int active ABSL_GUARDED_BY(mu) = 0;
    bool closing ABSL_GUARDED_BY(mu) = false;
  };
  std::shared_ptr<Guts> guts;
};

namespace {

cjit_status* ToStatus(const absl::Status& s) {
  if (s.ok()) return nullptr;
  return new (std::nothrow) cjit_status{static_cast<cjit_code>(static_cast<int>(s.code())), std::string(s.message())};
}

cjit_status* Error(cjit_code code, std::string message) {
  return new (std::nothrow) cjit_status{code, std::move(message)};
}

// Runs `fn` (returning absl::Status) with every exception turned into a status.
template <typename F>
cjit_status* Guard(const char* what, F&& fn) {
  return ToStatus(cjit::CatchAsStatus(what, [&]() -> absl::Status { return fn(); }));
}

cjit_status* CopyOut(const std::string& text, char* buffer, size_t size, size_t* length) {
  if (length) *length = text.size();
  if (buffer == nullptr || size < text.size() + 1) {
    return Error(CJIT_INVALID_ARGUMENT, absl::StrCat("buffer of ", size, " bytes is too small: ", text.size() + 1,
                                                     " needed"));
  }
  std::memcpy(buffer, text.c_str(), text.size() + 1);
  return nullptr;
}

absl::StatusOr<cjit::DType> CheckDtype(cjit_dtype dtype) {
  cjit::DType t = cjit::DTypeFromOnnxCode(dtype);
  if (t == cjit::DType::kInvalid) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported dtype code ", static_cast<int>(dtype)));
  }
  return t;
}

absl::StatusOr<cjit::Dims> CheckDims(const int64_t* dims, size_t rank) {
  if (rank > 0 && dims == nullptr) return absl::InvalidArgumentError("dims is NULL but rank is not 0");
  if (rank > 64) return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is too large"));
  cjit::Dims d(dims, dims + rank);
  for (int64_t x : d) {
    if (x < 0) return absl::InvalidArgumentError(absl::StrCat("negative dim in ", cjit::DimsToString(d)));
  }
  return d;
}

absl::Status Info(const cjit::TensorInfo& info, int32_t* dtype, int64_t* dims, size_t capacity, int64_t* rank) {
  if (dtype) *dtype = info.dtype == cjit::DType::kInvalid ? 0 : cjit::OnnxCodeFromDType(info.dtype);
  if (rank) *rank = info.shape.rank_known ? info.shape.rank() : -1;
  if (dims != nullptr && info.shape.rank_known) {
    for (size_t i = 0; i < capacity && i < info.shape.dims.size(); ++i) dims[i] = info.shape.dims[i].value;
  }
  return absl::OkStatus();
}

const char* DimName(const std::vector<cjit::TensorInfo>& infos, size_t index, size_t axis) {
  if (index >= infos.size() || !infos[index].shape.rank_known || axis >= infos[index].shape.dims.size()) {
    return nullptr;
  }
  const cjit::Dim& d = infos[index].shape.dims[axis];
  return d.known() ? "" : d.symbol.c_str();
}

absl::StatusOr<cjit::SessionOptions> MakeSessionOptions(const cjit_options* options) {
  cjit::SessionOptions o;
  o.use_environment_flags = false;
  if (options == nullptr) return o;
  if (options->amp_rule != nullptr) {
    cjit_amp_rule rule = options->amp_rule;
    void* user = options->amp_user_data;
    o.amp_rule = [rule, user](const cjit::Node& n) -> std::optional<cjit::AmpRule> {
      int output_float32 = 0;
      const cjit_amp_class c = rule(n.op_type.c_str(), n.name.c_str(), &output_float32, user);
      if (c < CJIT_AMP_ALLOW || c > CJIT_AMP_CLEAR) return std::nullopt;  // no decision (or out of range)
      cjit::AmpRule r;
      static_assert(static_cast<int>(cjit::AmpClass::kAllow) == CJIT_AMP_ALLOW &&
                    static_cast<int>(cjit::AmpClass::kClear) == CJIT_AMP_CLEAR, "AMP class values");
      r.cls = static_cast<cjit::AmpClass>(static_cast<int>(c));
      r.output = output_float32 ? cjit::DType::kF32 : cjit::DType::kInvalid;
      return r;
    };
  }
  if (!options->use_environment) {
    o.flags = options->flags;
    return o;
  }
  const absl::StatusOr<cjit::Flags>& env = cjit::FlagsFromEnvironment();
  if (!env.ok()) return env.status();
  o.flags = *env;
  for (const auto& [name, value] : options->set) CJIT_RETURN_IF_ERROR(cjit::SetFlag(o.flags, name, value));
  return o;
}

cjit_status* FinishCreate(absl::StatusOr<std::unique_ptr<cjit::Session>> s, cjit_session** out) {
  if (!s.ok()) return ToStatus(s.status());
  auto guts = std::make_shared<cjit_session::Guts>();
  for (const auto& i : (*s)->inputs()) guts->input_names.push_back(i.name);
  for (const auto& o : (*s)->outputs()) guts->output_names.push_back(o.name);
  guts->device = (*s)->device();
  guts->session = std::move(*s);
  *out = new cjit_session{std::move(guts)};
  return nullptr;
}

}  // namespace

extern "C" {

cjit_code cjit_status_code(const cjit_status* status) { return status ? status->code : CJIT_OK; }
const char* cjit_status_message(const cjit_status* status) { return status ? status->message.c_str() : ""; }
void cjit_status_free(cjit_status* status) { delete status; }

const char* cjit_version(void) {
  static const std::string v =
      absl::StrCat(CJIT_VERSION_MAJOR, ".", CJIT_VERSION_MINOR, ".", CJIT_VERSION_PATCH);
  return v.c_str();
}

void cjit_set_log_callback(cjit_log_callback callback, void* user_data) {
  if (callback == nullptr) {
    cjit::SetLogSink(nullptr);
    return;
  }
  cjit::SetLogSink([callback, user_data](cjit::LogSeverity severity, const char* file, int line,
                                         std::string_view message) {
    std::string text(message);
    callback(user_data, static_cast<cjit_log_severity>(static_cast<int>(severity)), file, line, text.c_str());
  });
}

// ---- options ----

cjit_status* cjit_options_create(cjit_options** out) {
  if (out == nullptr) return Error(CJIT_INVALID_ARGUMENT, "cjit_options_create: out is NULL");
  return Guard("cjit_options_create", [&]() -> absl::Status {
    auto o = std::make_unique<cjit_options>();
    CJIT_ASSIGN_OR_RETURN(o->flags, cjit::ParseFlags("", cjit::Flags{}, "options"));
    *out = o.release();
    return absl::OkStatus();
  });
}

void cjit_options_free(cjit_options* options) { delete options; }

cjit_status* cjit_options_set(cjit_options* options, const char* name, const char* value) {
  if (options == nullptr || name == nullptr || value == nullptr) {
    return Error(CJIT_INVALID_ARGUMENT, "cjit_options_set: options, name and value must not be NULL");
  }
  return Guard("cjit_options_set", [&]() -> absl::Status {
    std::string n = name;
    if (n.rfind("--", 0) == 0) n = n.substr(2);
    CJIT_RETURN_IF_ERROR(cjit::SetFlag(options->flags, n, value, "cjit_options_set"));
    options->set.emplace_back(n, value);
    return absl::OkStatus();
  });
}

cjit_status* cjit_options_get(const cjit_options* options, const char* name, char* buffer, size_t size,
                              size_t* length) {
  if (options == nullptr || name == nullptr) {
    return Error(CJIT_INVALID_ARGUMENT, "cjit_options_get: options and name must not be NULL");
  }
  absl::StatusOr<std::string> v = cjit::GetFlag(options->flags, name);
  if (!v.ok()) return ToStatus(v.status());
  return CopyOut(*v, buffer, size, length);
}

cjit_status* cjit_options_set_amp_rule(cjit_options* options, cjit_amp_rule rule, void* user_data) {
  if (options == nullptr) return Error(CJIT_INVALID_ARGUMENT, "cjit_options_set_amp_rule: options must not be NULL");
  options->amp_rule = rule;
  options->amp_user_data = rule != nullptr ? user_data : nullptr;
  return nullptr;
}

cjit_status* cjit_options_set_flags(cjit_options* options, const char* text) {
  if (options == nullptr || text == nullptr) {
    return Error(CJIT_INVALID_ARGUMENT, "cjit_options_set_flags: options and text must not be NULL");
  }
  return Guard("cjit_options_set_flags", [&]() -> absl::Status {
    CJIT_ASSIGN_OR_RETURN(options->flags, cjit::ParseFlags(text, options->flags, "cjit_options_set_flags"));
    // Remember them for use_environment: re-parsing the same text reproduces them on top of CJIT_FLAGS.
    cjit::Flags probe;
    CJIT_ASSIGN_OR_RETURN(probe, cjit::ParseFlags(text, cjit::Flags{}, "cjit_options_set_flags"));
    for (const cjit::FlagInfo& f : cjit::ListFlags()) {
      absl::StatusOr<std::string> now = cjit::GetFlag(probe, f.name);
      absl::StatusOr<std::string> dflt = cjit::GetFlag(cjit::ParseFlags("").value(), f.name);
      if (now.ok() && dflt.ok() && *now != *dflt) options->set.emplace_back(f.name, *now);
    }
    return absl::OkStatus();
  });
}

cjit_status* cjit_options_use_environment(cjit_options* options, int enable) {
  if (options == nullptr) return Error(CJIT_INVALID_ARGUMENT, "cjit_options_use_environment: options is NULL");
  options->use_environment = enable != 0;
  return nullptr;
}

// ---- values ----

cjit_status* cjit_value_create(cjit_dtype dtype, const int64_t* dims, size_t rank, cjit_value** out) {
  if (out == nullptr) return Error(CJIT_INVALID_ARGUMENT, "cjit_value_create: out is NULL");
  return Guard("cjit_value_create", [&]() -> absl::Status {
    CJIT_ASSIGN_OR_RETURN(cjit::DType t, CheckDtype(dtype));
    CJIT_ASSIGN_OR_RETURN(cjit::Dims d, CheckDims(dims, rank));
    CJIT_RETURN_IF_ERROR(cjit::CheckedByteSize(t, d).status());
    *out = new cjit_value{cjit::Tensor(t, std::move(d)), false};
    return absl::OkStatus();
  });
}

cjit_status* cjit_value_wrap(cjit_dtype dtype, const int64_t* dims, size_t rank, void* data, size_t bytes,
                             cjit_value** out) {
  if (out == nullptr) return Error(CJIT_INVALID_ARGUMENT, "cjit_value_wrap: out is NULL");
  return Guard("cjit_value_wrap", [&]() -> absl::Status {
    CJIT_ASSIGN_OR_RETURN(cjit::DType t, CheckDtype(dtype));
    if (t == cjit::DType::kString) {
      return absl::InvalidArgumentError(
          "cjit_value_wrap: string tensors cannot wrap a buffer (use cjit_value_create_strings)");
    }
    CJIT_ASSIGN_OR_RETURN(cjit::Dims d, CheckDims(dims, rank));
    CJIT_ASSIGN_OR_RETURN(size_t need, cjit::CheckedByteSize(t, d));
    if (bytes != need) {
      return absl::InvalidArgumentError(absl::StrCat("cjit_value_wrap: a ", cjit::DTypeName(t), "[",
                                                     cjit::DimsToString(d), "] tensor takes ", need,
                                                     " bytes, the buffer has ", bytes));
    }
    if (need > 0 && data == nullptr) return absl::InvalidArgumentError("cjit_value_wrap: data is NULL");
    if (reinterpret_cast<uintptr_t>(data) % cjit::DTypeSize(t) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("cjit_value_wrap: data is not aligned to the ",
                                                     cjit::DTypeSize(t), "-byte element size"));
    }
    *out = new cjit_value{cjit::Tensor::Wrap(t, std::move(d), data), true};
    return absl::OkStatus();
  });
}

void cjit_value_free(cjit_value* value) { delete value; }

cjit_dtype cjit_value_dtype(const cjit_value* value) {
  return value ? static_cast<cjit_dtype>(cjit::OnnxCodeFromDType(value->tensor.dtype())) : static_cast<cjit_dtype>(0);
}
size_t cjit_value_rank(const cjit_value* value) {
  return value && value->tensor.is_tensor() ? value->tensor.dims().size() : 0;
}
const int64_t* cjit_value_dims(const cjit_value* value) {
  return value && value->tensor.is_tensor() ? value->tensor.dims().data() : nullptr;
}
size_t cjit_value_bytes(const cjit_value* value) {
  return value && value->tensor.dtype() != cjit::DType::kString ? value->tensor.nbytes() : 0;
}
void* cjit_value_data(cjit_value* value) {
  return value && value->tensor.nbytes() > 0 && value->tensor.dtype() != cjit::DType::kString ? value->tensor.raw()
                                                                                                : nullptr;
}

cjit_status* cjit_value_create_strings(const int64_t* dims, size_t rank, const char* const* strings,
                                       const size_t* lengths, cjit_value** out) {
  if (out == nullptr) return Error(CJIT_INVALID_ARGUMENT, "cjit_value_create_strings: out is NULL");
  return Guard("cjit_value_create_strings", [&]() -> absl::Status {
    CJIT_ASSIGN_OR_RETURN(cjit::Dims d, CheckDims(dims, rank));
    CJIT_RETURN_IF_ERROR(cjit::CheckedByteSize(cjit::DType::kString, d).status());
    cjit::Tensor t(cjit::DType::kString, std::move(d));
    const int64_t n = t.numel();
    if (n > 0 && strings == nullptr) return absl::InvalidArgumentError("cjit_value_create_strings: strings is NULL");
    for (int64_t i = 0; i < n; ++i) {
      if (strings[i] == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("cjit_value_create_strings: string ", i, " is NULL"));
      }
      t.data<std::string>()[i] = lengths ? std::string(strings[i], lengths[i]) : std::string(strings[i]);
    }
    *out = new cjit_value{std::move(t), false};
    return absl::OkStatus();
  });
}

cjit_status* cjit_value_get_string(const cjit_value* value, size_t index, const char** data, size_t* length) {
  if (value == nullptr || data == nullptr || length == nullptr) {
    return Error(CJIT_INVALID_ARGUMENT, "cjit_value_get_string: value, data and length must not be NULL");
  }
  const cjit::Tensor& t = value->tensor;
  if (!t.is_tensor() || t.dtype() != cjit::DType::kString) {
    return Error(CJIT_INVALID_ARGUMENT, absl::StrCat("cjit_value_get_string: the value is ", t.Describe(),
                                                     ", not a string tensor"));
  }
  if (index >= static_cast<size_t>(t.numel())) {
    return Error(CJIT_OUT_OF_RANGE,
                 absl::StrCat("cjit_value_get_string: index ", index, " of ", t.numel(), " strings"));
  }
  const std::string& s = t.data<std::string>()[index];
  *data = s.c_str();
  *length = s.size();
  return nullptr;
}

static_assert(static_cast<int>(cjit::ValueKind::kTensor) == CJIT_KIND_TENSOR &&
                  static_cast<int>(cjit::ValueKind::kSequence) == CJIT_KIND_SEQUENCE &&
                  static_cast<int>(cjit::ValueKind::kOptionalTensor) == CJIT_KIND_OPTIONAL_TENSOR &&
                  static_cast<int>(cjit::ValueKind::kOptionalSequence) == CJIT_KIND_OPTIONAL_SEQUENCE,
              "cjit_value_kind mirrors cjit::ValueKind");

cjit_value_kind cjit_value_get_kind(const cjit_value* value) {
  return value ? static_cast<cjit_value_kind>(value->tensor.kind()) : CJIT_KIND_TENSOR;
}

cjit_status* cjit_value_create_sequence(cjit_dtype elem, const cjit_value* const* items, size_t count,
                                        cjit_value** out) {
  if (out == nullptr) return Error(CJIT_INVALID_ARGUMENT, "cjit_value_create_sequence: out is NULL");
  if (count > 0 && items == nullptr) return Error(CJIT_INVALID_ARGUMENT, "cjit_value_create_sequence: items is NULL");
  return Guard("cjit_value_create_sequence", [&]() -> absl::Status {
    CJIT_ASSIGN_OR_RETURN(cjit::DType t, CheckDtype(elem));
    std::vector<cjit::Tensor> tensors;
    for (size_t i = 0; i < count; ++i) {
      if (items[i] == nullptr)
        return absl::InvalidArgumentError(absl::StrCat("cjit_value_create_sequence: item ", i, " is NULL"));
      const cjit::Tensor& v = items[i]->tensor;
      if (!v.is_tensor() || v.dtype() != t) {
        return absl::InvalidArgumentError(absl::StrCat("cjit_value_create_sequence: item ", i, " is ", v.Describe(),
                                                       "; the sequence holds ", cjit::DTypeName(t), " tensors"));
      }
      tensors.push_back(v);
    }
    *out = new cjit_value{cjit::Tensor::Sequence(t, std::move(tensors)), false};
    return absl::OkStatus();
  });
}

cjit_status* cjit_value_create_optional(cjit_value_kind kind, cjit_dtype elem, const cjit_value* element,
                                        cjit_value** out) {
  if (out == nullptr) return Error(CJIT_INVALID_ARGUMENT, "cjit_value_create_optional: out is NULL");
  return Guard("cjit_value_create_optional", [&]() -> absl::Status {
    if (kind != CJIT_KIND_OPTIONAL_TENSOR && kind != CJIT_KIND_OPTIONAL_SEQUENCE) {
      return absl::InvalidArgumentError(absl::StrCat("cjit_value_create_optional: kind ", static_cast<int>(kind),
                                                     " is not an optional kind"));
    }
    const cjit::ValueKind k = static_cast<cjit::ValueKind>(kind);
    CJIT_ASSIGN_OR_RETURN(cjit::DType t, CheckDtype(elem));
    if (element == nullptr) {
      *out = new cjit_value{cjit::Tensor::OptionalNone(k, t), false};
      return absl::OkStatus();
    }
    const cjit::Tensor& e = element->tensor;
    if (e.kind() != cjit::ElementKindOf(k) || e.dtype() != t) {
      return absl::InvalidArgumentError(absl::StrCat("cjit_value_create_optional: the element is ", e.Describe(),
                                                     "; a ", cjit::ValueKindName(k), " of ", cjit::DTypeName(t),
                                                     " was asked for"));
    }
    *out = new cjit_value{cjit::Tensor::Optional(e), false};
    return absl::OkStatus();
  });
}

size_t cjit_value_count(const cjit_value* value) { return value ? value->tensor.items().size() : 0; }

cjit_status* cjit_value_get_element(const cjit_value* value, size_t index, cjit_value** out) {
  if (value == nullptr || out == nullptr) {
    return Error(CJIT_INVALID_ARGUMENT, "cjit_value_get_element: value and out must not be NULL");
  }
  if (value->tensor.is_tensor()) {
    return Error(CJIT_INVALID_ARGUMENT, "cjit_value_get_element: the value is a tensor, not a sequence or optional");
  }
  const std::vector<cjit::Tensor>& items = value->tensor.items();
  if (index >= items.size()) {
    return Error(CJIT_OUT_OF_RANGE, absl::StrCat("cjit_value_get_element: index ", index, " of a value holding ",
                                                 items.size(), " elements"));
  }
  return Guard("cjit_value_get_element", [&]() -> absl::Status {
    *out = new cjit_value{items[index], false};
    return absl::OkStatus();
  });
}

// ---- sessions ----

cjit_status* cjit_session_create(const char* model_path, const cjit_options* options, cjit_session** out) {
  if (model_path == nullptr || out == nullptr) {
    return Error(CJIT_INVALID_ARGUMENT, "cjit_session_create: model_path and out must not be NULL");
  }
  *out = nullptr;
  return Guard("cjit_session_create", [&]() -> absl::Status {
    CJIT_ASSIGN_OR_RETURN(cjit::SessionOptions o, MakeSessionOptions(options));
    cjit_status* st = FinishCreate(cjit::Session::Load(model_path, o), out);
    if (st == nullptr) return absl::OkStatus();
    absl::Status s(static_cast<absl::StatusCode>(st->code), st->message);
    cjit_status_free(st);
    return s;
  });
}

cjit_status* cjit_session_create_from_bytes(const void* data, size_t size, const char* model_dir,
                                            const cjit_options* options, cjit_session** out) {
  if ((data == nullptr && size > 0) || out == nullptr) {
    return Error(CJIT_INVALID_ARGUMENT, "cjit_session_create_from_bytes: data and out must not be NULL");
  }
  *out = nullptr;
  return Guard("cjit_session_create_from_bytes", [&]() -> absl::Status {
    CJIT_ASSIGN_OR_RETURN(cjit::SessionOptions o, MakeSessionOptions(options));
    absl::string_view bytes(static_cast<const char*>(data), size);
    cjit_status* st = FinishCreate(cjit::Session::LoadFromBytes(bytes, o, model_dir ? model_dir : ""), out);
    if (st == nullptr) return absl::OkStatus();
    absl::Status s(static_cast<absl::StatusCode>(st->code), st->message);
    cjit_status_free(st);
    return s;
  });
}

void cjit_session_free(cjit_session* session) {
  if (session == nullptr) return;
  {
    cjit_session::Guts& g = *session->guts;
    cjit::MutexLock lock(&g.mu);
    g.closing = true;
    while (g.active != 0) g.idle.Wait(&g.mu);
  }
  delete session;
}

size_t cjit_session_input_count(const cjit_session* s) { return s ? s->guts->input_names.size() : 0; }
size_t cjit_session_output_count(const cjit_session* s) { return s ? s->guts->output_names.size() : 0; }
const char* cjit_session_input_name(const cjit_session* s, size_t i) {
  return s && i < s->guts->input_names.size() ? s->guts->input_names[i].c_str() : nullptr;
}
const char* cjit_session_output_name(const cjit_session* s, size_t i) {
  return s && i < s->guts->output_names.size() ? s->guts->output_names[i].c_str() : nullptr;
}

cjit_status* cjit_session_input_info(const cjit_session* s, size_t index, int32_t* dtype, int64_t* dims,
                                     size_t capacity, int64_t* rank) {
  if (s == nullptr) return Error(CJIT_INVALID_ARGUMENT, "cjit_session_input_info: session is NULL");
  if (index >= s->guts->session->inputs().size()) {
    return Error(CJIT_INVALID_ARGUMENT, absl::StrCat("input index ", index, " is out of range (the model has ",
                                                     s->guts->session->inputs().size(), " inputs)"));
  }
  return ToStatus(Info(s->guts->session->inputs()[index], dtype, dims, capacity, rank));
}

cjit_status* cjit_session_output_info(const cjit_session* s, size_t index, int32_t* dtype, int64_t* dims,
                                      size_t capacity, int64_t* rank) {
  if (s == nullptr) return Error(CJIT_INVALID_ARGUMENT, "cjit_session_output_info: session is NULL");
  if (index >= s->guts->session->outputs().size()) {
    return Error(CJIT_INVALID_ARGUMENT, absl::StrCat("output index ", index, " is out of range (the model has ",
                                                     s->guts->session->outputs().size(), " outputs)"));
  }
  return ToStatus(Info(s->guts->session->outputs()[index], dtype, dims, capacity, rank));
}

namespace {
cjit_status* KindOf(const cjit_session* s, bool input, size_t index, cjit_value_kind* kind) {
  const char* fn = input ? "cjit_session_input_kind" : "cjit_session_output_kind";
  if (s == nullptr || kind == nullptr)
    return Error(CJIT_INVALID_ARGUMENT, absl::StrCat(fn, ": session and kind must not be NULL"));
  const std::vector<cjit::TensorInfo>& infos = input ? s->guts->session->inputs() : s->guts->session->outputs();
  if (index >= infos.size()) {
    return Error(CJIT_INVALID_ARGUMENT, absl::StrCat(fn, ": index ", index, " is out of range (the model has ",
                                                     infos.size(), input ? " inputs)" : " outputs)"));
  }
  *kind = static_cast<cjit_value_kind>(infos[index].kind);
  return nullptr;
}
}  // namespace

cjit_status* cjit_session_input_kind(const cjit_session* s, size_t index, cjit_value_kind* kind) {
  return KindOf(s, true, index, kind);
}
cjit_status* cjit_session_output_kind(const cjit_session* s, size_t index, cjit_value_kind* kind) {
  return KindOf(s, false, index, kind);
}

const char* cjit_session_input_dim_name(const cjit_session* s, size_t index, size_t axis) {
  return s ? DimName(s->guts->session->inputs(), index, axis) : nullptr;
}
const char* cjit_session_output_dim_name(const cjit_session* s, size_t index, size_t axis) {
  return s ? DimName(s->guts->session->outputs(), index, axis) : nullptr;
}

const char* cjit_session_device(const cjit_session* s) { return s ? s->guts->device.c_str() : nullptr; }

cjit_status* cjit_session_metadata_json(const cjit_session* s, char* buffer, size_t size, size_t* length) {
  if (s == nullptr) return Error(CJIT_INVALID_ARGUMENT, "cjit_session_metadata_json: session is NULL");
  std::string text;
  cjit_status* st = Guard("cjit_session_metadata_json", [&]() -> absl::Status {
    const cjit::ModelMetadata& m = s->guts->session->metadata();
    nlohmann::json custom = nlohmann::json::object();
    for (const auto& [k, v] : m.custom) custom[k] = v;
    nlohmann::json j = {{"producer_name", m.producer_name},   {"producer_version", m.producer_version},
                        {"domain", m.domain},                 {"description", m.description},
                        {"graph_name", m.graph_name},         {"graph_description", m.graph_description},
                        {"version", m.version},               {"custom_metadata_map", custom}};
    // Invalid UTF-8 in a model's strings is replaced, not an error.
    text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return absl::OkStatus();
  });
  return st ? st : CopyOut(text, buffer, size, length);
}

cjit_status* cjit_session_stats_json(const cjit_session* s, char* buffer, size_t size, size_t* length) {
  if (s == nullptr) return Error(CJIT_INVALID_ARGUMENT, "cjit_session_stats_json: session is NULL");
  std::string text;
  cjit_status* st = Guard("cjit_session_stats_json", [&]() -> absl::Status {
    const cjit::SessionStats x = s->guts->session->stats();
    nlohmann::json j = {{"signatures", x.signatures},
                        {"signature_evictions", x.signature_evictions},
                        {"specializations", x.specializations},
                        {"specialization_replays", x.specialization_replays},
                        {"dynamic_shape_runs", x.dynamic_shape_runs},
                        {"dynamic_shape_misses", x.dynamic_shape_misses},
                        {"compiles_in_flight", x.compiles_in_flight},
                        {"clusters", cjit::ClusterCountersJson(x.totals)},
                        {"autotune", cjit::AutotuneCountersJson(x.autotune)}};
    cjit::AddRemoteCacheJson(x, j);
    text = j.dump();
    return absl::OkStatus();
  });
  return st ? st : CopyOut(text, buffer, size, length);
}

cjit_status* cjit_flags_json(char* buffer, size_t size, size_t* length) {
  std::string text;
  cjit_status* st = Guard("cjit_flags_json", [&]() -> absl::Status {
    nlohmann::json j = nlohmann::json::array();
    for (const cjit::FlagInfo& f : cjit::ListFlags()) {
      j.push_back({{"name", f.name}, {"type", f.type}, {"default", f.default_value}, {"help", f.help},
                   {"aliases", f.aliases}});
    }
    text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return absl::OkStatus();
  });
  return st ? st : CopyOut(text, buffer, size, length);
}

// ---- run options ----

cjit_status* cjit_run_options_create(cjit_run_options** out) {
  if (out == nullptr) return Error(CJIT_INVALID_ARGUMENT, "cjit_run_options_create: out is NULL");
  *out = new (std::nothrow) cjit_run_options();
  return *out ? nullptr : Error(CJIT_RESOURCE_EXHAUSTED, "cjit_run_options_create: out of memory");
}

void cjit_run_options_free(cjit_run_options* options) { delete options; }

void cjit_run_options_set_terminate(cjit_run_options* options, int terminate) {
  if (options) options->terminate.store(terminate != 0, std::memory_order_relaxed);
}

int cjit_run_options_get_terminate(const cjit_run_options* options) {
  return options && options->terminate.load(std::memory_order_relaxed) ? 1 : 0;
}

cjit_status* cjit_run_options_set_interrupt_check(cjit_run_options* options, cjit_interrupt_check check,
                                                  void* user_data) {
  if (options == nullptr) {
    return Error(CJIT_INVALID_ARGUMENT, "cjit_run_options_set_interrupt_check: options is NULL");
  }
  options->check = check;
  options->check_user_data = check ? user_data : nullptr;
  return nullptr;
}

cjit_status* cjit_session_run(cjit_session* session, const char* const* input_names, const cjit_value* const* inputs,
                              size_t n_inputs, const char* const* output_names, cjit_value** outputs,
                              size_t n_outputs) {
  return cjit_session_run_with_options(session, nullptr, input_names, inputs, n_inputs, output_names, outputs,
                                       n_outputs);
}

cjit_status* cjit_session_run_with_options(cjit_session* session, const cjit_run_options* run_options,
                                           const char* const* input_names, const cjit_value* const* inputs,
                                           size_t n_inputs, const char* const* output_names, cjit_value** outputs,
                                           size_t n_outputs) {
  if (session == nullptr) return Error(CJIT_INVALID_ARGUMENT, "cjit_session_run: session is NULL");
  if (n_inputs > 0 && (input_names == nullptr || inputs == nullptr)) {
    return Error(CJIT_INVALID_ARGUMENT, "cjit_session_run: input_names and inputs must not be NULL");
  }
  if (n_outputs > 0 && outputs == nullptr) return Error(CJIT_INVALID_ARGUMENT, "cjit_session_run: outputs is NULL");
  std::shared_ptr<cjit_session::Guts> guts = session->guts;
  {
    cjit::MutexLock lock(&guts->mu);
    if (guts->closing) return Error(CJIT_FAILED_PRECONDITION, "cjit_session_run: the session is being freed");
    ++guts->active;
  }
  cjit_status* result = Guard("cjit_session_run", [&]() -> absl::Status {
    const cjit::Session& s = *guts->session;
    // Which model output each slot receives.
    std::vector<size_t> which;
    if (output_names == nullptr) {
      if (n_outputs != guts->output_names.size()) {
        return absl::InvalidArgumentError(absl::StrCat("cjit_session_run: the model has ", guts->output_names.size(),
                                                       " outputs, n_outputs is ", n_outputs));
      }
      for (size_t i = 0; i < n_outputs; ++i) which.push_back(i);
    } else {
      for (size_t i = 0; i < n_outputs; ++i) {
        if (output_names[i] == nullptr) return absl::InvalidArgumentError("cjit_session_run: an output name is NULL");
        size_t k = 0;
        while (k < guts->output_names.size() && guts->output_names[k] != output_names[i]) ++k;
        if (k == guts->output_names.size()) {
          return absl::NotFoundError(absl::StrCat("cjit_session_run: the model has no output '", output_names[i], "'"));
        }
        which.push_back(k);
      }
    }
    std::vector<cjit::NamedTensor> in;
    in.reserve(n_inputs);
    for (size_t i = 0; i < n_inputs; ++i) {
      if (input_names[i] == nullptr || inputs[i] == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("cjit_session_run: input ", i, " has a NULL name or value"));
      }
      in.push_back({input_names[i], inputs[i]->tensor});  // shares the buffer: no copy
    }
    // Bound outputs are checked before running, where the declared shape tells.
    for (size_t i = 0; i < n_outputs; ++i) {
      if (outputs[i] == nullptr) continue;
      const cjit::TensorInfo& info = s.outputs()[which[i]];
      if (info.dtype == cjit::DType::kString || outputs[i]->tensor.dtype() == cjit::DType::kString) {
        return absl::InvalidArgumentError(
            absl::StrCat("bound output '", info.name, "': string outputs cannot be bound"));
      }
      if (info.kind != cjit::ValueKind::kTensor || !outputs[i]->tensor.is_tensor()) {
        return absl::InvalidArgumentError(absl::StrCat("bound output '", info.name,
                                                       "': only tensor outputs can be bound (the model gives a ",
                                                       cjit::ValueKindName(info.kind), ")"));
      }
      if (info.dtype != cjit::DType::kInvalid && outputs[i]->tensor.dtype() != info.dtype) {
        return absl::InvalidArgumentError(absl::StrCat("bound output '", info.name, "' has dtype ",
                                                       cjit::DTypeName(outputs[i]->tensor.dtype()),
                                                       ", the model gives ", cjit::DTypeName(info.dtype)));
      }
    }
    cjit::RunOptions ro;
    if (run_options != nullptr) {
      ro.terminate = &run_options->terminate;
      if (run_options->check != nullptr) {
        cjit_interrupt_check check = run_options->check;
        void* user = run_options->check_user_data;
        ro.should_terminate = [check, user] { return check(user) != 0; };
      }
    }
    CJIT_ASSIGN_OR_RETURN(std::vector<cjit::NamedTensor> result, guts->session->Run(in, ro));
    for (size_t i = 0; i < n_outputs; ++i) {
      cjit::Tensor& got = result[which[i]].tensor;
      if (outputs[i] == nullptr) continue;
      cjit::Tensor& dst = outputs[i]->tensor;
      if (dst.kind() != got.kind() || dst.dtype() != got.dtype() || dst.dims() != got.dims()) {
        return absl::InvalidArgumentError(
            absl::StrCat("bound output '", result[which[i]].name, "' is ", cjit::DTypeName(dst.dtype()), "[",
                         cjit::DimsToString(dst.dims()), "], the run produced ", got.Describe()));
      }
    }
    // New values first (nothing is handed out if one cannot be made), then the bound copies.
    std::vector<std::unique_ptr<cjit_value>> made(n_outputs);
    for (size_t i = 0; i < n_outputs; ++i) {
      if (outputs[i] != nullptr) continue;
      cjit::Tensor& got = result[which[i]].tensor;
      // A returned buffer shared with anything else (a model constant, a wrapped input, another output)
      // is copied, so the caller owns every output exclusively.
      made[i] = std::make_unique<cjit_value>(cjit_value{got.buffer().use_count() == 1 ? got : got.Clone(), false});
    }
    for (size_t i = 0; i < n_outputs; ++i) {
      if (made[i]) {
        outputs[i] = made[i].release();
        continue;
      }
      cjit::Tensor& got = result[which[i]].tensor;
      if (got.nbytes() > 0 && got.raw() != outputs[i]->tensor.raw()) {
        std::memcpy(outputs[i]->tensor.raw(), got.raw(), got.nbytes());
      }
    }
    return absl::OkStatus();
  });
  {
    cjit::MutexLock lock(&guts->mu);
    --guts->active;
    guts->idle.SignalAll();
  }
  return result;
}

cjit_status* cjit_session_end_profiling(cjit_session* session, char* buffer, size_t size, size_t* length) {
  if (session == nullptr) return Error(CJIT_INVALID_ARGUMENT, "cjit_session_end_profiling: session is NULL");
  absl::StatusOr<std::string> path = session->guts->session->EndProfiling();
  if (!path.ok()) return ToStatus(path.status());
  return CopyOut(*path, buffer, size, length);
}

}  // extern "C"
