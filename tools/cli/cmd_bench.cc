// `cjit bench`: fallback vs clustered, streams of data sets, cold vs warm persistent cache.
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

namespace {

// Runs `args` (args[0] is the program) as a child with posix_spawn, returning what it printed on stdout;
// an error with that output when it exits non-zero.
absl::StatusOr<std::string> RunChild(const std::vector<std::string>& args) {
  int pipefd[2];
  if (::pipe(pipefd) != 0) return absl::InternalError("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipefd[1], 1);
  posix_spawn_file_actions_addclose(&actions, pipefd[0]);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, args[0].c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipefd[1]);
  if (rc != 0) {
    ::close(pipefd[0]);
    return absl::InternalError(absl::StrCat("cannot start ", args[0], ": ", std::strerror(rc)));
  }
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(pipefd[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(pipefd[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat("exited with status ", status, ": ", out));
  }
  return out;
}

}  // namespace

int CmdBench(const std::string& model, const std::vector<std::string>& input_args,
             const std::vector<std::string>& shape_args, int iterations, int warmup, bool profile) {
  const Flags& env = *FlagsFromEnvironment();
  struct Result {
    double median = 0, first_compiled_ms = -1;
    int64_t compiles = 0;
    Profiler::Aggregate profile;
  };
  auto measure = [&](bool clustering) -> absl::StatusOr<Result> {
    SessionOptions o;
    o.use_environment_flags = false;
    o.flags = env;
    o.profile = profile;
    if (!clustering) o.flags.auto_jit = "-1";
    else if (o.flags.auto_jit == "-1" || o.flags.auto_jit == "0") o.flags.auto_jit = "1";
    auto session = Session::Load(model, o);
    if (!session.ok()) return session.status();
    auto inputs = PrepareInputs(**session, input_args, shape_args);
    if (!inputs.ok()) return inputs.status();
    Result r;
    std::vector<double> times;
    auto t_start = std::chrono::steady_clock::now();
    int64_t fallback_before = 0, timed_since = 0;
    for (int i = 0; i < warmup + iterations; ++i) {
      if (i == warmup) {
        if (i > 0) CJIT_RETURN_IF_ERROR(WaitForBackgroundCompiles(**session, *inputs));
        fallback_before = (*session)->stats().totals.fallback_executions;
        timed_since = Profiler::Now();
      }
      auto t0 = std::chrono::steady_clock::now();
      auto out = (*session)->Run(*inputs);
      auto t1 = std::chrono::steady_clock::now();
      if (!out.ok()) return out.status();
      SessionStats st = (*session)->stats();
      // The first run in which no cluster ran on the fallback path (and at least one ran compiled).
      if (clustering && r.first_compiled_ms < 0 && st.totals.compiled_executions > 0 &&
          st.totals.fallback_executions == fallback_before) {
        r.first_compiled_ms = std::chrono::duration<double, std::milli>(t1 - t_start).count();
      }
      fallback_before = st.totals.fallback_executions;
      r.compiles = st.totals.compiles;
      if (i >= warmup) times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    r.median = Percentile(times, 0.5);
    if (profile && (*session)->profiler()) r.profile = (*session)->profiler()->Summarize(timed_since);
    return r;
  };
  auto fb = measure(false);
  if (!fb.ok()) return Fail(fb.status());
  auto cl = measure(true);
  if (!cl.ok()) return Fail(cl.status());
  std::printf("model: %s  (%d threads, %d warm-up, %d timed runs each)\n", model.c_str(), env.intra_op_threads,
              warmup, iterations);
  std::printf("fallback (--auto_jit=-1) median: %.3f ms\n", fb->median);
  std::printf("clustered             median: %.3f ms  (%lld compiles)\n", cl->median,
              static_cast<long long>(cl->compiles));
  std::printf("speedup: %.2fx\n", fb->median / cl->median);
  if (cl->first_compiled_ms >= 0) {
    std::printf("time to first compiled run: %.1f ms (from the first Run call)\n", cl->first_compiled_ms);
  } else {
    std::printf("time to first compiled run: never (no run was fully compiled)\n");
  }
  if (profile) {
    // By op type, both paths side by side (per run: total time of that op type divided by the runs).
    std::map<std::string, std::pair<const Profiler::Row*, const Profiler::Row*>> rows;
    for (const auto& r : fb->profile.by_type) rows[r.name].first = &r;
    for (const auto& r : cl->profile.by_type) rows[r.name].second = &r;
    std::vector<std::pair<std::string, std::pair<const Profiler::Row*, const Profiler::Row*>>> v(rows.begin(),
                                                                                                 rows.end());
    auto total = [](const Profiler::Row* r) { return r ? r->total_ns : 0; };
    std::sort(v.begin(), v.end(), [&](const auto& a, const auto& b) {
      return std::max(total(a.second.first), total(a.second.second)) >
             std::max(total(b.second.first), total(b.second.second));
    });
    auto per_run = [](const Profiler::Row* r, int64_t runs) { return r && runs ? r->total_ns / 1e3 / runs : 0.0; };
    std::printf("\nProfile by op type, per timed run (us; times include tracing):\n%-30s %10s %8s %12s %8s\n",
                "op type", "fallback", "calls", "clustered", "calls");
    for (const auto& [name, p] : v) {
      std::printf("%-30s %10.1f %8lld %12.1f %8lld\n", name.c_str(), per_run(p.first, fb->profile.runs),
                  static_cast<long long>(p.first && fb->profile.runs ? p.first->count / fb->profile.runs : 0),
                  per_run(p.second, cl->profile.runs),
                  static_cast<long long>(p.second && cl->profile.runs ? p.second->count / cl->profile.runs : 0));
    }
    std::printf("%-30s %10.1f %8s %12.1f\n", "Run (whole)",
                fb->profile.runs ? fb->profile.run_ns / 1e3 / fb->profile.runs : 0.0, "",
                cl->profile.runs ? cl->profile.run_ns / 1e3 / cl->profile.runs : 0.0);
  }
  return 0;
}

int CmdBenchStream(const std::string& dir, double rtol, double atol, int passes, bool json) {
  auto t0 = std::chrono::steady_clock::now();
  auto session = Session::Load(dir + "/model.onnx");
  if (!session.ok()) return Fail(session.status());
  double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  auto sets = ReadDataSets(dir, **session);  // after the timed Load: file reading is not timed
  if (!sets.ok()) return Fail(sets.status());
  if (sets->empty()) return Fail(absl::NotFoundError("no test_data_set_* in " + dir));
  struct Row {
    std::string set, shapes;
    int pass;
    double ms;
    int64_t compiles, fallback, compiled, polymorphic;
    bool ok;
    const char* specialization;  // "full", "replay" (--specialization_replay) or "-" (signature seen before)
    double populated_mb;         // tensor arena pages prefaulted so far (first-touch memory), process-wide
  };
  std::vector<Row> rows;
  bool all_ok = true;
  double runs_ms = 0;
  SessionStats prev = (*session)->stats();
  for (int pass = 0; pass < passes; ++pass) {
    // Outputs are compared with the references after the pass, not between runs: the comparison (in
    // float64) sweeps megabytes through the caches that the next timed run would otherwise find warm, and
    // ORT's side of the benchmark (tools/ort-bench/ort_stream.js) runs back to back.
    std::vector<std::vector<NamedTensor>> outputs;
    const size_t first_row = rows.size();
    for (const DataSet& set : *sets) {
      auto r0 = std::chrono::steady_clock::now();
      auto out = (*session)->Run(set.inputs);
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - r0).count();
      if (!out.ok())
        return Fail(absl::Status(out.status().code(), set.dir + ": " + std::string(out.status().message())));
      runs_ms += ms;
      // Kept for the comparison as heap copies (untimed): holding the session's own output buffers until
      // the pass ends would make every later run allocate its outputs in never-used pages (prefaulted by
      // the tensor arena), which no host that drops or reuses its outputs pays — nor ORT's side.
      for (NamedTensor& o : *out) {
        if (!o.tensor.is_tensor() || o.tensor.dtype() == DType::kString) {  // objects, not bytes: a deep copy
          o.tensor = o.tensor.Clone();
          continue;
        }
        const size_t n = o.tensor.nbytes();
        std::shared_ptr<void> bytes(std::malloc(std::max<size_t>(n, 1)), std::free);
        if (n > 0) std::memcpy(bytes.get(), o.tensor.raw(), n);
        o.tensor = Tensor::Wrap(o.tensor.dtype(), o.tensor.dims(), bytes.get(), bytes);
      }
      outputs.push_back(std::move(*out));
      const bool ok = true;  // set after the pass
      std::vector<std::string> shapes;
      for (const NamedTensor& in : set.inputs) shapes.push_back(DimsToString(in.tensor.dims()));
      SessionStats st = (*session)->stats();
      rows.push_back({std::filesystem::path(set.dir).filename().string(), absl::StrJoin(shapes, ","), pass, ms,
                      st.totals.compiles - prev.totals.compiles,
                      st.totals.fallback_executions - prev.totals.fallback_executions,
                      st.totals.compiled_executions - prev.totals.compiled_executions,
                      st.totals.polymorphic_hits - prev.totals.polymorphic_hits, ok,
                      st.specialization_replays > prev.specialization_replays ? "replay"
                      : st.specializations > prev.specializations             ? "full"
                      : st.dynamic_shape_runs > prev.dynamic_shape_runs       ? "dynamic"
                                                                              : "-",
                      TensorArenaStats().populated_bytes / 1048576.0});
      prev = st;
    }
    for (size_t k = 0; k < outputs.size(); ++k) {
      bool ok = true;
      for (const NamedTensor& ref : (*sets)[k].outputs) {
        auto it = std::find_if(outputs[k].begin(), outputs[k].end(),
                               [&](const NamedTensor& t) { return t.name == ref.name; });
        if (it == outputs[k].end()) {
          ok = false;
          continue;
        }
        ok &= CompareTensors(ref.name, it->tensor, ref.tensor, rtol, atol).ok;
      }
      rows[first_row + k].ok = ok;
      all_ok &= ok;
    }
  }
  double total_ms = load_ms + runs_ms;
  const Flags& f = (*session)->flags();
  if (json) {
    nlohmann::json j;
    j["dir"] = dir;
    j["threads"] = f.intra_op_threads;
    j["load_ms"] = load_ms;
    j["runs_ms"] = runs_ms;
    j["total_ms"] = total_ms;
    j["ok"] = all_ok;
    for (const Row& r : rows) j["run_ms"].push_back(r.ms);
    for (const Row& r : rows) j["populated_mb"].push_back(r.populated_mb);
    SessionStats st = (*session)->stats();
    j["specialized"] = st.specializations;
    j["replayed"] = st.specialization_replays;
    j["dynamic_shape_runs"] = st.dynamic_shape_runs;
    j["dynamic_shape_misses"] = st.dynamic_shape_misses;
    // The process-wide tensor arena (compiler/ir/buffer_arena.h): regions reserved, pages prefaulted.
    BufferArena::Stats arena = TensorArenaStats();
    j["arena_mb"] = {{"reserved", arena.reserved_bytes / 1048576.0},
                     {"populated", arena.populated_bytes / 1048576.0},
                     {"regions", arena.regions}};
    std::printf("%s\n", j.dump().c_str());
    return all_ok ? 0 : 1;
  }
  std::printf("stream: %s  (%zu data sets x %d passes, %d threads, auto_jit=%s)\n", dir.c_str(), sets->size(), passes,
              f.intra_op_threads, f.auto_jit.c_str());
  std::printf("%-20s %-4s %-28s %10s %-7s %8s %9s %9s %11s %9s  %s\n", "data set", "pass", "input shapes", "ms",
              "special", "compiles", "fallback", "compiled", "polymorphic", "arena_mb", "vs reference");
  for (const Row& r : rows) {
    std::printf("%-20s %-4d %-28s %10.3f %-7s %8lld %9lld %9lld %11lld %9.1f  %s\n", r.set.c_str(), r.pass,
                r.shapes.c_str(), r.ms, r.specialization, static_cast<long long>(r.compiles),
                static_cast<long long>(r.fallback), static_cast<long long>(r.compiled),
                static_cast<long long>(r.polymorphic), r.populated_mb, r.ok ? "ok" : "FAIL");
  }
  std::printf("load: %.1f ms, runs: %.1f ms, total: %.1f ms\n", load_ms, runs_ms, total_ms);
  std::printf("%s (rtol %g, atol %g)\n", all_ok ? "PASS" : "FAIL", rtol, atol);
  return all_ok ? 0 : 1;
}

int CmdBenchProcess(const std::string& model, const std::vector<std::string>& input_args,
                    const std::vector<std::string>& shape_args, int runs, const std::string& cache_dir) {
  auto t_start = std::chrono::steady_clock::now();
  SessionOptions o;
  o.use_environment_flags = false;
  o.flags = *FlagsFromEnvironment();
  o.flags.persistent_cache_dir = cache_dir;
  if (o.flags.auto_jit == "-1") o.flags.auto_jit = "1";
  auto session = Session::Load(model, o);
  if (!session.ok()) return LoadFailure(session.status());
  double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count();
  auto inputs = PrepareInputs(**session, input_args, shape_args);
  if (!inputs.ok()) return Fail(inputs.status(), 2);
  double first_compiled = -1;
  int64_t fallback_before = 0;
  for (int i = 0; i < runs; ++i) {
    auto out = (*session)->Run(*inputs);
    if (!out.ok()) return Fail(out.status());
    SessionStats st = (*session)->stats();
    if (first_compiled < 0 && st.totals.compiled_executions > 0 && st.totals.fallback_executions == fallback_before) {
      first_compiled = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count();
    }
    fallback_before = st.totals.fallback_executions;
  }
  SessionStats st = (*session)->stats();
  double total = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count();
  nlohmann::json j{{"first_compiled_ms", first_compiled}, {"total_ms", total}, {"load_ms", load_ms},
                   {"compiles", st.totals.compiles},
                   {"disk_hits", st.totals.disk_hits}, {"disk_writes", st.totals.disk_writes}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

int CmdBenchColdWarm(const std::string& model, const std::vector<std::string>& input_args,
                     const std::vector<std::string>& shape_args, int runs) {
  std::string dir = (std::filesystem::temp_directory_path() / absl::StrCat("cjit-cold-warm-", ::getpid())).string();
  std::filesystem::remove_all(dir);
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  // The child gets an argument vector (posix_spawn), never a shell command line: a model path with quotes or
  // `$(...)` in it is only a path.
  std::vector<std::string> args = {self, "bench-process", model, "--runs", std::to_string(runs), "--cache-dir", dir};
  for (const auto& a : input_args) {
    args.push_back("--input");
    args.push_back(a);
  }
  for (const auto& a : shape_args) {
    args.push_back("--shape");
    args.push_back(a);
  }
  nlohmann::json res[2];
  for (int p = 0; p < 2; ++p) {
    auto out = RunChild(args);
    if (!out.ok())
      return Fail(absl::InternalError(absl::StrCat("benchmark process ", p + 1, ": ", out.status().message())));
    size_t brace = out->find('{');
    res[p] = nlohmann::json::parse(brace == std::string::npos ? std::string() : out->substr(brace), nullptr, false);
    if (res[p].is_discarded()) return Fail(absl::InternalError("benchmark process printed no result: " + *out));
  }
  std::filesystem::remove_all(dir);
  auto d = [](const nlohmann::json& j, const char* k) { return j[k].get<double>(); };
  std::printf("model: %s  (%d runs per process, empty cache directory, then the filled one)\n", model.c_str(), runs);
  std::printf("%-6s %24s %14s %12s %9s %10s\n", "", "first compiled result ms", "total ms", "of it load", "compiles",
              "disk hits");
  const char* names[2] = {"cold", "warm"};
  for (int p = 0; p < 2; ++p) {
    std::printf("%-6s %24.1f %14.1f %12.1f %9lld %10lld\n", names[p], d(res[p], "first_compiled_ms"),
                d(res[p], "total_ms"), d(res[p], "load_ms"),
                static_cast<long long>(res[p]["compiles"].get<int64_t>()),
                static_cast<long long>(res[p]["disk_hits"].get<int64_t>()));
  }
  std::printf("warm speedup: first compiled result %.1fx, total %.1fx\n",
              d(res[0], "first_compiled_ms") / d(res[1], "first_compiled_ms"),
              d(res[0], "total_ms") / d(res[1], "total_ms"));
  return 0;
}

}  // namespace cjit
