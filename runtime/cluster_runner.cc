#include "runtime/cluster_runner.h"

#include <glog/logging.h>

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "compiler/codegen/cpu_compiler.h"
#include "compiler/ir/status_macros.h"
#include "compiler/passes/mark_for_compilation.h"
#include "runtime/executable.h"
#include "runtime/executor.h"

namespace cjit {

ClusterRuntime::ClusterRuntime(const Flags& flags)
    : flags_(flags),
      policy_(CompilePolicyOptions{flags.compile_threshold, flags.compile_time_cutoff_s,
                                   flags.always_defer_compilation, flags.enable_lazy_compilation}),
      target_(absl::StrCat("clusterjit=", CJIT_VERSION, " ", HostTargetDescription())),
      // Flags that change generated code (none of the current ones besides the target); listed for the key.
      codegen_flags_("O3") {}

absl::StatusOr<std::shared_ptr<ClusterRuntime>> ClusterRuntime::Create(const Flags& flags) {
  auto rt = std::make_shared<ClusterRuntime>(flags);
  if (!flags.persistent_cache_dir.empty()) {
    DiskCacheOptions o;
    o.dir = flags.persistent_cache_dir;
    o.read_only = flags.persistent_cache_read_only;
    o.max_bytes = flags.persistent_cache_max_bytes;
    auto disk = DiskCache::Open(o);
    if (!disk.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--persistent_cache_dir: ", disk.status().message()));
    }
    rt->disk_ = std::move(*disk);
  }
  return rt;
}

std::shared_ptr<ClusterStats> ClusterRuntime::NewStats() {
  auto s = std::make_shared<ClusterStats>();
  std::lock_guard<std::mutex> lock(mu_);
  stats_.push_back(s);
  return s;
}

std::vector<std::shared_ptr<ClusterStats>> ClusterRuntime::AllStats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

struct ClusterRunner::State {
  // Shared: an --async_compilation thread may outlive the Session that started it.
  std::shared_ptr<ClusterRuntime> runtime;
  std::shared_ptr<const Graph> body;
  int threads = 1;
  CacheKey key;
  std::string policy_id;   // shape-free identity of the cluster
  std::string signature;
  std::unique_ptr<Executor> fallback;
  std::shared_ptr<ClusterStats> stats;
  std::mutex mu;
  std::shared_ptr<const CpuExecutable> executable;  // guarded by mu
  bool compile_in_flight = false;                   // guarded by mu
  bool failed = false;                              // guarded by mu
};

absl::StatusOr<std::unique_ptr<ClusterRunner>> ClusterRunner::Create(const Node& node,
                                                                     std::shared_ptr<const Graph> owner,
                                                                     ClusterRuntime* runtime, int threads) {
  std::unique_ptr<ClusterRunner> r(new ClusterRunner());
  r->state_ = std::make_shared<State>();
  State& s = *r->state_;
  s.runtime = runtime->weak_from_this().lock();
  if (!s.runtime) return absl::InternalError("ClusterRuntime must be owned by a std::shared_ptr");
  s.threads = threads;
  const Graph* body = node.GetGraph("body");
  if (body == nullptr) return absl::InternalError(absl::StrCat(node.Describe(), " has no body"));
  s.body = std::shared_ptr<const Graph>(owner, body);
  s.key = MakeCacheKey(*body, runtime->target(), runtime->codegen_flags());
  s.policy_id = absl::StrCat(Fingerprint64(CanonicalClusterText(*body, false)));
  for (const Value* v : body->inputs()) absl::StrAppend(&s.signature, DTypeName(v->dtype), v->shape.ToString());
  CJIT_ASSIGN_OR_RETURN(s.fallback, Executor::Create(s.body, threads));
  s.stats = runtime->NewStats();
  s.stats->id = static_cast<int>(node.GetInt("cluster_id", 0));
  s.stats->ops = static_cast<int>(body->nodes().size());
  s.stats->signature = s.signature;
  return r;
}

ClusterRunner::~ClusterRunner() = default;

namespace {

// Compiles `state`'s body, records the outcome, and installs the executable. Returns the compile status.
absl::Status CompileInto(const std::shared_ptr<ClusterRunner::State>& state);

}  // namespace

absl::StatusOr<std::vector<Tensor>> ClusterRunner::Run(const std::vector<const Tensor*>& inputs) {
  State& s = *state_;
  std::shared_ptr<const CpuExecutable> ex;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    ex = s.executable;
  }
  if (!ex) {
    if (auto hit = s.runtime->cache().Lookup(s.key)) {
      ex = std::static_pointer_cast<const CpuExecutable>(hit);
      ++s.stats->memory_hits;
      std::lock_guard<std::mutex> lock(s.mu);
      s.executable = ex;
    }
  }
  if (!ex && s.runtime->disk() != nullptr) {
    // Loading is not compiling: a signature with a valid disk entry runs compiled from its first execution.
    if (auto payload = s.runtime->disk()->Lookup(s.key, CpuExecutable::kPayloadKind)) {
      auto loaded = CpuExecutable::Load(s.body, *payload);
      if (loaded.ok()) {
        ex = *loaded;
        ++s.stats->disk_hits;
        s.runtime->cache().Insert(s.key, ex);
        std::lock_guard<std::mutex> lock(s.mu);
        s.executable = ex;
      } else {
        ++s.stats->disk_rejects;
        LOG(WARNING) << "persistent cache: entry " << s.key.Hex() << " for cluster " << s.stats->id
                     << " could not be loaded, recompiling: " << loaded.status().message();
      }
    }
  }
  if (!ex) {
    bool failed, in_flight;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      failed = s.failed;
      in_flight = s.compile_in_flight;
    }
    std::string why;
    CompilePolicy::Decision d = failed || in_flight ? CompilePolicy::Decision::kFallback
                                                    : s.runtime->policy().OnExecution(s.policy_id, s.signature, &why);
    if (d == CompilePolicy::Decision::kCompile) {
      if (s.runtime->flags().async_compilation) {
        {
          std::lock_guard<std::mutex> lock(s.mu);
          s.compile_in_flight = true;
        }
        std::shared_ptr<State> keep = state_;
        std::thread([keep] { CompileInto(keep).IgnoreError(); }).detach();
      } else if (CompileInto(state_).ok()) {
        std::lock_guard<std::mutex> lock(s.mu);
        ex = s.executable;
      }
    }
  }
  if (ex) {
    s.runtime->policy().RecordCompiledExecution(s.policy_id);
    ++s.stats->compiled_executions;
    return ex->Run(inputs, s.threads);
  }
  ++s.stats->fallback_executions;
  std::vector<Tensor> in;
  for (const Tensor* t : inputs) in.push_back(*t);
  return s.fallback->Run(in);
}

namespace {

absl::Status CompileInto(const std::shared_ptr<ClusterRunner::State>& state) {
  ClusterRunner::State& s = *state;
  auto t0 = std::chrono::steady_clock::now();
  CpuCompileOptions options;
  options.fail_for_testing = s.runtime->flags().fail_compilation_for_testing;
  auto ex = CpuExecutable::Compile(s.body, options);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.runtime->policy().RecordCompile(s.policy_id, seconds, ex.ok());
  ++s.stats->compiles;
  s.stats->compile_us += static_cast<int64_t>(seconds * 1e6);
  std::lock_guard<std::mutex> lock(s.mu);
  s.compile_in_flight = false;
  if (!ex.ok()) {
    s.failed = true;
    LOG(WARNING) << "cluster " << s.stats->id << " (" << s.signature << "): compilation failed, running it on the "
                 << "fallback path from now on: " << ex.status().message();
    return ex.status();
  }
  s.stats->code_bytes = static_cast<int64_t>((*ex)->code_bytes());
  VLOG(1) << "compiled cluster " << s.stats->id << " signature " << s.signature << " in " << seconds * 1e3
          << " ms: " << (*ex)->num_fused_kernels() << " fused kernels, " << (*ex)->num_library_steps()
          << " library steps, " << (*ex)->code_bytes() << " code bytes, key " << s.key.Hex();
  s.runtime->cache().Insert(s.key, *ex);
  s.executable = *ex;
  if (DiskCache* disk = s.runtime->disk(); disk != nullptr && !disk->options().read_only) {
    auto payload = (*ex)->ExportPayload();
    absl::Status st = payload.ok() ? disk->Store(s.key, CpuExecutable::kPayloadKind, *payload) : payload.status();
    if (st.ok()) {
      ++s.stats->disk_writes;
    } else {
      LOG(WARNING) << "persistent cache: cannot store cluster " << s.stats->id << ": " << st.message();
    }
  }
  return absl::OkStatus();
}

}  // namespace

}  // namespace cjit
