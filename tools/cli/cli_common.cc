#include "tools/cli/cli_common.h"

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

int Fail(const absl::Status& st, int code) {
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
      case DType::kString: out.data<std::string>()[i] = std::to_string(static_cast<int>((v + 1) * 5)); break;
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
    // The file holds the message of the input's declared type (a TensorProto, or a SequenceProto /
    // OptionalProto for a sequence / optional input), found by NAME= or else by position.
    const TensorInfo* info = nullptr;
    for (const TensorInfo& i : s.inputs()) {
      if (!name.empty() && i.name == name) info = &i;
    }
    if (info == nullptr && name.empty() && k < s.inputs().size()) info = &s.inputs()[k];
    auto t = info != nullptr ? ReadValueProtoFile(path, info->kind, info->dtype) : ReadTensorProtoFile(path);
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
    if (info.kind != ValueKind::kTensor) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", info.name, "' is a ", ValueKindName(info.kind), ": give --input ", info.name,
                       "=FILE (an ONNX ", info.kind == ValueKind::kSequence ? "SequenceProto" : "OptionalProto", ")"));
    }
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

SessionOptions CliOptions(const std::string& trace, bool profile) {
  SessionOptions o;
  o.use_environment_flags = false;
  o.flags = *FlagsFromEnvironment();
  if (!trace.empty()) o.flags.trace_to = trace;
  o.profile = profile;
  return o;
}

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

}  // namespace cjit
