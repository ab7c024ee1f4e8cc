#include "compiler/passes/specialize_shapes.h"

#include <set>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/ops/op_registry.h"
#include "compiler/passes/simplify.h"
#include "compiler/passes/specialization_replay.h"

namespace cjit {
namespace {


// Replaces an If node by the nodes of the selected branch.
absl::Status InlineBranch(Graph& graph, Node* node, const Graph& branch) {
  std::unordered_map<const Value*, Value*> map;
  for (const Value* cap : branch.captures()) {
    for (size_t k = 0; k < node->implicit_inputs.size() && k < node->implicit_names.size(); ++k) {
      if (node->implicit_names[k] == cap->name) map[cap] = node->implicit_inputs[k];
    }
    if (!map.count(cap)) {
      return absl::InvalidArgumentError(
          absl::StrCat(node->Describe(), ": its branch reads '", cap->name, "', which the node does not provide"));
    }
  }
  std::string prefix = node->name + "/";
  for (const auto& v : branch.values()) {
    if (v->is_constant()) {
      Value* c = graph.AddConstant(prefix + v->name, v->constant);
      map[v.get()] = c;
    }
  }
  auto order = branch.TopologicalOrder();
  if (!order.ok()) return order.status();
  auto mapped = [&](Value* v) -> Value* {
    auto it = map.find(v);
    return it == map.end() ? nullptr : it->second;
  };
  for (Node* bn : *order) {
    std::vector<Value*> ins;
    for (Value* v : bn->inputs) {
      if (v && !mapped(v))
        return absl::InternalError(absl::StrCat(node->Describe(), ": branch value %", v->name, " unresolved"));
      ins.push_back(v ? mapped(v) : nullptr);
    }
    std::vector<std::string> outs;
    for (Value* v : bn->outputs) outs.push_back(v ? prefix + v->name : "");
    Node* c = graph.AddNode(bn->op_type, prefix + bn->name, ins, outs);
    c->domain = bn->domain;
    c->opset_version = bn->opset_version;
    c->attrs = bn->attrs;
    for (Value* v : bn->implicit_inputs) {
      if (!mapped(v))
        return absl::InternalError(absl::StrCat(node->Describe(), ": branch value %", v->name, " unresolved"));
      c->implicit_inputs.push_back(mapped(v));
    }
    c->implicit_names = bn->implicit_names;
    for (size_t k = 0; k < bn->outputs.size(); ++k) {
      if (bn->outputs[k]) map[bn->outputs[k]] = c->outputs[k];
    }
  }
  for (size_t k = 0; k < node->outputs.size() && k < branch.outputs().size(); ++k) {
    if (!node->outputs[k]) continue;
    Value* out = mapped(branch.outputs()[k]);
    if (!out) return absl::InternalError(absl::StrCat(node->Describe(), ": branch output unresolved"));
    graph.ReplaceAllUses(node->outputs[k], out);
  }
  graph.RemoveNode(node);
  return absl::OkStatus();
}

// One walk; returns true if an If was inlined (the caller walks again).
absl::StatusOr<bool> Walk(Graph& graph, const ConstantEvaluator& evaluate, const SpecializeOptions& options) {
  CJIT_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
  for (Node* n : order) {
    std::vector<InferInput> in(n->inputs.size());
    bool all_const = true;
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      const Value* v = n->inputs[i];
      in[i] = InferInputOf(v);
      all_const &= v == nullptr || v->is_constant();
    }
    for (Value* v : n->implicit_inputs) all_const &= v->is_constant();
    if (n->op_type == "If" && in[0].value != nullptr) {
      bool cond = in[0].value->ToDoubleVector().at(0) != 0;
      const Graph* branch = n->GetGraph(cond ? "then_branch" : "else_branch");
      if (branch) {
        if (ReplayRecorder* rec = ReplayRecorder::Current()) rec->OnInlineIf(*n);
        CJIT_RETURN_IF_ERROR(InlineBranch(graph, n, *branch));
        return true;
      }
    }
    std::vector<InferOutput> out;
    CJIT_RETURN_IF_ERROR(InferNode(*n, in, out));
    int64_t out_elems = 0;
    bool out_known = true;
    bool non_tensor = false;  // sequences, optionals and strings are run, never folded into constants
    for (size_t k = 0; k < n->outputs.size(); ++k) {
      if (!n->outputs[k]) continue;
      n->outputs[k]->dtype = out[k].dtype;
      n->outputs[k]->shape = out[k].shape;
      n->outputs[k]->kind = out[k].kind;
      non_tensor |= out[k].kind != ValueKind::kTensor || out[k].dtype == DType::kString;
      if (out[k].shape.fully_known()) out_elems += NumElements(out[k].shape.concrete());
      else out_known = false;
    }
    // Shape / Size of a fully known shape fold without evaluating the input.
    bool shape_only = (n->op_type == "Shape" || n->op_type == "Size") && in[0].shape.fully_known();
    bool has_subgraph = false;
    for (const auto& [name, a] : n->attrs) has_subgraph |= a.kind == Attribute::Kind::kGraph;
    // Loops (and If on a value computed at run time) are not folded: they run through the executor.
    bool foldable = !TraitsOf(*n).random && !has_subgraph && !non_tensor && (all_const || shape_only) &&
                    (!out_known || out_elems <= options.max_folded_elements);
    if (!foldable) continue;
    std::vector<Tensor> values;
    if (shape_only) {
      values.push_back(ShapeOfDims(*n, in[0].shape.concrete()));
    } else {
      std::vector<const Tensor*> args;
      for (Value* v : n->inputs) args.push_back(v ? v->constant.get() : nullptr);
      CJIT_ASSIGN_OR_RETURN(values, evaluate(*n, args));
    }
    std::vector<Value*> folded(n->outputs.size(), nullptr);
    for (size_t k = 0; k < n->outputs.size() && k < values.size(); ++k) {
      Value* old = n->outputs[k];
      if (!old) continue;
      Value* c = graph.AddConstant(old->name, values[k]);
      graph.ReplaceAllUses(old, c);
      folded[k] = c;
    }
    if (ReplayRecorder* rec = ReplayRecorder::Current()) rec->OnFold(*n, shape_only, folded);
    graph.RemoveNode(n);
  }
  return false;
}

}  // namespace

Shape SignatureInputShape(const Value& input, const Dims& dims) {
  return input.kind == ValueKind::kTensor ? Shape::Of(dims) : Shape::Unknown();
}

absl::Status SpecializeShapes(Graph& graph, const std::vector<Dims>& input_dims, const ConstantEvaluator& evaluate,
                              const SpecializeOptions& options) {
  if (input_dims.size() != graph.inputs().size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("signature has ", input_dims.size(), " inputs, graph has ", graph.inputs().size()));
  }
  for (size_t i = 0; i < input_dims.size(); ++i) {
    graph.inputs()[i]->shape = SignatureInputShape(*graph.inputs()[i], input_dims[i]);
  }
  for (int round = 0; round < 1000; ++round) {
    CJIT_ASSIGN_OR_RETURN(bool again, Walk(graph, evaluate, options));
    if (!again) break;
  }
  RemoveDeadNodes(graph);
  return absl::OkStatus();
}

namespace {

// Whether input `index` of `n` is plain data: its value never changes an output's shape (only the outputs'
// values), and the node has no control flow. Per the ONNX operator specification of each op.
bool IsDataOperand(const Node& n, size_t index) {
  if (!n.implicit_inputs.empty()) return false;
  const OpDef* def = FindOp(n.domain, n.op_type);
  if (def == nullptr || def->internal) return false;
  switch (def->category) {
    case OpCategory::kElementwise:
    case OpCategory::kContraction:
    case OpCategory::kNormalization:
    case OpCategory::kRecurrent:  // sequence_lens masks steps; Y's shape comes from X
      return true;
    case OpCategory::kReduction:  // operand 1 is Reduce*-13/18's axes
    case OpCategory::kPooling:    // MaxUnpool's operand 2 is output_shape
      return index == 0;
    case OpCategory::kDataMovement: {
      const std::string& op = n.op_type;
      if (op == "Concat" || op == "Dropout" || op == "Gather" || op == "GatherElements" || op == "GatherND" ||
          op == "Scatter" || op == "ScatterElements" || op == "ScatterND" || op == "ReverseSequence" ||
          op == "Trilu") {
        return true;  // indices, updates, sequence lengths, Trilu's k: values only
      }
      if (op == "Pad") return index == 0 || index == 2;  // data and constant_value; pads and axes shape
      return index == 0;  // Reshape, Expand, Slice, Split, Squeeze, Tile, Transpose...: the other operands shape
    }
    case OpCategory::kShape:
      return n.op_type == "EyeLike";
    default:
      return (n.op_type == "CumSum" && index == 0) || n.op_type == "GridSample" || n.op_type == "Det";
  }
}

}  // namespace

std::vector<bool> InputValuesShapeTheGraph(const Graph& graph) {
  std::vector<bool> out(graph.inputs().size(), true);
  auto order = graph.TopologicalOrder();
  if (!order.ok()) return out;  // the verifier reports it; keep specializing by value
  for (size_t i = 0; i < graph.inputs().size(); ++i) {
    std::unordered_set<const Value*> derived = {graph.inputs()[i]};
    bool shapes = false;
    for (const Node* n : *order) {
      if (n->op_type == "Shape" || n->op_type == "Size") continue;  // read the shape only
      bool reads = false;
      for (size_t k = 0; k < n->inputs.size() && !shapes; ++k) {
        if (n->inputs[k] == nullptr || !derived.count(n->inputs[k])) continue;
        reads = true;
        shapes = !IsDataOperand(*n, k);
      }
      for (const Value* v : n->implicit_inputs) shapes |= derived.count(v) > 0;
      if (shapes) break;
      if (!reads) continue;
      for (const Value* v : n->outputs) {
        if (v) derived.insert(v);
      }
    }
    out[i] = shapes;
  }
  return out;
}

}  // namespace cjit
