// CPU fallback kernels: the op-by-op path of clusterjit. One kernel per ONNX operator, looked up by
// op_type. The executor infers output shapes (compiler/ops shape functions) and hands each kernel a
// KernelContext with its inputs and the inferred outputs; a kernel allocates each output with Alloc()
// (inferred dims) or Alloc(i, dtype, dims) when the dims depend on data.
//
// Errors from kernels are absl::Status naming the node (bad attribute values, out-of-range indices).
// Kernels are stateless functions and may run concurrently; each uses at most ctx.threads threads.
#ifndef CJIT_RUNTIME_CPU_KERNEL_H_
#define CJIT_RUNTIME_CPU_KERNEL_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/cpu_isa.h"
#include "compiler/ir/graph.h"
#include "compiler/ops/op_registry.h"

namespace cjit {

struct PostOp;  // compiler/codegen/fusion_plan.h

// Runs a subgraph (If branch, Loop body) with positional inputs and named captured values.
using SubgraphRunner =
    std::function<absl::StatusOr<std::vector<Tensor>>(const Graph& graph, const std::vector<Tensor>& inputs,
                                                      const std::vector<std::pair<std::string, Tensor>>& captures)>;

struct KernelContext {
  const Node* node = nullptr;
  std::vector<const Tensor*> inputs;     // null = absent optional input
  std::vector<const Tensor*> implicit;   // node->implicit_inputs, same order
  std::vector<Tensor> outputs;           // filled by the kernel
  // Output dtypes/shapes from the shape function: `inferred`, or the executor's precomputed ones when
  // `static_inferred` is set (no per-step copy). Read them through infer().
  std::vector<InferOutput> inferred;
  const std::vector<InferOutput>* static_inferred = nullptr;
  int threads = 1;
  const SubgraphRunner* run_subgraph = nullptr;
  const std::vector<bool>* input_is_constant = nullptr;  // per input: a graph constant (weights may be cached)
  // Input 0's value is read by no later node (the executor frees it after this one): a kernel may reuse
  // storage that input holds exclusively (a sequence whose items no other value shares: SequenceInsert).
  bool input0_dies = false;
  // Elementwise ops to apply to output 0 inside the library call (Conv: oneDNN post-ops), or null.
  const std::vector<PostOp>* post_ops = nullptr;
  // Set by kernels that call a library: the implementation that ran ("oneDNN jit:avx512_core", "Eigen"),
  // for the trace (runtime/profiler.h). Filled only when `want_impl` is set.
  bool want_impl = false;
  std::string impl;
  // The algorithm to run (an id from the op's AlgorithmsFn, chosen by the autotuner, runtime/autotune.h),
  // or null / empty: the kernel's default choice. A kernel given an id it does not offer for these inputs
  // returns an error (the autotuner validates ids before use).
  const std::string* algorithm = nullptr;
  // Set by kernels that know it: bytes of scratch memory the call used (oneDNN scratchpad, im2col
  // matrix); the autotuner breaks timing ties toward the smaller.
  int64_t scratch_bytes = 0;

  int num_inputs() const { return static_cast<int>(inputs.size()); }
  const std::vector<InferOutput>& infer() const { return static_inferred ? *static_inferred : inferred; }
  bool is_constant(int i) const {
    return input_is_constant != nullptr && i < static_cast<int>(input_is_constant->size()) && (*input_is_constant)[i];
  }
  bool has(int i) const { return i < num_inputs() && inputs[i] != nullptr; }
  // Input i; IndexError (an InvalidArgument error naming the node) when the node does not have it.
  const Tensor& in(int i) const {
    if (!has(i)) ThrowMissingInput(i);
    return *inputs[i];
  }
  [[noreturn]] void ThrowMissingInput(int i) const;
  bool wants(int i) const { return i < static_cast<int>(outputs.size()) && node->outputs[i] != nullptr; }
  // Allocates output i with its inferred dtype and (fully known) dims; a preset output of that dtype and
  // dims (an in-place destination) is returned as is.
  Tensor& Alloc(int i);
  Tensor& Alloc(int i, DType dtype, Dims dims);
  absl::Status Error(absl::string_view what) const { return NodeError(*node, what); }
};

using KernelFn = std::function<absl::Status(KernelContext&)>;

// Calls `fn(ctx)`. An exception escaping the kernel (TensorError for an allocation that cannot be made,
// std::bad_alloc, a oneDNN error) becomes a ResourceExhausted/Internal status naming the node: no
// exception leaves a kernel invocation.
absl::Status RunKernel(const KernelFn& fn, KernelContext& ctx);

// After a kernel ran on `ctx`: its error with the node named (unless the message names it already), or an
// InternalError if an output the caller stores (`out_slots[k] >= 0`) was not produced.
absl::Status CheckKernelResult(const KernelContext& ctx, const absl::Status& status, const std::vector<int>& out_slots);

class TraceArgs;
// The trace args of one executed node (runtime/profiler.h): op_type, node, cluster (>= 0), inputs,
// outputs, bytes, impl (when not empty).
void AddNodeTraceArgs(TraceArgs& args, const Node& node, const std::vector<const Tensor*>& inputs,
                      const std::vector<Tensor>& outputs, int cluster_id, const std::string& impl);

void RegisterKernel(const std::string& op_type, KernelFn fn);

// Autotuning candidates (runtime/autotune.h). For a node with its inputs (a KernelContext without
// outputs), the algorithms the kernel can run, in the library's preference order: stable ids such as
// "onednn:brgconv:avx512_core" or "own:im2col_sgemm" (never a list index), each usable as
// KernelContext::algorithm. Empty: nothing to choose for these inputs.
struct AlgorithmCandidate {
  std::string id;
  bool deterministic = true;  // same bits on every run for the same inputs and thread count
};
using AlgorithmsFn = std::function<std::vector<AlgorithmCandidate>(const KernelContext&)>;
void RegisterAlgorithms(const std::string& op_type, AlgorithmsFn fn);
const AlgorithmsFn* FindAlgorithms(const std::string& op_type);

// For ops whose kernel computes in float32 only (the CPU has no 16-bit float arithmetic; ORT's
// InsertCastTransformer does the same on the graph): float16 / bfloat16 inputs are widened exactly to
// float32, `fn` runs, and float outputs whose inferred dtype is 16-bit are rounded back to nearest even
// (compiler/ir/float16.h). Constant inputs are widened once per buffer and cached, so kernels' own weight
// caches keep hitting. Other dtypes go to `fn` unchanged. The kernel must not take post-ops for 16-bit
// outputs (the fusion plan fuses epilogues into float32 convolutions only).
absl::Status RunInFloat32(const KernelFn& fn, KernelContext& ctx);
// Float32 input i rounded to bfloat16 (nearest even); constants converted once per buffer and cached.
Tensor ToBfloat16(const KernelContext& ctx, int i);
// A tensor derived from the constant `t` by `make` (a conversion, a split into bfloat16 parts), computed
// once per source buffer and `kind` and dropped once that buffer is freed (a later constant at the same
// address is derived again). Thread-safe (`make` runs under the cache's lock).
Tensor DerivedConstant(const Tensor& t, const std::string& kind, const std::function<Tensor(const Tensor&)>& make);
// Whether this CPU has AVX-512 BF16 dot products: bfloat16 convolutions and products (and the reduced
// float32 precisions) run in oneDNN's bfloat16 kernels only then; elsewhere they widen to float32.
bool CpuHasBfloat16Math();
// Caps oneDNN's instruction sets at `isa` (dnnl::set_max_cpu_isa; compiler/ir/cpu_isa.h's levels). oneDNN
// takes it only before its first primitive in the process: later, a warning is logged and oneDNN keeps its
// own.
void CapLibraryCpuIsa(CpuIsa isa);
// Whether this CPU has AMX-BF16 tile products (16x float32's throughput): the reduced float32 precision
// "high" (bfloat16x3, three bfloat16 products) runs only there; elsewhere it costs more than float32.
bool CpuHasAmxBfloat16();
// The largest |v| of a float32 or bfloat16 tensor, or +inf when it holds a NaN or an infinity (any other
// dtype: +inf). A convolution with post-ops bounds its result with it (operands' magnitudes times the
// reduction length) and applies the post-ops in exact ONNX semantics where that bound is not finite.
float MaxAbsOrInf(const Tensor& t);
const KernelFn* FindKernel(const std::string& op_type);
// For registration functions that wrap an already registered kernel (no lazy initialization).
const KernelFn* FindKernelDuringRegistration(const std::string& op_type);

// Runs one node outside an executor (constant folding, tests): infers shapes from the values, runs the
// kernel, returns the outputs.
// Shape-function inputs from actual values (null = absent optional input).
std::vector<InferInput> InferInputsFromValues(const std::vector<const Tensor*>& inputs);

// When every output of `node` has a known dtype and shape in the graph, those are used and the shape
// function is skipped. `input_is_constant` (optional) marks graph constants (kernels may cache on them).
absl::StatusOr<std::vector<Tensor>> EvaluateNode(const Node& node, const std::vector<const Tensor*>& inputs,
                                                 int threads, const SubgraphRunner* runner = nullptr,
                                                 const std::vector<bool>* input_is_constant = nullptr,
                                                 const std::vector<PostOp>* post_ops = nullptr,
                                                 std::vector<Tensor>* preset_outputs = nullptr,
                                                 std::string* impl = nullptr,
                                                 const std::vector<InferOutput>* static_inferred = nullptr,
                                                 const std::string* algorithm = nullptr,
                                                 int64_t* scratch_bytes = nullptr);

// Called once by the registry; each kernels_*.cc file registers its kernels.
// float32 Add/Sub/Mul/Div/Max/Min with numpy broadcasting (out has the broadcast dims, allocated), the
// element functions and loops of those ops' registered kernels: what a compiled cluster runs for a lone
// binary op (runtime/executable.cc) without the per-call kernel dispatch. NaN propagates through Max/Min
// (ONNX Max/Min). ParseBinaryArithmetic: false for any other op type.
enum class BinaryArithmetic { kAdd, kSub, kMul, kDiv, kMax, kMin };
bool ParseBinaryArithmetic(const std::string& op_type, BinaryArithmetic* op);
void BinaryArithmeticF32(BinaryArithmetic op, const Tensor& a, const Tensor& b, Tensor& out, int threads);

void RegisterElementwiseKernels();
void RegisterReduceKernels();
void RegisterLinalgKernels();
void RegisterConvKernels();
void RegisterPoolKernels();
void RegisterNormKernels();
void RegisterResizeKernels();
void RegisterMovementKernels();
void RegisterRecurrentKernels();
void RegisterControlFlowKernels();
void RegisterMiscKernels();
void RegisterQdqKernels();
void RegisterSignalKernels();
void RegisterRandomKernels();
void RegisterQuantKernels();
void RegisterMatMulNBitsKernel();
void RegisterSequenceKernels();
void RegisterStringKernels();
// The node's implicit inputs as the (capture name, value) pairs a SubgraphRunner binds (If, Loop, Scan,
// SequenceMap).
std::vector<std::pair<std::string, Tensor>> SubgraphCaptures(const KernelContext& ctx);
// Cast / CastLike of input 0 to `to` where exactly one side is tensor(string) (kernels_string.cc): numbers
// as their shortest round-trip text, text parsed as ONNX Cast specifies (errors name the element).
absl::Status CastStrings(KernelContext& ctx, DType to);

}  // namespace cjit

#endif  // CJIT_RUNTIME_CPU_KERNEL_H_
