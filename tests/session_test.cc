// Session and ONNX-import error paths, and concurrent Run, on small models built with libonnx's protobuf
// classes. Reference values are computed here in double precision, independently of the kernels.
#include <sched.h>

#include <cmath>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "base/logging.h"
#include "compiler/ir/text.h"
#include "compiler/passes/specialize_shapes.h"
#include "runtime/cpu/onednn_util.h"
#include "runtime/session.h"
#include "tests/model_builder.h"

namespace cjit {
namespace {

SessionOptions Opts() {
  SessionOptions o;
  o.flags.device = "cpu";  // the CPU path under test, also on a machine with a GPU
  o.use_environment_flags = false;
  o.flags.intra_op_threads = 1;
  return o;
}


// y = Sigmoid(x + b) with x: f32[N, 4], b constant.
std::string SmallModel(const std::string& op = "Sigmoid", const std::string& extra_attr = "") {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  g->set_name("small");
  testing::ModelBuilder::Info(g->add_input(), "x", onnx::TensorProto::FLOAT, {-1, 4});
  testing::ModelBuilder::Info(g->add_output(), "y", onnx::TensorProto::FLOAT, {-1, 4});
  auto* b = g->add_initializer();
  b->set_name("b");
  b->set_data_type(onnx::TensorProto::FLOAT);
  b->add_dims(4);
  for (float v : {0.5f, -1.0f, 2.0f, 0.0f}) b->add_float_data(v);
  auto* add = g->add_node();
  add->set_op_type("Add");
  add->set_name("add");
  add->add_input("x");
  add->add_input("b");
  add->add_output("t");
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name("act");
  n->add_input("t");
  n->add_output("y");
  if (!extra_attr.empty()) {
    auto* a = n->add_attribute();
    a->set_name(extra_attr);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(1);
  }
  return m.SerializeAsString();
}

Tensor Input(int64_t rows) {
  Tensor t(DType::kF32, {rows, 4});
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(std::sin(0.3 * i));
  return t;
}

TEST(SessionTest, RunsAndMatchesFloat64Math) {
  SessionOptions o = Opts();
  o.flags.dynamic_shape_plans = false;  // a plan per signature (counted below)
  auto s = Session::LoadFromBytes(SmallModel(), o);
  ASSERT_TRUE(s.ok()) << s.status();
  for (int64_t rows : {1, 3, 7}) {
    Tensor x = Input(rows);
    auto out = (*s)->Run({{"x", x}});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), 1u);
    EXPECT_EQ((*out)[0].name, "y");
    const double b[4] = {0.5, -1.0, 2.0, 0.0};
    for (int64_t i = 0; i < x.numel(); ++i) {
      double ref = 1.0 / (1.0 + std::exp(-(static_cast<double>(x.data<float>()[i]) + b[i % 4])));
      EXPECT_NEAR((*out)[0].tensor.data<float>()[i], ref, 1e-6);
    }
  }
  EXPECT_EQ((*s)->num_signatures(), 3);
}

// Activations on the op-by-op path write into their input's buffer when that value dies there (no
// allocation); never into a graph input, a value another node still reads, or a graph output. Checked
// against float64 math, and the caller's input must be unchanged.
TEST(SessionTest, InPlaceActivationsKeepEveryValueRight) {
  testing::ModelBuilder b(14);
  b.Input("x", onnx::TensorProto::FLOAT, {-1, 64}).Output("y1").Output("y2").Output("y3").Output("y4");
  std::vector<float> cv(64);
  for (int i = 0; i < 64; ++i) cv[i] = 0.05f * static_cast<float>(i % 7) - 0.1f;
  b.InitFloats("c", {64}, cv);
  b.Node("Add", {"x", "c"}, {"a"});
  b.Node("HardSwish", {"a"}, {"h"});
  b.Node("Relu", {"h"}, {"y4"});   // a graph output, also read by Tanh: Tanh must not overwrite it
  b.Node("Tanh", {"y4"}, {"y1"});
  b.Node("Mul", {"x", "c"}, {"m"});
  b.Node("Sigmoid", {"m"}, {"s"});  // m is still read by Exp: a new buffer
  b.Node("Exp", {"m"}, {"e"});      // the last reader of m: in place
  b.Node("Add", {"s", "e"}, {"y2"});
  b.Node("Neg", {"x"}, {"y3"});     // a graph input: never overwritten
  for (const char* jit : {"-1", "0"}) {
    SessionOptions o = Opts();
    o.flags.auto_jit = jit;
    auto s = Session::LoadFromBytes(b.Bytes(), o);
    ASSERT_TRUE(s.ok()) << s.status();
    for (int64_t rows : {3, 300, 3}) {
      Tensor x(DType::kF32, {rows, 64});
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(std::sin(0.37 * i) * 4);
      Tensor before = x.Clone();
      auto out = (*s)->Run({{"x", x}});
      ASSERT_TRUE(out.ok()) << out.status();
      ASSERT_TRUE(x.BitwiseEquals(before)) << "the caller's input was written";
      for (int64_t i = 0; i < x.numel(); ++i) {
        double xv = x.data<float>()[i], c = cv[i % 64];
        double a = xv + c;
        double h = a * std::clamp(a / 6 + 0.5, 0.0, 1.0);
        double r = std::max(h, 0.0);
        double m = xv * c;
        const double want[4] = {std::tanh(r), 1 / (1 + std::exp(-m)) + std::exp(m), -xv, r};
        for (int k = 0; k < 4; ++k) {
          EXPECT_NEAR((*out)[k].tensor.data<float>()[i], want[k], 1e-5 * (1 + std::fabs(want[k])))
              << "jit " << jit << " output " << k << " @" << i;
        }
      }
    }
  }
}

// A service that sees ever new shapes keeps at most --max_cached_signatures specializations (least
// recently used evicted); an evicted shape that returns is specialized again and still right; with
// clustering, its compiled cluster comes back from the memory cache instead of being compiled again.
TEST(SessionTest, SignatureCacheIsBoundedAndEvictedShapesStillRun) {
  for (const char* jit : {"-1", "1"}) {
    SessionOptions o = Opts();
    o.flags.max_cached_signatures = 3;
    o.flags.auto_jit = jit;
    o.flags.min_cluster_size = 1;
    o.flags.enable_lazy_compilation = false;
    o.flags.dynamic_shape_plans = false;  // a plan per signature: the cache under test
    auto s = Session::LoadFromBytes(SmallModel(), o);
    ASSERT_TRUE(s.ok()) << s.status();
    const double b[4] = {0.5, -1.0, 2.0, 0.0};
    for (int64_t rows : {1, 2, 3, 4, 5, 6, 7, 1, 2, 7, 6}) {
      Tensor x = Input(rows);
      auto out = (*s)->Run({{"x", x}});
      ASSERT_TRUE(out.ok()) << out.status();
      for (int64_t i = 0; i < x.numel(); ++i) {
        double ref = 1.0 / (1.0 + std::exp(-(static_cast<double>(x.data<float>()[i]) + b[i % 4])));
        ASSERT_NEAR((*out)[0].tensor.data<float>()[i], ref, 1e-6) << "rows " << rows << " auto_jit " << jit;
      }
      EXPECT_LE((*s)->num_signatures(), 3);
    }
    // 7 shapes (4 evicted), then 1 and 2 come back (evicted before: specialized again, evicting 5 and 6),
    // 7 is still held, 6 comes back (evicting 1).
    EXPECT_EQ((*s)->num_signatures(), 3);
    EXPECT_EQ((*s)->signature_evictions(), 7) << jit;
    SessionStats st = (*s)->stats();
    EXPECT_EQ(st.signatures, 3);
    EXPECT_EQ(st.signature_evictions, 7);
    EXPECT_LE(st.clusters.size(), 3u) << "only the held signatures' clusters are listed";
    if (std::string(jit) == "1") {
      // Every run was compiled (no lazy policy); the three returning shapes hit the memory cache.
      EXPECT_EQ(st.totals.compiled_executions, 11);
      EXPECT_EQ(st.totals.fallback_executions, 0);
      EXPECT_EQ(st.totals.memory_hits, 3);
    }
  }
}

// Trace events of an evicted signature's nodes are formatted after its plan is gone: the events keep
// their graphs alive until then (a use after free otherwise, seen as garbage op names or a crash).
TEST(SessionTest, ProfileOfEvictedSignatures) {
  for (const char* jit : {"-1", "1"}) {
    SessionOptions o = Opts();
    o.flags.max_cached_signatures = 1;
    o.flags.auto_jit = jit;
    o.flags.min_cluster_size = 1;
    o.flags.enable_lazy_compilation = false;
    o.flags.dynamic_shape_plans = false;  // a plan per signature: the cache under test
    o.profile = true;
    auto s = Session::LoadFromBytes(SmallModel(), o);
    ASSERT_TRUE(s.ok()) << s.status();
    for (int64_t rows = 1; rows <= 6; ++rows) ASSERT_TRUE((*s)->Run({{"x", Input(rows)}}).ok());
    EXPECT_EQ((*s)->signature_evictions(), 5);
    const std::string table = (*s)->ProfileSummary();
    EXPECT_NE(table.find(std::string(jit) == "1" ? "Add+Sigmoid" : "Sigmoid"), std::string::npos) << table;
  }
}

// More intra-op threads than CPUs only wait for each other (OpenMP teams of 4 on 2 CPUs: ppocr_mobile_cls
// 4x slower): a session caps --intra_op_threads to the CPUs it may run on, and still computes right.
TEST(SessionTest, IntraOpThreadsCappedToUsableCpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_LE(UsableCpus(), CPU_COUNT(&set));
  EXPECT_GE(UsableCpus(), 1);
  SessionOptions o = Opts();
  o.flags.intra_op_threads = UsableCpus() + 3;
  auto s = Session::LoadFromBytes(SmallModel(), o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->flags().intra_op_threads, UsableCpus());
  ASSERT_TRUE((*s)->Run({{"x", Input(3)}}).ok());
  o.flags.intra_op_threads = 1;
  auto one = Session::LoadFromBytes(SmallModel(), o);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ((*one)->flags().intra_op_threads, 1);
}

// Eviction while other threads run: every result still matches float64 math.
TEST(SessionTest, ConcurrentRunsWithEvictions) {
  SessionOptions o = Opts();
  o.flags.max_cached_signatures = 2;
  auto s = Session::LoadFromBytes(SmallModel(), o);
  ASSERT_TRUE(s.ok()) << s.status();
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const double b[4] = {0.5, -1.0, 2.0, 0.0};
      for (int i = 0; i < 60; ++i) {
        const int64_t rows = 1 + (i * 3 + t) % 9;
        Tensor x = Input(rows);
        auto out = (*s)->Run({{"x", x}});
        if (!out.ok()) {
          ++wrong;
          continue;
        }
        for (int64_t k = 0; k < x.numel(); ++k) {
          double ref = 1.0 / (1.0 + std::exp(-(static_cast<double>(x.data<float>()[k]) + b[k % 4])));
          if (std::abs((*out)[0].tensor.data<float>()[k] - ref) > 1e-6) ++wrong;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE((*s)->num_signatures(), 2);
  EXPECT_GT((*s)->signature_evictions(), 0);
}

TEST(SessionTest, WrongInputsAreClearErrors) {
  auto s = Session::LoadFromBytes(SmallModel(), Opts());
  ASSERT_TRUE(s.ok()) << s.status();
  auto bad_name = (*s)->Run({{"z", Input(1)}});
  ASSERT_FALSE(bad_name.ok());
  EXPECT_NE(bad_name.status().message().find("unknown input name 'z'"), std::string::npos) << bad_name.status();
  auto missing = (*s)->Run({});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing input 'x'"), std::string::npos);
  auto bad_dtype = (*s)->Run({{"x", Tensor::Zeros(DType::kF64, {1, 4})}});
  ASSERT_FALSE(bad_dtype.ok());
  EXPECT_NE(bad_dtype.status().message().find("dtype f64, the model expects f32"), std::string::npos)
      << bad_dtype.status();
  auto bad_rank = (*s)->Run({{"x", Tensor::Zeros(DType::kF32, {4})}});
  ASSERT_FALSE(bad_rank.ok());
  EXPECT_NE(bad_rank.status().message().find("has rank 1"), std::string::npos) << bad_rank.status();
  auto bad_dim = (*s)->Run({{"x", Tensor::Zeros(DType::kF32, {2, 5})}});
  ASSERT_FALSE(bad_dim.ok());
  EXPECT_NE(bad_dim.status().message().find("dim 1 must be 4"), std::string::npos) << bad_dim.status();
}

TEST(ImportTest, MalformedModel) {
  auto s = Session::LoadFromBytes("this is not a protobuf", Opts());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("not a valid ONNX model"), std::string::npos) << s.status();
  auto missing = Session::Load("/nonexistent/model.onnx", Opts());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/model.onnx"), std::string::npos);
}

TEST(ImportTest, UnsupportedOpNamesNodeAndOp) {
  auto s = Session::LoadFromBytes(SmallModel("FancyActivation"), Opts());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.status().message().find("node 'act'"), std::string::npos) << s.status();
  EXPECT_NE(s.status().message().find("unsupported operator FancyActivation"), std::string::npos) << s.status();
}

TEST(ImportTest, UnsupportedAttributeNamesIt) {
  auto s = Session::LoadFromBytes(SmallModel("Sigmoid", "bogus_attr"), Opts());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("unsupported attribute 'bogus_attr'"), std::string::npos) << s.status();
  EXPECT_NE(s.status().message().find("node 'act' (Sigmoid)"), std::string::npos) << s.status();
}

TEST(ImportTest, UndefinedInputAndBadOpset) {
  onnx::ModelProto m;
  m.ParseFromString(SmallModel());
  m.mutable_graph()->mutable_node(1)->set_input(0, "nowhere");
  auto s = Session::LoadFromBytes(m.SerializeAsString(), Opts());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("input 'nowhere' is not defined"), std::string::npos) << s.status();
  m.ParseFromString(SmallModel());
  m.mutable_opset_import(0)->set_version(99);
  auto t = Session::LoadFromBytes(m.SerializeAsString(), Opts());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("opset 99 is not supported"), std::string::npos) << t.status();
  // The newest supported opset is 21 (ONNX 1.16); 22 is a clear error naming the range.
  m.mutable_opset_import(0)->set_version(21);
  EXPECT_TRUE(Session::LoadFromBytes(m.SerializeAsString(), Opts()).ok());
  m.mutable_opset_import(0)->set_version(22);
  auto u = Session::LoadFromBytes(m.SerializeAsString(), Opts());
  ASSERT_FALSE(u.ok());
  EXPECT_NE(u.status().message().find("opset 22 is not supported (1 to 21)"), std::string::npos) << u.status();
}

TEST(SessionTest, ConcurrentRunsAgree) {
  auto s = Session::LoadFromBytes(SmallModel(), Opts());
  ASSERT_TRUE(s.ok());
  auto ref = (*s)->Run({{"x", Input(5)}});
  ASSERT_TRUE(ref.ok());
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        int64_t rows = 1 + (i + t) % 6;
        auto out = (*s)->Run({{"x", Input(rows)}});
        if (!out.ok()) { ++mismatches; continue; }
        if (rows == 5 && !(*out)[0].tensor.BitwiseEquals((*ref)[0].tensor)) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace cjit

namespace cjit {
namespace {

TEST(ImportTest, ExternalDataIsReadRelativeToTheModel) {
  std::string dir = ::testing::TempDir() + "/cjit_external";
  std::filesystem::create_directories(dir);
  onnx::ModelProto m;
  m.ParseFromString(SmallModel());
  auto* b = m.mutable_graph()->mutable_initializer(0);
  b->clear_float_data();
  b->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* loc = b->add_external_data();
  loc->set_key("location");
  loc->set_value("weights.bin");
  auto* off = b->add_external_data();
  off->set_key("offset");
  off->set_value("8");
  float vals[6] = {99, 99, 0.5f, -1.0f, 2.0f, 0.0f};  // 8 bytes of padding before the tensor
  {
    std::ofstream w(dir + "/weights.bin", std::ios::binary);
    w.write(reinterpret_cast<const char*>(vals), sizeof(vals));
  }
  {
    std::ofstream f(dir + "/model.onnx", std::ios::binary);
    m.SerializeToOstream(&f);
  }
  auto s = Session::Load(dir + "/model.onnx", Opts());
  ASSERT_TRUE(s.ok()) << s.status();
  Tensor x = Tensor::Zeros(DType::kF32, {1, 4});
  auto out = (*s)->Run({{"x", x}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_NEAR((*out)[0].tensor.data<float>()[2], 1.0 / (1.0 + std::exp(-2.0)), 1e-6);
  // A missing external file is a clear error naming the tensor and the file.
  std::filesystem::remove(dir + "/weights.bin");
  auto bad = Session::Load(dir + "/model.onnx", Opts());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("weights.bin"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("tensor 'b'"), std::string::npos) << bad.status();
}

TEST(LoggingTest, HostSinkReceivesVlogLines) {
  SessionOptions o = Opts();
  o.flags.v = 1;
  std::mutex mu;
  std::vector<std::string> lines;
  SetLogSink([&](LogSeverity, const char*, int, std::string_view message) {
    std::lock_guard<std::mutex> lock(mu);
    lines.emplace_back(message);
  });
  auto s = Session::LoadFromBytes(SmallModel(), o);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Run({{"x", Input(2)}}).ok());
  SetLogSink(nullptr);
  SetLogLevels(0, "", 1);  // restore the defaults for the other tests
  bool found = false;
  for (const std::string& l : lines) found |= l.find("specialized signature f32[2x4]") != std::string::npos;
  EXPECT_TRUE(found) << "no specialization line among " << lines.size() << " log lines";
}

}  // namespace
}  // namespace cjit

namespace cjit {
namespace {

TEST(ImportTest, HugeOrInconsistentTensorsAreErrorsNotAborts) {
  onnx::ModelProto m;
  m.ParseFromString(SmallModel());
  auto* b = m.mutable_graph()->mutable_initializer(0);
  b->clear_dims();
  b->add_dims(int64_t{1} << 30);
  b->add_dims(int64_t{1} << 30);
  auto s = Session::LoadFromBytes(m.SerializeAsString(), Opts());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("too large"), std::string::npos) << s.status();
  b->clear_dims();
  b->add_dims(4);
  b->clear_float_data();
  b->set_raw_data(std::string(12, '\0'));  // 3 floats for 4 elements
  auto t = Session::LoadFromBytes(m.SerializeAsString(), Opts());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("raw bytes"), std::string::npos) << t.status();
}

TEST(SessionTest, AbsurdIntermediateShapeIsAnError) {
  // y = ConstantOfShape(shape) with shape from an input: a huge request fails cleanly, naming the node.
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  testing::ModelBuilder::Info(g->add_input(), "shape", onnx::TensorProto::INT64, {2});
  testing::ModelBuilder::Info(g->add_output(), "y", onnx::TensorProto::FLOAT, {-1, -1});
  auto* n = g->add_node();
  n->set_op_type("ConstantOfShape");
  n->set_name("fill");
  n->add_input("shape");
  n->add_output("y");
  auto s = Session::LoadFromBytes(m.SerializeAsString(), Opts());
  ASSERT_TRUE(s.ok()) << s.status();
  Tensor shape(DType::kI64, {2});
  shape.data<int64_t>()[0] = int64_t{1} << 32;
  shape.data<int64_t>()[1] = int64_t{1} << 32;
  auto out = (*s)->Run({{"shape", shape}});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("node 'fill'"), std::string::npos) << out.status();
  EXPECT_NE(out.status().message().find("too large"), std::string::npos) << out.status();
  shape.data<int64_t>()[0] = 2;
  shape.data<int64_t>()[1] = 3;
  auto ok = (*s)->Run({{"shape", shape}});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)[0].tensor.dims(), Dims({2, 3}));
}

}  // namespace
}  // namespace cjit

namespace cjit {
namespace {

// y = If(k == 1, then: x + 1, else: x * 2), with k an int64 scalar input: each value of k gets its own
// plan with the If folded away; after 8 distinct values k is treated as dynamic; results stay right.
TEST(SessionTest, ScalarIntegerInputsAreSpecializedByValue) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  testing::ModelBuilder::Info(g->add_input(), "x", onnx::TensorProto::FLOAT, {3});
  testing::ModelBuilder::Info(g->add_input(), "k", onnx::TensorProto::INT64, {});
  testing::ModelBuilder::Info(g->add_output(), "y", onnx::TensorProto::FLOAT, {3});
  auto* one = g->add_initializer();
  one->set_name("one");
  one->set_data_type(onnx::TensorProto::INT64);
  one->add_int64_data(1);
  auto* eq = g->add_node();
  eq->set_op_type("Equal");
  eq->add_input("k");
  eq->add_input("one");
  eq->add_output("c");
  auto* iff = g->add_node();
  iff->set_op_type("If");
  iff->set_name("branch");
  iff->add_input("c");
  iff->add_output("y");
  testing::ModelBuilder::ScalarOpBranch(iff->add_attribute(), "then_branch", "Add", 1.0f, {3});
  testing::ModelBuilder::ScalarOpBranch(iff->add_attribute(), "else_branch", "Mul", 2.0f, {3});
  auto s = Session::LoadFromBytes(m.SerializeAsString(), Opts());
  ASSERT_TRUE(s.ok()) << s.status();
  Tensor x(DType::kF32, {3});
  for (int i = 0; i < 3; ++i) x.data<float>()[i] = static_cast<float>(i + 1);
  for (int64_t kv : {1, 2, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 1}) {
    Tensor k(DType::kI64, {});
    *k.data<int64_t>() = kv;
    auto out = (*s)->Run({{"x", x}, {"k", k}});
    ASSERT_TRUE(out.ok()) << out.status();
    for (int i = 0; i < 3; ++i) {
      float expect = kv == 1 ? (i + 1) + 1.0f : (i + 1) * 2.0f;
      EXPECT_EQ((*out)[0].tensor.data<float>()[i], expect) << "k=" << kv;
    }
  }
  // 8 value-specialized plans, then one dynamic plan for every later value.
  EXPECT_EQ((*s)->num_signatures(), 9);
}

// Which inputs' values can decide a shape: through data-only operands (Gather indices, elementwise math,
// MatMul) no; into a Reshape shape, a Range limit or a Reduce axes operand (also through arithmetic) yes;
// Shape reads only the shape.
TEST(SessionTest, InputValuesShapeTheGraphFollowsOperandsNotJustConsumers) {
  auto g = ParseGraph(R"(graph g(%ids: i64[1,1], %pos: i64[1,1], %n: i64[], %len: i64[1], %axes: i64[1], %w: i64[1]) {
  %table = constant f32[4,2] {1, 2, 3, 4, 5, 6, 7, 8}
  %e = Gather(%table, %ids) {axis=0}
  %p = Gather(%table, %pos) {axis=0}
  %one = constant i64[] {1}
  %n1 = Add(%n, %one)
  %zero = constant i64[] {0}
  %r = Range(%zero, %n1, %one)
  %len2 = Mul(%len, %len)
  %flat = Reshape(%e, %len2)
  %sum = ReduceSum(%p, %axes) {keepdims=1}
  %ws = Shape(%w)
  %wsf = Cast(%ws) {to=1}
  %x = Add(%e, %p)
  return %x, %r, %flat, %sum, %wsf
})");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(InputValuesShapeTheGraph(**g), std::vector<bool>({false, false, true, true, true, false}));
}

// A language model's decode step: the token id and the position are [1, 1] int64 inputs that only index
// embedding tables. They are not specialized by value (every token would be a new plan): twelve tokens
// and positions make one plan, and each output is the sum of the two table rows.
TEST(SessionTest, TokenIdsThatOnlyIndexTablesAreNotSpecializedByValue) {
  testing::ModelBuilder b(13);
  b.Input("ids", onnx::TensorProto::INT64, {1, 1}).Input("pos", onnx::TensorProto::INT64, {1, 1}).Output("y");
  std::vector<float> wte(16 * 4), wpe(16 * 4);
  for (size_t i = 0; i < wte.size(); ++i) {
    wte[i] = static_cast<float>(i) * 0.5f;
    wpe[i] = static_cast<float>(i % 7) - 3.0f;
  }
  b.InitFloats("wte", {16, 4}, wte);
  b.InitFloats("wpe", {16, 4}, wpe);
  b.Node("Gather", {"wte", "ids"}, {"e"});
  b.Node("Gather", {"wpe", "pos"}, {"p"});
  b.Node("Add", {"e", "p"}, {"s"});
  b.Node("Relu", {"s"}, {"y"});
  auto s = Session::LoadFromBytes(b.Bytes(), Opts());
  ASSERT_TRUE(s.ok()) << s.status();
  for (int64_t step = 0; step < 12; ++step) {
    Tensor ids(DType::kI64, {1, 1}), pos(DType::kI64, {1, 1});
    ids.data<int64_t>()[0] = (step * 5 + 3) % 16;
    pos.data<int64_t>()[0] = step;
    auto out = (*s)->Run({{"ids", ids}, {"pos", pos}});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ((*out)[0].tensor.dims(), Dims({1, 1, 4}));
    for (int j = 0; j < 4; ++j) {
      float expect = std::max(0.0f, wte[ids.data<int64_t>()[0] * 4 + j] + wpe[step * 4 + j]);
      EXPECT_EQ((*out)[0].tensor.data<float>()[j], expect) << "step " << step << " j " << j;
    }
  }
  EXPECT_EQ((*s)->num_signatures(), 1);
}

// oneDNN primitives with reordered constant weights are cached process-wide; the cache must not keep a
// destroyed Session's weights (a host that loads models again and again would grow without bound).
TEST(SessionTest, ConvPrimitiveCacheReleasesDestroyedSessionsWeights) {
  auto cycle = [](int k) {
    testing::ModelBuilder b(13);
    b.Input("x", onnx::TensorProto::FLOAT, {1, 4, 6, 6}).Output("y");
    std::vector<float> w(8 * 4 * 3 * 3);
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 7 + k) % 11) - 5.0f;
    b.InitFloats("w", {8, 4, 3, 3}, w);
    b.Node("Conv", {"x", "w"}, {"y"});
    auto s = Session::LoadFromBytes(b.Bytes(), Opts());
    ASSERT_TRUE(s.ok()) << s.status();
    Tensor x(DType::kF32, {1, 4, 6, 6});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 5);
    auto out = (*s)->Run({{"x", x}});
    ASSERT_TRUE(out.ok()) << out.status();
    // Independent check of one output element: y[0, 0, 0, 0] (no padding: the top-left 3x3 window).
    double ref = 0;
    for (int c = 0; c < 4; ++c)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) ref += double(w[(c * 3 + i) * 3 + j]) * double(((c * 6 + i) * 6 + j) % 5);
    EXPECT_NEAR((*out)[0].tensor.data<float>()[0], ref, 1e-4);
  };
  cycle(0);
  size_t after_first = DnnlCacheSize();
  for (int k = 1; k <= 40; ++k) cycle(k);
  // Each cycle's Conv entry holds its own weights; entries of destroyed sessions are dropped.
  EXPECT_LE(DnnlCacheSize(), after_first + 1) << "cached oneDNN entries grew with destroyed sessions";
}

}  // namespace
}  // namespace cjit
