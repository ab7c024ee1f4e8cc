#include "runtime/compile_policy.h"

#include <chrono>
#include <filesystem>
#include <thread>

#include "gtest/gtest.h"
#include "tests/test_data.h"
#include "runtime/session.h"
#include "tools/check_lib.h"

namespace cjit {
namespace {

using D = CompilePolicy::Decision;

TEST(CompilePolicyTest, LazyThresholdPerSignature) {
  CompilePolicy p({.compile_threshold = 2});
  EXPECT_EQ(p.OnExecution("c", "s1"), D::kFallback);
  EXPECT_EQ(p.OnExecution("c", "s1"), D::kFallback);
  EXPECT_EQ(p.OnExecution("c", "s2"), D::kFallback);  // a new signature starts its own count
  EXPECT_EQ(p.OnExecution("c", "s1"), D::kCompile);
}

TEST(CompilePolicyTest, EagerAndDeferred) {
  CompilePolicy eager({.lazy = false});
  EXPECT_EQ(eager.OnExecution("c", "s"), D::kCompile);
  CompilePolicy defer({.always_defer = true});
  std::string why;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(defer.OnExecution("c", "s", &why), D::kFallback);
  EXPECT_EQ(why, "--always_defer_compilation");
}

TEST(CompilePolicyTest, FailedOrSlowCompileStopsCompiling) {
  CompilePolicy p({.compile_threshold = 0, .compile_time_cutoff_s = 1.0});
  EXPECT_EQ(p.OnExecution("slow", "s1"), D::kCompile);
  p.RecordCompile("slow", 2.5, true);
  std::string why;
  EXPECT_EQ(p.OnExecution("slow", "s2", &why), D::kFallback);
  EXPECT_NE(why.find("compile_time_cutoff_s"), std::string::npos);
  EXPECT_EQ(p.OnExecution("bad", "s1"), D::kCompile);
  p.RecordCompile("bad", 0.01, false);
  EXPECT_EQ(p.OnExecution("bad", "s1", &why), D::kFallback);
  EXPECT_NE(why.find("failed"), std::string::npos);
}

TEST(CompilePolicyTest, Megamorphic) {
  CompilePolicy p({.compile_threshold = 0});
  for (int i = 0; i < 11; ++i) {
    ASSERT_EQ(p.OnExecution("m", "sig" + std::to_string(i)), D::kCompile);
    p.RecordCompile("m", 0.01, true);
  }
  std::string why;
  EXPECT_EQ(p.OnExecution("m", "new"), D::kFallback);
  EXPECT_EQ(p.OnExecution("m", "another", &why), D::kFallback);
  EXPECT_EQ(why, "megamorphic cluster");
}

std::filesystem::path SharedModel(const std::string& name) { return testing::ModelsDir() + "/" + name; }

// cjit run ppocrv4_rec with 5 runs: every cluster 2 fallback executions, 1 compile, 3 compiled executions.
TEST(ClusterRuntimeTest, LazyCompilationCountsOnRealModel) {
  auto dir = SharedModel("ppocrv4_rec");
  CJIT_REQUIRE_DATA(dir / "model.onnx");
  // The CPU path under test, also on a machine with a GPU.
  auto s = LoadSessionWithFlags((dir / "model.onnx").string(), "--device=cpu", 2);
  ASSERT_TRUE(s.ok()) << s.status();
  auto sets = ReadDataSets(dir.string(), **s);
  ASSERT_TRUE(sets.ok());
  for (int i = 0; i < 5; ++i) {
    DataSetResult r = RunDataSet(**s, (*sets)[0], 1e-3, 1e-4);
    ASSERT_TRUE(r.ok()) << "run " << i << ": " << r.status << " " << (r.outputs.empty() ? "" : r.outputs[0].problem);
  }
  SessionStats st = (*s)->stats();
  ASSERT_FALSE(st.clusters.empty());
  for (const auto& c : st.clusters) {
    EXPECT_EQ(c.fallback_executions, 2) << "cluster " << c.id;
    EXPECT_EQ(c.compiles, 1) << "cluster " << c.id;
    EXPECT_EQ(c.compiled_executions, 3) << "cluster " << c.id;
  }
}

// The test hook makes every compilation fail: clusters run on the fallback path, with correct results.
TEST(ClusterRuntimeTest, FailedCompilationFallsBack) {
  auto dir = SharedModel("ppocr_mobile_cls");
  CJIT_REQUIRE_DATA(dir / "model.onnx");
  auto s = LoadSessionWithFlags((dir / "model.onnx").string(),
                                "--device=cpu --enable_lazy_compilation=false --fail_compilation_for_testing=injected", 2);
  ASSERT_TRUE(s.ok()) << s.status();
  auto sets = ReadDataSets(dir.string(), **s);
  ASSERT_TRUE(sets.ok());
  for (int i = 0; i < 3; ++i) {
    for (const DataSet& set : *sets) {
      DataSetResult r = RunDataSet(**s, set, 1e-3, 1e-4);
      ASSERT_TRUE(r.ok()) << set.dir << ": " << r.status;
    }
  }
  SessionStats st = (*s)->stats();
  ASSERT_FALSE(st.clusters.empty());
  EXPECT_EQ(st.totals.compiled_executions, 0);
  EXPECT_GT(st.totals.fallback_executions, 0);
  for (const auto& c : st.clusters) EXPECT_LE(c.compiles, 1) << "a failed cluster must not be recompiled";
}

// A real LLVM fatal error inside code generation (report_fatal_error, which aborts) is recovered into a
// failed compile: the process lives and the cluster runs correctly on the fallback path.
TEST(ClusterRuntimeTest, LlvmFatalErrorIsRecovered) {
  auto dir = SharedModel("oww_hello_deepa");
  CJIT_REQUIRE_DATA(dir / "model.onnx");
  auto s = LoadSessionWithFlags(
      (dir / "model.onnx").string(),
      "--device=cpu --enable_lazy_compilation=false --fail_compilation_for_testing=llvm-fatal-error", 0);
  ASSERT_TRUE(s.ok()) << s.status();
  auto sets = ReadDataSets(dir.string(), **s);
  ASSERT_TRUE(sets.ok());
  for (int i = 0; i < 2; ++i) {
    DataSetResult r = RunDataSet(**s, (*sets)[0], 1e-3, 1e-4);
    ASSERT_TRUE(r.ok()) << r.status;
  }
  SessionStats st = (*s)->stats();
  EXPECT_EQ(st.totals.compiled_executions, 0);
  EXPECT_GT(st.totals.compiles, 0);
  EXPECT_GT(st.totals.fallback_executions, 0);
}

// --async_compilation: the fallback path runs while the cluster compiles in the background; the
// executable is swapped in when ready; every result along the way is correct.
TEST(ClusterRuntimeTest, AsyncCompilationSwapsIn) {
  auto dir = SharedModel("oww_melspectrogram");
  CJIT_REQUIRE_DATA(dir / "model.onnx");
  auto s = LoadSessionWithFlags((dir / "model.onnx").string(),
                                "--device=cpu --async_compilation=true --compile_threshold=0", 1);
  ASSERT_TRUE(s.ok()) << s.status();
  auto sets = ReadDataSets(dir.string(), **s);
  ASSERT_TRUE(sets.ok());
  int runs = 0;
  for (; runs < 2000; ++runs) {
    DataSetResult r = RunDataSet(**s, (*sets)[0], 1e-3, 1e-4);
    ASSERT_TRUE(r.ok()) << "run " << runs << ": " << r.status;
    if ((*s)->stats().totals.compiled_executions > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  SessionStats st = (*s)->stats();
  EXPECT_GT(st.totals.compiled_executions, 0) << "no compiled execution after " << runs << " runs";
  EXPECT_GT(st.totals.fallback_executions, 0) << "the first run must not wait for the compiler";
  EXPECT_EQ(st.totals.compiles, static_cast<int64_t>(st.clusters.size()));
}

// A Session destroyed while a background compilation runs: the compile finishes safely.
TEST(ClusterRuntimeTest, SessionDestroyedDuringAsyncCompilation) {
  auto dir = SharedModel("ppocrv4_rec");
  CJIT_REQUIRE_DATA(dir / "model.onnx");
  {
    auto s = LoadSessionWithFlags((dir / "model.onnx").string(),
                                  "--device=cpu --async_compilation=true --compile_threshold=0", 1);
    ASSERT_TRUE(s.ok()) << s.status();
    auto sets = ReadDataSets(dir.string(), **s);
    ASSERT_TRUE(sets.ok());
    DataSetResult r = RunDataSet(**s, (*sets)[0], 1e-3, 1e-4);
    ASSERT_TRUE(r.ok()) << r.status;
    // The point of the test: compiles (tens of ms each for this model) are still queued or running.
    ASSERT_GT((*s)->stats().compiles_in_flight, 0) << "no compile in flight: the test would prove nothing";
  }  // the session goes away with compiles in flight; its destructor joins the compile thread
  // The process is intact: a new session compiles and runs the same model correctly.
  auto s2 = LoadSessionWithFlags((dir / "model.onnx").string(), "--device=cpu --compile_threshold=0", 1);
  ASSERT_TRUE(s2.ok()) << s2.status();
  auto sets = ReadDataSets(dir.string(), **s2);
  ASSERT_TRUE(sets.ok());
  DataSetResult r = RunDataSet(**s2, (*sets)[0], 1e-3, 1e-4);
  EXPECT_TRUE(r.ok()) << r.status;
  EXPECT_GT((*s2)->stats().totals.compiled_executions, 0);
}

}  // namespace
}  // namespace cjit
