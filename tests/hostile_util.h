// Shared helpers of the hostile-input tests (hostile_*_test.cc): session options for one CPU thread with
// clustering at the first run (or op by op), a load-and-run of a built model, an error matcher by message
// fragments, and small tensors.
#ifndef CJIT_TESTS_HOSTILE_UTIL_H_
#define CJIT_TESTS_HOSTILE_UTIL_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "runtime/session.h"
#include "tests/model_builder.h"

namespace cjit::hostile {

inline constexpr int kF = onnx::TensorProto::FLOAT;
inline constexpr int kI64 = onnx::TensorProto::INT64;
inline constexpr int kI32 = onnx::TensorProto::INT32;

inline SessionOptions Opts(const std::string& auto_jit = "-1") {
  SessionOptions o;
  o.use_environment_flags = false;
  o.flags.device = "cpu";
  o.flags.intra_op_threads = 1;
  o.flags.auto_jit = auto_jit;
  o.flags.min_cluster_size = 1;
  o.flags.enable_lazy_compilation = false;
  return o;
}

inline absl::StatusOr<std::vector<NamedTensor>> LoadAndRun(const testing::ModelBuilder& b,
                                                           const std::vector<NamedTensor>& in,
                                                           const SessionOptions& o = Opts()) {
  auto s = Session::LoadFromBytes(b.Bytes(), o);
  if (!s.ok()) return s.status();
  return (*s)->Run(in);
}

// The status is an error whose message has every fragment.
inline ::testing::AssertionResult ErrorWith(const absl::Status& st, std::initializer_list<const char*> fragments) {
  if (st.ok()) return ::testing::AssertionFailure() << "succeeded; expected an error";
  for (const char* f : fragments) {
    if (std::string(st.message()).find(f) == std::string::npos) {
      return ::testing::AssertionFailure() << "error '" << st.message() << "' lacks '" << f << "'";
    }
  }
  return ::testing::AssertionSuccess();
}

inline Tensor F32(Dims dims, std::vector<float> v) {
  Tensor t(DType::kF32, std::move(dims));
  for (size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = v[i];
  return t;
}

inline Tensor I64(Dims dims, std::vector<int64_t> v) {
  Tensor t(DType::kI64, std::move(dims));
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

inline Tensor I32(Dims dims, std::vector<int32_t> v) {
  Tensor t(DType::kI32, std::move(dims));
  for (size_t i = 0; i < v.size(); ++i) t.data<int32_t>()[i] = v[i];
  return t;
}

}  // namespace cjit::hostile

#endif  // CJIT_TESTS_HOSTILE_UTIL_H_
