// The convolution micro-kernels of runtime/cpu/conv_gemm.cc's paths, compiled once per instruction set
// (AVX-512, AVX2 + FMA, the SSE2 baseline) with that ISA's register width: their arguments and one table of
// entry points per ISA. The drivers (conv_gemm.cc) pick the table of SelectedLoopIsa() (vec_math.h), check
// the geometry, pack weights and split work over threads; the kernels here only compute.
// Internal to runtime/cpu.
#ifndef CJIT_RUNTIME_CPU_CONV_KERNELS_H_
#define CJIT_RUNTIME_CPU_CONV_KERNELS_H_

#include <cstdint>
#include <vector>

#include "runtime/cpu/vec_math.h"

namespace cjit {

struct PostOp;

// A 1-D or 2-D window (1-D as 2-D with a unit leading axis): kernel, strides, leading pads, dilations.
struct Window2d {
  int64_t KH, KW, sh, sw, ph, pw, dh, dw;
};

// Depthwise convolution over 2-D (1-D as H = 1) channels-last data. Weights packed [KH, KW, C].
struct DwArgs : Window2d {
  const float* x;
  const float* w;     // [KH, KW, C]
  const float* bias;  // [C] or null
  float* y;
  int64_t H, W, C, OH, OW;
  const std::vector<PostOp>* ops;
  // `x` holds input rows [x_row0, H) of each image from its start (the fused pointwise -> depthwise kernel
  // keeps a band of rows in a buffer); 0 for a whole tensor.
  int64_t x_row0;
};

// Direct convolution with few input channels (C = CT, 1-4: an image network's stem), channels-last,
// group 1, 1-D or 2-D: per output pixel and block of output channels, sum over taps and input channels
// of x (broadcast) * w[(kh, kw, c), oc block] — weights packed [KH, KW, C] x OC, as for im2col. Four
// output pixels at a time (four accumulation chains). The im2col + GEMM path it replaces copied 4-16
// bytes per tap and ran a GEMM whose K (C x KH x KW, 27 for 3x3x3) and N (8-32) leave its kernel mostly
// idle: 5.5 GFLOP/s on ppocr_mobile_cls's stem on a Zen 3.
struct FcArgs : Window2d {
  const float* x;
  const float* w;     // [KH, KW, C, OC]
  const float* bias;  // [OC] or null
  float* y;
  int64_t H, W, C, OC, OH, OW;
  const std::vector<PostOp>* ops;
};

// Weights in panels for PanelPointwiseBody: output channels in groups of kPanelWidth (the last group
// narrower, a multiple of 8), each group k-major: panel q starts at q * C * kPanelWidth and holds
// w[k][n] for k < C, n < its width, n fastest. A tile's weights for one k are one contiguous run of
// 64-256 bytes, the panel's rows adjacent: read in order from L2 (the [C, OC] layout strides OC floats
// per k, a new 4 KiB page every few k for wide layers).
constexpr int64_t kPanelWidth = 64;

// Indirect convolution (M. Dukhan, "The Indirect Convolution Algorithm", arXiv:1907.02129, as XNNPACK):
// a channels-last convolution of any window, group 1, without im2col and without a per-shape JIT. Each
// output pixel m has, per tap t = kh * KW + kw, a pointer to the C floats of the input pixel the tap reads
// (or to C zeros where the tap falls in the padding): the indirection buffer, rebuilt per block of pixels.
// The product is then PanelPointwiseBody's over K = taps x C: weights in panels of kPanelWidth output
// channels, k = t * C + c, register tiles of P pixels x NB vectors accumulating every tap before the only
// store (bias and post-ops applied in registers).
struct IndirectArgs {
  Window2d win;
  const float* x;
  const float* panels;  // PackIndirectWeights
  const float* bias;
  const std::vector<PostOp>* ops;
  float* y;
  const float* zeros;  // at least C zeros
  int64_t H, W, C, OH, OW, OC;
};

// Depthwise convolution on NCHW planes: per output row, one pass per tap over the row's interior columns
// (those whose tap lies inside the input row), vectorized along W (stride SW at compile time for 1 and 2,
// 0: any); columns whose tap falls in the padding add nothing. The output row stays in L1 across taps.
struct DwPlaneArgs {
  const float* x;
  const float* w;     // [C, KH, KW]
  const float* bias;  // [C] or null
  float* y;
  int64_t C, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw;
};

// Depthwise, few-channel and NCHW-plane depthwise loops (conv_kernels_spatial.cc), for every ISA.
// depthwise: output rows [r0, r1) (r = n * OH + oh) of a DwArgs convolution; few_channel: the same for
// FcArgs; nchw_depthwise: planes [p0, p1) (p = n * C + c) of a DwPlaneArgs convolution.
struct SpatialConvKernels {
  void (*depthwise)(const DwArgs& a, int64_t r0, int64_t r1);
  void (*few_channel)(const FcArgs& a, int64_t r0, int64_t r1);
  void (*nchw_depthwise)(const DwPlaneArgs& a, int64_t p0, int64_t p1);
};
// The loops compiled for `isa` (kDetect: for this CPU); the caller checks that the CPU runs it.
const SpatialConvKernels& SpatialConvKernelsFor(ConvLoopIsa isa);

// Register-tiled pointwise, panel and indirect loops (conv_kernels_pointwise.cc). AVX-512 only: the AVX2
// and SSE2 variants of the loop (fewer registers: 2-pixel tiles) were slower than BLIS on the detector's
// pointwise convolutions (all of them: 26.6 / 50.4 ms vs 23.2 / 31.1 ms, 1 thread, forced on an AVX-512
// CPU), so other ISAs get null entries and keep BLIS.
struct PointwiseConvKernels {
  // Y [M, OC] = X [M, C] (rows ldx floats apart) x W [C, OC] + bias, then ops.
  void (*small_k_pointwise)(const float* x, const float* w, const float* bias, const std::vector<PostOp>* ops,
                            float* y, int64_t M, int64_t C, int64_t OC, int64_t ldx);
  // Rows [m0, m1) and panels [q0, q1) of Y [M, OC] = X [M, C] x panels (kPanelWidth layout) + bias, then ops.
  void (*panel_pointwise)(const float* x, int64_t ldx, const float* panels, const float* bias,
                          const std::vector<PostOp>* ops, float* y, int64_t m0, int64_t m1, int64_t q0, int64_t q1,
                          int64_t C, int64_t OC);
  // Output pixels [m0, m1) and panels [q0, q1) of an IndirectArgs convolution.
  void (*indirect)(const IndirectArgs& a, int64_t m0, int64_t m1, int64_t q0, int64_t q1);
};
const PointwiseConvKernels& PointwiseConvKernelsFor(ConvLoopIsa isa);

}  // namespace cjit

#endif  // CJIT_RUNTIME_CPU_CONV_KERNELS_H_
