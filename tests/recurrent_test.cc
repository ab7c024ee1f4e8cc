// GRU against a float64 reference of the ONNX formulas, with random (non-uniform) weights — the
// conformance data uses constant weights, which cannot tell r_t (.) H_{t-1} from other orderings.
#include <cmath>
#include <random>

#include "compiler/ir/text.h"
#include "compiler/passes/specialize_shapes.h"
#include "gtest/gtest.h"
#include "runtime/cpu/kernel.h"
#include "runtime/executor.h"

namespace cjit {
namespace {

double Sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

class GruTest : public ::testing::TestWithParam<int> {};

TEST_P(GruTest, MatchesFloat64Reference) {
  const int lbr = GetParam();
  const int S = 3, B = 2, I = 3, H = 4;
  std::string ir = "graph g(%x: f32[3,2,3], %w: f32[1,12,3], %r: f32[1,12,4], %b: f32[1,24]) {\n"
                   "  %y, %yh = GRU(%x, %w, %r, %b) {hidden_size=4, linear_before_reset=" + std::to_string(lbr) +
                   "}\n  return %y, %yh\n}";
  auto parsed = ParseGraph(ir);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  std::shared_ptr<Graph> g(std::move(*parsed));
  auto eval = [](const Node& n, const std::vector<const Tensor*>& in) { return EvaluateNode(n, in, 1); };
  ASSERT_TRUE(SpecializeShapes(*g, {{S, B, I}, {1, 3 * H, I}, {1, 3 * H, H}, {1, 6 * H}}, eval).ok());
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  auto rnd = [&](Dims d) {
    Tensor t(DType::kF32, d);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
    return t;
  };
  Tensor x = rnd({S, B, I}), w = rnd({1, 3 * H, I}), r = rnd({1, 3 * H, H}), b = rnd({1, 6 * H});
  auto ex = Executor::Create(g, ExecutorOptions{1, nullptr, true});
  ASSERT_TRUE(ex.ok());
  auto out = (*ex)->Run({x, w, r, b});
  ASSERT_TRUE(out.ok()) << out.status();
  // Reference (gates z, r, h; weights [3H, I] / [3H, H]; bias Wb then Rb).
  const float* W = w.data<float>();
  const float* R = r.data<float>();
  const float* Bv = b.data<float>();
  for (int bi = 0; bi < B; ++bi) {
    std::vector<double> h(H, 0.0);
    for (int t = 0; t < S; ++t) {
      const float* xt = x.data<float>() + (t * B + bi) * I;
      auto xw = [&](int row) {
        double s = Bv[row];
        for (int i = 0; i < I; ++i) s += W[row * I + i] * xt[i];
        return s;
      };
      auto hr = [&](int row, const std::vector<double>& v) {
        double s = Bv[3 * H + row];
        for (int j = 0; j < H; ++j) s += R[row * H + j] * v[j];
        return s;
      };
      std::vector<double> z(H), rg(H), hn(H);
      for (int k = 0; k < H; ++k) {
        z[k] = Sigmoid(xw(k) + hr(k, h));
        rg[k] = Sigmoid(xw(H + k) + hr(H + k, h));
      }
      for (int k = 0; k < H; ++k) {
        double hh;
        if (lbr) {
          hh = std::tanh(xw(2 * H + k) + rg[k] * hr(2 * H + k, h));
        } else {
          std::vector<double> rh(H);
          for (int j = 0; j < H; ++j) rh[j] = rg[j] * h[j];
          hh = std::tanh(xw(2 * H + k) + hr(2 * H + k, rh));
        }
        hn[k] = (1 - z[k]) * hh + z[k] * h[k];
      }
      h = hn;
      for (int k = 0; k < H; ++k) {
        EXPECT_NEAR((*out)[0].data<float>()[(t * B + bi) * H + k], h[k], 1e-5) << "t=" << t << " b=" << bi;
      }
    }
    for (int k = 0; k < H; ++k) EXPECT_NEAR((*out)[1].data<float>()[bi * H + k], h[k], 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(LinearBeforeReset, GruTest, ::testing::Values(0, 1));

}  // namespace
}  // namespace cjit
