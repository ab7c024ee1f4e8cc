// Depthwise 8-bit convolution on AVX-512 VNNI (ONNX QLinearConv / ConvInteger with group = C and one
// input and one output channel per group), channels-last: y[oh][ow][c] = sum over taps (kh, kw) of
// (x[ih][iw][c] - x_zp) * (w[c][kh][kw] - w_zp[c]), ih = oh * sh - ph + kh * dh, iw likewise; taps in the
// padding add nothing.
//
// vpdpbusd multiplies 4 uint8 by 4 int8 values and adds the 4 products to one int32 lane, so the 4 bytes of a
// lane hold 4 taps of one channel: a "tap row" holds, for each output column ow and group g of 4 taps along W
// (kw = 4g .. 4g + 3), the input bytes x[ih][ow * sw - pw + kw * dw][c] of 64 channels interleaved tap by tap
// (in-lane byte and word unpacks). Positions in the padding hold x_zp, so the padding's contribution is the
// per-channel constant -x_zp * sum of the channel's weights, added once; taps beyond KW have weight 0. The
// unpacks permute channels within each block of 64 (lane L, vector k, element i holds channel 16L + 4k + i);
// weights, corrections and multipliers are permuted alike, and the saturating packs of the requantization
// restore the order. Channels beyond the last whole block go in chunks of 16 (128-bit unpacks, in order).
// One output pixel costs KH * ceil(KW / 4) vpdpbusd per 16 channels (3 for a 3x3 kernel, against 9 float
// multiply-adds on converted rows).
//
// Exact in int32 (sums wrap modulo 2^32 as the other integer paths do). Only for weights whose w - w_zp fits
// int8 (PrepareDepthwiseVnni says so). Thread-safety: the weights are read-only once prepared; each thread
// builds its own tap rows.
#ifndef CJIT_RUNTIME_CPU_DEPTHWISE_INT8_H_
#define CJIT_RUNTIME_CPU_DEPTHWISE_INT8_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/cpu/int8_gemm.h"

namespace cjit {

class Tensor;

struct DepthwiseVnniGeometry {
  int64_t C = 0, W = 0;     // input channels, input row width
  int64_t KH = 0, KW = 0;   // kernel
  int64_t OW = 0;           // output row width
  int64_t sw = 1, pw = 0, dw = 1;  // stride, left padding and dilation along W
  int32_t x_zp = 0;         // uint8 zero point of x (an int8 x is flipped to uint8 first)
};

struct DepthwiseVnniWeights {
  DepthwiseVnniGeometry geo;
  int64_t groups = 0;          // ceil(KW / 4)
  int64_t blocks = 0;          // whole blocks of 64 channels: C / 64
  int64_t chunks = 0;          // then chunks of 16 channels: ceil(C % 64 / 16)
  int64_t channels = 0;        // blocks * 64 + chunks * 16
  const int8_t* w = nullptr;   // [KH][groups][channels][4]: tap quadruples, permuted within each block
  std::shared_ptr<void> owner;  // keeps `w` alive
  std::vector<int32_t> corr;   // [channels], in the same order: -x_zp * sum of the channel's weights (+ bias)
  std::vector<float> mult;     // [channels], in the same order: requantization multipliers (with requant)
  int32_t y_zp = 0;
  bool to_signed = false;
  bool requant = false;
};

// Whether the VNNI depthwise kernel runs here (AVX-512 VNNI at or below --max_cpu_isa).
bool DepthwiseVnniAvailable();

// Prepares the kernel for `w` ([C, 1, KH, KW] uint8 or int8). `values(wt)` fills wt [KH * KW][C] with
// w - w_zp; it runs only when the permuted weights are not cached: they are cached once per buffer of a
// constant `w` and `key` (which must name the zero points' node). Returns false (nothing prepared) when a
// value of w - w_zp leaves [-128, 127]. `rq` (bias, mult per channel, zp, signedness; its y unused) makes
// the kernel requantize; null = int32 sums.
bool PrepareDepthwiseVnni(const Tensor& w, bool constant, const std::string& key,
                          const std::function<void(std::vector<int32_t>* wt)>& values,
                          const DepthwiseVnniGeometry& geo, const Int8Requant* rq, DepthwiseVnniWeights* out);

// Bytes of one tap row: OW * groups * channels * 4 (from the geometry alone: callers size their row cache
// before preparing weights).
int64_t DepthwiseVnniTapRowBytes(const DepthwiseVnniGeometry& geo);
inline int64_t DepthwiseVnniTapRowBytes(const DepthwiseVnniWeights& w) { return DepthwiseVnniTapRowBytes(w.geo); }

// The tap row of input row `row` ([W][C] uint8), or of a row in the padding (row == null).
void BuildDepthwiseVnniTapRow(const DepthwiseVnniWeights& w, const uint8_t* row, uint8_t* taps);

// One output row from the KH tap rows (kernel row kh's in taps[kh]): requantized bytes y[ow * ldy + c] when
// prepared with rq, else int32 sums acc[ow * C + c].
void DepthwiseVnniRow(const DepthwiseVnniWeights& w, const uint8_t* const* taps, uint8_t* y, int64_t ldy,
                      int32_t* acc);

}  // namespace cjit

#endif  // CJIT_RUNTIME_CPU_DEPTHWISE_INT8_H_
