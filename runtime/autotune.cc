#include "compiler/ir/cpu_isa.h"
#include "runtime/autotune.h"

#include <cpuid.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "Eigen/Core"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cache/cache_key.h"
#include "compiler/codegen/fusion_plan.h"
#include "compiler/ir/float16.h"
#include "base/file_util.h"
#include "base/logging.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/kernel.h"
#include "runtime/profiler.h"

namespace cjit {

AutotuneOptions AutotuneOptionsFromFlags(const Flags& f) {
  AutotuneOptions o;
  o.level = f.autotune_level;
  o.max_ms_per_op = f.autotune_max_ms_per_op;
  o.deterministic = f.autotune_deterministic;
  o.threshold = f.autotune_threshold;
  o.min_op_time_ms = f.autotune_min_op_time_ms;
  o.dump_to = f.autotune_results_dump_to;
  o.load_from = f.autotune_results_load_from;
  return o;
}

const std::string& AutotuneDeviceIdentity() {
  static const std::string* id = [] {
    unsigned regs[12] = {};
    std::string brand;
    if (__get_cpuid(0x80000000u, &regs[0], &regs[1], &regs[2], &regs[3]) && regs[0] >= 0x80000004u) {
      for (unsigned leaf = 0; leaf < 3; ++leaf) {
        __get_cpuid(0x80000002u + leaf, &regs[4 * leaf], &regs[4 * leaf + 1], &regs[4 * leaf + 2], &regs[4 * leaf + 3]);
      }
      brand.assign(reinterpret_cast<const char*>(regs), sizeof(regs));
      brand.erase(std::find(brand.begin(), brand.end(), '\0'), brand.end());
      brand = std::string(absl::StripAsciiWhitespace(brand));
    }
    if (brand.empty()) brand = "unknown";
    // The instruction sets in use (--max_cpu_isa caps them): a result tuned under a cap is another
    // device's.
    std::vector<std::string> isa;
    if (CpuHasAvx2()) isa.insert(isa.end(), {"avx2", "fma"});
    if (CpuHasAvx512()) isa.insert(isa.end(), {"avx512f", "avx512bw"});
    if (CpuHasAvx512Vnni()) isa.push_back("avx512vnni");
    if (CpuHasAvx512Bf16()) isa.push_back("avx512bf16");
    if (CpuHasAmx()) isa.push_back("amx-bf16");
    for (char& c : brand) {
      if (c == '\t' || c == ';') c = ' ';
    }
    return new std::string(absl::StrCat("cpu=", brand, ";isa=", absl::StrJoin(isa, ",")));
  }();
  return *id;
}

const std::string& AutotuneLibraryVersions() {
  static const std::string* v = [] {
    const dnnl_version_t* d = dnnl_version();
    return new std::string(absl::StrCat("onednn=", d->major, ".", d->minor, ".", d->patch, "+", d->hash,
                                        ";eigen=", EIGEN_WORLD_VERSION, ".", EIGEN_MAJOR_VERSION, ".",
                                        EIGEN_MINOR_VERSION, ";blis=", BlisVersion(), ";clusterjit=", CJIT_VERSION));
  }();
  return *v;
}

namespace {

// Results of this process, shared by every session (as XLA's process-wide autotune cache).
struct ProcessTable {
  std::mutex mu;
  std::map<std::string, AutotuneRecord> results;
  std::set<std::string> in_flight;
  std::mutex dump_mu;  // serializes dump-file writes
};
ProcessTable& Table() {
  static auto* t = new ProcessTable();
  return *t;
}

std::mutex& TestCandidateMu() {
  static auto* mu = new std::mutex();
  return *mu;
}
std::shared_ptr<const TestOnlyCandidate>& TestCandidate() {
  static auto* c = new std::shared_ptr<const TestOnlyCandidate>();
  return *c;
}
std::shared_ptr<const TestOnlyCandidate> CurrentTestCandidate() {
  std::lock_guard<std::mutex> lock(TestCandidateMu());
  return TestCandidate();
}

// A KernelContext describing the node and its inputs (no outputs), for the candidate lists.
KernelContext DescribeContext(const Node& node, const std::vector<const Tensor*>& inputs,
                              const std::vector<bool>& is_constant, const std::vector<PostOp>* post_ops,
                              const std::vector<InferOutput>* inferred, int threads) {
  KernelContext ctx;
  ctx.node = &node;
  ctx.inputs = inputs;
  ctx.input_is_constant = &is_constant;
  ctx.post_ops = post_ops;
  ctx.threads = threads;
  if (inferred != nullptr && !inferred->empty()) {
    ctx.static_inferred = inferred;
  } else {
    for (const Value* v : node.outputs) ctx.inferred.push_back(v ? InferOutput{v->dtype, v->shape} : InferOutput{});
  }
  return ctx;
}

struct Candidate {
  std::string id;
  bool deterministic = true;
  std::shared_ptr<const TestOnlyCandidate> test_only;  // set for the test-only candidate
};

std::vector<Candidate> ListCandidates(const KernelContext& ctx) {
  std::vector<Candidate> out;
  if (const AlgorithmsFn* fn = FindAlgorithms(ctx.node->op_type); fn != nullptr) {
    try {
      for (AlgorithmCandidate& c : (*fn)(ctx)) out.push_back({std::move(c.id), c.deterministic, nullptr});
    } catch (const std::exception& e) {
      CJIT_VLOG(1) << "autotune: listing candidates of " << ctx.node->Describe() << " failed: " << e.what();
      out.clear();
    }
  }
  // The likeliest winners first (the per-op budget cuts the tail): variants for an ISA below this CPU's
  // best (avx2 on an AVX-512 CPU, sse41 on an AVX2 one) and oneDNN's GEMM-based convolution (im2col into
  // a jitted GEMM: 50-290 ms first runs for a 960x960 detector's convs, against 2-10 ms for the default)
  // after the rest, in the library's order otherwise. On an AVX2-only CPU the avx2 variants are the best.
  const bool has_avx512 = CpuHasAvx512();
  const bool has_avx2 = CpuHasAvx2();
  auto prior = [has_avx512, has_avx2](const std::string& id) {
    if (has_avx2 && id.find("sse41") != std::string::npos) return 2;
    if (has_avx512 && id.find(":avx2") != std::string::npos) return 1;
    if (id.find("gemm:jit") != std::string::npos) return 1;
    return 0;
  };
  std::stable_sort(out.begin(), out.end(),
                   [&](const Candidate& a, const Candidate& b) { return prior(a.id) < prior(b.id); });
  if (auto t = CurrentTestCandidate(); t != nullptr && t->op_type == ctx.node->op_type && !out.empty()) {
    out.push_back({t->id, true, t});
  }
  return out;
}

bool Offered(const std::string& algorithm, const KernelContext& ctx) {
  if (algorithm.empty()) return true;
  for (const Candidate& c : ListCandidates(ctx)) {
    if (c.id == algorithm) return true;
  }
  return false;
}

std::string PostOpsText(const std::vector<PostOp>* ops) {
  std::string s;
  if (ops == nullptr) return s;
  for (const PostOp& op : *ops) {
    absl::StrAppend(&s, static_cast<int>(op.kind), absl::StrFormat("/%a/%a", op.a, op.b), op.tensor ? "/t" : "", ",");
  }
  return s;
}

// Bytes flushed from the caches between timed runs (larger than this CPU's L2; a rewrite of it also
// evicts the problem's data from L1/L2).
constexpr size_t kFlushBytes = size_t{4} << 20;
// Flush buffers come from a small process-wide pool (no thread_local: a host's threads would each keep
// 4 MiB for their lifetime after tuning once).
struct FlushPool {
  std::mutex mu;
  std::vector<std::unique_ptr<uint8_t[]>> free;
};
FlushPool& Pool() {
  static auto* p = new FlushPool();
  return *p;
}
void FlushCaches() {
  std::unique_ptr<uint8_t[]> buf;
  {
    std::lock_guard<std::mutex> lock(Pool().mu);
    if (!Pool().free.empty()) {
      buf = std::move(Pool().free.back());
      Pool().free.pop_back();
    }
  }
  if (!buf) buf.reset(new uint8_t[kFlushBytes]);
  static std::atomic<uint8_t> salt{1};
  std::memset(buf.get(), salt.fetch_add(1, std::memory_order_relaxed), kFlushBytes);
  std::lock_guard<std::mutex> lock(Pool().mu);
  if (Pool().free.size() < 4) Pool().free.push_back(std::move(buf));
}

// A candidate whose first timed run is slower than this factor times the best minimum so far is dropped.
constexpr double kScreenRatio = 1.5;
// What a candidate's first run may take beyond kScreenRatio x the best for creating its primitive (oneDNN
// generates code per primitive: ~0.1-20 ms) before it is dropped unchecked.
constexpr double kCreationAllowanceUs = 20000;

constexpr size_t kCompareChunk = 2048;

double Tolerance(DType t) { return t == DType::kF32 || t == DType::kF64 ? 1e-3 : 3e-2; }

// Elements [off, off + m) of a float tensor as doubles (chunks: outputs being checked can be hundreds of
// MB, and a tensor-sized double copy of each would cost more than the candidate).
void ToDoubles(const Tensor& t, size_t off, size_t m, double* out) {
  switch (t.dtype()) {
    case DType::kF64:
      std::copy_n(static_cast<const double*>(t.raw()) + off, m, out);
      return;
    case DType::kF32:
      std::copy_n(static_cast<const float*>(t.raw()) + off, m, out);
      return;
    default: {
      float f[kCompareChunk];
      ConvertFloatBuffer(static_cast<const char*>(t.raw()) + off * DTypeSize(t.dtype()), t.dtype(), f, DType::kF32, m);
      std::copy_n(f, m, out);
    }
  }
}

// The absolute tolerance of a check against `ref` (see the header): the dtype's tolerance times
// 1 + max |finite reference value|.
double ReferenceTolerance(const Tensor& ref) {
  if (!IsFloat(ref.dtype())) return 0;
  const size_t n = static_cast<size_t>(ref.numel());
  double b[kCompareChunk];
  double scale = 0;
  for (size_t off = 0; off < n; off += kCompareChunk) {
    const size_t m = std::min(kCompareChunk, n - off);
    ToDoubles(ref, off, m, b);
    for (size_t i = 0; i < m; ++i) {
      if (std::isfinite(b[i])) scale = std::max(scale, std::fabs(b[i]));
    }
  }
  return Tolerance(ref.dtype()) * (1.0 + scale);
}

// "" when `got` matches `ref` within `tol` (ReferenceTolerance(ref)), else what differs.
std::string CompareOutputs(const Tensor& got, const Tensor& ref, double tol) {
  if (got.dtype() != ref.dtype() || got.dims() != ref.dims()) return "output dtype or dims differ";
  if (!IsFloat(ref.dtype())) {
    return ref.nbytes() == 0 || std::memcmp(got.raw(), ref.raw(), ref.nbytes()) == 0 ? "" : "integer output differs";
  }
  const size_t n = static_cast<size_t>(ref.numel());
  double a[kCompareChunk], b[kCompareChunk];
  for (size_t off = 0; off < n; off += kCompareChunk) {
    const size_t m = std::min(kCompareChunk, n - off);
    ToDoubles(got, off, m, a);
    ToDoubles(ref, off, m, b);
    bool all_close = true;  // the common case in one vectorizable pass; details only on a mismatch
    for (size_t i = 0; i < m; ++i) all_close &= std::fabs(a[i] - b[i]) <= tol;
    if (all_close) continue;
    for (size_t i = 0; i < m; ++i) {
      const bool na = std::isnan(a[i]), nb = std::isnan(b[i]);
      if (na || nb) {
        if (na != nb) return absl::StrCat("element ", off + i, " is ", a[i], ", reference ", b[i]);
        continue;
      }
      if (std::isinf(b[i]) || std::isinf(a[i])) {
        if (a[i] != b[i]) return absl::StrCat("element ", off + i, " is ", a[i], ", reference ", b[i]);
        continue;
      }
      if (std::fabs(a[i] - b[i]) > tol) {
        return absl::StrCat("element ", off + i, " is ", a[i], ", reference ", b[i], " (tolerance ", tol, ")");
      }
    }
  }
  return "";
}

// Seeded uniform values in [-1, 1) written into a float tensor of any float dtype (16-bit rounded to
// nearest even), in chunks. A 64-bit linear congruential generator (Knuth's MMIX constants), top 24 bits:
// inputs only need to be deterministic and not degenerate, and tensors of millions of elements are filled
// per tuned op (std::uniform_real_distribution over mt19937 took ~40 ms for a 480x480x16 input).
void FillRandom(Tensor& t, uint64_t& state) {
  if (!IsFloat(t.dtype())) return;  // shapes, indices: the tuned ops have none
  auto next = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>(static_cast<int32_t>(state >> 40) - (1 << 23)) * (1.0f / (1 << 23));
  };
  const size_t n = static_cast<size_t>(t.numel());
  if (t.dtype() == DType::kF32) {
    float* p = static_cast<float*>(t.raw());
    for (size_t i = 0; i < n; ++i) p[i] = next();
    return;
  }
  float f[kCompareChunk];
  for (size_t off = 0; off < n; off += kCompareChunk) {
    const size_t m = std::min(kCompareChunk, n - off);
    for (size_t i = 0; i < m; ++i) f[i] = next();
    if (t.dtype() == DType::kF64) {
      for (size_t i = 0; i < m; ++i) static_cast<double*>(t.raw())[off + i] = f[i];
    } else {
      ConvertFloatBuffer(f, DType::kF32, static_cast<char*>(t.raw()) + off * DTypeSize(t.dtype()), t.dtype(), m);
    }
  }
}

// Outputs set to NaN before a candidate runs (level 3+: a candidate that writes nothing is caught).
void FillNaN(std::vector<Tensor>& outs) {
  for (Tensor& t : outs) {
    if (!t.defined() || !IsFloat(t.dtype()) || t.numel() == 0) continue;
    const size_t n = static_cast<size_t>(t.numel());
    switch (t.dtype()) {
      case DType::kF32:
        std::fill_n(static_cast<float*>(t.raw()), n, std::numeric_limits<float>::quiet_NaN());
        break;
      case DType::kF64:
        std::fill_n(static_cast<double*>(t.raw()), n, std::numeric_limits<double>::quiet_NaN());
        break;
      default: {  // float16 / bfloat16: one quiet NaN pattern converted, then copied
        const float nan = std::numeric_limits<float>::quiet_NaN();
        uint16_t bits = 0;
        ConvertFloatBuffer(&nan, DType::kF32, &bits, t.dtype(), 1);
        std::fill_n(static_cast<uint16_t*>(t.raw()), n, bits);
      }
    }
  }
}

// Process-table key: CPU results by op signature; device results with their device and library identities.
std::string TableKey(const std::string& device, const std::string& libraries, const std::string& key) {
  return device.empty() ? key : absl::StrCat(device, "\n", libraries, "\n", key);
}

std::string EntryLine(const AutotuneRecord& r) {
  return absl::StrCat(r.device.empty() ? AutotuneDeviceIdentity() : r.device, "\t",
                      r.device.empty() ? AutotuneLibraryVersions() : r.libraries, "\t", absl::CEscape(r.key), "\t",
                      absl::CEscape(r.algorithm), "\t", absl::StrFormat("%.3f", r.best_us), "\t",
                      absl::StrFormat("%.3f", r.default_us));
}

// The persistent-cache payload of a result ("v1", algorithm, best and default microseconds, one per line)
// and its parser (false: malformed).
std::string DiskPayload(const AutotuneRecord& r) {
  return absl::StrCat("v1\n", r.algorithm, "\n", r.best_us, "\n", r.default_us);
}

bool ParseDiskPayload(const std::string& payload, AutotuneRecord* r) {
  std::vector<std::string> f = absl::StrSplit(payload, '\n');
  if (f.size() != 4 || f[0] != "v1" || !absl::SimpleAtod(f[2], &r->best_us) ||
      !absl::SimpleAtod(f[3], &r->default_us)) {
    return false;
  }
  r->algorithm = f[1];
  return true;
}

CacheKey DiskKey(const std::string& device, const std::string& libraries, const std::string& key) {
  CacheKey k;
  k.canonical = absl::StrCat("autotune v1\n", device.empty() ? AutotuneDeviceIdentity() : device, "\n",
                             device.empty() ? AutotuneLibraryVersions() : libraries, "\n", key);
  k.hash = Fingerprint64(k.canonical);
  return k;
}

}  // namespace

void SetTestOnlyCandidate(const TestOnlyCandidate* candidate) {
  std::lock_guard<std::mutex> lock(TestCandidateMu());
  TestCandidate() = candidate ? std::make_shared<const TestOnlyCandidate>(*candidate) : nullptr;
}

void ClearAutotuneResultsForTest() {
  ProcessTable& t = Table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.results.clear();
}

absl::StatusOr<double> MeasureMinOfSamples(const std::function<absl::StatusOr<double>()>& sample, int max_runs,
                                           double tolerance, double budget_us, int* runs, double first_sample_us) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  double best = std::numeric_limits<double>::infinity();
  int n = 0, near_best = 0;
  if (first_sample_us >= 0) {
    best = first_sample_us;
    n = 1;
  }
  for (int i = n; i < max_runs; ++i) {
    if (n > 0 && std::chrono::duration<double, std::micro>(Clock::now() - start).count() > budget_us) break;
    absl::StatusOr<double> us = sample();
    if (!us.ok()) return us.status();
    ++n;
    // Stable: two runs after the first within `tolerance` of the minimum (a new minimum more than
    // `tolerance` below the old one starts the count again).
    if (*us < best / (1.0 + tolerance)) {
      near_best = 0;
    } else if (*us <= best * (1.0 + tolerance)) {
      ++near_best;
    }
    best = std::min(best, *us);
    if (near_best >= 2) break;
  }
  if (runs) *runs = n;
  return best;
}

absl::StatusOr<double> MeasureMinMicros(const std::function<absl::Status()>& fn, int max_runs, double tolerance,
                                        double budget_us, int* runs, bool warmed_up, double first_sample_us) {
  using Clock = std::chrono::steady_clock;
  if (!warmed_up) {
    if (absl::Status st = fn(); !st.ok()) return st;  // warm-up: caches of the library, threads awake
  }
  return MeasureMinOfSamples(
      [&]() -> absl::StatusOr<double> {
        FlushCaches();
        const auto t0 = Clock::now();
        if (absl::Status st = fn(); !st.ok()) return st;
        return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      },
      max_runs, tolerance, budget_us, runs, first_sample_us);
}

absl::StatusOr<std::unique_ptr<Autotuner>> Autotuner::Create(const AutotuneOptions& options, TieredCache* disk,
                                                             Profiler* profiler) {
  std::unique_ptr<Autotuner> t(new Autotuner(options, disk, profiler));
  if (!options.load_from.empty()) {
    auto text = ReadRegularFile(options.load_from, int64_t{256} << 20, "--autotune_results_load_from");
    if (!text.ok()) return absl::InvalidArgumentError(text.status().message());
    int line_no = 0, ignored = 0;
    for (absl::string_view line : absl::StrSplit(*text, '\n')) {
      ++line_no;
      if (line.empty() || line[0] == '#') continue;
      std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
      std::string why, key, algorithm;
      // A device (GPU) result is checked against the device when a GpuExecutor asks (LookupDevice).
      const bool device_entry = f.size() == 6 && !absl::StartsWith(f[0], "cpu=");
      if (f.size() != 6) {
        why = absl::StrCat("malformed (", f.size(), " fields, want 6)");
      } else if (device_entry) {
        if (!absl::CUnescape(f[2], &key) || !absl::CUnescape(f[3], &algorithm)) why = "bad escape sequence";
      } else if (f[0] != AutotuneDeviceIdentity()) {
        why = absl::StrCat("made on another device (", f[0], "; this is ", AutotuneDeviceIdentity(), ")");
      } else if (f[1] != AutotuneLibraryVersions()) {
        why = absl::StrCat("made with other library versions (", f[1], "; these are ", AutotuneLibraryVersions(), ")");
      } else if (!absl::CUnescape(f[2], &key) || !absl::CUnescape(f[3], &algorithm)) {
        why = "bad escape sequence";
      }
      if (!why.empty()) {
        ++ignored;
        ++t->counters_.ignored_entries;
        if (ignored <= 10) {
          CJIT_LOG(WARNING) << "autotune results " << options.load_from << ":" << line_no << ": entry ignored: " << why;
        }
        continue;
      }
      // A later line for the same signature wins. CPU entries were checked above (stored without identities).
      LoadedEntry& e = t->loaded_[std::move(key)];
      e.device = device_entry ? std::string(f[0]) : "";
      e.libraries = device_entry ? std::string(f[1]) : "";
      e.algorithm = std::move(algorithm);
    }
    if (ignored > 10) {
      CJIT_LOG(WARNING) << "autotune results " << options.load_from << ": " << ignored << " entries ignored in all";
    }
  }
  return t;
}

std::string Autotuner::SignatureKey(const Node& node, const std::vector<const Tensor*>& inputs,
                                    const std::vector<bool>& is_constant, const std::vector<PostOp>* post_ops,
                                    int threads) {
  if (FindAlgorithms(node.op_type) == nullptr) return "";
  std::string k = absl::StrCat("op=", node.domain, ":", node.op_type, ";attrs=");
  for (const auto& [name, a] : node.attrs) absl::StrAppend(&k, name, "=", AttrText(a), ",");
  absl::StrAppend(&k, ";in=");
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr) {
      absl::StrAppend(&k, "-,");
      continue;
    }
    const bool c = i < is_constant.size() && is_constant[i];
    absl::StrAppend(&k, DTypeName(inputs[i]->dtype()), "[", absl::StrJoin(inputs[i]->dims(), "x"), "]", c ? "c" : "",
                    ",");
  }
  absl::StrAppend(&k, ";post=", PostOpsText(post_ops), ";threads=", threads);
  return k;
}

void Autotuner::Record(AutotuneRecord r) {
  std::lock_guard<std::mutex> lock(mu_);
  if (records_.size() < kMaxRecords) records_.push_back(std::move(r));
}

std::vector<AutotuneRecord> Autotuner::records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_;
}

std::optional<std::string> Autotuner::Lookup(const std::string& key, const Node& node,
                                             const std::vector<const Tensor*>& inputs,
                                             const std::vector<bool>& is_constant, const std::vector<PostOp>* post_ops,
                                             const std::vector<InferOutput>* inferred, int threads) {
  const KernelContext ctx = DescribeContext(node, inputs, is_constant, post_ops, inferred, threads);
  // A result of this process was tuned by this build on these inputs; loaded ones are checked against what
  // the kernel offers now.
  return LookupStored(key, "", "", node.Describe(), [&](const std::string& algorithm, const char* source) {
    if (Offered(algorithm, ctx)) return true;
    CJIT_LOG(WARNING) << "autotune: " << source << " result '" << algorithm << "' for " << node.Describe()
                      << " is not offered by this build for these inputs: ignored, the op is tuned again";
    ++counters_.ignored_entries;
    return false;
  });
}

std::optional<std::string> Autotuner::LookupStored(const std::string& key, const std::string& device,
                                                   const std::string& libraries, const std::string& op,
                                                   const std::function<bool(const std::string&, const char*)>& usable) {
  ProcessTable& table = Table();
  const std::string table_key = TableKey(device, libraries, key);
  auto found = [&](AutotuneRecord r, const char* source, std::atomic<int64_t>& counter) -> std::optional<std::string> {
    const bool memory = std::string_view(source) == "memory";
    if (!memory && !usable(r.algorithm, source)) return std::nullopt;
    ++counter;
    if (!memory) {
      std::lock_guard<std::mutex> lock(table.mu);
      table.results.emplace(table_key, r);
    }
    r.source = source;
    r.op = op;
    CJIT_VLOG(1) << "autotune: " << op << " -> " << (r.algorithm.empty() ? "default" : r.algorithm) << " (" << source
                 << ")";
    std::string algorithm = r.algorithm;
    Record(std::move(r));
    return algorithm;
  };
  {
    std::optional<AutotuneRecord> r;
    {
      std::lock_guard<std::mutex> lock(table.mu);
      auto it = table.results.find(table_key);
      if (it != table.results.end()) r = it->second;
    }
    if (r) {
      if (auto a = found(*r, "memory", counters_.memory_hits)) return a;
    }
  }
  if (auto it = loaded_.find(key); it != loaded_.end()) {
    const LoadedEntry& e = it->second;
    if (e.device != device || e.libraries != libraries) {
      // Only device entries get here (CPU ones were checked when loaded). Logged once per signature and
      // tuner (a model may have many ops of it).
      std::lock_guard<std::mutex> lock(mu_);
      if (ignored_logged_.insert(key).second) {
        ++counters_.ignored_entries;
        CJIT_LOG(WARNING) << "autotune results " << options_.load_from << ": entry for " << op << " ignored: made "
                          << (e.device != device
                                  ? absl::StrCat("on another device (", e.device, "; this is ", device, ")")
                                  : absl::StrCat("with other library versions (", e.libraries, "; these are ",
                                                 libraries, ")"));
      }
    } else {
      AutotuneRecord r;
      r.key = key;
      r.device = device;
      r.libraries = libraries;
      r.algorithm = e.algorithm;
      if (auto a = found(r, "file", counters_.file_hits)) return a;
    }
  }
  if (disk_ != nullptr) {
    if (auto payload = disk_->Lookup(DiskKey(device, libraries, key), PayloadKind::kAutotune)) {
      AutotuneRecord r;
      r.key = key;
      r.device = device;
      r.libraries = libraries;
      if (ParseDiskPayload(*payload, &r)) {
        if (auto a = found(r, "disk", counters_.disk_hits)) return a;
      } else {
        CJIT_LOG(WARNING) << "autotune: persistent cache entry for " << op << " is malformed: ignored";
        ++counters_.ignored_entries;
      }
    }
  }
  return std::nullopt;
}

std::optional<std::string> Autotuner::TuneOnce(const std::string& key, const std::string& device,
                                               const std::string& libraries, const std::string& op,
                                               const std::function<bool(const std::string&, const char*)>& usable,
                                               const std::function<std::string()>& tune) {
  ProcessTable& table = Table();
  const std::string table_key = TableKey(device, libraries, key);
  {
    std::lock_guard<std::mutex> lock(table.mu);
    auto it = table.results.find(table_key);
    if (it != table.results.end()) {
      ++counters_.memory_hits;
      return it->second.algorithm;
    }
    if (!table.in_flight.insert(table_key).second) return std::nullopt;  // another session tunes it
  }
  struct Done {
    ProcessTable& t;
    const std::string& key;
    ~Done() {
      std::lock_guard<std::mutex> lock(t.mu);
      t.in_flight.erase(key);
    }
  } done{table, table_key};
  // Tune once per fleet: another process holding the remote tier's lease on this result tunes it (the
  // default meanwhile; asked again at the next execution), or published it meanwhile.
  bool leased = false;
  const bool fleet = disk_ != nullptr && disk_->remote() != nullptr && !disk_->read_only();
  const CacheKey fleet_key = fleet ? DiskKey(device, libraries, key) : CacheKey{};
  if (fleet) {
    switch (disk_->AcquireFleetLease(fleet_key, PayloadKind::kAutotune)) {
      case TieredCache::FleetLease::kWait:
        ++counters_.lease_waits;
        return std::nullopt;
      case TieredCache::FleetLease::kFound:
        if (auto a = LookupStored(key, device, libraries, op, usable)) return a;
        break;  // not usable here: tune (without the lease)
      case TieredCache::FleetLease::kProduce:
        leased = true;
        break;
    }
  }
  struct Release {
    TieredCache* disk;
    const CacheKey& key;
    ~Release() {
      if (disk != nullptr) disk->ReleaseFleetLease(key, PayloadKind::kAutotune);  // behind Finish's Store
    }
  } release{leased ? disk_ : nullptr, fleet_key};
  try {
    return tune();
  } catch (const std::exception& e) {
    // Scratch allocations beyond memory (bad_alloc) or a library exception: keep the default.
    CJIT_LOG(WARNING) << "autotune: " << op << " not tuned: " << e.what();
    return "";
  }
}

std::optional<std::string> Autotuner::Tune(const std::string& key, const Node& node,
                                           const std::vector<const Tensor*>& inputs,
                                           const std::vector<bool>& is_constant, const std::vector<PostOp>* post_ops,
                                           const std::vector<InferOutput>* inferred, int threads) {
  return TuneOnce(key, "", "", node.Describe(),
                  [&](const std::string& algorithm, const char*) {  // only for a result the fleet published meanwhile
                    return Offered(algorithm, DescribeContext(node, inputs, is_constant, post_ops, inferred, threads));
                  },
                  [&] { return TuneNow(key, node, inputs, is_constant, post_ops, inferred, threads); });
}

std::optional<std::string> Autotuner::LookupDevice(const std::string& key, const std::string& device,
                                                   const std::string& libraries, const std::string& op) {
  return LookupStored(key, device, libraries, op, [](const std::string&, const char*) { return true; });
}

void Autotuner::ForgetDevice(const std::string& key, const std::string& device, const std::string& libraries) {
  ProcessTable& table = Table();
  std::lock_guard<std::mutex> lock(table.mu);
  table.results.erase(TableKey(device, libraries, key));
}

std::optional<std::string> Autotuner::TuneDevice(const std::string& key, const std::string& device,
                                                 const std::string& libraries, const std::string& op,
                                                 const std::string& op_type,
                                                 const std::function<AutotuneRecord()>& tune) {
  return TuneOnce(key, device, libraries, op, [](const std::string&, const char*) { return true; },
                  [&]() -> std::string {
    const int64_t t_start = Profiler::Now();
    AutotuneRecord rec = tune();
    if (cancelled()) return "";  // nothing partial is stored
    rec.key = key;
    rec.device = device;
    rec.libraries = libraries;
    rec.op = op;
    rec.source = "tuned";
    counters_.candidates_timed += rec.candidates_timed;
    counters_.candidates_rejected += rec.candidates_rejected;
    Finish(rec, t_start, op_type, op);
    return rec.algorithm;
  });
}

std::string Autotuner::TuneNow(const std::string& key, const Node& node, const std::vector<const Tensor*>& inputs,
                               const std::vector<bool>& is_constant, const std::vector<PostOp>* post_ops,
                               const std::vector<InferOutput>* inferred, int threads) {
  const int64_t t_start = Profiler::Now();
  const KernelContext desc = DescribeContext(node, inputs, is_constant, post_ops, inferred, threads);
  std::vector<Candidate> candidates = ListCandidates(desc);
  AutotuneRecord rec;
  rec.key = key;
  rec.op = node.Describe();
  rec.source = "tuned";
  auto finish = [&](const std::string& why) {
    if (!why.empty()) rec.notes.push_back(why);
    Finish(rec, t_start, node.op_type, node.name);
    return rec.algorithm;
  };
  if (candidates.empty()) return finish("no candidates");
  // Inputs: constants as they are; others uninitialized (level 1) or seeded random values (2+).
  std::vector<Tensor> owned(inputs.size());
  std::vector<const Tensor*> ins(inputs.size(), nullptr);
  uint64_t rng = 0x5eed;
  try {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i] == nullptr) continue;
      if (i < is_constant.size() && is_constant[i]) {
        ins[i] = inputs[i];
        continue;
      }
      owned[i] = Tensor(inputs[i]->dtype(), inputs[i]->dims());
      if (options_.level >= 2) FillRandom(owned[i], rng);
      ins[i] = &owned[i];
    }
  } catch (const std::exception& e) {
    return finish(absl::StrCat("not tuned: ", e.what()));
  }
  const std::vector<InferOutput>& outs_info = desc.infer();
  std::vector<Tensor> outputs(outs_info.size());
  try {
    for (size_t k = 0; k < outs_info.size(); ++k) {
      if (!outs_info[k].shape.fully_known()) return finish("not tuned: an output shape is unknown");
      outputs[k] = Tensor(outs_info[k].dtype, outs_info[k].shape.concrete());
      // An empty output has nothing to compute or time: every algorithm is the same no-op.
      if (outputs[k].numel() == 0) return finish("not tuned: an output is empty");
    }
  } catch (const std::exception& e) {
    return finish(absl::StrCat("not tuned: ", e.what()));
  }
  std::vector<InferOutput> static_outs = outs_info;
  int64_t scratch = 0;
  std::string impl;
  auto run = [&](const Candidate* c) -> absl::Status {
    if (c != nullptr && c->test_only) return c->test_only->run(ins, outputs);
    scratch = 0;
    std::vector<Tensor> preset = outputs;
    auto r = EvaluateNode(node, ins, threads, nullptr, &is_constant, post_ops, &preset, &impl, &static_outs,
                          c ? &c->id : nullptr, &scratch);
    if (!r.ok()) return r.status();
    for (size_t k = 0; k < r->size() && k < outputs.size(); ++k) {
      if ((*r)[k].raw() != outputs[k].raw() && (*r)[k].defined() && outputs[k].nbytes() > 0) {
        if ((*r)[k].nbytes() != outputs[k].nbytes()) return absl::InternalError("output size mismatch");
        std::memcpy(outputs[k].raw(), (*r)[k].raw(), outputs[k].nbytes());
      }
    }
    return absl::OkStatus();
  };
  const double budget_us = options_.max_ms_per_op * 1000.0;
  auto elapsed_us = [&] { return (Profiler::Now() - t_start) / 1000.0; };
  // The default algorithm: the reference (level 4) and the time to beat.
  if (options_.level >= 3) FillNaN(outputs);
  if (absl::Status st = run(nullptr); !st.ok()) return finish(absl::StrCat("not tuned: default failed: ", st.message()));
  rec.default_impl = impl;
  std::vector<Tensor> reference;
  std::vector<double> reference_tol;
  if (options_.level >= 4) {
    for (const Tensor& t : outputs) {
      reference.push_back(t.Clone());
      reference_tol.push_back(ReferenceTolerance(t));
    }
  }
  // One budget for the whole op (default, candidates, checks): each measurement gets what is left, at
  // least one timed run. A large convolution's runs take tens of ms: a fixed budget per candidate let one
  // 960x960 detector signature tune for 10 s.
  auto left_us = [&] { return std::max(0.0, budget_us - elapsed_us()); };
  auto default_time = MeasureMinMicros([&] { return run(nullptr); }, 10, 0.05, left_us(), nullptr,
                                       /*warmed_up=*/true);
  if (!default_time.ok()) return finish(absl::StrCat("not tuned: default failed: ", default_time.status().message()));
  rec.default_us = *default_time;
  const int64_t default_scratch = scratch;
  struct Timed {
    const Candidate* c;
    double us;
    int64_t scratch;
  };
  std::vector<Timed> timed;
  auto reject = [&](const Candidate& c, absl::string_view why) {
    ++rec.candidates_rejected;
    ++counters_.candidates_rejected;
    rec.notes.push_back(absl::StrCat(c.id, ": rejected (", why, ")"));
  };
  for (const Candidate& c : candidates) {
    if (cancelled()) return "";  // the session is going away: store nothing partial
    if (options_.deterministic && !c.deterministic) continue;
    if (elapsed_us() > budget_us) {
      rec.notes.push_back(absl::StrCat(c.id, ": skipped (budget of ", options_.max_ms_per_op, " ms spent)"));
      continue;
    }
    if (options_.level >= 3) FillNaN(outputs);
    const int64_t w0 = Profiler::Now();
    absl::Status st = run(&c);  // warm-up (creates the primitive)
    const double first_us = (Profiler::Now() - w0) / 1000.0;
    double best_so_far = rec.default_us;
    for (const Timed& t : timed) best_so_far = std::min(best_so_far, t.us);
    // A candidate whose first run (primitive creation included) is far slower than the best cannot be
    // chosen: it is neither checked nor timed (a reference implementation can take 100x the default: one
    // such oneDNN deconvolution at 960x960 spent 0.7 s in its check and screen runs).
    if (st.ok() && !options_.deterministic && !c.test_only &&
        first_us > kScreenRatio * best_so_far + kCreationAllowanceUs) {
      rec.notes.push_back(absl::StrFormat("%s: %.1f us in its first run, over %.1fx the best + %.0f ms: not checked "
                                          "or timed", c.id, first_us, kScreenRatio, kCreationAllowanceUs / 1000));
      continue;
    }
    if (!st.ok()) {
      reject(c, st.message());
      continue;
    }
    // Screen: one timed run (caches flushed); a candidate slower than kScreenRatio x the best minimum so
    // far is not checked or timed further (most of a convolution's candidates are 2-10x off: this halves
    // tuning; a candidate that cannot win needs no check, and a check of a large output costs several runs).
    // (Not for the test-only candidate: tests assert on its choice, one preempted run must not drop it.)
    double once_us = -1;
    if (!options_.deterministic && !c.test_only) {
      FlushCaches();
      const int64_t s0 = Profiler::Now();
      if (absl::Status sst = run(&c); !sst.ok()) {
        reject(c, sst.message());
        continue;
      }
      once_us = (Profiler::Now() - s0) / 1000.0;
      if (once_us > kScreenRatio * best_so_far) {
        rec.notes.push_back(absl::StrFormat("%s: %.1f us in one run, over %.1fx the best: not timed further", c.id,
                                            once_us, kScreenRatio));
        continue;
      }
    }
    // Level 4: the output of its last run (outputs were NaN before its first: one that writes nothing fails).
    std::string why;
    if (options_.level >= 4) {
      for (size_t k = 0; k < outputs.size() && why.empty(); ++k) {
        why = CompareOutputs(outputs[k], reference[k], reference_tol[k]);
      }
    }
    if (!why.empty()) {
      reject(c, why);
      continue;
    }
    ++rec.candidates_timed;
    ++counters_.candidates_timed;
    // Warmed up; the screen run (caches flushed, timed) is the first sample.
    auto us = MeasureMinMicros([&] { return run(&c); }, 10, 0.05, c.test_only ? budget_us : left_us(), nullptr,
                               /*warmed_up=*/true, once_us);
    if (!us.ok()) {
      rec.notes.push_back(absl::StrCat(c.id, ": rejected (", us.status().message(), ")"));
      continue;
    }
    rec.notes.push_back(absl::StrFormat("%s: %.1f us", c.id, *us));
    timed.push_back({&c, *us, c.test_only ? 0 : scratch});
    if (options_.deterministic) break;  // the first good one
  }
  // The fastest; within 5% of it (noise) the one with the least scratch memory, the default first.
  rec.best_us = rec.default_us;
  if (!timed.empty()) {
    double fastest = rec.default_us;
    for (const Timed& t : timed) fastest = std::min(fastest, t.us);
    const Timed* pick = nullptr;
    int64_t pick_scratch = default_scratch;
    double pick_us = rec.default_us;
    bool default_in = !options_.deterministic && rec.default_us <= fastest * 1.05;
    if (!default_in) pick_scratch = std::numeric_limits<int64_t>::max();
    for (const Timed& t : timed) {
      if (!options_.deterministic && t.us > fastest * 1.05) continue;
      if (t.scratch < pick_scratch || (pick == nullptr && !default_in)) {
        pick = &t;
        pick_scratch = t.scratch;
        pick_us = t.us;
      }
    }
    if (pick != nullptr) {
      rec.algorithm = pick->c->id;
      rec.best_us = pick_us;
    }
  }
  return finish("");
}

void Autotuner::Finish(const AutotuneRecord& rec, int64_t t_start, const std::string& op_type,
                       const std::string& node_name) {
  ProcessTable& table = Table();
  {
    std::lock_guard<std::mutex> lock(table.mu);
    table.results.emplace(TableKey(rec.device, rec.libraries, rec.key), rec);
  }
  ++counters_.ops_tuned;
  const int64_t t_end = Profiler::Now();
  counters_.tuning_us += (t_end - t_start) / 1000;
  if (disk_ != nullptr && !disk_->read_only()) {
    absl::Status st = disk_->Store(DiskKey(rec.device, rec.libraries, rec.key), PayloadKind::kAutotune, DiskPayload(rec));
    if (!st.ok()) CJIT_LOG(WARNING) << "autotune: persistent cache write failed: " << st.message();
  }
  if (profiler_ != nullptr) {
    TraceArgs args;
    args.Add("node", node_name)
        .Add("signature", rec.key)
        .Add("choice", rec.algorithm.empty() ? "default" : rec.algorithm)
        .Add("default_impl", rec.default_impl)
        .Add("best_us", rec.best_us)
        .Add("default_us", rec.default_us)
        .Add("candidates_timed", rec.candidates_timed)
        .Add("candidates_rejected", rec.candidates_rejected);
    if (!rec.device.empty()) args.Add("device", rec.device);
    profiler_->Complete(absl::StrCat("autotune ", op_type), "autotune", t_start, t_end, &args);
  }
  CJIT_VLOG(1) << "autotune: " << rec.op << " -> " << (rec.algorithm.empty() ? "default" : rec.algorithm)
               << absl::StrFormat(" (%.1f us vs default %.1f us; %d timed, %d rejected, %.1f ms)", rec.best_us,
                                  rec.default_us, rec.candidates_timed, rec.candidates_rejected,
                                  (t_end - t_start) / 1e6);
  Record(rec);
  if (!options_.dump_to.empty()) WriteDumpFile();
}

void Autotuner::WriteDumpFile() {
  ProcessTable& t = Table();
  std::lock_guard<std::mutex> dump_lock(t.dump_mu);
  std::string text = absl::StrCat("# clusterjit autotune results (format 1): device, libraries, op signature, ",
                                  "algorithm (empty = default), best us, default us; tab-separated, C-escaped\n");
  {
    std::lock_guard<std::mutex> lock(t.mu);
    for (const auto& [key, r] : t.results) absl::StrAppend(&text, EntryLine(r), "\n");
  }
  absl::Status st = WriteFileAtomically(options_.dump_to, text);
  if (!st.ok()) CJIT_LOG(WARNING) << "--autotune_results_dump_to: " << st.message();
}

std::atomic<int64_t>* Autotuner::DefaultTimeCounter(const std::string& key) {
  // Bounded (a service sees new signatures forever): past the cap a step counts its own time alone.
  constexpr size_t kMaxCounters = 1 << 16;
  std::lock_guard<std::mutex> lock(time_mu_);
  auto it = default_ns_.find(key);
  if (it != default_ns_.end()) return it->second.get();
  if (default_ns_.size() >= kMaxCounters) return nullptr;
  auto& c = default_ns_[key];
  c = std::make_unique<std::atomic<int64_t>>(0);
  return c.get();
}

bool StepTuning::RanLongEnough(const Autotuner& tuner) const {
  const double min_ms = tuner.options().min_op_time_ms;
  if (min_ms <= 0) return true;
  const std::atomic<int64_t>* c = signature_ns_.load(std::memory_order_acquire);
  const int64_t ns = default_ns_.load(std::memory_order_relaxed) + (c ? c->load(std::memory_order_relaxed) : 0);
  return static_cast<double>(ns) >= min_ms * 1e6;
}

const std::string* StepTuning::Resolve(Autotuner& tuner, const Node& node, const std::vector<const Tensor*>& inputs,
                                       const std::vector<bool>& is_constant, const std::vector<PostOp>* post_ops,
                                       const std::vector<InferOutput>* inferred, int threads, int64_t execution,
                                       bool may_tune) {
  int st = state_.load(std::memory_order_acquire);
  if (failed_.load(std::memory_order_relaxed)) return nullptr;
  if (st == kResolved) return choice_.empty() ? nullptr : &choice_;
  if (st == kUntunable || !tuner.enabled()) return nullptr;
  if (st == kNew) {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_.load(std::memory_order_relaxed) == kNew) {
      key_ = Autotuner::SignatureKey(node, inputs, is_constant, post_ops, threads);
      if (key_.empty()) {
        state_.store(kUntunable, std::memory_order_release);
        return nullptr;
      }
      if (auto c = tuner.Lookup(key_, node, inputs, is_constant, post_ops, inferred, threads)) {
        choice_ = *c;
        state_.store(kResolved, std::memory_order_release);
        return choice_.empty() ? nullptr : &choice_;
      }
      signature_ns_.store(tuner.DefaultTimeCounter(key_), std::memory_order_release);
      state_.store(kCounting, std::memory_order_release);
    }
  }
  st = state_.load(std::memory_order_acquire);
  if (st == kResolved) return choice_.empty() ? nullptr : &choice_;
  if (st != kCounting) return nullptr;
  if (execution < tuner.options().threshold || !may_tune || !RanLongEnough(tuner)) return nullptr;
  // Tune on this thread; concurrent executions of this step run the default meanwhile.
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return nullptr;
  if (state_.load(std::memory_order_relaxed) != kCounting) {
    return state_.load(std::memory_order_acquire) == kResolved && !choice_.empty() ? &choice_ : nullptr;
  }
  if (tuner.cancelled()) return nullptr;
  std::optional<std::string> c = tuner.Tune(key_, node, inputs, is_constant, post_ops, inferred, threads);
  if (!c || tuner.cancelled()) return nullptr;  // another session of the process is tuning this signature: default meanwhile
  choice_ = std::move(*c);
  state_.store(kResolved, std::memory_order_release);
  return choice_.empty() ? nullptr : &choice_;
}

}  // namespace cjit
