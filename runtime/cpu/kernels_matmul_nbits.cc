// MatMulNBits (com.clusterjit, with the contract of ONNX Runtime's com.microsoft.MatMulNBits, its
// docs/ContribOperators.md): Y [..., N] = A [..., K] * dequant(B)^T (+ bias), B holding W^T [N, K] in
// `bits` (2, 4 or 8) bits per value, blocks of `block_size` values along K with one scale each:
//   W^T[n][k] = (code(n, k) - zero_point(n, k / block_size)) * scale(n, k / block_size)
// codes packed low bits first in B [N, ceil(K / block_size), block_size * bits / 8]; zero points absent
// (2^(bits-1)), uint8 packed the same way per row of blocks ([N * ceil(blocks * bits / 8)]), or float32
// [N * blocks]. Products run in float32: the columns of W^T are dequantized per tile of columns into a
// thread's buffer and multiplied by BLIS (runtime/cpu/gemm.h), so the weights stay in bits/32 of their
// float32 memory and memory-bound products (few rows of A) read that much less.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ir/cpu_isa.h"
#include "base/status_macros.h"
#include "runtime/cpu/box_copy.h"
#include "runtime/cpu/conv_gemm.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/quant_rows.h"

// GCC 12 reports its own intrinsics headers (_mm512_undefined_*) as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace cjit {
namespace {

constexpr int64_t kMinColumnTile = 64;
constexpr int64_t kMatrixVectorRows = 4;
constexpr int64_t kPanelColumns = 64;              // conv_kernels.h's kPanelWidth
constexpr int64_t kTileFloats = int64_t{1} << 19;  // 2 MiB of dequantized weights per thread

struct NBitsLayout {
  int64_t K = 0, N = 0, bits = 0, block = 0, blocks = 0, blob = 0, zp_row = 0;
  const uint8_t* b = nullptr;
  const float* scales = nullptr;
  const uint8_t* zp_packed = nullptr;  // or
  const float* zp_float = nullptr;     // or neither: 2^(bits-1)
};

// Zero point of column n, block b (uint8 packed or default; not for float zero points).
inline int32_t CodeZeroPoint(const NBitsLayout& l, int64_t n, int64_t b) {
  if (l.zp_packed == nullptr) return 1 << (l.bits - 1);
  const int64_t bit = b * l.bits;
  return (l.zp_packed[n * l.zp_row + bit / 8] >> (bit % 8)) & ((1 << l.bits) - 1);
}

// DequantizeColumn for 4-bit codes with integer zero points: the nibbles unpacked 16 per step into k order
// (block_size is a multiple of 16), without the per-block copy of the codes; float(code - zp) * scale
// exactly as the scalar definition.
__attribute__((target("avx2,fma"))) void DequantizeColumn4BitAvx2(const NBitsLayout& l, int64_t n, float* out) {
  const __m256i low4 = _mm256_set1_epi32(15);
  for (int64_t b = 0; b < l.blocks; ++b) {
    const uint8_t* blob = l.b + (n * l.blocks + b) * l.blob;
    const int64_t k0 = b * l.block, count = std::min(l.block, l.K - k0);
    const int32_t z = CodeZeroPoint(l, n, b);
    const float sc = l.scales[n * l.blocks + b];
    float* o = out + k0;
    const __m256 scale = _mm256_set1_ps(sc);
    const __m256i zp = _mm256_set1_epi32(z);
    // 16 codes from 8 bytes: even k in the low nibbles. Interleave low/high nibbles back into k order.
    int64_t i = 0;
    for (; i + 16 <= count; i += 16) {
      const __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blob + i / 2)));
      const __m256i lo = _mm256_and_si256(bytes, low4), hi = _mm256_srli_epi32(bytes, 4);
      // lo = codes k = 0,2,4,..,14; hi = 1,3,..,15 -> interleave.
      const __m256i a = _mm256_unpacklo_epi32(lo, hi), c = _mm256_unpackhi_epi32(lo, hi);
      const __m256i first = _mm256_permute2x128_si256(a, c, 0x20), second = _mm256_permute2x128_si256(a, c, 0x31);
      _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(first, zp)), scale));
      _mm256_storeu_ps(o + i + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(second, zp)), scale));
    }
    for (; i < count; ++i) o[i] = static_cast<float>(((blob[i / 2] >> (4 * (i % 2))) & 15) - z) * sc;
  }
}

// sum_k a[k] * b[k] over 32-float steps in four accumulators, then the tail.
__attribute__((target("avx2,fma"))) float DotAvx2(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  const __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  float r = _mm_cvtss_f32(h);
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

// out[m] = sum_k a[m][k] * W^T[n][k] for M <= 4 rows of `a` (rows `lda` floats apart, padded with zeros
// to whole blocks; for 4-bit codes each 16 values of a row ordered even k first, then odd k, the order of
// a byte's low and high nibbles), with 8- or 4-bit codes and integer zero points: code - zero point in
// int32, converted and multiplied with the rows in 8 lanes, each block's sums scaled once. No dequantized
// copy of the column is written.
template <int M>
__attribute__((target("avx2,fma"))) void ColumnDotsAvx2(const NBitsLayout& l, int64_t n, const float* a,
                                                       int64_t lda, float* out) {
  __m256 acc[M], blk[M];
  for (int m = 0; m < M; ++m) acc[m] = _mm256_setzero_ps();
  const __m256i low4 = _mm256_set1_epi32(15);
  for (int64_t b = 0; b < l.blocks; ++b) {
    const uint8_t* blob = l.b + (n * l.blocks + b) * l.blob;
    const __m256i zp = _mm256_set1_epi32(CodeZeroPoint(l, n, b));
    const float* ak = a + b * l.block;
    for (int m = 0; m < M; ++m) blk[m] = _mm256_setzero_ps();
    if (l.bits == 8) {
      for (int64_t i = 0; i < l.block; i += 8) {
        const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blob + i)));
        const __m256 w = _mm256_cvtepi32_ps(_mm256_sub_epi32(c, zp));
        for (int m = 0; m < M; ++m) blk[m] = _mm256_fmadd_ps(w, _mm256_loadu_ps(ak + m * lda + i), blk[m]);
      }
    } else {
      for (int64_t i = 0; i < l.block; i += 16) {
        const __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blob + i / 2)));
        const __m256 lo = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(bytes, low4), zp));
        const __m256 hi = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(bytes, 4), zp));
        for (int m = 0; m < M; ++m) {
          blk[m] = _mm256_fmadd_ps(lo, _mm256_loadu_ps(ak + m * lda + i), blk[m]);
          blk[m] = _mm256_fmadd_ps(hi, _mm256_loadu_ps(ak + m * lda + i + 8), blk[m]);
        }
      }
    }
    const __m256 sv = _mm256_set1_ps(l.scales[n * l.blocks + b]);
    for (int m = 0; m < M; ++m) acc[m] = _mm256_fmadd_ps(blk[m], sv, acc[m]);
  }
  for (int m = 0; m < M; ++m) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc[m]), _mm256_extractf128_ps(acc[m], 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    out[m] = _mm_cvtss_f32(h);
  }
}

// ColumnDotsAvx2 at 16 lanes (AVX-512 F + BW): 8-bit codes 16 per step; 4-bit codes 32 per step (16 bytes:
// even k in the low nibbles), so the rows of `a` are ordered per 32 values even k first, then odd k, and
// block_size must be a multiple of 32.
template <int M>
__attribute__((target("avx512f,avx512bw"))) void ColumnDotsAvx512(const NBitsLayout& l, int64_t n, const float* a,
                                                                 int64_t lda, float* out) {
  __m512 acc[M], blk[M];
  for (int m = 0; m < M; ++m) acc[m] = _mm512_setzero_ps();
  const __m512i low4 = _mm512_set1_epi32(15);
  for (int64_t b = 0; b < l.blocks; ++b) {
    const uint8_t* blob = l.b + (n * l.blocks + b) * l.blob;
    const __m512i zp = _mm512_set1_epi32(CodeZeroPoint(l, n, b));
    const float* ak = a + b * l.block;
    for (int m = 0; m < M; ++m) blk[m] = _mm512_setzero_ps();
    if (l.bits == 8) {
      for (int64_t i = 0; i < l.block; i += 16) {
        const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blob + i)));
        const __m512 w = _mm512_cvtepi32_ps(_mm512_sub_epi32(c, zp));
        for (int m = 0; m < M; ++m) blk[m] = _mm512_fmadd_ps(w, _mm512_loadu_ps(ak + m * lda + i), blk[m]);
      }
    } else {
      for (int64_t i = 0; i < l.block; i += 32) {
        const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blob + i / 2)));
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(bytes, low4), zp));
        const __m512 hi = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(bytes, 4), zp));
        for (int m = 0; m < M; ++m) {
          blk[m] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(ak + m * lda + i), blk[m]);
          blk[m] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(ak + m * lda + i + 16), blk[m]);
        }
      }
    }
    const __m512 sv = _mm512_set1_ps(l.scales[n * l.blocks + b]);
    for (int m = 0; m < M; ++m) acc[m] = _mm512_fmadd_ps(blk[m], sv, acc[m]);
  }
  for (int m = 0; m < M; ++m) out[m] = _mm512_reduce_add_ps(acc[m]);
}

// Column n of W^T (K floats) into `out`; `codes` is a scratch row of block_size bytes.
void DequantizeColumn(const NBitsLayout& l, int64_t n, uint8_t* codes, float* out) {
  for (int64_t b = 0; b < l.blocks; ++b) {
    const uint8_t* blob = l.b + (n * l.blocks + b) * l.blob;
    const int64_t k0 = b * l.block, count = std::min(l.block, l.K - k0);
    const float scale = l.scales[n * l.blocks + b];
    const uint8_t* c = blob;
    if (l.bits == 4) {
      for (int64_t i = 0; i < l.blob; ++i) {
        codes[2 * i] = blob[i] & 15;
        codes[2 * i + 1] = blob[i] >> 4;
      }
      c = codes;
    } else if (l.bits == 2) {
      for (int64_t i = 0; i < l.block; ++i) codes[i] = (blob[i / 4] >> (2 * (i % 4))) & 3;
      c = codes;
    }
    if (l.zp_float != nullptr) {
      const float zp = l.zp_float[n * l.blocks + b];
      for (int64_t i = 0; i < count; ++i) out[k0 + i] = (static_cast<float>(c[i]) - zp) * scale;
      continue;
    }
    DequantizeRowF32(c, false, count, CodeZeroPoint(l, n, b), scale, out + k0);
  }
}

// The fastest DequantizeColumn for the layout on this CPU.
void DequantizeColumnFast(const NBitsLayout& l, int64_t n, uint8_t* codes, float* out) {
  if (l.bits == 4 && l.zp_float == nullptr && CpuHasAvx2()) {
    DequantizeColumn4BitAvx2(l, n, out);
  } else {
    DequantizeColumn(l, n, codes, out);
  }
}

absl::Status MatMulNBitsKernel(KernelContext& ctx) {
  const Node& node = *ctx.node;
  NBitsLayout l;
  l.K = node.GetInt("K", 0);
  l.N = node.GetInt("N", 0);
  l.bits = node.GetInt("bits", 4);
  l.block = node.GetInt("block_size", 0);
  constexpr int64_t kMaxDim = (int64_t{1} << 31) - 1;
  if (l.K < 1 || l.N < 1 || l.K > kMaxDim || l.N > kMaxDim || (l.bits != 2 && l.bits != 4 && l.bits != 8) ||
      l.block < 16 || l.block > 65536 || (l.block & (l.block - 1)) != 0) {
    return ctx.Error(absl::StrCat("needs 1 <= K, N < 2^31, bits 2, 4 or 8 and a power-of-two block_size in [16, "
                                  "65536]; got K=", l.K, " N=", l.N, " bits=", l.bits, " block_size=", l.block));
  }
  l.blocks = (l.K + l.block - 1) / l.block;
  l.blob = l.block * l.bits / 8;
  l.zp_row = (l.blocks * l.bits + 7) / 8;
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  const Tensor& s = ctx.in(2);
  if (a.dtype() != DType::kF32 || a.rank() < 1 || a.dims().back() != l.K) {
    return ctx.Error(absl::StrCat("A must be float32 [..., K=", l.K, "]"));
  }
  if (b.dtype() != DType::kU8 || b.dims() != Dims{l.N, l.blocks, l.blob}) {
    return ctx.Error(absl::StrCat("B must be uint8 [", l.N, ", ", l.blocks, ", ", l.blob, "]"));
  }
  if (s.dtype() != DType::kF32 || s.numel() != l.N * l.blocks) {
    return ctx.Error(absl::StrCat("scales must be float32 with ", l.N * l.blocks, " values"));
  }
  l.b = b.data<uint8_t>();
  l.scales = s.data<float>();
  if (ctx.has(3)) {
    const Tensor& z = ctx.in(3);
    if (z.dtype() == DType::kU8 && z.numel() == l.N * l.zp_row) {
      l.zp_packed = z.data<uint8_t>();
    } else if (z.dtype() == DType::kF32 && z.numel() == l.N * l.blocks) {
      l.zp_float = z.data<float>();
    } else {
      return ctx.Error(absl::StrCat("zero_points must be uint8 with ", l.N * l.zp_row, " values or float32 with ",
                                    l.N * l.blocks));
    }
  }
  if (ctx.has(4)) return ctx.Error("g_idx (act_order) is not supported");
  const float* bias = nullptr;
  if (ctx.has(5)) {
    const Tensor& t = ctx.in(5);
    if (t.dtype() != DType::kF32 || t.numel() != l.N)
      return ctx.Error(absl::StrCat("bias must be float32 [", l.N, "]"));
    bias = t.data<float>();
  }
  Dims ydims = a.dims();
  ydims.back() = l.N;
  Tensor& y = ctx.Alloc(0, DType::kF32, ydims);
  const int64_t M = a.numel() / l.K;
  if (M == 0) return absl::OkStatus();
  const float* ad = a.data<float>();
  float* yd = y.data<float>();
  if (M <= kMatrixVectorRows && CpuHasAvx2()) {
    // Matrix-vector products (a decoder's token step): memory-bound on the weights, which are read once,
    // in their packed bits: 8- and 4-bit codes with integer zero points are converted in registers and
    // dotted with the few rows of A (ColumnDotsAvx2); other formats through an L1 buffer per column.
    const int64_t chunks = (l.N + kPanelColumns - 1) / kPanelColumns;
    const int threads = static_cast<int>(std::min<int64_t>(ThreadsForElements(ctx.threads, l.K * l.N / 4), chunks));
    if ((l.bits == 8 || l.bits == 4) && l.zp_float == nullptr) {
      // The rows of A padded to whole blocks (4-bit: each `group` values even k first, as the nibbles: 16
      // for the AVX2 kernel, 32 for the AVX-512 one).
      const bool wide = CpuHasAvx512() && (l.bits == 8 || l.block % 32 == 0);
      const int64_t group = wide ? 32 : 16;
      const int64_t kp = l.blocks * l.block;
      std::vector<float> ap(static_cast<size_t>(M * kp), 0.0f);
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t k = 0; k < l.K; ++k) {
          const int64_t at = l.bits == 8 ? k : k / group * group + (k % 2) * (group / 2) + (k % group) / 2;
          ap[m * kp + at] = ad[m * l.K + k];
        }
      }
      ParallelFor(threads, chunks, [&](int64_t c) {
        float dots[kMatrixVectorRows];
        for (int64_t n = c * kPanelColumns; n < std::min(l.N, (c + 1) * kPanelColumns); ++n) {
          switch (M * 2 + (wide ? 1 : 0)) {
            case 2: ColumnDotsAvx2<1>(l, n, ap.data(), kp, dots); break;
            case 3: ColumnDotsAvx512<1>(l, n, ap.data(), kp, dots); break;
            case 4: ColumnDotsAvx2<2>(l, n, ap.data(), kp, dots); break;
            case 5: ColumnDotsAvx512<2>(l, n, ap.data(), kp, dots); break;
            case 6: ColumnDotsAvx2<3>(l, n, ap.data(), kp, dots); break;
            case 7: ColumnDotsAvx512<3>(l, n, ap.data(), kp, dots); break;
            case 8: ColumnDotsAvx2<4>(l, n, ap.data(), kp, dots); break;
            default: ColumnDotsAvx512<4>(l, n, ap.data(), kp, dots); break;
          }
          for (int64_t m = 0; m < M; ++m) yd[m * l.N + n] = dots[m] + (bias != nullptr ? bias[n] : 0.0f);
        }
      });
      return absl::OkStatus();
    }
    ParallelFor(threads, chunks, [&](int64_t c) {
      thread_local std::vector<float> column;
      thread_local std::vector<uint8_t> codes;
      column.resize(static_cast<size_t>(l.K));
      codes.resize(static_cast<size_t>(l.block));
      for (int64_t n = c * kPanelColumns; n < std::min(l.N, (c + 1) * kPanelColumns); ++n) {
        DequantizeColumnFast(l, n, codes.data(), column.data());
        for (int64_t m = 0; m < M; ++m) {
          yd[m * l.N + n] = DotAvx2(ad + m * l.K, column.data(), l.K) + (bias != nullptr ? bias[n] : 0.0f);
        }
      }
    });
    return absl::OkStatus();
  }
  if (CpuHasPanelLoop() && l.N % 8 == 0) {
    // Per panel of 64 columns: W^T's columns dequantized ([nr, K]), transposed into the panel layout of
    // the pointwise-convolution loop ([K, nr], what a float32 MatMul with constant weights runs on), and
    // multiplied while in L2; the weights are read once, in their packed bits.
    const int64_t groups = (l.N + kPanelColumns - 1) / kPanelColumns;
    const double work = static_cast<double>(M + 8) * l.K * l.N;
    ParallelFor(std::min<int64_t>(ThreadsForWork(ctx.threads, work), groups), groups, [&](int64_t q) {
      thread_local std::vector<float> columns, panel;
      thread_local std::vector<uint8_t> codes;
      const int64_t n0 = q * kPanelColumns, nr = std::min(kPanelColumns, l.N - n0);
      columns.resize(static_cast<size_t>(nr * l.K));
      panel.resize(static_cast<size_t>(nr * l.K));
      codes.resize(static_cast<size_t>(l.block));
      for (int64_t j = 0; j < nr; ++j) DequantizeColumnFast(l, n0 + j, codes.data(), columns.data() + j * l.K);
      BatchedTranspose(columns.data(), panel.data(), sizeof(float), 1, nr, l.K, 1);
      PanelMultiplyOne(panel.data(), n0, ad, M, l.K, l.N, bias, yd);
    });
    return absl::OkStatus();
  }
  // Tiles of columns as wide as a buffer of kTileFloats allows (each tile's GEMM packs all of A again:
  // 64-column tiles spent more time packing A than multiplying at 128 rows), at least one per thread.
  const int threads = ThreadsForWork(ctx.threads, static_cast<double>(M + 8) * l.K * l.N);
  int64_t width = std::max(kMinColumnTile, kTileFloats / l.K);
  width = std::min(width, (l.N + threads - 1) / threads);
  width = std::max<int64_t>(16, (width + 15) / 16 * 16);
  const int64_t tiles = (l.N + width - 1) / width;
  bool ok = true;
  ParallelFor(std::min<int64_t>(threads, tiles), tiles, [&](int64_t t) {
    thread_local std::vector<float> wt;
    thread_local std::vector<uint8_t> codes;
    const int64_t n0 = t * width, nt = std::min(width, l.N - n0);
    wt.resize(static_cast<size_t>(nt * l.K));
    codes.resize(static_cast<size_t>(l.block));
    for (int64_t j = 0; j < nt; ++j) DequantizeColumnFast(l, n0 + j, codes.data(), wt.data() + j * l.K);
    // Y[:, n0:n0+nt] = A [M, K] * wt^T ([nt, K] row-major).
    if (!Sgemm(false, true, M, nt, l.K, 1.0f, ad, l.K, wt.data(), l.K, 0.0f, yd + n0, l.N)) ok = false;
    if (bias != nullptr) {
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t j = 0; j < nt; ++j) yd[m * l.N + n0 + j] += bias[n0 + j];
      }
    }
  });
  if (!ok) return ctx.Error("GEMM rejected its arguments");
  return absl::OkStatus();
}

}  // namespace

void RegisterMatMulNBitsKernel() { RegisterKernel("MatMulNBits", MatMulNBitsKernel); }

}  // namespace cjit
