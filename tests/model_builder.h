// A small fluent builder of ONNX models (libonnx's protobuf classes) for tests that need hand-made, often
// deliberately malformed, models.
//
//   ModelBuilder b(13);
//   b.Input("x", onnx::TensorProto::FLOAT, {2, 3}).Output("y");
//   auto* n = b.Node("Tile", {"x", "r"}, {"y"});
//   b.InitInts("r", {2}, {-1, 2});
//   auto s = Session::LoadFromBytes(b.Bytes(), opts);
#ifndef CJIT_TESTS_MODEL_BUILDER_H_
#define CJIT_TESTS_MODEL_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace cjit {
namespace testing {

class ModelBuilder {
 public:
  explicit ModelBuilder(int64_t opset = 13, int64_t ir_version = 8) {
    m_.set_ir_version(ir_version);
    m_.add_opset_import()->set_version(opset);
    m_.mutable_graph()->set_name("test");
  }
  // Imports another operator domain (e.g. "com.microsoft") at `version`.
  ModelBuilder& Domain(const std::string& domain, int64_t version = 1) {
    auto* o = m_.add_opset_import();
    o->set_domain(domain);
    o->set_version(version);
    return *this;
  }
  // dims: -1 is a dynamic dim ("N"); an empty `dims` with rank_known=false leaves the shape out.
  ModelBuilder& Input(const std::string& name, int elem, const std::vector<int64_t>& dims, bool rank_known = true) {
    Info(m_.mutable_graph()->add_input(), name, elem, dims, rank_known);
    return *this;
  }
  ModelBuilder& Output(const std::string& name, int elem = 0, const std::vector<int64_t>& dims = {},
                       bool rank_known = false) {
    Info(m_.mutable_graph()->add_output(), name, elem, dims, rank_known);
    return *this;
  }
  // A sequence(tensor(elem)) input / output, or (optional=true) an optional of a tensor (sequence=false) or
  // of a sequence; element shapes left out.
  ModelBuilder& SequenceInput(const std::string& name, int elem) {
    TypedInfo(m_.mutable_graph()->add_input(), name, elem, true, false);
    return *this;
  }
  ModelBuilder& SequenceOutput(const std::string& name, int elem) {
    TypedInfo(m_.mutable_graph()->add_output(), name, elem, true, false);
    return *this;
  }
  ModelBuilder& OptionalInput(const std::string& name, int elem, bool of_sequence) {
    TypedInfo(m_.mutable_graph()->add_input(), name, elem, of_sequence, true);
    return *this;
  }
  ModelBuilder& OptionalOutput(const std::string& name, int elem, bool of_sequence) {
    TypedInfo(m_.mutable_graph()->add_output(), name, elem, of_sequence, true);
    return *this;
  }
  static void TypedInfo(onnx::ValueInfoProto* v, const std::string& name, int elem, bool sequence, bool optional) {
    v->set_name(name);
    onnx::TypeProto* t = v->mutable_type();
    if (optional) t = t->mutable_optional_type()->mutable_elem_type();
    if (sequence) t = t->mutable_sequence_type()->mutable_elem_type();
    t->mutable_tensor_type()->set_elem_type(elem);
  }
  onnx::NodeProto* Node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs, const std::string& name = "") {
    auto* n = m_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? (outputs.empty() ? op : outputs[0]) : name);
    for (const auto& i : inputs) n->add_input(i);
    for (const auto& o : outputs) n->add_output(o);
    return n;
  }
  onnx::TensorProto* InitFloats(const std::string& name, const std::vector<int64_t>& dims,
                                const std::vector<float>& v) {
    auto* t = Init(name, onnx::TensorProto::FLOAT, dims);
    for (float x : v) t->add_float_data(x);
    return t;
  }
  onnx::TensorProto* InitInts(const std::string& name, const std::vector<int64_t>& dims, const std::vector<int64_t>& v,
                              int elem = onnx::TensorProto::INT64) {
    auto* t = Init(name, elem, dims);
    for (int64_t x : v) {
      if (elem == onnx::TensorProto::INT64) t->add_int64_data(x);
      else t->add_int32_data(static_cast<int32_t>(x));
    }
    return t;
  }
  onnx::TensorProto* Init(const std::string& name, int elem, const std::vector<int64_t>& dims) {
    auto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(elem);
    for (int64_t d : dims) t->add_dims(d);
    return t;
  }
  static void AttrInt(onnx::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void AttrFloat(onnx::NodeProto* n, const std::string& name, float v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  static void AttrInts(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void AttrFloats(onnx::NodeProto* n, const std::string& name, const std::vector<float>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOATS);
    for (float x : v) a->add_floats(x);
  }
  static void AttrString(onnx::NodeProto* n, const std::string& name, const std::string& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
  }
  // Fills graph attribute `a` (an If's then_branch / else_branch) with NAME_out = OP(x, NAME_c), NAME_c the
  // float scalar `v` and x read from the enclosing graph; NAME_out is declared float of `out_dims`.
  static void ScalarOpBranch(onnx::AttributeProto* a, const std::string& name, const std::string& op, float v,
                             const std::vector<int64_t>& out_dims) {
    a->set_name(name);
    a->set_type(onnx::AttributeProto::GRAPH);
    auto* bg = a->mutable_g();
    bg->set_name(name);
    auto* c = bg->add_initializer();
    c->set_name(name + "_c");
    c->set_data_type(onnx::TensorProto::FLOAT);
    c->add_float_data(v);
    auto* n = bg->add_node();
    n->set_op_type(op);
    n->add_input("x");
    n->add_input(name + "_c");
    n->add_output(name + "_out");
    Info(bg->add_output(), name + "_out", onnx::TensorProto::FLOAT, out_dims);
  }
  onnx::ModelProto& proto() { return m_; }
  std::string Bytes() const { return m_.SerializeAsString(); }

  // Fills a value info: name, element type (0: none) and dims (-1: a dynamic dim "N"; rank_known=false:
  // no shape). Also for tests that assemble a GraphProto by hand.
  static void Info(onnx::ValueInfoProto* v, const std::string& name, int elem, const std::vector<int64_t>& dims,
                   bool rank_known = true) {
    v->set_name(name);
    if (elem == 0) return;
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    if (!rank_known) return;
    auto* shape = tt->mutable_shape();
    for (int64_t d : dims) {
      if (d < 0) shape->add_dim()->set_dim_param("N");
      else shape->add_dim()->set_dim_value(d);
    }
  }

 private:
  onnx::ModelProto m_;
};

}  // namespace testing
}  // namespace cjit

#endif  // CJIT_TESTS_MODEL_BUILDER_H_
