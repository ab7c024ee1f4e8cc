#include "compiler/passes/mark_for_compilation.h"

#include "base/logging.h"

#include <algorithm>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "compiler/ir/union_find.h"
#include "base/status_macros.h"
#include "compiler/ops/op_registry.h"
#include "compiler/passes/graph_cycles.h"

namespace cjit {
namespace {

// Why `n` cannot be in a cluster, or "" if it can.
std::string ExclusionReason(const Node& n, const ClusteringOptions& options) {
  const OpDef* def = FindOp(n.domain, n.op_type);
  if (def == nullptr || !def->clusterable) return absl::StrCat(n.op_type, " is not clusterable");
  if (def->traits.fusion == FusionClass::kQuantize && !options.quantize_ops) {
    return absl::StrCat(n.op_type, " is clustered for CPU code generation only");
  }
  if (options.mode == ClusteringMode::kFusible &&
      !(def->category == OpCategory::kElementwise || def->category == OpCategory::kReduction ||
        def->category == OpCategory::kDataMovement)) {
    return absl::StrCat(n.op_type, " is not elementwise/reduction/data-movement (--auto_jit=fusible)");
  }
  if (!n.implicit_inputs.empty()) return "reads values of an enclosing graph";
  for (const std::vector<Value*>* vs : {&n.inputs, &n.outputs}) {
    for (const Value* v : *vs) {
      if (v && v->kind != ValueKind::kTensor) return absl::StrCat("%", v->name, " is a ", ValueKindName(v->kind));
      if (v && v->dtype == DType::kString) return absl::StrCat("%", v->name, " is a string tensor");
    }
  }
  for (const Value* v : n.outputs) {
    if (v && !v->shape.fully_known()) return absl::StrCat("output %", v->name, " has a data-dependent shape");
    if (v && v->dtype == DType::kInvalid) return absl::StrCat("output %", v->name, " has no known dtype");
  }
  for (const auto& [k, a] : n.attrs) {
    if (a.kind == Attribute::Kind::kGraph || a.kind == Attribute::Kind::kGraphs) return "has a subgraph";
  }
  return "";
}

int EffectiveSize(const std::vector<Node*>& nodes) {
  int n = 0;
  for (const Node* x : nodes) n += (x->op_type == "Identity") ? 0 : 1;
  return n;
}

// A convolution or matrix product and at least one other op: compiled, the others can become its
// post-ops / epilogue (compiler/codegen/fusion_plan.h), one pass over the product's output instead of
// two. A detector head's final 1x1 convolution and Sigmoid, cut off from the rest by a Resize, ran as two
// library steps (2.0 + 0.44 ms on a 256 x 256 x 16 map) under --min_cluster_size's rule alone.
bool HostsEpilogue(const std::vector<Node*>& nodes) {
  bool product = false;
  for (const Node* x : nodes) {
    const std::string& t = x->op_type;
    product |= t == "Conv" || t == "NhwcConv" || t == "NhwcPointwiseDepthwiseConv" || t == "MatMul" || t == "Gemm";
  }
  return product && EffectiveSize(nodes) >= 2;
}

// Moves `members` (in topological order) into a new subgraph and replaces them by one cluster node.
ClusterInfo Outline(Graph& graph, const std::vector<Node*>& members, int id) {
  std::unordered_set<const Node*> in_cluster(members.begin(), members.end());
  auto body = std::make_shared<Graph>();
  body->name = absl::StrCat("cluster_", id);
  body->opset = graph.opset;
  std::unordered_map<const Value*, Value*> map;
  std::vector<Value*> ext_inputs;
  ClusterInfo info;
  info.id = id;
  auto get = [&](Value* v) -> Value* {
    if (v == nullptr) return nullptr;
    auto it = map.find(v);
    if (it != map.end()) return it->second;
    Value* nv;
    if (v->is_constant()) {
      nv = body->AddConstant(v->name, v->constant);
    } else {
      nv = body->AddInput(v->name, v->dtype, v->shape);
      ext_inputs.push_back(v);
      info.inputs.push_back(v->name);
    }
    map[v] = nv;
    return nv;
  };
  for (Node* n : members) {
    std::vector<Value*> ins;
    for (Value* v : n->inputs) ins.push_back(get(v));
    std::vector<std::string> outs;
    for (Value* v : n->outputs) outs.push_back(v ? v->name : "");
    Node* c = body->AddNode(n->op_type, n->name, ins, outs);
    c->domain = n->domain;
    c->opset_version = n->opset_version;
    c->attrs = n->attrs;
    for (size_t k = 0; k < n->outputs.size(); ++k) {
      if (!n->outputs[k]) continue;
      c->outputs[k]->dtype = n->outputs[k]->dtype;
      c->outputs[k]->shape = n->outputs[k]->shape;
      map[n->outputs[k]] = c->outputs[k];
    }
    ++info.op_histogram[n->op_type];
    ++info.num_ops;
  }
  // Outputs: values produced in the cluster and read outside it (or graph outputs).
  std::unordered_set<const Value*> used_outside(graph.outputs().begin(), graph.outputs().end());
  for (const auto& n : graph.nodes()) {
    if (in_cluster.count(n.get())) continue;
    for (const Value* v : n->inputs) used_outside.insert(v);
    for (const Value* v : n->implicit_inputs) used_outside.insert(v);
  }
  std::vector<Value*> ext_outputs;
  for (Node* n : members) {
    for (Value* v : n->outputs) {
      if (v && used_outside.count(v)) {
        ext_outputs.push_back(v);
        body->AddOutput(map.at(v));
        info.outputs.push_back(v->name);
      }
    }
  }
  std::vector<std::string> out_names;
  for (Value* v : ext_outputs) out_names.push_back(absl::StrCat(v->name, "@cluster", id));
  Node* cn = graph.AddNode(kClusterOp, absl::StrCat("cluster_", id), ext_inputs, out_names);
  cn->domain = "";
  Attribute b;
  b.kind = Attribute::Kind::kGraph;
  b.g = body;
  cn->attrs["body"] = b;
  cn->attrs["cluster_id"] = Attribute::Int(id);
  for (size_t k = 0; k < ext_outputs.size(); ++k) {
    cn->outputs[k]->dtype = ext_outputs[k]->dtype;
    cn->outputs[k]->shape = ext_outputs[k]->shape;
    graph.ReplaceAllUses(ext_outputs[k], cn->outputs[k]);
    cn->outputs[k]->name = ext_outputs[k]->name;  // keep the model's value names (graph outputs)
  }
  graph.RemoveNodes(members);
  return info;
}

}  // namespace

absl::StatusOr<ClusteringReport> MarkForCompilation(Graph& graph, const ClusteringOptions& options) {
  ClusteringReport report;
  if (options.mode == ClusteringMode::kOff) return report;
  CJIT_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
  int n = static_cast<int>(order.size());
  std::unordered_map<const Node*, int> index;
  for (int i = 0; i < n; ++i) index[order[i]] = i;
  GraphCycles cycles(n);
  for (int i = 0; i < n; ++i) {
    for (const auto* list : {&order[i]->inputs, &order[i]->implicit_inputs}) {
      for (const Value* v : *list) {
        if (v && v->producer && index.count(v->producer)) cycles.InsertEdge(index[v->producer], i);
      }
    }
  }
  std::vector<bool> candidate(n, false);
  int64_t fuel = options.fuel;
  for (int i = 0; i < n; ++i) {
    std::string why = ExclusionReason(*order[i], options);
    if (why.empty() && fuel == 0) why = "--clustering_fuel exhausted";
    if (!why.empty()) {
      CJIT_VLOG(2) << "not clustering " << order[i]->name << ": " << why;
      report.excluded.push_back({order[i]->name, why});
      continue;
    }
    candidate[i] = true;
    if (fuel > 0) --fuel;
  }
  // Union-find over cycle-graph representatives.
  UnionFind clusters_of(n);
  auto find = [&](int x) { return clusters_of.Find(x); };
  // Consumers of each node's outputs, in topological order (one pass over the edges: linear, where scanning
  // every later node for readers was quadratic in the graph size).
  std::vector<std::vector<int>> consumers(n);
  for (int j = 0; j < n; ++j) {
    for (const Value* v : order[j]->inputs) {
      if (v && v->producer && index.count(v->producer)) {
        int i = index[v->producer];
        if (consumers[i].empty() || consumers[i].back() != j) consumers[i].push_back(j);
      }
    }
  }
  // Post order: consumers before producers; try to merge each node's cluster with its consumers'.
  for (int i = n - 1; i >= 0; --i) {
    if (!candidate[i]) continue;
    {
      for (int j : consumers[i]) {
        if (!candidate[j]) continue;
        int a = find(i), b = find(j);
        if (a == b) continue;
        if (clusters_of.size(a) + clusters_of.size(b) > options.max_cluster_size) {
          CJIT_VLOG(2) << "not merging " << order[i]->name << " with " << order[j]->name << ": --max_cluster_size";
          report.refused_merges.push_back({order[i]->name, order[j]->name, "--max_cluster_size"});
          continue;
        }
        if (!cycles.HasEdge(a, b)) {
          // The edge between the two clusters may be represented the other way or be indirect.
          if (!cycles.InsertEdge(a, b)) continue;
        }
        if (!cycles.ContractEdge(a, b)) {
          CJIT_VLOG(2) << "not merging " << order[i]->name << " with " << order[j]->name
                  << ": would create a cycle through another path";
          report.refused_merges.push_back(
              {order[i]->name, order[j]->name, "would create a cycle through another path"});
          continue;
        }
        clusters_of.MergeInto(a, b);
      }
    }
  }
  std::map<int, std::vector<Node*>> groups;
  for (int i = 0; i < n; ++i) {
    if (candidate[i]) groups[find(i)].push_back(order[i]);
  }
  int next_id = 0;
  for (auto& [r, members] : groups) {
    if (EffectiveSize(members) < options.min_cluster_size && !HostsEpilogue(members)) {
      for (Node* m : members) {
        std::string why = absl::StrCat("its cluster has ", EffectiveSize(members), " ops < --min_cluster_size=",
                                       options.min_cluster_size);
        CJIT_VLOG(2) << "not clustering " << m->name << ": " << why;
        report.excluded.push_back({m->name, why});
      }
      continue;
    }
    report.clusters.push_back(Outline(graph, members, next_id++));
  }
  return report;
}

}  // namespace cjit
