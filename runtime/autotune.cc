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
#include "runtime/autotune_internal.h"
#include "runtime/profiler.h"
#include "base/mutex.h"

namespace cjit {

AutotuneOptions AutotuneOptionsFromFlags(const Flags& f) {
  AutotuneOptions o;
  o.level = f.autotune_level;
  o.max_ms_per_op = f.autotune_max_ms_per_op;
  o.deterministic = f.autotune_deterministic;
  o.threshold = f.autotune_threshold;
  o.min_op_time_ms = f.autotune_min_op_time_ms;
  o.amortize = f.autotune_amortize;
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
  Mutex mu;
  std::map<std::string, AutotuneRecord> results ABSL_GUARDED_BY(mu);
  std::set<std::string> in_flight ABSL_GUARDED_BY(mu);
  Mutex dump_mu;  // serializes dump-file writes
};
ProcessTable& Table() {
  static auto* t = new ProcessTable();
  return *t;
}

// Sums over this process's CPU tunings (Autotuner::ExpectedTuningMs): the wall time of each search and
// the default algorithm's time per execution that it measured.
struct CostSums {
  std::atomic<int64_t> tuning_ns{0};
  std::atomic<int64_t> default_ns{0};
};
CostSums& TuningCostSums() {
  static auto* s = new CostSums();
  return *s;
}

Mutex& TestCandidateMu() {
  static auto* mu = new Mutex();
  return *mu;
}
std::shared_ptr<const TestOnlyCandidate>& TestCandidate() {
  static auto* c = new std::shared_ptr<const TestOnlyCandidate>();
  return *c;
}
std::shared_ptr<const TestOnlyCandidate> CurrentTestCandidate() {
  MutexLock lock(&TestCandidateMu());
  return TestCandidate();
}

}  // namespace

namespace autotune_internal {

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

namespace {

// Bytes flushed from the caches between timed runs (larger than this CPU's L2; a rewrite of it also
// evicts the problem's data from L1/L2).
constexpr size_t kFlushBytes = size_t{4} << 20;
// Flush buffers come from a small process-wide pool (no thread_local: a host's threads would each keep
// 4 MiB for their lifetime after tuning once).
struct FlushPool {
  Mutex mu;
  std::vector<std::unique_ptr<uint8_t[]>> free;
};
FlushPool& Pool() {
  static auto* p = new FlushPool();
  return *p;
}
}  // namespace

void FlushCaches() {
  std::unique_ptr<uint8_t[]> buf;
  {
    MutexLock lock(&Pool().mu);
    if (!Pool().free.empty()) {
      buf = std::move(Pool().free.back());
      Pool().free.pop_back();
    }
  }
  if (!buf) buf.reset(new uint8_t[kFlushBytes]);
  static std::atomic<uint8_t> salt{1};
  std::memset(buf.get(), salt.fetch_add(1, std::memory_order_relaxed), kFlushBytes);
  MutexLock lock(&Pool().mu);
  if (Pool().free.size() < 4) Pool().free.push_back(std::move(buf));
}

}  // namespace autotune_internal

namespace {

using autotune_internal::Candidate;
using autotune_internal::DescribeContext;
using autotune_internal::FlushCaches;
using autotune_internal::ListCandidates;

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
  MutexLock lock(&TestCandidateMu());
  TestCandidate() = candidate ? std::make_shared<const TestOnlyCandidate>(*candidate) : nullptr;
}

void ClearAutotuneResultsForTest() {
  ProcessTable& t = Table();
  MutexLock lock(&t.mu);
  t.results.clear();
  TuningCostSums().tuning_ns.store(0);
  TuningCostSums().default_ns.store(0);
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
  MutexLock lock(&mu_);
  if (records_.size() < kMaxRecords) records_.push_back(std::move(r));
}

std::vector<AutotuneRecord> Autotuner::records() const {
  MutexLock lock(&mu_);
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
      MutexLock lock(&table.mu);
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
      MutexLock lock(&table.mu);
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
      MutexLock lock(&mu_);
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
    MutexLock lock(&table.mu);
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
      MutexLock lock(&t.mu);
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
  MutexLock lock(&table.mu);
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

void Autotuner::Finish(const AutotuneRecord& rec, int64_t t_start, const std::string& op_type,
                       const std::string& node_name) {
  ProcessTable& table = Table();
  {
    MutexLock lock(&table.mu);
    table.results.emplace(TableKey(rec.device, rec.libraries, rec.key), rec);
  }
  ++counters_.ops_tuned;
  const int64_t t_end = Profiler::Now();
  counters_.tuning_us += (t_end - t_start) / 1000;
  if (rec.device.empty() && rec.default_us > 0) {
    TuningCostSums().tuning_ns.fetch_add(t_end - t_start, std::memory_order_relaxed);
    TuningCostSums().default_ns.fetch_add(static_cast<int64_t>(rec.default_us * 1000), std::memory_order_relaxed);
  }
  if (disk_ != nullptr && !disk_->read_only()) {
    absl::Status st =
        disk_->Store(DiskKey(rec.device, rec.libraries, rec.key), PayloadKind::kAutotune, DiskPayload(rec));
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
  MutexLock dump_lock(&t.dump_mu);
  std::string text = absl::StrCat("# clusterjit autotune results (format 1): device, libraries, op signature, ",
                                  "algorithm (empty = default), best us, default us; tab-separated, C-escaped\n");
  {
    MutexLock lock(&t.mu);
    for (const auto& [key, r] : t.results) absl::StrAppend(&text, EntryLine(r), "\n");
  }
  absl::Status st = WriteFileAtomically(options_.dump_to, text);
  if (!st.ok()) CJIT_LOG(WARNING) << "--autotune_results_dump_to: " << st.message();
}

Autotuner::DefaultTime* Autotuner::DefaultTimeCounter(const std::string& key) {
  // Bounded (a service sees new signatures forever): past the cap a step counts its own time alone.
  constexpr size_t kMaxCounters = 1 << 16;
  MutexLock lock(&time_mu_);
  auto it = default_times_.find(key);
  if (it != default_times_.end()) return it->second.get();
  if (default_times_.size() >= kMaxCounters) return nullptr;
  auto& c = default_times_[key];
  c = std::make_unique<DefaultTime>();
  return c.get();
}

double Autotuner::ExpectedTuningMs(double call_ms) const {
  const int64_t tuning_ns = TuningCostSums().tuning_ns.load(std::memory_order_relaxed);
  const int64_t default_ns = TuningCostSums().default_ns.load(std::memory_order_relaxed);
  const double ratio =
      default_ns > 0 ? static_cast<double>(tuning_ns) / static_cast<double>(default_ns) : kPriorTuningCostRatio;
  return std::min(options_.max_ms_per_op, ratio * call_ms);
}

bool StepTuning::RanLongEnough(const Autotuner& tuner) const {
  const AutotuneOptions& o = tuner.options();
  if (o.min_op_time_ms <= 0) return true;  // tune at the threshold, whatever the cost
  const Autotuner::DefaultTime* c = signature_time_.load(std::memory_order_acquire);
  const int64_t ns = default_time_.ns.load(std::memory_order_relaxed) + (c ? c->ns.load(std::memory_order_relaxed) : 0);
  const int64_t calls =
      default_time_.calls.load(std::memory_order_relaxed) + (c ? c->calls.load(std::memory_order_relaxed) : 0);
  const double ran_ms = static_cast<double>(ns) / 1e6;
  if (ran_ms < o.min_op_time_ms) return false;
  if (!o.amortize) return true;
  return calls > 0 && ran_ms >= tuner.ExpectedTuningMs(ran_ms / static_cast<double>(calls));
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
    MutexLock lock(&mu_);
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
      signature_time_.store(tuner.DefaultTimeCounter(key_), std::memory_order_release);
      state_.store(kCounting, std::memory_order_release);
    }
  }
  st = state_.load(std::memory_order_acquire);
  if (st == kResolved) return choice_.empty() ? nullptr : &choice_;
  if (st != kCounting) return nullptr;
  if (execution < tuner.options().threshold || !may_tune || !RanLongEnough(tuner)) return nullptr;
  // Tune on this thread; concurrent executions of this step run the default meanwhile.
  if (!mu_.TryLock()) return nullptr;
  MutexLock lock(&mu_, kAdoptLock);
  if (state_.load(std::memory_order_relaxed) != kCounting) {
    return state_.load(std::memory_order_acquire) == kResolved && !choice_.empty() ? &choice_ : nullptr;
  }
  if (tuner.cancelled()) return nullptr;
  std::optional<std::string> c = tuner.Tune(key_, node, inputs, is_constant, post_ops, inferred, threads);
  if (!c || tuner.cancelled())
    return nullptr;  // another session of the process is tuning this signature: default meanwhile
  choice_ = std::move(*c);
  state_.store(kResolved, std::memory_order_release);
  return choice_.empty() ? nullptr : &choice_;
}

}  // namespace cjit
