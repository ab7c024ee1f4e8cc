// runtime/cuda/ against the fake CUDA driver (tests/fake_cuda/fake_libcuda.cc, found through
// LD_LIBRARY_PATH by this test's ctest entry): everything between clusterjit and the driver that needs no
// kernel to run. Skips when the real or no libcuda.so.1 is loaded.
#include <dlfcn.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include "base/status_macros.h"
#include "gtest/gtest.h"
#include "tests/test_data.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/gpu_executor.h"
#include "runtime/executor.h"
#include "tools/check_lib.h"

namespace cjit {
namespace {

bool FakeDriverLoaded() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (lib == nullptr) return false;
  int (*name)(char*, int, int) = reinterpret_cast<int (*)(char*, int, int)>(dlsym(lib, "cuDeviceGetName"));
  char buf[64] = {0};
  return name && name(buf, sizeof(buf), 0) == 0 && std::strncmp(buf, "cjit fake GPU", 13) == 0;
}

#define REQUIRE_FAKE() \
  if (!FakeDriverLoaded()) GTEST_SKIP() << "the fake libcuda.so.1 is not on LD_LIBRARY_PATH (run through ctest)"

TEST(FakeDriver, ResolvesEveryEntryPointAndDescribesTheDevice) {
  REQUIRE_FAKE();
  auto api = LoadCudaApi();
  ASSERT_TRUE(api.ok()) << api.status();
  EXPECT_EQ((*api)->driver_version, 13000);
  auto dev = CudaDevice::Get(0);
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_EQ((*dev)->name(), "cjit fake GPU 0");
  EXPECT_EQ((*dev)->sm(), "sm_90");
  EXPECT_EQ((*dev)->multiprocessors(), 4);
  auto unknown = (*dev)->Allocator("bfc");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown GPU allocator 'bfc' (caching, cuda_malloc_async)"),
            std::string::npos)
      << unknown.status();
  auto missing = CudaDevice::Get(2);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("CUDA device 2 does not exist (the driver reports 2 device(s))"),
            std::string::npos)
      << missing.status();
}

TEST(FakeDriver, GpuArchMustRunOnTheDevice) {
  REQUIRE_FAKE();
  CudaBackendOptions o;
  o.gpu_arch = "sm_90a";
  auto same = MakeCudaBackend(o);  // device 0 is sm_90
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ((*same)->target(), "sm_90a");
  o.ordinal = 1;  // sm_80
  auto newer = MakeCudaBackend(o);
  ASSERT_FALSE(newer.ok());
  EXPECT_NE(newer.status().message().find("--gpu_arch=sm_90a cannot run on CUDA device 1 (cjit fake GPU 1, sm_80)"),
            std::string::npos)
      << newer.status();
  o.gpu_arch = "sm_75";
  auto older = MakeCudaBackend(o);
  ASSERT_TRUE(older.ok()) << older.status();
  EXPECT_EQ((*older)->target(), "sm_75");
}

TEST(FakeDriver, CopiesFillsAndPitchedCopiesRoundTrip) {
  REQUIRE_FAKE();
  auto dev_or = CudaDevice::Get(0);
  ASSERT_TRUE(dev_or.ok());
  CudaDevice& dev = **dev_or;
  std::vector<float> host(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) * 0.5f;
  auto a = dev.Allocate(host.size() * 4);
  auto b = dev.Allocate(host.size() * 4);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(dev.CopyToDevice((*a)->address(), host.data(), host.size() * 4).ok());
  ASSERT_TRUE(dev.Fill((*b)->address(), 0xFF, host.size() * 4).ok());
  // Rows of 3 floats from a pitch of 40 floats into a pitch of 10 floats (fits the fake's 4096-byte
  // pitch limit), and 2 rows with an 8000-byte pitch (over it: copied row by row).
  ASSERT_TRUE(dev.Copy2D((*b)->address(), 40, (*a)->address(), 160, 12, 20).ok());
  std::vector<float> got(host.size());
  ASSERT_TRUE(dev.CopyToHost(got.data(), (*b)->address(), got.size() * 4).ok());
  for (int r = 0; r < 20; ++r) {
    for (int c = 0; c < 3; ++c) ASSERT_EQ(got[r * 10 + c], host[r * 40 + c]) << r << "," << c;
    for (int c = 3; c < 10; ++c) {
      ASSERT_TRUE(std::isnan(got[r * 10 + c])) << "bytes outside the copied width stay as filled: " << r << "," << c;
    }
  }
  auto wide = dev.Allocate(2100 * 4);
  ASSERT_TRUE(wide.ok());
  ASSERT_TRUE(dev.Copy2D((*wide)->address(), 8000, (*a)->address(), 4, 4, 2).ok());
  std::vector<float> wide_got(2100);
  ASSERT_TRUE(dev.CopyToHost(wide_got.data(), (*wide)->address(), wide_got.size() * 4).ok());
  EXPECT_EQ(wide_got[0], host[0]);
  EXPECT_EQ(wide_got[2000], host[1]);
  // A padded image: 3 planes of 4x5 floats into 3 planes of 7x8 (-inf filled), at row 2, column 1.
  auto padded = dev.Allocate(3 * 7 * 8 * 4);
  ASSERT_TRUE(padded.ok());
  ASSERT_TRUE(dev.Fill32((*padded)->address(), 0xFF800000u, 3 * 7 * 8).ok());
  ASSERT_TRUE(dev.CopyIntoPadded((*padded)->address(), 8 * 4, 7, 1 * 4, 2, (*a)->address(), 5 * 4, 4, 3).ok());
  std::vector<float> pad_got(3 * 7 * 8);
  ASSERT_TRUE(dev.CopyToHost(pad_got.data(), (*padded)->address(), pad_got.size() * 4).ok());
  for (int p = 0; p < 3; ++p)
    for (int y = 0; y < 7; ++y)
      for (int x = 0; x < 8; ++x) {
        float v = pad_got[(p * 7 + y) * 8 + x];
        bool inside = y >= 2 && y < 6 && x >= 1 && x < 6;
        if (inside) {
          ASSERT_EQ(v, host[(p * 4 + (y - 2)) * 5 + (x - 1)]) << p << "," << y << "," << x;
        } else {
          ASSERT_TRUE(std::isinf(v) && v < 0) << p << "," << y << "," << x;
        }
      }
  // The caching allocator over cuMemAlloc: a freed block of the same class comes back.
  uint64_t address = (*a)->address();
  a->reset();
  auto c = dev.Allocate(990 * 4);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->address(), address);
  EXPECT_GE(dev.allocator().stats().cache_hits, 1);
}

TEST(FakeDriver, StreamOrderedAllocatorBesideTheCachingOne) {
  REQUIRE_FAKE();
  auto dev = CudaDevice::Get(1);
  ASSERT_TRUE(dev.ok()) << dev.status();
  auto pool = (*dev)->Allocator("cuda_malloc_async");
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ((*pool)->name(), "cuda_malloc_async");
  auto a = (*dev)->Allocate(4096, *pool);
  auto c = (*dev)->Allocate(4096);  // the caching allocator of the same device
  ASSERT_TRUE(a.ok() && c.ok());
  EXPECT_EQ((*pool)->stats().bytes_in_use, 4096);
  EXPECT_EQ((*dev)->allocator().stats().bytes_in_use, 4096);
  a->reset();
  EXPECT_EQ((*pool)->stats().bytes_in_use, 0);
  EXPECT_EQ((*dev)->allocator().stats().bytes_in_use, 4096);
  auto huge = (*dev)->Allocate(size_t{2} << 30, *pool);  // the fake device 1 refuses > 1 GiB
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(huge.status().message().find("cuMemAllocAsync"), std::string::npos) << huge.status();
  EXPECT_NE(huge.status().message().find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << huge.status();
}

TEST(FakeDriver, BadPtxCarriesTheJitLogAndMissingKernelsAreNamed) {
  REQUIRE_FAKE();
  auto dev = CudaDevice::Get(0);
  ASSERT_TRUE(dev.ok());
  auto bad = (*dev)->LoadModule(".version 8.0\n.target sm_90\n.visible .entry k() { bogus; }\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX"), std::string::npos)
      << bad.status();
  EXPECT_NE(bad.status().message().find("PTX JIT log for sm_90: fake ptxas: syntax error near 'bogus'"),
            std::string::npos)
      << bad.status();
  auto good = (*dev)->LoadModule(".version 8.0\n.target sm_90\n.visible .entry k() { ret; }\n");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_TRUE((*good)->Function("k").ok());
  auto none = (*good)->Function("other");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("cuModuleGetFunction(other): CUDA_ERROR_NOT_FOUND"), std::string::npos)
      << none.status();
}

std::shared_ptr<Graph> Specialized(const std::string& ir) {
  auto g = SpecializedGraphFromText(ir);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? std::shared_ptr<Graph>(std::move(*g)) : nullptr;
}

// Steps that launch no kernel — uploads, reshapes as aliases, Concat as pitched copies, host ops, downloads
// — through the real CUDA backend, against the CPU executor.
TEST(FakeDriver, GpuExecutorWithoutKernelsMatchesTheCpu) {
  REQUIRE_FAKE();
  auto backend = MakeCudaBackend({});
  ASSERT_TRUE(backend.ok()) << backend.status();
  std::shared_ptr<Graph> g = Specialized(
      "graph g(%a: i64[2,3], %b: i64[2,5], %x: f32[4,6]) {\n  %c = Concat(%a, %b) {axis=1}\n"
      "  %s = constant i64[2] {4, 4}\n  %r = Reshape(%c, %s)\n  %n = Neg(%r)\n  %f = Flatten(%x) {axis=0}\n"
      "  %k = Concat(%f, %f) {axis=0}\n  return %n, %k\n}");
  std::mt19937 rng(3);
  std::vector<Tensor> inputs;
  for (const Value* v : g->inputs()) {
    Tensor t(v->dtype, v->shape.concrete());
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (v->dtype == DType::kI64) t.data<int64_t>()[i] = static_cast<int64_t>(rng() % 100) - 50;
      else t.data<float>()[i] = static_cast<float>(rng() % 1000) / 7.0f;
    }
    inputs.push_back(std::move(t));
  }
  auto cpu = Executor::Create(std::shared_ptr<const Graph>(g->Clone()), ExecutorOptions{1, nullptr, true});
  ASSERT_TRUE(cpu.ok());
  auto ref = (*cpu)->Run(inputs);
  ASSERT_TRUE(ref.ok());
  GpuExecutorOptions o;
  o.poison_outputs = true;
  auto ex = GpuExecutor::Create(g, *backend, o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_EQ((*ex)->placement().copies, 2) << (*ex)->placement().ToString();
  EXPECT_EQ((*ex)->placement().aliases, 2) << (*ex)->placement().ToString();
  EXPECT_EQ((*ex)->placement().host_ops, 1) << (*ex)->placement().ToString();  // integer Neg
  for (int run = 0; run < 2; ++run) {
    auto got = (*ex)->Run(inputs);
    ASSERT_TRUE(got.ok()) << got.status();
    for (size_t i = 0; i < ref->size(); ++i) {
      EXPECT_TRUE((*got)[i].BitwiseEquals((*ref)[i])) << "output " << i << " run " << run;
    }
  }
}

// A graph with a fused kernel gets as far as the launch, which this driver refuses: a clean error naming
// cuLaunchKernel, no crash.
TEST(FakeDriver, KernelLaunchErrorsAreReported) {
  REQUIRE_FAKE();
  auto backend = MakeCudaBackend({});
  ASSERT_TRUE(backend.ok()) << backend.status();
  std::shared_ptr<Graph> g = Specialized("graph g(%x: f32[8,16]) {\n  %y = Sigmoid(%x)\n  return %y\n}");
  auto ex = GpuExecutor::Create(g, *backend, {});
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_EQ((*ex)->placement().op_kernels, 1) << (*ex)->placement().ToString();
  Tensor x(DType::kF32, {8, 16});
  std::memset(x.raw(), 0, x.nbytes());
  auto r = (*ex)->Run({x});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cuLaunchKernel"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("CUDA_ERROR_NOT_SUPPORTED"), std::string::npos) << r.status();
}

TEST(FakeDriver, SessionAutoPicksTheGpu) {
  REQUIRE_FAKE();
  std::string model = testing::ModelPath("oww_hello_deepa");
  CJIT_REQUIRE_DATA(model);
  SessionOptions o;
  o.use_environment_flags = false;
  auto s = Session::Load(model, o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->device(), "cuda:0");
  auto placements = (*s)->GpuPlacements();
  ASSERT_FALSE(placements.empty());
  EXPECT_NE(placements.back().find("device memory:"), std::string::npos) << placements.back();
  o.flags.device = "cpu";
  auto c = Session::Load(model, o);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->device(), "cpu");
}

}  // namespace
}  // namespace cjit
