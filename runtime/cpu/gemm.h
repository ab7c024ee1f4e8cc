// Single-precision GEMM for the CPU kernels (internal to runtime/cpu).
//
//   C[M, N] = alpha * op(A)[M, K] * op(B)[K, N] + beta * C      (row-major, as cblas_sgemm with CblasRowMajor)
//
// op(A) = A (ta = false; A is M x K with row stride lda) or A^T (ta = true; A is K x M, row stride lda); the
// same for B; C has row stride ldc >= N. A and B are only read, so their rows may overlap (lda < K): with
// lda = C channels, A row p = X[p * C .. p * C + K) is the im2col row of a stride-1 1-D channels-last
// convolution read in place (conv_gemm.cc). beta = 0 never reads C (NaN in C does not propagate). M, N or
// K of 0 are valid (K = 0: C = beta * C).
//
// Runs BLIS's typed API (bli_sgemm, BLIS 0.9, statically linked from Debian's libblis-serial: "BLIS: A
// Framework for Rapidly Instantiating BLAS Functionality", Van Zee & van de Geijn, ACM TOMS 41(3), 2015).
// Its micro-kernels are precompiled for every x86-64 family and picked by CPUID when BLIS initializes,
// so no code is generated at a first call (0.25 ms) — oneDNN's dnnl_sgemm, used before, JIT-generates its
// kernels on the first call of a process (28 ms on this machine, AVX-512), the larger part of a small
// model's first run. Steady state, BLIS takes 0.84-1.17x dnnl_sgemm's time on the GEMM shapes of the
// shared models' convolutions, 1 thread (benchmark: build/tools/cjit_gemm_bench, tools/gemm_bench.cc).
// BLIS's own choice of kernels knows only the CPU families of its release (a Zen 5 gets its generic
// reference kernels, 3-5x slower) and guesses the FMA units from the CPU brand string, which a VM hides: so
// where BLIS chose generic on an AVX2 + FMA CPU its haswell kernels run, and on every CPU with AVX-512
// F/DQ/BW/VL products with N >= 64 and at least 32 rows run BLIS's skx (AVX-512) context (gemm.cc has the
// measurements). BLIS 0.9 has no packing kernel for the skx micro-kernel's 32-row panels and packs them
// through its unvectorized reference scal2v: those contexts run as copies with a vectorized one (gemm.cc,
// WithPanelPacking). BLIS aborts the process at initialization when BLIS_ARCH_TYPE is set in the
// environment: then every product runs on Eigen (same arguments, same results within float rounding;
// SgemmImplementation() says which).
//
// Threads: called outside an OpenMP parallel region, the rows of C are split over omp_get_max_threads()
// threads (the session sets it to --intra_op_threads for a run) when the product is large enough; inside
// a parallel region it runs on the calling thread. Blocks are fixed by (M, N, K, threads), so results are
// the same on every run with the same thread count. Thread-safe: BLIS is reentrant (checked by
// GemmTest.ConcurrentCallsMatchSerial).
#pragma once

#include <cstdint>

namespace cjit {

// Returns false on invalid arguments (negative sizes, lda or ldb < 1, ldc < N); C is then untouched.
bool Sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
           int64_t ldb, float beta, float* C, int64_t ldc);

// "BLIS sgemm (haswell+skx)" (the sub-configurations in use), or "Eigen GEMM (BLIS_ARCH_TYPE set)" where BLIS
// is not used (tools/gemm_bench.cc prints it).
const char* SgemmImplementation();

// The BLIS sub-configurations in use: the native one, then "+skx" where wide products run AVX-512 kernels
// ("haswell+skx", "zen3", ...); empty where BLIS is not used.
const char* BlisKernelSets();

// BLIS's version string ("0.9.0"), part of the autotuning cache key (runtime/autotune.h).
const char* BlisVersion();

}  // namespace cjit
