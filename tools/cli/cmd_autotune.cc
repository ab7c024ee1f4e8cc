// `cjit autotune`: tune one signature's convolutions and GEMMs.
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

int CmdAutotune(const std::string& model, const std::vector<std::string>& input_args,
                const std::vector<std::string>& shape_args, int iterations) {
  const Flags& env = *FlagsFromEnvironment();
  if (env.autotune_level == 0) {
    return Fail(absl::InvalidArgumentError("autotuning is off (--autotune_level=0 in CJIT_FLAGS)"), 2);
  }
  auto load = [&](int level) -> absl::StatusOr<std::unique_ptr<Session>> {
    SessionOptions o;
    o.use_environment_flags = false;
    o.flags = env;
    o.flags.autotune_level = level;
    o.flags.autotune_threshold = 0;
    o.flags.autotune_min_op_time_ms = 0;
    o.flags.enable_lazy_compilation = false;
    if (o.flags.auto_jit == "-1" || o.flags.auto_jit == "0") o.flags.auto_jit = "1";
    return Session::Load(model, o);
  };
  auto session = load(env.autotune_level);
  if (!session.ok()) return LoadFailure(session.status());
  auto inputs = PrepareInputs(**session, input_args, shape_args);
  if (!inputs.ok()) return Fail(inputs.status(), 2);
  // The first run tunes; progress is printed from here while it runs.
  absl::Status run_status;
  std::atomic<bool> done{false};
  std::thread worker([&] {
    auto r = (*session)->Run(*inputs);
    run_status = r.status();
    done = true;
  });
  size_t shown = 0;
  auto show = [&] {
    std::vector<AutotuneRecord> recs = (*session)->AutotuneRecords();
    for (; shown < recs.size(); ++shown) {
      const AutotuneRecord& r = recs[shown];
      std::fprintf(stderr, "[%zu] %s: %s (%s)\n", shown + 1, r.op.c_str(),
                   r.algorithm.empty() ? "default" : r.algorithm.c_str(), r.source.c_str());
    }
  };
  while (!done) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    show();
  }
  worker.join();
  show();
  if (!run_status.ok()) return Fail(run_status);
  const std::vector<AutotuneRecord> recs = (*session)->AutotuneRecords();
  std::printf("%-44s %-7s %5s %5s  %-36s %10s %10s %6s\n", "op", "source", "timed", "rej", "winner", "winner_us",
              "default_us", "ratio");
  for (const AutotuneRecord& r : recs) {
    std::string op = r.op.size() > 44 ? r.op.substr(0, 41) + "..." : r.op;
    std::string winner = r.algorithm.empty() ? "default" : r.algorithm;
    if (winner.size() > 36) winner = winner.substr(0, 33) + "...";
    if (r.source == "tuned" && r.best_us > 0) {
      std::printf("%-44s %-7s %5d %5d  %-36s %10.1f %10.1f %6.2f\n", op.c_str(), r.source.c_str(), r.candidates_timed,
                  r.candidates_rejected, winner.c_str(), r.best_us, r.default_us, r.default_us / r.best_us);
    } else {
      std::printf("%-44s %-7s %5s %5s  %-36s %10s %10s %6s\n", op.c_str(), r.source.c_str(), "-", "-", winner.c_str(),
                  "-", "-", "-");
    }
    if (r.default_impl.size() && r.source == "tuned") std::printf("    default ran: %s\n", r.default_impl.c_str());
    // Every candidate's timing where the winner is not the default (why it won), else what was left out.
    const bool switched = r.source == "tuned" && r.best_us < r.default_us;
    for (const std::string& n : r.notes) {
      if (switched || absl::StrContains(n, "rejected") || absl::StrContains(n, "skipped") ||
          absl::StrContains(n, "not tuned")) {
        std::printf("    %s\n", n.c_str());
      }
    }
  }
  SessionStats st = (*session)->stats();
  std::printf("autotune: %lld ops tuned, %lld candidates timed, %lld rejected, %.1f ms tuning; found: %lld in process, "
              "%lld on disk, %lld in the results file; %lld loaded entries ignored\n",
              static_cast<long long>(st.autotune.ops_tuned), static_cast<long long>(st.autotune.candidates_timed),
              static_cast<long long>(st.autotune.candidates_rejected), st.autotune.tuning_ms,
              static_cast<long long>(st.autotune.memory_hits), static_cast<long long>(st.autotune.disk_hits),
              static_cast<long long>(st.autotune.file_hits), static_cast<long long>(st.autotune.ignored_entries));
  // Model latency, default algorithms vs tuned, side by side (medians).
  auto median_ms = [&](Session& s) -> absl::StatusOr<double> {
    std::vector<double> t;
    for (int i = 0; i < iterations + 2; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      auto r = s.Run(*inputs);
      if (!r.ok()) return r.status();
      if (i >= 2) t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    return Percentile(t, 0.5);
  };
  auto base = load(0);
  if (!base.ok()) return Fail(base.status());
  auto base_ms = median_ms(**base);
  auto tuned_ms = median_ms(**session);
  if (!base_ms.ok()) return Fail(base_ms.status());
  if (!tuned_ms.ok()) return Fail(tuned_ms.status());
  std::printf("model latency (median of %d runs, %d threads): default algorithms %.3f ms, tuned %.3f ms (%.2fx)\n",
              iterations, env.intra_op_threads, *base_ms, *tuned_ms, *base_ms / *tuned_ms);
  return 0;
}

}  // namespace cjit
