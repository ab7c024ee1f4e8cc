// Real models (../shared/models) against their ONNX Runtime reference outputs, every output element within
// |out - ref| <= 1e-6 + 1e-3 * |ref|. Measured noise (docs/testing.md): at most 5.7e-5 absolute where the
// reference is large (ppocrv4_rec, data set 2), at most 3.4e-6 absolute on silero's state; every output
// passes with margin in all three modes. The tolerance has teeth: each test also checks that an all-zero
// output and one with a single element off by 1% of the output's range would fail.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "gtest/gtest.h"
#include "tests/test_data.h"
#include "tools/check_lib.h"

namespace cjit {
namespace {

namespace fs = std::filesystem;

constexpr double kRtol = 1e-3, kAtol = 1e-6;

// (model, CJIT_FLAGS): the fallback path, every cluster compiled, and XLA-Lite clustering compiled.
class SharedModelTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(SharedModelTest, MatchesReference) {
  fs::path dir = fs::path(testing::ModelsDir()) / std::get<0>(GetParam());
  CJIT_REQUIRE_DATA(dir / "model.onnx");
  // The CPU path under test, also on a machine with a GPU.
  auto session = LoadSessionWithFlags((dir / "model.onnx").string(), "--device=cpu " + std::get<1>(GetParam()), 2);
  ASSERT_TRUE(session.ok()) << session.status();
  auto sets = ReadDataSets(dir.string(), **session);
  ASSERT_TRUE(sets.ok()) << sets.status();
  ASSERT_FALSE(sets->empty());
  for (const DataSet& set : *sets) {
    DataSetResult r = RunDataSet(**session, set, kRtol, kAtol);
    ASSERT_TRUE(r.status.ok()) << set.dir << ": " << r.status;
    for (const auto& o : r.outputs) {
      EXPECT_TRUE(o.ok) << set.dir << " " << o.name << " " << o.problem << " max_abs " << o.max_abs << " max_rel "
                        << o.max_rel;
    }
    // The comparison would catch wrong numbers: zeros, and one element moved by 1% of the range.
    for (const NamedTensor& ref : set.outputs) {
      if (ref.tensor.dtype() != DType::kF32 || ref.tensor.numel() == 0) continue;
      Tensor zeros = Tensor::Zeros(DType::kF32, ref.tensor.dims());
      EXPECT_FALSE(CompareTensors(ref.name, zeros, ref.tensor, kRtol, kAtol).ok) << set.dir << " " << ref.name;
      Tensor nudged = ref.tensor.Clone();
      float* p = nudged.data<float>();
      float lo = p[0], hi = p[0];
      int64_t at = 0;
      for (int64_t i = 0; i < nudged.numel(); ++i) {
        lo = std::min(lo, p[i]);
        hi = std::max(hi, p[i]);
        if (std::abs(p[i]) > std::abs(p[at])) at = i;
      }
      p[at] += 0.01f * std::max({hi - lo, std::abs(p[at]), 1e-3f});
      EXPECT_FALSE(CompareTensors(ref.name, nudged, ref.tensor, kRtol, kAtol).ok) << set.dir << " " << ref.name;
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
      std::string mode = f.find("fusible") != std::string::npos ? "fusible"
                         : f.find("-1") != std::string::npos    ? "fallback"
                                                                : "compiled";
      return std::get<0>(i.param) + "_" + mode;
    });

}  // namespace
}  // namespace cjit
