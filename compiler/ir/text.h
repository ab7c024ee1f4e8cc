// Textual form of a Graph, for pass tests and `cjit` dumps (one line per node):
//
//   graph main(%x: f32[1,?], %n: i64[]) {
//     %w = constant f32[2] {0.5, 1}
//     %y: f32[1,?] = Mul(%x, %w)
//     %s, %t = Split(%y) {axis=1, split=[1,1]}
//     return %s, %t
//   }
//
// Attributes: ints (1), floats (0.5, 1e-5 — a '.' or exponent makes a float), strings ("x"), int/float lists
// ([1,2]). Subgraph and tensor attributes print as <graph NAME> / <tensor dims> and do not parse back.
// An absent optional input prints as `_`. Constants of more than 16 elements print as `{...}` and do not
// parse back. Parse errors name the line and column.
#ifndef CJIT_COMPILER_IR_TEXT_H_
#define CJIT_COMPILER_IR_TEXT_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"

namespace cjit {

std::string PrintGraph(const Graph& graph);
absl::StatusOr<std::unique_ptr<Graph>> ParseGraph(absl::string_view text);

}  // namespace cjit

#endif  // CJIT_COMPILER_IR_TEXT_H_
