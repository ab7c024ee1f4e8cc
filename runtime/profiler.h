// The event stream of one Session: node and cluster executions, the steps inside compiled clusters,
// specialization of new signatures, compilations and their phases, cache decisions. It feeds
//   * a Chrome trace-event JSON file (--trace_to=PATH, `cjit run --trace PATH`) that Perfetto UI and
//     chrome://tracing open: {"traceEvents": [...]}, "X" complete events with ts/dur in microseconds since
//     the session started profiling, "M" metadata naming the process and threads, "s"/"f" flow arrows
//     from a cluster's compilation to its first compiled execution, "i" instant events (format:
//     https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU);
//   * the per-op profile table (Summarize; `cjit run --profile`);
//   * NVTX ranges with the same names when --enable_nvtx_ranges is set (and this build has the NVTX 3
//     headers of the CUDA toolkit): nvtxRangePush/Pop around every complete event, so Nsight Systems shows
//     the same structure. NVTX loads a profiler's injection library only when one is attached
//     (NVTX_INJECTION64_PATH); without one each call returns at once.
//
// Event names: executed nodes are named by op type ("Conv"), with args {op_type, node, cluster (when inside
// a cluster), inputs/outputs ("f32[1x3x48x320]"), bytes (read + written)}; cluster executions
// "cluster_<id>" (cat "cluster", args {path: compiled|fallback, signature}); steps inside a compiled
// cluster: fused kernels "fusion_<k>" (cat "kernel", args {ops, shape, bytes}), library steps by op type
// (cat "library", args {impl: the chosen implementation, e.g. oneDNN's impl_info_str}); "Run" per
// Session::Run (cat "session"); "specialize" and its passes (cat "specialize"); "compile cluster_<id>"
// and its phases (cat "compile"); cache lookups and writes (cat "cache", args {key, result, reason}).
//
// Bounded: after --trace_max_events events one "trace truncated" instant event is recorded and later
// events are dropped (counted). The file is written atomically (temporary file + rename) by Write().
//
// Thread-safety: every method may be called from any thread. With tracing off a call site costs one
// predictable branch (`if (profiler)`, or TraceScope's null check).
#ifndef CJIT_RUNTIME_PROFILER_H_
#define CJIT_RUNTIME_PROFILER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/tensor.h"
#include "base/mutex.h"

namespace cjit {

// Build switch: -DCJIT_PROFILER=OFF compiles every hook out (used only to measure that the hooks cost
// nothing when tracing is off).
#ifndef CJIT_PROFILER_ENABLED
#define CJIT_PROFILER_ENABLED 1
#endif

// The "args" object of one event, encoded as JSON text as it is built.
class TraceArgs {
 public:
  TraceArgs& Add(std::string_view key, std::string_view value);
  TraceArgs& Add(std::string_view key, const char* value) { return Add(key, std::string_view(value)); }
  TraceArgs& Add(std::string_view key, const std::string& value) { return Add(key, std::string_view(value)); }
  TraceArgs& Add(std::string_view key, int64_t value);
  TraceArgs& Add(std::string_view key, int value) { return Add(key, static_cast<int64_t>(value)); }
  TraceArgs& Add(std::string_view key, size_t value) { return Add(key, static_cast<int64_t>(value)); }
  TraceArgs& Add(std::string_view key, double value);
  bool empty() const { return body_.empty(); }
  // The members without braces: "\"k\": 1, \"s\": \"x\"".
  const std::string& body() const { return body_; }
  std::string& mutable_body() { return body_; }

 private:
  void Key(std::string_view key);
  std::string body_;
};

// "f32[1x3x48x320]".
std::string TensorSummary(const Tensor& t);

class Node;
class Graph;
// The args body of a node event from the node's value shapes (see TraceEvent::node).
std::string NodeArgsFromGraph(const Node& node, int cluster);

class Node;

struct TraceEvent {
  std::string name;
  std::string_view cat;  // a string literal (every category is one)
  char ph = 'X';
  int64_t ts_ns = 0, dur_ns = 0;  // since the profiler started
  int tid = 0;
  uint64_t id = 0;  // flow events
  std::string args;  // TraceArgs::body()
  // A node event recorded lazily: its args (op_type, node, cluster, inputs, outputs, bytes, impl) are
  // formatted from the node's statically known value shapes when the trace is read (Materialize), so
  // tracing costs the executor only the event itself.
  const Node* node = nullptr;
  int cluster = -1;
};

struct ProfilerOptions {
  std::string path;             // "" = keep events in memory only (for Summarize)
  bool record = true;           // false: NVTX ranges only, no events kept
  int64_t max_events = 1000000;
  bool nvtx = false;            // --enable_nvtx_ranges
  bool nvtx_detailed = false;   // --nvtx_detailed: range names carry shapes
};

class Profiler {
 public:
  // `path` is made unique within the process: a second profiler given the same path writes
  // PATH with ".1", ".2"... inserted before its extension.
  static std::shared_ptr<Profiler> Create(const ProfilerOptions& options);
  ~Profiler();

  bool nvtx() const { return options_.nvtx; }
  bool nvtx_detailed() const { return options_.nvtx_detailed; }
  const std::string& path() const { return path_; }

  // Steady-clock nanoseconds (the timebase of every event).
  static int64_t Now() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // A complete event from start_ns to end_ns (steady-clock), on the calling thread.
  void Complete(std::string_view name, const char* cat, int64_t start_ns, int64_t end_ns,
                const TraceArgs* args = nullptr);
  // The same, taking the args' text (TraceArgs::body) by move.
  void Complete(std::string_view name, const char* cat, int64_t start_ns, int64_t end_ns, std::string&& args);
  // A node whose inputs and outputs all have fully known shapes in its graph (a specialized graph): the
  // args are formatted later from the graph. The node's graph must stay alive until Materialize(): an
  // Executor calls it when it is destroyed (a plan evicted by --max_cached_signatures), and every graph a
  // compiled cluster's steps refer to lives at least as long as an executor that ran it.
  // `extra` (TraceArgs body, may be empty) is appended to them (impl, post_ops).
  void CompleteNode(const Node* node, const char* cat, int cluster, int64_t start_ns, int64_t end_ns,
                    std::string&& extra);
  // Formats the args of lazily recorded node events, so the trace no longer refers to any graph; only the
  // events recorded since the last call (cheap to call often). The Session calls it before its graphs are
  // destroyed, an Executor when it is destroyed; Write, ToJson and Summarize call it too.
  void Materialize();
  void Instant(std::string_view name, const char* cat, const TraceArgs* args = nullptr);
  // Flow arrow: Start inside the source slice, End inside the destination slice (binds to the enclosing
  // slice), same id. NewFlowId is unique within the profiler.
  uint64_t NewFlowId() { return next_flow_.fetch_add(1) + 1; }
  void FlowStart(uint64_t id, std::string_view name, int64_t at_ns);
  void FlowEnd(uint64_t id, std::string_view name, int64_t at_ns);
  // Names the calling thread in the trace ("Run thread", "async compile").
  void NameThisThread(std::string_view name);

  // Stops recording and writes the trace to path() atomically; returns the path. Later calls return the
  // same path without writing again. FailedPrecondition when the profiler has no path.
  absl::StatusOr<std::string> Write();
  bool written() const;

  // Events so far (a copy), and how many were dropped past max_events.
  std::vector<TraceEvent> Events() const;
  int64_t dropped() const { return dropped_.load(); }
  // The JSON document Write() produces.
  std::string ToJson() const;

  // Aggregates of the complete events that started at or after since_ns (steady clock; 0 = all).
  struct Row {
    std::string kind, name, op;  // kind: node, node in cluster, fused kernel, library step, cluster
    int64_t count = 0, total_ns = 0;
  };
  struct Aggregate {
    int64_t runs = 0, run_ns = 0;  // "Run" events
    std::vector<Row> entries;      // per node / kernel / library step, by total time descending
    std::vector<Row> by_type;      // per op type ("(fused kernel)" for kernels), descending
    std::vector<Row> clusters;     // per cluster and path, descending
  };
  Aggregate Summarize(int64_t since_ns) const;
  // Per-op profile table over the complete events that started at or after since_ns (steady clock):
  // top entries by total time (nodes on the fallback path, cluster executions, steps of compiled clusters)
  // and the same grouped by op type, with count, total ms, mean us and % of the "Run" time in that window.
  std::string SummaryTable(int64_t since_ns = 0, int top = 25) const;

 private:
  void Flow(char ph, uint64_t id, std::string_view name, int64_t at_ns);  // 's' start / 'f' end
  explicit Profiler(const ProfilerOptions& options);
  int ThreadId();
  void Append(TraceEvent e);

  ProfilerOptions options_;
  std::string path_;
  int64_t start_ns_ = 0;
  mutable Mutex mu_;
  // Events in blocks of kBlock, each constructed (so its pages are touched) when it is allocated: appending
  // never moves old events, and recording costs no allocation or page fault except once per block; growing
  // the heap a few KB per run would otherwise show up as time outside the op events of a small model.
  class EventLog {
   public:
    size_t size() const { return size_; }
    TraceEvent& operator[](size_t i) { return blocks_[i / kBlock][i % kBlock]; }
    const TraceEvent& operator[](size_t i) const { return blocks_[i / kBlock][i % kBlock]; }
    void push_back(TraceEvent&& e) {
      if (size_ == blocks_.size() * kBlock) blocks_.push_back(std::make_unique<TraceEvent[]>(kBlock));
      (*this)[size_++] = std::move(e);
    }

   private:
    static constexpr size_t kBlock = 4096;
    std::vector<std::unique_ptr<TraceEvent[]>> blocks_;
    size_t size_ = 0;
  };
  EventLog events_ ABSL_GUARDED_BY(mu_);
  size_t materialized_ ABSL_GUARDED_BY(mu_) = 0;  // events before this index have no node
  std::map<int, std::string> thread_names_ ABSL_GUARDED_BY(mu_);
  int last_tid_ ABSL_GUARDED_BY(mu_) = -1;
  bool truncated_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool written_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int64_t> dropped_{0};
  std::atomic<uint64_t> next_flow_{0};
};

// RAII: a complete event (and an NVTX range) around a scope. A null profiler costs one branch.
class TraceScope {
 public:
  // `name` and `cat` must outlive the scope (a literal, or a string of the graph); set_name copies.
  TraceScope(Profiler* p, std::string_view name, const char* cat)
      : p_(CJIT_PROFILER_ENABLED ? p : nullptr) {
    if (p_ != nullptr) Begin(name, cat);
  }
  ~TraceScope() {
    if (p_ != nullptr) End();
  }
  TraceScope(Profiler* p, const char* name, const char* cat) : TraceScope(p, std::string_view(name), cat) {}
  TraceScope(Profiler* p, const std::string& name, const char* cat) : TraceScope(p, std::string_view(name), cat) {}
  // A temporary string would dangle: pass a string that outlives the scope, or use set_name.
  TraceScope(Profiler* p, std::string&& name, const char* cat) = delete;
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;
  bool active() const { return p_ != nullptr; }
  // Valid only when active().
  TraceArgs& args() { return args_; }
  // Ends the timed interval now (args may still be added; the event is recorded at destruction).
  void Stop() {
    if (p_ != nullptr && end_ == 0) StopNow();
  }
  void set_name(std::string name) {
    owned_name_ = std::move(name);
    name_ = owned_name_;
  }
  int64_t start_ns() const { return start_; }
  // Records the event as a lazily formatted node event (Profiler::CompleteNode); args() then holds only
  // the extra members.
  void SetNode(const Node* node, int cluster) {
    node_ = node;
    cluster_ = cluster;
  }

 private:
  void Begin(std::string_view name, const char* cat);
  void StopNow();
  void End();
  Profiler* p_;
  std::string_view name_;
  const char* cat_ = "";
  std::string owned_name_;
  const Node* node_ = nullptr;
  int cluster_ = -1;
  int64_t start_ = 0, end_ = 0;
  bool nvtx_ = false;
  TraceArgs args_;
};

// NVTX: push/pop a range on the calling thread (no-ops in a build without the NVTX headers).
void NvtxPush(const std::string& name);
void NvtxPop();
// True when this build has the NVTX 3 headers (the CUDA toolkit's).
bool NvtxAvailable();

}  // namespace cjit

#endif  // CJIT_RUNTIME_PROFILER_H_
