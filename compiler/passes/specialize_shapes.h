// Shape specialization and constant folding for one concrete input signature.
//
// Given a graph and the concrete dims of every graph input, this pass (1) sets the input shapes,
// (2) walks the graph in topological order inferring every value's dtype and shape with the op table's
// shape functions, (3) folds every node whose inputs are all constant (Shape/Size of a fully known shape
// fold directly) by evaluating it with `evaluate` — so the Shape -> Gather -> Concat -> Reshape chains of
// exported models disappear — (4) inlines an If whose condition is constant, and (5) removes nodes that no
// graph output depends on. Nodes with random outputs are never folded.
//
// Before:  %s = Shape(%x)   %i = Gather(%s, %c1)   %y = Reshape(%x, %t)  ...   with x: f32[1,3,?]
// After, for x: f32[1,3,48]:  %s, %i folded to constants; %y: f32[...] with known dims.
//
// Errors: shape-function errors (incompatible shapes, bad attributes) naming the node; evaluation errors.
#ifndef CJIT_COMPILER_PASSES_SPECIALIZE_SHAPES_H_
#define CJIT_COMPILER_PASSES_SPECIALIZE_SHAPES_H_

#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "compiler/ir/graph.h"

namespace cjit {

using ConstantEvaluator =
    std::function<absl::StatusOr<std::vector<Tensor>>(const Node& node, const std::vector<const Tensor*>& inputs)>;

struct SpecializeOptions {
  // Do not fold a node whose outputs would exceed this many elements in total (keeps memory bounded).
  int64_t max_folded_elements = int64_t{1} << 24;
};

absl::Status SpecializeShapes(Graph& graph, const std::vector<Dims>& input_dims, const ConstantEvaluator& evaluate,
                              const SpecializeOptions& options = {});

// The shape a signature gives graph input `input` from its value's dims: those dims for a tensor; unknown for
// a sequence or optional, whose elements are data (not part of the signature). Every specialization path
// (SpecializeShapes, ReplaySpecialization) sets input shapes through it.
Shape SignatureInputShape(const Value& input, const Dims& dims);

// For each graph input, whether its *value* can decide a shape or the control flow of the graph: true when
// some value computed from it (through any chain of nodes; Shape and Size read only its shape) reaches an
// operand that is not plain data — a Reshape/Expand/Tile/Slice/Pad/Range/ConstantOfShape/Resize shape or
// index operand, a Reduce axes operand, an If condition, a Loop trip count, a subgraph capture, or any op
// the table does not list as data-only (unknown ops count as shaping). False when it only flows as data
// (elementwise math, MatMul/Gemm/Conv operands, Gather/Scatter indices, normalizations...), e.g. the token
// id and position of a language model's decode step: specializing on such a value would make every token
// a new plan. Used to decide which scalar integer inputs are specialized by value (runtime/session.h).
std::vector<bool> InputValuesShapeTheGraph(const Graph& graph);

}  // namespace cjit

#endif  // CJIT_COMPILER_PASSES_SPECIALIZE_SHAPES_H_
