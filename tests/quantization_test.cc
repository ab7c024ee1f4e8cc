// FuseQdqIntoIntegerOps (compiler/passes/quantization.h): QDQ patterns become QLinearConv / QLinearMatMul
// where the conditions hold and stay as written otherwise; the fused graph's outputs are within one
// quantization step of the unfused graph's (DequantizeLinear -> float op -> QuantizeLinear), which is the
// independent reference here.
#include "compiler/passes/quantization.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/cpu_isa.h"
#include "compiler/ir/text.h"
#include "compiler/ir/verifier.h"
#include "compiler/passes/layout.h"
#include "compiler/passes/simplify.h"
#include "compiler/passes/specialize_shapes.h"
#include "gtest/gtest.h"
#include "flags/flags.h"
#include "runtime/cpu/kernel.h"
#include "runtime/executor.h"
#include "runtime/session.h"
#include "tests/graph_util.h"
#include "tools/check_lib.h"

namespace cjit {
namespace {

// "%name = constant TYPE[dims] {values}" with deterministic integer values in [lo, hi].
std::string IntConst(const std::string& name, const std::string& type, const std::vector<int64_t>& dims, int lo,
                     int hi, int seed) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<std::string> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(absl::StrCat(lo + (seed * 7919 + i * 104729) % (hi - lo + 1)));
  return absl::StrCat("  %", name, " = constant ", type, "[", absl::StrJoin(dims, ","), "] {", absl::StrJoin(v, ", "),
                      "}\n");
}

std::string FloatConst(const std::string& name, const std::vector<int64_t>& dims, double base, double step) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<std::string> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(absl::StrCat(base + step * (i % 5)));
  return absl::StrCat("  %", name, " = constant f32[", absl::StrJoin(dims, ","), "] {", absl::StrJoin(v, ", "), "}\n");
}

int Count(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op_type == op;
  return n;
}

// Fuses a copy of `ir`'s graph; expects `fused` patterns, then outputs within `atol` (one step) of the
// original's.
void CheckFusion(const std::string& ir, int fused, const std::string& op, const Tensor& x, double atol = 1) {
  auto parsed = ParseGraph(ir);
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << ir;
  std::shared_ptr<Graph> reference(std::move(*parsed));
  std::shared_ptr<Graph> g(reference->Clone());
  // As at load: intermediate values have no inferred dtype or shape yet.
  std::map<std::string, std::pair<DType, Shape>> inferred;
  for (const auto& v : g->values()) {
    if (v->producer != nullptr) {
      inferred[v->name] = {v->dtype, v->shape};
      v->dtype = DType::kInvalid;
      v->shape = Shape::Unknown();
    }
  }
  auto n = FuseQdqIntoIntegerOps(*g);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, fused) << PrintGraph(*g);
  EXPECT_EQ(Count(*g, op), fused) << PrintGraph(*g);
  if (fused > 0) {
    EXPECT_EQ(Count(*g, "DequantizeLinear"), 0) << PrintGraph(*g);
    EXPECT_LE(Count(*g, "QuantizeLinear"), 1) << PrintGraph(*g);  // a graph's own input quantization stays
  }
  // Dtypes and shapes back (the fused op's output is the QuantizeLinear's value), as specialization infers.
  for (const auto& v : g->values()) {
    auto it = inferred.find(v->name);
    if (it != inferred.end()) std::tie(v->dtype, v->shape) = it->second;
  }
  ASSERT_TRUE(VerifyGraph(*g).ok()) << PrintGraph(*g);
  std::vector<Tensor> want = testing::RunGraph(reference, {x}), got = testing::RunGraph(g, {x});
  ASSERT_EQ(want.size(), 1u);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].dtype(), want[0].dtype());
  EXPECT_EQ(got[0].dims(), want[0].dims());
  OutputComparison c = CompareTensors("y", got[0], want[0], 0, atol);
  EXPECT_TRUE(c.ok) << "max_abs " << c.max_abs << " " << c.problem;
}

Tensor Bytes(DType t, const Dims& d) {
  Tensor x(t, d);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int v = static_cast<int>((i * 37 + 11) % 256);
    if (t == DType::kU8) x.data<uint8_t>()[i] = static_cast<uint8_t>(v);
    else x.data<int8_t>()[i] = static_cast<int8_t>(v - 128);
  }
  return x;
}

// The parameters every Conv case shares: x u8 [1,8,9,10] (scale 0.05, zero point 120), w i8 [6,8,3,3]
// per-channel, y u8 (scale 0.4, zero point 100).
std::string ConvParams() {
  return FloatConst("xs", {}, 0.05, 0) + IntConst("xz", "u8", {}, 120, 120, 0) +
         IntConst("w", "i8", {6, 8, 3, 3}, -127, 127, 3) + FloatConst("ws", {6}, 0.01, 0.002) +
         IntConst("wz", "i8", {6}, 0, 0, 0) + FloatConst("ys", {}, 0.4, 0) + IntConst("yz", "u8", {}, 100, 100, 0);
}

TEST(FuseQdqTest, ConvWithInt32BiasBecomesQLinearConv) {
  // The bias as quantize_static writes it: int32 with scale x_scale * w_scale[c].
  std::string bs;
  for (int c = 0; c < 6; ++c) bs += absl::StrCat(c ? ", " : "", 0.05f * (0.01f + 0.002f * (c % 5)));
  const std::string ir = "graph g(%x: u8[1,8,9,10]) {\n" + ConvParams() + IntConst("b", "i32", {6}, -3000, 3000, 5) +
                         "  %bs = constant f32[6] {" + bs + "}\n" +
                         "  %dx = DequantizeLinear(%x, %xs, %xz)\n  %dw = DequantizeLinear(%w, %ws, %wz) {axis=0}\n"
                         "  %db = DequantizeLinear(%b, %bs) {axis=0}\n"
                         "  %c = Conv(%dx, %dw, %db) {pads=[1,1,1,1], strides=[2,1]}\n"
                         "  %y = QuantizeLinear(%c, %ys, %yz)\n  return %y\n}";
  CheckFusion(ir, 1, "QLinearConv", Bytes(DType::kU8, {1, 8, 9, 10}));
}

TEST(FuseQdqTest, ActivationQuantizedInsideTheGraph) {
  // x arrives as float32 and is quantized by the model (its first Q -> DQ pair), as quantize_static writes.
  const std::string ir = "graph g(%f: f32[1,8,9,10]) {\n" + ConvParams() +
                         "  %x = QuantizeLinear(%f, %xs, %xz)\n"
                         "  %dx = DequantizeLinear(%x, %xs, %xz)\n  %dw = DequantizeLinear(%w, %ws, %wz) {axis=0}\n"
                         "  %c = Conv(%dx, %dw) {pads=[1,1,1,1]}\n  %y = QuantizeLinear(%c, %ys, %yz)\n  return %y\n}";
  Tensor f(DType::kF32, {1, 8, 9, 10});
  for (int64_t i = 0; i < f.numel(); ++i) f.data<float>()[i] = static_cast<float>(std::sin(0.3 * i)) * 5.0f;
  CheckFusion(ir, 1, "QLinearConv", f);
}

TEST(FuseQdqTest, ConvWithFloatBiasAndNoBias) {
  const std::string head = "graph g(%x: u8[1,8,9,10]) {\n" + ConvParams() + FloatConst("b", {6}, -0.3, 0.17) +
                           "  %dx = DequantizeLinear(%x, %xs, %xz)\n  %dw = DequantizeLinear(%w, %ws, %wz) {axis=0}\n";
  CheckFusion(head + "  %c = Conv(%dx, %dw, %b) {pads=[1,1,1,1]}\n  %y = QuantizeLinear(%c, %ys, %yz)\n  return %y\n}",
              1, "QLinearConv", Bytes(DType::kU8, {1, 8, 9, 10}));
  CheckFusion(head + "  %c = Conv(%dx, %dw) {dilations=[2,2]}\n  %y = QuantizeLinear(%c, %ys, %yz)\n  return %y\n}", 1,
              "QLinearConv", Bytes(DType::kU8, {1, 8, 9, 10}));
}

TEST(FuseQdqTest, ConditionsThatKeepTheFloatPath) {
  const std::string head = "graph g(%x: u8[1,8,9,10]) {\n" + ConvParams() +
                           "  %dx = DequantizeLinear(%x, %xs, %xz)\n  %dw = DequantizeLinear(%w, %ws, %wz) {axis=0}\n";
  // The Conv output is read by another op as well.
  CheckFusion(head +
                  "  %c = Conv(%dx, %dw)\n  %q = QuantizeLinear(%c, %ys, %yz)\n  %r = Relu(%c)\n"
                  "  %dq = DequantizeLinear(%q, %ys, %yz)\n  %y0 = Add(%dq, %r)\n  %y = QuantizeLinear(%y0, %ys, %yz)\n"
                  "  return %y\n}",
              0, "QLinearConv", Bytes(DType::kU8, {1, 8, 9, 10}));
  // A bias whose scale is not x_scale * w_scale.
  CheckFusion(head + IntConst("b", "i32", {6}, -3000, 3000, 5) + FloatConst("bs", {}, 0.3, 0) +
                  "  %db = DequantizeLinear(%b, %bs)\n  %c = Conv(%dx, %dw, %db)\n"
                  "  %y = QuantizeLinear(%c, %ys, %yz)\n  return %y\n}",
              0, "QLinearConv", Bytes(DType::kU8, {1, 8, 9, 10}));
  // Per-channel weight scales along the wrong axis (axis 1 of w, 8 values).
  CheckFusion("graph g(%x: u8[1,8,9,10]) {\n" + ConvParams() + FloatConst("ws1", {8}, 0.01, 0.001) +
                  IntConst("wz1", "i8", {8}, 0, 0, 0) +
                  "  %dx = DequantizeLinear(%x, %xs, %xz)\n  %dw = DequantizeLinear(%w, %ws1, %wz1) {axis=1}\n"
                  "  %c = Conv(%dx, %dw)\n  %y = QuantizeLinear(%c, %ys, %yz)\n  return %y\n}",
              0, "QLinearConv", Bytes(DType::kU8, {1, 8, 9, 10}));
}

TEST(FuseQdqTest, MatMulBecomesQLinearMatMul) {
  for (const std::string per : {"tensor", "column"}) {
    const std::string bs = per == "tensor" ? FloatConst("bs", {}, 0.02, 0) : FloatConst("bs", {12}, 0.01, 0.003);
    const std::string bz = per == "tensor" ? IntConst("bz", "i8", {}, 3, 3, 0) : IntConst("bz", "i8", {12}, -5, 5, 2);
    const std::string ir = "graph g(%x: i8[2,5,16]) {\n" + FloatConst("as", {}, 0.03, 0) +
                           IntConst("az", "i8", {}, -7, -7, 0) + IntConst("b", "i8", {16, 12}, -128, 127, 9) + bs + bz +
                           FloatConst("ys", {}, 0.25, 0) + IntConst("yz", "i8", {}, 4, 4, 0) +
                           "  %da = DequantizeLinear(%x, %as, %az)\n  %db = DequantizeLinear(%b, %bs, %bz) {axis=1}\n"
                           "  %m = MatMul(%da, %db)\n  %y = QuantizeLinear(%m, %ys, %yz)\n  return %y\n}";
    CheckFusion(ir, 1, "QLinearMatMul", Bytes(DType::kI8, {2, 5, 16}));
  }
}

TEST(FuseQdqTest, ValueMovingOpsRunOnTheBytes) {
  // DQ -> op -> Q with one scale and zero point becomes the op on the uint8 / int8 values: bit-identical.
  const std::string params = FloatConst("s", {}, 0.037, 0) + IntConst("z", "u8", {}, 117, 117, 0);
  const std::string in = "graph g(%x: u8[1,6,9,10]) {\n" + params + "  %d = DequantizeLinear(%x, %s, %z)\n";
  const std::string out = "  %y = QuantizeLinear(%o, %s, %z)\n  return %y\n}";
  CheckFusion(in + "  %o = MaxPool(%d) {kernel_shape=[3,3], strides=[2,2], pads=[1,1,1,1]}\n" + out, 1, "MaxPool",
              Bytes(DType::kU8, {1, 6, 9, 10}));
  CheckFusion(in + "  %o = MaxPool(%d) {kernel_shape=[2,2], strides=[2,2], ceil_mode=1}\n" + out, 1, "MaxPool",
              Bytes(DType::kU8, {1, 6, 9, 10}));
  CheckFusion(in + "  %o = Transpose(%d) {perm=[0,2,3,1]}\n" + out, 1, "Transpose", Bytes(DType::kU8, {1, 6, 9, 10}));
  CheckFusion(in + "  %shape = constant i64[3] {1, 54, 10}\n  %o = Reshape(%d, %shape)\n" + out, 1, "Reshape",
              Bytes(DType::kU8, {1, 6, 9, 10}));
  CheckFusion(in + "  %o = Flatten(%d) {axis=2}\n" + out, 1, "Flatten", Bytes(DType::kU8, {1, 6, 9, 10}));
  // int8, the zero point absent on both sides.
  CheckFusion("graph g(%x: i8[1,6,9,10]) {\n" + FloatConst("s", {}, 0.02, 0) + IntConst("zi", "i8", {}, 0, 0, 0) +
                  "  %d = DequantizeLinear(%x, %s)\n  %o = MaxPool(%d) {kernel_shape=[3,3], pads=[1,1,1,1]}\n"
                  "  %y = QuantizeLinear(%o, %s, %zi)\n  return %y\n}",
              1, "MaxPool", Bytes(DType::kI8, {1, 6, 9, 10}));
}

TEST(FuseQdqTest, FloatProductOfQuantizedWeightsKeepsThemInEightBits) {
  Tensor x(DType::kF32, {3, 70});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(std::sin(0.37 * i)) * 2.0f;
  // Gemm, transposed int8 weights per output channel (axis 0 of [N, K]), K not a multiple of the block (32),
  // a bias.
  CheckFusion("graph g(%x: f32[3,70]) {\n" + IntConst("w", "i8", {20, 70}, -128, 127, 4) +
                  FloatConst("ws", {20}, 0.01, 0.001) + IntConst("wz", "i8", {20}, 0, 0, 0) +
                  FloatConst("c", {20}, -0.5, 0.05) +
                  "  %dw = DequantizeLinear(%w, %ws, %wz) {axis=0}\n  %y = Gemm(%x, %dw, %c) {transB=1}\n"
                  "  return %y\n}",
              1, "MatMulNBits", x, 1e-4);
  // MatMul, uint8 weights [K, N] with one scale and zero point, batched A.
  Tensor a(DType::kF32, {2, 3, 70});
  for (int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] = static_cast<float>(std::cos(0.21 * i));
  CheckFusion("graph g(%x: f32[2,3,70]) {\n" + IntConst("w", "u8", {70, 12}, 0, 255, 7) +
                  FloatConst("ws", {}, 0.02, 0) + IntConst("wz", "u8", {}, 131, 131, 0) +
                  "  %dw = DequantizeLinear(%w, %ws, %wz)\n  %y = MatMul(%x, %dw)\n  return %y\n}",
              1, "MatMulNBits", a, 1e-4);
}

TEST(FuseQdqTest, ValueMovingOpsKeepDifferentParameters) {
  const std::string in = "graph g(%x: u8[1,6,9,10]) {\n" + FloatConst("s", {}, 0.037, 0) +
                         IntConst("z", "u8", {}, 117, 117, 0) + FloatConst("s2", {}, 0.05, 0) +
                         IntConst("z2", "u8", {}, 110, 110, 0) + "  %d = DequantizeLinear(%x, %s, %z)\n" +
                         "  %o = MaxPool(%d) {kernel_shape=[3,3], pads=[1,1,1,1]}\n";
  for (const std::string q : {"%s2, %z", "%s, %z2"}) {
    auto g = ParseGraph(in + "  %y = QuantizeLinear(%o, " + q + ")\n  return %y\n}");
    ASSERT_TRUE(g.ok()) << g.status();
    auto n = FuseQdqIntoIntegerOps(**g);
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, 0) << q;
    EXPECT_EQ(Count(**g, "DequantizeLinear"), 1) << q;
  }
}

// The channels-last layout pass on a quantized chain: QLinearConv -> DequantizeLinear -> Relu ->
// QuantizeLinear -> QLinearConv (strided, per-channel) -> QLinearConv (depthwise) becomes NhwcQLinearConvs with
// one Transpose at each end; the uint8 output is bit-identical to the NCHW graph's (the same integer math).
// *g = `nchw` rewritten by the layout pass (which must change it), transposes cancelled, verified.
void ChannelsLastCopy(const std::shared_ptr<Graph>& nchw, std::shared_ptr<Graph>* g) {
  g->reset(nchw->Clone().release());
  auto changed = AssignChannelsLastLayout(**g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  ASSERT_TRUE(RemoveNoOps(**g).ok());
  ASSERT_TRUE(VerifyGraph(**g).ok()) << PrintGraph(**g);
}

// The one output of `got` on x is bitwise the one of `want`.
void ExpectSameBits(const std::shared_ptr<Graph>& want_graph, const std::shared_ptr<Graph>& got_graph, const Tensor& x,
                    const std::string& where) {
  std::vector<Tensor> want = testing::RunGraph(want_graph, {x}), got = testing::RunGraph(got_graph, {x});
  ASSERT_EQ(want.size(), 1u);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].dims(), want[0].dims());
  EXPECT_EQ(std::memcmp(got[0].raw(), want[0].raw(), want[0].nbytes()), 0) << where;
}

TEST(ChannelsLastQuantizedTest, QLinearConvChainRunsChannelsLast) {
  const std::string ir =
      "graph g(%x: u8[1,8,11,13]) {\n" + ConvParams() + IntConst("w2", "i8", {16, 6, 3, 3}, -127, 127, 4) +
      FloatConst("ws2", {16}, 0.004, 0.001) + IntConst("wz2", "i8", {16}, 0, 0, 0) +
      IntConst("b2", "i32", {16}, -500, 500, 6) + IntConst("w3", "i8", {16, 1, 3, 3}, -127, 127, 5) +
      FloatConst("ws3", {}, 0.02, 0) + IntConst("wz3", "i8", {}, 0, 0, 0) +
      "  %c1 = QLinearConv(%x, %xs, %xz, %w, %ws, %wz, %ys, %yz) {pads=[1,1,1,1]}\n"
      "  %d = DequantizeLinear(%c1, %ys, %yz)\n  %r = Relu(%d)\n  %q = QuantizeLinear(%r, %ys, %yz)\n"
      "  %c2 = QLinearConv(%q, %ys, %yz, %w2, %ws2, %wz2, %xs, %xz, %b2) {pads=[1,0,1,1], strides=[2,2]}\n"
      "  %y = QLinearConv(%c2, %xs, %xz, %w3, %ws3, %wz3, %ys, %yz) {group=16, pads=[1,1,1,1]}\n"
      "  return %y\n}";
  auto parsed = SpecializedGraphFromText(ir);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  std::shared_ptr<Graph> nchw(std::move(*parsed)), g;
  ASSERT_NO_FATAL_FAILURE(ChannelsLastCopy(nchw, &g));
  EXPECT_EQ(Count(*g, "NhwcQLinearConv"), 3) << PrintGraph(*g);
  EXPECT_EQ(Count(*g, "QLinearConv"), 0) << PrintGraph(*g);
  EXPECT_EQ(Count(*g, "Transpose"), 2) << PrintGraph(*g);
  for (const char* isa : {"all", "avx2", "baseline"}) {
    const CpuIsa previous = MaxCpuIsa();
    auto cap = ParseCpuIsa(isa);
    ASSERT_TRUE(cap.ok());
    SetMaxCpuIsa(std::min(previous, *cap));
    ExpectSameBits(nchw, g, Bytes(DType::kU8, {1, 8, 11, 13}), isa);
    SetMaxCpuIsa(previous);
  }
}

// Constant weights with a zero point that is not a constant (a graph input): the weights prepared for the
// 8-bit GEMM fold the zero point in, so they must not be cached across runs - two runs with different zero
// points give each its own exact result.
TEST(Int8GemmTest, ZeroPointInputIsNotCachedWithTheWeights) {
  const std::string ir = "graph g(%a: u8[3,8], %bz: i8[]) {\n" + IntConst("b", "i8", {8, 4}, -128, 127, 7) +
                         "  %y = MatMulInteger(%a, %b, _, %bz)\n  return %y\n}";
  auto parsed = SpecializedGraphFromText(ir);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  std::shared_ptr<Graph> g(std::move(*parsed));
  const Tensor a = Bytes(DType::kU8, {3, 8});
  std::vector<int> bv(32);
  for (int64_t i = 0; i < 32; ++i) bv[i] = -128 + static_cast<int>((7 * 7919 + i * 104729) % 256);
  for (int zp : {0, 9, -20}) {
    Tensor z(DType::kI8, {});
    z.data<int8_t>()[0] = static_cast<int8_t>(zp);
    std::vector<Tensor> out = testing::RunGraph(g, {a, z});
    ASSERT_EQ(out.size(), 1u);
    for (int m = 0; m < 3; ++m)
      for (int n = 0; n < 4; ++n) {
        int64_t want = 0;
        for (int k = 0; k < 8; ++k) want += int64_t{a.data<uint8_t>()[m * 8 + k]} * (bv[k * 4 + n] - zp);
        ASSERT_EQ(out[0].data<int32_t>()[m * 4 + n], want) << "zero point " << zp << " at " << m << "," << n;
      }
  }
}

}  // namespace
}  // namespace cjit

namespace cjit {
namespace {

// AutoQuantize's candidates: products with constant float32 weights of at least min_weights elements,
// not denied, not Gemm with transA; one DynamicQuantizeLinear per activation however many products read it.
TEST(AutoQuantizeTest, CandidatesAndSharedActivationQuantization) {
  const std::string ir = "graph g(%a: f32[4,16], %b: f32[16,8]) {\n" + FloatConst("w1", {16, 8}, -0.5, 0.25) +
                         FloatConst("w2", {16, 8}, 0.1, -0.05) + FloatConst("small", {16, 2}, 0.3, 0.1) +
                         FloatConst("wt", {4, 8}, 0.2, 0.1) +
                         "  %p = MatMul(%a, %w1)\n  %q = MatMul(%a, %w2)\n  %r = MatMul(%a, %small)\n"
                         "  %s = MatMul(%a, %b)\n  %t = Gemm(%a, %wt) {transA=1}\n  %d = MatMul(%a, %w1)\n"
                         "  return %p, %q, %r, %s, %t, %d\n}";
  auto parsed = ParseGraph(ir);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  Graph& g = **parsed;
  // Node names: the parser names a node after its first output.
  std::vector<std::string> names;
  for (const auto& n : g.nodes()) names.push_back(n->name);
  AutoQuantizeOptions o;
  o.min_weights = 100;                // "small" (32) stays float32
  o.denied_nodes = {names.back()};    // the last MatMul is denied
  auto done = AutoQuantize(g, o);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(*done, (std::vector<std::string>{names[0], names[1]})) << PrintGraph(g);
  EXPECT_EQ(Count(g, "DynamicQuantizeLinear"), 1) << PrintGraph(g);
  EXPECT_EQ(Count(g, "MatMulInteger"), 2) << PrintGraph(g);
  EXPECT_EQ(Count(g, "MatMul"), 3) << PrintGraph(g);  // small, non-constant and denied
  EXPECT_EQ(Count(g, "Gemm"), 1) << PrintGraph(g);    // transA
  EXPECT_TRUE(VerifyGraph(g).ok()) << PrintGraph(g);
}

TEST(AutoQuantizeTest, WeightOnlyWritesMatMulNBitsAndRuleCanRefuse) {
  const std::string ir = "graph g(%a: f32[2,40]) {\n" + FloatConst("w", {40, 16}, -1, 0.5) +
                         FloatConst("v", {40, 16}, 1, -0.5) + "  %p = MatMul(%a, %w)\n  %q = MatMul(%a, %v)\n"
                         "  return %p, %q\n}";
  auto parsed = ParseGraph(ir);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  Graph& g = **parsed;
  const std::string refused = g.nodes()[1]->name;
  AutoQuantizeOptions o;
  o.mode = AutoQuantizeOptions::Mode::kWeightOnly;
  o.min_weights = 0;
  o.weight_bits = 4;
  o.block_size = 16;
  o.rule = [&](const Node& n) { return n.name != refused; };
  auto done = AutoQuantize(g, o);
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->size(), 1u);
  EXPECT_EQ(Count(g, "MatMulNBits"), 1) << PrintGraph(g);
  EXPECT_EQ(Count(g, "MatMul"), 1) << PrintGraph(g);
  for (const auto& n : g.nodes()) {
    if (n->op_type != "MatMulNBits") continue;
    EXPECT_EQ(n->domain, "com.clusterjit");
    EXPECT_EQ(n->GetInt("K", 0), 40);
    EXPECT_EQ(n->GetInt("N", 0), 16);
    // B [N, ceil(40 / 16) = 3, 16 * 4 / 8 = 8].
    EXPECT_EQ(n->input(1)->constant->dims(), (Dims{16, 3, 8}));
  }
  o.weight_bits = 3;
  EXPECT_FALSE(AutoQuantize(g, o).ok());
}

// The packing against hand-decoded codes: 4 bits, low nibble first, padding at the zero point (8).
TEST(AutoQuantizeTest, QuantizeWeightsNBitsLayout) {
  // W [K=20, N=1]: values k - 10 (absmax 10 in block 0 [0,16), 9 in block 1 [16,20)).
  std::vector<float> w(20);
  for (int k = 0; k < 20; ++k) w[k] = static_cast<float>(k - 10);
  std::vector<uint8_t> packed(2 * 8);
  std::vector<float> scales(2);
  QuantizeWeightsNBits(w.data(), 20, 1, 1, 1, 4, 16, packed.data(), scales.data());
  EXPECT_FLOAT_EQ(scales[0], 10.0f / 7);
  EXPECT_FLOAT_EQ(scales[1], 9.0f / 7);
  auto code = [&](int b, int i) { return (packed[b * 8 + i / 2] >> (4 * (i % 2))) & 15; };
  for (int k = 0; k < 16; ++k) {
    EXPECT_EQ(code(0, k), static_cast<int>(std::nearbyint((k - 10) / (10.0f / 7))) + 8) << k;
  }
  for (int i = 0; i < 4; ++i) EXPECT_EQ(code(1, i), static_cast<int>(std::nearbyint((6 + i) / (9.0f / 7))) + 8) << i;
  for (int i = 4; i < 16; ++i) EXPECT_EQ(code(1, i), 8) << "padding " << i;
}

// Weights so small that max|w| / qmax underflows to 0: the scale falls back to 1 (codes at the zero point),
// never a division by zero feeding an integer conversion.
TEST(AutoQuantizeTest, UnderflowingScalesFallBackToOne) {
  std::vector<float> w(32, 1e-44f);  // 1e-44 / 127 is 0 in float32
  std::vector<uint8_t> packed(32);
  std::vector<float> scales(1);
  QuantizeWeightsNBits(w.data(), 32, 1, 1, 1, 8, 32, packed.data(), scales.data());
  EXPECT_EQ(scales[0], 1.0f);
  for (uint8_t b : packed) EXPECT_EQ(b, 128);
  const std::string ir = "graph g(%a: f32[2,16]) {\n" + FloatConst("w", {16, 8}, 1e-44, 0) +
                         "  %p = MatMul(%a, %w)\n  return %p\n}";
  auto parsed = ParseGraph(ir);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  AutoQuantizeOptions o;
  o.min_weights = 0;
  auto done = AutoQuantize(**parsed, o);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->size(), 1u);
}

// --auto_quantize=dynamic convolutions in a channels-last region: DynamicQuantizeLinear -> ConvInteger
// (x2, with a float Relu between) become NhwcConvInteger with the quantization following the layout, and
// the outputs are bitwise those of the NCHW graph (the same integer sums and float scaling).
TEST(AutoQuantizeTest, DynamicConvolutionsRunChannelsLast) {
  const std::string ir = "graph g(%x: f32[1,8,11,13]) {\n" + FloatConst("w1", {16, 8, 3, 3}, -0.3, 0.15) +
                         FloatConst("b1", {16}, 0.1, -0.05) + FloatConst("w2", {24, 16, 3, 3}, 0.2, -0.1) +
                         "  %c1 = Conv(%x, %w1, %b1) {pads=[1,1,1,1]}\n  %r = Relu(%c1)\n"
                         "  %y = Conv(%r, %w2) {pads=[1,0,1,1], strides=[2,2]}\n  return %y\n}";
  auto parsed = ParseGraph(ir);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  AutoQuantizeOptions o;
  o.min_weights = 0;
  auto done = AutoQuantize(**parsed, o);
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->size(), 2u);
  auto eval = [](const Node& n, const std::vector<const Tensor*>& in) { return EvaluateNode(n, in, 1); };
  ASSERT_TRUE(SpecializeShapes(**parsed, {Dims{1, 8, 11, 13}}, eval).ok());
  std::shared_ptr<Graph> nchw(std::move(*parsed)), g;
  ASSERT_NO_FATAL_FAILURE(ChannelsLastCopy(nchw, &g));
  EXPECT_EQ(Count(*g, "NhwcConvInteger"), 2) << PrintGraph(*g);
  EXPECT_EQ(Count(*g, "ConvInteger"), 0) << PrintGraph(*g);
  // The region's two edges; the other Transposes permute the [1, OC, 1, 1] per-channel scales.
  int large_transposes = 0;
  for (const auto& n : g->nodes()) {
    large_transposes += n->op_type == "Transpose" && NumElements(n->outputs[0]->shape.concrete()) > 64;
  }
  EXPECT_EQ(large_transposes, 2) << PrintGraph(*g);
  Tensor x(DType::kF32, {1, 8, 11, 13});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>((i * 37 % 101) - 50) / 25.0f;
  ExpectSameBits(nchw, g, x, "NhwcConvInteger");
}

// quantize_dynamic's form: the per-channel scale x_scale * w_scale[c] computed at run time as [C, 1, 1]. It
// is reshaped for the channels-last product, so both ConvIntegers and the chain between them run
// channels-last with one Transpose at each end; the outputs are the NCHW graph's bit for bit.
TEST(ChannelsLastQuantizedTest, RuntimePerChannelScaleStaysChannelsLast) {
  const std::string ir =
      "graph g(%x: u8[1,8,11,13]) {\n" + IntConst("w1", "i8", {6, 8, 3, 3}, -127, 127, 3) +
      IntConst("w2", "i8", {5, 6, 1, 1}, -127, 127, 4) + FloatConst("ws1", {6, 1, 1}, 0.01, 0.002) +
      FloatConst("ws2", {5, 1, 1}, 0.02, 0.001) + FloatConst("xs", {}, 0.05, 0) +
      IntConst("xz", "u8", {}, 120, 120, 0) +
      "  %c1 = ConvInteger(%x, %w1, %xz) {pads=[1,1,1,1]}\n  %f1 = Cast(%c1) {to=1}\n"
      "  %s1 = Mul(%xs, %ws1)\n  %y1 = Mul(%f1, %s1)\n  %r = Relu(%y1)\n"
      "  %q, %qs, %qz = DynamicQuantizeLinear(%r)\n  %c2 = ConvInteger(%q, %w2, %qz)\n  %f2 = Cast(%c2) {to=1}\n"
      "  %s2 = Mul(%qs, %ws2)\n  %y = Mul(%f2, %s2)\n  return %y\n}";
  auto parsed = SpecializedGraphFromText(ir);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  std::shared_ptr<Graph> nchw(std::move(*parsed)), g;
  ASSERT_NO_FATAL_FAILURE(ChannelsLastCopy(nchw, &g));
  EXPECT_EQ(Count(*g, "NhwcConvInteger"), 2) << PrintGraph(*g);
  EXPECT_EQ(Count(*g, "Transpose"), 2) << PrintGraph(*g);
  ExpectSameBits(nchw, g, Bytes(DType::kU8, {1, 8, 11, 13}), "runtime per-channel scale");
}

TEST(AutoQuantizeTest, BadFlagsAreClearErrors) {
  EXPECT_FALSE(ParseFlags("--auto_quantize=int4").ok());
  EXPECT_FALSE(ParseFlags("--auto_quantize_weight_bits=3").ok());
  EXPECT_FALSE(ParseFlags("--auto_quantize_block_size=24").ok());
  auto f = ParseFlags("--auto_quantize=dynamic --auto_quantize_allowlist_add=Relu");
  ASSERT_TRUE(f.ok()) << f.status();  // an ONNX op: the session says it cannot be quantized
  SessionOptions o;
  o.use_environment_flags = false;
  o.flags = *f;
  const std::string model = std::string(CJIT_SOURCE_DIR) + "/fuzz/corpus/auto_quantize.onnx";
  auto s = Session::Load(model, o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("Relu cannot be quantized"), std::string::npos) << s.status();
}

}  // namespace
}  // namespace cjit
