// Internal to compiler/onnx: the node writer shared by the contrib-op expansions (contrib_ops.cc,
// contrib_transformer_ops.cc). Not thread-safe (one per expanded node).
#ifndef CJIT_COMPILER_ONNX_CONTRIB_EXPANSION_H_
#define CJIT_COMPILER_ONNX_CONTRIB_EXPANSION_H_

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/onnx/contrib_ops.h"
#include "onnx/onnx_pb.h"

namespace cjit {
namespace contrib {

// The nodes an expansion writes. A deque: a writer keeps pointers to nodes it added while adding more.
using NodeList = std::deque<onnx::NodeProto>;

// What the expansion knows of a graph's values before import: declared ranks (graph inputs, value_info,
// outputs, initializers) and initializer dims.
struct ValueFacts {
  std::unordered_map<std::string, int64_t> rank;
  std::unordered_map<std::string, std::vector<int64_t>> initializer_dims;
  // Element count of an initializer; -1 when unknown, negative dims or overflow (a hostile model).
  int64_t Numel(const std::string& name) const {
    auto it = initializer_dims.find(name);
    if (it == initializer_dims.end()) return -1;
    int64_t c = 1;
    for (int64_t d : it->second) {
      if (d < 0 || __builtin_mul_overflow(c, d, &c)) return -1;
    }
    return c;
  }
  // Values some node reads (subgraphs included) or the graph outputs: an optional output nobody reads may
  // be left unproduced.
  std::unordered_set<std::string> used;
  bool Used(const std::string& name) const { return !name.empty() && used.count(name) > 0; }
  int64_t Rank(const std::string& name) const {
    auto it = rank.find(name);
    return it == rank.end() ? -1 : it->second;
  }
};

inline const std::string& In(const onnx::NodeProto& n, int i) {
  static const std::string kEmpty;
  return i < n.input_size() ? n.input(i) : kEmpty;
}

inline const onnx::AttributeProto* Attr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

inline int64_t IntAttr(const onnx::NodeProto& n, const std::string& name, int64_t dflt) {
  const onnx::AttributeProto* a = Attr(n, name);
  return a != nullptr && a->type() == onnx::AttributeProto::INT ? a->i() : dflt;
}

inline float FloatAttr(const onnx::NodeProto& n, const std::string& name, float dflt) {
  const onnx::AttributeProto* a = Attr(n, name);
  return a != nullptr && a->type() == onnx::AttributeProto::FLOAT ? a->f() : dflt;
}

// Writes the expansion of one contrib node: fresh value and node names under the node's name.
class Expansion {
 public:
  Expansion(const onnx::NodeProto& n, NodeList* out) : n_(n), out_(out) {
    base_ = n.name().empty() ? (n.output_size() > 0 ? n.output(0) : n.op_type()) : n.name();
  }

  std::string Fresh(const std::string& what) { return absl::StrCat(base_, "/", what, "_", count_++); }

  // A standard node with the newest opset's semantics (kExpansionDomain), into `out`.
  onnx::NodeProto* New(const std::string& op, const std::vector<std::string>& ins, const std::string& out) {
    onnx::NodeProto* p = Add(op, ins, out);
    p->set_domain(std::string(kExpansionDomain));
    return p;
  }
  // The same into a fresh value, returned.
  std::string Op(const std::string& op, const std::vector<std::string>& ins) {
    std::string y = Fresh(op);
    New(op, ins, y);
    return y;
  }
  // Constants (Constant nodes): a float32 scalar, the same cast to `like`'s type, int64 scalar and 1-D.
  std::string Float(float v) {
    std::string y = Fresh("const");
    onnx::AttributeProto* a = Add("Constant", {}, y)->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
    a->mutable_t()->add_float_data(v);
    return y;
  }
  std::string Like(float v, const std::string& like) { return Op("CastLike", {Float(v), like}); }
  std::string Ints(const std::vector<int64_t>& v, bool scalar = false) {
    std::string y = Fresh("const");
    onnx::AttributeProto* a = Add("Constant", {}, y)->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(onnx::TensorProto::INT64);
    if (!scalar) a->mutable_t()->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) a->mutable_t()->add_int64_data(x);
    return y;
  }
  std::string Int(int64_t v) { return Ints({v}, true); }

  static void SetString(onnx::NodeProto* p, const std::string& name, const std::string& v) {
    onnx::AttributeProto* a = p->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
  }

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
  NodeList* out_;
  std::string base_;
  int count_ = 0;
};

// Transformer-family contrib ops (contrib_transformer_ops.cc). *expanded: whether `n` was one of them.
absl::Status ExpandTransformerOp(const onnx::NodeProto& n, const ValueFacts& facts, NodeList* out, bool* expanded,
                                 const std::string& source);

}  // namespace contrib
}  // namespace cjit

#endif  // CJIT_COMPILER_ONNX_CONTRIB_EXPANSION_H_
