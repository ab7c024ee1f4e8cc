// SessionOptions and a model runner shared by the tests. OneClusterOptions (the clustering tests): the CPU, no
// CJIT_FLAGS from the environment, every clusterable op clustered however small (auto_jit=1, min_cluster_size=1), one
// intra-op thread, and compiles at fixed runs (auto would compile in the background when a CPU is idle).
// Tests add their own flags on top.
#ifndef CJIT_TESTS_SESSION_OPTIONS_H_
#define CJIT_TESTS_SESSION_OPTIONS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/status_macros.h"
#include "flags/flags.h"
#include "runtime/session.h"

namespace cjit {
namespace testing {

inline SessionOptions OneClusterOptions() {
  SessionOptions o;
  o.use_environment_flags = false;
  o.flags.device = "cpu";
  o.flags.auto_jit = "1";
  o.flags.min_cluster_size = 1;
  o.flags.intra_op_threads = 1;
  o.flags.async_compilation = Flags::AsyncCompilation::kFalse;
  return o;
}

// The CPU's op-by-op path: no CJIT_FLAGS from the environment, one intra-op thread, default clustering.
inline SessionOptions FallbackOptions() {
  SessionOptions o;
  o.use_environment_flags = false;
  o.flags.device = "cpu";
  o.flags.intra_op_threads = 1;
  return o;
}

// No CJIT_FLAGS from the environment, `flags` parsed (ParseFlags: its error for a bad flag).
inline absl::StatusOr<SessionOptions> OptionsWithFlags(const std::string& flags) {
  SessionOptions o;
  o.use_environment_flags = false;
  CJIT_ASSIGN_OR_RETURN(o.flags, ParseFlags(flags));
  return o;
}

// `bytes` (one input, "x") loaded with `flags` (no CJIT_FLAGS from the environment) and run once on x: its
// first output, or the load or run error.
inline absl::StatusOr<Tensor> RunModelBytes(const std::string& bytes, const std::string& flags, const Tensor& x) {
  CJIT_ASSIGN_OR_RETURN(SessionOptions o, OptionsWithFlags(flags));
  CJIT_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::LoadFromBytes(bytes, o));
  CJIT_ASSIGN_OR_RETURN(std::vector<NamedTensor> out, s->Run({{"x", x}}));
  return out[0].tensor;
}

// The two paths float64 tests run a model on (flags for RunModelBytes): op by op, and compiled at the
// first execution.
inline constexpr const char* kOpByOpAndCompiled[] = {
    "--auto_jit=-1", "--auto_jit=1 --min_cluster_size=1 --enable_lazy_compilation=false"};

}  // namespace testing
}  // namespace cjit

#endif  // CJIT_TESTS_SESSION_OPTIONS_H_
