// Channels-last layout assignment (compiler/passes/layout.h): which convolutions move, where transposes
// remain, and the rewritten graph computes what the NCHW graph computes (the NCHW graph runs the ONNX
// Conv kernel with its own layout handling; tests/op_reference_suite.py checks the same chain against
// numpy float64).
#include "compiler/passes/layout.h"

#include <cmath>
#include <functional>
#include <limits>
#include <tuple>
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/cpu_isa.h"
#include "base/status_macros.h"
#include "compiler/ir/text.h"
#include "compiler/ir/verifier.h"
#include "compiler/passes/simplify.h"
#include "compiler/passes/specialize_shapes.h"
#include "gtest/gtest.h"
#include "flags/flags.h"
#include "runtime/executor.h"
#include "runtime/profiler.h"
#include "runtime/session.h"
#include "compiler/codegen/fusion_plan.h"
#include "runtime/cpu/conv_gemm.h"
#include "tests/conv_test_util.h"
#include "tests/graph_util.h"
#include "tests/isa_variants.h"
#include "tests/model_builder.h"
#include "tests/random_floats.h"
#include "tests/session_options.h"
#include "tools/check_lib.h"

namespace cjit {
namespace {

using testing::AddIdentityDepthwise;
using testing::ConstIr;
using testing::CountOps;
using testing::ExpectMatchesOnEveryIsaVariant;
using testing::kOpByOpAndCompiled;
using testing::OnEveryIsaVariant;
using testing::RunGraph;
using testing::RunModelBytes;

// Conv -> Relu -> depthwise Conv -> squeeze-excitation (GlobalAveragePool, 1x1 Conv, Sigmoid, Mul) ->
// Add / PRelu by per-channel constants -> Concat with the Relu output -> 1x1 Conv -> Sub of a constant
// broadcast along W; the Relu output is also a graph output.
// Parses `ir` into *g laid out channels-last (the pass must change it; no-ops removed) and *nchw, a copy
// of the graph before the pass.
void LayOutChannelsLast(const std::string& ir, std::shared_ptr<Graph>* g, std::shared_ptr<Graph>* nchw) {
  auto parsed = SpecializedGraphFromText(ir);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  *g = std::shared_ptr<Graph>(std::move(*parsed));
  *nchw = std::shared_ptr<Graph>((*g)->Clone());
  auto changed = AssignChannelsLastLayout(**g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  ASSERT_TRUE(RemoveNoOps(**g).ok());
}

// Runs both graphs on `inputs`: `outputs` outputs each, of equal dims and within 1e-5.
void ExpectSameOutputs(const std::shared_ptr<Graph>& nchw, const std::shared_ptr<Graph>& g,
                       const std::vector<Tensor>& inputs, size_t outputs) {
  std::vector<Tensor> want = RunGraph(nchw, inputs), got = RunGraph(g, inputs);
  ASSERT_EQ(want.size(), outputs);
  ASSERT_EQ(got.size(), outputs);
  for (size_t k = 0; k < outputs; ++k) {
    EXPECT_EQ(got[k].dims(), want[k].dims());
    OutputComparison c = CompareTensors("out", got[k], want[k], 1e-5, 1e-5);
    EXPECT_TRUE(c.ok) << k << ": max_abs " << c.max_abs << " " << c.problem;
  }
}

std::string ChainIr() {
  return "graph g(%x: f32[1,4,6,7]) {\n" + ConstIr("w1", {8, 4, 3, 3}, 0.1) + ConstIr("b1", {8}, 0.2) +
         "  %c1 = Conv(%x, %w1, %b1) {pads=[1,1,1,1]}\n  %r1 = Relu(%c1)\n" + ConstIr("wd", {8, 1, 3, 3}, 0.3) +
         "  %d = Conv(%r1, %wd) {group=8, pads=[1,1,1,1]}\n  %g = GlobalAveragePool(%d)\n" +
         ConstIr("ws", {8, 8, 1, 1}, 0.4) + "  %sc = Conv(%g, %ws)\n  %s = Sigmoid(%sc)\n  %m = Mul(%d, %s)\n" +
         ConstIr("k", {8, 1, 1}, 0.5) + "  %a = Add(%m, %k)\n" + ConstIr("sl", {8, 1, 1}, 0.6) +
         "  %p = PRelu(%a, %sl)\n  %cat = Concat(%p, %r1) {axis=1}\n" + ConstIr("w3", {6, 16, 1, 1}, 0.7) +
         "  %y = Conv(%cat, %w3)\n" + ConstIr("v", {7}, 0.8) + "  %z = Sub(%y, %v)\n  return %z, %r1\n}";
}

TEST(ChannelsLastTest, ConvChainRunsChannelsLastWithTransposesOnlyAtItsEdges) {
  std::shared_ptr<Graph> g, nchw;
  ASSERT_NO_FATAL_FAILURE(LayOutChannelsLast(ChainIr(), &g, &nchw));
  std::string text = PrintGraph(*g);
  EXPECT_EQ(CountOps(*g, "Conv"), 0) << text;
  EXPECT_EQ(CountOps(*g, "NhwcConv"), 4) << text;
  // Left: x in; z and r1 out (graph outputs). GlobalAveragePool became a ReduceMean over H and W.
  EXPECT_EQ(CountOps(*g, "Transpose"), 3) << text;
  EXPECT_EQ(CountOps(*g, "GlobalAveragePool"), 0) << text;
  EXPECT_EQ(CountOps(*g, "ReduceMean"), 1) << text;
  Tensor x(DType::kF32, {1, 4, 6, 7});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(std::cos(0.37 * i));
  ExpectSameOutputs(nchw, g, {x}, 2);
}

// An FPN step: a lateral 1x1 Conv, a nearest 2x Resize (scales) and a linear Resize (sizes) of a
// deeper level, their sum into a 3x3 Conv. Both Resizes run on the channels-last tensors (their scales /
// sizes permuted), so transposes remain only at the graph's edges.
TEST(ChannelsLastTest, ResizeBetweenConvolutionsRunsChannelsLast) {
  std::string ir = "graph g(%x: f32[1,3,8,10], %deep: f32[1,3,4,5]) {\n" + ConstIr("w1", {6, 3, 1, 1}, 0.1) +
                   ConstIr("w2", {6, 3, 1, 1}, 0.2) + ConstIr("w3", {4, 6, 3, 3}, 0.3) +
                   "  %lat = Conv(%x, %w1)\n  %d = Conv(%deep, %w2)\n"
                   "  %s = constant f32[4] {1, 1, 2, 2}\n  %up = Resize(%d, _, %s) {mode=\"nearest\"}\n"
                   "  %sz = constant i64[4] {1, 6, 8, 10}\n  %up2 = Resize(%d, _, _, %sz) {mode=\"linear\"}\n"
                   "  %sum = Add(%lat, %up)\n  %sum2 = Add(%sum, %up2)\n"
                   "  %y = Conv(%sum2, %w3) {pads=[1,1,1,1]}\n  return %y\n}";
  std::shared_ptr<Graph> g, nchw;
  ASSERT_NO_FATAL_FAILURE(LayOutChannelsLast(ir, &g, &nchw));
  std::string text = PrintGraph(*g);
  EXPECT_EQ(CountOps(*g, "NhwcConv"), 3) << text;
  EXPECT_EQ(CountOps(*g, "Resize"), 2) << text;
  EXPECT_EQ(CountOps(*g, "Transpose"), 3) << text;  // x and deep in, y out
  Tensor x(DType::kF32, {1, 3, 8, 10}), deep(DType::kF32, {1, 3, 4, 5});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(std::cos(0.37 * i));
  for (int64_t i = 0; i < deep.numel(); ++i) deep.data<float>()[i] = static_cast<float>(std::sin(0.53 * i));
  ExpectSameOutputs(nchw, g, {x, deep}, 1);
}

// `ir` (input %x: f32[1,4,6,7], output %y) laid out channels-last: `convs` NhwcConv, Transposes only for x
// in and y out, and the same output as the NCHW graph on a deterministic x.
void ExpectOneChannelsLastRegion(const std::string& ir, int convs) {
  std::shared_ptr<Graph> g, nchw;
  ASSERT_NO_FATAL_FAILURE(LayOutChannelsLast(ir, &g, &nchw));
  std::string text = PrintGraph(*g);
  EXPECT_EQ(CountOps(*g, "NhwcConv"), convs) << text;
  EXPECT_EQ(CountOps(*g, "Transpose"), 2) << text;  // x in, y out
  Tensor x(DType::kF32, {1, 4, 6, 7});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(std::cos(0.37 * i));
  ExpectSameOutputs(nchw, g, {x}, 1);
}

// A CSP / C2f block (YOLOv5/v8): a Conv's channels Split in two (sizes 3 and 5), one part convolved, both
// concatenated into a 1x1 Conv. The Split runs on the channels-last tensor along the permuted axis, so
// transposes remain only at the graph's edges (36 per run of a YOLO-style network before).
TEST(ChannelsLastTest, SplitBetweenConvolutionsRunsChannelsLast) {
  std::string ir = "graph g(%x: f32[1,4,6,7]) {\n" + ConstIr("w1", {8, 4, 3, 3}, 0.1) +
                   ConstIr("w2", {5, 5, 3, 3}, 0.2) + ConstIr("w3", {6, 8, 1, 1}, 0.3) +
                   "  %c = Conv(%x, %w1) {pads=[1,1,1,1]}\n  %sp = constant i64[2] {3, 5}\n"
                   "  %a, %b = Split(%c, %sp) {axis=1}\n  %cb = Conv(%b, %w2) {pads=[1,1,1,1]}\n"
                   "  %cat = Concat(%a, %cb) {axis=1}\n  %y = Conv(%cat, %w3)\n  return %y\n}";
  ExpectOneChannelsLastRegion(ir, 3);
}

// Casts between convolutions (auto_mixed_precision puts them at every color boundary) do not end the
// channels-last region: before, each bfloat16 convolution of ppocr_mobile_cls under AMP ran NCHW with
// reorders around it (0.48 ms against 0.36 in float32; now 0.36). Here a float64 round trip, exact, so the
// laid-out graph must match the NCHW one to 1e-5.
TEST(ChannelsLastTest, CastsBetweenConvolutionsStayChannelsLast) {
  std::string ir = "graph g(%x: f32[1,4,6,7]) {\n" + ConstIr("w1", {8, 4, 3, 3}, 0.1) +
                   ConstIr("w2", {5, 8, 3, 3}, 0.2) +
                   "  %c = Conv(%x, %w1) {pads=[1,1,1,1]}\n  %d = Cast(%c) {to=11}\n  %r = Relu(%d)\n"
                   "  %f = Cast(%r) {to=1}\n  %y = Conv(%f, %w2) {pads=[1,1,1,1]}\n  return %y\n}";
  ExpectOneChannelsLastRegion(ir, 2);
}

// A Conv1d stack whose output the model itself transposes to [N, L, C] for a normalization over C (an
// audio encoder's front end). For rank 3 the model's Transpose has the pass's own channels-first
// permutation ([0, 2, 1]); the pass must not take it for one of its transposes: before, it moved the
// Sub / Div after it onto the [N, C, L] layout (reductions over strided rows, three more transposes;
// 3.3 of 11 ms in such a model). Now the model's Transpose cancels the pass's and nothing else moves.
TEST(ChannelsLastTest, ModelTransposeOfAConv1dStackIsNotThePasses) {
  std::string ir = "graph g(%x: f32[1,4,12]) {\n" + ConstIr("w1", {6, 4, 3}, 0.1) + ConstIr("w2", {6, 6, 3}, 0.2) +
                   "  %c1 = Conv(%x, %w1) {pads=[1,1]}\n  %c2 = Conv(%c1, %w2) {pads=[1,1]}\n"
                   "  %t = Transpose(%c2) {perm=[0,2,1]}\n  %m = ReduceMean(%t) {axes=[2], keepdims=1}\n"
                   "  %d = Sub(%t, %m)\n  %q = Mul(%d, %d)\n  %v = ReduceMean(%q) {axes=[2], keepdims=1}\n"
                   "  %one = constant f32[] {1}\n  %s = Add(%v, %one)\n  %y = Div(%d, %s)\n  return %y\n}";
  std::shared_ptr<Graph> g, nchw;
  ASSERT_NO_FATAL_FAILURE(LayOutChannelsLast(ir, &g, &nchw));
  const std::string text = PrintGraph(*g);
  EXPECT_EQ(CountOps(*g, "NhwcConv"), 2) << text;
  EXPECT_EQ(CountOps(*g, "Transpose"), 1) << text;  // x in
  Tensor x(DType::kF32, {1, 4, 12});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(std::cos(0.37 * i));
  ExpectSameOutputs(nchw, g, {x}, 1);
}

TEST(ChannelsLastTest, IsolatedConvolutionStaysNchw) {
  auto g = SpecializedGraphFromText("graph g(%x: f32[1,2,5,5]) {\n" + ConstIr("w", {3, 2, 3, 3}, 0.1) +
                                    "  %c = Conv(%x, %w)\n  %r = Relu(%c)\n  %t = Transpose(%r) {perm=[0,2,1,3]}\n"
                                    "  return %t\n}");
  ASSERT_TRUE(g.ok()) << g.status();
  auto changed = AssignChannelsLastLayout(**g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed) << PrintGraph(**g);
  EXPECT_EQ(CountOps(**g, "Conv"), 1);
}

// tf2onnx / keras2onnx export an NHWC model as Transpose(to NCHW) -> ops -> Transpose(back to NHWC) around
// every layout-sensitive op. A lone Conv between the model's own Transposes runs channels-last and both
// Transposes cancel against the pass's: no transpose is left.
TEST(ChannelsLastTest, ModelTransposesAroundALoneConvolutionCancel) {
  std::string ir = "graph g(%x: f32[1,6,7,4]) {\n" + ConstIr("w", {5, 4, 3, 3}, 0.1) + ConstIr("b", {5}, 0.2) +
                   "  %t = Transpose(%x) {perm=[0,3,1,2]}\n  %c = Conv(%t, %w, %b) {pads=[1,1,1,1]}\n"
                   "  %r = Relu(%c)\n  %y = Transpose(%r) {perm=[0,2,3,1]}\n  return %y\n}";
  std::shared_ptr<Graph> g, nchw;
  ASSERT_NO_FATAL_FAILURE(LayOutChannelsLast(ir, &g, &nchw));
  const std::string text = PrintGraph(*g);
  EXPECT_EQ(CountOps(*g, "NhwcConv"), 1) << text;
  EXPECT_EQ(CountOps(*g, "Transpose"), 0) << text;
  Tensor x(DType::kF32, {1, 6, 7, 4});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(std::cos(0.37 * i));
  ExpectSameOutputs(nchw, g, {x}, 1);
}

// Without any convolution: the model's Transpose to NCHW, pooling / Resize / Pad / elementwise ops, and its
// Transpose back. The ops run on the NHWC tensor and both Transposes go (MaxPool_nhwc of tools/op-bench:
// 2.1x ORT's time before, with the two transposes; 0.65x after).
TEST(ChannelsLastTest, ModelTransposesAroundPoolResizeAndPadCancel) {
  std::string ir =
      "graph g(%x: f32[1,9,11,5]) {\n"
      "  %t = Transpose(%x) {perm=[0,3,1,2]}\n"
      "  %p = MaxPool(%t) {kernel_shape=[3,3], strides=[2,2], pads=[1,1,1,1]}\n"
      "  %s = constant f32[4] {1, 1, 2, 2}\n  %u = Resize(%p, _, %s) {mode=\"linear\"}\n"
      "  %pads = constant i64[8] {0, 0, 1, 2, 0, 0, 2, 1}\n  %q = Pad(%u, %pads) {mode=\"reflect\"}\n"
      "  %pads2 = constant i64[4] {1, 0, 0, 3}\n  %axes = constant i64[2] {-1, 2}\n"
      "  %q2 = Pad(%q, %pads2, _, %axes)\n"
      "  %e = Sigmoid(%q2)\n  %y = Transpose(%e) {perm=[0,2,3,1]}\n  return %y\n}";
  std::shared_ptr<Graph> g, nchw;
  ASSERT_NO_FATAL_FAILURE(LayOutChannelsLast(ir, &g, &nchw));
  const std::string text = PrintGraph(*g);
  EXPECT_EQ(CountOps(*g, "Transpose"), 0) << text;
  EXPECT_EQ(CountOps(*g, "NhwcMaxPool"), 1) << text;
  Tensor x(DType::kF32, {1, 9, 11, 5});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(std::cos(0.37 * i));
  ExpectSameOutputs(nchw, g, {x}, 1);
}

// A model Transpose to NCHW whose result reaches neither a Conv nor a Transpose back stays where it is
// (moving it down would only move the transpose).
TEST(ChannelsLastTest, ModelTransposeWithoutAPartnerStays) {
  auto g = SpecializedGraphFromText(
      "graph g(%x: f32[1,9,11,5]) {\n  %t = Transpose(%x) {perm=[0,3,1,2]}\n"
      "  %p = MaxPool(%t) {kernel_shape=[3,3]}\n  %y = Flatten(%p)\n  return %y\n}");
  ASSERT_TRUE(g.ok()) << g.status();
  auto changed = AssignChannelsLastLayout(**g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed) << PrintGraph(**g);
}

// FoldPadIntoConv: zero Pads of the spatial axes become the convolution's pads (NCHW and, after the layout
// pass, channels-last; the opset-2 attribute form and the opset-18 axes form); reflect Pads, non-zero
// values, a padded batch and Pads wider than the kernel stay. Outputs equal the unfolded graph's.
TEST(FoldPadIntoConvTest, ZeroPadsBecomeConvolutionPads) {
  struct Case {
    std::string pad;  // IR of %p from %x (f32[1,4,6,7])
    bool folds;
  };
  const std::vector<Case> cases = {
      {"  %pd = constant i64[8] {0, 0, 1, 0, 0, 0, 2, 1}\n  %p = Pad(%x, %pd)\n", true},
      {"  %pd = constant i64[8] {0, 0, 0, 1, 0, 0, 1, 1}\n  %z = constant f32[] {0}\n  %p = Pad(%x, %pd, %z)\n", true},
      {"  %pd = constant i64[4] {1, 1, 0, 1}\n  %ax = constant i64[2] {2, 3}\n  %p = Pad(%x, %pd, _, %ax)\n", true},
      {"  %pd = constant i64[8] {0, 0, 1, 1, 0, 0, 1, 1}\n  %p = Pad(%x, %pd) {mode=\"reflect\"}\n", false},
      {"  %pd = constant i64[8] {0, 0, 1, 1, 0, 0, 1, 1}\n  %z = constant f32[] {0.5}\n  %p = Pad(%x, %pd, %z)\n",
       false},
      {"  %pd = constant i64[8] {1, 0, 1, 1, 0, 0, 1, 1}\n  %p = Pad(%x, %pd)\n", false},  // batch
      {"  %pd = constant i64[8] {0, 0, 3, 0, 0, 0, 0, 0}\n  %p = Pad(%x, %pd)\n", false},  // beyond the kernel
  };
  for (const Case& c : cases) {
    for (bool channels_last : {false, true}) {
      // Two convolutions in a chain so that the layout pass takes them (channels_last).
      const std::string ir = "graph g(%x: f32[1,4,6,7]) {\n" + c.pad + ConstIr("w", {5, 4, 3, 3}, 0.1) +
                             ConstIr("b", {5}, 0.2) + "  %c = Conv(%p, %w, %b) {pads=[1,0,0,1], strides=[2,1]}\n" +
                             ConstIr("w2", {3, 5, 1, 1}, 0.3) + "  %y = Conv(%c, %w2)\n  return %y\n}";
      auto parsed = SpecializedGraphFromText(ir);
      ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << ir;
      std::shared_ptr<Graph> g(std::move(*parsed));
      std::shared_ptr<Graph> reference(g->Clone());
      // As a session runs them: before the layout pass (NCHW Pads) and after it (Pads it moved).
      auto folded = FoldPadIntoConv(*g);
      ASSERT_TRUE(folded.ok()) << folded.status();
      if (channels_last) {
        ASSERT_TRUE(AssignChannelsLastLayout(*g).ok());
        ASSERT_TRUE(RemoveNoOps(*g).ok());
        auto more = FoldPadIntoConv(*g);
        ASSERT_TRUE(more.ok()) << more.status();
        *folded += *more;
      }
      ASSERT_TRUE(VerifyGraph(*g).ok()) << PrintGraph(*g);
      EXPECT_EQ(*folded, c.folds ? 1 : 0) << c.pad << PrintGraph(*g);
      EXPECT_EQ(CountOps(*g, "Pad"), c.folds ? 0 : 1) << PrintGraph(*g);
      Tensor x(DType::kF32, {1, 4, 6, 7});
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(std::cos(0.37 * i) + 0.5);
      ExpectSameOutputs(reference, g, {x}, 1);
    }
  }
}

TEST(ChannelsLastTest, OneDimensionalConvChain) {
  std::shared_ptr<Graph> g, ncw;
  const std::string ir = "graph g(%x: f32[2,3,20]) {\n" + ConstIr("w1", {5, 3, 3}, 0.1) +
                         "  %c = Conv(%x, %w1) {strides=[2]}\n  %t = Tanh(%c)\n" + ConstIr("w2", {4, 5, 1}, 0.2) +
                         "  %y = Conv(%t, %w2)\n  return %y\n}";
  ASSERT_NO_FATAL_FAILURE(LayOutChannelsLast(ir, &g, &ncw));
  EXPECT_EQ(CountOps(*g, "NhwcConv"), 2) << PrintGraph(*g);
  EXPECT_EQ(CountOps(*g, "Transpose"), 2) << PrintGraph(*g);
  Tensor x(DType::kF32, {2, 3, 20});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(std::sin(0.91 * i));
  ExpectSameOutputs(ncw, g, {x}, 1);
}

// --cpu_channels_last: on (the default) a Session runs a conv chain as NhwcConv, off as ONNX Conv, and both
// give the same numbers.
TEST(ChannelsLastTest, FlagSelectsTheLayout) {
  testing::ModelBuilder b;
  b.Input("x", onnx::TensorProto::FLOAT, {1, 2, 5, 5}).Output("y");
  b.InitFloats("w1", {3, 2, 3, 3}, std::vector<float>(54, 0.25f));
  b.InitFloats("w2", {2, 3, 1, 1}, {1, -1, 0.5f, -0.5f, 2, 1});
  b.Node("Conv", {"x", "w1"}, {"c"});
  b.Node("Relu", {"c"}, {"r"});
  b.Node("Conv", {"r", "w2"}, {"y"});
  Tensor x(DType::kF32, {1, 2, 5, 5});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(std::sin(0.3 * i));
  std::vector<Tensor> outs;
  for (bool on : {true, false}) {
    SessionOptions o;
    o.use_environment_flags = false;
    o.flags.device = "cpu";
    o.flags.auto_jit = "-1";
    o.flags.cpu_channels_last = on;
    o.profile = true;
    auto s = Session::LoadFromBytes(b.Bytes(), o);
    ASSERT_TRUE(s.ok()) << s.status();
    auto r = (*s)->Run({{"x", x}});
    ASSERT_TRUE(r.ok()) << r.status();
    outs.push_back((*r)[0].tensor);
    int nhwc = 0, nchw = 0;
    for (const TraceEvent& e : (*s)->profiler()->Events()) {
      nhwc += e.name == "NhwcConv";
      nchw += e.name == "Conv";
    }
    EXPECT_EQ(nhwc, on ? 2 : 0) << on;
    EXPECT_EQ(nchw, on ? 0 : 2) << on;
  }
  OutputComparison c = CompareTensors("y", outs[0], outs[1], 1e-5, 1e-5);
  EXPECT_TRUE(c.ok) << c.max_abs << " " << c.problem;
}

// MaxPool / AveragePool between convolutions run channels-last (com.clusterjit.NhwcMaxPool /
// NhwcAveragePool: ResNet's stem pool, YOLO's SPPF). Two 1x1 depthwise convolutions with unit weights (exact
// identities) around each pool connect it; the output is checked against float64 pooling of the input
// (ONNX MaxPool / AveragePool: pads, strides, dilations, ceil_mode, count_include_pad; 2-D and 1-D; 19
// channels = 16 + 3 reach the vector and the scalar lanes), op by op and compiled, on every ISA variant.
struct PoolSpec {
  std::string op;
  std::vector<int64_t> kernel, strides, pads, dilations;  // pads: begin.., end..
  int64_t ceil_mode = 0, count_include_pad = 0;
};

// Output size of one axis (ONNX pooling: ceil_mode rounds up, but a window may not start in the end padding).
int64_t PoolOut(int64_t in, int64_t k, int64_t s, int64_t pb, int64_t pe, int64_t d, bool ceil_mode) {
  const int64_t span = in + pb + pe - ((k - 1) * d + 1);
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + pb) --out;
  return out;
}

// float64 pooling of x [C, d..] (1 or 2 spatial axes) by `p`; *out_dims receives the output's spatial dims.
std::vector<double> ReferencePool(const std::vector<float>& x, int64_t C, const std::vector<int64_t>& in,
                                  const PoolSpec& p, std::vector<int64_t>* out_dims) {
  const size_t n = in.size();
  std::vector<int64_t> out(n);
  for (size_t a = 0; a < n; ++a) {
    out[a] = PoolOut(in[a], p.kernel[a], p.strides[a], p.pads[a], p.pads[a + n], p.dilations[a], p.ceil_mode != 0);
  }
  *out_dims = out;
  const int64_t H = n == 2 ? in[0] : 1, W = in[n - 1], OH = n == 2 ? out[0] : 1, OW = out[n - 1];
  const int64_t KH = n == 2 ? p.kernel[0] : 1, KW = p.kernel[n - 1];
  const int64_t sh = n == 2 ? p.strides[0] : 1, sw = p.strides[n - 1];
  const int64_t dh = n == 2 ? p.dilations[0] : 1, dw = p.dilations[n - 1];
  const int64_t ph = n == 2 ? p.pads[0] : 0, pw = p.pads[n - 1];
  const int64_t peh = n == 2 ? p.pads[n] : 0, pew = p.pads[2 * n - 1];
  std::vector<double> y;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double acc = p.op == "MaxPool" ? -std::numeric_limits<double>::infinity() : 0.0;
        int64_t count = 0;
        for (int64_t kh = 0; kh < KH; ++kh)
          for (int64_t kw = 0; kw < KW; ++kw) {
            const int64_t ih = oh * sh - ph + kh * dh, iw = ow * sw - pw + kw * dw;
            const bool inside = ih >= 0 && ih < H && iw >= 0 && iw < W;
            if (p.count_include_pad && ih < H + peh && iw < W + pew) ++count;
            if (!inside) continue;
            if (!p.count_include_pad) ++count;
            const double v = x[(c * H + ih) * W + iw];
            acc = p.op == "MaxPool" ? std::max(acc, v) : acc + v;
          }
        y.push_back(p.op == "MaxPool" ? acc : acc / static_cast<double>(count));
      }
  return y;
}

TEST(ChannelsLastTest, PoolingBetweenConvolutionsMatchesFloat64) {
  const std::vector<std::pair<std::vector<int64_t>, PoolSpec>> cases = {
      {{11, 13}, {"MaxPool", {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}}},                // ResNet's stem pool
      {{9, 8}, {"MaxPool", {5, 5}, {1, 1}, {2, 2, 2, 2}, {1, 1}}},                  // SPPF
      {{8, 10}, {"MaxPool", {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}}},                 // the 2 x 2 / 2 pairs
      {{9, 11}, {"MaxPool", {3, 2}, {2, 3}, {0, 1, 0, 1}, {2, 1}, 1}},              // ceil_mode, dilations
      {{7, 9}, {"AveragePool", {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0, 0}},        // pads not counted
      {{7, 9}, {"AveragePool", {3, 3}, {2, 2}, {1, 0, 1, 0}, {1, 1}, 1, 1}},        // counted, ceil_mode
      {{1, 23}, {"AveragePool", {4}, {3}, {2, 1}, {1}, 0, 1}},                      // 1-D
      {{1, 17}, {"MaxPool", {3}, {1}, {1, 1}, {2}}}};                               // 1-D, dilated
  const int64_t C = 19;
  unsigned seed = 130;
  for (const auto& [spatial, p] : cases) {
    const bool one_d = p.kernel.size() == 1;
    std::vector<int64_t> in = one_d ? std::vector<int64_t>{spatial[1]} : spatial;
    std::vector<int64_t> xdims{1, C};
    xdims.insert(xdims.end(), in.begin(), in.end());
    testing::ModelBuilder m(19);
    m.Input("x", onnx::TensorProto::FLOAT, xdims).Output("y");
    m.InitFloats("ones", one_d ? std::vector<int64_t>{C, 1, 1} : std::vector<int64_t>{C, 1, 1, 1},
                 std::vector<float>(static_cast<size_t>(C), 1.0f));
    testing::ModelBuilder::AttrInt(m.Node("Conv", {"x", "ones"}, {"a"}), "group", C);
    auto* pool = m.Node(p.op, {"a"}, {"b"});
    testing::ModelBuilder::AttrInts(pool, "kernel_shape", p.kernel);
    testing::ModelBuilder::AttrInts(pool, "strides", p.strides);
    testing::ModelBuilder::AttrInts(pool, "pads", p.pads);
    testing::ModelBuilder::AttrInts(pool, "dilations", p.dilations);
    testing::ModelBuilder::AttrInt(pool, "ceil_mode", p.ceil_mode);
    if (p.op == "AveragePool") testing::ModelBuilder::AttrInt(pool, "count_include_pad", p.count_include_pad);
    testing::ModelBuilder::AttrInt(m.Node("Conv", {"b", "ones"}, {"y"}), "group", C);
    Tensor x(DType::kF32, xdims);
    const std::vector<float> xv = testing::RandomFloats(static_cast<size_t>(x.numel()), seed++);
    std::copy(xv.begin(), xv.end(), x.data<float>());
    std::vector<int64_t> out_dims;
    const std::vector<double> want = ReferencePool(xv, C, in, p, &out_dims);
    ExpectMatchesOnEveryIsaVariant(m, x, want, {kOpByOpAndCompiled[0], kOpByOpAndCompiled[1]}, 1e-6,
                                   p.op + " case " + std::to_string(seed));
  }
  // The pass moved the pool: Transposes only at the chain's two ends.
  std::shared_ptr<Graph> g, nchw;
  LayOutChannelsLast("graph g(%x: f32[1,8,9,9]) {\n" + ConstIr("w1", {8, 8, 1, 1}, 0.1) +
                         ConstIr("w2", {8, 8, 1, 1}, 0.2) +
                         "  %c = Conv(%x, %w1)\n  %r = Relu(%c)\n"
                         "  %p = MaxPool(%r) {kernel_shape=[3,3], pads=[1,1,1,1], strides=[2,2]}\n"
                         "  %q = AveragePool(%p) {kernel_shape=[2,2]}\n  %y = Conv(%q, %w2)\n  return %y\n}",
                     &g, &nchw);
  EXPECT_EQ(CountOps(*g, "NhwcMaxPool"), 1);
  EXPECT_EQ(CountOps(*g, "NhwcAveragePool"), 1);
  EXPECT_EQ(CountOps(*g, "Transpose"), 2);
}

// com.clusterjit.NhwcMaxPool / NhwcAveragePool written into a model by hand with inputs the pass never
// makes (rank 5, a kernel that does not match the rank, int64 data, a padded window of only padding) is a
// clear error naming the node, never a crash or a read outside X.
TEST(ChannelsLastTest, MalformedChannelsLastPoolInAModelIsAClearError) {
  struct Bad {
    std::string op;
    std::vector<int64_t> x;
    std::vector<int64_t> kernel, pads;
    int elem;
  };
  const std::vector<Bad> bads = {
      {"NhwcMaxPool", {1, 4, 4, 4, 3}, {2, 2, 2}, {}, onnx::TensorProto::FLOAT},
      {"NhwcMaxPool", {1, 6, 6, 3}, {2}, {}, onnx::TensorProto::FLOAT},
      {"NhwcAveragePool", {1, 6, 6, 3}, {2, 2}, {}, onnx::TensorProto::INT64},
      {"NhwcAveragePool", {1, 6, 6, 3}, {2, 2}, {2, 2, 2, 2}, onnx::TensorProto::FLOAT},
      {"NhwcMaxPool", {1, 6, 6, 3}, {9, 9}, {}, onnx::TensorProto::FLOAT},
  };
  for (const Bad& b : bads) {
    testing::ModelBuilder m(14);
    m.Input("x", b.elem, b.x).Output("y");
    auto* n = m.Node(b.op, {"x"}, {"y"}, "pool");
    n->set_domain("com.clusterjit");
    testing::ModelBuilder::AttrInts(n, "kernel_shape", b.kernel);
    if (!b.pads.empty()) testing::ModelBuilder::AttrInts(n, "pads", b.pads);
    auto* opset = m.proto().add_opset_import();
    opset->set_domain("com.clusterjit");
    opset->set_version(1);
    for (const char* jit : {"-1", "1"}) {
      SessionOptions o;
      o.use_environment_flags = false;
      o.flags.device = "cpu";
      o.flags.auto_jit = jit;
      o.flags.min_cluster_size = 1;
      auto s = Session::LoadFromBytes(m.Bytes(), o);
      absl::Status st = s.ok() ? (*s)->Run({{"x", Tensor(b.elem == onnx::TensorProto::INT64 ? DType::kI64 : DType::kF32,
                                                         b.x)}}).status()
                               : s.status();
      EXPECT_FALSE(st.ok()) << b.op << " " << absl::StrJoin(b.x, "x") << " auto_jit=" << jit;
      EXPECT_NE(std::string(st.message()).find("pool"), std::string::npos) << st;
    }
  }
}

}  // namespace
}  // namespace cjit
