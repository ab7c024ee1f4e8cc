// SessionOptions shared by the tests. OneClusterOptions (the clustering tests): the CPU, no CJIT_FLAGS from
// the environment, every clusterable op clustered however small (auto_jit=1, min_cluster_size=1), one
// intra-op thread, and compiles at fixed runs (auto would compile in the background when a CPU is idle).
// Tests add their own flags on top.
#ifndef CJIT_TESTS_SESSION_OPTIONS_H_
#define CJIT_TESTS_SESSION_OPTIONS_H_

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

}  // namespace testing
}  // namespace cjit

#endif  // CJIT_TESTS_SESSION_OPTIONS_H_
