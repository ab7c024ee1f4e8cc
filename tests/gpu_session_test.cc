// Whole models through a GPU session — the graph a GPU session builds (no CPU-only rewrites), placed by the
// GPU executor — on the host emulation (CI) and on a GPU when there is one, against a CPU session: the model
// classes that torch.onnx exports (written by tools/make_*.py: a BERT-style encoder with an attention mask, a
// GPT-2-style decode step with embedding lookups, a diffusion UNet with GroupNorm and ConvTranspose) must run
// with no op on the host, as one CUDA graph from their second run, with the CPU's outputs.
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/cuda/device_backend.h"
#include "runtime/session.h"
#include "tests/gpu_test_util.h"
#include "tools/check_lib.h"

namespace cjit {
namespace {

namespace fs = std::filesystem;

struct ModelCase {
  std::string name;
  std::string script_and_args;  // tools/<script> OUT args...
  // name -> dims; integer inputs take values in [0, int_max).
  std::vector<std::pair<std::string, Dims>> inputs;
  int64_t int_max = 1;
};

std::vector<ModelCase> Cases() {
  return {
      {"bert", "make_transformer.py {} 2 64 2 128 500", {{"input_ids", {2, 16}}, {"attention_mask", {2, 16}}}, 2},
      {"gpt_step",
       "make_gpt.py {}",
       {{"input_ids", {1, 1}}, {"position_ids", {1, 1}}},
       // past_key_L / past_value_L are added from the session's inputs below.
       100},
      {"unet", "make_unet.py {} 8", {{"images", {1, 3, 32, 32}}}, 1},
  };
}

// The model of `c` in the test's temporary directory (written once per process).
absl::StatusOr<std::string> WriteModel(const ModelCase& c) {
  const std::string path = ::testing::TempDir() + "/cjit_gpu_session_" + c.name + ".onnx";
  if (fs::exists(path)) return path;
  std::string args = c.script_and_args;
  args.replace(args.find("{}"), 2, path);
  const std::string cmd = absl::StrCat("cd ", CJIT_SOURCE_DIR, "/tools && /usr/bin/python3 ", args, " > /dev/null");
  if (std::system(cmd.c_str()) != 0) return absl::InternalError(absl::StrCat("failed: ", cmd));
  return path;
}

std::vector<NamedTensor> Inputs(const ModelCase& c, const Session& s, std::mt19937& rng) {
  std::vector<NamedTensor> out;
  for (const TensorInfo& info : s.inputs()) {
    Dims dims;
    for (const auto& [name, d] : c.inputs)
      if (name == info.name) dims = d;
    if (dims.empty()) dims = {1, 4, 7, 64};  // a decode step's past keys and values: 7 positions
    Tensor t(info.dtype, dims);
    if (info.dtype == DType::kI64) {
      std::uniform_int_distribution<int64_t> u(0, c.int_max - 1);
      for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = u(rng);
      if (info.name == "attention_mask") t.data<int64_t>()[t.numel() - 1] = 0;  // a padded position
      if (info.name == "position_ids") t.data<int64_t>()[0] = 7;
    } else {
      std::uniform_real_distribution<float> u(-1, 1);
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
    }
    out.push_back({info.name, std::move(t)});
  }
  return out;
}

class GpuSessionModels : public ::testing::TestWithParam<std::tuple<std::string, ModelCase>> {};

TEST_P(GpuSessionModels, RunFullyOnTheDeviceAndMatchTheCpu) {
  const auto& [backend_name, c] = GetParam();
  CJIT_GET_BACKEND(backend, backend_name);
  auto path = WriteModel(c);
  ASSERT_TRUE(path.ok()) << path.status();
  SessionOptions cpu;
  cpu.use_environment_flags = false;
  cpu.flags.device = "cpu";
  auto ref = Session::Load(*path, cpu);
  ASSERT_TRUE(ref.ok()) << ref.status();
  SessionOptions gpu;
  gpu.use_environment_flags = false;
  gpu.flags.device = "cuda";
  if (backend_name == "host") gpu.device_backend = backend;
  auto s = Session::Load(*path, gpu);
  ASSERT_TRUE(s.ok()) << s.status();
  std::mt19937 rng(17);
  for (int run = 0; run < 3; ++run) {
    std::vector<NamedTensor> in = Inputs(c, **s, rng);
    auto want = (*ref)->Run(in);
    ASSERT_TRUE(want.ok()) << want.status();
    auto got = (*s)->Run(in);
    ASSERT_TRUE(got.ok()) << "run " << run << ": " << got.status();
    ASSERT_EQ(got->size(), want->size());
    for (size_t i = 0; i < got->size(); ++i) {
      OutputComparison cmp = CompareTensors((*want)[i].name, (*got)[i].tensor, (*want)[i].tensor, 1e-3, 1e-4);
      EXPECT_TRUE(cmp.ok) << c.name << " run " << run << " " << cmp.name << ": " << cmp.problem << " max_abs "
                          << cmp.max_abs;
    }
  }
  std::vector<std::string> placement = (*s)->GpuPlacements();
  ASSERT_FALSE(placement.empty());
  std::printf("%s: %s\n", c.name.c_str(), placement[0].c_str());
  EXPECT_TRUE(absl::StrContains(placement[0], " 0 host ops")) << placement[0];
  EXPECT_TRUE(absl::StrContains(placement[0], "CUDA graph of")) << placement[0];
}

INSTANTIATE_TEST_SUITE_P(Exported, GpuSessionModels,
                         ::testing::Combine(::testing::Values("host", "cuda"), ::testing::ValuesIn(Cases())),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, ModelCase>>& i) {
                           return std::get<0>(i.param) + "_" + std::get<1>(i.param).name;
                         });

}  // namespace
}  // namespace cjit
