// Specialization replay: a new input signature reuses the specialized graph of an earlier signature of
// the same structure instead of running the pass pipeline again (issue 12: re-specialization in
// milliseconds).
//
// A session specializes its graph per input signature (runtime/session.cc BuildSpecializedGraph): shape
// inference and constant folding (SpecializeShapes), simplification, the channels-last layout pass and
// auto-clustering. Most of that work gives the same result for every signature with the same input ranks
// and dtypes — exported models differ between, say, two text-line widths only in their dims and in the
// constants folded from Shape ops (Reshape targets such as {0, 23, 3, 8, 15}). Like torch.compile's guards
// on dynamic shapes, the first specialization of a structure is recorded as a *template*:
//   - the specialized graph G1 (clusters and all);
//   - for every constant that folding derived from an input's dims (through Shape/Size), its *recipe*: the
//     folded nodes, re-evaluated with the new dims (ONNX Shape/Size semantics, then the nodes' own
//     kernels);
//   - *guards* for the shape-dependent decisions of the passes that change meaning if the dims change: a
//     Reshape/Flatten/Squeeze/Unsqueeze removed as an identity must still be one;
//   - reasons the structure cannot be replayed at all (an If inlined on a shape-derived condition, a pass
//     that baked dims into a new constant, a shape-derived constant a pass rewrote or dropped).
// ReplaySpecialization then clones G1, evaluates the recipes for the new dims, re-infers every value's
// shape with the op table's shape functions (cluster bodies included) and checks the guards; anything
// unexpected (a shape function error, a dtype or rank change, a dim that becomes unknown, a guard that no
// longer holds, a folded constant over the size limit) is a miss, and the caller specializes in full.
//
// Soundness argument and its test: every decision of the passes depends on the graph's structure, its
// constants, value dtypes/ranks/known-ness, or concrete dims; the first three are equal for two signatures
// of one template (same input ranks and dtypes, same by-value inputs, the same folding), and the
// concrete-dim decisions are the guarded ones above (the layout pass's size test only chooses where a
// transpose goes: correct either way). `--specialization_replay=verify` builds the full specialization as
// well and fails the run if the two graphs differ (tests/replay_test.cc runs every shared model over many
// shapes that way).
//
// Thread-safety: a ReplayRecorder is installed for the current thread only (the passes' hooks find it with
// ReplayRecorder::Current()); a ReplayTemplate is immutable and may be replayed from many threads at once.
#ifndef CJIT_COMPILER_PASSES_SPECIALIZATION_REPLAY_H_
#define CJIT_COMPILER_PASSES_SPECIALIZATION_REPLAY_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"
#include "compiler/passes/specialize_shapes.h"

namespace cjit {

struct ReplayTemplate;

// Records one full specialization on this thread. Construct it before SpecializeShapes on the graph that
// is being specialized, call AfterSpecializeShapes when folding is done and Finish with the final graph.
class ReplayRecorder {
 public:
  explicit ReplayRecorder(int64_t max_folded_elements);
  ~ReplayRecorder();
  ReplayRecorder(const ReplayRecorder&) = delete;
  ReplayRecorder& operator=(const ReplayRecorder&) = delete;

  // The recorder installed on this thread, or null.
  static ReplayRecorder* Current();

  // Hooks of the passes.
  // SpecializeShapes folded `n` (still in the graph) into `folded` (its outputs' new constants, null where
  // absent); `shape_only`: a Shape/Size of input 0's dims, not of its value.
  void OnFold(const Node& n, bool shape_only, const std::vector<Value*>& folded);
  // SpecializeShapes inlined the branch of If `n` chosen by its constant condition.
  void OnInlineIf(const Node& n);
  // RemoveNoOps removed reshape-like `n` (Reshape/Flatten/Squeeze/Unsqueeze) because its output has its
  // input's dims: a guard.
  void OnIdentityReshapeRemoved(const Node& n);
  // The channels-last layout pass made `twin` hold `v`'s data in another layout, v's dims being twin's
  // permuted by `twin_to_v` (compiler/passes/layout.cc). A value whose dims a folded Shape reads and that
  // leaves the graph (every reader moved to the twin) is read from the twin in a replay.
  void OnLayoutTwin(const Value& v, const Value& twin, std::vector<int64_t> twin_to_v);
  // A pass made a decision a replay cannot check (it baked concrete dims into the graph).
  void Unreplayable(const std::string& why);

  // Counts the readers of every shape-derived constant of `specialized` (after SpecializeShapes).
  void AfterSpecializeShapes(const Graph& specialized);
  // The template of `final_graph` (the fully specialized graph, which the template shares), or null with
  // `why` saying why this structure cannot be replayed.
  std::shared_ptr<const ReplayTemplate> Finish(std::shared_ptr<const Graph> final_graph, std::string* why);

 private:
  Value* SourceOf(const Value* v);

  ReplayRecorder* previous_;
  int64_t max_folded_elements_;
  std::unique_ptr<Graph> recipes_;
  std::unordered_map<const Value*, Value*> derived_;  // folded constant of the specialized graph -> recipe value
  std::unordered_map<std::string, Value*> leaves_;    // value name -> recipe input standing for its dims
  std::vector<Node*> guards_;                         // in recipes_, input 0 a leaf
  std::unordered_map<std::string, std::pair<std::string, std::vector<int64_t>>> twins_;  // OnLayoutTwin, by v
  std::unordered_map<std::string, std::pair<Value*, int>> frontier_;  // derived constant read by nodes
  std::string unreplayable_;
};

struct ReplayTemplate {
  std::shared_ptr<const Graph> graph;  // the specialized graph of the recorded signature
  std::unique_ptr<Graph> recipes;      // folded nodes (inputs: leaves = dims of named values) and guards
  std::unordered_map<std::string, Value*> frontier;  // constant name -> its recipe value
  std::vector<Node*> guards;
  std::unordered_set<std::string> watched;  // names whose dims recipes and guards read
  // A watched value the layout pass replaced by a channels-last twin: twin name -> (watched name, the
  // permutation from the twin's dims to the watched value's).
  std::map<std::string, std::pair<std::string, std::vector<int64_t>>> aliases;
  int64_t max_folded_elements = 0;
  int constants_rederived = 0;  // frontier size (statistics)
};

// The specialized graph for `input_dims` (graph-input order), from `t`; an error (kFailedPrecondition,
// with the reason) when the template does not apply — the caller specializes in full.
absl::StatusOr<std::shared_ptr<Graph>> ReplaySpecialization(const ReplayTemplate& t,
                                                            const std::vector<Dims>& input_dims,
                                                            const ConstantEvaluator& evaluate);

// Evaluates a template's recipes (the folded nodes that computed its shape-derived constants) for other
// dims: a leaf (Shape/Size of a value) reads the dims `dims_of` gives for that value's name (null: not
// known, an error), or for a layout twin of it (ReplayTemplate::aliases, permuted back); the other nodes
// run through `evaluate`. Results are memoized per evaluator (one per set of dims). Errors are
// kFailedPrecondition with the reason. Not thread-safe (one per thread and instantiation).
class RecipeEvaluator {
 public:
  using DimsOf = std::function<const Dims*(const std::string& name)>;
  RecipeEvaluator(const ReplayTemplate& t, const ConstantEvaluator& evaluate, DimsOf dims_of)
      : t_(t), evaluate_(evaluate), dims_of_(std::move(dims_of)) {}
  // The value of recipe value `rv` (a node output of t.recipes, or one of its constants).
  absl::StatusOr<std::shared_ptr<const Tensor>> Eval(const Value* rv);
  // The value of the template's shape-derived constant named `name` (a key of t.frontier).
  absl::StatusOr<std::shared_ptr<const Tensor>> EvalConstant(const std::string& name);

 private:
  absl::StatusOr<Dims> LeafDims(const std::string& name);
  const ReplayTemplate& t_;
  const ConstantEvaluator& evaluate_;
  DimsOf dims_of_;
  std::unordered_map<const Value*, std::shared_ptr<const Tensor>> memo_;
};

// "" when `a` and `b` are the same graph (nodes in order with op, name, attributes' kinds, inputs and
// outputs by name; every value's dtype and shape; constants' bytes; cluster bodies recursively), else the
// first difference.
std::string DescribeGraphDifference(const Graph& a, const Graph& b);

// Shape-only evaluation of ONNX Shape (start/end attributes, opset 15) or Size of a value with dims `d`.
Tensor ShapeOfDims(const Node& shape_or_size, const Dims& d);

}  // namespace cjit

#endif  // CJIT_COMPILER_PASSES_SPECIALIZATION_REPLAY_H_
