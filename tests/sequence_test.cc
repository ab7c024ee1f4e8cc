// Sequence and optional values through Session::Run, the textual IR and value files: results against values
// computed here from the inputs (plain index arithmetic, independent of the kernels), and every bad-input
// path (wrong kind, wrong dtype, out-of-range position, mismatched dims, an empty optional) an error naming
// what is at fault.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "compiler/ir/text.h"
#include "compiler/onnx/tensor_proto.h"
#include "runtime/session.h"
#include "tests/model_builder.h"
#include "tests/session_options.h"

namespace cjit {
namespace {

using testing::FallbackOptions;
using testing::ModelBuilder;
constexpr int kF32 = onnx::TensorProto::FLOAT;
constexpr int kI64 = onnx::TensorProto::INT64;

Tensor Floats(Dims dims, float start) {
  Tensor t(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + static_cast<float>(i);
  return t;
}

Tensor Int64(std::vector<int64_t> v, bool scalar = true) {
  Tensor t(DType::kI64, scalar ? Dims{} : Dims{static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

std::vector<float> Values(const Tensor& t) {
  std::vector<float> v(t.data<float>(), t.data<float>() + t.numel());
  return v;
}

std::unique_ptr<Session> Load(const ModelBuilder& b, const SessionOptions& o = FallbackOptions()) {
  auto s = Session::LoadFromBytes(b.Bytes(), o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

// seq -> SequenceInsert(seq, t, pos) -> SequenceAt(., at), SequenceLength(.), ConcatFromSequence(., axis 0),
// and the grown sequence itself.
ModelBuilder InsertAtConcatModel() {
  ModelBuilder b(17);
  b.SequenceInput("seq", kF32).Input("t", kF32, {-1, 3}).Input("pos", kI64, {}).Input("at", kI64, {});
  b.Node("SequenceInsert", {"seq", "t", "pos"}, {"grown"});
  b.Node("SequenceAt", {"grown", "at"}, {"item"});
  b.Node("SequenceLength", {"grown"}, {"len"});
  auto* c = b.Node("ConcatFromSequence", {"grown"}, {"cat"});
  ModelBuilder::AttrInt(c, "axis", 0);
  b.Output("item").Output("len").Output("cat").SequenceOutput("grown", kF32);
  return b;
}

TEST(SequenceTest, InsertAtLengthConcatThroughSessionRun) {
  for (const bool compiled : {false, true}) {
    SCOPED_TRACE(compiled ? "compiled" : "fallback");
    auto s = Load(InsertAtConcatModel(), compiled ? testing::OneClusterOptions() : FallbackOptions());
    ASSERT_NE(s, nullptr);
    ASSERT_EQ(s->inputs()[0].kind, ValueKind::kSequence);
    ASSERT_EQ(s->outputs()[3].kind, ValueKind::kSequence);
    Tensor a = Floats({1, 3}, 0), b = Floats({2, 3}, 10), t = Floats({1, 3}, 100);
    for (int run = 0; run < 3; ++run) {
      auto r =
          s->Run({{"seq", Tensor::Sequence(DType::kF32, {a, b})}, {"t", t}, {"pos", Int64({-1})}, {"at", Int64({1})}});
      ASSERT_TRUE(r.ok()) << r.status();
      // Inserted before the last: [a, t, b].
      EXPECT_EQ(Values((*r)[0].tensor), Values(t));
      EXPECT_EQ((*r)[1].tensor.ToInt64Vector(), std::vector<int64_t>{3});
      const Tensor& cat = (*r)[2].tensor;
      ASSERT_EQ(cat.dims(), (Dims{4, 3}));
      std::vector<float> want = Values(a);
      for (float v : Values(t)) want.push_back(v);
      for (float v : Values(b)) want.push_back(v);
      EXPECT_EQ(Values(cat), want);
      const Tensor& grown = (*r)[3].tensor;
      ASSERT_EQ(grown.kind(), ValueKind::kSequence);
      ASSERT_EQ(grown.items().size(), 3u);
      EXPECT_EQ(grown.items()[1].raw(), t.raw());  // shared, not copied
    }
  }
}

TEST(SequenceTest, PositionsOutOfRangeAndWrongKindsAreErrors) {
  auto s = Load(InsertAtConcatModel());
  ASSERT_NE(s, nullptr);
  Tensor a = Floats({1, 3}, 0), t = Floats({1, 3}, 100);
  auto run = [&](Tensor seq, Tensor tt, int64_t pos, int64_t at) {
    return s->Run({{"seq", std::move(seq)}, {"t", std::move(tt)}, {"pos", Int64({pos})}, {"at", Int64({at})}});
  };
  auto r = run(Tensor::Sequence(DType::kF32, {a}), t, 5, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("position 5 is out of range for a sequence of 1 tensors"), std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("SequenceInsert"), std::string::npos) << r.status();
  r = run(Tensor::Sequence(DType::kF32, {a}), t, 0, -3);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("position -3 is out of range"), std::string::npos) << r.status();
  // A tensor where the model declares a sequence, and the reverse.
  r = run(a, t, 0, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("input 'seq' is a tensor, the model expects a sequence"), std::string::npos)
      << r.status();
  r = run(Tensor::Sequence(DType::kF32, {a}), Tensor::Sequence(DType::kF32, {}), 0, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("input 't' is a sequence, the model expects a tensor"), std::string::npos)
      << r.status();
  // Elements of another dtype, or of another rank than declared.
  r = run(Tensor::Sequence(DType::kI64, {Int64({1, 2, 3}, false)}), t, 0, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("has dtype i64, the model expects f32"), std::string::npos) << r.status();
  // Concatenation of pieces whose other dims differ.
  r = run(Tensor::Sequence(DType::kF32, {Floats({1, 4}, 0)}), t, 0, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("dims may differ on axis 0 only"), std::string::npos) << r.status();
  // A sequence of mixed dtypes cannot even be made.
  EXPECT_THROW(Tensor::Sequence(DType::kF32, {a, Int64({1})}), TensorError);
}

TEST(SequenceTest, SplitToSequenceEveryForm) {
  struct Case {
    std::vector<int64_t> split;  // empty: no split input; one value with scalar=true: a scalar split
    bool scalar;
    int64_t keepdims;
    std::vector<Dims> want;
  };
  const Tensor x = Floats({2, 5}, 0);
  for (const Case& c : std::vector<Case>{{{}, false, 1, {{2, 1}, {2, 1}, {2, 1}, {2, 1}, {2, 1}}},
                                         {{}, false, 0, {{2}, {2}, {2}, {2}, {2}}},
                                         {{2}, true, 0, {{2, 2}, {2, 2}, {2, 1}}},
                                         {{1, 0, 4}, false, 1, {{2, 1}, {2, 0}, {2, 4}}}}) {
    ModelBuilder b(17);
    b.Input("x", kF32, {2, 5});
    std::vector<std::string> ins = {"x"};
    if (!c.split.empty()) {
      b.InitInts("split",
                 c.scalar ? std::vector<int64_t>{} : std::vector<int64_t>{static_cast<int64_t>(c.split.size())},
                 c.split);
      ins.push_back("split");
    }
    auto* n = b.Node("SplitToSequence", ins, {"parts"});
    ModelBuilder::AttrInt(n, "axis", 1);
    ModelBuilder::AttrInt(n, "keepdims", c.keepdims);
    b.SequenceOutput("parts", kF32);
    auto s = Load(b);
    ASSERT_NE(s, nullptr);
    auto r = s->Run({{"x", x}});
    ASSERT_TRUE(r.ok()) << r.status();
    const Tensor& parts = (*r)[0].tensor;
    ASSERT_EQ(parts.items().size(), c.want.size());
    int64_t col = 0;
    for (size_t k = 0; k < c.want.size(); ++k) {
      const Tensor& p = parts.items()[k];
      ASSERT_EQ(p.dims(), c.want[k]) << "piece " << k;
      const int64_t width = p.numel() / 2;
      for (int64_t row = 0; row < 2; ++row) {
        for (int64_t j = 0; j < width; ++j) {
          EXPECT_EQ(p.data<float>()[row * width + j], x.data<float>()[row * 5 + col + j]) << "piece " << k;
        }
      }
      col += width;
    }
    EXPECT_EQ(col, 5);
  }
  // Split sizes that do not add up to the axis: an error naming both.
  ModelBuilder b(17);
  b.Input("x", kF32, {2, 5});
  b.InitInts("split", {2}, {2, 2});
  ModelBuilder::AttrInt(b.Node("SplitToSequence", {"x", "split"}, {"parts"}), "axis", 1);
  b.SequenceOutput("parts", kF32);
  auto s = Load(b);
  ASSERT_NE(s, nullptr);
  auto r = s->Run({{"x", x}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("split sizes add up to 4; the axis has 5"), std::string::npos) << r.status();
}

TEST(SequenceTest, OptionalsPresentEmptyAndGivenTheirElement) {
  ModelBuilder b(18);
  b.OptionalInput("opt", kF32, false);
  b.Node("OptionalHasElement", {"opt"}, {"has"});
  b.Output("has");
  auto s = Load(b);
  ASSERT_NE(s, nullptr);
  const Tensor x = Floats({2}, 1);
  for (const auto& [value, want] : std::vector<std::pair<Tensor, bool>>{
           {Tensor::Optional(x), true}, {Tensor::OptionalNone(ValueKind::kOptionalTensor, DType::kF32), false},
           {x, true}}) {  // a tensor given for an optional input is the present optional
    auto r = s->Run({{"opt", value}});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)[0].tensor.ToInt64Vector(), std::vector<int64_t>{want ? 1 : 0});
  }
  auto r = s->Run({{"opt", Tensor::Sequence(DType::kF32, {x})}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("input 'opt' is a sequence, the model expects a optional(tensor)"),
            std::string::npos) << r.status();

  ModelBuilder g(18);
  g.OptionalInput("opt", kF32, true);
  g.Node("OptionalGetElement", {"opt"}, {"seq"});
  g.Node("SequenceLength", {"seq"}, {"len"});
  g.Output("len");
  s = Load(g);
  ASSERT_NE(s, nullptr);
  r = s->Run({{"opt", Tensor::Optional(Tensor::Sequence(DType::kF32, {x, x}))}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].tensor.ToInt64Vector(), std::vector<int64_t>{2});
  r = s->Run({{"opt", Tensor::OptionalNone(ValueKind::kOptionalSequence, DType::kF32)}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("the optional input holds no element"), std::string::npos) << r.status();
}

TEST(SequenceTest, ASequenceFedToATensorOpIsAClearError) {
  ModelBuilder b(17);
  b.SequenceInput("seq", kF32).Input("y", kF32, {2});
  b.Node("Add", {"seq", "y"}, {"z"});
  b.Output("z");
  auto s = Load(b);
  ASSERT_NE(s, nullptr);
  auto r = s->Run({{"seq", Tensor::Sequence(DType::kF32, {})}, {"y", Floats({2}, 0)}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("input 0 is a sequence; Add takes tensors"), std::string::npos) << r.status();
}

// A list built in a loop and stacked (what torch.onnx exports for `torch.stack([f(x[i]) for i in ...])`):
// Loop carries a sequence, SequenceInsert appends Relu(x[i]) * i, ConcatFromSequence(new_axis=1) stacks.
ModelBuilder LoopStackModel() {
  ModelBuilder b(17);
  b.Input("x", kF32, {-1, 3}).Input("n", kI64, {});
  b.InitInts("zero", {}, {0});
  b.Node("SequenceEmpty", {}, {"empty"});
  auto* loop = b.Node("Loop", {"n", "", "empty"}, {"list"});
  auto* body_attr = loop->add_attribute();
  body_attr->set_name("body");
  body_attr->set_type(onnx::AttributeProto::GRAPH);
  onnx::GraphProto* body = body_attr->mutable_g();
  body->set_name("body");
  ModelBuilder::Info(body->add_input(), "i", kI64, {});
  ModelBuilder::Info(body->add_input(), "cond_in", onnx::TensorProto::BOOL, {});
  ModelBuilder::TypedInfo(body->add_input(), "acc", kF32, true, false);
  auto add = [&](const std::string& op, std::vector<std::string> in, const std::string& out) {
    auto* n = body->add_node();
    n->set_op_type(op);
    n->set_name(out);
    for (auto& i : in) n->add_input(i);
    n->add_output(out);
    return n;
  };
  add("Identity", {"cond_in"}, "cond_out");
  ModelBuilder::AttrInt(add("Gather", {"x", "i"}, "row"), "axis", 0);
  add("Relu", {"row"}, "relu");
  auto* cast = add("Cast", {"i"}, "fi");
  ModelBuilder::AttrInt(cast, "to", kF32);
  add("Mul", {"relu", "fi"}, "scaled");
  add("SequenceInsert", {"acc", "scaled"}, "acc_out");
  ModelBuilder::Info(body->add_output(), "cond_out", onnx::TensorProto::BOOL, {});
  ModelBuilder::TypedInfo(body->add_output(), "acc_out", kF32, true, false);
  auto* stack = b.Node("ConcatFromSequence", {"list"}, {"stacked"});
  ModelBuilder::AttrInt(stack, "axis", 0);
  ModelBuilder::AttrInt(stack, "new_axis", 1);
  b.Node("Neg", {"stacked"}, {"negated"});  // tensor ops after the sequence: a cluster when compiled
  b.Node("Neg", {"negated"}, {"y"});
  b.Output("y");
  return b;
}

TEST(SequenceTest, LoopBuildsASequenceThenStacks) {
  const ModelBuilder b = LoopStackModel();
  for (const bool compiled : {false, true}) {
    SCOPED_TRACE(compiled ? "compiled" : "fallback");
    auto s = Load(b, compiled ? testing::OneClusterOptions() : FallbackOptions());
    ASSERT_NE(s, nullptr);
    Tensor x = Floats({4, 3}, -5);
    for (int64_t n : {int64_t{4}, int64_t{2}, int64_t{4}}) {
      auto r = s->Run({{"x", x}, {"n", Int64({n})}});
      ASSERT_TRUE(r.ok()) << r.status();
      const Tensor& y = (*r)[0].tensor;
      ASSERT_EQ(y.dims(), (Dims{n, 3}));
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < 3; ++j) {
          const float v = x.data<float>()[i * 3 + j];
          EXPECT_EQ(y.data<float>()[i * 3 + j], (v > 0 ? v : 0) * static_cast<float>(i));
        }
      }
    }
  }
}

// A sequence appended to and then read again (SequenceLength of the old one after SequenceInsert): the old
// value must keep its length — the in-place append applies only when no later node reads the input.
TEST(SequenceTest, AnAppendDoesNotChangeAValueReadLater) {
  ModelBuilder b(17);
  b.Input("x", kF32, {2});
  b.Node("SequenceConstruct", {"x", "x"}, {"two"});
  b.Node("SequenceInsert", {"two", "x"}, {"three"});
  b.Node("SequenceLength", {"three"}, {"n3"});
  b.Node("SequenceLength", {"two"}, {"n2"});  // reads `two` after the insert
  b.Node("SequenceInsert", {"three", "x"}, {"four"});  // `three` dies here: may grow in place
  b.Node("SequenceLength", {"four"}, {"n4"});
  b.Output("n2").Output("n3").Output("n4");
  auto s = Load(b);
  ASSERT_NE(s, nullptr);
  for (int run = 0; run < 2; ++run) {
    auto r = s->Run({{"x", Floats({2}, 0)}});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)[0].tensor.ToInt64Vector(), std::vector<int64_t>{2});
    EXPECT_EQ((*r)[1].tensor.ToInt64Vector(), std::vector<int64_t>{3});
    EXPECT_EQ((*r)[2].tensor.ToInt64Vector(), std::vector<int64_t>{4});
  }
  // A caller's sequence is never grown in place: its length is unchanged by a run that appends to it.
  ModelBuilder g(17);
  g.SequenceInput("seq", kF32).Input("x", kF32, {2});
  g.Node("SequenceInsert", {"seq", "x"}, {"grown"});
  g.SequenceOutput("grown", kF32);
  s = Load(g);
  ASSERT_NE(s, nullptr);
  const Tensor seq = Tensor::Sequence(DType::kF32, {Floats({2}, 0)});
  auto r = s->Run({{"seq", seq}, {"x", Floats({2}, 5)}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].tensor.items().size(), 2u);
  EXPECT_EQ(seq.items().size(), 1u);
}

// A loop growing a sequence without bound stops at --max_tensor_bytes with an error naming the node.
TEST(SequenceTest, ASequenceGrownInALoopIsBoundedLikeATensor) {
  SessionOptions o = FallbackOptions();
  o.flags.max_tensor_bytes = 16 << 10;
  auto s = Load(LoopStackModel(), o);
  ASSERT_NE(s, nullptr);
  auto r = s->Run({{"x", Floats({2000, 3}, 0)}, {"n", Int64({2000})}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("more than --max_tensor_bytes"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("SequenceInsert"), std::string::npos) << r.status();
}

TEST(SequenceTest, TextualIrRoundTripsSequenceAndOptionalTypes) {
  const std::string ir =
      "graph g(%s: seq(f32[*]), %o: opt(seq(i64[2])), %p: opt(f32[3])) {\n"
      "  %n: i64[] = SequenceLength(%s)\n"
      "  return %n\n"
      "}\n";
  auto g = ParseGraph(ir);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->inputs()[0]->kind, ValueKind::kSequence);
  EXPECT_EQ((*g)->inputs()[1]->kind, ValueKind::kOptionalSequence);
  EXPECT_EQ((*g)->inputs()[1]->dtype, DType::kI64);
  EXPECT_EQ((*g)->inputs()[2]->kind, ValueKind::kOptionalTensor);
  const std::string printed = PrintGraph(**g);
  EXPECT_NE(printed.find("%o: opt(seq(i64[2]))"), std::string::npos) << printed;
  auto again = ParseGraph(printed);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(PrintGraph(**again), printed);
  EXPECT_FALSE(ParseGraph("graph g(%s: seq(opt(f32[*]))) {\n  return %s\n}\n").ok());
}

TEST(SequenceTest, ValueFilesRoundTripAndRejectTheWrongMessage) {
  const std::string dir = ::testing::TempDir();
  const Tensor a = Floats({2, 2}, 1), b = Floats({3}, 7);
  const std::vector<Tensor> values = {Tensor::Sequence(DType::kF32, {a, b}), Tensor::Sequence(DType::kI64, {}),
                                      Tensor::Optional(a), Tensor::Optional(Tensor::Sequence(DType::kF32, {b})),
                                      Tensor::OptionalNone(ValueKind::kOptionalSequence, DType::kI64)};
  for (size_t k = 0; k < values.size(); ++k) {
    const std::string path = dir + "/value_" + std::to_string(k) + ".pb";
    ASSERT_TRUE(WriteValueProtoFile(path, "v", values[k]).ok());
    auto back = ReadValueProtoFile(path, values[k].kind(), values[k].dtype());
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->name, "v");
    EXPECT_TRUE(back->tensor.BitwiseEquals(values[k]))
        << values[k].Describe() << " read back as " << back->tensor.Describe();
  }
  // An optional file read as a sequence of tensors holds no valid sequence; a garbage file parses as nothing.
  const std::string bad = dir + "/garbage.pb";
  {
    std::FILE* f = std::fopen(bad.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fputs("\xff\xff\xff\xff not a protobuf", f);
    std::fclose(f);
  }
  // A TensorProto file where a sequence or optional is declared: its fields are not theirs.
  const std::string tensor_file = dir + "/tensor.pb";
  ASSERT_TRUE(WriteTensorProtoFile(tensor_file, "t", a).ok());
  for (const std::string& path : {bad, tensor_file}) {
    for (ValueKind kind : {ValueKind::kSequence, ValueKind::kOptionalTensor}) {
      auto r = ReadValueProtoFile(path, kind);
      ASSERT_FALSE(r.ok()) << path << " read as " << ValueKindName(kind);
      EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status();
    }
  }
}

}  // namespace
}  // namespace cjit
