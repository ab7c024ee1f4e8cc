// Tensor helpers shared by CPU kernels. Internal to runtime/cpu.
#ifndef CJIT_RUNTIME_CPU_TENSOR_UTIL_H_
#define CJIT_RUNTIME_CPU_TENSOR_UTIL_H_

#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/tensor.h"

namespace cjit {

// out[i_perm...] = x[...]: out dims[k] = x dims[perm[k]]. Any dtype (copies bytes).
absl::StatusOr<Tensor> TransposeTensor(const Tensor& x, const std::vector<int64_t>& perm, int threads);

}  // namespace cjit

#endif  // CJIT_RUNTIME_CPU_TENSOR_UTIL_H_
