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

namespace {

// Which product kernel the prepared B is packed for: clusterjit's AVX-512 VNNI kernel (oneDNN beyond
// kVnniMaxK), its AVX2 int16 kernel, or oneDNN with B' split in two halves.
enum class Int8Path { kVnni, kAvx2, kSplit };
Int8Path CurrentInt8Path() {
  if (CpuHasAvx512Vnni()) return Int8Path::kVnni;
  if (CpuHasAvx2()) return Int8Path::kAvx2;
  return Int8Path::kSplit;
}

int64_t AlignUp4(int64_t v) { return (v + 3) & ~int64_t{3}; }

// The largest K the own VNNI kernel takes: a 64-column block of B' (K x 64 bytes, 512 KiB) stays in L2.
constexpr int64_t kVnniMaxK = 8192;

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
// The AVX2 int16 packing: ceil(N/16) column blocks, each ceil(K/2) pairs of k for 16 columns (32 int16).
int64_t I16Bytes(int64_t K, int64_t N) { return (N + 15) / 16 * ((K + 1) / 2) * 64; }
int64_t Int8RhsBytes(int64_t K, int64_t N, Int8Path path) {
  switch (path) {
    case Int8Path::kSplit: return ValuesBytes(K, N, true) + 8 * N;
    case Int8Path::kAvx2: return VnniOffset(K, N, false) + I16Bytes(K, N) + 64;
    default: return VnniOffset(K, N, false) + VnniBytes(K, N) + 64;
  }
}

// The buffer's start aligned to 64 bytes (buffers are allocated with 64 spare bytes).
const uint8_t* VnniBase(const uint8_t* buffer, int64_t K, int64_t N) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(buffer + VnniOffset(K, N, false));
  return reinterpret_cast<const uint8_t*>((p + 63) / 64 * 64);
}

// The view of a prepared buffer (its owner left to the caller).
Int8Rhs ViewInt8Rhs(const uint8_t* buffer, int64_t K, int64_t N, Int8Path path) {
  const bool split = path == Int8Path::kSplit;
  Int8Rhs r;
  r.K = K;
  r.N = N;
  r.split = split;
  r.b0 = reinterpret_cast<const int8_t*>(buffer);
  r.b1 = split ? r.b0 + K * N : nullptr;
  r.colsum = reinterpret_cast<const int32_t*>(buffer + ValuesBytes(K, N, split));
  r.shift = r.colsum + N;
  for (int64_t n = 0; n < N; ++n) r.has_shift |= r.shift[n] != 0;
  if (path == Int8Path::kVnni) r.vnni = reinterpret_cast<const int8_t*>(VnniBase(buffer, K, N));
  if (path == Int8Path::kAvx2) r.i16 = reinterpret_cast<const int16_t*>(VnniBase(buffer, K, N));
  return r;
}

// Writes the prepared B into `buffer` (Int8RhsBytes): from `b` (uint8 or int8), element (k, n) at
// b[k * ldk + n * ldn], zero point zp[n] (or zp[0]; null = 0).
void PrepareInt8Rhs(const void* b, bool b_signed, int64_t K, int64_t N, int64_t ldk, int64_t ldn, const int32_t* zp,
                    bool zp_per_column, Int8Path path, uint8_t* buffer) {
  const bool split = path == Int8Path::kSplit;
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
  if (path == Int8Path::kAvx2) {  // B - b_zp = B' + c[n], exact in int16
    int16_t* i16 = reinterpret_cast<int16_t*>(const_cast<uint8_t*>(VnniBase(buffer, K, N)));
    const int64_t K2 = (K + 1) / 2;
    std::memset(i16, 0, I16Bytes(K, N));
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n)
        i16[((n / 16) * K2 + k / 2) * 32 + (n % 16) * 2 + k % 2] = static_cast<int16_t>(b0[k * N + n] + shift[n]);
    return;
  }
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
  if (rq != nullptr && last == 0xFFFF) {  // whole blocks of 16 columns: as RequantizeColumnsI32
    const __m512 lo = _mm512_set1_ps(-kQuantClamp), hi = _mm512_set1_ps(kQuantClamp);
    const __m512i zp = _mm512_set1_epi32(rq->zp);
    // Output dword m (columns 4m .. 4m + 3) from dword 4 (m % 4) + m / 4 of the packed bytes.
    const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    __m512i add[NB];
    __m512 mult[NB];
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) {
      add[j] = _mm512_loadu_si512(co + j * 16);
      if (rq->bias != nullptr) add[j] = _mm512_add_epi32(add[j], _mm512_loadu_si512(rq->bias + j * 16));
      mult[j] = _mm512_loadu_ps(rq->mult + j * 16);
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
      for (int j = 0; j < NB; ++j) {
        __m512 q = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(acc[r][j], add[j])), mult[j]);
        q = _mm512_min_ps(_mm512_max_ps(q, lo), hi);
        acc[r][j] = _mm512_add_epi32(_mm512_cvtps_epi32(q), zp);
      }
    // Four 16-column vectors at a time (row-major: a row's NB, then the next row's) packed into one register;
    // the saturating packs clamp to the output type (in-lane: vector k's columns 4L + i land in dword
    // 4L + k), `order` puts each vector's 16 bytes together.
    constexpr int kVectors = MR * NB;
#pragma GCC unroll 8
    for (int f = 0; f < kVectors; f += 4) {
      // (No lambda here: it would not inherit the function's target attribute.)
      int at[4];
      for (int i = 0; i < 4; ++i) at[i] = std::min(f + i, kVectors - 1);
      const __m512i w01 = _mm512_packs_epi32(acc[at[0] / NB][at[0] % NB], acc[at[1] / NB][at[1] % NB]);
      const __m512i w23 = _mm512_packs_epi32(acc[at[2] / NB][at[2] % NB], acc[at[3] / NB][at[3] % NB]);
      const __m512i b = _mm512_permutexvar_epi32(
          order, rq->to_signed ? _mm512_packs_epi16(w01, w23) : _mm512_packus_epi16(w01, w23));
      if (NB == 4) {
        _mm512_storeu_si512(y + (f / 4) * rq->ldy, b);
        continue;
      }
      alignas(64) uint8_t bytes[64];
      _mm512_store_si512(bytes, b);
#pragma GCC unroll 4
      for (int i = 0; i < 4 && f + i < kVectors; ++i) {
        std::memcpy(y + ((f + i) / NB) * rq->ldy + ((f + i) % NB) * 16, bytes + 16 * i, 16);
      }
    }
    return;
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

// ---- AVX2: exact int16 products (vpmaddwd)
// Without VNNI, u8 x s8 instructions (vpmaddubsw) saturate pairs of products in int16; vpmaddwd multiplies
// int16 pairs into an exact int32 sum. Both operands carry their zero points: A - a_zp and B - b_zp lie in
// [-255, 255], a pair of products in +-130,050, so C needs no correction terms and every zero-point layout
// (per-row A, per-column B, uint8 or int8 B) takes the same kernel.

// Rows [m, m + rows) of A as int16 a - a_zp, K rounded up to even (a zero last value), row stride lda16.
__attribute__((target("avx2"))) void WidenRowsAvx2(const uint8_t* a, int64_t lda, int64_t m, int rows, int64_t K,
                                                   const int32_t* a_zp, bool a_zp_per_row, int16_t* out,
                                                   int64_t lda16) {
  for (int r = 0; r < rows; ++r) {
    const uint8_t* src = a + (m + r) * lda;
    int16_t* dst = out + r * lda16;
    const int16_t zp = static_cast<int16_t>(a_zp[a_zp_per_row ? m + r : 0]);
    const __m256i vz = _mm256_set1_epi16(zp);
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), _mm256_sub_epi16(_mm256_cvtepu8_epi16(v), vz));
    }
    for (; k < K; ++k) dst[k] = static_cast<int16_t>(src[k] - zp);
    if (K % 2) dst[K] = 0;
  }
}

// C (MR rows x `cols` <= 8 * NB columns) = sum over k of a16 x B16 for one 16-column block bp; or, with rq,
// their requantization into y.
template <int MR, int NB>
__attribute__((target("avx2"))) void I16Tile(const int16_t* a16, int64_t lda16, int64_t K2, const int16_t* bp,
                                             int32_t* c, int64_t ldc, int64_t cols, const Int8Requant* rq, uint8_t* y) {
  __m256i acc[MR][NB];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) acc[r][j] = _mm256_setzero_si256();
  for (int64_t kp = 0; kp < K2; ++kp) {
    __m256i b[NB];
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) b[j] = _mm256_load_si256(reinterpret_cast<const __m256i*>(bp + kp * 32 + j * 16));
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      int32_t pair;
      std::memcpy(&pair, a16 + r * lda16 + kp * 2, 4);
      const __m256i v = _mm256_set1_epi32(pair);
#pragma GCC unroll 8
      for (int j = 0; j < NB; ++j) acc[r][j] = _mm256_add_epi32(acc[r][j], _mm256_madd_epi16(v, b[j]));
    }
  }
  const bool whole = cols == 8 * NB;
  if (rq != nullptr) {  // requantized in registers, as RequantizeColumnsI32
    // The block's bias and multipliers (zero beyond `cols`, where nothing is stored).
    __m256i bias[NB];
    __m256 mult[NB];
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) {
      if (whole) {
        bias[j] = rq->bias != nullptr ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rq->bias + j * 8))
                                      : _mm256_setzero_si256();
        mult[j] = _mm256_loadu_ps(rq->mult + j * 8);
      } else {
        alignas(32) int32_t tb[8] = {};
        alignas(32) float tm[8] = {};
        for (int64_t i = j * 8; i < std::min<int64_t>(cols, j * 8 + 8); ++i) {
          tb[i - j * 8] = rq->bias != nullptr ? rq->bias[i] : 0;
          tm[i - j * 8] = rq->mult[i];
        }
        bias[j] = _mm256_load_si256(reinterpret_cast<const __m256i*>(tb));
        mult[j] = _mm256_load_ps(tm);
      }
    }
    const __m256 lo = _mm256_set1_ps(-kQuantClamp), hi = _mm256_set1_ps(kQuantClamp);
    const __m256i zp = _mm256_set1_epi32(rq->zp);
    const __m256i qlo = _mm256_set1_epi32(rq->to_signed ? -128 : 0);
    const __m256i qhi = _mm256_set1_epi32(rq->to_signed ? 127 : 255);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      __m256i q[2];
#pragma GCC unroll 8
      for (int j = 0; j < NB; ++j) {
        __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(acc[r][j], bias[j])), mult[j]);
        f = _mm256_min_ps(_mm256_max_ps(f, lo), hi);
        const __m256i t = _mm256_add_epi32(_mm256_cvtps_epi32(f), zp);
        q[j] = _mm256_min_epi32(_mm256_max_epi32(t, qlo), qhi);
      }
      if (NB == 1) q[1] = q[0];
      // In range already: the saturating packs keep every value; permute4x64 undoes packs' lane order.
      const __m256i w16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xD8);
      const __m128i l = _mm256_castsi256_si128(w16), h = _mm256_extracti128_si256(w16, 1);
      const __m128i b8 = rq->to_signed ? _mm_packs_epi16(l, h) : _mm_packus_epi16(l, h);
      uint8_t* dst = y + r * rq->ldy;
      if (cols == 16) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), b8);
      } else {
        alignas(16) uint8_t t[16];
        _mm_store_si128(reinterpret_cast<__m128i*>(t), b8);
        std::memcpy(dst, t, cols);
      }
    }
    return;
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    if (whole) {
#pragma GCC unroll 8
      for (int j = 0; j < NB; ++j) _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + r * ldc + j * 8), acc[r][j]);
    } else {
      alignas(32) int32_t t[8 * NB];
#pragma GCC unroll 8
      for (int j = 0; j < NB; ++j) _mm256_store_si256(reinterpret_cast<__m256i*>(t + j * 8), acc[r][j]);
      std::memcpy(c + r * ldc, t, cols * sizeof(int32_t));
    }
  }
}

template <int MR>
void I16Rows(const int16_t* a16, int64_t lda16, int64_t K2, const int16_t* bp, int32_t* c, int64_t ldc, int64_t cols,
             const Int8Requant* rq, uint8_t* y) {
  if (cols > 8) return I16Tile<MR, 2>(a16, lda16, K2, bp, c, ldc, cols, rq, y);
  return I16Tile<MR, 1>(a16, lda16, K2, bp, c, ldc, cols, rq, y);
}

// Rows [m0, m1) x columns [n0, n1) of C (n0 a multiple of 16) on the int16 tiles; with rq, of its y instead.
// Columns go in groups whose B (K x group int16) fits in L2; a group's 6-row panels of A are widened once.
void I16Gemm(const uint8_t* a, int64_t lda, int64_t m0, int64_t m1, int64_t n0, int64_t n1, const Int8Rhs& b,
             const int32_t* a_zp, bool a_zp_per_row, int32_t* c, int64_t ldc, const Int8Requant* rq) {
  constexpr int kRows = 6;
  const int64_t K = b.K, K2 = (K + 1) / 2, lda16 = 2 * K2;
  thread_local std::vector<int16_t> panel;
  if (static_cast<int64_t>(panel.size()) < kRows * lda16) panel.resize(kRows * lda16);
  const int64_t group = std::max<int64_t>(16, (int64_t{256} << 10) / (K2 * 4) / 16 * 16);
  for (int64_t g0 = n0; g0 < n1; g0 += group) {
    const int64_t g1 = std::min(n1, g0 + group);
    for (int64_t m = m0; m < m1; m += kRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kRows, m1 - m));
      WidenRowsAvx2(a, lda, m, rows, K, a_zp, a_zp_per_row, panel.data(), lda16);
      for (int64_t j0 = g0; j0 < g1; j0 += 16) {
        const int64_t cols = std::min<int64_t>(16, g1 - j0);
        const int16_t* bp = b.i16 + (j0 / 16) * K2 * 32;
        Int8Requant tile;  // rq's per-column vectors advanced to column j0
        uint8_t* y = nullptr;
        int32_t* cm = nullptr;
        if (rq != nullptr) {
          tile = *rq;
          tile.mult += j0;
          if (tile.bias != nullptr) tile.bias += j0;
          y = rq->y + m * rq->ldy + j0;
        } else {
          cm = c + m * ldc + j0;
        }
        const Int8Requant* trq = rq != nullptr ? &tile : nullptr;
        const int16_t* p = panel.data();
        switch (rows) {
          case 6: I16Rows<6>(p, lda16, K2, bp, cm, ldc, cols, trq, y); break;
          case 5: I16Rows<5>(p, lda16, K2, bp, cm, ldc, cols, trq, y); break;
          case 4: I16Rows<4>(p, lda16, K2, bp, cm, ldc, cols, trq, y); break;
          case 3: I16Rows<3>(p, lda16, K2, bp, cm, ldc, cols, trq, y); break;
          case 2: I16Rows<2>(p, lda16, K2, bp, cm, ldc, cols, trq, y); break;
          default: I16Rows<1>(p, lda16, K2, bp, cm, ldc, cols, trq, y); break;
        }
      }
    }
  }
}

}  // namespace

Int8Rhs PreparedInt8Rhs(const Tensor& w, bool constant, const std::string& key, int64_t K, int64_t N, int64_t ldk,
                        int64_t ldn, const int32_t* zp, bool zp_per_column,
                        const std::function<const void*(std::vector<uint8_t>* scratch)>& source) {
  const Int8Path path = CurrentInt8Path();
  const bool b_signed = w.dtype() == DType::kI8;
  const int64_t bytes = Int8RhsBytes(K, N, path);
  std::vector<uint8_t> scratch;
  if (constant) {
    // The zero points are part of the prepared values: they are constants of the same node, named by the key.
    std::shared_ptr<DnnlEntry> e = CachedPackedWeights(
        w, absl::StrCat("int8rhs:", reinterpret_cast<uintptr_t>(w.raw()), ":", key, ":", static_cast<int>(path)),
        (bytes + 3) / 4, [&](float* buf) {
          PrepareInt8Rhs(source(&scratch), b_signed, K, N, ldk, ldn, zp, zp_per_column, path,
                         reinterpret_cast<uint8_t*>(buf));
        });
    Int8Rhs r = ViewInt8Rhs(static_cast<const uint8_t*>(e->weights.get_data_handle()), K, N, path);
    r.owner = e;
    return r;
  }
  auto buffer = std::shared_ptr<uint8_t[]>(new uint8_t[bytes]);
  PrepareInt8Rhs(source(&scratch), b_signed, K, N, ldk, ldn, zp, zp_per_column, path, buffer.get());
  Int8Rhs r = ViewInt8Rhs(buffer.get(), K, N, path);
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
  // One block of C: rows [m0, m1) x columns [n0, n1).
  // (No exception may leave an OpenMP region: a failed call is recorded and reported after it.)
  std::atomic<int> failure{dnnl_success};
  const bool i16 = b.i16 != nullptr && CpuHasAvx2();
  const bool own = b.vnni != nullptr && K <= kVnniMaxK && CpuHasAvx512Vnni();
  // Per-column offset -a_zp * colsum(B') (the VNNI kernel's, or oneDNN's row offset) when a_zp is per
  // tensor; the int16 kernel subtracts the zero points itself.
  std::vector<int32_t> co(i16 ? 0 : N, 0);
  if (!i16 && !a_zp_per_row) {
    const int32_t az0 = a_zp[0];
    for (int64_t n = 0; n < N; ++n) co[n] = WrapAdd(0, -static_cast<int64_t>(az0) * b.colsum[n]);
  }
  // Requantized in the kernel when nothing is left to add after the product.
  const Int8Requant* rq = (own && !a_zp_per_row && !b.has_shift) || i16 ? requant : nullptr;
  auto block = [&](int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    if (m1 <= m0 || n1 <= n0) return;
    if (i16) {
      I16Gemm(a, lda, m0, m1, n0, n1, b, a_zp, a_zp_per_row, c, ldc, rq);
      return;
    }
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
  if (i16 || (!a_zp_per_row && !b.has_shift)) return false;
  const int tc = ThreadsForElements(threads, M * (N + K));
  ParallelFor(tc, M, [&](int64_t m) {
    const uint8_t* row = a + m * lda;
    const int32_t az = a_zp_per_row ? a_zp[m] : a_zp[0];
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
