// Dynamic-shape plans (--dynamic_shape_plans, runtime/session.h) and the Transpose-into-MatMul rewrite
// (compiler/passes/simplify.h FuseTransposeIntoMatMul). Results are checked against independent ones: the
// fallback path of a session that specializes every signature (op by op, no clusters, no dynamic plans)
// and float64 math computed here.
#include <cmath>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/session.h"
#include "tests/model_builder.h"
#include "tests/random_floats.h"
#include "tests/session_options.h"

namespace cjit {
namespace {

SessionOptions Opts(bool dynamic = true) {
  SessionOptions o = testing::OneClusterOptions();
  o.flags.enable_lazy_compilation = false;  // the first signature compiles at its first run
  o.flags.dynamic_shape_plans = dynamic;
  return o;
}

// The reference: every signature specialized on its own, run op by op (no clusters, no replay).
SessionOptions ReferenceOpts() {
  SessionOptions o = Opts(false);
  o.flags.auto_jit = "-1";
  o.flags.specialization_replay = "false";
  return o;
}

using testing::RandomFloats;
using testing::RandomTensor;

double MaxAbsDiff(const Tensor& a, const Tensor& b) {
  if (a.dims() != b.dims()) return INFINITY;
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(double(a.data<float>()[i]) - b.data<float>()[i]));
  return m;
}

// One attention decode step with a key/value cache, as exported decoders have it: x [1, 1, 16], past_k /
// past_v [1, 2, P, 8] -> y [1, 1, 16] and the presents [1, 2, P + 1, 8] (Concat), Q x K^T through a
// Transpose, Softmax, a Relu residual: fused kernels, library steps and a new signature per step.
std::string DecoderStep() {
  constexpr int D = 16, H = 2, HD = 8;
  testing::ModelBuilder b(17);
  b.Input("x", onnx::TensorProto::FLOAT, {1, 1, D})
      .Input("past_k", onnx::TensorProto::FLOAT, {1, H, -1, HD})
      .Input("past_v", onnx::TensorProto::FLOAT, {1, H, -1, HD})
      .Output("y")
      .Output("k")
      .Output("v");
  uint32_t seed = 1;
  for (const char* w : {"wq", "wk", "wv", "wo"}) b.InitFloats(w, {D, D}, RandomFloats(D * D, seed++));
  b.InitInts("heads", {4}, {0, 0, H, HD});
  b.InitInts("merge", {3}, {0, 0, D});
  b.InitFloats("scale", {}, {0.35f});
  for (const char* p : {"q", "kn", "vn"}) {
    const std::string w = std::string(p) == "q" ? "wq" : std::string(p) == "kn" ? "wk" : "wv";
    b.Node("MatMul", {"x", w}, {std::string(p) + "_p"});
    b.Node("Reshape", {std::string(p) + "_p", "heads"}, {std::string(p) + "_r"});
    testing::ModelBuilder::AttrInts(b.Node("Transpose", {std::string(p) + "_r"}, {std::string(p) + "_h"}), "perm",
                                    {0, 2, 1, 3});
  }
  testing::ModelBuilder::AttrInt(b.Node("Concat", {"past_k", "kn_h"}, {"k"}), "axis", 2);
  testing::ModelBuilder::AttrInt(b.Node("Concat", {"past_v", "vn_h"}, {"v"}), "axis", 2);
  testing::ModelBuilder::AttrInts(b.Node("Transpose", {"k"}, {"kt"}), "perm", {0, 1, 3, 2});
  b.Node("MatMul", {"q_h", "kt"}, {"s"});
  b.Node("Mul", {"s", "scale"}, {"ss"});
  testing::ModelBuilder::AttrInt(b.Node("Softmax", {"ss"}, {"a"}), "axis", -1);
  b.Node("MatMul", {"a", "v"}, {"o"});
  testing::ModelBuilder::AttrInts(b.Node("Transpose", {"o"}, {"ot"}), "perm", {0, 2, 1, 3});
  b.Node("Reshape", {"ot", "merge"}, {"om"});
  b.Node("MatMul", {"om", "wo"}, {"op"});
  b.Node("Relu", {"op"}, {"or"});
  b.Node("Add", {"x", "or"}, {"y"});
  return b.Bytes();
}

std::vector<NamedTensor> DecoderInputs(int64_t past, uint32_t seed) {
  return {{"x", RandomTensor({1, 1, 16}, seed)}, {"past_k", RandomTensor({1, 2, past, 8}, seed + 1)},
          {"past_v", RandomTensor({1, 2, past, 8}, seed + 2)}};
}

void ExpectNear(const std::vector<NamedTensor>& got, const std::vector<NamedTensor>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(MaxAbsDiff(got[i].tensor, want[i].tensor), 1e-5) << what << " output " << got[i].name;
  }
}

// `in` through the session under test and through the reference; both run, and every output matches.
void RunBoth(Session& s, Session& ref, const std::vector<NamedTensor>& in, const std::string& what) {
  auto got = s.Run(in);
  auto want = ref.Run(in);
  ASSERT_TRUE(got.ok()) << what << ": " << got.status();
  ASSERT_TRUE(want.ok()) << what << ": " << want.status();
  ExpectNear(*got, *want, what);
}

// `model` through a session under test (`Opts()`) and the reference at every size n in [first, last]: x
// has dims `dims(n)`, random values seeded by n; every output matches. Returns the tested session's stats.
SessionStats RunSizesAgainstReference(const std::string& model, int64_t first, int64_t last,
                                      const std::function<std::vector<int64_t>(int64_t)>& dims) {
  auto s = Session::LoadFromBytes(model, Opts());
  auto ref = Session::LoadFromBytes(model, ReferenceOpts());
  EXPECT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(ref.ok()) << ref.status();
  if (!s.ok() || !ref.ok()) return {};
  for (int64_t n = first; n <= last; ++n) {
    RunBoth(**s, **ref, {{"x", RandomTensor(dims(n), static_cast<uint32_t>(n))}}, absl::StrCat("size ", n));
    if (::testing::Test::HasFatalFailure()) break;
  }
  return (*s)->stats();
}

// A decode loop: every step a new past length. The first signature specializes and compiles; every later
// one runs its compiled clusters at its own dims (no specialization, no miss), matching the reference.
TEST(DynamicShapePlanTest, DecoderStepsRunCompiledAtEveryPastLength) {
  auto s = Session::LoadFromBytes(DecoderStep(), Opts());
  auto ref = Session::LoadFromBytes(DecoderStep(), ReferenceOpts());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE(ref.ok()) << ref.status();
  const int64_t first = 3, last = 40;
  for (int64_t p = first; p <= last; ++p) {
    ASSERT_NO_FATAL_FAILURE(RunBoth(**s, **ref, DecoderInputs(p, static_cast<uint32_t>(p)), absl::StrCat("past ", p)));
  }
  SessionStats st = (*s)->stats();
  EXPECT_EQ(st.specializations, 1);
  EXPECT_EQ(st.specialization_replays, 0);
  EXPECT_EQ(st.dynamic_shape_runs, last - first);
  EXPECT_EQ(st.dynamic_shape_misses, 0);
  EXPECT_EQ(st.totals.fallback_executions, 0);
  EXPECT_LE(st.totals.compiles, 1);  // none where the process-wide kernel cache has the kernels
  // A signature's third run specializes (its own plan); the results stay the reference's.
  for (int run = 0; run < 3; ++run) {
    ASSERT_NO_FATAL_FAILURE(RunBoth(**s, **ref, DecoderInputs(17, 99), absl::StrCat("past 17, run ", run)));
  }
  st = (*s)->stats();
  EXPECT_EQ(st.dynamic_shape_runs, last - first + 1) << "past 17 ran dynamically once before";
  EXPECT_EQ(st.specialization_replays, 1);
  EXPECT_EQ(st.signatures, 2);
}

// With the lazy policy (compiled after a few executions; in the background or not) the dynamic plan serves
// every later signature from the first on: op by op with shapes inferred per run until the template's
// cluster compiled, then compiled at each signature's dims. No signature specializes.
TEST(DynamicShapePlanTest, DecoderStepsBeforeTheClusterCompiled) {
  for (bool async : {false, true}) {
    SessionOptions o = Opts();
    o.flags.enable_lazy_compilation = true;
    o.flags.async_compilation = async ? Flags::AsyncCompilation::kTrue : Flags::AsyncCompilation::kFalse;
    auto s = Session::LoadFromBytes(DecoderStep(), o);
    auto ref = Session::LoadFromBytes(DecoderStep(), ReferenceOpts());
    ASSERT_TRUE(s.ok() && ref.ok());
    const int64_t first = 3, last = 30;
    for (int64_t p = first; p <= last; ++p) {
      ASSERT_NO_FATAL_FAILURE(RunBoth(**s, **ref, DecoderInputs(p, static_cast<uint32_t>(p)),
                                      absl::StrCat("past ", p, async ? " async" : "")));
    }
    SessionStats st = (*s)->stats();
    EXPECT_EQ(st.specializations, 1);
    EXPECT_EQ(st.specialization_replays, 0);
    EXPECT_EQ(st.dynamic_shape_runs, last - first);
    EXPECT_EQ(st.dynamic_shape_misses, 0);
    // One compile of the template's cluster at most (none where the process's kernel cache has its kernels).
    EXPECT_LE(st.totals.compiles, 1);
    if (!async) EXPECT_GT(st.totals.compiled_executions, 0);
  }
}

// The same decode loop from several threads at once, each over the past lengths in another order: every
// result matches the reference (the family's executor, its instances and the specializations that
// interleave with them are shared).
TEST(DynamicShapePlanTest, ConcurrentRunsAtManyDims) {
  auto s = Session::LoadFromBytes(DecoderStep(), Opts());
  auto ref = Session::LoadFromBytes(DecoderStep(), ReferenceOpts());
  ASSERT_TRUE(s.ok() && ref.ok());
  ASSERT_TRUE((*s)->Run(DecoderInputs(2, 5)).ok());  // the first signature compiles
  constexpr int kThreads = 4, kPasts = 24;
  std::vector<std::vector<NamedTensor>> want(kPasts + 3);
  for (int64_t p = 3; p < kPasts + 3; ++p) {
    auto w = (*ref)->Run(DecoderInputs(p, static_cast<uint32_t>(p)));
    ASSERT_TRUE(w.ok());
    want[p] = *w;
  }
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPasts; ++i) {
        const int64_t p = 3 + (i * (2 * t + 1) + t) % kPasts;
        auto got = (*s)->Run(DecoderInputs(p, static_cast<uint32_t>(p)));
        if (!got.ok()) {
          errors[t] = std::string(got.status().message());
          return;
        }
        for (size_t k = 0; k < got->size(); ++k) {
          if (MaxAbsDiff((*got)[k].tensor, want[p][k].tensor) > 1e-5) {
            errors[t] = absl::StrCat("past ", p, " output ", k, " differs");
            return;
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
  EXPECT_GT((*s)->stats().dynamic_shape_runs, 0);
}

// y = Relu(Reshape(x, [0, -1, 4]) + b): its fused kernel iterates over [1, P, 4] with b broadcast, two
// loop dims. At x [1, 4] (the same structure: no input dim becomes 0 or 1) P is 1 and the loop has one
// dim: the compiled kernel does not fit, the dynamic plan misses, and the signature specializes. Every
// result is float64 math's.
TEST(DynamicShapePlanTest, DimsThatChangeAKernelStructureMissAndSpecialize) {
  testing::ModelBuilder b(13);
  b.Input("x", onnx::TensorProto::FLOAT, {1, -1}).Output("y");
  b.InitInts("rows", {3}, {0, -1, 4});
  const std::vector<float> bias = {0.25f, -0.5f, 1.0f, 0.0f};
  b.InitFloats("b", {4}, bias);
  b.Node("Reshape", {"x", "rows"}, {"r"});
  b.Node("Add", {"r", "b"}, {"a"});
  b.Node("Relu", {"a"}, {"y"});
  auto s = Session::LoadFromBytes(b.Bytes(), Opts());
  ASSERT_TRUE(s.ok()) << s.status();
  for (int64_t p : {3, 5, 1, 7}) {
    Tensor x = RandomTensor({1, 4 * p}, static_cast<uint32_t>(p));
    auto out = (*s)->Run({{"x", x}});
    ASSERT_TRUE(out.ok()) << p << ": " << out.status();
    const Tensor& y = (*out)[0].tensor;
    ASSERT_EQ(y.dims(), (Dims{1, p, 4}));
    for (int64_t i = 0; i < x.numel(); ++i) {
      EXPECT_EQ(y.data<float>()[i], std::max(0.0f, x.data<float>()[i] + bias[i % 4])) << "P " << p << " at " << i;
    }
  }
  SessionStats st = (*s)->stats();
  EXPECT_EQ(st.dynamic_shape_misses, 1) << "P = 1 needs a one-dim kernel";
  EXPECT_EQ(st.dynamic_shape_runs, 2) << "P = 5 and 7";
}

// y = Reshape(x, [6, -1]) * 2 (replay_test.cc's guard case) with dynamic plans: [6, 4] removes the Reshape
// as an identity (no dynamic plan: its graph holds only for dims where it is one), [3, 8] keeps it (a
// dynamic plan from then on), [6, 5] re-specializes nothing. A plan whose graph is not its structure's
// template must never lend its executables to the template's dynamic plan (that ran [2, 15] without the
// Reshape, returning [2, 15]).
TEST(DynamicShapePlanTest, OnlyPlansOfTheTemplateServeItsDims) {
  testing::ModelBuilder b(13);
  b.Input("x", onnx::TensorProto::FLOAT, {-1, -1}).Output("y");
  b.InitInts("target", {2}, {6, -1});
  b.InitFloats("two", {}, {2.0f});
  b.Node("Reshape", {"x", "target"}, {"r"});
  b.Node("Mul", {"r", "two"}, {"y"});
  // Lazily compiled (the default policy: the dynamic plan misses until a cluster compiled, and those
  // signatures specialize) and compiled at the first run.
  for (bool lazy : {true, false}) {
    SessionOptions o = Opts();
    o.flags.enable_lazy_compilation = lazy;
    auto s = Session::LoadFromBytes(b.Bytes(), o);
    ASSERT_TRUE(s.ok()) << s.status();
    for (const Dims& d : {Dims{6, 4}, Dims{3, 8}, Dims{4, 9}, Dims{6, 5}, Dims{2, 15}, Dims{12, 3}, Dims{6, 7},
                          Dims{5, 6}, Dims{6, 9}, Dims{3, 4}}) {
      Tensor x = RandomTensor(d, 7);
      auto out = (*s)->Run({{"x", x}});
      ASSERT_TRUE(out.ok()) << DimsToString(d) << ": " << out.status();
      const Tensor& y = (*out)[0].tensor;
      ASSERT_EQ(y.dims(), (Dims{6, x.numel() / 6})) << DimsToString(d) << (lazy ? " lazy" : "");
      for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(y.data<float>()[i], 2.0f * x.data<float>()[i]);
    }
    EXPECT_GT((*s)->stats().dynamic_shape_runs, 0) << (lazy ? " lazy" : "");
  }
}

// MatMul(A, Transpose(B)) and MatMul(Transpose(A), B) with the Transpose swapping the last two dims become
// one com.clusterjit.FusedMatMul that reads the operand transposed: float64 math for batched, broadcast
// (also across ranks), small (Eigen) and large (oneDNN, strided operands) products; a Transpose another node
// reads stays, and a MatMul without one is left alone.
struct FusedMatMulCase {
  Dims a, b;  // as stored (before the transposes)
  bool ta, tb;
  bool transpose_also_output;  // the transposed operand is a graph output too (the Transpose stays)
};

// A Reshape whose target an exporter computes from the input's dims (Shape -> Slice -> Mul -> Concat, as
// Paddle and torch exports have them): x [1, 4, W] -> Relu -> Reshape to [1, 2, 2W] -> Transpose -> + bias
// -> Sigmoid. Specialization folds the target into a constant of each signature; with `target_read_by_add`
// the derived width also enters an Add (a value no Reshape reads).
std::string DerivedReshapeModel(bool target_read_by_add) {
  testing::ModelBuilder b(17);
  b.Input("x", onnx::TensorProto::FLOAT, {1, 4, -1}).Output("y");
  b.InitInts("zero", {1}, {0});
  b.InitInts("one", {1}, {1});
  b.InitInts("two", {1}, {2});
  b.InitInts("three", {1}, {3});
  b.InitFloats("scale", {}, {1.5f});
  b.InitFloats("bias", {2}, {0.25f, -0.5f});
  b.Node("Mul", {"x", "scale"}, {"xs"});
  b.Node("Relu", {"xs"}, {"h"});
  b.Node("Shape", {"h"}, {"hs"});
  b.Node("Slice", {"hs", "zero", "one"}, {"n"});
  b.Node("Slice", {"hs", "two", "three"}, {"w"});
  b.Node("Mul", {"w", "two"}, {"w2"});
  testing::ModelBuilder::AttrInt(b.Node("Concat", {"n", "two", "w2"}, {"target"}), "axis", 0);
  b.Node("Reshape", {"h", "target"}, {"r"});
  testing::ModelBuilder::AttrInts(b.Node("Transpose", {"r"}, {"t"}), "perm", {0, 2, 1});
  b.Node("Add", {"t", "bias"}, {"tb"});
  if (target_read_by_add) {
    testing::ModelBuilder::AttrInt(b.Node("Cast", {"w2"}, {"wf"}), "to", onnx::TensorProto::FLOAT);
    b.Node("Add", {"tb", "wf"}, {"tw"});
    b.Node("Sigmoid", {"tw"}, {"y"});
  } else {
    b.Node("Sigmoid", {"tb"}, {"y"});
  }
  return b.Bytes();
}

std::vector<int64_t> WidthsOf4(int64_t w) { return {1, 4, w}; }

// The structure's clusters run compiled at every later width with the Reshape target re-derived from the
// dims (CpuExecutable::InstantiateDims with DerivedConstants): no specialization, no miss, the reference's
// numbers; the first signatures specialize until the cluster compiled.
TEST(DynamicShapePlanTest, ReshapeTargetsDerivedFromDims) {
  SessionStats st = RunSizesAgainstReference(DerivedReshapeModel(false), 3, 30, WidthsOf4);
  EXPECT_EQ(st.specializations, 1);
  EXPECT_EQ(st.dynamic_shape_misses, 0);
  EXPECT_GE(st.dynamic_shape_runs, 26) << "every width after the first compiled one";
  EXPECT_EQ(st.specialization_replays, 28 - st.dynamic_shape_runs - 1);
}

// Position embeddings as torch exports them: x [1, L, 8] + pos_emb[Range(0, Shape(x)[1])]. The sliced
// table is a constant of each signature. `fused`: y = Relu(x * 0.5 + table), one fused kernel reads the
// table; else y = x + table, a lone Add (a one-op group runs on its library kernel).
std::string PositionEmbeddingModel(bool fused) {
  testing::ModelBuilder b(17);
  b.Input("x", onnx::TensorProto::FLOAT, {1, -1, 8}).Output("y");
  b.InitFloats("pos_emb", {40, 8}, RandomFloats(40 * 8, 7));
  b.InitInts("one", {}, {1});
  b.InitInts("zero", {}, {0});
  b.Node("Shape", {"x"}, {"xs"});
  testing::ModelBuilder::AttrInt(b.Node("Gather", {"xs", "one"}, {"len"}), "axis", 0);
  b.Node("Range", {"zero", "len", "one"}, {"positions"});
  testing::ModelBuilder::AttrInt(b.Node("Gather", {"pos_emb", "positions"}, {"pe"}), "axis", 0);
  if (fused) {
    b.InitFloats("scale", {}, {0.5f});
    b.Node("Mul", {"x", "scale"}, {"xm"});
    b.Node("Add", {"xm", "pe"}, {"h"});
    b.Node("Relu", {"h"}, {"y"});
  } else {
    b.Node("Add", {"x", "pe"}, {"y"});
  }
  return b.Bytes();
}

std::vector<int64_t> TokensOf8(int64_t len) { return {1, len, 8}; }

// At a new length the instance binds the table re-derived for it.
TEST(DynamicShapePlanTest, PositionEmbeddingsDerivedFromDims) {
  SessionStats st = RunSizesAgainstReference(PositionEmbeddingModel(true), 2, 40, TokensOf8);
  EXPECT_EQ(st.dynamic_shape_misses, 0);
  EXPECT_GE(st.dynamic_shape_runs, 37) << "every length after the first compiled one";
}

// The lone Add's library step makes InstantiateDims miss at every length (the session's check cannot see
// the fusion plan). After 8 misses without a dynamic run the family is not tried again; every result is
// the reference's.
TEST(DynamicShapePlanTest, AFamilyThatOnlyMissesStopsBeingTried) {
  SessionStats st = RunSizesAgainstReference(PositionEmbeddingModel(false), 2, 40, TokensOf8);
  EXPECT_EQ(st.dynamic_shape_runs, 0);
  EXPECT_LE(st.dynamic_shape_misses, 8);
}

// A derived value read by anything but a Reshape target or a fused kernel (here an Add of a float cast of
// the width, a scalar folded into the kernel's code) keeps the structure on specialized plans: no dynamic
// run, the reference's numbers.
TEST(DynamicShapePlanTest, DerivedValuesReadByOtherOpsSpecialize) {
  SessionStats st = RunSizesAgainstReference(DerivedReshapeModel(true), 3, 12, WidthsOf4);
  EXPECT_EQ(st.dynamic_shape_runs, 0);
  EXPECT_EQ(st.dynamic_shape_misses, 0) << "no family: nothing tried per signature";
  EXPECT_EQ(st.specializations + st.specialization_replays, 10);
}

TEST(FusedMatMulTest, TransposedOperandsMatchFloat64) {
  for (const FusedMatMulCase& c : {FusedMatMulCase{{2, 3, 5, 7}, {2, 3, 6, 7}, false, true, false},
                                   FusedMatMulCase{{1, 3, 5, 7}, {2, 1, 6, 7}, false, true, false},
                                   FusedMatMulCase{{4, 7, 5}, {4, 7, 6}, true, false, false},
                                   FusedMatMulCase{{7, 5}, {6, 7}, true, true, false},
                                   FusedMatMulCase{{1, 96, 64}, {1, 80, 96}, true, true, false},
                                   FusedMatMulCase{{2, 64, 96}, {2, 80, 96}, false, true, false},
                                   FusedMatMulCase{{1, 3, 96, 64}, {2, 1, 80, 96}, true, true, false},
                                   FusedMatMulCase{{3, 64, 96}, {96, 80}, false, false, false},
                                   FusedMatMulCase{{64, 96}, {3, 80, 96}, false, true, false},
                                   FusedMatMulCase{{2, 5, 7}, {2, 6, 7}, false, true, true}}) {
    const int r = static_cast<int>(c.a.size());
    std::vector<int64_t> perm_a, perm_b;
    for (int i = 0; i < r; ++i) perm_a.push_back(i);
    std::swap(perm_a[r - 1], perm_a[r - 2]);
    for (int i = 0; i < static_cast<int>(c.b.size()); ++i) perm_b.push_back(i);
    std::swap(perm_b[perm_b.size() - 1], perm_b[perm_b.size() - 2]);
    testing::ModelBuilder b(13);
    b.Input("a", onnx::TensorProto::FLOAT, c.a).Input("b", onnx::TensorProto::FLOAT, c.b).Output("y");
    std::string ua = "a", ub = "b";
    if (c.ta) {
      testing::ModelBuilder::AttrInts(b.Node("Transpose", {"a"}, {"at"}), "perm", perm_a);
      ua = "at";
    }
    if (c.tb) {
      testing::ModelBuilder::AttrInts(b.Node("Transpose", {"b"}, {"bt"}), "perm", perm_b);
      ub = "bt";
    }
    b.Node("MatMul", {ua, ub}, {"y"});
    if (c.transpose_also_output) b.Output(c.tb ? "bt" : "at");
    const std::string what = absl::StrCat(DimsToString(c.a), (c.ta ? "^T" : ""), " x ", DimsToString(c.b),
                                          (c.tb ? "^T" : ""), c.transpose_also_output ? " (transpose read twice)" : "");
    for (const char* jit : {"-1", "1"}) {
      SessionOptions o = Opts(false);
      o.flags.auto_jit = jit;
      auto s = Session::LoadFromBytes(b.Bytes(), o);
      ASSERT_TRUE(s.ok()) << what << ": " << s.status();
      Tensor ta = RandomTensor(c.a, 11), tb = RandomTensor(c.b, 12);
      std::vector<NamedTensor> in = {{"a", ta}, {"b", tb}};
      auto graph = (*s)->SpecializeAndCluster(in, nullptr);
      ASSERT_TRUE(graph.ok()) << graph.status();
      bool fused = false;
      std::function<void(const Graph&)> scan = [&](const Graph& g) {
        for (const auto& n : g.nodes()) {
          fused |= n->op_type == "FusedMatMul";
          if (const Graph* body = n->GetGraph("body")) scan(*body);
        }
      };
      scan(**graph);
      EXPECT_EQ(fused, (c.ta || c.tb) && !c.transpose_also_output) << what;
      auto out = (*s)->Run(in);
      ASSERT_TRUE(out.ok()) << what << ": " << out.status();
      const Tensor& y = (*out)[0].tensor;
      // Logical operands: A' [.., M, K], B' [.., K, N] (broadcast batch), in float64.
      const int64_t M = c.ta ? c.a[r - 1] : c.a[r - 2], K = c.ta ? c.a[r - 2] : c.a[r - 1];
      const int64_t rb = static_cast<int64_t>(c.b.size());
      const int64_t N = c.tb ? c.b[rb - 2] : c.b[rb - 1];
      // Batch dims right-aligned (numpy broadcasting), operands left-padded with 1s.
      const int64_t rr = std::max<int64_t>(r, rb);
      Dims pa(rr - r, 1), pb(rr - rb, 1);
      pa.insert(pa.end(), c.a.begin(), c.a.end());
      pb.insert(pb.end(), c.b.begin(), c.b.end());
      Dims batch;
      for (int64_t i = 0; i + 2 < rr; ++i) batch.push_back(std::max(pa[i], pb[i]));
      Dims want_dims = batch;
      want_dims.push_back(M);
      want_dims.push_back(N);
      ASSERT_EQ(y.dims(), want_dims) << what;
      int64_t batches = 1;
      for (int64_t d : batch) batches *= d;
      for (int64_t bi = 0; bi < batches; ++bi) {
        int64_t aoff = 0, boff = 0, rem = bi, astr = c.a[r - 1] * c.a[r - 2], bstr = c.b[rb - 1] * c.b[rb - 2];
        for (int i = static_cast<int>(batch.size()) - 1; i >= 0; --i) {
          const int64_t idx = rem % batch[i];
          rem /= batch[i];
          aoff += (pa[i] == 1 ? 0 : idx) * astr;
          boff += (pb[i] == 1 ? 0 : idx) * bstr;
          astr *= pa[i];
          bstr *= pb[i];
        }
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t n = 0; n < N; ++n) {
            double acc = 0;
            for (int64_t k = 0; k < K; ++k) {
              const float av = ta.data<float>()[aoff + (c.ta ? k * M + m : m * K + k)];
              const float bv = tb.data<float>()[boff + (c.tb ? n * K + k : k * N + n)];
              acc += static_cast<double>(av) * bv;
            }
            ASSERT_NEAR(y.data<float>()[bi * M * N + m * N + n], acc, 1e-4 * (1 + std::abs(acc)))
                << what << " auto_jit " << jit << " at batch " << bi << " (" << m << ", " << n << ")";
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace cjit
