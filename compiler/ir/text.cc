// Printer and recursive-descent parser of the textual IR described in text.h.
#include "compiler/ir/text.h"

#include <cctype>
#include <cstring>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace cjit {
namespace {

std::string TypeString(const Value& v) {
  if (v.dtype == DType::kInvalid) return "";
  std::string t = absl::StrCat(DTypeName(v.dtype), v.shape.ToString());
  switch (v.kind) {
    case ValueKind::kTensor: return t;
    case ValueKind::kSequence: return absl::StrCat("seq(", t, ")");
    case ValueKind::kOptionalTensor: return absl::StrCat("opt(", t, ")");
    case ValueKind::kOptionalSequence: return absl::StrCat("opt(seq(", t, "))");
  }
  return t;
}

std::string FloatString(double x) {
  std::string s = absl::StrCat(x);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string AttrString(const Attribute& a) {
  using K = Attribute::Kind;
  switch (a.kind) {
    case K::kInt: return absl::StrCat(a.i);
    case K::kFloat: return FloatString(a.f);
    case K::kString: return absl::StrCat("\"", a.s, "\"");
    case K::kInts: return absl::StrCat("[", absl::StrJoin(a.ints, ","), "]");
    case K::kFloats: {
      std::vector<std::string> parts;
      for (float f : a.floats) parts.push_back(FloatString(f));
      return absl::StrCat("[", absl::StrJoin(parts, ","), "]");
    }
    case K::kStrings: return absl::StrCat("[\"", absl::StrJoin(a.strings, "\",\""), "\"]");
    case K::kTensor: return absl::StrCat("<tensor ", a.t ? DimsToString(a.t->dims()) : "", ">");
    case K::kGraph: return absl::StrCat("<graph ", a.g ? a.g->name : "", ">");
    case K::kTensors: return "<tensors>";
    case K::kGraphs: return "<graphs>";
    case K::kType:
      return absl::StrCat("<type ", ValueKindName(static_cast<ValueKind>(a.i)), " ",
                          a.ints.empty() ? "?" : DTypeName(static_cast<DType>(a.ints[0])), ">");
  }
  return "";
}

std::string Ref(const Value* v) { return v ? absl::StrCat("%", v->name) : "_"; }

class Parser {
 public:
  explicit Parser(absl::string_view text) : text_(text) {}

  absl::StatusOr<std::unique_ptr<Graph>> Parse() {
    auto g = std::make_unique<Graph>();
    CJIT_RETURN_IF_ERROR(Expect("graph"));
    g->name = Ident();
    CJIT_RETURN_IF_ERROR(Expect("("));
    while (!Peek(")")) {
      CJIT_ASSIGN_OR_RETURN(std::string name, ValueName());
      CJIT_RETURN_IF_ERROR(Expect(":"));
      DType t;
      Shape s;
      ValueKind k;
      CJIT_RETURN_IF_ERROR(Type(&t, &s, &k));
      values_[name] = g->AddInput(name, t, s);
      values_[name]->kind = k;
      if (!Peek(")")) CJIT_RETURN_IF_ERROR(Expect(","));
    }
    CJIT_RETURN_IF_ERROR(Expect(")"));
    CJIT_RETURN_IF_ERROR(Expect("{"));
    while (!Peek("return")) {
      CJIT_RETURN_IF_ERROR(Statement(*g));
    }
    CJIT_RETURN_IF_ERROR(Expect("return"));
    while (true) {
      CJIT_ASSIGN_OR_RETURN(Value * v, Use());
      g->AddOutput(v);
      if (!Peek(",")) break;
      CJIT_RETURN_IF_ERROR(Expect(","));
    }
    CJIT_RETURN_IF_ERROR(Expect("}"));
    return g;
  }

 private:
  absl::Status Statement(Graph& g) {
    std::vector<std::string> outs;
    struct Typed {
      DType dtype = DType::kInvalid;
      Shape shape;
      ValueKind kind = ValueKind::kTensor;
    };
    std::vector<Typed> types;
    while (true) {
      CJIT_ASSIGN_OR_RETURN(std::string name, ValueName());
      outs.push_back(name);
      Typed t;
      if (Peek(":")) {
        CJIT_RETURN_IF_ERROR(Expect(":"));
        CJIT_RETURN_IF_ERROR(Type(&t.dtype, &t.shape, &t.kind));
      }
      types.push_back(t);
      if (!Peek(",")) break;
      CJIT_RETURN_IF_ERROR(Expect(","));
    }
    CJIT_RETURN_IF_ERROR(Expect("="));
    if (Peek("constant")) {
      CJIT_RETURN_IF_ERROR(Expect("constant"));
      DType t;
      Shape s;
      CJIT_RETURN_IF_ERROR(Type(&t, &s));
      if (!s.fully_known()) return Error("constant needs a fully known shape");
      Tensor tensor(t, s.concrete());
      CJIT_RETURN_IF_ERROR(Expect("{"));
      std::vector<double> vals;
      while (!Peek("}")) {
        CJIT_ASSIGN_OR_RETURN(double x, Number());
        vals.push_back(x);
        if (!Peek("}")) CJIT_RETURN_IF_ERROR(Expect(","));
      }
      CJIT_RETURN_IF_ERROR(Expect("}"));
      if (static_cast<int64_t>(vals.size()) != tensor.numel()) {
        return Error(absl::StrCat("constant has ", vals.size(), " values, shape needs ", tensor.numel()));
      }
      CJIT_RETURN_IF_ERROR(FillTensor(tensor, vals));
      values_[outs[0]] = g.AddConstant(outs[0], std::move(tensor));
      return absl::OkStatus();
    }
    std::string op = Ident();
    if (op.empty()) return Error("expected an op name");
    CJIT_RETURN_IF_ERROR(Expect("("));
    std::vector<Value*> ins;
    while (!Peek(")")) {
      if (Peek("_")) {
        CJIT_RETURN_IF_ERROR(Expect("_"));
        ins.push_back(nullptr);
      } else {
        CJIT_ASSIGN_OR_RETURN(Value * v, Use());
        ins.push_back(v);
      }
      if (!Peek(")")) CJIT_RETURN_IF_ERROR(Expect(","));
    }
    CJIT_RETURN_IF_ERROR(Expect(")"));
    Node* n = g.AddNode(op, outs[0], ins, outs);
    for (size_t k = 0; k < outs.size(); ++k) {
      n->outputs[k]->dtype = types[k].dtype;
      n->outputs[k]->shape = types[k].shape;
      n->outputs[k]->kind = types[k].kind;
      if (values_.count(outs[k])) return Error(absl::StrCat("value %", outs[k], " defined twice"));
      values_[outs[k]] = n->outputs[k];
    }
    if (Peek("{")) {
      CJIT_RETURN_IF_ERROR(Expect("{"));
      while (!Peek("}")) {
        std::string key = Ident();
        if (key.empty()) return Error("expected an attribute name");
        CJIT_RETURN_IF_ERROR(Expect("="));
        CJIT_ASSIGN_OR_RETURN(Attribute a, AttrValue());
        n->attrs[key] = std::move(a);
        if (!Peek("}")) CJIT_RETURN_IF_ERROR(Expect(","));
      }
      CJIT_RETURN_IF_ERROR(Expect("}"));
    }
    return absl::OkStatus();
  }

  static absl::Status FillTensor(Tensor& t, const std::vector<double>& vals) {
    for (size_t i = 0; i < vals.size(); ++i) {
      double x = vals[i];
      switch (t.dtype()) {
        case DType::kF32: t.data<float>()[i] = static_cast<float>(x); break;
        case DType::kF64: t.data<double>()[i] = x; break;
        case DType::kI32: t.data<int32_t>()[i] = static_cast<int32_t>(x); break;
        case DType::kI64: t.data<int64_t>()[i] = static_cast<int64_t>(x); break;
        case DType::kI8: t.data<int8_t>()[i] = static_cast<int8_t>(x); break;
        case DType::kU8: t.data<uint8_t>()[i] = static_cast<uint8_t>(x); break;
        case DType::kBool: t.data<uint8_t>()[i] = x != 0; break;
        default:
          return absl::InvalidArgumentError(
              absl::StrCat("textual constants of dtype ", DTypeName(t.dtype()), " are not supported"));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Attribute> AttrValue() {
    Attribute a;
    SkipSpace();
    if (Peek("\"")) {
      ++pos_;
      size_t end = text_.find('"', pos_);
      if (end == absl::string_view::npos) return Error("unterminated string");
      a.kind = Attribute::Kind::kString;
      a.s = std::string(text_.substr(pos_, end - pos_));
      pos_ = end + 1;
      return a;
    }
    if (Peek("[")) {
      CJIT_RETURN_IF_ERROR(Expect("["));
      std::vector<std::string> toks;
      while (!Peek("]")) {
        toks.push_back(NumberToken());
        if (toks.back().empty()) return Error("expected a number");
        if (!Peek("]")) CJIT_RETURN_IF_ERROR(Expect(","));
      }
      CJIT_RETURN_IF_ERROR(Expect("]"));
      bool is_float = false;
      for (const auto& t : toks) is_float |= t.find_first_of(".eE") != std::string::npos;
      a.kind = is_float ? Attribute::Kind::kFloats : Attribute::Kind::kInts;
      for (const auto& t : toks) {
        double d;
        if (!absl::SimpleAtod(t, &d)) return Error("bad number " + t);
        if (is_float) a.floats.push_back(static_cast<float>(d));
        else a.ints.push_back(static_cast<int64_t>(d));
      }
      return a;
    }
    std::string tok = NumberToken();
    if (tok.empty()) return Error("expected an attribute value");
    double d;
    if (!absl::SimpleAtod(tok, &d)) return Error("bad number " + tok);
    if (tok.find_first_of(".eE") != std::string::npos) {
      a.kind = Attribute::Kind::kFloat;
      a.f = static_cast<float>(d);
    } else {
      a.kind = Attribute::Kind::kInt;
      a.i = static_cast<int64_t>(d);
    }
    return a;
  }

  // A tensor type "f32[2,?]", or (with `kind`) "seq(f32[*])", "opt(f32[2])", "opt(seq(f32[*]))".
  absl::Status Type(DType* t, Shape* s, ValueKind* kind = nullptr) {
    if (kind != nullptr) *kind = ValueKind::kTensor;
    std::string name = Ident();
    if (kind != nullptr && (name == "seq" || name == "opt")) {
      CJIT_RETURN_IF_ERROR(Expect("("));
      ValueKind inner;
      CJIT_RETURN_IF_ERROR(Type(t, s, &inner));
      if (name == "seq" && inner != ValueKind::kTensor) return Error("a sequence holds tensors");
      if (name == "opt" && IsOptionalKind(inner)) return Error("an optional holds a tensor or a sequence");
      *kind = name == "seq" ? ValueKind::kSequence : OptionalKindOf(inner);
      return Expect(")");
    }
    *t = DTypeFromName(name);
    if (*t == DType::kInvalid) return Error(absl::StrCat("unknown dtype '", name, "'"));
    CJIT_RETURN_IF_ERROR(Expect("["));
    s->rank_known = true;
    s->dims.clear();
    if (Peek("*")) {
      CJIT_RETURN_IF_ERROR(Expect("*"));
      s->rank_known = false;
    }
    while (!Peek("]")) {
      SkipSpace();
      if (Peek("?")) {
        CJIT_RETURN_IF_ERROR(Expect("?"));
        s->dims.push_back(Dim{});
      } else if (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        CJIT_ASSIGN_OR_RETURN(double d, Number());
        s->dims.push_back(Dim{static_cast<int64_t>(d), ""});
      } else {
        std::string sym = Ident();
        if (sym.empty()) return Error("expected a dim");
        s->dims.push_back(Dim{-1, sym});
      }
      if (!Peek("]")) CJIT_RETURN_IF_ERROR(Expect(","));
    }
    return Expect("]");
  }

  absl::StatusOr<Value*> Use() {
    CJIT_ASSIGN_OR_RETURN(std::string name, ValueName());
    auto it = values_.find(name);
    if (it == values_.end()) return Error(absl::StrCat("use of undefined value %", name));
    return it->second;
  }

  absl::StatusOr<std::string> ValueName() {
    SkipSpace();
    if (pos_ >= text_.size() || text_[pos_] != '%') return Error("expected a %value");
    ++pos_;
    std::string n = Ident(/*allow_punct=*/true);
    if (n.empty()) return Error("expected a value name after %");
    return n;
  }

  std::string Ident(bool allow_punct = false) {
    SkipSpace();
    size_t start = pos_;
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      // ':' belongs to a value name ("onnx::Flatten_0") unless a space follows ("%x: f32[2]").
      bool colon_in_name =
          c == ':' && pos_ + 1 < text_.size() && !std::isspace(static_cast<unsigned char>(text_[pos_ + 1]));
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
          (allow_punct && (c == '.' || colon_in_name || c == '/' || c == '-'))) {
        ++pos_;
      } else {
        break;
      }
    }
    return std::string(text_.substr(start, pos_ - start));
  }

  std::string NumberToken() {
    SkipSpace();
    size_t start = pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) ||
                                   text_[pos_] == '.' || text_[pos_] == '-' || text_[pos_] == '+')) {
      ++pos_;
    }
    return std::string(text_.substr(start, pos_ - start));
  }

  absl::StatusOr<double> Number() {
    std::string tok = NumberToken();
    double d;
    if (!absl::SimpleAtod(tok, &d)) return Error(absl::StrCat("expected a number, got '", tok, "'"));
    return d;
  }

  void SkipSpace() {
    while (pos_ < text_.size()) {
      if (std::isspace(static_cast<unsigned char>(text_[pos_]))) {
        ++pos_;
      } else if (text_[pos_] == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  bool Peek(absl::string_view tok) {
    SkipSpace();
    return text_.substr(pos_, tok.size()) == tok;
  }

  absl::Status Expect(absl::string_view tok) {
    if (!Peek(tok)) return Error(absl::StrCat("expected '", tok, "'"));
    pos_ += tok.size();
    return absl::OkStatus();
  }

  absl::Status Error(absl::string_view what) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return absl::InvalidArgumentError(absl::StrCat("IR parse error at ", line, ":", col, ": ", what));
  }

  absl::string_view text_;
  size_t pos_ = 0;
  std::unordered_map<std::string, Value*> values_;
};

}  // namespace

std::string PrintGraph(const Graph& graph) {
  std::string out = absl::StrCat("graph ", graph.name.empty() ? "main" : graph.name, "(");
  std::vector<std::string> ins;
  for (const Value* v : graph.inputs()) ins.push_back(absl::StrCat(Ref(v), ": ", TypeString(*v)));
  absl::StrAppend(&out, absl::StrJoin(ins, ", "), ") {\n");
  for (const auto& v : graph.values()) {
    if (!v->is_constant()) continue;
    const Tensor& t = *v->constant;
    std::string body = "...";
    if (t.numel() <= 16) {
      std::vector<std::string> parts;
      for (double d : t.ToDoubleVector()) parts.push_back(absl::StrCat(d));
      body = absl::StrJoin(parts, ", ");
    }
    absl::StrAppend(&out, "  ", Ref(v.get()), " = constant ", DTypeName(t.dtype()),
                    Shape::Of(t.dims()).ToString(), " {", body, "}\n");
  }
  auto order = graph.TopologicalOrder();
  std::vector<const Node*> nodes;
  if (order.ok()) {
    for (Node* n : *order) nodes.push_back(n);
  } else {
    for (const auto& n : graph.nodes()) nodes.push_back(n.get());
  }
  for (const Node* n : nodes) {
    std::vector<std::string> outs, ins2, attrs;
    for (const Value* v : n->outputs) {
      std::string t = v ? TypeString(*v) : "";
      outs.push_back(t.empty() ? Ref(v) : absl::StrCat(Ref(v), ": ", t));
    }
    for (const Value* v : n->inputs) ins2.push_back(Ref(v));
    for (const auto& [k, a] : n->attrs) attrs.push_back(absl::StrCat(k, "=", AttrString(a)));
    absl::StrAppend(&out, "  ", absl::StrJoin(outs, ", "), " = ", n->op_type, "(",
                    absl::StrJoin(ins2, ", "), ")");
    if (!attrs.empty()) absl::StrAppend(&out, " {", absl::StrJoin(attrs, ", "), "}");
    out += "\n";
  }
  std::vector<std::string> rets;
  for (const Value* v : graph.outputs()) rets.push_back(Ref(v));
  absl::StrAppend(&out, "  return ", absl::StrJoin(rets, ", "), "\n}\n");
  return out;
}

absl::StatusOr<std::unique_ptr<Graph>> ParseGraph(absl::string_view text) {
  return Parser(text).Parse();
}

}  // namespace cjit
