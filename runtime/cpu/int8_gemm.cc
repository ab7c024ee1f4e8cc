#include "runtime/cpu/int8_gemm.h"

#include <immintrin.h>

#include <algorithm>
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
#include "runtime/cpu/quant_rows.h"

namespace cjit {

bool Int8GemmNeedsSplit() { return !CpuHasAvx512Vnni(); }

namespace {

int64_t AlignUp4(int64_t v) { return (v + 3) & ~int64_t{3}; }

// The largest K the own VNNI kernel takes: a 64-column block of B' (K x 64 bytes) stays in L2.
constexpr int64_t kVnniMaxK = 4096;

// x + y modulo 2^32 (int32 results wrap as the hardware's do; no signed-overflow UB).
inline int32_t WrapAdd(int32_t x, int64_t y) {
  return static_cast<int32_t>(static_cast<uint32_t>(x) + static_cast<uint32_t>(static_cast<uint64_t>(y)));
}

void CheckDnnl(dnnl_status_t st) {
  if (st != dnnl_success) throw std::runtime_error(absl::StrCat("oneDNN dnnl_gemm_u8s8s32 failed (status ", st, ")"));
}

// The prepared B's buffer: b0 [K][N] (then b1 [K][N] when split), padded to 4 bytes, colsum [N], shift [N],
// then (not split) the VNNI packing at a 64-byte aligned offset.
int64_t ValuesBytes(int64_t K, int64_t N, bool split) { return AlignUp4(K * N * (split ? 2 : 1)); }
int64_t VnniOffset(int64_t K, int64_t N, bool split) { return (ValuesBytes(K, N, split) + 8 * N + 63) / 64 * 64; }
int64_t VnniBytes(int64_t K, int64_t N) { return (N + 15) / 16 * ((K + 3) / 4) * 64; }
int64_t Int8RhsBytes(int64_t K, int64_t N, bool split) {
  return split ? ValuesBytes(K, N, split) + 8 * N : VnniOffset(K, N, split) + VnniBytes(K, N) + 64;
}

// The buffer's start aligned to 64 bytes (buffers are allocated with 64 spare bytes).
const uint8_t* VnniBase(const uint8_t* buffer, int64_t K, int64_t N) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(buffer + VnniOffset(K, N, false));
  return reinterpret_cast<const uint8_t*>((p + 63) / 64 * 64);
}

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
  if (!split) r.vnni = reinterpret_cast<const int8_t*>(VnniBase(buffer, K, N));
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
  if (split) return;
  int8_t* vnni = reinterpret_cast<int8_t*>(const_cast<uint8_t*>(VnniBase(buffer, K, N)));
  const int64_t K4 = (K + 3) / 4;
  std::memset(vnni, 0, VnniBytes(K, N));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) vnni[((n / 16) * K4 + k / 4) * 64 + (n % 16) * 4 + k % 4] = b0[k * N + n];
}

// One step of 4 k: B's NB vectors, then each row's 4 values of A (av[r], packed) broadcast against them.
template <int MR, int NB>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"), always_inline)) inline void VnniStep(
    __m512i (&acc)[MR][NB], const int8_t* bp, int64_t K4, int64_t k4, const int32_t* av) {
  __m512i b[NB];
#pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) b[j] = _mm512_load_si512(bp + (j * K4 + k4) * 64);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    const __m512i v = _mm512_set1_epi32(av[r]);
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) acc[r][j] = _mm512_dpbusd_epi32(acc[r][j], v, b[j]);
  }
}

// C[m][n] = co[n] + sum_k A[m][k] B'[k][n] for MR rows and NB blocks of 16 columns (the last masked by
// `last`), int32 wrapping as vpdpbusd does. bp: the tile's first column block of the VNNI packing.
template <int MR, int NB>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void VnniTile(const uint8_t* a, int64_t lda, int64_t K,
                                                                             const int8_t* bp, int64_t K4, int32_t* c,
                                                                             int64_t ldc, const int32_t* co,
                                                                             __mmask16 last, const Int8Requant* rq,
                                                                             uint8_t* y) {
  __m512i acc[MR][NB];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) acc[r][j] = _mm512_setzero_si512();
  const int64_t whole = K / 4;
  int32_t av[MR];
  for (int64_t k4 = 0; k4 < whole; ++k4) {
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) std::memcpy(&av[r], a + r * lda + k4 * 4, 4);
    VnniStep<MR, NB>(acc, bp, K4, k4, av);
  }
  if (whole < K4) {  // the last 1-3 values of each row; B' is zero beyond K
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      av[r] = 0;
      std::memcpy(&av[r], a + r * lda + whole * 4, K - whole * 4);
    }
    VnniStep<MR, NB>(acc, bp, K4, whole, av);
  }
  if (rq != nullptr) {  // requantized: as RequantizeColumnsI32
    const __m512 lo = _mm512_set1_ps(-kQuantClamp), hi = _mm512_set1_ps(kQuantClamp);
    const __m512i zp = _mm512_set1_epi32(rq->zp);
    const __m512i qlo = _mm512_set1_epi32(rq->to_signed ? -128 : 0);
    const __m512i qhi = _mm512_set1_epi32(rq->to_signed ? 127 : 255);
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) {
      const __mmask16 m = j == NB - 1 ? last : static_cast<__mmask16>(0xFFFF);
      const __m512i o = _mm512_maskz_loadu_epi32(m, co + j * 16);
      const __m512i bias =
          rq->bias != nullptr ? _mm512_maskz_loadu_epi32(m, rq->bias + j * 16) : _mm512_setzero_si512();
      const __m512 mult = _mm512_maskz_loadu_ps(m, rq->mult + j * 16);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const __m512i v = _mm512_add_epi32(_mm512_add_epi32(acc[r][j], o), bias);
        __m512 q = _mm512_mul_ps(_mm512_cvtepi32_ps(v), mult);
        q = _mm512_min_ps(_mm512_max_ps(q, lo), hi);
        __m512i t = _mm512_add_epi32(_mm512_cvtps_epi32(q), zp);
        t = _mm512_min_epi32(_mm512_max_epi32(t, qlo), qhi);
        uint8_t* dst = y + r * rq->ldy + j * 16;
        if (m == 0xFFFF) {
          _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm512_cvtepi32_epi8(t));
        } else {
          _mm_mask_storeu_epi8(dst, m, _mm512_cvtepi32_epi8(t));
        }
      }
    }
    return;
  }
#pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) {
    const __mmask16 m = j == NB - 1 ? last : static_cast<__mmask16>(0xFFFF);
    const __m512i o = _mm512_maskz_loadu_epi32(m, co + j * 16);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) _mm512_mask_storeu_epi32(c + r * ldc + j * 16, m, _mm512_add_epi32(acc[r][j], o));
  }
}

// rq: the requantization of this tile's columns (mult / bias from its first column) or null; y: the tile's
// first output byte.
template <int MR>
void VnniRows(const uint8_t* a, int64_t lda, int64_t K, const int8_t* bp, int64_t K4, int nb, int32_t* c, int64_t ldc,
              const int32_t* co, __mmask16 last, const Int8Requant* rq, uint8_t* y) {
  switch (nb) {
    case 1: return VnniTile<MR, 1>(a, lda, K, bp, K4, c, ldc, co, last, rq, y);
    case 2: return VnniTile<MR, 2>(a, lda, K, bp, K4, c, ldc, co, last, rq, y);
    case 3: return VnniTile<MR, 3>(a, lda, K, bp, K4, c, ldc, co, last, rq, y);
    default: return VnniTile<MR, 4>(a, lda, K, bp, K4, c, ldc, co, last, rq, y);
  }
}

// Rows [m0, m1) x columns [n0, n1) of C (n0 a multiple of 16) on the VNNI tiles; with rq, of its y instead.
void VnniGemm(const uint8_t* a, int64_t lda, int64_t m0, int64_t m1, int64_t n0, int64_t n1, const Int8Rhs& b,
              int32_t* c, int64_t ldc, const int32_t* co, const Int8Requant* rq) {
  const int64_t K = b.K, K4 = (K + 3) / 4;
  for (int64_t j0 = n0; j0 < n1; j0 += 64) {
    const int64_t cols = std::min<int64_t>(64, n1 - j0);
    const int nb = static_cast<int>((cols + 15) / 16);
    const int64_t rem = cols - (nb - 1) * 16;
    const __mmask16 last = static_cast<__mmask16>(rem >= 16 ? 0xFFFF : (1u << rem) - 1);
    const int8_t* bp = b.vnni + (j0 / 16) * K4 * 64;
    Int8Requant tile;  // rq's per-column vectors advanced to column j0
    if (rq != nullptr) {
      tile = *rq;
      tile.mult += j0;
      if (tile.bias != nullptr) tile.bias += j0;
    }
    const Int8Requant* trq = rq != nullptr ? &tile : nullptr;
    auto y_at = [&](int64_t m) { return rq != nullptr ? rq->y + m * rq->ldy + j0 : nullptr; };
    auto c_at = [&](int64_t m) { return rq != nullptr ? nullptr : c + m * ldc + j0; };
    int64_t m = m0;
    for (; m + 6 <= m1; m += 6) {
      VnniRows<6>(a + m * lda, lda, K, bp, K4, nb, c_at(m), ldc, co + j0, last, trq, y_at(m));
    }
    const uint8_t* ar = a + m * lda;
    switch (m1 - m) {
      case 5: VnniRows<5>(ar, lda, K, bp, K4, nb, c_at(m), ldc, co + j0, last, trq, y_at(m)); break;
      case 4: VnniRows<4>(ar, lda, K, bp, K4, nb, c_at(m), ldc, co + j0, last, trq, y_at(m)); break;
      case 3: VnniRows<3>(ar, lda, K, bp, K4, nb, c_at(m), ldc, co + j0, last, trq, y_at(m)); break;
      case 2: VnniRows<2>(ar, lda, K, bp, K4, nb, c_at(m), ldc, co + j0, last, trq, y_at(m)); break;
      case 1: VnniRows<1>(ar, lda, K, bp, K4, nb, c_at(m), ldc, co + j0, last, trq, y_at(m)); break;
      default: break;
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

bool Int8Gemm(const uint8_t* a, int64_t lda, int64_t M, const int32_t* a_zp, bool a_zp_per_row, const Int8Rhs& b,
              int32_t* c, int64_t ldc, int threads, const Int8Requant* requant) {
  const int64_t K = b.K, N = b.N;
  if (M <= 0 || N <= 0) return false;
  if (K == 0) {
    for (int64_t m = 0; m < M; ++m) std::memset(c + m * ldc, 0, N * sizeof(int32_t));
    return false;
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
  const bool own = b.vnni != nullptr && K <= kVnniMaxK && CpuHasAvx512Vnni();
  // Requantized in the kernel when nothing is left to add after the product.
  const Int8Requant* rq = own && !a_zp_per_row && !b.has_shift ? requant : nullptr;
  auto block = [&](int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    if (m1 <= m0 || n1 <= n0) return;
    if (own) {
      VnniGemm(a, lda, m0, m1, n0, n1, b, c, ldc, co.data(), rq);
      return;
    }
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
  if (rq != nullptr) return true;
  if (!a_zp_per_row && !b.has_shift) return false;
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
  return false;
}

}  // namespace cjit
