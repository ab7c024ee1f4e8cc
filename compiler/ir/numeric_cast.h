// Value conversion between element types with a defined result for every input. C++ leaves a float to
// integer conversion undefined when the value (NaN, +-inf, or anything out of range) does not fit; the
// ONNX Cast specification leaves the result unspecified. clusterjit defines it as LLVM's
// llvm.fptosi.sat / llvm.fptoui.sat do (and XLA's convert): NaN -> 0, values beyond the target range
// saturate to its minimum / maximum, others truncate toward zero. Integer to integer conversions wrap
// (two's complement, as C++20 and numpy's astype); anything else is static_cast.
#ifndef CJIT_COMPILER_IR_NUMERIC_CAST_H_
#define CJIT_COMPILER_IR_NUMERIC_CAST_H_

#include <cmath>
#include <limits>
#include <type_traits>

namespace cjit {

// ONNX QuantizeLinear's quotient x / scale is clamped to +-kQuantClamp before rounding (the op's kernels,
// runtime/cpu/quant_rows.h, and the code generator's fused loops alike), so that the int32 conversion cannot
// overflow and a NaN (which every comparison rejects) lands on -kQuantClamp, then on the type's lowest value.
constexpr float kQuantClamp = 1e9f;

template <typename To, typename From>
inline To NumericCast(From v) {
  if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To> && !std::is_same_v<To, bool>) {
    if (std::isnan(v)) return To(0);
    // The bounds as long double (exact for every 64-bit integer limit): max is compared with >=, since
    // max + 1 (a power of two) is the first value that does not fit.
    constexpr long double lo = static_cast<long double>(std::numeric_limits<To>::min());
    constexpr long double hi_excl = static_cast<long double>(std::numeric_limits<To>::max()) + 1.0L;
    long double x = static_cast<long double>(v);
    if (x <= lo - 1.0L) return std::numeric_limits<To>::min();
    if (x >= hi_excl) return std::numeric_limits<To>::max();
    if (x < lo) return std::numeric_limits<To>::min();  // (lo - 1, lo): truncates to lo
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

// Integer arithmetic that wraps on overflow (two's complement, as numpy and ONNX Runtime compute) instead
// of C++'s undefined behavior for signed types; plain arithmetic for floating-point and other types.
template <typename T>
inline T WrappingAdd(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) >= sizeof(int)) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return static_cast<T>(a + b);
  }
}
template <typename T>
inline T WrappingSub(T a, T b) {
  if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) >= sizeof(int)) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
  } else {
    return static_cast<T>(a - b);
  }
}
template <typename T>
inline T WrappingMul(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool> && sizeof(T) <= sizeof(int)) {
    // Promotion to int: a product of two 16-bit unsigned values can overflow int.
    return static_cast<T>(static_cast<unsigned>(a) * static_cast<unsigned>(b));
  } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return static_cast<T>(a * b);
  }
}

}  // namespace cjit

#endif  // CJIT_COMPILER_IR_NUMERIC_CAST_H_
