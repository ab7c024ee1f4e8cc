// Helpers of the convolution tests (layout_test.cc, conv_paths_test.cc): small IR constants, float64
// reference convolutions, model pieces, and a check on every ISA variant of the conv loops.
#pragma once

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/tensor.h"
#include "gtest/gtest.h"
#include "tests/isa_variants.h"
#include "tests/model_builder.h"
#include "tests/random_floats.h"
#include "tests/session_options.h"

namespace cjit {
namespace testing {

// "%name = constant f32[dims] {values}" with deterministic values in [-1, 1].
inline std::string ConstIr(const std::string& name, const std::vector<int64_t>& dims, double seed) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<std::string> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(absl::StrCat(std::sin(seed + 0.7 * i)));
  return absl::StrCat("  %", name, " = constant f32[", absl::StrJoin(dims, ","), "] {", absl::StrJoin(v, ", "), "}\n");
}

// A stride-1 NCHW convolution: C -> OC channels, a KH x KW kernel, pads ph / pw on both sides.
struct ConvSpec {
  int64_t C, OC, KH, KW, ph, pw;
};

// Y [OC, H, W] of `c` on X [C, H, W] with weights w [OC, C, KH, KW] and bias b, in float64.
inline std::vector<double> ReferenceConv(const std::vector<double>& x, const std::vector<float>& w,
                                         const std::vector<float>& b, const ConvSpec& c, int64_t H, int64_t W) {
  std::vector<double> y(static_cast<size_t>(c.OC * H * W));
  for (int64_t o = 0; o < c.OC; ++o)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t v = 0; v < W; ++v) {
        double acc = b[o];
        for (int64_t i = 0; i < c.C; ++i)
          for (int64_t kh = 0; kh < c.KH; ++kh)
            for (int64_t kw = 0; kw < c.KW; ++kw) {
              const int64_t ih = h - c.ph + kh, iw = v - c.pw + kw;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              acc += x[(i * H + ih) * W + iw] * w[((o * c.C + i) * c.KH + kh) * c.KW + kw];
            }
        y[(o * H + h) * W + v] = acc;
      }
  return y;
}

// Adds Conv(in -> out) of `c` with random weights and bias (returned) to `m`.
inline std::pair<std::vector<float>, std::vector<float>> AddConv(testing::ModelBuilder& m, const ConvSpec& c,
                                                                 const std::string& in, const std::string& out,
                                                                 unsigned& seed) {
  std::vector<float> w = testing::RandomFloats(static_cast<size_t>(c.OC * c.C * c.KH * c.KW), seed++);
  std::vector<float> b = testing::RandomFloats(static_cast<size_t>(c.OC), seed++);
  m.InitFloats("w_" + out, {c.OC, c.C, c.KH, c.KW}, w);
  m.InitFloats("b_" + out, {c.OC}, b);
  auto* node = m.Node("Conv", {in, "w_" + out, "b_" + out}, {out});
  testing::ModelBuilder::AttrInts(node, "kernel_shape", {c.KH, c.KW});
  testing::ModelBuilder::AttrInts(node, "pads", {c.ph, c.pw, c.ph, c.pw});
  return {std::move(w), std::move(b)};
}

// Adds `out` = a 1x1 depthwise convolution of `in` with unit weights (an exact identity): the layout pass puts
// connected convolutions channels-last, and a pointwise one before it is fused with it unless fusion is off.
inline void AddIdentityDepthwise(testing::ModelBuilder& m, const std::string& in, int64_t channels,
                                 const std::string& out = "y") {
  m.InitFloats("ones", {channels, 1, 1, 1}, std::vector<float>(static_cast<size_t>(channels), 1.0f));
  testing::ModelBuilder::AttrInt(m.Node("Conv", {in, "ones"}, {out}), "group", channels);
}

// Runs `m` (input x) on every ISA variant of the conv loops this CPU has, with each of `modes` (appended
// to "--device=cpu --intra_op_threads=2 --autotune_level=0"), and checks every output element against
// `want` (float64) within tol * (1 + |want|).
inline void ExpectMatchesOnEveryIsaVariant(const testing::ModelBuilder& m, const Tensor& x,
                                           const std::vector<double>& want, const std::vector<std::string>& modes,
                                           double tol, const std::string& what) {
  const std::string bytes = m.Bytes();
  OnEveryIsaVariant([&](ConvLoopIsa isa) {
    for (const std::string& mode : modes) {
      auto y = RunModelBytes(bytes, "--device=cpu --intra_op_threads=2 --autotune_level=0 " + mode, x);
      ASSERT_TRUE(y.ok()) << y.status();
      ASSERT_EQ(y->numel(), static_cast<int64_t>(want.size())) << what;
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(y->data<float>()[i], want[i], tol * (1.0 + std::abs(want[i])))
            << what << " at " << i << ", ISA variant " << static_cast<int>(isa) << ", " << mode;
      }
    }
  });
}

}  // namespace testing
}  // namespace cjit
