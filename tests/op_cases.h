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

// Comparison tolerance of two float computations of the same op chain in `dtype` (relative, absolute):
// float32 allows reassociation and libm differences; float16/bfloat16 one or two units in the last place
// (a float32 difference can round to the neighbouring value); exact for non-float dtypes.
std::pair<double, double> ToleranceFor(DType dtype, double f32_rtol = 1e-5);

}  // namespace cjit

#endif  // CJIT_TESTS_OP_CASES_H_
