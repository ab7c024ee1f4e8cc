// The convolution paths of FastIntConv (runtime/cpu/int8_conv.h): depthwise on AVX-512 VNNI
// (depthwise_int8.h), depthwise in exact float32 or int32 rows, pointwise and im2col products on Int8Gemm.
#include "runtime/cpu/int8_conv.h"

#include <immintrin.h>

// GCC 12 reports its own intrinsics headers (_mm512_undefined_*) as (maybe-)uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "runtime/cpu/box_copy.h"
#include "runtime/cpu/depthwise_int8.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/tensor_util.h"

namespace cjit {
namespace quant {
namespace {

// The taps of output pixel (oh, ow) whose input pixel lies inside the H x W image (padding adds nothing to
// a depthwise sum): for each, the input pixel's index ih * W + iw in pix[] and the tap's kh * KW + kw in
// tap[] (both sized KH * KW). Returns their count. Computed once per output pixel, for all its channels.
int64_t InsideTaps(const WindowGeometry& g, int64_t H, int64_t W, int64_t KH, int64_t KW, int64_t oh, int64_t ow,
                   int64_t* pix, int64_t* tap) {
  int64_t n = 0;
  for (int64_t kh = 0; kh < KH; ++kh) {
    const int64_t ih = oh * g.strides[0] - g.pad_begin[0] + kh * g.dilations[0];
    if (ih < 0 || ih >= H) continue;
    for (int64_t kw = 0; kw < KW; ++kw) {
      const int64_t iw = ow * g.strides[1] - g.pad_begin[1] + kw * g.dilations[1];
      if (iw < 0 || iw >= W) continue;
      pix[n] = ih * W + iw;
      tap[n++] = kh * KW + kw;
    }
  }
  return n;
}

// Depthwise (one input and one output channel per group) convolution of a channels-last uint8 image
// xt [H * W][C], one output row: acc [OW][C] = sum over taps of (x - azp) * wt[tap][c], wt = w - w_zp in
// int32. pix / tap: scratch of KH * KW entries each.
void DepthwiseRowInt32(const uint8_t* xt, int64_t H, int64_t W, int64_t C, const int32_t* wt, int64_t KH, int64_t KW,
                       const WindowGeometry& g, int32_t azp, int64_t oh, int32_t* acc, int64_t* pix, int64_t* tap) {
  for (int64_t ow = 0; ow < g.out[1]; ++ow) {
    int32_t* out = acc + ow * C;
    for (int64_t c = 0; c < C; ++c) out[c] = 0;
    const int64_t taps = InsideTaps(g, H, W, KH, KW, oh, ow, pix, tap);
    for (int64_t t = 0; t < taps; ++t) {
      const uint8_t* xr = xt + pix[t] * C;
      const int32_t* wr = wt + tap[t] * C;
      // Modulo 2^32 (unsigned): kernels of more than ~33,000 taps would overflow int32.
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        out[c] = static_cast<int32_t>(static_cast<uint32_t>(out[c]) +
                                      static_cast<uint32_t>((static_cast<int32_t>(xr[c]) - azp) * wr[c]));
      }
    }
  }
}

// The same in float32 for up to kMaxExactTaps taps: every product (x - azp) * (w - wzp) is an integer of at
// most 255 * 255 and every partial sum of at most 258 of them stays below 2^24, so float32 fused
// multiply-adds are exact in any order. x is read as uint8 channels-last (x - azp converted in registers),
// wf [taps][C] holds w - wzp; 64 channels (four registers) accumulate over all taps before one store.
constexpr int64_t kMaxExactTaps = 258;

// x - azp from 16 (8) channels-last uint8 values, as float32 (exact).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) inline __m512 LoadU8AsF32x16(const uint8_t* p,
                                                                                           __m512i zp) {
  return _mm512_cvtepi32_ps(
      _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), zp));
}
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) inline __m512 LoadU8AsF32x16Masked(const uint8_t* p,
                                                                                                 __mmask16 m,
                                                                                                 __m512i zp) {
  return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, p)), zp));
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void DepthwiseRowU8Avx512(
    const uint8_t* xt, int64_t H, int64_t W, int64_t C, const float* wf, int64_t KH, int64_t KW,
    const WindowGeometry& g, int32_t azp, int64_t oh, int32_t* acc, int64_t* pix, int64_t* tap) {
  const __m512i vz = _mm512_set1_epi32(azp);
  for (int64_t ow = 0; ow < g.out[1]; ++ow) {
    int32_t* out = acc + ow * C;
    const int64_t taps = InsideTaps(g, H, W, KH, KW, oh, ow, pix, tap);
    int64_t c0 = 0;
    for (; c0 + 64 <= C; c0 += 64) {
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t t = 0; t < taps; ++t) {
        const uint8_t* xr = xt + pix[t] * C + c0;
        const float* wr = wf + tap[t] * C + c0;
        a0 = _mm512_fmadd_ps(LoadU8AsF32x16(xr, vz), _mm512_loadu_ps(wr), a0);
        a1 = _mm512_fmadd_ps(LoadU8AsF32x16(xr + 16, vz), _mm512_loadu_ps(wr + 16), a1);
        a2 = _mm512_fmadd_ps(LoadU8AsF32x16(xr + 32, vz), _mm512_loadu_ps(wr + 32), a2);
        a3 = _mm512_fmadd_ps(LoadU8AsF32x16(xr + 48, vz), _mm512_loadu_ps(wr + 48), a3);
      }
      _mm512_storeu_si512(out + c0, _mm512_cvtps_epi32(a0));
      _mm512_storeu_si512(out + c0 + 16, _mm512_cvtps_epi32(a1));
      _mm512_storeu_si512(out + c0 + 32, _mm512_cvtps_epi32(a2));
      _mm512_storeu_si512(out + c0 + 48, _mm512_cvtps_epi32(a3));
    }
    for (; c0 < C; c0 += 16) {
      const __mmask16 m = static_cast<__mmask16>(C - c0 >= 16 ? 0xFFFF : (1u << (C - c0)) - 1);
      __m512 a0 = _mm512_setzero_ps();
      for (int64_t t = 0; t < taps; ++t) {
        a0 = _mm512_fmadd_ps(LoadU8AsF32x16Masked(xt + pix[t] * C + c0, m, vz),
                             _mm512_maskz_loadu_ps(m, wf + tap[t] * C + c0), a0);
      }
      _mm512_mask_storeu_epi32(out + c0, m, _mm512_cvtps_epi32(a0));
    }
  }
}

__attribute__((target("avx2,fma"))) inline __m256 LoadU8AsF32x8(const uint8_t* p, __m256i zp) {
  return _mm256_cvtepi32_ps(
      _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))), zp));
}

__attribute__((target("avx2,fma"))) void DepthwiseRowU8Avx2(const uint8_t* xt, int64_t H, int64_t W, int64_t C,
                                                            const float* wf, int64_t KH, int64_t KW,
                                                            const WindowGeometry& g, int32_t azp, int64_t oh,
                                                            int32_t* acc, int64_t* pix, int64_t* tap) {
  const __m256i vz = _mm256_set1_epi32(azp);
  for (int64_t ow = 0; ow < g.out[1]; ++ow) {
    int32_t* out = acc + ow * C;
    const int64_t taps = InsideTaps(g, H, W, KH, KW, oh, ow, pix, tap);
    int64_t c0 = 0;
    for (; c0 + 32 <= C; c0 += 32) {
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t t = 0; t < taps; ++t) {
        const uint8_t* xr = xt + pix[t] * C + c0;
        const float* wr = wf + tap[t] * C + c0;
        a0 = _mm256_fmadd_ps(LoadU8AsF32x8(xr, vz), _mm256_loadu_ps(wr), a0);
        a1 = _mm256_fmadd_ps(LoadU8AsF32x8(xr + 8, vz), _mm256_loadu_ps(wr + 8), a1);
        a2 = _mm256_fmadd_ps(LoadU8AsF32x8(xr + 16, vz), _mm256_loadu_ps(wr + 16), a2);
        a3 = _mm256_fmadd_ps(LoadU8AsF32x8(xr + 24, vz), _mm256_loadu_ps(wr + 24), a3);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c0), _mm256_cvtps_epi32(a0));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c0 + 8), _mm256_cvtps_epi32(a1));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c0 + 16), _mm256_cvtps_epi32(a2));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c0 + 24), _mm256_cvtps_epi32(a3));
    }
    for (; c0 < C; ++c0) {
      float a = 0;
      for (int64_t t = 0; t < taps; ++t) {
        a += static_cast<float>(static_cast<int32_t>(xt[pix[t] * C + c0]) - azp) * wf[tap[t] * C + c0];
      }
      out[c0] = static_cast<int32_t>(a);
    }
  }
}

// Depthwise rows from input rows converted once: each input row's x - azp, as float32 [W][C], is made once per
// thread block (not once per tap of every output pixel that reads it), and an output pixel's sum is then one
// fused multiply-add per tap and 16 (8) channels, with a memory operand. Exact as the functions above
// (kMaxExactTaps). rows[kh]: kernel row kh's converted input row, or null where it lies in the padding.
// Output pixels ow0 <= ow < ow1 have every tap inside the row (no bounds checks); the others skip their
// outside taps. acc [OW][C].
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void ConvertRowU8Avx512(const uint8_t* src, int64_t n,
                                                                                      int32_t azp, float* dst) {
  const __m512i vz = _mm512_set1_epi32(azp);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, LoadU8AsF32x16(src + i, vz));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(dst + i, m, LoadU8AsF32x16Masked(src + i, m, vz));
  }
}

// One output pixel's 16 channels from c0 (mask m), taps outside the row skipped.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) inline void DepthwisePixelF32Avx512(
    const float* const* rows, int64_t W, int64_t C, const float* wf, int64_t KH, int64_t KW, int64_t sw, int64_t pw,
    int64_t dw, int64_t ow, int64_t c0, __mmask16 m, int32_t* acc) {
  __m512 a = _mm512_setzero_ps();
  const int64_t iw0 = ow * sw - pw;
  for (int64_t kh = 0; kh < KH; ++kh) {
    if (rows[kh] == nullptr) continue;
    for (int64_t kw = 0; kw < KW; ++kw) {
      const int64_t iw = iw0 + kw * dw;
      if (iw < 0 || iw >= W) continue;
      a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, rows[kh] + iw * C + c0),
                          _mm512_maskz_loadu_ps(m, wf + (kh * KW + kw) * C + c0), a);
    }
  }
  _mm512_mask_storeu_epi32(acc + ow * C + c0, m, _mm512_cvtps_epi32(a));
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void DepthwiseRowF32Avx512(
    const float* const* rows, int64_t W, int64_t C, const float* wf, int64_t KH, int64_t KW, int64_t OW, int64_t sw,
    int64_t pw, int64_t dw, int64_t ow0, int64_t ow1, int32_t* acc) {
  for (int64_t c0 = 0; c0 < C; c0 += 16) {
    const __mmask16 m = static_cast<__mmask16>(C - c0 >= 16 ? 0xFFFF : (1u << (C - c0)) - 1);
    auto edge = [&](int64_t ow) { DepthwisePixelF32Avx512(rows, W, C, wf, KH, KW, sw, pw, dw, ow, c0, m, acc); };
    int64_t ow = 0;
    for (; ow < std::min(ow0, OW); ++ow) edge(ow);
    // Four inside pixels at a time share each weight load.
    for (; ow + 4 <= ow1; ow += 4) {
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      const int64_t step = sw * C;
      for (int64_t kh = 0; kh < KH; ++kh) {
        if (rows[kh] == nullptr) continue;
        const float* xr = rows[kh] + (ow * sw - pw) * C + c0;
        const float* wr = wf + kh * KW * C + c0;
        for (int64_t kw = 0; kw < KW; ++kw, xr += dw * C, wr += C) {
          const __m512 w = _mm512_maskz_loadu_ps(m, wr);
          a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, xr), w, a0);
          a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, xr + step), w, a1);
          a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, xr + 2 * step), w, a2);
          a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, xr + 3 * step), w, a3);
        }
      }
      int32_t* o = acc + ow * C + c0;
      _mm512_mask_storeu_epi32(o, m, _mm512_cvtps_epi32(a0));
      _mm512_mask_storeu_epi32(o + C, m, _mm512_cvtps_epi32(a1));
      _mm512_mask_storeu_epi32(o + 2 * C, m, _mm512_cvtps_epi32(a2));
      _mm512_mask_storeu_epi32(o + 3 * C, m, _mm512_cvtps_epi32(a3));
    }
    for (; ow < OW; ++ow) edge(ow);
  }
}

__attribute__((target("avx2,fma"))) void ConvertRowU8Avx2(const uint8_t* src, int64_t n, int32_t azp, float* dst) {
  const __m256i vz = _mm256_set1_epi32(azp);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, LoadU8AsF32x8(src + i, vz));
  for (; i < n; ++i) dst[i] = static_cast<float>(static_cast<int32_t>(src[i]) - azp);
}

// One output pixel's 8 channels from c0, taps outside the row skipped.
__attribute__((target("avx2,fma"))) inline void DepthwisePixelF32Avx2(const float* const* rows, int64_t W, int64_t C,
                                                                      const float* wf, int64_t KH, int64_t KW,
                                                                      int64_t sw, int64_t pw, int64_t dw, int64_t ow,
                                                                      int64_t c0, int32_t* acc) {
  __m256 a = _mm256_setzero_ps();
  const int64_t iw0 = ow * sw - pw;
  for (int64_t kh = 0; kh < KH; ++kh) {
    if (rows[kh] == nullptr) continue;
    for (int64_t kw = 0; kw < KW; ++kw) {
      const int64_t iw = iw0 + kw * dw;
      if (iw < 0 || iw >= W) continue;
      a = _mm256_fmadd_ps(_mm256_loadu_ps(rows[kh] + iw * C + c0), _mm256_loadu_ps(wf + (kh * KW + kw) * C + c0), a);
    }
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + ow * C + c0), _mm256_cvtps_epi32(a));
}

__attribute__((target("avx2,fma"))) void DepthwiseRowF32Avx2(const float* const* rows, int64_t W, int64_t C,
                                                             const float* wf, int64_t KH, int64_t KW, int64_t OW,
                                                             int64_t sw, int64_t pw, int64_t dw, int64_t ow0,
                                                             int64_t ow1, int32_t* acc) {
  int64_t c0 = 0;
  for (; c0 + 8 <= C; c0 += 8) {
    auto edge = [&](int64_t ow) { DepthwisePixelF32Avx2(rows, W, C, wf, KH, KW, sw, pw, dw, ow, c0, acc); };
    int64_t ow = 0;
    for (; ow < std::min(ow0, OW); ++ow) edge(ow);
    for (; ow + 4 <= ow1; ow += 4) {
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      const int64_t step = sw * C;
      for (int64_t kh = 0; kh < KH; ++kh) {
        if (rows[kh] == nullptr) continue;
        const float* xr = rows[kh] + (ow * sw - pw) * C + c0;
        const float* wr = wf + kh * KW * C + c0;
        for (int64_t kw = 0; kw < KW; ++kw, xr += dw * C, wr += C) {
          const __m256 w = _mm256_loadu_ps(wr);
          a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xr), w, a0);
          a1 = _mm256_fmadd_ps(_mm256_loadu_ps(xr + step), w, a1);
          a2 = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 2 * step), w, a2);
          a3 = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 3 * step), w, a3);
        }
      }
      int32_t* o = acc + ow * C + c0;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), _mm256_cvtps_epi32(a0));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + C), _mm256_cvtps_epi32(a1));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 2 * C), _mm256_cvtps_epi32(a2));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 3 * C), _mm256_cvtps_epi32(a3));
    }
    for (; ow < OW; ++ow) edge(ow);
  }
  for (; c0 < C; ++c0) {  // the last C % 8 channels
    for (int64_t ow = 0; ow < OW; ++ow) {
      float a = 0;
      const int64_t iw0 = ow * sw - pw;
      for (int64_t kh = 0; kh < KH; ++kh) {
        if (rows[kh] == nullptr) continue;
        for (int64_t kw = 0; kw < KW; ++kw) {
          const int64_t iw = iw0 + kw * dw;
          if (iw >= 0 && iw < W) a += rows[kh][iw * C + c0] * wf[(kh * KW + kw) * C + c0];
        }
      }
      acc[ow * C + c0] = static_cast<int32_t>(a);
    }
  }
}

// Output rows [oh0, oh1) of a depthwise convolution whose input rows are converted once each into a cache of
// `slots` rows (KH * dilation: input row ih goes to slot ih % slots, and the KH rows of one output row,
// ih0 + kh * dilation, never share one): slot_row(slot) is a slot's storage, build(ih, row) converts input
// row ih into it, run(oh, rows) computes output row oh from its KH rows (`padding` for rows outside the
// input).
template <typename Row, typename SlotRow, typename Build, typename RunRow>
void ForEachCachedRow(const WindowGeometry& g, int64_t oh0, int64_t oh1, int64_t KH, int64_t H, int64_t slots,
                      const Row* padding, SlotRow slot_row, Build build, RunRow run) {
  std::vector<int64_t> tags(slots, -1);
  std::vector<const Row*> rows(KH);
  for (int64_t oh = oh0; oh < oh1; ++oh) {
    for (int64_t kh = 0; kh < KH; ++kh) {
      const int64_t ih = oh * g.strides[0] - g.pad_begin[0] + kh * g.dilations[0];
      if (ih < 0 || ih >= H) {
        rows[kh] = padding;
        continue;
      }
      const int64_t slot = ih % slots;
      Row* row = slot_row(slot);
      if (tags[slot] != ih) {
        build(ih, row);
        tags[slot] = ih;
      }
      rows[kh] = row;
    }
    run(oh, rows.data());
  }
}

// The shape of one 1-D or 2-D integer convolution, checked against the node's attributes (a 1-D
// convolution as 2-D with H = 1).
struct IntConvShape {
  WindowGeometry g;
  Dims out_dims;
  int64_t N, C, H, W, OC, KH, KW, group, cpg, ocpg, OH, OW, P, HW, K;
  int32_t azp;  // x's zero point on the uint8 image (int8 data is shifted by 128)
  std::vector<int32_t> wzp;
  bool channels_last, depthwise, pointwise;
};

// Sets *handled = false for what FastIntConv does not take (ranks other than 3 and 4, dtypes other than
// uint8/int8); else checks the attributes and zero points and fills *s.
absl::Status ResolveIntConv(const KernelContext& ctx, const Tensor& x, const Tensor& w, int xzp_index, int wzp_index,
                            bool channels_last, bool* handled, IntConvShape* s) {
  *handled = false;
  if (x.rank() < 3 || x.rank() > 4 || w.rank() != x.rank() || !IsInt8(x) || !IsInt8(w)) return absl::OkStatus();
  const bool one_d = x.rank() == 3;
  const int r = x.rank();
  // NCHW, or channels-last [N, (H,) W, C] (NhwcQLinearConv).
  s->channels_last = channels_last;
  s->N = x.dim(0);
  s->C = channels_last ? x.dim(r - 1) : x.dim(1);
  s->H = one_d ? 1 : x.dim(channels_last ? 1 : 2);
  s->W = x.dim(channels_last ? r - 2 : r - 1);
  s->OC = w.dim(0);
  s->KH = one_d ? 1 : w.dim(2);
  s->KW = w.dim(w.rank() - 1);
  std::vector<int64_t> k = ctx.node->GetInts("kernel_shape");
  const std::vector<int64_t> w_spatial(w.dims().begin() + 2, w.dims().end());
  if (!k.empty() && k != w_spatial) {
    return ctx.Error(absl::StrCat("kernel_shape [", absl::StrJoin(k, ","), "] disagrees with the spatial dims of w ",
                                  DimsToString(w.dims())));
  }
  std::vector<int64_t> in = channels_last ? std::vector<int64_t>(x.dims().begin() + 1, x.dims().end() - 1)
                                          : std::vector<int64_t>(x.dims().begin() + 2, x.dims().end());
  CJIT_ASSIGN_OR_RETURN(WindowGeometry g1, ComputeWindowGeometry(*ctx.node, in, w_spatial, false, false));
  WindowGeometry& g = s->g;
  g = g1;
  if (one_d) {  // as 2-D with H = 1
    g.strides.insert(g.strides.begin(), 1);
    g.dilations.insert(g.dilations.begin(), 1);
    g.pad_begin.insert(g.pad_begin.begin(), 0);
    g.pad_end.insert(g.pad_end.begin(), 0);
    g.out.insert(g.out.begin(), 1);
  }
  const int64_t group = s->group = ctx.node->GetInt("group", 1);
  const int64_t C = s->C, OC = s->OC;
  if (group <= 0 || C % group || OC % group || w.dim(1) * group != C) {
    return ctx.Error(absl::StrCat("group ", group, " does not fit ", C, " input and ", OC, " output channels (w ",
                                  DimsToString(w.dims()), ")"));
  }
  CJIT_ASSIGN_OR_RETURN(std::vector<int32_t> xzp, ZeroPoints(ctx, xzp_index, x, "x"));
  CJIT_ASSIGN_OR_RETURN(s->wzp, ZeroPoints(ctx, wzp_index, w, "w"));
  if (xzp.size() != 1) return ctx.Error(absl::StrCat("the zero point of x has ", xzp.size(), " values; expected 1"));
  if (s->wzp.size() != 1 && static_cast<int64_t>(s->wzp.size()) != OC) {
    return ctx.Error(absl::StrCat("the zero point of w has ", s->wzp.size(), " values; expected 1 or ", OC));
  }
  *handled = true;
  s->azp = xzp[0] + (x.dtype() == DType::kI8 ? 128 : 0);
  s->cpg = C / group;
  s->ocpg = OC / group;
  s->OH = g.out[0];
  s->OW = g.out[1];
  s->P = s->OH * s->OW;
  s->HW = s->H * s->W;
  s->K = s->KH * s->KW * s->cpg;
  s->out_dims = {s->N};
  if (!channels_last) s->out_dims.push_back(OC);
  for (int64_t d : g1.out) s->out_dims.push_back(d);
  if (channels_last) s->out_dims.push_back(OC);
  s->depthwise = s->cpg == 1 && s->ocpg == 1 && group > 1;
  s->pointwise = s->KH == 1 && s->KW == 1 && group == 1 && g.strides[0] == 1 && g.strides[1] == 1 &&
                 g.pad_begin[0] == 0 && g.pad_begin[1] == 0 && s->OH == s->H && s->OW == s->W;
  return absl::OkStatus();
}

// One integer convolution: its weights prepared for the path it takes, then run image by image.
class IntConvRun : private IntConvShape {
 public:
  IntConvRun(const KernelContext& ctx, const Tensor& x, const Tensor& w, const ConvSink& sink, IntConvShape shape)
      : IntConvShape(std::move(shape)), ctx_(ctx), x_(x), w_(w), sink_(sink) {}

  // Chooses the path and prepares w for it (once per node when w and its zero point are constants).
  void Prepare(int w_index, int wzp_index);

  void Run() {
    for (int64_t n = 0; n < N; ++n) {
      const uint8_t* xt = ChannelsLastImage(n);
      if (dw_vnni_) {
        DepthwiseVnni(n, xt);
      } else if (depthwise && row_cache_) {
        DepthwiseRowCache(n, xt);
      } else if (depthwise) {
        DepthwiseRows(n, xt);
      } else {
        Gemm(n, xt);
      }
      sink_.image(n, P, OC);
    }
  }

 private:
  // w - w_zp as int32 [taps][C] of a depthwise convolution.
  void DepthwiseValues(std::vector<int32_t>* out) const;
  // The rhs of each group's product: B[k][n] with k = (kh, kw, c) (the channels-last patch order).
  void PrepareGemm(bool w_constant);
  // Image n channels-last as uint8 (int8 made uint8): the input itself or a transposed copy.
  const uint8_t* ChannelsLastImage(int64_t n);
  void DepthwiseVnni(int64_t n, const uint8_t* xt);
  void DepthwiseRowCache(int64_t n, const uint8_t* xt);
  void DepthwiseRows(int64_t n, const uint8_t* xt);
  void Gemm(int64_t n, const uint8_t* xt);
  // The im2col patches of output rows [r0, r0 + rows) of group gi into col_ ([rows * OW][K]).
  void Patches(const uint8_t* xt, int64_t r0, int64_t rows, int64_t gi);

  const KernelContext& ctx_;
  const Tensor& x_;
  const Tensor& w_;
  const ConvSink& sink_;
  std::vector<Int8Rhs> rhs_;
  DepthwiseVnniWeights dwv_;
  bool dw_vnni_ = false, dw_f32_ = false, row_cache_ = false;
  int64_t dw_slots_ = 0, dw_ow0_ = 0, dw_ow1_ = 0, chunk_rows_ = 1;
  std::vector<int32_t> wt_;   // depthwise int32: [taps][C] = w - w_zp
  std::vector<float> wf_;     // depthwise float32: the same values
  uint8_t* col_ = nullptr;    // im2col patches of one chunk
  int32_t* chunk_ = nullptr;  // [rows * OW][OC] sums of one chunk
};

void IntConvRun::DepthwiseValues(std::vector<int32_t>* out) const {
  out->resize(KH * KW * C);
  const bool ws = w_.dtype() == DType::kI8;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t t = 0; t < KH * KW; ++t) {
      const int32_t v = ws ? w_.data<int8_t>()[c * KH * KW + t] : w_.data<uint8_t>()[c * KH * KW + t];
      (*out)[t * C + c] = v - wzp[wzp.size() > 1 ? c : 0];
    }
}

void IntConvRun::PrepareGemm(bool w_constant) {
  for (int64_t gi = 0; gi < group; ++gi) {
    const int64_t woff = gi * ocpg * cpg * KH * KW;
    const int32_t* zp = wzp.size() > 1 ? wzp.data() + gi * ocpg : wzp.data();
    // From w [OC][cpg][KH][KW].
    rhs_.push_back(PreparedInt8Rhs(
        w_, w_constant, absl::StrCat("conv:", gi, ":", K, ":", ocpg, ":", reinterpret_cast<uintptr_t>(ctx_.node)), K,
        ocpg, 1, K, zp, wzp.size() > 1, [&](std::vector<uint8_t>* scratch) -> const void* {
          const uint8_t* src = static_cast<const uint8_t*>(w_.raw()) + woff;
          scratch->resize(ocpg * K);
          for (int64_t o = 0; o < ocpg; ++o)
            for (int64_t c = 0; c < cpg; ++c)
              for (int64_t t = 0; t < KH * KW; ++t) (*scratch)[o * K + t * cpg + c] = src[(o * cpg + c) * KH * KW + t];
          return scratch->data();
        }));
  }
}

void IntConvRun::Prepare(int w_index, int wzp_index) {
  // Prepared once only when w and its zero point are both constants (the zero point is folded into it).
  const bool w_constant = ctx_.is_constant(w_index) && (!ctx_.has(wzp_index) || ctx_.is_constant(wzp_index));
  if (!depthwise) PrepareGemm(w_constant);
  // Depthwise: on uint8 directly with AVX-512 VNNI where w - w_zp fits int8 (runtime/cpu/depthwise_int8.h),
  // requantized in the kernel when the sink requantizes; else float32 (exact, above) on AVX-512 / AVX2 for
  // kernels of up to kMaxExactTaps taps; else int32.
  dw_slots_ = KH * g.dilations[0];
  if (depthwise && DepthwiseVnniAvailable() && g.pad_begin[0] >= 0 && g.pad_begin[1] >= 0 && g.strides[1] > 0) {
    DepthwiseVnniGeometry geo;
    geo.C = C;
    geo.W = W;
    geo.KH = KH;
    geo.KW = KW;
    geo.OW = OW;
    geo.sw = g.strides[1];
    geo.pw = g.pad_begin[1];
    geo.dw = g.dilations[1];
    geo.x_zp = azp;
    Int8Requant rq0;
    const bool fuse = sink_.requant && sink_.requant(0, 0, &rq0);
    const int64_t row_bytes = DepthwiseVnniTapRowBytes(geo);
    // Under 64 channels the 16-channel chunks' rearrangement costs more than the float32 path (MobileNetV2's
    // 112x112x32 depthwise: 293 us against 222).
    dw_vnni_ = C >= 64 && (dw_slots_ + 1) * row_bytes <= (int64_t{16} << 20) &&
               PrepareDepthwiseVnni(
                   w_, w_constant, absl::StrCat(KH, ":", KW, ":", C, ":", reinterpret_cast<uintptr_t>(ctx_.node)),
                   [this](std::vector<int32_t>* out) { DepthwiseValues(out); }, geo, fuse ? &rq0 : nullptr, &dwv_);
  }
  if (depthwise && !dw_vnni_) DepthwiseValues(&wt_);
  dw_f32_ = depthwise && !dw_vnni_ && KH * KW <= kMaxExactTaps && (CpuHasAvx512() || CpuHasAvx2());
  if (dw_f32_) wf_.assign(wt_.begin(), wt_.end());
  // The float32 depthwise path converts input rows once into a per-thread cache of KH * dilation rows (up to
  // 16 MiB); output pixels dw_ow0 <= ow < dw_ow1 read only inside the row.
  row_cache_ = dw_f32_ && g.pad_begin[0] >= 0 && g.pad_begin[1] >= 0 && g.strides[1] > 0 &&
               W * C <= (int64_t{4} << 20) / dw_slots_;
  if (row_cache_) {
    const int64_t sw = g.strides[1], pw = g.pad_begin[1], last = W - 1 - (KW - 1) * g.dilations[1] + pw;
    dw_ow0_ = std::min<int64_t>((pw + sw - 1) / sw, OW);
    dw_ow1_ = last < 0 ? 0 : std::min<int64_t>(last / sw + 1, OW);
  }
  // Output rows per chunk: the chunk's int32 sums (about 256 KiB) stay in cache until the sink requantizes
  // them, and its im2col patches stay near 1 MiB.
  int64_t chunk_pixels = (int64_t{1} << 16) / std::max<int64_t>(OC, 1);
  if (!pointwise && !depthwise) chunk_pixels = std::min(chunk_pixels, (int64_t{1} << 20) / std::max<int64_t>(K, 1));
  chunk_rows_ = std::clamp<int64_t>(chunk_pixels / std::max<int64_t>(OW, 1), 1, OH);
  col_ = pointwise || depthwise ? nullptr : Scratch<uint8_t>(kScratchColumns, chunk_rows_ * OW * K);
  chunk_ = depthwise ? nullptr : Scratch<int32_t>(kScratchProduct, chunk_rows_ * OW * OC);
}

const uint8_t* IntConvRun::ChannelsLastImage(int64_t n) {
  const uint8_t flip = x_.dtype() == DType::kI8 ? 0x80 : 0;
  const uint8_t* image = static_cast<const uint8_t*>(x_.raw()) + n * C * HW;
  if (channels_last && !flip) return image;
  uint8_t* xt = Scratch<uint8_t>(kScratchImage, HW * C);
  if (channels_last) {
    std::memcpy(xt, image, HW * C);
  } else {
    BatchedTranspose(image, xt, 1, 1, C, HW, ctx_.threads);
  }
  if (flip) {
    for (int64_t i = 0; i < HW * C; ++i) xt[i] ^= flip;
  }
  return xt;
}

void IntConvRun::DepthwiseVnni(int64_t n, const uint8_t* xt) {
  // As the float32 row cache below, with tap rows (runtime/cpu/depthwise_int8.h) built once per input row;
  // rows in the padding read one tap row of zero points.
  const int64_t row_bytes = DepthwiseVnniTapRowBytes(dwv_);
  const int dt = ThreadsForWork(ctx_.threads, static_cast<double>(P) * C * KH * KW);
  const int64_t blocks = std::min<int64_t>(std::max(dt, 1), OH);
  ParallelFor(dt, blocks, [&](int64_t b) {
    uint8_t* cache = Scratch<uint8_t>(kScratchDwRows, (dw_slots_ + 1) * row_bytes);
    uint8_t* padding = cache + dw_slots_ * row_bytes;
    BuildDepthwiseVnniTapRow(dwv_, nullptr, padding);
    int32_t* out = dwv_.requant ? nullptr : Scratch<int32_t>(kScratchRow, OW * C);
    ForEachCachedRow<uint8_t>(
        g, OH * b / blocks, OH * (b + 1) / blocks, KH, H, dw_slots_, padding,
        [&](int64_t slot) { return cache + slot * row_bytes; },
        [&](int64_t ih, uint8_t* row) { BuildDepthwiseVnniTapRow(dwv_, xt + ih * W * C, row); },
        [&](int64_t oh, const uint8_t* const* rows) {
          Int8Requant rq;
          if (dwv_.requant && sink_.requant(n, oh * OW, &rq)) {
            DepthwiseVnniRow(dwv_, rows, rq.y, rq.ldy, nullptr);
          } else {
            DepthwiseVnniRow(dwv_, rows, nullptr, 0, out);
            sink_.rows(n, oh * OW, OW, out, P, OC);
          }
        });
  });
}

void IntConvRun::DepthwiseRowCache(int64_t n, const uint8_t* xt) {
  // Contiguous blocks of output rows over the threads; each block converts an input row once, into the
  // slot ih % slots of its cache (the KH rows of one output row, ih0 + kh * dilation, never share one).
  const int dt = ThreadsForWork(ctx_.threads, static_cast<double>(P) * C * KH * KW);
  const int64_t blocks = std::min<int64_t>(std::max(dt, 1), OH);
  ParallelFor(dt, blocks, [&](int64_t b) {
    float* cache = Scratch<float>(kScratchDwRows, dw_slots_ * W * C);
    int32_t* out = Scratch<int32_t>(kScratchRow, OW * C);
    ForEachCachedRow<float>(
        g, OH * b / blocks, OH * (b + 1) / blocks, KH, H, dw_slots_, /*padding=*/nullptr,
        [&](int64_t slot) { return cache + slot * W * C; },
        [&](int64_t ih, float* row) {
          if (CpuHasAvx512()) {
            ConvertRowU8Avx512(xt + ih * W * C, W * C, azp, row);
          } else {
            ConvertRowU8Avx2(xt + ih * W * C, W * C, azp, row);
          }
        },
        [&](int64_t oh, const float* const* rows) {
          if (CpuHasAvx512()) {
            DepthwiseRowF32Avx512(rows, W, C, wf_.data(), KH, KW, OW, g.strides[1], g.pad_begin[1], g.dilations[1],
                                  dw_ow0_, dw_ow1_, out);
          } else {
            DepthwiseRowF32Avx2(rows, W, C, wf_.data(), KH, KW, OW, g.strides[1], g.pad_begin[1], g.dilations[1],
                                dw_ow0_, dw_ow1_, out);
          }
          sink_.rows(n, oh * OW, OW, out, P, OC);
        });
  });
}

void IntConvRun::DepthwiseRows(int64_t n, const uint8_t* xt) {
  // Row by row over the threads, each row's sums handed to the sink while in cache.
  const int dt = ThreadsForWork(ctx_.threads, static_cast<double>(P) * C * KH * KW);
  ParallelFor(dt, OH, [&](int64_t oh) {
    // The running thread's buffers: the row's sums, then the inside taps' pixel and tap indices.
    int32_t* out = Scratch<int32_t>(kScratchRow, OW * C);
    int64_t* pix = Scratch<int64_t>(kScratchTaps, 2 * KH * KW);
    int64_t* tap = pix + KH * KW;
    if (dw_f32_ && CpuHasAvx512()) {
      DepthwiseRowU8Avx512(xt, H, W, C, wf_.data(), KH, KW, g, azp, oh, out, pix, tap);
    } else if (dw_f32_) {
      DepthwiseRowU8Avx2(xt, H, W, C, wf_.data(), KH, KW, g, azp, oh, out, pix, tap);
    } else {
      DepthwiseRowInt32(xt, H, W, C, wt_.data(), KH, KW, g, azp, oh, out, pix, tap);
    }
    sink_.rows(n, oh * OW, OW, out, P, OC);
  });
}

void IntConvRun::Patches(const uint8_t* xt, int64_t r0, int64_t rows, int64_t gi) {
  ParallelFor(ThreadsForElements(ctx_.threads, rows * OW * K), rows * OW, [&](int64_t i) {
    const int64_t oh = r0 + i / OW, ow = i % OW;
    uint8_t* dst = col_ + i * K;
    const int64_t iw0 = ow * g.strides[1] - g.pad_begin[1];
    // One group, no dilation along W, the window inside the row: a kernel row's KW pixels are one
    // contiguous run of KW * C bytes (a 7x7 stem on 3 channels: 7 copies of 21 bytes, not 49 of 3).
    const bool whole_rows = group == 1 && g.dilations[1] == 1 && iw0 >= 0 && iw0 + KW <= W;
    for (int64_t kh = 0; kh < KH; ++kh) {
      const int64_t ih = oh * g.strides[0] - g.pad_begin[0] + kh * g.dilations[0];
      if (whole_rows) {
        if (ih < 0 || ih >= H) {
          std::memset(dst, azp, KW * C);
        } else {
          std::memcpy(dst, xt + (ih * W + iw0) * C, KW * C);
        }
        dst += KW * C;
        continue;
      }
      for (int64_t kw = 0; kw < KW; ++kw, dst += cpg) {
        const int64_t iw = ow * g.strides[1] - g.pad_begin[1] + kw * g.dilations[1];
        if (ih < 0 || ih >= H || iw < 0 || iw >= W) {
          std::memset(dst, azp, cpg);  // padding is the zero point: contributes 0
        } else {
          std::memcpy(dst, xt + (ih * W + iw) * C + gi * cpg, cpg);
        }
      }
    }
  });
}

void IntConvRun::Gemm(int64_t n, const uint8_t* xt) {
  for (int64_t r0 = 0; r0 < OH; r0 += chunk_rows_) {
    const int64_t rows = std::min(chunk_rows_, OH - r0);
    Int8Requant rq;
    const bool fusable = group == 1 && sink_.requant && sink_.requant(n, r0 * OW, &rq);
    bool requantized = false;
    if (pointwise) {
      requantized = Int8Gemm(xt + r0 * OW * C, C, rows * OW, &azp, false, rhs_[0], chunk_, OC, ctx_.threads,
                             fusable ? &rq : nullptr);
    } else {
      for (int64_t gi = 0; gi < group; ++gi) {
        Patches(xt, r0, rows, gi);
        requantized = Int8Gemm(col_, K, rows * OW, &azp, false, rhs_[gi], chunk_ + gi * ocpg, OC, ctx_.threads,
                               fusable ? &rq : nullptr);
      }
    }
    if (!requantized) sink_.rows(n, r0 * OW, rows * OW, chunk_, P, OC);
  }
}

}  // namespace

absl::Status FastIntConv(const KernelContext& ctx, const Tensor& x, const Tensor& w, int xzp_index, int wzp_index,
                         int w_index, const ConvSink& sink, bool* handled, bool channels_last) {
  IntConvShape shape;
  CJIT_RETURN_IF_ERROR(ResolveIntConv(ctx, x, w, xzp_index, wzp_index, channels_last, handled, &shape));
  if (!*handled) return absl::OkStatus();
  CJIT_RETURN_IF_ERROR(sink.begin(shape.out_dims));
  if (shape.N == 0 || shape.OC == 0 || shape.P == 0) return absl::OkStatus();  // an empty output
  IntConvRun run(ctx, x, w, sink, std::move(shape));
  run.Prepare(w_index, wzp_index);
  run.Run();
  return absl::OkStatus();
}

}  // namespace quant
}  // namespace cjit
