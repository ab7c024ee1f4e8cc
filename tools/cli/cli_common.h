// Helpers shared by the `cjit` subcommands (tools/cli/cmd_*.cc): error exits, inputs from files or random
// with a fixed seed, the CLI's session options, concurrent runs. Exit codes: 0 success, 1 failure (run error
// or mismatching outputs), 2 usage error (bad arguments or a bad CJIT_FLAGS).
#ifndef CJIT_TOOLS_CLI_CLI_COMMON_H_
#define CJIT_TOOLS_CLI_CLI_COMMON_H_

#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/session.h"

namespace cjit {

// Usage error (exit 2) or run error (exit 1), carried through the helpers below.
struct CliError {
  absl::Status status;
  int code;
};

int Fail(const absl::Status& st, int code = 1);

absl::StatusOr<Dims> ParseDims(const std::string& text);

Tensor RandomTensor(DType t, const Dims& dims, std::mt19937& rng);

double Percentile(std::vector<double> v, double p);

// Inputs from --input files ([NAME=]FILE.pb) and --shape NAME=DIMS (random, fixed seed) for the rest.
absl::StatusOr<std::vector<NamedTensor>> PrepareInputs(const Session& s, const std::vector<std::string>& input_args,
                                                       const std::vector<std::string>& shape_args);

int LoadFailure(const absl::Status& st);

// Session options from CJIT_FLAGS plus the CLI's profiling switches.
SessionOptions CliOptions(const std::string& trace, bool profile);

// `cjit run --concurrency N` (as onnxruntime_perf_test -c): the timed iterations from N threads on one
// session; prints throughput and the latency distribution of all runs.
// With background compilation (--async_compilation; its default `auto` turns it on when a CPU is idle),
// runs the model until its clusters run compiled (or evidently never will: nothing in flight for more runs
// than the compile threshold) and no compile or tuning job is in flight, so that the timed runs measure the
// compiled steady state as with synchronous compilation. Bounded: 60 s or 1000 runs.
absl::Status WaitForBackgroundCompiles(Session& s, const std::vector<NamedTensor>& inputs);

int RunConcurrently(Session& s, const std::vector<NamedTensor>& inputs, int iterations, int warmup, int threads);

}  // namespace cjit

#endif  // CJIT_TOOLS_CLI_CLI_COMMON_H_
