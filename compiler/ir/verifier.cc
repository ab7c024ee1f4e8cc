#include "compiler/ir/verifier.h"

#include <unordered_set>

#include "absl/strings/str_cat.h"

namespace cjit {

absl::Status VerifyGraph(const Graph& graph) {
  std::unordered_set<const Value*> defined;
  defined.reserve(graph.values().size());
  for (const Value* v : graph.inputs()) defined.insert(v);
  for (const Value* v : graph.captures()) defined.insert(v);
  for (const auto& v : graph.values()) {
    if (v->is_constant()) defined.insert(v.get());
  }
  std::unordered_set<const Node*> nodes;
  nodes.reserve(graph.nodes().size());
  for (const auto& n : graph.nodes()) {
    nodes.insert(n.get());
    for (size_t k = 0; k < n->outputs.size(); ++k) {
      const Value* v = n->outputs[k];
      if (v == nullptr) continue;
      if (v->producer != n.get() || v->producer_output != static_cast<int>(k)) {
        return absl::InvalidArgumentError(absl::StrCat("output %", v->name, " of ", n->Describe(),
                                                       " does not point back at its producer"));
      }
      if (!defined.insert(v).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("value %", v->name, " is defined twice (again by ", n->Describe(), ")"));
      }
    }
  }
  for (const auto& n : graph.nodes()) {
    for (const auto* list : {&n->inputs, &n->implicit_inputs}) {
      for (const Value* v : *list) {
        if (v != nullptr && !defined.count(v)) {
          return absl::InvalidArgumentError(
              absl::StrCat(n->Describe(), " reads undefined value %", v->name));
        }
      }
    }
  }
  for (const Value* v : graph.outputs()) {
    if (v == nullptr || !defined.count(v)) {
      return absl::InvalidArgumentError(absl::StrCat("graph output %", v ? v->name : "<null>",
                                                     " is not defined"));
    }
  }
  auto order = graph.TopologicalOrder();
  return order.ok() ? absl::OkStatus() : order.status();
}

}  // namespace cjit
