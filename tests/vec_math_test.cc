// The vectorized float32 loops of runtime/cpu/vec_math.h (exp, erf, logistic, tanh), on every ISA variant
// this CPU runs, against float64 <cmath>.
#include "runtime/cpu/vec_math.h"

#include <cmath>
#include <functional>
#include <initializer_list>
#include <limits>
#include <vector>

#include "compiler/codegen/fusion_plan.h"
#include "gtest/gtest.h"
#include "tests/isa_variants.h"

namespace cjit {
namespace {

using testing::OnEveryIsaVariant;

// The vector logistic of the epilogues and of the Sigmoid op (ExpV in runtime/cpu/simd.h, every ISA variant)
// against float64 1 / (1 + exp(-x)): within 4 ulp wherever the result is a normal float, within 1e-37
// where it is tiny, exact on the special values (NaN stays NaN, -inf -> 0, +inf -> 1, +-0 -> 0.5), and
// over lengths that leave vector tails.
// The same for the vector tanh (TanhV: within 8 ulp; -inf -> -1, +inf -> 1, -0 -> -0).
TEST(VectorLogisticTest, MatchesFloat64OnEveryIsaVariant) {
  for (PostOp::Kind kind : {PostOp::Kind::kSigmoid, PostOp::Kind::kTanh}) {
    std::vector<float> x;
    for (double v = -110.0; v <= 110.0; v += 0.0137) x.push_back(static_cast<float>(v));
    for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-45f, 88.72f, -88.72f, 88.38f, -88.38f, 87.34f, -87.34f, 103.9f,
                    -103.9f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::max(),
                    -std::numeric_limits<float>::max()}) {
      x.push_back(v);
    }
    x.push_back(0.25f);  // an odd length: vector tails
    PostOp sigmoid;
    sigmoid.kind = kind;
    OnEveryIsaVariant([&](ConvLoopIsa isa) {
      std::vector<float> y(x.size());
      ApplyUnaryPostOps(x.data(), y.data(), static_cast<int64_t>(x.size()), {sigmoid}, 1);
      for (size_t i = 0; i < x.size(); ++i) {
        const double want = kind == PostOp::Kind::kTanh ? std::tanh(static_cast<double>(x[i]))
                                                        : 1.0 / (1.0 + std::exp(-static_cast<double>(x[i])));
        if (std::isnan(x[i])) {
          EXPECT_TRUE(std::isnan(y[i])) << "ISA " << static_cast<int>(isa);
          continue;
        }
        const float wf = static_cast<float>(want);
        if (std::isinf(x[i]) || x[i] == 0.0f) {
          EXPECT_EQ(y[i], wf) << "x=" << x[i] << " ISA " << static_cast<int>(isa);
          EXPECT_EQ(std::signbit(y[i]), std::signbit(wf)) << "x=" << x[i];
        } else if (std::abs(wf) >= std::numeric_limits<float>::min()) {
          const double ulp = std::nextafter(std::abs(wf), std::numeric_limits<float>::infinity()) - std::abs(wf);
          // tanh: Eigen's rational approximation (TanhV), within 7 ulp; the logistic within 4.
          const double ulps = kind == PostOp::Kind::kTanh ? 8 : 4;
          EXPECT_LE(std::abs(y[i] - want), ulps * ulp) << "x=" << x[i] << " got " << y[i] << " want " << want << " ISA "
                                                     << static_cast<int>(isa);
        } else {
          EXPECT_LE(std::abs(y[i] - want), 1e-37) << "x=" << x[i] << " ISA " << static_cast<int>(isa);
        }
      }
    });
  }
}

// A float32 map (ExpF32, ErfF32: x -> y over n elements on up to `threads` threads) on every ISA variant:
// over [lo, hi] in `step`s followed by `specials`, whole and `tail` elements shorter (a vector tail), each
// element handed to `check(isa, x, y)`.
void SweepOnEveryIsaVariant(void (*map)(const float*, float*, int64_t, int), double lo, double hi, double step,
                            std::initializer_list<float> specials, size_t tail,
                            const std::function<void(ConvLoopIsa, float x, float y)>& check) {
  std::vector<float> x;
  for (double v = lo; v <= hi; v += step) x.push_back(static_cast<float>(v));
  x.insert(x.end(), specials);
  OnEveryIsaVariant([&](ConvLoopIsa isa) {
    for (size_t len : {x.size(), x.size() - tail}) {
      std::vector<float> y(len);
      map(x.data(), y.data(), static_cast<int64_t>(len), 2);
      for (size_t i = 0; i < len; ++i) check(isa, x[i], y[i]);
    }
  });
}

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kMax = std::numeric_limits<float>::max();

// The vector exp of the Exp op and the Softmax fallback (vec_math.h ExpF32) on every ISA variant
// against float64: within 4 ulp where the result is a normal float, within a few subnormal steps below,
// exact on the special values (exp(-inf) = 0, exp(+inf) = +inf, exp(0) = 1, NaN stays NaN), lengths that
// leave vector tails.
TEST(VectorExpTest, MatchesFloat64OnEveryIsaVariant) {
  SweepOnEveryIsaVariant(
      ExpF32, -110.0, 95.0, 0.0119,
      {0.0f, -0.0f, 1e-30f, -1e-30f, 88.72f, 88.73f, -87.34f, -103.9f, -104.0f, kInf, -kInf, kNaN, kMax, -kMax}, 5,
      [](ConvLoopIsa isa, float x, float y) {
        const double want = std::exp(static_cast<double>(x));
        const float wf = static_cast<float>(want);
        if (std::isnan(x)) {
          EXPECT_TRUE(std::isnan(y));
        } else if (std::isinf(x) || x == 0.0f || wf == 0.0f || std::isinf(wf)) {
          EXPECT_EQ(y, wf) << "x=" << x << " ISA " << static_cast<int>(isa);
        } else if (wf >= std::numeric_limits<float>::min()) {
          const double ulp = std::nextafter(wf, std::numeric_limits<float>::infinity()) - wf;
          EXPECT_LE(std::abs(y - want), 4 * ulp) << "x=" << x << " ISA " << static_cast<int>(isa);
        } else {
          EXPECT_LE(std::abs(y - want), 4 * std::numeric_limits<float>::denorm_min()) << "x=" << x;
        }
      });
}

// The vector erf of the Erf op (vec_math.h ErfF32, the code generator's rational approximation) on every
// ISA variant against float64 erf: within 5e-7 relative (plus 1e-45 absolute for tiny results), +-1 beyond
// |x| = 4 and at +-inf, -0 and +0 kept, NaN stays NaN; lengths that leave vector tails.
TEST(VectorErfTest, MatchesFloat64OnEveryIsaVariant) {
  SweepOnEveryIsaVariant(
      ErfF32, -6.0, 6.0, 0.00173,
      {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-40f, 3.999f, 4.0f, 4.001f, -4.0f, 100.0f, kInf, -kInf, kNaN, kMax, -kMax}, 7,
      [](ConvLoopIsa isa, float x, float y) {
        if (std::isnan(x)) {
          EXPECT_TRUE(std::isnan(y)) << "ISA " << static_cast<int>(isa);
          return;
        }
        const double want = std::erf(static_cast<double>(x));
        EXPECT_LE(std::abs(y - want), 5e-7 * std::abs(want) + 1e-45) << "x=" << x << " ISA " << static_cast<int>(isa);
        if (x == 0.0f) {
          EXPECT_EQ(std::signbit(y), std::signbit(x)) << "erf(-0) is -0";
        }
      });
}

}  // namespace
}  // namespace cjit
