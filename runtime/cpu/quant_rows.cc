#include "runtime/cpu/quant_rows.h"

#include <immintrin.h>

// GCC 12 reports its own intrinsics headers (_mm512_undefined_*) as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cmath>

#include "compiler/ir/cpu_isa.h"

namespace cjit {
namespace {

constexpr float kClamp = kQuantClamp;

inline int32_t Lo(bool s) { return s ? -128 : 0; }
inline int32_t Hi(bool s) { return s ? 127 : 255; }

inline int32_t RoundClamped(float q) {
  q = q > -kClamp ? q : -kClamp;
  q = q < kClamp ? q : kClamp;
  return static_cast<int32_t>(std::rint(q));
}

inline void Store(void* y, int64_t i, int32_t v, bool s) {
  if (s) static_cast<int8_t*>(y)[i] = static_cast<int8_t>(v);
  else static_cast<uint8_t*>(y)[i] = static_cast<uint8_t>(v);
}

inline int32_t WrapAdd(int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
}

// ---- scalar definitions (the baseline and every vector tail)
void QuantizeScalar(const float* x, int64_t i, int64_t n, float scale, int32_t zp, bool s, void* y) {
  for (; i < n; ++i) Store(y, i, std::clamp(RoundClamped(x[i] / scale) + zp, Lo(s), Hi(s)), s);
}
void DequantizeScalar(const void* x, bool s, int64_t i, int64_t n, int32_t zp, float scale, float* y) {
  for (; i < n; ++i) {
    const int32_t v = s ? static_cast<const int8_t*>(x)[i] : static_cast<const uint8_t*>(x)[i];
    y[i] = static_cast<float>(v - zp) * scale;
  }
}
void MinMaxScalar(const float* x, int64_t i, int64_t n, float* mn, float* mx) {
  for (; i < n; ++i) {
    *mn = x[i] < *mn ? x[i] : *mn;
    *mx = x[i] > *mx ? x[i] : *mx;
  }
}
// One row of RequantizeColumnsI32: element i has bias[i] (or none) and mult[i].
void RequantizeScalar(const int32_t* acc, int64_t i, int64_t n, const int32_t* bias, const float* mult, int32_t zp,
                      bool s, void* y) {
  for (; i < n; ++i) {
    const float q = static_cast<float>(WrapAdd(acc[i], bias == nullptr ? 0 : bias[i])) * mult[i];
    Store(y, i, std::clamp(RoundClamped(q) + zp, Lo(s), Hi(s)), s);
  }
}

// ---- AVX-512
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) inline void StoreNarrow16(__m512i v, bool s, void* y,
                                                                                       int64_t i) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint8_t*>(y) + i), _mm512_cvtepi32_epi8(v));
  (void)s;
}
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) inline __m512i RoundClamp16(__m512 q, int32_t zp,
                                                                                         bool s) {
  q = _mm512_min_ps(_mm512_max_ps(q, _mm512_set1_ps(-kClamp)), _mm512_set1_ps(kClamp));
  __m512i r = _mm512_add_epi32(_mm512_cvtps_epi32(q), _mm512_set1_epi32(zp));
  return _mm512_min_epi32(_mm512_max_epi32(r, _mm512_set1_epi32(Lo(s))), _mm512_set1_epi32(Hi(s)));
}
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void QuantizeAvx512(const float* x, int64_t n,
                                                                                 float scale, int32_t zp, bool s,
                                                                                 void* y) {
  int64_t i = 0;
  const __m512 vs = _mm512_set1_ps(scale);
  for (; i + 16 <= n; i += 16) StoreNarrow16(RoundClamp16(_mm512_div_ps(_mm512_loadu_ps(x + i), vs), zp, s), s, y, i);
  QuantizeScalar(x, i, n, scale, zp, s, y);
}
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void DequantizeAvx512(const void* x, bool s, int64_t n,
                                                                                   int32_t zp, float scale, float* y) {
  int64_t i = 0;
  const __m512 vs = _mm512_set1_ps(scale);
  const __m512i vz = _mm512_set1_epi32(zp);
  const uint8_t* p = static_cast<const uint8_t*>(x);
  for (; i + 16 <= n; i += 16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    const __m512i v = s ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
    _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(v, vz)), vs));
  }
  DequantizeScalar(x, s, i, n, zp, scale, y);
}
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void MinMaxAvx512(const float* x, int64_t n, float* mn,
                                                                               float* mx) {
  int64_t i = 0;
  if (n >= 16) {
    __m512 vmn = _mm512_set1_ps(*mn), vmx = _mm512_set1_ps(*mx);
    for (; i + 16 <= n; i += 16) {
      const __m512 v = _mm512_loadu_ps(x + i);
      vmn = _mm512_min_ps(v, vmn);  // a NaN in v yields the second operand
      vmx = _mm512_max_ps(v, vmx);
    }
    *mn = _mm512_reduce_min_ps(vmn);
    *mx = _mm512_reduce_max_ps(vmx);
  }
  MinMaxScalar(x, i, n, mn, mx);
}
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void RequantizeColumnsAvx512(
    const int32_t* acc, int64_t rows, int64_t cols, const int32_t* bias, const float* mult, int32_t zp, bool s,
    void* y) {
  // Whole blocks of 16 columns narrow in a register and store 16 bytes: the masked narrowing store
  // (vpmovdb to memory) of the tail is several times slower on AMD Zen 4, where it made this loop a fifth of
  // a quantized MobileNetV2's run.
  const int64_t whole = cols / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (cols - whole)) - 1);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* a = acc + r * cols;
    uint8_t* out = static_cast<uint8_t*>(y) + r * cols;
    for (int64_t j = 0; j < whole; j += 16) {
      __m512i v = _mm512_loadu_si512(a + j);
      if (bias != nullptr) v = _mm512_add_epi32(v, _mm512_loadu_si512(bias + j));
      const __m512 q = _mm512_mul_ps(_mm512_cvtepi32_ps(v), _mm512_loadu_ps(mult + j));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j), _mm512_cvtepi32_epi8(RoundClamp16(q, zp, s)));
    }
    if (tail != 0) {
      __m512i v = _mm512_maskz_loadu_epi32(tail, a + whole);
      if (bias != nullptr) v = _mm512_add_epi32(v, _mm512_maskz_loadu_epi32(tail, bias + whole));
      const __m512 q = _mm512_mul_ps(_mm512_cvtepi32_ps(v), _mm512_maskz_loadu_ps(tail, mult + whole));
      _mm_mask_storeu_epi8(out + whole, tail, _mm512_cvtepi32_epi8(RoundClamp16(q, zp, s)));
    }
  }
}

// ---- AVX2
__attribute__((target("avx2,fma"))) inline void StoreNarrow8(__m256i v, bool s, void* y, int64_t i) {
  const __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i b8 = s ? _mm_packs_epi16(w16, w16) : _mm_packus_epi16(w16, w16);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(static_cast<uint8_t*>(y) + i), b8);
}
__attribute__((target("avx2,fma"))) inline __m256i RoundClamp8(__m256 q, int32_t zp, bool s) {
  q = _mm256_min_ps(_mm256_max_ps(q, _mm256_set1_ps(-kClamp)), _mm256_set1_ps(kClamp));
  __m256i r = _mm256_add_epi32(_mm256_cvtps_epi32(q), _mm256_set1_epi32(zp));
  return _mm256_min_epi32(_mm256_max_epi32(r, _mm256_set1_epi32(Lo(s))), _mm256_set1_epi32(Hi(s)));
}
__attribute__((target("avx2,fma"))) void QuantizeAvx2(const float* x, int64_t n, float scale, int32_t zp, bool s,
                                                      void* y) {
  int64_t i = 0;
  const __m256 vs = _mm256_set1_ps(scale);
  for (; i + 8 <= n; i += 8) StoreNarrow8(RoundClamp8(_mm256_div_ps(_mm256_loadu_ps(x + i), vs), zp, s), s, y, i);
  QuantizeScalar(x, i, n, scale, zp, s, y);
}
__attribute__((target("avx2,fma"))) void DequantizeAvx2(const void* x, bool s, int64_t n, int32_t zp, float scale,
                                                        float* y) {
  int64_t i = 0;
  const __m256 vs = _mm256_set1_ps(scale);
  const __m256i vz = _mm256_set1_epi32(zp);
  const uint8_t* p = static_cast<const uint8_t*>(x);
  for (; i + 8 <= n; i += 8) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + i));
    const __m256i v = s ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(v, vz)), vs));
  }
  DequantizeScalar(x, s, i, n, zp, scale, y);
}
__attribute__((target("avx2,fma"))) void MinMaxAvx2(const float* x, int64_t n, float* mn, float* mx) {
  int64_t i = 0;
  if (n >= 8) {
    __m256 vmn = _mm256_set1_ps(*mn), vmx = _mm256_set1_ps(*mx);
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + i);
      vmn = _mm256_min_ps(v, vmn);
      vmx = _mm256_max_ps(v, vmx);
    }
    alignas(32) float a[8], b[8];
    _mm256_store_ps(a, vmn);
    _mm256_store_ps(b, vmx);
    for (int j = 0; j < 8; ++j) {
      *mn = a[j] < *mn ? a[j] : *mn;
      *mx = b[j] > *mx ? b[j] : *mx;
    }
  }
  MinMaxScalar(x, i, n, mn, mx);
}
__attribute__((target("avx2,fma"))) void RequantizeColumnsAvx2(const int32_t* acc, int64_t rows, int64_t cols,
                                                               const int32_t* bias, const float* mult, int32_t zp,
                                                               bool s, void* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* a = acc + r * cols;
    void* out = static_cast<uint8_t*>(y) + r * cols;
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8) {
      __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + j));
      if (bias != nullptr) v = _mm256_add_epi32(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bias + j)));
      const __m256 q = _mm256_mul_ps(_mm256_cvtepi32_ps(v), _mm256_loadu_ps(mult + j));
      StoreNarrow8(RoundClamp8(q, zp, s), s, out, j);
    }
    RequantizeScalar(a, j, cols, bias, mult, zp, s, out);
  }
}

}  // namespace

void QuantizeRowF32(const float* x, int64_t n, float scale, int32_t zp, bool to_signed, void* y) {
  if (CpuHasAvx512()) return QuantizeAvx512(x, n, scale, zp, to_signed, y);
  if (CpuHasAvx2()) return QuantizeAvx2(x, n, scale, zp, to_signed, y);
  QuantizeScalar(x, 0, n, scale, zp, to_signed, y);
}

void DequantizeRowF32(const void* x, bool from_signed, int64_t n, int32_t zp, float scale, float* y) {
  if (CpuHasAvx512()) return DequantizeAvx512(x, from_signed, n, zp, scale, y);
  if (CpuHasAvx2()) return DequantizeAvx2(x, from_signed, n, zp, scale, y);
  DequantizeScalar(x, from_signed, 0, n, zp, scale, y);
}

void MinMaxF32(const float* x, int64_t n, float* mn, float* mx) {
  if (CpuHasAvx512()) return MinMaxAvx512(x, n, mn, mx);
  if (CpuHasAvx2()) return MinMaxAvx2(x, n, mn, mx);
  MinMaxScalar(x, 0, n, mn, mx);
}

void RequantizeColumnsI32(const int32_t* acc, int64_t rows, int64_t cols, const int32_t* bias, const float* mult,
                          int32_t zp, bool to_signed, void* y) {
  if (CpuHasAvx512()) return RequantizeColumnsAvx512(acc, rows, cols, bias, mult, zp, to_signed, y);
  if (CpuHasAvx2()) return RequantizeColumnsAvx2(acc, rows, cols, bias, mult, zp, to_signed, y);
  for (int64_t r = 0; r < rows; ++r) {
    RequantizeScalar(acc + r * cols, 0, cols, bias, mult, zp, to_signed, static_cast<uint8_t*>(y) + r * cols);
  }
}

}  // namespace cjit
