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
#include "tests/graph_util.h"
#include "tests/isa_variants.h"
#include "tests/model_builder.h"
#include "tests/random_floats.h"
#include "tests/session_options.h"
#include "tools/check_lib.h"

namespace cjit {
namespace {

// "%name = constant f32[dims] {values}" with deterministic values in [-1, 1].
std::string Const(const std::string& name, const std::vector<int64_t>& dims, double seed) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<std::string> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(absl::StrCat(std::sin(seed + 0.7 * i)));
  return absl::StrCat("  %", name, " = constant f32[", absl::StrJoin(dims, ","), "] {", absl::StrJoin(v, ", "), "}\n");
}

using testing::CountOps;
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
  return "graph g(%x: f32[1,4,6,7]) {\n" + Const("w1", {8, 4, 3, 3}, 0.1) + Const("b1", {8}, 0.2) +
         "  %c1 = Conv(%x, %w1, %b1) {pads=[1,1,1,1]}\n  %r1 = Relu(%c1)\n" + Const("wd", {8, 1, 3, 3}, 0.3) +
         "  %d = Conv(%r1, %wd) {group=8, pads=[1,1,1,1]}\n  %g = GlobalAveragePool(%d)\n" +
         Const("ws", {8, 8, 1, 1}, 0.4) + "  %sc = Conv(%g, %ws)\n  %s = Sigmoid(%sc)\n  %m = Mul(%d, %s)\n" +
         Const("k", {8, 1, 1}, 0.5) + "  %a = Add(%m, %k)\n" + Const("sl", {8, 1, 1}, 0.6) +
         "  %p = PRelu(%a, %sl)\n  %cat = Concat(%p, %r1) {axis=1}\n" + Const("w3", {6, 16, 1, 1}, 0.7) +
         "  %y = Conv(%cat, %w3)\n" + Const("v", {7}, 0.8) + "  %z = Sub(%y, %v)\n  return %z, %r1\n}";
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
  std::string ir = "graph g(%x: f32[1,3,8,10], %deep: f32[1,3,4,5]) {\n" + Const("w1", {6, 3, 1, 1}, 0.1) +
                   Const("w2", {6, 3, 1, 1}, 0.2) + Const("w3", {4, 6, 3, 3}, 0.3) +
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
  std::string ir = "graph g(%x: f32[1,4,6,7]) {\n" + Const("w1", {8, 4, 3, 3}, 0.1) + Const("w2", {5, 5, 3, 3}, 0.2) +
                   Const("w3", {6, 8, 1, 1}, 0.3) +
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
  std::string ir = "graph g(%x: f32[1,4,6,7]) {\n" + Const("w1", {8, 4, 3, 3}, 0.1) + Const("w2", {5, 8, 3, 3}, 0.2) +
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
  std::string ir = "graph g(%x: f32[1,4,12]) {\n" + Const("w1", {6, 4, 3}, 0.1) + Const("w2", {6, 6, 3}, 0.2) +
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
  auto g = SpecializedGraphFromText("graph g(%x: f32[1,2,5,5]) {\n" + Const("w", {3, 2, 3, 3}, 0.1) +
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
  std::string ir = "graph g(%x: f32[1,6,7,4]) {\n" + Const("w", {5, 4, 3, 3}, 0.1) + Const("b", {5}, 0.2) +
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
      {"  %pd = constant i64[8] {0, 0, 1, 1, 0, 0, 1, 1}\n  %z = constant f32[] {0.5}\n  %p = Pad(%x, %pd, %z)\n", false},
      {"  %pd = constant i64[8] {1, 0, 1, 1, 0, 0, 1, 1}\n  %p = Pad(%x, %pd)\n", false},  // batch
      {"  %pd = constant i64[8] {0, 0, 3, 0, 0, 0, 0, 0}\n  %p = Pad(%x, %pd)\n", false},  // beyond the kernel
  };
  for (const Case& c : cases) {
    for (bool channels_last : {false, true}) {
      // Two convolutions in a chain so that the layout pass takes them (channels_last).
      const std::string ir = "graph g(%x: f32[1,4,6,7]) {\n" + c.pad + Const("w", {5, 4, 3, 3}, 0.1) +
                             Const("b", {5}, 0.2) + "  %c = Conv(%p, %w, %b) {pads=[1,0,0,1], strides=[2,1]}\n" +
                             Const("w2", {3, 5, 1, 1}, 0.3) + "  %y = Conv(%c, %w2)\n  return %y\n}";
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
  const std::string ir = "graph g(%x: f32[2,3,20]) {\n" + Const("w1", {5, 3, 3}, 0.1) +
                         "  %c = Conv(%x, %w1) {strides=[2]}\n  %t = Tanh(%c)\n" + Const("w2", {4, 5, 1}, 0.2) +
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


// A stride-1 NCHW convolution: C -> OC channels, a KH x KW kernel, pads ph / pw on both sides.
struct ConvSpec {
  int64_t C, OC, KH, KW, ph, pw;
};

// Y [OC, H, W] of `c` on X [C, H, W] with weights w [OC, C, KH, KW] and bias b, in float64.
std::vector<double> ReferenceConv(const std::vector<double>& x, const std::vector<float>& w, const std::vector<float>& b,
                                  const ConvSpec& c, int64_t H, int64_t W) {
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
              acc += double(x[((o / opg * cpg + i) * c.H + ih) * c.W + iw]) * w[((o * cpg + i) * c.KH + kh) * c.KW + kw];
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
    const std::vector<float> w = testing::RandomFloats(static_cast<size_t>(c.OC * (c.C / c.group) * c.KH * c.KW), seed++);
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

// Adds Conv(in -> out) of `c` with random weights and bias (returned) to `m`.
std::pair<std::vector<float>, std::vector<float>> AddConv(testing::ModelBuilder& m, const ConvSpec& c,
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
void AddIdentityDepthwise(testing::ModelBuilder& m, const std::string& in, int64_t channels,
                          const std::string& out = "y") {
  m.InitFloats("ones", {channels, 1, 1, 1}, std::vector<float>(static_cast<size_t>(channels), 1.0f));
  testing::ModelBuilder::AttrInt(m.Node("Conv", {in, "ones"}, {out}), "group", channels);
}

// Runs `m` (input x) on every ISA variant of the conv loops this CPU has, with each of `modes` (appended
// to "--device=cpu --intra_op_threads=2 --autotune_level=0"), and checks every output element against
// `want` (float64) within tol * (1 + |want|).
void ExpectMatchesOnEveryIsaVariant(const testing::ModelBuilder& m, const Tensor& x, const std::vector<double>& want,
                                    const std::vector<std::string>& modes, double tol, const std::string& what) {
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

// The channels-last loops (runtime/cpu/conv_kernels_spatial.cc: few-channel stem, depthwise; vec_math.cc: conv epilogue) are
// compiled for AVX-512, AVX2 and the SSE2 baseline, each with its own register width; a CPU runs one of
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
      {16, 64, 5, 7},   {24, 72, 5, 7},   {7, 13, 5, 7},   {32, 128, 5, 7},  {128, 96, 5, 7},  {3, 136, 5, 7},
      {128, 200, 5, 7}, {144, 24, 12, 12}, {192, 112, 5, 7}, {160, 160, 5, 7}, {200, 80, 12, 12}, {129, 13, 5, 7},
      {1024, 192, 5, 7}, {256, 64, 12, 12},
      // Channel counts whose last block overlaps the previous one (28 = 16 + 8 + 4, 42 = 2 x 16 + 8 + 2,
      // 6 = 4 + 2) or is scalar (3), for the pointwise and the identity depthwise convolutions.
      {24, 28, 5, 7},   {36, 42, 5, 7},    {32, 6, 5, 7},   {8, 3, 5, 7},     {28, 36, 5, 7}};
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
    ExpectMatchesOnEveryIsaVariant(m, x, want,
                                   {kOpByOpAndCompiled[0], "--auto_jit=-1 --cpu_fuse_pointwise_depthwise=false",
                                    kOpByOpAndCompiled[1]},
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
  LayOutChannelsLast("graph g(%x: f32[1,8,9,9]) {\n" + Const("w1", {8, 8, 1, 1}, 0.1) + Const("w2", {8, 8, 1, 1}, 0.2) +
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

// A framing convolution (1-D, few input channels, a long kernel with a large stride: fewer output frames
// than output channels, as a spectrogram's STFT as Conv) runs im2col over frames + one GEMM; with pads and
// dilations (frames partly outside the signal), NCHW and channels-last, op by op and compiled, against
// float64 loops.
TEST(ChannelsLastTest, FramingConvolutionsOverFewOutputFramesMatchFloat64) {
  struct Case { int64_t C, L, K, stride, dilation, pad, OC; };
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
  struct Case { int64_t C, OC, K, H, W; };
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
    ExpectMatchesOnEveryIsaVariant(m, x, want, {kOpByOpAndCompiled[0], kOpByOpAndCompiled[1]}, 1e-4,
                                   "C=" + std::to_string(k.C) + " OC=" + std::to_string(k.OC) +
                                       " K=" + std::to_string(k.K));
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
      {"batch2_k5_asym_pads", 2, 5, 20, 23, 31, 5, {1, 1}, {2, 1, 2, 3}, {1, 1}, {"HardSigmoid", "Clip"}, false, true, false, 1},
      {"dilated_hardswish_post_relu", 1, 12, 24, 17, 19, 3, {1, 1}, {2, 2, 2, 2}, {2, 2}, {"HardSwish"}, true, false, true, 2},
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
    std::string ir = "graph g(%x: f32[1,4,9,9]) {\n" + Const("w1", {8, 4, 1, 1}, 0.1) + Const("w2", {8, 1, 3, 3}, 0.2) +
                     "  %p = Conv(%x, %w1)\n  %a = " + mid_op + "(%p)\n  %y = Conv(%a, %w2) {group=8, pads=[1,1,1,1]}\n" +
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
    auto f = ParseFlags(absl::StrCat("--device=cpu --auto_jit=-1 --cpu_fuse_pointwise_depthwise=", on ? "true" : "false"));
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
      {{"x", "w1", "", "", ""}, {8, 1, 3, 3}, {}, {}},                 // W2 absent
      {{"x", "w1", "", "w2", ""}, {8, 2, 3, 3}, {}, {}},               // W2 not depthwise
      {{"x", "w1", "", "w2", ""}, {8, 1, 3, 3}, {"Relu"}, {}},         // mid_params missing
      {{"x", "w1", "", "w2", ""}, {8, 1, 3, 3}, {"Gelu"}, {0, 0}},     // unknown mid op
      {{"x", "", "", "w2", ""}, {8, 1, 3, 3}, {}, {}},                 // W1 absent
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
