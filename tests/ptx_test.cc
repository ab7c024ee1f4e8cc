// NVPTX code generation without a GPU: for every cluster of every shared model, the PTX for sm_80 and
// sm_90 is accepted by CUDA's ptxas (skipped with a message when ptxas or the models are absent).
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "compiler/codegen/fusion_plan.h"
#include "compiler/codegen/nvptx_compiler.h"
#include "compiler/passes/mark_for_compilation.h"
#include "tests/op_cases.h"
#include "gtest/gtest.h"
#include "tests/test_data.h"
#include "runtime/session.h"
#include "tools/check_lib.h"

namespace cjit {
namespace {

namespace fs = std::filesystem;
constexpr char kPtxas[] = "/usr/local/cuda/bin/ptxas";

class PtxTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(PtxTest, EveryClusterAssembles) {
  #if CJIT_HAVE_CUDA
  CJIT_REQUIRE_DATA(kPtxas);  // built with the CUDA toolkit: ptxas must be there
#else
  if (!fs::exists(kPtxas)) GTEST_SKIP() << kPtxas << " is absent (built without the CUDA toolkit)";
#endif
  const auto& [model, arch] = GetParam();
  fs::path dir = fs::path(testing::ModelsDir()) / model;
  CJIT_REQUIRE_DATA(dir / "model.onnx");
  SessionOptions o;
  o.flags.device = "cpu";  // the CPU path under test, also on a machine with a GPU
  o.use_environment_flags = false;
  // Every clusterable op in a cluster, however small, so that every model has fused kernels to assemble.
  o.flags.auto_jit = "1";
  o.flags.min_cluster_size = 1;
  auto s = Session::Load((dir / "model.onnx").string(), o);
  ASSERT_TRUE(s.ok()) << s.status();
  auto sets = ReadDataSets(dir.string(), **s);
  ASSERT_TRUE(sets.ok());
  auto g = (*s)->SpecializeAndCluster((*sets)[0].inputs, nullptr);
  ASSERT_TRUE(g.ok()) << g.status();
  int clusters = 0;
  for (const auto& node : (*g)->nodes()) {
    if (node->op_type != kClusterOp) continue;
    FusionPlanOptions gpu;  // as the GPU runtime plans clusters: Conv epilogues stay fused kernels
    gpu.conv_post_ops = false;
    auto plan = BuildFusionPlan(*node->GetGraph("body"), gpu);
    ASSERT_TRUE(plan.ok()) << plan.status();
    PtxOptions po;
    po.gpu_arch = arch;
    auto ptx = CompileForNvptx(*plan, po);
    ASSERT_TRUE(ptx.ok()) << ptx.status();
    if (ptx->kernels.empty()) continue;
    std::string path = ::testing::TempDir() + "/cjit_" + model + "_" + std::to_string(clusters) + "_" + arch + ".ptx";
    {
      std::ofstream f(path);
      f << ptx->ptx;
    }
    std::string cmd = std::string(kPtxas) + " -arch=" + arch + " " + path + " -o /dev/null";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << "ptxas rejected " << path;
    ++clusters;
  }
  EXPECT_GT(clusters, 0) << "no cluster of " << model << " produced PTX: the test assembled nothing";
}

INSTANTIATE_TEST_SUITE_P(
    SharedModels, PtxTest,
    ::testing::Combine(::testing::Values("ppocrv4_rec", "ppocr_mobile_cls", "silero_vad_v5", "oww_melspectrogram",
                                         "oww_hello_deepa"),
                       ::testing::Values("sm_80", "sm_90")),
    [](const ::testing::TestParamInfo<std::tuple<std::string, std::string>>& i) {
      return std::get<0>(i.param) + "_" + std::get<1>(i.param);
    });

// Every op-suite case that forms fused kernels (float32, float16, bfloat16 loads/stores, Cast, row
// kernels, views) assembles for the oldest and newest targets.
class PtxOpSuiteTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PtxOpSuiteTest, EveryCaseAssembles) {
  #if CJIT_HAVE_CUDA
  CJIT_REQUIRE_DATA(kPtxas);  // built with the CUDA toolkit: ptxas must be there
#else
  if (!fs::exists(kPtxas)) GTEST_SKIP() << kPtxas << " is absent (built without the CUDA toolkit)";
#endif
  const std::string arch = GetParam();
  int assembled = 0;
  for (const OpCase& c : OpSuiteCases()) {
    auto parsed = SpecializedGraphFromText(c.ir);
    ASSERT_TRUE(parsed.ok()) << c.name << ": " << parsed.status();
    Graph& g = **parsed;
    FusionPlanOptions gpu;
    gpu.conv_post_ops = false;
    auto plan = BuildFusionPlan(g, gpu);
    ASSERT_TRUE(plan.ok()) << c.name << ": " << plan.status();
    if (plan->kernels.empty()) continue;
    PtxOptions po;
    po.gpu_arch = arch;
    auto ptx = CompileForNvptx(*plan, po);
    ASSERT_TRUE(ptx.ok()) << c.name << ": " << ptx.status();
    std::string path = ::testing::TempDir() + "/cjit_case_" + c.name + "_" + arch + ".ptx";
    {
      std::ofstream f(path);
      f << ptx->ptx;
    }
    std::string cmd = std::string(kPtxas) + " -arch=" + arch + " " + path + " -o /dev/null";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << "ptxas rejected " << path << " (" << c.name << ")";
    ++assembled;
  }
  EXPECT_GT(assembled, 50);
}

INSTANTIATE_TEST_SUITE_P(Targets, PtxOpSuiteTest, ::testing::Values("sm_75", "sm_90"));

// The gather kernels (every element unit) assemble for the oldest and newest targets.
TEST_P(PtxOpSuiteTest, GatherKernelsAssemble) {
#if CJIT_HAVE_CUDA
  CJIT_REQUIRE_DATA(kPtxas);
#else
  if (!fs::exists(kPtxas)) GTEST_SKIP() << kPtxas << " is absent (built without the CUDA toolkit)";
#endif
  const std::string arch = GetParam();
  auto ptx = GatherKernelsPtx(arch);
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  for (int bytes : {1, 2, 4, 8, 16}) {
    EXPECT_NE(ptx->find(std::string(".entry ") + kGatherKernelPrefix + std::to_string(bytes)), std::string::npos)
        << bytes;
  }
  std::string path = ::testing::TempDir() + "/cjit_gather_" + arch + ".ptx";
  {
    std::ofstream f(path);
    f << *ptx;
  }
  std::string cmd = std::string(kPtxas) + " -arch=" + arch + " " + path + " -o /dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << "ptxas rejected " << path;
}

TEST(PtxOptionsTest, UnknownArchIsAClearError) {
  FusionPlan empty;
  PtxOptions po;
  po.gpu_arch = "sm_61";
  auto r = CompileForNvptx(empty, po);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unsupported GPU target 'sm_61'"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace cjit
