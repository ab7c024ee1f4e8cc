// Channels-last (NHWC) convolutions without a per-shape JIT: pointwise (1x1) convolutions as one GEMM
// (BLIS sgemm, runtime/cpu/gemm.h: precompiled kernels, no code generation) or, on AVX-512 CPUs with at
// most 128 input channels and 48 KiB of weights, a register-tiled loop with the bias and post-ops in
// registers (no per-call packing), and depthwise 1-D/2-D convolutions as a channel-vectorized direct loop.
// oneDNN's convolution primitives generate machine code for every new input shape (0.1-1.3 ms per
// convolution on the shared and tools/make_*.py models), which dominated a network's first run at a new shape; these
// paths cost the same on a shape's first run as on its hundredth, and run as fast as oneDNN's brgconv_1x1 /
// brdgmm_dw in steady state (docs/design/convolutions-without-per-shape-jit.md). The choice depends on the
// convolution's geometry only, never on run history, so a shape's results are the same on every run and from every
// thread.
//
// Semantics: ONNX Conv (https://onnx.ai/onnx/operators/onnx__Conv.html) with X [N, spatial.., C] and
// Y [N, spatial.., OC] (com.clusterjit.NhwcConv), float32, float32 accumulation. Post-ops (the fused
// elementwise ops of a compiled cluster) are applied with ONNX semantics: a NaN stays a NaN.
// Internal to runtime/cpu.
#ifndef CJIT_RUNTIME_CPU_CONV_GEMM_H_
#define CJIT_RUNTIME_CPU_CONV_GEMM_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ops/op_registry.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/vec_math.h"

namespace cjit {

struct PostOp;

// Runs the convolution of `ctx` (inputs X, W, optional B; output `y` already allocated) on one of the
// paths above when its geometry fits one: returns true when it ran, false when the caller should run
// the general (oneDNN) path. Errors name the node.
// `only` (autotuning) restricts it to one of the two paths.
enum class NhwcConvPath { kNone, kPointwise, kDepthwise };
// The path that fits X [N, spatial.., C], W [OC, C/group, k..], Y [N, spatial.., OC] (kNone: neither).
NhwcConvPath NhwcConvPathFor(const Dims& x, const Dims& w, const Dims& y, const WindowGeometry& g, int64_t group);
absl::StatusOr<bool> TryNhwcConvWithoutJit(KernelContext& ctx, const WindowGeometry& g, int64_t group, Tensor& y,
                                           NhwcConvPath only = NhwcConvPath::kNone);

// Indirect convolution (conv_gemm.cc; Dukhan 2019): channels-last X [N, H, W, C], W [OC, C, KH, KW], group 1,
// any stride, dilation and padding, Y [N, OH, OW, OC] with OC a multiple of 8 and C >= kIndirectMinChannels;
// AVX-512 only. No per-shape code generation: the same loop serves every image size. Bias and ctx.post_ops
// applied in registers. False (nothing written) where it does not fit.
constexpr int64_t kIndirectMinChannels = 8;
bool IndirectConvFits(const Dims& x, const Dims& w, const Dims& y, const WindowGeometry& g, int64_t group);
// The default choice for a channels-last convolution that fits: output channels in whole 16-lane vectors
// and at most kIndirectMaxTapChannels taps x input channels (a panel's weights, K x 64 floats, stay in L2).
// Per convolution, 1 thread, against oneDNN's brgconv (`cjit autotune`): 3x3 32-128 channels at 28x28 to
// 128x128 within +-4%; 256 and 512 channels at 14x14 / 7x7 10% slower (those keep oneDNN); 96 -> 24
// (half-width tiles) 33% slower.
constexpr int64_t kIndirectMaxTapChannels = 1152;
bool UseIndirectConv(const Dims& x, const Dims& w, const Dims& y, const WindowGeometry& g, int64_t group);
absl::StatusOr<bool> TryIndirectConv(KernelContext& ctx, const WindowGeometry& g, int64_t group, Tensor& y);

// com.clusterjit.NhwcPointwiseDepthwiseConv (compiler/passes/layout.h FusePointwiseDepthwise): X [N, H, W, C],
// W1 [M, C, 1, 1], B1 [M] or absent, W2 [M, 1, KH, KW], B2 [M] or absent, the depthwise convolution's
// attributes, mid_ops / mid_params; Y [N, OH, OW, M]. Threads take contiguous output rows; each computes
// the pointwise convolution (BLIS sgemm, then B1 and the mid ops) for the intermediate rows a band of its
// output rows reads, into a buffer of about 384 KiB, and runs the depthwise loop of this file over the
// band (then B2 and the post-ops of ctx.post_ops). The intermediate never exists whole: on MobileNet-style
// networks it is the largest activation (the detector of tools/make_detector.py at 960x960: 59 MB).
// Results equal the unfused ops' up to float32 rounding order (same GEMM and loops). Errors name the node.
absl::Status RunPointwiseDepthwiseConv(KernelContext& ctx);

// Depthwise convolution (group = C = OC, W [C, 1, k..]) on NCHW float32 planes, 1-D or 2-D, any stride,
// dilation and padding: per output row, one vectorized pass along W per tap; bias included, post-ops not
// (the caller applies them). No layout reorders: an isolated depthwise convolution of 1 x 128 x 112 x 112
// (3x3, stride 2) took 2.4-3.4 ms through oneDNN's channels-last kernel and the reorders around it, 0.74
// here, ORT 0.68 (1 thread). At stride 1 the reorders cost less than this loop's per-tap passes (3x3-7x7
// at 56x56: 1.8-3.7x slower than oneDNN). False (nothing written) where it does not fit.
absl::StatusOr<bool> TryNchwDepthwiseConv(KernelContext& ctx, const WindowGeometry& g, int64_t group, Tensor& y);

// Convolutions with few input channels (the stem of an image network, an STFT's framing convolution;
// group 1, 1-D or 2-D, either layout) as im2col + BLIS sgemm: oneDNN's direct kernels gain little from
// blocked layouts at C <= 4 and generated code per shape, plus layout reorders around them for NCHW. Also
// any channel count when the output has few pixels (N * OH * OW <= kIm2colFewPixels, at most
// kIm2colFewPixelsMaxMacs multiply-adds: the height-1 sequence convolutions of a text recognizer, 480-960
// channels, 1x3 kernels): there oneDNN's code generation for each new width (0.3-0.8 ms per convolution)
// costs several times the convolution itself. The choice depends on the geometry only. The im2col matrix
// is at most kIm2colMaxBytes. Channels-last with C <= kIm2colMaxChannels runs a direct loop instead (no
// im2col matrix, no GEMM: per output pixel and block of output channels, taps x channels of broadcast
// input times packed weights; 3.3x faster than im2col + GEMM on ppocr_mobile_cls's 3->8 stem). Returns
// false when the geometry does not fit. Post-ops are applied here for channels-last output only: the
// caller applies them to NCHW output.
constexpr int64_t kIm2colMaxChannels = 4;
constexpr double kIm2colFewPixels = 256;
constexpr double kIm2colFewPixelsMaxMacs = 32.0 * (1 << 20);
constexpr double kIm2colMaxBytes = 64.0 * (1 << 20);
// `max_channels` above kIm2colMaxChannels: an autotuning candidate for any channel count.
absl::StatusOr<bool> TryIm2colConv(KernelContext& ctx, const WindowGeometry& g, int64_t group, bool channels_last,
                                    Tensor& y, int64_t max_channels = kIm2colMaxChannels);

// Y [M, N] = X [M, K] (dense rows) x B, B the constant input `b_index` of ctx ([N, K] when b_is_nk, else
// [K, N]), with the pointwise convolutions' panel loop (B packed into panels once per buffer, cached):
// a classifier head's matrix-vector product streams the weights once, split over the threads by output
// columns (Eigen's GEMV ran on one thread at 25 GB/s: MobileNetV2's 1 x 1280 x 1000 head 193 us against
// ORT's 133). Returns false (nothing written) unless the CPU has the AVX-512 loop, N is a multiple of 8 and
// B is a constant float32 tensor of K x N elements.
// Whether TryPanelProduct would run for input `b_index` of ctx with N output columns (the CPU has the loop,
// N is a multiple of 8, the input is a constant float32 tensor).
bool PanelProductFits(const KernelContext& ctx, int b_index, int64_t N);
// Whether this CPU runs the panel loop (AVX-512; SetConvLoopIsaForTest applies).
bool CpuHasPanelLoop();
bool TryPanelProduct(const KernelContext& ctx, int b_index, bool b_is_nk, const float* x, int64_t M, int64_t K,
                     int64_t N, float* y);

// The same panels for repeated products with one constant B: the K x N (or N x K when b_is_nk) floats of
// input `index` from float `offset` on (a recurrent node's per-direction W or R), packed once per buffer
// and offset. nullopt under TryPanelProduct's conditions (AVX-512 loop, N % 8 == 0, constant float32).
// PanelMultiply: Y [M, N] = X [M, K] x B (+ bias [N], may be null), on up to `threads` threads
// (runtime/cpu/parallel.h rule). Thread-safe; `hold` keeps the panels alive.
struct PanelWeights {
  std::shared_ptr<const void> hold;
  const float* panels = nullptr;
  int64_t K = 0, N = 0;
};
std::optional<PanelWeights> PackPanelWeights(const KernelContext& ctx, int index, int64_t offset, bool b_is_nk,
                                             int64_t K, int64_t N);
void PanelMultiply(const PanelWeights& w, const float* x, int64_t M, const float* bias, float* y, int threads);
// One panel of that layout on the calling thread: Y[m][n0 + j] (+= nothing; written) = sum_k X[m][k] *
// panel[k][j] (+ bias[n0 + j] when bias is not null) for m < M, j < min(64, N - n0), n0 a multiple of 64,
// `panel` [K, that width] row-major, Y rows N floats apart. Requires CpuHasPanelLoop() and N % 8 == 0.
void PanelMultiplyOne(const float* panel, int64_t n0, const float* x, int64_t M, int64_t K, int64_t N,
                      const float* bias, float* y);

// ConvTranspose (NCHW, 1-D or 2-D, any group, stride, dilation, pads, output_padding) as a GEMM and a
// col2im scatter-add (the transposed form of im2col, as Caffe's deconvolution): oneDNN's deconvolution
// generates code per shape and reorders NCHW around blocked layouts. Returns false when the geometry does
// not fit (the column matrix above kIm2colMaxBytes).
absl::StatusOr<bool> TryGemmConvTranspose(KernelContext& ctx, const WindowGeometry& g, int64_t group, Tensor& y);

}  // namespace cjit

#endif  // CJIT_RUNTIME_CPU_CONV_GEMM_H_
