#include "compiler/ir/cpu_isa.h"
#include "compiler/ir/float16.h"

#include <immintrin.h>

// GCC 12 reports its own intrinsics headers (_mm512_undefined_*) as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <atomic>

namespace cjit {
namespace {

std::atomic<bool> g_hardware_enabled{true};

// F16C conversions (8 per instruction with AVX2, 16 with AVX-512 F), within --max_cpu_isa
// (compiler/ir/cpu_isa.h).
bool CpuHasF16c() { return CpuHasAvx2(); }

__attribute__((target("avx2,f16c"))) void F32ToF16Avx2(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) dst[i] = FloatToHalfBits(src[i]);
}

__attribute__((target("avx2,f16c"))) void F16ToF32Avx2(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  for (; i < n; ++i) dst[i] = HalfBitsToFloat(src[i]);
}

__attribute__((target("avx512f,f16c"))) void F32ToF16Avx512(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
  if (i < n) {
    const __mmask16 k = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m256i h =
        _mm512_cvtps_ph(_mm512_maskz_loadu_ps(k, src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    alignas(32) uint16_t tmp[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), h);
    for (size_t j = 0; i + j < n; ++j) dst[i + j] = tmp[j];
  }
}

__attribute__((target("avx512f,f16c"))) void F16ToF32Avx512(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  }
  for (; i < n; ++i) dst[i] = HalfBitsToFloat(src[i]);
}

// VCVTNEPS2BF16 rounds to nearest even and quiets NaNs like FloatToBfloat16Bits, but treats float32
// subnormal inputs as zero: those lanes are recomputed with the integer rounding.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void F32ToBf16Avx512(const float* src, uint16_t* dst,
                                                                            size_t n) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i min_normal = _mm512_set1_epi32(0x00800000);
  const __m512i bias = _mm512_set1_epi32(0x7FFF);
  const __m512i one = _mm512_set1_epi32(1);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(src + i);
    __m256i r = (__m256i)_mm512_cvtneps_pbh(v);
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i a = _mm512_and_si512(bits, abs_mask);
    const __mmask16 sub = _mm512_mask_cmplt_epi32_mask(_mm512_test_epi32_mask(a, a), a, min_normal);
    if (sub) {
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), one);
      const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(bits, bias), lsb), 16);
      r = _mm256_mask_blend_epi16(sub, r, _mm512_cvtepi32_epi16(rounded));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), r);
  }
  for (; i < n; ++i) dst[i] = FloatToBfloat16Bits(src[i]);
}

__attribute__((target("avx512f"))) void Bf16ToF32Avx512(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(w, 16));
  }
  for (; i < n; ++i) dst[i] = Bfloat16BitsToFloat(src[i]);
}

bool UseHardware() { return g_hardware_enabled.load(std::memory_order_relaxed); }

}  // namespace

bool HasHardwareHalfConversion() { return CpuHasF16c(); }
bool HasHardwareBfloat16Conversion() { return CpuHasAvx512Bf16(); }
void SetFloat16HardwareForTesting(bool enabled) { g_hardware_enabled.store(enabled); }

void ConvertFloatToHalf(const float* src, uint16_t* dst, size_t n) {
  if (UseHardware() && CpuHasAvx512()) return F32ToF16Avx512(src, dst, n);
  if (UseHardware() && CpuHasF16c()) return F32ToF16Avx2(src, dst, n);
  for (size_t i = 0; i < n; ++i) dst[i] = FloatToHalfBits(src[i]);
}

void ConvertHalfToFloat(const uint16_t* src, float* dst, size_t n) {
  if (UseHardware() && CpuHasAvx512()) return F16ToF32Avx512(src, dst, n);
  if (UseHardware() && CpuHasF16c()) return F16ToF32Avx2(src, dst, n);
  for (size_t i = 0; i < n; ++i) dst[i] = HalfBitsToFloat(src[i]);
}

void ConvertFloatToBfloat16(const float* src, uint16_t* dst, size_t n) {
  if (UseHardware() && CpuHasAvx512Bf16()) return F32ToBf16Avx512(src, dst, n);
  for (size_t i = 0; i < n; ++i) dst[i] = FloatToBfloat16Bits(src[i]);
}

void SplitFloatToBfloat16(const float* src, uint16_t* hi, uint16_t* lo, size_t n) {
  ConvertFloatToBfloat16(src, hi, n);
  constexpr size_t kChunk = 256;  // remainders through a stack buffer, converted in bulk
  float rest[kChunk];
  for (size_t off = 0; off < n; off += kChunk) {
    const size_t m = std::min(kChunk, n - off);
    for (size_t i = 0; i < m; ++i) rest[i] = src[off + i] - Bfloat16BitsToFloat(hi[off + i]);
    ConvertFloatToBfloat16(rest, lo + off, m);
  }
}

bool ConvertFloatBuffer(const void* src, DType from, void* dst, DType to, size_t n) {
  if (from == DType::kF32 && to == DType::kF16) {
    ConvertFloatToHalf(static_cast<const float*>(src), static_cast<uint16_t*>(dst), n);
  } else if (from == DType::kF32 && to == DType::kBF16) {
    ConvertFloatToBfloat16(static_cast<const float*>(src), static_cast<uint16_t*>(dst), n);
  } else if (from == DType::kF16 && to == DType::kF32) {
    ConvertHalfToFloat(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n);
  } else if (from == DType::kBF16 && to == DType::kF32) {
    ConvertBfloat16ToFloat(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n);
  } else {
    return false;
  }
  return true;
}

Tensor ConvertFloatTensor(const Tensor& t, DType to) {
  Tensor out(to, t.dims());
  if (!ConvertFloatBuffer(t.raw(), t.dtype(), out.raw(), to, static_cast<size_t>(t.numel()))) {
    throw TensorError(std::string("ConvertFloatTensor: no conversion from ") + std::string(DTypeName(t.dtype())) +
                      " to " + std::string(DTypeName(to)));
  }
  return out;
}

void ConvertBfloat16ToFloat(const uint16_t* src, float* dst, size_t n) {
  if (UseHardware() && CpuHasAvx512()) return Bf16ToF32Avx512(src, dst, n);
  for (size_t i = 0; i < n; ++i) dst[i] = Bfloat16BitsToFloat(src[i]);
}

}  // namespace cjit
