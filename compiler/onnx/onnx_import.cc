// ONNX importer. Two passes per graph: (1) create every node with its output values, so names resolve
// whatever order the file lists nodes in; (2) resolve inputs, looking outward through enclosing graphs
// for subgraph captures. Constant nodes become constant values directly.
#include "compiler/onnx/onnx_import.h"

#include "compiler/onnx/contrib_ops.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/ops/op_schemas.h"
#include "compiler/onnx/tensor_proto.h"
#include "compiler/ops/op_registry.h"
#include "base/file_util.h"
#include "google/protobuf/io/zero_copy_stream_impl.h"
#include "onnx/onnx_pb.h"

namespace cjit {
namespace {

// Opsets 7-21 are the supported range; 1-6 load too where no legacy-only attribute is used (checked per
// node against the ONNX schema of that opset).
constexpr int64_t kMinOpset = 1;
constexpr int64_t kMaxOpset = 21;
constexpr int64_t kMaxIrVersion = 10;

// ONNX's training operators (Adagrad, Adam, Momentum, Gradient) live in this domain; an inference runtime
// does not run them, and says so by name rather than as an unknown operator or a missing opset.
constexpr absl::string_view kTrainingDomain = "ai.onnx.preview.training";

absl::Status TrainingOnly(absl::string_view source, absl::string_view node, absl::string_view op) {
  return absl::UnimplementedError(absl::StrCat(source, ": node '", node, "': ", kTrainingDomain, ".", op,
                                               " is a training operator; clusterjit runs inference only"));
}

struct Scope {
  Graph* graph = nullptr;
  Scope* parent = nullptr;
  std::map<std::string, Value*> names;

  bool Has(const std::string& n) const { return names.count(n) || (parent && parent->Has(n)); }
  Value* Lookup(const std::string& n) {
    auto it = names.find(n);
    if (it != names.end()) return it->second;
    if (parent == nullptr || !parent->Has(n)) return nullptr;
    Value* outer = parent->Lookup(n);
    Value* cap = graph->AddCapture(n, outer->dtype, outer->shape);
    names[n] = cap;
    return cap;
  }
};

class Importer {
 public:
  Importer(const ImportOptions& options, int64_t opset) : options_(options), opset_(opset) {}

  absl::StatusOr<std::unique_ptr<Graph>> ImportGraph(const onnx::GraphProto& gp, Scope* parent) {
    auto graph = std::make_unique<Graph>();
    graph->name = gp.name();
    graph->opset = opset_;
    Scope scope;
    scope.graph = graph.get();
    scope.parent = parent;
    for (const onnx::TensorProto& init : gp.initializer()) {
      auto t = TensorFromProto(init, options_.model_dir);
      if (!t.ok()) return Error(t.status(), absl::StrCat("initializer '", init.name(), "'"));
      scope.names[init.name()] = graph->AddConstant(init.name(), std::move(*t));
    }
    if (gp.sparse_initializer_size() > 0) {
      return absl::UnimplementedError(absl::StrCat(options_.source, ": sparse initializers are not supported"));
    }
    for (const onnx::ValueInfoProto& in : gp.input()) {
      if (scope.names.count(in.name())) continue;  // IR < 4 lists initializers as inputs too
      DType t;
      Shape s;
      ValueKind kind;
      CJIT_RETURN_IF_ERROR(TypeOf(in, &t, &s, &kind));
      Value* v = graph->AddInput(in.name(), t, s);
      v->kind = kind;
      scope.names[in.name()] = v;
    }
    // Pass 1: outputs of every node.
    std::vector<std::pair<const onnx::NodeProto*, Node*>> nodes;
    int index = 0;
    for (const onnx::NodeProto& np : gp.node()) {
      std::string name = np.name().empty() ? absl::StrCat(np.op_type(), "_", index) : np.name();
      ++index;
      std::string domain = np.domain() == "ai.onnx" ? "" : np.domain();
      // Standard nodes written by a contrib-op expansion (compiler/onnx/contrib_ops.h) have the semantics of
      // the newest opset, whatever the model imports.
      int64_t version = opset_;
      if (domain == kExpansionDomain) {
        domain.clear();
        version = kMaxOpset;
      }
      // ONNX Runtime's weight-only quantized product runs as our kernel of the same contract.
      if (domain == "com.microsoft" && np.op_type() == "MatMulNBits") domain = std::string(kInternalDomain);
      if (np.op_type() == "Constant" && domain.empty()) {
        CJIT_ASSIGN_OR_RETURN(Tensor t, ConstantValue(np, name));
        if (np.output_size() != 1) return NodeErr(name, "Constant", "must have one output");
        scope.names[np.output(0)] = graph->AddConstant(np.output(0), std::move(t));
        continue;
      }
      if (domain == kTrainingDomain) return TrainingOnly(options_.source, name, np.op_type());
      if (FindOp(domain, np.op_type()) == nullptr) {
        return absl::UnimplementedError(absl::StrCat(
            options_.source, ": node '", name, "': unsupported operator ",
            domain.empty() ? "" : domain + ".", np.op_type(), " (opset ", opset_, ")"));
      }
      CJIT_RETURN_IF_ERROR(CheckAttributes(np, name, domain, version));
      std::vector<std::string> outs(np.output().begin(), np.output().end());
      Node* n = graph->AddNode(np.op_type(), name, {}, outs);
      n->domain = domain;
      n->opset_version = version;
      for (size_t k = 0; k < outs.size(); ++k) {
        if (outs[k].empty()) continue;
        if (scope.names.count(outs[k]) && scope.names[outs[k]]->producer != nullptr) {
          return NodeErr(name, np.op_type(), absl::StrCat("output '", outs[k], "' is defined twice"));
        }
        scope.names[outs[k]] = n->outputs[k];
      }
      nodes.push_back({&np, n});
    }
    // Pass 2: inputs, attributes, subgraphs.
    for (auto& [np, n] : nodes) {
      for (const std::string& in : np->input()) {
        if (in.empty()) {
          n->inputs.push_back(nullptr);
          continue;
        }
        Value* v = scope.Lookup(in);
        if (v == nullptr) return NodeErr(n->name, n->op_type, absl::StrCat("input '", in, "' is not defined"));
        n->inputs.push_back(v);
      }
      while (!n->inputs.empty() && n->inputs.back() == nullptr) n->inputs.pop_back();
      std::set<std::string> captured;
      for (const onnx::AttributeProto& ap : np->attribute()) {
        CJIT_ASSIGN_OR_RETURN(Attribute a, ConvertAttribute(ap, *n, &scope));
        if (a.kind == Attribute::Kind::kGraph) {
          for (const Value* c : a.g->captures()) captured.insert(c->name);
        }
        n->attrs[ap.name()] = std::move(a);
      }
      for (const std::string& c : captured) {
        Value* v = scope.Lookup(c);
        if (v == nullptr) return NodeErr(n->name, n->op_type, absl::StrCat("subgraph reads undefined '", c, "'"));
        n->implicit_inputs.push_back(v);
        n->implicit_names.push_back(c);
      }
      UpgradeLegacyBroadcast(graph.get(), n);
    }
    for (const onnx::ValueInfoProto& out : gp.output()) {
      Value* v = scope.Lookup(out.name());
      if (v == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(options_.source, ": graph output '", out.name(), "' is not defined"));
      }
      DType t;
      Shape s;
      ValueKind kind;
      if (TypeOf(out, &t, &s, &kind).ok() && v->dtype == DType::kInvalid) {
        v->dtype = t;
        v->shape = s;
        v->kind = kind;
      }
      graph->AddOutput(v);
    }
    return graph;
  }

 private:
  // A value's type (onnx.proto TypeProto): a tensor, a sequence of tensors, or an optional of either.
  // Maps, sparse tensors, nested sequences and element types DType lacks are Unimplemented, naming the value.
  absl::Status TypeOf(const onnx::ValueInfoProto& vi, DType* t, Shape* s, ValueKind* kind) {
    *t = DType::kInvalid;
    *s = Shape::Unknown();
    *kind = ValueKind::kTensor;
    if (!vi.has_type()) return absl::OkStatus();
    return TypeFromProto(vi.type(), vi.name(), t, s, kind);
  }

  absl::Status TypeFromProto(const onnx::TypeProto& type, const std::string& name, DType* t, Shape* s,
                             ValueKind* kind) {
    const onnx::TypeProto* elem = &type;
    *kind = ValueKind::kTensor;
    if (type.has_optional_type()) {
      elem = &type.optional_type().elem_type();
      *kind = ValueKind::kOptionalTensor;
    }
    if (elem->has_sequence_type()) {
      *kind = *kind == ValueKind::kOptionalTensor ? ValueKind::kOptionalSequence : ValueKind::kSequence;
      elem = &elem->sequence_type().elem_type();
    }
    if (!elem->has_tensor_type()) {
      return absl::UnimplementedError(
          absl::StrCat(options_.source, ": value '", name, "' has an unsupported type (",
                       elem->has_map_type()                                     ? "a map"
                       : elem->has_sparse_tensor_type()                         ? "a sparse tensor"
                       : elem->has_sequence_type() || elem->has_optional_type() ? "a nested sequence or optional"
                                                                                : "no element type",
                       "); clusterjit supports tensors, sequences of tensors and optionals of either"));
    }
    const auto& tt = elem->tensor_type();
    *t = DTypeFromOnnxCode(tt.elem_type());
    if (*t == DType::kInvalid) {
      return absl::UnimplementedError(absl::StrCat(options_.source, ": value '", name,
                                                   "' has unsupported element type ", OnnxTypeName(tt.elem_type())));
    }
    if (tt.has_shape()) {
      s->rank_known = true;
      for (const auto& d : tt.shape().dim()) {
        if (d.has_dim_value()) s->dims.push_back(Dim{d.dim_value(), ""});
        else s->dims.push_back(Dim{-1, d.dim_param()});
      }
    }
    return absl::OkStatus();
  }

  // The node against the version of its operator in force at the model's opset (op_schemas.h): the
  // operator must exist at that opset; every attribute must be one that version defines, of its type;
  // every required attribute must be there. Legacy broadcasting (opset < 7 `broadcast` with `axis`) and
  // BatchNormalization spatial=0 are not supported. Custom domains have no schema here: their ops are
  // accepted when the op table supports them.
  absl::Status CheckAttributes(const onnx::NodeProto& np, const std::string& name, const std::string& domain,
                               int64_t opset) {
    if (!domain.empty()) return absl::OkStatus();
    int first = 0;
    const OpSchemaVersion* schema = FindOpSchema(np.op_type(), static_cast<int>(opset), &first);
    if (schema == nullptr) {
      if (first > 0) {
        return NodeErr(name, np.op_type(), absl::StrCat("the operator does not exist at opset ", opset,
                                                        " (it was introduced at opset ", first, ")"));
      }
      return absl::OkStatus();  // not an ONNX operator version we list; the op table decides
    }
    for (const onnx::AttributeProto& a : np.attribute()) {
      auto it = schema->attributes.find(a.name());
      if (it == schema->attributes.end()) {
        return absl::UnimplementedError(absl::StrCat(options_.source, ": node '", name, "' (", np.op_type(),
                                                     "): unsupported attribute '", a.name(), "' (not in the opset ",
                                                     opset, " schema, ", np.op_type(), "-", schema->since_version,
                                                     ")"));
      }
      std::string type = onnx::AttributeProto::AttributeType_Name(a.type());
      if (a.type() == onnx::AttributeProto::UNDEFINED) type = InferAttrType(a);
      if (type != it->second.type) {
        return NodeErr(name, np.op_type(), absl::StrCat("attribute '", a.name(), "' has type ", type, "; ",
                                                        np.op_type(), "-", schema->since_version, " defines it as ",
                                                        it->second.type));
      }
      if (a.name() == "spatial" && a.i() == 0) {
        return absl::UnimplementedError(absl::StrCat(options_.source, ": node '", name, "' (", np.op_type(),
                                                     "): unsupported legacy attribute '", a.name(), "'"));
      }
    }
    // Input and output counts, and required inputs not left empty (ONNX IR: an empty name is an absent
    // optional input). Kernels and shape functions rely on this: they read the required inputs freely.
    std::string sig = absl::StrCat(np.op_type(), "-", schema->since_version);
    auto range = [](int lo, int hi) {
      return lo == hi          ? absl::StrCat(lo)
             : hi >= (1 << 30) ? absl::StrCat(lo, " or more")
                               : absl::StrCat(lo, " to ", hi);
    };
    if (np.input_size() < schema->min_inputs || np.input_size() > schema->max_inputs) {
      return NodeErr(name, np.op_type(), absl::StrCat("has ", np.input_size(), " inputs; ", sig, " takes ",
                                                      range(schema->min_inputs, schema->max_inputs)));
    }
    if (np.output_size() < schema->min_outputs || np.output_size() > schema->max_outputs) {
      return NodeErr(name, np.op_type(), absl::StrCat("has ", np.output_size(), " outputs; ", sig, " has ",
                                                      range(schema->min_outputs, schema->max_outputs)));
    }
    for (size_t i = 0; i < schema->inputs.size() && static_cast<int>(i) < np.input_size(); ++i) {
      if (schema->inputs[i].option == 'S' && np.input(static_cast<int>(i)).empty()) {
        return NodeErr(name, np.op_type(), absl::StrCat("the required input '", schema->inputs[i].name, "' (#", i,
                                                        ") of ", sig, " is empty"));
      }
    }
    for (const auto& [attr, spec] : schema->attributes) {
      if (!spec.required) continue;
      bool present = false;
      for (const onnx::AttributeProto& a : np.attribute()) present |= a.name() == attr;
      if (!present) {
        return NodeErr(name, np.op_type(), absl::StrCat("the required attribute '", attr, "' (", spec.type, ") of ",
                                                        np.op_type(), "-", schema->since_version, " is missing"));
      }
    }
    return absl::OkStatus();
  }

  // Opsets 1-6 broadcast differently from NumPy (ONNX Broadcasting.md, "legacy"): with `broadcast=1` and
  // `axis=k`, B's dims line up with A's dims k, k+1, ... (a bias [C] added to [N,C,H,W] at axis 1), and
  // PRelu-6 and older apply a 1-D slope along axis 1. Both become NumPy broadcasting by appending
  // rank(A) - k - rank(B) unit dims to B: a Reshape whose shape is computed from the two ranks (shape ops
  // that fold away once a signature's shapes are known), so the ranks need not be known at import.
  void UpgradeLegacyBroadcast(Graph* g, Node* n) {
    if (n->opset_version >= 7 || !n->domain.empty() || n->inputs.size() < 2 || n->inputs[1] == nullptr) return;
    int64_t axis = 0;
    if (n->op_type == "PRelu") {
      axis = 1;
    } else {
      auto it = n->attrs.find("axis");
      if (it == n->attrs.end() || !n->attrs.count("broadcast") || n->attrs.at("broadcast").i == 0) return;
      axis = it->second.i;
      n->attrs.erase(it);
    }
    std::string p = n->name + "/legacy_broadcast";
    auto node = [&](const char* op, std::vector<Value*> ins, const char* tag) {
      Node* m = g->AddNode(op, absl::StrCat(p, "/", tag), std::move(ins), {absl::StrCat(p, "/", tag, ":0")});
      m->opset_version = 13;
      return m;
    };
    auto i64 = [&](const char* tag, std::vector<int64_t> v, bool scalar) {
      Tensor t(DType::kI64, scalar ? Dims{} : Dims{static_cast<int64_t>(v.size())});
      for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
      return g->AddConstant(absl::StrCat(p, "/", tag), std::move(t));
    };
    Value* a = n->inputs[0];
    Value* b = n->inputs[1];
    Value* shape_b = node("Shape", {b}, "shape_b")->outputs[0];
    Value* rank_a = node("Size", {node("Shape", {a}, "shape_a")->outputs[0]}, "rank_a")->outputs[0];
    Value* rank_b = node("Size", {shape_b}, "rank_b")->outputs[0];
    Value* lead = node("Add", {rank_b, i64("axis", {axis}, true)}, "lead")->outputs[0];
    Value* extra = node("Sub", {rank_a, lead}, "extra")->outputs[0];
    extra = node("Max", {extra, i64("zero", {0}, true)}, "extra_clamped")->outputs[0];
    extra = node("Reshape", {extra, i64("one_dim", {1}, false)}, "extra_1d")->outputs[0];
    Node* ones = node("ConstantOfShape", {extra}, "ones");
    Tensor one(DType::kI64, {1});
    one.data<int64_t>()[0] = 1;
    Attribute value;
    value.kind = Attribute::Kind::kTensor;
    value.t = std::make_shared<const Tensor>(std::move(one));
    ones->attrs["value"] = std::move(value);
    Node* concat = node("Concat", {shape_b, ones->outputs[0]}, "shape");
    concat->attrs["axis"] = Attribute::Int(0);
    n->inputs[1] = node("Reshape", {b, concat->outputs[0]}, "aligned")->outputs[0];
  }

  // IR version < 3 files may leave AttributeProto.type unset: the type then follows from the field set.
  static std::string InferAttrType(const onnx::AttributeProto& a) {
    if (a.has_f()) return "FLOAT";
    if (a.has_i()) return "INT";
    if (a.has_s()) return "STRING";
    if (a.has_t()) return "TENSOR";
    if (a.has_g()) return "GRAPH";
    if (a.floats_size()) return "FLOATS";
    if (a.ints_size()) return "INTS";
    if (a.strings_size()) return "STRINGS";
    return "UNDEFINED";
  }

  absl::StatusOr<Tensor> ConstantValue(const onnx::NodeProto& np, const std::string& name) {
    for (const onnx::AttributeProto& a : np.attribute()) {
      if (a.name() == "value") {
        auto t = TensorFromProto(a.t(), options_.model_dir);
        if (!t.ok()) return Error(t.status(), absl::StrCat("node '", name, "' (Constant)"));
        return std::move(*t);
      }
      if (a.name() == "value_float") {
        Tensor t(DType::kF32, {});
        *t.data<float>() = a.f();
        return t;
      }
      if (a.name() == "value_int") {
        Tensor t(DType::kI64, {});
        *t.data<int64_t>() = a.i();
        return t;
      }
      if (a.name() == "value_floats") {
        Tensor t(DType::kF32, {a.floats_size()});
        for (int i = 0; i < a.floats_size(); ++i) t.data<float>()[i] = a.floats(i);
        return t;
      }
      if (a.name() == "value_ints") {
        Tensor t(DType::kI64, {a.ints_size()});
        for (int i = 0; i < a.ints_size(); ++i) t.data<int64_t>()[i] = a.ints(i);
        return t;
      }
      if (a.name() == "value_string") {
        Tensor t(DType::kString, {});
        *t.data<std::string>() = a.s();
        return t;
      }
      if (a.name() == "value_strings") {
        Tensor t(DType::kString, {a.strings_size()});
        for (int i = 0; i < a.strings_size(); ++i) t.data<std::string>()[i] = a.strings(i);
        return t;
      }
      return NodeErr(name, "Constant", absl::StrCat("unsupported attribute '", a.name(), "'"));
    }
    return NodeErr(name, "Constant", "has no value attribute");
  }

  absl::StatusOr<Attribute> ConvertAttribute(const onnx::AttributeProto& ap, const Node& n, Scope* scope) {
    Attribute a;
    using K = Attribute::Kind;
    switch (ap.type()) {
      case onnx::AttributeProto::INT: a.kind = K::kInt; a.i = ap.i(); break;
      case onnx::AttributeProto::FLOAT: a.kind = K::kFloat; a.f = ap.f(); break;
      case onnx::AttributeProto::STRING: a.kind = K::kString; a.s = ap.s(); break;
      case onnx::AttributeProto::INTS: a.kind = K::kInts; a.ints.assign(ap.ints().begin(), ap.ints().end()); break;
      case onnx::AttributeProto::FLOATS:
        a.kind = K::kFloats;
        a.floats.assign(ap.floats().begin(), ap.floats().end());
        break;
      case onnx::AttributeProto::STRINGS:
        a.kind = K::kStrings;
        a.strings.assign(ap.strings().begin(), ap.strings().end());
        break;
      case onnx::AttributeProto::TENSOR: {
        a.kind = K::kTensor;
        auto t = TensorFromProto(ap.t(), options_.model_dir);
        if (!t.ok()) return Error(t.status(), n.Describe());
        a.t = std::make_shared<const Tensor>(std::move(*t));
        break;
      }
      case onnx::AttributeProto::TYPE_PROTO: {  // Optional-15's `type`
        a.kind = K::kType;
        DType t;
        Shape s;
        ValueKind kind;
        CJIT_RETURN_IF_ERROR(TypeFromProto(ap.tp(), absl::StrCat(n.name, ".", ap.name()), &t, &s, &kind));
        a.i = static_cast<int64_t>(kind);
        a.ints = {static_cast<int64_t>(t)};
        break;
      }
      case onnx::AttributeProto::GRAPH: {
        a.kind = K::kGraph;
        CJIT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ImportGraph(ap.g(), scope));
        a.g = std::shared_ptr<const Graph>(std::move(g));
        break;
      }
      default:
        return NodeErr(n.name, n.op_type,
                       absl::StrCat("attribute '", ap.name(), "' has unsupported type ",
                                    onnx::AttributeProto::AttributeType_Name(ap.type())));
    }
    return a;
  }

  absl::Status NodeErr(const std::string& name, const std::string& op, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(options_.source, ": node '", name, "' (", op, "): ", what));
  }
  absl::Status Error(const absl::Status& st, absl::string_view where) const {
    return absl::Status(st.code(), absl::StrCat(options_.source, ": ", where, ": ", st.message()));
  }

  const ImportOptions& options_;
  int64_t opset_;
};

}  // namespace

namespace {

absl::Status NotAModel(const ImportOptions& options) {
  return absl::InvalidArgumentError(absl::StrCat(options.source, ": not a valid ONNX model (protobuf parse failed)"));
}

absl::StatusOr<std::unique_ptr<Graph>> ImportParsedModel(onnx::ModelProto& model, const ImportOptions& options) {
  if (!model.has_graph()) {
    return absl::InvalidArgumentError(absl::StrCat(options.source, ": ONNX model has no graph"));
  }
  if (model.ir_version() < 3 || model.ir_version() > kMaxIrVersion) {
    return absl::UnimplementedError(absl::StrCat(options.source, ": ONNX IR version ", model.ir_version(),
                                                 " is not supported (3 to ", kMaxIrVersion, ")"));
  }
  int64_t opset = 0;
  for (const auto& os : model.opset_import()) {
    if (os.domain().empty() || os.domain() == "ai.onnx") opset = os.version();
  }
  for (int i = 0; i < model.graph().node_size(); ++i) {
    const onnx::NodeProto& np = model.graph().node(i);
    if (np.domain() == kTrainingDomain) {
      return TrainingOnly(options.source, np.name().empty() ? np.op_type() : np.name(), np.op_type());
    }
  }
  if (opset < kMinOpset || opset > kMaxOpset) {
    return absl::UnimplementedError(absl::StrCat(options.source, ": opset ", opset,
                                                 " is not supported (", kMinOpset, " to ", kMaxOpset, ")"));
  }
  CJIT_RETURN_IF_ERROR(ExpandContribOps(model.mutable_graph(), opset, options.source));
  Importer importer(options, opset);
  CJIT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, importer.ImportGraph(model.graph(), nullptr));
  auto meta = std::make_shared<ModelMetadata>();
  meta->producer_name = model.producer_name();
  meta->producer_version = model.producer_version();
  meta->domain = model.domain();
  meta->description = model.doc_string();
  meta->version = model.model_version();
  meta->graph_name = model.graph().name();
  meta->graph_description = model.graph().doc_string();
  for (const auto& p : model.metadata_props()) meta->custom.emplace_back(p.key(), p.value());
  graph->metadata = std::move(meta);
  return graph;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Graph>> ImportOnnxModel(absl::string_view bytes, const ImportOptions& options) {
  onnx::ModelProto model;
  if (bytes.empty() || !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return NotAModel(options);
  return ImportParsedModel(model, options);
}

absl::StatusOr<std::unique_ptr<Graph>> ImportOnnxFile(const std::string& path) {
  // A regular file of at most 2 GiB (the protobuf limit; larger models keep their weights as external
  // data): never a directory, FIFO or device, never an unbounded read. Parsed from the file in 1 MiB
  // reads rather than from a copy of the whole file: the weights are then copied twice (into the message,
  // into tensors), not three times; on a VM that backs fresh pages lazily, each 47 MB copy of ResNet-18's
  // weights costs ~100 ms.
  constexpr int64_t kMaxModelBytes = int64_t{2} << 30;
  ImportOptions options;
  options.source = path;
  size_t slash = path.find_last_of('/');
  options.model_dir = slash == std::string::npos ? "" : path.substr(0, slash);
  int64_t size = 0;
  CJIT_ASSIGN_OR_RETURN(int fd, OpenBoundedRegularFile(path, kMaxModelBytes, "model file", &size));
  onnx::ModelProto model;
  bool parsed = false;
  int read_errno = 0;
  {
    google::protobuf::io::FileInputStream in(fd, 1 << 20);
    parsed = size > 0 && model.ParseFromZeroCopyStream(&in);
    read_errno = in.GetErrno();
  }
  ::close(fd);
  if (read_errno != 0) {
    return absl::DataLossError(absl::StrCat("model file ", path, ": read failed: ", std::strerror(read_errno)));
  }
  if (!parsed) return NotAModel(options);
  return ImportParsedModel(model, options);
}

}  // namespace cjit
