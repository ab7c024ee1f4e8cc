// Real models in ../shared/models against their ONNX Runtime reference outputs (rtol 1e-3, atol 1e-4).
#include <filesystem>

#include "gtest/gtest.h"
#include "tools/check_lib.h"

namespace cjit {
namespace {

namespace fs = std::filesystem;

// (model, CJIT_FLAGS): the fallback path, every cluster compiled, and XLA-Lite clustering compiled.
class SharedModelTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(SharedModelTest, MatchesReference) {
  fs::path dir = fs::path(CJIT_SOURCE_DIR) / ".." / "shared" / "models" / std::get<0>(GetParam());
  if (!fs::exists(dir / "model.onnx")) GTEST_SKIP() << dir << " is absent (../shared not checked out)";
  // The CPU path under test, also on a machine with a GPU.
  auto session = LoadSessionWithFlags((dir / "model.onnx").string(), "--device=cpu " + std::get<1>(GetParam()), 2);
  ASSERT_TRUE(session.ok()) << session.status();
  auto sets = ReadDataSets(dir.string(), **session);
  ASSERT_TRUE(sets.ok()) << sets.status();
  ASSERT_FALSE(sets->empty());
  for (const DataSet& set : *sets) {
    DataSetResult r = RunDataSet(**session, set, 1e-3, 1e-4);
    ASSERT_TRUE(r.status.ok()) << set.dir << ": " << r.status;
    for (const auto& o : r.outputs) {
      EXPECT_TRUE(o.ok) << set.dir << " " << o.name << " " << o.problem << " max_abs " << o.max_abs;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, SharedModelTest,
    ::testing::Combine(::testing::Values("ppocrv4_rec", "ppocr_mobile_cls", "silero_vad_v5", "oww_melspectrogram",
                                         "oww_hello_deepa"),
                       ::testing::Values("--auto_jit=-1", "--auto_jit=1 --enable_lazy_compilation=false",
                                         "--auto_jit=fusible --enable_lazy_compilation=false")),
    [](const ::testing::TestParamInfo<std::tuple<std::string, std::string>>& i) {
      std::string f = std::get<1>(i.param);
      std::string mode = f.find("fusible") != std::string::npos ? "fusible" : f.find("-1") != std::string::npos ? "fallback" : "compiled";
      return std::get<0>(i.param) + "_" + mode;
    });

}  // namespace
}  // namespace cjit
