// Structured mutator for onnx_model_fuzzer (libFuzzer's LLVMFuzzerCustomMutator): byte flips rarely get a
// model past protobuf parsing and the importer, so most mutations are made on the parsed ModelProto, at
// the level where the semantic checks live: attribute values and types (extreme integers, NaN/Inf floats,
// other enum strings), tensor dims (0, -1, huge, symbolic), dtypes, wiring (a node input replaced by
// another value, added or removed), operator types, opset and IR versions, nodes deleted, duplicated or
// reordered, initializer data truncated. One in eight mutations (and every unparsable input) falls back to
// libFuzzer's byte-level mutator.
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

using Rng = std::mt19937_64;

const char* const kOps[] = {
    "Abs", "Add", "And", "ArgMax", "AveragePool", "BatchNormalization", "Cast", "Ceil", "Celu", "Clip",
    "Concat", "Constant", "ConstantOfShape", "Conv", "ConvTranspose", "CumSum", "DepthToSpace", "Div",
    "Dropout", "Einsum", "Elu", "Equal", "Erf", "Exp", "Expand", "Flatten", "Floor", "GRU", "Gather",
    "GatherElements", "GatherND", "Gelu", "Gemm", "GlobalAveragePool", "Greater", "GroupNormalization",
    "HardSigmoid", "HardSwish", "Identity", "If", "InstanceNormalization", "IsInf", "IsNaN", "LRN", "LSTM",
    "LayerNormalization", "LeakyRelu", "Less", "Log", "LogSoftmax", "Loop", "MatMul", "Max", "MaxPool",
    "Mean", "Min", "Mod", "Mul", "Neg", "NonZero", "Not", "OneHot", "Or", "PRelu", "Pad", "Pow", "RNN",
    "Range", "Reciprocal", "ReduceL2", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceSum", "Relu",
    "Reshape", "Resize", "ReverseSequence", "Scatter", "ScatterElements", "ScatterND", "Shape", "Sigmoid",
    "Sign", "Sin", "Size", "Slice", "Softmax", "Softplus", "SpaceToDepth", "Split", "Sqrt", "Squeeze",
    "Sub", "Sum", "Tanh", "Tile", "TopK", "Transpose", "Trilu", "Unsqueeze", "Upsample", "Where", "Xor"};
const char* const kAttrNames[] = {"axis", "axes", "perm", "keepdims", "kernel_shape", "pads", "strides",
                                  "dilations", "group", "mode", "alpha", "beta", "epsilon", "to", "value",
                                  "split", "num_outputs", "auto_pad", "ceil_mode", "transA", "transB",
                                  "blocksize", "exclusive", "reverse", "upper", "largest", "sorted",
                                  "coordinate_transformation_mode", "nearest_mode", "direction",
                                  "hidden_size", "layout", "reduction", "batch_dims", "noop_with_empty_axes"};
const char* const kStrings[] = {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", "constant", "reflect", "edge",
                                "wrap", "linear", "nearest", "cubic", "half_pixel", "asymmetric",
                                "align_corners", "tf_crop_and_resize", "floor", "ceil", "round_prefer_floor",
                                "DCR", "CRD", "none", "add", "mul", "max", "min", "forward", "reverse",
                                "bidirectional", "Tanh", "Sigmoid", "Relu", "", "\xff\xfe"};
const int kElemTypes[] = {1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 16, 0, 8, 14, 17, 25};

template <typename T, size_t N>
const T& Pick(Rng& rng, const T (&a)[N]) {
  return a[rng() % N];
}

int64_t InterestingInt(Rng& rng, int64_t v) {
  static const int64_t kInts[] = {-1, 0, 1, 2, 3, -2, 4, 7, 64,
                                  std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(),
                                  std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min(),
                                  int64_t{1} << 31, int64_t{1} << 40, -(int64_t{1} << 40)};
  uint64_t u = static_cast<uint64_t>(v);  // wrapping arithmetic: INT64_MAX + 1 is INT64_MIN, not UB
  switch (rng() % 4) {
    case 0: return static_cast<int64_t>(u + 1);
    case 1: return static_cast<int64_t>(u - 1);
    case 2: return static_cast<int64_t>(0 - u);
    default: return Pick(rng, kInts);
  }
}

float InterestingFloat(Rng& rng) {
  static const float kFloats[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                                  -std::numeric_limits<float>::infinity(), 0.0f, -0.0f, 1e-45f, 3e38f, -1.0f,
                                  0.5f, 2.0f, -1e10f};
  return Pick(rng, kFloats);
}

void MutateDim(Rng& rng, onnx::TensorShapeProto_Dimension* d) {
  switch (rng() % 4) {
    case 0: d->set_dim_param(rng() % 2 ? "N" : "M"); break;
    case 1: d->clear_value(); break;
    default: d->set_dim_value(InterestingInt(rng, d->has_dim_value() ? d->dim_value() : 1)); break;
  }
}

void MutateTypeProto(Rng& rng, onnx::TypeProto* t) {
  auto* tt = t->mutable_tensor_type();
  if (rng() % 3 == 0) {
    tt->set_elem_type(Pick(rng, kElemTypes));
    return;
  }
  auto* shape = tt->mutable_shape();
  if (shape->dim_size() == 0 || rng() % 5 == 0) {
    if (rng() % 2) shape->add_dim()->set_dim_value(static_cast<int64_t>(rng() % 5));
    else tt->clear_shape();
    return;
  }
  if (rng() % 6 == 0) {
    shape->mutable_dim()->RemoveLast();
    return;
  }
  MutateDim(rng, shape->mutable_dim(static_cast<int>(rng() % shape->dim_size())));
}

void MutateTensor(Rng& rng, onnx::TensorProto* t) {
  switch (rng() % 5) {
    case 0:
      t->set_data_type(Pick(rng, kElemTypes));
      break;
    case 1:
      if (t->dims_size() > 0) {
        int i = static_cast<int>(rng() % t->dims_size());
        t->set_dims(i, InterestingInt(rng, t->dims(i)));
      } else {
        t->add_dims(static_cast<int64_t>(rng() % 4));
      }
      break;
    case 2:
      if (t->dims_size() > 0) t->mutable_dims()->RemoveLast();
      else t->add_dims(1);
      break;
    case 3:  // truncate or extend the payload
      if (!t->raw_data().empty()) {
        std::string* raw = t->mutable_raw_data();
        raw->resize(rng() % 2 ? raw->size() / 2 : raw->size() + 1 + rng() % 8, '\x7f');
      } else if (t->float_data_size() > 0) {
        t->mutable_float_data()->RemoveLast();
      } else if (t->int64_data_size() > 0) {
        t->set_int64_data(static_cast<int>(rng() % t->int64_data_size()), InterestingInt(rng, 0));
      } else {
        t->add_float_data(InterestingFloat(rng));
      }
      break;
    default:  // one element to an interesting value
      if (t->int64_data_size() > 0) {
        int i = static_cast<int>(rng() % t->int64_data_size());
        t->set_int64_data(i, InterestingInt(rng, t->int64_data(i)));
      } else if (t->float_data_size() > 0) {
        t->set_float_data(static_cast<int>(rng() % t->float_data_size()), InterestingFloat(rng));
      } else if (t->raw_data().size() >= 8) {
        std::string* raw = t->mutable_raw_data();
        size_t off = (rng() % (raw->size() / 8)) * 8;
        int64_t v = InterestingInt(rng, 0);
        std::memcpy(&(*raw)[off], &v, 8);
      }
      break;
  }
}

void MutateAttribute(Rng& rng, onnx::AttributeProto* a) {
  if (rng() % 8 == 0) {  // a different type than the schema's
    static const onnx::AttributeProto_AttributeType kTypes[] = {
        onnx::AttributeProto::INT, onnx::AttributeProto::FLOAT, onnx::AttributeProto::STRING,
        onnx::AttributeProto::INTS, onnx::AttributeProto::TENSOR};
    a->set_type(Pick(rng, kTypes));
  }
  switch (a->type()) {
    case onnx::AttributeProto::INT: a->set_i(InterestingInt(rng, a->i())); break;
    case onnx::AttributeProto::FLOAT: a->set_f(InterestingFloat(rng)); break;
    case onnx::AttributeProto::STRING: a->set_s(Pick(rng, kStrings)); break;
    case onnx::AttributeProto::INTS:
      if (a->ints_size() == 0 || rng() % 4 == 0) {
        a->add_ints(InterestingInt(rng, 1));
      } else if (rng() % 4 == 0) {
        a->mutable_ints()->RemoveLast();
      } else {
        int i = static_cast<int>(rng() % a->ints_size());
        a->set_ints(i, InterestingInt(rng, a->ints(i)));
      }
      break;
    case onnx::AttributeProto::FLOATS:
      if (a->floats_size() == 0) a->add_floats(InterestingFloat(rng));
      else a->set_floats(static_cast<int>(rng() % a->floats_size()), InterestingFloat(rng));
      break;
    case onnx::AttributeProto::TENSOR: MutateTensor(rng, a->mutable_t()); break;
    default: a->set_i(InterestingInt(rng, 0)); break;
  }
}

// Every value name a node could read: graph inputs, initializers, node outputs.
std::vector<std::string> ValueNames(const onnx::GraphProto& g) {
  std::vector<std::string> names;
  for (const auto& v : g.input()) names.push_back(v.name());
  for (const auto& t : g.initializer()) names.push_back(t.name());
  for (const auto& n : g.node()) {
    for (const auto& o : n.output()) names.push_back(o);
  }
  return names;
}

void MutateOnce(Rng& rng, onnx::ModelProto& m) {
  onnx::GraphProto* g = m.mutable_graph();
  int nodes = g->node_size();
  onnx::NodeProto* node = nodes > 0 ? g->mutable_node(static_cast<int>(rng() % nodes)) : nullptr;
  switch (rng() % 16) {
    case 0: case 1: case 2:  // an attribute's value
      if (node && node->attribute_size() > 0) {
        MutateAttribute(rng, node->mutable_attribute(static_cast<int>(rng() % node->attribute_size())));
      }
      break;
    case 3:  // add an attribute
      if (node) {
        auto* a = node->add_attribute();
        a->set_name(Pick(rng, kAttrNames));
        a->set_type(rng() % 2 ? onnx::AttributeProto::INT : onnx::AttributeProto::INTS);
        MutateAttribute(rng, a);
      }
      break;
    case 4:  // remove an attribute
      if (node && node->attribute_size() > 0) {
        node->mutable_attribute()->SwapElements(static_cast<int>(rng() % node->attribute_size()),
                                                node->attribute_size() - 1);
        node->mutable_attribute()->RemoveLast();
      }
      break;
    case 5:  // a graph input's or output's type
      if (g->input_size() > 0 && rng() % 2) {
        MutateTypeProto(rng, g->mutable_input(static_cast<int>(rng() % g->input_size()))->mutable_type());
      } else if (g->output_size() > 0) {
        MutateTypeProto(rng, g->mutable_output(static_cast<int>(rng() % g->output_size()))->mutable_type());
      }
      break;
    case 6: case 7:  // an initializer
      if (g->initializer_size() > 0)
        MutateTensor(rng, g->mutable_initializer(static_cast<int>(rng() % g->initializer_size())));
      break;
    case 8: {  // rewire one input
      std::vector<std::string> names = ValueNames(*g);
      if (node && node->input_size() > 0 && !names.empty()) {
        std::string pick = rng() % 8 == 0 ? std::string(rng() % 2 ? "" : "undefined") : names[rng() % names.size()];
        node->set_input(static_cast<int>(rng() % node->input_size()), pick);
      }
      break;
    }
    case 9: {  // add or remove an input
      std::vector<std::string> names = ValueNames(*g);
      if (!node) break;
      if (node->input_size() > 0 && rng() % 2) node->mutable_input()->RemoveLast();
      else if (!names.empty()) node->add_input(names[rng() % names.size()]);
      break;
    }
    case 10:  // another operator
      if (node) node->set_op_type(Pick(rng, kOps));
      break;
    case 11:  // opset / IR version
      if (rng() % 4 == 0) {
        m.set_ir_version(static_cast<int64_t>(rng() % 12));
      } else {
        if (m.opset_import_size() == 0) m.add_opset_import();
        m.mutable_opset_import(0)->set_version(static_cast<int64_t>(rng() % 26));
      }
      break;
    case 12:  // delete a node
      if (nodes > 0) {
        g->mutable_node()->SwapElements(static_cast<int>(rng() % nodes), nodes - 1);
        g->mutable_node()->RemoveLast();
      }
      break;
    case 13:  // duplicate a node under fresh output names, its first output made a graph output
      if (node) {
        onnx::NodeProto copy = *node;
        for (int i = 0; i < copy.output_size(); ++i) copy.set_output(i, copy.output(i) + "_dup");
        copy.set_name(copy.name() + "_dup");
        if (copy.output_size() > 0) g->add_output()->set_name(copy.output(0));
        *g->add_node() = copy;
      }
      break;
    case 14:  // swap two nodes (the order is no longer topological)
      if (nodes > 1) g->mutable_node()->SwapElements(static_cast<int>(rng() % nodes), static_cast<int>(rng() % nodes));
      break;
    default: {  // expose an intermediate value as a graph output
      std::vector<std::string> names = ValueNames(*g);
      if (!names.empty()) g->add_output()->set_name(names[rng() % names.size()]);
      break;
    }
  }
}

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  Rng rng(seed);
  onnx::ModelProto m;
  if (rng() % 8 == 0 || !m.ParseFromArray(data, static_cast<int>(size)) || !m.has_graph()) {
    return LLVMFuzzerMutate(data, size, max_size);
  }
  int n = 1 + static_cast<int>(rng() % 3);
  for (int i = 0; i < n; ++i) MutateOnce(rng, m);
  std::string out;
  if (!m.SerializeToString(&out) || out.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}
