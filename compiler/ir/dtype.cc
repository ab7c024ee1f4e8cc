#include "compiler/ir/dtype.h"

#include <cmath>
#include <iterator>
#include <string>

namespace cjit {
namespace {
struct Info {
  DType t;
  absl::string_view name;
  size_t size;
};
constexpr Info kInfos[] = {
    {DType::kInvalid, "invalid", 0}, {DType::kF32, "f32", 4}, {DType::kF16, "f16", 2},
    {DType::kBF16, "bf16", 2},       {DType::kF64, "f64", 8}, {DType::kI8, "i8", 1},
    {DType::kU8, "u8", 1},           {DType::kI16, "i16", 2}, {DType::kU16, "u16", 2},
    {DType::kI32, "i32", 4},         {DType::kI64, "i64", 8}, {DType::kU32, "u32", 4},
    {DType::kU64, "u64", 8},         {DType::kBool, "bool", 1}, {DType::kString, "string", sizeof(std::string)},
    {DType::kI4, "i4", 1},           {DType::kU4, "u4", 1},
};
}  // namespace

size_t DTypeSize(DType t) { return kInfos[static_cast<int>(t)].size; }
absl::string_view DTypeName(DType t) { return kInfos[static_cast<int>(t)].name; }
DType DTypeFromName(absl::string_view name) {
  for (const Info& i : kInfos) {
    if (i.name == name && i.t != DType::kInvalid) return i.t;
  }
  return DType::kInvalid;
}
bool IsFloat(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kF64;
}
bool IsInteger(DType t) {
  switch (t) {
    case DType::kI8: case DType::kU8: case DType::kI16: case DType::kU16:
    case DType::kI32: case DType::kI64: case DType::kU32: case DType::kU64: case DType::kI4: case DType::kU4:
      return true;
    default:
      return false;
  }
}
bool IsSigned(DType t) {
  return IsFloat(t) || t == DType::kI8 || t == DType::kI16 || t == DType::kI32 || t == DType::kI64 || t == DType::kI4;
}

void IntegerRange(DType t, double* lo, double* hi) {
  switch (t) {
    case DType::kI4: *lo = -8; *hi = 7; return;
    case DType::kU4: *lo = 0; *hi = 15; return;
    case DType::kI8: *lo = -128; *hi = 127; return;
    case DType::kU8: case DType::kBool: *lo = 0; *hi = 255; return;
    case DType::kI16: *lo = -32768; *hi = 32767; return;
    case DType::kU16: *lo = 0; *hi = 65535; return;
    case DType::kI32: *lo = -2147483648.0; *hi = 2147483647.0; return;
    case DType::kU32: *lo = 0; *hi = 4294967295.0; return;
    case DType::kI64: *lo = -9223372036854775808.0; *hi = 9223372036854775807.0; return;
    case DType::kU64: *lo = 0; *hi = 18446744073709551615.0; return;
    default: *lo = -INFINITY; *hi = INFINITY; return;
  }
}

DType DTypeFromOnnxCode(int64_t code) {
  static constexpr DType kMap[] = {DType::kInvalid, DType::kF32,  DType::kU8,      DType::kI8,      DType::kU16,
                                   DType::kI16,     DType::kI32,  DType::kI64,     DType::kString,  DType::kBool,
                                   DType::kF16,     DType::kF64,  DType::kU32,     DType::kU64,     DType::kInvalid,
                                   DType::kInvalid, DType::kBF16,
                                   // 14/15 complex, 17-20 float8: clusterjit has no such dtypes.
                                   DType::kInvalid, DType::kInvalid, DType::kInvalid, DType::kInvalid,
                                   DType::kU4,      DType::kI4};
  return code >= 0 && code < static_cast<int64_t>(std::size(kMap)) ? kMap[code] : DType::kInvalid;
}

std::string OnnxTypeName(int64_t code) {
  static constexpr absl::string_view kNames[] = {
      "UNDEFINED", "FLOAT",        "UINT8",          "INT8",       "UINT16",         "INT16",  "INT32",
      "INT64",     "STRING",       "BOOL",           "FLOAT16",    "DOUBLE",         "UINT32", "UINT64",
      "COMPLEX64", "COMPLEX128",   "BFLOAT16",       "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2",
      "FLOAT8E5M2FNUZ", "UINT4",   "INT4",           "FLOAT4E2M1"};
  const std::string code_text = std::to_string(code);
  if (code < 0 || code >= static_cast<int64_t>(std::size(kNames))) return "type code " + code_text;
  return std::string(kNames[code]) + " (" + code_text + ")";
}

int OnnxCodeFromDType(DType t) {
  for (int code = 1; code <= 22; ++code) {
    if (DTypeFromOnnxCode(code) == t && t != DType::kInvalid) return code;
  }
  return 0;
}

}  // namespace cjit
