// Element types of clusterjit tensors. Storage sizes are those of the ONNX TensorProto data types;
// float16 is IEEE 754 binary16, bfloat16 the upper half of a binary32, bool one byte (0 or 1).
#ifndef CJIT_COMPILER_IR_DTYPE_H_
#define CJIT_COMPILER_IR_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace cjit {

enum class DType : uint8_t {
  kInvalid = 0,
  kF32,
  kF16,
  kBF16,
  kF64,
  kI8,
  kU8,
  kI16,
  kU16,
  kI32,
  kI64,
  kU32,
  kU64,
  kBool,
  kString,  // ONNX tensor(string): UTF-8 byte strings, one std::string per element (compiler/ir/tensor.h)
  // ONNX tensor(int4) / tensor(uint4) (opset 21): held one element per byte, sign-extended for kI4 (values
  // -8..7 / 0..15); packed two per byte, low nibble first, only in ONNX files (compiler/onnx/tensor_proto.h).
  kI4,
  kU4,
};

// Bytes per element (0 for kInvalid).
size_t DTypeSize(DType t);
// Short name used by the textual IR: f32 f16 bf16 f64 i8 u8 i16 u16 i32 i64 u32 u64 bool string i4 u4.
absl::string_view DTypeName(DType t);
// Inverse of DTypeName; kInvalid when unknown.
DType DTypeFromName(absl::string_view name);
// ONNX TensorProto.DataType code (onnx.proto: FLOAT = 1, STRING = 8 ... BFLOAT16 = 16) <-> DType; kInvalid / 0
// for a code or type the other side lacks (complex, float8).
DType DTypeFromOnnxCode(int64_t code);
int OnnxCodeFromDType(DType t);
// The onnx.proto name of a TensorProto.DataType code with the code, for errors: "FLOAT8E4M3FN (17)".
std::string OnnxTypeName(int64_t code);
bool IsFloat(DType t);    // f16, bf16, f32, f64
bool IsInteger(DType t);  // signed or unsigned integers (not bool), int4 / uint4 included
// The value range of an integer dtype (int4 -8..7, uint4 0..15, ...): what ONNX's QuantizeLinear saturates to.
void IntegerRange(DType t, double* lo, double* hi);
bool IsSigned(DType t);

}  // namespace cjit

#endif  // CJIT_COMPILER_IR_DTYPE_H_
