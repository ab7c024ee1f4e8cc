// `cjit check`: a test-data directory against its reference outputs.
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
#include "compiler/ir/text.h"
#include "runtime/cuda/gpu_executor.h"
#include "tools/check_lib.h"
#include "tools/quant_check.h"

#include "tools/cli/cli_common.h"

namespace cjit {

int CmdCheck(const std::string& dir, double rtol, double atol, int concurrency, int repeat) {
  if (!std::isfinite(rtol) || !std::isfinite(atol) || rtol < 0 || atol < 0) {
    return Fail(absl::InvalidArgumentError("--rtol and --atol must be finite and >= 0"), 2);
  }
  auto session = Session::Load(dir + "/model.onnx");
  if (!session.ok()) return Fail(session.status());
  auto sets = ReadDataSets(dir, **session);
  if (!sets.ok()) return Fail(sets.status());
  if (sets->empty()) return Fail(absl::NotFoundError("no test_data_set_* in " + dir));
  if (concurrency > 1) {
    // Every data set from N threads at once, `repeat` times each, every output compared with the reference.
    std::atomic<int> bad{0}, runs{0};
    std::mutex mu;
    std::string first;
    std::vector<std::thread> pool;
    for (int t = 0; t < concurrency; ++t) {
      pool.emplace_back([&, t] {
        for (int r = 0; r < repeat; ++r) {
          for (size_t k = 0; k < sets->size(); ++k) {
            const DataSet& set = (*sets)[(k + t) % sets->size()];
            DataSetResult res = RunDataSet(**session, set, rtol, atol);
            ++runs;
            if (res.ok()) continue;
            ++bad;
            std::lock_guard<std::mutex> lock(mu);
            if (first.empty()) {
              first = set.dir + ": " +
                      (res.status.ok() ? "outputs differ from the reference" : std::string(res.status.message()));
            }
          }
        }
      });
    }
    for (auto& th : pool) th.join();
    std::printf("%d threads x %d repeats x %zu data sets: %d of %d runs wrong%s%s\n", concurrency, repeat, sets->size(),
                bad.load(), runs.load(), first.empty() ? "" : "; first: ", first.c_str());
    std::printf("%s (rtol %g, atol %g)\n", bad ? "FAIL" : "PASS", rtol, atol);
    return bad ? 1 : 0;
  }
  bool all_ok = true;
  for (const DataSet& set : *sets) {
    DataSetResult r = RunDataSet(**session, set, rtol, atol);
    std::string name = std::filesystem::path(set.dir).filename().string();
    if (!r.status.ok()) {
      std::printf("%s: ERROR %s\n", name.c_str(), std::string(r.status.message()).c_str());
      all_ok = false;
      continue;
    }
    for (const auto& o : r.outputs) {
      if (!o.problem.empty()) std::printf("%s: %s: FAIL %s\n", name.c_str(), o.name.c_str(), o.problem.c_str());
      else std::printf("%s: %s: %s max_abs %.3g max_rel %.3g\n", name.c_str(), o.name.c_str(), o.ok ? "ok" : "FAIL",
                       o.max_abs, o.max_rel);
    }
    all_ok &= r.ok();
  }
  // What ran: compiled clusters, and how many of them executed generated code (fused kernels) rather than
  // library calls only — the test suites use this line to prove they exercised the code generator.
  SessionStats st = (*session)->stats();
  int with_code = 0;
  for (const ClusterStatsSnapshot& c : st.clusters) with_code += c.fused_kernels > 0 && c.compiled_executions > 0;
  std::printf("clusters: %zu, compiled executions %lld, fallback executions %lld, generated code in %d (%lld fused "
              "kernels)\n",
              st.clusters.size(), static_cast<long long>(st.totals.compiled_executions),
              static_cast<long long>(st.totals.fallback_executions), with_code,
              static_cast<long long>(st.totals.fused_kernels));
  std::printf("%s (rtol %g, atol %g)\n", all_ok ? "PASS" : "FAIL", rtol, atol);
  return all_ok ? 0 : 1;
}

}  // namespace cjit
