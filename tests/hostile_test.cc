// Hostile and malformed models (issue 11): every case must end in a clear error naming the node, op and
// attribute or input at fault — never an abort, a crash, an out-of-bounds access, a hang, or a wrong
// number. Each TEST runs in its own process under ctest, so a crash fails only its own test. Expected
// values come from the ONNX operator specification (and numpy's semantics where it defers to them).
// This file: sizes and allocations, arithmetic that traps, shape errors that would read out of bounds;
// hostile_model_test.cc: invalid models and parameters; hostile_file_test.cc: files.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "runtime/cpu/tensor_util.h"
#include "runtime/session.h"
#include "tests/hostile_util.h"
#include "tests/model_builder.h"

namespace cjit::hostile {
namespace {

using testing::ModelBuilder;

// ---- sizes: allocations are checked before they are made ----

// A Loop whose scan output collects scalars over a huge trip count stops once what it holds could exceed
// --max_tensor_bytes — each slice counted with its bookkeeping, not its 4-byte payload alone (which let a
// 256 KiB limit run 52k iterations: 5 s per fuzz input in the sanitizer build) — and a short loop of the
// same model gives every slice.
TEST(HostileTest, LoopScanOfScalarsIsBoundedWithItsBookkeeping) {
  ModelBuilder b(13);
  b.Input("m", onnx::TensorProto::INT64, {}).Input("x", onnx::TensorProto::FLOAT, {});
  b.Output("final").Output("scan");
  auto* n = b.Node("Loop", {"m", "", "x"}, {"final", "scan"});
  auto* a = n->add_attribute();
  a->set_name("body");
  a->set_type(onnx::AttributeProto::GRAPH);
  onnx::GraphProto* g = a->mutable_g();
  g->set_name("body");
  ModelBuilder::Info(g->add_input(), "i", onnx::TensorProto::INT64, {});
  ModelBuilder::Info(g->add_input(), "cond", onnx::TensorProto::BOOL, {});
  ModelBuilder::Info(g->add_input(), "prev", onnx::TensorProto::FLOAT, {});
  for (const auto& [in, out] : std::vector<std::pair<std::string, std::string>>{
           {"cond", "cond_out"}, {"prev", "cur"}, {"prev", "slice"}}) {
    auto* id = g->add_node();
    id->set_op_type("Identity");
    id->add_input(in);
    id->add_output(out);
  }
  ModelBuilder::Info(g->add_output(), "cond_out", onnx::TensorProto::BOOL, {});
  ModelBuilder::Info(g->add_output(), "cur", onnx::TensorProto::FLOAT, {});
  ModelBuilder::Info(g->add_output(), "slice", onnx::TensorProto::FLOAT, {});
  SessionOptions o = Opts();
  o.flags.max_tensor_bytes = 64 << 10;
  auto r = LoadAndRun(b, {{"m", I64({}, {1000000000})}, {"x", F32({}, {2.5f})}}, o);
  ASSERT_TRUE(ErrorWith(r.status(), {"Loop", "scan output 0 after", "--max_tensor_bytes (65536)"}));
  const std::string msg(r.status().message());
  const size_t at = msg.find("after ") + 6;
  const int64_t iterations = std::stoll(msg.substr(at));
  EXPECT_GT(iterations, 64);
  EXPECT_LE(iterations, (64 << 10) / (4 + 64)) << msg;
  auto ok = LoadAndRun(b, {{"m", I64({}, {100})}, {"x", F32({}, {2.5f})}}, o);
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ(ok->size(), 2u);
  const Tensor& scan = (*ok)[1].tensor;
  ASSERT_EQ(scan.dims(), (Dims{100}));
  for (int64_t k = 0; k < 100; ++k) EXPECT_EQ(scan.data<float>()[k], 2.5f);
}

// MatMulInteger / QLinearMatMul with batch dims that do not broadcast (3 against 2): a clear error, not an
// out-of-bounds read of the smaller operand (fuzzer-found: fuzz/regressions/QLinearMatMul_batch_broadcast_*).
// A zero batch dim against a 1 broadcasts to 0 (numpy), not 1.
TEST(HostileTest, MatMulIntegerBatchDimsThatDoNotBroadcast) {
  testing::ModelBuilder m(13);
  m.Input("a", onnx::TensorProto::UINT8, {3, 2, 2}, false).Input("b", onnx::TensorProto::UINT8, {2, 2, 2}, false)
      .Output("y");
  m.Node("MatMulInteger", {"a", "b"}, {"y"});
  SessionOptions o;
  o.use_environment_flags = false;
  o.flags.device = "cpu";
  auto s = Session::LoadFromBytes(m.Bytes(), o);
  ASSERT_TRUE(s.ok()) << s.status();
  Tensor a(DType::kU8, {3, 2, 2}), b(DType::kU8, {2, 2, 2});
  for (int64_t i = 0; i < a.numel(); ++i) a.data<uint8_t>()[i] = static_cast<uint8_t>(i);
  for (int64_t i = 0; i < b.numel(); ++i) b.data<uint8_t>()[i] = static_cast<uint8_t>(2 * i);
  auto r = (*s)->Run({{"a", a}, {"b", b}});
  ASSERT_FALSE(r.ok()) << "batch dims 3 and 2 do not broadcast";
  EXPECT_NE(r.status().message().find("broadcast"), std::string::npos) << r.status();
  auto g = PlanMatMul({0, 2, 2}, {1, 2, 3});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->cd, (Dims{0, 2, 3}));
  EXPECT_EQ(g->batch, 0);
  EXPECT_FALSE(PlanMatMul({3, 2, 2}, {2, 2, 2}).ok());
}

// ConvInteger / QLinearConv whose kernel_shape disagrees with W's spatial dims (a fuzz finding: the
// integer loops indexed W by the attribute's taps and read past it) are errors naming the node, with W a
// graph input (no folding at load) and a constant.
TEST(HostileTest, IntegerConvKernelShapeThatDisagreesWithW) {
  for (bool w_constant : {false, true}) {
    testing::ModelBuilder m(13);
    m.Input("x", onnx::TensorProto::UINT8, {1, 1, 5, 5}).Output("y");
    if (w_constant) {
      m.InitInts("w", {1, 1, 2, 2}, {1, 2, 3, 4}, onnx::TensorProto::UINT8);
    } else {
      m.Input("w", onnx::TensorProto::UINT8, {1, 1, 2, 2});
    }
    testing::ModelBuilder::AttrInts(m.Node("ConvInteger", {"x", "w"}, {"y"}, "qconv"), "kernel_shape", {4, 4});
    Tensor x(DType::kU8, {1, 1, 5, 5}), w(DType::kU8, {1, 1, 2, 2});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<uint8_t>()[i] = static_cast<uint8_t>(i);
    for (int64_t i = 0; i < w.numel(); ++i) w.data<uint8_t>()[i] = static_cast<uint8_t>(i + 1);
    std::vector<NamedTensor> in{{"x", x}};
    if (!w_constant) in.push_back({"w", w});
    for (const char* jit : {"-1", "1"}) {
      auto r = LoadAndRun(m, in, Opts(jit));
      EXPECT_TRUE(ErrorWith(r.status(), {"qconv", "kernel_shape"})) << "w constant " << w_constant << " jit " << jit;
    }
  }
}

TEST(HostileTest, HugeInitializerWithoutData) {
  ModelBuilder b;
  b.Input("x", kF, {1}).Output("y");
  b.Init("w", kF, {int64_t{1} << 36});
  b.Node("Add", {"x", "w"}, {"y"});
  auto s = Session::LoadFromBytes(b.Bytes(), Opts());
  EXPECT_TRUE(ErrorWith(s.status(), {"'w'"}));
}

TEST(HostileTest, HugeConstantNodeWithoutData) {
  ModelBuilder b;
  b.Input("x", kF, {1}).Output("y");
  auto* c = b.Node("Constant", {}, {"w"});
  auto* a = c->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(kF);
  a->mutable_t()->add_dims(int64_t{1} << 36);
  b.Node("Add", {"x", "w"}, {"y"});
  auto s = Session::LoadFromBytes(b.Bytes(), Opts());
  EXPECT_FALSE(s.ok());
}

// Conv folds run at load, before anything validated the graph: a short bias or BatchNormalization
// parameters of the wrong length are left for shape inference, which names them (never a read past them).
TEST(HostileTest, MalformedConvOperandsAreNotFoldedAtLoad) {
  for (int variant = 0; variant < 2; ++variant) {
    ModelBuilder b;
    b.Input("x", kF, {1, 2, 3, 3}).Output("y");
    b.InitFloats("w", {4, 2, 1, 1}, {1, 2, 3, 4, 5, 6, 7, 8});
    b.InitFloats("b", {variant == 0 ? 1 : 4}, variant == 0 ? std::vector<float>{1} : std::vector<float>{1, 2, 3, 4});
    b.Node("Conv", {"x", "w", "b"}, {"c"});
    b.InitFloats("g", {4}, {1, 1, 1, 1});
    b.InitFloats("beta", {4}, {0, 0, 0, 0});
    b.InitFloats("mean", {variant == 1 ? 1 : 4}, variant == 1 ? std::vector<float>{0} : std::vector<float>{0, 0, 0, 0});
    b.InitFloats("var", {4}, {1, 1, 1, 1});
    b.Node("BatchNormalization", {"c", "g", "beta", "mean", "var"}, {"y"});
    std::vector<float> x(18, 0.5f);
    auto r = LoadAndRun(b, {{"x", F32({1, 2, 3, 3}, x)}});
    EXPECT_TRUE(ErrorWith(r.status(), {variant == 0 ? "Conv" : "BatchNormalization"})) << "variant " << variant;
  }
}

TEST(HostileTest, ConstantOfShapeNegativeDim) {
  ModelBuilder b;
  b.Input("x", kF, {1}).Output("y");
  b.InitInts("shape", {2}, {-4, 3});
  b.Node("ConstantOfShape", {"shape"}, {"y"});
  EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"x", F32({1}, {0})}}).status(), {"ConstantOfShape", "-4"}));
}

TEST(HostileTest, ConstantOfShapeFromInputNegativeDim) {
  ModelBuilder b;
  b.Input("shape", kI64, {2}).Output("y");
  b.Node("ConstantOfShape", {"shape"}, {"y"});
  EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"shape", I64({2}, {-5, 2})}}).status(), {"ConstantOfShape", "-5"}));
}

TEST(HostileTest, ConstantOfShapeTooLarge) {
  ModelBuilder b;
  b.Input("shape", kI64, {2}).Output("y");
  b.Node("ConstantOfShape", {"shape"}, {"y"});
  auto r = LoadAndRun(b, {{"shape", I64({2}, {int64_t{1} << 40, int64_t{1} << 30})}});
  EXPECT_TRUE(ErrorWith(r.status(), {"ConstantOfShape"}));
}

// --max_tensor_bytes bounds every tensor a model makes: a computed output (ConstantOfShape, Tile, Expand
// from a data-dependent shape), an initializer at load. Under the limit the same model runs.
TEST(HostileTest, MaxTensorBytesBoundsComputedOutputs) {
  ModelBuilder b;
  b.Input("shape", kI64, {2}).Output("y");
  b.Node("ConstantOfShape", {"shape"}, {"y"});
  SessionOptions o = Opts();
  o.flags.max_tensor_bytes = 1 << 20;
  auto r = LoadAndRun(b, {{"shape", I64({2}, {1024, 1024})}}, o);  // 4 MiB of float32
  EXPECT_TRUE(ErrorWith(r.status(), {"ConstantOfShape", "--max_tensor_bytes (1048576)", "4194304"}));
  auto ok = LoadAndRun(b, {{"shape", I64({2}, {256, 256})}}, o);    // 256 KiB
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)[0].tensor.numel(), 256 * 256);
  // The compiled path checks too (Tile in a cluster).
  ModelBuilder t;
  t.Input("x", kF, {4, 4}).Input("r", kI64, {2}).Output("y");
  t.Node("Tile", {"x", "r"}, {"y"});
  SessionOptions oc = Opts("1");
  oc.flags.max_tensor_bytes = 1 << 20;
  auto rt = LoadAndRun(t, {{"x", F32({4, 4}, std::vector<float>(16, 1.0f))}, {"r", I64({2}, {1000, 1000})}}, oc);
  EXPECT_TRUE(ErrorWith(rt.status(), {"Tile", "--max_tensor_bytes"}));
}

TEST(HostileTest, MaxTensorBytesBoundsInitializers) {
  ModelBuilder b;
  b.Input("x", kF, {1}).Output("y");
  b.InitFloats("w", {300}, std::vector<float>(300, 1.0f));
  b.Node("Add", {"x", "w"}, {"y"});
  SessionOptions o = Opts();
  o.flags.max_tensor_bytes = 1000;
  EXPECT_TRUE(ErrorWith(Session::LoadFromBytes(b.Bytes(), o).status(), {"'w'", "--max_tensor_bytes (1000)"}));
  o.flags.max_tensor_bytes = 1200;
  EXPECT_TRUE(Session::LoadFromBytes(b.Bytes(), o).ok());
}

TEST(HostileTest, OneHotNegativeDepth) {
  ModelBuilder b;
  b.Input("i", kI64, {3}).Output("y");
  b.InitInts("depth", {}, {-3});
  b.InitFloats("values", {2}, {0, 1});
  b.Node("OneHot", {"i", "depth", "values"}, {"y"});
  EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"i", I64({3}, {0, 1, 2})}}).status(), {"OneHot", "depth"}));
}

TEST(HostileTest, TileNegativeRepeats) {
  ModelBuilder b;
  b.Input("x", kF, {2}).Output("y");
  b.InitInts("r", {1}, {-1});
  b.Node("Tile", {"x", "r"}, {"y"});
  EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"x", F32({2}, {1, 2})}}).status(), {"Tile", "repeats"}));
}

TEST(HostileTest, TileRepeatsFromInputNegative) {
  ModelBuilder b;
  b.Input("x", kF, {2}).Input("r", kI64, {1}).Output("y");
  b.Node("Tile", {"x", "r"}, {"y"});
  EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"x", F32({2}, {1, 2})}, {"r", I64({1}, {-2})}}).status(), {"Tile", "repeats"}));
}

// Tile and Expand whose output is empty but has a dim of 2^40 (a fuzz finding: the kernels sized a per-dim
// offset table by each output dim): an empty result, as the ONNX specification defines it, at once, on
// both paths, also where the shapes are known only at run time.
TEST(HostileTest, EmptyOutputsWithAHugeDim) {
  constexpr int64_t kHuge = int64_t{1} << 40;
  for (const char* auto_jit : {"-1", "1"}) {
    for (bool runtime_shapes : {false, true}) {
      ModelBuilder tile;
      tile.Input("x", kF, {0, 1}).Output("y");
      if (runtime_shapes) {
        tile.Input("r", kI64, {2});
      } else {
        tile.InitInts("r", {2}, {1, kHuge});
      }
      tile.Node("Tile", {"x", "r"}, {"y"});
      std::vector<NamedTensor> in = {{"x", F32({0, 1}, {})}};
      if (runtime_shapes) in.push_back({"r", I64({2}, {1, kHuge})});
      auto t = LoadAndRun(tile, in, Opts(auto_jit));
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_EQ((*t)[0].tensor.dims(), (Dims{0, kHuge}));

      ModelBuilder expand;
      expand.Input("x", kF, {0, 1}).Output("y");
      if (runtime_shapes) {
        expand.Input("s", kI64, {2});
      } else {
        expand.InitInts("s", {2}, {0, kHuge});
      }
      expand.Node("Expand", {"x", "s"}, {"y"});
      in = {{"x", F32({0, 1}, {})}};
      if (runtime_shapes) in.push_back({"s", I64({2}, {0, kHuge})});
      auto e = LoadAndRun(expand, in, Opts(auto_jit));
      ASSERT_TRUE(e.ok()) << e.status();
      EXPECT_EQ((*e)[0].tensor.dims(), (Dims{0, kHuge}));
    }
  }
}

TEST(HostileTest, SplitNegativeSizes) {
  ModelBuilder b;
  b.Input("x", kF, {4}).Output("a").Output("b");
  b.InitInts("s", {2}, {-1, 5});
  b.Node("Split", {"x", "s"}, {"a", "b"});
  EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"x", F32({4}, {1, 2, 3, 4})}}).status(), {"Split", "split"}));
}

TEST(HostileTest, ResizeBadScales) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), -2.0f, 0.0f, std::numeric_limits<float>::infinity()}) {
    ModelBuilder b;
    b.Input("x", kF, {1, 1, 2, 2}).Output("y");
    b.InitFloats("scales", {4}, {1, 1, bad, 2});
    b.Node("Resize", {"x", "", "scales"}, {"y"});
    EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"x", F32({1, 1, 2, 2}, {1, 2, 3, 4})}}).status(), {"Resize", "scales"}))
        << "scale " << bad;
  }
}

TEST(HostileTest, ResizeBadSizes) {
  for (int64_t bad : {0, -3}) {
    ModelBuilder b;
    b.Input("x", kF, {1, 1, 2, 2}).Output("y");
    b.InitInts("sizes", {4}, {1, 1, bad, 4});
    b.Node("Resize", {"x", "", "", "sizes"}, {"y"});
    EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"x", F32({1, 1, 2, 2}, {1, 2, 3, 4})}}).status(), {"Resize", "sizes"}))
        << "size " << bad;
  }
}

TEST(HostileTest, ExpandToNegativeDim) {
  ModelBuilder b;
  b.Input("x", kF, {1}).Output("y");
  b.InitInts("shape", {2}, {-4, 1});
  b.Node("Expand", {"x", "shape"}, {"y"});
  EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"x", F32({1}, {1})}}).status(), {"Expand", "-4"}));
}

// ---- arithmetic that traps ----

TEST(HostileTest, IntegerDivisionOverflowAndByZero) {
  for (const char* jit : {"-1", "1"}) {
    for (int elem : {kI32, kI64}) {
      ModelBuilder b;
      b.Input("a", elem, {3}).Input("b", elem, {3}).Output("y");
      b.Node("Div", {"a", "b"}, {"y"});
      b.Node("Mod", {"a", "b"}, {"m"});
      b.proto().mutable_graph()->add_output()->set_name("m");
      std::vector<NamedTensor> in;
      if (elem == kI32) {
        in = {{"a", I32({3}, {INT32_MIN, 7, -7})}, {"b", I32({3}, {-1, 2, 2})}};
      } else {
        in = {{"a", I64({3}, {INT64_MIN, 7, -7})}, {"b", I64({3}, {-1, 2, 2})}};
      }
      auto r = LoadAndRun(b, in, Opts(jit));
      ASSERT_TRUE(r.ok()) << r.status();
      // Wrapping two's-complement result for the one overflowing quotient (numpy gives the same);
      // truncation toward zero otherwise (ONNX Div on integers, C semantics); Mod (fmod=0) takes the
      // divisor's sign, and INT_MIN mod -1 is 0.
      std::vector<int64_t> q = (*r)[0].tensor.ToInt64Vector(), m = (*r)[1].tensor.ToInt64Vector();
      EXPECT_EQ(q[0], elem == kI32 ? INT32_MIN : INT64_MIN);
      EXPECT_EQ(q[1], 3);
      EXPECT_EQ(q[2], -3);
      EXPECT_EQ(m[0], 0);
      EXPECT_EQ(m[1], 1);
      EXPECT_EQ(m[2], 1);
      // Division by zero is an error naming the node, not a SIGFPE.
      if (elem == kI32) {
        in = {{"a", I32({3}, {1, 2, 3})}, {"b", I32({3}, {1, 0, 1})}};
      } else {
        in = {{"a", I64({3}, {1, 2, 3})}, {"b", I64({3}, {1, 0, 1})}};
      }
      EXPECT_TRUE(ErrorWith(LoadAndRun(b, in, Opts(jit)).status(), {"division by zero"}));
    }
  }
}

TEST(HostileTest, ScatterNDEmptyIndexTupleAndOutOfRange) {
  {
    // indices [1, 0]: each update is the whole data tensor (ONNX ScatterND with k = 0).
    ModelBuilder b(16);
    b.Input("d", kF, {2, 3}).Input("i", kI64, {1, 0}).Input("u", kF, {1, 2, 3}).Output("y");
    b.Node("ScatterND", {"d", "i", "u"}, {"y"});
    auto r = LoadAndRun(b, {{"d", F32({2, 3}, {0, 0, 0, 0, 0, 0})},
                            {"i", I64({1, 0}, {})},
                            {"u", F32({1, 2, 3}, {1, 2, 3, 4, 5, 6})}});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)[0].tensor.ToDoubleVector(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  }
  for (int64_t bad : {int64_t{20}, int64_t{-3}, int64_t{100000000}, int64_t{-100000000}}) {
    ModelBuilder b(16);
    b.Input("d", kF, {2, 3}).Input("i", kI64, {1, 1}).Input("u", kF, {1, 3}).Output("y");
    b.Node("ScatterND", {"d", "i", "u"}, {"y"});
    auto r = LoadAndRun(b, {{"d", F32({2, 3}, {0, 0, 0, 0, 0, 0})}, {"i", I64({1, 1}, {bad})},
                            {"u", F32({1, 3}, {1, 2, 3})}});
    EXPECT_TRUE(ErrorWith(r.status(), {"ScatterND", "out of range"})) << bad;
  }
}

TEST(HostileTest, GatherAndGatherElementsOutOfRange) {
  ModelBuilder b;
  b.Input("d", kF, {2, 3}).Input("i", kI64, {2}).Output("y");
  b.Node("Gather", {"d", "i"}, {"y"});
  EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"d", F32({2, 3}, {1, 2, 3, 4, 5, 6})}, {"i", I64({2}, {0, 7})}}).status(),
                        {"Gather", "out of range"}));
  ModelBuilder e;
  e.Input("d", kF, {2, 3}).Input("i", kI64, {2, 3}).Output("y");
  e.Node("GatherElements", {"d", "i"}, {"y"});
  EXPECT_TRUE(ErrorWith(LoadAndRun(e, {{"d", F32({2, 3}, {1, 2, 3, 4, 5, 6})}, {"i", I64({2, 3}, {0, 1, 2, 0, 9, 1})}})
                            .status(),
                        {"GatherElements", "out of range"}));
}

TEST(HostileTest, ScatterElementsOutOfRange) {
  ModelBuilder b(16);
  b.Input("d", kF, {2, 3}).Input("i", kI64, {1, 2}).Input("u", kF, {1, 2}).Output("y");
  b.Node("ScatterElements", {"d", "i", "u"}, {"y"});
  EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"d", F32({2, 3}, {0, 0, 0, 0, 0, 0})}, {"i", I64({1, 2}, {3, 0})},
                                       {"u", F32({1, 2}, {1, 2})}})
                            .status(),
                        {"ScatterElements", "out of range"}));
}

// ---- shape errors that read out of bounds ----

TEST(HostileTest, NodeWithoutOutputs) {
  ModelBuilder b;
  b.Input("x", kF, {2}).Output("x");
  b.Node("Relu", {"x"}, {});
  auto s = Session::LoadFromBytes(b.Bytes(), Opts());
  if (s.ok()) {
    auto r = (*s)->Run({{"x", F32({2}, {1, 2})}});
    EXPECT_TRUE(ErrorWith(r.status(), {"Relu"}));
  } else {
    EXPECT_TRUE(ErrorWith(s.status(), {"Relu", "output"}));
  }
}

TEST(HostileTest, ReduceMeanAxesOnScalar) {
  ModelBuilder b;
  b.Input("x", kF, {}).Output("y");
  auto* n = b.Node("ReduceMean", {"x"}, {"y"});
  ModelBuilder::AttrInts(n, "axes", {0, 1});
  EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"x", F32({}, {3})}}).status(), {"ReduceMean", "axis"}));
}

TEST(HostileTest, ReverseSequenceLengthsBeyondTimeDim) {
  ModelBuilder b(10);
  b.Input("x", kF, {3, 2}).Input("l", kI64, {2}).Output("y");
  auto* n = b.Node("ReverseSequence", {"x", "l"}, {"y"});
  ModelBuilder::AttrInt(n, "batch_axis", 1);
  ModelBuilder::AttrInt(n, "time_axis", 0);
  EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"x", F32({3, 2}, {1, 2, 3, 4, 5, 6})}, {"l", I64({2}, {2, 9})}}).status(),
                        {"ReverseSequence", "sequence_lens"}));
}

TEST(HostileTest, BatchNormalizationScaleTooShort) {
  ModelBuilder b;
  b.Input("x", kF, {1, 3, 2}).Output("y");
  b.InitFloats("s", {1}, {1});
  b.InitFloats("bias", {3}, {0, 0, 0});
  b.InitFloats("m", {3}, {0, 0, 0});
  b.InitFloats("v", {3}, {1, 1, 1});
  b.Node("BatchNormalization", {"x", "s", "bias", "m", "v"}, {"y"});
  EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"x", F32({1, 3, 2}, {1, 2, 3, 4, 5, 6})}}).status(),
                        {"BatchNormalization", "scale"}));
}

TEST(HostileTest, InstanceNormalizationScaleTooShort) {
  ModelBuilder b;
  b.Input("x", kF, {1, 3, 2}).Output("y");
  b.InitFloats("s", {1}, {1});
  b.InitFloats("bias", {3}, {0, 0, 0});
  b.Node("InstanceNormalization", {"x", "s", "bias"}, {"y"});
  EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"x", F32({1, 3, 2}, {1, 2, 3, 4, 5, 6})}}).status(),
                        {"InstanceNormalization", "scale"}));
}

TEST(HostileTest, GruWeightOfTheWrongShape) {
  ModelBuilder b;
  b.Input("x", kF, {2, 1, 3}).Output("y");
  std::vector<float> w(3 * 4 * 2, 0.1f), r(3 * 4 * 4, 0.1f);
  b.InitFloats("W", {1, 3 * 4, 2}, w);  // input_size is 3, W says 2
  b.InitFloats("R", {1, 3 * 4, 4}, r);
  auto* n = b.Node("GRU", {"x", "W", "R"}, {"y"});
  ModelBuilder::AttrInt(n, "hidden_size", 4);
  EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"x", F32({2, 1, 3}, {1, 2, 3, 4, 5, 6})}}).status(), {"GRU", "W"}));
}

TEST(HostileTest, ConvBiasTooShort) {
  ModelBuilder b;
  b.Input("x", kF, {1, 1, 3, 3}).Output("y");
  b.InitFloats("w", {2, 1, 1, 1}, {1, 2});
  b.InitFloats("bias", {1}, {5});
  b.Node("Conv", {"x", "w", "bias"}, {"y"});
  for (const char* jit : {"-1", "1"}) {
    EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"x", F32({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9})}}, Opts(jit)).status(),
                          {"Conv", "bias"}))
        << jit;
  }
}

TEST(HostileTest, DetOfNonSquareMatrix) {
  ModelBuilder b;
  b.Input("x", kF, {2, 3}).Output("y");
  b.Node("Det", {"x"}, {"y"});
  EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"x", F32({2, 3}, {1, 2, 3, 4, 5, 6})}}).status(), {"Det", "square"}));
}

}  // namespace
}  // namespace cjit::hostile
