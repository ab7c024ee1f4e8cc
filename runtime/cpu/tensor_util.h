// Tensor helpers shared by CPU kernels. Internal to runtime/cpu.
#ifndef CJIT_RUNTIME_CPU_TENSOR_UTIL_H_
#define CJIT_RUNTIME_CPU_TENSOR_UTIL_H_

#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/tensor.h"

namespace cjit {

// out[i_perm...] = x[...]: out dims[k] = x dims[perm[k]]. Any dtype (copies bytes).
absl::StatusOr<Tensor> TransposeTensor(const Tensor& x, const std::vector<int64_t>& perm, int threads);

// y[idx] = x[start + idx * step] per dim, y of x's dtype and rank (allocated): a strided box of x. Any dtype
// but string (copies bytes); up to `threads` threads.
void StridedCopy(const Tensor& x, Tensor& y, const std::vector<int64_t>& start, const std::vector<int64_t>& step,
                 int threads);
// y = parts concatenated along `axis` (Concat's semantics): y allocated with the parts' dims summed on the
// axis, every part of y's dtype and rank (a scalar part counts 1). Any dtype but string (copies bytes).
void ConcatAlong(const std::vector<const Tensor*>& parts, int axis, Tensor& y);

// t's first v.size() elements = v, each converted to t's numeric dtype with NumericCast
// (compiler/ir/numeric_cast.h: NaN -> 0 and saturation for integers). t holds at least v.size() elements;
// an Unimplemented error for bool and for dtypes DispatchAll (runtime/cpu/dispatch.h) does not take.
absl::Status StoreDoubles(Tensor& t, const std::vector<double>& v);

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
