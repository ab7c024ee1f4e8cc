// runtime/cpu/gemm.h (BLIS sgemm behind the CPU kernels) against float64 loops: every transpose
// combination, alpha/beta, leading dimensions larger than the minimum, row splitting over threads, beta = 0
// never reading C, K = 0, invalid arguments, and concurrent callers (the header promises thread safety).
#include "runtime/cpu/gemm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <limits>
#include <thread>
#include <vector>

#include "runtime/cpu/parallel.h"
#include "tests/random_floats.h"

namespace cjit {
namespace {

using testing::RandomFloats;

// Row-major op(A) [M, K] * op(B) [K, N] in float64, alpha/beta as BLAS.
std::vector<double> Reference(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                              const std::vector<float>& A, int64_t lda, const std::vector<float>& B, int64_t ldb,
                              float beta, const std::vector<float>& C, int64_t ldc) {
  std::vector<double> out(static_cast<size_t>(M * ldc));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) {
        s += static_cast<double>(ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
      }
      out[i * ldc + j] = alpha * s + (beta == 0.0f ? 0.0 : beta * static_cast<double>(C[i * ldc + j]));
    }
  return out;
}

void CheckShape(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta, int64_t pad, int threads) {
  const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  const std::vector<float> A = RandomFloats((ta ? K : M) * lda, 1), B = RandomFloats((tb ? N : K) * ldb, 2);
  std::vector<float> C = RandomFloats(M * ldc, 3);
  if (beta == 0.0f) std::fill(C.begin(), C.end(), std::numeric_limits<float>::quiet_NaN());  // never read
  const std::vector<double> ref = Reference(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  const std::vector<float> before = C;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  const bool ok = Sgemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  omp_set_num_threads(saved);
  ASSERT_TRUE(ok);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t at = static_cast<size_t>(i * ldc + j);
      if (j >= N) {  // padding columns of C are never written
        ASSERT_TRUE(std::isnan(before[at]) ? std::isnan(C[at]) : C[at] == before[at]) << "pad at " << i << "," << j;
        continue;
      }
      ASSERT_NEAR(C[at], ref[at], 1e-5 * (1 + K)) << "ta=" << ta << " tb=" << tb << " M=" << M << " N=" << N
                                                   << " K=" << K << " threads=" << threads << " at " << i << "," << j;
    }
}

// runtime/cpu/parallel.h: when kernels fork. Large work always, little work never, medium work only while
// the workers of a region that just ended are still spinning (a sleeping worker's wake-up cost 4-8 ms on
// a VM), and one thread stays one thread.
TEST(ParallelRuleTest, ForksForLargeWorkOrWhileWorkersAreAwake) {
  LastParallelEndNs().store(0);
  EXPECT_EQ(ThreadsForWork(2, kMinParallelWork), 2);
  EXPECT_EQ(ThreadsForWork(2, kMinParallelWork - 1), 1) << "no region ran yet";
  EXPECT_EQ(ThreadsForWork(1, 1e12), 1);
  EXPECT_EQ(ThreadsForElements(4, kMinParallelElements), 4);
  EXPECT_EQ(ThreadsForElements(4, kMinParallelElements - 1), 1);
  ParallelFor(2, 2, [](int64_t) {});  // marks the end of a region
  EXPECT_EQ(ThreadsForWork(2, kMinParallelWorkAwake), 2) << "right after a region";
  EXPECT_EQ(ThreadsForWork(2, kMinParallelWorkAwake - 1), 1);
  EXPECT_EQ(ThreadsForElements(2, kMinParallelElementsAwake), 2);
  EXPECT_EQ(ThreadsForElements(2, kMinParallelElementsAwake - 1), 1);
  LastParallelEndNs().store(SteadyNowNs() - 2 * kWorkersAwakeNs);
  EXPECT_EQ(ThreadsForWork(2, kMinParallelWorkAwake), 1) << "workers asleep again";
  EXPECT_EQ(ThreadsForElements(2, kMinParallelElementsAwake), 1);
  // Library calls (oneDNN) read the thread's OpenMP setting: 1 while a small call runs, restored after.
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  MarkParallelEnd();  // workers awake: still 1 thread for a library call (its thread count is the shape's)
  {
    ScopedLibraryThreadsForWork small(kMinParallelWork - 1);
    EXPECT_EQ(omp_get_max_threads(), 1);
  }
  EXPECT_EQ(omp_get_max_threads(), 2);
  {
    ScopedLibraryThreadsForWork large(kMinParallelWork);
    EXPECT_EQ(omp_get_max_threads(), 2);
  }
  omp_set_num_threads(saved);
}

TEST(GemmTest, MatchesFloat64) {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      CheckShape(ta, tb, 1, 1, 1, 1.0f, 0.0f, 0, 1);
      CheckShape(ta, tb, 7, 5, 3, 0.5f, 2.0f, 3, 1);
      CheckShape(ta, tb, 33, 17, 65, 1.0f, 1.0f, 0, 1);
      CheckShape(ta, tb, 256, 72, 24, 1.0f, 0.0f, 1, 1);  // pointwise-conv-like
      CheckShape(ta, tb, 300, 129, 77, -1.5f, 0.25f, 2, 2);  // split over two threads
      CheckShape(ta, tb, 1001, 64, 48, 1.0f, 0.0f, 0, 2);    // rows not a multiple of the block
      CheckShape(ta, tb, 65, 120, 240, 1.0f, 0.0f, 0, 2);    // M / threads rounds down: the last row is covered
      CheckShape(ta, tb, 97, 130, 70, 1.0f, 0.5f, 0, 3);
      CheckShape(ta, tb, 8, 257, 512, 1.0f, 0.0f, 1, 2);   // few rows: column blocks over two threads
      CheckShape(ta, tb, 5, 100, 300, 0.5f, 1.5f, 0, 3);
    }
}

TEST(GemmTest, ZeroSizesAndInvalidArguments) {
  std::vector<float> a(16, 1.0f), b(16, 1.0f), c(16, 3.0f);
  EXPECT_TRUE(Sgemm(false, false, 0, 4, 4, 1.0f, a.data(), 4, b.data(), 4, 0.0f, c.data(), 4));
  EXPECT_EQ(c[0], 3.0f);
  EXPECT_TRUE(Sgemm(false, false, 4, 4, 0, 1.0f, a.data(), 1, b.data(), 4, 2.0f, c.data(), 4));  // K = 0: C = beta C
  EXPECT_EQ(c[5], 6.0f);
  c.assign(16, std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(Sgemm(false, false, 4, 4, 0, 1.0f, a.data(), 1, b.data(), 4, 0.0f, c.data(), 4));
  EXPECT_EQ(c[7], 0.0f);
  c.assign(16, 3.0f);
  EXPECT_FALSE(Sgemm(false, false, -1, 4, 4, 1.0f, a.data(), 4, b.data(), 4, 0.0f, c.data(), 4));
  EXPECT_FALSE(Sgemm(false, false, 4, 4, 4, 1.0f, a.data(), 0, b.data(), 4, 0.0f, c.data(), 4));  // lda < 1
  EXPECT_FALSE(Sgemm(false, true, 4, 4, 4, 1.0f, a.data(), 4, b.data(), -2, 0.0f, c.data(), 4));  // ldb < 1
  EXPECT_FALSE(Sgemm(false, false, 4, 4, 4, 1.0f, a.data(), 4, b.data(), 4, 0.0f, c.data(), 3));  // ldc < N
  EXPECT_EQ(c[0], 3.0f);  // untouched on error
}

// Rows of A overlapping (lda = C < K = 3 C): the in-place im2col of a stride-1 1-D convolution over a
// channels-last signal, against float64 loops over the signal itself; on 1 and 2 threads.
TEST(GemmTest, OverlappingRowsOfA) {
  for (int threads : {1, 2})
  for (int64_t OC : {29, 128}) {  // 128: the wide (skx) BLIS context where the CPU takes it
    const int64_t C = 37, W = 300, KW = 3, M = W - KW + 1, K = KW * C;
    const std::vector<float> x = RandomFloats(W * C, 4), w = RandomFloats(K * OC, 5);
    std::vector<float> y(M * OC, std::numeric_limits<float>::quiet_NaN());
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    ASSERT_TRUE(Sgemm(false, false, M, OC, K, 1.0f, x.data(), C, w.data(), OC, 0.0f, y.data(), OC));
    omp_set_num_threads(saved);
    for (int64_t p = 0; p < M; ++p)
      for (int64_t o = 0; o < OC; ++o) {
        double s = 0;
        for (int64_t kw = 0; kw < KW; ++kw)
          for (int64_t c = 0; c < C; ++c) s += static_cast<double>(x[(p + kw) * C + c]) * w[(kw * C + c) * OC + o];
        ASSERT_NEAR(y[p * OC + o], s, 1e-4) << "p=" << p << " o=" << o << " OC=" << OC << " threads=" << threads;
      }
  }
}

// BLIS 0.9 falls back to its generic reference kernels on CPUs newer than its release (an AMD Zen 5 here:
// 3-5x slower); the products must run vectorized kernels on any CPU with AVX2 + FMA, and AVX-512 ones for
// wide products where the CPU has AVX-512 (runtime/cpu/gemm.cc).
TEST(GemmTest, VectorizedKernelsOnThisCpu) {
  const std::string sets = BlisKernelSets();
  const std::string impl = SgemmImplementation();
  if (std::getenv("BLIS_ARCH_TYPE") != nullptr) {
    EXPECT_EQ(sets, "");
    EXPECT_NE(impl.find("Eigen"), std::string::npos) << impl;
    return;
  }
  EXPECT_NE(impl.find(sets), std::string::npos) << impl;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    EXPECT_EQ(sets.find("generic"), std::string::npos) << "BLIS kernels in use: " << sets;
  }
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl")) {
    EXPECT_NE(sets.find("skx"), std::string::npos) << "BLIS kernels in use: " << sets;
  }
#endif
}

// Eight threads call Sgemm at once on different problems; each result must equal the same call made alone
// (bit for bit: the same blocking, no shared buffers between callers).
TEST(GemmTest, ConcurrentCallsMatchSerial) {
  constexpr int kThreads = 8;
  const int64_t M = 300, N = 200, K = 150;
  std::vector<std::vector<float>> A(kThreads), B(kThreads), alone(kThreads);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  for (int t = 0; t < kThreads; ++t) {
    A[t] = RandomFloats(M * K, 10 + t);
    B[t] = RandomFloats(K * N, 20 + t);
    alone[t].resize(M * N);
    ASSERT_TRUE(Sgemm(false, false, M, N, K, 1.0f, A[t].data(), K, B[t].data(), N, 0.0f, alone[t].data(), N));
  }
  omp_set_num_threads(saved);
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([&, t] {
      omp_set_num_threads(1);  // this thread's ICV only: the calls are the serial ones made above
      std::vector<float> c(M * N);
      for (int i = 0; i < 200; ++i) {
        const int k = (t + i) % kThreads;
        Sgemm(false, false, M, N, K, 1.0f, A[k].data(), K, B[k].data(), N, 0.0f, c.data(), N);
        if (c != alone[k]) ++mismatches[t];
      }
    });
  }
  for (std::thread& th : pool) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace cjit
