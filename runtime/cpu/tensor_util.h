// Tensor helpers shared by CPU kernels. Internal to runtime/cpu.
#ifndef CJIT_RUNTIME_CPU_TENSOR_UTIL_H_
#define CJIT_RUNTIME_CPU_TENSOR_UTIL_H_

#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/tensor.h"

namespace cjit {

// out[i_perm...] = x[...]: out dims[k] = x dims[perm[k]]. Any dtype (copies bytes).
absl::StatusOr<Tensor> TransposeTensor(const Tensor& x, const std::vector<int64_t>& perm, int threads);

// Geometry of a batched MatMul (numpy matmul semantics): 1-D operands promoted, batch dims broadcast.
struct MatMulGeometry {
  Dims ad, bd, cd;  // operand and result dims, all of the same rank (>= 2)
  int64_t M = 0, K = 0, N = 0, batch = 1;
  // Element offsets of batch `bi`'s A and B matrices.
  void Offsets(int64_t bi, int64_t* aoff, int64_t* boff) const;
};
// Errors when the inner dims differ.
absl::StatusOr<MatMulGeometry> PlanMatMul(const Dims& a, const Dims& b);

}  // namespace cjit

#endif  // CJIT_RUNTIME_CPU_TENSOR_UTIL_H_
