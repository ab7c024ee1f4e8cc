// Every clusterable op family, compiled (cluster of one or more ops, compiled on first execution) vs the
// fallback path (the same graph through the op-by-op executor), per dtype, on random inputs
// (CONVENTIONS #10, as ggml's test-backend-ops). Tolerance: 1e-5 relative for float32 (reassociation and
// libm differences), exact for integers.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "compiler/ir/cpu_isa.h"
#include "compiler/ir/text.h"
#include "compiler/passes/mark_for_compilation.h"
#include "compiler/passes/specialize_shapes.h"
#include "gtest/gtest.h"
#include "runtime/cluster_runner.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/tensor_util.h"
#include "runtime/executor.h"
#include "tests/op_cases.h"
#include "tools/check_lib.h"

namespace cjit {
namespace {

class OpSuite : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpSuite, CompiledMatchesFallback) {
  const OpCase& c = GetParam();
  auto parsed = SpecializedGraphFromText(c.ir);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  std::shared_ptr<Graph> g(std::move(*parsed));
  std::mt19937 rng(42);
  std::vector<Tensor> inputs;
  for (const Value* v : g->inputs()) inputs.push_back(RandomInput(*v, rng));
  // Fallback.
  auto fallback = Executor::Create(std::shared_ptr<const Graph>(g->Clone()), ExecutorOptions{2, nullptr, true});
  ASSERT_TRUE(fallback.ok()) << fallback.status();
  auto ref = (*fallback)->Run(inputs);
  ASSERT_TRUE(ref.ok()) << ref.status();
  // Compiled.
  std::shared_ptr<Graph> cg(g->Clone());
  ClusteringOptions co;
  co.min_cluster_size = 1;
  auto report = MarkForCompilation(*cg, co);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->clusters.size(), 1u) << "expected the whole case in one cluster";
  Flags flags;
  flags.enable_lazy_compilation = false;
  flags.cpu_codegen_single_ops = true;  // a lone elementwise op gets generated code: the code under test
  auto rt_owner = std::make_shared<ClusterRuntime>(flags);
  ClusterRuntime& rt = *rt_owner;
  auto compiled = Executor::Create(cg, ExecutorOptions{2, &rt, true});
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  auto got = (*compiled)->Run(inputs);
  ASSERT_TRUE(got.ok()) << got.status();
  auto stats = rt.AllStats();
  ASSERT_EQ(stats.size(), 1u);
  // Compiled now, or instantiated from kernels an earlier case compiled in this process (process-wide
  // kernel cache), or needing no generated code (library steps only): compiled code ran either way.
  EXPECT_EQ(stats[0]->compiles.load() + stats[0]->polymorphic_hits.load(), 1);
  EXPECT_EQ(stats[0]->compiled_executions.load(), 1);
  ASSERT_EQ(got->size(), ref->size());
  for (size_t i = 0; i < ref->size(); ++i) {
    auto [rtol, atol] = ToleranceFor((*ref)[i].dtype());
    OutputComparison cmp = CompareTensors("out", (*got)[i], (*ref)[i], rtol, atol);
    EXPECT_TRUE(cmp.ok) << c.name << " output " << i << ": " << cmp.problem << " max_abs " << cmp.max_abs;
  }
}


INSTANTIATE_TEST_SUITE_P(All, OpSuite, ::testing::ValuesIn(OpSuiteCases()),
                         [](const ::testing::TestParamInfo<OpCase>& i) { return i.param.name; });

}  // namespace
}  // namespace cjit

namespace cjit {
namespace {

// Runs the graph "graph g(%x: f32[N]) {<body>}" on xs with its clusters compiled on their first execution;
// the outputs, or none (with a test failure) unless every cluster ran compiled in generated code.
std::vector<Tensor> RunCompiled(const std::string& body, const std::vector<float>& xs) {
  const int64_t n = static_cast<int64_t>(xs.size());
  auto parsed = ParseGraph("graph g(%x: f32[" + std::to_string(n) + "]) {\n" + body + "}");
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  if (!parsed.ok()) return {};
  std::shared_ptr<Graph> g(std::move(*parsed));
  auto eval = [](const Node& node, const std::vector<const Tensor*>& in) { return EvaluateNode(node, in, 1); };
  ClusteringOptions co;
  co.min_cluster_size = 1;
  if (!SpecializeShapes(*g, {{n}}, eval).ok() || !MarkForCompilation(*g, co).ok()) {
    ADD_FAILURE() << "specialization or clustering failed";
    return {};
  }
  Flags flags;
  flags.enable_lazy_compilation = false;
  auto rt = std::make_shared<ClusterRuntime>(flags);
  auto ex = Executor::Create(g, ExecutorOptions{1, rt.get(), true});
  EXPECT_TRUE(ex.ok()) << ex.status();
  if (!ex.ok()) return {};
  Tensor x(DType::kF32, {n});
  std::copy(xs.begin(), xs.end(), x.data<float>());
  auto out = (*ex)->Run({x});
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return {};
  const auto stats = rt->AllStats();
  bool compiled = !stats.empty();
  for (const auto& c : stats) compiled &= c->compiled_executions.load() == 1 && c->fused_kernels.load() > 0;
  if (!compiled) {
    ADD_FAILURE() << "did not run compiled, in fused kernels, on its first execution";
    return {};
  }
  return *out;
}

// The compiled exp (a vectorizable polynomial) against float64 exp over its whole range and the special
// values: relative error <= 2e-7 where the result is a normal float; inf, 0 and NaN where they belong.
TEST(CompiledMathTest, ExpMatchesFloat64OverItsRange) {
  std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 10.0f, -10.0f, 50.0f, -50.0f, 80.0f, -80.0f, 88.0f, -87.0f,
                           88.7f, 89.0f, -104.0f, 1000.0f, -1000.0f, std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  for (int i = 0; i < 2000; ++i) xs.push_back(-87.0f + 175.0f * static_cast<float>(i) / 2000.0f);
  auto out = RunCompiled("  %e = Exp(%x)\n  %z = Identity(%e)\n  return %z\n", xs);
  ASSERT_EQ(out.size(), 1u);
  for (size_t i = 0; i < xs.size(); ++i) {
    float got = out[0].data<float>()[i];
    double ref = std::exp(static_cast<double>(xs[i]));
    if (std::isnan(xs[i])) {
      EXPECT_TRUE(std::isnan(got));
    } else if (ref > std::numeric_limits<float>::max()) {
      EXPECT_TRUE(std::isinf(got) || got > 3e38f) << xs[i];
    } else if (ref < std::numeric_limits<float>::min()) {
      EXPECT_LT(got, 1e-37f) << xs[i];
    } else {
      EXPECT_NEAR(got / ref, 1.0, 2e-7) << "x = " << xs[i];
    }
  }
}

// erf and tanh in generated code are rational approximations (Eigen's, as XLA emits them) instead of
// libm calls: over their whole range against float64 libm, relative error within 5e-7 (absolute near 0),
// +-1 saturation, NaN kept, odd symmetry.
TEST(CompiledMathTest, ErfAndTanhMatchFloat64OverTheirRange) {
  std::vector<float> xs = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-6f, 3e-4f, 5e-4f, -4e-4f, 0.5f, 1.0f, -1.0f, 3.9f, 4.0f,
                           4.1f, 7.9f, 8.0f, -9.0f, 30.0f, 1e30f, std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  for (int i = 0; i <= 4000; ++i) xs.push_back(-10.0f + 20.0f * static_cast<float>(i) / 4000.0f);
  auto out = RunCompiled("  %e = Erf(%x)\n  %t = Tanh(%x)\n  %a = Identity(%e)\n  %b = Identity(%t)\n  return %a, %b\n",
                         xs);
  ASSERT_EQ(out.size(), 2u) << "erf/tanh must run in generated code";
  for (int which = 0; which < 2; ++which) {
    for (size_t i = 0; i < xs.size(); ++i) {
      const float got = out[which].data<float>()[i];
      const double ref = which == 0 ? std::erf(static_cast<double>(xs[i])) : std::tanh(static_cast<double>(xs[i]));
      const char* name = which == 0 ? "erf" : "tanh";
      if (std::isnan(xs[i])) {
        EXPECT_TRUE(std::isnan(got)) << name;
        continue;
      }
      EXPECT_LE(std::abs(got), 1.0f) << name << "(" << xs[i] << ")";
      EXPECT_NEAR(got, ref, 5e-7 * std::abs(ref) + 1e-37) << name << "(" << xs[i] << ")";
    }
  }
}

}  // namespace
}  // namespace cjit

namespace cjit {
namespace {

// BinaryArithmeticF32 (what a compiled cluster runs for a lone float32 binary op: AVX-512/AVX2/baseline
// clones) against float64 math rounded once to float32 — exact for + - * / (a double result rounds to
// the float one: 53 >= 2*24+2 bits) — over every broadcast pattern its rows take: equal shapes, a scalar
// on either side, a vector over the last dim, 0/1 strides mixed in inner and outer dims, and lengths that
// leave vector tails. Max/Min propagate NaN (ONNX Max/Min).
TEST(BinaryArithmeticTest, MatchesFloat64OnEveryBroadcastPattern) {
  const std::vector<std::pair<Dims, Dims>> shapes = {
      {{2, 3, 37}, {2, 3, 37}}, {{1}, {2, 3, 37}}, {{2, 3, 37}, {1}}, {{2, 3, 37}, {37}},
      {{2, 1, 37}, {1, 3, 1}},  {{4, 1}, {1, 19}}, {{1, 3, 32, 88}, {1, 1, 1, 88}}, {{300, 257}, {257}}};
  const std::vector<std::pair<BinaryArithmetic, std::string>> ops = {
      {BinaryArithmetic::kAdd, "Add"}, {BinaryArithmetic::kSub, "Sub"}, {BinaryArithmetic::kMul, "Mul"},
      {BinaryArithmetic::kDiv, "Div"}, {BinaryArithmetic::kMax, "Max"}, {BinaryArithmetic::kMin, "Min"}};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  for (const auto& [op, name] : ops) {
    BinaryArithmetic parsed;
    ASSERT_TRUE(ParseBinaryArithmetic(name, &parsed));
    EXPECT_EQ(parsed, op);
    for (const auto& [da, db] : shapes) {
      Tensor a(DType::kF32, da), b(DType::kF32, db);
      for (int64_t k = 0; k < a.numel(); ++k) a.data<float>()[k] = u(rng);
      for (int64_t k = 0; k < b.numel(); ++k) b.data<float>()[k] = u(rng);
      a.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
      Dims od(std::max(da.size(), db.size()));
      for (size_t i = 0; i < od.size(); ++i) {
        auto dim = [&](const Dims& d) { return i + d.size() >= od.size() ? d[i + d.size() - od.size()] : 1; };
        od[i] = std::max(dim(da), dim(db));
      }
      for (int threads : {1, 2}) {
        Tensor out(DType::kF32, od);
        BinaryArithmeticF32(op, a, b, out, threads);
        // Reference: index each input by numpy broadcasting.
        for (int64_t k = 0; k < out.numel(); ++k) {
          auto at = [&](const Tensor& t) {
            int64_t rem = k, idx = 0, stride = 1;
            for (int i = static_cast<int>(od.size()) - 1; i >= 0; --i) {
              int64_t c = rem % od[i];
              rem /= od[i];
              int j = i - static_cast<int>(od.size() - t.dims().size());
              if (j < 0) continue;
              if (t.dims()[j] != 1) idx += c * stride;
              stride *= t.dims()[j];
            }
            return static_cast<double>(t.data<float>()[idx]);
          };
          double x = at(a), y = at(b), want;
          switch (op) {
            case BinaryArithmetic::kAdd: want = x + y; break;
            case BinaryArithmetic::kSub: want = x - y; break;
            case BinaryArithmetic::kMul: want = x * y; break;
            case BinaryArithmetic::kDiv: want = x / y; break;
            case BinaryArithmetic::kMax: want = std::isnan(x) || std::isnan(y) ? NAN : std::max(x, y); break;
            case BinaryArithmetic::kMin: want = std::isnan(x) || std::isnan(y) ? NAN : std::min(x, y); break;
          }
          float got = out.data<float>()[k];
          if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(got)) << name << " at " << k;
          } else {
            ASSERT_EQ(got, static_cast<float>(want)) << name << " [" << DimsToString(da) << "] x [" << DimsToString(db)
                                                     << "] at " << k << ", threads " << threads;
          }
        }
      }
    }
  }
  BinaryArithmetic unused;
  EXPECT_FALSE(ParseBinaryArithmetic("Pow", &unused));
}

// TransposeTensor's batched 2-D path (the layout transposes NCHW <-> NHWC; AVX-512 16 x 16 register tiles
// with masked partial tiles where the CPU has them) against index arithmetic, bit for bit: every tile
// remainder on both axes (1-35 rows and columns, a 3-channel image, a tile multiple), batches, 4-byte and
// 2-byte elements (NaN payloads must survive a move), 1-byte elements (SSE2 16 x 16 byte tiles: the uint8
// layout changes of the quantized convolutions), 1 and 2 threads.
TEST(TransposeTest, BatchedTransposeMatchesIndexArithmetic) {
  std::mt19937 rng(11);
  auto check = [&](DType dt, int64_t batch, int64_t rows, int64_t cols, int threads) {
    Tensor x(dt, {batch, rows, cols});
    uint8_t* bytes = static_cast<uint8_t*>(x.raw());
    for (size_t i = 0; i < x.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(rng());
    auto y = TransposeTensor(x, {0, 2, 1}, threads);
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_EQ(y->dims(), (Dims{batch, cols, rows}));
    const size_t es = DTypeSize(dt);
    const uint8_t* out = static_cast<const uint8_t*>(y->raw());
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          const size_t from = static_cast<size_t>((b * rows + i) * cols + j) * es;
          const size_t to = static_cast<size_t>((b * cols + j) * rows + i) * es;
          ASSERT_EQ(std::memcmp(bytes + from, out + to, es), 0)
              << DTypeName(dt) << " [" << batch << "," << rows << "," << cols << "] at " << b << "," << i << ","
              << j << ", threads " << threads;
        }
  };
  for (int64_t rows = 1; rows <= 35; ++rows)
    for (int64_t cols : {1, 2, 7, 15, 16, 17, 31, 33, 35}) check(DType::kF32, 1, rows, cols, 1);
  for (int threads : {1, 2}) {
    check(DType::kF32, 1, 3, 9216, threads);   // a 3-channel 48 x 192 image to channels-last
    check(DType::kF32, 1, 192, 200, threads);  // channels-last back to NCHW
    check(DType::kF32, 3, 48, 64, threads);    // tile multiples, batched
    check(DType::kI32, 2, 37, 300, threads);   // >= 65536 elements: split over threads
    check(DType::kF16, 2, 19, 45, threads);
    check(DType::kU8, 1, 64, 3136, threads);  // a 64-channel 56 x 56 uint8 image to channels-last
    check(DType::kI8, 2, 35, 49, threads);    // ragged byte tiles
    // 2-4 planes of bytes / 16-bit values interleaved (a uint8 image to channels-last), over 8192-column
    // blocks and batches.
    check(DType::kU8, 1, 3, 224 * 224, threads);
    check(DType::kI8, 2, 2, 8193, threads);
    check(DType::kF16, 3, 4, 100, threads);
  }
  for (int64_t rows : {15, 16, 17, 32, 33})
    for (int64_t cols : {1, 16, 31, 48}) check(DType::kU8, 1, rows, cols, 1);
  // 2-4 planes of 4-byte elements interleaved (a float image to channels-last) per instruction set: AVX-512
  // and AVX2 permutes (whole vectors, the column tail, 4096-column blocks), the baseline's tiles.
  for (CpuIsa isa : {CpuIsa::kAll, CpuIsa::kAvx2, CpuIsa::kBaseline}) {
    SetMaxCpuIsa(isa);
    for (int64_t rows : {2, 3, 4})
      for (int64_t cols : {1, 7, 8, 9, 23, 4096, 4103}) check(DType::kF32, 2, rows, cols, 2);
    check(DType::kF32, 1, 3, 224 * 224, 1);
  }
  SetMaxCpuIsa(CpuIsa::kAll);
}

}  // namespace
}  // namespace cjit
