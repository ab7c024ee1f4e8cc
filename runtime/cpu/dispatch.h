// Dtype dispatch for CPU kernels: calls f(T{}) with the C++ type of a DType. float16/bfloat16 use
// Eigen::half / Eigen::bfloat16 (arithmetic through float). Internal to runtime/cpu.
#ifndef CJIT_RUNTIME_CPU_DISPATCH_H_
#define CJIT_RUNTIME_CPU_DISPATCH_H_

#include <Eigen/Core>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/ir/dtype.h"

namespace cjit {

using half = Eigen::half;
using bfloat16 = Eigen::bfloat16;

template <typename F>
absl::Status DispatchAll(DType t, F&& f) {
  switch (t) {
    case DType::kF32: f(float{}); break;
    case DType::kF64: f(double{}); break;
    case DType::kF16: f(half{}); break;
    case DType::kBF16: f(bfloat16{}); break;
    case DType::kI8: case DType::kI4: f(int8_t{}); break;  // int4 / uint4: one element per byte
    case DType::kU8: case DType::kU4: f(uint8_t{}); break;
    case DType::kI16: f(int16_t{}); break;
    case DType::kU16: f(uint16_t{}); break;
    case DType::kI32: f(int32_t{}); break;
    case DType::kI64: f(int64_t{}); break;
    case DType::kU32: f(uint32_t{}); break;
    case DType::kU64: f(uint64_t{}); break;
    case DType::kBool: f(bool{}); break;
    default:
      return absl::UnimplementedError(absl::StrCat("unsupported dtype ", DTypeName(t)));
  }
  return absl::OkStatus();
}

template <typename F>
absl::Status DispatchFloat(DType t, F&& f) {
  switch (t) {
    case DType::kF32: f(float{}); break;
    case DType::kF64: f(double{}); break;
    case DType::kF16: f(half{}); break;
    case DType::kBF16: f(bfloat16{}); break;
    default:
      return absl::UnimplementedError(absl::StrCat("expected a float dtype, got ", DTypeName(t)));
  }
  return absl::OkStatus();
}

// Numeric (no bool).
template <typename F>
absl::Status DispatchNumeric(DType t, F&& f) {
  if (t == DType::kBool) return absl::UnimplementedError("bool is not a numeric dtype here");
  return DispatchAll(t, std::forward<F>(f));
}

// Accumulation type: float for half types, the type itself otherwise.
template <typename T> struct Acc { using type = T; };
template <> struct Acc<half> { using type = float; };
template <> struct Acc<bfloat16> { using type = float; };

}  // namespace cjit

#endif  // CJIT_RUNTIME_CPU_DISPATCH_H_
