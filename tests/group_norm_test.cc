// The GroupNorm pattern torch.onnx exports (Reshape -> InstanceNormalization -> Reshape -> Mul -> Add) fused
// into one op by the simplification passes, run op by op and compiled, against float64.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ir/text.h"
#include "gtest/gtest.h"
#include "runtime/session.h"
#include "tests/graph_util.h"
#include "tests/model_builder.h"
#include "tests/random_floats.h"
#include "tests/session_options.h"

namespace cjit {
namespace {

using testing::CountOps;
using testing::kOpByOpAndCompiled;
using testing::RunModelBytes;

// GroupNorm as torch.onnx exports it up to opset 17 between two convolutions (unit 1x1 depthwise ones:
// exact): Reshape(a, [0, G, -1]) -> InstanceNormalization(per-group s, b) -> Reshape(.., Shape(a)) -> Mul by
// gamma [C, 1, 1] -> Add beta [C, 1, 1]. x is [1, C, H, 9] with H dynamic.
struct GroupNormModel {
  int64_t C, G;
  std::vector<float> s, b, gamma, beta;
  std::string bytes;
};

GroupNormModel MakeGroupNormModel(int64_t C, int64_t G, unsigned seed) {
  GroupNormModel g{C, G};
  g.s = testing::RandomFloats(static_cast<size_t>(G), seed);
  g.b = testing::RandomFloats(static_cast<size_t>(G), seed + 1);
  g.gamma = testing::RandomFloats(static_cast<size_t>(C), seed + 2);
  g.beta = testing::RandomFloats(static_cast<size_t>(C), seed + 3);
  testing::ModelBuilder m(17);
  m.Input("x", onnx::TensorProto::FLOAT, {1, C, -1, 9}).Output("y");
  m.InitFloats("ones", {C, 1, 1, 1}, std::vector<float>(static_cast<size_t>(C), 1.0f));
  testing::ModelBuilder::AttrInt(m.Node("Conv", {"x", "ones"}, {"a"}), "group", C);
  m.InitInts("grouped", {3}, {0, G, -1});
  m.InitFloats("s", {G}, g.s);
  m.InitFloats("b", {G}, g.b);
  m.InitFloats("gamma", {C, 1, 1}, g.gamma);
  m.InitFloats("beta", {C, 1, 1}, g.beta);
  m.Node("Shape", {"a"}, {"a_shape"});
  m.Node("Reshape", {"a", "grouped"}, {"r"});
  testing::ModelBuilder::AttrFloat(m.Node("InstanceNormalization", {"r", "s", "b"}, {"i"}), "epsilon", 1e-5f);
  m.Node("Reshape", {"i", "a_shape"}, {"z"});
  m.Node("Mul", {"z", "gamma"}, {"zm"});
  m.Node("Add", {"zm", "beta"}, {"za"});
  testing::ModelBuilder::AttrInt(m.Node("Conv", {"za", "ones"}, {"y"}), "group", C);
  g.bytes = m.Bytes();
  return g;
}

// The model's output on x [1, C, H, W] in float64: each sample's C*H*W values in G contiguous parts.
std::vector<double> ReferenceGroupNorm(const GroupNormModel& g, const Tensor& x) {
  const int64_t total = x.numel(), per = total / g.G, plane = total / g.C;
  std::vector<double> y(static_cast<size_t>(total));
  for (int64_t k = 0; k < g.G; ++k) {
    double mean = 0, var = 0;
    for (int64_t i = k * per; i < (k + 1) * per; ++i) mean += x.data<float>()[i];
    mean /= per;
    for (int64_t i = k * per; i < (k + 1) * per; ++i) var += (x.data<float>()[i] - mean) * (x.data<float>()[i] - mean);
    var /= per;
    for (int64_t i = k * per; i < (k + 1) * per; ++i) {
      const int64_t c = i / plane;
      const double v = (x.data<float>()[i] - mean) / std::sqrt(var + 1e-5) * g.s[k] + g.b[k];
      y[i] = v * g.gamma[c] + g.beta[c];
    }
  }
  return y;
}

// The pattern is one op (simplify.h FuseGroupNormalization); where the groups are whole channels the
// channels-last pass moves it (NhwcGroupNorm) and the convolutions around it stay channels-last; where not
// (6 channels in 4 groups) it runs channels-first. Both against float64, op by op and compiled, at 2
// threads (the 64 x 512 x 9 case splits positions over them), over three heights in one session (the
// later ones replayed, verified against a full specialization).
TEST(GroupNormTest, TorchGroupNormPatternMatchesFloat64) {
  struct Case {
    int64_t C, G;
    std::vector<int64_t> heights;
    const char* op;
  };
  const Case cases[] = {{8, 4, {6, 10, 3}, "NhwcGroupNorm"}, {64, 8, {512, 40, 7}, "NhwcGroupNorm"},
                        {6, 4, {6, 10, 2}, "FlatGroupNorm"}};
  unsigned seed = 300;
  for (const Case& c : cases) {
    const GroupNormModel g = MakeGroupNormModel(c.C, c.G, seed);
    seed += 4;
    for (const char* mode : kOpByOpAndCompiled) {
      auto o = testing::OptionsWithFlags(absl::StrCat("--device=cpu --intra_op_threads=2 --autotune_level=0 ",
                                                      "--specialization_replay=verify ", mode));
      ASSERT_TRUE(o.ok()) << o.status();
      auto s = Session::LoadFromBytes(g.bytes, *o);
      ASSERT_TRUE(s.ok()) << s.status();
      for (int64_t h : c.heights) {
        Tensor x(DType::kF32, {1, c.C, h, 9});
        const std::vector<float> xv = testing::RandomFloats(static_cast<size_t>(x.numel()), seed++);
        std::copy(xv.begin(), xv.end(), x.data<float>());
        auto out = (*s)->Run({{"x", x}});
        ASSERT_TRUE(out.ok()) << out.status();
        const Tensor& y = (*out)[0].tensor;
        const std::vector<double> want = ReferenceGroupNorm(g, x);
        ASSERT_EQ(y.numel(), static_cast<int64_t>(want.size()));
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_NEAR(y.data<float>()[i], want[i], 2e-5 * (1.0 + std::abs(want[i])))
              << "C " << c.C << " G " << c.G << " H " << h << " at " << i << ", " << mode;
        }
      }
      EXPECT_GE((*s)->stats().specialization_replays, 1) << mode;
      Tensor x(DType::kF32, {1, c.C, c.heights[0], 9});
      auto graph = (*s)->SpecializeAndCluster({{"x", x}}, nullptr);
      ASSERT_TRUE(graph.ok()) << graph.status();
      int fused = 0, instance_norms = 0;
      std::function<void(const Graph&)> count = [&](const Graph& sub) {
        fused += CountOps(sub, c.op);
        instance_norms += CountOps(sub, "InstanceNormalization");
        for (const auto& n : sub.nodes()) {
          if (const Graph* body = n->GetGraph("body")) count(*body);
        }
      };
      count(**graph);
      EXPECT_EQ(fused, 1) << c.op << "\n" << PrintGraph(**graph);
      EXPECT_EQ(instance_norms, 0) << PrintGraph(**graph);
    }
  }
}

}  // namespace
}  // namespace cjit
