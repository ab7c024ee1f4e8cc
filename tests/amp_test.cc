// Automatic mixed precision (compiler/passes/auto_mixed_precision.h): painting through every class and
// boundary in textual IR, list edits from flags and from TensorFlow's variables, the decomposed-LayerNorm
// rule, the host hook, float16 range; numbers of the rewritten graph against the float32 graph.
#include "compiler/passes/auto_mixed_precision.h"

#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "compiler/ir/cpu_isa.h"
#include "compiler/ir/float16.h"
#include "base/status_macros.h"
#include "compiler/ir/text.h"
#include "flags/flags.h"
#include "gtest/gtest.h"
#include "compiler/passes/auto_mixed_precision.h"
#include "runtime/cpu/kernel.h"
#include "runtime/executor.h"
#include "runtime/session.h"
#include "onnx/onnx_pb.h"
#include "tests/model_builder.h"
#include "tests/graph_util.h"
#include "tools/check_lib.h"

namespace cjit {
namespace {

using testing::Specialized;

// node name -> dtype of its output 0 after the pass
std::map<std::string, DType> OutputTypes(const Graph& g) {
  std::map<std::string, DType> m;
  for (const auto& n : g.nodes()) {
    if (n->op_type == "Cast" && n->name.find("/amp_cast_") != std::string::npos) continue;
    const std::string& v = n->outputs[0]->name;  // a renamed graph output: "<name>/amp_bf16"
    m[v.substr(0, v.find("/amp_"))] = n->outputs[0]->dtype;
  }
  return m;
}

int CountOp(const Graph& g, const std::string& op) {
  int c = 0;
  for (const auto& n : g.nodes()) c += n->op_type == op;
  return c;
}

std::string Weights(const char* name, int rows, int cols, float scale = 0.1f) {
  std::string s = absl::StrCat("  %", name, " = constant f32[", rows, ",", cols, "] {");
  for (int i = 0; i < rows * cols; ++i)
    absl::StrAppend(&s, i ? ", " : "", scale * static_cast<float>((i * 7) % 11 - 5));
  return s + "}\n";
}

const char* kMlp = R"(  %h = MatMul(%x, %w1)
  %hb = Add(%h, %b1)
  %r = Relu(%hb)
  %o = MatMul(%r, %w2)
  %s = Softmax(%o) {axis=-1}
  return %s
})";

std::string MlpIr() {
  return absl::StrCat("graph g(%x: f32[2,4]) {\n", Weights("w1", 4, 8),
                      "  %b1 = constant f32[8] {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8}\n", Weights("w2", 8, 3), kMlp);
}

TEST(AmpTest, PaintsAllowInferClearBetweenAllowAndKeepsDenyAndIoFloat32) {
  auto g = Specialized(MlpIr());
  ASSERT_TRUE(g);
  AmpOptions o;
  auto r = AutoMixedPrecision(*g, o);
  ASSERT_TRUE(r.ok()) << r.status();
  auto t = OutputTypes(*g);
  EXPECT_EQ(t["h"], DType::kBF16);
  EXPECT_EQ(t["hb"], DType::kBF16) << "infer between allow ops";
  EXPECT_EQ(t["r"], DType::kBF16) << "clear between allow ops";
  EXPECT_EQ(t["o"], DType::kBF16);
  EXPECT_EQ(t["s"], DType::kF32) << "deny";
  // One Cast down at the graph input, one up into the Softmax; weights converted, not cast.
  EXPECT_EQ(CountOp(*g, "Cast"), 2) << PrintGraph(*g);
  EXPECT_EQ(r->constants, 3);
  EXPECT_EQ(g->inputs()[0]->dtype, DType::kF32);
  EXPECT_EQ(g->outputs()[0]->dtype, DType::kF32);
  EXPECT_EQ(g->outputs()[0]->name, "s");
  EXPECT_EQ(r->converted, 4);
  // Numbers: the bfloat16 graph against the float32 graph (bfloat16: 8 significant bits).
  auto ref_graph = Specialized(MlpIr());
  Tensor x(DType::kF32, {2, 4});
  for (int i = 0; i < 8; ++i) x.data<float>()[i] = 0.3f * static_cast<float>(i) - 1.0f;
  auto run = [&](std::shared_ptr<Graph> graph) {
    auto ex = Executor::Create(graph, ExecutorOptions{1, nullptr, true});
    EXPECT_TRUE(ex.ok()) << ex.status();
    auto out = (*ex)->Run({x});
    EXPECT_TRUE(out.ok()) << out.status();
    return (*out)[0];
  };
  Tensor a = run(g), b = run(ref_graph);
  ASSERT_EQ(a.dtype(), DType::kF32);
  for (int64_t i = 0; i < a.numel(); ++i) EXPECT_NEAR(a.data<float>()[i], b.data<float>()[i], 0.02) << i;
}

// Every signature of a session runs the pass on a clone sharing the session's constants: each weight is
// converted once, and the clones share the converted buffer (kernels' weight caches keep hitting).
TEST(AmpTest, ConstantsConvertedOncePerSourceTensor) {
  auto g = Specialized(MlpIr());
  ASSERT_TRUE(g);
  auto converted_weights = [](const Graph& graph) {
    std::map<std::string, const Tensor*> m;
    for (const auto& n : graph.nodes()) {
      for (const Value* v : n->inputs) {
        if (v != nullptr && v->is_constant() && v->name.find("/amp_") != std::string::npos)
          m[v->name] = v->constant.get();
      }
    }
    return m;
  };
  auto a = g->Clone();
  auto b = g->Clone();
  ASSERT_TRUE(AutoMixedPrecision(*a, AmpOptions{}).ok());
  ASSERT_TRUE(AutoMixedPrecision(*b, AmpOptions{}).ok());
  auto wa = converted_weights(*a), wb = converted_weights(*b);
  ASSERT_EQ(wa.size(), 3u);
  EXPECT_EQ(wa, wb) << "the second signature reuses the first one's converted weights";
  // A float16 pass converts separately (another target type).
  auto c = g->Clone();
  AmpOptions f16;
  f16.low = DType::kF16;
  ASSERT_TRUE(AutoMixedPrecision(*c, f16).ok());
  for (const auto& [name, t] : converted_weights(*c)) EXPECT_EQ(t->dtype(), DType::kF16) << name;
}

TEST(AmpTest, DenyPropagatesForwardThroughInferAndClear) {
  auto g = Specialized(absl::StrCat("graph g(%x: f32[2,4]) {\n", Weights("w", 4, 4), R"(  %e = Exp(%x)
  %a = Mul(%e, %x)
  %t = Transpose(%a) {perm=[1,0]}
  %u = Transpose(%t) {perm=[1,0]}
  %d = Div(%u, %x)
  %m = MatMul(%d, %w)
  return %m
})"));
  ASSERT_TRUE(g);
  auto r = AutoMixedPrecision(*g, AmpOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  auto t = OutputTypes(*g);
  EXPECT_EQ(t["e"], DType::kF32);
  EXPECT_EQ(t["a"], DType::kF32) << "infer after deny";
  EXPECT_EQ(t["t"], DType::kF32) << "clear upstream of an infer op, after deny";
  EXPECT_EQ(t["d"], DType::kF32);
  EXPECT_EQ(t["m"], DType::kBF16);
}

TEST(AmpTest, ClearNextToAllowFollowsIt) {
  auto g = Specialized(absl::StrCat("graph g(%x: f32[2,4]) {\n", Weights("w", 4, 4), R"(  %m = MatMul(%x, %w)
  %t = Transpose(%m) {perm=[1,0]}
  %r = Relu(%t)
  return %r
})"));
  ASSERT_TRUE(g);
  ASSERT_TRUE(AutoMixedPrecision(*g, AmpOptions{}).ok());
  auto t = OutputTypes(*g);
  EXPECT_EQ(t["t"], DType::kBF16);
  EXPECT_EQ(t["r"], DType::kBF16);
  EXPECT_EQ(g->outputs()[0]->dtype, DType::kF32);
  EXPECT_EQ(g->outputs()[0]->name, "r");
}

TEST(AmpTest, DecomposedLayerNormStaysFloat32WithSixteenBitEdges) {
  auto g = Specialized(absl::StrCat("graph g(%x: f32[2,4]) {\n", Weights("w1", 4, 4), Weights("w2", 4, 4),
                                    R"(  %two = constant f32[] {2}
  %eps = constant f32[] {1e-5}
  %h = MatMul(%x, %w1)
  %mu = ReduceMean(%h) {axes=[-1]}
  %c = Sub(%h, %mu)
  %p = Pow(%c, %two)
  %var = ReduceMean(%p) {axes=[-1]}
  %ve = Add(%var, %eps)
  %sd = Sqrt(%ve)
  %n = Div(%c, %sd)
  %y = MatMul(%n, %w2)
  return %y
})"));
  ASSERT_TRUE(g);
  ASSERT_TRUE(AutoMixedPrecision(*g, AmpOptions{}).ok());
  auto t = OutputTypes(*g);
  for (const char* inner : {"mu", "c", "p", "var", "ve", "sd", "n"}) {
    EXPECT_EQ(t[inner], DType::kF32) << inner << "\n" << PrintGraph(*g);
  }
  EXPECT_EQ(t["h"], DType::kBF16);
  EXPECT_EQ(t["y"], DType::kBF16);
  // Edges: mm1's bfloat16 output is cast up once (read by mean and sub); div's output cast down once.
  // + the graph input's Cast down and the graph output's Cast up.
  EXPECT_EQ(CountOp(*g, "Cast"), 4) << PrintGraph(*g);
}

TEST(AmpTest, ListEditsFromFlagsAndTensorFlowVariables) {
  std::map<std::string, std::string> env = {
      {"TF_ENABLE_AUTO_MIXED_PRECISION", "1"},
      {"TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_DENYLIST_ADD", "MatMul"},
      {"TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_CLEARLIST_REMOVE", "Relu"}};
  std::string text = TfMixedPrecisionFlagText([&](const char* v) -> const char* {
    auto it = env.find(v);
    return it == env.end() ? nullptr : it->second.c_str();
  });
  auto flags = ParseFlags(text, Flags{}, "test");
  ASSERT_TRUE(flags.ok()) << flags.status() << " from '" << text << "'";
  EXPECT_EQ(flags->auto_mixed_precision, "auto");
  EXPECT_EQ(flags->amp_denylist_add, "MatMul");
  bool enabled = false;
  AmpOptions o = AmpOptionsFromFlags(*flags, /*on_gpu=*/false, &enabled);
  EXPECT_TRUE(enabled);
  EXPECT_EQ(o.low, DType::kBF16) << "auto = bfloat16 on the CPU";
  EXPECT_EQ(AmpOptionsFromFlags(*flags, true, &enabled).low, DType::kF16) << "auto = float16 on a GPU";
  auto g = Specialized(MlpIr());
  ASSERT_TRUE(g);
  auto r = AutoMixedPrecision(*g, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->converted, 0) << "MatMul on the deny list: nothing is allow";
  EXPECT_EQ(CountOp(*g, "Cast"), 0);
  // Flag form; a removed op falls to deny; unknown op names are a clear error naming the flag.
  auto f2 = ParseFlags("--auto_mixed_precision=float16 --amp_allowlist_add=Softmax --amp_clearlist_remove=Relu",
                       Flags{}, "test");
  ASSERT_TRUE(f2.ok()) << f2.status();
  AmpOptions o2 = AmpOptionsFromFlags(*f2, false, &enabled);
  EXPECT_EQ(o2.low, DType::kF16);
  auto g2 = Specialized(MlpIr());
  ASSERT_TRUE(AutoMixedPrecision(*g2, o2).ok());
  auto t = OutputTypes(*g2);
  EXPECT_EQ(t["s"], DType::kF16) << "added to the allow list";
  EXPECT_EQ(t["r"], DType::kF32) << "removed from the clear list: deny";
  // An op-list value that is not an identifier fails to parse; one that names no ONNX operator fails when a
  // session resolves the flags (flags/ does not depend on the op table).
  EXPECT_FALSE(ParseFlags("--amp_denylist_add=Mat-Mul", Flags{}, "test").ok());
  auto bad = ParseFlags("--amp_denylist_add=MatMull", Flags{}, "test");
  ASSERT_TRUE(bad.ok()) << bad.status();
  SessionOptions so;
  so.use_environment_flags = false;
  so.flags = *bad;
  auto s = Session::Load(std::string(CJIT_SOURCE_DIR) + "/fuzz/corpus/auto_quantize.onnx", so);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find("--amp_denylist_add=MatMull: 'MatMull' is not an ONNX operator"),
            std::string::npos)
      << s.status();
  EXPECT_FALSE(ParseFlags("--auto_mixed_precision=fp8", Flags{}, "test").ok());
  EXPECT_TRUE(ParseFlags("--tf_enable_auto_mixed_precision=1", Flags{}, "test").ok());
}

// The CPU cost rule: allow-list products below --amp_min_allow_macs stay float32 (bfloat16 conversions and
// kernels cost more than they save there: ppocr_mobile_cls 1.76 -> 0.53 ms under AMP with the default).
TEST(AmpTest, CostRuleKeepsSmallProductsFloat32) {
  auto g = Specialized(MlpIr());  // h = MatMul [2,4] x [4,8]: 64 multiply-adds; o = [2,8] x [8,3]: 48
  ASSERT_TRUE(g);
  for (const auto& n : g->nodes()) {
    if (n->op_type == "MatMul") EXPECT_EQ(ProductMacs(*n), n->outputs[0]->name == "h" ? 64 : 48) << n->name;
  }
  AmpOptions o;
  o.min_allow_macs = 50;
  auto r = AutoMixedPrecision(*g, o);
  ASSERT_TRUE(r.ok());
  auto t = OutputTypes(*g);
  EXPECT_EQ(t["h"], DType::kBF16);
  EXPECT_EQ(t["o"], DType::kF32) << "48 multiply-adds < 50";
  bool found = false;
  for (const AmpDecision& d : r->decisions) {
    found = found || (d.node == "o" && d.reason == "cost rule: 48 multiply-adds < --amp_min_allow_macs=50");
  }
  EXPECT_TRUE(found);
  // A host rule wins over the cost rule.
  auto g2 = Specialized(MlpIr());
  o.hook = [](const Node& n) -> std::optional<AmpRule> {
    if (n.outputs[0]->name == "o") return AmpRule{AmpClass::kAllow, DType::kF32, DType::kInvalid};
    return std::nullopt;
  };
  ASSERT_TRUE(AutoMixedPrecision(*g2, o).ok());
  EXPECT_EQ(OutputTypes(*g2)["o"], DType::kBF16);
  // Multiply-adds of convolutions (C/group x kernel per output element; ConvTranspose per input element)
  // and of Gemm with transA.
  auto c = Specialized(
      "graph g(%x: f32[1,4,6,6], %w: f32[6,2,3,3], %t: f32[4,3,2,2], %a: f32[5,7], %b: f32[5,9]) {\n"
      "  %y = Conv(%x, %w) {group=2}\n  %z = ConvTranspose(%x, %t) {strides=[2,2]}\n"
      "  %m = Gemm(%a, %b) {transA=1}\n  return %y, %z, %m\n}");
  ASSERT_TRUE(c);
  std::map<std::string, int64_t> macs;
  for (const auto& n : c->nodes()) macs[n->op_type] = ProductMacs(*n);
  EXPECT_EQ(macs["Conv"], 6 * 4 * 4 * (2 * 3 * 3));
  EXPECT_EQ(macs["ConvTranspose"], 4 * 6 * 6 * (3 * 2 * 2));
  EXPECT_EQ(macs["Gemm"], 7 * 9 * 5);
  // From flags: the default applies on the CPU, never on a GPU.
  auto f = ParseFlags("--auto_mixed_precision=bfloat16", Flags{}, "test");
  ASSERT_TRUE(f.ok());
  bool enabled = false;
  EXPECT_EQ(AmpOptionsFromFlags(*f, false, &enabled).min_allow_macs, 1000000);
  EXPECT_EQ(AmpOptionsFromFlags(*f, true, &enabled).min_allow_macs, 0);
  auto f0 = ParseFlags("--amp_min_allow_macs=0", Flags{}, "test");
  ASSERT_TRUE(f0.ok());
  EXPECT_EQ(AmpOptionsFromFlags(*f0, false, &enabled).min_allow_macs, 0);
  EXPECT_FALSE(ParseFlags("--amp_min_allow_macs=-5", Flags{}, "test").ok());
}

TEST(AmpTest, HostHookDecidesBeforeTheLists) {
  auto g = Specialized(MlpIr());
  ASSERT_TRUE(g);
  AmpOptions o;
  o.hook = [](const Node& n) -> std::optional<AmpRule> {
    if (n.outputs[0]->name == "o") return AmpRule{AmpClass::kDeny, DType::kF32, DType::kF32};
    if (n.outputs[0]->name == "s") return AmpRule{AmpClass::kAllow, DType::kF32, DType::kInvalid};
    return std::nullopt;
  };
  auto r = AutoMixedPrecision(*g, o);
  ASSERT_TRUE(r.ok());
  auto t = OutputTypes(*g);
  EXPECT_EQ(t["o"], DType::kF32);
  EXPECT_EQ(t["s"], DType::kBF16);
  EXPECT_EQ(t["h"], DType::kBF16);
  bool found = false;
  for (const AmpDecision& d : r->decisions) found = found || (d.node == "o" && d.reason.find("host rule") == 0);
  EXPECT_TRUE(found);
}

TEST(AmpTest, HostRuleWithFloat32OutputCastsItsResult) {
  auto g = Specialized(absl::StrCat("graph g(%x: f32[2,4]) {\n", Weights("w", 4, 4), R"(  %h = MatMul(%x, %w)
  %e = Exp(%h)
  return %e
})"));
  ASSERT_TRUE(g);
  AmpOptions o;
  o.hook = [](const Node& n) -> std::optional<AmpRule> {
    if (n.op_type == "MatMul") return AmpRule{AmpClass::kAllow, DType::kF32, DType::kF32};
    return std::nullopt;
  };
  ASSERT_TRUE(AutoMixedPrecision(*g, o).ok());
  const std::string text = PrintGraph(*g);
  // The MatMul computes in bfloat16; its (deny) reader gets its float32 Cast.
  EXPECT_NE(text.find("%h: bf16[2,4] = MatMul"), std::string::npos) << text;
  EXPECT_NE(text.find("Exp(%h/amp_f32)"), std::string::npos) << text;
}

TEST(AmpTest, Float16OutOfRangeWeightsKeepTheNodeFloat32) {
  auto g = Specialized(R"(graph g(%x: f32[1,2]) {
  %w = constant f32[2,2] {1, 2, 100000, 3}
  %v = constant f32[2,2] {1, 2, 3, 4}
  %a = MatMul(%x, %w)
  %b = MatMul(%x, %v)
  return %a, %b
})");
  ASSERT_TRUE(g);
  AmpOptions o;
  o.low = DType::kF16;
  auto r = AutoMixedPrecision(*g, o);
  ASSERT_TRUE(r.ok());
  auto t = OutputTypes(*g);
  EXPECT_EQ(t["a"], DType::kF32);
  EXPECT_EQ(t["b"], DType::kF16);
  ASSERT_EQ(r->out_of_range.size(), 1u);
  EXPECT_NE(r->out_of_range[0].find(": w"), std::string::npos) << r->out_of_range[0];
  EXPECT_FALSE(AutoMixedPrecision(*g, AmpOptions{DType::kF32}).ok()) << "the low type must be 16-bit";
}

}  // namespace
}  // namespace cjit

namespace cjit {
namespace {

// y = ((x * 1.1 + 0.3) * 1.7 - 0.2) * 0.9 in bfloat16: one fused kernel when compiled.
std::string BfloatChain() {
  testing::ModelBuilder mb(13);
  mb.Input("x", onnx::TensorProto::BFLOAT16, {4096}).Output("y", onnx::TensorProto::BFLOAT16, {4096}, true);
  const char* ops[] = {"Mul", "Add", "Mul", "Sub", "Mul"};
  const float cs[] = {1.1f, 0.3f, 1.7f, 0.2f, 0.9f};
  std::string prev = "x";
  for (int i = 0; i < 5; ++i) {
    std::string c = absl::StrCat("c", i), out = i == 4 ? "y" : absl::StrCat("t", i);
    const uint16_t bits = FloatToBfloat16Bits(cs[i]);
    mb.Init(c, onnx::TensorProto::BFLOAT16, {})->set_raw_data(std::string(reinterpret_cast<const char*>(&bits), 2));
    mb.Node(ops[i], {prev, c}, {out});
    prev = out;
  }
  return mb.Bytes();
}

// Output 0 of `model` run on one input with CJIT_FLAGS-style `flags` (on the CPU, 1 thread).
absl::StatusOr<Tensor> RunWithFlags(const std::string& model, const std::string& flags, const std::string& input,
                                    const Tensor& x) {
  SessionOptions o;
  o.use_environment_flags = false;
  CJIT_ASSIGN_OR_RETURN(o.flags,
                        ParseFlags(absl::StrCat("--device=cpu --intra_op_threads=1 ", flags), Flags{}, "test"));
  CJIT_ASSIGN_OR_RETURN(auto s, Session::LoadFromBytes(model, o));
  CJIT_ASSIGN_OR_RETURN(auto out, s->Run({{input, x}}));
  return out[0].tensor;
}

std::vector<float> RunChain(const std::string& model, const std::string& flags, const Tensor& x) {
  auto y = RunWithFlags(model, flags, "x", x);
  EXPECT_TRUE(y.ok()) << y.status();
  if (!y.ok()) return {};
  EXPECT_EQ(y->dtype(), DType::kBF16);
  std::vector<float> r(y->numel());
  ConvertBfloat16ToFloat(static_cast<const uint16_t*>(y->raw()), r.data(), r.size());
  return r;
}

// bfloat16 MaxPool / AveragePool (oneDNN's bfloat16 pooling where the CPU has it, else the loop) against
// float64 windows over the same bfloat16 values: max exact, average rounded once from float32 accumulation.
TEST(Bfloat16PoolTest, MaxAndAveragePoolMatchFloat64Windows) {
  const int64_t C = 3, H = 9, W = 11, OH = 5, OW = 6;  // kernel 3, stride 2, pads 1
  for (const char* op : {"MaxPool", "AveragePool"}) {
    testing::ModelBuilder mb(13);
    mb.Input("x", onnx::TensorProto::BFLOAT16, {1, C, H, W})
        .Output("y", onnx::TensorProto::BFLOAT16, {1, C, OH, OW}, true);
    auto* n = mb.Node(op, {"x"}, {"y"});
    testing::ModelBuilder::AttrInts(n, "kernel_shape", {3, 3});
    testing::ModelBuilder::AttrInts(n, "strides", {2, 2});
    testing::ModelBuilder::AttrInts(n, "pads", {1, 1, 1, 1});
    Tensor x(DType::kBF16, {1, C, H, W});
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-4.0f, 4.0f);
    std::vector<float> xf(x.numel());
    for (int64_t i = 0; i < x.numel(); ++i) {
      static_cast<uint16_t*>(x.raw())[i] = FloatToBfloat16Bits(u(rng));
    }
    ConvertBfloat16ToFloat(static_cast<const uint16_t*>(x.raw()), xf.data(), xf.size());
    for (int threads : {1, 2}) {
      auto y = RunWithFlags(mb.Bytes(), absl::StrCat("--intra_op_threads=", threads), "x", x);
      ASSERT_TRUE(y.ok()) << op << ": " << y.status();
      ASSERT_EQ(y->dtype(), DType::kBF16);
      std::vector<float> got(y->numel());
      ConvertBfloat16ToFloat(static_cast<const uint16_t*>(y->raw()), got.data(), got.size());
      for (int64_t c = 0; c < C; ++c)
        for (int64_t p = 0; p < OH; ++p)
          for (int64_t q = 0; q < OW; ++q) {
            double best = -INFINITY, sum = 0;
            int count = 0;
            for (int64_t i = 0; i < 3; ++i)
              for (int64_t j = 0; j < 3; ++j) {
                const int64_t h = p * 2 - 1 + i, w = q * 2 - 1 + j;
                if (h < 0 || h >= H || w < 0 || w >= W) continue;
                const double v = xf[(c * H + h) * W + w];
                best = std::max(best, v);
                sum += v;
                ++count;
              }
            const double want = std::string(op) == "MaxPool" ? best : sum / count;  // padding not counted
            const float g = got[(c * OH + p) * OW + q];
            // bfloat16 output: within half an ulp (2^-8 relative) of the exact value; max exactly.
            EXPECT_NEAR(g, want, std::string(op) == "MaxPool" ? 0.0 : std::fabs(want) / 256 + 1e-6)
                << op << " threads " << threads << " at " << c << "," << p << "," << q;
          }
    }
  }
}

TEST(ExcessPrecisionTest, FusedBfloat16ChainRoundsOnlyAtTheEndUnlessDisabled) {
  const std::string model = BfloatChain();
  Tensor x(DType::kBF16, {4096});
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  std::vector<float> xf(4096);
  for (int i = 0; i < 4096; ++i) {
    static_cast<uint16_t*>(x.raw())[i] = FloatToBfloat16Bits(u(rng));
    xf[i] = Bfloat16BitsToFloat(static_cast<uint16_t*>(x.raw())[i]);
  }
  const std::string compiled = "--auto_jit=1 --min_cluster_size=1 --enable_lazy_compilation=false";
  std::vector<float> fallback = RunChain(model, "--auto_jit=-1", x);
  std::vector<float> exact_ops = RunChain(model, compiled + " --allow_excess_precision=false", x);
  std::vector<float> excess = RunChain(model, compiled, x);
  // Per-op rounding compiled equals the op-by-op path bit for bit.
  EXPECT_EQ(exact_ops, fallback);
  // Excess precision: one rounding of the float32 chain (the constants as bfloat16 values), never
  // further from the float64 result than the per-op rounded chain on average, and different somewhere.
  double err_excess = 0, err_ops = 0;
  int differ = 0, rounded_once = 0;
  for (int i = 0; i < 4096; ++i) {
    double c[5];
    const float cs[] = {1.1f, 0.3f, 1.7f, 0.2f, 0.9f};
    for (int k = 0; k < 5; ++k) c[k] = Bfloat16BitsToFloat(FloatToBfloat16Bits(cs[k]));
    const double ref = (((xf[i] * c[0] + c[1]) * c[2]) - c[3]) * c[4];
    // One rounding: the nearest bfloat16 of the float64 result, except where float32 rounding inside the
    // chain crosses a bfloat16 rounding boundary (rare).
    const float once = Bfloat16BitsToFloat(FloatToBfloat16Bits(static_cast<float>(ref)));
    rounded_once += excess[i] == once;
    err_excess += std::fabs(excess[i] - ref);
    err_ops += std::fabs(exact_ops[i] - ref);
    differ += excess[i] != exact_ops[i];
  }
  EXPECT_LE(err_excess, err_ops);
  EXPECT_GT(differ, 0);
  EXPECT_GE(rounded_once, 4096 * 99 / 100);
}

// MaxAbsOrInf (runtime/cpu/kernel.h), which decides whether a convolution's post-ops may run inside
// oneDNN: against std::fabs over random float32 / bfloat16 buffers of lengths around the vector widths,
// and +inf for a NaN or an infinity at every position (the vector body and the scalar tail).
TEST(ExcessPrecisionTest, MaxAbsOrInfFindsTheLargestMagnitudeAndEveryNonFiniteValue) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> e(-30, 30);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (int64_t n : {1, 7, 31, 32, 33, 64, 100, 1000}) {
      Tensor t(dt, {n});
      float want = 0;
      for (int64_t i = 0; i < n; ++i) {
        float f = std::ldexp(u(rng), e(rng));
        if (dt == DType::kBF16) {
          static_cast<uint16_t*>(t.raw())[i] = FloatToBfloat16Bits(f);
          f = Bfloat16BitsToFloat(static_cast<uint16_t*>(t.raw())[i]);
        } else {
          static_cast<float*>(t.raw())[i] = f;
        }
        want = std::max(want, std::fabs(f));
      }
      EXPECT_EQ(MaxAbsOrInf(t), want) << DTypeName(dt) << " n=" << n;
      for (float bad : {NAN, INFINITY, -INFINITY}) {
        for (int64_t i = 0; i < n; ++i) {
          Tensor c = t.Clone();
          if (dt == DType::kBF16) {
            static_cast<uint16_t*>(c.raw())[i] = FloatToBfloat16Bits(bad);
          } else {
            static_cast<float*>(c.raw())[i] = bad;
          }
          ASSERT_TRUE(std::isinf(MaxAbsOrInf(c))) << DTypeName(dt) << " n=" << n << " " << bad << " at " << i;
        }
      }
    }
  }
}

// A bfloat16 Conv [8, 16, 3x3] (pads 1, bias) followed by `chain` ("hardswish": HardSwish written out,
// x * Clip(x + 3, 0, 6) / 6, then * 0.75 - 0.25, as PaddleOCR's blocks; "relu"), every value bfloat16,
// input [1, 16, 10, 12].
std::string Bfloat16ConvChain(const std::string& chain, const std::vector<uint16_t>& w,
                              const std::vector<uint16_t>& b) {
  testing::ModelBuilder mb(13);
  mb.Input("x", onnx::TensorProto::BFLOAT16, {1, 16, 10, 12})
      .Output("y", onnx::TensorProto::BFLOAT16, {1, 8, 10, 12}, true);
  auto raw = [](const std::vector<uint16_t>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 2);
  };
  mb.Init("w", onnx::TensorProto::BFLOAT16, {8, 16, 3, 3})->set_raw_data(raw(w));
  mb.Init("b", onnx::TensorProto::BFLOAT16, {8})->set_raw_data(raw(b));
  auto scalar = [&](const std::string& name, float v) {
    mb.Init(name, onnx::TensorProto::BFLOAT16, {})->set_raw_data(raw({FloatToBfloat16Bits(v)}));
  };
  auto* conv = mb.Node("Conv", {"x", "w", "b"}, {"c"});
  testing::ModelBuilder::AttrInts(conv, "pads", {1, 1, 1, 1});
  if (chain == "relu") {
    mb.Node("Relu", {"c"}, {"y"});
  } else {
    scalar("zero", 0), scalar("six", 6), scalar("three", 3), scalar("scale", 0.75f), scalar("shift", 0.25f);
    mb.Node("Add", {"c", "three"}, {"a"});
    mb.Node("Clip", {"a", "zero", "six"}, {"k"});
    mb.Node("Mul", {"c", "k"}, {"m"});
    mb.Node("Div", {"m", "six"}, {"d"});
    mb.Node("Mul", {"d", "scale"}, {"s"});
    mb.Node("Sub", {"s", "shift"}, {"y"});
  }
  return mb.Bytes();
}

// The float64 result of Bfloat16ConvChain on the bfloat16 values xf, wf, bf (NaN / inf as ONNX: NaN in,
// NaN out).
std::vector<double> Bfloat16ConvChainReference(const std::string& chain, const std::vector<float>& xf,
                                               const std::vector<float>& wf, const std::vector<float>& bf) {
  const int C = 16, H = 10, W = 12, M = 8;
  std::vector<double> ref(M * H * W);
  for (int m = 0; m < M; ++m)
    for (int h = 0; h < H; ++h)
      for (int q = 0; q < W; ++q) {
        double acc = bf[m];
        for (int c = 0; c < C; ++c)
          for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 3; ++j) {
              const int ih = h + i - 1, iw = q + j - 1;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              acc += static_cast<double>(xf[(c * H + ih) * W + iw]) * wf[((m * C + c) * 3 + i) * 3 + j];
            }
        const auto clip = [](double v) { return std::isnan(v) ? v : std::min(6.0, std::max(0.0, v)); };
        ref[(m * H + h) * W + q] =
            chain == "relu" ? (std::isnan(acc) || acc > 0 ? acc : 0.0) : acc * clip(acc + 3) / 6 * 0.75 - 0.25;
      }
  return ref;
}

// Under automatic mixed precision a bfloat16 convolution's epilogue runs inside it as oneDNN post-ops
// (FusionPlanOptions: bfloat16 chains under --allow_excess_precision): the float32 accumulators go through
// the whole chain and are rounded to bfloat16 once, where the graph rounds after the convolution and after
// every op (then the chain is a separate fused kernel). Checked against float64 math on the same bfloat16
// values: almost every output is the nearest bfloat16 of the exact result (a rounding after the
// convolution moves about a quarter of them). A NaN pixel must reach the output through Relu as NaN
// (oneDNN's relu post-op makes it 0: the compiled path must see the NaN in the bfloat16 input and apply
// the chain exactly instead). Without excess precision the compiled path equals the op-by-op path bit for bit.
TEST(ExcessPrecisionTest, Bfloat16ConvolutionEpilogueRoundsOnce) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto bf16_values = [&](size_t n, float scale, std::vector<uint16_t>* bits, std::vector<float>* values) {
    for (size_t i = 0; i < n; ++i) {
      bits->push_back(FloatToBfloat16Bits(u(rng) * scale));
      values->push_back(Bfloat16BitsToFloat(bits->back()));
    }
  };
  std::vector<uint16_t> wbits, bbits, xbits;
  std::vector<float> wf, bf, xf;
  bf16_values(8 * 16 * 9, 0.3f, &wbits, &wf);
  bf16_values(8, 0.5f, &bbits, &bf);
  bf16_values(16 * 10 * 12, 2.0f, &xbits, &xf);
  Tensor x(DType::kBF16, {1, 16, 10, 12});
  std::memcpy(x.raw(), xbits.data(), xbits.size() * 2);
  const std::string compiled = "--auto_jit=1 --min_cluster_size=1 --enable_lazy_compilation=false";

  const std::string model = Bfloat16ConvChain("hardswish", wbits, bbits);
  const std::vector<double> ref = Bfloat16ConvChainReference("hardswish", xf, wf, bf);
  std::vector<float> excess = RunChain(model, compiled, x);
  ASSERT_EQ(excess.size(), ref.size());
  int rounded_once = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    rounded_once += excess[i] == Bfloat16BitsToFloat(DoubleToBfloat16Bits(ref[i]));
    EXPECT_NEAR(excess[i], ref[i], std::fabs(ref[i]) / 256 + 1e-6) << i;
  }
  EXPECT_GE(rounded_once, static_cast<int>(ref.size()) * 97 / 100);
  EXPECT_EQ(RunChain(model, compiled + " --allow_excess_precision=false", x), RunChain(model, "--auto_jit=-1", x));

  // NaN and inf pixels (input channel 3 at (4, 5), channel 9 at (7, 2)).
  static_cast<uint16_t*>(x.raw())[(3 * 10 + 4) * 12 + 5] = 0x7fc0;
  static_cast<uint16_t*>(x.raw())[(9 * 10 + 7) * 12 + 2] = 0x7f80;
  xf[(3 * 10 + 4) * 12 + 5] = NAN;
  xf[(9 * 10 + 7) * 12 + 2] = INFINITY;
  const std::string relu = Bfloat16ConvChain("relu", wbits, bbits);
  const std::vector<double> relu_ref = Bfloat16ConvChainReference("relu", xf, wf, bf);
  std::vector<float> got = RunChain(relu, compiled, x);
  ASSERT_EQ(got.size(), relu_ref.size());
  int nans = 0;
  for (size_t i = 0; i < relu_ref.size(); ++i) {
    if (std::isnan(relu_ref[i])) {
      ++nans;
      EXPECT_TRUE(std::isnan(got[i])) << i << ": " << got[i];
    } else if (std::isinf(relu_ref[i])) {
      EXPECT_EQ(got[i], relu_ref[i]) << i;
    } else {
      EXPECT_NEAR(got[i], relu_ref[i], std::fabs(relu_ref[i]) / 128 + 1e-6) << i;
    }
  }
  EXPECT_EQ(nans, 8 * 9) << "every output channel at the 3x3 pixels around the NaN";
}

}  // namespace
}  // namespace cjit

namespace cjit {
namespace {

// y = A[M,K] x B[K,N] (B a weight), float32.
std::string MatMulModel(int64_t M, int64_t K, int64_t N, const std::vector<float>& w) {
  testing::ModelBuilder mb(13);
  mb.Input("a", onnx::TensorProto::FLOAT, {M, K}).Output("y", onnx::TensorProto::FLOAT, {M, N}, true);
  mb.InitFloats("b", {K, N}, w);
  mb.Node("MatMul", {"a", "b"}, {"y"});
  return mb.Bytes();
}

// Correct bits of each precision: -log2(max |C - C64| / max sum_k |a_ik b_kj|) on a random GEMM against a
// float64 reference: about 24 (float32), 16 (bfloat16x3), 8 (bfloat16).
TEST(MatmulPrecisionTest, ErrorMatchesTheExpectedMantissaBits) {
  const int64_t M = 48, K = 512, N = 40;
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> av(M * K), bv(K * N);
  for (float& v : av) v = d(rng);
  for (float& v : bv) v = d(rng);
  std::vector<double> ref(M * N, 0.0), scale(M * N, 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) {
        ref[i * N + j] += static_cast<double>(av[i * K + k]) * bv[k * N + j];
        scale[i * N + j] += std::fabs(static_cast<double>(av[i * K + k]) * bv[k * N + j]);
      }
  const std::string model = MatMulModel(M, K, N, bv);
  Tensor a(DType::kF32, {M, K});
  std::copy(av.begin(), av.end(), a.data<float>());
  std::map<std::string, double> bits;
  for (const char* p : {"highest", "high", "medium"}) {
    for (const char* mode : {"--auto_jit=-1", "--auto_jit=1 --min_cluster_size=1 --enable_lazy_compilation=false"}) {
      auto out = RunWithFlags(model, absl::StrCat("--matmul_precision=", p, " ", mode), "a", a);
      ASSERT_TRUE(out.ok()) << out.status();
      const Tensor& y = *out;
      ASSERT_EQ(y.dtype(), DType::kF32) << "the output dtype never changes";
      double err = 0, sc = 0;
      for (int64_t i = 0; i < M * N; ++i) {
        err = std::max(err, std::fabs(y.data<float>()[i] - ref[i]));
        sc = std::max(sc, scale[i]);
      }
      const double b = -std::log2(std::max(err / sc, 1e-30));
      if (bits.count(p)) {
        EXPECT_NEAR(bits[p], b, 1.0) << p << ": fallback and compiled paths differ";
      }
      bits[p] = b;
    }
  }
  RecordProperty("bits_highest", std::to_string(bits["highest"]));
  RecordProperty("bits_high", std::to_string(bits["high"]));
  RecordProperty("bits_medium", std::to_string(bits["medium"]));
  EXPECT_GE(bits["highest"], 20.0);
  EXPECT_GE(bits["high"], 14.0);
  EXPECT_LE(bits["high"], bits["highest"] + 0.5);
  if (CpuHasBfloat16Math()) {
    EXPECT_GE(bits["medium"], 6.0);
    EXPECT_LE(bits["medium"], 12.5);
    EXPECT_GE(bits["high"], bits["medium"] + 5.0);
  } else {
    EXPECT_GE(bits["medium"], 20.0) << "without bfloat16 arithmetic, medium runs as highest";
  }
}

// bfloat16x3 itself (--matmul_precision=high picks it only on CPUs with AMX-BF16; without bfloat16
// arithmetic it runs on the widened bfloat16 values in float32, the same numerics): forced through the
// node attribute, on a Gemm with transposed operands, against float64.
TEST(MatmulPrecisionTest, Bfloat16x3GivesAboutSixteenBits) {
  const int M = 5, K = 16, N = 6;
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::string at = "{", bt = "{";
  std::vector<float> av(K * M), bv(N * K);  // A^T [K, M], B^T [N, K]
  for (size_t i = 0; i < av.size(); ++i) absl::StrAppend(&at, i ? ", " : "", av[i] = std::round(d(rng) * 1e6f) / 1e6f);
  for (size_t i = 0; i < bv.size(); ++i) absl::StrAppend(&bt, i ? ", " : "", bv[i] = std::round(d(rng) * 1e6f) / 1e6f);
  for (const char* p : {"bf16x3", "medium"}) {
    auto g = Specialized(
        absl::StrCat("graph g(%z: f32[1]) {\n  %a = constant f32[16,5] ", at, "}\n  %b = constant f32[6,16] ", bt,
                     "}\n  %y = Gemm(%a, %b) {transA=1, transB=1, cjit_precision=\"", p, "\"}\n  return %y\n}"));
    ASSERT_TRUE(g);
    auto ex = Executor::Create(g, ExecutorOptions{1, nullptr, true});
    ASSERT_TRUE(ex.ok()) << ex.status();
    Tensor z(DType::kF32, {1});
    z.data<float>()[0] = 0;
    auto out = (*ex)->Run({z});
    ASSERT_TRUE(out.ok()) << out.status();
    const Tensor& y = (*out)[0];
    double err = 0, sc = 0;
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        double r = 0, s = 0;
        for (int k = 0; k < K; ++k) {
          const double x = av[k * M + i], w = bv[j * K + k];
          r += x * w;
          s += std::fabs(x * w);
        }
        err = std::max(err, std::fabs(y.data<float>()[i * N + j] - r));
        sc = std::max(sc, s);
      }
    const double bits = -std::log2(std::max(err / sc, 1e-30));
    if (std::string(p) == "bf16x3") {
      EXPECT_GE(bits, 14.0) << "bfloat16x3";
      EXPECT_LE(bits, 21.5) << "bfloat16x3 is less accurate than float32: did it run?";
    } else if (CpuHasBfloat16Math()) {
      EXPECT_LE(bits, 12.5) << "medium";
      EXPECT_GE(bits, 6.0) << "medium";
    } else {
      EXPECT_GE(bits, 20.0) << "without bfloat16 arithmetic, medium runs as highest";
    }
  }
}

// --conv_precision=medium: bfloat16 operands, float32 accumulation and output; against float64.
TEST(MatmulPrecisionTest, ConvPrecisionMediumGivesAboutEightBits) {
  const int C = 16, H = 6, W = 6, OC = 4;
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(C * H * W), w(OC * C * 9);
  for (float& v : x) v = d(rng);
  for (float& v : w) v = d(rng);
  // Model: Conv with W as a weight initializer, pads 1.
  testing::ModelBuilder mb(13);
  mb.Input("x", onnx::TensorProto::FLOAT, {1, C, H, W}).Output("y", onnx::TensorProto::FLOAT, {1, OC, H, W}, true);
  mb.InitFloats("w", {OC, C, 3, 3}, w);
  testing::ModelBuilder::AttrInts(mb.Node("Conv", {"x", "w"}, {"y"}), "pads", {1, 1, 1, 1});
  const std::string model = mb.Bytes();
  Tensor xt(DType::kF32, {1, C, H, W});
  std::copy(x.begin(), x.end(), xt.data<float>());
  std::map<std::string, double> bits;
  for (const char* p : {"highest", "medium"}) {
    auto out = RunWithFlags(model, absl::StrCat("--auto_jit=-1 --conv_precision=", p), "x", xt);
    ASSERT_TRUE(out.ok()) << out.status();
    const Tensor& y = *out;
    ASSERT_EQ(y.dtype(), DType::kF32);
    double err = 0, sc = 0;
    for (int oc = 0; oc < OC; ++oc)
      for (int i = 0; i < H; ++i)
        for (int j = 0; j < W; ++j) {
          double r = 0, a = 0;
          for (int c = 0; c < C; ++c)
            for (int ki = 0; ki < 3; ++ki)
              for (int kj = 0; kj < 3; ++kj) {
                const int ii = i + ki - 1, jj = j + kj - 1;
                if (ii < 0 || jj < 0 || ii >= H || jj >= W) continue;
                const double t = static_cast<double>(x[(c * H + ii) * W + jj]) * w[((oc * C + c) * 3 + ki) * 3 + kj];
                r += t;
                a += std::fabs(t);
              }
          err = std::max(err, std::fabs(y.data<float>()[(oc * H + i) * W + j] - r));
          sc = std::max(sc, a);
        }
    bits[p] = -std::log2(std::max(err / sc, 1e-30));
  }
  EXPECT_GE(bits["highest"], 20.0);
  if (__builtin_cpu_supports("avx512bf16")) {
    EXPECT_GE(bits["medium"], 6.0);
    EXPECT_LE(bits["medium"], 12.5) << "medium must round the operands to bfloat16";
  } else {
    EXPECT_GE(bits["medium"], 20.0) << "without AVX-512 BF16, medium runs as highest";
  }
}

TEST(MatmulPrecisionTest, FlagsAndTensorFlowVariables) {
  EXPECT_FALSE(ParseFlags("--matmul_precision=low", Flags{}, "t").ok());
  EXPECT_FALSE(ParseFlags("--conv_precision=low", Flags{}, "t").ok());
  std::map<std::string, std::string> env = {{"TF_ENABLE_CUBLAS_TENSOR_OP_MATH_FP32", "1"},
                                            {"TF_ENABLE_CUDNN_TENSOR_OP_MATH_FP32", "1"}};
  std::string text = TfMixedPrecisionFlagText([&](const char* v) -> const char* {
    auto it = env.find(v);
    return it == env.end() ? nullptr : it->second.c_str();
  });
  auto f = ParseFlags(text, Flags{}, "t");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->matmul_precision, "high");
  EXPECT_EQ(f->conv_precision, "high");
}

// --amp_require_native_isa (TensorFlow's oneDNN AMP rule): on a CPU without bfloat16 arithmetic (here the
// instruction sets capped at AVX-512 without BF16), --auto_mixed_precision=bfloat16 and auto leave the model
// in float32 - outputs bit-identical to a float32 run - and --amp_require_native_isa=false still rewrites.
// Where the CPU has AVX512_BF16, bfloat16 is used (outputs differ from float32 by bfloat16 rounding).
TEST(AmpTest, CpuWithoutBfloat16ArithmeticStaysFloat32) {
  testing::ModelBuilder mb(13);
  mb.Input("x", onnx::TensorProto::FLOAT, {128, 128}).Output("y");
  mb.Node("MatMul", {"x", "w"}, {"y"});
  std::vector<float> w(128 * 128);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(std::sin(0.37 * i));
  mb.InitFloats("w", {128, 128}, w);
  Tensor x(DType::kF32, {128, 128});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(std::cos(0.11 * i)) + 1.001f;
  auto same = [](const Tensor& a, const Tensor& b) {
    return a.dtype() == b.dtype() && a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
  };
  const CpuIsa previous = MaxCpuIsa();
  SetMaxCpuIsa(std::min(previous, CpuIsa::kAvx512Vnni));
  DType low = DType::kInvalid;
  EXPECT_NE(AmpMissingCpuIsa("bfloat16", &low), "");
  EXPECT_NE(AmpMissingCpuIsa("float16", &low), "");
  EXPECT_NE(AmpMissingCpuIsa("auto", &low), "");
  auto f32 = RunWithFlags(mb.Bytes(), "", "x", x);
  auto bf16 = RunWithFlags(mb.Bytes(), "--auto_mixed_precision=bfloat16", "x", x);
  auto automatic = RunWithFlags(mb.Bytes(), "--auto_mixed_precision=auto", "x", x);
  auto forced = RunWithFlags(mb.Bytes(), "--auto_mixed_precision=bfloat16 --amp_require_native_isa=false", "x", x);
  SetMaxCpuIsa(previous);
  ASSERT_TRUE(f32.ok() && bf16.ok() && automatic.ok() && forced.ok());
  EXPECT_TRUE(same(*f32, *bf16)) << "bfloat16 requested without AVX512_BF16: float32 expected";
  EXPECT_TRUE(same(*f32, *automatic));
  EXPECT_FALSE(same(*f32, *forced)) << "--amp_require_native_isa=false rewrites to bfloat16";
  if (CpuHasAvx512Bf16()) {
    EXPECT_EQ(AmpMissingCpuIsa("bfloat16", &low), "");
    EXPECT_EQ(low, DType::kBF16);
    EXPECT_EQ(AmpMissingCpuIsa("auto", &low), "");
    auto native = RunWithFlags(mb.Bytes(), "--auto_mixed_precision=bfloat16", "x", x);
    ASSERT_TRUE(native.ok());
    EXPECT_FALSE(same(*f32, *native));
  }
}

}  // namespace
}  // namespace cjit
