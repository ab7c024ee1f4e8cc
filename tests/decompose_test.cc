// DecomposeLayerNormalization (compiler/passes/decompose.h): textual IR in, checked text out, and the
// rewritten graph's numbers against LayerNormalization computed here in float64 (the ONNX definition).
#include "compiler/passes/decompose.h"

#include <cmath>
#include <random>

#include "compiler/ir/text.h"
#include "compiler/ir/verifier.h"
#include "gtest/gtest.h"
#include "runtime/executor.h"
#include "tests/graph_util.h"
#include "tools/check_lib.h"

namespace cjit {
namespace {

using testing::RunGraph;
using testing::Specialized;

TEST(DecomposeLayerNormalizationTest, FunctionBodyMatchesFloat64) {
  // axis = 1 of a rank-3 input: the normalized dims are [3, 4]; scale and bias broadcast from [4].
  auto g = Specialized(R"(graph g(%x: f32[2,3,4]) {
  %s = constant f32[4] {0.5, -1, 2, 1.5}
  %b = constant f32[4] {0.25, 0, -3, 1}
  %y = LayerNormalization(%x, %s, %b) {axis=1, epsilon=0.01}
  return %y
})");
  ASSERT_NE(g, nullptr);
  auto changed = DecomposeLayerNormalization(*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  ASSERT_TRUE(VerifyGraph(*g).ok());
  const std::string text = PrintGraph(*g);
  EXPECT_EQ(text.find("LayerNormalization("), std::string::npos) << text;
  EXPECT_NE(text.find("ReduceMean("), std::string::npos) << text;
  EXPECT_NE(text.find("axes=[1,2]"), std::string::npos) << text;
  EXPECT_NE(text.find("Sqrt("), std::string::npos) << text;
  Tensor x(DType::kF32, {2, 3, 4});
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-4, 4);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
  std::vector<Tensor> out = RunGraph(g, {x});
  ASSERT_EQ(out.size(), 1u);
  const double s[4] = {0.5, -1, 2, 1.5}, b[4] = {0.25, 0, -3, 1};
  for (int o = 0; o < 2; ++o) {
    const float* px = x.data<float>() + o * 12;
    double mean = 0, var = 0;
    for (int i = 0; i < 12; ++i) mean += px[i];
    mean /= 12;
    for (int i = 0; i < 12; ++i) var += (px[i] - mean) * (px[i] - mean);
    var /= 12;
    for (int i = 0; i < 12; ++i) {
      double ref = (px[i] - mean) / std::sqrt(var + 0.01) * s[i % 4] + b[i % 4];
      EXPECT_NEAR(out[0].data<float>()[o * 12 + i], ref, 1e-5 * (1 + std::abs(ref))) << o << "," << i;
    }
  }
}

TEST(DecomposeLayerNormalizationTest, KeepsNodesItCannotRewrite) {
  // The Mean output is read; a float64 input; stash_type 0 (double statistics): all stay.
  auto g = Specialized(R"(graph g(%x: f32[2,4], %d: f64[2,4]) {
  %s = constant f32[4] {1, 1, 1, 1}
  %sd = constant f64[4] {1, 1, 1, 1}
  %y, %m = LayerNormalization(%x, %s)
  %z = LayerNormalization(%d, %sd)
  %w = LayerNormalization(%x, %s) {stash_type=0}
  return %y, %m, %z, %w
})");
  ASSERT_NE(g, nullptr);
  auto changed = DecomposeLayerNormalization(*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed) << PrintGraph(*g);
}

}  // namespace
}  // namespace cjit
