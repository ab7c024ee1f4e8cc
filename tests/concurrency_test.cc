// Concurrent Session::Run on one Session (the promise of runtime/session.h and the C API): every shared
// model, run from many threads at once with mixed input signatures, on the fallback path, with lazy
// compilation (clusters compile while other threads run them), and with --async_compilation.
//  * Phase 1 (compiles happen under load): a run may have some clusters compiled and others not, so its
//    outputs must match the ONNX Runtime reference (rtol 1e-3, atol 1e-5).
//  * Phase 2 (every cluster compiled, or the fallback mode): every output must be bitwise equal to what the
//    same input gives when run alone in a fresh session (compiled, resp. on the fallback path).
//
// Threads and runs per thread: CJIT_STRESS_THREADS (default 8), CJIT_STRESS_RUNS (default 200; the
// ThreadSanitizer build in CI uses fewer, its runs are ~10x slower).
#include <atomic>
#include <cmath>
#include <chrono>
#include <functional>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "gtest/gtest.h"
#include "runtime/session.h"
#include "tests/test_data.h"
#include "tools/check_lib.h"

namespace cjit {
namespace {

int EnvInt(const char* name, int dflt) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : dflt;
}

struct Expected {
  DataSet set;
  std::vector<Tensor> fallback, compiled;  // outputs of runs alone
};

absl::StatusOr<std::vector<Tensor>> RunAlone(const std::string& model, const std::string& flags, const DataSet& set) {
  // Compiled synchronously (--async_compilation=auto would compile in the background at 1 thread on a
  // machine with more CPUs, and the third run might still be on the fallback path).
  auto s = LoadSessionWithFlags(model, flags + " --async_compilation=false", 1);
  if (!s.ok()) return s.status();
  std::vector<Tensor> out;
  for (int i = 0; i < 3; ++i) {  // the last of three runs (compiled, for the compiling modes)
    auto r = (*s)->Run(set.inputs);
    if (!r.ok()) return r.status();
    out.clear();
    for (auto& nt : *r) out.push_back(nt.tensor);
  }
  return out;
}

class ConcurrentRunTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(ConcurrentRunTest, BitwiseEqualToRunsAlone) {
  const auto& [model_name, mode] = GetParam();
  std::string dir = testing::ModelsDir() + "/" + model_name;
  CJIT_REQUIRE_DATA(dir);
  std::string model = dir + "/model.onnx";
  // Tuning at the threshold whatever the ops' times (--autotune_min_op_time_ms=0), in the session and in
  // the runs alone: with the default time condition a convolution would be tuned partway through the
  // stress (once it has run 25 ms) and its outputs change within tolerance, not bitwise.
  std::string flags = "--device=cpu --autotune_min_op_time_ms=0";
  if (mode == "fallback") flags += " --auto_jit=-1";
  if (mode == "async") flags += " --async_compilation";
  if (mode == "lazy")
    flags += " --compile_threshold=20 --async_compilation=false";  // compiles happen mid-stream, under load
  auto probe = LoadSessionWithFlags(model, "--device=cpu", 1);
  ASSERT_TRUE(probe.ok()) << probe.status();
  auto sets = ReadDataSets(dir, **probe);
  ASSERT_TRUE(sets.ok()) << sets.status();
  ASSERT_FALSE(sets->empty());
  std::vector<Expected> expected;
  for (const DataSet& set : *sets) {
    Expected e;
    e.set = set;
    auto fb = RunAlone(model, "--device=cpu --auto_jit=-1", set);
    ASSERT_TRUE(fb.ok()) << fb.status();
    e.fallback = *fb;
    auto cp = RunAlone(model, "--device=cpu --enable_lazy_compilation=false --autotune_min_op_time_ms=0", set);
    ASSERT_TRUE(cp.ok()) << cp.status();
    e.compiled = *cp;
    // Both agree with the ONNX Runtime reference (so bitwise equality below is against right answers).
    for (size_t k = 0; k < e.compiled.size(); ++k) {
      for (const auto* got : {&e.fallback[k], &e.compiled[k]}) {
        OutputComparison c = CompareTensors(set.outputs[k].name, *got, set.outputs[k].tensor, 1e-3, 1e-5);
        ASSERT_TRUE(c.ok) << set.dir << " output " << k << ": max_abs " << c.max_abs << " " << c.problem;
      }
    }
    expected.push_back(std::move(e));
  }
  auto session = LoadSessionWithFlags(model, flags, 1);
  ASSERT_TRUE(session.ok()) << session.status();
  Session& s = **session;
  int threads = EnvInt("CJIT_STRESS_THREADS", 8), runs = EnvInt("CJIT_STRESS_RUNS", 200);
  std::mutex mu;
  std::string first_problem;
  // Runs `per_thread` runs from each thread; `check` returns "" or what is wrong with one result.
  auto stress = [&](int per_thread,
                    const std::function<std::string(const Expected&, const std::vector<NamedTensor>&)>& check) {
    std::atomic<int> bad{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        for (int i = 0; i < per_thread; ++i) {
          const Expected& e = expected[(t + i) % expected.size()];  // mixed signatures across threads
          auto r = s.Run(e.set.inputs);
          std::string why = r.ok() ? check(e, *r) : std::string(r.status().message());
          if (why.empty()) continue;
          ++bad;
          std::lock_guard<std::mutex> lock(mu);
          if (first_problem.empty()) first_problem = e.set.dir + ": " + why;
        }
      });
    }
    for (auto& th : pool) th.join();
    return bad.load();
  };
  auto near_reference = [](const Expected& e, const std::vector<NamedTensor>& r) -> std::string {
    for (size_t k = 0; k < r.size(); ++k) {
      OutputComparison c = CompareTensors(e.set.outputs[k].name, r[k].tensor, e.set.outputs[k].tensor, 1e-3, 1e-5);
      if (!c.ok) return "output " + std::to_string(k) + " max_abs " + std::to_string(c.max_abs) + " " + c.problem;
    }
    return "";
  };
  bool fallback_mode = mode == "fallback";
  auto bitwise = [fallback_mode](const Expected& e, const std::vector<NamedTensor>& r) -> std::string {
    const std::vector<Tensor>& want = fallback_mode ? e.fallback : e.compiled;
    for (size_t k = 0; k < r.size(); ++k) {
      if (!r[k].tensor.BitwiseEquals(want[k])) {
        return "output " + std::to_string(k) + " differs from the same input run alone (" +
               (fallback_mode ? "fallback" : "compiled") + ")";
      }
    }
    return "";
  };
  int phase1_runs = fallback_mode ? 0 : std::max(1, runs / 4);
  int bad1 = stress(phase1_runs, near_reference);
  EXPECT_EQ(bad1, 0) << bad1 << " of " << threads * phase1_runs << " runs during compilation were wrong; first: "
                     << first_problem;
  if (!fallback_mode) {
    // Until a full pass over the data sets runs no cluster on the fallback path (async compiles finish).
    for (int pass = 0; pass < 100; ++pass) {
      int64_t before = s.stats().totals.fallback_executions;
      for (const Expected& e : expected) ASSERT_TRUE(s.Run(e.set.inputs).ok());
      if (s.stats().totals.fallback_executions == before) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // Compiled code ran: compiled clusters, or clusters instantiated without a compile (no fused group
    // needing generated code, or kernels another cluster compiled).
    EXPECT_GT(s.stats().totals.compiles + s.stats().totals.polymorphic_hits, 0);
    EXPECT_GT(s.stats().totals.compiled_executions, 0);
  }
  int bad2 = stress(runs - phase1_runs, bitwise);
  EXPECT_EQ(bad2, 0) << bad2 << " of " << threads * (runs - phase1_runs)
                     << " runs were not bitwise equal to runs alone; first: " << first_problem;
}

// New signatures from many threads at once (the dynamic-shape plans of runtime/session.h: one family
// executor, its instances per dims, specializations of third runs and compiles interleaving): the mel
// spectrogram front end over 24 audio lengths, each thread in its own order, with lazy and async
// compilation. Every output matches the same input on the fallback path of a session that specializes
// every signature (rtol 1e-3, atol 1e-4: the stream checks' tolerance).
// New signatures of one structure from many threads at once (dynamic-shape plans, replays, compiles in
// flight), each matching the fallback path of a session that specializes every signature. `make(n)`: the
// input for size n. Checks both compile modes, and that dynamic plans served some runs. `compile_first`:
// sizes[0] runs alone until it ran compiled (a family with shape-derived constants serves only compiled
// clusters; without it, every size could specialize before the first compile ends).
void ExpectConcurrentNewSignaturesMatch(const std::string& model_name, const std::vector<int64_t>& sizes,
                                        const std::function<Tensor(int64_t)>& make, bool compile_first = false) {
  std::string dir = testing::ModelsDir() + "/" + model_name;
  CJIT_REQUIRE_DATA(dir);
  std::string model = dir + "/model.onnx";
  const int threads = EnvInt("CJIT_STRESS_THREADS", 8);
  auto ref = LoadSessionWithFlags(model, "--device=cpu --auto_jit=-1 --dynamic_shape_plans=false", 1);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const std::string input = (*ref)->inputs()[0].name;
  std::vector<std::vector<NamedTensor>> inputs;
  std::vector<Tensor> want;
  for (int64_t n : sizes) {
    inputs.push_back({{input, make(n)}});
    auto r = (*ref)->Run(inputs.back());
    ASSERT_TRUE(r.ok()) << r.status();
    want.push_back((*r)[0].tensor);
  }
  for (const char* mode : {"--async_compilation=false", "--async_compilation=true"}) {
    // One intra-op thread, as the stress above: libgomp is not TSan-instrumented, so OpenMP regions would
    // report false races (tests/tsan.supp); the concurrency under test is the callers'.
    auto s = LoadSessionWithFlags(model, std::string("--device=cpu ") + mode, 1);
    ASSERT_TRUE(s.ok()) << s.status();
    for (int i = 0; compile_first && i < 3000 && (*s)->stats().totals.compiled_executions == 0; ++i) {
      ASSERT_TRUE((*s)->Run(inputs[0]).ok());
      if (i >= 3) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a background compile
    }
    std::mutex mu;
    std::string problem;
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        for (size_t i = 0; i < 2 * sizes.size(); ++i) {
          const size_t k = (i * (2 * t + 1) + t) % sizes.size();
          auto r = (*s)->Run(inputs[k]);
          std::string bad;
          if (!r.ok()) {
            bad = std::string(r.status().message());
          } else {
            const Tensor& y = (*r)[0].tensor;
            if (y.dims() != want[k].dims()) bad = "dims differ";
            for (int64_t e = 0; bad.empty() && e < y.numel(); ++e) {
              const float g = y.data<float>()[e], w = want[k].data<float>()[e];
              if (!(std::abs(g - w) <= 1e-4f + 1e-3f * std::abs(w))) {
                bad = "value differs at " + std::to_string(e) + ": " + std::to_string(g) + " vs " + std::to_string(w);
              }
            }
          }
          if (!bad.empty()) {
            std::lock_guard<std::mutex> lock(mu);
            if (problem.empty()) problem = "size " + std::to_string(sizes[k]) + ": " + bad;
            return;
          }
        }
      });
    }
    for (auto& th : pool) th.join();
    EXPECT_EQ(problem, "") << mode;
    EXPECT_GT((*s)->stats().dynamic_shape_runs, 0) << mode;
  }
}

// Noise in [-scale/2, scale/2) from an LCG seeded by `seed` (as recorded audio or an image has: a pure
// tone leaves bins far from it at float32 rounding level, where any two summation orders differ).
Tensor Noise(Dims dims, uint32_t seed, float scale) {
  Tensor x(DType::kF32, std::move(dims));
  uint32_t state = seed;
  for (int64_t i = 0; i < x.numel(); ++i) {
    state = state * 1664525u + 1013904223u;
    x.data<float>()[i] = (static_cast<float>(state >> 8) / 16777216.0f - 0.5f) * scale;
  }
  return x;
}

// A dims-free structure (no shape-derived constant): the audio front end over 24 lengths.
TEST(ConcurrentNewSignaturesTest, MatchTheFallbackPath) {
  std::vector<int64_t> lengths;
  for (int i = 0; i < 24; ++i) lengths.push_back(1280 + 640 * i);
  ExpectConcurrentNewSignaturesMatch("oww_melspectrogram", lengths,
                                     [](int64_t n) { return Noise({1, n}, static_cast<uint32_t>(n), 6000.0f); });
}

// A structure whose Reshape target is derived from dims (Shape -> Slice -> Concat, re-derived per
// signature by the dynamic plan): the text-direction classifier over 12 widths.
TEST(ConcurrentNewSignaturesTest, DerivedReshapeTargetsMatchTheFallbackPath) {
  ExpectConcurrentNewSignaturesMatch("ppocr_mobile_cls", {48, 56, 64, 80, 96, 104, 120, 136, 152, 160, 176, 192},
                                     [](int64_t w) { return Noise({1, 3, 48, w}, static_cast<uint32_t>(w), 2.0f); },
                                     /*compile_first=*/true);
}

INSTANTIATE_TEST_SUITE_P(SharedModels, ConcurrentRunTest,
                         ::testing::Combine(::testing::Values("ppocr_mobile_cls", "ppocrv4_rec", "silero_vad_v5",
                                                              "oww_melspectrogram", "oww_hello_deepa"),
                                            ::testing::Values("fallback", "lazy", "async")),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

}  // namespace
}  // namespace cjit
