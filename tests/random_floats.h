// Seeded uniform [-1, 1) float32 test data, shared by the kernel tests (the same seed gives the same
// values in every test and on every run).
#ifndef CJIT_TESTS_RANDOM_FLOATS_H_
#define CJIT_TESTS_RANDOM_FLOATS_H_

#include <algorithm>
#include <random>
#include <vector>

#include "compiler/ir/tensor.h"

namespace cjit {
namespace testing {

inline std::vector<float> RandomFloats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// A float32 tensor of dims `d` holding RandomFloats(numel, seed).
inline Tensor RandomTensor(const Dims& d, unsigned seed) {
  Tensor t(DType::kF32, d);
  const std::vector<float> v = RandomFloats(static_cast<size_t>(t.numel()), seed);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

}  // namespace testing
}  // namespace cjit

#endif  // CJIT_TESTS_RANDOM_FLOATS_H_
