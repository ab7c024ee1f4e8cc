// The convolution paths without a per-shape JIT (runtime/cpu/conv_gemm.h) and their fusions, each against
// float64 loops: isolated NCHW convolutions (depthwise, stems), the channels-last loops on every ISA
// variant (pointwise, few-pixel im2col, few-channel, depthwise), framing convolutions, post-ops absorbed
// into convolutions, and the fused pointwise -> depthwise op.
#include <algorithm>
#include <cmath>
#include <functional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "compiler/ir/cpu_isa.h"
#include "compiler/ir/text.h"
#include "compiler/passes/layout.h"
#include "compiler/passes/simplify.h"
#include "compiler/passes/specialize_shapes.h"
#include "gtest/gtest.h"
#include "runtime/session.h"
#include "tests/conv_test_util.h"
#include "tests/graph_util.h"
#include "tests/isa_variants.h"
#include "tests/model_builder.h"
#include "tests/random_floats.h"
#include "tests/session_options.h"
#include "tools/check_lib.h"

namespace cjit {
namespace {

using testing::AddConv;
using testing::AddIdentityDepthwise;
using testing::ConstIr;
using testing::ConvSpec;
using testing::CountOps;
using testing::ExpectMatchesOnEveryIsaVariant;
using testing::kOpByOpAndCompiled;
using testing::OnEveryIsaVariant;
using testing::ReferenceConv;
using testing::RunGraph;
using testing::RunModelBytes;

// An isolated NCHW convolution (no other convolution: the layout pass leaves it NCHW) of X [1, C, H, W]
// with any stride / dilation / pads / group and a Relu after it, in float64.
struct NchwConvCase {
  int64_t C, OC, H, W, KH, KW, sh, sw, dh, dw, pt, pl, pb, pr, group;
};
std::vector<double> ReferenceNchwConv(const NchwConvCase& c, const std::vector<float>& x, const std::vector<float>& w,
                                      const std::vector<float>& b, int64_t OH, int64_t OW) {
  std::vector<double> y;
  const int64_t cpg = c.C / c.group, opg = c.OC / c.group;
  for (int64_t o = 0; o < c.OC; ++o)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double acc = b[o];
        for (int64_t i = 0; i < cpg; ++i)
          for (int64_t kh = 0; kh < c.KH; ++kh)
            for (int64_t kw = 0; kw < c.KW; ++kw) {
              const int64_t ih = oh * c.sh - c.pt + kh * c.dh, iw = ow * c.sw - c.pl + kw * c.dw;
              if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
              acc +=
                  double(x[((o / opg * cpg + i) * c.H + ih) * c.W + iw]) * w[((o * cpg + i) * c.KH + kh) * c.KW + kw];
            }
        y.push_back(std::max(acc, 0.0));
      }
  return y;
}

// The NCHW depthwise loop (TryNchwDepthwiseConv: strides >= 2) and image stems through the channels-last
// direct loop with transposes around it (<= 4 input channels), op by op and compiled (Relu as a post-op),
// at every --max_cpu_isa cap.
TEST(IsolatedNchwConvTest, DepthwiseStridedAndStemsMatchFloat64) {
  const std::vector<NchwConvCase> cases = {
      {19, 19, 13, 17, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 19},  // depthwise 3x3 / 2
      {6, 6, 14, 15, 5, 5, 2, 3, 1, 1, 2, 1, 1, 2, 6},     // depthwise 5x5, strides 2 x 3, asymmetric pads
      {5, 5, 16, 16, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 5},     // depthwise dilated
      {3, 8, 23, 21, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, 1},     // 7x7 / 2 stem
      {1, 5, 9, 11, 3, 3, 1, 1, 1, 1, 1, 0, 0, 1, 1},      // one channel
      {4, 20, 12, 10, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1},    // four channels, 20 outputs (a partial vector)
  };
  unsigned seed = 90;
  for (const NchwConvCase& c : cases) {
    testing::ModelBuilder m(14);
    m.Input("x", onnx::TensorProto::FLOAT, {1, c.C, c.H, c.W}).Output("y");
    const std::vector<float> w =
        testing::RandomFloats(static_cast<size_t>(c.OC * (c.C / c.group) * c.KH * c.KW), seed++);
    const std::vector<float> b = testing::RandomFloats(static_cast<size_t>(c.OC), seed++);
    m.InitFloats("w", {c.OC, c.C / c.group, c.KH, c.KW}, w);
    m.InitFloats("b", {c.OC}, b);
    auto* conv = m.Node("Conv", {"x", "w", "b"}, {"c"});
    testing::ModelBuilder::AttrInts(conv, "kernel_shape", {c.KH, c.KW});
    testing::ModelBuilder::AttrInts(conv, "strides", {c.sh, c.sw});
    testing::ModelBuilder::AttrInts(conv, "dilations", {c.dh, c.dw});
    testing::ModelBuilder::AttrInts(conv, "pads", {c.pt, c.pl, c.pb, c.pr});
    testing::ModelBuilder::AttrInt(conv, "group", c.group);
    m.Node("Relu", {"c"}, {"y"});
    const int64_t OH = (c.H + c.pt + c.pb - ((c.KH - 1) * c.dh + 1)) / c.sh + 1;
    const int64_t OW = (c.W + c.pl + c.pr - ((c.KW - 1) * c.dw + 1)) / c.sw + 1;
    Tensor x(DType::kF32, {1, c.C, c.H, c.W});
    const std::vector<float> xv = testing::RandomFloats(static_cast<size_t>(x.numel()), seed++);
    std::copy(xv.begin(), xv.end(), x.data<float>());
    const std::vector<double> want = ReferenceNchwConv(c, xv, w, b, OH, OW);
    const std::string bytes = m.Bytes();
    const CpuIsa previous = MaxCpuIsa();
    for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAll}) {
      SetMaxCpuIsa(isa);
      for (const char* mode : kOpByOpAndCompiled) {
        auto got = RunModelBytes(bytes, absl::StrCat("--device=cpu --intra_op_threads=2 --autotune_level=0 ", mode), x);
        ASSERT_TRUE(got.ok()) << got.status();
        ASSERT_EQ(got->numel(), static_cast<int64_t>(want.size()));
        for (int64_t i = 0; i < got->numel(); ++i) {
          ASSERT_NEAR(got->data<float>()[i], want[i], 1e-5 * (1 + std::abs(want[i])))
              << "C=" << c.C << " OC=" << c.OC << " " << CpuIsaName(isa) << " " << mode << " element " << i;
        }
      }
    }
    SetMaxCpuIsa(previous);
  }
}

// The channels-last loops (runtime/cpu/conv_kernels_spatial.cc: few-channel stem, depthwise; vec_math.cc: conv
// epilogue) are compiled for AVX-512, AVX2 and the SSE2 baseline, each with its own register width; a CPU runs one of
// them. Every variant this CPU can run, on a chain that reaches each loop's vector blocks and scalar
// tails (19 = 16 + 3 and 8 + 8 + 3 channels, 24, 40) with strides, pads and dilations, compiled (post-ops
// in the epilogue) and op by op, against the NCHW path (oneDNN / NCHW im2col, elementwise kernels).
TEST(ChannelsLastTest, EveryIsaVariantOfTheConvLoopsMatchesTheNchwPath) {
  testing::ModelBuilder m(14);
  m.Input("x", onnx::TensorProto::FLOAT, {1, 3, 13, 17}).Output("y");
  unsigned seed = 40;
  auto init = [&](const std::string& name, const std::vector<int64_t>& dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    m.InitFloats(name, dims, testing::RandomFloats(static_cast<size_t>(n), seed++));
  };
  init("w1", {19, 3, 3, 3});
  init("b1", {19});
  auto* c1 = m.Node("Conv", {"x", "w1", "b1"}, {"c1"});
  testing::ModelBuilder::AttrInts(c1, "strides", {2, 2});
  testing::ModelBuilder::AttrInts(c1, "pads", {1, 1, 1, 1});
  m.Node("HardSwish", {"c1"}, {"h1"});
  init("wd", {19, 1, 5, 5});
  init("bd", {19});
  auto* c2 = m.Node("Conv", {"h1", "wd", "bd"}, {"c2"});
  testing::ModelBuilder::AttrInt(c2, "group", 19);
  testing::ModelBuilder::AttrInts(c2, "pads", {2, 2, 2, 2});
  m.Node("Relu", {"c2"}, {"r2"});
  init("wp", {24, 19, 1, 1});
  init("bp", {24});
  m.Node("Conv", {"r2", "wp", "bp"}, {"c3"});
  m.InitFloats("lo", {}, {0.0f});
  m.InitFloats("hi", {}, {0.5f});
  m.Node("Clip", {"c3", "lo", "hi"}, {"k3"});
  init("wd2", {24, 1, 3, 3});
  auto* c4 = m.Node("Conv", {"k3", "wd2"}, {"c4"});
  testing::ModelBuilder::AttrInt(c4, "group", 24);
  testing::ModelBuilder::AttrInts(c4, "strides", {2, 1});
  testing::ModelBuilder::AttrInts(c4, "pads", {1, 1, 1, 1});
  init("kc", {24, 1, 1});
  m.Node("Add", {"c4", "kc"}, {"a4"});
  init("wp2", {40, 24, 1, 1});
  init("bp2", {40});
  m.Node("Conv", {"a4", "wp2", "bp2"}, {"c5"});
  m.Node("Sigmoid", {"c5"}, {"s5"});
  init("wd3", {40, 1, 3, 3});
  auto* c6 = m.Node("Conv", {"s5", "wd3"}, {"c6"});
  testing::ModelBuilder::AttrInt(c6, "group", 40);
  testing::ModelBuilder::AttrInts(c6, "pads", {2, 2, 2, 2});
  testing::ModelBuilder::AttrInts(c6, "dilations", {2, 2});
  m.Node("Relu", {"c6"}, {"y"});
  const std::string bytes = m.Bytes();
  Tensor x(DType::kF32, {1, 3, 13, 17});
  std::vector<float> xv = testing::RandomFloats(static_cast<size_t>(x.numel()), 7);
  std::copy(xv.begin(), xv.end(), x.data<float>());
  auto run = [&](const std::string& flags) {
    return RunModelBytes(bytes, "--device=cpu --intra_op_threads=1 --autotune_level=0 " + flags, x);
  };
  auto want = run("--auto_jit=-1 --cpu_channels_last=false");
  ASSERT_TRUE(want.ok()) << want.status();
  OnEveryIsaVariant([&](ConvLoopIsa isa) {
    for (const char* mode : {"--auto_jit=-1", "--auto_jit=1 --min_cluster_size=1 --enable_lazy_compilation=false"}) {
      auto got = run(mode);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->dims(), want->dims());
      OutputComparison c = CompareTensors("y", *got, *want, 1e-4, 1e-5);
      EXPECT_TRUE(c.ok) << "ISA variant " << static_cast<int>(isa) << ", " << mode << ": max_abs " << c.max_abs << " "
                        << c.problem;
    }
  });
}

// Channels-last pointwise convolutions against float64 sums, on every ISA variant of the conv loops: the
// AVX-512 variant runs the register-tiled small-input-channel loop (SmallKPointwiseBody: 6 x 64-channel
// tiles, 16- and 8-channel blocks, scalar channels; 35 pixels leave partial tiles) with its bias and
// post-op (HardSwish) in registers, fused with a following depthwise convolution or not; the others and,
// above the loop's limits, 128 x 200 weights run BLIS.
// Input x output channels and the image size: the few-input-channel loop (weights <= 48 KiB), the panel
// loop beyond it (AVX-512; panels of 64, 48, 32, 16 and 8 channels; with enough work to fork
// (runtime/cpu/parallel.h), rows split over the 2 threads for 144 pixels, panels for 35), BLIS elsewhere.
TEST(ChannelsLastTest, PointwiseConvolutionsMatchFloat64OnEveryIsaVariant) {
  const std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>> shapes = {
      {16, 64, 5, 7},
      {24, 72, 5, 7},
      {7, 13, 5, 7},
      {32, 128, 5, 7},
      {128, 96, 5, 7},
      {3, 136, 5, 7},
      {128, 200, 5, 7},
      {144, 24, 12, 12},
      {192, 112, 5, 7},
      {160, 160, 5, 7},
      {200, 80, 12, 12},
      {129, 13, 5, 7},
      {1024, 192, 5, 7},
      {256, 64, 12, 12},
      // Channel counts whose last block overlaps the previous one (28 = 16 + 8 + 4, 42 = 2 x 16 + 8 + 2,
      // 6 = 4 + 2) or is scalar (3), for the pointwise and the identity depthwise convolutions.
      {24, 28, 5, 7},
      {36, 42, 5, 7},
      {32, 6, 5, 7},
      {8, 3, 5, 7},
      {28, 36, 5, 7}};
  unsigned seed = 70;
  for (const auto& [C, OC, H, W] : shapes) {
    const ConvSpec spec{C, OC, 1, 1, 0, 0};
    testing::ModelBuilder m(14);
    m.Input("x", onnx::TensorProto::FLOAT, {1, C, H, W}).Output("y");
    const auto [w, b] = AddConv(m, spec, "x", "c", seed);
    m.Node("HardSwish", {"c"}, {"h"});
    AddIdentityDepthwise(m, "h", OC);
    Tensor x(DType::kF32, {1, C, H, W});
    const std::vector<float> xv = testing::RandomFloats(static_cast<size_t>(x.numel()), seed++);
    std::copy(xv.begin(), xv.end(), x.data<float>());
    std::vector<double> want = ReferenceConv(std::vector<double>(xv.begin(), xv.end()), w, b, spec, H, W);
    for (double& v : want) v *= std::clamp(v / 6.0 + 0.5, 0.0, 1.0);
    ExpectMatchesOnEveryIsaVariant(
        m, x, want,
        {kOpByOpAndCompiled[0], "--auto_jit=-1 --cpu_fuse_pointwise_depthwise=false", kOpByOpAndCompiled[1]},
        1e-5 * std::sqrt(double(C)), "C=" + std::to_string(C) + " OC=" + std::to_string(OC));
  }
}

// Convolutions over few output pixels (im2col + GEMM: the register-tiled GEMM where the weights fit L2,
// BLIS above), 3x3, 1x3 and 3x1 kernels with pads, channels-last, on every ISA variant, against float64
// loops over the NCHW tensors; the 1x3 convolution over 40-pixel rows also takes the in-place im2col runs,
// and the 3x1 one over 217 pixels is one chunk split over the threads.
TEST(ChannelsLastTest, FewPixelConvolutionsMatchFloat64OnEveryIsaVariant) {
  // Spatial sizes with at most 256 output pixels (the few-pixel rule); 24 -> 40 -> 40 channels: 3x3 weights
  // 360 x 40 (register-tiled GEMM), then a 1x3; and 96 -> 240 -> 96 (1x3 weights 720 x 96 > 64 Ki: BLIS).
  const std::vector<std::tuple<int64_t, int64_t, std::vector<ConvSpec>>> cases = {
      {6, 10, {{24, 40, 3, 3, 1, 1}, {40, 40, 1, 3, 0, 1}}},
      {1, 40, {{24, 40, 1, 3, 0, 1}, {40, 40, 1, 3, 0, 1}}},
      {4, 6, {{96, 240, 1, 3, 0, 1}, {240, 96, 1, 3, 0, 1}}},
      // 217 output pixels, 3x1 weights 216 x 72 (3.4M multiply-adds in one chunk): split over the 2 threads.
      {31, 7, {{72, 72, 3, 1, 1, 0}, {72, 72, 3, 1, 1, 0}}}};
  unsigned seed = 90;
  for (const auto& [H, W, specs] : cases) {
    testing::ModelBuilder m(14);
    m.Input("x", onnx::TensorProto::FLOAT, {1, specs[0].C, H, W}).Output("y");
    Tensor x(DType::kF32, {1, specs[0].C, H, W});
    const std::vector<float> xv = testing::RandomFloats(static_cast<size_t>(x.numel()), seed++);
    std::copy(xv.begin(), xv.end(), x.data<float>());
    std::vector<double> want(xv.begin(), xv.end());
    std::string in = "x";
    for (size_t k = 0; k < specs.size(); ++k) {
      const std::string out = k + 1 == specs.size() ? "y" : "c" + std::to_string(k);
      const auto [w, b] = AddConv(m, specs[k], in, out, seed);
      want = ReferenceConv(want, w, b, specs[k], H, W);
      in = out;
    }
    ExpectMatchesOnEveryIsaVariant(m, x, want, {kOpByOpAndCompiled[0], kOpByOpAndCompiled[1]}, 1e-4,
                                   "case " + std::to_string(H) + "x" + std::to_string(W));
  }
}

// A framing convolution (1-D, few input channels, a long kernel with a large stride: fewer output frames
// than output channels, as a spectrogram's STFT as Conv) runs im2col over frames + one GEMM; with pads and
// dilations (frames partly outside the signal), NCHW and channels-last, op by op and compiled, against
// float64 loops.
TEST(ChannelsLastTest, FramingConvolutionsOverFewOutputFramesMatchFloat64) {
  struct Case {
    int64_t C, L, K, stride, dilation, pad, OC;
  };
  const std::vector<Case> cases = {
      {1, 300, 64, 20, 1, 0, 50}, {2, 257, 33, 16, 2, 7, 40}, {1, 512, 128, 40, 1, 64, 65}};
  unsigned seed = 160;
  for (const Case& k : cases) {
    testing::ModelBuilder m(14);
    m.Input("x", onnx::TensorProto::FLOAT, {1, k.C, k.L}).Output("y");
    const std::vector<float> w = testing::RandomFloats(static_cast<size_t>(k.OC * k.C * k.K), seed++);
    const std::vector<float> b = testing::RandomFloats(static_cast<size_t>(k.OC), seed++);
    m.InitFloats("w", {k.OC, k.C, k.K}, w);
    m.InitFloats("b", {k.OC}, b);
    auto* conv = m.Node("Conv", {"x", "w", "b"}, {"y"});
    testing::ModelBuilder::AttrInts(conv, "strides", {k.stride});
    testing::ModelBuilder::AttrInts(conv, "dilations", {k.dilation});
    testing::ModelBuilder::AttrInts(conv, "pads", {k.pad, k.pad});
    const int64_t P = (k.L + 2 * k.pad - k.dilation * (k.K - 1) - 1) / k.stride + 1;
    ASSERT_LT(P, k.OC) << "the few-output-frames case";
    Tensor x(DType::kF32, {1, k.C, k.L});
    const std::vector<float> xv = testing::RandomFloats(static_cast<size_t>(x.numel()), seed++);
    std::copy(xv.begin(), xv.end(), x.data<float>());
    std::vector<double> want(static_cast<size_t>(k.OC * P));
    for (int64_t o = 0; o < k.OC; ++o)
      for (int64_t p = 0; p < P; ++p) {
        double acc = b[o];
        for (int64_t c = 0; c < k.C; ++c)
          for (int64_t t = 0; t < k.K; ++t) {
            const int64_t i = p * k.stride - k.pad + t * k.dilation;
            if (i >= 0 && i < k.L) acc += static_cast<double>(xv[c * k.L + i]) * w[(o * k.C + c) * k.K + t];
          }
        want[o * P + p] = acc;
      }
    for (const std::string mode : {"--auto_jit=-1", "--auto_jit=-1 --cpu_channels_last=false",
                                   "--auto_jit=1 --min_cluster_size=1 --enable_lazy_compilation=false"}) {
      auto y = RunModelBytes(m.Bytes(), "--device=cpu --intra_op_threads=2 --autotune_level=0 " + mode, x);
      ASSERT_TRUE(y.ok()) << mode << ": " << y.status();
      ASSERT_EQ(y->dims(), (Dims{1, k.OC, P})) << mode;
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(y->data<float>()[i], want[i], 1e-4 * (1 + std::abs(want[i])))
            << mode << " K=" << k.K << " at " << i;
      }
    }
  }
}

// A Conv (C -> OC, K x K, same pads) on three geometries that take the brgconv, im2col and pointwise paths,
// followed by what `add_ops` appends to its output "c" (ending in the graph output "y"), on every conv
// path and ISA variant, op by op and compiled, against float64: `after` maps a conv output to the expected
// y. Inputs are uniform in [-scale, scale].
void ExpectConvPostOpsMatchFloat64(unsigned seed, float scale,
                                   const std::function<void(testing::ModelBuilder&, int64_t oc)>& add_ops,
                                   const std::function<double(double)>& after) {
  struct Case {
    int64_t C, OC, K, H, W;
  };
  const std::vector<Case> cases = {{16, 32, 3, 20, 20}, {24, 40, 3, 12, 12}, {16, 64, 1, 9, 11}};
  for (const Case& k : cases) {
    const ConvSpec spec{k.C, k.OC, k.K, k.K, k.K / 2, k.K / 2};
    testing::ModelBuilder m(14);
    m.Input("x", onnx::TensorProto::FLOAT, {1, k.C, k.H, k.W}).Output("y");
    const auto [w, b] = AddConv(m, spec, "x", "c", seed);
    add_ops(m, k.OC);
    Tensor x(DType::kF32, {1, k.C, k.H, k.W});
    std::vector<float> xv = testing::RandomFloats(static_cast<size_t>(x.numel()), seed++);
    for (float& v : xv) v *= scale;
    std::copy(xv.begin(), xv.end(), x.data<float>());
    std::vector<double> want = ReferenceConv(std::vector<double>(xv.begin(), xv.end()), w, b, spec, k.H, k.W);
    for (double& v : want) v = after(v);
    ExpectMatchesOnEveryIsaVariant(
        m, x, want, {kOpByOpAndCompiled[0], kOpByOpAndCompiled[1]}, 1e-4,
        "C=" + std::to_string(k.C) + " OC=" + std::to_string(k.OC) + " K=" + std::to_string(k.K));
  }
}

// LeakyRelu and Max with a scalar after a convolution, as post-ops of every conv path that takes them
// (oneDNN brgconv, im2col + GEMM over few pixels, the pointwise loop / BLIS) on every ISA variant, compiled
// (absorbed into the Conv) and op by op, against float64: y = max(leaky_relu(conv(x) + b, 0.1), -0.3).
TEST(ChannelsLastTest, LeakyReluAndScalarMaxPostOpsMatchFloat64) {
  ExpectConvPostOpsMatchFloat64(
      120, 1.0f,
      [](testing::ModelBuilder& m, int64_t oc) {
        testing::ModelBuilder::AttrFloat(m.Node("LeakyRelu", {"c"}, {"l"}), "alpha", 0.1f);
        m.InitFloats("lo", {}, {-0.3f});
        m.Node("Max", {"l", "lo"}, {"h"});
        AddIdentityDepthwise(m, "h", oc);
      },
      [](double v) { return std::max(v < 0 ? 0.1 * v : v, -0.3); });
}

// Scale-and-shift chains with the constant first (Mul(c, v), Add(c, v), Sub(c, v): PaddleOCR's learnable
// affine blocks after a HardSwish) become one linear post-op of each convolution — the first (brgconv, im2col
// or pointwise path) and a depthwise one — applied in registers with the tile's other post-ops. Checked
// against float64 on every conv path and ISA variant.
TEST(ChannelsLastTest, AffineChainsWithTheConstantFirstMatchFloat64) {
  ExpectConvPostOpsMatchFloat64(
      140, 1.0f,
      [](testing::ModelBuilder& m, int64_t oc) {
        m.Node("HardSwish", {"c"}, {"h"});
        m.InitFloats("s1", {1, 1, 1, 1}, {0.75f});
        m.InitFloats("t1", {}, {-0.25f});
        m.Node("Add", {"t1", "h"}, {"a1"});
        m.Node("Mul", {"s1", "a1"}, {"a2"});
        AddIdentityDepthwise(m, "a2", oc, "d");
        m.InitFloats("s2", {1}, {1.5f});
        m.InitFloats("t2", {1, 1, 1, 1}, {0.5f});
        m.Node("Mul", {"d", "s2"}, {"e"});
        m.Node("Sub", {"t2", "e"}, {"y"});
      },
      [](double v) {
        const double h = v * std::clamp(v / 6.0 + 0.5, 0.0, 1.0);
        return 0.5 - 1.5 * (0.75 * (h - 0.25));
      });
}

// SiLU / Swish written out, x * Sigmoid(x) (YOLOv5/v8 and EfficientNet exports), with the Mul's operands in
// either order, is a post-op of each convolution (the first on the brgconv, im2col or pointwise path, then a
// depthwise one), applied in registers; against float64 on every conv path and ISA variant. Inputs in
// [-4, 4]: outputs over the logistic's curved range, both signs.
TEST(ChannelsLastTest, SwishPostOpsMatchFloat64) {
  ExpectConvPostOpsMatchFloat64(
      180, 4.0f,
      [](testing::ModelBuilder& m, int64_t oc) {
        m.Node("Sigmoid", {"c"}, {"s1"});
        m.Node("Mul", {"c", "s1"}, {"a"});
        AddIdentityDepthwise(m, "a", oc, "d");
        m.Node("Sigmoid", {"d"}, {"s2"});
        m.Node("Mul", {"s2", "d"}, {"y"});
      },
      [](double v) {
        v = v / (1.0 + std::exp(-v));
        return v / (1.0 + std::exp(-v));
      });
}

// ---- pointwise -> depthwise fusion (FusePointwiseDepthwise, RunPointwiseDepthwiseConv) ----

struct PwDwCase {
  std::string name;
  int64_t n, c, m, h, w, k;
  std::vector<int64_t> strides, pads, dilations;
  std::vector<std::string> mid;  // ONNX ops between the convolutions: Relu, HardSwish, HardSigmoid, Clip
  bool b1, b2;
  bool relu_after;  // a Relu after the depthwise convolution (a post-op of the fused op when compiled)
  int threads;
};

double MidOp(const std::string& op, double v) {
  if (op == "Relu") return v > 0 ? v : 0;
  if (op == "HardSwish") return v * std::clamp(v / 6 + 0.5, 0.0, 1.0);
  if (op == "HardSigmoid") return std::clamp(0.3 * v + 0.4, 0.0, 1.0);  // alpha 0.3, beta 0.4 (set below)
  if (op == "Clip") return std::clamp(v, -0.25, 0.6);
  return v;
}

// The model (ONNX NCHW: Conv 1x1 -> mid ops -> depthwise Conv [-> Relu]) and a float64 reference of it.
std::string PwDwModel(const PwDwCase& t, std::vector<float>* w1, std::vector<float>* b1, std::vector<float>* w2,
                      std::vector<float>* b2) {
  testing::ModelBuilder m(14);  // HardSwish: opset 14
  m.Input("x", onnx::TensorProto::FLOAT, {t.n, t.c, t.h, t.w}).Output("y");
  *w1 = testing::RandomFloats(static_cast<size_t>(t.m * t.c), 21);
  *b1 = testing::RandomFloats(static_cast<size_t>(t.m), 22);
  *w2 = testing::RandomFloats(static_cast<size_t>(t.m * t.k * t.k), 23);
  *b2 = testing::RandomFloats(static_cast<size_t>(t.m), 24);
  m.InitFloats("w1", {t.m, t.c, 1, 1}, *w1);
  m.InitFloats("w2", {t.m, 1, t.k, t.k}, *w2);
  std::vector<std::string> pw_in{"x", "w1"};
  if (t.b1) {
    m.InitFloats("b1", {t.m}, *b1);
    pw_in.push_back("b1");
  } else {
    b1->assign(b1->size(), 0.0f);
  }
  m.Node("Conv", pw_in, {"p"});
  std::string v = "p";
  for (size_t i = 0; i < t.mid.size(); ++i) {
    std::string out = absl::StrCat("mid", i);
    if (t.mid[i] == "Clip") {
      m.InitFloats(absl::StrCat("lo", i), {}, {-0.25f});
      m.InitFloats(absl::StrCat("hi", i), {}, {0.6f});
      m.Node("Clip", {v, absl::StrCat("lo", i), absl::StrCat("hi", i)}, {out});
    } else {
      auto* n = m.Node(t.mid[i], {v}, {out});
      if (t.mid[i] == "HardSigmoid") {
        testing::ModelBuilder::AttrFloat(n, "alpha", 0.3f);
        testing::ModelBuilder::AttrFloat(n, "beta", 0.4f);
      }
    }
    v = out;
  }
  std::vector<std::string> dw_in{v, "w2"};
  if (t.b2) {
    m.InitFloats("b2", {t.m}, *b2);
    dw_in.push_back("b2");
  } else {
    b2->assign(b2->size(), 0.0f);
  }
  auto* dw = m.Node("Conv", dw_in, {t.relu_after ? "d" : "y"});
  testing::ModelBuilder::AttrInt(dw, "group", t.m);
  testing::ModelBuilder::AttrInts(dw, "kernel_shape", {t.k, t.k});
  testing::ModelBuilder::AttrInts(dw, "strides", t.strides);
  testing::ModelBuilder::AttrInts(dw, "pads", t.pads);
  testing::ModelBuilder::AttrInts(dw, "dilations", t.dilations);
  if (t.relu_after) m.Node("Relu", {"d"}, {"y"});
  return m.Bytes();
}

// Every case: the Session (default flags: channels-last, fused) against float64 math, op by op and
// compiled, on 1 or 2 threads; the specialized graph holds the fused op. Cases reach several row bands per
// thread (the 384 KiB buffer), a band of one row (a 2000-pixel-wide row of 64 channels is 512 KiB), channel
// counts with vector tails (20 = 16 + 4, 24), strides 1 and 2, asymmetric pads, dilation 2, a batch of 2, no
// biases, and chains of activations.
TEST(PointwiseDepthwiseFusionTest, FusedOpMatchesFloat64) {
  const std::vector<PwDwCase> cases = {
      {"bands_stride2_relu", 1, 8, 64, 100, 64, 3, {2, 2}, {1, 1, 1, 1}, {1, 1}, {"Relu"}, true, true, false, 2},
      {"batch2_k5_asym_pads",
       2,
       5,
       20,
       23,
       31,
       5,
       {1, 1},
       {2, 1, 2, 3},
       {1, 1},
       {"HardSigmoid", "Clip"},
       false,
       true,
       false,
       1},
      {"dilated_hardswish_post_relu",
       1,
       12,
       24,
       17,
       19,
       3,
       {1, 1},
       {2, 2, 2, 2},
       {2, 2},
       {"HardSwish"},
       true,
       false,
       true,
       2},
      {"one_row_bands", 1, 2, 64, 6, 2000, 3, {1, 2}, {1, 1, 1, 1}, {1, 1}, {}, true, true, false, 2},
      // 160 input channels: the panel loop (120 = 64 + 48 + 8 output channels) computes the intermediate.
      {"panels_clip", 1, 160, 120, 9, 11, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, {"Clip"}, true, true, false, 2},
  };
  for (const PwDwCase& t : cases) {
    std::vector<float> w1, b1, w2, b2;
    const std::string bytes = PwDwModel(t, &w1, &b1, &w2, &b2);
    Tensor x(DType::kF32, {t.n, t.c, t.h, t.w});
    std::vector<float> xv = testing::RandomFloats(static_cast<size_t>(x.numel()), 25);
    std::copy(xv.begin(), xv.end(), x.data<float>());
    // float64: mid = ops(pw(x) + b1) [N, M, H, W]; y = dw(mid) + b2 [, Relu].
    std::vector<double> mid(static_cast<size_t>(t.n * t.m * t.h * t.w));
    for (int64_t n = 0; n < t.n; ++n)
      for (int64_t o = 0; o < t.m; ++o)
        for (int64_t p = 0; p < t.h * t.w; ++p) {
          double acc = b1[o];
          for (int64_t c = 0; c < t.c; ++c) acc += double(xv[(n * t.c + c) * t.h * t.w + p]) * w1[o * t.c + c];
          for (const std::string& op : t.mid) acc = MidOp(op, acc);
          mid[(n * t.m + o) * t.h * t.w + p] = acc;
        }
    const int64_t ext_h = (t.k - 1) * t.dilations[0] + 1, ext_w = (t.k - 1) * t.dilations[1] + 1;
    const int64_t oh = (t.h + t.pads[0] + t.pads[2] - ext_h) / t.strides[0] + 1;
    const int64_t ow = (t.w + t.pads[1] + t.pads[3] - ext_w) / t.strides[1] + 1;
    std::vector<double> want(static_cast<size_t>(t.n * t.m * oh * ow));
    for (int64_t n = 0; n < t.n; ++n)
      for (int64_t o = 0; o < t.m; ++o)
        for (int64_t i = 0; i < oh; ++i)
          for (int64_t j = 0; j < ow; ++j) {
            double acc = b2[o];
            for (int64_t a = 0; a < t.k; ++a)
              for (int64_t b = 0; b < t.k; ++b) {
                int64_t ih = i * t.strides[0] - t.pads[0] + a * t.dilations[0];
                int64_t iw = j * t.strides[1] - t.pads[1] + b * t.dilations[1];
                if (ih < 0 || ih >= t.h || iw < 0 || iw >= t.w) continue;
                acc += mid[((n * t.m + o) * t.h + ih) * t.w + iw] * w2[(o * t.k + a) * t.k + b];
              }
            want[((n * t.m + o) * oh + i) * ow + j] = t.relu_after && acc < 0 ? 0 : acc;
          }
    for (const char* mode : {"--auto_jit=-1", "--auto_jit=1 --min_cluster_size=1 --enable_lazy_compilation=false"}) {
      SessionOptions o;
      o.use_environment_flags = false;
      auto f = ParseFlags(absl::StrCat("--device=cpu --autotune_level=0 --intra_op_threads=", t.threads, " ", mode));
      ASSERT_TRUE(f.ok()) << f.status();
      o.flags = *f;
      auto s = Session::LoadFromBytes(bytes, o);
      ASSERT_TRUE(s.ok()) << t.name << ": " << s.status();
      auto g = (*s)->SpecializeAndCluster({{"x", x}}, nullptr);
      ASSERT_TRUE(g.ok()) << g.status();
      int fused = 0;
      for (const auto& node : (*g)->nodes()) {
        fused += node->op_type == "NhwcPointwiseDepthwiseConv";
        for (const auto& [k, a] : node->attrs) {
          if (a.kind == Attribute::Kind::kGraph && a.g) fused += CountOps(*a.g, "NhwcPointwiseDepthwiseConv");
        }
      }
      EXPECT_EQ(fused, 1) << t.name << " " << mode << "\n" << PrintGraph(**g);
      for (int run = 0; run < 2; ++run) {
        auto r = (*s)->Run({{"x", x}});
        ASSERT_TRUE(r.ok()) << t.name << " " << mode << ": " << r.status();
        const Tensor& y = (*r)[0].tensor;
        ASSERT_EQ(y.dims(), (Dims{t.n, t.m, oh, ow})) << t.name;
        double worst = 0;
        for (int64_t i = 0; i < y.numel(); ++i) {
          // float32 accumulation of up to 64 products of values in [-1, 1]: atol 1e-5 + rtol 1e-4
          worst = std::max(worst, std::fabs(y.data<float>()[i] - want[i]) / (1e-5 + 1e-4 * std::fabs(want[i])));
        }
        EXPECT_LT(worst, 1.0) << t.name << " " << mode << " run " << run;
      }
    }
  }
}

// Not fused where the intermediate has another reader (here it is also a graph output), where an op other
// than the listed activations sits between the convolutions (Sigmoid), or with --cpu_fuse_pointwise_depthwise
// =false; the results stay those of the unfused ops.
TEST(PointwiseDepthwiseFusionTest, FusesOnlyAnExclusiveActivationChain) {
  auto graph = [](const std::string& mid_op, bool mid_is_output) {
    std::string ir = "graph g(%x: f32[1,4,9,9]) {\n" + ConstIr("w1", {8, 4, 1, 1}, 0.1) +
                     ConstIr("w2", {8, 1, 3, 3}, 0.2) + "  %p = Conv(%x, %w1)\n  %a = " + mid_op +
                     "(%p)\n  %y = Conv(%a, %w2) {group=8, pads=[1,1,1,1]}\n" +
                     (mid_is_output ? "  return %y, %a\n}" : "  return %y\n}");
    auto parsed = SpecializedGraphFromText(ir);
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    std::shared_ptr<Graph> g(std::move(*parsed));
    EXPECT_TRUE(AssignChannelsLastLayout(*g).ok());
    EXPECT_TRUE(RemoveNoOps(*g).ok());
    return g;
  };
  for (const auto& [op, out, expect] : std::vector<std::tuple<std::string, bool, int>>{
           {"Relu", false, 1}, {"Relu", true, 0}, {"Sigmoid", false, 0}, {"HardSwish", false, 1}}) {
    std::shared_ptr<Graph> g = graph(op, out);
    std::shared_ptr<Graph> unfused(g->Clone());
    auto fused = FusePointwiseDepthwise(*g);
    ASSERT_TRUE(fused.ok()) << fused.status();
    EXPECT_EQ(*fused, expect) << op << " " << out;
    EXPECT_EQ(CountOps(*g, "NhwcPointwiseDepthwiseConv"), expect) << PrintGraph(*g);
    Tensor x(DType::kF32, {1, 4, 9, 9});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(std::cos(0.41 * i));
    std::vector<Tensor> want = RunGraph(unfused, {x}), got = RunGraph(g, {x});
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) {
      OutputComparison c = CompareTensors("out", got[k], want[k], 1e-5, 1e-5);
      EXPECT_TRUE(c.ok) << op << " output " << k << ": max_abs " << c.max_abs << " " << c.problem;
    }
  }
  // The flag turns it off in a Session.
  std::vector<float> w1, b1, w2, b2;
  PwDwCase t{"flag", 1, 4, 8, 9, 9, 3, {1, 1}, {1, 1, 1, 1}, {1, 1}, {"Relu"}, true, true, false, 1};
  const std::string bytes = PwDwModel(t, &w1, &b1, &w2, &b2);
  for (bool on : {true, false}) {
    SessionOptions o;
    o.use_environment_flags = false;
    auto f =
        ParseFlags(absl::StrCat("--device=cpu --auto_jit=-1 --cpu_fuse_pointwise_depthwise=", on ? "true" : "false"));
    ASSERT_TRUE(f.ok()) << f.status();
    o.flags = *f;
    auto s = Session::LoadFromBytes(bytes, o);
    ASSERT_TRUE(s.ok()) << s.status();
    auto g = (*s)->SpecializeAndCluster({{"x", Tensor(DType::kF32, {1, 4, 9, 9})}}, nullptr);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(CountOps(**g, "NhwcPointwiseDepthwiseConv"), on ? 1 : 0);
    EXPECT_EQ(CountOps(**g, "NhwcConv"), on ? 0 : 2);
  }
}

// The fused op is internal, but a model may name it (domain com.clusterjit): malformed operands get an
// error naming the node, never a crash.
TEST(PointwiseDepthwiseFusionTest, MalformedFusedOpInAModelIsAClearError) {
  struct Bad {
    std::vector<std::string> inputs;
    std::vector<int64_t> w2;
    std::vector<std::string> mid;
    std::vector<float> params;
  };
  const std::vector<Bad> bads = {
      {{"x", "w1", "", "", ""}, {8, 1, 3, 3}, {}, {}},              // W2 absent
      {{"x", "w1", "", "w2", ""}, {8, 2, 3, 3}, {}, {}},            // W2 not depthwise
      {{"x", "w1", "", "w2", ""}, {8, 1, 3, 3}, {"Relu"}, {}},      // mid_params missing
      {{"x", "w1", "", "w2", ""}, {8, 1, 3, 3}, {"Gelu"}, {0, 0}},  // unknown mid op
      {{"x", "", "", "w2", ""}, {8, 1, 3, 3}, {}, {}},              // W1 absent
  };
  for (const Bad& b : bads) {
    testing::ModelBuilder m(14);
    m.Input("x", onnx::TensorProto::FLOAT, {1, 5, 5, 4}).Output("y");
    m.InitFloats("w1", {8, 4, 1, 1}, std::vector<float>(32, 0.5f));
    int64_t n2 = 1;
    for (int64_t d : b.w2) n2 *= d;
    m.InitFloats("w2", b.w2, std::vector<float>(static_cast<size_t>(n2), 0.25f));
    auto* n = m.Node("NhwcPointwiseDepthwiseConv", b.inputs, {"y"}, "fused");
    n->set_domain("com.clusterjit");
    testing::ModelBuilder::AttrInt(n, "group", 8);
    testing::ModelBuilder::AttrInts(n, "pads", {1, 1, 1, 1});
    if (!b.mid.empty()) {
      auto* a = n->add_attribute();
      a->set_name("mid_ops");
      a->set_type(onnx::AttributeProto::STRINGS);
      for (const std::string& op : b.mid) a->add_strings(op);
      testing::ModelBuilder::AttrFloats(n, "mid_params", b.params);
    }
    auto* opset = m.proto().add_opset_import();
    opset->set_domain("com.clusterjit");
    opset->set_version(1);
    SessionOptions o;
    o.use_environment_flags = false;
    o.flags.device = "cpu";
    o.flags.auto_jit = "-1";
    auto s = Session::LoadFromBytes(m.Bytes(), o);
    absl::Status st = s.ok() ? (*s)->Run({{"x", Tensor(DType::kF32, {1, 5, 5, 4})}}).status() : s.status();
    EXPECT_FALSE(st.ok()) << absl::StrJoin(b.inputs, ",");
    EXPECT_NE(std::string(st.message()).find("fused"), std::string::npos) << st;
  }
}

}  // namespace
}  // namespace cjit
