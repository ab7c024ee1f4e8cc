// Vectorized float32 loops shared by the CPU kernels: exp, erf, the fused unary post-ops, softmax rows and
// the per-channel epilogue (bias + post-ops) of the GEMM and convolution paths. Each is compiled for
// AVX-512, AVX2 + FMA and the SSE2 baseline (runtime/cpu/simd.h), with that ISA's register width, and the
// variant is picked by the CPU on first use (SelectedLoopIsa). Thread-safe; `threads` bounds the OpenMP
// threads a call uses (runtime/cpu/parallel.h rule). Internal to runtime/cpu.
#ifndef CJIT_RUNTIME_CPU_VEC_MATH_H_
#define CJIT_RUNTIME_CPU_VEC_MATH_H_

#include <cstdint>
#include <vector>

namespace cjit {

struct PostOp;

// Which instruction-set variant the hand-written loops of runtime/cpu run (vec_math.cc, the convolution
// kernels of conv_kernels.h). kDetect: the best this CPU runs.
enum class ConvLoopIsa { kDetect = 0, kBaseline = 1, kAvx2 = 2, kAvx512 = 3 };
// The variant in use: the one forced by SetConvLoopIsaForTest, else the CPU's best. Never kDetect.
ConvLoopIsa SelectedLoopIsa();
// Test hook: forces `isa` for every loop above; kDetect restores the CPU's choice. Returns false (and
// changes nothing) when this CPU cannot run `isa`. Not for concurrent use with running sessions.
bool SetConvLoopIsaForTest(ConvLoopIsa isa);

// y[i] = ops(x[i]) for float32 (x and y may be the same buffer), ops from {Relu, Clip, HardSwish, Linear,
// Sigmoid, Tanh} with ONNX semantics (NaN stays NaN), vectorized for the CPU's ISA, threads over chunks.
// The fast path of the corresponding unary ops (runtime/cpu/kernels_elementwise.cc).
void ApplyUnaryPostOps(const float* x, float* y, int64_t n, const std::vector<PostOp>& ops, int threads);

// y[i] = exp(x[i]) for float32 (x and y may be the same buffer), vectorized for the CPU's ISA, threads over
// chunks: the code generator's exp (+inf above 88.72, subnormal results down to -103.97, then 0; NaN stays
// NaN; relative error ~1e-7 for normal results). The Exp op and the Softmax fallback.
void ExpF32(const float* x, float* y, int64_t n, int threads);
// y[i] = erf(x[i]) for float32, as ExpF32: the code generator's erf (a rational function, XLA's and Eigen's
// fast erf: relative error <= 4.2e-7; NaN stays NaN; +-1 beyond |x| = 4). The Erf op (BERT's Gelu).
void ErfF32(const float* x, float* y, int64_t n, int threads);
// One softmax row of n > 0 floats: *max = max(x) (NaNs ignored), y = exp(x - *max) (ExpF32's exp), *sum =
// sum(y) (in double over vector partial sums). x and y may be the same buffer.
void SoftmaxRowF32(const float* x, float* y, int64_t n, float* max, double* sum);

// Applies bias (per last-dim channel, may be null) and then `ops` (may be null) to `rows` rows of
// `channels` floats at `y` (row stride `channels`), with ONNX semantics, on the calling thread.
void ApplyChannelEpilogue(float* y, int64_t rows, int64_t channels, const float* bias, const std::vector<PostOp>* ops);

}  // namespace cjit

#endif  // CJIT_RUNTIME_CPU_VEC_MATH_H_
