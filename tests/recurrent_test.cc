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

// Bidirectional LSTM and RNN (the float32 path: projections in one GEMM, vector logistic / tanh, the two
// directions on two threads) against float64 formulas, with random weights and biases, initial states,
// sequence_lens shorter than the sequence for one batch entry (steps past it are zero in Y), layout 0
// and 1, hidden size 37 (vector tails) and a long sequence (enough work for two threads).
struct RecurrentCase {
  std::string op;  // "LSTM" or "RNN"
  int layout;
};

class RecurrentF32Test : public ::testing::TestWithParam<RecurrentCase> {};

TEST_P(RecurrentF32Test, BidirectionalMatchesFloat64Reference) {
  const RecurrentCase c = GetParam();
  const bool lstm = c.op == "LSTM";
  const int S = 200, B = 2, I = 5, H = 37, G = lstm ? 4 : 1, nd = 2;  // LSTM: 2.2M multiply-adds, 2 threads
  auto dims = [&](Dims seq_major) {  // [S, B, ..] / [nd, B, H] -> batch-major with layout = 1
    if (c.layout == 0) return seq_major;
    std::swap(seq_major[0], seq_major[1]);
    return seq_major;
  };
  const Dims xd = dims({S, B, I}), hd = dims({nd, B, H});
  auto ir_dims = [](const Dims& d) {
    std::string s;
    for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
    return s;
  };
  std::string ir = "graph g(%x: f32[" + ir_dims(xd) + "], %w: f32[2," + std::to_string(G * H) + ",5], %r: f32[2," +
                   std::to_string(G * H) + ",37], %b: f32[2," + std::to_string(2 * G * H) + "], %len: i32[2], %h0: f32[" +
                   ir_dims(hd) + "]" + (lstm ? ", %c0: f32[" + ir_dims(hd) + "]" : "") + ") {\n  %y, %yh" +
                   (lstm ? ", %yc" : "") + " = " + c.op + "(%x, %w, %r, %b, %len, %h0" + (lstm ? ", %c0" : "") +
                   ") {hidden_size=37, direction=\"bidirectional\", layout=" + std::to_string(c.layout) +
                   "}\n  return %y, %yh" + (lstm ? ", %yc" : "") + "\n}";
  auto parsed = ParseGraph(ir);
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << ir;
  std::shared_ptr<Graph> g(std::move(*parsed));
  std::vector<Dims> in_dims = {xd, {nd, G * H, I}, {nd, G * H, H}, {nd, 2 * G * H}, {B}, hd};
  if (lstm) in_dims.push_back(hd);
  auto eval = [](const Node& n, const std::vector<const Tensor*>& in) { return EvaluateNode(n, in, 1); };
  ASSERT_TRUE(SpecializeShapes(*g, in_dims, eval).ok());
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-0.6f, 0.6f);
  auto rnd = [&](Dims d) {
    Tensor t(DType::kF32, d);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
    return t;
  };
  Tensor len(DType::kI32, {B});
  len.data<int32_t>()[0] = S;
  len.data<int32_t>()[1] = S - 83;
  // R scaled to a contraction (as trained recurrences are): float32 rounding is not amplified over 70 steps.
  Tensor rw = rnd({nd, G * H, H});
  for (int64_t i = 0; i < rw.numel(); ++i) rw.data<float>()[i] *= 0.25f;
  std::vector<Tensor> inputs = {rnd(xd), rnd({nd, G * H, I}), rw, rnd({nd, 2 * G * H}), len, rnd(hd)};
  if (lstm) inputs.push_back(rnd(hd));
  auto ex = Executor::Create(g, ExecutorOptions{2, nullptr, true});
  ASSERT_TRUE(ex.ok());
  auto out = (*ex)->Run(inputs);
  ASSERT_TRUE(out.ok()) << out.status();
  auto at = [&](const Tensor& t, int64_t seq, int64_t bat, int64_t k, int64_t inner) {  // seq-major index
    return c.layout == 0 ? t.data<float>()[(seq * B + bat) * inner + k] : t.data<float>()[(bat * (t.dim(1)) + seq) * inner + k];
  };
  const Tensor &x = inputs[0], &w = inputs[1], &r = inputs[2], &bias = inputs[3], &h0 = inputs[5];
  for (int d = 0; d < nd; ++d) {
    for (int b = 0; b < B; ++b) {
      const int n = len.data<int32_t>()[b];
      std::vector<double> h(H), cs(H, 0.0);
      for (int k = 0; k < H; ++k) {
        h[k] = at(h0, d, b, k, H);
        if (lstm) cs[k] = at(inputs[6], d, b, k, H);
      }
      auto pre = [&](int row, int t) {  // x W^T + Wb + h R^T + Rb for gate row `row`
        double s = bias.data<float>()[d * 2 * G * H + row] + bias.data<float>()[d * 2 * G * H + G * H + row];
        for (int i = 0; i < I; ++i) s += w.data<float>()[(d * G * H + row) * I + i] * at(x, t, b, i, I);
        for (int j = 0; j < H; ++j) s += r.data<float>()[(d * G * H + row) * H + j] * h[j];
        return s;
      };
      for (int step = 0; step < S; ++step) {
        const int t = d == 0 ? step : n - 1 - step;
        if (step < n) {
          std::vector<double> hn(H), cn(H);
          for (int k = 0; k < H; ++k) {
            if (lstm) {  // gates i, o, f, c
              const double ig = Sigmoid(pre(k, t)), og = Sigmoid(pre(H + k, t)), fg = Sigmoid(pre(2 * H + k, t));
              cn[k] = fg * cs[k] + ig * std::tanh(pre(3 * H + k, t));
              hn[k] = og * std::tanh(cn[k]);
            } else {
              hn[k] = std::tanh(pre(k, t));
            }
          }
          h = hn;
          cs = cn;
        }
        const int64_t ty = step < n ? t : step;  // past sequence_lens: zeros, at their own step
        for (int k = 0; k < H; ++k) {
          const Tensor& y = (*out)[0];  // [S, nd, B, H] / [B, S, nd, H]
          const float got = c.layout == 0 ? y.data<float>()[((ty * nd + d) * B + b) * H + k]
                                          : y.data<float>()[((b * S + ty) * nd + d) * H + k];
          ASSERT_NEAR(got, step < n ? h[k] : 0.0, 2e-5) << c.op << " d=" << d << " b=" << b << " t=" << ty;
        }
      }
      for (int k = 0; k < H; ++k) {
        EXPECT_NEAR(at((*out)[1], d, b, k, H), h[k], 2e-5) << c.op << " Y_h d=" << d << " b=" << b;
        if (lstm) EXPECT_NEAR(at((*out)[2], d, b, k, H), cs[k], 2e-5) << "Y_c d=" << d << " b=" << b;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, RecurrentF32Test,
                         ::testing::Values(RecurrentCase{"LSTM", 0}, RecurrentCase{"LSTM", 1}, RecurrentCase{"RNN", 0},
                                           RecurrentCase{"RNN", 1}),
                         [](const ::testing::TestParamInfo<RecurrentCase>& i) {
                           return i.param.op + "_layout" + std::to_string(i.param.layout);
                         });

}  // namespace
}  // namespace cjit
