// Register-tiled pointwise, panel and indirect convolution loops (AVX-512; conv_kernels.h).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "compiler/codegen/fusion_plan.h"
#include "runtime/cpu/conv_kernels.h"
#include "runtime/cpu/simd.h"

namespace cjit {
namespace simd {
namespace {

// Pointwise convolution with few input channels, Y [M, OC] = X [M, C] * W [C, OC] + bias, then the
// post-ops, without a GEMM library: register tiles of P pixels x NB vectors of output channels accumulate
// C broadcast-multiply-adds each (W stays in L1 for kSmallKWeights floats, in L2 for an im2col product's
// kSmallKGemmWeights), and the bias and post-ops are applied in registers before the only store. Rows of X
// are ldx >= C floats apart, or overlap (ldx < C: the in-place im2col rows of a 1-D convolution). BLIS
// packs both operands on every call, and with C of 16-32 its packing (the activation panels through a
// reference kernel) cost as much as the products; a MobileNet stage's 16 -> 64 expansion at 320 x 320
// took 2.2 ms through BLIS against ORT's 1.1 ms. `w` points at the tile's first output channel (n0) of
// weight rows ldw floats apart (W [C, OC]: w + n0 and OC; a panel of PanelProductWeights: its width).
// Sums run over k in increasing order with fused multiply-adds where the ISA has them (as BLIS's kernels).
// The parts of a register tile of P rows x NB vectors of output channels [n0, n0 + NB * lanes): the
// accumulators start at the bias (or 0); then row p accumulates xp[p][k] * w[k * ldw ..] for k < C (rows
// beyond `rows` are skipped). All inline, so the accumulators stay in registers.
template <typename V, int P, int NB>
inline __attribute__((always_inline)) void InitTile(V (&acc)[P][NB], const float* bias, int64_t n0) {
  constexpr int64_t L = sizeof(V) / sizeof(float);
  const V zero = {};
#pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) {
    const V b = bias ? LoadV<V>(bias + n0 + j * L) : zero;
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) acc[p][j] = b;
  }
}

template <typename V, int P, int NB>
inline __attribute__((always_inline)) void AccumulateTile(V (&acc)[P][NB], const float* const (&xp)[P], int64_t C,
                                                          const float* w, int64_t ldw, int rows) {
  constexpr int64_t L = sizeof(V) / sizeof(float);
  for (int64_t k = 0; k < C; ++k) {
    V wv[NB];
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) wv[j] = LoadV<V>(w + k * ldw + j * L);
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) {
      if (p >= rows) break;
      const V xv = BroadcastLoad<V>(xp[p] + k);
#pragma GCC unroll 8
      for (int j = 0; j < NB; ++j) acc[p][j] += xv * wv[j];
    }
  }
}

template <typename V, int P, int NB>
inline __attribute__((always_inline)) void SmallKTile(const float* x, int64_t ldx, int64_t C, const float* w,
                                                      int64_t ldw, int64_t OC, const float* bias,
                                                      const std::vector<PostOp>* ops, float* y, int64_t n0, int rows) {
  V acc[P][NB];
  InitTile<V, P, NB>(acc, bias, n0);
  const float* xp[P];
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) xp[p] = x + p * ldx;
  AccumulateTile<V, P, NB>(acc, xp, C, w, ldw, rows);
  StoreTileWithOps<V, P, NB>(acc, ops, n0, y + n0, OC, rows);
}

template <typename VW>
inline __attribute__((always_inline)) void SmallKPointwiseBody(const float* x, const float* w, const float* bias,
                                                               const std::vector<PostOp>* ops, float* y, int64_t M,
                                                               int64_t C, int64_t OC, int64_t ldx) {
  constexpr int64_t L = sizeof(VW) / sizeof(float);
  // Registers: P x NB accumulators plus NB weight vectors and a broadcast (32 zmm: 24 + 4 + 1).
  constexpr int P = 6, NB = 4;
  int64_t n0 = 0;
  for (; n0 + NB * L <= OC; n0 += NB * L) {
    for (int64_t m = 0; m < M; m += P) {
      SmallKTile<VW, P, NB>(x + m * ldx, ldx, C, w + n0, OC, OC, bias, ops, y + m * OC, n0,
                            static_cast<int>(std::min<int64_t>(P, M - m)));
    }
  }
  for (; n0 + L <= OC; n0 += L) {
    for (int64_t m = 0; m < M; m += 2 * P) {
      SmallKTile<VW, 2 * P, 1>(x + m * ldx, ldx, C, w + n0, OC, OC, bias, ops, y + m * OC, n0,
                               static_cast<int>(std::min<int64_t>(2 * P, M - m)));
    }
  }
  if constexpr (L > 8) {
    for (; n0 + 8 <= OC && OC < L; n0 += 8) {
      for (int64_t m = 0; m < M; m += 2 * P) {
        SmallKTile<V8f, 2 * P, 1>(x + m * ldx, ldx, C, w + n0, OC, OC, bias, ops, y + m * OC, n0,
                                  static_cast<int>(std::min<int64_t>(2 * P, M - m)));
      }
    }
  }
  // The last partial block as one more vector ending at OC (ForChannelBlocksOverlapping): the full width
  // where OC allows, else 8 lanes.
  if (n0 < OC && OC >= L) {
    for (int64_t m = 0; m < M; m += 2 * P) {
      SmallKTile<VW, 2 * P, 1>(x + m * ldx, ldx, C, w + OC - L, OC, OC, bias, ops, y + m * OC, OC - L,
                               static_cast<int>(std::min<int64_t>(2 * P, M - m)));
    }
    n0 = OC;
  }
  if constexpr (L > 8) {
    if (n0 < OC && OC >= 8) {
      for (int64_t m = 0; m < M; m += 2 * P) {
        SmallKTile<V8f, 2 * P, 1>(x + m * ldx, ldx, C, w + OC - 8, OC, OC, bias, ops, y + m * OC, OC - 8,
                                  static_cast<int>(std::min<int64_t>(2 * P, M - m)));
      }
      n0 = OC;
    }
  }
  for (; n0 < OC; ++n0) {
    for (int64_t m = 0; m < M; ++m) {
      float acc = bias ? bias[n0] : 0.0f;
      for (int64_t k = 0; k < C; ++k) acc += x[m * ldx + k] * w[k * OC + n0];
      if (ops) {
        for (const PostOp& op : *ops) acc = ScalarOp(op, acc, n0);
      }
      y[m * OC + n0] = acc;
    }
  }
}
__attribute__((target("avx512f,fma"))) void SmallKPointwiseAvx512(const float* x, const float* w, const float* bias,
                                                                  const std::vector<PostOp>* ops, float* y, int64_t M,
                                                                  int64_t C, int64_t OC, int64_t ldx) {
  SmallKPointwiseBody<V16f>(x, w, bias, ops, y, M, C, OC, ldx);
}

// Y [M, OC] (rows [m0, m1), panels [q0, q1)) = X [M, C] (rows ldx floats apart) x panels + bias, then the
// post-ops, for OC a multiple of 8 (AVX-512): row blocks whose X rows stay in L2 (about 96 KiB), each
// swept by every panel in tiles of 6 rows x 4 vectors (24 accumulators), 8 x 3, or 12 x 2 / 12 x 1, and
// 12 rows x 8 channels for a panel's last 8 when its width is not a multiple of 16.
// Replaces BLIS for pointwise convolutions, which packed X and W on every call: ~1.5x slower than
// oneDNN's jit_1x1 / brgconv_1x1 on MobileNetV2's and ResNet-50's 1x1 convolutions.
// Rows [r0, r1) of Y's channels [n0, n0 + NB * lanes) in tiles of P rows, weights `w` rows ldw apart.
template <typename V, int P, int NB>
inline __attribute__((always_inline)) void PanelTiles(const float* x, int64_t ldx, int64_t C, const float* w,
                                                      int64_t ldw, int64_t OC, const float* bias,
                                                      const std::vector<PostOp>* ops, float* y, int64_t n0,
                                                      int64_t r0, int64_t r1) {
  for (int64_t m = r0; m < r1; m += P) {
    SmallKTile<V, P, NB>(x + m * ldx, ldx, C, w, ldw, OC, bias, ops, y + m * OC, n0,
                         static_cast<int>(std::min<int64_t>(P, r1 - m)));
  }
}

template <typename V>
inline __attribute__((always_inline)) void PanelPointwiseBody(const float* x, int64_t ldx, const float* panels,
                                                              const float* bias, const std::vector<PostOp>* ops,
                                                              float* y, int64_t m0, int64_t m1, int64_t q0,
                                                              int64_t q1, int64_t C, int64_t OC) {
  constexpr int64_t L = sizeof(V) / sizeof(float);
  const int64_t rb = std::max<int64_t>(24, (int64_t{96} << 10) / (4 * std::max<int64_t>(C, 1)) / 24 * 24);
  for (int64_t r0 = m0; r0 < m1; r0 += rb) {
    const int64_t r1 = std::min(m1, r0 + rb);
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t n0 = q * kPanelWidth, nr = std::min(kPanelWidth, OC - n0);
      const float* wq = panels + q * C * kPanelWidth;
      // A panel width of 8 mod 16 (24, 40, .. output channels): its last 8 channels as a half-width tile.
      const int64_t nv = nr / L * L;
      if (nv < nr) PanelTiles<V8f, 12, 1>(x, ldx, C, wq + nv, nr, OC, bias, ops, y, n0 + nv, r0, r1);
      switch (nr / L) {
        case 0: break;
        case 4: PanelTiles<V, 6, 4>(x, ldx, C, wq, nr, OC, bias, ops, y, n0, r0, r1); break;
        case 3: PanelTiles<V, 8, 3>(x, ldx, C, wq, nr, OC, bias, ops, y, n0, r0, r1); break;
        case 2: PanelTiles<V, 12, 2>(x, ldx, C, wq, nr, OC, bias, ops, y, n0, r0, r1); break;
        default: PanelTiles<V, 12, 1>(x, ldx, C, wq, nr, OC, bias, ops, y, n0, r0, r1); break;
      }
    }
  }
}
__attribute__((target("avx512f,fma"))) void PanelPointwiseAvx512(const float* x, int64_t ldx, const float* panels,
                                                                 const float* bias, const std::vector<PostOp>* ops,
                                                                 float* y, int64_t m0, int64_t m1, int64_t q0,
                                                                 int64_t q1, int64_t C, int64_t OC) {
  PanelPointwiseBody<V16f>(x, ldx, panels, bias, ops, y, m0, m1, q0, q1, C, OC);
}

template <typename V, int P, int NB>
inline __attribute__((always_inline)) void IndirectTile(const float* const* ptrs, int64_t T, int64_t C, const float* w,
                                                        int64_t ldw, int64_t OC, const float* bias,
                                                        const std::vector<PostOp>* ops, float* y, int64_t n0,
                                                        int rows) {
  V acc[P][NB];
  InitTile<V, P, NB>(acc, bias, n0);
  for (int64_t t = 0; t < T; ++t) {
    const float* xp[P];
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) xp[p] = ptrs[(p < rows ? p : 0) * T + t];
    AccumulateTile<V, P, NB>(acc, xp, C, w + t * C * ldw, ldw, rows);
  }
  StoreTileWithOps<V, P, NB>(acc, ops, n0, y + n0, OC, rows);
}

template <typename V, int P, int NB>
inline __attribute__((always_inline)) void IndirectTiles(const IndirectArgs& a, const float* const* ptrs, int64_t T,
                                                         const float* w, int64_t ldw, int64_t n0, int64_t r0,
                                                         int64_t r1) {
  for (int64_t m = r0; m < r1; m += P) {
    IndirectTile<V, P, NB>(ptrs + (m - r0) * T, T, a.C, w, ldw, a.OC, a.bias, a.ops, a.y + m * a.OC, n0,
                           static_cast<int>(std::min<int64_t>(P, r1 - m)));
  }
}

// Output pixels [m0, m1) (m = (n * OH + oh) * OW + ow) x panels [q0, q1).
template <typename V>
inline __attribute__((always_inline)) void IndirectBody(const IndirectArgs& a, int64_t m0, int64_t m1, int64_t q0,
                                                        int64_t q1) {
  constexpr int64_t L = sizeof(V) / sizeof(float);
  const Window2d& g = a.win;
  const int64_t T = g.KH * g.KW;
  // Pixel blocks whose input rows (about KH rows of the block's width) stay in L2 while every panel sweeps
  // them.
  const int64_t rb = std::clamp<int64_t>((int64_t{192} << 10) / (4 * std::max<int64_t>(a.C * g.KH, 1)) / 24 * 24,
                                         24, 480);
  std::vector<const float*> ptrs(static_cast<size_t>(rb * T));
  for (int64_t r0 = m0; r0 < m1; r0 += rb) {
    const int64_t r1 = std::min(m1, r0 + rb);
    for (int64_t m = r0; m < r1; ++m) {
      const int64_t n = m / (a.OH * a.OW), oh = m / a.OW % a.OH, ow = m % a.OW;
      const float** row = ptrs.data() + (m - r0) * T;
      for (int64_t kh = 0; kh < g.KH; ++kh) {
        const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
        const bool in_h = ih >= 0 && ih < a.H;
        for (int64_t kw = 0; kw < g.KW; ++kw) {
          const int64_t iw = ow * g.sw - g.pw + kw * g.dw;
          row[kh * g.KW + kw] = in_h && iw >= 0 && iw < a.W ? a.x + ((n * a.H + ih) * a.W + iw) * a.C : a.zeros;
        }
      }
    }
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t n0 = q * kPanelWidth, nr = std::min(kPanelWidth, a.OC - n0);
      const float* wq = a.panels + q * T * a.C * kPanelWidth;
      const int64_t nv = nr / L * L;
      if (nv < nr) IndirectTiles<V8f, 12, 1>(a, ptrs.data(), T, wq + nv, nr, n0 + nv, r0, r1);
      switch (nr / L) {
        case 0: break;
        case 4: IndirectTiles<V, 6, 4>(a, ptrs.data(), T, wq, nr, n0, r0, r1); break;
        case 3: IndirectTiles<V, 8, 3>(a, ptrs.data(), T, wq, nr, n0, r0, r1); break;
        case 2: IndirectTiles<V, 12, 2>(a, ptrs.data(), T, wq, nr, n0, r0, r1); break;
        default: IndirectTiles<V, 12, 1>(a, ptrs.data(), T, wq, nr, n0, r0, r1); break;
      }
    }
  }
}
__attribute__((target("avx512f,fma"))) void IndirectAvx512(const IndirectArgs& a, int64_t m0, int64_t m1, int64_t q0,
                                                           int64_t q1) {
  IndirectBody<V16f>(a, m0, m1, q0, q1);
}

}  // namespace
}  // namespace simd

const PointwiseConvKernels& PointwiseConvKernelsFor(ConvLoopIsa isa) {
  static const PointwiseConvKernels kNone{nullptr, nullptr, nullptr};
#if defined(__x86_64__)
  static const PointwiseConvKernels kAvx512{&simd::SmallKPointwiseAvx512, &simd::PanelPointwiseAvx512,
                                            &simd::IndirectAvx512};
  if (isa == ConvLoopIsa::kDetect) isa = SelectedLoopIsa();
  if (isa == ConvLoopIsa::kAvx512) return kAvx512;
#endif
  return kNone;
}

}  // namespace cjit
