// The graph pass pipeline as data: every pass that rewrites a specialized graph, by name, in order, with
// one signature and one runner (LLVM's pass pipeline / XLA's HloPassPipeline, reduced to what clusterjit
// needs).
//
//   PassContext ctx = PassContext::ForCpu(flags);
//   CJIT_RETURN_IF_ERROR(RunPasses(graph, SpecializationPipeline(), ctx, hooks));
//
// The runner skips passes that do not apply to the context (target, flags) or that --disable_passes names,
// verifies the graph after each pass that changed it (an error names the pass), and calls the hooks around
// each pass (the Session traces and dumps: --dump_to with --dump_pass_re / --dump_after). `cjit opt FILE
// --passes=a,b` runs named passes on a textual IR file (compiler/ir/text.h) and prints the result.
//
// Adding a pass: a function `absl::StatusOr<bool> (Graph&, PassContext&)` (true: the graph changed) and a
// row in pipeline.cc's table with its name, summary, whether it reads concrete dims, and when it applies
// (docs/contributing.md).
//
// Thread-safety: the table is immutable; passes run on one graph from one thread, so a context is not shared.
#ifndef CJIT_COMPILER_PASSES_PIPELINE_H_
#define CJIT_COMPILER_PASSES_PIPELINE_H_

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/ir/graph.h"
#include "compiler/passes/auto_mixed_precision.h"
#include "compiler/passes/mark_for_compilation.h"
#include "flags/flags.h"

namespace cjit {

// What passes read besides the graph, and what they report.
struct PassContext {
  const Flags* flags = nullptr;  // never null while passes run
  bool gpu = false;              // the graph is for the GPU executor (no CPU-only rewrites)
  AmpRuleHook amp_rule;          // a host's AMP rule (SessionOptions::amp_rule)
  int sig = -1;                  // the signature number, for log file names (-1: none)
  // Clustering: the mode and limits (ClusteringOptionsFor), and where the report goes (may be null).
  ClusteringOptions clustering;
  ClusteringReport* clustering_report = nullptr;
  // Set by channels_last_layout when it assigned a channels-last region (later passes depend on it).
  bool channels_last = false;
};

struct Pass {
  std::string name;     // --disable_passes / --dump_after / `cjit opt --passes` name
  std::string summary;  // one line, for `cjit opt --list`
  // Whether the pass reads concrete dims (shapes of values): such passes must rerun for a new signature;
  // the others depend only on the graph's structure (what specialization replay may reuse).
  bool reads_dims = false;
  // Whether it runs in this context (target, flags); the runner skips it otherwise.
  std::function<bool(const PassContext&)> applies;
  // Runs the pass; true when it changed the graph.
  std::function<absl::StatusOr<bool>(Graph&, PassContext&)> run;
};

// The passes run on each newly specialized signature after shape specialization, in order: LayerNorm
// decomposition, simplification, AMP, matmul precision, CPU rewrites (Transpose->MatMul, Pad->Conv,
// channels-last layout, pointwise-depthwise fusion), then clustering (mark_for_compilation).
const std::vector<Pass>& SpecializationPipeline();

// The pass of that name, or null.
const Pass* FindPass(absl::string_view name);
// The names, in pipeline order.
std::vector<std::string> PassNames();
// OK when every name in `names` is a pass; else InvalidArgument naming the first unknown one, the nearest
// pass name and `what` (the flag).
absl::Status CheckPassNames(const std::vector<std::string>& names, absl::string_view what);

struct PassHooks {
  // Wraps each pass that runs (tracing); calls `run` exactly once and returns its status.
  std::function<absl::Status(const Pass& pass, const std::function<absl::Status()>& run)> around;
  // After each pass that ran (dumps); `changed` says whether it rewrote the graph.
  std::function<void(const Pass& pass, const Graph& graph, bool changed)> after;
};

// Runs `passes` in order on `graph`: those not in `disabled` and (with `only_if_applies`, the pipeline's
// way) those whose `applies` holds; `cjit opt --passes` runs what it names. After a pass that changed the
// graph, VerifyGraph; a failure names the pass. Returns the names of the passes that ran.
absl::StatusOr<std::vector<std::string>> RunPasses(Graph& graph, const std::vector<const Pass*>& passes,
                                                   PassContext& context, const PassHooks& hooks = {},
                                                   const std::set<std::string>& disabled = {},
                                                   bool only_if_applies = true);
// The whole specialization pipeline, with --disable_passes from context.flags.
absl::StatusOr<std::vector<std::string>> RunSpecializationPipeline(Graph& graph, PassContext& context,
                                                                   const PassHooks& hooks = {});

}  // namespace cjit

#endif  // CJIT_COMPILER_PASSES_PIPELINE_H_
