// Specialization replay (compiler/passes/specialization_replay.h, --specialization_replay): a new input
// signature of a structure specialized before reuses that specialized graph. Checked against independent
// results: numpy-style expectations computed here, the full pass pipeline (verify mode and sessions with
// replay off), and the guards' misses on graphs built to break a naive replay.
#include <cmath>
#include <limits>

#include "compiler/ir/graph.h"
#include "compiler/passes/specialization_replay.h"
#include "gtest/gtest.h"
#include "runtime/session.h"
#include "tests/model_builder.h"
#include "tests/random_floats.h"
#include "tests/session_options.h"
#include "tests/test_data.h"

namespace cjit {
namespace {

using testing::RandomTensor;

SessionOptions Opts(const std::string& replay = "true") {
  SessionOptions o = testing::OneClusterOptions();
  o.flags.specialization_replay = replay;
  o.flags.dynamic_shape_plans = false;  // every new signature specializes (replays): what these tests check
  return o;
}


// y = Relu(Transpose(Reshape(x, Concat(Gather(Shape(x), [1]), [-1])))) with x: f32[1, N, 4]: the Reshape
// target {N, -1} is folded from x's dims, so a replay must re-derive it. y: [4, N].
std::string ShapeDerivedReshape() {
  testing::ModelBuilder b(13);
  b.Input("x", onnx::TensorProto::FLOAT, {1, -1, 4}).Output("y");
  b.InitInts("one", {1}, {1});
  b.InitInts("minus_one", {1}, {-1});
  b.Node("Shape", {"x"}, {"s"});
  b.Node("Gather", {"s", "one"}, {"n"});
  testing::ModelBuilder::AttrInt(b.Node("Concat", {"n", "minus_one"}, {"t"}), "axis", 0);
  b.Node("Reshape", {"x", "t"}, {"r"});
  testing::ModelBuilder::AttrInts(b.Node("Transpose", {"r"}, {"p"}), "perm", {1, 0});
  b.Node("Relu", {"p"}, {"y"});
  return b.Bytes();
}

TEST(ReplayTest, ShapeDerivedReshapeTargetIsRederived) {
  for (const std::string mode : {"true", "verify"}) {
    auto s = Session::LoadFromBytes(ShapeDerivedReshape(), Opts(mode));
    ASSERT_TRUE(s.ok()) << s.status();
    int k = 0;
    for (int64_t n : {3, 5, 7, 12}) {
      Tensor x = RandomTensor({1, n, 4}, static_cast<uint32_t>(n));
      auto out = (*s)->Run({{"x", x}});
      ASSERT_TRUE(out.ok()) << mode << " N=" << n << ": " << out.status();
      const Tensor& y = (*out)[0].tensor;
      ASSERT_EQ(y.dims(), (Dims{4, n})) << mode;
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < 4; ++j) {
          EXPECT_EQ(y.data<float>()[j * n + i], std::max(0.0f, x.data<float>()[i * 4 + j])) << "N=" << n;
        }
      }
      SessionStats st = (*s)->stats();
      EXPECT_EQ(st.specializations, 1) << mode;
      EXPECT_EQ(st.specialization_replays, k++) << mode << " N=" << n;
    }
  }
}

// y = Reshape(x, [6, -1]) * 2: at x [6, 4] the Reshape is an identity and the simplifier removes it;
// at [3, 8] (same structure key) it is not, and the replay's guard must send the signature through the
// full pipeline (a naive replay would return [3, 8]). The mirror case: a template that kept the Reshape
// must not be replayed where it becomes an identity ([6, 5]), or the replayed graph differs from the full
// one (verify mode fails the run: a fuzz finding, fuzz/regressions/ReplayVerify_sce_expanded_2f6ffe3f).
TEST(ReplayTest, IdentityReshapeRemovedAtOneShapeIsGuarded) {
  testing::ModelBuilder b(13);
  b.Input("x", onnx::TensorProto::FLOAT, {-1, -1}).Output("y");
  b.InitInts("target", {2}, {6, -1});
  b.InitFloats("two", {}, {2.0f});
  b.Node("Reshape", {"x", "target"}, {"r"});
  b.Node("Mul", {"r", "two"}, {"y"});
  for (const std::string mode : {"true", "verify"}) {
    auto s = Session::LoadFromBytes(b.Bytes(), Opts(mode));
    ASSERT_TRUE(s.ok()) << s.status();
    struct Step {
      Dims x;
      int64_t replays_after;
    };
    // [6,4]: full (identity removed, guarded). [3,8]: guard fails -> full (Reshape kept). [4,9]: replay.
    // [6,5]: the kept Reshape is an identity now -> full (removed, guarded). [2,15]: guard fails -> full.
    // [12,3]: replay of [2,15]'s specialization.
    for (const Step& step : {Step{{6, 4}, 0}, Step{{3, 8}, 0}, Step{{4, 9}, 1}, Step{{6, 5}, 1}, Step{{2, 15}, 1},
                             Step{{12, 3}, 2}}) {
      Tensor x = RandomTensor(step.x, 7);
      auto out = (*s)->Run({{"x", x}});
      ASSERT_TRUE(out.ok()) << mode << " " << DimsToString(step.x) << ": " << out.status();
      const Tensor& y = (*out)[0].tensor;
      ASSERT_EQ(y.dims(), (Dims{6, x.numel() / 6})) << DimsToString(step.x);
      for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(y.data<float>()[i], 2.0f * x.data<float>()[i]);
      EXPECT_EQ((*s)->stats().specialization_replays, step.replays_after) << mode << " " << DimsToString(step.x);
    }
  }
}

// A value whose dims a folded Shape reads, replaced by the channels-last layout pass: a = c1 + c2 between
// convolutions runs channels-last (%a becomes %a/channels_last#k and the NCHW %a disappears, as a UNet's
// attention block's residual did), and z = Reshape(Flatten(y), Shape(a)) reads its dims. The replay takes
// them from the twin, permuted back: one full specialization for four image sizes, the replayed graphs
// equal to the full pipeline's (verify mode), z exact and y equal to a session without replay. (A reader
// of the folded shape that comes before the twin in the specialized graph's order is a replay miss: the
// full pipeline runs.)
TEST(ReplayTest, ShapeOfAValueMovedToChannelsLastIsReplayed) {
  testing::ModelBuilder b(13);
  b.Input("x", onnx::TensorProto::FLOAT, {1, 16, -1, -1}).Output("y").Output("z");
  unsigned seed = 5;
  for (const char* w : {"w1", "w2", "w3"}) {
    b.InitFloats(w, {16, 16, 3, 3}, testing::RandomFloats(16 * 16 * 9, seed++));
  }
  auto conv = [&](const std::string& in, const std::string& w, const std::string& out) {
    testing::ModelBuilder::AttrInts(b.Node("Conv", {in, w}, {out}), "pads", {1, 1, 1, 1});
  };
  conv("x", "w1", "c1");
  b.Node("Relu", {"c1"}, {"r1"});
  conv("r1", "w2", "c2");
  b.Node("Add", {"c1", "c2"}, {"a"});
  b.Node("Relu", {"a"}, {"r2"});
  conv("r2", "w3", "y");
  b.Node("Shape", {"a"}, {"s"});
  b.Node("Flatten", {"y"}, {"f"});
  b.Node("Reshape", {"f", "s"}, {"z"});
  auto plain = Session::LoadFromBytes(b.Bytes(), Opts("false"));
  ASSERT_TRUE(plain.ok()) << plain.status();
  for (const std::string mode : {"true", "verify"}) {
    auto s = Session::LoadFromBytes(b.Bytes(), Opts(mode));
    ASSERT_TRUE(s.ok()) << s.status();
    for (const Dims& d : {Dims{1, 16, 6, 7}, Dims{1, 16, 9, 5}, Dims{1, 16, 12, 12}, Dims{1, 16, 4, 10}}) {
      Tensor x = RandomTensor(d, static_cast<uint32_t>(d[2] * 100 + d[3]));
      auto out = (*s)->Run({{"x", x}});
      auto want = (*plain)->Run({{"x", x}});
      ASSERT_TRUE(out.ok() && want.ok()) << mode << " " << DimsToString(d) << ": " << out.status() << want.status();
      const Tensor& y = (*out)[0].tensor;
      ASSERT_EQ(y.dims(), d) << mode;
      const Tensor& z = (*out)[1].tensor;
      ASSERT_EQ(z.dims(), d) << mode;
      for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(z.data<float>()[i], y.data<float>()[i]) << mode;
      for (int64_t i = 0; i < y.numel(); ++i) {
        ASSERT_NEAR(y.data<float>()[i], (*want)[0].tensor.data<float>()[i], 1e-4) << mode << " at " << i;
      }
    }
    SessionStats st = (*s)->stats();
    EXPECT_EQ(st.specializations, 1) << mode;
    EXPECT_EQ(st.specialization_replays, 3) << mode;
  }
}

// y = If(Shape(x)[1] > 5, x * 2, x * 3): the branch is chosen from x's dims, so the structure is never
// replayed (each width inlines its own branch).
TEST(ReplayTest, IfOnAShapeDerivedConditionIsNotReplayed) {
  testing::ModelBuilder mb(13);
  mb.Input("x", onnx::TensorProto::FLOAT, {1, -1}).Output("y");
  mb.InitInts("one", {}, {1});
  mb.InitInts("five", {}, {5});
  mb.Node("Shape", {"x"}, {"s"});
  mb.Node("Gather", {"s", "one"}, {"n"});
  mb.Node("Greater", {"n", "five"}, {"c"});
  auto* iff = mb.Node("If", {"c"}, {"y"});
  testing::ModelBuilder::ScalarOpBranch(iff->add_attribute(), "then_branch", "Mul", 2.0f, {1, -1});
  testing::ModelBuilder::ScalarOpBranch(iff->add_attribute(), "else_branch", "Mul", 3.0f, {1, -1});
  auto s = Session::LoadFromBytes(mb.Bytes(), Opts());
  ASSERT_TRUE(s.ok()) << s.status();
  for (int64_t n : {4, 8, 3, 9}) {
    Tensor x = RandomTensor({1, n}, 3);
    auto out = (*s)->Run({{"x", x}});
    ASSERT_TRUE(out.ok()) << n << ": " << out.status();
    const float f = n > 5 ? 2.0f : 3.0f;
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ((*out)[0].tensor.data<float>()[i], f * x.data<float>()[i]) << "N=" << n;
  }
  EXPECT_EQ((*s)->stats().specialization_replays, 0);
  EXPECT_EQ((*s)->stats().specializations, 4);
}

// The verify mode's comparison sees a changed constant, a changed shape and a changed op.
TEST(ReplayTest, GraphDifferenceFindsConstantsShapesAndOps) {
  auto make = [](float c, int64_t n, const char* op) {
    auto g = std::make_unique<Graph>();
    Value* x = g->AddInput("x", DType::kF32, Shape::Of({n}));
    Tensor t(DType::kF32, {1});
    t.data<float>()[0] = c;
    Value* k = g->AddConstant("k", t);
    Node* m = g->AddNode(op, "m", {x, k}, {"y"});
    m->outputs[0]->dtype = DType::kF32;
    m->outputs[0]->shape = Shape::Of({n});
    g->AddOutput(m->outputs[0]);
    return g;
  };
  EXPECT_EQ(DescribeGraphDifference(*make(1, 4, "Mul"), *make(1, 4, "Mul")), "");
  EXPECT_NE(DescribeGraphDifference(*make(1, 4, "Mul"), *make(2, 4, "Mul")).find("constant %k"), std::string::npos);
  EXPECT_NE(DescribeGraphDifference(*make(1, 4, "Mul"), *make(1, 5, "Mul")).find("shape"), std::string::npos);
  EXPECT_NE(DescribeGraphDifference(*make(1, 4, "Mul"), *make(1, 4, "Add")), "");
}

// Float attributes compare by bit pattern: a NaN alpha is not a difference (the fuzzer found verify mode
// failing a HardSigmoid with alpha = NaN), a changed alpha is.
TEST(ReplayTest, GraphDifferenceComparesFloatAttributesByBits) {
  auto make = [](float alpha) {
    auto g = std::make_unique<Graph>();
    Value* x = g->AddInput("x", DType::kF32, Shape::Of({3}));
    Node* h = g->AddNode("HardSigmoid", "h", {x}, {"y"});
    Attribute a;
    a.kind = Attribute::Kind::kFloat;
    a.f = alpha;
    h->attrs["alpha"] = a;
    h->outputs[0]->dtype = DType::kF32;
    h->outputs[0]->shape = Shape::Of({3});
    g->AddOutput(h->outputs[0]);
    return g;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(DescribeGraphDifference(*make(nan), *make(nan)), "");
  EXPECT_NE(DescribeGraphDifference(*make(nan), *make(0.5f)).find("attribute alpha"), std::string::npos);
  EXPECT_NE(DescribeGraphDifference(*make(0.2f), *make(0.5f)).find("attribute alpha"), std::string::npos);
}

// Every shared model with a dynamic dim, over several shapes, in verify mode (each replayed graph must
// equal the full pipeline's) and against a session without replay.
struct ModelShapes {
  const char* model;
  std::vector<Dims> shapes;  // of the model's first input; other inputs keep their declared dims
};

TEST(ReplayTest, SharedModelsReplayTheFullSpecialization) {
  const std::vector<ModelShapes> cases = {
      {"ppocrv4_rec", {{1, 3, 48, 96}, {1, 3, 48, 160}, {1, 3, 48, 320}, {1, 3, 48, 1104}}},
      {"ppocr_mobile_cls", {{1, 3, 48, 64}, {1, 3, 48, 100}, {1, 3, 48, 192}, {1, 3, 48, 56}}},
      {"oww_melspectrogram", {{1, 1280}, {1, 4000}, {1, 16000}, {1, 2400}}},
  };
  for (const ModelShapes& c : cases) {
    std::string path = testing::ModelsDir() + "/" + c.model + "/model.onnx";
    CJIT_REQUIRE_DATA(path);
    auto verify = Session::Load(path, Opts("verify"));
    auto plain = Session::Load(path, Opts("false"));
    ASSERT_TRUE(verify.ok() && plain.ok()) << c.model;
    uint32_t seed = 1;
    for (const Dims& d : c.shapes) {
      std::vector<NamedTensor> in{{(*verify)->inputs()[0].name, RandomTensor(d, seed++)}};
      auto a = (*verify)->Run(in);
      ASSERT_TRUE(a.ok()) << c.model << " " << DimsToString(d) << ": " << a.status();
      auto b = (*plain)->Run(in);
      ASSERT_TRUE(b.ok()) << c.model << " " << DimsToString(d) << ": " << b.status();
      for (size_t k = 0; k < a->size(); ++k) {
        const Tensor& x = (*a)[k].tensor;
        const Tensor& y = (*b)[k].tensor;
        ASSERT_EQ(x.dims(), y.dims()) << c.model;
        for (int64_t i = 0; i < x.numel(); ++i) {
          float p = x.data<float>()[i], q = y.data<float>()[i];
          ASSERT_LE(std::fabs(p - q), 1e-4f + 1e-3f * std::fabs(q)) << c.model << " " << DimsToString(d) << " @" << i;
        }
      }
    }
    SessionStats st = (*verify)->stats();
    EXPECT_EQ(st.specializations, 1) << c.model;
    EXPECT_EQ(st.specialization_replays, static_cast<int64_t>(c.shapes.size()) - 1) << c.model;
  }
}

}  // namespace
}  // namespace cjit
