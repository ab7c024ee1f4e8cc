#include "compiler/passes/specialization_replay.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/ops/op_registry.h"
#include "compiler/passes/mark_for_compilation.h"
#include "compiler/passes/simplify.h"

namespace cjit {
namespace {

thread_local ReplayRecorder* current_recorder = nullptr;

absl::Status Miss(absl::string_view why) { return absl::FailedPreconditionError(why); }

bool IsCluster(const Node& n) { return n.op_type == kClusterOp; }

// Calls f(graph) for `g` and every cluster body in it, recursively.
template <typename F>
void ForEachGraph(const Graph& g, const F& f) {
  f(g);
  for (const auto& n : g.nodes()) {
    if (!IsCluster(*n)) continue;
    if (const Graph* body = n->GetGraph("body")) ForEachGraph(*body, f);
  }
}

void CopyDefinition(const Node& from, Node* to) {
  to->domain = from.domain;
  to->opset_version = from.opset_version;
  to->attrs = from.attrs;
}

}  // namespace

Tensor ShapeOfDims(const Node& n, const Dims& d) {
  if (n.op_type == "Size") {
    Tensor t(DType::kI64, {});
    *t.data<int64_t>() = NumElements(d);
    return t;
  }
  int64_t r = static_cast<int64_t>(d.size());
  int64_t start = n.GetInt("start", 0), end = n.GetInt("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, 0, r);
  Tensor t(DType::kI64, {std::max<int64_t>(0, end - start)});
  for (int64_t i = start; i < end; ++i) t.data<int64_t>()[i - start] = d[i];
  return t;
}

// ---------------------------------------------------------------------------------------------------------
// Recording

ReplayRecorder::ReplayRecorder(int64_t max_folded_elements)
    : previous_(current_recorder), max_folded_elements_(max_folded_elements), recipes_(std::make_unique<Graph>()) {
  recipes_->name = "replay recipes";
  current_recorder = this;
}

ReplayRecorder::~ReplayRecorder() { current_recorder = previous_; }

ReplayRecorder* ReplayRecorder::Current() { return current_recorder; }

void ReplayRecorder::Unreplayable(const std::string& why) {
  if (unreplayable_.empty()) unreplayable_ = why;
}

Value* ReplayRecorder::SourceOf(const Value* v) {
  auto it = derived_.find(v);
  if (it != derived_.end()) return it->second;
  if (v->is_constant()) return recipes_->AddConstant(v->name, v->constant);
  return nullptr;
}

void ReplayRecorder::OnFold(const Node& n, bool shape_only, const std::vector<Value*>& folded) {
  std::vector<Value*> ins;
  if (shape_only && !n.inputs[0]->is_constant()) {
    const Value* x = n.inputs[0];
    auto [it, inserted] = leaves_.try_emplace(x->name, nullptr);
    if (inserted) it->second = recipes_->AddInput(x->name, x->dtype, Shape::Unknown());
    ins.push_back(it->second);
  } else {
    bool derived = false;
    for (const Value* v : n.inputs) derived |= v != nullptr && derived_.count(v) > 0;
    if (!derived) return;  // folded from constants alone: the same value for every signature
    for (const Value* v : n.inputs) {
      if (v == nullptr) {
        ins.push_back(nullptr);
        continue;
      }
      Value* s = SourceOf(v);
      if (s == nullptr) {
        Unreplayable(absl::StrCat(n.Describe(), " was folded from the non-constant %", v->name));
        return;
      }
      ins.push_back(s);
    }
  }
  std::vector<std::string> outs;
  for (size_t k = 0; k < n.outputs.size(); ++k) outs.push_back(n.outputs[k] ? absl::StrCat(n.name, "#", k) : "");
  Node* r = recipes_->AddNode(n.op_type, n.name, ins, outs);
  CopyDefinition(n, r);
  for (size_t k = 0; k < folded.size() && k < r->outputs.size(); ++k) {
    if (folded[k] && r->outputs[k]) derived_[folded[k]] = r->outputs[k];
  }
}

void ReplayRecorder::OnLayoutTwin(const Value& v, const Value& twin, std::vector<int64_t> twin_to_v) {
  twins_.try_emplace(v.name, twin.name, std::move(twin_to_v));
}

void ReplayRecorder::OnInlineIf(const Node& n) {
  if (!n.inputs.empty() && n.inputs[0] && derived_.count(n.inputs[0])) {
    Unreplayable(absl::StrCat(n.Describe(), " was inlined on a condition computed from input dims"));
  }
}

void ReplayRecorder::OnIdentityReshapeRemoved(const Node& n) {
  const Value* x = n.inputs[0];
  auto [it, inserted] = leaves_.try_emplace(x->name, nullptr);
  if (inserted) it->second = recipes_->AddInput(x->name, x->dtype, Shape::Unknown());
  std::vector<Value*> ins{it->second};
  for (size_t i = 1; i < n.inputs.size(); ++i) {
    const Value* v = n.inputs[i];
    if (v == nullptr) {
      ins.push_back(nullptr);
      continue;
    }
    if (!v->is_constant() || derived_.count(v)) {
      Unreplayable(absl::StrCat(n.Describe(), " was removed as an identity with a shape computed from input dims"));
      return;
    }
    ins.push_back(SourceOf(v));
  }
  Node* g = recipes_->AddNode(n.op_type, n.name, ins, {absl::StrCat(n.name, "#guard")});
  CopyDefinition(n, g);
  guards_.push_back(g);
}

void ReplayRecorder::AfterSpecializeShapes(const Graph& specialized) {
  auto count = [&](const Value* v) {
    auto it = v ? derived_.find(v) : derived_.end();
    if (it == derived_.end()) return;
    auto& [rv, readers] = frontier_[v->name];
    rv = it->second;
    ++readers;
  };
  for (const auto& n : specialized.nodes()) {
    for (const Value* v : n->inputs) count(v);
    for (const Value* v : n->implicit_inputs) count(v);
  }
  for (const Value* v : specialized.outputs()) count(v);
}

std::shared_ptr<const ReplayTemplate> ReplayRecorder::Finish(std::shared_ptr<const Graph> final_graph,
                                                             std::string* why) {
  if (!unreplayable_.empty()) {
    *why = unreplayable_;
    return nullptr;
  }
  // Every reader of a shape-derived constant must still read it: a pass that rewrote or dropped one
  // (folded it into another constant, removed its reader) decided something from its value.
  std::unordered_map<std::string, int> readers;
  std::unordered_set<std::string> defined;  // non-constant values (node outputs, inputs) by name
  ForEachGraph(*final_graph, [&](const Graph& g) {
    auto count = [&](const Value* v) {
      if (v && v->is_constant() && frontier_.count(v->name)) ++readers[v->name];
    };
    for (const auto& n : g.nodes()) {
      for (const Value* v : n->inputs) count(v);
      for (const Value* v : n->implicit_inputs) count(v);
      for (const Value* v : n->outputs) {
        if (v && leaves_.count(v->name)) defined.insert(v->name);
      }
    }
    for (const Value* v : g.inputs()) {
      if (leaves_.count(v->name)) defined.insert(v->name);
    }
  });
  for (const Value* v : final_graph->outputs()) {
    if (v && v->is_constant() && frontier_.count(v->name)) ++readers[v->name];
  }
  for (const auto& [name, entry] : frontier_) {
    int now = readers.count(name) ? readers[name] : 0;
    if (now != entry.second) {
      *why = absl::StrCat("the constant %", name, " derived from input dims has ", entry.second,
                          " readers after folding and ", now, " in the specialized graph");
      return nullptr;
    }
  }
  // A leaf the layout pass replaced by a twin (OnLayoutTwin) is read from the twin, if the twin is there.
  std::map<std::string, std::pair<std::string, std::vector<int64_t>>> aliases;  // twin -> (leaf, perm)
  for (const auto& [name, leaf] : leaves_) {
    if (defined.count(name)) continue;
    auto twin = twins_.find(name);
    bool present = false;
    if (twin != twins_.end()) {
      ForEachGraph(*final_graph, [&](const Graph& g) {
        for (const auto& n : g.nodes()) {
          for (const Value* v : n->outputs) present |= v != nullptr && v->name == twin->second.first;
        }
      });
    }
    if (!present) {
      *why = absl::StrCat("%", name, ", whose dims a folded Shape or a guard reads, is not in the specialized graph");
      return nullptr;
    }
    aliases[twin->second.first] = {name, twin->second.second};
  }
  auto t = std::make_shared<ReplayTemplate>();
  // A compact copy (live values only, cluster bodies too): every replay clones it.
  std::shared_ptr<Graph> compact(final_graph->Clone().release());
  compact->RemoveUnusedValues();
  for (const auto& n : compact->nodes()) {
    if (!IsCluster(*n) || n->GetGraph("body") == nullptr) continue;
    std::shared_ptr<Graph> body(n->GetGraph("body")->Clone().release());
    body->RemoveUnusedValues();
    n->attrs["body"].g = std::move(body);
  }
  t->graph = std::move(compact);
  t->recipes = std::move(recipes_);
  for (const auto& [name, entry] : frontier_) t->frontier[name] = entry.first;
  t->guards = guards_;
  for (const auto& [name, leaf] : leaves_) t->watched.insert(name);
  t->aliases = std::move(aliases);
  t->max_folded_elements = max_folded_elements_;
  t->constants_rederived = static_cast<int>(frontier_.size());
  recipes_ = std::make_unique<Graph>();
  return t;
}

// ---------------------------------------------------------------------------------------------------------
// Recipe evaluation

absl::StatusOr<Dims> RecipeEvaluator::LeafDims(const std::string& name) {
  if (const Dims* d = dims_of_(name)) return *d;
  // A leaf the layout pass replaced by a channels-last twin: the twin's dims, permuted back.
  for (const auto& [twin, leaf] : t_.aliases) {
    if (leaf.first != name) continue;
    const Dims* d = dims_of_(twin);
    if (d == nullptr) break;
    Dims out;
    for (int64_t axis : leaf.second) {
      if (axis < 0 || axis >= static_cast<int64_t>(d->size()))
        return Miss(absl::StrCat("bad twin permutation for %", name));
      out.push_back((*d)[static_cast<size_t>(axis)]);
    }
    return out;
  }
  return Miss(absl::StrCat("the dims of %", name, " are not known yet"));
}

absl::StatusOr<std::shared_ptr<const Tensor>> RecipeEvaluator::EvalConstant(const std::string& name) {
  auto it = t_.frontier.find(name);
  if (it == t_.frontier.end()) return Miss(absl::StrCat("%", name, " is not derived from dims"));
  return Eval(it->second);
}

absl::StatusOr<std::shared_ptr<const Tensor>> RecipeEvaluator::Eval(const Value* rv) {
  if (rv->is_constant()) return rv->constant;
  auto it = memo_.find(rv);
  if (it != memo_.end()) return it->second;
  const Node* p = rv->producer;
  if (p == nullptr) return Miss(absl::StrCat("recipe value %", rv->name, " has no producer"));
  std::vector<Tensor> values;
  const Value* x = p->inputs.empty() ? nullptr : p->inputs[0];
  if ((p->op_type == "Shape" || p->op_type == "Size") && x && x->producer == nullptr && !x->is_constant()) {
    CJIT_ASSIGN_OR_RETURN(Dims d, LeafDims(x->name));
    values.push_back(ShapeOfDims(*p, d));
  } else {
    std::vector<std::shared_ptr<const Tensor>> keep;
    std::vector<const Tensor*> args;
    for (const Value* in : p->inputs) {
      if (in == nullptr) {
        args.push_back(nullptr);
        continue;
      }
      CJIT_ASSIGN_OR_RETURN(std::shared_ptr<const Tensor> a, Eval(in));
      args.push_back(a.get());
      keep.push_back(std::move(a));
    }
    auto r = evaluate_(*p, args);
    if (!r.ok()) return Miss(absl::StrCat("re-deriving ", p->Describe(), ": ", r.status().message()));
    values = std::move(*r);
  }
  int64_t elems = 0;
  for (const Tensor& t : values) elems += t.numel();
  if (elems > t_.max_folded_elements) return Miss(absl::StrCat(p->Describe(), " folds to ", elems, " elements"));
  for (size_t k = 0; k < p->outputs.size() && k < values.size(); ++k) {
    if (p->outputs[k]) memo_[p->outputs[k]] = std::make_shared<const Tensor>(std::move(values[k]));
  }
  it = memo_.find(rv);
  if (it == memo_.end()) return Miss(absl::StrCat(p->Describe(), " did not produce %", rv->name));
  return it->second;
}

// ---------------------------------------------------------------------------------------------------------
// Replay

namespace {

class Replayer {
 public:
  Replayer(const ReplayTemplate& t, const ConstantEvaluator& evaluate) : t_(t), evaluate_(evaluate) {}

  // Re-derives the frontier constants of `g`, then every value's shape from `inputs`; cluster bodies are
  // cloned and re-inferred from their cluster's inputs.
  absl::Status InferGraph(Graph& g, const std::vector<Shape>& inputs) {
    if (inputs.size() != g.inputs().size()) return Miss("input count differs");
    for (size_t i = 0; i < inputs.size(); ++i) {
      Value* v = g.inputs()[i];
      if (v->shape.rank_known && (!inputs[i].rank_known || inputs[i].rank() != v->shape.rank())) {
        return Miss(absl::StrCat("input %", v->name, " changed rank"));
      }
      v->shape = inputs[i];
      Watch(v);
    }
    CJIT_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopologicalOrder());
    // A reshape-like node the template kept (its output dims differed from its input's) must not become
    // an identity: the full pipeline's RemoveNoOps would remove it for these dims, and the replayed graph
    // would differ from the full one (the mirror image of the guards on removed identities).
    std::unordered_set<const Node*> kept_reshapes;
    for (const Node* n : order) {
      if (IsReshapeLike(n->op_type) && !IsIdentityReshape(*n)) kept_reshapes.insert(n);
    }
    std::vector<InferInput> in;
    std::vector<InferOutput> out;
    for (Node* n : order) {
      for (Value* v : n->inputs) {
        if (v) CJIT_RETURN_IF_ERROR(Rederive(v));
      }
      for (Value* v : n->implicit_inputs) CJIT_RETURN_IF_ERROR(Rederive(v));
      out.clear();
      if (IsCluster(*n)) {
        const Graph* body = n->GetGraph("body");
        if (body == nullptr) return Miss(absl::StrCat(n->Describe(), " has no body"));
        std::shared_ptr<Graph> copy(body->Clone().release());
        std::vector<Shape> shapes;
        for (const Value* v : n->inputs) shapes.push_back(v->shape);
        CJIT_RETURN_IF_ERROR(InferGraph(*copy, shapes));
        if (copy->outputs().size() != n->outputs.size()) return Miss(absl::StrCat(n->Describe(), ": output count"));
        for (const Value* v : copy->outputs()) out.push_back(InferOutput{v->dtype, v->shape});
        n->attrs["body"].g = std::move(copy);
      } else {
        in.clear();
        for (const Value* v : n->inputs) in.push_back(InferInputOf(v));
        absl::Status s = InferNode(*n, in, out);
        if (!s.ok()) return Miss(absl::StrCat("shape inference: ", s.message()));
      }
      for (size_t k = 0; k < n->outputs.size(); ++k) {
        Value* v = n->outputs[k];
        if (v == nullptr) continue;
        if (k >= out.size()) return Miss(absl::StrCat(n->Describe(), ": output count"));
        CJIT_RETURN_IF_ERROR(Update(*n, v, out[k]));
      }
      if (kept_reshapes.count(n) && IsIdentityReshape(*n)) {
        return Miss(absl::StrCat(n->Describe(), ", kept by the template, is an identity for these dims"));
      }
    }
    for (Value* v : g.outputs()) {
      if (v) CJIT_RETURN_IF_ERROR(Rederive(v));
    }
    return absl::OkStatus();
  }

  absl::Status CheckGuards() {
    std::vector<InferOutput> out;
    for (const Node* guard : t_.guards) {
      const Value* x = guard->inputs[0];
      auto it = dims_.find(x->name);
      if (it == dims_.end()) return Miss(absl::StrCat("no dims for %", x->name, " (guard ", guard->Describe(), ")"));
      // Input 0 with its dims for this signature; the others are constants (their values as recorded).
      std::vector<InferInput> in;
      for (const Value* v : guard->inputs) in.push_back(InferInputOf(v));
      in[0].shape = Shape::Of(it->second);
      out.clear();
      absl::Status s = InferNode(*guard, in, out);
      if (!s.ok()) return Miss(absl::StrCat("guard ", guard->Describe(), ": ", s.message()));
      if (out.empty() || !out[0].shape.fully_known() || out[0].shape.concrete() != it->second) {
        return Miss(absl::StrCat(guard->Describe(), ", removed as an identity, is not one for these dims"));
      }
    }
    return absl::OkStatus();
  }

 private:
  void Watch(const Value* v) {
    if (!v->shape.fully_known()) return;
    if (t_.watched.count(v->name)) dims_[v->name] = v->shape.concrete();
    auto a = t_.aliases.find(v->name);
    if (a != t_.aliases.end()) {
      const Dims d = v->shape.concrete();
      Dims leaf;
      for (int64_t axis : a->second.second) leaf.push_back(d[static_cast<size_t>(axis)]);
      dims_[a->second.first] = std::move(leaf);
    }
  }

  absl::Status Update(const Node& n, Value* v, const InferOutput& o) {
    if (o.dtype != v->dtype) return Miss(absl::StrCat(n.Describe(), ": output %", v->name, " changed dtype"));
    if (v->shape.rank_known && (!o.shape.rank_known || o.shape.rank() != v->shape.rank())) {
      return Miss(absl::StrCat(n.Describe(), ": output %", v->name, " changed rank"));
    }
    if (v->shape.fully_known() && !o.shape.fully_known()) {
      return Miss(absl::StrCat(n.Describe(), ": output %", v->name, " has unknown dims now"));
    }
    v->shape = o.shape;
    Watch(v);
    return absl::OkStatus();
  }

  // A frontier constant gets its value for the new dims (once per Value).
  absl::Status Rederive(Value* v) {
    if (!v->is_constant()) return absl::OkStatus();
    auto it = t_.frontier.find(v->name);
    if (it == t_.frontier.end() || !done_.insert(v).second) return absl::OkStatus();
    CJIT_ASSIGN_OR_RETURN(std::shared_ptr<const Tensor> value, recipes_.Eval(it->second));
    if (value->dtype() != v->dtype) return Miss(absl::StrCat("the re-derived %", v->name, " changed dtype"));
    v->constant = value;
    v->shape = Shape::Of(value->dims());
    return absl::OkStatus();
  }

  const ReplayTemplate& t_;
  const ConstantEvaluator& evaluate_;
  std::unordered_map<std::string, Dims> dims_;  // watched values (and aliased leaves) inferred so far
  RecipeEvaluator recipes_{t_, evaluate_, [this](const std::string& name) -> const Dims* {
                             auto it = dims_.find(name);
                             return it == dims_.end() ? nullptr : &it->second;
                           }};
  std::unordered_set<const Value*> done_;
};

std::string AttrKinds(const Node& n) {
  std::string s;
  for (const auto& [k, a] : n.attrs) absl::StrAppend(&s, k, ":", static_cast<int>(a.kind), ";");
  return s;
}

std::string ValueDiff(const Value* a, const Value* b) {
  if ((a == nullptr) != (b == nullptr)) return "one is absent";
  if (a == nullptr) return "";
  if (a->name != b->name) return absl::StrCat("%", a->name, " vs %", b->name);
  if (a->dtype != b->dtype)
    return absl::StrCat("%", a->name, ": dtype ", DTypeName(a->dtype), " vs ", DTypeName(b->dtype));
  if (a->shape.ToString() != b->shape.ToString()) {
    return absl::StrCat("%", a->name, ": shape ", a->shape.ToString(), " vs ", b->shape.ToString());
  }
  if (a->is_constant() != b->is_constant()) return absl::StrCat("%", a->name, ": constant in one only");
  if (a->is_constant() && a->constant != b->constant) {
    const Tensor& x = *a->constant;
    const Tensor& y = *b->constant;
    if (x.dtype() != y.dtype() || x.dims() != y.dims() ||
        (x.numel() > 0 && std::memcmp(x.raw(), y.raw(), x.numel() * DTypeSize(x.dtype())) != 0)) {
      return absl::StrCat("constant %", a->name, " has other contents");
    }
  }
  return "";
}

// Float attributes compare by bit pattern: a NaN alpha is the same attribute in both graphs (NaN != NaN).
bool SameFloatBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

bool SameFloatsBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace

absl::StatusOr<std::shared_ptr<Graph>> ReplaySpecialization(const ReplayTemplate& t,
                                                            const std::vector<Dims>& input_dims,
                                                            const ConstantEvaluator& evaluate) {
  std::shared_ptr<Graph> g(t.graph->Clone().release());
  if (input_dims.size() != g->inputs().size()) return Miss("input count differs");
  std::vector<Shape> shapes;
  for (size_t i = 0; i < input_dims.size(); ++i) {
    shapes.push_back(SignatureInputShape(*g->inputs()[i], input_dims[i]));
  }
  Replayer r(t, evaluate);
  CJIT_RETURN_IF_ERROR(r.InferGraph(*g, shapes));
  CJIT_RETURN_IF_ERROR(r.CheckGuards());
  return g;
}

std::string DescribeGraphDifference(const Graph& a, const Graph& b) {
  if (a.inputs().size() != b.inputs().size() || a.outputs().size() != b.outputs().size()) return "input/output counts";
  for (size_t i = 0; i < a.inputs().size(); ++i) {
    std::string d = ValueDiff(a.inputs()[i], b.inputs()[i]);
    if (!d.empty()) return "input " + d;
  }
  if (a.nodes().size() != b.nodes().size()) {
    return absl::StrCat(a.nodes().size(), " nodes vs ", b.nodes().size());
  }
  for (size_t i = 0; i < a.nodes().size(); ++i) {
    const Node& x = *a.nodes()[i];
    const Node& y = *b.nodes()[i];
    if (x.op_type != y.op_type || x.name != y.name || x.domain != y.domain || AttrKinds(x) != AttrKinds(y) ||
        x.inputs.size() != y.inputs.size() || x.outputs.size() != y.outputs.size()) {
      return absl::StrCat("node ", i, ": ", x.Describe(), " vs ", y.Describe());
    }
    for (size_t k = 0; k < x.inputs.size(); ++k) {
      std::string d = ValueDiff(x.inputs[k], y.inputs[k]);
      if (!d.empty()) return absl::StrCat(x.Describe(), " input ", k, ": ", d);
    }
    for (size_t k = 0; k < x.outputs.size(); ++k) {
      std::string d = ValueDiff(x.outputs[k], y.outputs[k]);
      if (!d.empty()) return absl::StrCat(x.Describe(), " output ", k, ": ", d);
    }
    for (const auto& [key, attr] : x.attrs) {
      const Attribute& other = y.attrs.at(key);
      if (attr.kind == Attribute::Kind::kGraph && IsCluster(x)) {
        std::string d = DescribeGraphDifference(*attr.g, *other.g);
        if (!d.empty()) return absl::StrCat(x.Describe(), " body: ", d);
      } else if (attr.i != other.i || !SameFloatBits(attr.f, other.f) || attr.s != other.s || attr.ints != other.ints ||
                 !SameFloatsBits(attr.floats, other.floats) || attr.strings != other.strings) {
        return absl::StrCat(x.Describe(), " attribute ", key);
      }
    }
  }
  for (size_t i = 0; i < a.outputs().size(); ++i) {
    std::string d = ValueDiff(a.outputs()[i], b.outputs()[i]);
    if (!d.empty()) return "output " + d;
  }
  return "";
}

}  // namespace cjit
