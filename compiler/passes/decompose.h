// Rewrites LayerNormalization into the function body that defines it in the ONNX specification
// (onnx/defs/nn/defs.cc, LayerNormalization-17, stash_type = float32), so that auto-clustering fuses the
// normalization into one row-reduction kernel with its neighbours (the residual Add before it, the next
// op's elementwise prologue) instead of running it as a library step between two kernels.
//
//   Mean = ReduceMean(X, axes = [axis .. rank-1], keepdims = 1)
//   D = Sub(X, Mean)    Var = ReduceMean(Pow(D, 2))    StdDev = Sqrt(Add(Var, epsilon))
//   Y = Add(Mul(Div(D, StdDev), Scale), B)
//
// Only float32 X with known rank, stash_type 1, and no reader of the optional Mean / InvStdDev outputs.
// Run on a specialized graph when clustering is on (the op-by-op path keeps the single kernel).
//
// Before:  %y = LayerNormalization(%x, %g, %b) {axis=-1, epsilon=1e-12}      with %x: f32[1,128,256]
// After:   %m = ReduceMean(%x) {axes=[2]} ... %y = Add(Mul(Div(Sub(%x, %m), Sqrt(...)), %g), %b)
#ifndef CJIT_COMPILER_PASSES_DECOMPOSE_H_
#define CJIT_COMPILER_PASSES_DECOMPOSE_H_

#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"

namespace cjit {

// Returns whether any LayerNormalization was rewritten.
absl::StatusOr<bool> DecomposeLayerNormalization(Graph& graph);

}  // namespace cjit

#endif  // CJIT_COMPILER_PASSES_DECOMPOSE_H_
