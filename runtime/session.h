// The public entry point of clusterjit: load an ONNX model once, run it many times.
//
//   CJIT_ASSIGN_OR_RETURN(auto session, cjit::Session::Load("model.onnx", {}));
//   CJIT_ASSIGN_OR_RETURN(auto outputs, session->Run({{"x", x_tensor}}));
//
// Run() takes named host tensors (row-major, dtypes of compiler/ir/dtype.h) and returns the graph outputs
// in graph-output order, with their names. Each distinct input signature (dtype + dims of every input,
// plus the value of scalar integer/bool inputs — up to 8 values per input, then that input is treated as
// dynamic) is specialized once — shapes inferred, constant sub-graphs and control flow on constants
// folded, simplified, clustered — and the plan cached; later runs with that signature reuse it. A
// signature whose structure (dtypes, ranks, 0/1 dims, by-value inputs) specialized before without reading
// any concrete dim — or reading them only into Reshape targets and fused-kernel inputs inside clusters,
// re-derived per signature — runs that structure's plan at its own dims instead, for its first two runs
// (--dynamic_shape_plans: no specialization, shapes inferred per run, the compiled clusters with new loop
// bounds; docs/architecture.md §3), then gets its own plan.
// Process state: while a background compile borrows a CPU (LendsCpuToCompiles) a run uses one thread
// fewer, and gets it back within the run when the compile ends (OpenMP's count for the calling thread
// follows; the caller's value is restored when Run returns).
//
// This is the internal C++ interface; hosts use the C API (include/clusterjit/clusterjit.h) or its C++
// wrapper (clusterjit.hpp), which sit on it.
//
// Errors (absl::Status, never an abort or an exception): a bad option (named), a model that cannot be
// read or imported (names the node and op), an unknown or missing input name, a wrong dtype, rank or dim
// (names the input, expected and got), and run errors naming the node.
//
// Thread-safety: Run() may be called concurrently from any number of threads on one Session, on every
// path (fallback, compiled, compiles in flight, new signatures arriving concurrently); each call's results
// are bitwise those of the same inputs run alone in the same compilation state (tests/concurrency_test.cc).
// The Session must not be destroyed while a Run is in progress (the C API's cjit_session_free waits for
// them); its destructor joins its background compile thread, so none outlives it.
// Process state: Run sets OpenMP's thread count for the calling thread to --intra_op_threads for the call
// and restores the caller's value; logging goes through base/logging.h (never glog).
#ifndef CJIT_RUNTIME_SESSION_H_
#define CJIT_RUNTIME_SESSION_H_

#include <list>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cache/remote_cache.h"
#include "compiler/ir/graph.h"
#include "compiler/onnx/tensor_proto.h"
#include "compiler/passes/auto_mixed_precision.h"
#include "flags/flags.h"
#include "runtime/autotune.h"
#include "runtime/run_options.h"
#include "base/mutex.h"

namespace cjit {

class Executor;
class ClusterRuntime;
class GpuExecutor;
class DeviceBackend;
class Profiler;
class Dumper;
class ReplayRecorder;
struct ReplayTemplate;
class ShapeFamily;

// A snapshot of one cluster's counters (see runtime/cluster_runner.h).
struct ClusterStatsSnapshot {
  int id = 0;
  int ops = 0;
  std::string signature;
  int64_t compiles = 0;
  double compile_ms = 0;
  int64_t fallback_executions = 0, compiled_executions = 0, memory_hits = 0, disk_hits = 0, code_bytes = 0;
  int64_t disk_writes = 0, disk_rejects = 0;
  // Signatures instantiated on their first execution from kernels compiled for other signatures of the
  // same cluster structure (--polymorphic_clusters): no LLVM work, no fallback runs.
  int64_t polymorphic_hits = 0;
  int64_t fused_kernels = 0;  // generated kernels of the executable in use (0: library calls only)
};

// Autotuning counters of the session (runtime/autotune.h): op signatures tuned here, candidates timed and
// rejected, time spent tuning, and choices found instead in the process, the persistent cache or
// --autotune_results_load_from (ignored_entries: loaded results not valid here); lease_waits: tunings left to
// another process of the fleet (--remote_cache).
struct AutotuneStatsSnapshot {
  int64_t ops_tuned = 0, candidates_timed = 0, candidates_rejected = 0;
  double tuning_ms = 0;
  int64_t memory_hits = 0, disk_hits = 0, file_hits = 0, ignored_entries = 0, lease_waits = 0;
};

struct SessionStats {
  // The clusters of the signatures the session holds now; `totals` also counts those of evicted ones.
  std::vector<ClusterStatsSnapshot> clusters;
  ClusterStatsSnapshot totals;  // counters summed (id, ops, signature unused)
  int signatures = 0;            // specializations held now (at most --max_cached_signatures)
  int64_t signature_evictions = 0;
  // New signatures specialized by the full pass pipeline, and by replaying an earlier specialization of
  // the same structure (--specialization_replay; compiler/passes/specialization_replay.h).
  int64_t specializations = 0;
  int64_t specialization_replays = 0;
  // Runs served by a dynamic-shape plan (--dynamic_shape_plans: a structure's compiled clusters run at the
  // signature's own dims, no specialization), and runs it could not serve (then specialized as usual).
  int64_t dynamic_shape_runs = 0;
  int64_t dynamic_shape_misses = 0;
  AutotuneStatsSnapshot autotune;
  // The fleet-shared tier (--remote_cache): reads (hits, misses, rejected entries, errors, skipped during
  // back-off), write-behind writes, bytes. Shared by the sessions of the process that use the same server.
  bool remote_enabled = false;
  RemoteCacheStats remote;
  int compiles_in_flight = 0;   // background compilations queued or running (--async_compilation)
};

struct SessionOptions {
  // Configuration; by default the process's CJIT_FLAGS (see flags/flags.h).
  Flags flags = Flags{};
  // When true (default), Load() starts from FlagsFromEnvironment() instead of `flags`.
  bool use_environment_flags = true;
  // Auto-clustering when --auto_jit=0 ("leave it to SessionOptions"): on by default, every clusterable op.
  bool enable_clustering = true;
  // Record profiling events in memory (for ProfileSummary) even without --trace_to.
  bool profile = false;
  // A host's automatic-mixed-precision rule (TVM's interface), consulted before the op lists when
  // --auto_mixed_precision is on (compiler/passes/auto_mixed_precision.h). Called while a signature is
  // specialized, possibly from several threads at once: it must be thread-safe.
  AmpRuleHook amp_rule;
  // A host's rule for --auto_quantize (compiler/passes/quantization.h AutoQuantize): called once per
  // candidate node at Load(), on the loading thread; false keeps the node float32.
  std::function<bool(const Node&)> auto_quantize_rule;
  // Runs on this device backend instead of the one --device selects: the graph is built as for a GPU (no
  // CPU-only rewrites) and run by the GPU executor. For the host emulation (MakeHostBackend(): tests, and
  // `cjit explain --gpu-placement`, which show a GPU session's placement on a machine without one).
  std::shared_ptr<DeviceBackend> device_backend;
};

struct TensorInfo {
  std::string name;
  DType dtype;   // a sequence's / optional's: its elements'
  Shape shape;   // declared shape (of the elements, for a sequence or optional); unknown dims carry their symbol
  ValueKind kind = ValueKind::kTensor;  // a tensor, a sequence of tensors, or an optional of either
};

// The clustering options that flags (and SessionOptions::enable_clustering, for --auto_jit=0) select.
struct ClusteringOptions;
struct ClusteringReport;
ClusteringOptions ClusteringOptionsFor(const Flags& flags, bool session_default);

class Session {
 public:
  static absl::StatusOr<std::unique_ptr<Session>> Load(const std::string& path, const SessionOptions& options = {});
  static absl::StatusOr<std::unique_ptr<Session>> LoadFromBytes(absl::string_view bytes,
                                                                const SessionOptions& options = {},
                                                                const std::string& model_dir = "");
  ~Session();

  absl::StatusOr<std::vector<NamedTensor>> Run(const std::vector<NamedTensor>& inputs);
  // The same, cancellable at step boundaries through `options` (runtime/run_options.h): a cancelled run
  // returns CancelledError.
  absl::StatusOr<std::vector<NamedTensor>> Run(const std::vector<NamedTensor>& inputs, const RunOptions& options);

  const std::vector<TensorInfo>& inputs() const { return inputs_; }
  const std::vector<TensorInfo>& outputs() const { return outputs_; }
  // The model's descriptive fields (producer, domain, version, doc strings, metadata_props); empty fields
  // for a graph built in C++.
  const ModelMetadata& metadata() const { return *metadata_; }
  const Flags& flags() const { return flags_; }
  // "cpu" or "cuda:N": where this session runs (--device=auto resolved).
  std::string device() const;
  // For --device=cuda: where each op of each specialized signature runs (GpuPlacement::ToString) and whether
  // its runs replay a CUDA graph (GpuExecutor::GraphStatus), then the
  // device memory report; empty on the CPU.
  std::vector<std::string> GpuPlacements() const;
  // Number of input signatures whose specialization this session holds now (at most
  // --max_cached_signatures; the least recently run are evicted first).
  int num_signatures() const;
  // Specializations evicted so far (--max_cached_signatures).
  int64_t signature_evictions() const;
  // Per-cluster compile/execution counters so far.
  SessionStats stats() const;
  // Every autotuning decision of this session (tuned here or found), in order (`cjit autotune`).
  std::vector<AutotuneRecord> AutotuneRecords() const;
  // The clustering this session would do for these inputs' signature (for `cjit explain`).
  absl::StatusOr<ClusteringReport> Explain(const std::vector<NamedTensor>& inputs);
  // The specialized, simplified and clustered graph for these inputs' signature, without running it
  // (for `cjit compile`); `report` (optional) receives the clustering report.
  absl::StatusOr<std::shared_ptr<Graph>> SpecializeAndCluster(const std::vector<NamedTensor>& inputs,
                                                              ClusteringReport* report);

  // Profiling (runtime/profiler.h). With --trace_to, the trace is written when the Session is destroyed;
  // EndProfiling writes it now, stops recording and returns its path (FailedPrecondition without
  // --trace_to; later calls return the same path). ProfileSummary is the per-op table over the events
  // recorded since `since_ns` (steady-clock ns, Profiler::Now(); 0 = all); empty without profiling.
  absl::StatusOr<std::string> EndProfiling();
  std::string ProfileSummary(int64_t since_ns = 0) const;
  // The profiler, or null when neither --trace_to, --enable_nvtx_ranges nor SessionOptions::profile is set.
  Profiler* profiler() const { return profiler_.get(); }

 private:
  Session() = default;
  static absl::StatusOr<std::unique_ptr<Session>> FromGraph(std::unique_ptr<Graph> graph,
                                                            const SessionOptions& options);
  absl::StatusOr<std::vector<Tensor>> ValidateInputs(const std::vector<NamedTensor>& inputs) const;
  // One specialized signature: run by the CPU executor, or (--device=cuda) by the GPU executor.
  // `dynamic`: `cpu` is a dynamic-shape family's executor (shapes inferred per run; its clusters run the
  // family's executables at these dims or fail with a dynamic-shape miss).
  // How a dynamic-shape family's runs ended (a family that only ever misses stops being tried).
  struct DynamicOutcomes {
    std::atomic<int64_t> runs{0}, misses{0};
  };
  struct Plan {
    std::shared_ptr<const Executor> cpu;
    std::shared_ptr<const GpuExecutor> gpu;
    bool dynamic = false;
    std::shared_ptr<DynamicOutcomes> outcomes;  // with `dynamic`: its family's
  };
  // `allow_dynamic`: a signature without a plan may be served by its structure's dynamic-shape plan.
  absl::StatusOr<Plan> Specialize(const std::vector<Tensor>& inputs, bool allow_dynamic = true);
  static Plan DynamicPlan(std::shared_ptr<const Executor> family_executor, std::shared_ptr<DynamicOutcomes> outcomes);
  // Specialize's steps (session.cc says what each does).
  absl::StatusOr<std::shared_ptr<Graph>> SpecializedGraphFor(const std::vector<Tensor>& inputs,
                                                             const std::vector<bool>& by_value,
                                                             const std::string& signature, const std::string& structure,
                                                             int sig, bool replayable,
                                                             const std::shared_ptr<const ReplayTemplate>& tmpl,
                                                             std::shared_ptr<ShapeFamily>* family);
  std::shared_ptr<ShapeFamily> RecordReplayTemplate(const std::string& structure, const std::string& signature,
                                                    std::shared_ptr<const ReplayTemplate> made);
  absl::StatusOr<Plan> MakePlan(std::shared_ptr<Graph> g, int sig, std::shared_ptr<ShapeFamily> family);
  Plan CachePlan(const std::string& signature, Plan plan);
  // Which inputs this signature specializes by value (scalar integers/bools, bounded per input).
  std::vector<bool> ValueSpecialized(const std::vector<Tensor>& inputs);
  // `sig` (>= 0) names the signature in dump files.
  // `recorder` (optional) records the specialization for later replays.
  absl::StatusOr<std::shared_ptr<Graph>> BuildSpecializedGraph(const std::vector<Tensor>& inputs,
                                                               const std::vector<bool>& by_value,
                                                               ClusteringReport* report, int sig = -1,
                                                               ReplayRecorder* recorder = nullptr);
  absl::StatusOr<std::vector<NamedTensor>> RunImpl(const std::vector<NamedTensor>& inputs);

  Flags flags_;
  AmpRuleHook amp_rule_;
  bool enable_clustering_ = true;
  std::shared_ptr<Profiler> profiler_;
  std::shared_ptr<Dumper> dumper_;
  std::shared_ptr<ClusterRuntime> clusters_;
  std::shared_ptr<const Graph> graph_;
  std::shared_ptr<const ModelMetadata> metadata_ = std::make_shared<ModelMetadata>();
  std::vector<TensorInfo> inputs_, outputs_;
  mutable Mutex mu_;
  // Plans by signature, most recently used first in plan_lru_ (bounded by --max_cached_signatures).
  struct CachedPlan {
    Plan plan;
    std::list<std::string>::iterator lru;
  };
  std::unordered_map<std::string, CachedPlan> plans_ ABSL_GUARDED_BY(mu_);
  std::list<std::string> plan_lru_ ABSL_GUARDED_BY(mu_);
  int64_t plan_evictions_ ABSL_GUARDED_BY(mu_) = 0;
  // Replay templates by structure key (input dtypes, ranks, 0/1 dims, by-value inputs); bounded.
  std::map<std::string, std::shared_ptr<const ReplayTemplate>> replay_templates_ ABSL_GUARDED_BY(mu_);
  int64_t specializations_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t specialization_replays_ ABSL_GUARDED_BY(mu_) = 0;
  // Dynamic-shape plans by structure key (templates whose specialization depends on no concrete dim, or
  // only through Reshape targets inside clusters): the family of executables its plans publish, and the
  // executor that runs them at any dims.
  struct DynamicFamily {
    std::shared_ptr<const ReplayTemplate> tmpl;  // its template (replay_templates_ at the same key)
    std::shared_ptr<ShapeFamily> executables;
    std::shared_ptr<const Executor> executor;
    // With shape-derived constants: the template's cluster ids; the family serves a signature only once
    // each has an executable (its clusters have no op-by-op path at other dims).
    std::vector<int> cluster_ids;
    std::shared_ptr<DynamicOutcomes> outcomes = std::make_shared<DynamicOutcomes>();
  };
  std::map<std::string, DynamicFamily> families_;
  std::unordered_map<std::string, int> dynamic_served_;  // runs per signature served by a family (bounded)
  int64_t dynamic_shape_runs_ = 0, dynamic_shape_misses_ = 0;
  int gpu_ordinal_ = -1;               // the CUDA device used, or -1 for the CPU
  std::shared_ptr<DeviceBackend> gpu_;  // set when running on a GPU
  std::map<size_t, std::set<int64_t>> seen_values_;                 // per scalar integer input
  std::vector<bool> value_shapes_graph_;  // per input: its value may decide a shape (InputValuesShapeTheGraph)
};

}  // namespace cjit

#endif  // CJIT_RUNTIME_SESSION_H_
