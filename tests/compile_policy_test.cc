#include "runtime/compile_policy.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <filesystem>
#include <functional>
#include <future>
#include <thread>

#include <random>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/model_builder.h"
#include "tests/session_options.h"
#include "tests/test_data.h"
#include "compiler/ir/text.h"
#include "runtime/cluster_runner.h"
#include "runtime/executable.h"
#include "runtime/executor.h"
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

// --polymorphic_clusters: the threshold counts a structure's fallback runs over all its signatures, and
// HasCompiled says whether a signature of the structure compiled (and none failed).
TEST(CompilePolicyTest, ThresholdPerStructure) {
  CompilePolicy p({.compile_threshold = 2, .threshold_per_structure = true});
  EXPECT_FALSE(p.HasCompiled("c"));
  EXPECT_EQ(p.OnExecution("c", "s1"), D::kFallback);
  EXPECT_EQ(p.OnExecution("c", "s2"), D::kFallback);
  EXPECT_EQ(p.OnExecution("c", "s3"), D::kCompile);  // a stream of new signatures still compiles
  EXPECT_EQ(p.OnExecution("other", "s1"), D::kFallback);  // per structure
  EXPECT_FALSE(p.HasCompiled("c"));
  p.RecordCompile("c", 0.01, true);
  EXPECT_TRUE(p.HasCompiled("c"));
  p.RecordCompile("c", 0.01, false);
  EXPECT_FALSE(p.HasCompiled("c")) << "a structure with a failed compile is not instantiated";
}

// One compile per structure at a time: while one signature compiles, others of the same structure fall
// back (they are instantiated from its kernels once it is done).
TEST(CompilePolicyTest, OneCompilePerStructureInFlight) {
  CompilePolicy p({.compile_threshold = 0, .threshold_per_structure = true});
  EXPECT_TRUE(p.BeginCompile("c"));
  EXPECT_FALSE(p.BeginCompile("c"));
  EXPECT_TRUE(p.BeginCompile("other"));
  p.RecordCompile("c", 0.01, true);
  EXPECT_TRUE(p.BeginCompile("c")) << "a later miss of the structure may compile again";
  p.AbandonCompile("c");
  EXPECT_TRUE(p.BeginCompile("c"));
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

// cjit run ppocrv4_rec with 5 runs: every cluster that needs generated code 2 fallback executions, 1 compile,
// 3 compiled executions; one whose fused groups are all library steps (its convolutions with their
// post-ops) runs compiled from the first execution, with no compile.
TEST(ClusterRuntimeTest, LazyCompilationCountsOnRealModel) {
  auto dir = SharedModel("ppocrv4_rec");
  CJIT_REQUIRE_DATA(dir / "model.onnx");
  // The CPU path under test, also on a machine with a GPU.
  // Synchronous compiles: the counts at fixed runs below assume them (auto compiles in the background).
  auto s = LoadSessionWithFlags((dir / "model.onnx").string(), "--device=cpu --async_compilation=false", 2);
  ASSERT_TRUE(s.ok()) << s.status();
  auto sets = ReadDataSets(dir.string(), **s);
  ASSERT_TRUE(sets.ok());
  for (int i = 0; i < 5; ++i) {
    DataSetResult r = RunDataSet(**s, (*sets)[0], 1e-3, 1e-4);
    ASSERT_TRUE(r.ok()) << "run " << i << ": " << r.status << " " << (r.outputs.empty() ? "" : r.outputs[0].problem);
  }
  SessionStats st = (*s)->stats();
  ASSERT_FALSE(st.clusters.empty());
  int compiled = 0;
  for (const auto& c : st.clusters) {
    if (c.compiles == 0) {
      EXPECT_EQ(c.fallback_executions, 0) << "cluster " << c.id;
      EXPECT_EQ(c.compiled_executions, 5) << "cluster " << c.id;
      EXPECT_EQ(c.fused_kernels, 0) << "cluster " << c.id << " ran compiled without a compile";
      continue;
    }
    ++compiled;
    EXPECT_EQ(c.fallback_executions, 2) << "cluster " << c.id;
    EXPECT_EQ(c.compiles, 1) << "cluster " << c.id;
    EXPECT_EQ(c.compiled_executions, 3) << "cluster " << c.id;
  }
  EXPECT_GT(compiled, 0) << "ppocrv4_rec has a cluster with generated kernels";
}

// Random float inputs of the given dims for every model input (uniform [-1, 1), fixed seed).
std::vector<NamedTensor> RandomInputs(const Session& s, const std::vector<Dims>& dims, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<NamedTensor> in;
  for (size_t i = 0; i < s.inputs().size(); ++i) {
    Tensor t(DType::kF32, dims[i]);
    for (int64_t k = 0; k < t.numel(); ++k) t.data<float>()[k] = u(rng);
    in.push_back({s.inputs()[i].name, t});
  }
  return in;
}

// A stream: runs `s` once per entry of `dims` (its one input's dims) on RandomInputs with seeds 1, 2, ...
// and hands each signature's dims, input data and output to `check`; stops at the first fatal failure.
void RunStream(Session& s, const std::vector<Dims>& dims,
               const std::function<void(const Dims& d, const float* x, const Tensor& y)>& check) {
  uint32_t seed = 0;
  for (const Dims& d : dims) {
    auto in = RandomInputs(s, {d}, ++seed);
    auto got = s.Run(in);
    ASSERT_TRUE(got.ok()) << DimsToString(d) << ": " << got.status();
    check(d, in[0].tensor.data<float>(), got->at(0).tensor);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

void ExpectClose(const std::vector<NamedTensor>& got, const std::vector<NamedTensor>& ref, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    OutputComparison c = CompareTensors(ref[i].name, got[i].tensor, ref[i].tensor, 1e-3, 1e-4);
    EXPECT_TRUE(c.ok) << what << ": output " << ref[i].name << " " << c.problem << " max_abs " << c.max_abs;
  }
}

// Shape-polymorphic clusters (issue 12): after ppocrv4_rec compiles at one width, each new width runs
// compiled on its first execution from the already compiled kernels — a polymorphic hit per cluster, no
// new compile, no fallback run — with the results of the fallback path (an independent session that never
// compiles). With --polymorphic_clusters=false the same widths run on the fallback path.
TEST(ClusterRuntimeTest, NewWidthsAreInstantiatedFromCompiledKernels) {
  auto dir = SharedModel("ppocrv4_rec");
  CJIT_REQUIRE_DATA(dir / "model.onnx");
  std::string model = (dir / "model.onnx").string();
  auto s = LoadSessionWithFlags(model, "--device=cpu --async_compilation=false", 2);
  auto off = LoadSessionWithFlags(model, "--device=cpu --async_compilation=false --polymorphic_clusters=false", 2);
  auto ref = LoadSessionWithFlags(model, "--device=cpu --auto_jit=-1", 2);
  ASSERT_TRUE(s.ok() && off.ok() && ref.ok());
  auto first = RandomInputs(**s, {{1, 3, 48, 320}}, 1);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*s)->Run(first).ok());
    ASSERT_TRUE((*off)->Run(first).ok());
  }
  SessionStats before = (*s)->stats();
  ASSERT_GT(before.totals.compiles, 0);
  size_t clusters = before.clusters.size();
  // A cluster that needs no generated code had its polymorphic hit at the first width already.
  int64_t hits = before.totals.polymorphic_hits;
  for (int64_t w : {64, 200, 517, 1000}) {
    auto in = RandomInputs(**s, {{1, 3, 48, w}}, static_cast<uint32_t>(w));
    auto got = (*s)->Run(in);
    auto want = (*ref)->Run(in);
    ASSERT_TRUE(got.ok() && want.ok()) << "width " << w;
    ExpectClose(*got, *want, "width " + std::to_string(w));
    SessionStats st = (*s)->stats();
    hits += static_cast<int64_t>(clusters);
    EXPECT_EQ(st.totals.polymorphic_hits, hits) << "width " << w;
    EXPECT_EQ(st.totals.compiles, before.totals.compiles) << "width " << w << ": no LLVM work for a known structure";
    EXPECT_EQ(st.totals.fallback_executions, before.totals.fallback_executions) << "width " << w;
    auto got_off = (*off)->Run(in);
    ASSERT_TRUE(got_off.ok());
    ExpectClose(*got_off, *want, "width " + std::to_string(w) + " without polymorphic clusters");
  }
  SessionStats st_off = (*off)->stats();
  EXPECT_EQ(st_off.totals.polymorphic_hits, 0);
  EXPECT_GT(st_off.totals.fallback_executions, (*s)->stats().totals.fallback_executions);
}

// y = Sigmoid((x + c) * x) - c with c = [[0.5, -1, 2, 3]] (x of `dims`, -1 = dynamic): one cluster.
std::string AddMulSigmoidSub(const std::vector<int64_t>& dims) {
  testing::ModelBuilder b(13);
  b.Input("x", onnx::TensorProto::FLOAT, dims).Output("y");
  b.InitFloats("c", {1, 4}, {0.5f, -1.f, 2.f, 3.f});
  b.Node("Add", {"x", "c"}, {"a"});
  b.Node("Mul", {"a", "x"}, {"m"});
  b.Node("Sigmoid", {"m"}, {"s"});
  b.Node("Sub", {"s", "c"}, {"y"});
  return b.Bytes();
}

using testing::OneClusterOptions;

// y = Tanh(MatMul(Relu(MatMul(x, w1)), w2)), x of [rows, 4]: one cluster whose fused groups are single ops
// (Relu, Tanh) between library steps (MatMul), so its plan needs no generated code on the CPU.
std::string MatMulReluMatMulTanh() {
  testing::ModelBuilder b(13);
  b.Input("x", onnx::TensorProto::FLOAT, {-1, 4}).Output("y");
  b.InitFloats("w1", {4, 3}, {0.5f, -1.f, 2.f, 0.25f, 1.5f, -0.5f, -2.f, 1.f, 0.75f, 1.f, 0.f, -1.25f});
  b.InitFloats("w2", {3, 2}, {1.f, -0.5f, 0.25f, 2.f, -1.f, 0.5f});
  b.Node("MatMul", {"x", "w1"}, {"m1"});
  b.Node("Relu", {"m1"}, {"r"});
  b.Node("MatMul", {"r", "w2"}, {"m2"});
  b.Node("Tanh", {"m2"}, {"y"});
  return b.Bytes();
}

// Without a persistent cache, cluster keys name the session's loaded weights by object (no SHA-256 of
// megabytes, cache/cache_key.h) but constants folded per signature by content: every full specialization
// folds Transpose(W) (128 KiB) into a new object with the same bytes, and the cluster must keep one
// identity across signatures: in a stream of new signatures, each run once, the structure's third
// execution compiles (the threshold counts per structure) and later signatures are instantiated from its
// kernels; with an identity per signature nothing would ever compile. Results are float64 math's.
TEST(ClusterRuntimeTest, WeightsFoldedPerSignatureKeepOneClusterIdentity) {
  constexpr int64_t K = 256, N = 128;
  testing::ModelBuilder b(13);
  b.Input("x", onnx::TensorProto::FLOAT, {-1, K}).Output("y");
  std::vector<float> wt(N * K), w2(N * N);
  for (size_t i = 0; i < wt.size(); ++i) wt[i] = static_cast<float>((i * 37) % 23) / 23.0f - 0.5f;
  for (size_t i = 0; i < w2.size(); ++i) w2[i] = static_cast<float>((i * 11) % 19) / 19.0f - 0.5f;
  b.InitFloats("wt", {N, K}, wt);  // folded per signature: Transpose(wt)
  b.InitFloats("w2", {N, N}, w2);  // a loaded weight of 64 KiB: named by object
  auto* t = b.Node("Transpose", {"wt"}, {"w"});
  testing::ModelBuilder::AttrInts(t, "perm", {1, 0});
  b.Node("MatMul", {"x", "w"}, {"m"});
  b.Node("Sigmoid", {"m"}, {"s"});
  b.Node("Mul", {"m", "s"}, {"h"});  // a fused group: generated code, so the cluster compiles
  b.Node("MatMul", {"h", "w2"}, {"y"});
  SessionOptions o = OneClusterOptions();
  o.flags.specialization_replay = "false";  // every signature specializes (and folds) in full
  auto s = Session::LoadFromBytes(b.Bytes(), o);
  ASSERT_TRUE(s.ok()) << s.status();
  RunStream(**s, {{4, K}, {5, K}, {6, K}, {7, K}, {8, K}, {9, K}}, [&](const Dims& d, const float* x, const Tensor& y) {
    const int64_t rows = d[0];
    for (int64_t r = 0; r < rows; r += rows - 1) {  // first and last row, column 3
      double want = 0;
      for (int64_t j = 0; j < N; ++j) {
        double m = 0;
        for (int64_t k = 0; k < K; ++k) m += double(x[r * K + k]) * wt[j * K + k];
        want += m / (1.0 + std::exp(-m)) * w2[j * N + 3];
      }
      ASSERT_NEAR(y.data<float>()[r * N + 3], want, 1e-4 * (1 + std::abs(want))) << rows << " rows";
    }
  });
  SessionStats st = (*s)->stats();
  EXPECT_EQ(st.totals.compiles, 1) << "one structure: compiled once, at its third execution (6 rows)";
  EXPECT_EQ(st.totals.polymorphic_hits, 3) << "7, 8 and 9 rows instantiated from its kernels";
}

// A transformer's position embeddings: the table (512 x 64) sliced to the sequence length S is folded into
// a constant with other contents at every S. The cluster's identity takes that constant by dtype and rank
// only (it is not one of the loaded weights), so a stream of new lengths, each run once, compiles the
// structure at its third execution and instantiates the later lengths from its kernels; with the slice in
// the identity by content, no length would ever reach the threshold. Results are float64 math's.
TEST(ClusterRuntimeTest, ConstantsFoldedFromShapesLeaveTheClusterIdentity) {
  constexpr int64_t D = 64, P = 512;
  testing::ModelBuilder b(13);
  b.Input("x", onnx::TensorProto::FLOAT, {1, -1, D}).Output("y");
  std::vector<float> table(P * D), w(D * D);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>((i * 13) % 29) / 29.0f - 0.5f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 7) % 17) / 17.0f - 0.5f;
  b.InitFloats("table", {P, D}, table);
  b.InitFloats("w", {D, D}, w);
  b.InitInts("zero", {1}, {0});
  b.InitInts("one", {1}, {1});
  b.Node("Shape", {"x"}, {"shape"});
  b.Node("Gather", {"shape", "one"}, {"len"});
  b.Node("Slice", {"table", "zero", "len", "zero"}, {"pos"});
  b.Node("Add", {"x", "pos"}, {"h"});
  b.Node("Sigmoid", {"h"}, {"g"});
  b.Node("Mul", {"h", "g"}, {"a"});
  b.Node("MatMul", {"a", "w"}, {"y"});
  SessionOptions o = OneClusterOptions();
  // Per-signature plans and their polymorphic instantiations are what this test counts (with dynamic-shape
  // plans, lengths 11-15 would run the family's executables at their dims: DynamicShapePlanTest).
  o.flags.dynamic_shape_plans = false;
  const std::string trace = ::testing::TempDir() + "/folded_constants_trace.json";
  std::filesystem::remove(trace);
  o.flags.trace_to = trace;
  auto s = Session::LoadFromBytes(b.Bytes(), o);
  ASSERT_TRUE(s.ok()) << s.status();
  RunStream(**s, {{1, 5, D}, {1, 7, D}, {1, 9, D}, {1, 11, D}, {1, 13, D}, {1, 15, D}},
            [&](const Dims& d, const float* x, const Tensor& y) {
              const int64_t len = d[1];
              for (int64_t t = 0; t < len; t += len - 1) {  // first and last position, column 5
                double want = 0;
                for (int64_t j = 0; j < D; ++j) {
                  const double h = double(x[t * D + j]) + table[t * D + j];
                  want += h / (1.0 + std::exp(-h)) * w[j * D + 5];
                }
                ASSERT_NEAR(y.data<float>()[t * D + 5], want, 1e-4 * (1 + std::abs(want))) << "length " << len;
              }
            });
  SessionStats st = (*s)->stats();
  EXPECT_EQ(st.totals.compiles, 1) << "one structure: compiled once, at its third execution (length 9)";
  EXPECT_EQ(st.totals.polymorphic_hits, 3) << "lengths 11, 13 and 15 instantiated from its kernels";
  // Each instantiation rebinds the previous signature's fusion plan (RebindFusionPlan) instead of planning.
  s->reset();  // the session writes its trace when it closes
  std::ifstream f(trace);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  int rebound = 0;
  for (size_t at = text.find("\"rebound\""); at != std::string::npos; at = text.find("\"rebound\"", at + 1)) ++rebound;
  EXPECT_EQ(rebound, 3) << "the polymorphic instantiations' trace events";
}

// Row kernels get LLVM's optimizing code generator when the signature itself is hot (it ran the
// threshold's fallback executions), the fast one when the compile was reached by a stream of new
// signatures of the structure, each run once (it must finish soon to serve the stream). The compile
// event of the trace says which; the results are float64 math's either way.
TEST(ClusterRuntimeTest, RowKernelsOfAHotSignatureGetTheOptimizingCodeGenerator) {
  // y = Softmax(x * s) or Softmax(x + s): another op per case, so neither finds the other's kernel in the
  // process-wide cache (a polymorphic hit, no compile).
  auto model = [](bool mul) {
    testing::ModelBuilder b(13);
    b.Input("x", onnx::TensorProto::FLOAT, {-1, 40}).Output("y");
    b.InitFloats("scale", {}, {0.5f});
    b.Node(mul ? "Mul" : "Add", {"x", "scale"}, {"m"});
    testing::ModelBuilder::AttrInt(b.Node("Softmax", {"m"}, {"y"}), "axis", -1);
    return b.Bytes();
  };
  int trace = 0;
  auto codegen_of_compile = [&](bool mul, const std::vector<int64_t>& rows) -> std::string {
    const std::string path = ::testing::TempDir() + "/row_codegen_trace_" + std::to_string(++trace) + ".json";
    std::filesystem::remove(path);
    SessionOptions o = OneClusterOptions();
    o.flags.trace_to = path;
    auto s = Session::LoadFromBytes(model(mul), o);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return "";
    std::vector<Dims> dims;
    for (int64_t r : rows) dims.push_back({r, 40});
    RunStream(**s, dims, [&](const Dims& d, const float* x, const Tensor& y) {
      double sum = 0;
      auto m = [&](int j) { return mul ? 0.5 * x[j] : x[j] + 0.5; };
      for (int j = 0; j < 40; ++j) sum += std::exp(m(j));
      EXPECT_NEAR(y.data<float>()[7], std::exp(m(7)) / sum, 1e-6) << d[0] << " rows";
    });
    EXPECT_TRUE((*s)->EndProfiling().ok());
    std::ifstream f(path);
    nlohmann::json doc = nlohmann::json::parse(f);
    std::string codegen;
    for (const auto& e : doc["traceEvents"]) {
      if (e.value("cat", "") == "compile" && e["name"].get<std::string>().rfind("compile cluster_", 0) == 0) {
        codegen = e["args"].value("row_kernel_codegen", "");
      }
    }
    return codegen;
  };
  EXPECT_EQ(codegen_of_compile(true, {5, 5, 5}), "optimizing") << "one signature, three times";
  EXPECT_EQ(codegen_of_compile(false, {5, 6, 7}), "fast") << "three new signatures of one structure";
}

// A cluster whose plan needs no generated code (every fused group a single op, run on its library kernel:
// FusionPlanOptions::single_op_groups_as_library) runs compiled from its first execution, on every new
// signature, with no compile and no fallback run; the results are float64 math's. With
// --cpu_codegen_single_ops it needs LLVM and follows the lazy policy (two fallback runs, then a compile);
// with --always_defer_compilation it stays on the fallback path. A cluster that fuses (AddMulSigmoidSub)
// still compiles at the threshold: its one probe failed, and later signatures do not probe again.
TEST(ClusterRuntimeTest, ClusterWithoutFusedGroupsRunsCompiledFromTheFirstExecution) {
  const double w1[4][3] = {{0.5, -1, 2}, {0.25, 1.5, -0.5}, {-2, 1, 0.75}, {1, 0, -1.25}};
  const double w2[3][2] = {{1, -0.5}, {0.25, 2}, {-1, 0.5}};
  auto check = [&](Session& s, int64_t rows, uint32_t seed) {
    auto in = RandomInputs(s, {{rows, 4}}, seed);
    auto got = s.Run(in);
    ASSERT_TRUE(got.ok()) << got.status();
    const float* x = in[0].tensor.data<float>();
    for (int64_t r = 0; r < rows; ++r) {
      double h[3] = {0, 0, 0};
      for (int j = 0; j < 3; ++j) {
        for (int k = 0; k < 4; ++k) h[j] += double(x[r * 4 + k]) * w1[k][j];
        h[j] = std::max(h[j], 0.0);
      }
      for (int j = 0; j < 2; ++j) {
        double y = 0;
        for (int k = 0; k < 3; ++k) y += h[k] * w2[k][j];
        ASSERT_NEAR(got->at(0).tensor.data<float>()[r * 2 + j], std::tanh(y), 1e-5) << rows << " rows, row " << r;
      }
    }
  };
  {
    auto s = Session::LoadFromBytes(MatMulReluMatMulTanh(), OneClusterOptions());
    ASSERT_TRUE(s.ok()) << s.status();
    int64_t runs = 0;
    for (int64_t rows : {8, 8, 8, 3, 17}) {
      check(**s, rows, static_cast<uint32_t>(++runs));
      SessionStats st = (*s)->stats();
      EXPECT_EQ(st.totals.fallback_executions, 0) << "run " << runs;
      EXPECT_EQ(st.totals.compiled_executions, runs) << "run " << runs;
      EXPECT_EQ(st.totals.compiles, 0) << "run " << runs << ": no LLVM work";
    }
    EXPECT_EQ((*s)->stats().totals.polymorphic_hits, 3) << "one instantiation per signature (8, 3, 17 rows)";
  }
  {
    SessionOptions o = OneClusterOptions();
    o.flags.cpu_codegen_single_ops = true;
    auto s = Session::LoadFromBytes(MatMulReluMatMulTanh(), o);
    ASSERT_TRUE(s.ok()) << s.status();
    for (int i = 0; i < 3; ++i) check(**s, 8, static_cast<uint32_t>(i));
    SessionStats st = (*s)->stats();
    EXPECT_EQ(st.totals.fallback_executions, 2);
    EXPECT_EQ(st.totals.compiles, 1) << "--cpu_codegen_single_ops: Relu and Tanh are generated code";
  }
  {
    SessionOptions o = OneClusterOptions();
    o.flags.always_defer_compilation = true;
    auto s = Session::LoadFromBytes(MatMulReluMatMulTanh(), o);
    ASSERT_TRUE(s.ok()) << s.status();
    for (int i = 0; i < 3; ++i) check(**s, 8, static_cast<uint32_t>(i));
    EXPECT_EQ((*s)->stats().totals.fallback_executions, 3);
    EXPECT_EQ((*s)->stats().totals.compiled_executions, 0);
  }
  {
    auto s = Session::LoadFromBytes(AddMulSigmoidSub({-1, 4}), OneClusterOptions());
    ASSERT_TRUE(s.ok()) << s.status();
    for (int64_t rows : {8, 5}) {
      auto in = RandomInputs(**s, {{rows, 4}}, 1);
      ASSERT_TRUE((*s)->Run(in).ok());
    }
    SessionStats st = (*s)->stats();
    EXPECT_EQ(st.totals.fallback_executions, 2) << "a cluster that fuses needs LLVM: the lazy policy";
    EXPECT_EQ(st.totals.polymorphic_hits, 0);
    for (int i = 0; i < 2; ++i) ASSERT_TRUE((*s)->Run(RandomInputs(**s, {{5, 4}}, 2)).ok());
    EXPECT_EQ((*s)->stats().totals.compiles, 1);
  }
}

// A shape that changes a fused kernel's structure (here a dim of 1 makes an operand's broadcast collapse
// differently) is a polymorphic miss: it follows the compile policy — the structure is past its threshold,
// so it compiles the new kernel structure (LLVM) — with correct results.
TEST(ClusterRuntimeTest, PolymorphicMissFollowsThePolicy) {
  SessionOptions o = OneClusterOptions();
  auto s = Session::LoadFromBytes(AddMulSigmoidSub({-1, -1}), o);
  ASSERT_TRUE(s.ok()) << s.status();
  auto in8 = RandomInputs(**s, {{8, 4}}, 1);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*s)->Run(in8).ok());
  ASSERT_EQ((*s)->stats().totals.compiles, 1);
  // Another row count: same structure.
  auto in5 = RandomInputs(**s, {{5, 4}}, 2);
  ASSERT_TRUE((*s)->Run(in5).ok());
  EXPECT_EQ((*s)->stats().totals.polymorphic_hits, 1);
  // One row: [1, 4] + [1, 4] collapses to one dim where [8, 4] + [1, 4] broadcast over two: a miss.
  auto in1 = RandomInputs(**s, {{1, 4}}, 3);
  auto got = (*s)->Run(in1);
  ASSERT_TRUE(got.ok()) << got.status();
  SessionStats st = (*s)->stats();
  EXPECT_EQ(st.totals.polymorphic_hits, 1);
  EXPECT_EQ(st.totals.compiles, 2) << "the miss compiled its new kernel structure";
  EXPECT_EQ(st.totals.fallback_executions, 2);
  const float* x = in1[0].tensor.data<float>();
  const float c[4] = {0.5f, -1.f, 2.f, 3.f};
  for (int k = 0; k < 4; ++k) {
    double m = (double(x[k]) + c[k]) * x[k];
    EXPECT_NEAR(got->at(0).tensor.data<float>()[k], 1 / (1 + std::exp(-m)) - c[k], 1e-6) << k;
  }
}

// A stream of new signatures of one cluster structure with --async_compilation: the first past the
// threshold compiles in the background; the others run the fallback path meanwhile without queueing a
// compile of their own, then instantiate from its kernels. Every result is right.
TEST(ClusterRuntimeTest, AsyncStreamCompilesEachStructureOnce) {
  SessionOptions o = OneClusterOptions();
  o.flags.async_compilation = Flags::AsyncCompilation::kTrue;
  o.flags.compile_threshold = 0;
  auto s = Session::LoadFromBytes(AddMulSigmoidSub({-1, 4}), o);
  ASSERT_TRUE(s.ok()) << s.status();
  const float c[4] = {0.5f, -1.f, 2.f, 3.f};
  auto check = [&](int64_t rows) {
    auto in = RandomInputs(**s, {{rows, 4}}, static_cast<uint32_t>(rows));
    auto got = (*s)->Run(in);
    ASSERT_TRUE(got.ok()) << got.status();
    const float* x = in[0].tensor.data<float>();
    for (int64_t k = 0; k < rows * 4; ++k) {
      double m = (double(x[k]) + c[k % 4]) * x[k];
      ASSERT_NEAR(got->at(0).tensor.data<float>()[k], 1 / (1 + std::exp(-m)) - c[k % 4], 1e-6) << rows;
    }
  };
  // Many more signatures than a compile takes runs of this tiny model.
  for (int64_t rows = 2; rows < 40; ++rows) check(rows);
  for (int i = 0; i < 2000 && (*s)->stats().compiles_in_flight > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ((*s)->stats().compiles_in_flight, 0);
  for (int64_t rows = 40; rows < 44; ++rows) check(rows);
  SessionStats st = (*s)->stats();
  EXPECT_EQ(st.totals.compiles, 1) << "one background compile for the structure, not one per signature";
  EXPECT_GE(st.totals.polymorphic_hits, 4) << "signatures after it are instantiated from its kernels";
}

// The test hook makes every compilation fail: clusters run on the fallback path, with correct results.
TEST(ClusterRuntimeTest, FailedCompilationFallsBack) {
  auto dir = SharedModel("ppocr_mobile_cls");
  CJIT_REQUIRE_DATA(dir / "model.onnx");
  auto s =
      LoadSessionWithFlags((dir / "model.onnx").string(),
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
void ExpectLlvmFatalErrorRecovered(const std::string& model, const std::string& extra_flags, int runs) {
  auto dir = SharedModel(model);
  CJIT_REQUIRE_DATA(dir / "model.onnx");
  auto s = LoadSessionWithFlags(
      (dir / "model.onnx").string(),
      "--device=cpu --enable_lazy_compilation=false --fail_compilation_for_testing=llvm-fatal-error " + extra_flags,
      0);
  ASSERT_TRUE(s.ok()) << s.status();
  auto sets = ReadDataSets(dir.string(), **s);
  ASSERT_TRUE(sets.ok());
  for (int i = 0; i < runs; ++i) {
    DataSetResult r = RunDataSet(**s, (*sets)[0], 1e-3, 1e-4);
    ASSERT_TRUE(r.ok()) << r.status;
  }
  SessionStats st = (*s)->stats();
  EXPECT_GT(st.totals.compiles, 0);
  // Every cluster that tried to compile stays on the fallback path (one that needs no generated code, all
  // its fused groups library steps, runs compiled without LLVM).
  for (const auto& c : st.clusters) {
    if (c.compiles == 0) continue;
    EXPECT_EQ(c.compiled_executions, 0) << "cluster " << c.id;
    EXPECT_GT(c.fallback_executions, 0) << "cluster " << c.id;
  }
}

TEST(ClusterRuntimeTest, LlvmFatalErrorIsRecovered) { ExpectLlvmFatalErrorRecovered("oww_hello_deepa", "", 2); }

// The same on the compile threads of --force_compilation_parallelism (ppocrv4_rec: about 20 kernels to compile).
TEST(ClusterRuntimeTest, LlvmFatalErrorOnCompileThreadsIsRecovered) {
  ExpectLlvmFatalErrorRecovered("ppocrv4_rec", "--force_compilation_parallelism=4", 1);
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

// The model in `dir` with --compile_threshold=0 on `threads` intra-op threads, after its first data set ran
// (matching the reference) on the fallback path: its clusters compile in the background (a synchronous
// compile would have run it compiled).
void FirstRunOnTheFallbackPath(const std::filesystem::path& dir, int threads, std::unique_ptr<Session>* s,
                               std::vector<DataSet>* sets) {
  auto loaded = LoadSessionWithFlags((dir / "model.onnx").string(), "--device=cpu --compile_threshold=0", threads);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  *s = std::move(*loaded);
  auto read = ReadDataSets(dir.string(), **s);
  ASSERT_TRUE(read.ok());
  *sets = std::move(*read);
  DataSetResult first = RunDataSet(**s, (*sets)[0], 1e-3, 1e-4);
  ASSERT_TRUE(first.ok()) << first.status;
  EXPECT_GT((*s)->stats().totals.fallback_executions, 0) << "the first run waited for the compiler";
}

// --async_compilation=auto (the default): with one intra-op thread and another CPU idle, the first
// execution past the threshold runs on the fallback path while the cluster compiles in the background
// (synchronously, --compile_threshold=0 would run it compiled); the executable is swapped in later.
TEST(ClusterRuntimeTest, AsyncCompilationAutoUsesAnIdleCpu) {
  if (UsableCpus() < 2) GTEST_SKIP() << "one CPU: auto compiles synchronously (FlagsTest checks the rule)";
  auto dir = SharedModel("ppocrv4_rec");
  CJIT_REQUIRE_DATA(dir / "model.onnx");
  std::unique_ptr<Session> s;
  std::vector<DataSet> sets;
  ASSERT_NO_FATAL_FAILURE(FirstRunOnTheFallbackPath(dir, 1, &s, &sets));
  for (int runs = 0; runs < 2000 && s->stats().totals.compiled_executions == 0; ++runs) {
    DataSetResult r = RunDataSet(*s, sets[0], 1e-3, 1e-4);
    ASSERT_TRUE(r.ok()) << "run " << runs << ": " << r.status;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GT(s->stats().totals.compiled_executions, 0);
}

// --async_compilation=auto with every CPU busy (intra-op threads >= the CPUs, at least 2): compiles run
// in the background and runs lend them a CPU — one intra-op thread fewer while a compile is in flight, the
// configured count again after; autotuning stays on the run's thread.
TEST(ClusterRuntimeTest, RunsLendACpuWhileABackgroundCompileIsInFlight) {
  // A worker job that runs until released (a compile in flight).
  struct HeldJob {
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
    std::function<void()> job() {
      return [r = released] { r.wait(); };
    }
  };
  auto wait_idle = [](const ClusterRuntime& r) {
    for (int i = 0; i < 10000 && r.compiles_in_flight() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  Flags f;
  f.intra_op_threads = std::max(2, UsableCpus());
  const int threads = f.intra_op_threads;
  ClusterRuntime rt(f);
  EXPECT_TRUE(rt.async_compilation());
  EXPECT_FALSE(rt.async_autotune());
  EXPECT_EQ(rt.RunThreadsNow(), threads);
  HeldJob held;
  ASSERT_TRUE(rt.SubmitCompile(held.job()));
  EXPECT_EQ(rt.compiles_in_flight(), 1);
  EXPECT_EQ(rt.RunThreadsNow(), threads - 1);
  const int omp_before = omp_get_max_threads();
  {
    ScopedRunThreads cap(&rt);
    EXPECT_EQ(RunThreads(threads), threads - 1);
    EXPECT_EQ(RunThreads(1), 1);
  }
  EXPECT_EQ(RunThreads(threads), threads) << "the cap ends with its scope";
  {
    // A run (Session::Run) follows the runtime live: the CPU comes back within the run when the compile
    // ends, for our kernels and for OpenMP (oneDNN, BLIS).
    ScopedRunThreads live(&rt);
    EXPECT_EQ(RunThreads(threads), threads - 1);
    EXPECT_EQ(omp_get_max_threads(), threads - 1);
    held.release.set_value();
    wait_idle(rt);
    ASSERT_EQ(rt.compiles_in_flight(), 0);
    EXPECT_EQ(RunThreads(threads), threads) << "the lent CPU is back before the run ends";
    EXPECT_EQ(omp_get_max_threads(), threads);
  }
  omp_set_num_threads(omp_before);
  EXPECT_EQ(rt.RunThreadsNow(), threads);
  // Shutdown drops a queued job: nothing stays counted in flight (runs would keep lending a CPU).
  HeldJob running;
  ASSERT_TRUE(rt.SubmitCompile(running.job()));
  ASSERT_TRUE(rt.SubmitCompile([] {}));
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    running.release.set_value();
  });
  rt.Shutdown();
  releaser.join();
  EXPECT_EQ(rt.compiles_in_flight(), 0);
  EXPECT_EQ(rt.RunThreadsNow(), threads);
  // Explicit choices do not lend: synchronous compiles, or --async_compilation=true (a CPU of its own).
  for (auto mode : {Flags::AsyncCompilation::kFalse, Flags::AsyncCompilation::kTrue}) {
    f.async_compilation = mode;
    ClusterRuntime other(f);
    HeldJob job;
    ASSERT_TRUE(other.SubmitCompile(job.job()));
    EXPECT_EQ(other.RunThreadsNow(), threads);
    job.release.set_value();
    other.Shutdown();
  }
}

// The same end to end on a real model: the first execution past the threshold runs on the fallback path
// (a synchronous compile would have run it compiled), the compiled executable arrives later, and no
// compile is left in flight; results match the references throughout.
TEST(ClusterRuntimeTest, AsyncCompilationAutoAtFullThreadsSwapsIn) {
  auto dir = SharedModel("ppocrv4_rec");
  CJIT_REQUIRE_DATA(dir / "model.onnx");
  std::unique_ptr<Session> s;
  std::vector<DataSet> sets;
  ASSERT_NO_FATAL_FAILURE(FirstRunOnTheFallbackPath(dir, std::max(2, UsableCpus()), &s, &sets));
  for (int runs = 0; runs < 2000 && s->stats().compiles_in_flight > 0; ++runs) {
    DataSetResult r = RunDataSet(*s, sets[0], 1e-3, 1e-4);
    ASSERT_TRUE(r.ok()) << "run " << runs << ": " << r.status;
  }
  ASSERT_EQ(s->stats().compiles_in_flight, 0);
  DataSetResult r = RunDataSet(*s, sets[0], 1e-3, 1e-4);
  ASSERT_TRUE(r.ok()) << r.status;
  EXPECT_GT(s->stats().totals.compiled_executions, 0);
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
  auto s2 = LoadSessionWithFlags((dir / "model.onnx").string(),
                                 "--device=cpu --compile_threshold=0 --async_compilation=false", 1);
  ASSERT_TRUE(s2.ok()) << s2.status();
  auto sets = ReadDataSets(dir.string(), **s2);
  ASSERT_TRUE(sets.ok());
  DataSetResult r = RunDataSet(**s2, (*sets)[0], 1e-3, 1e-4);
  EXPECT_TRUE(r.ok()) << r.status;
  EXPECT_GT((*s2)->stats().totals.compiled_executions, 0);
}

// CpuCompileOptions::cancelled (how a session being destroyed stops its background compile): asked before
// each new kernel and between its phases; true stops the compile with CancelledError. The chain below is a
// kernel structure no other test compiles, so the process's kernel cache cannot serve it.
TEST(CpuCompileTest, CancelledCompileStopsBetweenPhases) {
  auto parsed = ParseGraph(R"(
graph cancel_me(%x: f32[3,29]) {
  %a: f32[3,29] = Mul(%x, %x)
  %b: f32[3,29] = Tanh(%a)
  %c: f32[3,29] = Sigmoid(%x)
  %d: f32[3,29] = Sub(%b, %c)
  %e: f32[3,29] = Mul(%d, %a)
  %f: f32[3,29] = Relu(%e)
  return %f
})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  std::shared_ptr<const Graph> body(std::move(*parsed));
  int asked = 0;
  CpuCompileOptions options;
  options.cancelled = [&] { return ++asked > 1; };  // the kernel starts; cancelled after its IR is emitted
  auto cancelled = CpuExecutable::Compile(body, options);
  ASSERT_FALSE(cancelled.ok()) << "compiled: " << (*cancelled)->num_fused_kernels() << " fused kernels";
  EXPECT_TRUE(absl::IsCancelled(cancelled.status())) << cancelled.status();
  EXPECT_EQ(asked, 2) << "asked before the kernel and after emitting it, then stopped";
  options.cancelled = nullptr;
  auto compiled = CpuExecutable::Compile(body, options);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ((*compiled)->num_fused_kernels(), 1);
}

}  // namespace
}  // namespace cjit
