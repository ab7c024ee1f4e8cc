// Running ONNX test-data directories (model.onnx + test_data_set_*/input_K.pb, output_K.pb) and comparing
// outputs with the ONNX backend-test rule |out - ref| <= atol + rtol * |ref| (NaN matches NaN; dtypes and
// dims must match exactly). Used by `cjit check` and the conformance/real-model tests.
#ifndef CJIT_TOOLS_CHECK_LIB_H_
#define CJIT_TOOLS_CHECK_LIB_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/onnx/tensor_proto.h"
#include "runtime/session.h"

namespace cjit {

struct OutputComparison {
  std::string name;
  bool ok = false;
  double max_abs = 0, max_rel = 0;
  std::string problem;  // dtype/shape mismatch text, empty otherwise
};

OutputComparison CompareTensors(const std::string& name, const Tensor& got, const Tensor& ref, double rtol,
                                double atol);

struct DataSet {
  std::string dir;
  std::vector<NamedTensor> inputs, outputs;
};

// Lists test_data_set_* directories under `dir` (sorted) and reads their tensors. Input tensors without a
// name get the session's input name at the same position.
absl::StatusOr<std::vector<DataSet>> ReadDataSets(const std::string& dir, const Session& session);

struct DataSetResult {
  std::string dir;
  absl::Status status;  // run error, if any
  std::vector<OutputComparison> outputs;
  bool ok() const;
};

DataSetResult RunDataSet(Session& session, const DataSet& set, double rtol, double atol);

// IR text (compiler/ir/text.h) parsed and specialized for the static shapes its inputs declare, constant
// sub-graphs folded with the CPU kernels: how tests and benchmarks build small graphs.
absl::StatusOr<std::unique_ptr<Graph>> SpecializedGraphFromText(const std::string& ir);

// A session whose flags are `flag_text` (CJIT_FLAGS grammar) over the defaults — not the environment —
// with `threads` intra-op threads unless flag_text sets them.
absl::StatusOr<std::unique_ptr<Session>> LoadSessionWithFlags(const std::string& model_path,
                                                              const std::string& flag_text, int threads);

}  // namespace cjit

#endif  // CJIT_TOOLS_CHECK_LIB_H_
