#include "runtime/cpu/gemm.h"

#include <omp.h>

#include <algorithm>

#include "blis.h"

namespace cjit {

namespace {

// Below this many multiply-adds a product runs on one thread (splitting costs more than it gains).
constexpr int64_t kParallelMacs = int64_t{1} << 18;

void SgemmBlock(bool ta, bool tb, int64_t m0, int64_t m, int64_t N, int64_t K, float alpha, const float* A,
                int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  // General strides instead of transpose flags: op(A)[i, k] is A[i * lda + k] or, transposed, A[k * lda + i].
  const inc_t rsa = ta ? 1 : lda, csa = ta ? lda : 1;
  const inc_t rsb = tb ? 1 : ldb, csb = tb ? ldb : 1;
  const float* a = A + m0 * rsa;
  bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, N, K, &alpha, const_cast<float*>(a), rsa, csa,
            const_cast<float*>(B), rsb, csb, &beta, C + m0 * ldc, ldc, 1);
}

}  // namespace

bool Sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
           int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M < 0 || N < 0 || K < 0) return false;
  // A and B are only read: their rows may overlap (lda < K reads an implicit im2col matrix, see the header).
  if (lda < 1 || ldb < 1 || ldc < std::max<int64_t>(1, N)) return false;
  if (M == 0 || N == 0) return true;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return true;
  }
  int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (M * N * K < kParallelMacs || M < 32) nt = 1;
  nt = static_cast<int>(std::min<int64_t>(nt, M / 16));
  if (nt <= 1) {
    SgemmBlock(ta, tb, 0, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return true;
  }
  // Row blocks of C, multiples of 16 rows (the micro-kernels' register block heights divide 16 or 6 / 12;
  // a multiple of 16 keeps most blocks whole).
  const int64_t rows = ((M + nt - 1) / nt + 15) / 16 * 16;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int t = 0; t < nt; ++t) {
    const int64_t m0 = t * rows, m = std::min(rows, M - m0);
    if (m > 0) SgemmBlock(ta, tb, m0, m, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  return true;
}

const char* SgemmImplementation() { return "BLIS sgemm"; }

const char* BlisVersion() { return bli_info_get_version_str(); }

}  // namespace cjit
