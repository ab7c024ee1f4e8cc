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
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/cache_key.h"
#include "cache/disk_cache.h"
#include "cache/memory_cache.h"
#include "compiler/ir/graph.h"
#include "flags/flags.h"
#include "runtime/compile_policy.h"

namespace cjit {

class Executor;
class CpuExecutable;

// Counters of one cluster (one cluster node of one specialized signature).
struct ClusterStats {
  int id = 0;
  int ops = 0;
  std::string signature;
  std::atomic<int64_t> compiles{0}, compile_us{0}, fallback_executions{0}, compiled_executions{0},
      memory_hits{0}, disk_hits{0}, disk_writes{0}, disk_rejects{0};
  std::atomic<int64_t> code_bytes{0};
};

// Always owned by a std::shared_ptr (Create): background compilations keep it alive.
class ClusterRuntime : public std::enable_shared_from_this<ClusterRuntime> {
 public:
  // Opens the persistent cache when --persistent_cache_dir is set (error: the directory cannot be used).
  static absl::StatusOr<std::shared_ptr<ClusterRuntime>> Create(const Flags& flags);
  explicit ClusterRuntime(const Flags& flags);
  DiskCache* disk() { return disk_.get(); }
  const Flags& flags() const { return flags_; }
  CompilePolicy& policy() { return policy_; }
  MemoryCache& cache() { return cache_; }
  const std::string& target() const { return target_; }
  const std::string& codegen_flags() const { return codegen_flags_; }
  std::shared_ptr<ClusterStats> NewStats();
  std::vector<std::shared_ptr<ClusterStats>> AllStats() const;

 private:
  Flags flags_;
  CompilePolicy policy_;
  MemoryCache cache_;
  std::unique_ptr<DiskCache> disk_;
  std::string target_, codegen_flags_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<ClusterStats>> stats_;
};

class ClusterRunner {
 public:
  // `node` is a cjit.Cluster node whose graph is kept alive by `owner`.
  static absl::StatusOr<std::unique_ptr<ClusterRunner>> Create(const Node& node, std::shared_ptr<const Graph> owner,
                                                               ClusterRuntime* runtime, int threads);
  ~ClusterRunner();
  absl::StatusOr<std::vector<Tensor>> Run(const std::vector<const Tensor*>& inputs);

  struct State;  // defined in cluster_runner.cc

 private:
  ClusterRunner() = default;
  std::shared_ptr<State> state_;
};

}  // namespace cjit

#endif  // CJIT_RUNTIME_CLUSTER_RUNNER_H_
