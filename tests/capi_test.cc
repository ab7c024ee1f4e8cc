// The C API (include/clusterjit/clusterjit.h) through the installed-style shared library libclusterjit.so:
// every function, and each error path (bad model, bad option name or value, wrong input, wrong buffer
// size, null handles), plus the threading contract (concurrent runs, free waiting for runs in progress)
// and the C++ wrapper. Expected values come from double-precision math or the models' reference outputs.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "clusterjit/clusterjit.h"
#include "clusterjit/clusterjit.hpp"
#include "gtest/gtest.h"
#include "tests/model_builder.h"
#include <omp.h>
#include "onnx/onnx_pb.h"
#include "tests/test_data.h"

namespace {

// Takes ownership of a status; returns its code (CJIT_OK for NULL) and keeps the message.
struct St {
  explicit St(cjit_status* s) : code(cjit_status_code(s)), message(cjit_status_message(s)) { cjit_status_free(s); }
  cjit_code code;
  std::string message;
  bool ok() const { return code == CJIT_OK; }
};


// y = x * 2 + 1 (f32[N, 3]) and z = Identity(x).
std::string AffineModel() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  g->set_name("affine");
  cjit::testing::ModelBuilder::Info(g->add_input(), "x", onnx::TensorProto::FLOAT, {-1, 3});
  cjit::testing::ModelBuilder::Info(g->add_output(), "y", onnx::TensorProto::FLOAT, {-1, 3});
  cjit::testing::ModelBuilder::Info(g->add_output(), "z", onnx::TensorProto::FLOAT, {-1, 3});
  for (auto [name, v] : {std::pair<const char*, float>{"two", 2.0f}, {"one", 1.0f}}) {
    auto* c = g->add_initializer();
    c->set_name(name);
    c->set_data_type(onnx::TensorProto::FLOAT);
    c->add_float_data(v);
  }
  auto add_node = [&](const char* op, std::vector<std::string> in, std::string out) {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(out);
    for (auto& i : in) n->add_input(i);
    n->add_output(out);
  };
  add_node("Mul", {"x", "two"}, "t");
  add_node("Add", {"t", "one"}, "y");
  add_node("Identity", {"x"}, "z");
  return m.SerializeAsString();
}

cjit_session* AffineSession(const char* flags = nullptr, cjit_amp_rule amp_rule = nullptr, void* amp_user = nullptr) {
  std::string bytes = AffineModel();
  cjit_options* o = nullptr;
  EXPECT_TRUE(St(cjit_options_create(&o)).ok());
  EXPECT_TRUE(St(cjit_options_set(o, "device", "cpu")).ok());
  if (flags) {
    EXPECT_TRUE(St(cjit_options_set_flags(o, flags)).ok());
  }
  if (amp_rule) {
    EXPECT_TRUE(St(cjit_options_set_amp_rule(o, amp_rule, amp_user)).ok());
  }
  cjit_session* s = nullptr;
  St st(cjit_session_create_from_bytes(bytes.data(), bytes.size(), nullptr, o, &s));
  EXPECT_TRUE(st.ok()) << st.message;
  cjit_options_free(o);
  return s;
}

TEST(CApiTest, VersionAndStatus) {
  EXPECT_EQ(std::string(cjit_version()), std::to_string(CJIT_VERSION_MAJOR) + "." + std::to_string(CJIT_VERSION_MINOR) +
                                             "." + std::to_string(CJIT_VERSION_PATCH));
  EXPECT_EQ(cjit_status_code(nullptr), CJIT_OK);
  EXPECT_STREQ(cjit_status_message(nullptr), "");
  cjit_status_free(nullptr);
}

TEST(CApiTest, OptionsSetGetAndErrors) {
  EXPECT_EQ(St(cjit_options_create(nullptr)).code, CJIT_INVALID_ARGUMENT);
  cjit_options* o = nullptr;
  ASSERT_TRUE(St(cjit_options_create(&o)).ok());
  EXPECT_TRUE(St(cjit_options_set(o, "intra_op_threads", "3")).ok());
  EXPECT_TRUE(St(cjit_options_set(o, "--tf_xla_min_cluster_size", "2")).ok());  // prefix and alias accepted
  char buf[64];
  size_t len = 0;
  ASSERT_TRUE(St(cjit_options_get(o, "intra_op_threads", buf, sizeof buf, &len)).ok());
  EXPECT_STREQ(buf, "3");
  EXPECT_EQ(len, 1u);
  ASSERT_TRUE(St(cjit_options_get(o, "min_cluster_size", buf, sizeof buf, nullptr)).ok());
  EXPECT_STREQ(buf, "2");
  St small(cjit_options_get(o, "cuda_data_dir", buf, 3, &len));
  EXPECT_EQ(small.code, CJIT_INVALID_ARGUMENT);
  EXPECT_EQ(len, std::strlen("/usr/local/cuda"));
  St unknown(cjit_options_get(o, "intra_op_thread", buf, sizeof buf, &len));
  EXPECT_EQ(unknown.code, CJIT_NOT_FOUND);
  EXPECT_NE(unknown.message.find("did you mean --intra_op_threads"), std::string::npos) << unknown.message;
  // Bad names and values: the same errors as CJIT_FLAGS, naming the flag.
  St bad_name(cjit_options_set(o, "intra_op_thread", "2"));
  EXPECT_EQ(bad_name.code, CJIT_INVALID_ARGUMENT);
  EXPECT_NE(bad_name.message.find("did you mean --intra_op_threads"), std::string::npos) << bad_name.message;
  St bad_threads(cjit_options_set(o, "intra_op_threads", "-3"));
  EXPECT_EQ(bad_threads.code, CJIT_INVALID_ARGUMENT);
  EXPECT_NE(bad_threads.message.find("intra_op_threads"), std::string::npos);
  St bad_device(cjit_options_set(o, "device", "tpu"));
  EXPECT_EQ(bad_device.code, CJIT_INVALID_ARGUMENT);
  EXPECT_NE(bad_device.message.find("'tpu'"), std::string::npos) << bad_device.message;
  ASSERT_TRUE(St(cjit_options_get(o, "intra_op_threads", buf, sizeof buf, nullptr)).ok());
  EXPECT_STREQ(buf, "3");  // a failed set changes nothing
  EXPECT_TRUE(St(cjit_options_set_flags(o, "--v=0 --async_compilation")).ok());
  ASSERT_TRUE(St(cjit_options_get(o, "async_compilation", buf, sizeof buf, nullptr)).ok());
  EXPECT_STREQ(buf, "true");
  EXPECT_EQ(St(cjit_options_set_flags(o, "--bogus=1")).code, CJIT_INVALID_ARGUMENT);
  EXPECT_EQ(St(cjit_options_set(nullptr, "v", "1")).code, CJIT_INVALID_ARGUMENT);
  EXPECT_EQ(St(cjit_options_set(o, nullptr, "1")).code, CJIT_INVALID_ARGUMENT);
  EXPECT_EQ(St(cjit_options_set(o, "v", nullptr)).code, CJIT_INVALID_ARGUMENT);
  EXPECT_EQ(St(cjit_options_get(nullptr, "v", buf, sizeof buf, nullptr)).code, CJIT_INVALID_ARGUMENT);
  EXPECT_EQ(St(cjit_options_set_flags(nullptr, "")).code, CJIT_INVALID_ARGUMENT);
  EXPECT_EQ(St(cjit_options_use_environment(nullptr, 1)).code, CJIT_INVALID_ARGUMENT);
  cjit_options_free(o);
  cjit_options_free(nullptr);
}

// The environment is read only by options that opt in: a bad CJIT_FLAGS does not break a host that sets
// its options in code. (Runs in a child process: CJIT_FLAGS is read once per process.)
TEST(CApiTest, EnvironmentOnlyWhenAskedFor) {
  ASSERT_EXIT(
      {
        setenv("CJIT_FLAGS", "--no_such_flag=1", 1);
        std::string bytes = AffineModel();
        cjit_options* o = nullptr;
        cjit_options_create(&o);
        cjit_options_set(o, "device", "cpu");
        cjit_session* s = nullptr;
        St a(cjit_session_create_from_bytes(bytes.data(), bytes.size(), nullptr, o, &s));
        if (!a.ok() || s == nullptr) std::exit(1);
        cjit_session_free(s);
        cjit_options_use_environment(o, 1);
        St b(cjit_session_create_from_bytes(bytes.data(), bytes.size(), nullptr, o, &s));
        std::exit(b.code == CJIT_INVALID_ARGUMENT && b.message.find("no_such_flag") != std::string::npos ? 0 : 2);
      },
      ::testing::ExitedWithCode(0), "");
  ASSERT_EXIT(
      {
        setenv("CJIT_FLAGS", "--min_cluster_size=7", 1);
        std::string bytes = AffineModel();
        cjit_options* o = nullptr;
        cjit_options_create(&o);
        cjit_options_use_environment(o, 1);
        cjit_options_set(o, "device", "cpu");
        cjit_session* s = nullptr;
        St a(cjit_session_create_from_bytes(bytes.data(), bytes.size(), nullptr, o, &s));
        std::exit(a.ok() && s != nullptr ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(CApiTest, ValuesCreateWrapAndErrors) {
  int64_t dims[2] = {2, 3};
  cjit_value* v = nullptr;
  ASSERT_TRUE(St(cjit_value_create(CJIT_FLOAT32, dims, 2, &v)).ok());
  EXPECT_EQ(cjit_value_dtype(v), CJIT_FLOAT32);
  EXPECT_EQ(cjit_value_rank(v), 2u);
  EXPECT_EQ(cjit_value_dims(v)[1], 3);
  EXPECT_EQ(cjit_value_bytes(v), 24u);
  EXPECT_NE(cjit_value_data(v), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(cjit_value_data(v)) % 64, 0u);
  cjit_value_free(v);
  float host[6] = {0};
  ASSERT_TRUE(St(cjit_value_wrap(CJIT_FLOAT32, dims, 2, host, sizeof host, &v)).ok());
  EXPECT_EQ(cjit_value_data(v), host);  // no copy
  cjit_value_free(v);
  // Errors.
  EXPECT_EQ(St(cjit_value_create(CJIT_FLOAT32, dims, 2, nullptr)).code, CJIT_INVALID_ARGUMENT);
  EXPECT_EQ(St(cjit_value_create(static_cast<cjit_dtype>(99), dims, 2, &v)).code, CJIT_INVALID_ARGUMENT);
  int64_t neg[2] = {2, -3};
  EXPECT_EQ(St(cjit_value_create(CJIT_FLOAT32, neg, 2, &v)).code, CJIT_INVALID_ARGUMENT);
  EXPECT_EQ(St(cjit_value_create(CJIT_FLOAT32, nullptr, 2, &v)).code, CJIT_INVALID_ARGUMENT);
  int64_t huge[3] = {int64_t{1} << 40, int64_t{1} << 40, 8};
  St too_big(cjit_value_create(CJIT_FLOAT32, huge, 3, &v));
  EXPECT_EQ(too_big.code, CJIT_INVALID_ARGUMENT) << too_big.message;
  St wrong_size(cjit_value_wrap(CJIT_FLOAT32, dims, 2, host, sizeof host - 4, &v));
  EXPECT_EQ(wrong_size.code, CJIT_INVALID_ARGUMENT);
  EXPECT_NE(wrong_size.message.find("takes 24 bytes, the buffer has 20"), std::string::npos) << wrong_size.message;
  EXPECT_EQ(St(cjit_value_wrap(CJIT_FLOAT32, dims, 2, nullptr, 24, &v)).code, CJIT_INVALID_ARGUMENT);
  char bytes[32];
  EXPECT_EQ(St(cjit_value_wrap(CJIT_FLOAT32, dims, 2, bytes + 1, 24, &v)).code, CJIT_INVALID_ARGUMENT);  // misaligned
  // Scalars and empty tensors.
  ASSERT_TRUE(St(cjit_value_create(CJIT_INT64, nullptr, 0, &v)).ok());
  EXPECT_EQ(cjit_value_bytes(v), 8u);
  cjit_value_free(v);
  int64_t empty[2] = {0, 3};
  ASSERT_TRUE(St(cjit_value_wrap(CJIT_FLOAT32, empty, 2, nullptr, 0, &v)).ok());
  EXPECT_EQ(cjit_value_data(v), nullptr);
  cjit_value_free(v);
  // Accessors on NULL.
  EXPECT_EQ(cjit_value_rank(nullptr), 0u);
  EXPECT_EQ(cjit_value_dims(nullptr), nullptr);
  EXPECT_EQ(cjit_value_bytes(nullptr), 0u);
  EXPECT_EQ(cjit_value_data(nullptr), nullptr);
  EXPECT_EQ(static_cast<int>(cjit_value_dtype(nullptr)), 0);
  cjit_value_free(nullptr);
}

TEST(CApiTest, SessionCreateErrors) {
  cjit_session* s = nullptr;
  St missing(cjit_session_create("/nonexistent/model.onnx", nullptr, &s));
  EXPECT_EQ(missing.code, CJIT_NOT_FOUND) << missing.message;
  EXPECT_NE(missing.message.find("/nonexistent/model.onnx"), std::string::npos);
  EXPECT_EQ(s, nullptr);
  const char junk[] = "this is not a protobuf";
  St malformed(cjit_session_create_from_bytes(junk, sizeof junk, nullptr, nullptr, &s));
  EXPECT_FALSE(malformed.ok());
  EXPECT_EQ(s, nullptr);
  EXPECT_EQ(St(cjit_session_create(nullptr, nullptr, &s)).code, CJIT_INVALID_ARGUMENT);
  EXPECT_EQ(St(cjit_session_create("m.onnx", nullptr, nullptr)).code, CJIT_INVALID_ARGUMENT);
  EXPECT_EQ(St(cjit_session_create_from_bytes(nullptr, 10, nullptr, nullptr, &s)).code, CJIT_INVALID_ARGUMENT);
  // An unsupported op names the node and op.
  onnx::ModelProto m;
  m.ParseFromString(AffineModel());
  m.mutable_graph()->mutable_node(0)->set_op_type("NoSuchOp");
  std::string bytes = m.SerializeAsString();
  St unsupported(cjit_session_create_from_bytes(bytes.data(), bytes.size(), nullptr, nullptr, &s));
  EXPECT_FALSE(unsupported.ok());
  EXPECT_NE(unsupported.message.find("NoSuchOp"), std::string::npos) << unsupported.message;
  cjit_session_free(nullptr);
}

TEST(CApiTest, SessionInfo) {
  cjit_session* s = AffineSession();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(cjit_session_input_count(s), 1u);
  EXPECT_EQ(cjit_session_output_count(s), 2u);
  EXPECT_STREQ(cjit_session_input_name(s, 0), "x");
  EXPECT_STREQ(cjit_session_output_name(s, 1), "z");
  EXPECT_EQ(cjit_session_input_name(s, 1), nullptr);
  EXPECT_EQ(cjit_session_output_name(s, 2), nullptr);
  int32_t dtype = 0;
  int64_t dims[4] = {0, 0, 0, 0}, rank = 0;
  ASSERT_TRUE(St(cjit_session_input_info(s, 0, &dtype, dims, 4, &rank)).ok());
  EXPECT_EQ(dtype, CJIT_FLOAT32);
  EXPECT_EQ(rank, 2);
  EXPECT_EQ(dims[0], -1);  // dynamic
  EXPECT_EQ(dims[1], 3);
  ASSERT_TRUE(St(cjit_session_output_info(s, 1, &dtype, dims, 4, &rank)).ok());
  EXPECT_EQ(rank, 2);
  EXPECT_EQ(St(cjit_session_input_info(s, 5, &dtype, dims, 4, &rank)).code, CJIT_INVALID_ARGUMENT);
  EXPECT_EQ(St(cjit_session_output_info(s, 5, &dtype, dims, 4, &rank)).code, CJIT_INVALID_ARGUMENT);
  EXPECT_EQ(St(cjit_session_input_info(nullptr, 0, &dtype, dims, 4, &rank)).code, CJIT_INVALID_ARGUMENT);
  EXPECT_EQ(St(cjit_session_output_info(nullptr, 0, &dtype, dims, 4, &rank)).code, CJIT_INVALID_ARGUMENT);
  EXPECT_EQ(cjit_session_input_count(nullptr), 0u);
  EXPECT_EQ(cjit_session_output_count(nullptr), 0u);
  EXPECT_EQ(cjit_session_input_name(nullptr, 0), nullptr);
  cjit_session_free(s);
}

// Symbolic dim names, the model's metadata, the flags table and the counters, as JSON texts.
TEST(CApiTest, DimNamesMetadataFlagsAndStats) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  m.set_producer_name("capi-test");
  m.set_model_version(7);
  m.set_doc_string("doc \"quoted\"");
  auto* prop = m.add_metadata_props();
  prop->set_key("labels");
  prop->set_value("[\"a\", \"b\"]");
  auto* g = m.mutable_graph();
  g->set_name("named");
  auto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  auto* shape = in->mutable_type()->mutable_tensor_type()->mutable_shape();
  shape->add_dim()->set_dim_param("batch");
  shape->add_dim()->set_dim_value(3);
  shape->add_dim();  // unknown, unnamed
  cjit::testing::ModelBuilder::Info(g->add_output(), "y", onnx::TensorProto::FLOAT, {-1, 3, -1});
  auto* n = g->add_node();
  n->set_op_type("Relu");
  n->add_input("x");
  n->add_output("y");
  std::string bytes = m.SerializeAsString();
  cjit_session* s = nullptr;
  ASSERT_TRUE(St(cjit_session_create_from_bytes(bytes.data(), bytes.size(), nullptr, nullptr, &s)).ok());
  EXPECT_STREQ(cjit_session_input_dim_name(s, 0, 0), "batch");
  EXPECT_STREQ(cjit_session_input_dim_name(s, 0, 1), "");
  EXPECT_STREQ(cjit_session_input_dim_name(s, 0, 2), "");
  EXPECT_EQ(cjit_session_input_dim_name(s, 0, 3), nullptr);
  EXPECT_EQ(cjit_session_input_dim_name(s, 1, 0), nullptr);
  EXPECT_EQ(cjit_session_output_dim_name(s, 1, 0), nullptr);
  EXPECT_EQ(cjit_session_input_dim_name(nullptr, 0, 0), nullptr);
  EXPECT_STREQ(cjit_session_device(s), "cpu");

  char buf[512];
  size_t len = 0;
  ASSERT_TRUE(St(cjit_session_metadata_json(s, buf, sizeof buf, &len)).ok());
  const std::string meta(buf, len);
  EXPECT_NE(meta.find(R"("producer_name":"capi-test")"), std::string::npos) << meta;
  EXPECT_NE(meta.find(R"("graph_name":"named")"), std::string::npos) << meta;
  EXPECT_NE(meta.find(R"("version":7)"), std::string::npos) << meta;
  EXPECT_NE(meta.find(R"("description":"doc \"quoted\"")"), std::string::npos) << meta;
  EXPECT_NE(meta.find(R"("custom_metadata_map":{"labels":"[\"a\", \"b\"]"})"), std::string::npos) << meta;
  EXPECT_EQ(St(cjit_session_metadata_json(s, buf, 4, &len)).code, CJIT_INVALID_ARGUMENT);
  EXPECT_EQ(len, meta.size());  // the size needed
  EXPECT_EQ(St(cjit_session_metadata_json(nullptr, buf, sizeof buf, &len)).code, CJIT_INVALID_ARGUMENT);

  std::vector<char> stats(4096);
  ASSERT_TRUE(St(cjit_session_stats_json(s, stats.data(), stats.size(), &len)).ok()) << len << " bytes needed";
  const std::string stats_text(stats.data(), len);
  EXPECT_NE(stats_text.find(R"("signatures":0)"), std::string::npos) << stats_text;
  EXPECT_NE(stats_text.find(R"("fused_kernels":0)"), std::string::npos) << stats_text;
  std::vector<char> flags(1 << 20);
  ASSERT_TRUE(St(cjit_flags_json(flags.data(), flags.size(), &len)).ok());
  EXPECT_NE(std::string(flags.data(), len).find(R"("name":"auto_jit")"), std::string::npos);
  cjit_session_free(s);
}

// Run options: ORT's terminate flag and a host's interrupt check stop a run with CJIT_CANCELLED and set no
// output; the session and the options stay usable.
int StopAtSecondCheck(void* user) { return ++*static_cast<int*>(user) >= 2; }

TEST(CApiTest, RunOptionsTerminateAndInterruptCheck) {
  cjit_session* s = AffineSession();
  ASSERT_NE(s, nullptr);
  float data[6] = {1, 2, 3, 4, 5, 6};
  int64_t dims[2] = {2, 3};
  cjit_value* x = nullptr;
  ASSERT_TRUE(St(cjit_value_wrap(CJIT_FLOAT32, dims, 2, data, sizeof data, &x)).ok());
  const char* names[] = {"x"};
  cjit_run_options* ro = nullptr;
  ASSERT_TRUE(St(cjit_run_options_create(&ro)).ok());
  EXPECT_EQ(cjit_run_options_get_terminate(ro), 0);
  cjit_run_options_set_terminate(ro, 1);
  EXPECT_EQ(cjit_run_options_get_terminate(ro), 1);
  cjit_value* out[2] = {nullptr, nullptr};
  St cancelled(cjit_session_run_with_options(s, ro, names, &x, 1, nullptr, out, 2));
  EXPECT_EQ(cancelled.code, CJIT_CANCELLED);
  EXPECT_NE(cancelled.message.find("RunOptions.terminate"), std::string::npos) << cancelled.message;
  EXPECT_EQ(out[0], nullptr);
  EXPECT_EQ(out[1], nullptr);
  cjit_run_options_set_terminate(ro, 0);
  // The graph runs in two steps at least (a Mul+Add cluster, or Mul and Add, then Identity): the check
  // is called before each, and stopping at the second leaves the run cut short.
  int checks = 0;
  ASSERT_TRUE(St(cjit_run_options_set_interrupt_check(ro, StopAtSecondCheck, &checks)).ok());
  St interrupted(cjit_session_run_with_options(s, ro, names, &x, 1, nullptr, out, 2));
  EXPECT_EQ(interrupted.code, CJIT_CANCELLED) << interrupted.message;
  EXPECT_NE(interrupted.message.find("interrupt check"), std::string::npos) << interrupted.message;
  EXPECT_EQ(checks, 2);
  EXPECT_EQ(out[0], nullptr);
  ASSERT_TRUE(St(cjit_run_options_set_interrupt_check(ro, nullptr, nullptr)).ok());
  ASSERT_TRUE(St(cjit_session_run_with_options(s, ro, names, &x, 1, nullptr, out, 2)).ok());
  EXPECT_EQ(static_cast<float*>(cjit_value_data(out[0]))[5], 13.0f);  // 6 * 2 + 1
  ASSERT_TRUE(St(cjit_session_run_with_options(s, nullptr, names, &x, 1, nullptr, out + 1, 1)).code ==
              CJIT_INVALID_ARGUMENT);
  EXPECT_EQ(St(cjit_run_options_create(nullptr)).code, CJIT_INVALID_ARGUMENT);
  EXPECT_EQ(St(cjit_run_options_set_interrupt_check(nullptr, nullptr, nullptr)).code, CJIT_INVALID_ARGUMENT);
  cjit_run_options_set_terminate(nullptr, 1);  // ignored
  cjit_value_free(out[0]);
  cjit_run_options_free(ro);
  cjit_value_free(x);
  cjit_session_free(s);
}

// The C AMP rule: with --auto_mixed_precision=bfloat16, Mul and Add (infer ops, not next to any allow op:
// float32 by the lists) run in bfloat16 when the host's rule says allow.
struct AmpRuleState {
  std::atomic<int> calls{0};
  bool allow = false;
};

cjit_amp_class TestAmpRule(const char* op_type, const char* node_name, int* output_float32, void* user) {
  auto* st = static_cast<AmpRuleState*>(user);
  ++st->calls;
  (void)node_name;
  (void)output_float32;
  if (st->allow && (std::string(op_type) == "Mul" || std::string(op_type) == "Add")) return CJIT_AMP_ALLOW;
  return CJIT_AMP_NO_DECISION;
}

TEST(CApiTest, AmpRuleDecidesBeforeTheLists) {
  for (bool allow : {false, true}) {
    AmpRuleState state;
    state.allow = allow;
    cjit_session* s =
        AffineSession("--auto_mixed_precision=bfloat16 --amp_require_native_isa=false", TestAmpRule, &state);
    ASSERT_NE(s, nullptr);
    float x[3] = {1.00390625f, 2.0f, -3.0f};  // 1 + 2^-8 is not a bfloat16 value (rounds to 1)
    int64_t dims[2] = {1, 3};
    cjit_value* in = nullptr;
    ASSERT_TRUE(St(cjit_value_wrap(CJIT_FLOAT32, dims, 2, x, sizeof x, &in)).ok());
    const char* names[] = {"x"};
    cjit_value* out[2] = {nullptr, nullptr};
    St run(cjit_session_run(s, names, &in, 1, nullptr, out, 2));
    ASSERT_TRUE(run.ok()) << run.message;
    const float* y = static_cast<const float*>(cjit_value_data(out[0]));
    EXPECT_GT(state.calls.load(), 0);
    EXPECT_EQ(y[0], allow ? 3.0f : 3.0078125f) << (allow ? "bfloat16 (rule: allow)" : "float32 (lists)");
    EXPECT_EQ(cjit_value_dtype(out[0]), CJIT_FLOAT32) << "graph outputs stay float32";
    cjit_value_free(out[0]);
    cjit_value_free(out[1]);
    cjit_value_free(in);
    cjit_session_free(s);
  }
  EXPECT_EQ(St(cjit_options_set_amp_rule(nullptr, TestAmpRule, nullptr)).code, CJIT_INVALID_ARGUMENT);
}

TEST(CApiTest, RunAllocatedAndBoundOutputs) {
  cjit_session* s = AffineSession();
  ASSERT_NE(s, nullptr);
  float x[6] = {0, 1, -2, 3.5f, 4, -5};
  int64_t dims[2] = {2, 3};
  cjit_value* in = nullptr;
  ASSERT_TRUE(St(cjit_value_wrap(CJIT_FLOAT32, dims, 2, x, sizeof x, &in)).ok());
  const char* names[] = {"x"};
  cjit_value* out[2] = {nullptr, nullptr};
  St run(cjit_session_run(s, names, &in, 1, nullptr, out, 2));
  ASSERT_TRUE(run.ok()) << run.message;
  const float* y = static_cast<const float*>(cjit_value_data(out[0]));
  const float* z = static_cast<const float*>(cjit_value_data(out[1]));
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(y[i], static_cast<float>(static_cast<double>(x[i]) * 2 + 1));
    EXPECT_EQ(z[i], x[i]);
  }
  // Identity's output is the caller's own buffer, not an alias of the wrapped input.
  EXPECT_NE(cjit_value_data(out[1]), static_cast<void*>(x));
  cjit_value_free(out[0]);
  cjit_value_free(out[1]);
  // Bound output, selected by name: written into the host buffer.
  float bound[6] = {0};
  cjit_value* b = nullptr;
  ASSERT_TRUE(St(cjit_value_wrap(CJIT_FLOAT32, dims, 2, bound, sizeof bound, &b)).ok());
  const char* out_names[] = {"y"};
  ASSERT_TRUE(St(cjit_session_run(s, names, &in, 1, out_names, &b, 1)).ok());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(bound[i], static_cast<float>(static_cast<double>(x[i]) * 2 + 1));
  cjit_value_free(b);
  // Wrong bound size, dtype.
  int64_t wrong_dims[2] = {3, 2};
  ASSERT_TRUE(St(cjit_value_wrap(CJIT_FLOAT32, wrong_dims, 2, bound, sizeof bound, &b)).ok());
  St wrong_shape(cjit_session_run(s, names, &in, 1, out_names, &b, 1));
  EXPECT_EQ(wrong_shape.code, CJIT_INVALID_ARGUMENT);
  EXPECT_NE(wrong_shape.message.find("bound output 'y'"), std::string::npos) << wrong_shape.message;
  cjit_value_free(b);
  int32_t ibuf[6];
  ASSERT_TRUE(St(cjit_value_wrap(CJIT_INT32, dims, 2, ibuf, sizeof ibuf, &b)).ok());
  St wrong_dtype(cjit_session_run(s, names, &in, 1, out_names, &b, 1));
  EXPECT_EQ(wrong_dtype.code, CJIT_INVALID_ARGUMENT);
  EXPECT_NE(wrong_dtype.message.find("dtype"), std::string::npos) << wrong_dtype.message;
  cjit_value_free(b);
  cjit_value_free(in);
  cjit_session_free(s);
}

TEST(CApiTest, RunErrors) {
  cjit_session* s = AffineSession();
  ASSERT_NE(s, nullptr);
  float x[6] = {0};
  int64_t dims[2] = {2, 3};
  cjit_value* in = nullptr;
  ASSERT_TRUE(St(cjit_value_wrap(CJIT_FLOAT32, dims, 2, x, sizeof x, &in)).ok());
  const char* names[] = {"x"};
  const char* wrong_name[] = {"input"};
  cjit_value* out[2] = {nullptr, nullptr};
  St unknown(cjit_session_run(s, wrong_name, &in, 1, nullptr, out, 2));
  EXPECT_EQ(unknown.code, CJIT_INVALID_ARGUMENT);
  EXPECT_NE(unknown.message.find("unknown input name 'input'"), std::string::npos) << unknown.message;
  St missing(cjit_session_run(s, names, &in, 0, nullptr, out, 2));
  EXPECT_EQ(missing.code, CJIT_INVALID_ARGUMENT);
  EXPECT_NE(missing.message.find("missing input 'x'"), std::string::npos) << missing.message;
  int64_t bad_dims[2] = {2, 4};
  float x8[8] = {0};
  cjit_value* bad = nullptr;
  ASSERT_TRUE(St(cjit_value_wrap(CJIT_FLOAT32, bad_dims, 2, x8, sizeof x8, &bad)).ok());
  St wrong_dim(cjit_session_run(s, names, &bad, 1, nullptr, out, 2));
  EXPECT_EQ(wrong_dim.code, CJIT_INVALID_ARGUMENT);
  EXPECT_NE(wrong_dim.message.find("dim 1 must be 3"), std::string::npos) << wrong_dim.message;
  cjit_value_free(bad);
  int32_t xi[6] = {0};
  ASSERT_TRUE(St(cjit_value_wrap(CJIT_INT32, dims, 2, xi, sizeof xi, &bad)).ok());
  St wrong_dtype(cjit_session_run(s, names, &bad, 1, nullptr, out, 2));
  EXPECT_EQ(wrong_dtype.code, CJIT_INVALID_ARGUMENT);
  EXPECT_NE(wrong_dtype.message.find("has dtype i32"), std::string::npos) << wrong_dtype.message;
  cjit_value_free(bad);
  EXPECT_EQ(St(cjit_session_run(s, names, &in, 1, nullptr, out, 1)).code, CJIT_INVALID_ARGUMENT);  // count
  const char* no_output[] = {"w"};
  EXPECT_EQ(St(cjit_session_run(s, names, &in, 1, no_output, out, 1)).code, CJIT_NOT_FOUND);
  EXPECT_EQ(St(cjit_session_run(nullptr, names, &in, 1, nullptr, out, 2)).code, CJIT_INVALID_ARGUMENT);
  EXPECT_EQ(St(cjit_session_run(s, nullptr, &in, 1, nullptr, out, 2)).code, CJIT_INVALID_ARGUMENT);
  EXPECT_EQ(St(cjit_session_run(s, names, nullptr, 1, nullptr, out, 2)).code, CJIT_INVALID_ARGUMENT);
  EXPECT_EQ(St(cjit_session_run(s, names, &in, 1, nullptr, nullptr, 2)).code, CJIT_INVALID_ARGUMENT);
  const cjit_value* null_value[] = {nullptr};
  EXPECT_EQ(St(cjit_session_run(s, names, null_value, 1, nullptr, out, 2)).code, CJIT_INVALID_ARGUMENT);
  EXPECT_EQ(out[0], nullptr);  // no output handed out on error
  EXPECT_EQ(out[1], nullptr);
  cjit_value_free(in);
  cjit_session_free(s);
}

TEST(CApiTest, LogCallbackReceivesMessages) {
  struct Log {
    std::mutex mu;
    std::vector<std::string> lines;
  } log;
  cjit_set_log_callback(
      [](void* user, cjit_log_severity, const char* file, int, const char* message) {
        auto* l = static_cast<Log*>(user);
        std::lock_guard<std::mutex> lock(l->mu);
        l->lines.push_back(std::string(file) + ": " + message);
      },
      &log);
  cjit_session* s = AffineSession("--v=1");
  ASSERT_NE(s, nullptr);
  float x[3] = {1, 2, 3};
  int64_t dims[2] = {1, 3};
  cjit_value* in = nullptr;
  ASSERT_TRUE(St(cjit_value_wrap(CJIT_FLOAT32, dims, 2, x, sizeof x, &in)).ok());
  const char* names[] = {"x"};
  cjit_value* out[2] = {nullptr, nullptr};
  ASSERT_TRUE(St(cjit_session_run(s, names, &in, 1, nullptr, out, 2)).ok());
  cjit_set_log_callback(nullptr, nullptr);
  bool found = false;
  for (const auto& l : log.lines) found |= l.find("specialized signature f32[1x3]") != std::string::npos;
  EXPECT_TRUE(found) << log.lines.size() << " lines";
  for (auto* v : out) cjit_value_free(v);
  cjit_value_free(in);
  cjit_session_free(s);
  cjit_session* quiet = AffineSession("--v=0");  // restores the process's levels for the other tests
  cjit_session_free(quiet);
}

TEST(CApiTest, EndProfiling) {
  std::string dir = (std::filesystem::temp_directory_path() / ("cjit-capi-" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  std::string flags = "--trace_to=" + dir + "/t.json";
  cjit_session* s = AffineSession(flags.c_str());
  ASSERT_NE(s, nullptr);
  char path[512];
  size_t len = 0;
  ASSERT_TRUE(St(cjit_session_end_profiling(s, path, sizeof path, &len)).ok());
  EXPECT_EQ(std::string(path), dir + "/t.json");
  EXPECT_TRUE(std::filesystem::exists(path));
  cjit_session_free(s);
  cjit_session* no_trace = AffineSession();
  EXPECT_EQ(St(cjit_session_end_profiling(no_trace, path, sizeof path, &len)).code, CJIT_FAILED_PRECONDITION);
  EXPECT_EQ(St(cjit_session_end_profiling(nullptr, path, sizeof path, &len)).code, CJIT_INVALID_ARGUMENT);
  cjit_session_free(no_trace);
  std::filesystem::remove_all(dir);
}

// A real model from 4 threads with zero-copy inputs and bound outputs: every result bitwise equal to the
// same input run alone (after the clusters compiled).
TEST(CApiTest, ConcurrentRunsZeroCopyBound) {
  std::string dir = cjit::testing::ModelsDir() + "/ppocr_mobile_cls";
  CJIT_REQUIRE_DATA(dir);
  cjit::Options opt;
  // Tuned at the threshold (before the run alone), not partway through the threads' runs: synchronous
  // compilation and tuning (at 1 thread on a 2-CPU machine --async_compilation=auto tunes in the background,
  // and a tuned algorithm landing between the runs changed the last bits of one of 100 results under load).
  opt.Set("device", "cpu").Set("intra_op_threads", "1").Set("autotune_min_op_time_ms", "0");
  opt.Set("async_compilation", "false");
  auto session = std::make_unique<cjit::Session>(dir + "/model.onnx", opt);
  std::vector<float> pixels(1 * 3 * 48 * 192);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>(std::sin(0.01 * static_cast<double>(i)));
  cjit::Value x = cjit::Value::Wrap<float>(pixels.data(), pixels.size(), {1, 3, 48, 192});
  std::vector<cjit::Value> alone;
  for (int i = 0; i < 4; ++i) alone = session->Run({{"x", &x}});  // the last one runs compiled
  ASSERT_EQ(alone.size(), 1u);
  std::vector<float> want(alone[0].Data<float>().begin(), alone[0].Data<float>().end());
  ASSERT_EQ(want.size(), 2u);
  EXPECT_NEAR(want[0] + want[1], 1.0, 1e-5);  // a softmax
  std::atomic<int> wrong{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < 4; ++t) {
    pool.emplace_back([&] {
      for (int i = 0; i < 25; ++i) {
        float out[2] = {-1, -1};
        cjit::Value y = cjit::Value::Wrap<float>(out, 2, {1, 2});
        session->Run({{"x", &x}}, {{session->OutputNames()[0], &y}});
        if (out[0] != want[0] || out[1] != want[1]) ++wrong;
      }
    });
  }
  for (auto& th : pool) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

// cjit_session_free waits for a run in progress on another thread (the contract of clusterjit.h).
TEST(CApiTest, FreeWaitsForRunInProgress) {
  std::string model = cjit::testing::ModelPath("ppocrv4_rec");  // ~30 ms per run: the free lands inside it
  CJIT_REQUIRE_DATA(model);
  cjit_options* o = nullptr;
  ASSERT_TRUE(St(cjit_options_create(&o)).ok());
  ASSERT_TRUE(St(cjit_options_set_flags(o, "--device=cpu --intra_op_threads=1 --auto_jit=-1")).ok());
  cjit_session* s = nullptr;
  ASSERT_TRUE(St(cjit_session_create(model.c_str(), o, &s)).ok());
  cjit_options_free(o);
  std::vector<float> pixels(1 * 3 * 48 * 320, 0.25f);
  int64_t dims[4] = {1, 3, 48, 320};
  cjit_value* x = nullptr;
  ASSERT_TRUE(St(cjit_value_wrap(CJIT_FLOAT32, dims, 4, pixels.data(), pixels.size() * 4, &x)).ok());
  const char* names[] = {"x"};
  cjit_value* warm = nullptr;
  ASSERT_TRUE(St(cjit_session_run(s, names, &x, 1, nullptr, &warm, 1)).ok());  // specialized before timing
  std::atomic<bool> entering{false};
  cjit_code run_code = CJIT_UNKNOWN;
  cjit_value* out = nullptr;
  auto run_start = std::chrono::steady_clock::now();
  std::thread runner([&] {
    entering = true;
    run_code = St(cjit_session_run(s, names, &x, 1, nullptr, &out, 1)).code;
  });
  while (!entering) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  cjit_session_free(s);  // must wait for the run, not free under it
  double waited_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - run_start).count();
  runner.join();
  EXPECT_EQ(run_code, CJIT_OK);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(cjit_value_bytes(out), cjit_value_bytes(warm));
  EXPECT_EQ(std::memcmp(cjit_value_data(out), cjit_value_data(warm), cjit_value_bytes(out)), 0);
  EXPECT_GT(waited_ms, 5.0);
  cjit_value_free(out);
  cjit_value_free(warm);
  cjit_value_free(x);
}

// A library never changes process state it does not own: the caller's OpenMP thread count survives a run
// with another --intra_op_threads, and two sessions with different options coexist in one process.
TEST(CApiTest, NoGlobalSideEffectsAndCoexistingSessions) {
  omp_set_num_threads(3);
  cjit_session* one = AffineSession("--intra_op_threads=1 --auto_jit=-1");
  cjit_session* two = AffineSession("--intra_op_threads=2 --enable_lazy_compilation=false");
  ASSERT_TRUE(one && two);
  float x[6] = {1, 2, 3, 4, 5, 6};
  int64_t dims[2] = {2, 3};
  cjit_value* in = nullptr;
  ASSERT_TRUE(St(cjit_value_wrap(CJIT_FLOAT32, dims, 2, x, sizeof x, &in)).ok());
  const char* names[] = {"x"};
  std::atomic<int> wrong{0};
  auto loop = [&](cjit_session* s) {
    for (int i = 0; i < 50; ++i) {
      cjit_value* out[2] = {nullptr, nullptr};
      if (!St(cjit_session_run(s, names, &in, 1, nullptr, out, 2)).ok()) ++wrong;
      const float* y = static_cast<const float*>(cjit_value_data(out[0]));
      for (int k = 0; k < 6 && y; ++k) wrong += y[k] != x[k] * 2 + 1;
      cjit_value_free(out[0]);
      cjit_value_free(out[1]);
    }
  };
  std::thread a(loop, one), b(loop, two);
  a.join();
  b.join();
  loop(one);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(omp_get_max_threads(), 3);  // the calling thread's setting, untouched
  cjit_value_free(in);
  cjit_session_free(one);
  cjit_session_free(two);
}

TEST(CApiCppTest, WrapperErrorsThrow) {
  cjit::Options opt;
  EXPECT_THROW(opt.Set("no_such", "1"), cjit::Error);
  try {
    opt.Set("device", "tpu");
    FAIL();
  } catch (const cjit::Error& e) {
    EXPECT_EQ(e.code(), CJIT_INVALID_ARGUMENT);
  }
  EXPECT_EQ(opt.Get("device"), "auto");
  EXPECT_THROW(cjit::Session("/nonexistent.onnx", opt), cjit::Error);
  float buf[4];
  cjit::Value v = cjit::Value::Wrap<float>(buf, 4, {2, 2});
  EXPECT_EQ(v.dims(), (std::vector<int64_t>{2, 2}));
  EXPECT_THROW(v.Data<int32_t>(), cjit::Error);
  EXPECT_EQ(v.Data<float>().size(), 4u);
}

}  // namespace

namespace {

// seq (sequence of f32) and t (f32[N]): grown = SequenceInsert(seq, t) (appended), len = SequenceLength(grown).
std::string SequenceModel() {
  cjit::testing::ModelBuilder b(17);
  b.SequenceInput("seq", onnx::TensorProto::FLOAT).Input("t", onnx::TensorProto::FLOAT, {-1});
  b.Node("SequenceInsert", {"seq", "t"}, {"grown"});
  b.Node("SequenceLength", {"grown"}, {"len"});
  b.SequenceOutput("grown", onnx::TensorProto::FLOAT).Output("len");
  return b.Bytes();
}

// A CPU session of a model's bytes (NULL, with a test failure, when it does not load).
cjit_session* CpuSessionFromBytes(const std::string& bytes) {
  cjit_options* o = nullptr;
  EXPECT_TRUE(St(cjit_options_create(&o)).ok());
  EXPECT_TRUE(St(cjit_options_set(o, "device", "cpu")).ok());
  cjit_session* s = nullptr;
  St st(cjit_session_create_from_bytes(bytes.data(), bytes.size(), nullptr, o, &s));
  EXPECT_TRUE(st.ok()) << st.message;
  cjit_options_free(o);
  return s;
}

TEST(CApiTest, SequencesInAndOut) {
  cjit_session* s = CpuSessionFromBytes(SequenceModel());
  ASSERT_NE(s, nullptr);
  cjit_value_kind kind = CJIT_KIND_TENSOR;
  ASSERT_TRUE(St(cjit_session_input_kind(s, 0, &kind)).ok());
  EXPECT_EQ(kind, CJIT_KIND_SEQUENCE);
  ASSERT_TRUE(St(cjit_session_output_kind(s, 1, &kind)).ok());
  EXPECT_EQ(kind, CJIT_KIND_TENSOR);
  St range(cjit_session_input_kind(s, 2, &kind));
  EXPECT_EQ(range.code, CJIT_INVALID_ARGUMENT);

  float a_data[2] = {1, 2}, t_data[3] = {5, 6, 7};
  const int64_t a_dims[1] = {2}, t_dims[1] = {3};
  cjit_value *a = nullptr, *t = nullptr, *seq = nullptr;
  ASSERT_TRUE(St(cjit_value_wrap(CJIT_FLOAT32, a_dims, 1, a_data, sizeof(a_data), &a)).ok());
  ASSERT_TRUE(St(cjit_value_wrap(CJIT_FLOAT32, t_dims, 1, t_data, sizeof(t_data), &t)).ok());
  const cjit_value* items[1] = {a};
  ASSERT_TRUE(St(cjit_value_create_sequence(CJIT_FLOAT32, items, 1, &seq)).ok());
  // A sequence of another dtype than its items: refused (asked while `a`, which items[0] points to, lives).
  cjit_value* bad = nullptr;
  St mixed(cjit_value_create_sequence(CJIT_INT64, items, 1, &bad));
  EXPECT_EQ(mixed.code, CJIT_INVALID_ARGUMENT);
  cjit_value_free(a);  // the sequence shares the tensor; the handle may go
  EXPECT_EQ(cjit_value_get_kind(seq), CJIT_KIND_SEQUENCE);
  EXPECT_EQ(cjit_value_count(seq), 1u);
  EXPECT_EQ(cjit_value_rank(seq), 0u);
  EXPECT_EQ(cjit_value_data(seq), nullptr);

  const char* names[2] = {"seq", "t"};
  const cjit_value* inputs[2] = {seq, t};
  cjit_value* outputs[2] = {nullptr, nullptr};
  ASSERT_TRUE(St(cjit_session_run(s, names, inputs, 2, nullptr, outputs, 2)).ok());
  ASSERT_EQ(cjit_value_get_kind(outputs[0]), CJIT_KIND_SEQUENCE);
  ASSERT_EQ(cjit_value_count(outputs[0]), 2u);
  EXPECT_EQ(*static_cast<int64_t*>(cjit_value_data(outputs[1])), 2);
  cjit_value* second = nullptr;
  ASSERT_TRUE(St(cjit_value_get_element(outputs[0], 1, &second)).ok());
  ASSERT_EQ(cjit_value_rank(second), 1u);
  EXPECT_EQ(cjit_value_dims(second)[0], 3);
  const float* got = static_cast<const float*>(cjit_value_data(second));
  EXPECT_EQ(std::vector<float>(got, got + 3), (std::vector<float>{5, 6, 7}));
  // Outputs are the caller's own: the appended tensor is a copy, not the wrapped input buffer.
  EXPECT_NE(cjit_value_data(second), static_cast<void*>(t_data));
  cjit_value* past = nullptr;
  EXPECT_EQ(St(cjit_value_get_element(outputs[0], 2, &past)).code, CJIT_OUT_OF_RANGE);
  EXPECT_EQ(St(cjit_value_get_element(t, 0, &past)).code, CJIT_INVALID_ARGUMENT);
  cjit_value_free(second);
  for (cjit_value*& v : outputs) cjit_value_free(v);

  // A tensor where the model wants a sequence, and a bound sequence output: errors naming them.
  const cjit_value* swapped[2] = {t, t};
  cjit_value* outs2[2] = {nullptr, nullptr};
  St wrong(cjit_session_run(s, names, swapped, 2, nullptr, outs2, 2));
  EXPECT_EQ(wrong.code, CJIT_INVALID_ARGUMENT);
  EXPECT_NE(wrong.message.find("input 'seq' is a tensor, the model expects a sequence"), std::string::npos)
      << wrong.message;
  cjit_value* bound = nullptr;
  ASSERT_TRUE(St(cjit_value_create(CJIT_FLOAT32, t_dims, 1, &bound)).ok());
  cjit_value* outs3[2] = {bound, nullptr};
  St bound_seq(cjit_session_run(s, names, inputs, 2, nullptr, outs3, 2));
  EXPECT_EQ(bound_seq.code, CJIT_INVALID_ARGUMENT);
  EXPECT_NE(bound_seq.message.find("only tensor outputs can be bound"), std::string::npos) << bound_seq.message;
  cjit_value_free(bound);

  // Optionals: empty and present, through the C++ wrapper.
  cjit::Value none = cjit::Value::Optional(CJIT_KIND_OPTIONAL_TENSOR, CJIT_FLOAT32, nullptr);
  EXPECT_EQ(none.kind(), CJIT_KIND_OPTIONAL_TENSOR);
  EXPECT_EQ(none.count(), 0u);
  cjit::Value elem = cjit::Value::Create(CJIT_FLOAT32, {2});
  cjit::Value some = cjit::Value::Optional(CJIT_KIND_OPTIONAL_TENSOR, CJIT_FLOAT32, &elem);
  EXPECT_EQ(some.count(), 1u);
  EXPECT_EQ(some.Element(0).dims(), (std::vector<int64_t>{2}));
  EXPECT_THROW(cjit::Value::Optional(CJIT_KIND_OPTIONAL_SEQUENCE, CJIT_FLOAT32, &elem), cjit::Error);
  cjit::Value wrapped_seq = cjit::Value::Sequence(CJIT_FLOAT32, {&elem, &elem});
  EXPECT_EQ(wrapped_seq.count(), 2u);

  cjit_value_free(seq);
  cjit_value_free(t);
  cjit_session_free(s);
}

}  // namespace

namespace {

TEST(CApiTest, StringTensorsInAndOut) {
  cjit::testing::ModelBuilder b(20);
  b.Input("x", onnx::TensorProto::STRING, {-1}).Input("y", onnx::TensorProto::STRING, {1});
  b.Node("StringConcat", {"x", "y"}, {"z"});
  b.Output("z");
  cjit_session* s = CpuSessionFromBytes(b.Bytes());
  ASSERT_NE(s, nullptr);
  int32_t dtype = 0;
  int64_t rank = 0;
  ASSERT_TRUE(St(cjit_session_input_info(s, 0, &dtype, nullptr, 0, &rank)).ok());
  EXPECT_EQ(dtype, CJIT_STRING);

  const char* words[2] = {"ab", "c"};
  const int64_t dims[1] = {2}, one[1] = {1};
  const char suffix_bytes[3] = {'!', '\0', '?'};  // an embedded NUL: lengths given
  const char* suffix[1] = {suffix_bytes};
  const size_t suffix_len[1] = {3};
  cjit_value *x = nullptr, *y = nullptr;
  ASSERT_TRUE(St(cjit_value_create_strings(dims, 1, words, nullptr, &x)).ok());
  ASSERT_TRUE(St(cjit_value_create_strings(one, 1, suffix, suffix_len, &y)).ok());
  EXPECT_EQ(cjit_value_data(x), nullptr);
  EXPECT_EQ(cjit_value_bytes(x), 0u);
  const char* names[2] = {"x", "y"};
  const cjit_value* inputs[2] = {x, y};
  cjit_value* out[1] = {nullptr};
  ASSERT_TRUE(St(cjit_session_run(s, names, inputs, 2, nullptr, out, 1)).ok());
  ASSERT_EQ(cjit_value_dtype(out[0]), CJIT_STRING);
  const char* p = nullptr;
  size_t len = 0;
  ASSERT_TRUE(St(cjit_value_get_string(out[0], 0, &p, &len)).ok());
  EXPECT_EQ(std::string(p, len), std::string("ab!\0?", 5));
  ASSERT_TRUE(St(cjit_value_get_string(out[0], 1, &p, &len)).ok());
  EXPECT_EQ(std::string(p, len), std::string("c!\0?", 4));
  EXPECT_EQ(St(cjit_value_get_string(out[0], 2, &p, &len)).code, CJIT_OUT_OF_RANGE);
  cjit_value_free(out[0]);

  // Strings cannot wrap a buffer or be bound; a number tensor has no strings.
  char raw[64] = {};
  cjit_value* w = nullptr;
  St wrap(cjit_value_wrap(CJIT_STRING, one, 1, raw, 32, &w));
  EXPECT_EQ(wrap.code, CJIT_INVALID_ARGUMENT);
  EXPECT_NE(wrap.message.find("cjit_value_create_strings"), std::string::npos) << wrap.message;
  cjit_value* bound[1] = {x};
  St bound_st(cjit_session_run(s, names, inputs, 2, nullptr, bound, 1));
  EXPECT_EQ(bound_st.code, CJIT_INVALID_ARGUMENT);
  EXPECT_NE(bound_st.message.find("string outputs cannot be bound"), std::string::npos) << bound_st.message;
  cjit_value* f = nullptr;
  ASSERT_TRUE(St(cjit_value_create(CJIT_FLOAT32, one, 1, &f)).ok());
  EXPECT_EQ(St(cjit_value_get_string(f, 0, &p, &len)).code, CJIT_INVALID_ARGUMENT);
  cjit_value_free(f);
  cjit_value_free(x);
  cjit_value_free(y);
  cjit_session_free(s);
}

}  // namespace
