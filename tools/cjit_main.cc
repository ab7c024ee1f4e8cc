// The `cjit` command-line tool: run, check and flags. Exit codes: 0 success, 1 failure (run error or
// mismatching outputs), 2 usage error (bad arguments or a bad CJIT_FLAGS).
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

namespace cjit {
namespace {

int Fail(const absl::Status& st, int code = 1) {
  std::cerr << "cjit: error: " << st.message() << "\n";
  return code;
}

absl::StatusOr<Dims> ParseDims(const std::string& text) {
  Dims d;
  if (text.empty() || text == "scalar") return d;
  for (absl::string_view p : absl::StrSplit(text, 'x')) {
    int64_t v;
    if (!absl::SimpleAtoi(p, &v) || v < 0) {
      return absl::InvalidArgumentError(absl::StrCat("bad shape '", text, "': expected e.g. 1x3x48x320"));
    }
    d.push_back(v);
  }
  return d;
}

Tensor RandomTensor(DType t, const Dims& dims, std::mt19937& rng) {
  Tensor out(t, dims);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int64_t i = 0; i < out.numel(); ++i) {
    double v = u(rng);
    switch (t) {
      case DType::kF32: out.data<float>()[i] = static_cast<float>(v); break;
      case DType::kF64: out.data<double>()[i] = v; break;
      case DType::kI64: out.data<int64_t>()[i] = static_cast<int64_t>((v + 1) * 5); break;
      case DType::kI32: out.data<int32_t>()[i] = static_cast<int32_t>((v + 1) * 5); break;
      case DType::kBool: case DType::kU8: out.data<uint8_t>()[i] = v > 0; break;
      default: std::memset(static_cast<uint8_t*>(out.raw()) + i * DTypeSize(t), 0, DTypeSize(t));
    }
  }
  return out;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t idx = static_cast<size_t>(std::ceil(p * v.size())) - 1;
  return v[std::min(idx, v.size() - 1)];
}

// Usage error (exit 2) or run error (exit 1), carried through the helpers below.
struct CliError {
  absl::Status status;
  int code;
};

// Inputs from --input files ([NAME=]FILE.pb) and --shape NAME=DIMS (random, fixed seed) for the rest.
absl::StatusOr<std::vector<NamedTensor>> PrepareInputs(const Session& s, const std::vector<std::string>& input_args,
                                                       const std::vector<std::string>& shape_args) {
  std::vector<NamedTensor> inputs;
  for (size_t k = 0; k < input_args.size(); ++k) {
    std::string arg = input_args[k], name, path = arg;
    size_t eq = arg.find('=');
    if (eq != std::string::npos && !std::filesystem::exists(arg)) {
      name = arg.substr(0, eq);
      path = arg.substr(eq + 1);
    }
    auto t = ReadTensorProtoFile(path);
    if (!t.ok()) return t.status();
    if (!name.empty()) t->name = name;
    if (t->name.empty()) {
      if (k >= s.inputs().size()) return absl::InvalidArgumentError("more --input files than model inputs");
      t->name = s.inputs()[k].name;
    }
    inputs.push_back(std::move(*t));
  }
  std::map<std::string, Dims> shapes;
  for (const std::string& a : shape_args) {
    size_t eq = a.find('=');
    if (eq == std::string::npos) return absl::InvalidArgumentError("--shape takes NAME=1x3x48x320");
    auto d = ParseDims(a.substr(eq + 1));
    if (!d.ok()) return d.status();
    shapes[a.substr(0, eq)] = *d;
  }
  std::mt19937 rng(1234);
  for (const TensorInfo& info : s.inputs()) {
    bool given = false;
    for (const auto& in : inputs) given |= in.name == info.name;
    if (given) continue;
    Dims dims;
    if (shapes.count(info.name)) {
      dims = shapes[info.name];
    } else {
      if (!info.shape.fully_known()) {
        return absl::InvalidArgumentError(absl::StrCat("input '", info.name, "' has dynamic shape ",
                                                       info.shape.ToString(), ": give --shape ", info.name,
                                                       "=... or --input"));
      }
      dims = info.shape.concrete();
    }
    DType dtype = info.dtype == DType::kInvalid ? DType::kF32 : info.dtype;
    // A random input is allocated here: its size is checked first (a model may declare any static shape).
    absl::StatusOr<size_t> bytes = CheckedByteSize(dtype, dims);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("input '", info.name, "': ", bytes.status().message()));
    }
    if (*bytes > (size_t{4} << 30)) {
      return absl::InvalidArgumentError(absl::StrCat("input '", info.name, "' of dims ", DimsToString(dims), " needs ",
                                                     *bytes, " bytes; cjit makes random inputs of at most 4 GiB "
                                                     "(give --input files for larger ones)"));
    }
    inputs.push_back({info.name, RandomTensor(dtype, dims, rng)});
  }
  return inputs;
}

int LoadFailure(const absl::Status& st) {
  bool flag_error = st.code() == absl::StatusCode::kInvalidArgument && absl::StrContains(st.message(), "flag");
  return Fail(st, flag_error ? 2 : 1);
}

// Session options from CJIT_FLAGS plus the CLI's profiling switches.
SessionOptions CliOptions(const std::string& trace, bool profile) {
  SessionOptions o;
  o.use_environment_flags = false;
  o.flags = *FlagsFromEnvironment();
  if (!trace.empty()) o.flags.trace_to = trace;
  o.profile = profile;
  return o;
}

// `cjit run --concurrency N` (as onnxruntime_perf_test -c): the timed iterations from N threads on one
// session; prints throughput and the latency distribution of all runs.
// With background compilation (--async_compilation; its default `auto` turns it on when a CPU is idle),
// runs the model until its clusters run compiled (or evidently never will: nothing in flight for more runs
// than the compile threshold) and no compile or tuning job is in flight, so that the timed runs measure the
// compiled steady state as with synchronous compilation. Bounded: 60 s or 1000 runs.
absl::Status WaitForBackgroundCompiles(Session& s, const std::vector<NamedTensor>& inputs) {
  if (!AsyncCompilationEnabled(s.flags())) return absl::OkStatus();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  auto settle = [&] {
    while (s.stats().compiles_in_flight > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  int idle_runs = 0;
  for (int i = 0; i < 1000 && std::chrono::steady_clock::now() < deadline; ++i) {
    settle();
    const int64_t fallback = s.stats().totals.fallback_executions;
    auto r = s.Run(inputs);
    if (!r.ok()) return r.status();
    SessionStats st = s.stats();
    if (st.totals.fallback_executions == fallback) break;  // every cluster ran compiled (or there is none)
    idle_runs = st.compiles_in_flight > 0 ? 0 : idle_runs + 1;
    if (idle_runs > s.flags().compile_threshold + 2) break;  // a cluster that will not compile
  }
  // Tuning jobs that the compiled runs started (--autotune_threshold).
  for (int i = 0; i < 10 && std::chrono::steady_clock::now() < deadline; ++i) {
    settle();
    auto r = s.Run(inputs);
    if (!r.ok()) return r.status();
    if (s.stats().compiles_in_flight == 0) break;
  }
  return absl::OkStatus();
}

int RunConcurrently(Session& s, const std::vector<NamedTensor>& inputs, int iterations, int warmup, int threads) {
  for (int i = 0; i < warmup; ++i) {
    auto r = s.Run(inputs);
    if (!r.ok()) return Fail(r.status());
  }
  if (absl::Status w = WaitForBackgroundCompiles(s, inputs); !w.ok()) return Fail(w);
  std::mutex mu;
  std::vector<double> times;
  absl::Status first_error;
  std::atomic<int> next{0};
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      while (next.fetch_add(1) < iterations) {
        auto a = std::chrono::steady_clock::now();
        auto r = s.Run(inputs);
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
        std::lock_guard<std::mutex> lock(mu);
        if (!r.ok() && first_error.ok()) first_error = r.status();
        times.push_back(ms);
      }
    });
  }
  for (auto& th : pool) th.join();
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!first_error.ok()) return Fail(first_error);
  std::printf("concurrency: %d threads on one session, %d runs in %.3f s: %.1f runs/s\n", threads, iterations, wall,
              iterations / wall);
  std::printf("latency ms: median %.3f  p90 %.3f  max %.3f  (%d intra-op threads per run)\n", Percentile(times, 0.5),
              Percentile(times, 0.9), Percentile(times, 1.0), s.flags().intra_op_threads);
  return 0;
}

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
  for (const auto& in : inputs) std::printf("input  %s: %s[%s]\n", in.name.c_str(), std::string(DTypeName(in.tensor.dtype())).c_str(), DimsToString(in.tensor.dims()).c_str());
  for (const auto& o : outputs) std::printf("output %s: %s[%s]\n", o.name.c_str(), std::string(DTypeName(o.tensor.dtype())).c_str(), DimsToString(o.tensor.dims()).c_str());
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
      absl::Status st = WriteTensorProtoFile(absl::StrCat(output_dir, "/output_", k, ".pb"), outputs[k].name, outputs[k].tensor);
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
    auto counters = [](const ClusterStatsSnapshot& c) {
      return nlohmann::json{{"compiles", c.compiles}, {"compile_ms", c.compile_ms},
                            {"fallback_executions", c.fallback_executions},
                            {"compiled_executions", c.compiled_executions}, {"memory_hits", c.memory_hits},
                            {"disk_hits", c.disk_hits}, {"disk_writes", c.disk_writes},
                            {"disk_rejects", c.disk_rejects}, {"polymorphic_hits", c.polymorphic_hits},
                            {"code_bytes", c.code_bytes},
                            {"fused_kernels", c.fused_kernels}};
    };
    j["clusters"] = nlohmann::json::array();
    for (const auto& c : st.clusters) {
      nlohmann::json cj = counters(c);
      cj["id"] = c.id;
      cj["ops"] = c.ops;
      cj["signature"] = c.signature;
      j["clusters"].push_back(cj);
    }
    j["totals"] = counters(st.totals);
    j["signatures"] = {{"held", st.signatures},
                       {"evicted", st.signature_evictions},
                       {"specialized", st.specializations},
                       {"replayed", st.specialization_replays},
                       {"dynamic_shape_runs", st.dynamic_shape_runs},
                       {"dynamic_shape_misses", st.dynamic_shape_misses}};
    j["autotune"] = {{"ops_tuned", st.autotune.ops_tuned}, {"candidates_timed", st.autotune.candidates_timed},
                     {"candidates_rejected", st.autotune.candidates_rejected}, {"tuning_ms", st.autotune.tuning_ms},
                     {"memory_hits", st.autotune.memory_hits}, {"disk_hits", st.autotune.disk_hits},
                     {"file_hits", st.autotune.file_hits}, {"ignored_entries", st.autotune.ignored_entries}};
    std::ofstream f(stats_json);
    f << j.dump(2) << "\n";
    if (!f) return Fail(absl::InternalError("cannot write " + stats_json));
  }
  return 0;
}

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
              first = set.dir + ": " + (res.status.ok() ? "outputs differ from the reference" : std::string(res.status.message()));
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

// `cjit amp-check DIR`: the float32 graph and the automatic-mixed-precision graph on DIR's data sets, the
// error of every output (AMP against float32); where it exceeds --rtol/--atol, the converted nodes are
// bisected (as onnxconverter-common's auto_convert_mixed_precision) for a smallest set that must stay
// float32, and the deny-list additions (op types) that restore the accuracy are printed and verified.
// Runs on the op-by-op path (--auto_jit=-1): no compilation per trial. Exit 0: accurate as is, or the
// printed additions restore it; 1: not even all-float32 nodes do, or a run failed.
int CmdAmpCheck(const std::string& dir, double rtol, double atol, const std::string& low) {
  if (!std::isfinite(rtol) || !std::isfinite(atol) || rtol < 0 || atol < 0) {
    return Fail(absl::InvalidArgumentError("--rtol and --atol must be finite and >= 0"), 2);
  }
  Flags base = *FlagsFromEnvironment();
  base.auto_jit = "-1";
  base.auto_mixed_precision = "off";
  SessionOptions o32;
  o32.use_environment_flags = false;
  o32.flags = base;
  auto s32 = Session::Load(dir + "/model.onnx", o32);
  if (!s32.ok()) return LoadFailure(s32.status());
  auto sets = ReadDataSets(dir, **s32);
  if (!sets.ok()) return Fail(sets.status());
  if (sets->empty()) return Fail(absl::NotFoundError("no test_data_set_* in " + dir));
  std::vector<std::vector<NamedTensor>> ref;
  for (const DataSet& set : *sets) {
    auto out = (*s32)->Run(set.inputs);
    if (!out.ok()) return Fail(out.status());
    ref.push_back(std::move(*out));
  }
  std::mutex mu;
  std::map<std::string, std::string> paintable;  // node name -> op type (seen by the rule hook)
  struct Trial {
    bool ok = true;
    std::map<std::string, std::pair<double, double>> worst;  // output -> max abs, max rel
  };
  auto trial = [&](const std::set<std::string>& deny_nodes, const std::string& deny_ops) -> absl::StatusOr<Trial> {
    SessionOptions o;
    o.use_environment_flags = false;
    o.flags = base;
    o.flags.auto_mixed_precision = low;
    o.flags.amp_denylist_add = deny_ops;
    o.amp_rule = [&, deny_nodes](const Node& n) -> std::optional<AmpRule> {
      {
        std::lock_guard<std::mutex> lock(mu);
        paintable[n.name] = n.op_type;
      }
      if (deny_nodes.count(n.name)) return AmpRule{AmpClass::kDeny, DType::kF32, DType::kInvalid};
      return std::nullopt;
    };
    CJIT_ASSIGN_OR_RETURN(auto s, Session::Load(dir + "/model.onnx", o));
    Trial t;
    for (size_t k = 0; k < sets->size(); ++k) {
      CJIT_ASSIGN_OR_RETURN(auto out, s->Run((*sets)[k].inputs));
      for (size_t i = 0; i < out.size(); ++i) {
        OutputComparison c = CompareTensors(out[i].name, out[i].tensor, ref[k][i].tensor, rtol, atol);
        if (!c.problem.empty()) return absl::InternalError(absl::StrCat(out[i].name, ": ", c.problem));
        auto& w = t.worst[out[i].name];
        w.first = std::max(w.first, c.max_abs);
        w.second = std::max(w.second, c.max_rel);
        t.ok = t.ok && c.ok;
      }
    }
    return t;
  };
  auto first = trial({}, "");
  if (!first.ok()) return Fail(first.status());
  std::printf("auto mixed precision (%s) vs float32 over %zu data sets (rtol %g, atol %g):\n", low.c_str(),
              sets->size(), rtol, atol);
  for (const auto& [name, w] : first->worst) {
    std::printf("  %s: max_abs %.3g max_rel %.3g\n", name.c_str(), w.first, w.second);
  }
  if (first->ok) {
    std::printf("PASS: within tolerance\n");
    return 0;
  }
  std::set<std::string> all;
  for (const auto& [name, op] : paintable) all.insert(name);
  auto passes = [&](const std::set<std::string>& deny) -> bool {
    auto t = trial(deny, "");
    return t.ok() && t->ok;
  };
  if (!passes(all)) {
    std::printf("FAIL: the error exceeds the tolerance even with every convertible node float32\n");
    return 1;
  }
  // Bisection (delta debugging by halves): drop chunks of the deny set while accuracy holds.
  std::vector<std::string> keep(all.begin(), all.end());
  int trials = 2;
  for (size_t chunk = std::max<size_t>(1, keep.size() / 2);; chunk = std::max<size_t>(1, chunk / 2)) {
    for (size_t i = 0; i < keep.size();) {
      std::set<std::string> without;
      for (size_t j = 0; j < keep.size(); ++j) {
        if (j < i || j >= i + chunk) without.insert(keep[j]);
      }
      ++trials;
      if (passes(without)) keep.assign(without.begin(), without.end());
      else i += chunk;
    }
    if (chunk == 1) break;
  }
  std::set<std::string> ops;
  for (const std::string& n : keep) ops.insert(paintable[n]);
  const std::string op_list = absl::StrJoin(ops, ",");
  std::printf("nodes to keep float32 (%zu of %zu convertible, %d trials): %s\n", keep.size(), all.size(), trials,
              absl::StrJoin(keep, " ").c_str());
  auto with_ops = trial({}, op_list);
  const bool restored = with_ops.ok() && with_ops->ok;
  std::printf("deny-list additions: --amp_denylist_add=%s (TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_DENYLIST_ADD=%s)\n",
              op_list.c_str(), op_list.c_str());
  if (with_ops.ok()) {
    for (const auto& [name, w] : with_ops->worst) {
      std::printf("  with them: %s: max_abs %.3g max_rel %.3g\n", name.c_str(), w.first, w.second);
    }
  }
  std::printf("%s\n", restored ? "PASS with the deny-list additions"
                               : "the op-type additions do not restore it: deny the nodes above with a host rule "
                                 "(SessionOptions::amp_rule)");
  return restored ? 0 : 1;
}

// `cjit quant-check DIR` (tools/quant_check.h). Exit 0: the quantized model meets --min_cosine, or the
// printed deny list restores it; 1: it does not; 2: bad arguments or a run failed.
int CmdQuantCheck(const std::string& dir, const std::string& mode, double min_cosine) {
  QuantCheckOptions o;
  o.mode = mode;
  o.min_cosine = min_cosine;
  auto r = QuantCheck(dir, o);
  if (!r.ok()) return Fail(r.status(), 2);
  auto print = [](const char* indent, const std::vector<QuantAccuracy>& acc) {
    for (const QuantAccuracy& a : acc) {
      std::printf("%s%s: cosine %.6f  SQNR %.1f dB  max_abs %.3g\n", indent, a.output.c_str(), a.cosine, a.sqnr_db,
                  a.max_abs);
    }
  };
  std::printf("--auto_quantize=%s: %zu nodes quantized (%s)\n", mode.c_str(), r->candidates.size(),
              absl::StrJoin(r->candidates, " ").c_str());
  if (r->candidates.empty()) {
    std::printf("nothing to quantize (MatMul / Gemm / Conv with constant float32 weights of >= "
                "--auto_quantize_min_weights elements)\n");
    return 0;
  }
  std::printf("against float32:\n");
  print("  ", r->all_quantized);
  std::printf("most sensitive node (bisection): %s; quantized alone:\n", r->most_sensitive.c_str());
  print("  ", r->most_sensitive_alone);
  if (r->ok) {
    std::printf("PASS: cosine >= %g on every output (%d sessions)\n", min_cosine, r->trials);
    return 0;
  }
  std::printf("nodes to keep float32 (%zu of %zu, %d sessions): --auto_quantize_denylist_nodes=%s\n",
              r->keep_float.size(), r->candidates.size(), r->trials, absl::StrJoin(r->keep_float, ",").c_str());
  print("  with them: ", r->with_keep_float);
  std::printf("%s\n", r->restored ? "PASS with the deny list" : "FAIL: the deny list does not restore it");
  return r->restored ? 0 : 1;
}

int CmdExplain(const std::string& model, const std::vector<std::string>& input_args,
               const std::vector<std::string>& shape_args, bool print_graph, bool gpu_placement, bool dot) {
  auto session = Session::Load(model);
  if (!session.ok()) return LoadFailure(session.status());
  auto inputs = PrepareInputs(**session, input_args, shape_args);
  if (!inputs.ok()) return Fail(inputs.status(), 2);
  if (dot) {
    // Only the Graphviz text on stdout, so `cjit explain --dot MODEL | dot -Tsvg > g.svg` works.
    auto graph = (*session)->SpecializeAndCluster(*inputs, nullptr);
    if (!graph.ok()) return Fail(graph.status());
    std::printf("%s", GraphToDot(**graph).c_str());
    return 0;
  }
  if (print_graph) {
    auto graph = (*session)->SpecializeAndCluster(*inputs, nullptr);
    if (!graph.ok()) return Fail(graph.status());
    std::printf("%s\n", PrintGraph(**graph).c_str());
  }
  if (gpu_placement) {
    // The GPU executor's placement decisions for the graph a GPU session builds, made here on the host
    // backend (no GPU needed); on a GPU, cuBLASLt/cuDNN may still decline a shape, which then runs on the
    // host too.
    SessionOptions o;
    o.device_backend = MakeHostBackend();
    auto gpu_session = Session::Load(model, o);
    if (!gpu_session.ok()) return LoadFailure(gpu_session.status());
    auto graph = (*gpu_session)->SpecializeAndCluster(*inputs, nullptr);
    if (!graph.ok()) return Fail(graph.status());
    auto ex = GpuExecutor::Create(*graph, o.device_backend, {});
    if (!ex.ok()) return Fail(ex.status());
    std::printf("GPU placement: %s\n", (*ex)->placement().ToString().c_str());
  }
  auto report = (*session)->Explain(*inputs);
  if (!report.ok()) return Fail(report.status());
  std::printf("%zu clusters\n", report->clusters.size());
  std::printf("%-4s %-5s %-60s %s\n", "id", "ops", "op histogram", "inputs -> outputs");
  for (const ClusterInfo& c : report->clusters) {
    std::vector<std::string> hist;
    for (const auto& [op, n] : c.op_histogram) hist.push_back(absl::StrCat(op, ":", n));
    std::printf("%-4d %-5d %-60s %zu -> %zu (%s -> %s)\n", c.id, c.num_ops, absl::StrJoin(hist, " ").c_str(),
                c.inputs.size(), c.outputs.size(), absl::StrJoin(c.inputs, ",").c_str(),
                absl::StrJoin(c.outputs, ",").c_str());
  }
  std::printf("\n%zu nodes outside clusters:\n", report->excluded.size());
  for (const auto& [node, why] : report->excluded) std::printf("  %s: %s\n", node.c_str(), why.c_str());
  return 0;
}

// Fallback only (--auto_jit=-1) vs clustering, same inputs, one process.
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
    std::vector<std::pair<std::string, std::pair<const Profiler::Row*, const Profiler::Row*>>> v(rows.begin(), rows.end());
    auto total = [](const Profiler::Row* r) { return r ? r->total_ns : 0; };
    std::sort(v.begin(), v.end(), [&](const auto& a, const auto& b) {
      return std::max(total(a.second.first), total(a.second.second)) > std::max(total(b.second.first), total(b.second.second));
    });
    auto per_run = [](const Profiler::Row* r, int64_t runs) { return r && runs ? r->total_ns / 1e3 / runs : 0.0; };
    std::printf("\nProfile by op type, per timed run (us; times include tracing):\n%-30s %10s %8s %12s %8s\n", "op type",
                "fallback", "calls", "clustered", "calls");
    for (const auto& [name, p] : v) {
      std::printf("%-30s %10.1f %8lld %12.1f %8lld\n", name.c_str(), per_run(p.first, fb->profile.runs),
                  static_cast<long long>(p.first && fb->profile.runs ? p.first->count / fb->profile.runs : 0),
                  per_run(p.second, cl->profile.runs),
                  static_cast<long long>(p.second && cl->profile.runs ? p.second->count / cl->profile.runs : 0));
    }
    std::printf("%-30s %10.1f %8s %12.1f\n", "Run (whole)", fb->profile.runs ? fb->profile.run_ns / 1e3 / fb->profile.runs : 0.0,
                "", cl->profile.runs ? cl->profile.run_ns / 1e3 / cl->profile.runs : 0.0);
  }
  return 0;
}

// `bench --stream DIR`: the data sets of DIR (model.onnx + test_data_set_*), each normally a new input
// signature, run once each in order in this one process, as a service sees a stream of requests. Prints
// the time of each run, the Load time and the total, and compares every output with the data set's
// reference (the ONNX backend-test rule). The timed part is Load + every Run (reading the .pb files and
// comparing are outside it); tools/stream-bench.sh puts ONNX Runtime's time for the same stream beside it.
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
      if (!out.ok()) return Fail(absl::Status(out.status().code(), set.dir + ": " + std::string(out.status().message())));
      runs_ms += ms;
      // Kept for the comparison as heap copies (untimed): holding the session's own output buffers until
      // the pass ends would make every later run allocate its outputs in never-used pages (prefaulted by
      // the tensor arena), which no host that drops or reuses its outputs pays — nor ORT's side.
      for (NamedTensor& o : *out) {
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
        auto it = std::find_if(outputs[k].begin(), outputs[k].end(), [&](const NamedTensor& t) { return t.name == ref.name; });
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

// One process of `bench --cold-warm`: loads the model with the persistent cache in `cache_dir`, runs it
// `runs` times and prints one JSON line (time to the first fully compiled result from Load, total time).
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
    if (!out.ok()) return Fail(absl::InternalError(absl::StrCat("benchmark process ", p + 1, ": ", out.status().message())));
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
              d(res[0], "first_compiled_ms") / d(res[1], "first_compiled_ms"), d(res[0], "total_ms") / d(res[1], "total_ms"));
  return 0;
}

int CmdCache(const std::string& action, const std::string& dir, int64_t max_bytes) {
  if (action == "clear") {
    auto n = DiskCache::Clear(dir);
    if (!n.ok()) return Fail(n.status());
    std::printf("removed %lld files from %s\n", static_cast<long long>(*n), dir.c_str());
    return 0;
  }
  if (action == "prune") {
    if (max_bytes < 0) return Fail(absl::InvalidArgumentError("cache prune needs --max-bytes N"), 2);
    auto n = DiskCache::Prune(dir, max_bytes);
    if (!n.ok()) return Fail(n.status());
    std::printf("evicted %lld entries (least recently used first) to stay under %lld bytes\n",
                static_cast<long long>(*n), static_cast<long long>(max_bytes));
    return 0;
  }
  auto entries = DiskCache::List(dir);
  if (!entries.ok()) return Fail(entries.status());
  int64_t total = 0, bad = 0;
  for (const auto& e : *entries) {
    total += e.bytes;
    bad += !e.ok;
  }
  if (action == "ls") {
    for (const auto& e : *entries) {
      const char* kind = e.payload_kind == kAutotunePayloadKind ? "autotune"
                         : e.payload_kind == CpuExecutable::kPayloadKind ? "cpu-code"
                                                                         : "gpu-code";
      std::printf("%s %8lld bytes  %-9s %s%s\n", e.file.c_str(), static_cast<long long>(e.bytes), e.ok ? kind : "",
                  e.ok ? "ok" : "BAD: ", e.ok ? "" : e.problem.c_str());
    }
  } else if (action == "verify") {
    for (const auto& e : *entries) {
      if (!e.ok) std::printf("BAD %s: %s\n", e.file.c_str(), e.problem.c_str());
    }
    std::printf("%zu entries, %lld bad\n", entries->size(), static_cast<long long>(bad));
    return bad ? 1 : 0;
  } else if (action == "stats") {
    std::printf("{\"dir\": \"%s\", \"entries\": %zu, \"bytes\": %lld, \"bad\": %lld}\n", dir.c_str(), entries->size(),
                static_cast<long long>(total), static_cast<long long>(bad));
  } else {
    return Fail(absl::InvalidArgumentError("cache action must be ls, stats, verify, clear or prune"), 2);
  }
  return 0;
}

// Offline autotuning (runtime/autotune.h): tunes every tunable library step of the model for one input
// signature (threshold 0, eager compilation), prints per op the candidates tried, the winner and its time
// against the default algorithm, then the model's latency with the default algorithms vs the tuned ones.
// With --persistent_cache_dir (or --autotune_results_dump_to) in CJIT_FLAGS the results are kept for other
// processes.
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

// PTX of every cluster's fused kernels for one signature and GPU target, without a GPU.
int CmdCompile(const std::string& model, const std::vector<std::string>& input_args,
               const std::vector<std::string>& shape_args, const std::string& target_arg, const std::string& dump_to) {
  auto session = Session::Load(model);
  if (!session.ok()) return LoadFailure(session.status());
  auto inputs = PrepareInputs(**session, input_args, shape_args);
  if (!inputs.ok()) return Fail(inputs.status(), 2);
  auto graph = (*session)->SpecializeAndCluster(*inputs, nullptr);
  if (!graph.ok()) return Fail(graph.status());
  std::string target = target_arg;
  if (target.empty()) target = (*session)->flags().gpu_arch.empty() ? "sm_80" : (*session)->flags().gpu_arch;
  std::error_code ec;
  std::filesystem::create_directories(dump_to, ec);
  if (ec) return Fail(absl::InvalidArgumentError(absl::StrCat("cannot create ", dump_to, ": ", ec.message())), 2);
  int written = 0;
  for (const auto& node : (*graph)->nodes()) {
    if (node->op_type != kClusterOp) continue;
    const Graph* body = node->GetGraph("body");
    FusionPlanOptions gpu;  // as the GPU runtime plans clusters: Conv epilogues stay fused kernels
    gpu.conv_post_ops = false;
    auto plan = BuildFusionPlan(*body, gpu);
    if (!plan.ok()) return Fail(plan.status());
    PtxOptions po;
    po.gpu_arch = target;
    po.libdevice = LibdevicePath((*session)->flags().cuda_data_dir);
    auto ptx = CompileForNvptx(*plan, po);
    if (!ptx.ok()) return Fail(ptx.status(), ptx.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1);
    std::string path = absl::StrCat(dump_to, "/cluster_", node->GetInt("cluster_id", 0), ".", target, ".ptx");
    std::ofstream f(path);
    f << ptx->ptx;
    if (!f) return Fail(absl::InternalError("cannot write " + path));
    int library = 0;
    for (const auto& st : plan->steps) library += st.kind == PlanStep::Kind::kLibrary;
    std::printf("%s: %zu kernels (%d library steps run by cuBLASLt/cuDNN/fallback kernels, not in the PTX)\n",
                path.c_str(), ptx->kernels.size(), library);
    ++written;
  }
  std::printf("%d clusters compiled for %s\n", written, target.c_str());
  return 0;
}

int CmdFlags() {
  std::printf("CJIT_FLAGS: whitespace-separated --name=value (TF_XLA_FLAGS grammar); --tf_xla_NAME is an alias.\n\n");
  for (const FlagInfo& f : ListFlags()) {
    std::printf("--%s (%s, default %s)\n    %s\n", f.name.c_str(), f.type.c_str(), f.default_value.c_str(),
                f.help.c_str());
    for (const std::string& a : f.aliases) std::printf("    alias: --%s\n", a.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace cjit

int CliMain(int argc, char** argv);

// No exception ever aborts the CLI: a failure the library did not turn into a status ends as exit 1.
int main(int argc, char** argv) {
  try {
    return CliMain(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "cjit: internal error: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "cjit: internal error\n";
  }
  return 1;
}

int CliMain(int argc, char** argv) {
  const auto& env = cjit::FlagsFromEnvironment();
  if (!env.ok()) {
    std::cerr << "cjit: error: " << env.status().message() << "\n";
    return 2;
  }
  CLI::App app{"clusterjit: a JIT clustering executor for ONNX models"};
  app.require_subcommand(1);
  std::string model, dir, output_dir, stats_json;
  std::vector<std::string> inputs, shapes;
  int iterations = 10, warmup = 1;
  double rtol = 1e-3, atol = 1e-7;
  // MODEL plus --input / --shape, shared by every subcommand that runs or compiles a model.
  auto model_and_inputs = [&](CLI::App* sub, bool model_required = true) {
    auto* m = sub->add_option("model", model, "model.onnx");
    if (model_required) m->required();
    sub->add_option("--input", inputs, "[NAME=]FILE.pb (ONNX TensorProto); repeatable");
    sub->add_option("--shape", shapes, "NAME=1x3x48x320 for random inputs; repeatable");
  };
  auto* run = app.add_subcommand("run", "run a model and print latency");
  model_and_inputs(run);
  run->add_option("--iterations", iterations, "timed runs")->check(CLI::NonNegativeNumber);
  run->add_option("--warmup", warmup, "untimed runs, the first included")->check(CLI::NonNegativeNumber);
  run->add_option("--output-dir", output_dir, "write output_K.pb here");
  run->add_option("--stats-json", stats_json, "write latency statistics here");
  std::string trace;
  bool profile = false;
  run->add_option("--trace", trace, "write a Chrome trace-event JSON file here (as --trace_to)");
  run->add_flag("--profile", profile, "print the per-op profile table of the timed runs");
  int concurrency = 1;
  run->add_option("--concurrency", concurrency, "run the timed iterations from N threads on one session (throughput)")
      ->check(CLI::PositiveNumber);
  auto* check = app.add_subcommand("check", "run an ONNX test-data directory and compare with its outputs");
  check->add_option("dir", dir, "directory with model.onnx and test_data_set_*")->required();
  check->add_option("--rtol", rtol, "relative tolerance");
  check->add_option("--atol", atol, "absolute tolerance");
  int check_concurrency = 1, check_repeat = 10;
  check->add_option("--concurrency", check_concurrency, "run every data set from N threads at once, repeatedly")
      ->check(CLI::PositiveNumber);
  check->add_option("--repeat", check_repeat, "with --concurrency: runs of each data set per thread")
      ->check(CLI::PositiveNumber);
  auto* amp_check = app.add_subcommand(
      "amp-check", "automatic mixed precision vs float32 on a test-data directory; bisect what must stay float32");
  std::string amp_low = "bfloat16";
  amp_check->add_option("dir", dir, "directory with model.onnx and test_data_set_*")->required();
  amp_check->add_option("--rtol", rtol, "relative tolerance");
  amp_check->add_option("--atol", atol, "absolute tolerance");
  amp_check->add_option("--type", amp_low, "bfloat16 (default) or float16")->check(CLI::IsMember({"bfloat16", "float16"}));
  auto* quant_check = app.add_subcommand(
      "quant-check", "--auto_quantize vs float32 on a test-data directory; the most sensitive node, what to keep float32");
  std::string quant_mode = "dynamic";
  double min_cosine = 0.99;
  quant_check->add_option("dir", dir, "directory with model.onnx and test_data_set_*")->required();
  quant_check->add_option("--mode", quant_mode, "dynamic (default) or weight_only")
      ->check(CLI::IsMember({"dynamic", "weight_only"}));
  quant_check->add_option("--min_cosine,--min-cosine", min_cosine,
                          "accuracy bar: cosine similarity of every output to float32's (default 0.99)")
      ->check(CLI::Range(-1.0, 1.0));
  auto* explain = app.add_subcommand("explain", "print the clusters of a model for one input signature");
  model_and_inputs(explain);
  bool print_graph = false;
  explain->add_flag("--print-graph", print_graph, "also print the specialized, clustered graph (IR text)");
  bool gpu_placement = false, dot = false;
  explain->add_flag("--dot", dot, "print only a Graphviz .dot of the clustered graph (pipe into `dot -Tsvg`)");
  explain->add_flag("--gpu-placement", gpu_placement,
                    "also print where each op would run with --device=cuda (decided without a GPU)");
  auto* bench = app.add_subcommand("bench", "fallback vs clustered latency, side by side in one process");
  model_and_inputs(bench, /*model_required=*/false);
  bench->add_option("--iterations", iterations, "timed runs per mode")->check(CLI::PositiveNumber);
  bench->add_option("--warmup", warmup, "untimed runs per mode (compilation happens here)")->check(CLI::NonNegativeNumber);
  bool cold_warm = false, bench_profile = false, bench_json = false;
  std::string stream_dir;
  int passes = 1;
  bench->add_option("--stream", stream_dir,
                    "DIR with model.onnx + test_data_set_*: run each data set once, in order, in one process; "
                    "print each run's time, the total, and compare with the references (MODEL is not given)");
  bench->add_option("--passes", passes, "with --stream: times through the stream")->check(CLI::PositiveNumber);
  bench->add_flag("--json", bench_json, "with --stream: print one JSON line");
  bench->add_option("--rtol", rtol, "with --stream: relative tolerance");
  bench->add_option("--atol", atol, "with --stream: absolute tolerance");
  bench->add_flag("--profile", bench_profile, "also print the time per op type of both paths, side by side");
  bench->add_flag("--cold-warm", cold_warm,
                  "two processes: an empty persistent cache directory, then the filled one (--iterations runs each)");
  std::string cache_dir, cache_action;
  int64_t max_bytes = -1;
  int runs = 10;
  auto* bench_process = app.add_subcommand("bench-process", "(internal) one process of bench --cold-warm");
  model_and_inputs(bench_process);
  bench_process->add_option("--runs", runs);
  bench_process->add_option("--cache-dir", cache_dir)->required();
  bench_process->group("");
  std::string target, dump_to;
  auto* compile = app.add_subcommand("compile", "write each cluster's PTX for a GPU target (no GPU needed)");
  model_and_inputs(compile);
  compile->add_option("--target", target, "sm_75 ... sm_90a (default: --gpu_arch of CJIT_FLAGS, else sm_80)");
  compile->add_option("--dump_to,--dump-to", dump_to, "directory for the .ptx files")->required();
  auto* cache = app.add_subcommand("cache", "inspect or maintain a persistent cache directory");
  cache->add_option("action", cache_action, "ls | stats | verify | clear | prune")
      ->required()
      ->check(CLI::IsMember({"ls", "stats", "verify", "clear", "prune"}));
  cache->add_option("--dir", cache_dir, "the cache directory")->required();
  cache->add_option("--max-bytes", max_bytes, "for prune: the size to evict down to");
  auto* autotune = app.add_subcommand(
      "autotune", "tune the model's convolutions and GEMMs for one input signature; print the choices");
  model_and_inputs(autotune);
  int autotune_iterations = 20;
  autotune->add_option("--iterations", autotune_iterations, "runs to compare default vs tuned latency")
      ->check(CLI::PositiveNumber);
  auto* flags = app.add_subcommand("flags", "list every CJIT_FLAGS flag with its default and help");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (*run) {
    return cjit::CmdRun(model, inputs, shapes, iterations, warmup, output_dir, stats_json, trace, profile, concurrency);
  }
  if (*check) return cjit::CmdCheck(dir, rtol, atol, check_concurrency, check_repeat);
  if (*amp_check) return cjit::CmdAmpCheck(dir, rtol, atol, amp_low);
  if (*quant_check) return cjit::CmdQuantCheck(dir, quant_mode, min_cosine);
  if (*flags) return cjit::CmdFlags();
  if (*explain) return cjit::CmdExplain(model, inputs, shapes, print_graph, gpu_placement, dot);
  if (*bench && !stream_dir.empty()) {
    // The shared-model tests' tolerance unless given: float32 results of another summation order.
    return cjit::CmdBenchStream(stream_dir, bench->count("--rtol") ? rtol : 1e-3, bench->count("--atol") ? atol : 1e-4,
                                passes, bench_json);
  }
  if (*bench && model.empty()) {
    std::cerr << "cjit: error: bench needs MODEL (or --stream DIR)\n";
    return 2;
  }
  if (*bench && cold_warm) return cjit::CmdBenchColdWarm(model, inputs, shapes, iterations);
  if (*bench) return cjit::CmdBench(model, inputs, shapes, iterations, warmup, bench_profile);
  if (*bench_process) return cjit::CmdBenchProcess(model, inputs, shapes, runs, cache_dir);
  if (*cache) return cjit::CmdCache(cache_action, cache_dir, max_bytes);
  if (*compile) return cjit::CmdCompile(model, inputs, shapes, target, dump_to);
  if (*autotune) return cjit::CmdAutotune(model, inputs, shapes, autotune_iterations);
  return 2;
}
