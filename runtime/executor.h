// Executes a Graph op by op on the CPU fallback kernels.
//
// Create() plans once: topological order, a slot per value, the last reader of every slot (so each
// intermediate is freed right after its last use), and for nodes whose output shapes are fully known in
// the graph (a specialized graph) the inferred outputs, so Run() skips shape inference for them. Nodes
// with data-dependent shapes (or unspecialized subgraphs) run their shape function on the actual values.
//
// Thread-safety: Run() is const and may be called from several threads at once; subgraph executors are
// created lazily under a mutex.
#ifndef CJIT_RUNTIME_EXECUTOR_H_
#define CJIT_RUNTIME_EXECUTOR_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"
#include "compiler/ops/op_registry.h"
#include "runtime/cpu/kernel.h"
#include "base/mutex.h"

namespace cjit {

class ClusterRunner;
class ClusterRuntime;
class ShapeFamily;
class Profiler;

// The intra-op threads of the Session::Run in progress on the calling thread: `configured`, or fewer while
// the run lends a CPU to a background compile (LendsCpuToCompiles in flags/flags.h). Executors and compiled
// clusters take their thread counts through it.
int RunThreads(int configured);
// For its lifetime (nested scopes restore the previous one), RunThreads on this thread is capped by
// `runtime`'s RunThreadsNow(), read at every call, so a run that began while a background compile borrowed
// a CPU gets it back as soon as the compile ends (not at its next run); RunThreads also keeps this thread's
// OpenMP thread count (libraries read it) equal to the cap. The caller (Session::Run) restores its own
// OpenMP setting afterwards.
class ScopedRunThreads {
 public:
  explicit ScopedRunThreads(const ClusterRuntime* runtime);
  ~ScopedRunThreads();
  ScopedRunThreads(const ScopedRunThreads&) = delete;
  ScopedRunThreads& operator=(const ScopedRunThreads&) = delete;

 private:
  const ClusterRuntime* previous_;
};

struct ExecutorOptions {
  int threads = 1;
  // Runs cjit.Cluster nodes (required when the graph has any).
  ClusterRuntime* clusters = nullptr;
  // A specialized graph: nodes whose outputs have fully known shapes skip shape inference.
  bool trust_shapes = false;
  // Receives one event per executed node (must outlive the executor); an executor that runs a cluster's
  // body on the fallback path tags its events with `trace_cluster_id`.
  Profiler* profiler = nullptr;
  int trace_cluster_id = -1;
  // The session's index of the signature this graph was specialized for (dump file names), or -1.
  int signature_index = -1;
  // Dynamic-shape plans (runtime/session.h): the family of the specialization template this graph comes
  // from (its cluster runners publish their executables to it), and whether this executor is the family's
  // own (its clusters run at any dims; use with trust_shapes = false).
  std::shared_ptr<ShapeFamily> family;
  bool dynamic_clusters = false;
};

class Executor {
 public:
  // `graph` is shared with the executor.
  static absl::StatusOr<std::unique_ptr<Executor>> Create(std::shared_ptr<const Graph> graph,
                                                          const ExecutorOptions& options);
  static absl::StatusOr<std::unique_ptr<Executor>> Create(std::shared_ptr<const Graph> graph, int threads) {
    ExecutorOptions o;
    o.threads = threads;
    return Create(std::move(graph), o);
  }
  ~Executor();

  // Inputs in graph-input order; captures bound by name (for subgraphs). Returns graph outputs in order.
  absl::StatusOr<std::vector<Tensor>> Run(const std::vector<Tensor>& inputs,
                                          const std::vector<std::pair<std::string, Tensor>>& captures = {}) const;

  const Graph& graph() const { return *graph_; }
  int num_steps() const { return static_cast<int>(steps_.size()); }

 private:
  struct Step {
    const Node* node;
    const KernelFn* kernel;
    std::vector<int> in, implicit, out;
    std::vector<bool> in_const;
    std::vector<int> free_after;  // slots whose last reader is this step
    bool input0_dies = false;     // in[0]'s slot is in free_after (KernelContext::input0_dies)
    // A float32 elementwise activation whose input value dies here: its output may reuse the input's
    // buffer when this run holds the only reference (no allocation, no fresh pages). -1: never.
    int inplace_slot = -1;
    bool static_shapes = false;
    std::vector<InferOutput> inferred;
    std::unique_ptr<ClusterRunner> cluster;  // for cjit.Cluster nodes
  };

  Executor() = default;
  static void AppendShapes(std::string* out, const Step& st, const std::vector<const Tensor*>& view);
  absl::StatusOr<std::vector<Tensor>> RunSubgraph(const Graph& g, const std::vector<Tensor>& inputs,
                                                  const std::vector<std::pair<std::string, Tensor>>& captures) const;

  std::shared_ptr<const Graph> graph_;
  ExecutorOptions options_;
  int threads_ = 1;
  Profiler* profiler_ = nullptr;
  int trace_cluster_id_ = -1;
  int num_slots_ = 0;
  std::vector<Step> steps_;
  std::vector<std::pair<int, std::shared_ptr<const Tensor>>> constants_;
  std::vector<int> input_slots_, output_slots_;
  std::vector<std::pair<std::string, int>> capture_slots_;
  SubgraphRunner runner_;
  mutable Mutex sub_mu_;
  mutable std::map<const Graph*, std::unique_ptr<Executor>> subgraphs_ ABSL_GUARDED_BY(sub_mu_);
};

}  // namespace cjit

#endif  // CJIT_RUNTIME_EXECUTOR_H_
