// The elemental emitter: LLVM IR for one output element of an elementwise op, given its operands' values
// for that element. Shared by every target: it contains no target-specific code; math functions that
// differ per target (exp, log, tanh, erf, pow, ...) go through the TargetMath hooks (CPU: LLVM intrinsics
// lowered to libm/vector code; NVPTX: libdevice __nv_* calls).
//
// Semantics follow the ONNX operator specification, computed in float32. Includes LLVM headers: only
// compiler/codegen/*.cc may include this file.
#ifndef CJIT_COMPILER_CODEGEN_ELEMENTAL_EMITTER_H_
#define CJIT_COMPILER_CODEGEN_ELEMENTAL_EMITTER_H_

#include <functional>
#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"
#include "llvm/IR/IRBuilder.h"

namespace cjit {

class TargetMath {
 public:
  virtual ~TargetMath() = default;
  // Unary float32 functions: name is one of exp, log, tanh, erf, sin, cos, floor, ceil, sqrt, round.
  virtual llvm::Value* Unary(llvm::IRBuilder<>& b, const char* name, llvm::Value* x) = 0;
  virtual llvm::Value* Pow(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y) = 0;
};

// Kernels compute in float32; float16/bfloat16 values are widened on load, rounded on store, and rounded
// after each op whose output is float16/bfloat16 (as the op-by-op path does). Bool values are 0.0 / 1.0
// (one byte, 0 or 1, in memory); int32/int64 inputs of a Cast load as their float32 value.
// The element type of `dtype` in memory: float, half, bfloat (as i16), i8 (bool), i32, i64.
llvm::Type* StorageType(llvm::IRBuilder<>& b, DType dtype);
// x (float32) rounded to `dtype` and widened back (identity for float32).
llvm::Value* RoundTo(llvm::IRBuilder<>& b, DType dtype, llvm::Value* x);
// Element `index` (null: element 0) of `base`, a buffer of `dtype`, as float32.
llvm::Value* LoadF32(llvm::IRBuilder<>& b, DType dtype, llvm::Value* base, llvm::Value* index);
// Stores float32 `value` rounded to `dtype` at element `index` (null: element 0) of `base`.
void StoreF32(llvm::IRBuilder<>& b, DType dtype, llvm::Value* value, llvm::Value* base, llvm::Value* index);

// `operands[i]` is the float32 value of node.inputs[i] at this element (nullptr for an absent input); the
// result is float32, rounded to the output's dtype when that is float16/bfloat16 — unless
// `excess_precision` (FusedKernel::excess_precision, XLA's --xla_allow_excess_precision): then values inside
// the kernel stay float32 and only stores and explicit Casts round. Cast between float types is that
// rounding.
absl::StatusOr<llvm::Value*> EmitElemental(llvm::IRBuilder<>& b, TargetMath& math, const Node& node,
                                           const std::vector<llvm::Value*>& operands, bool excess_precision = false);

// Resolves the value of any kernel value at element j of the current pass: scalar constants (as runtime
// parameters, Pow exponents baked in), kernel inputs (through `load`), row values already computed
// (reductions, broadcast inputs), Softmax/LogSoftmax outputs from their pass statistics, and elementwise
// ops recursively through EmitElemental. Shared by the CPU and NVPTX kernel emitters.
class ValueEmitter {
 public:
  using LoadFn = std::function<llvm::Value*(size_t input_index, llvm::Value* j)>;
  using Memo = std::map<const Value*, llvm::Value*>;

  ValueEmitter(llvm::IRBuilder<>& b, TargetMath& math, const std::vector<const Value*>& inputs, LoadFn load,
               bool excess_precision = false)
      : b_(b), math_(math), inputs_(inputs), load_(std::move(load)), excess_precision_(excess_precision) {}

  absl::StatusOr<llvm::Value*> Elem(const Value* v, llvm::Value* j, Memo& memo);

  std::map<const Value*, llvm::Value*> row_vals;  // values constant along the row / loop
  std::map<const Value*, llvm::Value*> params;    // scalar constants loaded from the consts array
  std::map<const Node*, std::pair<llvm::Value*, llvm::Value*>> softmax;  // (max, sum of exp) per node
  // Softmax nodes whose exp(x - max) the sum pass stored: the loader of element j (the CPU row kernel
  // keeps them in an output buffer, so each exp is computed once per element instead of twice).
  std::map<const Node*, std::function<llvm::Value*(llvm::Value* j)>> softmax_exp;

 private:
  llvm::IRBuilder<>& b_;
  TargetMath& math_;
  const std::vector<const Value*>& inputs_;
  LoadFn load_;
  bool excess_precision_ = false;
};

// The reductions of a row kernel, in topological order: each ReduceX takes one pass, Softmax/LogSoftmax
// two (max, then sum of exp(x - max)). `reduce` emits one pass over the row on the target (CPU: a
// vectorized loop; NVPTX: lane-strided loop plus warp shuffles) and returns the row value.
enum class ReduceKind { kSum, kSumSq, kMax, kMin, kSumExp };
using ReducePass =
    std::function<absl::StatusOr<llvm::Value*>(const Value* x, ReduceKind kind, llvm::Value* offset)>;
absl::Status EmitRowReductions(llvm::IRBuilder<>& b, TargetMath& math, const std::vector<const Node*>& nodes,
                               llvm::Value* row_length, const ReducePass& reduce,
                               std::map<const Value*, llvm::Value*>& row_vals,
                               std::map<const Node*, std::pair<llvm::Value*, llvm::Value*>>& softmax);

}  // namespace cjit

#endif  // CJIT_COMPILER_CODEGEN_ELEMENTAL_EMITTER_H_
