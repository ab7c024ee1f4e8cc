// Autotuning of convolution and GEMM algorithms on the CPU (docs/autotuning.md), after XLA's GPU
// autotuner (--xla_gpu_autotune_level; TensorFlow guide §9.3.4.1) and TensorFlow's TF_AUTOTUNE_THRESHOLD.
//
// What is tuned: the library steps of compiled clusters whose kernel registers candidates
// (runtime/cpu/kernel.h RegisterAlgorithms): Conv / NhwcConv / ConvTranspose (every oneDNN implementation
// by primitive_desc::next_impl for blocked and plain layouts, Winograd where offered, and clusterjit's own
// shape-generic paths) and float32 MatMul / Gemm (oneDNN matmul, dnnl_sgemm, Eigen). The fallback (op by
// op) path always runs the kernels' default choices.
//
// When: an op signature (op type, attributes, input dtypes and dims, which inputs are constants, fused
// post-ops, thread count) runs its default algorithm for the first --autotune_threshold executions of its
// cluster signature (fallback executions count: with the default lazy compilation, the first compiled
// execution is the third), and once the default has run --autotune_min_op_time_ms in total and, with
// --autotune_amortize, as long as tuning it is expected to take (Autotuner::ExpectedTuningMs: a search
// costs at most about what the op itself cost so far, as in the ski-rental problem), it is tuned once per
// process (concurrent executions of the same step run the default meanwhile; other signatures are never
// blocked) and the choice is kept. A choice found in the process, in --autotune_results_load_from or in
// the persistent cache is used from the first execution.
//
// How (--autotune_level, XLA's levels): non-constant inputs are uninitialized (1) or seeded random
// uniform [-1, 1] values (2+); constant inputs (weights) are the real ones. Level 3 fills outputs with
// NaN before each candidate, level 4 also compares each candidate's output with the default algorithm's
// (|a - b| <= tol * (1 + max|ref|) elementwise, tol 1e-3 for float32, 3e-2 for 16-bit types; NaN only
// where the reference has NaN) and rejects those that differ. Timing (MeasureMinMicros, the one rule):
// one warm-up run, then up to 10 timed runs, stopping when two runs came within 5% of the minimum;
// between timed runs the caches are flushed (a 4 MiB buffer is rewritten) so small problems are not
// timed hot; a candidate whose first run is over 1.5x the best minimum so far + 20 ms (primitive
// creation), or whose first timed run is over 1.5x the best, is not checked or timed further; lower-ISA
// variants and oneDNN's GEMM-based convolution are tried last. The fastest candidate wins unless it is
// within 5% of the default's time (noise): then the one with less scratch memory (ties: the default).
// --autotune_deterministic takes the first candidate, in the library's preference order, that passes.
// --autotune_max_ms_per_op bounds the whole search per op (default, candidates, checks).
//
// Storage: results live in the process (shared by sessions), in the persistent cache (payload kind
// PayloadKind::kAutotune, keyed by device identity — CPU model and ISA features —, library versions —
// oneDNN, Eigen, clusterjit — and the op signature; same header, checksum and atomic write as compiled
// code), and in the --autotune_results_dump_to text file. A loaded entry for another device or library
// version is ignored with a logged reason; a loaded algorithm the kernel does not offer for the op is
// ignored too (the op is tuned again).
//
// Thread-safety: every method may be called concurrently.
#ifndef CJIT_RUNTIME_AUTOTUNE_H_
#define CJIT_RUNTIME_AUTOTUNE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>
#include <string>
#include <vector>

#include "cache/tiered_cache.h"
#include "compiler/ir/graph.h"
#include "compiler/ops/op_registry.h"
#include "flags/flags.h"
#include "base/mutex.h"

namespace cjit {

class Profiler;
struct PostOp;

struct AutotuneOptions {
  int level = 4;                 // 0..4 (see above)
  double max_ms_per_op = 250;    // search budget per op signature
  bool deterministic = false;
  int threshold = 2;             // executions before tuning
  double min_op_time_ms = 0;     // and the default algorithm's total time before tuning (0: none)
  bool amortize = false;         // and as long as tuning it is expected to take (ExpectedTuningMs; only
                                 // with min_op_time_ms > 0)
  std::string dump_to, load_from;
};
AutotuneOptions AutotuneOptionsFromFlags(const Flags& flags);

// The machine and libraries a result is valid for: "cpu=<model>;isa=<features>" and
// "onednn=<version>;eigen=<version>;clusterjit=<version>".
const std::string& AutotuneDeviceIdentity();
const std::string& AutotuneLibraryVersions();

// Session-wide counters (stats JSON "autotune").
struct AutotuneCounters {
  std::atomic<int64_t> ops_tuned{0}, candidates_timed{0}, candidates_rejected{0}, tuning_us{0};
  std::atomic<int64_t> memory_hits{0}, disk_hits{0}, file_hits{0}, ignored_entries{0};
  std::atomic<int64_t> lease_waits{0};  // tunings left to another process of the fleet (--remote_cache lease)
};

// One op signature's decision.
struct AutotuneRecord {
  std::string key;             // the op signature
  std::string device, libraries;  // a device (GPU) result's identities (DeviceBackend); empty for the CPU
  std::string op;              // "Conv 'name'" of the node it was tuned on
  std::string algorithm;       // the choice; "" = the kernel's default
  std::string default_impl;    // what the default ran (the kernel's implementation string)
  double best_us = 0, default_us = 0;  // minimum times (0 when loaded)
  int candidates_timed = 0, candidates_rejected = 0;
  std::string source;          // "tuned", "memory", "file" or "disk"
  std::vector<std::string> notes;  // per candidate: "id: 12.3 us" or "id: rejected (why)"
};

// A test-only candidate (tests/autotune_test.cc): offered for every node of `op_type` in addition to the
// kernel's; `run` replaces the kernel for it. Null clears.
struct TestOnlyCandidate {
  std::string op_type, id;
  std::function<absl::Status(const std::vector<const Tensor*>& inputs, std::vector<Tensor>& outputs)> run;
};
void SetTestOnlyCandidate(const TestOnlyCandidate* candidate);
// Forgets every result of this process, and its tuning costs (tests: a "fresh process").
void ClearAutotuneResultsForTest();

class Autotuner {
 public:
  // `disk` and `profiler` may be null. Reads options.load_from (an unreadable file is an error naming it;
  // bad entries are ignored with a logged reason).
  static absl::StatusOr<std::unique_ptr<Autotuner>> Create(const AutotuneOptions& options, TieredCache* disk,
                                                           Profiler* profiler);
  const AutotuneOptions& options() const { return options_; }
  bool enabled() const { return options_.level > 0; }

  // The op signature of `node` with these inputs, or "" when its kernel has nothing to tune.
  static std::string SignatureKey(const Node& node, const std::vector<const Tensor*>& inputs,
                                  const std::vector<bool>& is_constant, const std::vector<PostOp>* post_ops,
                                  int threads);
  // A known choice for `key` (process, then loaded file, then disk) that the kernel offers for these
  // inputs, or nullopt.
  std::optional<std::string> Lookup(const std::string& key, const Node& node, const std::vector<const Tensor*>& inputs,
                                    const std::vector<bool>& is_constant, const std::vector<PostOp>* post_ops,
                                    const std::vector<InferOutput>* inferred, int threads);
  // Tunes `key` now (or returns the choice another session of the process made meanwhile); "" = default;
  // nullopt while another session of the process is tuning the same signature. Never fails: a problem is
  // recorded in the result's notes and the default kept.
  std::optional<std::string> Tune(const std::string& key, const Node& node, const std::vector<const Tensor*>& inputs,
                   const std::vector<bool>& is_constant, const std::vector<PostOp>* post_ops,
                   const std::vector<InferOutput>* inferred, int threads);

  // Device (GPU) op signatures, tuned by runtime/cuda/gpu_autotune.h. `device` and `libraries` are the
  // backend's identities (DeviceBackend::AutotuneDeviceIdentity / AutotuneLibraryVersions), stored with the
  // result and part of its persistent-cache key. LookupDevice: the known choice (process, then the
  // --autotune_results_load_from file — an entry made on another device or with other library versions is
  // ignored with a logged reason —, then the persistent cache), or nullopt. TuneDevice: runs `tune` (it
  // fills algorithm, default_impl, times, candidate counts and notes) once per process for the key and
  // stores its record like a CPU result (process table, persistent cache, dump file, trace, counters,
  // VLOG(1)); nullopt while another session tunes the same key (that caller runs the default meanwhile).
  // ForgetDevice: a stored choice the library no longer accepts is dropped from the process table.
  std::optional<std::string> LookupDevice(const std::string& key, const std::string& device,
                                          const std::string& libraries, const std::string& op);
  std::optional<std::string> TuneDevice(const std::string& key, const std::string& device,
                                        const std::string& libraries, const std::string& op,
                                        const std::string& op_type, const std::function<AutotuneRecord()>& tune);
  void ForgetDevice(const std::string& key, const std::string& device, const std::string& libraries);

  // Stops tuning soon (between candidates) and for good; nothing partial is stored. The owner calls it
  // before joining the thread that may be tuning (ClusterRuntime::Shutdown).
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

  // The time the default algorithm of an op signature has run: nanoseconds and executions.
  struct DefaultTime {
    std::atomic<int64_t> ns{0};
    std::atomic<int64_t> calls{0};
  };
  // The default time of op signature `key` in this tuner's session, over every step with that signature
  // (the 16 same-shaped projections of a 4-layer transformer count together: one tuning result serves them
  // all). A stable counter for the key (null past 65536 keys); thread-safe.
  DefaultTime* DefaultTimeCounter(const std::string& key);

  // What tuning an op signature whose default algorithm takes `call_ms` per execution is expected to cost,
  // in ms: call_ms times the ratio of tuning time to default time over this process's CPU tunings so far
  // (their sums; kPriorTuningCostRatio before the first), at most --autotune_max_ms_per_op. The search times
  // each candidate several times and creates its primitives: for ResNet-18's convolutions it took 170-740x
  // the default's time per execution.
  static constexpr double kPriorTuningCostRatio = 200;
  double ExpectedTuningMs(double call_ms) const;

  AutotuneCounters& counters() { return counters_; }
  const AutotuneCounters& counters() const { return counters_; }
  // This tuner's decisions (tuned or found), in order; the first kMaxRecords only (a long-running service
  // sees new signatures forever).
  static constexpr size_t kMaxRecords = 10000;
  std::vector<AutotuneRecord> records() const;

 private:
  explicit Autotuner(AutotuneOptions options, TieredCache* disk, Profiler* profiler)
      : options_(std::move(options)), disk_(disk), profiler_(profiler) {}
  std::string TuneNow(const std::string& key, const Node& node, const std::vector<const Tensor*>& inputs,
                      const std::vector<bool>& is_constant, const std::vector<PostOp>* post_ops,
                      const std::vector<InferOutput>* inferred, int threads);
  void Record(AutotuneRecord r);
  // The stored choice for `key` on `device` / `libraries` ("" for the CPU): process table, then the loaded
  // results file, then the persistent cache; a non-process result is used only if `usable(algorithm,
  // source)` says so. Counts and records the hit.
  std::optional<std::string> LookupStored(const std::string& key, const std::string& device,
                                          const std::string& libraries, const std::string& op,
                                          const std::function<bool(const std::string&, const char*)>& usable);
  // Runs `tune` for `key` on `device` / `libraries` unless the process has a result (returned), another
  // session of the process is tuning it (nullopt), or another process of the fleet holds the remote tier's
  // lease on it (nullopt; a result it published meanwhile is returned if `usable`); an exception keeps the
  // default ("").
  std::optional<std::string> TuneOnce(const std::string& key, const std::string& device,
                                      const std::string& libraries, const std::string& op,
                                      const std::function<bool(const std::string&, const char*)>& usable,
                                      const std::function<std::string()>& tune);
  // Stores a tuned result everywhere and reports it (counters, trace, VLOG, records, dump file).
  void Finish(const AutotuneRecord& rec, int64_t t_start, const std::string& op_type, const std::string& node_name);
  void WriteDumpFile();
  AutotuneOptions options_;
  TieredCache* disk_;
  Profiler* profiler_;
  AutotuneCounters counters_;
  std::atomic<bool> cancelled_{false};
  mutable Mutex mu_;
  std::vector<AutotuneRecord> records_ ABSL_GUARDED_BY(mu_);
  struct LoadedEntry {
    std::string device, libraries;  // a device result's identities; empty for a CPU one (checked when loaded)
    std::string algorithm;
  };
  std::unordered_map<std::string, LoadedEntry> loaded_;  // key -> entry from load_from (immutable)
  std::set<std::string> ignored_logged_ ABSL_GUARDED_BY(mu_);
  Mutex time_mu_;
  std::unordered_map<std::string, std::unique_ptr<DefaultTime>> default_times_ ABSL_GUARDED_BY(time_mu_);
};

// The autotuning state of one library step of an executable. Resolve() is called for every execution:
// it returns the algorithm to run (null: the default) and tunes once `execution` (the signature's earlier
// executions, fallback ones included) reaches the threshold.
class StepTuning {
 public:
  // `may_tune` false: past the threshold the default runs until someone else (a background job calling
  // with true) has tuned.
  const std::string* Resolve(Autotuner& tuner, const Node& node, const std::vector<const Tensor*>& inputs,
                             const std::vector<bool>& is_constant, const std::vector<PostOp>* post_ops,
                             const std::vector<InferOutput>* inferred, int threads, int64_t execution,
                             bool may_tune = true);
  // The choice failed when run: from now on this step runs the default. Returns true the first time.
  bool MarkFailed() { return !failed_.exchange(true); }
  // Whether a later Resolve past the threshold would still tune (no choice yet).
  bool pending() const { int s = state_.load(std::memory_order_acquire); return s == kNew || s == kCounting; }
  // Time (ns) one execution of the default algorithm took, toward --autotune_min_op_time_ms and
  // --autotune_amortize (counted per op signature: Autotuner::DefaultTimeCounter).
  void AddDefaultTime(int64_t ns) {
    Autotuner::DefaultTime* c = signature_time_.load(std::memory_order_acquire);
    Autotuner::DefaultTime& t = c != nullptr ? *c : default_time_;
    t.ns.fetch_add(ns, std::memory_order_relaxed);
    t.calls.fetch_add(1, std::memory_order_relaxed);
  }
  // Whether the default has run long enough for `tuner`'s --autotune_min_op_time_ms and, with
  // --autotune_amortize, for the expected cost of tuning it, over every step of this op signature.
  bool RanLongEnough(const Autotuner& tuner) const;

 private:
  enum State { kNew = 0, kCounting = 1, kResolved = 2, kUntunable = 3 };
  std::atomic<int> state_{kNew};
  std::atomic<bool> failed_{false};
  Autotuner::DefaultTime default_time_;  // before the signature is known
  std::atomic<Autotuner::DefaultTime*> signature_time_{nullptr};  // the tuner's counter for key_
  Mutex mu_;
  std::string key_;     // set under mu_ before state_ leaves kNew
  std::string choice_;  // immutable once state_ == kResolved
};

// The timing rule (one place): one warm-up call, then up to `max_runs` timed calls with the caches
// flushed before each, stopping once two calls after the first came within `tolerance` of the minimum
// (a new minimum lower by more than `tolerance` restarts that count) or the `budget_us` is spent (at
// least one timed call). Returns the minimum in microseconds, or the first error. `warmed_up`: fn has
// just run (its warm-up is skipped); `first_sample_us` >= 0: a timed call already made the same way
// (caches flushed), counted as the first of the `max_runs` — large convolutions run tens of ms per call.
absl::StatusOr<double> MeasureMinMicros(const std::function<absl::Status()>& fn, int max_runs = 10,
                                        double tolerance = 0.05, double budget_us = 1e12, int* runs = nullptr,
                                        bool warmed_up = false, double first_sample_us = -1);

// The same stopping rule over samples that time themselves (`sample` returns one run's microseconds: a
// device-timed run, caches flushed by the caller); no warm-up. MeasureMinMicros is this with host timing.
absl::StatusOr<double> MeasureMinOfSamples(const std::function<absl::StatusOr<double>()>& sample, int max_runs = 10,
                                           double tolerance = 0.05, double budget_us = 1e12, int* runs = nullptr,
                                           double first_sample_us = -1);

}  // namespace cjit

#endif  // CJIT_RUNTIME_AUTOTUNE_H_
