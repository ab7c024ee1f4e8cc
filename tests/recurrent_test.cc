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

// A float32 tensor of `dims` uniform in [-bound, bound).
Tensor Uniform(std::mt19937& rng, float bound, const Dims& dims) {
  std::uniform_real_distribution<float> u(-bound, bound);
  Tensor t(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

// Rounds each value to what IrConstant prints (6 decimals), so that the tensors the reference reads are
// exactly the graph's constants.
void RoundAsIrText(std::initializer_list<Tensor*> tensors) {
  for (Tensor* t : tensors) {
    for (int64_t i = 0; i < t->numel(); ++i) t->data<float>()[i] = std::stof(std::to_string(t->data<float>()[i]));
  }
}

std::string IrConstant(const std::string& name, const Tensor& t) {
  std::string dims, values;
  for (int i = 0; i < t.rank(); ++i) dims += (i ? "," : "") + std::to_string(t.dim(i));
  for (int64_t i = 0; i < t.numel(); ++i) values += (i ? ", " : "") + std::to_string(t.data<float>()[i]);
  return "  %" + name + " = constant f32[" + dims + "] {" + values + "}\n";
}

// Parameters: linear_before_reset; constant weights (hidden size 8: the packed panels on AVX-512, the
// hidden-gate rows a separate product without linear_before_reset) or graph inputs (hidden size 4).
class GruTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(GruTest, MatchesFloat64Reference) {
  const auto [lbr, constant] = GetParam();
  const int S = 3, B = 2, I = 3, H = constant ? 8 : 4;
  std::mt19937 rng(7);
  auto rnd = [&](const Dims& d) { return Uniform(rng, 1.0f, d); };
  Tensor x = rnd({S, B, I}), w = rnd({1, 3 * H, I}), r = rnd({1, 3 * H, H}), b = rnd({1, 6 * H});
  if (constant) RoundAsIrText({&w, &r, &b});
  const std::string h3 = std::to_string(3 * H);
  std::string ir = "graph g(%x: f32[3,2,3]" +
                   (constant ? std::string() : ", %w: f32[1," + h3 + ",3], %r: f32[1," + h3 + "," + std::to_string(H) +
                                                   "], %b: f32[1," + std::to_string(6 * H) + "]") +
                   ") {\n" + (constant ? IrConstant("w", w) + IrConstant("r", r) + IrConstant("b", b) : "") +
                   "  %y, %yh = GRU(%x, %w, %r, %b) {hidden_size=" + std::to_string(H) +
                   ", linear_before_reset=" + std::to_string(lbr) + "}\n  return %y, %yh\n}";
  auto parsed = ParseGraph(ir);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  std::shared_ptr<Graph> g(std::move(*parsed));
  auto eval = [](const Node& n, const std::vector<const Tensor*>& in) { return EvaluateNode(n, in, 1); };
  std::vector<Dims> in_dims = {{S, B, I}};
  if (!constant) in_dims.insert(in_dims.end(), {{1, 3 * H, I}, {1, 3 * H, H}, {1, 6 * H}});
  ASSERT_TRUE(SpecializeShapes(*g, in_dims, eval).ok());
  auto ex = Executor::Create(g, ExecutorOptions{1, nullptr, true});
  ASSERT_TRUE(ex.ok());
  auto out = constant ? (*ex)->Run({x}) : (*ex)->Run({x, w, r, b});
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

INSTANTIATE_TEST_SUITE_P(LinearBeforeReset, GruTest, ::testing::Combine(::testing::Values(0, 1), ::testing::Bool()));

// Bidirectional LSTM and RNN (the float32 path: projections in one GEMM, vector logistic / tanh, the two
// directions on two threads) against float64 formulas, with random weights and biases, initial states,
// sequence_lens shorter than the sequence for one batch entry (steps past it are zero in Y), layout 0
// and 1; weights as graph inputs (BLIS / Eigen; hidden size 37: vector tails) or constants (hidden size
// 40: the packed panels of the pointwise convolutions' loop on AVX-512), 200 steps.
struct RecurrentCase {
  std::string op;  // "LSTM" or "RNN"
  int layout;
  bool constant_weights;
};

class RecurrentF32Test : public ::testing::TestWithParam<RecurrentCase> {};

TEST_P(RecurrentF32Test, BidirectionalMatchesFloat64Reference) {
  const RecurrentCase c = GetParam();
  const bool lstm = c.op == "LSTM";
  const int S = 200, B = 2, I = 5, H = c.constant_weights ? 40 : 37, G = lstm ? 4 : 1, nd = 2;
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
  std::mt19937 rng(11);
  auto rnd = [&](const Dims& d) { return Uniform(rng, 0.6f, d); };
  Tensor len(DType::kI32, {B});
  len.data<int32_t>()[0] = S;
  len.data<int32_t>()[1] = S - 83;
  // R scaled to a contraction (as trained recurrences are): float32 rounding is not amplified over 200 steps.
  Tensor w = rnd({nd, G * H, I}), r = rnd({nd, G * H, H}), bias = rnd({nd, 2 * G * H});
  for (int64_t i = 0; i < r.numel(); ++i) r.data<float>()[i] *= 0.25f;
  if (c.constant_weights) RoundAsIrText({&w, &r, &bias});
  const Tensor x = rnd(xd), h0 = rnd(hd), c0 = rnd(hd);
  const std::string weights = c.constant_weights ? "" : ", %w: f32[2," + std::to_string(G * H) + ",5], %r: f32[2," +
                                                            std::to_string(G * H) + "," + std::to_string(H) +
                                                            "], %b: f32[2," + std::to_string(2 * G * H) + "]";
  std::string ir = "graph g(%x: f32[" + ir_dims(xd) + "]" + weights + ", %len: i32[2], %h0: f32[" + ir_dims(hd) + "]" +
                   (lstm ? ", %c0: f32[" + ir_dims(hd) + "]" : "") + ") {\n" +
                   (c.constant_weights ? IrConstant("w", w) + IrConstant("r", r) + IrConstant("b", bias) : "") +
                   "  %y, %yh" + (lstm ? ", %yc" : "") + " = " + c.op + "(%x, %w, %r, %b, %len, %h0" +
                   (lstm ? ", %c0" : "") + ") {hidden_size=" + std::to_string(H) +
                   ", direction=\"bidirectional\", layout=" + std::to_string(c.layout) + "}\n  return %y, %yh" +
                   (lstm ? ", %yc" : "") + "\n}";
  auto parsed = ParseGraph(ir);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  std::shared_ptr<Graph> g(std::move(*parsed));
  std::vector<Dims> in_dims = {xd};
  std::vector<Tensor> inputs = {x};
  if (!c.constant_weights) {
    in_dims.insert(in_dims.end(), {{nd, G * H, I}, {nd, G * H, H}, {nd, 2 * G * H}});
    inputs.insert(inputs.end(), {w, r, bias});
  }
  in_dims.insert(in_dims.end(), {{B}, hd});
  inputs.insert(inputs.end(), {len, h0});
  if (lstm) {
    in_dims.push_back(hd);
    inputs.push_back(c0);
  }
  auto eval = [](const Node& n, const std::vector<const Tensor*>& in) { return EvaluateNode(n, in, 1); };
  ASSERT_TRUE(SpecializeShapes(*g, in_dims, eval).ok());
  auto ex = Executor::Create(g, ExecutorOptions{2, nullptr, true});
  ASSERT_TRUE(ex.ok());
  auto out = (*ex)->Run(inputs);
  ASSERT_TRUE(out.ok()) << out.status();
  auto at = [&](const Tensor& t, int64_t seq, int64_t bat, int64_t k, int64_t inner) {  // seq-major index
    return c.layout == 0 ? t.data<float>()[(seq * B + bat) * inner + k]
                         : t.data<float>()[(bat * (t.dim(1)) + seq) * inner + k];
  };
  for (int d = 0; d < nd; ++d) {
    for (int b = 0; b < B; ++b) {
      const int n = len.data<int32_t>()[b];
      std::vector<double> h(H), cs(H, 0.0);
      for (int k = 0; k < H; ++k) {
        h[k] = at(h0, d, b, k, H);
        if (lstm) cs[k] = at(c0, d, b, k, H);
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
        if (lstm) {
          EXPECT_NEAR(at((*out)[2], d, b, k, H), cs[k], 2e-5) << "Y_c d=" << d << " b=" << b;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, RecurrentF32Test,
                         ::testing::Values(RecurrentCase{"LSTM", 0, false}, RecurrentCase{"LSTM", 1, false},
                                           RecurrentCase{"RNN", 0, false}, RecurrentCase{"RNN", 1, false},
                                           RecurrentCase{"LSTM", 0, true}, RecurrentCase{"LSTM", 1, true},
                                           RecurrentCase{"RNN", 1, true}),
                         [](const ::testing::TestParamInfo<RecurrentCase>& i) {
                           return i.param.op + "_layout" + std::to_string(i.param.layout) +
                                  (i.param.constant_weights ? "_constant_weights" : "");
                         });

}  // namespace
}  // namespace cjit
