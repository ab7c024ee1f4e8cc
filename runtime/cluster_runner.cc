#include "runtime/cluster_runner.h"

#include "base/logging.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "compiler/codegen/cpu_compiler.h"
#include "base/status_macros.h"
#include "compiler/passes/mark_for_compilation.h"
#include "runtime/autotune.h"
#include "runtime/dump.h"
#include "runtime/executable.h"
#include "runtime/executor.h"
#include "runtime/profiler.h"
#include "base/mutex.h"

namespace cjit {

RemoteCacheOptions RemoteCacheOptionsFromFlags(const Flags& flags) {
  RemoteCacheOptions ro;
  ro.url = flags.remote_cache;
  ro.key_file = flags.remote_cache_key_file;
  ro.timeout_ms = flags.remote_cache_timeout_ms;
  ro.ttl_s = flags.remote_cache_ttl_s;
  ro.max_entry_bytes = flags.remote_cache_max_entry_mb << 20;
  ro.lease_ms = flags.remote_cache_lease_ms;
  return ro;
}

ClusterRuntime::ClusterRuntime(const Flags& flags)
    : flags_(flags),
      async_compilation_(AsyncCompilationEnabled(flags)),
      lend_cpu_(LendsCpuToCompiles(flags)),
      policy_(CompilePolicyOptions{flags.compile_threshold, flags.compile_time_cutoff_s,
                                   flags.always_defer_compilation, flags.enable_lazy_compilation,
                                   /*threshold_per_structure=*/flags.polymorphic_clusters}),
      target_(absl::StrCat("clusterjit=", CJIT_VERSION, " ", HostTargetDescription())),
      // Flags that change generated code; listed for the key.
      codegen_flags_(absl::StrCat("kernel-pipeline-2 ", CodeChangingFlagText(flags))) {}

ClusterRuntime::~ClusterRuntime() { Shutdown(); }

absl::StatusOr<std::shared_ptr<ClusterRuntime>> ClusterRuntime::Create(const Flags& flags,
                                                                      std::shared_ptr<Profiler> profiler,
                                                                      std::shared_ptr<Dumper> dumper) {
  auto rt = std::make_shared<ClusterRuntime>(flags);
  rt->profiler_ = std::move(profiler);
  rt->dumper_ = std::move(dumper);
  if (!flags.remote_cache.empty() && flags.persistent_cache_dir.empty()) {
    return absl::InvalidArgumentError("--remote_cache needs --persistent_cache_dir (the local tier that remote "
                                      "hits are kept in)");
  }
  if (!flags.persistent_cache_dir.empty()) {
    DiskCacheOptions o;
    o.dir = flags.persistent_cache_dir;
    o.read_only = flags.persistent_cache_read_only;
    o.max_bytes = flags.persistent_cache_max_bytes;
    std::shared_ptr<RemoteCache> remote;
    if (!flags.remote_cache.empty()) {
      CJIT_ASSIGN_OR_RETURN(remote, RemoteCache::Shared(RemoteCacheOptionsFromFlags(flags)));
    }
    auto chain = TieredCache::Open(o, std::move(remote));
    if (!chain.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--persistent_cache_dir: ", chain.status().message()));
    }
    rt->persistent_ = std::move(*chain);
  }
  auto tuner = Autotuner::Create(AutotuneOptionsFromFlags(flags), rt->persistent_.get(), rt->profiler_.get());
  if (!tuner.ok()) return tuner.status();
  rt->autotuner_ = std::move(*tuner);
  return rt;
}

std::shared_ptr<ClusterStats> ClusterRuntime::NewStats() {
  auto s = std::make_shared<ClusterStats>();
  MutexLock lock(&mu_);
  stats_order_[s.get()] = next_stats_;
  stats_.emplace(next_stats_++, s);
  return s;
}

std::vector<std::shared_ptr<ClusterStats>> ClusterRuntime::AllStats() const {
  MutexLock lock(&mu_);
  std::vector<std::shared_ptr<ClusterStats>> out;
  out.reserve(stats_.size());
  for (const auto& [order, s] : stats_) out.push_back(s);
  return out;
}

void ClusterRuntime::RetireStats(const std::shared_ptr<ClusterStats>& stats) {
  if (!stats) return;
  MutexLock lock(&mu_);
  auto it = stats_order_.find(stats.get());
  if (it == stats_order_.end()) return;
  stats_.erase(it->second);
  stats_order_.erase(it);
  ++retired_.runners;
  retired_.compiles += stats->compiles;
  retired_.compile_us += stats->compile_us;
  retired_.fallback_executions += stats->fallback_executions;
  retired_.compiled_executions += stats->compiled_executions;
  retired_.memory_hits += stats->memory_hits;
  retired_.disk_hits += stats->disk_hits;
  retired_.disk_writes += stats->disk_writes;
  retired_.disk_rejects += stats->disk_rejects;
  retired_.polymorphic_hits += stats->polymorphic_hits;
}

ClusterRuntime::Totals ClusterRuntime::RetiredTotals() const {
  MutexLock lock(&mu_);
  return retired_;
}

bool ClusterRuntime::SubmitCompile(std::function<void()> job) {
  MutexLock lock(&pool_mu_);
  if (pool_stop_) return false;
  pool_jobs_.push_back(std::move(job));
  pool_in_flight_.fetch_add(1, std::memory_order_relaxed);
  if (!pool_thread_.joinable()) {
    pool_thread_ = std::thread([this] {
      if (profiler_) profiler_->NameThisThread("async compile");
      // A lower scheduling priority for this thread only (Linux: nice is per thread; the thread is ours):
      // with every CPU busy, a background compile must not preempt a run's threads for a scheduler slice
      // (~4 ms spikes in a 2-thread stream while one compiled); on an idle CPU it runs at full speed.
      errno = 0;
      if (setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10) != 0) {
        CJIT_VLOG(1) << "async compile thread: setpriority: " << std::strerror(errno);
      }
      pool_mu_.Lock();
      for (;;) {
        while (!pool_stop_ && pool_jobs_.empty()) pool_cv_.Wait(&pool_mu_);
        if (pool_stop_) break;
        std::function<void()> next = std::move(pool_jobs_.front());
        pool_jobs_.pop_front();
        pool_mu_.Unlock();
        next();
        next = nullptr;  // release what the job holds before taking the lock again
        pool_in_flight_.fetch_sub(1, std::memory_order_relaxed);
        pool_mu_.Lock();
        pool_cv_.SignalAll();
      }
      pool_mu_.Unlock();
    });
  }
  pool_cv_.SignalAll();
  return true;
}

void ClusterRuntime::Shutdown() {
  shutting_down_.store(true, std::memory_order_relaxed);  // a compile in flight stops at its next phase
  if (autotuner_) autotuner_->Cancel();  // a tuning job in flight stops at its next candidate
  std::thread worker;
  std::deque<std::function<void()>> dropped;
  {
    MutexLock lock(&pool_mu_);
    pool_stop_ = true;
    dropped.swap(pool_jobs_);
    pool_cv_.SignalAll();
    worker = std::move(pool_thread_);
  }
  const int unrun = static_cast<int>(dropped.size());
  dropped.clear();  // outside the lock: releasing a job releases the cluster state it holds
  pool_in_flight_.fetch_sub(unrun, std::memory_order_relaxed);
  if (worker.joinable()) worker.join();
}

std::shared_ptr<const CpuExecutable> ClusterRuntime::PlanTemplate(const std::string& identity) const {
  MutexLock lock(&templates_mu_);
  auto it = plan_templates_.find(identity);
  return it == plan_templates_.end() ? nullptr : it->second;
}

void ClusterRuntime::SetPlanTemplate(const std::string& identity, std::shared_ptr<const CpuExecutable> ex) {
  std::shared_ptr<const CpuExecutable> previous;  // released after the lock
  MutexLock lock(&templates_mu_);
  previous = std::exchange(plan_templates_[identity], std::move(ex));
}

int ClusterRuntime::RunThreadsNow() const {
  const int threads = flags_.intra_op_threads;
  if (!lend_cpu_ || compiles_in_flight() == 0) return threads;
  return std::max(1, threads - 1);
}

int ClusterRuntime::compiles_in_flight() const { return pool_in_flight_.load(std::memory_order_relaxed); }

void ShapeFamily::Publish(int cluster_id, std::shared_ptr<const CpuExecutable> ex) {
  std::shared_ptr<const CpuExecutable> dropped;  // released after the lock
  MutexLock lock(&mu_);
  auto& list = executables_[cluster_id];
  auto it = std::find(list.begin(), list.end(), ex);
  if (it != list.end()) list.erase(it);
  list.insert(list.begin(), std::move(ex));
  if (list.size() > kMaxPerCluster) {
    dropped = std::move(list.back());
    list.pop_back();
  }
}

std::vector<std::shared_ptr<const CpuExecutable>> ShapeFamily::Get(int cluster_id) const {
  MutexLock lock(&mu_);
  auto it = executables_.find(cluster_id);
  return it == executables_.end() ? std::vector<std::shared_ptr<const CpuExecutable>>{} : it->second;
}

bool ShapeFamily::Has(int cluster_id) const {
  MutexLock lock(&mu_);
  auto it = executables_.find(cluster_id);
  return it != executables_.end() && !it->second.empty();
}

bool IsDynamicShapeMiss(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kDynamicShapeMissPayload).has_value();
}

namespace {
absl::Status DynamicShapeMiss(const std::string& why) {
  absl::Status st = absl::UnavailableError(absl::StrCat("dynamic-shape plan: ", why));
  st.SetPayload(kDynamicShapeMissPayload, absl::Cord("1"));
  return st;
}
}  // namespace

struct ClusterRunner::State {
  // Not owned: the runtime outlives every executor of its Session, and its Shutdown (called before the
  // Session's executors are destroyed) joins the compile worker, so no job runs after it. A queued job
  // owns its State only.
  ClusterRuntime* runtime = nullptr;
  std::shared_ptr<const Graph> body;
  int threads = 1;
  int signature_index = -1;
  CacheKey key;
  std::string policy_id;   // shape-free identity of the cluster
  std::string signature;
  // The fallback executor (the body op by op) is created on the first fallback execution: a signature that
  // runs compiled from its first execution (a polymorphic hit, a disk or memory cache hit) never needs it,
  // and creating one per cluster per signature was a third of re-specialization.
  ExecutorOptions fallback_options;
  Mutex fallback_mu;
  std::unique_ptr<Executor> fallback;  // guarded by fallback_mu until set, then immutable
  std::shared_ptr<ClusterStats> stats;
  Mutex mu;
  std::shared_ptr<const CpuExecutable> executable ABSL_GUARDED_BY(mu);
  bool compile_in_flight ABSL_GUARDED_BY(mu) = false;
  bool failed ABSL_GUARDED_BY(mu) = false;
  bool dumped ABSL_GUARDED_BY(mu) = false;
  bool polymorphic_tried ABSL_GUARDED_BY(mu) = false;
  bool holds_fleet_lease ABSL_GUARDED_BY(mu) = false;  // this process compiles the entry for the fleet (TieredCache)
  std::atomic<uint64_t> pending_flow{0};  // trace flow from the compile to the first compiled execution
  std::string trace_name, compile_name;   // "cluster_<id>", "compile cluster_<id>"
  // Dynamic-shape plans (ShapeFamily).
  std::shared_ptr<ShapeFamily> family;
  bool dynamic = false;
  const CpuExecutable* published ABSL_GUARDED_BY(mu) = nullptr;  // the executable last published to `family`
  // The family's instances by input dims, with the executable each was made from (dynamic runners; bounded).
  struct Instance {
    std::shared_ptr<const CpuExecutable> executable;
    std::shared_ptr<const CpuExecutable::DimsInstance> dims;
  };
  Mutex instances_mu;
  std::map<std::vector<Dims>, Instance> instances ABSL_GUARDED_BY(instances_mu);
};

namespace {

// The stats of the executable a cluster now runs (generated code of this plan, its fused kernels).
void RecordExecutable(ClusterRunner::State& s, const CpuExecutable& ex) {
  s.stats->code_bytes = static_cast<int64_t>(ex.code_bytes());
  s.stats->fused_kernels = ex.num_fused_kernels();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ClusterRunner>> ClusterRunner::Create(const Node& node,
                                                                     std::shared_ptr<const Graph> owner,
                                                                     ClusterRuntime* runtime, int threads,
                                                                     int signature_index,
                                                                     std::shared_ptr<ShapeFamily> family,
                                                                     bool dynamic) {
  std::unique_ptr<ClusterRunner> r(new ClusterRunner());
  r->state_ = std::make_shared<State>();
  State& s = *r->state_;
  s.runtime = runtime;
  s.family = std::move(family);
  s.dynamic = dynamic && s.family != nullptr;
  s.threads = threads;
  s.signature_index = signature_index;
  // The body alone, not the specialized graph around it: executables keep their body alive in the memory
  // cache after the signature's plan is evicted (a cluster body reads nothing of the outer graph: nodes with
  // subgraphs are never clustered, constants are shared tensors).
  auto body_attr = node.attrs.find("body");
  if (body_attr == node.attrs.end() || body_attr->second.kind != Attribute::Kind::kGraph || !body_attr->second.g) {
    return absl::InternalError(absl::StrCat(node.Describe(), " has no body"));
  }
  (void)owner;
  s.body = body_attr->second.g;
  const Graph* body = s.body.get();
  std::string keyed, identity;
  // Without a persistent cache, keys live in this process only: the session's weights are named by
  // object, not hashed; constants folded per signature leave the identity (cache/cache_key.h).
  CanonicalClusterTexts(*body, &keyed, &identity, runtime->loaded_constants().get(), runtime->persistent() == nullptr);
  s.key = MakeCacheKeyFromText(keyed, runtime->target(), runtime->codegen_flags());
  s.policy_id = absl::StrCat(Fingerprint64(identity));
  for (const Value* v : body->inputs()) absl::StrAppend(&s.signature, DTypeName(v->dtype), v->shape.ToString());
  s.stats = runtime->NewStats();
  s.stats->id = static_cast<int>(node.GetInt("cluster_id", 0));
  s.stats->ops = static_cast<int>(body->nodes().size());
  s.stats->signature = s.signature;
  s.trace_name = absl::StrCat("cluster_", s.stats->id);
  s.compile_name = absl::StrCat("compile cluster_", s.stats->id);
  s.fallback_options.threads = threads;
  s.fallback_options.profiler = runtime->profiler();
  s.fallback_options.trace_cluster_id = s.stats->id;
  // A specialized body has its signature's shapes (the session validated the inputs): its fallback skips
  // shape inference as the session's own executor does. A dynamic runner's body is the template's: shapes
  // are inferred per run.
  s.fallback_options.trust_shapes = !s.dynamic;
  return r;
}

ClusterRunner::~ClusterRunner() {
  // A compile job in flight may still hold the state; its counters stay with the retired totals' snapshot.
  if (state_ && state_->runtime != nullptr) state_->runtime->RetireStats(state_->stats);
}

namespace {

// Compiles `state`'s body, records the outcome, and installs the executable. Returns the compile status.
absl::Status CompileInto(const std::shared_ptr<ClusterRunner::State>& state, bool background);

// Writes the cluster's fusion plan, LLVM IR and assembly to the dump directory (once per cluster).
void DumpCompiled(ClusterRunner::State& s, const CpuExecutable& ex);

void CacheEvent(Profiler* prof, const char* name, const ClusterRunner::State& s, const char* result,
                const std::string& reason, int64_t t0, const char* tier = "") {
  if (prof == nullptr) return;
  TraceArgs args;
  args.Add("cluster", s.stats->id).Add("key", s.key.Hex()).Add("result", result);
  if (tier[0] != '\0') args.Add("tier", tier);
  if (!reason.empty()) args.Add("reason", reason);
  prof->Complete(name, "cache", t0, Profiler::Now(), &args);
}

// The executable of a valid persistent-cache entry for `s` (disk, else the remote tier), installed; or null.
std::shared_ptr<const CpuExecutable> LoadFromDisk(ClusterRunner::State& s, Profiler* prof) {
  // Loading is not compiling: a signature with a valid disk entry runs compiled from its first execution.
  int64_t t0 = prof ? Profiler::Now() : 0;
  const char* tier = "";
  std::shared_ptr<const CpuExecutable> ex;
  if (auto payload = s.runtime->persistent()->Lookup(s.key, PayloadKind::kCpuCode, &tier)) {
    CpuCompileOptions plan_options;
    plan_options.excess_precision = s.runtime->flags().allow_excess_precision;
    plan_options.codegen_single_ops = s.runtime->flags().cpu_codegen_single_ops;
    auto loaded = CatchAsStatus("loading a cached cluster",
                                [&] { return CpuExecutable::Load(s.body, *payload, plan_options); });
    if (loaded.ok()) {
      ex = *loaded;
      ++s.stats->disk_hits;
      RecordExecutable(s, *ex);
      s.runtime->cache().Insert(s.key, ex);
      {
        MutexLock lock(&s.mu);
        s.executable = ex;
      }
      CacheEvent(prof, "disk cache lookup", s, "hit", "", t0, tier);
    } else {
      ++s.stats->disk_rejects;
      CJIT_LOG(WARNING) << "persistent cache: entry " << s.key.Hex() << " for cluster " << s.stats->id
                        << " could not be loaded, recompiling: " << loaded.status().message();
      CacheEvent(prof, "disk cache lookup", s, "reject", std::string(loaded.status().message()), t0, tier);
    }
  } else {
    CacheEvent(prof, "disk cache lookup", s, "miss", "", t0);
  }
  if (ex && s.runtime->dumper()) DumpCompiled(s, *ex);
  return ex;
}

// Before compiling `s` (it missed every tier): takes the fleet's lease on its entry. False: do not compile
// now — another process of the fleet is compiling it (`why` says so), or it appeared meanwhile and `*ex`
// is loaded.
bool TakeFleetLease(ClusterRunner::State& s, Profiler* prof, std::shared_ptr<const CpuExecutable>* ex,
                    std::string* why) {
  TieredCache* cache = s.runtime->persistent();
  if (cache == nullptr || cache->remote() == nullptr || cache->read_only()) return true;
  int64_t t0 = prof ? Profiler::Now() : 0;
  const TieredCache::FleetLease lease = cache->AcquireFleetLease(s.key, PayloadKind::kCpuCode);
  CacheEvent(prof, "remote cache lease", s,
             lease == TieredCache::FleetLease::kProduce ? "compile here"
             : lease == TieredCache::FleetLease::kWait  ? "another process compiles it"
                                                      : "published meanwhile",
             "", t0, "remote");
  switch (lease) {
    case TieredCache::FleetLease::kProduce: {
      MutexLock lock(&s.mu);
      s.holds_fleet_lease = true;
      return true;
    }
    case TieredCache::FleetLease::kWait:
      *why = "another process of the fleet is compiling it (--remote_cache lease)";
      return false;
    case TieredCache::FleetLease::kFound:
      *ex = LoadFromDisk(s, prof);
      if (!*ex) *why = "the fleet's entry could not be loaded";
      return false;
  }
  return true;
}

void ReleaseFleetLease(ClusterRunner::State& s) {
  {
    MutexLock lock(&s.mu);
    if (!s.holds_fleet_lease) return;
    s.holds_fleet_lease = false;
  }
  s.runtime->persistent()->ReleaseFleetLease(s.key, PayloadKind::kCpuCode);
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> ClusterRunner::RunDynamic(const std::vector<const Tensor*>& inputs,
                                                               Profiler* prof) {
  State& s = *state_;
  std::vector<Dims> dims;
  dims.reserve(inputs.size());
  for (const Tensor* t : inputs) dims.push_back(t ? t->dims() : Dims{});
  State::Instance use;
  {
    MutexLock lock(&s.instances_mu);
    auto it = s.instances.find(dims);
    if (it != s.instances.end()) use = it->second;
  }
  if (!use.executable) {
    const std::vector<std::shared_ptr<const CpuExecutable>> candidates = s.family->Get(s.stats->id);
    if (candidates.empty()) return DynamicShapeMiss(absl::StrCat("cluster ", s.stats->id, " has not compiled yet"));
    const int64_t t0 = prof ? Profiler::Now() : 0;
    std::string why;
    for (const auto& ex : candidates) {  // most recent first
      auto made = CatchAsStatus("instantiating a cluster at other dims",
                                [&] { return ex->InstantiateDims(dims, s.family->derived()); });
      if (made.ok()) {
        use = State::Instance{ex, *made};
        break;
      }
      if (why.empty()) why = std::string(made.status().message());
    }
    if (prof) {
      TraceArgs args;
      args.Add("cluster", s.stats->id).Add("result", use.executable ? "hit" : "miss");
      if (!use.executable) args.Add("reason", why);
      prof->Complete("dims instantiation", "cache", t0, Profiler::Now(), &args);
    }
    if (!use.executable) {
      CJIT_VLOG(1) << "cluster " << s.stats->id << ": " << why;
      return DynamicShapeMiss(why);
    }
    ++s.stats->polymorphic_hits;
    constexpr size_t kMaxInstances = 256;  // per cluster of the family; each holds its dims and kernel metadata
    MutexLock lock(&s.instances_mu);
    if (s.instances.size() >= kMaxInstances) s.instances.clear();
    s.instances[dims] = use;
  }
  ++s.stats->compiled_executions;
  return use.executable->Run(inputs, RunThreads(s.threads), prof, s.stats->id, nullptr, 0, true, use.dims.get());
}

absl::StatusOr<std::vector<Tensor>> ClusterRunner::Run(const std::vector<const Tensor*>& inputs) {
  State& s = *state_;
  Profiler* prof = CJIT_PROFILER_ENABLED ? s.runtime->profiler() : nullptr;
  TraceScope scope(prof, s.trace_name, "cluster");
  // A dynamic runner (its family's executor: inputs of any dims of the structure) runs a family executable
  // at the inputs' dims; before any exists, it follows the compile policy as every runner does (its body
  // is the template's) and runs the fallback path, whose executor infers shapes per run.
  if (s.dynamic && s.family->Has(s.stats->id)) {
    if (scope.active()) scope.args().Add("cluster", s.stats->id).Add("path", "compiled at other dims (dynamic shapes)");
    return RunDynamic(inputs, prof);
  }
  if (s.dynamic && s.family->derived() != nullptr) {
    // The body's op-by-op path would read the template's values of its shape-derived constants.
    return DynamicShapeMiss(absl::StrCat("cluster ", s.stats->id, " has not compiled yet"));
  }
  std::shared_ptr<const CpuExecutable> ex;
  {
    MutexLock lock(&s.mu);
    ex = s.executable;
  }
  if (!ex) {
    int64_t t0 = prof ? Profiler::Now() : 0;
    if (auto hit = s.runtime->cache().Lookup(s.key)) {
      ex = std::static_pointer_cast<const CpuExecutable>(hit);
      ++s.stats->memory_hits;
      RecordExecutable(s, *ex);
      MutexLock lock(&s.mu);
      s.executable = ex;
    }
    CacheEvent(prof, "memory cache lookup", s, ex ? "hit" : "miss", "", t0);
  }
  if (!ex && s.runtime->persistent() != nullptr) ex = LoadFromDisk(s, prof);
  if (!ex && s.runtime->flags().polymorphic_clusters) ex = TryPolymorphicInstantiation(prof);
  std::string why;
  if (!ex) {
    bool failed, in_flight;
    {
      MutexLock lock(&s.mu);
      failed = s.failed;
      in_flight = s.compile_in_flight;
    }
    CompilePolicy::Decision d = CompilePolicy::Decision::kFallback;
    if (failed) {
      why = "its compilation failed";
    } else if (in_flight) {
      why = "a compilation is in flight";
    } else {
      d = s.runtime->policy().OnExecution(s.policy_id, s.signature, &why);
    }
    if (d == CompilePolicy::Decision::kCompile && !s.runtime->policy().BeginCompile(s.policy_id)) {
      // Another signature of this structure is compiling: its kernels will serve this one (a polymorphic
      // instantiation at a later execution) without a second compile.
      d = CompilePolicy::Decision::kFallback;
      why = "a compilation of this cluster structure is in flight";
      MutexLock lock(&s.mu);
      s.polymorphic_tried = false;
    }
    if (d == CompilePolicy::Decision::kCompile) {
      bool start = false;
      {
        MutexLock lock(&s.mu);
        if (!s.compile_in_flight && !s.executable) {
          s.compile_in_flight = true;
          start = true;
        }
        ex = s.executable;
      }
      if (start && !TakeFleetLease(s, prof, &ex, &why)) {
        start = false;
        MutexLock lock(&s.mu);
        s.compile_in_flight = false;
      }
      if (!start) s.runtime->policy().AbandonCompile(s.policy_id);
      if (start && s.runtime->async_compilation()) {
        std::shared_ptr<State> keep = state_;
        if (!s.runtime->SubmitCompile([keep] { CompileInto(keep, /*background=*/true).IgnoreError(); })) {
          s.runtime->policy().AbandonCompile(s.policy_id);
          ReleaseFleetLease(s);
          MutexLock lock(&s.mu);
          s.compile_in_flight = false;  // shutting down: stay on the fallback path
        }
        why = "compiling in the background (--async_compilation)";
      } else if (start && CompileInto(state_, /*background=*/false).ok()) {
        MutexLock lock(&s.mu);
        ex = s.executable;
      } else if (!ex && why.empty()) {
        why = start ? "its compilation failed" : "another thread is compiling it";
      }
    }
  }
  if (scope.active()) {
    scope.args()
        .Add("cluster", s.stats->id)
        .Add("path", ex ? "compiled" : "fallback")
        .Add("signature", s.signature)
        .Add("ops", s.stats->ops);
    if (!ex && !why.empty()) scope.args().Add("why", why);
  }
  if (ex && s.dynamic) {  // compiled for the template's dims: run at these through an instance
    s.family->Publish(s.stats->id, ex);
    return RunDynamic(inputs, prof);
  }
  if (ex) {
    s.runtime->policy().RecordCompiledExecution(s.policy_id);
    if (s.family) {
      bool publish;
      {
        MutexLock lock(&s.mu);
        publish = s.published != ex.get();
        s.published = ex.get();
      }
      if (publish) s.family->Publish(s.stats->id, ex);
    }
    // This signature's executions before this one, on either path (the autotuning threshold counts both).
    const int64_t execution = s.stats->compiled_executions++ + s.stats->fallback_executions.load();
    if (prof) {
      if (uint64_t flow = s.pending_flow.exchange(0)) prof->FlowEnd(flow, "first compiled execution", Profiler::Now());
    }
    Autotuner* tuner = s.runtime->autotuner();
    const bool async = s.runtime->async_autotune();
    if (async && tuner != nullptr && tuner->enabled() && execution >= tuner->options().threshold &&
        ex->ClaimAutotuneJob(*tuner)) {
      // An executable that was not tuned when it was built (loaded from the persistent cache, instantiated
      // from other signatures' kernels, compiled before the threshold) tunes on the compile worker; its
      // runs keep the default algorithms until then.
      const int threads = s.threads;
      s.runtime->SubmitCompile([ex, tuner, threads, execution] { ex->Autotune(*tuner, threads, execution); });
    }
    return ex->Run(inputs, RunThreads(s.threads), prof, s.stats->id, tuner, execution, /*tune_inline=*/!async);
  }
  ++s.stats->fallback_executions;
  Executor* fallback = nullptr;
  {
    MutexLock lock(&s.fallback_mu);
    if (!s.fallback) {
      CJIT_ASSIGN_OR_RETURN(s.fallback, Executor::Create(s.body, s.fallback_options));
    }
    fallback = s.fallback.get();
  }
  std::vector<Tensor> in;
  for (const Tensor* t : inputs) in.push_back(*t);
  return fallback->Run(in);
}

std::shared_ptr<const CpuExecutable> ClusterRunner::TryPolymorphicInstantiation(Profiler* prof) {
  State& s = *state_;
  {
    MutexLock lock(&s.mu);
    if (s.polymorphic_tried || s.failed || s.compile_in_flight) return nullptr;
    s.polymorphic_tried = true;
  }
  // A structure that compiled before is instantiated from its kernels. One that never compiled is tried
  // once (per structure): its plan may need no generated code (every fused group a single op run by its
  // library kernel) or only kernels other clusters compiled — then it runs compiled from its first
  // execution, with no fallback runs and no LLVM work. --always_defer_compilation keeps the fallback.
  const bool compiled_before = s.runtime->policy().HasCompiled(s.policy_id);
  if (s.runtime->flags().always_defer_compilation ||
      (!compiled_before && !s.runtime->policy().MayRunWithoutCodegen(s.policy_id))) {
    MutexLock lock(&s.mu);
    s.polymorphic_tried = false;  // the structure may compile later (another signature): ask again then
    return nullptr;
  }
  int64_t t0 = prof ? Profiler::Now() : 0;
  CpuCompileOptions options;
  options.excess_precision = s.runtime->flags().allow_excess_precision;
  options.codegen_single_ops = s.runtime->flags().cpu_codegen_single_ops;
  options.reuse_only = true;
  options.fail_for_testing = s.runtime->flags().fail_compilation_for_testing;
  const std::shared_ptr<const CpuExecutable> like = s.runtime->PlanTemplate(s.policy_id);
  auto ex = CatchAsStatus(absl::StrCat("instantiating cluster ", s.stats->id),
                          [&] { return CpuExecutable::Compile(s.body, options, like.get()); });
  if (prof) {
    TraceArgs args;
    args.Add("cluster", s.stats->id).Add("signature", s.signature).Add("key", s.key.Hex());
    args.Add("result", ex.ok() ? "hit" : "miss");
    if (ex.ok()) args.Add("plan", (*ex)->plan_rebound() ? "rebound" : "built");
    if (!ex.ok()) args.Add("reason", std::string(ex.status().message()));
    prof->Complete("polymorphic instantiation", "cache", t0, Profiler::Now(), &args);
  }
  // A miss (a kernel structure this shape needs was never compiled, e.g. a dim of 1 changed a broadcast)
  // is not a failure: the signature follows the compile policy.
  if (!ex.ok()) {
    if (!compiled_before) {
      s.runtime->policy().RecordNeedsCodegen(s.policy_id);
      MutexLock lock(&s.mu);
      s.polymorphic_tried = false;  // once the structure has compiled (another signature), try again
    }
    return nullptr;
  }
  ++s.stats->polymorphic_hits;
  RecordExecutable(s, **ex);
  s.runtime->SetPlanTemplate(s.policy_id, *ex);
  s.runtime->cache().Insert(s.key, *ex);
  MutexLock lock(&s.mu);
  if (!s.executable) s.executable = *ex;
  return s.executable;
}

namespace {

void DumpCompiled(ClusterRunner::State& s, const CpuExecutable& ex) {
  Dumper* d = s.runtime->dumper();
  {
    MutexLock lock(&s.mu);
    if (s.dumped) return;
    s.dumped = true;
  }
  int id = s.stats->id;
  d->DumpCluster(s.signature_index, id, "fusion_plan", "fusion_plan.txt", FusionPlanToString(ex.plan()));
  auto kernels = DumpCpuKernels(ex.plan());
  if (!kernels.ok()) {
    CJIT_LOG(WARNING) << "--dump_to: cluster " << id << ": " << kernels.status().message();
    return;
  }
  for (size_t k = 0; k < kernels->size(); ++k) {
    const CpuKernelDump& kd = (*kernels)[k];
    d->DumpCluster(s.signature_index, id, "llvm_ir", absl::StrCat("kernel_", k, ".ll"), kd.llvm_ir);
    d->DumpCluster(s.signature_index, id, "llvm_ir_opt", absl::StrCat("kernel_", k, ".opt.ll"), kd.llvm_ir_opt);
    d->DumpCluster(s.signature_index, id, "asm", absl::StrCat("kernel_", k, ".s"), kd.assembly);
  }
}

absl::Status CompileInto(const std::shared_ptr<ClusterRunner::State>& state, bool background) {
  ClusterRunner::State& s = *state;
  Profiler* prof = CJIT_PROFILER_ENABLED ? s.runtime->profiler() : nullptr;
  TraceScope scope(prof, s.compile_name, "compile");
  auto t0 = std::chrono::steady_clock::now();
  CpuCompileOptions options;
  options.excess_precision = s.runtime->flags().allow_excess_precision;
  options.codegen_single_ops = s.runtime->flags().cpu_codegen_single_ops;
  options.fail_for_testing = s.runtime->flags().fail_compilation_for_testing;
  // A signature that ran the threshold's fallback executions itself is hot: its row kernels get the
  // optimizing code generator. One compiled because new signatures of its structure reached the threshold
  // together (a stream of shapes, each run once) compiles fast, so that it serves the stream soon: a BERT
  // stream over 12 sequence lengths finished before its optimized compile (94 ms in the background) did.
  // A dynamic-shape family's runner serves every signature of its structure: its executions are the
  // stream's, not one signature's, so it compiles fast too.
  options.optimize_row_kernels =
      !s.runtime->flags().enable_lazy_compilation ||
      (!s.dynamic && s.stats->fallback_executions.load() >= s.runtime->flags().compile_threshold);
  const int parallelism = s.runtime->flags().force_compilation_parallelism;
  // A synchronous compile blocks the run: every CPU. A background one takes the CPUs the runs leave (one
  // lent by LendsCpuToCompiles, or those above --intra_op_threads), at least one.
  const int spare = UsableCpus() - s.runtime->RunThreadsNow();
  options.compile_threads = parallelism > 0 ? parallelism : background ? std::max(1, spare) : UsableCpus();
  if (prof) {
    options.on_phase = [prof](const char* phase, int64_t start, int64_t end) {
      prof->Complete(phase, "compile", start, end);
    };
  }
  ClusterRuntime* runtime = s.runtime;
  options.cancelled = [runtime] { return runtime->shutting_down(); };
  auto ex = CatchAsStatus(absl::StrCat("compiling cluster ", s.stats->id),
                          [&] { return CpuExecutable::Compile(s.body, options); });
  // Cancelled: the session is being destroyed, so there is nothing to record, publish or warn about.
  const bool cancelled = !ex.ok() && absl::IsCancelled(ex.status());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!cancelled) {
    s.runtime->policy().RecordCompile(s.policy_id, seconds, ex.ok());
    ++s.stats->compiles;
    s.stats->compile_us += static_cast<int64_t>(seconds * 1e6);
  }
  if (scope.active() && !cancelled) {
    scope.args().Add("cluster", s.stats->id).Add("signature", s.signature).Add("key", s.key.Hex());
    scope.args().Add("ok", ex.ok() ? "true" : "false");
    scope.args().Add("row_kernel_codegen", options.optimize_row_kernels ? "optimizing" : "fast");
    if (ex.ok()) {
      scope.args()
          .Add("fused_kernels", (*ex)->num_fused_kernels())
          .Add("library_steps", (*ex)->num_library_steps())
          .Add("code_bytes", static_cast<int64_t>((*ex)->code_bytes()));
    } else {
      scope.args().Add("error", std::string(ex.status().message()));
    }
  }
  if (ex.ok()) {
    // Autotuning on the compile path (background with --async_compilation): a signature compiled after
    // --autotune_threshold executions has its convolutions and GEMMs tuned before the executable is
    // published, so its compiled runs never wait for tuning.
    Autotuner* tuner = s.runtime->autotuner();
    const int64_t executions = s.stats->fallback_executions + s.stats->compiled_executions;
    if (tuner != nullptr && tuner->enabled()) (*ex)->Autotune(*tuner, s.threads, executions);
  }
  if (!ex.ok()) ReleaseFleetLease(s);  // the fleet need not wait for an entry that will not come
  {
    MutexLock lock(&s.mu);
    s.compile_in_flight = false;
    if (cancelled) return ex.status();
    if (!ex.ok()) {
      s.failed = true;
      CJIT_LOG(WARNING) << "cluster " << s.stats->id << " (" << s.signature
                        << "): compilation failed, running it on the "
                        << "fallback path from now on: " << ex.status().message();
      return ex.status();
    }
    RecordExecutable(s, **ex);
  }
  int64_t total_us = 0;
  for (const auto& st : s.runtime->AllStats()) total_us += st->compile_us;
  CJIT_VLOG(1) << "compiled cluster " << s.stats->id << " signature " << s.signature << " in " << seconds * 1e3
               << " ms: " << (*ex)->num_fused_kernels() << " fused kernels, " << (*ex)->num_library_steps()
               << " library steps, " << (*ex)->code_bytes() << " code bytes, key " << s.key.Hex()
               << "; compile time so far " << total_us / 1e3 << " ms";
  s.runtime->cache().Insert(s.key, *ex);
  s.runtime->SetPlanTemplate(s.policy_id, *ex);
  if (s.family) s.family->Publish(s.stats->id, *ex);  // a background compile's signature may not run again
  if (TieredCache* disk = s.runtime->persistent(); disk != nullptr && !disk->read_only()) {
    int64_t w0 = prof ? Profiler::Now() : 0;
    auto payload = (*ex)->ExportPayload();
    absl::Status st = payload.ok() ? disk->Store(s.key, PayloadKind::kCpuCode, *payload) : payload.status();
    if (st.ok()) {
      ++s.stats->disk_writes;
      CJIT_VLOG(2) << "persistent cache: stored cluster " << s.stats->id << " (" << payload->size() << " bytes), key "
                   << s.key.Hex();
    } else {
      CJIT_LOG(WARNING) << "persistent cache: cannot store cluster " << s.stats->id << ": " << st.message();
    }
    CacheEvent(prof, "disk cache write", s, st.ok() ? "written" : "failed", st.ok() ? "" : std::string(st.message()),
               w0);
  }
  ReleaseFleetLease(s);  // queued behind the entry's remote write
  if (s.runtime->dumper()) DumpCompiled(s, **ex);
  if (prof) {
    uint64_t flow = prof->NewFlowId();
    prof->FlowStart(flow, "first compiled execution", Profiler::Now());
    s.pending_flow.store(flow);
  }
  MutexLock lock(&s.mu);
  s.executable = *ex;
  return absl::OkStatus();
}

}  // namespace

}  // namespace cjit
