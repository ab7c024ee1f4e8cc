// Fusion plan of one cluster (a specialized subgraph with fully known shapes): which ops become fused loop
// kernels and which run as library steps, in an order that respects every dependency.
//
// A fused kernel is a maximal group of elementwise ops (float32/float16/bfloat16 values, computed in float32;
// supported by the elemental emitter) whose
// outputs all have the same dims — its iteration space — possibly with reductions over the last axis and
// the elementwise ops on their per-row results (a "row kernel", see FusedKernel::row_reduction). It reads each of its
// inputs once per element (inputs may broadcast to the iteration space) and writes each value that is read outside the
// kernel once; values used only inside stay in registers. Groups are formed by contracting producer->consumer edges
// through GraphCycles, so no group depends on itself through a library step. Every other op of the cluster (MatMul,
// Conv, reductions, data movement for now) is a library step run by the runtime.
//
// No LLVM here: the plan is target-independent; cpu_compiler.cc (and later the NVPTX compiler) lower it.
#ifndef CJIT_COMPILER_CODEGEN_FUSION_PLAN_H_
#define CJIT_COMPILER_CODEGEN_FUSION_PLAN_H_

#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"

namespace cjit {

struct FusedKernel {
  std::string name;                    // symbol name in the generated module
  // Elementwise kernels iterate over `shape`. Row kernels (row_reduction) iterate over rows of `shape`
  // (all dims but the last) and, per row, run one pass over the last dim per reduction (ReduceX over the
  // last axis with keepdims, Softmax/LogSoftmax over the last axis take one/two passes), then a final pass
  // writing the outputs: a LayerNorm or Softmax chain is one kernel. Values in a row kernel have `shape`
  // ("full") or `shape` with the last dim 1 ("row values", computed once per row).
  bool row_reduction = false;
  Dims shape;                          // iteration space
  std::vector<const Node*> nodes;      // in topological order
  std::vector<const Value*> inputs;    // values read from outside the kernel (non-scalar)
  std::vector<const Value*> outputs;   // values the kernel writes
  // How each input is read: from the buffer of input_sources[i], at element input_offsets[i], with
  // input_strides[i] (element strides over inputs[i]'s dims). View ops between a source and the kernel —
  // Transpose, Slice with constant bounds, Expand, Identity, and Reshape/Flatten/Squeeze/Unsqueeze of a
  // dense view — are absorbed this way: they move no data, and do not run when nothing else needs them.
  std::vector<const Value*> input_sources;
  std::vector<int64_t> input_offsets;
  std::vector<std::vector<int64_t>> input_strides;
  // float16/bfloat16 values inside the kernel stay float32 between ops (XLA's --xla_allow_excess_precision;
  // FusionPlanOptions::excess_precision); stores and explicit Casts still round.
  bool excess_precision = false;
};

// An elementwise op applied by a library call to its result (a oneDNN post-op), in order.
struct PostOp {
  // kBiasLastDim: a constant vector over the last dim added to a matrix product (GEMM epilogue).
  // kSwish: x * sigmoid(x) (SiLU).
  enum class Kind { kRelu, kClip, kSigmoid, kTanh, kHardSwish, kLinear, kAddChannel, kBiasLastDim, kLeakyRelu, kSwish };
  Kind kind = Kind::kRelu;
  float a = 0, b = 0;              // kClip: [a, b]; kLinear: a * x + b; kLeakyRelu: alpha = a
  const Value* tensor = nullptr;   // kAddChannel / kBiasLastDim: constant of one value per channel / column
};

struct PlanStep {
  enum class Kind { kFused, kLibrary };
  Kind kind = Kind::kLibrary;
  int kernel = -1;            // index into FusionPlan::kernels for kFused
  const Node* node = nullptr;  // the op for kLibrary
  // For a float32 Conv library step (or a bfloat16 one under excess precision, FusionPlanOptions):
  // elementwise ops after it that run as oneDNN post-ops; for a MatMul /
  // Gemm step (FusionPlanOptions::gemm_epilogues): a bias over the last dim and/or Relu as a GEMM
  // epilogue. The nodes that computed them (`absorbed`, in order) are skipped; `output` is then the value
  // the step produces (the last absorbed op's).
  std::vector<PostOp> post_ops;
  std::vector<const Node*> absorbed;
  const Value* output = nullptr;
};

struct FusionPlan {
  std::vector<FusedKernel> kernels;
  std::vector<PlanStep> steps;  // execution order
};

// float32, float16 or bfloat16: the element types fused kernels load and store (they compute in float32).
bool IsFloatStorage(DType dtype);
// IsFloatStorage or bool (stored as one byte, 0 or 1; 0.0 / 1.0 inside a kernel).
bool IsKernelStorage(DType dtype);
// uint8 / int8: loaded by DequantizeLinear and stored by QuantizeLinear only (their values as float32 inside
// a kernel).
bool IsByteStorage(DType dtype);
// True if the elemental emitter can generate `node` (op and dtypes): float ops on float32/float16/bfloat16
// values; comparisons (Equal, Less, LessOrEqual, Greater, GreaterOrEqual of floats; Equal of bools),
// IsNaN, IsInf, Not/And/Or/Xor, and Where(bool, X, Y) — bool values are 0.0 / 1.0 inside a kernel; Cast
// between float types and bool, and from int32/int64 to those (an integer is read as its float32 value);
// QuantizeLinear / DequantizeLinear per tensor (uint8 / int8 with one float32 scale and zero point).
bool IsFusibleElementwise(const Node& node);
// The same decision with its reason when negative (as XLA's FusionDecision), for the VLOG(2) log of
// BuildFusionPlan (--vmodule=fusion_plan=2).
struct FusionDecision {
  bool ok = false;
  std::string reason;
};
FusionDecision FusibleElementwise(const Node& node);
// True for reductions a row kernel can fuse: float32 ReduceSum/Mean/Max/Min/SumSquare/L2 over the last
// axis with keepdims=1, Softmax/LogSoftmax over the last axis.
bool IsRowReduction(const Node& node);

// Scalar constants (float32, float16, bfloat16; uint8 / int8 zero points) are kernel parameters rather than
// inputs.
bool IsScalarConstant(const Value* v);
// The value of a scalar constant (IsScalarConstant) as float32 (16-bit and byte constants widened exactly).
float ScalarConstantValue(const Value* v);

struct FusionPlanOptions {
  // Absorb elementwise ops after a float32 Conv (a bfloat16 one too when excess_precision) into the Conv
  // step as PostOps (oneDNN, on the CPU). The GPU runtime turns this off: its Conv library (cuDNN) takes
  // no such chains, so they stay fused kernels.
  bool conv_post_ops = true;
  // Absorb Add(constant vector over the last dim) and/or Relu after a float32 MatMul/Gemm into the step as
  // a GEMM epilogue (cuBLASLt; the GPU runtime turns this on — the CPU MatMul kernel takes no post-ops).
  bool gemm_epilogues = false;
  // At most this many ops per fused kernel (compile time stays bounded on huge clusters).
  int max_kernel_ops = 128;
  // Sets FusedKernel::excess_precision on every kernel (--allow_excess_precision).
  bool excess_precision = true;
  // A group of one op that reads every input as it is (no view absorbed) becomes a library step of that
  // op instead of a fused kernel: generated code would do what the op's library kernel does (one pass,
  // the same loads and stores), so only groups that fuse need code generation. The CPU sets this (its
  // fallback kernels run every op); a plan with no kernels left needs no LLVM at all.
  bool single_op_groups_as_library = false;
};

absl::StatusOr<FusionPlan> BuildFusionPlan(const Graph& body, const FusionPlanOptions& options = {});

// The plan of `body` derived from `like`, the plan BuildFusionPlan made (with the same options) for
// `like_body`, a body of the same structure: another input signature of one cluster, with the same nodes
// in the same order, wired the same, with the same dtypes and ranks. Nodes and values are mapped by
// position; the grouping, the step order and the post-ops are kept; every kernel's iteration space is taken
// from `body`'s dims and checked against each member (an elementwise op's output has the iteration space,
// or the row values' shape in a row kernel; a reduction's input has it), and every kernel input's view
// (source, offset, strides) is resolved again and must read the same source. Per new signature this
// replaces the grouping analysis (GraphCycles contraction, union-find, ordering), the bulk of planning.
// NotFoundError naming the first difference when the bodies differ or a check fails (dims that broke a
// group, a view that now needs its op to run): then plan with BuildFusionPlan. The result reads `body`.
absl::StatusOr<FusionPlan> RebindFusionPlan(const FusionPlan& like, const Graph& like_body, const Graph& body);

// The dims of a value of a body: the value's (null when not fully known), or those of another signature
// (RederiveKernels). `scratch` may hold the result.
using ValueDimsFn = std::function<const Dims*(const Value*, Dims* scratch)>;

// A fused kernel's dims-dependent part: its iteration space and how it reads each input.
struct KernelDims {
  Dims shape;
  std::vector<int64_t> input_offsets;
  std::vector<std::vector<int64_t>> input_strides;
};

// Every kernel of `plan` (a plan of a body whose nodes are `body_nodes`) at the dims `dims_of` gives for the
// body's values — the same body run at another input signature without a graph of its own (a dynamic-shape
// plan, runtime/executable.h InstantiateDims). The checks are RebindFusionPlan's: each member has the
// kernel's iteration space (or the row values' shape), and each input's view reads the same source.
// NotFoundError naming the first failed check.
// Kernels whose `skip` entry is true (optional) are left out (empty KernelDims).
absl::StatusOr<std::vector<KernelDims>> RederiveKernels(const FusionPlan& plan,
                                                        const std::unordered_set<const Node*>& body_nodes,
                                                        const ValueDimsFn& dims_of,
                                                        const std::vector<bool>* skip = nullptr);

// Human-readable plan (for --dump_to): each step in order; a fused kernel with its kind, iteration space,
// ops, inputs (source, offset, strides) and outputs; a library step with its op, node and absorbed post-ops.
std::string FusionPlanToString(const FusionPlan& plan);

}  // namespace cjit

#endif  // CJIT_COMPILER_CODEGEN_FUSION_PLAN_H_
