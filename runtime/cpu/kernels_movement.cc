// Data-movement and shape CPU kernels: Reshape/Flatten/Squeeze/Unsqueeze/Identity (zero-copy),
// Transpose, Slice, Concat, Split, Gather, GatherElements, GatherND, ScatterElements, ScatterND, Pad,
// Expand, Tile, Shape, Size, ConstantOfShape, Range, Trilu, OneHot, EyeLike, NonZero, TopK, Compress,
// DepthToSpace, SpaceToDepth. Byte-level copies where the dtype does not matter.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <cstring>
#include <numeric>

#if defined(__x86_64__)
#include <immintrin.h>
// GCC 12 reports its own intrinsics headers (_mm512_undefined_*) as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "compiler/ops/op_registry.h"
#include "compiler/ir/cpu_isa.h"
#include "compiler/ir/numeric_cast.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/cpu/box_copy.h"
#include "runtime/cpu/broadcast.h"
#include "runtime/cpu/dispatch.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/tensor_util.h"

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
    const __m512 lo23 = _mm512_unpacklo_ps(r[4 * q + 2], r[4 * q + 3]), hi23 = _mm512_unpackhi_ps(r[4 * q + 2], r[4 * q + 3]);
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
    for (int i = 0; i < 4; ++i) r[i] = i < rows ? _mm512_maskz_loadu_epi32(load, x + i * ldx + j0) : _mm512_setzero_si512();
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
    case 1: return BatchedTranspose2D(static_cast<const uint8_t*>(x), static_cast<uint8_t*>(y), batch, rows, cols, threads);
    case 2: return BatchedTranspose2D(static_cast<const uint16_t*>(x), static_cast<uint16_t*>(y), batch, rows, cols, threads);
    case 4: return BatchedTranspose2D(static_cast<const uint32_t*>(x), static_cast<uint32_t*>(y), batch, rows, cols, threads);
    default: return BatchedTranspose2D(static_cast<const uint64_t*>(x), static_cast<uint64_t*>(y), batch, rows, cols, threads);
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
        case 1: BatchedTranspose2D(static_cast<const uint8_t*>(x.raw()), static_cast<uint8_t*>(y.raw()), batch, rows, cols, threads); break;
        case 2: BatchedTranspose2D(static_cast<const uint16_t*>(x.raw()), static_cast<uint16_t*>(y.raw()), batch, rows, cols, threads); break;
        case 4: BatchedTranspose2D(static_cast<const uint32_t*>(x.raw()), static_cast<uint32_t*>(y.raw()), batch, rows, cols, threads); break;
        default: BatchedTranspose2D(static_cast<const uint64_t*>(x.raw()), static_cast<uint64_t*>(y.raw()), batch, rows, cols, threads); break;
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
  if (a.empty() || b.empty()) return absl::InvalidArgumentError("MatMul operands must have rank 1 or more, got a scalar");
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

namespace {

absl::Status ZeroCopy(KernelContext& ctx) {
  if (!ctx.in(0).is_tensor()) {  // Identity of a sequence or optional: the same value
    if (TraitsOf(*ctx.node).view != ViewKind::kIdentity) {
      return ctx.Error(absl::StrCat("input 0 is a ", ValueKindName(ctx.in(0).kind()), "; ", ctx.node->op_type, " takes a tensor"));
    }
    ctx.outputs[0] = ctx.in(0);
    return absl::OkStatus();
  }
  const InferOutput& o = ctx.infer()[0];
  ctx.outputs[0] = ctx.in(0).Reshaped(o.shape.concrete());
  return absl::OkStatus();
}

absl::Status Transpose(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  std::vector<int64_t> perm = ctx.node->GetInts("perm");
  if (perm.empty()) for (int i = x.rank() - 1; i >= 0; --i) perm.push_back(i);
  CJIT_ASSIGN_OR_RETURN(ctx.outputs[0], TransposeTensor(x, perm, ctx.threads));
  return absl::OkStatus();
}

}  // namespace

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

namespace {

absl::Status Slice(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (ctx.node->HasAttr("starts")) {
    starts = ctx.node->GetInts("starts");
    ends = ctx.node->GetInts("ends");
    axes = ctx.node->GetInts("axes");
  } else {
    starts = ctx.in(1).ToInt64Vector();
    ends = ctx.in(2).ToInt64Vector();
    if (ctx.has(3)) axes = ctx.in(3).ToInt64Vector();
    if (ctx.has(4)) steps = ctx.in(4).ToInt64Vector();
  }
  if (axes.empty()) for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  std::vector<int64_t> st(x.rank(), 0), sp(x.rank(), 1);
  for (size_t k = 0; k < starts.size(); ++k) {
    CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(*ctx.node, axes[k], x.rank()));
    int64_t dim = x.dim(ax), s = starts[k];
    if (s < 0) s += dim;
    // A negative step on an empty axis takes nothing ([0, dim - 1] would be an empty clamp range).
    s = steps[k] > 0 ? std::clamp<int64_t>(s, 0, dim) : dim == 0 ? 0 : std::clamp<int64_t>(s, 0, dim - 1);
    st[ax] = s;
    sp[ax] = steps[k];
  }
  Tensor& y = ctx.Alloc(0);
  StridedCopy(x, y, st, sp, ctx.threads);
  return absl::OkStatus();
}

}  // namespace

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

namespace {

absl::Status Concat(KernelContext& ctx) {
  Tensor& y = ctx.Alloc(0);
  CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(*ctx.node, ctx.node->GetInt("axis", 0), y.rank()));
  std::vector<const Tensor*> parts;
  for (int k = 0; k < ctx.num_inputs(); ++k) {
    if (ctx.in(k).dtype() != y.dtype()) return ctx.Error("inputs have different dtypes");
    parts.push_back(&ctx.in(k));
  }
  ConcatAlong(parts, ax, y);
  return absl::OkStatus();
}

absl::Status Split(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(*ctx.node, ctx.node->GetInt("axis", 0), x.rank()));
  std::vector<int64_t> start(x.rank(), 0), step(x.rank(), 1);
  for (size_t k = 0; k < ctx.outputs.size(); ++k) {
    Tensor& y = ctx.Alloc(static_cast<int>(k));
    StridedCopy(x, y, start, step, ctx.threads);
    start[ax] += y.dim(ax);
  }
  return absl::OkStatus();
}

absl::Status Gather(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& idx = ctx.in(1);
  CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(*ctx.node, ctx.node->GetInt("axis", 0), x.rank()));
  Tensor& y = ctx.Alloc(0);
  std::vector<int64_t> ind = idx.ToInt64Vector();
  size_t es = DTypeSize(x.dtype());
  int64_t outer = 1, inner = es, n = x.dim(ax);
  for (int i = 0; i < ax; ++i) outer *= x.dim(i);
  for (int i = ax + 1; i < x.rank(); ++i) inner *= x.dim(i);
  for (int64_t& i : ind) {
    if (i < -n || i >= n) return ctx.Error(absl::StrCat("index ", i, " out of range [", -n, ", ", n, ")"));
    if (i < 0) i += n;
  }
  const uint8_t* src = static_cast<const uint8_t*>(x.raw());
  uint8_t* dst = static_cast<uint8_t*>(y.raw());
  int64_t m = static_cast<int64_t>(ind.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < m; ++j) {
      std::memcpy(dst + (o * m + j) * inner, src + (o * n + ind[j]) * inner, inner);
    }
  }
  return absl::OkStatus();
}

// Element-index helpers for GatherElements / ScatterElements.
absl::Status ElementsOp(KernelContext& ctx, bool scatter) {
  const Tensor& x = ctx.in(0);
  const Tensor& idx = ctx.in(1);
  CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(*ctx.node, ctx.node->GetInt("axis", 0), x.rank()));
  // ONNX GatherElements / ScatterElements: integer indices of the data's rank, no larger than the data
  // along every other axis; updates shaped like the indices, of the data's type.
  int r = x.rank();
  if (!IsInteger(idx.dtype()) || idx.rank() != r) {
    return ctx.Error(absl::StrCat("indices must be an integer tensor of rank ", r, ", got ", DTypeName(idx.dtype()),
                                  "[", DimsToString(idx.dims()), "]"));
  }
  for (int d = 0; d < r; ++d) {
    if (d != ax && idx.dim(d) > x.dim(d)) {
      return ctx.Error(absl::StrCat("indices dim ", d, " (", idx.dim(d), ") exceeds the data's (", x.dim(d), ")"));
    }
  }
  if (scatter && (ctx.in(2).dims() != idx.dims() || ctx.in(2).dtype() != x.dtype())) {
    return ctx.Error(absl::StrCat("updates must be ", DTypeName(x.dtype()), "[", DimsToString(idx.dims()), "], got ",
                                  DTypeName(ctx.in(2).dtype()), "[", DimsToString(ctx.in(2).dims()), "]"));
  }
  std::vector<int64_t> xs(r, 1);
  for (int i = r - 2; i >= 0; --i) xs[i] = xs[i + 1] * x.dim(i + 1);
  const int64_t n_ax = x.dim(ax);
  const int64_t total = idx.numel();
  if (!scatter && ax == r - 1 && (idx.dtype() == DType::kI64 || idx.dtype() == DType::kI32) &&
      (DTypeSize(x.dtype()) == 4 || DTypeSize(x.dtype()) == 8)) {
    // GatherElements along the last axis (torch.gather(dim=-1)): one pass, row by row.
    Tensor& y = ctx.Alloc(0);
    const int64_t m = idx.dim(r - 1), rows = m ? total / m : 0;
    auto run = [&](auto elem, auto index) -> absl::Status {
      using E = decltype(elem);
      using I = decltype(index);
      const E* px = static_cast<const E*>(x.raw());
      E* py = static_cast<E*>(y.raw());
      const I* pi = idx.data<I>();
      std::vector<int64_t> pos(r, 0);
      for (int64_t row = 0; row < rows; ++row) {
        int64_t base = 0;
        for (int d = 0; d + 1 < r; ++d) base += pos[d] * xs[d];
        for (int64_t j = 0; j < m; ++j) {
          int64_t v = pi[row * m + j];
          if (v < -n_ax || v >= n_ax) return ctx.Error(absl::StrCat("index ", v, " out of range"));
          py[row * m + j] = px[base + (v < 0 ? v + n_ax : v)];
        }
        for (int d = r - 2; d >= 0; --d) {
          if (++pos[d] < idx.dim(d)) break;
          pos[d] = 0;
        }
      }
      return absl::OkStatus();
    };
    if (DTypeSize(x.dtype()) == 4) {
      return idx.dtype() == DType::kI64 ? run(uint32_t{}, int64_t{}) : run(uint32_t{}, int32_t{});
    }
    return idx.dtype() == DType::kI64 ? run(uint64_t{}, int64_t{}) : run(uint64_t{}, int32_t{});
  }
  // Each element's data offset, walking the indices in row-major order with an odometer (no division per
  // element); every index is checked before anything is written.
  std::vector<int64_t> offset(static_cast<size_t>(total));
  {
    std::vector<int64_t> converted;
    const int64_t* i64 = nullptr;
    const int32_t* i32 = nullptr;
    if (idx.dtype() == DType::kI64) {
      i64 = idx.data<int64_t>();
    } else if (idx.dtype() == DType::kI32) {
      i32 = idx.data<int32_t>();
    } else {
      converted = idx.ToInt64Vector();
      i64 = converted.data();
    }
    std::vector<int64_t> pos(r, 0);
    int64_t base = 0;  // sum over d != ax of pos[d] * xs[d]
    for (int64_t e = 0; e < total; ++e) {
      int64_t v = i64 ? i64[e] : i32[e];
      if (v < -n_ax || v >= n_ax) return ctx.Error(absl::StrCat("index ", v, " out of range"));
      if (v < 0) v += n_ax;
      offset[e] = base + v * xs[ax];
      for (int d = r - 1; d >= 0; --d) {
        if (++pos[d] < idx.dim(d)) {
          if (d != ax) base += xs[d];
          break;
        }
        if (d != ax) base -= (pos[d] - 1) * xs[d];
        pos[d] = 0;
      }
    }
  }
  size_t es = DTypeSize(x.dtype());
  Tensor& y = scatter ? (ctx.outputs[0] = x.Clone()) : ctx.Alloc(0);
  std::string reduction = ctx.node->GetString("reduction", "none");
  if (!scatter || reduction == "none") {
    char* dst = static_cast<char*>(y.raw());
    const char* src = static_cast<const char*>(scatter ? ctx.in(2).raw() : x.raw());
    auto copy = [&](auto tag) {
      using T = decltype(tag);
      T* d = reinterpret_cast<T*>(dst);
      const T* s = reinterpret_cast<const T*>(src);
      if (scatter) {
        for (int64_t e = 0; e < total; ++e) d[offset[e]] = s[e];
      } else {
        for (int64_t e = 0; e < total; ++e) d[e] = s[offset[e]];
      }
    };
    switch (es) {
      case 1: copy(uint8_t{}); break;
      case 2: copy(uint16_t{}); break;
      case 4: copy(uint32_t{}); break;
      case 8: copy(uint64_t{}); break;
      default:
        for (int64_t e = 0; e < total; ++e) {
          if (scatter) std::memcpy(dst + offset[e] * es, src + e * es, es);
          else std::memcpy(dst + e * es, src + offset[e] * es, es);
        }
    }
    return absl::OkStatus();
  }
  const int kind = reduction == "add" ? 0 : reduction == "mul" ? 1 : reduction == "max" ? 2 : reduction == "min" ? 3 : -1;
  if (kind < 0) return ctx.Error(absl::StrCat("unknown reduction '", reduction, "' (none, add, mul, max, min)"));
  const Tensor& upd = ctx.in(2);
  return DispatchNumeric(x.dtype(), [&](auto t) {
    using T = decltype(t);
    T* d = y.data<T>();
    const T* u = upd.data<T>();
    for (int64_t e = 0; e < total; ++e) {
      T& o = d[offset[e]];
      switch (kind) {
        case 0: o = WrappingAdd(o, u[e]); break;
        case 1: o = WrappingMul(o, u[e]); break;
        case 2: o = o < u[e] ? u[e] : o; break;
        default: o = u[e] < o ? u[e] : o;
      }
    }
  });
}

absl::Status GatherND(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& idx = ctx.in(1);
  int b = static_cast<int>(ctx.node->GetInt("batch_dims", 0));
  Tensor& y = ctx.Alloc(0);
  std::vector<int64_t> ind = idx.ToInt64Vector();
  int64_t last = idx.dim(idx.rank() - 1);
  size_t es = DTypeSize(x.dtype());
  int64_t slice = es;
  for (int i = b + static_cast<int>(last); i < x.rank(); ++i) slice *= x.dim(i);
  int64_t batch = 1;
  for (int i = 0; i < b; ++i) batch *= x.dim(i);
  int64_t per_batch_x = 1;
  for (int i = b; i < x.rank(); ++i) per_batch_x *= x.dim(i);
  int64_t n_idx = idx.numel() / last / batch;
  for (int64_t bi = 0; bi < batch; ++bi) {
    for (int64_t j = 0; j < n_idx; ++j) {
      int64_t off = 0;
      for (int64_t k = 0; k < last; ++k) {
        int64_t v = ind[(bi * n_idx + j) * last + k], dim = x.dim(b + static_cast<int>(k));
        if (v < -dim || v >= dim) return ctx.Error("index out of range");
        off = off * dim + (v < 0 ? v + dim : v);
      }
      for (int i = b + static_cast<int>(last); i < x.rank(); ++i) off *= x.dim(i);
      std::memcpy(static_cast<uint8_t*>(y.raw()) + (bi * n_idx + j) * slice,
                  static_cast<const uint8_t*>(x.raw()) + (bi * per_batch_x + off) * es, slice);
    }
  }
  return absl::OkStatus();
}

absl::Status ScatterND(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& idx = ctx.in(1);
  const Tensor& upd = ctx.in(2);
  if (idx.rank() < 1) return ctx.Error("indices must have rank >= 1");
  if (upd.dtype() != x.dtype()) return ctx.Error("updates and data have different dtypes");
  int64_t last = idx.dim(idx.rank() - 1);
  if (last > x.rank()) {
    return ctx.Error(absl::StrCat("indices address ", last, " dims of a rank-", x.rank(), " data tensor"));
  }
  // updates must be indices.shape[:-1] + data.shape[last:] (ONNX ScatterND).
  Dims want(idx.dims().begin(), idx.dims().end() - 1);
  for (int i = static_cast<int>(last); i < x.rank(); ++i) want.push_back(x.dim(i));
  if (upd.dims() != want) {
    return ctx.Error(absl::StrCat("updates have dims ", DimsToString(upd.dims()), ", indices and data need ",
                                  DimsToString(want)));
  }
  ctx.outputs[0] = x.Clone();
  Tensor& y = ctx.outputs[0];
  std::vector<int64_t> ind = idx.ToInt64Vector();
  int64_t slice = 1;
  for (int i = static_cast<int>(last); i < x.rank(); ++i) slice *= x.dim(i);
  int64_t n = 1;
  for (int i = 0; i + 1 < idx.rank(); ++i) n *= idx.dim(i);
  // Every index is checked before anything is written (ONNX: out-of-range indices are errors).
  std::vector<int64_t> offsets(n);
  for (int64_t j = 0; j < n; ++j) {
    int64_t off = 0;
    for (int64_t k = 0; k < last; ++k) {
      int64_t dim = x.dim(static_cast<int>(k)), v = ind[j * last + k];
      if (v < -dim || v >= dim) {
        return ctx.Error(absl::StrCat("index ", v, " is out of range for dim ", k, " of size ", dim));
      }
      off = off * dim + (v < 0 ? v + dim : v);
    }
    offsets[j] = off * slice;
  }
  std::string reduction = ctx.node->GetString("reduction", "none");
  if (reduction == "none") {  // slices copied whole, in index order (a later duplicate wins, as in ONNX's loop)
    const size_t bytes = static_cast<size_t>(slice) * DTypeSize(x.dtype());
    char* dst = static_cast<char*>(y.raw());
    const char* src = static_cast<const char*>(upd.raw());
    for (int64_t j = 0; j < n; ++j) std::memcpy(dst + offsets[j] * DTypeSize(x.dtype()), src + j * bytes, bytes);
    return absl::OkStatus();
  }
  const int kind = reduction == "add" ? 0 : reduction == "mul" ? 1 : reduction == "max" ? 2 : reduction == "min" ? 3 : -1;
  if (kind < 0) return ctx.Error(absl::StrCat("unknown reduction '", reduction, "' (none, add, mul, max, min)"));
  return DispatchNumeric(x.dtype(), [&](auto t) {
    using T = decltype(t);
    for (int64_t j = 0; j < n; ++j) {
      T* d = y.data<T>() + offsets[j];
      const T* u = upd.data<T>() + j * slice;
      for (int64_t s = 0; s < slice; ++s) {
        switch (kind) {
          case 0: d[s] = WrappingAdd(d[s], u[s]); break;
          case 1: d[s] = WrappingMul(d[s], u[s]); break;
          case 2: d[s] = d[s] < u[s] ? u[s] : d[s]; break;
          default: d[s] = u[s] < d[s] ? u[s] : d[s];
        }
      }
    }
  });
}

absl::Status Pad(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.Alloc(0);
  // An empty output has nothing to write; its other dims may be huge (one index map per dim is built below).
  if (y.numel() == 0) return absl::OkStatus();
  int r = x.rank();
  std::vector<int64_t> pads = ctx.node->HasAttr("pads") ? ctx.node->GetInts("pads") : ctx.in(1).ToInt64Vector();
  std::vector<int64_t> axes;
  if (ctx.has(3)) {
    for (int64_t a : ctx.in(3).ToInt64Vector()) axes.push_back(a < 0 ? a + r : a);
  } else {
    for (int i = 0; i < r; ++i) axes.push_back(i);
  }
  std::vector<int64_t> begin(r, 0);
  for (size_t k = 0; k < axes.size(); ++k) begin[axes[k]] = pads[k];
  std::string mode = ctx.node->GetString("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap") {
    return ctx.Error(absl::StrCat("unknown mode '", mode, "' (constant, reflect, edge, wrap)"));
  }
  const size_t es = DTypeSize(x.dtype());
  if (es == 1 || es == 2 || es == 4 || es == 8) {
    // Every mode is a separable index map per dim (box_copy.h): rows at memcpy speed.
    std::vector<int64_t> xs(r, 1);
    for (int i = r - 2; i >= 0; --i) xs[i] = xs[i + 1] * x.dim(i + 1);
    std::vector<std::vector<int64_t>> maps(r);
    for (int d = 0; d < r; ++d) maps[d] = PadMap(y.dim(d), begin[d], x.dim(d), xs[d], mode.c_str());
    uint64_t fill = 0;
    CJIT_RETURN_IF_ERROR(DispatchAll(x.dtype(), [&](auto t) {
      using T = decltype(t);
      if constexpr (sizeof(T) <= sizeof(fill) && std::is_trivially_copyable_v<T>) {
        T value = T(0);
        if (ctx.node->HasAttr("value")) value = NumericCast<T>(ctx.node->GetFloat("value", 0));
        if (ctx.has(2) && ctx.in(2).numel() > 0) value = ctx.in(2).data<T>()[0];
        std::memcpy(&fill, &value, sizeof(T));
      }
    }));
    BoxCopy(x.raw(), y.raw(), es, maps, &fill, ctx.threads);
    return absl::OkStatus();
  }
  return DispatchAll(x.dtype(), [&](auto t) {
    using T = decltype(t);
    T value = T(0);
    if (ctx.node->HasAttr("value")) value = NumericCast<T>(ctx.node->GetFloat("value", 0));  // saturating: see numeric_cast.h
    if (ctx.has(2) && ctx.in(2).numel() > 0) value = ctx.in(2).data<T>()[0];
    std::vector<int64_t> ys(r, 1), xs(r, 1);
    for (int i = r - 2; i >= 0; --i) {
      ys[i] = ys[i + 1] * y.dim(i + 1);
      xs[i] = xs[i + 1] * x.dim(i + 1);
    }
    T* out = y.data<T>();
    const T* in = x.data<T>();
    for (int64_t e = 0; e < y.numel(); ++e) {
      int64_t rem = e, off = 0;
      bool outside = false;
      for (int d = 0; d < r; ++d) {
        int64_t c = rem / ys[d] - begin[d];
        rem %= ys[d];
        int64_t n = x.dim(d);
        if (c < 0 || c >= n) {
          if (mode == "constant" || n == 0) { outside = true; break; }
          if (mode == "edge") c = c < 0 ? 0 : n - 1;
          else if (mode == "reflect") {
            int64_t period = 2 * (n - 1);
            if (period == 0) c = 0;
            else { c = ((c % period) + period) % period; if (c >= n) c = period - c; }
          } else {  // wrap
            c = ((c % n) + n) % n;
          }
        }
        off += c * xs[d];
      }
      out[e] = outside ? value : in[off];
    }
  });
}

absl::Status ExpandLike(KernelContext& ctx, const Tensor& x, Tensor& y) {
  size_t es = DTypeSize(x.dtype());
  if ((es == 1 || es == 2 || es == 4 || es == 8) && x.rank() <= y.rank()) {
    // Broadcast dims read offset 0 (box_copy.h): a broadcast row is one element replicated.
    const int r = y.rank(), lead = r - x.rank();
    std::vector<int64_t> xs(x.rank(), 1);
    for (int i = x.rank() - 2; i >= 0; --i) xs[i] = xs[i + 1] * x.dim(i + 1);
    std::vector<std::vector<int64_t>> maps(r);
    for (int d = 0; d < r; ++d) {
      maps[d].assign(static_cast<size_t>(y.dim(d)), 0);
      if (d < lead || x.dim(d - lead) == 1) continue;
      for (int64_t i = 0; i < y.dim(d); ++i) maps[d][i] = i * xs[d - lead];
    }
    BoxCopy(x.raw(), y.raw(), es, maps, nullptr, ctx.threads);
    return absl::OkStatus();
  }
  const uint8_t* src = static_cast<const uint8_t*>(x.raw());
  uint8_t* dst = static_cast<uint8_t*>(y.raw());
  ForEachBroadcastRow<1>(y.dims(), {&x.dims()}, ctx.threads,
                         [&](std::array<int64_t, 1> off, int64_t o, int64_t n, std::array<int64_t, 1> s) {
                           if (s[0] == 1) {
                             std::memcpy(dst + o * es, src + off[0] * es, n * es);
                           } else {
                             for (int64_t i = 0; i < n; ++i) std::memcpy(dst + (o + i) * es, src + (off[0] + i * s[0]) * es, es);
                           }
                         });
  return absl::OkStatus();
}

absl::Status Tile(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.Alloc(0);
  int r = x.rank();
  size_t es = DTypeSize(x.dtype());
  if ((es == 1 || es == 2 || es == 4 || es == 8) && y.rank() == r) {
    // Output index i of dim d reads i mod n_d (box_copy.h): each repeat of a row is a memcpy.
    std::vector<int64_t> xs(r, 1);
    for (int i = r - 2; i >= 0; --i) xs[i] = xs[i + 1] * x.dim(i + 1);
    std::vector<std::vector<int64_t>> maps(r);
    for (int d = 0; d < r; ++d) {
      maps[d].resize(static_cast<size_t>(y.dim(d)));
      for (int64_t i = 0; i < y.dim(d); ++i) maps[d][i] = x.dim(d) ? (i % x.dim(d)) * xs[d] : 0;
    }
    BoxCopy(x.raw(), y.raw(), es, maps, nullptr, ctx.threads);
    return absl::OkStatus();
  }
  std::vector<int64_t> ys(r, 1), xs(r, 1);
  for (int i = r - 2; i >= 0; --i) {
    ys[i] = ys[i + 1] * y.dim(i + 1);
    xs[i] = xs[i + 1] * x.dim(i + 1);
  }
  for (int64_t e = 0; e < y.numel(); ++e) {
    int64_t rem = e, off = 0;
    for (int d = 0; d < r; ++d) {
      off += ((rem / ys[d]) % x.dim(d)) * xs[d];
      rem %= ys[d];
    }
    std::memcpy(static_cast<uint8_t*>(y.raw()) + e * es, static_cast<const uint8_t*>(x.raw()) + off * es, es);
  }
  return absl::OkStatus();
}

absl::Status FillFromInts(Tensor& y, const std::vector<int64_t>& v) {
  std::copy(v.begin(), v.end(), y.data<int64_t>());
  return absl::OkStatus();
}

absl::Status TopK(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(*ctx.node, ctx.node->GetInt("axis", -1), x.rank()));
  int64_t k = ctx.node->HasAttr("k") ? ctx.node->GetInt("k", 0) : ctx.in(1).ToInt64Vector().at(0);
  if (k < 0 || k > x.dim(ax)) return ctx.Error(absl::StrCat("k=", k, " is out of range"));
  bool largest = ctx.node->GetInt("largest", 1), sorted = ctx.node->GetInt("sorted", 1);
  (void)sorted;
  Dims od = x.dims();
  od[ax] = k;
  Tensor& vals = ctx.Alloc(0, x.dtype(), od);
  Tensor& inds = ctx.Alloc(1, DType::kI64, od);
  int64_t outer = 1, n = x.dim(ax), inner = 1;
  for (int i = 0; i < ax; ++i) outer *= x.dim(i);
  for (int i = ax + 1; i < x.rank(); ++i) inner *= x.dim(i);
  return DispatchNumeric(x.dtype(), [&](auto t) {
    using T = decltype(t);
    std::vector<int64_t> order(n);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const T* p = x.data<T>() + o * n * inner + i;
        std::iota(order.begin(), order.end(), 0);
        // NaN ranks above every number (as torch.topk), so the order is strict weak also with NaN.
        auto less = [](T u, T v) {
          if constexpr (std::is_floating_point_v<T>) {
            if (std::isnan(u) || std::isnan(v)) return !std::isnan(u) && std::isnan(v);
          }
          return u < v;
        };
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
          return largest ? less(p[b * inner], p[a * inner]) : less(p[a * inner], p[b * inner]);
        });
        for (int64_t j = 0; j < k; ++j) {
          vals.data<T>()[(o * k + j) * inner + i] = p[order[j] * inner];
          inds.data<int64_t>()[(o * k + j) * inner + i] = order[j];
        }
      }
    }
  });
}

absl::Status SpaceDepth(KernelContext& ctx, bool to_space) {
  const Tensor& x = ctx.in(0);
  int64_t b = ctx.node->GetInt("blocksize", 1);
  int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  Tensor tmp;
  if (to_space && b >= 1 && C % (b * b) == 0 && DTypeSize(x.dtype()) == 4) {
    // DepthToSpace, 4-byte elements: output row (n, c, h * b + i) interleaves b input rows, element w * b + j
    // from channel (i * b + j) * C' + c (DCR) or c * b * b + i * b + j (CRD), row h.
    const bool crd = ctx.node->GetString("mode", "DCR") == "CRD";
    const int64_t Cp = C / (b * b), OW = W * b;
    Tensor& y = ctx.Alloc(0);
    const uint32_t* px = static_cast<const uint32_t*>(x.raw());
    uint32_t* py = static_cast<uint32_t*>(y.raw());
    const int64_t rows = N * Cp * H * b;
    ParallelFor(ThreadsForElements(ctx.threads, x.numel()), rows, [&](int64_t row) {
      const int64_t i = row % b, h = (row / b) % H, c = (row / (b * H)) % Cp, n = row / (b * H * Cp);
      uint32_t* out = py + row * OW;
      for (int64_t j = 0; j < b; ++j) {
        const int64_t ch = crd ? c * b * b + i * b + j : (i * b + j) * Cp + c;
        const uint32_t* in = px + ((n * C + ch) * H + h) * W;
        for (int64_t w = 0; w < W; ++w) out[w * b + j] = in[w];
      }
    });
    return absl::OkStatus();
  }
  if (to_space) {
    bool crd = ctx.node->GetString("mode", "DCR") == "CRD";
    Tensor v = crd ? x.Reshaped({N, C / (b * b), b, b, H, W}) : x.Reshaped({N, b, b, C / (b * b), H, W});
    std::vector<int64_t> perm = crd ? std::vector<int64_t>{0, 1, 4, 2, 5, 3} : std::vector<int64_t>{0, 3, 4, 1, 5, 2};
    CJIT_ASSIGN_OR_RETURN(tmp, TransposeTensor(v, perm, ctx.threads));
    ctx.outputs[0] = tmp.Reshaped({N, C / (b * b), H * b, W * b});
  } else {
    Tensor v = x.Reshaped({N, C, H / b, b, W / b, b});
    CJIT_ASSIGN_OR_RETURN(tmp, TransposeTensor(v, {0, 3, 5, 1, 2, 4}, ctx.threads));
    ctx.outputs[0] = tmp.Reshaped({N, C * b * b, H / b, W / b});
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterMovementKernels() {
  // Reshape-like ops and Identity (OpTraits::view): the output aliases the input's buffer.
  for (const std::string& op : OpsWhere([](const OpTraits& t) {
         return t.view == ViewKind::kReshape || t.view == ViewKind::kIdentity;
       })) {
    RegisterKernel(op, ZeroCopy);
  }
  RegisterKernel("Transpose", Transpose);
  RegisterKernel("Slice", Slice);
  RegisterKernel("Concat", Concat);
  RegisterKernel("Split", Split);
  RegisterKernel("Gather", Gather);
  RegisterKernel("GatherElements", [](KernelContext& ctx) { return ElementsOp(ctx, false); });
  RegisterKernel("ScatterElements", [](KernelContext& ctx) { return ElementsOp(ctx, true); });
  RegisterKernel("Scatter", [](KernelContext& ctx) { return ElementsOp(ctx, true); });
  RegisterKernel("GatherND", GatherND);
  RegisterKernel("ScatterND", ScatterND);
  RegisterKernel("Pad", Pad);
  // CenterCropPad-18: out[i] = x[i + offset] per axis, offset = (in - out) / 2 (negative when padding), zero
  // outside x. The output dims come from the shape function (validated there).
  RegisterKernel("CenterCropPad", [](KernelContext& ctx) -> absl::Status {
    const Tensor& x = ctx.in(0);
    Tensor& y = ctx.Alloc(0);
    int r = x.rank();
    if (y.rank() != r) return ctx.Error("internal: output rank differs from the input's");
    std::vector<int64_t> off(r), xs(r, 1);
    for (int d = 0; d < r; ++d) {
      int64_t diff = x.dim(d) - y.dim(d);
      off[d] = diff >= 0 ? diff / 2 : -((-diff) / 2);
    }
    for (int d = r - 2; d >= 0; --d) xs[d] = xs[d + 1] * x.dim(d + 1);
    size_t es = DTypeSize(x.dtype());
    std::memset(y.raw(), 0, y.nbytes());
    std::vector<int64_t> idx(r, 0);
    for (int64_t e = 0, n = y.numel(); e < n; ++e) {
      int64_t rem = e, src = 0;
      bool inside = true;
      for (int d = r - 1; d >= 0; --d) {
        int64_t i = rem % y.dim(d) + off[d];
        rem /= y.dim(d);
        inside &= i >= 0 && i < x.dim(d);
        src += i * xs[d];
      }
      if (inside) {
        std::memcpy(static_cast<uint8_t*>(y.raw()) + e * es, static_cast<const uint8_t*>(x.raw()) + src * es, es);
      }
    }
    return absl::OkStatus();
  });
  RegisterKernel("Expand", [](KernelContext& ctx) { return ExpandLike(ctx, ctx.in(0), ctx.Alloc(0)); });
  RegisterKernel("Tile", Tile);
  RegisterKernel("Shape", [](KernelContext& ctx) {
    Tensor& y = ctx.Alloc(0);
    const Dims& d = ctx.in(0).dims();
    int64_t r = static_cast<int64_t>(d.size());
    int64_t start = ctx.node->GetInt("start", 0), end = ctx.node->GetInt("end", r);
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = std::clamp<int64_t>(start, 0, r);
    end = std::clamp<int64_t>(end, 0, r);
    for (int64_t i = start; i < end; ++i) y.data<int64_t>()[i - start] = d[i];
    return absl::OkStatus();
  });
  RegisterKernel("Size", [](KernelContext& ctx) {
    *ctx.Alloc(0).data<int64_t>() = ctx.in(0).numel();
    return absl::OkStatus();
  });
  RegisterKernel("ConstantOfShape", [](KernelContext& ctx) {
    std::vector<int64_t> dims = ctx.in(0).ToInt64Vector();
    auto it = ctx.node->attrs.find("value");
    DType t = it != ctx.node->attrs.end() && it->second.t ? it->second.t->dtype() : DType::kF32;
    Tensor& y = ctx.Alloc(0, t, dims);
    size_t es = DTypeSize(t);
    for (int64_t i = 0; i < y.numel(); ++i) {
      if (it != ctx.node->attrs.end() && it->second.t) std::memcpy(static_cast<uint8_t*>(y.raw()) + i * es, it->second.t->raw(), es);
      else std::memset(static_cast<uint8_t*>(y.raw()) + i * es, 0, es);
    }
    return absl::OkStatus();
  });
  RegisterKernel("Range", [](KernelContext& ctx) {
    Tensor& y = ctx.Alloc(0);
    return DispatchNumeric(y.dtype(), [&](auto t) {
      using T = decltype(t);
      T s = ctx.in(0).data<T>()[0], d = ctx.in(2).data<T>()[0];
      for (int64_t i = 0; i < y.numel(); ++i) y.data<T>()[i] = WrappingAdd(s, WrappingMul(static_cast<T>(i), d));
    });
  });
  RegisterKernel("Trilu", [](KernelContext& ctx) -> absl::Status {
    const Tensor& x = ctx.in(0);
    Tensor& y = ctx.Alloc(0);
    int64_t k = ctx.has(1) ? ctx.in(1).ToInt64Vector().at(0) : 0;
    bool upper = ctx.node->GetInt("upper", 1);
    int64_t R = x.dim(x.rank() - 2), Cc = x.dim(x.rank() - 1);
    size_t es = DTypeSize(x.dtype());
    for (int64_t e = 0; e < x.numel(); ++e) {
      int64_t c = e % Cc, r = (e / Cc) % R;
      bool keep = upper ? (c - r >= k) : (c - r <= k);
      if (keep) std::memcpy(static_cast<uint8_t*>(y.raw()) + e * es, static_cast<const uint8_t*>(x.raw()) + e * es, es);
      else std::memset(static_cast<uint8_t*>(y.raw()) + e * es, 0, es);
    }
    return absl::OkStatus();
  });
  RegisterKernel("OneHot", [](KernelContext& ctx) -> absl::Status {
    const Tensor& idx = ctx.in(0);
    int64_t depth = NumericCast<int64_t>(ctx.in(1).ToDoubleVector().at(0));
    Dims od = idx.dims();
    CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(*ctx.node, ctx.node->GetInt("axis", -1), idx.rank() + 1));
    od.insert(od.begin() + ax, depth);
    const Tensor& vals = ctx.in(2);
    Tensor& y = ctx.Alloc(0, vals.dtype(), od);
    std::vector<int64_t> ind = idx.ToInt64Vector();
    size_t es = DTypeSize(vals.dtype());
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < ax; ++i) outer *= od[i];
    for (int i = ax + 1; i < static_cast<int>(od.size()); ++i) inner *= od[i];
    const uint8_t* off_v = static_cast<const uint8_t*>(vals.raw());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t d = 0; d < depth; ++d)
        for (int64_t i = 0; i < inner; ++i) {
          int64_t v = ind[o * inner + i];
          if (v < 0) v += depth;
          std::memcpy(static_cast<uint8_t*>(y.raw()) + ((o * depth + d) * inner + i) * es, off_v + (v == d ? es : 0), es);
        }
    return absl::OkStatus();
  });
  RegisterKernel("EyeLike", [](KernelContext& ctx) {
    if (ctx.in(0).rank() != 2) return ctx.Error(absl::StrCat("input must be 2-D, got rank ", ctx.in(0).rank()));
    Tensor& y = ctx.Alloc(0);
    if (y.rank() != 2) return ctx.Error("internal: EyeLike output is not 2-D");
    int64_t k = ctx.node->GetInt("k", 0);
    return DispatchAll(y.dtype(), [&](auto t) {
      using T = decltype(t);
      int64_t R = y.dim(0), Cc = y.dim(1);
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < Cc; ++c) y.data<T>()[r * Cc + c] = static_cast<T>(c - r == k ? 1 : 0);
    });
  });
  RegisterKernel("NonZero", [](KernelContext& ctx) {
    const Tensor& x = ctx.in(0);
    std::vector<double> v = x.ToDoubleVector();
    std::vector<int64_t> hits;
    for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) if (v[i] != 0) hits.push_back(i);
    int r = x.rank();
    Tensor& y = ctx.Alloc(0, DType::kI64, {r, static_cast<int64_t>(hits.size())});
    for (size_t j = 0; j < hits.size(); ++j) {
      int64_t rem = hits[j];
      for (int d = r - 1; d >= 0; --d) {
        y.data<int64_t>()[d * hits.size() + j] = rem % x.dim(d);
        rem /= x.dim(d);
      }
    }
    return absl::OkStatus();
  });
  RegisterKernel("Compress", [](KernelContext& ctx) -> absl::Status {
    const Tensor& x = ctx.in(0);
    std::vector<double> cond = ctx.in(1).ToDoubleVector();
    bool has_axis = ctx.node->HasAttr("axis");
    Tensor src = has_axis ? x : x.Reshaped({x.numel()});
    int ax = 0;
    if (has_axis) {
      CJIT_ASSIGN_OR_RETURN(ax, NormalizeAxis(*ctx.node, ctx.node->GetInt("axis", 0), x.rank()));
    }
    std::vector<int64_t> keep;
    for (int64_t i = 0; i < std::min<int64_t>(cond.size(), src.dim(ax)); ++i) if (cond[i] != 0) keep.push_back(i);
    Dims od = src.dims();
    od[ax] = static_cast<int64_t>(keep.size());
    Tensor& y = ctx.Alloc(0, x.dtype(), od);
    size_t es = DTypeSize(x.dtype());
    int64_t outer = 1, inner = es;
    for (int i = 0; i < ax; ++i) outer *= src.dim(i);
    for (int i = ax + 1; i < src.rank(); ++i) inner *= src.dim(i);
    for (int64_t o = 0; o < outer; ++o)
      for (size_t j = 0; j < keep.size(); ++j)
        std::memcpy(static_cast<uint8_t*>(y.raw()) + (o * keep.size() + j) * inner,
                    static_cast<const uint8_t*>(src.raw()) + (o * src.dim(ax) + keep[j]) * inner, inner);
    return absl::OkStatus();
  });
  RegisterKernel("TopK", TopK);
  RegisterKernel("DepthToSpace", [](KernelContext& ctx) { return SpaceDepth(ctx, true); });
  RegisterKernel("SpaceToDepth", [](KernelContext& ctx) { return SpaceDepth(ctx, false); });
}

}  // namespace cjit
