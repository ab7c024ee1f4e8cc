// Real models in ../shared/models against their ONNX Runtime reference outputs (rtol 1e-3, atol 1e-4).
#include <filesystem>

#include "gtest/gtest.h"
#include "tools/check_lib.h"

namespace cjit {
namespace {

namespace fs = std::filesystem;

class SharedModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SharedModelTest, MatchesReference) {
  fs::path dir = fs::path(CJIT_SOURCE_DIR) / ".." / "shared" / "models" / GetParam();
  if (!fs::exists(dir / "model.onnx")) GTEST_SKIP() << dir << " is absent (../shared not checked out)";
  SessionOptions o;
  o.use_environment_flags = false;
  o.flags.intra_op_threads = 2;
  auto session = Session::Load((dir / "model.onnx").string(), o);
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

INSTANTIATE_TEST_SUITE_P(All, SharedModelTest,
                         ::testing::Values("ppocrv4_rec", "ppocr_mobile_cls", "silero_vad_v5",
                                           "oww_melspectrogram", "oww_hello_deepa"));

}  // namespace
}  // namespace cjit
