// The one table of operator properties (CONVENTIONS #11): for every supported ONNX operator, its category
// (for clustering), whether it may be clustered, its automatic-mixed-precision class, and its shape/dtype
// inference function. Kernels live in runtime/cpu and are looked up by the same name.
//
// Shape functions follow the ONNX operator specification (https://onnx.ai/onnx/operators/), for opsets 7-21.
// They receive each input's dtype, (partial) shape and, when known, its value (constants during
// specialization; every input at run time), and fill one InferOutput per node output. An output dim that
// depends on data not known yet is left unknown (-1); a bad attribute or incompatible shapes is an
// InvalidArgumentError naming the node.
//
// Thread-safety: the table is built once, immutable after; lookups are safe from any thread.
#ifndef CJIT_COMPILER_OPS_OP_REGISTRY_H_
#define CJIT_COMPILER_OPS_OP_REGISTRY_H_

#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/status/status.h"
#include "compiler/ir/graph.h"

namespace cjit {

enum class OpCategory {
  kElementwise,   // one output element from the same-index input elements (with broadcasting)
  kReduction,     // reduces axes (ReduceX, ArgMax, Softmax-like normalizations)
  kDataMovement,  // reshape/transpose/slice/concat/gather...: moves elements, no arithmetic
  kContraction,   // MatMul, Gemm, Conv, ConvTranspose: library calls
  kPooling,
  kNormalization,
  kShape,         // produces shape metadata (Shape, Size) or constants (ConstantOfShape, Range)
  kRecurrent,     // LSTM, GRU, RNN
  kControlFlow,   // If, Loop
  kOther,
};

// Automatic mixed precision class (TensorFlow's lists; compiler/passes/auto_mixed_precision.h): allow -
// numerically safe and faster in 16 bits; infer - safe, worth it next to allow ops; deny - needs float32;
// clear - no numerics of its own (data movement, Relu, Max/Min).
enum class AmpClass { kAllow, kInfer, kDeny, kClear };

struct InferInput {
  DType dtype = DType::kInvalid;
  Shape shape;
  const Tensor* value = nullptr;  // known value, or null
  bool present = true;            // false for an absent optional input
  // A sequence or optional (Value::kind): `dtype` is its elements', `shape` theirs where known.
  ValueKind kind = ValueKind::kTensor;
};

// What shape inference knows of `v`: its dtype and shape, and its value if constant; absent if null.
inline InferInput InferInputOf(const Value* v) {
  if (v == nullptr) return InferInput{DType::kInvalid, Shape{}, nullptr, false};
  return InferInput{v->dtype, v->shape, v->constant.get(), true, v->kind};
}

struct InferOutput {
  DType dtype = DType::kInvalid;
  Shape shape;
  ValueKind kind = ValueKind::kTensor;
};

using InferFn = std::function<absl::Status(const Node& node, std::span<const InferInput> inputs,
                                           std::vector<InferOutput>& outputs)>;

// The domain of clusterjit's internal operators (graph rewrites create them; see compiler/passes/layout.h).
inline constexpr absl::string_view kInternalDomain = "com.clusterjit";

// How the code generators may fuse an elementwise op (compiler/codegen/fusion_plan.h IsFusibleElementwise):
// which dtypes its inputs and output take inside a fused kernel.
enum class FusionClass {
  kNone,
  kFloat,     // float32 / float16 / bfloat16 in and out
  kCompare,   // float in (Equal: also bool), bool out
  kLogic,     // bool in and out
  kSelect,    // Where: a bool condition, values of the output's type
  kCast,      // float or bool in (or int32 / int64 to float32 or bool), float or bool out
  kIdentity,  // the output's type in
  kQuantize,  // QuantizeLinear (float in, uint8 / int8 out) / DequantizeLinear (uint8 / int8 in, float32 out), per
              // tensor: scale and zero point scalar constants
};

// Ops that move no element values.
enum class ViewKind {
  kNone,
  kReshape,   // Reshape, Flatten, Squeeze, Unsqueeze: the same elements, other dims (a buffer alias)
  kIdentity,  // Identity: the same tensor (a buffer alias)
  kStrided,   // Transpose, Slice, Expand: a strided view a consumer kernel reads in place
};

// What passes, kernels, layout, AMP and GPU placement ask about an op beyond its shape function: set in one
// place, op_traits.cc, and read through OpDef (FindOp) or TraitsOf.
struct OpTraits {
  FusionClass fusion = FusionClass::kNone;
  // A reduction over the innermost axes the emitters lower as one row kernel (ReduceSum .. ReduceL2 and
  // Softmax / LogSoftmax); `reduce` says it is one of the ReduceX ops (not a normalization).
  bool row_reduction = false;
  bool reduce = false;
  // Channels-last regions (compiler/passes/layout.h) pass through it unchanged: elementwise on one tensor
  // (unary), or on two with numpy broadcasting (binary; the other operand is permuted).
  bool layout_unary = false;
  bool layout_binary = false;
  // y[i] depends on x[i] only, same dtype and dims: the executor may write y into x's buffer.
  bool in_place = false;
  ViewKind view = ViewKind::kNone;
  // Draws random numbers: never constant-folded, never merged with a same-looking node, never clustered.
  bool random = false;
};

struct OpDef {
  std::string name;
  OpCategory category = OpCategory::kOther;
  bool clusterable = false;
  AmpClass amp = AmpClass::kInfer;
  int min_inputs = 0;
  int max_inputs = 1 << 20;
  InferFn infer;
  bool internal = false;  // in kInternalDomain only (e.g. NhwcConv), not in the ONNX domain
  // Reads or makes sequence / optional values (ValueKind): the sequence and optional ops, Identity and the
  // control-flow ops. InferNode rejects a non-tensor input to any other op; its shape function checks kinds
  // per input and sets InferOutput::kind.
  bool non_tensor_values = false;
  // Takes or makes tensor(string) values (Cast, CastLike, Identity, the string ops; set in op_traits.cc):
  // InferNode rejects a string input to any other op (kernels of other ops copy elements as bytes).
  bool string_values = false;
  OpTraits traits;        // assigned by op_traits.cc
};

// The op, or null when clusterjit does not support it. `domain` "" and "ai.onnx" are the default domain;
// kInternalDomain holds the internal operators.
const OpDef* FindOp(absl::string_view domain, absl::string_view op_type);
std::vector<std::string> SupportedOps();
// The traits of an op (all false / kNone for an unsupported one).
const OpTraits& TraitsOf(absl::string_view domain, absl::string_view op_type);
inline const OpTraits& TraitsOf(const Node& n) { return TraitsOf(n.domain, n.op_type); }
// The default-domain ops whose traits satisfy `pred` (kernel registration by trait).
std::vector<std::string> OpsWhere(const std::function<bool(const OpTraits&)>& pred);

// Runs the op's shape function after checking the input count. Outputs are resized to node.outputs.
absl::Status InferNode(const Node& node, std::span<const InferInput> inputs,
                       std::vector<InferOutput>& outputs);
// InferNode's shape function and allocation check alone, for a node whose inputs passed InferNode's count
// and type checks with the same dtypes before (only dims changed: CpuExecutable::InstantiateDims). `def`
// is FindOp(node.domain, node.op_type).
absl::Status InferNodeDims(const OpDef& def, const Node& node, std::span<const InferInput> inputs,
                           std::vector<InferOutput>& outputs);

// Registration, called once from the table's initializer by the shape_fns_*.cc files.
void RegisterOp(OpDef def);
void RegisterMathOps();
void RegisterNnOps();
void RegisterTensorOps();
void RegisterMiscOps();
void RegisterSequenceOps();
void RegisterStringOps();
// The AMP classes beyond the registrations' and every OpTraits (op_traits.cc), once after them.
void AssignOpTraits(std::map<std::string, OpDef, std::less<>>& table);

// ---- helpers shared by shape functions ----
// Numpy-style multidirectional broadcasting (ONNX Broadcasting.md).
absl::StatusOr<Shape> BroadcastShapes(const Node& node, const std::vector<Shape>& shapes);
// A shape from dims held in a tensor (ConstantOfShape's shape, Expand's shape, Resize's sizes...): an
// InvalidArgumentError naming the node and `what` when a dim is negative.
absl::StatusOr<Shape> ShapeFromValues(const Node& node, const std::vector<int64_t>& dims, absl::string_view what);
// Elements ONNX Slice takes from a dim of size `dim` with this start, end and (non-zero) step; exact for
// every int64 input (INT64_MIN steps included).
int64_t SliceCount(int64_t dim, int64_t start, int64_t end, int64_t step);
// Normalizes a possibly negative axis against rank; error names the node.
absl::StatusOr<int> NormalizeAxis(const Node& node, int64_t axis, int rank);
absl::Status NodeError(const Node& node, absl::string_view what);

// Convolution / pooling geometry per spatial dim (ONNX Conv, ConvTranspose, MaxPool, AveragePool):
// resolves auto_pad, pads, strides, dilations and ceil_mode into begin/end pads and output sizes.
struct WindowGeometry {
  std::vector<int64_t> kernel, strides, dilations, pad_begin, pad_end, out;
};
// `in` and `kernel` are spatial sizes. `transposed` selects ConvTranspose's formula (output_padding,
// output_shape). Errors name the node.
absl::StatusOr<WindowGeometry> ComputeWindowGeometry(const Node& node, const std::vector<int64_t>& in,
                                                     const std::vector<int64_t>& kernel,
                                                     bool transposed, bool ceil_mode);
// Reads an int64 list given either as an attribute (older opsets) or as input `input_index` (newer).
// Returns false in *known when the input exists but its value is not known yet.
absl::StatusOr<std::vector<int64_t>> AttrOrInputInts(const Node& node, std::span<const InferInput> in,
                                                     const std::string& attr, int input_index,
                                                     bool* present, bool* known);

}  // namespace cjit

#endif  // CJIT_COMPILER_OPS_OP_REGISTRY_H_
