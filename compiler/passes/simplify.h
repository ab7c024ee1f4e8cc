// Graph simplifications run before clustering (whether or not clustering is on, so the fallback path
// gains too) — the rewrites ONNX Runtime's basic and extended levels do. Each is its own pass with one
// entry point returning whether it changed the graph. RemoveNoOps and CSE expect a specialized graph (known
// shapes); FoldIntoConv needs none.
//
//  * RemoveNoOps: Identity; inference Dropout; Cast to the same dtype; Reshape/Flatten/Squeeze/Unsqueeze to
//    the same dims; Transpose with the identity permutation; Transpose pairs whose permutations cancel;
//    Reshape-of-Reshape (-> one Reshape).
//  * FoldIntoConv: BatchNormalization (inference), and Mul / Add by per-output-channel constants, folded
//    into a preceding Conv with constant weights (W' = W*s, B' = B*s + t); only when the Conv output has
//    no other reader.
//  * EliminateCommonSubexpressions: nodes with the same op, attributes and inputs are merged.
//  * DivisionByPowerOfTwoToMultiplication: float32 Div by a scalar constant 2^k -> Mul by 2^-k (the same
//    result for every input, with no division: attention's Div by sqrt(head dim) = 8).
//  * FuseGroupNormalization (before specialization): GroupNorm as torch.onnx exports it up to opset 17 —
//    Reshape(X, [0, G, -1]), InstanceNormalization with per-group scale and bias, Reshape back to Shape(X)
//    — as one com.clusterjit.FlatGroupNorm(X, scale, bias, [0, G, -1]). Structural (no dims needed), so it
//    is done once per Session and specialization replay never sees it; the channels-last pass moves it
//    (NhwcGroupNorm) where its groups are whole channels: the reshapes had ended every channels-last region.
//
// Before (FoldIntoConv):  %c = Conv(%x, %W, %B)  %y = BatchNormalization(%c, %g, %b, %m, %v)
// After:                  %y = Conv(%x, %W', %B')
#ifndef CJIT_COMPILER_PASSES_SIMPLIFY_H_
#define CJIT_COMPILER_PASSES_SIMPLIFY_H_

#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"

namespace cjit {

// Reshape, Flatten, Squeeze or Unsqueeze (OpTraits::view kReshape, compiler/ops/op_traits.cc).
bool IsReshapeLike(const std::string& op_type);
// RemoveNoOps' test for a reshape-like node `n`: its output 0 has input 0's dtype and concrete dims. The
// decision depends on dims, so specialization replay checks it both ways (compiler/passes/specialization_replay.h).
bool IsIdentityReshape(const Node& n);

// Removes nodes that no graph output depends on. Returns whether any was removed.
bool RemoveDeadNodes(Graph& graph);

absl::StatusOr<bool> RemoveNoOps(Graph& graph);
absl::StatusOr<bool> FoldIntoConv(Graph& graph);
absl::StatusOr<bool> EliminateCommonSubexpressions(Graph& graph);
absl::StatusOr<bool> DivisionByPowerOfTwoToMultiplication(Graph& graph);
absl::StatusOr<bool> FuseGroupNormalization(Graph& graph);
// FuseTransposeIntoMatMul (CPU, after SimplifyGraph): MatMul(A, Transpose(B)) with a float32 Transpose that
// swaps the last two dims and is read by nothing else -> com.clusterjit.FusedMatMul(A, B, transB=1) (and
// transA the same way): the kernel reads the operand transposed, as ONNX Runtime's FusedMatMul, instead of
// copying it first (attention's Q x K^T: a decoder step's transpose of its whole key cache). Structural
// (no dims), so specialization replay keeps it. MatMuls with a reduced --matmul_precision stay.
absl::StatusOr<bool> FuseTransposeIntoMatMul(Graph& graph);

// Runs the four passes to a fixed point, verifying the graph after each.
absl::Status SimplifyGraph(Graph& graph);

// The shape-independent part, run once on the loaded (unspecialized) graph so that no signature repeats
// it: FoldIntoConv folds BatchNormalization into Conv with constant operands (needing no shapes; its
// Mul/Add folds need known dims and still happen per signature), and FuseGroupNormalization. Weights are
// then folded once per Session rather than once per signature, and per-signature clones share the folded
// constants.
absl::Status SimplifyBeforeSpecialization(Graph& graph);

}  // namespace cjit

#endif  // CJIT_COMPILER_PASSES_SIMPLIFY_H_
