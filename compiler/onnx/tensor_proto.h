// Reading and writing ONNX TensorProto files (the `input_K.pb` / `output_K.pb` of ONNX test-data sets).
// Supported element types: those of DType (no strings, no complex). Errors name the file.
#ifndef CJIT_COMPILER_ONNX_TENSOR_PROTO_H_
#define CJIT_COMPILER_ONNX_TENSOR_PROTO_H_

#include <string>

#include "absl/status/statusor.h"
#include "compiler/ir/tensor.h"

namespace onnx {
class TensorProto;
}

namespace cjit {

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

absl::StatusOr<NamedTensor> ReadTensorProtoFile(const std::string& path);
absl::Status WriteTensorProtoFile(const std::string& path, const std::string& name, const Tensor& tensor);

// Converts a TensorProto (with raw or typed data, or external data under model_dir).
absl::StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& proto, const std::string& model_dir);
// ONNX TensorProto.DataType code <-> DType (kInvalid / 0 when unsupported).
DType DTypeFromOnnx(int onnx_type);
int OnnxFromDType(DType t);

}  // namespace cjit

#endif  // CJIT_COMPILER_ONNX_TENSOR_PROTO_H_
