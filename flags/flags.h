// clusterjit configuration: the one typed struct that every component receives, parsed once from the
// CJIT_FLAGS environment variable (or a string / file) with the grammar of TensorFlow's TF_XLA_FLAGS.
//
// Grammar (tensorflow/compiler/xla/parse_flags_from_env.cc):
//   * flags are whitespace-separated `--name=value` tokens; a value may be quoted with '...' or "...";
//   * `--name` alone sets a boolean flag to true (`--name=false` clears it);
//   * a token that does not start with '-' names a file whose contents are parsed with the same grammar
//     (files may nest up to 8 deep);
//   * `--tf_xla_<name>` is accepted as an alias of `--<name>`, as are the per-flag aliases in the table.
// Unknown names and bad values are errors (absl::InvalidArgumentError) that name the flag and, for an
// unknown one, the nearest known flag. Nothing here aborts the process.
//
// Thread-safety: ParseFlags is a pure function. FlagsFromEnvironment parses CJIT_FLAGS once, on first
// call, under a lock; later calls return the same result.
#ifndef CJIT_FLAGS_FLAGS_H_
#define CJIT_FLAGS_FLAGS_H_

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"

namespace cjit {

// Every runtime option of clusterjit. Defaults are those of Flags{}; `cjit flags` prints the table.
struct Flags {
  // Threads used inside one operator (oneDNN, parallel loops). Default: the number of cores.
  int intra_op_threads = 0;  // 0 is replaced by the number of cores at parse time.
  // Auto-clustering mode: "-1" off, "0" defer to SessionOptions, "1" every clusterable op,
  // "fusible" elementwise/reduction/data-movement only (XLA Lite).
  std::string auto_jit = "0";
  // Clustering (compiler/passes/mark_for_compilation.h).
  int min_cluster_size = 4;       // Identity and Constant count 0
  int max_cluster_size = 1 << 30;
  int64_t clustering_fuel = -1;   // stop marking after this many ops; -1 = unbounded
  // Compile policy (runtime/compile_policy.h), as TensorFlow's lazy compilation.
  int compile_threshold = 2;      // fallback executions per signature before compiling
  // Specialized input signatures a session keeps (its plans: specialized graph, executor, cluster runners),
  // least recently used evicted first; 0 = unbounded. A returning evicted signature is specialized again
  // (milliseconds) and finds its compiled clusters in the memory cache.
  int max_cached_signatures = 256;
  double compile_time_cutoff_s = 30;
  bool always_defer_compilation = false;
  bool enable_lazy_compilation = true;
  // Compile on a background thread while the fallback path runs (as TF's --tf_xla_async_compilation).
  // kAuto (default): when lazy compilation is on (enable_lazy_compilation=false asks for no fallback runs)
  // and either the session's intra-op threads leave a CPU of this process idle (intra_op_threads <
  // UsableCpus()), or they are 2 or more: then the session lends the compile a CPU — runs use one intra-op
  // thread fewer while a background compile is in flight (LendsCpuToCompiles), so a compile never competes
  // with a run for a core. See AsyncCompilationEnabled.
  enum class AsyncCompilation { kFalse, kTrue, kAuto };
  AsyncCompilation async_compilation = AsyncCompilation::kAuto;
  // Threads that compile one cluster's new fused kernels concurrently (each kernel is an independent LLVM
  // module); 0 = the CPUs this process may run on. As XLA's --xla_gpu_force_compilation_parallelism.
  int force_compilation_parallelism = 0;
  // A new signature of a cluster whose structure compiled before runs compiled on its first execution
  // when every fused kernel it needs is already in the process-wide kernel cache (no LLVM work):
  // a "polymorphic hit" (runtime/cluster_runner.h). false: every new signature follows the policy above.
  bool polymorphic_clusters = true;
  // A new input signature whose structure (input dtypes and ranks, which dims are 0 or 1, by-value
  // inputs) was specialized before reuses that specialized graph: shape-derived constants re-derived,
  // shapes re-inferred, guards checked (compiler/passes/specialization_replay.h); anything unexpected
  // falls back to the full pass pipeline. "true", "false", or "verify" (also run the full pipeline and
  // fail the run if the graphs differ; for tests).
  std::string specialization_replay = "true";
  // Dynamic-shape plans (runtime/session.h): a new input signature of a structure whose specialization
  // depends on no concrete dim (no dims-dependent rewrite; shape-derived constants only as Reshape targets
  // inside clusters, re-derived per signature) runs that specialization's compiled clusters at its own
  // dims, with shapes inferred per run — no graph, plan or executor of its own — until it has run twice
  // that way; its third run specializes as before. Needs --specialization_replay=true and
  // --polymorphic_clusters. As torch.compile's dynamic shapes, where XLA specializes every shape.
  bool dynamic_shape_plans = true;
  // CPU: float32 convolutions connected to other convolutions run channels-last (NHWC) between them, with
  // transposes only at the region's edges (compiler/passes/layout.h). false: ONNX's NCHW everywhere.
  bool cpu_channels_last = true;
  // CPU, with cpu_channels_last: pointwise -> depthwise convolution pairs run as one fused op
  // (compiler/passes/layout.h FusePointwiseDepthwise).
  bool cpu_fuse_pointwise_depthwise = true;
  // CPU: QDQ patterns (DequantizeLinear -> Conv / MatMul -> QuantizeLinear) become QLinearConv /
  // QLinearMatMul at load (compiler/passes/quantization.h), as ONNX Runtime's QDQ transformers do.
  bool cpu_fuse_qdq = true;
  // CPU: fused groups of a single op get generated code too (default: they run on the op's library
  // kernel; FusionPlanOptions::single_op_groups_as_library). For tests of the code generator.
  bool cpu_codegen_single_ops = false;
  // The largest x86-64 instruction set CPU code may use (compiler/ir/cpu_isa.h; ONEDNN_MAX_CPU_ISA's names):
  // baseline, avx2, avx512_core, avx512_core_vnni, avx512_core_bf16, avx512_core_amx, all. Process-wide.
  std::string max_cpu_isa = "all";
  // Automatic mixed precision (compiler/passes/auto_mixed_precision.h): off, float16, bfloat16, or auto
  // (float16 on a GPU, bfloat16 on the CPU; what TF_ENABLE_AUTO_MIXED_PRECISION=1 sets).
  std::string auto_mixed_precision = "off";
  // Inside fused kernels, float16/bfloat16 values stay float32 between ops (XLA's
  // --xla_allow_excess_precision, default true); stores and explicit Casts still round. false: every op's
  // result is rounded, as on the op-by-op path.
  bool allow_excess_precision = true;
  // float32 MatMul/Gemm precision (PyTorch's set_float32_matmul_precision): highest (float32), high
  // (bfloat16x3), medium (bfloat16 operands, float32 accumulation). Output dtypes never change.
  // TF_ENABLE_CUBLAS_TENSOR_OP_MATH_FP32=1 sets high (its _DISABLE_ twin, highest).
  std::string matmul_precision = "highest";
  // The same for float32 Conv (PyTorch keeps them separate): medium = bfloat16 operands, float32
  // accumulation and output; high = bfloat16x3 where faster than float32 (AMX-BF16), else highest.
  // TF_ENABLE_CUDNN_TENSOR_OP_MATH_FP32=1 sets high.
  std::string conv_precision = "highest";
  // Autotuning of convolution and GEMM algorithms (runtime/autotune.h, docs/autotuning.md), as XLA's
  // --xla_gpu_autotune_level: 0 off (default algorithms), 1 time candidates on uninitialized inputs, 2 on
  // seeded random inputs, 3 also re-initialize outputs before each candidate, 4 also check every
  // candidate's output against the default algorithm's and reject wrong ones.
  int autotune_level = 4;
  // Search budget per op signature in milliseconds (candidates not yet timed when it runs out are skipped).
  double autotune_max_ms_per_op = 250;
  // Only deterministic candidates; the first one that passes instead of the fastest.
  bool autotune_deterministic = false;
  // Executions of an op signature's cluster (fallback or compiled) before it is tuned (TF_AUTOTUNE_THRESHOLD).
  int autotune_threshold = 2;
  // Past the threshold, an op signature is tuned only once its default algorithm has run this long in
  // total (milliseconds, summed over its executions; 0: no such condition). Tuning costs several runs of
  // every candidate plus their setup (tens to hundreds of ms per op on the CPU): an op that has taken less
  // than this so far is not expected to repay it (a shape seen a few times in a stream never does).
  double autotune_min_op_time_ms = 25;
  // Past both, an op signature is tuned only once its default algorithm has run as long as tuning it is
  // expected to take (Autotuner::ExpectedTuningMs): a process that ends soon spends on an op's search at
  // most about what the op itself cost (ski rental), a long-running one tunes every op that matters.
  // Applies with autotune_min_op_time_ms > 0 only (0: tune at the threshold).
  bool autotune_amortize = true;
  // Text file of tuned results: written after every new result / read at start (XLA's
  // --xla_gpu_dump_autotune_results_to / --xla_gpu_load_autotune_results_from).
  std::string autotune_results_dump_to, autotune_results_load_from;
  // Op-list edits, comma-separated ONNX op names (TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_<LIST>_<ADD|REMOVE>).
  std::string amp_allowlist_add, amp_allowlist_remove, amp_inferlist_add, amp_inferlist_remove, amp_denylist_add,
      amp_denylist_remove, amp_clearlist_add, amp_clearlist_remove;
  // Directory for the AMP decision log: graph before/after and the four lists (TF_AUTO_MIXED_PRECISION_
  // GRAPH_REWRITE_LOG_PATH).
  std::string amp_log_path;
  // AMP cost rule (CPU only): allow-list products (Conv, ConvTranspose, MatMul, Gemm) with fewer multiply-adds
  // stay float32 (auto_mixed_precision.h AmpOptions::min_allow_macs). 0: none.
  int64_t amp_min_allow_macs = 1000000;
  // AMP on the CPU only where the CPU has arithmetic for the 16-bit type (bfloat16: AVX512_BF16 or AMX-BF16;
  // float16: AVX512_FP16), as TensorFlow's oneDNN auto mixed precision; elsewhere the graph stays float32
  // (logged once). false: rewrite anyway (emulated 16-bit arithmetic, usually slower than float32).
  bool amp_require_native_isa = true;
  // Load-time quantization of a float model (compiler/passes/quantization.h AutoQuantize): off; dynamic
  // (int8 per-column weights, activations quantized per run: ONNX Runtime's quantize_dynamic with no offline
  // step); weight_only (MatMul/Gemm weights stored in --auto_quantize_weight_bits bits per block of
  // --auto_quantize_block_size along K, products in float32: ONNX Runtime's MatMulNBits).
  std::string auto_quantize = "off";
  // Op-list edits to the quantized op types (base: MatMul, Gemm, Conv; weight_only quantizes no Conv).
  std::string auto_quantize_allowlist_add, auto_quantize_allowlist_remove;
  // Comma-separated node names kept float32 (ONNX Runtime's nodes_to_exclude; `cjit quant-check` prints it).
  std::string auto_quantize_denylist_nodes;
  // Weights with fewer elements stay float32 (too little work to repay quantizing the activations).
  int64_t auto_quantize_min_weights = 16384;
  // weight_only: bits per weight (2, 4 or 8) and the block length along K (a power of two >= 16).
  int64_t auto_quantize_weight_bits = 8;
  int64_t auto_quantize_block_size = 32;
  // Execution device: auto, cpu, cuda or cuda:N (as TF's device placement; auto = cuda:0 when this build
  // has the GPU runtime and a CUDA driver reports a device, else cpu).
  std::string device = "auto";
  // PTX target for GPU code (sm_75 ... sm_90a); "" = the device's own (runtime/cuda/gpu_executor.h).
  std::string gpu_arch;
  // Device allocator, as TF_GPU_ALLOCATOR: "caching" (default) or "cuda_malloc_async".
  std::string gpu_allocator = "caching";
  // CUDA graphs (as xla_gpu_graph_level): 0 off; 1 = replay a captured graph of a run whose steps all run
  // on the device (runtime/cuda/gpu_executor.h).
  int gpu_graph_level = 1;
  // CUDA toolkit directory; libdevice is read from <dir>/nvvm/libdevice/libdevice.10.bc (as XLA's flag).
  std::string cuda_data_dir = "/usr/local/cuda";
  // Persistent cache (cache/disk_cache.h).
  std::string persistent_cache_dir;  // "" = no disk cache
  bool persistent_cache_read_only = false;
  int64_t persistent_cache_max_bytes = 0;  // 0 = unbounded
  // The fleet-shared tier (cache/remote_cache.h).
  std::string remote_cache;
  std::string remote_cache_key_file;
  int remote_cache_timeout_ms = 100;
  int64_t remote_cache_ttl_s = 604800;
  int64_t remote_cache_max_entry_mb = 64;
  int64_t remote_cache_lease_ms = 15000;
  // Largest tensor a model may make, in bytes (compiler/ir/tensor.h MaxTensorBytes); 0 = half of memory.
  int64_t max_tensor_bytes = 0;
  // Profiling (runtime/profiler.h, docs/profiling.md): Chrome trace-event JSON written at Session
  // destruction or Session::EndProfiling(); at most trace_max_events events, then one "truncated" event.
  std::string trace_to;
  int64_t trace_max_events = 1000000;
  // XLA-style dump directory (as --xla_dump_to / --xla_dump_hlo_pass_re): IR after each pass, clustering
  // decisions, Graphviz, fusion plans, LLVM IR, assembly/PTX, manifest.json.
  std::string dump_to;
  std::string dump_pass_re = ".*";
  std::string dump_after;       // pass names (compiler/passes/pipeline.h), comma-separated
  std::string disable_passes;   // pass names the specialization pipeline skips
  // NVTX ranges around every traced event (as TF_ENABLE_NVTX_RANGES); detailed names carry shapes.
  bool enable_nvtx_ranges = false;
  bool nvtx_detailed = false;
  // Test hook: every compilation fails with this message (exercises the fallback path).
  std::string fail_compilation_for_testing;
  // Logging: global VLOG level and per-file levels "file=N,file2=M" (as TF_CPP_VMODULE).
  int v = 0;
  std::string vmodule;
  // Minimum severity printed to stderr: 0 INFO, 1 WARNING, 2 ERROR.
  int stderrthreshold = 1;
};

// CPUs this process may run on: its affinity mask (what `nproc` prints), within a cgroup v2 CPU quota
// (/sys/fs/cgroup/cpu.max) when one is set; at least 1. The default of --intra_op_threads, and its cap.
int UsableCpus();

// Whether compilations run in the background under `flags`: --async_compilation=true, or auto with
// flags.enable_lazy_compilation and (flags.intra_op_threads < UsableCpus() or flags.intra_op_threads >= 2).
bool AsyncCompilationEnabled(const Flags& flags);
// --async_compilation=auto with no idle CPU (intra_op_threads >= UsableCpus(), at least 2): runs use
// intra_op_threads - 1 threads while a background compile is in flight, and autotuning stays on the run's
// thread (its timings need the run's threads): on 2 CPUs a synchronous compile at full threads blocked a
// stream's run for 10-30 ms.
bool LendsCpuToCompiles(const Flags& flags);

// Parses `text` on top of `base`. `source` names where the text came from, for error messages.
absl::StatusOr<Flags> ParseFlags(absl::string_view text, const Flags& base = Flags{},
                                 absl::string_view source = "CJIT_FLAGS");

// Checks every field of a Flags struct filled in code against the same rules as the parser (ranges,
// allowed values, regular expressions): InvalidArgumentError naming the flag and the bad value.
absl::Status ValidateFlags(const Flags& flags, absl::string_view source = "SessionOptions");
// One flag by name (aliases and the --tf_xla_ prefix accepted): SetFlag parses `value` with that flag's
// rules (InvalidArgumentError naming it, with the nearest known name for an unknown one); GetFlag returns
// the current value as text (NotFoundError for an unknown name).
absl::Status SetFlag(Flags& flags, absl::string_view name, absl::string_view value,
                     absl::string_view source = "options");
absl::StatusOr<std::string> GetFlag(const Flags& flags, absl::string_view name);

// The flags from the CJIT_FLAGS environment variable, parsed once (the only getenv for configuration).
// Also reads TensorFlow's mixed-precision variables (TF_ENABLE_AUTO_MIXED_PRECISION,
// TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_{ALLOWLIST,INFERLIST,DENYLIST,CLEARLIST}_{ADD,REMOVE}, ..._LOG_PATH),
// the tensor-op math variables and TF_AUTOTUNE_THRESHOLD, applied before CJIT_FLAGS (which wins).
const absl::StatusOr<Flags>& FlagsFromEnvironment();
// The flag text those TensorFlow variables map to, reading them through `getenv_fn` (tests pass a map).
std::string TfMixedPrecisionFlagText(const std::function<const char*(const char*)>& getenv_fn);

// One row per flag: name, default, help, aliases. For `cjit flags` and the docs.
struct FlagInfo {
  std::string name;
  std::string type;
  std::string default_value;
  std::string help;
  std::vector<std::string> aliases;
  // The flag changes the code a compile generates: its value is part of every compiled-code cache key
  // (CodeChangingFlagText), so an entry made under another value is never reused.
  bool changes_code = false;
};
std::vector<FlagInfo> ListFlags();
// "name=value" of every flag marked changes_code, in table order (the flags part of compiled-code cache
// keys: runtime/cluster_runner.cc).
std::string CodeChangingFlagText(const Flags& flags);
// The flags whose values are comma-separated ONNX operator names (--amp_*list_*,
// --auto_quantize_allowlist_*): each one's name and its value in `flags`. Their syntax is checked here;
// that each names an operator, where a session resolves its flags (against the op table).
std::vector<std::pair<std::string, std::string>> OpListFlagValues(const Flags& flags);

// The known flag name nearest to `name` by edit distance ("" if none is close).
std::string NearestFlag(absl::string_view name);

}  // namespace cjit

#endif  // CJIT_FLAGS_FLAGS_H_
