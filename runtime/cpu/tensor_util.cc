// The tensor helpers of tensor_util.h (Transpose in 16 x 16 tiles, strided copies, Concat along an axis,
// batched MatMul geometry, StoreDoubles) and BatchedTranspose (box_copy.h).
#include "runtime/cpu/tensor_util.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
// GCC 12 reports its own intrinsics headers (_mm512_undefined_*) as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/ir/cpu_isa.h"
#include "compiler/ir/numeric_cast.h"
#include "runtime/cpu/box_copy.h"
#include "runtime/cpu/dispatch.h"
#include "runtime/cpu/parallel.h"

namespace cjit {

namespace {

#if defined(__x86_64__)
// One tile of a 4-byte transpose, y[c * ldy + r] = x[r * ldx + c] for r < nr, c < nc (both <= 16), in
// AVX-512 registers: 16 masked row loads, the 16 x 16 transpose in four shuffle stages (32-bit, 64-bit
// unpacks within 128-bit lanes, then two 128-bit lane shuffles), nc masked stores of nr elements. Partial
// tiles (a 3-channel image's NCHW -> NHWC has nr = 3) use the same path through the masks.
__attribute__((target("avx512f"))) void TransposeTile16Avx512(const uint32_t* x, int64_t ldx, uint32_t* y,
                                                             int64_t ldy, int64_t nr, int64_t nc) {
  const __mmask16 cols = static_cast<__mmask16>((1u << nc) - 1), rows = static_cast<__mmask16>((1u << nr) - 1);
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) {
    r[i] = i < nr ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi32(cols, x + i * ldx)) : _mm512_setzero_ps();
  }
  // Within each 128-bit lane L (columns 4L..4L+3): pairs of rows, then quads of rows: s[4q + k] holds
  // column 4L + k of rows 4q..4q+3.
  for (int q = 0; q < 4; ++q) {
    const __m512 lo01 = _mm512_unpacklo_ps(r[4 * q], r[4 * q + 1]), hi01 = _mm512_unpackhi_ps(r[4 * q], r[4 * q + 1]);
    const __m512 lo23 = _mm512_unpacklo_ps(r[4 * q + 2], r[4 * q + 3]),
                 hi23 = _mm512_unpackhi_ps(r[4 * q + 2], r[4 * q + 3]);
    t[4 * q + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(lo01), _mm512_castps_pd(lo23)));
    t[4 * q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(lo01), _mm512_castps_pd(lo23)));
    t[4 * q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(hi01), _mm512_castps_pd(hi23)));
    t[4 * q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(hi01), _mm512_castps_pd(hi23)));
  }
  // Lanes: u[k] / u[k + 4] (k < 4) hold columns k, k + 8 / k + 4, k + 12 of rows 0-7; u[8 + ...] rows 8-15.
  __m512 u[16];
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 4; ++k) {
      u[8 * h + k] = _mm512_shuffle_f32x4(t[8 * h + k], t[8 * h + 4 + k], 0x88);
      u[8 * h + 4 + k] = _mm512_shuffle_f32x4(t[8 * h + k], t[8 * h + 4 + k], 0xdd);
    }
  for (int c = 0; c < 8; ++c) {
    if (c < nc) {
      _mm512_mask_storeu_epi32(y + c * ldy, rows, _mm512_castps_si512(_mm512_shuffle_f32x4(u[c], u[c + 8], 0x88)));
    }
    if (c + 8 < nc) {
      _mm512_mask_storeu_epi32(y + (c + 8) * ldy, rows,
                               _mm512_castps_si512(_mm512_shuffle_f32x4(u[c], u[c + 8], 0xdd)));
    }
  }
}

// A full 8 x 8 tile of a 4-byte transpose, y[c * ldy + r] = x[r * ldx + c], in AVX2 registers (the
// classic unpack / shuffle / 128-bit permute network); CPUs without AVX-512 (AVX2-only EPYC Zen 2/3) take
// this path for the NCHW <-> NHWC transposes of the layout pass.
__attribute__((target("avx2"))) void TransposeTile8Avx2(const uint32_t* x, int64_t ldx, uint32_t* y, int64_t ldy) {
  __m256 r0 = _mm256_loadu_ps(reinterpret_cast<const float*>(x + 0 * ldx));
  __m256 r1 = _mm256_loadu_ps(reinterpret_cast<const float*>(x + 1 * ldx));
  __m256 r2 = _mm256_loadu_ps(reinterpret_cast<const float*>(x + 2 * ldx));
  __m256 r3 = _mm256_loadu_ps(reinterpret_cast<const float*>(x + 3 * ldx));
  __m256 r4 = _mm256_loadu_ps(reinterpret_cast<const float*>(x + 4 * ldx));
  __m256 r5 = _mm256_loadu_ps(reinterpret_cast<const float*>(x + 5 * ldx));
  __m256 r6 = _mm256_loadu_ps(reinterpret_cast<const float*>(x + 6 * ldx));
  __m256 r7 = _mm256_loadu_ps(reinterpret_cast<const float*>(x + 7 * ldx));
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  float* yf = reinterpret_cast<float*>(y);
  _mm256_storeu_ps(yf + 0 * ldy, _mm256_permute2f128_ps(s0, s4, 0x20));
  _mm256_storeu_ps(yf + 1 * ldy, _mm256_permute2f128_ps(s1, s5, 0x20));
  _mm256_storeu_ps(yf + 2 * ldy, _mm256_permute2f128_ps(s2, s6, 0x20));
  _mm256_storeu_ps(yf + 3 * ldy, _mm256_permute2f128_ps(s3, s7, 0x20));
  _mm256_storeu_ps(yf + 4 * ldy, _mm256_permute2f128_ps(s0, s4, 0x31));
  _mm256_storeu_ps(yf + 5 * ldy, _mm256_permute2f128_ps(s1, s5, 0x31));
  _mm256_storeu_ps(yf + 6 * ldy, _mm256_permute2f128_ps(s2, s6, 0x31));
  _mm256_storeu_ps(yf + 7 * ldy, _mm256_permute2f128_ps(s3, s7, 0x31));
}

// rows (2-4) interleaved: y[j * rows + i] = x[i * ldx + j] for j < n — the NCHW -> NHWC transpose of a
// 2-4 channel image (an RGB network input). Per 16 columns: `rows` loads, `rows` outputs of 16 elements
// built by two-source permutes and a blend (element e of output v is column (16v + e) / rows of row
// (16v + e) % rows), contiguous stores; a 16 x 16 tile with 3 live rows would need 16 masked stores.
__attribute__((target("avx512f"))) void InterleaveRowsAvx512(const uint32_t* x, int64_t ldx, uint32_t* y, int64_t rows,
                                                            int64_t n) {
  alignas(64) int32_t idx_lo[4][16], idx_hi[4][16];
  __mmask16 high[4];
  for (int v = 0; v < rows; ++v) {
    high[v] = 0;
    for (int e = 0; e < 16; ++e) {
      const int g = 16 * v + e, j = g / static_cast<int>(rows), i = g % static_cast<int>(rows);
      idx_lo[v][e] = i == 1 ? 16 + j : j;
      idx_hi[v][e] = i == 3 ? 16 + j : j;
      if (i >= 2) high[v] = static_cast<__mmask16>(high[v] | (1u << e));
    }
  }
  for (int64_t j0 = 0; j0 < n; j0 += 16) {
    const int64_t m = std::min<int64_t>(16, n - j0);
    const __mmask16 load = static_cast<__mmask16>((1u << m) - 1);
    __m512i r[4];
    for (int i = 0; i < 4; ++i)
      r[i] = i < rows ? _mm512_maskz_loadu_epi32(load, x + i * ldx + j0) : _mm512_setzero_si512();
    uint32_t* out = y + j0 * rows;
    const int64_t total = m * rows;
    for (int v = 0; v < rows && 16 * v < total; ++v) {
      const __m512i lo = _mm512_permutex2var_epi32(r[0], _mm512_load_si512(idx_lo[v]), r[1]);
      const __m512i hi = _mm512_permutex2var_epi32(r[2], _mm512_load_si512(idx_hi[v]), r[3]);
      const __m512i o = _mm512_mask_blend_epi32(high[v], lo, hi);
      const int64_t left = total - 16 * v;
      if (left >= 16) {
        _mm512_storeu_si512(out + 16 * v, o);
      } else {
        _mm512_mask_storeu_epi32(out + 16 * v, static_cast<__mmask16>((1u << left) - 1), o);
      }
    }
  }
}
// InterleaveRowsAvx512 for CPUs without AVX-512 (AVX2-only EPYC Zen 2/3): per 8 columns, `rows` loads and
// `rows` outputs of 8 elements, each the blend of one in-lane-crossing permute per row (element e of output
// v is column (8v + e) / rows of row (8v + e) % rows); the columns past the last multiple of 8 one by one.
// The 16 x 16 tiles below ran a 3-channel 224 x 224 float image element by element (213 us on a Zen 3).
__attribute__((target("avx2"))) void InterleaveRowsAvx2(const uint32_t* x, int64_t ldx, uint32_t* y, int64_t rows,
                                                        int64_t n) {
  __m256i idx[4], pick[4][4];
  for (int v = 0; v < rows; ++v) {
    alignas(32) int32_t col[8], lane[4][8];
    for (int e = 0; e < 8; ++e) {
      const int g = 8 * v + e, i = g % static_cast<int>(rows);
      col[e] = g / static_cast<int>(rows);
      for (int r = 0; r < 4; ++r) lane[r][e] = i == r ? -1 : 0;
    }
    idx[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(col));
    for (int r = 0; r < 4; ++r) pick[v][r] = _mm256_load_si256(reinterpret_cast<const __m256i*>(lane[r]));
  }
  int64_t j0 = 0;
  for (; j0 + 8 <= n; j0 += 8) {
    __m256i r[4];
    for (int i = 0; i < rows; ++i) r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i * ldx + j0));
    uint32_t* out = y + j0 * rows;
    for (int v = 0; v < rows; ++v) {
      __m256i o = _mm256_permutevar8x32_epi32(r[0], idx[v]);
      for (int i = 1; i < rows; ++i) o = _mm256_blendv_epi8(o, _mm256_permutevar8x32_epi32(r[i], idx[v]), pick[v][i]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 8 * v), o);
    }
  }
  for (; j0 < n; ++j0)
    for (int64_t i = 0; i < rows; ++i) y[j0 * rows + i] = x[i * ldx + j0];
}

// A full 16 x 16 tile of a 1-byte transpose, y[c * ldy + r] = x[r * ldx + c], in SSE2 registers (baseline
// x86-64): four rounds of unpacks merge rows in pairs, quads, octets and halves (8-bit, 16-bit, 32-bit,
// 64-bit lanes), leaving one column per register. The uint8 NCHW <-> NHWC transposes of the quantized
// convolutions (a 64 x 3136 image: 16% of a QLinearConv element by element).
void TransposeTile16Bytes(const uint8_t* x, int64_t ldx, uint8_t* y, int64_t ldy) {
  __m128i a[16], b[16], c[16], d[16];
  for (int r = 0; r < 16; ++r) a[r] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + r * ldx));
  for (int k = 0; k < 8; ++k) {
    b[k] = _mm_unpacklo_epi8(a[2 * k], a[2 * k + 1]);
    b[k + 8] = _mm_unpackhi_epi8(a[2 * k], a[2 * k + 1]);
  }
  for (int h = 0; h < 2; ++h)
    for (int m = 0; m < 4; ++m) {
      c[h * 8 + m] = _mm_unpacklo_epi16(b[h * 8 + 2 * m], b[h * 8 + 2 * m + 1]);
      c[h * 8 + 4 + m] = _mm_unpackhi_epi16(b[h * 8 + 2 * m], b[h * 8 + 2 * m + 1]);
    }
  for (int q = 0; q < 4; ++q)
    for (int o = 0; o < 2; ++o) {
      d[q * 4 + o] = _mm_unpacklo_epi32(c[q * 4 + 2 * o], c[q * 4 + 2 * o + 1]);
      d[q * 4 + 2 + o] = _mm_unpackhi_epi32(c[q * 4 + 2 * o], c[q * 4 + 2 * o + 1]);
    }
  for (int e = 0; e < 8; ++e) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + (2 * e) * ldy), _mm_unpacklo_epi64(d[2 * e], d[2 * e + 1]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + (2 * e + 1) * ldy), _mm_unpackhi_epi64(d[2 * e], d[2 * e + 1]));
  }
}
#endif

// y[b][j][i] = x[b][i][j] for x [batch, rows, cols], in tiles of 16 x 16 (the layout transposes between
// NCHW and NHWC: [C, HW] <-> [HW, C] per image): 4-byte elements in AVX-512 registers where the CPU has
// them (a 3 x 9216 image 16.5 -> ~4 us), else element by element within the tile.
template <typename T>
void BatchedTranspose2D(const T* x, T* y, int64_t batch, int64_t rows, int64_t cols, int threads) {
  constexpr int64_t kTile = 16;
  int64_t row_tiles = (rows + kTile - 1) / kTile, col_tiles = (cols + kTile - 1) / kTile;
  int64_t tiles = batch * row_tiles * col_tiles;
  int nt = ThreadsForElements(threads, batch * rows * cols);
#if defined(__x86_64__)
  const bool avx512 = CpuHasAvx512();
  const bool avx2 = CpuHasAvx2();
  const bool vector = sizeof(T) == 4 && avx512;
  const bool vector8 = sizeof(T) == 4 && !avx512 && avx2;
#else
  const bool vector = false;
#endif
#if defined(__x86_64__)
  if (vector && rows >= 2 && rows <= 4) {
    // Whole 2-4 channel planes interleaved, in blocks of columns (a multiple of 16) per thread.
    const int64_t block = 4096, blocks = (cols + block - 1) / block;
    ParallelFor(nt, batch * blocks, [&](int64_t w) {
      const int64_t b = w / blocks, j0 = (w % blocks) * block, n = std::min(block, cols - j0);
      InterleaveRowsAvx512(reinterpret_cast<const uint32_t*>(x + b * rows * cols + j0), cols,
                           reinterpret_cast<uint32_t*>(y + b * rows * cols + j0 * rows), rows, n);
    });
    return;
  }
  if (vector8 && rows >= 2 && rows <= 4) {
    const int64_t block = 4096, blocks = (cols + block - 1) / block;
    ParallelFor(nt, batch * blocks, [&](int64_t w) {
      const int64_t b = w / blocks, j0 = (w % blocks) * block, n = std::min(block, cols - j0);
      InterleaveRowsAvx2(reinterpret_cast<const uint32_t*>(x + b * rows * cols + j0), cols,
                         reinterpret_cast<uint32_t*>(y + b * rows * cols + j0 * rows), rows, n);
    });
    return;
  }
#endif
  if (sizeof(T) <= 2 && rows >= 2 && rows <= 4) {
    // 2-4 planes of bytes or 16-bit values interleaved (an image's 3 channels to channels-last): the tiles
    // below would run element by element with 3 of their 16 rows (a uint8 3 x 224 x 224 image took 160 us).
    const int64_t block = 8192, blocks = (cols + block - 1) / block;
    auto interleave = [&](auto planes) {
      constexpr int64_t R = decltype(planes)::value;
      ParallelFor(nt, batch * blocks, [&](int64_t w) {
        const int64_t b = w / blocks, j0 = (w % blocks) * block, j1 = std::min(cols, j0 + block);
        const T* xb = x + b * rows * cols;
        T* yb = y + b * rows * cols;
        for (int64_t j = j0; j < j1; ++j) {
          for (int64_t i = 0; i < R; ++i) yb[j * R + i] = xb[i * cols + j];
        }
      });
    };
    if (rows == 2) interleave(std::integral_constant<int64_t, 2>());
    else if (rows == 3) interleave(std::integral_constant<int64_t, 3>());
    else interleave(std::integral_constant<int64_t, 4>());
    return;
  }
  // Tile order: panels of kPanel column tiles, each walked row tile by row tile: reads are 16 rows x 1 KiB
  // (streams the prefetcher follows), writes 256 rows x 64 bytes. Along whole row blocks, a 128 x 12544
  // (NCHW -> NHWC of 128 x 112 x 112) transpose ran at 8 GB/s (1.6 ms; 0.49 ms in panels).
  constexpr int64_t kPanel = 16;
  ParallelFor(nt, tiles, [&](int64_t t) {
    const int64_t b = t / (row_tiles * col_tiles), w = t % (row_tiles * col_tiles);
    const int64_t panel = w / (row_tiles * kPanel), in_panel = w % (row_tiles * kPanel);
    const int64_t width = std::min(kPanel, col_tiles - panel * kPanel);  // the last panel may be narrower
    const int64_t rt = in_panel / width, ct = panel * kPanel + in_panel % width;
    const T* xb = x + b * rows * cols;
    T* yb = y + b * rows * cols;
    int64_t i0 = rt * kTile, j0 = ct * kTile, i1 = std::min(rows, i0 + kTile), j1 = std::min(cols, j0 + kTile);
#if defined(__x86_64__)
    if (vector) {
      TransposeTile16Avx512(reinterpret_cast<const uint32_t*>(xb + i0 * cols + j0), cols,
                            reinterpret_cast<uint32_t*>(yb + j0 * rows + i0), rows, i1 - i0, j1 - j0);
      return;
    }
    if (sizeof(T) == 1 && i1 - i0 == kTile && j1 - j0 == kTile) {
      TransposeTile16Bytes(reinterpret_cast<const uint8_t*>(xb + i0 * cols + j0), cols,
                           reinterpret_cast<uint8_t*>(yb + j0 * rows + i0), rows);
      return;
    }
    if (vector8) {
      // Four 8 x 8 register tiles per 16 x 16 tile where they are whole; the ragged edges element by element.
      for (int64_t a = i0; a < i1; a += 8)
        for (int64_t b = j0; b < j1; b += 8) {
          if (a + 8 <= i1 && b + 8 <= j1) {
            TransposeTile8Avx2(reinterpret_cast<const uint32_t*>(xb + a * cols + b), cols,
                               reinterpret_cast<uint32_t*>(yb + b * rows + a), rows);
          } else {
            for (int64_t j = b; j < std::min(j1, b + 8); ++j)
              for (int64_t i = a; i < std::min(i1, a + 8); ++i) yb[j * rows + i] = xb[i * cols + j];
          }
        }
      return;
    }
#endif
    for (int64_t j = j0; j < j1; ++j) {
      for (int64_t i = i0; i < i1; ++i) yb[j * rows + i] = xb[i * cols + j];
    }
  });
}

// Merges input axes that stay adjacent (and in order) under perm; returns the merged dims and perm.
void CollapseTranspose(const Dims& d, const std::vector<int64_t>& perm, Dims* cd, std::vector<int64_t>* cp) {
  // Runs of the output order whose input axes are consecutive: [0,2,3,1] on [N,C,H,W] -> [0],[2,3],[1].
  std::vector<std::vector<int64_t>> runs;
  for (int64_t a : perm) {
    if (d[a] == 1) continue;  // size-1 axes move freely
    if (!runs.empty() && runs.back().back() + 1 == a) {
      runs.back().push_back(a);
    } else {
      runs.push_back({a});
    }
  }
  // Each run becomes one axis; number them by their position in the input.
  std::vector<int64_t> starts;
  for (const auto& r : runs) starts.push_back(r.front());
  std::vector<int64_t> sorted = starts;
  std::sort(sorted.begin(), sorted.end());
  cd->assign(runs.size(), 1);
  cp->clear();
  for (size_t k = 0; k < runs.size(); ++k) {
    int64_t in_axis = std::lower_bound(sorted.begin(), sorted.end(), starts[k]) - sorted.begin();
    int64_t size = 1;
    for (int64_t a : runs[k]) size *= d[a];
    (*cd)[in_axis] = size;
    cp->push_back(in_axis);
  }
}

}  // namespace

void BatchedTranspose(const void* x, void* y, size_t elem_bytes, int64_t batch, int64_t rows, int64_t cols,
                      int threads) {
  switch (elem_bytes) {
    case 1:
      return BatchedTranspose2D(static_cast<const uint8_t*>(x), static_cast<uint8_t*>(y), batch, rows, cols, threads);
    case 2:
      return BatchedTranspose2D(static_cast<const uint16_t*>(x), static_cast<uint16_t*>(y), batch, rows, cols, threads);
    case 4:
      return BatchedTranspose2D(static_cast<const uint32_t*>(x), static_cast<uint32_t*>(y), batch, rows, cols, threads);
    default:
      return BatchedTranspose2D(static_cast<const uint64_t*>(x), static_cast<uint64_t*>(y), batch, rows, cols, threads);
  }
}

absl::StatusOr<Tensor> TransposeTensor(const Tensor& x, const std::vector<int64_t>& perm, int threads) {
  int r = x.rank();
  Dims od(r);
  for (int i = 0; i < r; ++i) od[i] = x.dim(perm[i]);
  Tensor y(x.dtype(), od);
  size_t es = DTypeSize(x.dtype());
  if (y.numel() == 0) return y;
  {
    Dims cd;
    std::vector<int64_t> cp;
    CollapseTranspose(x.dims(), perm, &cd, &cp);
    int k = static_cast<int>(cp.size());
    bool identity = true;
    for (int i = 0; i < k; ++i) identity &= cp[i] == i;
    if (identity) {  // only size-1 axes move: the bytes are the same
      std::memcpy(y.raw(), x.raw(), x.nbytes());
      return y;
    }
    // [a.., rows, cols] -> [a.., cols, rows]: a batched 2-D transpose.
    bool swap_last = k >= 2 && cp[k - 2] == k - 1 && cp[k - 1] == k - 2;
    for (int i = 0; i + 2 < k; ++i) swap_last &= cp[i] == i;
    if (swap_last && (es == 4 || es == 2 || es == 1 || es == 8)) {
      int64_t batch = 1;
      for (int i = 0; i + 2 < k; ++i) batch *= cd[i];
      int64_t rows = cd[k - 2], cols = cd[k - 1];
      switch (es) {
        case 1:
          BatchedTranspose2D(static_cast<const uint8_t*>(x.raw()), static_cast<uint8_t*>(y.raw()), batch, rows, cols,
                             threads);
          break;
        case 2:
          BatchedTranspose2D(static_cast<const uint16_t*>(x.raw()), static_cast<uint16_t*>(y.raw()), batch, rows, cols,
                             threads);
          break;
        case 4:
          BatchedTranspose2D(static_cast<const uint32_t*>(x.raw()), static_cast<uint32_t*>(y.raw()), batch, rows, cols,
                             threads);
          break;
        default:
          BatchedTranspose2D(static_cast<const uint64_t*>(x.raw()), static_cast<uint64_t*>(y.raw()), batch, rows, cols,
                             threads);
          break;
      }
      return y;
    }
  }
  std::vector<int64_t> xs(r, 1);
  for (int i = r - 2; i >= 0; --i) xs[i] = xs[i + 1] * x.dim(i + 1);
  // Source stride for each output dim; the innermost output dim is copied in a loop.
  std::vector<int64_t> st(r);
  for (int i = 0; i < r; ++i) st[i] = xs[perm[i]];
  int64_t total = y.numel();
  if (total == 0) return y;
  int64_t inner = r ? od[r - 1] : 1, inner_st = r ? st[r - 1] : 1;
  int64_t rows = total / inner;
  const uint8_t* src = static_cast<const uint8_t*>(x.raw());
  uint8_t* dst = static_cast<uint8_t*>(y.raw());
  int nt = ThreadsForElements(threads, total);
  ParallelFor(nt, rows, [&](int64_t row) {
    int64_t rem = row, off = 0;
    for (int d = r - 2; d >= 0; --d) {
      off += (rem % od[d]) * st[d];
      rem /= od[d];
    }
    uint8_t* o = dst + row * inner * es;
    if (inner_st == 1) {
      std::memcpy(o, src + off * es, inner * es);
    } else if (es == 4) {
      const uint32_t* s = reinterpret_cast<const uint32_t*>(src) + off;
      uint32_t* oo = reinterpret_cast<uint32_t*>(o);
      for (int64_t i = 0; i < inner; ++i) oo[i] = s[i * inner_st];
    } else {
      for (int64_t i = 0; i < inner; ++i) std::memcpy(o + i * es, src + (off + i * inner_st) * es, es);
    }
  });
  return y;
}

absl::StatusOr<MatMulGeometry> PlanMatMul(const Dims& a, const Dims& b) {
  // numpy.matmul (ONNX MatMul, MatMulInteger, QLinearMatMul): scalars are not operands.
  if (a.empty() || b.empty())
    return absl::InvalidArgumentError("MatMul operands must have rank 1 or more, got a scalar");
  MatMulGeometry g;
  g.ad = a;
  g.bd = b;
  if (g.ad.size() == 1) g.ad.insert(g.ad.begin(), 1);
  if (g.bd.size() == 1) g.bd.push_back(1);
  size_t r = std::max(g.ad.size(), g.bd.size());
  while (g.ad.size() < r) g.ad.insert(g.ad.begin(), 1);
  while (g.bd.size() < r) g.bd.insert(g.bd.begin(), 1);
  g.M = g.ad[r - 2];
  g.K = g.ad[r - 1];
  g.N = g.bd[r - 1];
  if (g.bd[r - 2] != g.K) return absl::InvalidArgumentError("MatMul inner dimensions differ");
  g.cd.resize(r);
  for (size_t i = 0; i + 2 < r; ++i) {
    // numpy broadcasting: equal, or one of them 1 (a 0 against a 1 is 0). The kernels index both
    // operands by these dims: MatMulInteger / QLinearMatMul reach here without shape inference having
    // checked their batch dims (a fuzzer-found out-of-bounds read).
    if (g.ad[i] != g.bd[i] && g.ad[i] != 1 && g.bd[i] != 1) {
      return absl::InvalidArgumentError(absl::StrCat("MatMul batch dimensions cannot be broadcast: ",
                                                     DimsToString(a), " and ", DimsToString(b)));
    }
    g.cd[i] = g.ad[i] == 1 ? g.bd[i] : g.ad[i];
    g.batch *= g.cd[i];
  }
  g.cd[r - 2] = g.M;
  g.cd[r - 1] = g.N;
  return g;
}

void MatMulGeometry::Offsets(int64_t bi, int64_t* aoff, int64_t* boff) const {
  int64_t rem = bi, astr = M * K, bstr = K * N;
  *aoff = *boff = 0;
  for (int i = static_cast<int>(cd.size()) - 3; i >= 0; --i) {
    int64_t idx = rem % cd[i];
    rem /= cd[i];
    *aoff += (ad[i] == 1 ? 0 : idx) * astr;
    *boff += (bd[i] == 1 ? 0 : idx) * bstr;
    astr *= ad[i];
    bstr *= bd[i];
  }
}

// y[idx] = x[start + idx * step] per dim (Slice, Split, SplitToSequence): BoxCopy with affine maps.
void StridedCopy(const Tensor& x, Tensor& y, const std::vector<int64_t>& start, const std::vector<int64_t>& step,
                 int threads) {
  const int r = x.rank();
  if (y.numel() == 0) return;
  std::vector<int64_t> xs(r, 1);
  for (int i = r - 2; i >= 0; --i) xs[i] = xs[i + 1] * x.dim(i + 1);
  std::vector<std::vector<int64_t>> maps(r);
  for (int d = 0; d < r; ++d) {
    maps[d].resize(static_cast<size_t>(y.dim(d)));
    for (int64_t i = 0; i < y.dim(d); ++i) maps[d][i] = (start[d] + i * step[d]) * xs[d];
  }
  BoxCopy(x.raw(), y.raw(), DTypeSize(x.dtype()), maps, nullptr, threads);
}

void ConcatAlong(const std::vector<const Tensor*>& parts, int axis, Tensor& y) {
  int64_t outer = 1, inner = static_cast<int64_t>(DTypeSize(y.dtype()));
  for (int i = 0; i < axis; ++i) outer *= y.dim(i);
  for (int i = axis + 1; i < y.rank(); ++i) inner *= y.dim(i);
  const int64_t out_row = y.dim(axis) * inner;
  int64_t off = 0;
  for (const Tensor* x : parts) {
    const int64_t row = (x->rank() ? x->dim(axis) : 1) * inner;
    for (int64_t o = 0; o < outer && row > 0; ++o) {
      std::memcpy(static_cast<uint8_t*>(y.raw()) + o * out_row + off, static_cast<const uint8_t*>(x->raw()) + o * row,
                  static_cast<size_t>(row));
    }
    off += row;
  }
}


absl::Status StoreDoubles(Tensor& t, const std::vector<double>& v) {
  return DispatchNumeric(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for (size_t i = 0; i < v.size(); ++i) t.data<T>()[i] = NumericCast<T>(v[i]);
  });
}

}  // namespace cjit
