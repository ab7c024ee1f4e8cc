// The op table's properties beyond each op's registration (compiler/ops/op_registry.h OpTraits and the AMP
// classes): every list of op names that passes, kernels, layout, AMP and GPU placement consult is here, and
// nowhere else. Adding an op to a list here is all it takes for every consumer to treat it so.
#include <initializer_list>

#include "compiler/ops/op_registry.h"

namespace cjit {
namespace {

using Table = std::map<std::string, OpDef, std::less<>>;

template <typename Fn>
void ForEach(Table& t, std::initializer_list<const char*> ops, Fn fn) {
  for (const char* op : ops) {
    if (auto it = t.find(op); it != t.end() && !it->second.internal) fn(it->second);
  }
}

// AMP classes beyond what each registration gives (allow for contractions, deny/infer for math): data
// movement and ops without arithmetic of their own are clear; reductions that sum, normalizations,
// recurrences, Sqrt and the transcendental functions whose 16-bit results lose the most (Exp, Log,
// Softplus, Erf) are deny (TensorFlow's deny list: sums and means, Softmax, Exp/Log/Pow), which also keeps
// decomposed LayerNorm/RMSNorm/Softmax in float32.
void AssignAmpClasses(Table& t) {
  for (auto& [name, def] : t) {
    if (def.category == OpCategory::kDataMovement) def.amp = AmpClass::kClear;
  }
  ForEach(t, {"Relu", "MaxPool", "GlobalMaxPool", "ReduceMax", "ReduceMin", "Max", "Min", "Abs", "Neg", "Clip",
              "Where", "Dropout", "Identity", "Floor", "Ceil", "Round", "Sign"},
          [](OpDef& d) { d.amp = AmpClass::kClear; });
  ForEach(t, {"Sqrt", "Softmax", "LogSoftmax", "ReduceSum", "ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "CumSum", "LayerNormalization",
              "GroupNormalization", "InstanceNormalization", "LpNormalization", "LRN", "LSTM", "GRU", "RNN", "DFT",
              "STFT", "Cast", "CastLike", "Exp", "Log", "Softplus", "Erf"},
          [](OpDef& d) { d.amp = AmpClass::kDeny; });
  ForEach(t, {"Conv", "ConvTranspose", "MatMul", "Gemm", "Einsum"}, [](OpDef& d) { d.amp = AmpClass::kAllow; });
}

void AssignFusion(Table& t) {
  ForEach(t, {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "Neg", "Abs", "Relu", "Sigmoid", "Tanh", "Exp",
              "Log", "Sqrt", "Reciprocal", "Clip", "HardSigmoid", "HardSwish", "LeakyRelu", "Elu", "Erf", "Floor",
              "Ceil", "Softplus", "Softsign", "Sin", "Cos", "Selu", "Celu", "ThresholdedRelu", "PRelu", "Sum",
              "Mean", "Round", "Sign", "Mish", "Gelu"},
          [](OpDef& d) { d.traits.fusion = FusionClass::kFloat; });
  ForEach(t, {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "IsNaN", "IsInf"},
          [](OpDef& d) { d.traits.fusion = FusionClass::kCompare; });
  ForEach(t, {"Not", "And", "Or", "Xor"}, [](OpDef& d) { d.traits.fusion = FusionClass::kLogic; });
  ForEach(t, {"Where"}, [](OpDef& d) { d.traits.fusion = FusionClass::kSelect; });
  ForEach(t, {"Cast"}, [](OpDef& d) { d.traits.fusion = FusionClass::kCast; });
  ForEach(t, {"Identity"}, [](OpDef& d) { d.traits.fusion = FusionClass::kIdentity; });
  ForEach(t, {"QuantizeLinear", "DequantizeLinear"}, [](OpDef& d) { d.traits.fusion = FusionClass::kQuantize; });
  ForEach(t, {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceSumSquare", "ReduceL2"}, [](OpDef& d) {
    d.traits.row_reduction = true;
    d.traits.reduce = true;
  });
  ForEach(t, {"Softmax", "LogSoftmax"}, [](OpDef& d) { d.traits.row_reduction = true; });
}

void AssignLayoutAndMemory(Table& t) {
  // Cast is elementwise whatever the dtypes: mixed precision puts Casts between convolutions, which would
  // otherwise end every channels-last region.
  ForEach(t, {"Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Clip", "Elu", "Selu", "Celu",
              "Softplus", "Softsign", "ThresholdedRelu", "Exp", "Log", "Neg", "Abs", "Sqrt", "Reciprocal", "Erf",
              "Floor", "Ceil", "Round", "Sin", "Cos", "Mish", "Gelu", "Identity", "Cast"},
          [](OpDef& d) { d.traits.layout_unary = true; });
  ForEach(t, {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "PRelu"},
          [](OpDef& d) { d.traits.layout_binary = true; });
  // Kernels that read x[i] and write y[i] at the same index only (Eigen array maps, ApplyUnaryPostOps).
  ForEach(t, {"Relu", "Sigmoid", "Tanh", "Exp", "Abs", "Neg", "HardSwish", "HardSigmoid"},
          [](OpDef& d) { d.traits.in_place = true; });
  ForEach(t, {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}, [](OpDef& d) { d.traits.view = ViewKind::kReshape; });
  ForEach(t, {"Identity"}, [](OpDef& d) { d.traits.view = ViewKind::kIdentity; });
  ForEach(t, {"Transpose", "Slice", "Expand"}, [](OpDef& d) { d.traits.view = ViewKind::kStrided; });
}

}  // namespace

void AssignOpTraits(Table& table) {
  AssignAmpClasses(table);
  AssignFusion(table);
  AssignLayoutAndMemory(table);
  ForEach(table, {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Bernoulli", "Multinomial",
                  "Dropout"},
          [](OpDef& d) {
            d.traits.random = true;
            d.clusterable = false;
          });
  // The ops whose kernels read or write tensor(string) elements as strings (every other op is refused them).
  ForEach(table, {"Cast", "CastLike", "Identity", "StringNormalizer", "TfIdfVectorizer", "StringConcat", "StringSplit",
                  "RegexFullMatch"},
          [](OpDef& d) { d.string_values = true; });
}

}  // namespace cjit
