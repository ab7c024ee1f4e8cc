#include "runtime/cpu/int8_gemm.h"

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ir/cpu_isa.h"
#include "compiler/ir/tensor.h"
#include "oneapi/dnnl/dnnl.h"
#include "runtime/cpu/onednn_util.h"
#include "runtime/cpu/parallel.h"

namespace cjit {

bool Int8GemmNeedsSplit() { return !CpuHasAvx512Vnni(); }

namespace {

int64_t AlignUp4(int64_t v) { return (v + 3) & ~int64_t{3}; }

// x + y modulo 2^32 (int32 results wrap as the hardware's do; no signed-overflow UB).
inline int32_t WrapAdd(int32_t x, int64_t y) {
  return static_cast<int32_t>(static_cast<uint32_t>(x) + static_cast<uint32_t>(static_cast<uint64_t>(y)));
}

void CheckDnnl(dnnl_status_t st) {
  if (st != dnnl_success) throw std::runtime_error(absl::StrCat("oneDNN dnnl_gemm_u8s8s32 failed (status ", st, ")"));
}

// The prepared B's buffer: b0 [K][N] (then b1 [K][N] when split), padded to 4 bytes, colsum [N], shift [N].
int64_t ValuesBytes(int64_t K, int64_t N, bool split) { return AlignUp4(K * N * (split ? 2 : 1)); }
int64_t Int8RhsBytes(int64_t K, int64_t N, bool split) { return ValuesBytes(K, N, split) + 8 * N; }

// The view of a prepared buffer (its owner left to the caller).
Int8Rhs ViewInt8Rhs(const uint8_t* buffer, int64_t K, int64_t N, bool split) {
  Int8Rhs r;
  r.K = K;
  r.N = N;
  r.split = split;
  r.b0 = reinterpret_cast<const int8_t*>(buffer);
  r.b1 = split ? r.b0 + K * N : nullptr;
  r.colsum = reinterpret_cast<const int32_t*>(buffer + ValuesBytes(K, N, split));
  r.shift = r.colsum + N;
  for (int64_t n = 0; n < N; ++n) r.has_shift |= r.shift[n] != 0;
  return r;
}

// Writes the prepared B into `buffer` (Int8RhsBytes): from `b` (uint8 or int8), element (k, n) at
// b[k * ldk + n * ldn], zero point zp[n] (or zp[0]; null = 0).
void PrepareInt8Rhs(const void* b, bool b_signed, int64_t K, int64_t N, int64_t ldk, int64_t ldn, const int32_t* zp,
                    bool zp_per_column, bool split, uint8_t* buffer) {
  int8_t* b0 = reinterpret_cast<int8_t*>(buffer);
  int8_t* b1 = split ? b0 + K * N : nullptr;
  int32_t* colsum = reinterpret_cast<int32_t*>(buffer + ValuesBytes(K, N, split));
  int32_t* shift = colsum + N;
  const int32_t base = b_signed ? 0 : 128;  // B' = B - base
  for (int64_t n = 0; n < N; ++n) {
    shift[n] = base - (zp == nullptr ? 0 : zp[zp_per_column ? n : 0]);
    colsum[n] = 0;
  }
  const int8_t* bs = static_cast<const int8_t*>(b);
  const uint8_t* bu = static_cast<const uint8_t*>(b);
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t n = 0; n < N; ++n) {
      const int64_t at = k * ldk + n * ldn;
      const int32_t v = b_signed ? bs[at] : static_cast<int32_t>(bu[at]) - 128;
      colsum[n] = WrapAdd(colsum[n], v);  // int32 wraps past 16.7 M rows, as the sums do
      if (split) {
        const int32_t hi = v >> 1;  // floor: [-64, 63]; v - hi in [-64, 64]
        b0[k * N + n] = static_cast<int8_t>(hi);
        b1[k * N + n] = static_cast<int8_t>(v - hi);
      } else {
        b0[k * N + n] = static_cast<int8_t>(v);
      }
    }
  }
}

}  // namespace

Int8Rhs PreparedInt8Rhs(const Tensor& w, bool constant, const std::string& key, int64_t K, int64_t N, int64_t ldk,
                        int64_t ldn, const int32_t* zp, bool zp_per_column,
                        const std::function<const void*(std::vector<uint8_t>* scratch)>& source) {
  const bool split = Int8GemmNeedsSplit();
  const bool b_signed = w.dtype() == DType::kI8;
  const int64_t bytes = Int8RhsBytes(K, N, split);
  std::vector<uint8_t> scratch;
  if (constant) {
    // The zero points are part of the prepared values: they are constants of the same node, named by the key.
    std::shared_ptr<DnnlEntry> e = CachedPackedWeights(
        w, absl::StrCat("int8rhs:", reinterpret_cast<uintptr_t>(w.raw()), ":", key, ":", split), (bytes + 3) / 4,
        [&](float* buf) {
          PrepareInt8Rhs(source(&scratch), b_signed, K, N, ldk, ldn, zp, zp_per_column, split,
                         reinterpret_cast<uint8_t*>(buf));
        });
    Int8Rhs r = ViewInt8Rhs(static_cast<const uint8_t*>(e->weights.get_data_handle()), K, N, split);
    r.owner = e;
    return r;
  }
  auto buffer = std::shared_ptr<uint8_t[]>(new uint8_t[bytes]);
  PrepareInt8Rhs(source(&scratch), b_signed, K, N, ldk, ldn, zp, zp_per_column, split, buffer.get());
  Int8Rhs r = ViewInt8Rhs(buffer.get(), K, N, split);
  r.owner = buffer;
  return r;
}

void Int8Gemm(const uint8_t* a, int64_t lda, int64_t M, const int32_t* a_zp, bool a_zp_per_row, const Int8Rhs& b,
              int32_t* c, int64_t ldc, int threads) {
  const int64_t K = b.K, N = b.N;
  if (M <= 0 || N <= 0) return;
  if (K == 0) {
    for (int64_t m = 0; m < M; ++m) std::memset(c + m * ldc, 0, N * sizeof(int32_t));
    return;
  }
  // Per-column offset -a_zp * colsum(B') through oneDNN's row offset when a_zp is per tensor.
  std::vector<int32_t> co(N, 0);
  const int32_t az0 = a_zp[0];
  if (!a_zp_per_row) {
    for (int64_t n = 0; n < N; ++n) co[n] = WrapAdd(0, -static_cast<int64_t>(az0) * b.colsum[n]);
  }
  // One block of C: rows [m0, m1) x columns [n0, n1).
  // (No exception may leave an OpenMP region: a failed call is recorded and reported after it.)
  std::atomic<int> failure{dnnl_success};
  auto block = [&](int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    if (m1 <= m0 || n1 <= n0) return;
    const uint8_t* ab = a + m0 * lda;
    int32_t* cb = c + m0 * ldc + n0;
    dnnl_status_t st = dnnl_gemm_u8s8s32('N', 'N', 'R', m1 - m0, n1 - n0, K, 1.0f, ab, lda, 0, b.b0 + n0, N, 0, 0.0f,
                                         cb, ldc, co.data() + n0);
    if (st == dnnl_success && b.split) {
      const int32_t zero = 0;
      st = dnnl_gemm_u8s8s32('N', 'N', 'F', m1 - m0, n1 - n0, K, 1.0f, ab, lda, 0, b.b1 + n0, N, 0, 1.0f, cb, ldc,
                             &zero);
    }
    if (st != dnnl_success) failure.store(st);
  };
  // Split over the threads here, each block a single-threaded oneDNN call (inside our parallel region):
  // oneDNN's own threading of these shapes gained 15% at 2 threads (a 1008 x 64 x 576 product: 0.207 ->
  // 0.179 ms, and none for K = 16), blocks of rows scale almost linearly (0.136 ms).
  const double work = static_cast<double>(M) * N * K * (b.split ? 2 : 1);
  const int t = ThreadsForWork(threads, work);
  if (t <= 1) {
    ScopedLibraryThreadsForWork single(0.0);
    block(0, M, 0, N);
  } else if (M >= 8 * t) {
    ParallelFor(t, t, [&](int64_t i) { block(M * i / t, M * (i + 1) / t, 0, N); });
  } else {
    const int64_t cols = ((N + t - 1) / t + 15) / 16 * 16;  // column blocks of 16
    ParallelFor(t, t, [&](int64_t i) { block(0, M, std::min(N, i * cols), std::min(N, (i + 1) * cols)); });
  }
  CheckDnnl(static_cast<dnnl_status_t>(failure.load()));
  if (!a_zp_per_row && !b.has_shift) return;
  const int tc = ThreadsForElements(threads, M * (N + K));
  ParallelFor(tc, M, [&](int64_t m) {
    const uint8_t* row = a + m * lda;
    const int32_t az = a_zp_per_row ? a_zp[m] : az0;
    int32_t* cr = c + m * ldc;
    if (a_zp_per_row) {
      for (int64_t n = 0; n < N; ++n) cr[n] = WrapAdd(cr[n], -static_cast<int64_t>(az) * b.colsum[n]);
    }
    if (b.has_shift) {
      int64_t rs = 0;
      for (int64_t k = 0; k < K; ++k) rs += row[k];
      const int64_t r = rs - K * static_cast<int64_t>(az);
      for (int64_t n = 0; n < N; ++n) cr[n] = WrapAdd(cr[n], static_cast<int64_t>(b.shift[n]) * r);
    }
  });
}

}  // namespace cjit
