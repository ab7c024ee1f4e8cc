// Automatic mixed precision: rewrites parts of a float32 graph to float16 or bfloat16.
//
// Algorithm: TensorFlow's auto_mixed_precision graph optimizer (TensorFlow guide §8.2;
// tensorflow/core/grappler/optimizers/auto_mixed_precision.cc), with TVM's per-op rule interface (AMP RFC:
// a class plus accumulation and output dtypes per op). Each node with float32 data inputs/outputs gets a
// class from the op lists (or a host hook):
//   allow  - numerically safe and faster in 16 bits (Conv, ConvTranspose, MatMul, Gemm, Einsum);
//   infer  - safe in 16 bits, worth it only next to allow ops (elementwise arithmetic, activations, pools);
//   deny   - needs float32 range or precision (Exp, Log, Pow, Softmax, reductions, normalizations, ...);
//   clear  - no numerics of its own (data movement, Relu, Max/Min, MaxPool).
// Painting (in this order, as TensorFlow): 1. allow ops are painted allow; 2. deny propagates forward through
// infer ops, and through clear ops that lead (through clear ops) to a deny or infer op; 3. infer and clear
// ops lying between allow ops (downstream of one and upstream of another, through infer/clear ops, not deny)
// become allow; 4. allow propagates through clear ops in both directions; 5. nodes that cannot run in the
// low type (no schema, subgraphs, a float16 weight out of range) are dropped from allow.
// Rewrite: allow nodes take and produce the low type on their data edges (inputs/outputs sharing the type
// parameter of output 0 in the op's ONNX schema); constants are converted (round to nearest even,
// compiler/ir/float16.h); Casts appear only where an allow node meets a non-allow node or a graph output
// (graph inputs and outputs keep float32: ONNX converters' keep_io_types). Kernels accumulate in float32.
//
// Decomposed normalizations (LayerNorm/RMSNorm as ReduceMean, Sub, Pow, Sqrt, Div; Softmax as Exp,
// ReduceSum, Div) stay float32 inside: their reductions and Pow/Sqrt/Exp are deny, and deny propagates
// through the infer ops that follow; only the edges into them are 16-bit.
//
// Thread-safety: AutoMixedPrecision mutates one graph; different graphs may be rewritten concurrently. The
// hook is called from the thread that runs the pass.
#ifndef CJIT_COMPILER_PASSES_AUTO_MIXED_PRECISION_H_
#define CJIT_COMPILER_PASSES_AUTO_MIXED_PRECISION_H_

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"
#include "flags/flags.h"
#include "compiler/ops/op_registry.h"

namespace cjit {

const char* AmpClassName(AmpClass c);  // AmpClass: compiler/ops/op_registry.h (the op table's class)

// A host's rule for one op (TVM's interface): class, and the dtypes it accumulates in and produces when
// painted allow (kInvalid: float32 accumulation, the low type as output).
struct AmpRule {
  AmpClass cls = AmpClass::kDeny;
  DType accumulation = DType::kF32;
  DType output = DType::kInvalid;
};
// Returns a rule for nodes it decides, std::nullopt to leave them to the lists.
using AmpRuleHook = std::function<std::optional<AmpRule>(const Node& node)>;

struct AmpOptions {
  DType low = DType::kBF16;  // kF16 or kBF16
  // List edits, as --amp_allowlist_add=... or TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_ALLOWLIST_ADD.
  std::set<std::string> allow_add, allow_remove, infer_add, infer_remove, deny_add, deny_remove, clear_add,
      clear_remove;
  AmpRuleHook hook;
  // Cost rule: an allow-list product (Conv, ConvTranspose, MatMul, Gemm) with fewer multiply-adds than this
  // (static shapes) is deny — float32 — unless a host rule decided it. 0: no rule.
  int64_t min_allow_macs = 0;
};

// Multiply-adds of a Conv, ConvTranspose, MatMul or Gemm node with static shapes; -1 otherwise.
int64_t ProductMacs(const Node& node);

struct AmpDecision {
  std::string node, op_type;
  AmpClass list_class;  // from the lists / hook
  bool low = false;     // runs in the low type after painting
  std::string reason;
};

struct AmpReport {
  std::vector<AmpDecision> decisions;  // one per paintable node, in graph order
  int converted = 0;                   // nodes now in the low type
  int casts = 0;                       // Cast nodes inserted
  int constants = 0;                   // float32 constants converted
  std::vector<std::string> out_of_range;  // float16: constants with values beyond +-65504 (node kept float32)
};

// The default class of an op: the op table's (before list edits); deny for ops not in the table.
AmpClass DefaultAmpClass(const std::string& op_type);
// The four lists in effect (defaults with the edits applied), for logs.
std::vector<std::string> AmpListInEffect(AmpClass c, const AmpOptions& options);

// Rewrites `graph` (dtypes must be known: run after shape specialization). Errors: options.low not a 16-bit
// float type.
absl::StatusOr<AmpReport> AutoMixedPrecision(Graph& graph, const AmpOptions& options);

// ---- From flags (--auto_mixed_precision, --amp_*, --matmul_precision, --conv_precision) ----
//
// RunAutoMixedPrecision runs the pass above on a specialized graph as the flags select
// (--auto_mixed_precision, --amp_*list_{add,remove}, --amp_log_path), with the decision log: VLOG(2) in
// this module (--vmodule=auto_mixed_precision=2, as TF_CPP_VMODULE) one line per node with its list, its
// color and the reason; with --amp_log_path=DIR, DIR/amp_<sig>_before.txt and _after.txt
// (textual IR) and DIR/amp_<sig>_lists.txt (the four lists in effect and every decision).
// Thread-safety: as the pass; the log files are written atomically.

// The pass options the flags select; `on_gpu` resolves --auto_mixed_precision=auto (float16 on a GPU,
// bfloat16 on the CPU). Returns false in *enabled when AMP is off.
AmpOptions AmpOptionsFromFlags(const Flags& flags, bool on_gpu, bool* enabled);

// Marks float32 MatMul/Gemm nodes with the cjit_precision attribute --matmul_precision selects, and Conv
// nodes with --conv_precision's (when not "highest"); the CPU kernels read it. An attribute, so the
// precision is part of every cache key.
void ApplyMatmulPrecision(Graph& graph, const Flags& flags);

// The CPU rule of --amp_require_native_isa: for `mode` (bfloat16, float16 or auto) the 16-bit type to use
// in *low and "", or what this CPU (within --max_cpu_isa) lacks for it ("no AVX512_BF16 or AMX-BF16").
// TensorFlow's oneDNN auto mixed precision enables bfloat16 only where the CPU has it, for the same reason:
// emulated 16-bit arithmetic is slower than float32.
std::string AmpMissingCpuIsa(const std::string& mode, DType* low);

// Runs the pass when the flags enable it (on the CPU, where AmpMissingCpuIsa allows it or
// --amp_require_native_isa=false; otherwise one warning, and the graph stays float32). `sig` numbers the
// log files.
absl::Status RunAutoMixedPrecision(Graph& graph, const Flags& flags, bool on_gpu, const AmpRuleHook& hook, int sig);

}  // namespace cjit

#endif  // CJIT_COMPILER_PASSES_AUTO_MIXED_PRECISION_H_
