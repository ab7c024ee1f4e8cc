#include "compiler/onnx/op_schemas.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace cjit {
namespace {

struct Row {
  const char* op;
  int since;
  int deprecated;
  const char* attrs;  // "name:TYPE:required,..."
};

const Row kRows[] = {
#include "compiler/onnx/op_schemas.inc"
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

}  // namespace cjit
