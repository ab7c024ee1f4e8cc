#include "compiler/ops/op_schemas.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace cjit {
namespace {

struct Row {
  const char* op;
  int since;
  int deprecated;
  const char* attrs;  // "name:TYPE:required,..."
  const char* inputs;  // "name:S|O|V,..."
  int min_inputs, max_inputs;
  const char* outputs;
  int min_outputs, max_outputs;
  const char* constraints;  // "T=f32|f64;B=bool"
};

std::vector<OpSchemaFormal> Formals(const char* text) {
  std::vector<OpSchemaFormal> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(item, ':');
    if (f.size() != 3 || f[1].size() != 1) continue;
    out.push_back(OpSchemaFormal{f[0], f[1][0], f[2]});
  }
  return out;
}

std::map<std::string, std::vector<DType>> Constraints(const char* text) {
  std::map<std::string, std::vector<DType>> out;
  for (absl::string_view item : absl::StrSplit(text, ';', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(item, '=');
    if (f.size() != 2) continue;
    std::vector<DType>& types = out[f[0]];
    for (absl::string_view t : absl::StrSplit(f[1], '|', absl::SkipEmpty())) types.push_back(DTypeFromName(t));
  }
  return out;
}

const Row kRows[] = {
#include "compiler/ops/op_schemas.inc"
};

const std::map<std::string, std::vector<OpSchemaVersion>>& Table() {
  static const auto* table = [] {
    auto* t = new std::map<std::string, std::vector<OpSchemaVersion>>();
    for (const Row& r : kRows) {
      OpSchemaVersion v;
      v.op = r.op;
      v.since_version = r.since;
      v.deprecated = r.deprecated != 0;
      for (absl::string_view item : absl::StrSplit(r.attrs, ',', absl::SkipEmpty())) {
        std::vector<std::string> f = absl::StrSplit(item, ':');
        if (f.size() != 3) continue;
        v.attributes[f[0]] = OpSchemaAttr{f[1], f[2] == "1"};
      }
      v.inputs = Formals(r.inputs);
      v.outputs = Formals(r.outputs);
      v.min_inputs = r.min_inputs;
      v.max_inputs = r.max_inputs;
      v.min_outputs = r.min_outputs;
      v.max_outputs = r.max_outputs;
      v.constraints = Constraints(r.constraints);
      (*t)[r.op].push_back(std::move(v));  // rows are sorted by (op, since)
    }
    return t;
  }();
  return *table;
}

}  // namespace

const OpSchemaVersion* FindOpSchema(const std::string& op, int opset, int* first) {
  *first = 0;
  auto it = Table().find(op);
  if (it == Table().end()) return nullptr;
  *first = it->second.front().since_version;
  const OpSchemaVersion* best = nullptr;
  for (const OpSchemaVersion& v : it->second) {
    if (v.since_version <= opset) best = &v;
  }
  return best;
}

std::string CheckInputTypes(const OpSchemaVersion& schema, const std::vector<DType>& dtypes) {
  std::map<std::string, std::pair<DType, size_t>> bound;  // type parameter -> (type, input that set it)
  for (size_t i = 0; i < dtypes.size(); ++i) {
    if (schema.inputs.empty()) break;
    // Inputs past the formals belong to the last (variadic) one.
    const OpSchemaFormal& f = schema.inputs[std::min(i, schema.inputs.size() - 1)];
    if (i >= schema.inputs.size() && f.option != 'V' && f.option != 'H') break;
    DType t = dtypes[i];
    if (t == DType::kInvalid) continue;
    std::vector<DType> allowed;
    if (!f.type.empty() && f.type[0] == '!') {
      DType fixed = DTypeFromName(f.type.substr(1));
      if (fixed == DType::kInvalid) continue;  // a type clusterjit does not have (string...): not checked here
      allowed = {fixed};
    } else {
      auto c = schema.constraints.find(f.type);
      if (c == schema.constraints.end()) continue;
      allowed = c->second;
      if (f.option != 'H') {
        auto [it, inserted] = bound.emplace(f.type, std::make_pair(t, i));
        if (!inserted && it->second.first != t) {
          return absl::StrCat("input ", i, " ('", f.name, "') is ", DTypeName(t), " but input ", it->second.second,
                              " is ", DTypeName(it->second.first), "; ", schema.op, "-", schema.since_version,
                              " requires both to be the same type ", f.type);
        }
      }
    }
    bool ok = std::find(allowed.begin(), allowed.end(), t) != allowed.end();
    if (!ok && (t == DType::kF16 || t == DType::kBF16)) {
      ok = std::find(allowed.begin(), allowed.end(), DType::kF32) != allowed.end();
    }
    if (!ok) {
      std::string names;
      for (DType a : allowed) absl::StrAppend(&names, names.empty() ? "" : ", ", DTypeName(a));
      return absl::StrCat("input ", i, " ('", f.name, "') has type ", DTypeName(t), "; ", schema.op, "-",
                          schema.since_version, " allows ", names.empty() ? std::string("none") : names);
    }
  }
  return "";
}

}  // namespace cjit
