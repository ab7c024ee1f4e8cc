// ONNX ModelProto -> Graph, through libonnx's protobuf classes (no checker: it stops at IR 8).
// Supports IR versions 3-10 and default-domain opsets 7-21: initializers and Constant nodes become
// constant values, attributes are converted, If/Loop subgraphs are imported recursively with the
// outer-scope names they read turned into captures (Node::implicit_inputs), and tensors with external
// data are read from files relative to the model's directory.
//
// Errors (absl::InvalidArgumentError / UnimplementedError) name the file, the node and the op: malformed
// protobuf, an unsupported IR version or opset, an unsupported op or attribute, an undefined input name,
// an unsupported tensor data type, external data that cannot be read.
//
// Thread-safety: the functions are reentrant.
#ifndef CJIT_COMPILER_ONNX_ONNX_IMPORT_H_
#define CJIT_COMPILER_ONNX_ONNX_IMPORT_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"

namespace cjit {

struct ImportOptions {
  // Directory against which external-data locations resolve ("" = current directory).
  std::string model_dir;
  // Name used in error messages.
  std::string source = "<bytes>";
};

absl::StatusOr<std::unique_ptr<Graph>> ImportOnnxModel(absl::string_view bytes, const ImportOptions& options);
absl::StatusOr<std::unique_ptr<Graph>> ImportOnnxFile(const std::string& path);

}  // namespace cjit

#endif  // CJIT_COMPILER_ONNX_ONNX_IMPORT_H_
