// Depthwise and few-input-channel convolution loops, per ISA (conv_kernels.h).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "compiler/codegen/fusion_plan.h"
#include "compiler/ir/cpu_isa.h"
#include "runtime/cpu/conv_kernels.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/simd.h"

namespace cjit {
namespace simd {
namespace {

// The interior tile of the depthwise loop: kDwPix output pixels (`step` floats apart) of one channel block,
// every tap inside the input along W; rows kh in [0, kh_n) from `x` (tap (kh, 0) of pixel 0 at x + kh *
// row_stride), weights from `w` (tap (kh, kw) at w + (kh * KW + kw) * C). acc[kDwPix] is read and written.
// Out of line, one function per vector width (and ISA): inlined into DepthwiseBody with its other variants,
// the inner loop ran out of general registers and reloaded its base pointer and stride from the stack for
// each multiply-add (three loads per FMA; the loop ran at half the FMA rate).
constexpr int kDwPix = 8;  // DwTileBody's loop is written for 8
template <typename V, int KWT>
inline __attribute__((always_inline)) void DwTileBody(const float* x, const float* w, int64_t kh_n, int64_t KW_,
                                                      int64_t C, int64_t row_stride, int64_t tap_stride, int64_t step,
                                                      V* acc_io) {
  const int64_t KW = KWT ? KWT : KW_;
  V acc[kDwPix];
#pragma GCC unroll 8
  for (int j = 0; j < kDwPix; ++j) acc[j] = acc_io[j];
  // Pixel j at p0 + j * step for j < 4 and p4 + (j - 4) * step: base + index * {1, 2} and a 3 * step
  // register, all x86 addressing modes, so the loop needs 5 general registers whatever the kernel size.
  const int64_t s1 = step, s3 = 3 * step;
  for (int64_t kh = 0; kh < kh_n; ++kh) {
    const float* p0 = x + kh * row_stride;
    const float* wr = w + kh * KW * C;
    for (int64_t kw = 0; kw < KW; ++kw) {
      const V wv = LoadV<V>(wr);
      const float* p4 = p0 + 4 * s1;
      acc[0] += LoadV<V>(p0) * wv;
      acc[1] += LoadV<V>(p0 + s1) * wv;
      acc[2] += LoadV<V>(p0 + 2 * s1) * wv;
      acc[3] += LoadV<V>(p0 + s3) * wv;
      acc[4] += LoadV<V>(p4) * wv;
      acc[5] += LoadV<V>(p4 + s1) * wv;
      acc[6] += LoadV<V>(p4 + 2 * s1) * wv;
      acc[7] += LoadV<V>(p4 + s3) * wv;
      wr += C;
      p0 += tap_stride;
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < kDwPix; ++j) acc_io[j] = acc[j];
}
#define CJIT_DW_TILE(NAME, ATTR, V)                                                                            \
  ATTR __attribute__((noinline)) void NAME(const float* x, const float* w, int64_t kh_n, int64_t KW, int64_t C, \
                                           int64_t row_stride, int64_t tap_stride, int64_t step, V* acc) {     \
    switch (KW) {                                                                                              \
      case 3: return DwTileBody<V, 3>(x, w, kh_n, KW, C, row_stride, tap_stride, step, acc);                   \
      case 5: return DwTileBody<V, 5>(x, w, kh_n, KW, C, row_stride, tap_stride, step, acc);                   \
      case 7: return DwTileBody<V, 7>(x, w, kh_n, KW, C, row_stride, tap_stride, step, acc);                   \
      default: return DwTileBody<V, 0>(x, w, kh_n, KW, C, row_stride, tap_stride, step, acc);                  \
    }                                                                                                          \
  }
CJIT_DW_TILE(DwTile16, __attribute__((target("avx512f,fma"))), V16f)
CJIT_DW_TILE(DwTile8, __attribute__((target("avx2,fma"))), V8f)
CJIT_DW_TILE(DwTile4, , V4f)
#undef CJIT_DW_TILE
// The tile function for vector type V (only called from code of an ISA that has V's width).
template <typename V>
inline __attribute__((always_inline)) void DwTile(const float* x, const float* w, int64_t kh_n, int64_t KW, int64_t C,
                                                  int64_t row_stride, int64_t tap_stride, int64_t step, V* acc) {
  if constexpr (std::is_same_v<V, V16f>) DwTile16(x, w, kh_n, KW, C, row_stride, tap_stride, step, acc);
  else if constexpr (std::is_same_v<V, V8f>) DwTile8(x, w, kh_n, KW, C, row_stride, tap_stride, step, acc);
  else DwTile4(x, w, kh_n, KW, C, row_stride, tap_stride, step, acc);
}

// Rows [row_begin, row_end) of N * OH output rows, any window (the tap loops of DwTile unroll for widths 3, 5
// and 7; one body for every window size: a body per size made no measurable difference at run time and, under
// the fuzz build's sanitizers, 20 minutes of Clang's GVN). One channel block (a vector of channels,
// ForChannelBlocksOverlapping) at a time over all the rows: the KH input rows a row of outputs reads then stay
// in L1 for the next rows (all channels of five 64 x 32 rows are 40 KiB, more than a 32 KiB L1: each
// multiply-add waited on L2, 0.5 per cycle; one 16-channel block's are 20 KiB). Output pixels run kDwPix at a
// time (DwTile: kDwPix independent accumulators). Interior groups (every tap inside the input along W) read the
// input in place; border groups (the first and last pixels of a row, and a last partial group) read a
// zero-padded copy of the kh_n x span window of the block's channels they cover, so they run the same tile (with
// one accumulator per pixel and a check per tap, a 64-wide 5x5 convolution spent as long on its 8 border pixels
// as on the other 56). Single channels only where C < 4.
template <typename VW>
inline __attribute__((always_inline)) void DepthwiseBody(const DwArgs& a, int64_t row_begin, int64_t row_end) {
  const int64_t KH = a.KH, KW = a.KW, C = a.C;
  const std::vector<PostOp>* ops = a.ops && !a.ops->empty() ? a.ops : nullptr;
  constexpr int kPix = kDwPix;
  // Interior output columns: ow * sw - pw >= 0 and ow * sw - pw + (KW - 1) * dw <= W - 1.
  int64_t ow_lo = (a.pw + a.sw - 1) / a.sw;
  int64_t last = a.W - 1 + a.pw - (KW - 1) * a.dw;
  int64_t ow_hi = last < 0 ? 0 : std::min(a.OW, last / a.sw + 1);
  if (ow_lo > ow_hi) ow_lo = ow_hi;
  // The input columns a group of kPix pixels covers, and the padded window for border groups.
  const int64_t span = (kPix - 1) * a.sw + (KW - 1) * a.dw + 1;
  constexpr int64_t kMaxLanes = sizeof(VW) / sizeof(float);
  std::vector<float> window(static_cast<size_t>(KH * span * kMaxLanes));
  ForChannelBlocksOverlapping<VW>(C, [&](auto vtag, int64_t c0) __attribute__((always_inline)) {
    using V = decltype(vtag);
    constexpr int64_t lanes = std::is_same_v<V, float> ? 1 : sizeof(V) / sizeof(float);
    for (int64_t row = row_begin; row < row_end; ++row) {
      const int64_t n = row / a.OH, oh = row % a.OH;
      const float* xn = a.x + n * a.H * a.W * C;
      float* yr = a.y + row * a.OW * C;
      const int64_t ih0 = oh * a.sh - a.ph;
      // The rows of the window inside the input: kh in [kh_lo, kh_hi).
      int64_t kh_lo = 0, kh_hi = KH;
      while (kh_lo < KH && ih0 + kh_lo * a.dh < 0) ++kh_lo;
      while (kh_hi > kh_lo && ih0 + (kh_hi - 1) * a.dh >= a.H) --kh_hi;
      const int64_t kh_n = kh_hi - kh_lo;
      // np (<= kPix) pixels from ow; `x0` holds tap (kh_lo, 0) of pixel ow at the block's first channel,
      // columns `ld` floats apart, kh rows row_stride apart.
      auto group = [&](int64_t ow, int np, const float* x0, int64_t ld, int64_t row_stride)
          __attribute__((always_inline)) {
        if constexpr (std::is_same_v<V, float>) {
          for (int j = 0; j < np; ++j) {
            float acc = a.bias ? a.bias[c0] : 0.0f;
            for (int64_t kh = 0; kh < kh_n; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw)
                acc += x0[kh * row_stride + (j * a.sw + kw * a.dw) * ld] * a.w[((kh_lo + kh) * KW + kw) * C + c0];
            if (ops) {
              for (const PostOp& op : *ops) acc = ScalarOp(op, acc, c0);
            }
            yr[(ow + j) * C + c0] = acc;
          }
        } else {
          V b = {};
          if (a.bias) b = LoadV<V>(a.bias + c0);
          V acc[kPix];
#pragma GCC unroll 8
          for (int j = 0; j < kPix; ++j) acc[j] = b;
          if (kh_n > 0) {
            DwTile<V>(x0, a.w + kh_lo * KW * C + c0, kh_n, KW, C, row_stride, a.dw * ld, a.sw * ld, acc);
          }
          ApplyOpsTile<kPix>(acc, ops, [c0](int) { return c0; });
          float* yp = yr + ow * C + c0;
          if (np == kPix) {
#pragma GCC unroll 8
            for (int j = 0; j < kPix; ++j) StoreV(yp + j * C, acc[j]);
          } else {
            for (int j = 0; j < np; ++j) StoreV(yp + j * C, acc[j]);
          }
        }
      };
      // A border group: the block's channels of window columns [iw0, iw0 + span), zeros outside [0, W).
      auto border = [&](int64_t ow, int np) __attribute__((always_inline)) {
        const int64_t iw0 = ow * a.sw - a.pw;
        const int64_t lo = std::clamp<int64_t>(-iw0, 0, span), hi = std::clamp<int64_t>(a.W - iw0, lo, span);
        for (int64_t kh = 0; kh < kh_n; ++kh) {
          float* dst = window.data() + kh * span * lanes;
          const float* src = xn + ((ih0 + (kh_lo + kh) * a.dh - a.x_row0) * a.W + iw0) * C + c0;
          std::fill(dst, dst + lo * lanes, 0.0f);
          for (int64_t q = lo; q < hi; ++q) std::memcpy(dst + q * lanes, src + q * C, lanes * sizeof(float));
          std::fill(dst + hi * lanes, dst + span * lanes, 0.0f);
        }
        group(ow, np, window.data(), lanes, span * lanes);
      };
      int64_t ow = 0;
      for (; ow < ow_lo; ow += kPix) border(ow, static_cast<int>(std::min<int64_t>(kPix, a.OW - ow)));
      const float* row0 = xn + (ih0 + kh_lo * a.dh - a.x_row0) * a.W * C + c0;
      for (; ow + kPix <= ow_hi; ow += kPix) group(ow, kPix, row0 + (ow * a.sw - a.pw) * C, C, a.dh * a.W * C);
      for (; ow < a.OW; ow += kPix) border(ow, static_cast<int>(std::min<int64_t>(kPix, a.OW - ow)));
    }
  });
}

__attribute__((target("avx512f,fma"))) void DepthwiseAvx512(const DwArgs& a, int64_t r0, int64_t r1) {
  DepthwiseBody<V16f>(a, r0, r1);
}
__attribute__((target("avx2,fma"))) void DepthwiseAvx2(const DwArgs& a, int64_t r0, int64_t r1) {
  DepthwiseBody<V8f>(a, r0, r1);
}
void DepthwiseBaseline(const DwArgs& a, int64_t r0, int64_t r1) { DepthwiseBody<V4f>(a, r0, r1); }

// P output pixels (ow.., `np` of them valid) x NB vectors of output channels from o0 of one output row,
// P * NB accumulators in registers (6 x 4 or 12 x 2 of 16 lanes: 24 of the 32 zmm registers, plus NB
// weight vectors and a broadcast). Checked: some pixel's window crosses the left or right edge (each tap's
// column is tested); else none does and no test runs.
template <typename V, int CT, int P, int NB, bool Checked>
inline __attribute__((always_inline)) void FewChannelTile(const FcArgs& a, const float* xn, int64_t ih0, float* yr,
                                                          int64_t ow, int np, int64_t o0,
                                                          const std::vector<PostOp>* ops) {
  constexpr int64_t C = CT, L = sizeof(V) / sizeof(float);
  const int64_t OC = a.OC, KW = a.KW;
  const V zero = {};
  V acc[P][NB];
#pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) {
    const V b = a.bias ? LoadV<V>(a.bias + o0 + j * L) : zero;
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) acc[p][j] = b;
  }
  for (int64_t kh = 0; kh < a.KH; ++kh) {
    const int64_t ih = ih0 + kh * a.dh;
    if (static_cast<uint64_t>(ih) >= static_cast<uint64_t>(a.H)) continue;
    const float* xrow = xn + ih * a.W * C;
    for (int64_t kw = 0; kw < KW; ++kw) {
      const int64_t iw0 = ow * a.sw - a.pw + kw * a.dw;
      const float* wp = a.w + (kh * KW + kw) * C * OC + o0;
#pragma GCC unroll 4
      for (int64_t c = 0; c < C; ++c) {
        V wv[NB];
#pragma GCC unroll 8
        for (int j = 0; j < NB; ++j) wv[j] = LoadV<V>(wp + c * OC + j * L);
#pragma GCC unroll 16
        for (int p = 0; p < P; ++p) {
          const int64_t iw = iw0 + p * a.sw;
          if (Checked && (p >= np || static_cast<uint64_t>(iw) >= static_cast<uint64_t>(a.W))) continue;
          const V xv = BroadcastLoad<V>(xrow + iw * C + c);
#pragma GCC unroll 8
          for (int j = 0; j < NB; ++j) acc[p][j] += xv * wv[j];
        }
      }
    }
  }
  StoreTileWithOps<V, P, NB>(acc, ops, o0, yr + ow * OC + o0, OC, np);
}

// One output row's pixels for output channels [o0, o0 + NB * L): tiles of P pixels, unchecked where every
// window of the tile lies inside the row.
template <typename V, int CT, int P, int NB>
inline __attribute__((always_inline)) void FewChannelRow(const FcArgs& a, const float* xn, int64_t ih0, float* yr,
                                                         int64_t o0, const std::vector<PostOp>* ops) {
  // Interior output columns: ow * sw - pw >= 0 and ow * sw - pw + (KW - 1) * dw <= W - 1.
  const int64_t ow_lo = std::min(a.OW, (a.pw + a.sw - 1) / a.sw);
  const int64_t last = a.W - 1 + a.pw - (a.KW - 1) * a.dw;
  const int64_t ow_hi = last < 0 ? 0 : std::min(a.OW, last / a.sw + 1);
  int64_t ow = 0;
  for (; ow < a.OW;) {
    const int np = static_cast<int>(std::min<int64_t>(P, a.OW - ow));
    if (ow >= ow_lo && ow + P <= ow_hi) {
      FewChannelTile<V, CT, P, NB, false>(a, xn, ih0, yr, ow, P, o0, ops);
    } else {
      FewChannelTile<V, CT, P, NB, true>(a, xn, ih0, yr, ow, np, o0, ops);
    }
    ow += np;
  }
}

template <typename VW, int CT>
inline __attribute__((always_inline)) void FewChannelBody(const FcArgs& a, int64_t row_begin, int64_t row_end) {
  constexpr int64_t C = CT;
  constexpr int64_t L = sizeof(VW) / sizeof(float);
  const int64_t OC = a.OC, KH = a.KH, KW = a.KW;
  const std::vector<PostOp>* ops = a.ops && !a.ops->empty() ? a.ops : nullptr;
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t n = row / a.OH, oh = row % a.OH;
    const float* xn = a.x + n * a.H * a.W * C;
    float* yr = a.y + row * a.OW * OC;
    const int64_t ih0 = oh * a.sh - a.ph;
    // Wide register tiles over the output channels while 2+ vectors remain (AVX-512: 32 registers; a
    // 4-pixel x 1-vector tile kept 4 multiply-add chains in flight, half the two FMA pipes' capacity:
    // ResNet's 7x7 3 -> 64 stem at 224 x 224 took 1.97 ms against ORT's 0.98).
    int64_t o_wide = 0;
    if constexpr (L == 16) {
      for (; o_wide + 4 * L <= OC; o_wide += 4 * L) FewChannelRow<VW, CT, 6, 4>(a, xn, ih0, yr, o_wide, ops);
      for (; o_wide + 2 * L <= OC; o_wide += 2 * L) FewChannelRow<VW, CT, 12, 2>(a, xn, ih0, yr, o_wide, ops);
    }
    if (o_wide == OC) continue;
    for (int64_t ow = 0; ow < a.OW; ow += 4) {
      const int np = static_cast<int>(std::min<int64_t>(4, a.OW - ow));
      ForChannelBlocksOverlapping<VW>(OC - o_wide, [&](auto vtag, int64_t o_rel) __attribute__((always_inline)) {
        const int64_t o0 = o_wide + o_rel;
        using V = decltype(vtag);
        V acc[4];
        // No lambda returning a vector here: a lambda is not compiled for this function's target ISA, so
        // unless inlined (an -O0 build) it would pass the vector under another ABI.
        V b{};
        if constexpr (std::is_same_v<V, float>) {
          if (a.bias) b = a.bias[o0];
        } else {
          if (a.bias) b = LoadV<V>(a.bias + o0);
        }
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) acc[j] = b;
        for (int64_t kh = 0; kh < KH; ++kh) {
          const int64_t ih = ih0 + kh * a.dh;
          if (static_cast<uint64_t>(ih) >= static_cast<uint64_t>(a.H)) continue;
          const float* xrow = xn + ih * a.W * C;
          for (int64_t kw = 0; kw < KW; ++kw) {
            const float* wp = a.w + (kh * KW + kw) * C * OC + o0;
            V wv[C];
#pragma GCC unroll 4
            for (int64_t c = 0; c < C; ++c) {
              if constexpr (std::is_same_v<V, float>) wv[c] = wp[c * OC];
              else wv[c] = LoadV<V>(wp + c * OC);
            }
#pragma GCC unroll 4
            for (int j = 0; j < 4; ++j) {
              const int64_t iw = (ow + j) * a.sw - a.pw + kw * a.dw;
              if (j >= np || static_cast<uint64_t>(iw) >= static_cast<uint64_t>(a.W)) continue;
              const float* xp = xrow + iw * C;
#pragma GCC unroll 4
              for (int64_t c = 0; c < C; ++c) acc[j] += xp[c] * wv[c];
            }
          }
        }
        for (int j = 0; j < np; ++j) {
          float* yp = yr + (ow + j) * OC + o0;
          if constexpr (std::is_same_v<V, float>) {
            float v = acc[j];
            if (ops) {
              for (const PostOp& op : *ops) v = ScalarOp(op, v, o0);
            }
            *yp = v;
          } else {
            StoreV(yp, ApplyOpsVec(acc[j], ops, o0));
          }
        }
      });
    }
  }
}

// One out-of-line function per channel count and ISA, called per band of rows: inlined into one function
// per ISA, Clang's GVN spent minutes on it under the fuzz build's sanitizers (tools/fuzz.sh).
#define CJIT_FEW_CHANNEL_ISA(NAME, ATTR, VW)                                                     \
  template <int CT>                                                                             \
  ATTR __attribute__((noinline)) void NAME##Sized(const FcArgs& a, int64_t r0, int64_t r1) {    \
    FewChannelBody<VW, CT>(a, r0, r1);                                                          \
  }                                                                                             \
  ATTR void NAME(const FcArgs& a, int64_t r0, int64_t r1) {                                     \
    switch (a.C) {                                                                              \
      case 1: return NAME##Sized<1>(a, r0, r1);                                                 \
      case 2: return NAME##Sized<2>(a, r0, r1);                                                 \
      case 3: return NAME##Sized<3>(a, r0, r1);                                                 \
      default: return NAME##Sized<4>(a, r0, r1);                                                \
    }                                                                                           \
  }
CJIT_FEW_CHANNEL_ISA(FewChannelAvx512, __attribute__((target("avx512f,fma"))), V16f)
CJIT_FEW_CHANNEL_ISA(FewChannelAvx2, __attribute__((target("avx2,fma"))), V8f)
CJIT_FEW_CHANNEL_ISA(FewChannelBaseline, , V4f)
#undef CJIT_FEW_CHANNEL_ISA

template <int SW>
inline __attribute__((always_inline)) void DwPlaneBody(const DwPlaneArgs& a, int64_t p0, int64_t p1) {
  const int64_t sw = SW ? SW : a.sw;
  for (int64_t p = p0; p < p1; ++p) {  // plane = n * C + c
    const int64_t c = p % a.C;
    const float* xp = a.x + p * a.H * a.W;
    float* yp = a.y + p * a.OH * a.OW;
    const float* wc = a.w + c * a.KH * a.KW;
    const float b = a.bias ? a.bias[c] : 0.0f;
    for (int64_t oh = 0; oh < a.OH; ++oh) {
      float* __restrict yr = yp + oh * a.OW;
      for (int64_t ow = 0; ow < a.OW; ++ow) yr[ow] = b;
      for (int64_t kh = 0; kh < a.KH; ++kh) {
        const int64_t ih = oh * a.sh - a.ph + kh * a.dh;
        if (ih < 0 || ih >= a.H) continue;
        const float* __restrict xr = xp + ih * a.W;
        for (int64_t kw = 0; kw < a.KW; ++kw) {
          const float wv = wc[kh * a.KW + kw];
          const int64_t off = kw * a.dw - a.pw;  // iw = ow * sw + off
          // ow in [lo, hi): 0 <= ow * sw + off < W
          const int64_t lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
          const int64_t hi = std::min(a.OW, off >= a.W ? 0 : (a.W - 1 - off) / sw + 1);
          const float* __restrict xo = xr + off;
#pragma omp simd
          for (int64_t ow = lo; ow < hi; ++ow) yr[ow] += wv * xo[ow * sw];
        }
      }
    }
  }
}
#define CJIT_DW_PLANE(NAME, ATTR)                                                \
  ATTR void NAME(const DwPlaneArgs& a, int64_t p0, int64_t p1) {                 \
    if (a.sw == 1) return DwPlaneBody<1>(a, p0, p1);                             \
    if (a.sw == 2) return DwPlaneBody<2>(a, p0, p1);                             \
    DwPlaneBody<0>(a, p0, p1);                                                   \
  }
#if defined(__x86_64__)
CJIT_DW_PLANE(DwPlaneAvx512, __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,fma"))))
CJIT_DW_PLANE(DwPlaneAvx2, __attribute__((target("avx2,fma"))))
#endif
CJIT_DW_PLANE(DwPlaneBase, )
#undef CJIT_DW_PLANE

}  // namespace
}  // namespace simd

const SpatialConvKernels& SpatialConvKernelsFor(ConvLoopIsa isa) {
  static const SpatialConvKernels kBaseline{&simd::DepthwiseBaseline, &simd::FewChannelBaseline, &simd::DwPlaneBase};
#if defined(__x86_64__)
  static const SpatialConvKernels kAvx2{&simd::DepthwiseAvx2, &simd::FewChannelAvx2, &simd::DwPlaneAvx2};
  static const SpatialConvKernels kAvx512{&simd::DepthwiseAvx512, &simd::FewChannelAvx512, &simd::DwPlaneAvx512};
  if (isa == ConvLoopIsa::kDetect) isa = SelectedLoopIsa();
  if (isa == ConvLoopIsa::kAvx512) return kAvx512;
  if (isa == ConvLoopIsa::kAvx2) return kAvx2;
#endif
  return kBaseline;
}

}  // namespace cjit
