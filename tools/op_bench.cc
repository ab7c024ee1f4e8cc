// The clusterjit side of the op-level benchmark (tools/op-bench/run.sh): every case of a manifest written by
// tools/op-bench/gen_cases.py (one small ONNX model and its inputs) run in two sessions per case — the
// fallback path (--auto_jit=-1) and clusterjit as a user gets it (default flags, compiles synchronous so
// the timed runs are steady state) — and, when ONNX Runtime's outputs are given (--ref-dir, written by
// tools/ort-bench/ort_ops.js), checked against them. Prints one JSON line per case:
//   {"name", "fallback_ms", "cjit_ms", "bytes", "copy_ms", "ok", "max_abs", "problem"}
// (medians over --iterations runs after --warmup, the two sessions' runs alternating; `bytes` = every
// input and output once: the memory a memory-bound op must move at least; `copy_ms` = a memcpy moving as
// many bytes (bytes / 2 read, as many written) between buffers as large, at --threads threads: the op's
// floor at its size, in the caches it fits in). With --copy-bandwidth, first a line {"copy_gbps"}: this machine's
// memcpy of 64 MiB at --threads threads, bytes read plus bytes written per second.
//   cjit-op-bench CASES.json [--threads T] [--iterations N] [--warmup W] [--filter TEXT] [--ref-dir DIR]
//                 [--copy-bandwidth] [--flags "CJIT_FLAGS text for both sessions"]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/onnx/tensor_proto.h"
#include "nlohmann/json.hpp"
#include "runtime/session.h"
#include "tools/check_lib.h"

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median ms of a memcpy of `bytes` split over `threads` threads (buffers reused, as an op's would be).
double CopyMs(size_t bytes, int threads, int reps) {
  bytes = std::max<size_t>(bytes, 64);
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::vector<double> times;
  for (int rep = 0; rep < reps; ++rep) {
    auto t0 = Clock::now();
    const size_t part = bytes / threads;
    if (threads == 1) {
      std::memcpy(b.data(), a.data(), bytes);
    } else {
      std::vector<std::thread> ts;
      for (int t = 0; t < threads; ++t) {
        ts.emplace_back([&, t] { std::memcpy(b.data() + t * part, a.data() + t * part, part); });
      }
      for (auto& t : ts) t.join();
    }
    times.push_back(Ms(t0, Clock::now()));
  }
  return Median(times);
}

// memcpy of 64 MiB (GB/s, read + write).
double CopyBandwidth(int threads) {
  const size_t bytes = size_t{64} << 20;
  return 2.0 * bytes / (CopyMs(bytes, threads, 10) * 1e6);
}

// Median ms of `iterations` runs after `warmup` ones; the last outputs in *out.
// Median ms per run of `a` and of `b`, their runs alternating (a, b, a, b, ...) so that both see the same
// machine: on a shared VM a burst of load during one block of runs moved a ratio of two blocks by 2.5x.
absl::StatusOr<std::pair<double, double>> TimeInterleaved(cjit::Session& a, cjit::Session& b,
                                                          const std::vector<cjit::NamedTensor>& in, int warmup,
                                                          int iterations, std::vector<cjit::NamedTensor>* out_a,
                                                          std::vector<cjit::NamedTensor>* out_b) {
  std::vector<double> times[2];
  cjit::Session* sessions[2] = {&a, &b};
  std::vector<cjit::NamedTensor>* outs[2] = {out_a, out_b};
  for (int i = 0; i < warmup + iterations; ++i) {
    for (int k = 0; k < 2; ++k) {
      auto t0 = Clock::now();
      auto r = sessions[k]->Run(in);
      auto t1 = Clock::now();
      if (!r.ok()) return r.status();
      if (i >= warmup) times[k].push_back(Ms(t0, t1));
      if (i + 1 == warmup + iterations) *outs[k] = std::move(*r);
    }
  }
  return std::make_pair(Median(times[0]), Median(times[1]));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s CASES.json [--threads T] [--iterations N] [--warmup W] [--filter TEXT] [--ref-dir DIR] "
                 "[--copy-bandwidth] [--flags TEXT]\n",
                 argv[0]);
    return 2;
  }
  std::string manifest = argv[1], filter, ref_dir, flags;
  int threads = 1, iterations = 20, warmup = 4;
  bool copy = false;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--threads") threads = std::atoi(value().c_str());
    else if (a == "--iterations") iterations = std::atoi(value().c_str());
    else if (a == "--warmup") warmup = std::atoi(value().c_str());
    else if (a == "--filter") filter = value();
    else if (a == "--ref-dir") ref_dir = value();
    else if (a == "--flags") flags = value();
    else if (a == "--copy-bandwidth") copy = true;
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (threads < 1 || iterations < 1 || warmup < 0) {
    std::fprintf(stderr, "--threads and --iterations must be at least 1, --warmup at least 0\n");
    return 2;
  }
  std::ifstream f(manifest);
  if (!f) {
    std::fprintf(stderr, "cannot read %s\n", manifest.c_str());
    return 2;
  }
  nlohmann::json cases;
  try {
    cases = nlohmann::json::parse(f)["cases"];
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", manifest.c_str(), e.what());
    return 2;
  }
  if (copy)
    std::printf("%s\n", nlohmann::json{{"copy_gbps", CopyBandwidth(threads)}, {"threads", threads}}.dump().c_str());
  int failures = 0;
  for (const auto& c : cases) {
    const std::string name = c["name"];
    if (!filter.empty() && !absl::StrContains(name, filter)) continue;
    nlohmann::json row{{"name", name}, {"threads", threads}};
    std::vector<cjit::NamedTensor> in;
    int64_t bytes = 0;
    std::string problem;
    for (const auto& p : c["inputs"]) {
      auto t = cjit::ReadTensorProtoFile(p.get<std::string>());
      if (!t.ok()) {
        problem = std::string(t.status().message());
        break;
      }
      bytes += static_cast<int64_t>(t->tensor.nbytes());
      in.push_back(std::move(*t));
    }
    std::vector<cjit::NamedTensor> fallback_out, cjit_out;
    if (problem.empty()) {
      auto fb = cjit::LoadSessionWithFlags(c["model"], absl::StrCat(flags, " --auto_jit=-1"), threads);
      auto cj = cjit::LoadSessionWithFlags(c["model"], absl::StrCat(flags, " --async_compilation=false"), threads);
      if (!fb.ok() || !cj.ok()) {
        problem = std::string((fb.ok() ? cj.status() : fb.status()).message());
      } else {
        auto t = TimeInterleaved(**fb, **cj, in, warmup, iterations, &fallback_out, &cjit_out);
        if (!t.ok()) {
          problem = std::string(t.status().message());
        } else {
          row["fallback_ms"] = t->first;
          row["cjit_ms"] = t->second;
        }
      }
    }
    for (const auto& o : cjit_out) bytes += static_cast<int64_t>(o.tensor.nbytes());
    row["bytes"] = bytes;
    row["copy_ms"] = CopyMs(static_cast<size_t>(bytes / 2), threads, std::max(iterations, 5));
    bool ok = problem.empty();
    double max_abs = 0;
    if (ok && !ref_dir.empty()) {
      for (size_t k = 0; k < cjit_out.size(); ++k) {
        const std::string ref = absl::StrCat(ref_dir, "/", name, "/output_", k, ".pb");
        auto r = cjit::ReadTensorProtoFile(ref);
        if (!r.ok()) {
          ok = false;
          problem = absl::StrCat("no ONNX Runtime output ", ref);
          break;
        }
        // Both sides compute in float32 with their own summation orders and math libraries; an 8-bit
        // quantized output may differ by one step (the fused integer ops round once from exact sums, ONNX
        // Runtime's float path or its own requantization rounds elsewhere).
        const cjit::DType odt = r->tensor.dtype();
        // A case may widen it ("atol" in the manifest) where ONNX Runtime's own error is the larger one.
        const double atol = c.value("atol", odt == cjit::DType::kU8 || odt == cjit::DType::kI8 ? 1.0 : 1e-4);
        cjit::OutputComparison cmp = cjit::CompareTensors(r->name, cjit_out[k].tensor, r->tensor, 1e-3, atol);
        max_abs = std::max(max_abs, cmp.max_abs);
        if (!cmp.ok) {
          ok = false;
          problem = absl::StrCat("output ", k, " differs from ONNX Runtime's: ", cmp.problem, " max abs ", cmp.max_abs);
        }
        cjit::OutputComparison fb =
            cjit::CompareTensors(r->name, fallback_out[k].tensor, r->tensor, 1e-3, atol);
        if (!fb.ok && ok) {
          ok = false;
          problem = absl::StrCat("fallback output ", k, " differs from ONNX Runtime's: ", fb.problem);
        }
      }
    }
    row["ok"] = ok;
    row["max_abs"] = max_abs;
    if (!problem.empty()) row["problem"] = problem;
    failures += !ok;
    std::printf("%s\n", row.dump().c_str());
    std::fflush(stdout);
  }
  return failures > 0 ? 1 : 0;
}
