// The pass pipeline (compiler/passes/pipeline.h): IR-in / CHECK-out tests of every pass
// (compiler/passes/testdata/*.ir, one test each), the CHECK matcher itself (tests/ir_check.h), and the
// runner's contract (disabled passes, verification naming the pass, flag validation, dumps).
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/strip.h"
#include "compiler/ir/text.h"
#include "compiler/passes/pipeline.h"
#include "gtest/gtest.h"
#include "runtime/session.h"
#include "tests/ir_check.h"
#include "tests/test_data.h"

namespace cjit {
namespace {

namespace fs = std::filesystem;
using testing::MatchChecks;
using testing::RunIrTestFile;
using testing::RunPassAndCheck;

std::string TestdataDir() { return std::string(CJIT_SOURCE_DIR) + "/compiler/passes/testdata"; }

std::vector<std::string> IrFiles() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(TestdataDir())) {
    if (e.path().extension() == ".ir") out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

class PassIrTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PassIrTest, MatchesChecks) {
  std::string printed;
  absl::Status st = RunIrTestFile(TestdataDir() + "/" + GetParam(), &printed);
  EXPECT_TRUE(st.ok()) << st.message();
}

INSTANTIATE_TEST_SUITE_P(Testdata, PassIrTest, ::testing::ValuesIn(IrFiles()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param.substr(0, info.param.size() - 3);
                           for (char& c : n) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

TEST(PassIrTest, EveryPipelinePassHasATestFile) {
  std::set<std::string> tested;
  for (const std::string& f : IrFiles()) {
    std::ifstream in(TestdataDir() + "/" + f);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("# RUN:", 0) != 0) continue;
      std::stringstream ss(line.substr(6));
      std::string p;
      while (std::getline(ss, p, ',')) tested.insert(std::string(absl::StripAsciiWhitespace(p)));
    }
  }
  EXPECT_GE(IrFiles().size(), 30u);
  for (const std::string& p : PassNames()) {
    if (p == "fold_pad_into_conv_channels_last") continue;  // fold_pad_into_conv's function, run again
    EXPECT_TRUE(tested.count(p)) << "no IR test runs pass " << p;
  }
}

// ---- the CHECK matcher ----

constexpr char kOutput[] = R"(graph g(%x: f32[2]) {
  %a: f32[2] = Relu(%x)
  %b: f32[2] = Tanh(%a)
  return %b
})";

TEST(CheckMatcherTest, Directives) {
  EXPECT_TRUE(MatchChecks(kOutput, "CHECK: Relu\nCHECK-NEXT: Tanh(%a)\nCHECK-NEXT: return %b").ok());
  EXPECT_TRUE(MatchChecks(kOutput, "# CHECK: %a: f32[2]\n# CHECK-SAME: = Relu(%x)").ok());
  EXPECT_TRUE(MatchChecks(kOutput, "// CHECK: graph\n// CHECK-NOT: Sigmoid\n// CHECK: return").ok());
  EXPECT_TRUE(MatchChecks(kOutput, "CHECK: Tanh\nCHECK-NOT: Relu").ok());  // only after the match
  EXPECT_FALSE(MatchChecks(kOutput, "CHECK: graph\nCHECK-NOT: Tanh\nCHECK: return").ok());
  EXPECT_FALSE(MatchChecks(kOutput, "CHECK: Tanh\nCHECK: Relu").ok());  // order matters
  EXPECT_FALSE(MatchChecks(kOutput, "CHECK: Relu\nCHECK-NEXT: return").ok());
  EXPECT_FALSE(MatchChecks(kOutput, "CHECK: = Relu\nCHECK-SAME: %a").ok());  // same line, after the match
  EXPECT_FALSE(MatchChecks(kOutput, "no directives here").ok());
}

TEST(CheckMatcherTest, FailurePointsAtTheCheckLine) {
  absl::Status st = MatchChecks(kOutput, "CHECK: Relu\n\nCHECK-NEXT: Sigmoid", "t.ir");
  ASSERT_FALSE(st.ok());
  const std::string m(st.message());
  EXPECT_NE(m.find("t.ir:3: error: CHECK-NEXT: expected string not found on the next line"), std::string::npos) << m;
  EXPECT_NE(m.find("pattern: Sigmoid"), std::string::npos) << m;
  EXPECT_NE(m.find("after output line 2:   %a: f32[2] = Relu(%x)"), std::string::npos) << m;
  st = MatchChecks(kOutput, "CHECK: graph\nCHECK-NOT: Tanh\nCHECK: return", "u.ir");
  EXPECT_NE(std::string(st.message()).find("u.ir:2: error: CHECK-NOT: excluded string found"), std::string::npos)
      << st.message();
}

TEST(CheckMatcherTest, RunPassAndCheckWithoutChecksMeansUnchanged) {
  const char* ir = "graph g(%x: f32[2]) {\n  %a: f32[2] = Identity(%x)\n  return %a\n}\n";
  absl::Status st = RunPassAndCheck(ir, {"simplify"}, "", "", "identity");
  // The Identity is the graph's output: simplify keeps the output value, so the text may change; either
  // the pass leaves it, or the no-change rule reports the difference naming the test.
  if (!st.ok()) EXPECT_NE(std::string(st.message()).find("identity: expected no change"), std::string::npos);
  EXPECT_FALSE(RunPassAndCheck(ir, {"no_such_pass"}, "CHECK: x").ok());
}

// ---- the runner ----

TEST(PipelineTest, VerificationFailureNamesThePass) {
  auto g = ParseGraph("graph g(%x: f32[2]) {\n  %a: f32[2] = Relu(%x)\n  return %a\n}\n");
  ASSERT_TRUE(g.ok());
  Pass broken{"break_the_graph", "test", false, [](const PassContext&) { return true; },
              [](Graph& graph, PassContext&) -> absl::StatusOr<bool> {
                Node* relu = graph.nodes()[0].get();
                relu->inputs[0] = graph.AddValue("dangling", DType::kF32);  // read but never produced
                return true;
              }};
  Flags flags;
  PassContext ctx;
  ctx.flags = &flags;
  auto ran = RunPasses(**g, {&broken}, ctx);
  ASSERT_FALSE(ran.ok());
  EXPECT_NE(std::string(ran.status().message()).find("after pass break_the_graph"), std::string::npos)
      << ran.status();
}

TEST(PipelineTest, DisabledAndInapplicablePassesAreSkipped) {
  auto g = ParseGraph("graph g(%x: f32[2]) {\n  %a: f32[2] = Identity(%x)\n  %b: f32[2] = Relu(%a)\n  return %b\n}\n");
  ASSERT_TRUE(g.ok());
  auto flags = ParseFlags("--disable_passes=simplify");
  ASSERT_TRUE(flags.ok()) << flags.status();
  PassContext ctx;
  ctx.flags = &*flags;
  ctx.clustering.mode = ClusteringMode::kOff;
  auto ran = RunSpecializationPipeline(**g, ctx);
  ASSERT_TRUE(ran.ok()) << ran.status();
  const std::set<std::string> names(ran->begin(), ran->end());
  EXPECT_FALSE(names.count("simplify"));              // disabled
  EXPECT_FALSE(names.count("mark_for_compilation"));  // clustering off
  EXPECT_FALSE(names.count("auto_mixed_precision"));  // --auto_mixed_precision=off
  EXPECT_TRUE(names.count("fold_pad_into_conv"));     // a CPU pass
  EXPECT_NE(PrintGraph(**g).find("Identity"), std::string::npos);  // simplify did not run
}

TEST(PipelineTest, PassListFlagsAreCheckedAtLoad) {
  CJIT_REQUIRE_DATA(testing::ModelPath("oww_hello_deepa"));
  SessionOptions o;
  o.use_environment_flags = false;
  auto flags = ParseFlags("--disable_passes=simplfy");
  ASSERT_TRUE(flags.ok()) << flags.status();
  o.flags = *flags;
  auto s = Session::Load(testing::ModelPath("oww_hello_deepa"), o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find("did you mean 'simplify'"), std::string::npos) << s.status();
  o.flags = *ParseFlags("--dump_after=simplify");
  s = Session::Load(testing::ModelPath("oww_hello_deepa"), o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find("--dump_after needs --dump_to"), std::string::npos) << s.status();
}

TEST(PipelineTest, DisablingSimplifyKeepsResultsAndDumpAfterWritesTheIr) {
  const std::string model = testing::ModelPath("ppocr_mobile_cls");
  CJIT_REQUIRE_DATA(model);
  const std::string dir = ::testing::TempDir() + "/pipeline-dump";
  fs::remove_all(dir);
  SessionOptions o;
  o.use_environment_flags = false;
  o.flags = *ParseFlags(
      "--device=cpu --auto_jit=-1 --dump_pass_re=^$ --dump_after=simplify,fold_pad_into_conv --dump_to=" + dir);
  auto dumped = Session::Load(model, o);
  ASSERT_TRUE(dumped.ok()) << dumped.status();
  o.flags = *ParseFlags("--device=cpu --auto_jit=-1 --disable_passes=simplify,fold_pad_into_conv");
  auto plain = Session::Load(model, o);
  ASSERT_TRUE(plain.ok()) << plain.status();
  Tensor x(DType::kF32, {1, 3, 48, 192});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>((i * 7919) % 255) / 255.0f;
  auto a = (*dumped)->Run({{"x", x}});
  auto b = (*plain)->Run({{"x", x}});
  ASSERT_TRUE(a.ok() && b.ok());
  const float* pa = (*a)[0].tensor.data<float>();
  const float* pb = (*b)[0].tensor.data<float>();
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(pa[i], pb[i], 1e-5);
  std::set<std::string> after;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string f = e.path().filename().string();
    if (f.find(".after_") != std::string::npos) after.insert(f.substr(f.find(".after_") + 7));
  }
  EXPECT_TRUE(after.count("simplify.txt")) << "files: " << after.size();
  EXPECT_TRUE(after.count("fold_pad_into_conv.txt"));
  EXPECT_FALSE(after.count("mark_for_compilation.txt"));  // neither --dump_after nor --dump_pass_re
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cjit
