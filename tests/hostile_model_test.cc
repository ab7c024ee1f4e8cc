// Hostile and malformed models (hostile_test.cc says what every case must end in): models that break the
// specification's rules (opsets, attribute types, broadcasting, shapes), quantization parameters and
// contrib/signal ops outside their contracts.
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

// ---- invalid models accepted before ----

TEST(HostileTest, OpBelowItsIntroducingOpset) {
  struct Case {
    const char* op;
    int opset;
  };
  // Below the opset that introduced them (Gelu-20, Mish-18, HardSwish-14): an error naming op and opset.
  for (Case c : {Case{"Gelu", 13}, Case{"Mish", 9}, Case{"HardSwish", 13}}) {
    ModelBuilder b(c.opset);
    b.Input("x", kF, {2}).Output("y");
    b.Node(c.op, {"x"}, {"y"});
    auto s = Session::LoadFromBytes(b.Bytes(), Opts());
    EXPECT_TRUE(ErrorWith(s.status(), {c.op, "opset"})) << c.op << " at opset " << c.opset;
  }
  // At their opset they load.
  for (Case c : {Case{"Mish", 18}, Case{"HardSwish", 14}}) {
    ModelBuilder b(c.opset);
    b.Input("x", kF, {2}).Output("y");
    b.Node(c.op, {"x"}, {"y"});
    EXPECT_TRUE(Session::LoadFromBytes(b.Bytes(), Opts()).ok()) << c.op;
  }
}

TEST(HostileTest, AttributeOfTheWrongType) {
  ModelBuilder b;
  b.Input("x", kF, {2, 2}).Output("y");
  auto* n = b.Node("Transpose", {"x"}, {"y"});
  ModelBuilder::AttrFloats(n, "perm", {1, 0});  // perm is INTS
  EXPECT_TRUE(ErrorWith(Session::LoadFromBytes(b.Bytes(), Opts()).status(), {"Transpose", "perm", "INTS"}));
  ModelBuilder c;
  c.Input("x", kF, {2, 2}).Output("y");
  auto* m = c.Node("Softmax", {"x"}, {"y"});
  ModelBuilder::AttrString(m, "axis", "1");  // axis is INT
  EXPECT_TRUE(ErrorWith(Session::LoadFromBytes(c.Bytes(), Opts()).status(), {"Softmax", "axis", "INT"}));
}

TEST(HostileTest, ConcatWithoutAxis) {
  ModelBuilder b;
  b.Input("x", kF, {2}).Output("y");
  b.Node("Concat", {"x", "x"}, {"y"});
  EXPECT_TRUE(ErrorWith(Session::LoadFromBytes(b.Bytes(), Opts()).status(), {"Concat", "axis"}));
}

TEST(HostileTest, GemmWithUnbroadcastableC) {
  ModelBuilder b;
  b.Input("a", kF, {2, 3}).Output("y");
  b.InitFloats("bm", {3, 4}, std::vector<float>(12, 1));
  b.InitFloats("c", {3}, {1, 2, 3});
  b.Node("Gemm", {"a", "bm", "c"}, {"y"});
  EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"a", F32({2, 3}, {1, 2, 3, 4, 5, 6})}}).status(), {"Gemm", "C"}));
}

TEST(HostileTest, EmptyInputsToPadAndArgMax) {
  {
    // Pad of an empty tensor in constant mode is the pad value everywhere (ONNX Pad); edge/reflect need
    // data to repeat, so they are errors.
    ModelBuilder b(13);
    b.Input("x", kF, {0, 2}).Output("y");
    b.InitInts("p", {4}, {1, 0, 1, 0});
    b.InitFloats("v", {}, {7});
    b.Node("Pad", {"x", "p", "v"}, {"y"});
    auto r = LoadAndRun(b, {{"x", Tensor(DType::kF32, {0, 2})}});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)[0].tensor.dims(), (Dims{2, 2}));
    EXPECT_EQ((*r)[0].tensor.ToDoubleVector(), (std::vector<double>{7, 7, 7, 7}));
    ModelBuilder e(13);
    e.Input("x", kF, {0, 2}).Output("y");
    e.InitInts("p", {4}, {1, 0, 1, 0});
    auto* n = e.Node("Pad", {"x", "p"}, {"y"});
    ModelBuilder::AttrString(n, "mode", "edge");
    EXPECT_TRUE(ErrorWith(LoadAndRun(e, {{"x", Tensor(DType::kF32, {0, 2})}}).status(), {"Pad", "empty"}));
  }
  {
    ModelBuilder b;
    b.Input("x", kF, {0, 3}).Output("y");
    auto* n = b.Node("ArgMax", {"x"}, {"y"});
    ModelBuilder::AttrInt(n, "axis", 0);
    EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"x", Tensor(DType::kF32, {0, 3})}}).status(), {"ArgMax", "empty"}));
  }
}

TEST(HostileTest, MaxPoolPadsNotSmallerThanKernel) {
  ModelBuilder b;
  b.Input("x", kF, {1, 1, 4, 4}).Output("y");
  auto* n = b.Node("MaxPool", {"x"}, {"y"});
  ModelBuilder::AttrInts(n, "kernel_shape", {2, 2});
  ModelBuilder::AttrInts(n, "pads", {2, 0, 0, 0});
  EXPECT_TRUE(
      ErrorWith(LoadAndRun(b, {{"x", Tensor::Zeros(DType::kF32, {1, 1, 4, 4})}}).status(), {"MaxPool", "pads"}));
}

// Found by the fuzzer: output_shape = INT64_MIN overflowed `full - target` (UBSan) before it was checked.
TEST(HostileTest, ConvTransposeOutputShapeOutOfRange) {
  for (int64_t target : {std::numeric_limits<int64_t>::min(), int64_t{-3}, int64_t{0},
                         std::numeric_limits<int64_t>::max()}) {
    ModelBuilder b;
    b.Input("x", kF, {1, 1, 3}).Output("y");
    b.InitFloats("w", {1, 1, 2}, {1, 1});
    auto* n = b.Node("ConvTranspose", {"x", "w"}, {"y"});
    ModelBuilder::AttrInts(n, "output_shape", {target});
    EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"x", F32({1, 1, 3}, {1, 2, 3})}}).status(),
                          {"ConvTranspose", "output_shape", "is outside"}))
        << target;
  }
  // Beyond the full output (4 here) by a bounded amount: the output extends with zeros, by ONNX's pads
  // (total -2: one zero at each end).
  ModelBuilder b;
  b.Input("x", kF, {1, 1, 3}).Output("y");
  b.InitFloats("w", {1, 1, 2}, {1, 1});
  ModelBuilder::AttrInts(b.Node("ConvTranspose", {"x", "w"}, {"y"}), "output_shape", {6});
  auto out = LoadAndRun(b, {{"x", F32({1, 1, 3}, {1, 2, 3})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].tensor.ToDoubleVector(), (std::vector<double>{0, 1, 3, 5, 3, 0}));
}

// Found by the fuzzer: a negative batch_dims (or an index tuple longer than the data's rank) read a dim
// before the start of the shape (a libstdc++ assertion, or memory outside it in a release build).
TEST(HostileTest, GatherNDBatchDimsAndIndexTupleOutOfRange) {
  for (auto [batch_dims, tuple] : {std::pair<int64_t, int64_t>{-3, 1}, {2, 1}, {0, 3}}) {
    ModelBuilder b;
    b.Input("x", kF, {2, 2}).Input("i", kI64, {2, tuple}).Output("y");
    auto* n = b.Node("GatherND", {"x", "i"}, {"y"});
    ModelBuilder::AttrInt(n, "batch_dims", batch_dims);
    EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"x", F32({2, 2}, {1, 2, 3, 4})},
                                         {"i", I64({2, tuple}, std::vector<int64_t>(2 * tuple, 0))}})
                              .status(),
                          {"GatherND"}))
        << batch_dims << " " << tuple;
  }
}

// Found by the fuzzer: an implicit-output equation of non-letter bytes indexed the kernel's per-letter table
// with a negative char.
TEST(HostileTest, EinsumEquationWithNonLetters) {
  for (const char* eq : {"\xff\xfe", "ij->j1", "i;j"}) {
    ModelBuilder b(12);
    b.Input("x", kF, {2, 2}).Output("y");
    auto* n = b.Node("Einsum", {"x"}, {"y"});
    ModelBuilder::AttrString(n, "equation", eq);
    EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"x", F32({2, 2}, {1, 2, 3, 4})}}).status(), {"Einsum", "character"})) << eq;
  }
}

// Found by the fuzzer: Pad of a scalar whose pads and axes come from an input. Specialization saw a scalar
// output and marked the shape as known, so the run skipped the inference that checks pads and axes, and the
// kernel indexed out of range.
TEST(HostileTest, PadOfAScalarWithRuntimePadsAndAxes) {
  ModelBuilder b(20);
  b.Input("x", kF, {}).Input("pads", kI64, {8}).Output("y");
  b.Node("Pad", {"x", "pads", "x", "pads"}, {"y"});
  for (const char* jit : {"-1", "1"}) {
    EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"x", F32({}, {1.5f})}, {"pads", I64({8}, {1, 2, 3, 0, 1, 2, 3, 0})}},
                                     Opts(jit)).status(),
                          {"Pad"}))
        << jit;
  }
}

// Found by the fuzzer: a float16 infinity cast to an integer type went through an unchecked float -> integer
// conversion (undefined behavior). In-range values truncate toward zero as ONNX Cast specifies.
TEST(HostileTest, CastOfNonFiniteFloat16ToInteger) {
  ModelBuilder b;
  b.Input("x", kF, {4}).Output("y");
  ModelBuilder::AttrInt(b.Node("Cast", {"x"}, {"h"}), "to", onnx::TensorProto::FLOAT16);
  ModelBuilder::AttrInt(b.Node("Cast", {"h"}, {"y"}), "to", onnx::TensorProto::INT32);
  for (const char* jit : {"-1", "1"}) {
    auto r = LoadAndRun(b, {{"x", F32({4}, {1.5f, -2.5f, std::numeric_limits<float>::infinity(), std::nanf("")})}},
                        Opts(jit));
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<double> y = (*r)[0].tensor.ToDoubleVector();
    EXPECT_EQ(y[0], 1) << jit;
    EXPECT_EQ(y[1], -2) << jit;
  }
}

// A convolution chain (run channels-last) whose first Conv has zero input channels: the pointwise GEMM path
// divided by the channel count (SIGFPE, found in review). Now a clear error naming the node, on both paths.
TEST(HostileTest, ZeroInputChannelConvChain) {
  ModelBuilder b;
  b.Input("x", kF, {1, 0, 4, 4}).Output("y");
  b.InitFloats("w1", {4, 0, 1, 1}, {});
  b.InitFloats("b1", {4}, {1, 1, 1, 1});
  b.InitFloats("w2", {3, 4, 1, 1}, std::vector<float>(12, 1.0f));
  b.Node("Conv", {"x", "w1", "b1"}, {"c"});
  b.Node("Conv", {"c", "w2"}, {"y"});
  for (const char* jit : {"-1", "1"}) {
    auto r = LoadAndRun(b, {{"x", Tensor(DType::kF32, {1, 0, 4, 4})}}, Opts(jit));
    EXPECT_TRUE(ErrorWith(r.status(), {"node 'c'", "convolution"})) << jit << ": " << r.status();
  }
}

// Resize of an empty input to a non-empty size (sizes input): nothing to interpolate from; the taps used to
// index the empty input (found in review).
TEST(HostileTest, ResizeOfEmptyInputToNonEmptySizes) {
  ModelBuilder b;
  b.Input("x", kF, {1, 0, 2}).Output("y");
  b.InitInts("sizes", {3}, {1, 3, 4});
  b.Node("Resize", {"x", "", "", "sizes"}, {"y"});
  for (const char* jit : {"-1", "1"}) {
    auto r = LoadAndRun(b, {{"x", Tensor(DType::kF32, {1, 0, 2})}}, Opts(jit));
    EXPECT_TRUE(ErrorWith(r.status(), {"Resize", "empty"})) << jit << ": " << r.status();
  }
}

// Found by CI's fuzzer: Resize with tf_crop_and_resize on an integer input stored its float
// extrapolation_value (-1e10) with a plain C++ conversion, undefined out of the type's range. It now
// converts as Cast does (saturating, NaN -> 0). Sizes 3x3 over a 2x2 input with roi [-0.5, 1.5] per
// spatial dim sample x = -0.5, 0.5, 1.5 (ONNX Resize: x = start * (in - 1) + i * (end - start) * (in - 1) /
// (out - 1)): the border samples lie outside [0, 1] and take the extrapolation value; the centre is the
// mean of the four inputs (linear).
TEST(HostileTest, ResizeExtrapolationValueOutsideIntegerRange) {
  struct Case {
    float extrapolation;
    uint16_t expected_border;
  };
  for (Case c : {Case{-1e10f, 0}, Case{1e10f, 65535}, Case{std::numeric_limits<float>::quiet_NaN(), 0},
                 Case{7.9f, 7}}) {
    ModelBuilder b;
    b.Input("x", onnx::TensorProto::UINT16, {1, 1, 2, 2}).Output("y");
    b.InitFloats("roi", {8}, {0, 0, -0.5f, -0.5f, 1, 1, 1.5f, 1.5f});
    b.InitInts("sizes", {4}, {1, 1, 3, 3});
    auto* n = b.Node("Resize", {"x", "roi", "", "sizes"}, {"y"});
    ModelBuilder::AttrString(n, "mode", "linear");
    ModelBuilder::AttrString(n, "coordinate_transformation_mode", "tf_crop_and_resize");
    ModelBuilder::AttrFloat(n, "extrapolation_value", c.extrapolation);
    Tensor x(DType::kU16, {1, 1, 2, 2});
    for (int i = 0; i < 4; ++i) x.data<uint16_t>()[i] = static_cast<uint16_t>(10 * (i + 1));
    for (const char* jit : {"-1", "1"}) {
      auto r = LoadAndRun(b, {{"x", x}}, Opts(jit));
      ASSERT_TRUE(r.ok()) << jit << ": " << r.status();
      const Tensor& y = (*r)[0].tensor;
      ASSERT_EQ(y.numel(), 9);
      for (int i = 0; i < 9; ++i) {
        EXPECT_EQ(y.data<uint16_t>()[i], i == 4 ? 25 : c.expected_border)
            << "extrapolation " << c.extrapolation << ", element " << i << ", auto_jit " << jit;
      }
    }
  }
}

// Found by the fuzzer: Resize ran any unknown mode (e.g. "SAME_UPPER") as cubic, and a cubic coordinate
// from a huge region of interest overflowed int64 in the tap arithmetic (UBSan). Unknown attribute values
// are errors naming them; far-outside coordinates give the specification's result.
TEST(HostileTest, ResizeUnknownModesAndHugeCubicCoordinates) {
  for (const char* attr : {"mode", "coordinate_transformation_mode", "nearest_mode"}) {
    ModelBuilder b;
    b.Input("x", kF, {1, 1, 2, 2}).Output("y");
    b.InitInts("sizes", {4}, {1, 1, 3, 3});
    ModelBuilder::AttrString(b.Node("Resize", {"x", "", "", "sizes"}, {"y"}), attr, "SAME_UPPER");
    for (const char* jit : {"-1", "1"}) {
      auto r = LoadAndRun(b, {{"x", F32({1, 1, 2, 2}, {1, 2, 3, 4})}}, Opts(jit));
      EXPECT_TRUE(ErrorWith(r.status(), {"Resize", attr, "SAME_UPPER"})) << attr << " " << jit << ": " << r.status();
    }
  }
  // Cubic tf_crop_and_resize with a region of interest far outside the input: every output element is the
  // extrapolation value (ONNX Resize: coordinates outside [0, in - 1] take it).
  ModelBuilder b;
  b.Input("x", kF, {1, 1, 2, 2}).Output("y");
  b.InitFloats("roi", {8}, {0, 0, 1e30f, 1e30f, 1, 1, 2e30f, 2e30f});
  b.InitInts("sizes", {4}, {1, 1, 3, 3});
  auto* n = b.Node("Resize", {"x", "roi", "", "sizes"}, {"y"});
  ModelBuilder::AttrString(n, "mode", "cubic");
  ModelBuilder::AttrString(n, "coordinate_transformation_mode", "tf_crop_and_resize");
  ModelBuilder::AttrFloat(n, "extrapolation_value", -7.0f);
  for (const char* jit : {"-1", "1"}) {
    auto r = LoadAndRun(b, {{"x", F32({1, 1, 2, 2}, {1, 2, 3, 4})}}, Opts(jit));
    ASSERT_TRUE(r.ok()) << jit << ": " << r.status();
    for (int i = 0; i < 9; ++i) EXPECT_EQ((*r)[0].tensor.data<float>()[i], -7.0f) << jit << " element " << i;
  }
}

// Found by CI's fuzzer: a Min whose input is a Resize by run-time scales (its shape unknown until run
// time) had its output shape inferred without it, and the broadcast loop read past that input. Every
// elementwise kernel now checks that its inputs broadcast to the output.
TEST(HostileTest, VariadicInputShapeKnownOnlyAtRunTime) {
  ModelBuilder b;
  b.Input("x", kF, {4, 1}).Input("s", kF, {2}).Output("y");
  b.Node("Max", {"x", "s"}, {"m"});
  b.Node("Resize", {"m", "", "s"}, {"r"});
  b.Node("Min", {"x", "s", "m", "r"}, {"y"});
  Tensor x = F32({4, 1}, {0, 1, 2, 3}), sc = F32({2}, {2, 3});
  for (const char* jit : {"-1", "1"}) {
    auto r = LoadAndRun(b, {{"x", x}, {"s", sc}}, Opts(jit));
    EXPECT_TRUE(ErrorWith(r.status(), {"Min", "broadcast"})) << jit << ": " << r.status();
  }
}

// Found by the fuzzer: LRN with size = INT64_MIN overflowed (size - 1) / 2.
TEST(HostileTest, LrnSizeNotPositive) {
  for (int64_t size : {std::numeric_limits<int64_t>::min(), int64_t{0}, int64_t{-2}}) {
    ModelBuilder b;
    b.Input("x", kF, {1, 2, 2}).Output("y");
    ModelBuilder::AttrInt(b.Node("LRN", {"x"}, {"y"}), "size", size);
    EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"x", F32({1, 2, 2}, {1, 2, 3, 4})}}).status(), {"LRN", "size"})) << size;
  }
}

// Found by the fuzzer: MatMulInteger of a scalar indexed the operand's dims before their start (its output
// shape is left to the kernel, which planned the product without checking the rank).
TEST(HostileTest, MatMulIntegerOfAScalar) {
  ModelBuilder b;
  b.Input("a", onnx::TensorProto::UINT8, {}).Input("b", onnx::TensorProto::UINT8, {2}).Output("y");
  b.Node("MatMulInteger", {"a", "b"}, {"y"});
  Tensor a(DType::kU8, {}), bb(DType::kU8, {2});
  a.data<uint8_t>()[0] = 3;
  bb.data<uint8_t>()[0] = bb.data<uint8_t>()[1] = 1;
  EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"a", a}, {"b", bb}}).status(), {"MatMulInteger", "scalar"}));
}

// Found by CI's fuzzer: EyeLike of a rank-3 input ([3,4,0]: an empty output) wrote a 3x4 identity into it.
// ONNX EyeLike takes 2-D inputs only.
TEST(HostileTest, EyeLikeOfNonMatrix) {
  for (const std::vector<int64_t>& dims : {std::vector<int64_t>{3, 4, 0}, std::vector<int64_t>{5}}) {
    ModelBuilder b(9);
    b.Input("x", onnx::TensorProto::INT32, dims).Output("y");
    ModelBuilder::AttrInt(b.Node("EyeLike", {"x"}, {"y"}), "dtype", onnx::TensorProto::DOUBLE);
    Tensor x(DType::kI32, dims);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<int32_t>()[i] = 0;
    for (const char* jit : {"-1", "1"}) {
      EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"x", x}}, Opts(jit)).status(), {"EyeLike", "2-D"})) << jit;
    }
  }
}

TEST(HostileTest, SliceStepMin) {
  ModelBuilder b;
  b.Input("x", kF, {4}).Output("y");
  b.InitInts("s", {1}, {3});
  b.InitInts("e", {1}, {0});
  b.InitInts("a", {1}, {0});
  b.InitInts("st", {1}, {INT64_MIN});
  b.Node("Slice", {"x", "s", "e", "a", "st"}, {"y"});
  auto r = LoadAndRun(b, {{"x", F32({4}, {1, 2, 3, 4})}});
  // A step of INT64_MIN takes the start element only (3 > 0, one step reaches past the end).
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].tensor.ToDoubleVector(), std::vector<double>{4});
}

// A negative step over an axis of size 0 (CI's fuzzer: an empty clamp range in shape inference and the
// kernel) takes nothing, as numpy's x[::-1] of an empty array.
TEST(HostileTest, SliceNegativeStepOnEmptyAxis) {
  ModelBuilder b;
  b.Input("x", kF, {2, 0}).Output("y");
  b.InitInts("s", {1}, {-1});
  b.InitInts("e", {1}, {INT64_MIN});
  b.InitInts("a", {1}, {1});
  b.InitInts("st", {1}, {-1});
  b.Node("Slice", {"x", "s", "e", "a", "st"}, {"y"});
  for (const char* jit : {"-1", "1"}) {
    auto r = LoadAndRun(b, {{"x", Tensor(DType::kF32, {2, 0})}}, Opts(jit));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)[0].tensor.dims(), (Dims{2, 0})) << jit;
  }
}

// PRelu on int64 (opset 16) wraps on overflow like numpy's int64 product (CI's fuzzer: INT64_MIN *
// INT64_MIN was signed overflow in the kernel).
TEST(HostileTest, PReluIntegerOverflowWraps) {
  ModelBuilder b(16);
  b.Input("x", kI64, {3}).Output("y");
  b.InitInts("slope", {3}, {INT64_MIN, 2, 5});
  b.Node("PRelu", {"x", "slope"}, {"y"});
  Tensor x(DType::kI64, {3});
  x.data<int64_t>()[0] = INT64_MIN;
  x.data<int64_t>()[1] = -3;
  x.data<int64_t>()[2] = 7;
  for (const char* jit : {"-1", "1"}) {
    auto r = LoadAndRun(b, {{"x", x}}, Opts(jit));
    ASSERT_TRUE(r.ok()) << r.status();
    const int64_t* y = (*r)[0].tensor.data<int64_t>();
    EXPECT_EQ(y[0], 0) << jit;  // (-2^63) * (-2^63) = 2^126 = 0 mod 2^64
    EXPECT_EQ(y[1], -6) << jit;
    EXPECT_EQ(y[2], 7) << jit;
  }
}

// MeanVarianceNormalization with an axis outside the input's rank (its default axes {0, 2, 3} on a rank-2
// input; CI's fuzzer: a write past a std::vector<bool>) is an error naming the node, on both paths.
TEST(HostileTest, MeanVarianceNormalizationAxisOutOfRange) {
  for (bool default_axes : {true, false}) {
    ModelBuilder b(13);
    b.Input("x", kF, {2, 3}).Output("y");
    auto* n = b.Node("MeanVarianceNormalization", {"x"}, {"y"});
    if (!default_axes) ModelBuilder::AttrInts(n, "axes", {0, 5});
    for (const char* jit : {"-1", "1"}) {
      auto r = LoadAndRun(b, {{"x", F32({2, 3}, {1, 2, 3, 4, 5, 6})}}, Opts(jit));
      EXPECT_TRUE(ErrorWith(r.status(), {"MeanVarianceNormalization", "axis"})) << jit << " " << r.status();
    }
  }
}

TEST(HostileTest, RangeOverflow) {
  ModelBuilder b(11);
  b.Input("s", kI64, {}).Input("l", kI64, {}).Input("d", kI64, {}).Output("y");
  b.Node("Range", {"s", "l", "d"}, {"y"});
  auto r = LoadAndRun(b, {{"s", I64({}, {INT64_MIN})}, {"l", I64({}, {INT64_MAX})}, {"d", I64({}, {1})}});
  EXPECT_TRUE(ErrorWith(r.status(), {"Range"}));
  auto z = LoadAndRun(b, {{"s", I64({}, {0})}, {"l", I64({}, {10})}, {"d", I64({}, {0})}});
  EXPECT_TRUE(ErrorWith(z.status(), {"Range", "delta"}));
}


// Hostile quantization parameters (issue 38): a zero, negative or NaN output scale, scales and zero points
// whose length fits no axis, and int32 sums that leave int32 give a clear error or the wrapped ONNX result,
// never a crash. Each on both paths.
TEST(HostileTest, QuantizedParameters) {
  constexpr int kU8 = onnx::TensorProto::UINT8, kI8 = onnx::TensorProto::INT8;
  auto qconv = [&](float y_scale, int w_scales, int bias_len) {
    ModelBuilder b(13);
    b.Input("x", kU8, {1, 2, 4, 4}).Output("y");
    b.Node("QLinearConv", {"x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"}, {"y"});
    b.InitFloats("xs", {}, {0.1f});
    b.Init("xz", kU8, {})->add_int32_data(10);
    auto* w = b.Init("w", kI8, {3, 2, 1, 1});
    for (int i = 0; i < 6; ++i) w->add_int32_data(i - 3);
    b.InitFloats("ws", {w_scales}, std::vector<float>(w_scales, 0.5f));
    auto* wz = b.Init("wz", kI8, {w_scales});
    for (int i = 0; i < w_scales; ++i) wz->add_int32_data(0);
    b.InitFloats("ys", {}, {y_scale});
    b.Init("yz", kU8, {})->add_int32_data(0);
    b.InitInts("b", {bias_len}, std::vector<int64_t>(bias_len, 1), kI32);
    return b;
  };
  Tensor x(DType::kU8, {1, 2, 4, 4});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<uint8_t>()[i] = static_cast<uint8_t>(i * 7);
  for (const char* jit : {"-1", "1"}) {
    for (float ys : {0.0f, -1.0f, std::nanf("")}) {
      EXPECT_TRUE(ErrorWith(LoadAndRun(qconv(ys, 3, 3), {{"x", x}}, Opts(jit)).status(), {"QLinearConv", "y_scale"}))
          << ys;
    }
    EXPECT_TRUE(ErrorWith(LoadAndRun(qconv(1.0f, 2, 3), {{"x", x}}, Opts(jit)).status(), {"QLinearConv", "3"}));
    EXPECT_TRUE(ErrorWith(LoadAndRun(qconv(1.0f, 3, 5), {{"x", x}}, Opts(jit)).status(), {"QLinearConv", "bias"}));
    EXPECT_TRUE(LoadAndRun(qconv(1.0f, 3, 3), {{"x", x}}, Opts(jit)).ok());
  }
  // MatMulInteger whose sums leave int32 (255 * 127 * 70000 > 2^31): the wrapped int32, as the hardware's.
  ModelBuilder b(13);
  const int64_t K = 70000;
  b.Input("a", kU8, {1, K}).Input("w", kI8, {K, 1}).Output("y");
  b.Node("MatMulInteger", {"a", "w"}, {"y"});
  Tensor a(DType::kU8, {1, K}), w(DType::kI8, {K, 1});
  for (int64_t i = 0; i < K; ++i) {
    a.data<uint8_t>()[i] = 255;
    w.data<int8_t>()[i] = 127;
  }
  auto out = LoadAndRun(b, {{"a", a}, {"w", w}});
  ASSERT_TRUE(out.ok()) << out.status();
  const int64_t exact = int64_t{255} * 127 * K;
  EXPECT_EQ((*out)[0].tensor.data<int32_t>()[0], static_cast<int32_t>(static_cast<uint32_t>(exact)));
}

// Opset-21 quantization given parameters outside its contract, and int4 data that is not int4: errors that
// name the node or input, and the int4 packing (two per byte, low nibble first) read from int32_data.
TEST(HostileTest, BlockedAndInt4Quantization) {
  constexpr int kI4 = 22, kF32 = onnx::TensorProto::FLOAT;
  // DequantizeLinear(w int4 [4, 3] from int32_data, scale [sk, 3], block_size) -> y float32.
  auto dq = [&](int64_t sk, int64_t block, int packed_bytes) {
    ModelBuilder b(21, 10);
    b.Input("x", kF32, {4, 3}).Output("y");
    auto* n = b.Node("DequantizeLinear", {"w", "s"}, {"wd"});
    ModelBuilder::AttrInt(n, "axis", 0);
    ModelBuilder::AttrInt(n, "block_size", block);
    b.Node("Add", {"x", "wd"}, {"y"});
    auto* w = b.Init("w", kI4, {4, 3});
    // Values 0, 1, ..., 11 as int4: 8..11 read back as -8..-5.
    for (int i = 0; i < packed_bytes; ++i) w->add_int32_data((2 * i) | ((2 * i + 1) << 4));
    b.InitFloats("s", {sk, 3}, std::vector<float>(sk * 3, 1.0f));
    return b;
  };
  Tensor x(DType::kF32, {4, 3});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.0f;
  for (const char* jit : {"-1", "1"}) {
    auto out = LoadAndRun(dq(2, 2, 6), {{"x", x}}, Opts(jit));
    ASSERT_TRUE(out.ok()) << out.status();
    for (int i = 0; i < 12; ++i) EXPECT_EQ((*out)[0].tensor.data<float>()[i], i < 8 ? i : i - 16) << i;
    // A scale that is not ceil(4 / block_size) along the axis; a negative block size.
    EXPECT_TRUE(
        ErrorWith(LoadAndRun(dq(3, 2, 6), {{"x", x}}, Opts(jit)).status(), {"DequantizeLinear", "block_size 2"}));
    EXPECT_TRUE(
        ErrorWith(LoadAndRun(dq(2, -1, 6), {{"x", x}}, Opts(jit)).status(), {"DequantizeLinear", "block_size"}));
    EXPECT_TRUE(ErrorWith(LoadAndRun(dq(2, INT64_MAX, 6), {{"x", x}}, Opts(jit)).status(),
                          {"DequantizeLinear", "must have dims 1x3"}));
  }
  // Packed data of the wrong length names the tensor; a float8 tensor (no such dtype here) names its type.
  EXPECT_TRUE(ErrorWith(LoadAndRun(dq(2, 2, 5), {{"x", x}}).status(), {"'w'", "packed int4"}));
  ModelBuilder f8(21, 10);
  f8.Input("x", kF32, {2}).Output("y");
  f8.Node("DequantizeLinear", {"w", "s"}, {"y"});
  f8.Init("w", 17, {2})->set_raw_data(std::string("\x01\x02", 2));
  f8.InitFloats("s", {}, {1.0f});
  EXPECT_TRUE(ErrorWith(LoadAndRun(f8, {{"x", x}}).status(), {"'w'", "FLOAT8E4M3FN (17)"}));
  // An int4 input holding a byte outside -8..7; QuantizeLinear whose output_dtype disagrees with its zero
  // point, or names no quantized type.
  ModelBuilder b(21, 10);
  b.Input("q", kI4, {3}).Output("y");
  b.Node("DequantizeLinear", {"q", "s"}, {"y"});
  b.InitFloats("s", {}, {0.5f});
  Tensor q(DType::kI4, {3});
  q.data<int8_t>()[0] = -8;
  q.data<int8_t>()[1] = 7;
  q.data<int8_t>()[2] = 9;
  EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"q", q}}).status(), {"input 'q'", "element 2", "i4"}));
  q.data<int8_t>()[2] = -1;
  auto ok = LoadAndRun(b, {{"q", q}});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)[0].tensor.data<float>()[0], -4.0f);
  EXPECT_EQ((*ok)[0].tensor.data<float>()[2], -0.5f);
  for (int64_t code : {int64_t{3}, int64_t{1}}) {  // int8 vs the uint8 zero point; float32
    ModelBuilder m(21, 10);
    m.Input("x", kF32, {3}).Output("y");
    ModelBuilder::AttrInt(m.Node("QuantizeLinear", {"x", "s", "z"}, {"y"}), "output_dtype", code);
    m.InitFloats("s", {}, {0.5f});
    m.Init("z", onnx::TensorProto::UINT8, {})->add_int32_data(0);
    Tensor xf(DType::kF32, {3});
    for (int i = 0; i < 3; ++i) xf.data<float>()[i] = 1.0f;
    EXPECT_TRUE(ErrorWith(LoadAndRun(m, {{"x", xf}}).status(), {"QuantizeLinear", "output_dtype"})) << code;
  }
}

// Signal, detection and com.microsoft transformer ops (issue 42) given inputs outside their contracts: an
// error naming the operator and the fault, never a crash or a wrong answer. Each on both paths.
TEST(HostileTest, SignalDetectionAndContribOpsOutsideTheirContracts) {
  for (const char* jit : {"-1", "1"}) {
    SCOPED_TRACE(jit);
    {  // DFT axis on the complex dim; STFT frame longer than the signal; Mel filters beyond Nyquist.
      ModelBuilder b(17);
      b.Input("x", kF, {2, 8, 1}).Output("y");
      ModelBuilder::AttrInt(b.Node("DFT", {"x"}, {"y"}), "axis", 2);
      EXPECT_TRUE(ErrorWith(LoadAndRun(b, {{"x", F32({2, 8, 1}, std::vector<float>(16, 1.0f))}}, Opts(jit)).status(),
                            {"DFT", "axis 2"}));
      ModelBuilder st(17);
      st.Input("x", kF, {1, 8, 1}).Output("y");
      st.Node("STFT", {"x", "step", "", "len"}, {"y"});
      st.InitInts("step", {}, {2});
      st.InitInts("len", {}, {16});
      EXPECT_TRUE(ErrorWith(LoadAndRun(st, {{"x", F32({1, 8, 1}, std::vector<float>(8, 1.0f))}}, Opts(jit)).status(),
                            {"STFT", "shorter than one frame"}));
      ModelBuilder mel(17);
      mel.Output("y");
      mel.Node("MelWeightMatrix", {"m", "n", "r", "lo", "hi"}, {"y"});
      mel.InitInts("m", {}, {8});
      mel.InitInts("n", {}, {64});
      mel.InitInts("r", {}, {8000});
      mel.InitFloats("lo", {}, {0.0f});
      mel.InitFloats("hi", {}, {6000.0f});
      EXPECT_TRUE(ErrorWith(LoadAndRun(mel, {}, Opts(jit)).status(), {"MelWeightMatrix", "Nyquist"}));
    }
    {  // RoiAlign with a batch index outside [0, N).
      ModelBuilder b(16);
      b.Input("x", kF, {1, 1, 4, 4}).Input("rois", kF, {1, 4}).Input("bi", kI64, {1}).Output("y");
      b.Node("RoiAlign", {"x", "rois", "bi"}, {"y"});
      auto r = LoadAndRun(b, {{"x", F32({1, 1, 4, 4}, std::vector<float>(16, 1.0f))},
                              {"rois", F32({1, 4}, {0, 0, 2, 2})}, {"bi", I64({1}, {3})}},
                          Opts(jit));
      EXPECT_TRUE(ErrorWith(r.status(), {"RoiAlign", "batch_indices[0] = 3"}));
    }
    // Attention: no num_heads; a mask whose rank is not declared; a 1-D mask of 2 * batch (ONNX Runtime's
    // left-padding form) fails at run time instead of being read as lengths.
    auto attention = [](bool heads, bool mask_rank_known, int64_t mask_len) {
      ModelBuilder b(17);
      b.Domain("com.microsoft");
      b.Input("x", kF, {2, 3, 4}).Input("m", kI32, {mask_len}, mask_rank_known).Output("y");
      auto* n = b.Node("Attention", {"x", "w", "", "m"}, {"y"});
      n->set_domain("com.microsoft");
      if (heads) ModelBuilder::AttrInt(n, "num_heads", 2);
      b.InitFloats("w", {4, 12}, std::vector<float>(48, 0.1f));
      return b;
    };
    Tensor x = F32({2, 3, 4}, std::vector<float>(24, 0.5f));
    Tensor lengths(DType::kI32, {2}), four(DType::kI32, {4});
    for (int i = 0; i < 2; ++i) lengths.data<int32_t>()[i] = 3;
    for (int i = 0; i < 4; ++i) four.data<int32_t>()[i] = 3;
    EXPECT_TRUE(ErrorWith(LoadAndRun(attention(false, true, 2), {{"x", x}, {"m", lengths}}, Opts(jit)).status(),
                          {"com.microsoft.Attention", "num_heads"}));
    EXPECT_TRUE(ErrorWith(LoadAndRun(attention(true, false, 2), {{"x", x}, {"m", lengths}}, Opts(jit)).status(),
                          {"com.microsoft.Attention", "without a declared rank"}));
    EXPECT_TRUE(LoadAndRun(attention(true, true, 2), {{"x", x}, {"m", lengths}}, Opts(jit)).ok());
    EXPECT_FALSE(LoadAndRun(attention(true, true, 4), {{"x", x}, {"m", four}}, Opts(jit)).ok());
    // MultiHeadAttention with packed QKV (no key / value).
    ModelBuilder mha(17);
    mha.Domain("com.microsoft");
    mha.Input("q", kF, {1, 2, 4}).Output("y");
    auto* n = mha.Node("MultiHeadAttention", {"q"}, {"y"});
    n->set_domain("com.microsoft");
    ModelBuilder::AttrInt(n, "num_heads", 2);
    EXPECT_TRUE(ErrorWith(LoadAndRun(mha, {{"q", F32({1, 2, 4}, std::vector<float>(8, 1.0f))}}, Opts(jit)).status(),
                          {"MultiHeadAttention", "packed QKV"}));
  }
}

}  // namespace
}  // namespace cjit::hostile
