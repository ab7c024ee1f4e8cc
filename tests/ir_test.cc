#include "compiler/ir/text.h"
#include "compiler/ir/verifier.h"
#include "compiler/passes/specialize_shapes.h"
#include "gtest/gtest.h"
#include "runtime/cpu/kernel.h"

namespace cjit {
namespace {

constexpr char kGraph[] = R"(
graph g(%x: f32[1,N], %n: i64[]) {
  %w = constant f32[2] {0.5, 2}
  %s = constant i64[1] {-1}
  %y: f32[1,N] = Mul(%x, %w)
  %z = Reshape(%y, %s)
  %a, %b = Split(%z) {axis=0}
  return %a, %b
}
)";

TEST(IrTextTest, RoundTrip) {
  auto g = ParseGraph(kGraph);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(VerifyGraph(**g).ok());
  std::string text = PrintGraph(**g);
  auto g2 = ParseGraph(text);
  ASSERT_TRUE(g2.ok()) << g2.status() << "\n" << text;
  EXPECT_EQ(PrintGraph(**g2), text);
  EXPECT_NE(text.find("%y: f32[1,N] = Mul(%x, %w)"), std::string::npos) << text;
  EXPECT_NE(text.find("{axis=0}"), std::string::npos) << text;
}

TEST(IrTextTest, ParseErrorsNamePosition) {
  auto g = ParseGraph("graph g(%x: f32[2]) {\n  %y = Add(%x, %q)\n  return %y\n}");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("undefined value %q"), std::string::npos) << g.status();
  EXPECT_NE(g.status().message().find("2:"), std::string::npos) << g.status();
  auto h = ParseGraph("graph g(%x: f99[2]) { return %x }");
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("unknown dtype 'f99'"), std::string::npos);
}

TEST(VerifierTest, DetectsCycle) {
  Graph g;
  Value* x = g.AddInput("x", DType::kF32, Shape::Of({2}));
  Node* a = g.AddNode("Relu", "a", {x}, {"a_out"});
  Node* b = g.AddNode("Relu", "b", {a->outputs[0]}, {"b_out"});
  a->inputs[0] = b->outputs[0];
  g.AddOutput(b->outputs[0]);
  absl::Status st = VerifyGraph(g);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cycle"), std::string::npos) << st;
}

TEST(SpecializeShapesTest, FoldsShapeChainsAndInfersDims) {
  auto g = ParseGraph(R"(
graph g(%x: f32[1,3,W]) {
  %i = constant i64[1] {2}
  %zero = constant i64[1] {-1}
  %s = Shape(%x)
  %w = Gather(%s, %i) {axis=0}
  %t = Concat(%zero, %w) {axis=0}
  %y = Reshape(%x, %t)
  %r = Relu(%y)
  return %r
})");
  ASSERT_TRUE(g.ok()) << g.status();
  auto eval = [](const Node& n, const std::vector<const Tensor*>& in) { return EvaluateNode(n, in, 1); };
  ASSERT_TRUE(SpecializeShapes(**g, {{1, 3, 48}}, eval).ok());
  std::string text = PrintGraph(**g);
  // Shape, Gather and Concat fold away; the Reshape target becomes the constant {-1, 48}.
  EXPECT_EQ(text.find("Shape("), std::string::npos) << text;
  EXPECT_EQ(text.find("Gather("), std::string::npos) << text;
  EXPECT_NE(text.find("f32[3,48] = Relu"), std::string::npos) << text;
}

TEST(SpecializeShapesTest, IncompatibleShapesNameTheNode) {
  auto g = ParseGraph("graph g(%x: f32[2,3], %y: f32[4]) {\n  %z = Add(%x, %y)\n  return %z\n}");
  ASSERT_TRUE(g.ok());
  auto eval = [](const Node& n, const std::vector<const Tensor*>& in) { return EvaluateNode(n, in, 1); };
  absl::Status st = SpecializeShapes(**g, {{2, 3}, {4}}, eval);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("node 'z' (Add)"), std::string::npos) << st;
  EXPECT_NE(st.message().find("cannot broadcast"), std::string::npos) << st;
}

}  // namespace
}  // namespace cjit

// Large tensor buffers are recycled (compiler/ir/tensor.cc): a freed block serves a later request of at most
// its size and at least 3/4 of it, never a larger one, and its contents are the caller's to overwrite.
TEST(TensorBufferPoolTest, ReusesFreedLargeBlocksOfFittingSize) {
  const void* first;
  {
    cjit::Tensor t(cjit::DType::kF32, {3 << 20});  // 12 MiB
    first = t.raw();
    std::memset(t.raw(), 0x5a, t.nbytes());
  }
  {
    cjit::Tensor bigger(cjit::DType::kF32, {4 << 20});  // 16 MiB: the 12 MiB block is too small
    EXPECT_NE(bigger.raw(), first);
    cjit::Tensor fits(cjit::DType::kF32, {(3 << 20) - 1000});  // a little smaller: reuses it
    EXPECT_EQ(fits.raw(), first);
    float* p = fits.data<float>();
    p[fits.numel() - 1] = 1.0f;  // the whole requested range is writable
    EXPECT_EQ(p[fits.numel() - 1], 1.0f);
  }
  {
    cjit::Tensor small(cjit::DType::kF32, {1 << 20});  // 4 MiB: would waste two thirds of the block
    EXPECT_NE(small.raw(), first);
  }
}
