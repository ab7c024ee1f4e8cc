// NVTX ranges (--enable_nvtx_ranges) reach a profiler's injection library: run with
// NVTX_INJECTION64_PATH naming tests/fake_nvtx (a test double of Nsight's injection library), the ranges
// pushed are the trace event names, balanced by pops. clusterjit links no NVTX library: the headers are
// all there is, and NVTX loads the injection only because the environment names it.
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/profiler.h"
#include "runtime/session.h"
#include "tests/test_data.h"
#include "tools/check_lib.h"

namespace cjit {
namespace {

std::vector<std::string> InjectedRanges() {
  const char* path = std::getenv("NVTX_INJECTION64_PATH");
  if (path == nullptr) return {};
  void* h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return {};
  using Fn = std::vector<std::string>* (*)();
  auto fn = reinterpret_cast<Fn>(dlsym(h, "FakeNvtxRanges"));
  if (fn == nullptr) return {};
  std::unique_ptr<std::vector<std::string>> r(fn());
  return *r;
}

TEST(NvtxTest, RangesMatchTraceEvents) {
  ASSERT_TRUE(NvtxAvailable()) << "this build has no NVTX headers";
  ASSERT_NE(std::getenv("NVTX_INJECTION64_PATH"), nullptr) << "run through ctest (sets NVTX_INJECTION64_PATH)";
  std::string model = testing::ModelPath("ppocr_mobile_cls");
  CJIT_REQUIRE_DATA(model);
  SessionOptions o;
  o.use_environment_flags = false;
  o.flags.device = "cpu";
  o.flags.intra_op_threads = 1;
  o.flags.enable_nvtx_ranges = true;
  o.flags.compile_threshold = 1;
  o.flags.async_compilation = Flags::AsyncCompilation::kFalse;  // the compile at a fixed run
  o.flags.cpu_codegen_single_ops = true;  // cluster_0's kernels are single ops: compiled, not library steps
  o.profile = true;  // also record trace events, to compare names
  auto s = Session::Load(model, o);
  ASSERT_TRUE(s.ok()) << s.status();
  Tensor x = Tensor::Zeros(DType::kF32, {1, 3, 48, 192});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*s)->Run({{"x", x}}).ok());
  std::vector<std::string> ranges = InjectedRanges();
  ASSERT_FALSE(ranges.empty()) << "the injection library saw no range (was it loaded?)";
  std::map<std::string, int> pushed;
  int depth = 0, pops = 0;
  for (const std::string& r : ranges) {
    if (r == "pop") {
      ++pops;
      --depth;
      ASSERT_GE(depth, 0) << "pop without push";
    } else {
      ++depth;
      ++pushed[r.substr(5)];
    }
  }
  EXPECT_EQ(depth, 0);
  // Every complete event of the trace was one range with the same name.
  std::map<std::string, int> events;
  for (const TraceEvent& e : (*s)->profiler()->Events()) {
    if (e.ph == 'X') ++events[e.name];
  }
  for (const char* n : {"Run", "specialize", "cluster_0", "NhwcConv", "fusion_0", "compile cluster_0"}) {
    EXPECT_GT(pushed[n], 0) << "no NVTX range '" << n << "'";
  }
  // Phases reported by the compiler are recorded as events without a range; everything else matches.
  for (const auto& [name, n] : pushed) EXPECT_EQ(events[name], n) << name;
}

}  // namespace
}  // namespace cjit
