#include "compiler/onnx/contrib_ops.h"

#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "onnx/onnx_pb.h"

namespace cjit {
namespace {

const std::string& In(const onnx::NodeProto& n, int i) {
  static const std::string kEmpty;
  return i < n.input_size() ? n.input(i) : kEmpty;
}

const onnx::AttributeProto* Attr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

int64_t IntAttr(const onnx::NodeProto& n, const std::string& name, int64_t dflt) {
  const onnx::AttributeProto* a = Attr(n, name);
  return a != nullptr && a->type() == onnx::AttributeProto::INT ? a->i() : dflt;
}

float FloatAttr(const onnx::NodeProto& n, const std::string& name, float dflt) {
  const onnx::AttributeProto* a = Attr(n, name);
  return a != nullptr && a->type() == onnx::AttributeProto::FLOAT ? a->f() : dflt;
}

// Writes the expansion of one contrib node: fresh value and node names under the node's name.
class Expansion {
 public:
  Expansion(const onnx::NodeProto& n, std::vector<onnx::NodeProto>* out) : n_(n), out_(out) {
    base_ = n.name().empty() ? (n.output_size() > 0 ? n.output(0) : n.op_type()) : n.name();
  }

  std::string Fresh(const std::string& what) { return absl::StrCat(base_, "/", what, "_", count_++); }

  onnx::NodeProto* Add(const std::string& op, const std::vector<std::string>& ins, const std::string& out) {
    onnx::NodeProto* p = &out_->emplace_back();
    p->set_op_type(op);
    p->set_name(Fresh(op));
    for (const std::string& i : ins) p->add_input(i);
    p->add_output(out);
    return p;
  }

  // DequantizeLinear(x, scale, zp) (zp may be empty), with `axis` when >= 0.
  std::string Dq(const std::string& x, const std::string& s, const std::string& z, int64_t axis = -1) {
    std::string y = Fresh("dequantized");
    std::vector<std::string> ins = {x, s};
    if (!z.empty()) ins.push_back(z);
    onnx::NodeProto* p = Add("DequantizeLinear", ins, y);
    if (axis >= 0) SetInt(p, "axis", axis);
    return y;
  }

  // QuantizeLinear(x, scale, zp) into `out`. Without zp: a zero of `like_zp`'s type (Sub(z, z)) when that
  // is given, so an int8 operator stays int8; else ONNX's default (uint8).
  void Q(const std::string& x, const std::string& s, const std::string& z, const std::string& like_zp,
         const std::string& out) {
    std::vector<std::string> ins = {x, s};
    if (!z.empty()) {
      ins.push_back(z);
    } else if (!like_zp.empty()) {
      std::string zero = Fresh("zero_point");
      Add("Sub", {like_zp, like_zp}, zero);
      ins.push_back(zero);
    }
    Add("QuantizeLinear", ins, out);
  }

  static void CopyAttrs(const onnx::NodeProto& from, onnx::NodeProto* to, const std::vector<std::string>& names) {
    for (const auto& a : from.attribute()) {
      for (const std::string& name : names) {
        if (a.name() == name) *to->add_attribute() = a;
      }
    }
  }

  static void SetInt(onnx::NodeProto* p, const std::string& name, int64_t v) {
    onnx::AttributeProto* a = p->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }

  static void SetFloat(onnx::NodeProto* p, const std::string& name, float v) {
    onnx::AttributeProto* a = p->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }

  // Cast(x) to float32 into a fresh value.
  std::string CastToFloat(const std::string& x) {
    std::string y = Fresh("float");
    SetInt(Add("Cast", {x}, y), "to", onnx::TensorProto::FLOAT);
    return y;
  }

  static void SetInts(onnx::NodeProto* p, const std::string& name, const std::vector<int64_t>& v) {
    onnx::AttributeProto* a = p->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }

 private:
  const onnx::NodeProto& n_;
  std::vector<onnx::NodeProto>* out_;
  std::string base_;
  int count_ = 0;
};

absl::Status Expand(const onnx::NodeProto& n, int64_t opset, const std::unordered_map<std::string, int64_t>& numel,
                    std::vector<onnx::NodeProto>* out, bool* expanded, const std::string& source) {
  *expanded = true;
  const std::string& op = n.op_type();
  auto error = [&](const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": node '", n.name(), "' (com.microsoft.", op, "): ", what));
  };
  Expansion e(n, out);
  if (op == "QLinearAdd" || op == "QLinearMul") {
    if (n.input_size() < 7) return error("needs A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale");
    if (In(n, 0).empty() || In(n, 1).empty() || In(n, 3).empty() || In(n, 4).empty() || In(n, 6).empty()) {
      return error("A, A_scale, B, B_scale and C_scale are required");
    }
    std::string a = e.Dq(In(n, 0), In(n, 1), In(n, 2)), b = e.Dq(In(n, 3), In(n, 4), In(n, 5));
    std::string c = e.Fresh("sum");
    e.Add(op == "QLinearAdd" ? "Add" : "Mul", {a, b}, c);
    e.Q(c, In(n, 6), In(n, 7), In(n, 2), n.output(0));
  } else if (op == "QLinearSigmoid" || op == "QLinearLeakyRelu") {
    if (n.input_size() < 4 || In(n, 0).empty() || In(n, 1).empty() || In(n, 3).empty()) {
      return error("X, X_scale and Y_scale are required");
    }
    std::string x = e.Dq(In(n, 0), In(n, 1), In(n, 2)), y = e.Fresh("activated");
    onnx::NodeProto* p = e.Add(op == "QLinearSigmoid" ? "Sigmoid" : "LeakyRelu", {x}, y);
    if (op == "QLinearLeakyRelu") Expansion::SetFloat(p, "alpha", FloatAttr(n, "alpha", 0.01f));
    e.Q(y, In(n, 3), In(n, 4), In(n, 2), n.output(0));
  } else if (op == "QLinearAveragePool" || op == "QLinearGlobalAveragePool") {
    if (n.input_size() < 4 || In(n, 0).empty() || In(n, 1).empty() || In(n, 3).empty()) {
      return error("X, x_scale and y_scale are required");
    }
    const bool channels_last = IntAttr(n, "channels_last", 0) != 0;
    std::string x = e.Dq(In(n, 0), In(n, 1), In(n, 2));
    if (channels_last) {  // 4-D [N, H, W, C] as the documentation's NHWC
      std::string t = e.Fresh("nchw");
      Expansion::SetInts(e.Add("Transpose", {x}, t), "perm", {0, 3, 1, 2});
      x = t;
    }
    std::string y = e.Fresh("pooled");
    onnx::NodeProto* p = e.Add(op == "QLinearAveragePool" ? "AveragePool" : "GlobalAveragePool", {x}, y);
    Expansion::CopyAttrs(n, p, {"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"});
    if (channels_last) {
      std::string t = e.Fresh("nhwc");
      Expansion::SetInts(e.Add("Transpose", {y}, t), "perm", {0, 2, 3, 1});
      y = t;
    }
    e.Q(y, In(n, 3), In(n, 4), In(n, 2), n.output(0));
  } else if (op == "QLinearConcat") {
    if (n.input_size() < 5 || (n.input_size() - 2) % 3 != 0 || In(n, 0).empty()) {
      return error("needs Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) for every input");
    }
    std::vector<std::string> parts;
    for (int i = 2; i + 2 < n.input_size(); i += 3) {
      if (In(n, i).empty() || In(n, i + 1).empty()) return error("an input or its scale is missing");
      parts.push_back(e.Dq(In(n, i), In(n, i + 1), In(n, i + 2)));
    }
    std::string y = e.Fresh("concat");
    onnx::NodeProto* p = e.Add("Concat", parts, y);
    Expansion::CopyAttrs(n, p, {"axis"});
    e.Q(y, In(n, 0), In(n, 1), In(n, 4), n.output(0));
  } else if (op == "QGemm") {
    if (n.input_size() < 6 || In(n, 0).empty() || In(n, 1).empty() || In(n, 3).empty() || In(n, 4).empty()) {
      return error("A, a_scale, B and b_scale are required");
    }
    const int64_t trans_b = IntAttr(n, "transB", 0);
    auto it = numel.find(In(n, 4));
    const bool per_column = it != numel.end() && it->second > 1;
    if (per_column && opset < 13) return error("a per-column b_scale needs opset 13 (DequantizeLinear's axis)");
    std::string a = e.Dq(In(n, 0), In(n, 1), In(n, 2));
    std::string b = e.Dq(In(n, 3), In(n, 4), In(n, 5), per_column ? (trans_b ? 0 : 1) : -1);
    std::vector<std::string> ins = {a, b};
    if (!In(n, 6).empty()) {  // int32 bias with scale a_scale * b_scale, zero point 0
      std::string cf = e.CastToFloat(In(n, 6)), s = e.Fresh("bias_scale"), c = e.Fresh("bias");
      e.Add("Mul", {In(n, 1), In(n, 4)}, s);
      e.Add("Mul", {cf, s}, c);
      ins.push_back(c);
    }
    const bool quantized_out = !In(n, 7).empty();
    std::string y = quantized_out ? e.Fresh("gemm") : n.output(0);
    onnx::NodeProto* p = e.Add("Gemm", ins, y);
    Expansion::CopyAttrs(n, p, {"alpha", "transA", "transB"});
    // ONNX Runtime adds C to the int32 sums before scaling them by alpha * a_scale * b_scale: beta = alpha.
    Expansion::SetFloat(p, "beta", FloatAttr(n, "alpha", 1.0f));
    if (quantized_out) e.Q(y, In(n, 7), In(n, 8), In(n, 2), n.output(0));
  } else if (op == "MatMulIntegerToFloat" || op == "DynamicQuantizeMatMul") {
    const bool dynamic = op == "DynamicQuantizeMatMul";
    if (In(n, 0).empty() || In(n, 1).empty() || In(n, 2).empty() || (!dynamic && In(n, 3).empty())) {
      return error(dynamic ? "A, B and b_scale are required" : "A, B, a_scale and b_scale are required");
    }
    std::string a = In(n, 0), a_scale, a_zp, b_scale, b_zp, bias;
    if (dynamic) {
      std::string q = e.Fresh("a_quantized");
      a_scale = e.Fresh("a_scale");
      a_zp = e.Fresh("a_zero_point");
      onnx::NodeProto* p = &out->emplace_back();
      p->set_op_type("DynamicQuantizeLinear");
      p->set_name(e.Fresh("DynamicQuantizeLinear"));
      p->add_input(a);
      p->add_output(q);
      p->add_output(a_scale);
      p->add_output(a_zp);
      a = q;
      b_scale = In(n, 2);
      b_zp = In(n, 3);
      bias = In(n, 4);
    } else {
      a_scale = In(n, 2);
      b_scale = In(n, 3);
      a_zp = In(n, 4);
      b_zp = In(n, 5);
      bias = In(n, 6);
    }
    std::string acc = e.Fresh("int32"), s = e.Fresh("scale");
    onnx::NodeProto* mm = e.Add("MatMulInteger", {a, In(n, 1)}, acc);
    if (!a_zp.empty() || !b_zp.empty()) mm->add_input(a_zp);
    if (!b_zp.empty()) mm->add_input(b_zp);
    const std::string f = e.CastToFloat(acc);
    e.Add("Mul", {a_scale, b_scale}, s);
    if (bias.empty()) {
      e.Add("Mul", {f, s}, n.output(0));
    } else {
      std::string m = e.Fresh("scaled");
      e.Add("Mul", {f, s}, m);
      e.Add("Add", {m, bias}, n.output(0));
    }
  } else {
    *expanded = false;
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status ExpandGraph(onnx::GraphProto* g, int64_t opset, const std::string& source) {
  bool any = false;
  for (const auto& n : g->node()) any |= n.domain() == "com.microsoft";
  // Element counts of the initializers (QGemm's per-column b_scale); -1 where the dims are negative or
  // their product overflows (a hostile model; the importer reports such a tensor by name).
  std::unordered_map<std::string, int64_t> numel;
  for (const auto& t : g->initializer()) {
    if (!any) break;
    int64_t c = 1;
    for (int64_t d : t.dims()) {
      if (d < 0 || __builtin_mul_overflow(c, d, &c)) {
        c = -1;
        break;
      }
    }
    numel[t.name()] = c;
  }
  for (auto& n : *g->mutable_node()) {
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) {
        auto st = ExpandGraph(a.mutable_g(), opset, source);
        if (!st.ok()) return st;
      }
      for (auto& sub : *a.mutable_graphs()) {
        auto st = ExpandGraph(&sub, opset, source);
        if (!st.ok()) return st;
      }
    }
  }
  if (!any) return absl::OkStatus();
  std::vector<onnx::NodeProto> nodes;
  nodes.reserve(static_cast<size_t>(g->node_size()) * 4);
  for (const auto& n : g->node()) {
    bool expanded = false;
    if (n.domain() == "com.microsoft") {
      auto st = Expand(n, opset, numel, &nodes, &expanded, source);
      if (!st.ok()) return st;
    }
    if (!expanded) nodes.push_back(n);
  }
  g->clear_node();
  for (auto& n : nodes) *g->add_node() = std::move(n);
  return absl::OkStatus();
}

}  // namespace

absl::Status ExpandContribQuantizedOps(onnx::GraphProto* graph, int64_t opset, const std::string& source) {
  return ExpandGraph(graph, opset, source);
}

}  // namespace cjit
