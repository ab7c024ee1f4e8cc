// Structural checks of a Graph: every node input and graph output is defined (a graph input, constant,
// capture, or the output of a node of this graph), each value has at most one producer, output values
// point back at their producer, and there is no cycle. Returns InvalidArgumentError naming the first fault.
#ifndef CJIT_COMPILER_IR_VERIFIER_H_
#define CJIT_COMPILER_IR_VERIFIER_H_

#include "absl/status/status.h"
#include "compiler/ir/graph.h"

namespace cjit {

absl::Status VerifyGraph(const Graph& graph);

}  // namespace cjit

#endif  // CJIT_COMPILER_IR_VERIFIER_H_
