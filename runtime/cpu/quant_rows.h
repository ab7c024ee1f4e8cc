// Row loops of the quantization ops (ONNX QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear and the
// requantization of QLinearConv / QLinearMatMul), in AVX-512, AVX2 and baseline variants picked per call
// within --max_cpu_isa (compiler/ir/cpu_isa.h). Every variant gives bit-identical results: the scalar
// definitions below are the semantics, the vector bodies repeat them lane by lane (IEEE float32 division
// and multiplication, conversion rounding half to even as rintf does in the default rounding mode).
// Internal to runtime/cpu. Thread-safety: pure functions.
#ifndef CJIT_RUNTIME_CPU_QUANT_ROWS_H_
#define CJIT_RUNTIME_CPU_QUANT_ROWS_H_

#include <cstdint>

#include "compiler/ir/numeric_cast.h"  // kQuantClamp

namespace cjit {

// y[i] = saturate(rint(x[i] / scale) + zp) into int8 (`to_signed`) or uint8; ONNX QuantizeLinear (float32
// division as its reference implementation; ties to even). A NaN quotient gives the type's lowest value
// (as ONNX Runtime's MLAS does); +-inf saturate.
void QuantizeRowF32(const float* x, int64_t n, float scale, int32_t zp, bool to_signed, void* y);

// y[i] = float(x[i] - zp) * scale for uint8 / int8 (`from_signed`) x; ONNX DequantizeLinear.
void DequantizeRowF32(const void* x, bool from_signed, int64_t n, int32_t zp, float scale, float* y);

// Smallest and largest value of x[0, n) together with *mn / *mx (their starting values); NaNs are skipped.
void MinMaxF32(const float* x, int64_t n, float* mn, float* mx);

// y[r][j] = saturate(rint(float(acc[r][j] + bias[j]) * mult[j]) + zp) into int8 / uint8 for a rows x cols
// matrix (row stride `cols`; bias may be null): the requantization of QLinearConv's channels-last sums (one
// column per output channel) and of QLinearMatMul (one column per column of B). int32 sums wrap. One call
// per block of rows: per-row calls cost more than the arithmetic for 16-32 channels.
void RequantizeColumnsI32(const int32_t* acc, int64_t rows, int64_t cols, const int32_t* bias, const float* mult,
                          int32_t zp, bool to_signed, void* y);

}  // namespace cjit

#endif  // CJIT_RUNTIME_CPU_QUANT_ROWS_H_
