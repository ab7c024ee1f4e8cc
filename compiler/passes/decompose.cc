// LayerNormalization -> its ONNX function body (see decompose.h). Each new value gets X's dtype and shape
// (the reductions keep their axes as 1), so the specialized graph stays fully shaped.
#include "compiler/passes/decompose.h"

#include <unordered_set>

#include "absl/strings/str_cat.h"

namespace cjit {
namespace {

bool HasReaders(const Graph& g, const Value* v) {
  if (v == nullptr) return false;
  for (const Value* o : g.outputs()) {
    if (o == v) return true;
  }
  for (const auto& n : g.nodes()) {
    for (const Value* in : n->inputs) {
      if (in == v) return true;
    }
    for (const Value* in : n->implicit_inputs) {
      if (in == v) return true;
    }
  }
  return false;
}

}  // namespace

absl::StatusOr<bool> DecomposeLayerNormalization(Graph& g) {
  std::vector<Node*> candidates;
  for (const auto& n : g.nodes()) {
    if (n->op_type != "LayerNormalization" || !n->domain.empty() || n->inputs.size() < 2) continue;
    const Value* x = n->inputs[0];
    if (x == nullptr || n->inputs[1] == nullptr || x->dtype != DType::kF32 || !x->shape.rank_known ||
        x->shape.rank() == 0 || n->outputs.empty() || n->outputs[0] == nullptr) {
      continue;
    }
    if (n->GetInt("stash_type", 1) != 1) continue;
    bool extra_outputs_read = false;
    for (size_t k = 1; k < n->outputs.size(); ++k) extra_outputs_read |= HasReaders(g, n->outputs[k]);
    if (extra_outputs_read) continue;
    bool params_ok = true;
    for (size_t k = 1; k < n->inputs.size() && k < 3; ++k) {
      params_ok &= n->inputs[k] == nullptr || n->inputs[k]->dtype == DType::kF32;
    }
    if (params_ok) candidates.push_back(n.get());
  }
  if (candidates.empty()) return false;
  for (Node* n : candidates) {
    Value* x = n->inputs[0];
    const int rank = x->shape.rank();
    int64_t axis = n->GetInt("axis", -1);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) continue;  // the kernel reports a bad axis
    std::vector<int64_t> axes;
    for (int64_t a = axis; a < rank; ++a) axes.push_back(a);
    Shape reduced = x->shape;
    for (int64_t a : axes) reduced.dims[a] = Dim{1, ""};
    const std::string p = n->name + "/ln_";
    auto add = [&](const char* op, std::vector<Value*> ins, const Shape& shape) {
      const std::string name = p + op + std::to_string(g.nodes().size());
      Node* m = g.AddNode(op, name, std::move(ins), {name});
      m->opset_version = 13;
      m->outputs[0]->dtype = DType::kF32;
      m->outputs[0]->shape = shape;
      return m;
    };
    auto scalar = [&](const char* what, float v) {
      Tensor t(DType::kF32, {});
      *t.data<float>() = v;
      return g.AddConstant(p + what, std::move(t));
    };
    Node* mean = add("ReduceMean", {x}, reduced);
    mean->attrs["axes"] = Attribute::Ints(axes);
    mean->attrs["keepdims"] = Attribute::Int(1);
    Node* d = add("Sub", {x, mean->outputs[0]}, x->shape);
    Node* sq = add("Pow", {d->outputs[0], scalar("two", 2.0f)}, x->shape);
    Node* var = add("ReduceMean", {sq->outputs[0]}, reduced);
    var->attrs["axes"] = Attribute::Ints(axes);
    var->attrs["keepdims"] = Attribute::Int(1);
    Node* ve = add("Add", {var->outputs[0], scalar("epsilon", n->GetFloat("epsilon", 1e-5f))}, reduced);
    Node* sd = add("Sqrt", {ve->outputs[0]}, reduced);
    Node* norm = add("Div", {d->outputs[0], sd->outputs[0]}, x->shape);
    Node* scaled = add("Mul", {norm->outputs[0], n->inputs[1]}, x->shape);
    Value* y = scaled->outputs[0];
    if (n->inputs.size() > 2 && n->inputs[2] != nullptr) y = add("Add", {y, n->inputs[2]}, x->shape)->outputs[0];
    g.ReplaceAllUses(n->outputs[0], y);
    g.RemoveNode(n);
  }
  return true;
}

}  // namespace cjit
