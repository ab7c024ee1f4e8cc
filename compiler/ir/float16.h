// float16 (IEEE 754-2008 binary16) and bfloat16 (the upper 16 bits of a binary32) conversions.
//
// Storage: both are uint16_t bit patterns in memory, the layout of ONNX TensorProto FLOAT16 / BFLOAT16,
// of Eigen::half / Eigen::bfloat16 (a struct holding one uint16_t `x`) and of CUDA's __half /
// __nv_bfloat16 (one unsigned short): a buffer of any of them can be reinterpreted as uint16_t.
//
// Rounding (float32 -> 16 bit): round to nearest, ties to even (IEEE 754 §4.3.1), with
//  - subnormal results rounded correctly (binary16 subnormals 2^-24 .. 2^-14; bfloat16 keeps float32's
//    exponent range, so float32 subnormals map to bfloat16 subnormals, not to zero),
//  - overflow to +/-infinity (binary16: |x| >= 65520 = 65504 + half an ulp),
//  - NaN kept NaN and made quiet: sign and the top mantissa bits kept, quiet bit set (binary16: 0x0200,
//    bfloat16: 0x0040). This is what x86 VCVTPS2PH and VCVTNEPS2BF16 produce.
// Widening (16 bit -> float32) is exact. binary16 NaNs are made quiet (as VCVTPH2PS); bfloat16 -> float32
// is the plain bit widening (x << 16) and keeps every pattern.
//
// The bulk functions use the CPU's instructions when it has them (F16C / AVX-512F for binary16,
// AVX-512 BF16 for bfloat16, detected at run time) and the scalar code otherwise; both give the same
// bits for every input (tests/float16_test.cc checks all 2^16 patterns and float32 ties, subnormals,
// overflow and NaNs, against numpy). VCVTNEPS2BF16 flushes float32 subnormal inputs to zero; the bulk
// code corrects those lanes. The results do not depend on MXCSR (DAZ/FTZ) state.
//
// Thread-safety: all functions are pure and may be called from any thread.
#ifndef CJIT_COMPILER_IR_FLOAT16_H_
#define CJIT_COMPILER_IR_FLOAT16_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "compiler/ir/dtype.h"
#include "compiler/ir/tensor.h"

namespace cjit {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Scalar conversions (software).
inline uint16_t FloatToHalfBits(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((ax >> 13) & 0x03FFu));  // NaN
  if (ax >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520 (and inf): infinity
  if (ax < 0x38800000u) {  // below 2^-14: binary16 subnormal or zero
    if (ax < 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25: rounds to zero (tie to even)
    const uint32_t e = ax >> 23;                 // 102 .. 112
    const uint32_t m = (ax & 0x007FFFFFu) | 0x00800000u;
    const uint32_t shift = 126u - e;             // 14 .. 24: value = m * 2^(e-150) = r * 2^-24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits; a carry may reach infinity.
  uint32_t r = ax - 0x38000000u;
  r += 0x0FFFu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (r >> 13));
}

inline float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu;
  uint32_t m = h & 0x03FFu;
  if (e == 0x1F) return BitsToFloat(sign | 0x7F800000u | (m << 13) | (m ? 0x00400000u : 0u));
  if (e != 0) return BitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
  if (m == 0) return BitsToFloat(sign);
  int exp = 113;  // subnormal: normalize
  while (!(m & 0x0400u)) {
    m <<= 1;
    --exp;
  }
  return BitsToFloat(sign | (static_cast<uint32_t>(exp) << 23) | ((m & 0x03FFu) << 13));
}

inline uint16_t FloatToBfloat16Bits(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

inline float Bfloat16BitsToFloat(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

// float64 -> float32 rounded to odd (Boldo & Melquiond, "Emulation of FMA and correctly rounded sums: proved
// algorithms using rounding to odd", IEEE TC 2008): the nearest float32 toward zero, with its last bit set
// when inexact. A float32 rounded to odd, then rounded to nearest-even to a format at least 2 bits narrower
// (float16's 11 bits, bfloat16's 8, against float32's 24), equals the direct correctly rounded conversion —
// no double rounding. NaN stays NaN; magnitudes beyond float32's range become FLT_MAX (odd), which both
// 16-bit formats round to infinity, as the direct conversion does.
inline float DoubleToFloatRoundToOdd(double d) {
  const float f = static_cast<float>(d);  // nearest, ties to even
  const double back = f;
  if (back == d || d != d) return f;
  uint32_t u = FloatBits(f);
  if (back > d ? d >= 0 : d < 0) --u;  // |f| > |d|: one step toward zero (same sign)
  return BitsToFloat(u | 1u);
}

// float64 -> float16 / bfloat16 bits, correctly rounded (nearest, ties to even), as numpy's float64 ->
// float16 cast.
inline uint16_t DoubleToHalfBits(double d) { return FloatToHalfBits(DoubleToFloatRoundToOdd(d)); }
inline uint16_t DoubleToBfloat16Bits(double d) { return FloatToBfloat16Bits(DoubleToFloatRoundToOdd(d)); }

// Bulk conversions: n elements; src and dst must not overlap. Hardware where available.
void ConvertFloatToHalf(const float* src, uint16_t* dst, size_t n);
void ConvertHalfToFloat(const uint16_t* src, float* dst, size_t n);
void ConvertFloatToBfloat16(const float* src, uint16_t* dst, size_t n);
void ConvertBfloat16ToFloat(const uint16_t* src, float* dst, size_t n);
// Each float32 v split into a bfloat16 high part hi = bf16(v) and remainder lo = bf16(v - hi), both
// rounded to nearest even: the operand split of bfloat16x3 products (Henry, Tang, Heinecke, ARITH 2019).
void SplitFloatToBfloat16(const float* src, uint16_t* hi, uint16_t* lo, size_t n);

// The bulk conversion between two dtypes among float32 and float16/bfloat16 (one of them float32): n
// elements from `src` (of dtype `from`) to `dst` (of dtype `to`). Returns false, converting nothing, for
// any other pair.
bool ConvertFloatBuffer(const void* src, DType from, void* dst, DType to, size_t n);
// A new tensor of dtype `to` holding t converted (a pair ConvertFloatBuffer takes; else TensorError).
Tensor ConvertFloatTensor(const Tensor& t, DType to);

// Which instructions the bulk functions use on this CPU (for logs and tests).
bool HasHardwareHalfConversion();      // F16C with AVX2 (16 lanes with AVX-512F)
bool HasHardwareBfloat16Conversion();  // AVX-512 BF16

// Tests only: force the scalar code in the bulk functions (process-wide; not for concurrent use).
void SetFloat16HardwareForTesting(bool enabled);

}  // namespace cjit

#endif  // CJIT_COMPILER_IR_FLOAT16_H_
