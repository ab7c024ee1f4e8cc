// GPU runtime parts that run without a GPU: the caching device allocator over a host-memory backend, the
// GPU flags, and the clear errors when no CUDA driver is present (skipped on a machine that has one).
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "flags/flags.h"
#include "gtest/gtest.h"
#include "tests/test_data.h"
#include "runtime/cuda/device_allocator.h"
#include "runtime/cuda/driver.h"
#include "runtime/session.h"
#ifdef CJIT_HAVE_CUDA
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/cuda_device.h"
#endif
#include "runtime/cuda/device_backend.h"
#include "runtime/cuda/ptx_cache.h"
#include "tools/check_lib.h"
#include "compiler/codegen/fusion_plan.h"

namespace cjit {
namespace {

// Host memory standing in for a device, with a capacity (ResourceExhausted beyond it).
class HostBackend : public DeviceMemoryBackend {
 public:
  explicit HostBackend(size_t capacity) : capacity_(capacity) {}
  ~HostBackend() override { EXPECT_EQ(live_, 0u) << "blocks not returned to the backend"; }
  absl::StatusOr<uint64_t> Allocate(size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (used_ + bytes > capacity_) return absl::ResourceExhaustedError("host backend full");
    void* p = std::malloc(bytes);
    used_ += bytes;
    ++live_;
    sizes_[reinterpret_cast<uint64_t>(p)] = bytes;
    return reinterpret_cast<uint64_t>(p);
  }
  void Free(uint64_t address) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sizes_.find(address);
    ASSERT_NE(it, sizes_.end()) << "backend Free of an unknown block";
    used_ -= it->second;
    --live_;
    sizes_.erase(it);
    std::free(reinterpret_cast<void*>(address));
  }
  size_t used() const { return used_; }

 private:
  std::mutex mu_;
  size_t capacity_, used_ = 0, live_ = 0;
  std::map<uint64_t, size_t> sizes_;
};

TEST(CachingDeviceAllocator, SizeClasses) {
  EXPECT_EQ(CachingDeviceAllocator::RoundSize(0), 512u);
  EXPECT_EQ(CachingDeviceAllocator::RoundSize(1), 512u);
  EXPECT_EQ(CachingDeviceAllocator::RoundSize(512), 512u);
  EXPECT_EQ(CachingDeviceAllocator::RoundSize(513), 1024u);
  EXPECT_EQ(CachingDeviceAllocator::RoundSize(1 << 20), size_t{1} << 20);
  EXPECT_EQ(CachingDeviceAllocator::RoundSize((1 << 20) + 1), (size_t{1} << 20) + (size_t{1} << 17));
  std::mt19937_64 rng(7);
  for (int i = 0; i < 10000; ++i) {
    size_t n = rng() % (size_t{1} << 34) + 1;
    size_t r = CachingDeviceAllocator::RoundSize(n);
    ASSERT_GE(r, n);
    if (n > (1 << 20)) {
      ASSERT_LE(static_cast<double>(r - n), 0.125 * static_cast<double>(n)) << n;
    }
    ASSERT_EQ(CachingDeviceAllocator::RoundSize(r), r) << "a class must round to itself";
  }
}

TEST(CachingDeviceAllocator, ReusesFreedBlocksOfTheSameClass) {
  CachingDeviceAllocator a(std::make_unique<HostBackend>(1 << 30));
  auto p = a.Allocate(1000);
  ASSERT_TRUE(p.ok()) << p.status();
  a.Free(*p);
  auto q = a.Allocate(900);  // same 1024-byte class
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, *p);
  auto r = a.Allocate(5000);  // another class: a new block
  ASSERT_TRUE(r.ok());
  EXPECT_NE(*r, *p);
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.backend_allocations, 2);
  EXPECT_EQ(s.cache_hits, 1);
  EXPECT_EQ(s.bytes_in_use, 1024 + 5120);
  EXPECT_EQ(s.bytes_cached, 0);
  a.Free(*q);
  a.Free(*r);
  s = a.stats();
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_EQ(s.bytes_cached, 1024 + 5120);
  EXPECT_EQ(s.peak_bytes_in_use, 1024 + 5120);
}

TEST(CachingDeviceAllocator, ReleasesTheCacheAndRetriesWhenTheBackendIsFull) {
  auto backend = std::make_unique<HostBackend>(4096);
  HostBackend* raw = backend.get();
  CachingDeviceAllocator a(std::move(backend));
  auto p = a.Allocate(2048);
  ASSERT_TRUE(p.ok());
  a.Free(*p);                // cached: the backend still holds 2048
  auto q = a.Allocate(3000);  // 3072 + 2048 > 4096: the cache is released, then the retry fits
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(a.stats().cache_releases, 1);
  EXPECT_EQ(raw->used(), 3072u);
  auto r = a.Allocate(2048);  // really full now
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("device allocation of 2048 bytes failed"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("in use: 3072 bytes in 1 blocks"), std::string::npos) << r.status();
  a.Free(*q);
}

// A CUDA graph's private pool: its cached blocks are still addressed by the graph, so a full backend is an
// error, never a release of the cache.
TEST(CachingDeviceAllocator, WithoutReleaseOnOomKeepsItsCacheWhenTheBackendIsFull) {
  auto backend = std::make_unique<HostBackend>(4096);
  HostBackend* raw = backend.get();
  CachingDeviceAllocator a(std::move(backend), /*release_on_oom=*/false);
  auto p = a.Allocate(2048);
  ASSERT_TRUE(p.ok());
  a.Free(*p);
  auto q = a.Allocate(3000);
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(a.stats().cache_releases, 0);
  EXPECT_EQ(a.stats().bytes_cached, 2048);
  EXPECT_EQ(raw->used(), 2048u);
  auto r = a.Allocate(2000);  // the cached block of the same class is handed out again
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, *p);
  a.Free(*r);
}

TEST(CachingDeviceAllocator, FreeOfAnUnknownAddressIsIgnored) {
  CachingDeviceAllocator a(std::make_unique<HostBackend>(1 << 20));
  auto p = a.Allocate(100);
  ASSERT_TRUE(p.ok());
  a.Free(*p + 8);  // not a block: logged, nothing changes
  EXPECT_EQ(a.stats().bytes_in_use, 512);
  a.Free(*p);
  EXPECT_EQ(a.stats().bytes_in_use, 0);
}

TEST(CachingDeviceAllocator, ConcurrentUseNeverHandsOutALiveBlockTwice) {
  CachingDeviceAllocator a(std::make_unique<HostBackend>(size_t{1} << 30));
  std::mutex mu;
  std::set<uint64_t> live;
  std::atomic<int> errors{0};
  auto work = [&](int seed) {
    std::mt19937 rng(seed);
    std::vector<uint64_t> mine;
    for (int i = 0; i < 2000; ++i) {
      if (mine.empty() || rng() % 3 != 0) {
        auto p = a.Allocate(rng() % 70000);
        if (!p.ok()) {
          ++errors;
          continue;
        }
        std::lock_guard<std::mutex> lock(mu);
        if (!live.insert(*p).second) ++errors;
        mine.push_back(*p);
      } else {
        uint64_t p = mine.back();
        mine.pop_back();
        {
          std::lock_guard<std::mutex> lock(mu);
          live.erase(p);
        }
        a.Free(p);
      }
    }
    for (uint64_t p : mine) {
      {
        std::lock_guard<std::mutex> lock(mu);
        live.erase(p);
      }
      a.Free(p);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(work, t);
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(a.stats().bytes_in_use, 0);
  EXPECT_GT(a.stats().cache_hits, 0);
}

TEST(GpuTarget, NewestLlvmTargetTheDeviceRuns) {
  EXPECT_EQ(*PtxTargetForDevice("sm_75"), "sm_75");
  EXPECT_EQ(*PtxTargetForDevice("sm_86"), "sm_86");
  EXPECT_EQ(*PtxTargetForDevice("sm_88"), "sm_87");
  EXPECT_EQ(*PtxTargetForDevice("sm_90"), "sm_90");
  EXPECT_EQ(*PtxTargetForDevice("sm_100"), "sm_90");  // Blackwell: sm_90 PTX, JIT-compiled forward
  EXPECT_EQ(*PtxTargetForDevice("sm_120"), "sm_90");
  auto old = PtxTargetForDevice("sm_70");
  ASSERT_FALSE(old.ok());
  EXPECT_NE(old.status().message().find("needs sm_75 or newer"), std::string::npos) << old.status();
  EXPECT_TRUE(PtxTargetRunsOn("sm_80", "sm_90"));
  EXPECT_TRUE(PtxTargetRunsOn("sm_90a", "sm_90"));
  EXPECT_FALSE(PtxTargetRunsOn("sm_90", "sm_80"));
  EXPECT_FALSE(PtxTargetRunsOn("sm_90a", "sm_100"));
  EXPECT_FALSE(PtxTargetRunsOn("bogus", "sm_90"));
}

TEST(GpuFlags, ArchAndAllocatorAreChecked) {
  auto f = ParseFlags("--gpu_arch=sm_90a --gpu_allocator=cuda_malloc_async --xla_gpu_cuda_data_dir=/opt/cuda", Flags{},
                      "test");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->gpu_arch, "sm_90a");
  EXPECT_EQ(f->gpu_allocator, "cuda_malloc_async");
  EXPECT_EQ(f->cuda_data_dir, "/opt/cuda");
  auto bad = ParseFlags("--gpu_arch=sm_70", Flags{}, "test");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--gpu_arch"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("sm_75"), std::string::npos) << bad.status();
  auto bad2 = ParseFlags("--gpu_allocator=bfc", Flags{}, "test");
  ASSERT_FALSE(bad2.ok());
  EXPECT_NE(bad2.status().message().find("caching or cuda_malloc_async"), std::string::npos) << bad2.status();
}

// A tiny ONNX-free graph: Session::LoadFromBytes needs a model, so build one from the shared models.
std::string SmallModel() {
  return testing::ModelPath("oww_hello_deepa");
}

TEST(GpuWithoutDriver, ErrorsAreClearAndAutoPicksTheCpu) {
  if (ProbeCudaDriver().ok()) GTEST_SKIP() << "a CUDA driver is present: the no-driver paths cannot be tested here";
  CJIT_REQUIRE_DATA(SmallModel());
  SessionOptions o;
  o.use_environment_flags = false;
  o.flags.device = "cuda";
  auto s = Session::Load(SmallModel(), o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("--device=cuda: no CUDA driver: cannot load libcuda.so.1"), std::string::npos)
      << s.status();
  o.flags.device = "auto";
  auto a = Session::Load(SmallModel(), o);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->device(), "cpu");
  EXPECT_TRUE((*a)->GpuPlacements().empty());
#ifdef CJIT_HAVE_CUDA
  auto api = LoadCudaApi();
  ASSERT_FALSE(api.ok());
  EXPECT_NE(api.status().message().find("libcuda.so.1"), std::string::npos) << api.status();
  auto dev = CudaDevice::Get(0);
  ASSERT_FALSE(dev.ok());
  EXPECT_EQ(dev.status().code(), absl::StatusCode::kFailedPrecondition);
#endif
}

// PTX through the persistent cache: generated once, then read back (no LLVM), keyed by target; a corrupt
// payload is ignored and replaced.
TEST(PtxCache, SecondLookupComesFromDiskAndCorruptionIsHealed) {
  if (!std::ifstream(LibdevicePath("/usr/local/cuda"))) GTEST_SKIP() << "no libdevice (CUDA toolkit)";
  auto parsed = SpecializedGraphFromText(
      "graph g(%x: f32[4,33], %y: f32[33]) {\n  %a = Add(%x, %y)\n  %s = Softmax(%a) {axis=-1}\n  %t = Tanh(%s)\n  "
      "return %t\n}");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  Graph& g = **parsed;
  auto plan = BuildFusionPlan(g);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->kernels.size(), 1u);
  std::string dir = ::testing::TempDir() + "/ptx_cache_test";
  std::filesystem::remove_all(dir);
  auto disk = TieredCache::Open({dir, false, 0});
  ASSERT_TRUE(disk.ok()) << disk.status();
  PtxOptions po;
  po.gpu_arch = "sm_80";
  auto first = PtxForPlan(*plan, po, disk->get());
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->from_disk);
  ASSERT_EQ(first->kernel_names.size(), plan->kernels.size());
  ASSERT_NE(first->ptx.find(".entry"), std::string::npos) << first->ptx.substr(0, 400);
  auto second = PtxForPlan(*plan, po, disk->get());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->from_disk);
  EXPECT_EQ(second->ptx, first->ptx);
  EXPECT_EQ(second->kernel_names, first->kernel_names);
  // Another target is another entry.
  po.gpu_arch = "sm_90";
  auto other = PtxForPlan(*plan, po, disk->get());
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->from_disk);
  EXPECT_NE(PtxCacheKey(*plan, po).canonical.find("sm_90 +ptx"), std::string::npos) << PtxCacheKey(*plan, po).canonical;
  // A payload that passes the entry checksum but is not PTX is ignored, regenerated and replaced.
  ASSERT_TRUE((*disk)->Store(PtxCacheKey(*plan, po), PayloadKind::kPtx, "cjit-ptx\n1\nk\nnot ptx").ok());
  auto healed = PtxForPlan(*plan, po, disk->get());
  ASSERT_TRUE(healed.ok()) << healed.status();
  EXPECT_FALSE(healed->from_disk);
  EXPECT_EQ(healed->ptx, other->ptx);
  auto again = PtxForPlan(*plan, po, disk->get());
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->from_disk);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cjit
