// Channels-last layout assignment (compiler/passes/layout.h): which convolutions move, where transposes
// remain, and the rewritten graph computes what the NCHW graph computes (the NCHW graph runs the ONNX
// Conv kernel with its own layout handling; tests/op_reference_suite.py checks the same chain against
// numpy float64).
#include "compiler/passes/layout.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/status_macros.h"
#include "compiler/ir/text.h"
#include "compiler/passes/simplify.h"
#include "compiler/passes/specialize_shapes.h"
#include "gtest/gtest.h"
#include "flags/flags.h"
#include "runtime/executor.h"
#include "runtime/profiler.h"
#include "runtime/session.h"
#include "runtime/cpu/conv_gemm.h"
#include "tests/graph_util.h"
#include "tests/model_builder.h"
#include "tests/random_floats.h"
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

int Count(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op_type == op;
  return n;
}

using testing::RunGraph;

// Conv -> Relu -> depthwise Conv -> squeeze-excitation (GlobalAveragePool, 1x1 Conv, Sigmoid, Mul) ->
// Add / PRelu by per-channel constants -> Concat with the Relu output -> 1x1 Conv -> Sub of a constant
// broadcast along W; the Relu output is also a graph output.
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
  auto parsed = SpecializedGraphFromText(ChainIr());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  std::shared_ptr<Graph> g(std::move(*parsed));
  std::shared_ptr<Graph> nchw(g->Clone());
  auto changed = AssignChannelsLastLayout(*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  ASSERT_TRUE(RemoveNoOps(*g).ok());
  std::string text = PrintGraph(*g);
  EXPECT_EQ(Count(*g, "Conv"), 0) << text;
  EXPECT_EQ(Count(*g, "NhwcConv"), 4) << text;
  // Left: x in; z and r1 out (graph outputs). GlobalAveragePool became a ReduceMean over H and W.
  EXPECT_EQ(Count(*g, "Transpose"), 3) << text;
  EXPECT_EQ(Count(*g, "GlobalAveragePool"), 0) << text;
  EXPECT_EQ(Count(*g, "ReduceMean"), 1) << text;
  Tensor x(DType::kF32, {1, 4, 6, 7});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(std::cos(0.37 * i));
  std::vector<Tensor> want = RunGraph(nchw, {x}), got = RunGraph(g, {x});
  ASSERT_EQ(want.size(), 2u);
  ASSERT_EQ(got.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(got[k].dims(), want[k].dims());
    OutputComparison c = CompareTensors("out", got[k], want[k], 1e-5, 1e-5);
    EXPECT_TRUE(c.ok) << k << ": max_abs " << c.max_abs << " " << c.problem;
  }
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
  auto parsed = SpecializedGraphFromText(ir);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  std::shared_ptr<Graph> g(std::move(*parsed));
  std::shared_ptr<Graph> nchw(g->Clone());
  auto changed = AssignChannelsLastLayout(*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  ASSERT_TRUE(RemoveNoOps(*g).ok());
  std::string text = PrintGraph(*g);
  EXPECT_EQ(Count(*g, "NhwcConv"), 3) << text;
  EXPECT_EQ(Count(*g, "Resize"), 2) << text;
  EXPECT_EQ(Count(*g, "Transpose"), 3) << text;  // x and deep in, y out
  Tensor x(DType::kF32, {1, 3, 8, 10}), deep(DType::kF32, {1, 3, 4, 5});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(std::cos(0.37 * i));
  for (int64_t i = 0; i < deep.numel(); ++i) deep.data<float>()[i] = static_cast<float>(std::sin(0.53 * i));
  std::vector<Tensor> want = RunGraph(nchw, {x, deep}), got = RunGraph(g, {x, deep});
  ASSERT_EQ(want.size(), 1u);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].dims(), want[0].dims());
  OutputComparison c = CompareTensors("y", got[0], want[0], 1e-5, 1e-5);
  EXPECT_TRUE(c.ok) << "max_abs " << c.max_abs << " " << c.problem;
}

TEST(ChannelsLastTest, IsolatedConvolutionStaysNchw) {
  auto g = SpecializedGraphFromText("graph g(%x: f32[1,2,5,5]) {\n" + Const("w", {3, 2, 3, 3}, 0.1) +
                                    "  %c = Conv(%x, %w)\n  %r = Relu(%c)\n  %t = Transpose(%r) {perm=[0,2,3,1]}\n"
                                    "  return %t\n}");
  ASSERT_TRUE(g.ok()) << g.status();
  auto changed = AssignChannelsLastLayout(**g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed) << PrintGraph(**g);
  EXPECT_EQ(Count(**g, "Conv"), 1);
}

TEST(ChannelsLastTest, OneDimensionalConvChain) {
  auto parsed = SpecializedGraphFromText("graph g(%x: f32[2,3,20]) {\n" + Const("w1", {5, 3, 3}, 0.1) +
                                         "  %c = Conv(%x, %w1) {strides=[2]}\n  %t = Tanh(%c)\n" +
                                         Const("w2", {4, 5, 1}, 0.2) + "  %y = Conv(%t, %w2)\n  return %y\n}");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  std::shared_ptr<Graph> g(std::move(*parsed));
  std::shared_ptr<Graph> ncw(g->Clone());
  ASSERT_TRUE(AssignChannelsLastLayout(*g).ok());
  ASSERT_TRUE(RemoveNoOps(*g).ok());
  EXPECT_EQ(Count(*g, "NhwcConv"), 2) << PrintGraph(*g);
  EXPECT_EQ(Count(*g, "Transpose"), 2) << PrintGraph(*g);
  Tensor x(DType::kF32, {2, 3, 20});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(std::sin(0.91 * i));
  std::vector<Tensor> want = RunGraph(ncw, {x}), got = RunGraph(g, {x});
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(want.size(), 1u);
  OutputComparison c = CompareTensors("y", got[0], want[0], 1e-5, 1e-5);
  EXPECT_TRUE(c.ok) << c.max_abs << " " << c.problem;
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


// The channels-last loops (runtime/cpu/conv_gemm.cc: few-channel stem, depthwise, conv epilogue) are
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
  auto run = [&](const std::string& flags) -> absl::StatusOr<Tensor> {
    SessionOptions o;
    o.use_environment_flags = false;
    CJIT_ASSIGN_OR_RETURN(o.flags, ParseFlags("--device=cpu --intra_op_threads=1 --autotune_level=0 " + flags));
    CJIT_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::LoadFromBytes(bytes, o));
    CJIT_ASSIGN_OR_RETURN(std::vector<NamedTensor> out, s->Run({{"x", x}}));
    return out[0].tensor;
  };
  auto want = run("--auto_jit=-1 --cpu_channels_last=false");
  ASSERT_TRUE(want.ok()) << want.status();
  int variants = 0;
  for (ConvLoopIsa isa : {ConvLoopIsa::kBaseline, ConvLoopIsa::kAvx2, ConvLoopIsa::kAvx512}) {
    if (!SetConvLoopIsaForTest(isa)) continue;
    ++variants;
    for (const char* mode : {"--auto_jit=-1", "--auto_jit=1 --min_cluster_size=1 --enable_lazy_compilation=false"}) {
      auto got = run(mode);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(got->dims(), want->dims());
      OutputComparison c = CompareTensors("y", *got, *want, 1e-4, 1e-5);
      EXPECT_TRUE(c.ok) << "ISA variant " << static_cast<int>(isa) << ", " << mode << ": max_abs " << c.max_abs << " "
                        << c.problem;
    }
  }
  SetConvLoopIsaForTest(ConvLoopIsa::kDetect);
  EXPECT_GE(variants, 1);  // the baseline runs anywhere
}

}  // namespace
}  // namespace cjit
