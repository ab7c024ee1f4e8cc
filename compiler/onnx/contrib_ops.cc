#include "compiler/onnx/contrib_ops.h"

#include <functional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/onnx/contrib_expansion.h"
#include "onnx/onnx_pb.h"

namespace cjit {
namespace {

using namespace contrib;  // NOLINT: the expansion helpers

absl::Status Expand(const onnx::NodeProto& n, int64_t opset, const ValueFacts& facts,
                    NodeList* out, bool* expanded, const std::string& source) {
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
    const bool per_column = facts.Numel(In(n, 4)) > 1;
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
    return ExpandTransformerOp(n, facts, out, expanded, source);
  }
  return absl::OkStatus();
}

// ONNX Runtime registers LayerNormalization (before opset 17 made it standard) and
// SimplifiedLayerNormalization (RMSNorm) in the default domain; its transformers optimizer writes them.
bool IsOrtDefaultDomainOp(const onnx::NodeProto& n, int64_t opset) {
  if (!n.domain().empty() && n.domain() != "ai.onnx") return false;
  return n.op_type() == "SimplifiedLayerNormalization" || (n.op_type() == "LayerNormalization" && opset < 17);
}

absl::Status ExpandGraph(onnx::GraphProto* g, int64_t opset, const std::string& source) {
  bool any = false;
  for (const auto& n : g->node()) any |= n.domain() == "com.microsoft" || IsOrtDefaultDomainOp(n, opset);
  ValueFacts facts;
  if (any) {
    for (const auto& t : g->initializer()) {
      facts.initializer_dims[t.name()].assign(t.dims().begin(), t.dims().end());
      facts.rank[t.name()] = t.dims_size();
    }
    auto declared = [&](const onnx::ValueInfoProto& v) {
      if (v.type().has_tensor_type() && v.type().tensor_type().has_shape()) {
        facts.rank[v.name()] = v.type().tensor_type().shape().dim_size();
      }
    };
    for (const auto& v : g->input()) declared(v);
    for (const auto& v : g->value_info()) declared(v);
    for (const auto& v : g->output()) declared(v);
    std::function<void(const onnx::GraphProto&)> reads = [&](const onnx::GraphProto& graph) {
      for (const auto& n : graph.node()) {
        for (const auto& i : n.input()) facts.used.insert(i);
        for (const auto& a : n.attribute()) {
          if (a.has_g()) reads(a.g());
          for (const auto& sub : a.graphs()) reads(sub);
        }
      }
      for (const auto& o : graph.output()) facts.used.insert(o.name());
    };
    reads(*g);
    for (const auto& n : g->node()) {  // EmbedLayerNormalization's mask_index is [B]
      if (n.domain() == "com.microsoft" && n.op_type() == "EmbedLayerNormalization" && n.output_size() > 1) {
        facts.rank[n.output(1)] = 1;
      }
    }
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
  NodeList nodes;
  for (const auto& n : g->node()) {
    bool expanded = false;
    const bool ours = n.domain() == "com.microsoft" || IsOrtDefaultDomainOp(n, opset);
    if (ours && (n.output_size() == 0 || n.output(0).empty())) {  // every expansion writes output 0
      return absl::InvalidArgumentError(absl::StrCat(source, ": node '", n.name(), "' (", n.domain(), ".",
                                                     n.op_type(), ") has no first output"));
    }
    if (n.domain() == "com.microsoft") {
      auto st = Expand(n, opset, facts, &nodes, &expanded, source);
      if (!st.ok()) return st;
    } else if (IsOrtDefaultDomainOp(n, opset)) {
      if (n.op_type() == "LayerNormalization") {  // the same contract as LayerNormalization-17
        nodes.push_back(n);
        nodes.back().set_domain(std::string(kExpansionDomain));
        expanded = true;
      } else {
        auto st = ExpandTransformerOp(n, facts, &nodes, &expanded, source);
        if (!st.ok()) return st;
      }
    }
    if (!expanded) nodes.push_back(n);
  }
  g->clear_node();
  for (auto& n : nodes) *g->add_node() = std::move(n);
  return absl::OkStatus();
}

}  // namespace

absl::Status ExpandContribOps(onnx::GraphProto* graph, int64_t opset, const std::string& source) {
  return ExpandGraph(graph, opset, source);
}

}  // namespace cjit
