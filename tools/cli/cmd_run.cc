// `cjit run`: load a model, run it, print latency.
#include "tools/cli/commands.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <thread>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "CLI/CLI.hpp"
#include "base/status_macros.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "absl/strings/str_join.h"
#include "compiler/passes/mark_for_compilation.h"
#include "cache/disk_cache.h"
#include "compiler/codegen/fusion_plan.h"
#include "compiler/codegen/nvptx_compiler.h"
#include "runtime/dump.h"
#include "runtime/executable.h"
#include "runtime/profiler.h"
#include "runtime/session.h"
#include "runtime/stats_json.h"
#include "compiler/ir/text.h"
#include "runtime/cuda/gpu_executor.h"
#include "tools/check_lib.h"
#include "tools/quant_check.h"

#include "tools/cli/cli_common.h"

namespace cjit {

int CmdRun(const std::string& model, const std::vector<std::string>& input_args,
           const std::vector<std::string>& shape_args, int iterations, int warmup, const std::string& output_dir,
           const std::string& stats_json, const std::string& trace, bool profile, int concurrency) {
  auto session = Session::Load(model, CliOptions(trace, profile));
  if (!session.ok()) return LoadFailure(session.status());
  Session& s = **session;
  auto prepared = PrepareInputs(s, input_args, shape_args);
  if (!prepared.ok()) return Fail(prepared.status(), 2);
  std::vector<NamedTensor> inputs = std::move(*prepared);
  if (concurrency > 1) return RunConcurrently(s, inputs, iterations, warmup, concurrency);
  using Clock = std::chrono::steady_clock;
  auto time_run = [&](std::vector<NamedTensor>* out) -> absl::StatusOr<double> {
    auto t0 = Clock::now();
    auto r = s.Run(inputs);
    auto t1 = Clock::now();
    if (!r.ok()) return r.status();
    if (out) *out = std::move(*r);
    return std::chrono::duration<double, std::milli>(t1 - t0).count();
  };
  // warmup + iterations runs in all; the very first one is reported as first-run latency.
  std::vector<NamedTensor> outputs;
  std::vector<double> times;
  double first = 0;
  int total = std::max(1, warmup + iterations);
  int64_t timed_since = 0;
  for (int i = 0; i < total; ++i) {
    if (i == total - iterations) {
      if (i > 0) {
        if (absl::Status w = WaitForBackgroundCompiles(s, inputs); !w.ok()) return Fail(w);
      }
      timed_since = Profiler::Now();
    }
    auto t = time_run(&outputs);
    if (!t.ok()) return Fail(t.status());
    if (i == 0) first = *t;
    if (i >= total - iterations) times.push_back(*t);
  }
  double median = Percentile(times, 0.5), p90 = Percentile(times, 0.9),
         mn = times.empty() ? 0 : *std::min_element(times.begin(), times.end());
  std::printf("model: %s\n", model.c_str());
  std::printf("device: %s\n", s.device().c_str());
  for (const std::string& p : s.GpuPlacements()) std::printf("gpu placement: %s\n", p.c_str());
  for (const auto& in : inputs) std::printf("input  %s: %s\n", in.name.c_str(), in.tensor.Describe().c_str());
  for (const auto& o : outputs) std::printf("output %s: %s\n", o.name.c_str(), o.tensor.Describe().c_str());
  std::printf("latency ms: first %.3f  median %.3f  p90 %.3f  min %.3f  (%d iterations, %d warm-up, %d threads)\n",
              first, median, p90, mn, iterations, warmup, s.flags().intra_op_threads);
  if (profile) {
    std::printf("\nProfile of the %d timed runs (events of the trace; times include tracing):\n%s", iterations,
                s.ProfileSummary(timed_since).c_str());
  }
  if (!s.flags().trace_to.empty()) {
    auto path = s.EndProfiling();
    if (!path.ok()) return Fail(path.status());
    std::printf("trace: %s\n", path->c_str());
  }
  if (!output_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(output_dir, ec);
    if (ec || !std::filesystem::is_directory(output_dir)) {
      return Fail(absl::InvalidArgumentError(absl::StrCat("--output-dir ", output_dir, " cannot be used as a directory",
                                                          ec ? absl::StrCat(": ", ec.message()) : "")));
    }
    for (size_t k = 0; k < outputs.size(); ++k) {
      absl::Status st =
          WriteValueProtoFile(absl::StrCat(output_dir, "/output_", k, ".pb"), outputs[k].name, outputs[k].tensor);
      if (!st.ok()) return Fail(st);
    }
  }
  if (!stats_json.empty()) {
    nlohmann::json j;
    j["model"] = model;
    j["iterations"] = iterations;
    j["warmup"] = warmup;
    j["threads"] = s.flags().intra_op_threads;
    j["device"] = s.device();
    j["gpu_placement"] = s.GpuPlacements();
    j["latency_ms"] = {{"first", first}, {"median", median}, {"p90", p90}, {"min", mn}};
    SessionStats st = s.stats();
    j["clusters"] = nlohmann::json::array();
    for (const auto& c : st.clusters) {
      nlohmann::json cj = ClusterCountersJson(c);
      cj["id"] = c.id;
      cj["ops"] = c.ops;
      cj["signature"] = c.signature;
      j["clusters"].push_back(cj);
    }
    j["totals"] = ClusterCountersJson(st.totals);
    j["signatures"] = {{"held", st.signatures},
                       {"evicted", st.signature_evictions},
                       {"specialized", st.specializations},
                       {"replayed", st.specialization_replays},
                       {"dynamic_shape_runs", st.dynamic_shape_runs},
                       {"dynamic_shape_misses", st.dynamic_shape_misses}};
    j["autotune"] = AutotuneCountersJson(st.autotune);
    AddRemoteCacheJson(st, j);
    std::ofstream f(stats_json);
    f << j.dump(2) << "\n";
    if (!f) return Fail(absl::InternalError("cannot write " + stats_json));
  }
  return 0;
}

}  // namespace cjit
