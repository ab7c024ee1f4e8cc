// Reading and writing ONNX TensorProto files (the `input_K.pb` / `output_K.pb` of ONNX test-data sets).
// Supported element types: those of DType (strings from string_data; no complex). Errors name the file.
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

// A value file of the given kind (onnx-data.proto): a TensorProto (kTensor), a SequenceProto of tensors
// (kSequence), or an OptionalProto of a tensor or a sequence of tensors (kOptionalTensor / kOptionalSequence)
// — as ONNX test data stores each graph input and output by its declared type. A file that does not parse as
// that message, or holds another kind (maps, sparse tensors, nested sequences), or elements of other dtypes
// than the first, is an InvalidArgument / Unimplemented error naming the file. An empty sequence or optional
// records no element type: it gets `empty_elem` (the declared one; float32 when kInvalid).
absl::StatusOr<NamedTensor> ReadValueProtoFile(const std::string& path, ValueKind kind,
                                               DType empty_elem = DType::kInvalid);
// Writes `value` as the message its kind calls for (see ReadValueProtoFile).
absl::Status WriteValueProtoFile(const std::string& path, const std::string& name, const Tensor& value);

// Converts a TensorProto (with raw or typed data, or external data under model_dir).
absl::StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& proto, const std::string& model_dir);
// ONNX TensorProto.DataType code <-> DType: DTypeFromOnnxCode / OnnxCodeFromDType (compiler/ir/dtype.h).

}  // namespace cjit

#endif  // CJIT_COMPILER_ONNX_TENSOR_PROTO_H_
