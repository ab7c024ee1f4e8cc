#include "compiler/passes/auto_mixed_precision.h"

#include "compiler/ir/constant_memo.h"

#include <cmath>
#include <deque>
#include <initializer_list>
#include <map>
#include <mutex>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "compiler/ir/cpu_isa.h"
#include "compiler/ir/float16.h"
#include "compiler/ir/text.h"
#include "compiler/ops/op_schemas.h"

namespace cjit {
namespace {

// A constant converted to the low type, made once per source tensor while it lives (compiler/ir/
// constant_memo.h): each weight is converted once per session, not once per signature.
std::shared_ptr<const Tensor> ConvertedConstant(const std::shared_ptr<const Tensor>& src, DType to) {
  return DerivedConstant(src, 0x616d7000u + static_cast<uint64_t>(to), [&] { return ConvertFloatTensor(*src, to); });
}

// The op table's classes (defaults; edited by AmpOptions). Ops not in the table are deny (as TensorFlow).
std::set<std::string> DefaultList(AmpClass c) {
  std::set<std::string> out;
  for (const std::string& op : SupportedOps()) {
    const OpDef* d = FindOp("", op);
    if (d != nullptr && d->amp == c) out.insert(op);
  }
  return out;
}

AmpClass TableClass(const std::string& op) {
  const OpDef* d = FindOp("", op);
  return d != nullptr ? d->amp : AmpClass::kDeny;
}

const std::set<std::string>& Added(AmpClass c, const AmpOptions& o) {
  switch (c) {
    case AmpClass::kAllow: return o.allow_add;
    case AmpClass::kInfer: return o.infer_add;
    case AmpClass::kDeny: return o.deny_add;
    case AmpClass::kClear: return o.clear_add;
  }
  return o.deny_add;
}
const std::set<std::string>& Removed(AmpClass c, const AmpOptions& o) {
  switch (c) {
    case AmpClass::kAllow: return o.allow_remove;
    case AmpClass::kInfer: return o.infer_remove;
    case AmpClass::kDeny: return o.deny_remove;
    case AmpClass::kClear: return o.clear_remove;
  }
  return o.deny_remove;
}

// The list an op is in after the edits: an added op leaves its default list; precedence of additions as
// TensorFlow's (deny, then allow, infer, clear), a removed op falls to deny.
AmpClass ClassOf(const std::string& op, const AmpOptions& o) {
  for (AmpClass c : {AmpClass::kDeny, AmpClass::kAllow, AmpClass::kInfer, AmpClass::kClear}) {
    if (Added(c, o).count(op)) return c;
  }
  const AmpClass c = TableClass(op);
  return Removed(c, o).count(op) ? AmpClass::kDeny : c;
}

int OnnxTypeCode(DType t) { return t == DType::kF16 ? 10 : t == DType::kBF16 ? 16 : 1; }

// Data edges of a node: inputs/outputs bound to the type parameter of output 0 in its schema.
struct DataEdges {
  std::vector<int> inputs, outputs;
  bool ok = false;
};

DataEdges DataEdgesOf(const Node& n, int64_t opset) {
  DataEdges e;
  if (!n.domain.empty() || n.outputs.empty() || n.outputs[0] == nullptr) return e;
  int first = 0;
  // Opset unknown (a graph built in code or text): the newest supported.
  const int64_t version = n.opset_version > 0 ? n.opset_version : opset > 0 ? opset : 21;
  const OpSchemaVersion* s = FindOpSchema(n.op_type, static_cast<int>(version), &first);
  if (s == nullptr || s->outputs.empty() || s->inputs.empty()) return e;
  const std::string& t = s->outputs[0].type;
  if (t.empty() || t[0] == '!') return e;
  auto formal_type = [](const std::vector<OpSchemaFormal>& f, size_t i) -> const std::string& {
    return f[std::min(i, f.size() - 1)].type;  // a trailing variadic formal covers the rest
  };
  // Sequences and optionals (an Identity of a sequence) are never cast.
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (n.inputs[i] && n.inputs[i]->kind == ValueKind::kTensor && formal_type(s->inputs, i) == t) {
      e.inputs.push_back(static_cast<int>(i));
    }
  }
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    if (n.outputs[i] && n.outputs[i]->kind == ValueKind::kTensor && formal_type(s->outputs, i) == t) {
      e.outputs.push_back(static_cast<int>(i));
    }
  }
  e.ok = !e.outputs.empty();
  return e;
}

bool HasSubgraph(const Node& n) {
  for (const auto& [name, a] : n.attrs) {
    if (a.kind == Attribute::Kind::kGraph || a.kind == Attribute::Kind::kGraphs) return true;
  }
  return !n.implicit_inputs.empty();
}

bool BeyondHalfRange(const Tensor& t) {
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (std::isfinite(p[i]) && std::fabs(p[i]) > 65504.0f) return true;
  }
  return false;
}

// Breadth-first propagation over node indices [0, n): from every node `seed` accepts, along each adjacency
// list in `edges`, to each neighbour `visit(from, to)` accepts (it marks the neighbour and returns true).
template <typename Seed, typename Visit>
void Propagate(size_t n, Seed seed, std::initializer_list<const std::vector<std::vector<int>>*> edges, Visit visit) {
  std::deque<int> q;
  for (size_t i = 0; i < n; ++i) {
    if (seed(static_cast<int>(i))) q.push_back(static_cast<int>(i));
  }
  while (!q.empty()) {
    const int i = q.front();
    q.pop_front();
    for (const std::vector<std::vector<int>>* e : edges) {
      for (int j : (*e)[i]) {
        if (visit(i, j)) q.push_back(j);
      }
    }
  }
}


}  // namespace

const char* AmpClassName(AmpClass c) {
  switch (c) {
    case AmpClass::kAllow: return "allow";
    case AmpClass::kInfer: return "infer";
    case AmpClass::kDeny: return "deny";
    case AmpClass::kClear: return "clear";
  }
  return "deny";
}

int64_t ProductMacs(const Node& node) {
  auto dims = [](const Value* v, Dims* d) {
    if (v == nullptr || !v->shape.fully_known()) return false;
    *d = v->shape.concrete();
    return true;
  };
  auto count = [](const Dims& d, size_t from) {
    int64_t n = 1;
    for (size_t i = from; i < d.size(); ++i) n *= d[i];
    return n;
  };
  Dims x, w, y;
  if (node.outputs.empty() || !dims(node.outputs[0], &y)) return -1;
  if (node.op_type == "Conv" || node.op_type == "ConvTranspose") {
    if (node.inputs.size() < 2 || !dims(node.input(0), &x) || !dims(node.input(1), &w) || w.size() < 2) return -1;
    // Conv: every output element sums C/group x kernel products; ConvTranspose: every input element
    // scatters into OC/group x kernel outputs (w is [C, OC/group, k...]).
    return node.op_type == "Conv" ? count(y, 0) * count(w, 1) : count(x, 0) * count(w, 1);
  }
  if (node.op_type == "MatMul" || node.op_type == "Gemm") {
    if (node.inputs.empty() || !dims(node.input(0), &x) || x.empty()) return -1;
    const bool trans_a = node.op_type == "Gemm" && node.GetInt("transA", 0) != 0;
    const int64_t k = trans_a && x.size() >= 2 ? x[x.size() - 2] : x.back();
    return count(y, 0) * k;
  }
  return -1;
}

AmpClass DefaultAmpClass(const std::string& op_type) { return ClassOf(op_type, AmpOptions{}); }

std::vector<std::string> AmpListInEffect(AmpClass c, const AmpOptions& options) {
  std::set<std::string> ops = DefaultList(c);
  for (AmpClass other : {AmpClass::kAllow, AmpClass::kInfer, AmpClass::kDeny, AmpClass::kClear}) {
    for (const std::string& op : Added(other, options)) ops.insert(op);
  }
  std::vector<std::string> out;
  for (const std::string& op : ops) {
    if (ClassOf(op, options) == c) out.push_back(op);
  }
  return out;
}

namespace {

// Per node of the graph (topological order): its class and data edges, and the painting's state.
struct AmpNodeInfo {
  AmpClass cls = AmpClass::kDeny;
  DataEdges edges;
  bool paintable = false, allow = false, deny = false, output_f32 = false;
  std::string reason;
};

// The graph as the painting sees it: nodes in topological order, float32 data edges between them both ways.
struct AmpGraph {
  std::vector<Node*> order;
  std::unordered_map<const Node*, int> index;
  std::vector<AmpNodeInfo> info;
  std::vector<std::vector<int>> producers, consumers;
  std::set<const Value*> captured;  // read by subgraphs: keeps its dtype
  bool is(int i, AmpClass c) const { return info[i].paintable && info[i].cls == c; }
  size_t size() const { return order.size(); }
};

// Each node's class (the lists, a host rule, the cost rule) and the float32 edges between nodes.
absl::Status ClassifyNodes(const Graph& g, const AmpOptions& o, AmpGraph* a) {
  CJIT_ASSIGN_OR_RETURN(a->order, g.TopologicalOrder());
  const size_t n = a->order.size();
  for (size_t i = 0; i < n; ++i) a->index[a->order[i]] = static_cast<int>(i);
  a->info.resize(n);
  a->producers.resize(n);
  a->consumers.resize(n);
  for (Node* node : a->order) {
    for (const Value* v : node->implicit_inputs) a->captured.insert(v);
  }
  for (size_t i = 0; i < n; ++i) {
    const Node& node = *a->order[i];
    AmpNodeInfo& f = a->info[i];
    f.edges = DataEdgesOf(node, g.opset);
    for (int k : f.edges.inputs) f.paintable = f.paintable || node.inputs[k]->dtype == DType::kF32;
    for (int k : f.edges.outputs) f.paintable = f.paintable || node.outputs[k]->dtype == DType::kF32;
    if (!f.paintable) continue;
    f.cls = ClassOf(node.op_type, o);
    f.reason = absl::StrCat("in the ", AmpClassName(f.cls), " list");
    if (std::optional<AmpRule> rule = o.hook ? o.hook(node) : std::nullopt) {
      f.cls = rule->cls;
      f.output_f32 = rule->output == DType::kF32;
      f.reason = absl::StrCat("host rule: ", AmpClassName(f.cls));
    } else if (f.cls == AmpClass::kAllow && o.min_allow_macs > 0) {
      // The cost rule applies to the lists' decisions only: a host rule decides first.
      const int64_t macs = ProductMacs(node);
      if (macs >= 0 && macs < o.min_allow_macs) {
        f.cls = AmpClass::kDeny;
        f.reason = absl::StrCat("cost rule: ", macs, " multiply-adds < --amp_min_allow_macs=", o.min_allow_macs);
      }
    }
    for (const Value* v : node.inputs) {
      if (v == nullptr || v->dtype != DType::kF32 || v->producer == nullptr) continue;
      auto it = a->index.find(v->producer);
      if (it == a->index.end()) continue;
      a->producers[i].push_back(it->second);
      a->consumers[it->second].push_back(static_cast<int>(i));
    }
  }
  return absl::OkStatus();
}

// Steps 1-4 of TensorFlow's AutoMixedPrecision painting on the classes: allow ops; deny forward through
// infer (and clear ops upstream of a deny/infer op); infer/clear between allow ops become allow; allow
// through clear ops both ways.
void PaintAllowAndDeny(AmpGraph& a) {
  const size_t n = a.size();
  std::vector<AmpNodeInfo>& info = a.info;
  auto is = [&](int i, AmpClass c) { return a.is(i, c); };
  // 1. allow ops.
  for (size_t i = 0; i < n; ++i) info[i].allow = is(static_cast<int>(i), AmpClass::kAllow);
  // 2. deny forward through infer, and through clear ops upstream of a deny/infer op.
  std::vector<bool> upstream(n, false);
  Propagate(
      n, [&](int i) { return is(i, AmpClass::kDeny) || is(i, AmpClass::kInfer); }, {&a.producers},
      [&](int, int p) { return is(p, AmpClass::kClear) && !upstream[p] && (upstream[p] = true); });
  Propagate(
      n, [&](int i) { return is(i, AmpClass::kDeny) && (info[i].deny = true); }, {&a.consumers},
      [&](int i, int c) {
        if (info[c].deny || info[c].allow) return false;
        if (!is(c, AmpClass::kInfer) && !(is(c, AmpClass::kClear) && upstream[c])) return false;
        info[c].deny = true;
        info[c].reason = absl::StrCat("deny propagated from ", a.order[i]->name);
        return true;
      });
  // 3. infer/clear between allow ops become allow.
  std::vector<bool> downstream(n, false);
  auto allowed = [&](int i) { return info[i].allow; };
  Propagate(n, allowed, {&a.consumers}, [&](int, int c) {
    if (downstream[c] || info[c].deny || info[c].allow) return false;
    return (is(c, AmpClass::kInfer) || is(c, AmpClass::kClear)) && (downstream[c] = true);
  });
  Propagate(n, allowed, {&a.producers}, [&](int, int p) {
    if (!downstream[p] || info[p].allow || info[p].deny) return false;
    info[p].allow = true;
    info[p].reason = absl::StrCat("in the ", AmpClassName(info[p].cls), " list, between allow ops");
    return true;
  });
  // 4. allow through clear ops, both directions.
  Propagate(n, allowed, {&a.producers, &a.consumers}, [&](int i, int c) {
    if (info[c].allow || info[c].deny || !is(c, AmpClass::kClear)) return false;
    info[c].allow = true;
    info[c].reason = absl::StrCat("clear, next to allow op ", a.order[i]->name);
    return true;
  });
}

// Step 5: drops allow where the low type cannot be used (no schema, subgraphs, an output read by a
// subgraph, a non-float input or output, a float16 constant out of range); says why in the reason.
void DropUnusableAllow(const AmpOptions& o, AmpGraph& a, AmpReport* report) {
  for (size_t i = 0; i < a.size(); ++i) {
    AmpNodeInfo& f = a.info[i];
    if (!f.allow) continue;
    const Node& node = *a.order[i];
    std::string why;
    if (!f.edges.ok) why = "no ONNX schema for its data edges";
    else if (HasSubgraph(node)) why = "has subgraphs";
    for (int k : f.edges.outputs) {
      if (a.captured.count(node.outputs[k])) why = "an output is read by a subgraph";
    }
    for (int k : f.edges.inputs) {
      const Value* v = node.inputs[k];
      if (v->dtype != DType::kF32 && v->dtype != o.low) why = absl::StrCat("input ", k, " is ", DTypeName(v->dtype));
      if (o.low == DType::kF16 && v->is_constant() && v->constant->dtype() == DType::kF32 &&
          BeyondHalfRange(*v->constant)) {
        why = absl::StrCat("constant ", v->name, " has values beyond the float16 range (+-65504)");
        report->out_of_range.push_back(absl::StrCat(node.name, ": ", v->name));
      }
    }
    for (int k : f.edges.outputs) {
      if (node.outputs[k]->dtype != DType::kF32)
        why = absl::StrCat("output ", k, " is ", DTypeName(node.outputs[k]->dtype));
    }
    if (!why.empty()) {
      f.allow = false;
      f.reason = absl::StrCat("kept float32: ", why);
    }
  }
}

// Rewrites the painted graph: allow nodes compute in the low type (constants converted once per source
// tensor, other float32 inputs through one Cast each); float32 readers of low values and graph outputs read
// them through one Cast back (graph outputs keep their float32 dtype and names: keep_io_types).
void RewriteWithCasts(Graph& g, const AmpOptions& o, const AmpGraph& a, AmpReport* report) {
  const size_t n = a.size();
  const std::vector<AmpNodeInfo>& info = a.info;
  // Values produced in the low type by allow nodes:
  std::set<Value*> low_values;
  for (size_t i = 0; i < n; ++i) {
    if (!info[i].allow) continue;
    for (int k : info[i].edges.outputs) low_values.insert(a.order[i]->outputs[k]);
  }
  std::map<Value*, Value*> down, up;  // per value, its Cast to the low type / back to float32
  std::map<const Tensor*, std::shared_ptr<const Tensor>> converted;
  int cast_id = 0;
  auto make_cast = [&](Value* v, DType to, std::string out_name = "") {
    if (out_name.empty()) out_name = absl::StrCat(v->name, "/amp_", DTypeName(to));
    Node* c = g.AddNode("Cast", absl::StrCat(v->name, "/amp_cast_", DTypeName(to), "_", cast_id++), {v},
                        {out_name});
    c->attrs["to"] = Attribute::Int(OnnxTypeCode(to));
    c->opset_version = 13;
    c->outputs[0]->dtype = to;
    c->outputs[0]->shape = v->shape;
    ++report->casts;
    return c->outputs[0];
  };
  for (size_t i = 0; i < n; ++i) {
    if (!info[i].allow) continue;
    Node* node = a.order[i];
    for (int k : info[i].edges.inputs) {
      Value* v = node->inputs[k];
      if (low_values.count(v) || v->dtype != DType::kF32) continue;
      if (v->is_constant()) {
        auto& c = converted[v->constant.get()];
        if (!c) {
          c = ConvertedConstant(v->constant, o.low);
          ++report->constants;
        }
        node->inputs[k] = g.AddConstant(absl::StrCat(v->name, "/amp_", DTypeName(o.low)), c);
        continue;
      }
      Value*& d = down[v];
      if (d == nullptr) d = make_cast(v, o.low);
      node->inputs[k] = d;
    }
  }
  for (Value* v : low_values) v->dtype = o.low;
  // Graph outputs keep float32 and their names (keep_io_types): the low value is renamed, its Cast back to
  // float32 takes the output's name.
  for (Value* out : g.outputs()) {
    if (!low_values.count(out) || up.count(out)) continue;
    std::string name = out->name;
    out->name = absl::StrCat(name, "/amp_", DTypeName(o.low));
    up[out] = make_cast(out, DType::kF32, name);
  }
  auto up_of = [&](Value* v) {
    Value*& u = up[v];
    if (u == nullptr) u = make_cast(v, DType::kF32);
    return u;
  };
  for (size_t i = 0; i < n; ++i) {
    Node* node = a.order[i];
    const bool low_reader = info[i].allow;
    for (Value*& in : node->inputs) {
      if (in == nullptr || !low_values.count(in)) continue;
      auto pi = in->producer != nullptr ? a.index.find(in->producer) : a.index.end();
      const bool producer_f32_out = pi != a.index.end() && info[pi->second].output_f32;
      if (!low_reader || producer_f32_out) {
        Value* u = up_of(in);
        if (low_reader) {  // an allow reader of a host rule's float32 output: back down
          Value*& d = down[u];
          if (d == nullptr) d = make_cast(u, o.low);
          in = d;
        } else {
          in = u;
        }
      }
    }
  }
  for (Value*& out : g.mutable_outputs()) {
    if (low_values.count(out)) out = up_of(out);  // graph outputs keep float32 (keep_io_types)
  }
}

}  // namespace

absl::StatusOr<AmpReport> AutoMixedPrecision(Graph& g, const AmpOptions& o) {
  if (o.low != DType::kF16 && o.low != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("auto mixed precision: the low type must be f16 or bf16, got ", DTypeName(o.low)));
  }
  AmpReport report;
  AmpGraph a;
  CJIT_RETURN_IF_ERROR(ClassifyNodes(g, o, &a));
  PaintAllowAndDeny(a);
  DropUnusableAllow(o, a, &report);
  RewriteWithCasts(g, o, a, &report);
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a.info[i].paintable) continue;
    report.converted += a.info[i].allow;
    report.decisions.push_back(
        {a.order[i]->name, a.order[i]->op_type, a.info[i].cls, a.info[i].allow, a.info[i].reason});
  }
  return report;
}

namespace {

std::set<std::string> Ops(const std::string& list) {
  std::set<std::string> out;
  for (absl::string_view op : absl::StrSplit(list, ',', absl::SkipEmpty())) out.insert(std::string(op));
  return out;
}

}  // namespace

void ApplyMatmulPrecision(Graph& graph, const Flags& flags) {
  if (flags.matmul_precision == "highest" && flags.conv_precision == "highest") return;
  for (const auto& n : graph.nodes()) {
    if (!n->domain.empty() || n->input(0) == nullptr || n->input(0)->dtype != DType::kF32) continue;
    const bool mm = n->op_type == "MatMul" || n->op_type == "Gemm";
    const bool conv = n->op_type == "Conv";
    const std::string& p = mm ? flags.matmul_precision : flags.conv_precision;
    if ((!mm && !conv) || p == "highest") continue;
    Attribute a;
    a.kind = Attribute::Kind::kString;
    a.s = p;
    n->attrs["cjit_precision"] = a;
  }
}

AmpOptions AmpOptionsFromFlags(const Flags& f, bool on_gpu, bool* enabled) {
  AmpOptions o;
  *enabled = f.auto_mixed_precision != "off";
  o.low = f.auto_mixed_precision == "float16" || (f.auto_mixed_precision == "auto" && on_gpu) ? DType::kF16
                                                                                              : DType::kBF16;
  o.allow_add = Ops(f.amp_allowlist_add);
  o.allow_remove = Ops(f.amp_allowlist_remove);
  o.infer_add = Ops(f.amp_inferlist_add);
  o.infer_remove = Ops(f.amp_inferlist_remove);
  o.deny_add = Ops(f.amp_denylist_add);
  o.deny_remove = Ops(f.amp_denylist_remove);
  o.clear_add = Ops(f.amp_clearlist_add);
  o.clear_remove = Ops(f.amp_clearlist_remove);
  o.min_allow_macs = on_gpu ? 0 : f.amp_min_allow_macs;
  return o;
}

std::string AmpMissingCpuIsa(const std::string& mode, DType* low) {
  const bool bf16 = CpuHasAvx512Bf16();  // AMX-BF16 CPUs have it too (cpu_isa.h's levels)
  const bool fp16 = CpuHasAvx512Fp16();
  if (mode == "auto") {
    if (bf16) {
      *low = DType::kBF16;
      return "";
    }
    if (fp16) {
      *low = DType::kF16;
      return "";
    }
    return "neither AVX512_BF16 / AMX-BF16 nor AVX512_FP16";
  }
  *low = mode == "float16" ? DType::kF16 : DType::kBF16;
  if (*low == DType::kBF16) return bf16 ? "" : "no AVX512_BF16 or AMX-BF16";
  return fp16 ? "" : "no AVX512_FP16";
}

absl::Status RunAutoMixedPrecision(Graph& graph, const Flags& flags, bool on_gpu, const AmpRuleHook& hook, int sig) {
  bool enabled = false;
  AmpOptions o = AmpOptionsFromFlags(flags, on_gpu, &enabled);
  if (!enabled) return absl::OkStatus();
  if (!on_gpu && flags.amp_require_native_isa) {
    DType low = o.low;
    const std::string missing = AmpMissingCpuIsa(flags.auto_mixed_precision, &low);
    if (!missing.empty()) {
      static std::once_flag warned;
      std::call_once(warned, [&] {
        CJIT_LOG(WARNING) << "--auto_mixed_precision=" << flags.auto_mixed_precision << ": this CPU has " << missing
                          << " instructions (within --max_cpu_isa=" << flags.max_cpu_isa
                          << "); emulated 16-bit arithmetic is slower than float32, so the model runs in float32 "
                             "(--amp_require_native_isa=false rewrites anyway)";
      });
      return absl::OkStatus();
    }
    o.low = low;
  }
  o.hook = hook;
  const std::string before = flags.amp_log_path.empty() ? std::string() : PrintGraph(graph);
  CJIT_ASSIGN_OR_RETURN(AmpReport r, AutoMixedPrecision(graph, o));
  for (const AmpDecision& d : r.decisions) {
    CJIT_VLOG(2) << "auto_mixed_precision: " << d.node << " (" << d.op_type << "): " << AmpClassName(d.list_class)
                 << " -> " << (d.low ? DTypeName(o.low) : "f32") << " (" << d.reason << ")";
  }
  for (const std::string& w : r.out_of_range) {
    CJIT_LOG(WARNING) << "auto_mixed_precision: float16 would not hold " << w << " (kept float32, not clamped)";
  }
  CJIT_VLOG(1) << "auto_mixed_precision (" << DTypeName(o.low) << "): " << r.converted << " of "
               << r.decisions.size() << " float nodes converted, " << r.casts << " casts, " << r.constants
               << " constants converted";
  if (!flags.amp_log_path.empty()) {
    const std::string base = absl::StrCat(flags.amp_log_path, "/amp_", sig < 0 ? 0 : sig);
    std::string lists = absl::StrCat("# low type: ", DTypeName(o.low), "\n");
    for (AmpClass c : {AmpClass::kAllow, AmpClass::kInfer, AmpClass::kDeny, AmpClass::kClear}) {
      absl::StrAppend(&lists, AmpClassName(c), "list: ", absl::StrJoin(AmpListInEffect(c, o), ","), "\n");
    }
    absl::StrAppend(&lists, "# decisions: node, op, list, dtype, reason\n");
    for (const AmpDecision& d : r.decisions) {
      absl::StrAppend(&lists, d.node, "\t", d.op_type, "\t", AmpClassName(d.list_class), "\t",
                      d.low ? DTypeName(o.low) : "f32", "\t", d.reason, "\n");
    }
    CJIT_RETURN_IF_ERROR(WriteFileAtomically(base + "_before.txt", before));
    CJIT_RETURN_IF_ERROR(WriteFileAtomically(base + "_after.txt", PrintGraph(graph)));
    CJIT_RETURN_IF_ERROR(WriteFileAtomically(base + "_lists.txt", lists));
  }
  return absl::OkStatus();
}

}  // namespace cjit
