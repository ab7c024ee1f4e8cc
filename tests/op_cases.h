// The per-op case list shared by the CPU op suite (tests/op_suite_test.cc: compiled vs fallback) and the GPU
// suite (tests/gpu_test.cc: GPU vs CPU fallback): every clusterable op family and dtype, as small IR graphs
// with fully given shapes, and random inputs for them.
#ifndef CJIT_TESTS_OP_CASES_H_
#define CJIT_TESTS_OP_CASES_H_

#include <random>
#include <string>
#include <vector>

#include "compiler/ir/graph.h"

namespace cjit {

struct OpCase {
  std::string name;
  std::string ir;  // a graph with inputs; shapes fully given
};

// Uniform in [-2, 2) (integers: scaled by 3 and truncated; bool: x > 0).
Tensor RandomInput(const Value& v, std::mt19937& rng);

std::vector<OpCase> OpSuiteCases();

}  // namespace cjit

#endif  // CJIT_TESTS_OP_CASES_H_
