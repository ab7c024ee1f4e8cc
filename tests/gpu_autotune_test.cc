// Autotuning of the GPU's library calls (runtime/cuda/gpu_autotune.h) on both device backends: "host" (CI;
// one library algorithm per op, so the test-only candidates make the choices) and "cuda" (cuBLASLt and cuDNN
// candidates; skipped without a GPU). References are float64 products computed here.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "cache/disk_cache.h"
#include "base/status_macros.h"
#include "gtest/gtest.h"
#include "runtime/autotune.h"
#include "runtime/cuda/gpu_autotune.h"
#include "runtime/cuda/gpu_executor.h"
#include "tests/gpu_test_util.h"
#include "tests/test_data.h"
#include "tools/check_lib.h"

namespace cjit {
namespace {

namespace fs = std::filesystem;

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Exact values and sum |term| per output element.
struct Reference {
  std::vector<double> exact, scale;
};

Reference GemmReference(const GemmShape& s, const std::vector<float>& a, const std::vector<float>& b,
                        const std::vector<float>& bias) {
  Reference r;
  r.exact.assign(static_cast<size_t>(s.batch * s.m * s.n), 0);
  r.scale.assign(r.exact.size(), 0);
  for (int64_t z = 0; z < s.batch; ++z)
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        double acc = 0, sc = 0;
        for (int64_t k = 0; k < s.k; ++k) {
          double x = a[z * s.stride_a + (s.trans_a ? k * s.m + i : i * s.k + k)];
          double y = b[z * s.stride_b + (s.trans_b ? j * s.k + k : k * s.n + j)];
          acc += x * y;
          sc += std::fabs(x * y);
        }
        acc *= s.alpha;
        sc *= std::fabs(s.alpha);
        if (s.bias) {
          acc += bias[j];
          sc += std::fabs(bias[j]);
        }
        if (s.relu) acc = std::max(acc, 0.0);
        r.exact[(z * s.m + i) * s.n + j] = acc;
        r.scale[(z * s.m + i) * s.n + j] = sc + 1e-30;
      }
  return r;
}

Reference ConvReference(const ConvShape& s, const std::vector<float>& x, const std::vector<float>& w,
                        const std::vector<float>& bias) {
  Reference r;
  const int64_t cg = s.c / s.groups, kg = s.k / s.groups;
  r.exact.assign(static_cast<size_t>(s.n * s.k * s.out_h * s.out_w), 0);
  r.scale.assign(r.exact.size(), 0);
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t k = 0; k < s.k; ++k)
      for (int64_t p = 0; p < s.out_h; ++p)
        for (int64_t q = 0; q < s.out_w; ++q) {
          double acc = s.bias ? bias[k] : 0, sc = s.bias ? std::fabs(bias[k]) : 0;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t i = 0; i < s.r; ++i)
              for (int64_t j = 0; j < s.s; ++j) {
                int64_t h = p * s.stride_h - s.pad_top + i * s.dil_h, ww = q * s.stride_w - s.pad_left + j * s.dil_w;
                if (h < 0 || h >= s.h || ww < 0 || ww >= s.w) continue;
                double t = double(x[((n * s.c + k / kg * cg + c) * s.h + h) * s.w + ww]) *
                           w[((k * cg + c) * s.r + i) * s.s + j];
                acc += t;
                sc += std::fabs(t);
              }
          r.exact[((n * s.k + k) * s.out_h + p) * s.out_w + q] = acc;
          r.scale[((n * s.k + k) * s.out_h + p) * s.out_w + q] = sc + 1e-30;
        }
  return r;
}

// Device buffers for operands (uploaded) and an output poisoned with NaN bytes.
struct Buffers {
  std::vector<std::shared_ptr<DeviceMemory>> in;
  std::shared_ptr<DeviceMemory> out;
  size_t out_elems = 0;
  static absl::StatusOr<Buffers> Make(const DeviceBackend& b, const std::vector<const std::vector<float>*>& ins,
                                      size_t out_elems) {
    Buffers r;
    for (const std::vector<float>* v : ins) {
      if (v == nullptr || v->empty()) {
        r.in.push_back(nullptr);
        continue;
      }
      CJIT_ASSIGN_OR_RETURN(auto m, b.Allocate(v->size() * 4));
      CJIT_RETURN_IF_ERROR(b.CopyToDevice(m->address(), v->data(), v->size() * 4));
      r.in.push_back(m);
    }
    CJIT_ASSIGN_OR_RETURN(r.out, b.Allocate(out_elems * 4));
    CJIT_RETURN_IF_ERROR(b.Fill(r.out->address(), 0xFF, out_elems * 4));
    r.out_elems = out_elems;
    return r;
  }
  uint64_t addr(size_t i) const { return in[i] ? in[i]->address() : 0; }
  absl::StatusOr<std::vector<float>> Read(const DeviceBackend& b) const {
    std::vector<float> v(out_elems);
    CJIT_RETURN_IF_ERROR(b.CopyToHost(v.data(), out->address(), out_elems * 4));
    return v;
  }
};

// max |got - exact| / sum |terms| (NaN: infinity).
double NormalizedError(const std::vector<float>& got, const Reference& r) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    worst = std::max(worst, std::fabs(got[i] - r.exact[i]) / r.scale[i]);
  }
  return worst;
}

// Runs `op` (a GemmOp or ConvOp: three operands, then the output) on fresh device copies of `ins`; its
// normalized error against float64.
template <typename Op>
absl::StatusOr<double> DeviceError(const DeviceBackend& dev, const Op& op,
                                   const std::vector<const std::vector<float>*>& ins, const Reference& ref) {
  CJIT_ASSIGN_OR_RETURN(Buffers buf, Buffers::Make(dev, ins, ref.exact.size()));
  CJIT_RETURN_IF_ERROR(op.Run(buf.addr(0), buf.addr(1), buf.addr(2), buf.out->address()));
  CJIT_ASSIGN_OR_RETURN(std::vector<float> got, buf.Read(dev));
  return NormalizedError(got, ref);
}

struct GemmData {
  GemmShape s;
  std::vector<float> a, b, bias;
  Reference ref;
  explicit GemmData(const GemmShape& shape, uint32_t seed) : s(shape) {
    a = Random(static_cast<size_t>((s.batch - 1) * s.stride_a + s.m * s.k), seed);
    b = Random(static_cast<size_t>((s.batch - 1) * s.stride_b + s.k * s.n), seed + 1);
    if (s.bias) bias = Random(static_cast<size_t>(s.n), seed + 2);
    ref = GemmReference(s, a, b, bias);
  }
  absl::StatusOr<double> Error(const DeviceBackend& dev, const GemmOp& op) const {
    return DeviceError(dev, op, {&a, &b, &bias}, ref);
  }
};

struct ConvData {
  ConvShape s;
  std::vector<float> x, w, bias;
  Reference ref;
  explicit ConvData(const ConvShape& shape, uint32_t seed) : s(shape) {
    x = Random(static_cast<size_t>(s.n * s.c * s.h * s.w), seed);
    w = Random(static_cast<size_t>(s.k * (s.c / s.groups) * s.r * s.s), seed + 1);
    if (s.bias) bias = Random(static_cast<size_t>(s.k), seed + 2);
    ref = ConvReference(s, x, w, bias);
  }
  absl::StatusOr<double> Error(const DeviceBackend& dev, const ConvOp& op) const {
    return DeviceError(dev, op, {&x, &w, &bias}, ref);
  }
};

GemmShape Gemm(int64_t batch, int64_t m, int64_t n, int64_t k, bool ta = false, bool tb = false, bool bias = false,
               bool relu = false) {
  GemmShape s;
  s.batch = batch, s.m = m, s.n = n, s.k = k, s.trans_a = ta, s.trans_b = tb, s.bias = bias, s.relu = relu;
  s.stride_a = batch > 1 ? m * k : 0;
  s.stride_b = batch > 1 ? k * n : 0;
  return s;
}

ConvShape Conv(int64_t c, int64_t hw, int64_t k, int64_t rs, int64_t stride, int64_t pad_begin, int64_t pad_end,
               int64_t dil, int64_t groups, bool bias = true) {
  ConvShape s;
  s.n = 2, s.c = c, s.h = hw, s.w = hw + 3, s.k = k, s.r = rs, s.s = rs, s.groups = groups, s.bias = bias;
  s.pad_top = s.pad_left = pad_begin;
  s.pad_bottom = s.pad_right = pad_end;
  s.stride_h = s.stride_w = stride;
  s.dil_h = s.dil_w = dil;
  s.out_h = (s.h + pad_begin + pad_end - dil * (rs - 1) - 1) / stride + 1;
  s.out_w = (s.w + pad_begin + pad_end - dil * (rs - 1) - 1) / stride + 1;
  return s;
}

std::vector<std::pair<std::string, GemmShape>> GemmShapes() {
  return {{"square_256", Gemm(1, 256, 256, 256)},
          {"skinny_7x300x513", Gemm(1, 7, 300, 513)},
          {"tall_1024x64x32", Gemm(1, 1024, 64, 32)},
          {"transposed_bias_relu", Gemm(1, 96, 80, 200, true, true, true, true)},
          {"batched_8x64x48x40", Gemm(8, 64, 48, 40)},
          {"long_k_16x16x4096", Gemm(1, 16, 16, 4096)}};
}

std::vector<std::pair<std::string, ConvShape>> ConvShapes() {
  return {{"3x3_pad1", Conv(16, 20, 32, 3, 1, 1, 1, 1, 1)},
          {"1x1", Conv(64, 14, 48, 1, 1, 0, 0, 1, 1)},
          {"depthwise_3x3", Conv(32, 17, 32, 3, 1, 1, 1, 1, 32)},
          {"grouped_4", Conv(32, 12, 64, 3, 1, 1, 1, 1, 4)},
          {"strided_2", Conv(8, 23, 16, 3, 2, 1, 1, 1, 1)},
          {"dilated_2", Conv(8, 19, 8, 3, 1, 2, 2, 2, 1)},
          {"asymmetric_pads", Conv(8, 15, 12, 3, 2, 0, 1, 1, 1)},
          {"5x5_no_bias", Conv(4, 16, 6, 5, 1, 2, 2, 1, 1, false)}};
}

// Every candidate the library offers, created from its stable identity (the way a stored choice is), matches
// float64 math: the family is only as good as its worst accepted member.
class GpuAlgorithms : public ::testing::TestWithParam<std::string> {};

// Every candidate `list(shape)` offers for each shape, made by `make(shape, id)`, against float64 within
// `bound(shape)` of sum |terms|; adds the candidates to *total.
template <typename Data, typename Shape, typename List, typename Make, typename Bound>
void CheckEveryCandidate(const char* family, const DeviceBackend& backend,
                         const std::vector<std::pair<std::string, Shape>>& shapes, List list, Make make, Bound bound,
                         uint32_t* seed, size_t* total) {
  for (const auto& [name, shape] : shapes) {
    Data data(shape, *seed += 3);
    absl::StatusOr<std::vector<DeviceAlgorithm>> algos = list(shape);
    ASSERT_TRUE(algos.ok()) << name << ": " << algos.status();
    ASSERT_FALSE(algos->empty()) << name;
    for (const DeviceAlgorithm& a : *algos) {
      auto op = make(shape, a.id);
      ASSERT_TRUE(op.ok()) << name << " " << a.id << ": " << op.status();
      auto err = data.Error(backend, **op);
      ASSERT_TRUE(err.ok()) << name << " " << a.id << ": " << err.status();
      EXPECT_LT(*err, bound(shape)) << name << " " << a.id;
      std::printf("  %s %s %s: error %.2g, workspace %zu%s\n", family, name.c_str(), a.id.c_str(), *err,
                  a.scratch_bytes, a.deterministic ? "" : ", not deterministic");
    }
    *total += algos->size();
    std::printf("%s %s: %zu candidates\n", family, name.c_str(), algos->size());
  }
}

TEST_P(GpuAlgorithms, EveryCandidateMatchesFloat64) {
  CJIT_GET_BACKEND(backend, GetParam());
  size_t gemm_candidates = 0, conv_candidates = 0;
  uint32_t seed = 1;
  // GEMM: float32 accumulation, K * 2^-24 of sum |terms| at worst.
  CheckEveryCandidate<GemmData>(
      "gemm", *backend, GemmShapes(), [&](const GemmShape& s) { return backend->GemmAlgorithms(s); },
      [&](const GemmShape& s, const std::string& id) { return backend->MakeGemm(s, id); },
      [](const GemmShape& s) { return 2e-5 + s.k * 6e-8; }, &seed, &gemm_candidates);
  // Convolutions: FMA math only at "highest"; FFT and Winograd 3x3 transforms add rounding of their own
  // (up to 1.4e-5 on an H100).
  CheckEveryCandidate<ConvData>(
      "conv", *backend, ConvShapes(), [&](const ConvShape& s) { return backend->ConvAlgorithms(s); },
      [&](const ConvShape& s, const std::string& id) { return backend->MakeConv(s, id); },
      [](const ConvShape&) { return 1e-4; }, &seed, &conv_candidates);
  if (HasFatalFailure()) return;
  if (GetParam() == "cuda") {
    // Something to choose from: cuBLASLt and cuDNN offer alternatives for most of these shapes.
    EXPECT_GT(gemm_candidates, GemmShapes().size());
    EXPECT_GT(conv_candidates, ConvShapes().size());
  }
  // An identity the library does not know is an InvalidArgumentError, never a crash.
  GemmShape g = GemmShapes()[0].second;
  auto bad = backend->MakeGemm(g, GetParam() == "cuda" ? "lt:id=999999;tile=1" : "lt:id=1");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  auto bad_conv = backend->MakeConv(ConvShapes()[0].second, "cudnn:algo=NOPE;math=FMA");
  EXPECT_EQ(bad_conv.status().code(), absl::StatusCode::kInvalidArgument) << bad_conv.status();
}

std::string BackendName(const ::testing::TestParamInfo<std::string>& i) { return i.param; }

INSTANTIATE_TEST_SUITE_P(All, GpuAlgorithms, ::testing::Values("host", "cuda"), BackendName);

class GpuAutotune : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    SetDeviceTestCandidates(true);
    ClearAutotuneResultsForTest();
  }
  void TearDown() override {
    SetDeviceTestCandidates(false);
    ClearAutotuneResultsForTest();
  }
  static std::unique_ptr<Autotuner> Tuner(int level, TieredCache* disk = nullptr, const std::string& dump_to = "",
                                          const std::string& load_from = "") {
    AutotuneOptions o;
    o.level = level;
    o.max_ms_per_op = 5000;
    o.dump_to = dump_to;
    o.load_from = load_from;
    auto t = Autotuner::Create(o, disk, nullptr);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(*t) : nullptr;
  }
  // A product large enough that the test-only fill is clearly faster than the library.
  GemmShape Shape() const { return GetParam() == "cuda" ? Gemm(1, 1024, 1024, 1024) : Gemm(1, 64, 48, 96); }
  static std::string Notes(const Autotuner& t) {
    std::string all;
    for (const AutotuneRecord& r : t.records())
      for (const std::string& n : r.notes) absl::StrAppend(&all, n, "\n");
    return all;
  }
};

TEST_P(GpuAutotune, Level4RejectsWrongAndOverrunningCandidatesLevel1ChoosesTheFastest) {
  CJIT_GET_BACKEND(backend, GetParam());
  const GemmShape s = Shape();
  GemmData data(s, 42);
  auto t4 = Tuner(4);
  ASSERT_TRUE(t4);
  std::string chosen;
  auto op = MakeTunedGemm(*backend, t4.get(), s, "MatMul 'mm'", &chosen);
  ASSERT_TRUE(op.ok()) << op.status();
  const std::string notes = Notes(*t4);
  EXPECT_FALSE(absl::StartsWith(chosen, "test:")) << chosen << "\n" << notes;
  EXPECT_FALSE(chosen.empty()) << notes;
  EXPECT_TRUE(absl::StrContains(notes, "test:wrong: rejected (differs from the default")) << notes;
  EXPECT_TRUE(absl::StrContains(notes, "test:overrun: rejected (wrote outside its output")) << notes;
  EXPECT_EQ(t4->counters().ops_tuned.load(), 1);
  EXPECT_GE(t4->counters().candidates_rejected.load(), 2);
  auto err = data.Error(*backend, **op);
  ASSERT_TRUE(err.ok()) << err.status();
  EXPECT_LT(*err, 1e-4);

  // Level 1 (no checks): the wrong one is the fastest, and it is taken — what level 4 exists to prevent.
  ClearAutotuneResultsForTest();
  auto t1 = Tuner(1);
  auto op1 = MakeTunedGemm(*backend, t1.get(), s, "MatMul 'mm'", &chosen);
  ASSERT_TRUE(op1.ok()) << op1.status();
  EXPECT_EQ(chosen, "test:wrong") << Notes(*t1);
  auto err1 = data.Error(*backend, **op1);
  ASSERT_TRUE(err1.ok());
  EXPECT_GT(*err1, 1e-2);

  // --autotune_deterministic: the first candidate in the library's order that passes (here the default).
  ClearAutotuneResultsForTest();
  AutotuneOptions o;
  o.level = 4;
  o.deterministic = true;
  auto td = Autotuner::Create(o, nullptr, nullptr);
  ASSERT_TRUE(td.ok());
  auto algos = backend->GemmAlgorithms(s);
  ASSERT_TRUE(algos.ok());
  std::string first_deterministic;
  for (const DeviceAlgorithm& a : *algos) {
    if (a.deterministic) {
      first_deterministic = a.id;
      break;
    }
  }
  auto opd = MakeTunedGemm(*backend, td->get(), s, "MatMul 'mm'", &chosen);
  ASSERT_TRUE(opd.ok());
  if (!first_deterministic.empty()) {
    EXPECT_EQ(chosen, first_deterministic) << Notes(**td);
  }

  // Level 0: no tuning, the library's default.
  auto t0 = Tuner(0);
  auto op0 = MakeTunedGemm(*backend, t0.get(), s, "MatMul 'mm'", &chosen);
  ASSERT_TRUE(op0.ok());
  EXPECT_EQ(chosen, "");
  EXPECT_EQ(t0->counters().ops_tuned.load(), 0);
}

TEST_P(GpuAutotune, ConvolutionsAreTunedAndCorrect) {
  CJIT_GET_BACKEND(backend, GetParam());
  for (const auto& [name, shape] : ConvShapes()) {
    ConvData data(shape, 7);
    auto t = Tuner(4);
    std::string chosen;
    auto op = MakeTunedConv(*backend, t.get(), shape, "Conv '" + name + "'", &chosen);
    ASSERT_TRUE(op.ok()) << name << ": " << op.status();
    EXPECT_FALSE(absl::StartsWith(chosen, "test:")) << name << ": " << chosen;
    // The candidates' operands and workspaces went back to the driver, not into the allocator's cache
    // (the host backend keeps no cache: an empty report).
    const std::string memory = backend->MemoryReport();
    if (!memory.empty() && t->counters().ops_tuned.load() > 0) {
      EXPECT_TRUE(absl::StrContains(memory, ", 0.0 MiB cached")) << name << ": " << memory;
    }
    auto err = data.Error(*backend, **op);
    ASSERT_TRUE(err.ok()) << err.status();
    EXPECT_LT(*err, 1e-4) << name << " with " << chosen << "\n" << Notes(*t);
    std::printf("conv %s -> %s\n", name.c_str(), chosen.c_str());
  }
}

TEST_P(GpuAutotune, SecondProcessAndDumpedResultsRetuneNothing) {
  CJIT_GET_BACKEND(backend, GetParam());
  const GemmShape s = Shape();
  const fs::path dir = fs::path(::testing::TempDir()) / ("gpu_autotune_" + GetParam());
  fs::remove_all(dir);
  DiskCacheOptions dco;
  dco.dir = (dir / "cache").string();
  auto disk = TieredCache::Open(dco);
  ASSERT_TRUE(disk.ok()) << disk.status();
  const std::string dump = (dir / "results.txt").string();
  std::string first, again;
  {
    auto t = Tuner(4, disk->get(), dump);
    ASSERT_TRUE(MakeTunedGemm(*backend, t.get(), s, "MatMul 'mm'", &first).ok());
    EXPECT_EQ(t->counters().ops_tuned.load(), 1);
  }
  ASSERT_FALSE(first.empty());
  // A "second process": nothing in memory, the same persistent cache.
  ClearAutotuneResultsForTest();
  {
    auto t = Tuner(4, disk->get());
    ASSERT_TRUE(MakeTunedGemm(*backend, t.get(), s, "MatMul 'mm'", &again).ok());
    EXPECT_EQ(t->counters().ops_tuned.load(), 0);
    EXPECT_EQ(t->counters().disk_hits.load(), 1);
    EXPECT_EQ(again, first);
  }
  // Dump -> load in a fresh process without the cache.
  ClearAutotuneResultsForTest();
  {
    auto t = Tuner(4, nullptr, "", dump);
    ASSERT_TRUE(MakeTunedGemm(*backend, t.get(), s, "MatMul 'mm'", &again).ok());
    EXPECT_EQ(t->counters().ops_tuned.load(), 0);
    EXPECT_EQ(t->counters().file_hits.load(), 1);
    EXPECT_EQ(again, first);
  }
  // The same file claiming another device: ignored with a reason (counted), and the op is tuned again.
  std::stringstream text;
  text << std::ifstream(dump).rdbuf();
  const std::string identity = backend->AutotuneDeviceIdentity();
  ASSERT_TRUE(absl::StrContains(text.str(), identity)) << text.str();
  const std::string other = (dir / "other.txt").string();
  std::ofstream(other) << absl::StrReplaceAll(text.str(),
                                              {{identity, "gpu=Some Other GPU;sm=sm_80;sms=108;memclock_khz=1"}});
  ClearAutotuneResultsForTest();
  {
    auto t = Tuner(4, nullptr, "", other);
    ASSERT_TRUE(MakeTunedGemm(*backend, t.get(), s, "MatMul 'mm'", &again).ok());
    EXPECT_EQ(t->counters().file_hits.load(), 0);
    EXPECT_EQ(t->counters().ignored_entries.load(), 1);
    EXPECT_EQ(t->counters().ops_tuned.load(), 1);
  }
  // A stored algorithm this library does not accept (another version's, say): dropped, tuned again.
  const std::string stale = (dir / "stale.txt").string();
  std::ofstream(stale) << absl::StrReplaceAll(text.str(), {{first, "lt:id=999999"}});
  ClearAutotuneResultsForTest();
  {
    auto t = Tuner(4, nullptr, "", stale);
    std::string chosen;
    auto op = MakeTunedGemm(*backend, t.get(), s, "MatMul 'mm'", &chosen);
    ASSERT_TRUE(op.ok()) << op.status();
    EXPECT_EQ(t->counters().ops_tuned.load(), 1);
    EXPECT_FALSE(absl::StartsWith(chosen, "test:")) << chosen;
  }
  fs::remove_all(dir);
}

// The host backend as a device whose enqueue does the work (host_is_device() false): every time it
// measures is host time, so every default looks host-bound, as cuDNN's small convolutions do on a GPU.
class HostBoundBackend : public DeviceBackend {
 public:
  std::string Describe() const override { return "host-bound test device"; }
  std::string target() const override { return b_->target(); }
  absl::Status MakeCurrent() const override { return b_->MakeCurrent(); }
  absl::StatusOr<std::shared_ptr<DeviceMemory>> Allocate(size_t n) const override { return b_->Allocate(n); }
  absl::Status CopyToDevice(uint64_t d, const void* s, size_t n) const override { return b_->CopyToDevice(d, s, n); }
  absl::Status CopyToHost(void* d, uint64_t s, size_t n) const override { return b_->CopyToHost(d, s, n); }
  absl::Status Fill(uint64_t d, uint8_t v, size_t n) const override { return b_->Fill(d, v, n); }
  absl::Status Copy2D(uint64_t d, size_t dp, uint64_t s, size_t sp, size_t w, size_t h) const override {
    return b_->Copy2D(d, dp, s, sp, w, h);
  }
  absl::Status PadPlanes(uint64_t d, uint32_t f, uint64_t s, size_t p, size_t h, size_t w, size_t t, size_t l,
                         size_t oh, size_t ow) const override {
    return b_->PadPlanes(d, f, s, p, h, w, t, l, oh, ow);
  }
  absl::Status Synchronize() const override { return b_->Synchronize(); }
  absl::StatusOr<std::vector<std::shared_ptr<const FusedKernelHandle>>> CompileKernels(
      const FusionPlan& plan, CompileCounts* counts) const override {
    return b_->CompileKernels(plan, counts);
  }
  absl::Status LaunchFused(const FusedKernelHandle& k, const FusedLaunchArgs& a,
                           const std::vector<uint64_t>& buffers) const override {
    return b_->LaunchFused(k, a, buffers);
  }
  absl::StatusOr<std::unique_ptr<GemmOp>> MakeGemm(const GemmShape& s, const std::string& a) const override {
    return b_->MakeGemm(s, a);
  }
  absl::StatusOr<std::unique_ptr<ConvOp>> MakeConv(const ConvShape& s, const std::string& a) const override {
    return b_->MakeConv(s, a);
  }
  absl::StatusOr<std::unique_ptr<PoolOp>> MakePool(const PoolShape& s) const override { return b_->MakePool(s); }
  absl::StatusOr<std::unique_ptr<GatherOp>> MakeGather(const GatherShape& s) const override {
    return b_->MakeGather(s);
  }
  absl::StatusOr<std::unique_ptr<ConvOp>> MakeConvTranspose(const ConvShape& s) const override {
    return b_->MakeConvTranspose(s);
  }
  absl::StatusOr<std::vector<DeviceAlgorithm>> GemmAlgorithms(const GemmShape& s) const override {
    return b_->GemmAlgorithms(s);
  }
  absl::StatusOr<std::vector<DeviceAlgorithm>> ConvAlgorithms(const ConvShape& s) const override {
    return b_->ConvAlgorithms(s);
  }
  std::string AutotuneDeviceIdentity() const override { return "host-bound-test"; }
  std::string AutotuneLibraryVersions() const override { return b_->AutotuneLibraryVersions(); }
  absl::StatusOr<double> TimeMicros(const std::function<absl::Status()>& enqueue) const override {
    return b_->TimeMicros(enqueue);
  }

 private:
  std::shared_ptr<DeviceBackend> b_ = MakeHostBackend();
};

// Where the default's measured time is its host enqueue time, no timing tells device times apart: the
// library's choice stays even when a candidate (here the fast wrong one, at level 1) measures faster.
TEST(GpuAutotuneHostRule, HostBoundDefaultIsKept) {
  SetDeviceTestCandidates(true);
  ClearAutotuneResultsForTest();
  AutotuneOptions o;
  o.level = 1;
  auto tuner = Autotuner::Create(o, nullptr, nullptr);
  ASSERT_TRUE(tuner.ok());
  HostBoundBackend backend;
  const GemmShape s = Gemm(1, 64, 48, 96);
  std::string chosen;
  auto op = MakeTunedGemm(backend, tuner->get(), s, "MatMul 'mm'", &chosen);
  SetDeviceTestCandidates(false);
  ClearAutotuneResultsForTest();
  ASSERT_TRUE(op.ok()) << op.status();
  std::string notes;
  for (const AutotuneRecord& r : (*tuner)->records())
    for (const std::string& n : r.notes) absl::StrAppend(&notes, n, "\n");
  EXPECT_EQ(chosen, "host:float64") << notes;
  EXPECT_TRUE(absl::StrContains(notes, "the default is host-bound here: kept")) << notes;
  auto err = GemmData(s, 9).Error(backend, **op);
  ASSERT_TRUE(err.ok());
  EXPECT_LT(*err, 1e-5);
}

// Through the executor (GpuExecutorOptions::autotuner): the placement counts the tuned library call, and
// the choice is what runs — the wrong test-only candidate's constant output at level 1, float64-exact
// values at level 4.
TEST_P(GpuAutotune, ExecutorRunsTheTunedAlgorithm) {
  CJIT_GET_BACKEND(backend, GetParam());
  // Large enough on a GPU that the library's default is device-bound (else the default is kept).
  const GemmShape s = Shape();
  auto g = SpecializedGraphFromText(absl::StrCat("graph g(%a: f32[", s.m, ",", s.k, "], %b: f32[", s.k, ",", s.n,
                                                 "]) {\n  %y = MatMul(%a, %b)\n  return %y\n}"));
  ASSERT_TRUE(g.ok()) << g.status();
  std::shared_ptr<const Graph> graph(std::move(*g));
  GemmData data(s, 5);
  Tensor a(DType::kF32, {s.m, s.k}), b(DType::kF32, {s.k, s.n});
  std::copy(data.a.begin(), data.a.end(), a.data<float>());
  std::copy(data.b.begin(), data.b.end(), b.data<float>());
  for (int level : {1, 4}) {
    ClearAutotuneResultsForTest();
    auto tuner = Tuner(level);
    GpuExecutorOptions o;
    o.autotuner = tuner.get();
    auto ex = GpuExecutor::Create(graph, backend, o);
    ASSERT_TRUE(ex.ok()) << ex.status();
    EXPECT_EQ((*ex)->placement().gemms, 1) << (*ex)->placement().ToString();
    EXPECT_EQ((*ex)->placement().tuned_library_calls, 1) << (*ex)->placement().ToString();
    EXPECT_EQ(tuner->counters().ops_tuned.load(), 1);
    auto out = (*ex)->Run({a, b});
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<float> got((*out)[0].data<float>(), (*out)[0].data<float>() + (*out)[0].numel());
    const double err = NormalizedError(got, data.ref);
    if (level == 1) {
      EXPECT_GT(err, 1e-2) << "level 1 takes the fastest candidate, the wrong one";
    } else {
      EXPECT_LT(err, 1e-5) << Notes(*tuner);
    }
  }
  // Without an autotuner (or at level 0) nothing is tuned.
  auto ex = GpuExecutor::Create(graph, backend, {});
  ASSERT_TRUE(ex.ok());
  EXPECT_EQ((*ex)->placement().tuned_library_calls, 0);
}

INSTANTIATE_TEST_SUITE_P(All, GpuAutotune, ::testing::Values("host", "cuda"), BackendName);

// A real model on the GPU with autotuning at its default level: outputs still match ONNX Runtime's, and a
// second session ("process") with the same persistent cache tunes nothing and makes the same choices.
TEST(GpuAutotuneModel, TunedModelMatchesReferenceAndSecondProcessRetunesNothing) {
  CJIT_GET_BACKEND(backend, "cuda");
  fs::path model = fs::path(testing::ModelsDir()) / "ppocr_mobile_cls";
  CJIT_REQUIRE_DATA(model / "model.onnx");
  const fs::path dir = fs::path(::testing::TempDir()) / "gpu_autotune_model";
  fs::remove_all(dir);
  const std::string flags = "--device=cuda --autotune_level=4 --persistent_cache_dir=" + dir.string();
  std::vector<std::string> placements[2];
  int64_t tuned[2] = {0, 0}, disk_hits[2] = {0, 0};
  for (int pass = 0; pass < 2; ++pass) {
    ClearAutotuneResultsForTest();
    auto session = LoadSessionWithFlags((model / "model.onnx").string(), flags, 2);
    ASSERT_TRUE(session.ok()) << session.status();
    auto sets = ReadDataSets(model.string(), **session);
    ASSERT_TRUE(sets.ok()) << sets.status();
    for (const DataSet& set : *sets) {
      DataSetResult r = RunDataSet(**session, set, 1e-3, 1e-4);
      ASSERT_TRUE(r.status.ok()) << set.dir << ": " << r.status;
      for (const auto& out : r.outputs) EXPECT_TRUE(out.ok) << set.dir << " " << out.name << " " << out.problem;
    }
    tuned[pass] = (*session)->stats().autotune.ops_tuned;
    disk_hits[pass] = (*session)->stats().autotune.disk_hits;
    for (const AutotuneRecord& r : (*session)->AutotuneRecords()) {
      placements[pass].push_back(r.key + " -> " + r.algorithm);
      if (pass == 0) std::printf("tuned %s -> %s (%.1f us vs default %.1f us)\n", r.op.c_str(), r.algorithm.c_str(),
                                 r.best_us, r.default_us);
    }
  }
  EXPECT_GT(tuned[0], 0);
  EXPECT_EQ(tuned[1], 0);
  EXPECT_EQ(disk_hits[1], tuned[0]);
  std::sort(placements[0].begin(), placements[0].end());
  std::sort(placements[1].begin(), placements[1].end());
  EXPECT_EQ(placements[0], placements[1]);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cjit
