// Random operators (runtime/cpu/kernels_random.cc): statistics of large samples against the distributions'
// closed-form moments (5 standard errors), reproducibility with a seed across runs and thread counts,
// freshness without one (so the graph passes neither fold nor merge them), and bad parameters.
#include <cmath>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "runtime/session.h"
#include "tests/model_builder.h"

namespace cjit {
namespace {

using testing::ModelBuilder;
constexpr int kF = onnx::TensorProto::FLOAT;

SessionOptions Opts(int threads, const std::string& auto_jit = "-1") {
  SessionOptions o;
  o.use_environment_flags = false;
  o.flags.device = "cpu";
  o.flags.intra_op_threads = threads;
  o.flags.auto_jit = auto_jit;
  return o;
}

std::vector<double> RunOnce(Session& s, const std::vector<NamedTensor>& in = {}, int output = 0) {
  auto out = s.Run(in);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return {};
  return (*out)[output].tensor.ToDoubleVector();
}

std::unique_ptr<Session> Load(const ModelBuilder& b, int threads = 1) {
  auto s = Session::LoadFromBytes(b.Bytes(), Opts(threads));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

double Mean(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / v.size(); }
double Variance(const std::vector<double>& v) {
  double m = Mean(v), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / v.size();
}

// RandomUniform / RandomNormal of `n` values; with a seed when seed >= 0.
ModelBuilder Generator(const char* op, int64_t n, float seed, float a, float b) {
  ModelBuilder m(17);
  m.Output("y");
  auto* node = m.Node(op, {}, {"y"});
  ModelBuilder::AttrInts(node, "shape", {n});
  if (seed >= 0) ModelBuilder::AttrFloat(node, "seed", seed);
  ModelBuilder::AttrFloat(node, std::string(op) == "RandomUniform" ? "low" : "mean", a);
  ModelBuilder::AttrFloat(node, std::string(op) == "RandomUniform" ? "high" : "scale", b);
  return m;
}

TEST(RandomOpsTest, UniformMomentsAndSupport) {
  const int64_t n = 200000;
  auto s = Load(Generator("RandomUniform", n, 3.0f, -2.0f, 6.0f));
  std::vector<double> y = RunOnce(*s);
  ASSERT_EQ(static_cast<int64_t>(y.size()), n);
  for (double v : y) ASSERT_TRUE(v >= -2.0 && v < 6.0) << v;
  const double var = 64.0 / 12;  // (high - low)^2 / 12
  EXPECT_NEAR(Mean(y), 2.0, 5 * std::sqrt(var / n));
  EXPECT_NEAR(Variance(y), var, 0.02 * var);
}

TEST(RandomOpsTest, NormalMoments) {
  const int64_t n = 200000;
  auto s = Load(Generator("RandomNormal", n, 7.0f, 1.5f, 0.5f));
  std::vector<double> y = RunOnce(*s);
  EXPECT_NEAR(Mean(y), 1.5, 5 * 0.5 / std::sqrt(n));
  EXPECT_NEAR(Variance(y), 0.25, 0.02 * 0.25);
  double third = 0;
  for (double v : y) third += std::pow((v - 1.5) / 0.5, 3);
  EXPECT_NEAR(third / n, 0.0, 5 * std::sqrt(15.0 / n));  // skewness 0; Var of z^3 is 15
}

// A seed gives the same values on every run and at every thread count (counter-based generator).
TEST(RandomOpsTest, SeededIsReproducibleAcrossRunsAndThreadCounts) {
  const int64_t n = 300000;  // large enough to be filled in parallel
  auto one = Load(Generator("RandomNormal", n, 42.0f, 0, 1), 1);
  auto two = Load(Generator("RandomNormal", n, 42.0f, 0, 1), 2);
  std::vector<double> a = RunOnce(*one), b = RunOnce(*one), c = RunOnce(*two);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
  auto other = Load(Generator("RandomNormal", n, 43.0f, 0, 1), 1);
  EXPECT_NE(a, RunOnce(*other));
}

// Without a seed every run differs: the node (no inputs, so "all inputs constant") is not folded into a
// constant, and two identical nodes are not merged into one.
TEST(RandomOpsTest, UnseededDiffersPerRunAndPerNode) {
  for (const char* jit : {"-1", "1"}) {
    ModelBuilder m(17);
    m.Output("y").Output("z");
    for (const char* out : {"y", "z"}) {
      auto* node = m.Node("RandomUniform", {}, {out}, out);
      ModelBuilder::AttrInts(node, "shape", {64});
    }
    auto s = Session::LoadFromBytes(m.Bytes(), Opts(1, jit));
    ASSERT_TRUE(s.ok()) << s.status();
    std::vector<double> y1 = RunOnce(**s, {}, 0), z1 = RunOnce(**s, {}, 1), y2 = RunOnce(**s, {}, 0);
    EXPECT_NE(y1, y2) << jit;
    EXPECT_NE(y1, z1) << jit;
  }
}

TEST(RandomOpsTest, BernoulliFrequenciesAndDegenerateProbabilities) {
  const int64_t n = 100000;
  ModelBuilder m(15);
  m.Input("p", kF, {n}).Output("y");
  ModelBuilder::AttrFloat(m.Node("Bernoulli", {"p"}, {"y"}), "seed", 5.0f);
  auto s = Load(m);
  Tensor p(DType::kF32, {n});
  for (int64_t i = 0; i < n; ++i) p.data<float>()[i] = i % 3 == 0 ? 0.0f : i % 3 == 1 ? 1.0f : 0.3f;
  std::vector<double> y = RunOnce(*s, {{"p", p}});
  double ones = 0, middle = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 3 == 0) ASSERT_EQ(y[i], 0.0) << i;
    if (i % 3 == 1) ASSERT_EQ(y[i], 1.0) << i;
    if (i % 3 == 2) {
      ones += y[i];
      ++middle;
    }
  }
  EXPECT_NEAR(ones / middle, 0.3, 5 * std::sqrt(0.21 / middle));
  p.data<float>()[0] = 1.5f;
  auto bad = s->Run({{"p", p}});
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("outside [0, 1]"), std::string::npos) << bad.status();
}

TEST(RandomOpsTest, MultinomialFollowsSoftmax) {
  const int64_t samples = 20000;
  ModelBuilder m(17);
  m.Input("logits", kF, {2, 3}).Output("y");
  auto* node = m.Node("Multinomial", {"logits"}, {"y"});
  ModelBuilder::AttrInt(node, "sample_size", samples);
  ModelBuilder::AttrInt(node, "dtype", onnx::TensorProto::INT64);
  ModelBuilder::AttrFloat(node, "seed", 1.0f);
  auto s = Load(m);
  // Row 0: probabilities 0.2, 0.3, 0.5 (unnormalized log-probabilities: log p + 4); row 1: all on class 2.
  Tensor logits(DType::kF32, {2, 3});
  const float p[3] = {0.2f, 0.3f, 0.5f};
  for (int c = 0; c < 3; ++c) logits.data<float>()[c] = std::log(p[c]) + 4;
  logits.data<float>()[3] = -INFINITY;
  logits.data<float>()[4] = -INFINITY;
  logits.data<float>()[5] = 0;
  auto out = s->Run({{"logits", logits}});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ((*out)[0].tensor.dtype(), DType::kI64);
  ASSERT_EQ((*out)[0].tensor.dims(), (Dims{2, samples}));
  const int64_t* y = (*out)[0].tensor.data<int64_t>();
  double count[3] = {0, 0, 0};
  for (int64_t k = 0; k < samples; ++k) {
    ASSERT_TRUE(y[k] >= 0 && y[k] < 3);
    ++count[y[k]];
    ASSERT_EQ(y[samples + k], 2);
  }
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(count[c] / samples, p[c], 5 * std::sqrt(p[c] * (1 - p[c]) / samples)) << c;
}

TEST(RandomOpsTest, TrainingDropoutKeepsAndScales) {
  const int64_t n = 100000;
  ModelBuilder m(13);
  m.Input("x", kF, {n}).Output("y").Output("mask");
  ModelBuilder::AttrInt(m.Node("Dropout", {"x", "r", "t"}, {"y", "mask"}), "seed", 9);
  m.InitFloats("r", {}, {0.3f});
  m.Init("t", onnx::TensorProto::BOOL, {})->add_int32_data(1);
  auto s = Load(m);
  Tensor x(DType::kF32, {n});
  for (int64_t i = 0; i < n; ++i) x.data<float>()[i] = 1.0f + static_cast<float>(i % 7);
  auto out = s->Run({{"x", x}});
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<double> y = (*out)[0].tensor.ToDoubleVector(), mask = (*out)[1].tensor.ToDoubleVector();
  double kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double scaled = x.data<float>()[i] / 0.7;
    ASSERT_TRUE(mask[i] ? std::abs(y[i] - scaled) < 1e-5 * scaled : y[i] == 0) << i;
    kept += mask[i];
  }
  EXPECT_NEAR(kept / n, 0.7, 5 * std::sqrt(0.21 / n));
}

TEST(RandomOpsTest, BadParametersAreErrors) {
  ModelBuilder neg(17);
  neg.Output("y");
  ModelBuilder::AttrInts(neg.Node("RandomNormal", {}, {"y"}), "shape", {2, -3});
  auto s = Session::LoadFromBytes(neg.Bytes(), Opts(1));
  absl::Status st = s.ok() ? (*s)->Run({}).status() : s.status();
  EXPECT_NE(std::string(st.message()).find("negative dim"), std::string::npos) << st;
  ModelBuilder flipped = Generator("RandomUniform", 4, 1.0f, 2.0f, 1.0f);
  auto u = Session::LoadFromBytes(flipped.Bytes(), Opts(1));
  st = u.ok() ? (*u)->Run({}).status() : u.status();
  EXPECT_NE(std::string(st.message()).find("below low"), std::string::npos) << st;
}

}  // namespace
}  // namespace cjit
