#include "tools/check_lib.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/ir/text.h"
#include "compiler/passes/specialize_shapes.h"
#include "runtime/cpu/kernel.h"

namespace cjit {

namespace fs = std::filesystem;

OutputComparison CompareTensors(const std::string& name, const Tensor& got, const Tensor& ref_in, double rtol,
                                double atol) {
  OutputComparison c;
  if (!got.is_tensor() || !ref_in.is_tensor()) {
    // Sequences and optionals: the same kind and count, then element by element.
    c.name = name;
    if (got.kind() != ref_in.kind()) {
      c.problem = absl::StrCat("a ", ValueKindName(got.kind()), " != expected ", ValueKindName(ref_in.kind()));
      return c;
    }
    if (got.items().size() != ref_in.items().size()) {
      c.problem = absl::StrCat(got.Describe(), " != expected ", ref_in.Describe());
      return c;
    }
    c.ok = true;
    for (size_t k = 0; k < got.items().size(); ++k) {
      OutputComparison e = CompareTensors(name, got.items()[k], ref_in.items()[k], rtol, atol);
      c.max_abs = std::max(c.max_abs, e.max_abs);
      c.max_rel = std::max(c.max_rel, e.max_rel);
      if (!e.ok) {
        c.ok = false;
        if (c.problem.empty() && !e.problem.empty()) c.problem = absl::StrCat("element ", k, ": ", e.problem);
      }
    }
    return c;
  }
  // ONNX's test data stores bfloat16 as UINT16 (numpy has no bfloat16): the same bits.
  const Tensor ref = got.dtype() == DType::kBF16 && ref_in.dtype() == DType::kU16
                         ? Tensor::Alias(ref_in, 0, DType::kBF16, ref_in.dims())
                         : ref_in;
  c.name = name;
  if (got.dtype() != ref.dtype()) {
    c.problem = absl::StrCat("dtype ", DTypeName(got.dtype()), " != expected ", DTypeName(ref.dtype()));
    return c;
  }
  if (got.dims() != ref.dims()) {
    c.problem = absl::StrCat("dims ", DimsToString(got.dims()), " != expected ", DimsToString(ref.dims()));
    return c;
  }
  if (got.dtype() == DType::kString) {  // strings: equal byte for byte
    c.ok = true;
    for (int64_t i = 0; i < got.numel() && c.ok; ++i) {
      if (got.data<std::string>()[i] != ref.data<std::string>()[i]) {
        c.ok = false;
        c.problem = absl::StrCat("element ", i, " '", got.data<std::string>()[i], "' != expected '",
                                 ref.data<std::string>()[i], "'");
      }
    }
    return c;
  }
  std::vector<double> a = got.ToDoubleVector(), b = ref.ToDoubleVector();
  c.ok = true;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) {
      if (std::isnan(a[i]) != std::isnan(b[i])) c.ok = false;
      continue;
    }
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) c.ok = false;
      continue;
    }
    double diff = std::abs(a[i] - b[i]);
    c.max_abs = std::max(c.max_abs, diff);
    if (b[i] != 0) c.max_rel = std::max(c.max_rel, diff / std::abs(b[i]));
    if (diff > atol + rtol * std::abs(b[i])) c.ok = false;
  }
  return c;
}

bool DataSetResult::ok() const {
  if (!status.ok()) return false;
  for (const auto& o : outputs) if (!o.ok) return false;
  return true;
}

namespace {

// Value file `path` as the message of the k-th declared input or output's type (a TensorProto past them).
absl::StatusOr<NamedTensor> ReadDeclared(const std::string& path, const std::vector<TensorInfo>& declared, int k) {
  if (k >= static_cast<int>(declared.size())) return ReadTensorProtoFile(path);
  return ReadValueProtoFile(path, declared[k].kind, declared[k].dtype);
}

}  // namespace

absl::StatusOr<std::vector<DataSet>> ReadDataSets(const std::string& dir, const Session& session) {
  std::vector<std::string> dirs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) {
      dirs.push_back(e.path().string());
    }
  }
  if (ec) return absl::NotFoundError(absl::StrCat("cannot list ", dir, ": ", ec.message()));
  // Natural order (test_data_set_2 before test_data_set_10): a stream's sets run in the order they were made.
  auto number = [](const std::string& d) {
    std::string tail = fs::path(d).filename().string().substr(14);
    int64_t n = 0;
    return absl::SimpleAtoi(tail, &n) ? n : INT64_MAX;
  };
  std::sort(dirs.begin(), dirs.end(), [&](const std::string& a, const std::string& b) {
    int64_t na = number(a), nb = number(b);
    return na != nb ? na < nb : a < b;
  });
  std::vector<DataSet> sets;
  for (const std::string& d : dirs) {
    DataSet s;
    s.dir = d;
    for (int k = 0;; ++k) {
      std::string p = absl::StrCat(d, "/input_", k, ".pb");
      if (!fs::exists(p)) break;
      const bool declared = k < static_cast<int>(session.inputs().size());
      CJIT_ASSIGN_OR_RETURN(NamedTensor t, ReadDeclared(p, session.inputs(), k));
      if (t.name.empty() && declared) t.name = session.inputs()[k].name;
      // ONNX's test data stores bfloat16 as UINT16 (numpy has no bfloat16): the same bits.
      if (k < static_cast<int>(session.inputs().size()) && session.inputs()[k].dtype == DType::kBF16 &&
          t.tensor.dtype() == DType::kU16) {
        t.tensor = Tensor::Alias(t.tensor, 0, DType::kBF16, t.tensor.dims());
      }
      s.inputs.push_back(std::move(t));
    }
    for (int k = 0;; ++k) {
      std::string p = absl::StrCat(d, "/output_", k, ".pb");
      if (!fs::exists(p)) break;
      CJIT_ASSIGN_OR_RETURN(NamedTensor t, ReadDeclared(p, session.outputs(), k));
      s.outputs.push_back(std::move(t));
    }
    sets.push_back(std::move(s));
  }
  return sets;
}

DataSetResult RunDataSet(Session& session, const DataSet& set, double rtol, double atol) {
  DataSetResult r;
  r.dir = set.dir;
  auto outs = session.Run(set.inputs);
  if (!outs.ok()) {
    r.status = outs.status();
    return r;
  }
  if (outs->size() != set.outputs.size()) {
    r.status = absl::InternalError(
        absl::StrCat("model produced ", outs->size(), " outputs, reference has ", set.outputs.size()));
    return r;
  }
  for (size_t i = 0; i < outs->size(); ++i) {
    r.outputs.push_back(CompareTensors((*outs)[i].name, (*outs)[i].tensor, set.outputs[i].tensor, rtol, atol));
  }
  return r;
}

absl::StatusOr<std::unique_ptr<Graph>> SpecializedGraphFromText(const std::string& ir) {
  CJIT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ParseGraph(ir));
  std::vector<Dims> dims;
  for (const Value* v : g->inputs()) {
    if (!v->shape.fully_known()) {
      return absl::InvalidArgumentError(absl::StrCat("input %", v->name, " has no static shape"));
    }
    dims.push_back(v->shape.concrete());
  }
  auto eval = [](const Node& n, const std::vector<const Tensor*>& in) { return EvaluateNode(n, in, 1); };
  CJIT_RETURN_IF_ERROR(SpecializeShapes(*g, dims, eval));
  return g;
}

absl::StatusOr<std::unique_ptr<Session>> LoadSessionWithFlags(const std::string& model_path,
                                                              const std::string& flag_text, int threads) {
  SessionOptions o;
  o.use_environment_flags = false;
  o.flags.intra_op_threads = threads;
  CJIT_ASSIGN_OR_RETURN(o.flags, ParseFlags(flag_text, o.flags, "test flags"));
  return Session::Load(model_path, o);
}

}  // namespace cjit
