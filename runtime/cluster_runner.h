// Runs one cluster node of a specialized plan (DESIGN.md data flow): memory-cache hit -> compiled run;
// miss -> the compile policy decides between the fallback path (the cluster's ops one by one, through a
// sub-Executor) and compiling now (or on a background thread with --async_compilation). A compile error
// is never fatal: the cluster stays on the fallback path and the reason is logged once.
//
// ClusterRuntime is the session-wide part: flags, compile policy, memory cache, statistics.
// Thread-safety: ClusterRunner::Run may be called concurrently; the executable is swapped in under a lock.
#ifndef CJIT_RUNTIME_CLUSTER_RUNNER_H_
#define CJIT_RUNTIME_CLUSTER_RUNNER_H_

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/cache_key.h"
#include "cache/remote_cache.h"
#include "cache/tiered_cache.h"
#include "cache/memory_cache.h"
#include "compiler/ir/graph.h"
#include "flags/flags.h"
#include "runtime/compile_policy.h"
#include "base/mutex.h"

namespace cjit {

class Executor;
class CpuExecutable;
class DerivedConstants;
class Profiler;
class Dumper;
class Autotuner;

// The fleet-shared tier's options from the --remote_cache* flags (one RemoteCache::Shared instance per
// process for them: the CPU clusters, autotuning and the GPU backend's PTX go through the same one).
RemoteCacheOptions RemoteCacheOptionsFromFlags(const Flags& flags);

// Counters of one cluster (one cluster node of one specialized signature).
struct ClusterStats {
  int id = 0;
  int ops = 0;
  std::string signature;
  std::atomic<int64_t> compiles{0}, compile_us{0}, fallback_executions{0}, compiled_executions{0},
      memory_hits{0}, disk_hits{0}, disk_writes{0}, disk_rejects{0};
  // New signatures instantiated from already compiled kernels on their first execution (no LLVM work).
  std::atomic<int64_t> polymorphic_hits{0};
  std::atomic<int64_t> code_bytes{0};
  std::atomic<int64_t> fused_kernels{0};  // generated (fused) kernels of the executable in use
};

// Created by Create (a std::shared_ptr). It must outlive every executor that uses it; its owner calls
// Shutdown before destroying those executors (Session does), which joins the background compile worker.
class ClusterRuntime : public std::enable_shared_from_this<ClusterRuntime> {
 public:
  // Opens the persistent cache when --persistent_cache_dir is set (error: the directory cannot be used).
  // `profiler` and `dumper` (optional) receive compile, cache and execution events / compiled artifacts.
  static absl::StatusOr<std::shared_ptr<ClusterRuntime>> Create(const Flags& flags,
                                                                std::shared_ptr<Profiler> profiler = nullptr,
                                                                std::shared_ptr<Dumper> dumper = nullptr);
  explicit ClusterRuntime(const Flags& flags);
  ~ClusterRuntime();
  Profiler* profiler() const { return profiler_.get(); }
  Dumper* dumper() const { return dumper_.get(); }
  // The persistent cache chain (disk, then --remote_cache), or null without --persistent_cache_dir.
  TieredCache* persistent() { return persistent_.get(); }
  // Autotuning of library steps (runtime/autotune.h); never null after Create.
  Autotuner* autotuner() { return autotuner_.get(); }
  const Flags& flags() const { return flags_; }
  // Compiles run on the background worker (AsyncCompilationEnabled of the flags, resolved once).
  bool async_compilation() const { return async_compilation_; }
  CompilePolicy& policy() { return policy_; }
  MemoryCache& cache() { return cache_; }
  const std::string& target() const { return target_; }
  // The owning session's loaded weights (cache/cache_key.h CanonicalClusterTexts: named by object in keys
  // without a persistent cache; the identity of a cluster takes other constants by rank only), set once
  // after Create, before any run.
  void SetLoadedConstants(std::shared_ptr<const ConstantObjects> c) { loaded_constants_ = std::move(c); }
  const std::shared_ptr<const ConstantObjects>& loaded_constants() const { return loaded_constants_; }
  const std::string& codegen_flags() const { return codegen_flags_; }
  std::shared_ptr<ClusterStats> NewStats();
  // The counters of every cluster runner alive, in creation order.
  std::vector<std::shared_ptr<ClusterStats>> AllStats() const;
  // A runner being destroyed (its signature evicted, --max_cached_signatures) hands its counters over: they
  // leave AllStats and are added to RetiredTotals (id, ops and signature unused).
  void RetireStats(const std::shared_ptr<ClusterStats>& stats);
  // The sums of the counters of retired runners (ClusterStats fields; compile_us in microseconds).
  struct Totals {
    int64_t runners = 0, compiles = 0, compile_us = 0, fallback_executions = 0, compiled_executions = 0,
            memory_hits = 0, disk_hits = 0, disk_writes = 0, disk_rejects = 0, polymorphic_hits = 0;
  };
  Totals RetiredTotals() const;

  // Background compilation (--async_compilation): jobs run on one worker thread that this runtime owns.
  // Submit returns false after Shutdown. Shutdown drops jobs that have not started, waits for the running
  // one, and joins the worker; the Session calls it before it is destroyed, so no compile thread outlives
  // its Session. Idempotent.
  bool SubmitCompile(std::function<void()> job);
  void Shutdown();
  // True from the start of Shutdown: the compile in flight stops at its next phase (CpuCompileOptions::
  // cancelled) and publishes nothing. Lock-free.
  bool shutting_down() const { return shutting_down_.load(std::memory_order_relaxed); }
  // Jobs queued or running on the worker (compiles, and background autotuning where there is an idle CPU).
  // Lock-free.
  int compiles_in_flight() const;
  // The threads a run uses now (RunThreads' cap): intra_op_threads, or one fewer while a background
  // compile is in flight and the flags lend it a CPU (LendsCpuToCompiles; then autotuning stays inline, so
  // every worker job is a compile). Lock-free.
  int RunThreadsNow() const;
  // Whether autotuning runs in the background (async compilation without lending: an idle CPU).
  bool async_autotune() const { return async_compilation_ && !lend_cpu_; }
  // The latest executable of each cluster structure (its shape-free identity): a new signature's
  // polymorphic instantiation rebinds its fusion plan (CpuExecutable::Compile's `like`) instead of planning
  // again. One per structure is kept alive. Thread-safe.
  std::shared_ptr<const CpuExecutable> PlanTemplate(const std::string& identity) const;
  void SetPlanTemplate(const std::string& identity, std::shared_ptr<const CpuExecutable> ex);

 private:
  Flags flags_;
  bool async_compilation_;
  bool lend_cpu_;
  CompilePolicy policy_;
  MemoryCache cache_;
  std::unique_ptr<TieredCache> persistent_;
  std::unique_ptr<Autotuner> autotuner_;
  std::shared_ptr<Profiler> profiler_;
  std::shared_ptr<Dumper> dumper_;
  std::string target_, codegen_flags_;
  std::shared_ptr<const ConstantObjects> loaded_constants_;
  mutable Mutex templates_mu_;
  std::unordered_map<std::string, std::shared_ptr<const CpuExecutable>> plan_templates_
      ABSL_GUARDED_BY(templates_mu_);  // by identity
  mutable Mutex mu_;
  uint64_t next_stats_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, std::shared_ptr<ClusterStats>> stats_ ABSL_GUARDED_BY(mu_);  // by creation order
  std::map<const ClusterStats*, uint64_t> stats_order_ ABSL_GUARDED_BY(mu_);
  Totals retired_ ABSL_GUARDED_BY(mu_);
  // Compile worker.
  mutable Mutex pool_mu_;
  CondVar pool_cv_;
  std::deque<std::function<void()>> pool_jobs_ ABSL_GUARDED_BY(pool_mu_);
  std::thread pool_thread_ ABSL_GUARDED_BY(pool_mu_);
  bool pool_stop_ ABSL_GUARDED_BY(pool_mu_) = false;
  std::atomic<bool> shutting_down_{false};
  std::atomic<int> pool_in_flight_{0};  // queued + running; dropped jobs are subtracted by Shutdown
};

// The compiled clusters of one dims-free specialization template (a dynamic-shape plan, runtime/session.h):
// every plan specialized or replayed from the template publishes each cluster's executable here by cluster
// id, and the template's dynamic executor runs one of them at other dims (CpuExecutable::InstantiateDims).
// The plans share the template's nodes and constants and differ only in dims, so any of their executables
// computes any other's cluster; they differ in which dims their kernels fit (a dim of 1 inside the cluster
// changes a kernel's loop structure), so the latest kMaxPerCluster are kept, most recent first. Thread-safe.
class ShapeFamily {
 public:
  static constexpr size_t kMaxPerCluster = 4;
  ShapeFamily() = default;
  // A template with shape-derived constants (Reshape targets): `derived` gives their values at other dims,
  // and the family runs only compiled executables (its fallback would read the template's values).
  explicit ShapeFamily(std::shared_ptr<const DerivedConstants> derived) : derived_(std::move(derived)) {}
  const DerivedConstants* derived() const { return derived_.get(); }
  void Publish(int cluster_id, std::shared_ptr<const CpuExecutable> ex);
  std::vector<std::shared_ptr<const CpuExecutable>> Get(int cluster_id) const;
  bool Has(int cluster_id) const;

 private:
  std::shared_ptr<const DerivedConstants> derived_;
  mutable Mutex mu_;
  std::unordered_map<int, std::vector<std::shared_ptr<const CpuExecutable>>> executables_ ABSL_GUARDED_BY(mu_);
};

// A run of a dynamic-shape plan that it cannot serve (no executable of a cluster yet, or dims its kernels
// do not fit): the status carries this payload, and the session specializes for the signature instead.
inline constexpr absl::string_view kDynamicShapeMissPayload = "cjit/dynamic_shape_miss";
bool IsDynamicShapeMiss(const absl::Status& status);

class ClusterRunner {
 public:
  // `node` is a cjit.Cluster node whose graph is kept alive by `owner`.
  // `signature_index` names the session signature in dump files (-1: none).
  // `family` (optional): the dynamic-shape family this cluster's plan belongs to; with `dynamic`, this runner
  // is the family's own (its inputs have any dims of the structure: it runs the family's executables at
  // them, or fails with a dynamic-shape miss), else it publishes its executables to the family.
  static absl::StatusOr<std::unique_ptr<ClusterRunner>> Create(const Node& node, std::shared_ptr<const Graph> owner,
                                                               ClusterRuntime* runtime, int threads,
                                                               int signature_index = -1,
                                                               std::shared_ptr<ShapeFamily> family = nullptr,
                                                               bool dynamic = false);
  ~ClusterRunner();
  absl::StatusOr<std::vector<Tensor>> Run(const std::vector<const Tensor*>& inputs);

  struct State;  // defined in cluster_runner.cc

 private:
  ClusterRunner() = default;
  // A signature without an executable whose cluster structure compiled before: the executable built from
  // the process-wide kernel cache alone (CpuCompileOptions::reuse_only), or null (tried once per runner).
  std::shared_ptr<const CpuExecutable> TryPolymorphicInstantiation(Profiler* prof);
  absl::StatusOr<std::vector<Tensor>> RunDynamic(const std::vector<const Tensor*>& inputs, Profiler* prof);
  std::shared_ptr<State> state_;
};

}  // namespace cjit

#endif  // CJIT_RUNTIME_CLUSTER_RUNNER_H_
