// Graph simplification passes: textual IR in, checked text and float64-checked numbers out.
#include "compiler/passes/simplify.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "compiler/ir/text.h"
#include "compiler/passes/specialize_shapes.h"
#include "gtest/gtest.h"
#include "runtime/cpu/kernel.h"
#include "runtime/executor.h"
#include "tests/graph_util.h"
#include "tools/check_lib.h"

namespace cjit {
namespace {

using testing::RunGraph;
using testing::Specialized;

// Div by a scalar 2^k becomes Mul by 2^-k (bit-identical for every input); other divisors stay.
TEST(DivisionByPowerOfTwoTest, OnlyExactReciprocals) {
  auto g = Specialized(R"(graph g(%x: f32[6]) {
  %eight = constant f32[] {8}
  %three = constant f32[] {3}
  %tiny = constant f32[] {7.346839692639297e-40}
  %a = Div(%x, %eight)
  %b = Div(%x, %three)
  %c = Div(%x, %tiny)
  return %a, %b, %c
})");
  ASSERT_NE(g, nullptr);
  Tensor x(DType::kF32, {6});
  const float vals[6] = {1.0f, -3.5f, 1e-40f, std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN(), 3.4e38f};
  for (int i = 0; i < 6; ++i) x.data<float>()[i] = vals[i];
  std::vector<Tensor> before = RunGraph(g, {x});
  auto changed = DivisionByPowerOfTwoToMultiplication(*g);
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  const std::string text = PrintGraph(*g);
  EXPECT_NE(text.find("Mul(%x"), std::string::npos) << text;
  EXPECT_EQ(text.find("Div(%x, %eight)"), std::string::npos) << text;
  EXPECT_NE(text.find("Div(%x, %three)"), std::string::npos) << text;
  EXPECT_NE(text.find("Div(%x, %tiny)"), std::string::npos) << text << ": 1 / 2^-130 is not a finite float";
  std::vector<Tensor> after = RunGraph(g, {x});
  ASSERT_EQ(after.size(), 3u);
  for (int k = 0; k < 3; ++k) EXPECT_TRUE(after[k].BitwiseEquals(before[k])) << "output " << k;
}

TEST(RemoveNoOpsTest, RemovesIdentityChains) {
  auto g = Specialized(R"(graph g(%x: f32[2,3]) {
  %a = Identity(%x)
  %b = Cast(%a) {to=1}
  %c = Transpose(%b) {perm=[1,0]}
  %d = Transpose(%c) {perm=[1,0]}
  %e = Dropout(%d)
  %f = Relu(%e)
  return %f
})");
  auto changed = RemoveNoOps(*g);
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  std::string text = PrintGraph(*g);
  EXPECT_NE(text.find("Relu(%x)"), std::string::npos) << text;
  EXPECT_EQ(text.find("Identity"), std::string::npos) << text;
  EXPECT_EQ(text.find("Transpose"), std::string::npos) << text;
  EXPECT_EQ(text.find("Dropout"), std::string::npos) << text;
}

TEST(RemoveNoOpsTest, KeepsRealReshapesAndTransposes) {
  auto g = Specialized(R"(graph g(%x: f32[2,3]) {
  %s = constant i64[1] {6}
  %a = Reshape(%x, %s)
  %t = Transpose(%x) {perm=[1,0]}
  return %a, %t
})");
  auto changed = RemoveNoOps(*g);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed) << PrintGraph(*g);
}

// Conv 2->3 channels (1x1 kernel), then BatchNormalization, Mul by a per-channel constant, and Add: the
// graph text with input type `x_type`, ending in `tail` (which returns).
std::string ConvBnMulAddIr(const std::string& x_type, const std::string& tail) {
  return "graph g(%x: " + x_type + R"() {
  %w = constant f32[3,2,1,1] {0.5, -1, 2, 0.25, -0.75, 1.5}
  %b = constant f32[3] {0.1, -0.2, 0.3}
  %c = Conv(%x, %w, %b)
  %gam = constant f32[3] {1.5, 0.5, -2}
  %bet = constant f32[3] {0, 1, -1}
  %mu = constant f32[3] {0.2, -0.1, 0.05}
  %var = constant f32[3] {1, 4, 0.25}
  %bn = BatchNormalization(%c, %gam, %bet, %mu, %var) {epsilon=0.001}
  %k = constant f32[3,1,1] {2, 3, 4}
  %m = Mul(%bn, %k)
  %t = constant f32[1,3,1,1] {-1, 0, 1}
  %y = Add(%m, %t)
)" + tail + "}";
}

// Float64 value at channel c, position p of that chain (its constants), for x of [1, 2, 2, 2].
double ConvBnMulAddReference(const Tensor& x, int c, int p) {
  const double w[3][2] = {{0.5, -1}, {2, 0.25}, {-0.75, 1.5}}, b[3] = {0.1, -0.2, 0.3};
  const double gam[3] = {1.5, 0.5, -2}, bet[3] = {0, 1, -1}, mu[3] = {0.2, -0.1, 0.05}, var[3] = {1, 4, 0.25};
  const double k[3] = {2, 3, 4}, t[3] = {-1, 0, 1};
  double conv = b[c];
  for (int ic = 0; ic < 2; ++ic) conv += w[c][ic] * x.data<float>()[ic * 4 + p];
  return ((conv - mu[c]) / std::sqrt(var[c] + 0.001) * gam[c] + bet[c]) * k[c] + t[c];
}

TEST(FoldIntoConvTest, BatchNormAndChannelMulAddFoldAndMatchFloat64) {
  std::string ir = ConvBnMulAddIr("f32[1,2,2,2]", "  return %y\n");
  auto g = Specialized(ir);
  Tensor x(DType::kF32, {1, 2, 2, 2});
  for (int i = 0; i < 8; ++i) x.data<float>()[i] = static_cast<float>(std::sin(i + 1.0));
  std::vector<Tensor> before = RunGraph(std::shared_ptr<Graph>(g->Clone()), {x});
  auto changed = FoldIntoConv(*g);
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  std::string text = PrintGraph(*g);
  EXPECT_EQ(text.find("BatchNormalization"), std::string::npos) << text;
  EXPECT_EQ(text.find("Mul"), std::string::npos) << text;
  EXPECT_EQ(text.find("Add"), std::string::npos) << text;
  std::vector<Tensor> after = RunGraph(g, {x});
  for (int c = 0; c < 3; ++c)
    for (int p = 0; p < 4; ++p) {
      double ref = ConvBnMulAddReference(x, c, p);
      EXPECT_NEAR(after[0].data<float>()[c * 4 + p], ref, 1e-5);
      EXPECT_NEAR(before[0].data<float>()[c * 4 + p], ref, 1e-5);
    }
}

// BatchNormalization after a grouped ConvTranspose folds into its weights (W [C, OC/group, k..]: output
// channel (c / (C/group)) * (OC/group) + j for W[c, j]); the folded graph computes what BatchNormalization
// computed op by op.
TEST(FoldIntoConvTest, BatchNormFoldsIntoGroupedConvTranspose) {
  std::string ir = R"(graph g(%x: f32[1,4,2,3]) {
  %w = constant f32[4,3,2,2] {0.5, -1, 2, 0.25, -0.75, 1.5, 0.1, 0.2, -0.3, 0.4, 0.5, -0.6, 1, 2, 3, 4, -1, -2, -3, -4, 0.5, 0.25, 0.125, 0.0625, 1, -1, 1, -1, 2, -2, 2, -2, 3, -3, 3, -3, 0.3, 0.6, 0.9, 1.2, -0.1, -0.2, -0.3, -0.4, 0.7, 0.8, 0.9, 1.0}
  %b = constant f32[6] {0.1, -0.2, 0.3, -0.4, 0.5, -0.6}
  %c = ConvTranspose(%x, %w, %b) {group=2, strides=[2,2]}
  %gam = constant f32[6] {1.5, 0.5, -2, 1, 0.25, 3}
  %bet = constant f32[6] {0, 1, -1, 2, -2, 0.5}
  %mu = constant f32[6] {0.2, -0.1, 0.05, 0, 1, -1}
  %var = constant f32[6] {1, 4, 0.25, 2, 0.5, 9}
  %y = BatchNormalization(%c, %gam, %bet, %mu, %var) {epsilon=0.001}
  return %y
})";
  auto g = Specialized(ir);
  Tensor x(DType::kF32, {1, 4, 2, 3});
  for (int i = 0; i < 24; ++i) x.data<float>()[i] = static_cast<float>(std::sin(i + 1.0));
  std::vector<Tensor> before = RunGraph(std::shared_ptr<Graph>(g->Clone()), {x});
  auto changed = FoldIntoConv(*g);
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  std::string text = PrintGraph(*g);
  EXPECT_EQ(text.find("BatchNormalization"), std::string::npos) << text;
  std::vector<Tensor> after = RunGraph(g, {x});
  ASSERT_EQ(after.size(), 1u);
  ASSERT_EQ(after[0].numel(), before[0].numel());
  for (int64_t i = 0; i < after[0].numel(); ++i) {
    EXPECT_NEAR(after[0].data<float>()[i], before[0].data<float>()[i], 1e-4) << i;
  }
}

// Before specialization (unknown dims), the folds still happen — they need only the weight's rank — so
// a Session folds once at load; the folded graph, specialized afterwards, computes the float64 result.
// Operands that are not per-channel, or of higher rank than the Conv output, are left alone.
TEST(FoldIntoConvTest, FoldsBeforeSpecializationWithUnknownDims) {
  std::string ir = ConvBnMulAddIr("f32[?,2,?,?]", R"(  %wide = constant f32[1,1,3,1,1] {1, 2, 3}
  %z = Mul(%y, %wide)
  return %z
)");
  auto g = ParseGraph(ir);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(SimplifyBeforeSpecialization(**g).ok());
  std::string text = PrintGraph(**g);
  EXPECT_EQ(text.find("BatchNormalization"), std::string::npos) << text;
  EXPECT_EQ(text.find("Add"), std::string::npos) << text;
  // The rank-5 Mul broadcasts the rank-4 Conv output to rank 5: not a per-channel scale; it stays.
  EXPECT_NE(text.find("Mul"), std::string::npos) << text;
  // Specialize for x = [1, 2, 2, 2] and compare with float64 math.
  auto ex_graph = std::shared_ptr<Graph>(std::move(*g));
  std::vector<Dims> dims = {{1, 2, 2, 2}};
  ASSERT_TRUE(SpecializeShapes(*ex_graph, dims, [](const Node& n, const std::vector<const Tensor*>& a) {
                return EvaluateNode(n, a, 1);
              }).ok());
  Tensor x(DType::kF32, {1, 2, 2, 2});
  for (int i = 0; i < 8; ++i) x.data<float>()[i] = static_cast<float>(std::sin(i + 1.0));
  std::vector<Tensor> after = RunGraph(ex_graph, {x});
  const double wide[3] = {1, 2, 3};
  ASSERT_EQ(after[0].dims(), (Dims{1, 1, 3, 2, 2}));
  for (int c = 0; c < 3; ++c)
    for (int p = 0; p < 4; ++p)
      EXPECT_NEAR(after[0].data<float>()[c * 4 + p], ConvBnMulAddReference(x, c, p) * wide[c], 1e-5);
}

TEST(FoldIntoConvTest, DoesNotFoldWhenConvOutputHasOtherReaders) {
  auto g = Specialized(R"(graph g(%x: f32[1,1,2,2]) {
  %w = constant f32[1,1,1,1] {2}
  %c = Conv(%x, %w)
  %k = constant f32[] {3}
  %m = Mul(%c, %k)
  %r = Relu(%c)
  return %m, %r
})");
  auto changed = FoldIntoConv(*g);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
}

TEST(CseTest, MergesIdenticalNodes) {
  auto g = Specialized(R"(graph g(%x: f32[4]) {
  %a = Exp(%x)
  %b = Exp(%x)
  %c = Add(%a, %b)
  %d = LeakyRelu(%x) {alpha=0.1}
  %e = LeakyRelu(%x) {alpha=0.2}
  %f = Add(%d, %e)
  return %c, %f
})");
  auto changed = EliminateCommonSubexpressions(*g);
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  std::string text = PrintGraph(*g);
  EXPECT_EQ(text.find("Exp(%x)"), text.rfind("Exp(%x)")) << "one Exp left:\n" << text;
  EXPECT_NE(text.find("alpha=0.1"), std::string::npos) << text;
  EXPECT_NE(text.find("alpha=0.2"), std::string::npos) << "different attributes must not merge\n" << text;
}

}  // namespace
}  // namespace cjit
