// Table-driven CJIT_FLAGS parser. See flags.h for the grammar.
#include "flags/flags.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/status/status.h"
#include "base/nearest_name.h"
#include "base/file_util.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/ascii.h"

namespace cjit {
namespace {

using Setter = std::function<absl::Status(Flags&, absl::string_view value, bool has_value)>;
// The flag's current value as text its setter accepts.
using Getter = std::function<std::string(const Flags&)>;

// A flag's two directions, made together so they cannot drift apart: the typed helpers below derive both
// from the field; Custom pairs a bespoke setter with its getter.
struct Access {
  Setter set;
  Getter get;
};

struct FlagDef {
  FlagInfo info;
  Access access;
};

std::string BoolText(bool v) { return v ? "true" : "false"; }

Access Custom(Getter get, Setter set) { return Access{std::move(set), std::move(get)}; }

absl::Status BadValue(absl::string_view name, absl::string_view value, absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat("bad value '", value, "' for flag --", name, ": expected ", want));
}

Access IntFlag(int Flags::*field, std::string name, int min, int max) {
  return {[=](Flags& f, absl::string_view v, bool has_value) -> absl::Status {
    int x;
    if (!has_value || !absl::SimpleAtoi(v, &x) || x < min || x > max) {
      return BadValue(name, v, absl::StrCat("an integer in [", min, ", ", max, "]"));
    }
    f.*field = x;
    return absl::OkStatus();
  }, [=](const Flags& f) { return absl::StrCat(f.*field); }};
}

Access BoolFlag(bool Flags::*field, std::string name) {
  return {[=](Flags& f, absl::string_view v, bool has_value) -> absl::Status {
    if (!has_value || v == "true" || v == "1") {
      f.*field = true;
    } else if (v == "false" || v == "0") {
      f.*field = false;
    } else {
      return BadValue(name, v, "true or false");
    }
    return absl::OkStatus();
  }, [=](const Flags& f) { return BoolText(f.*field); }};
}

Access Int64Flag(int64_t Flags::*field, std::string name, int64_t min) {
  return {[=](Flags& f, absl::string_view v, bool has_value) -> absl::Status {
    int64_t x;
    if (!has_value || !absl::SimpleAtoi(v, &x) || x < min) {
      return BadValue(name, v, absl::StrCat("an integer >= ", min));
    }
    f.*field = x;
    return absl::OkStatus();
  }, [=](const Flags& f) { return absl::StrCat(f.*field); }};
}

Access DoubleFlag(double Flags::*field, std::string name) {
  return {[=](Flags& f, absl::string_view v, bool has_value) -> absl::Status {
    double x;
    if (!has_value || !absl::SimpleAtod(v, &x) || x < 0) return BadValue(name, v, "a number >= 0");
    f.*field = x;
    return absl::OkStatus();
  }, [=](const Flags& f) { return absl::StrCat(f.*field); }};
}

Access StringFlag(std::string Flags::*field) {
  return {[=](Flags& f, absl::string_view v, bool) -> absl::Status {
    f.*field = std::string(v);
    return absl::OkStatus();
  }, [=](const Flags& f) { return f.*field; }};
}

// One of `values`; `expected` says which in the error.
Access OneOfFlag(std::string Flags::*field, std::string name, std::vector<std::string> values,
                 std::string expected) {
  return {[=](Flags& f, absl::string_view v, bool has) -> absl::Status {
    if (!has || std::find(values.begin(), values.end(), v) == values.end()) return BadValue(name, v, expected);
    f.*field = std::string(v);
    return absl::OkStatus();
  }, [=](const Flags& f) { return f.*field; }};
}

// A comma-separated list of operator names (identifiers). Whether each names an ONNX operator is checked
// where the flags are resolved against the op table (runtime/session.cc ValidateOpListFlags): flags/
// depends on abseil and base/ only.
// The op-list flags, in table order (OpListFlag registers each as the table is built).
std::vector<std::pair<const char*, std::string Flags::*>>& OpListFields() {
  static auto* fields = new std::vector<std::pair<const char*, std::string Flags::*>>();
  return *fields;
}

Access OpListFlag(std::string Flags::*field, const char* name) {
  OpListFields().emplace_back(name, field);
  return {[=](Flags& f, absl::string_view v, bool has) -> absl::Status {
    if (!has) return BadValue(name, v, "a comma-separated list of ONNX operators");
    for (absl::string_view op : absl::StrSplit(v, ',', absl::SkipEmpty())) {
      const bool identifier = absl::ascii_isalpha(op[0]) && std::all_of(op.begin(), op.end(), [](char c) {
        return absl::ascii_isalnum(c) || c == '_';
      });
      if (!identifier) return BadValue(name, v, absl::StrCat("ONNX operator names ('", op, "' is not one)"));
    }
    f.*field = std::string(v);
    return absl::OkStatus();
  }, [=](const Flags& f) { return f.*field; }};
}

int DefaultThreads() { return UsableCpus(); }

const std::vector<FlagDef>& Table() {
  static const auto* table = new std::vector<FlagDef>{
      {{"intra_op_threads", "int", "number of cores",
        "Threads used inside one operator (oneDNN primitives, parallel loops); 0 = the CPUs this process may run "
        "on (affinity mask, cgroup quota); a session caps larger values to that number.",
        {"xla_cpu_intra_op_threads"}},
       Custom([](const Flags& f) { return absl::StrCat(f.intra_op_threads); },
       [](Flags& f, absl::string_view v, bool has) -> absl::Status {
         int x;
         if (!has || !absl::SimpleAtoi(v, &x) || x < 0 || x > 1024) {
           return BadValue("intra_op_threads", v, "an integer in [0, 1024]");
         }
         f.intra_op_threads = x == 0 ? DefaultThreads() : x;
         return absl::OkStatus();
       })},
      {{"auto_jit", "string", "0",
        "Auto-clustering: -1 off, 0 leave it to SessionOptions, 1 cluster every clusterable op, "
        "fusible = elementwise, broadcast, reduction and data-movement ops only (XLA Lite).",
        {}},
       Custom([](const Flags& f) { return f.auto_jit; },
       [](Flags& f, absl::string_view v, bool has) -> absl::Status {
         if (!has || (v != "-1" && v != "0" && v != "1" && v != "2" && v != "fusible")) {
           return BadValue("auto_jit", v, "one of -1, 0, 1, 2, fusible");
         }
         f.auto_jit = std::string(v);
         return absl::OkStatus();
       })},
      {{"min_cluster_size", "int", "4",
        "Minimum number of ops in a cluster (Identity and Constant count 0); a convolution or matrix product "
        "with at least one other op is always a cluster (its epilogue).", {}},
       IntFlag(&Flags::min_cluster_size, "min_cluster_size", 1, 1 << 30)},
      {{"max_cluster_size", "int", "unbounded", "Maximum number of ops in a cluster.", {}},
       IntFlag(&Flags::max_cluster_size, "max_cluster_size", 1, 1 << 30)},
      {{"clustering_fuel", "int", "-1",
        "Stop marking ops for clustering after this many (bisects a bad cluster); -1 = unbounded.", {}},
       Int64Flag(&Flags::clustering_fuel, "clustering_fuel", -1)},
      {{"max_cached_signatures", "int", "256",
        "Specialized input signatures a session keeps (specialized graph, executor, cluster runners), least "
        "recently used evicted first, so a service that sees ever new shapes stays bounded in memory; an "
        "evicted signature that returns is specialized again and finds its compiled clusters in the memory "
        "cache. 0 = unbounded.",
        {}},
       IntFlag(&Flags::max_cached_signatures, "max_cached_signatures", 0, 1 << 30)},
      {{"compile_threshold", "int", "2",
        "Executions of a cluster signature on the fallback path before it is compiled (lazy compilation).", {}},
       IntFlag(&Flags::compile_threshold, "compile_threshold", 0, 1 << 30)},
      {{"compile_time_cutoff_s", "float", "30",
        "A cluster whose compilation took longer is compiled for no further signatures.", {}},
       DoubleFlag(&Flags::compile_time_cutoff_s, "compile_time_cutoff_s")},
      {{"always_defer_compilation", "bool", "false", "Never compile: every cluster runs on the fallback path.", {}},
       BoolFlag(&Flags::always_defer_compilation, "always_defer_compilation")},
      {{"enable_lazy_compilation", "bool", "true",
        "false: compile every cluster signature on its first execution, with no fallback runs.", {}},
       BoolFlag(&Flags::enable_lazy_compilation, "enable_lazy_compilation")},
      {{"async_compilation", "bool|auto", "auto",
        "Compile on a background thread while the fallback path runs; swap the executable in when ready. "
        "true, false, or auto = true when lazy compilation is on and --intra_op_threads leaves a CPU of this "
        "process idle, or is 2 or more (runs then use one thread fewer while a compile is in flight).",
        {}},
       Custom([](const Flags& f) -> std::string {
         switch (f.async_compilation) {
           case Flags::AsyncCompilation::kTrue: return "true";
           case Flags::AsyncCompilation::kFalse: return "false";
           case Flags::AsyncCompilation::kAuto: break;
         }
         return "auto";
       },
       [](Flags& f, absl::string_view v, bool has) -> absl::Status {
         using A = Flags::AsyncCompilation;
         if (!has || v == "true" || v == "1") f.async_compilation = A::kTrue;
         else if (v == "false" || v == "0") f.async_compilation = A::kFalse;
         else if (v == "auto") f.async_compilation = A::kAuto;
         else return BadValue("async_compilation", v, "true, false or auto");
         return absl::OkStatus();
       })},
      {{"force_compilation_parallelism", "int", "0",
        "Threads that compile one cluster's new fused kernels concurrently (each an independent LLVM module "
        "with its own target machine; the generated code does not depend on it); 0 = the CPUs this process "
        "may run on (affinity mask, cgroup quota). As XLA's --xla_gpu_force_compilation_parallelism.",
        {"xla_gpu_force_compilation_parallelism"}},
       IntFlag(&Flags::force_compilation_parallelism, "force_compilation_parallelism", 0, 1024)},
      {{"polymorphic_clusters", "bool", "true",
        "A new shape signature of a cluster whose structure compiled before runs compiled on its first execution "
        "when all its fused kernels are already compiled (shape-generic kernels; no LLVM work): a polymorphic hit. "
        "false: every new signature follows the lazy-compilation policy.",
        {}},
       BoolFlag(&Flags::polymorphic_clusters, "polymorphic_clusters")},
      {{"specialization_replay", "string", "true",
        "A new input signature of a structure specialized before reuses that specialized graph (shape-derived "
        "constants re-derived, shapes re-inferred, guards checked) instead of running every pass again; "
        "true, false, or verify (also run the full passes and fail on any difference).",
        {}},
       OneOfFlag(&Flags::specialization_replay, "specialization_replay", {"true", "false", "verify"},
                 "true, false or verify")},
      {{"dynamic_shape_plans", "bool", "true",
        "A new input signature of a structure whose specialization depends on no concrete dim (shape-derived "
        "constants only as Reshape targets inside clusters, re-derived per signature) runs that "
        "specialization's compiled clusters at its own dims (shapes inferred per run; no graph, plan or "
        "executor of its own) for its first two runs, then specializes (as torch.compile's dynamic shapes). "
        "Needs --specialization_replay=true and --polymorphic_clusters; false: every new signature specializes.",
        {}},
       BoolFlag(&Flags::dynamic_shape_plans, "dynamic_shape_plans")},
      {{"cpu_channels_last", "bool", "true",
        "CPU: float32 convolutions connected to other convolutions run channels-last (NHWC, oneDNN's fastest "
        "layout) with transposes only at the edges of such regions, instead of reordering around every "
        "convolution. false: ONNX's NCHW everywhere.",
        {}},
       BoolFlag(&Flags::cpu_channels_last, "cpu_channels_last")},
      {{"cpu_fuse_pointwise_depthwise", "bool", "true",
        "CPU, with --cpu_channels_last: a 1x1 convolution feeding a depthwise convolution (through Relu, Clip, "
        "HardSwish or HardSigmoid only; MobileNet's inverted residual) runs as one fused op that computes the "
        "expanded intermediate a band of rows at a time, never the whole tensor.",
        {}},
       BoolFlag(&Flags::cpu_fuse_pointwise_depthwise, "cpu_fuse_pointwise_depthwise")},
      {{"cpu_fuse_qdq", "bool", "true",
        "CPU: a quantized model's QDQ patterns (DequantizeLinear of uint8/int8 activations and constant weights "
        "-> Conv or MatMul -> QuantizeLinear) run as one integer op (QLinearConv / QLinearMatMul: 8-bit "
        "products, exact int32 sums, one rounding), as ONNX Runtime's QDQ transformers do; outputs may differ "
        "from the float path by one quantization step. false: DequantizeLinear, the float op and "
        "QuantizeLinear run as written (ONNX Runtime's session.disable_quant_qdq).",
        {}},
       BoolFlag(&Flags::cpu_fuse_qdq, "cpu_fuse_qdq")},
      {{"cpu_codegen_single_ops", "bool", "false",
        "CPU: generate code for a fused group of a single op too. By default such a group runs on the op's "
        "library kernel (the same single pass over memory), so a cluster compiles only where ops fuse, and a "
        "cluster with no such group runs compiled from its first execution with no LLVM work. true: every "
        "elementwise op and row reduction of a cluster runs generated code (what the code generator's tests "
        "check).",
        {}, /*changes_code=*/true},
       BoolFlag(&Flags::cpu_codegen_single_ops, "cpu_codegen_single_ops")},
      {{"max_cpu_isa", "string", "all",
        "CPU: the largest x86-64 instruction set our kernels, the LLVM JIT, BLIS and oneDNN may use, as "
        "ONEDNN_MAX_CPU_ISA: baseline, avx2, avx512_core, avx512_core_vnni, avx512_core_bf16, avx512_core_amx or "
        "all (the CPU's own). To run and measure a smaller CPU's code paths on a larger one. Process-wide; the "
        "JIT, BLIS and oneDNN take the value in effect when the process first uses them.",
        {}},
       OneOfFlag(&Flags::max_cpu_isa, "max_cpu_isa",
                 {"baseline", "avx2", "avx512_core", "avx512_core_vnni", "avx512_core_bf16", "avx512_core_amx", "all"},
                 "baseline, avx2, avx512_core, avx512_core_vnni, avx512_core_bf16, avx512_core_amx or all")},
      {{"allow_excess_precision", "bool", "true",
        "Inside fused kernels, float16/bfloat16 values stay float32 between ops (only stores and explicit Casts "
        "round), as XLA's --xla_allow_excess_precision; false rounds every op's result as the op-by-op path does.",
        {"xla_allow_excess_precision"}, /*changes_code=*/true},
       BoolFlag(&Flags::allow_excess_precision, "allow_excess_precision")},
      {{"matmul_precision", "string", "highest",
        "float32 MatMul/Gemm precision, as PyTorch's set_float32_matmul_precision: highest (float32), high "
        "(bfloat16x3: three bfloat16 partial products, float32 accumulation), medium (bfloat16 operands, float32 "
        "accumulation). Outputs stay float32. TF_ENABLE_CUBLAS_TENSOR_OP_MATH_FP32=1 means high.",
        {}},
       OneOfFlag(&Flags::matmul_precision, "matmul_precision", {"highest", "high", "medium"},
                 "highest, high or medium")},
      {{"conv_precision", "string", "highest",
        "float32 Conv precision (as --matmul_precision, separate as in PyTorch): highest, high (bfloat16x3 where "
        "faster than float32, i.e. with AMX-BF16, else highest), medium (bfloat16 operands, float32 accumulation "
        "and output). "
        "TF_ENABLE_CUDNN_TENSOR_OP_MATH_FP32=1 means high.",
        {}},
       OneOfFlag(&Flags::conv_precision, "conv_precision", {"highest", "high", "medium"}, "highest, high or medium")},
      {{"autotune_level", "int", "4",
        "Autotuning of Conv/ConvTranspose/MatMul/Gemm algorithms (docs/autotuning.md), as XLA's: 0 off, 1 time "
        "candidates on uninitialized inputs, 2 on seeded random inputs, 3 also re-initialize outputs before each "
        "candidate, 4 also reject candidates whose output differs from the default algorithm's.",
        {"xla_gpu_autotune_level"}},
       IntFlag(&Flags::autotune_level, "autotune_level", 0, 4)},
      {{"autotune_max_ms_per_op", "float", "250",
        "Autotuning search budget per op signature, milliseconds: candidates not yet timed are skipped after it.",
        {}},
       DoubleFlag(&Flags::autotune_max_ms_per_op, "autotune_max_ms_per_op")},
      {{"autotune_deterministic", "bool", "false",
        "Autotuning considers deterministic candidates only and takes the first that passes, not the fastest.",
        {"xla_gpu_deterministic_ops"}},
       BoolFlag(&Flags::autotune_deterministic, "autotune_deterministic")},
      {{"autotune_threshold", "int", "2",
        "Executions of an op signature's cluster (fallback or compiled) before it is tuned at its next compiled "
        "execution (TF_AUTOTUNE_THRESHOLD); earlier executions run the default algorithm.",
        {}},
       IntFlag(&Flags::autotune_threshold, "autotune_threshold", 0, 1 << 30)},
      {{"autotune_min_op_time_ms", "float", "25",
        "Past --autotune_threshold, an op signature is tuned only once its default algorithm has run this many "
        "milliseconds in total (0: at the threshold): tuning an op that costs little never pays for its search.",
        {}},
       DoubleFlag(&Flags::autotune_min_op_time_ms, "autotune_min_op_time_ms")},
      {{"autotune_amortize", "bool", "true",
        "Past --autotune_threshold and --autotune_min_op_time_ms, an op signature is tuned only once its default "
        "algorithm has run as long as tuning it is expected to take: the op's mean time per execution times the "
        "ratio of tuning time to default time of this process's earlier tunings (200 before the first), at most "
        "--autotune_max_ms_per_op. A short-lived process then spends on a search at most about what the op "
        "cost it (ski rental); a long-running one still tunes every op that matters. false: tune at the floor. "
        "--autotune_min_op_time_ms=0 turns both conditions off.",
        {}},
       BoolFlag(&Flags::autotune_amortize, "autotune_amortize")},
      {{"autotune_results_dump_to", "string", "",
        "Text file that receives every autotuning result of the process (rewritten atomically after each new one).",
        {"xla_gpu_dump_autotune_results_to"}},
       StringFlag(&Flags::autotune_results_dump_to)},
      {{"autotune_results_load_from", "string", "",
        "Text file of autotuning results to use (written by --autotune_results_dump_to); entries for another "
        "device or library version are ignored, each with a logged reason.",
        {"xla_gpu_load_autotune_results_from"}},
       StringFlag(&Flags::autotune_results_load_from)},
      {{"auto_mixed_precision", "string", "off",
        "Automatic mixed precision: off, float16, bfloat16, or auto (float16 on a GPU, bfloat16 on the CPU; "
        "TF_ENABLE_AUTO_MIXED_PRECISION=1). Allow-list ops (Conv, MatMul, Gemm, ...) and the infer/clear ops "
        "between them run in the 16-bit type; graph inputs and outputs stay float32.",
        {"tf_enable_auto_mixed_precision"}},
       Custom([](const Flags& f) { return f.auto_mixed_precision; },
       [](Flags& f, absl::string_view v, bool has) -> absl::Status {
         std::string x = has ? std::string(v) : "auto";
         if (x == "1" || x == "true") x = "auto";
         if (x == "0" || x == "false") x = "off";
         if (x != "off" && x != "float16" && x != "bfloat16" && x != "auto") {
           return BadValue("auto_mixed_precision", v, "off, float16, bfloat16 or auto");
         }
         f.auto_mixed_precision = x;
         return absl::OkStatus();
       })},
      {{"amp_allowlist_add", "string", "",
        "Comma-separated ONNX ops to add to the AMP allow list "
        "(TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_ALLOWLIST_ADD).", {}},
       OpListFlag(&Flags::amp_allowlist_add, "amp_allowlist_add")},
      {{"amp_allowlist_remove", "string", "",
        "Comma-separated ONNX ops to remove from the AMP allow list "
        "(TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_ALLOWLIST_REMOVE).", {}},
       OpListFlag(&Flags::amp_allowlist_remove, "amp_allowlist_remove")},
      {{"amp_inferlist_add", "string", "",
        "Comma-separated ONNX ops to add to the AMP infer list "
        "(TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_INFERLIST_ADD).", {}},
       OpListFlag(&Flags::amp_inferlist_add, "amp_inferlist_add")},
      {{"amp_inferlist_remove", "string", "",
        "Comma-separated ONNX ops to remove from the AMP infer list "
        "(TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_INFERLIST_REMOVE).", {}},
       OpListFlag(&Flags::amp_inferlist_remove, "amp_inferlist_remove")},
      {{"amp_denylist_add", "string", "",
        "Comma-separated ONNX ops to add to the AMP deny list "
        "(TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_DENYLIST_ADD).", {}},
       OpListFlag(&Flags::amp_denylist_add, "amp_denylist_add")},
      {{"amp_denylist_remove", "string", "",
        "Comma-separated ONNX ops to remove from the AMP deny list "
        "(TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_DENYLIST_REMOVE).", {}},
       OpListFlag(&Flags::amp_denylist_remove, "amp_denylist_remove")},
      {{"amp_clearlist_add", "string", "",
        "Comma-separated ONNX ops to add to the AMP clear list "
        "(TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_CLEARLIST_ADD).", {}},
       OpListFlag(&Flags::amp_clearlist_add, "amp_clearlist_add")},
      {{"amp_clearlist_remove", "string", "",
        "Comma-separated ONNX ops to remove from the AMP clear list "
        "(TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_CLEARLIST_REMOVE).", {}},
       OpListFlag(&Flags::amp_clearlist_remove, "amp_clearlist_remove")},
      {{"amp_min_allow_macs", "int64", "1000000",
        "AMP cost rule on the CPU: Conv, ConvTranspose, MatMul and Gemm with fewer multiply-adds than this stay "
        "float32 (bfloat16 conversions and kernels cost more than they save on small products); 0 = none. "
        "Not applied on a GPU.", {}},
       Int64Flag(&Flags::amp_min_allow_macs, "amp_min_allow_macs", 0)},
      {{"amp_require_native_isa", "bool", "true",
        "AMP on the CPU rewrites to a 16-bit type only where the CPU has arithmetic for it within --max_cpu_isa "
        "(bfloat16: AVX512_BF16 or AMX-BF16; float16: AVX512_FP16), as TensorFlow's oneDNN auto mixed "
        "precision; elsewhere the graph stays float32 and one warning names the missing instructions "
        "(emulated bfloat16 made ppocrv4_rec 1.5x slower than float32). --auto_mixed_precision=auto picks "
        "bfloat16, then float16, then float32 by the same rule. false: rewrite anyway.",
        {}},
       BoolFlag(&Flags::amp_require_native_isa, "amp_require_native_isa")},
      {{"auto_quantize", "string", "off",
        "Load-time quantization of a float model's MatMul, Gemm and Conv with constant weights, on the CPU: "
        "off; dynamic (weights to int8 per output column once, "
        "activations quantized per run by DynamicQuantizeLinear, integer products: ONNX Runtime's "
        "quantize_dynamic without the offline step); weight_only (MatMul / Gemm weights kept in "
        "--auto_quantize_weight_bits bits per block along K, dequantized inside the product: ONNX Runtime's "
        "MatMulNBits; MatMul / Gemm only). `cjit quant-check` reports the accuracy change and the nodes to keep float32.",
        {}},
       OneOfFlag(&Flags::auto_quantize, "auto_quantize", {"off", "dynamic", "weight_only"},
                 "off, dynamic or weight_only")},
      {{"auto_quantize_allowlist_add", "string", "",
        "Comma-separated ops to add to the quantized op types (base: MatMul, Gemm, Conv; MatMul, Gemm and Conv "
        "can be quantized).", {}},
       OpListFlag(&Flags::auto_quantize_allowlist_add, "auto_quantize_allowlist_add")},
      {{"auto_quantize_allowlist_remove", "string", "",
        "Comma-separated ops to remove from the quantized op types.", {}},
       OpListFlag(&Flags::auto_quantize_allowlist_remove, "auto_quantize_allowlist_remove")},
      {{"auto_quantize_denylist_nodes", "string", "",
        "Comma-separated node names that --auto_quantize leaves float32 (ONNX Runtime's nodes_to_exclude; "
        "`cjit quant-check` prints the list that restores the accuracy).", {}},
       StringFlag(&Flags::auto_quantize_denylist_nodes)},
      {{"auto_quantize_min_weights", "int64", "16384",
        "--auto_quantize leaves float32 the ops whose weights have fewer elements than this (quantizing the "
        "activations per run costs more than small products save); 0 = none.", {}},
       Int64Flag(&Flags::auto_quantize_min_weights, "auto_quantize_min_weights", 0)},
      {{"auto_quantize_weight_bits", "int64", "8",
        "--auto_quantize=weight_only: bits per weight, 2, 4 or 8 (symmetric per block, MatMulNBits' default "
        "zero point 2^(bits-1)).", {}},
       Custom([](const Flags& f) { return absl::StrCat(f.auto_quantize_weight_bits); },
       [](Flags& f, absl::string_view v, bool has) -> absl::Status {
         int64_t x;
         if (!has || !absl::SimpleAtoi(v, &x) || (x != 2 && x != 4 && x != 8)) {
           return BadValue("auto_quantize_weight_bits", v, "2, 4 or 8");
         }
         f.auto_quantize_weight_bits = x;
         return absl::OkStatus();
       })},
      {{"auto_quantize_block_size", "int64", "32",
        "--auto_quantize=weight_only: weights per scale along K, a power of two >= 16 (MatMulNBits' "
        "block_size).", {}},
       Custom([](const Flags& f) { return absl::StrCat(f.auto_quantize_block_size); },
       [](Flags& f, absl::string_view v, bool has) -> absl::Status {
         int64_t x;
         if (!has || !absl::SimpleAtoi(v, &x) || x < 16 || x > (1 << 16) || (x & (x - 1)) != 0) {
           return BadValue("auto_quantize_block_size", v, "a power of two in [16, 65536]");
         }
         f.auto_quantize_block_size = x;
         return absl::OkStatus();
       })},
      {{"amp_log_path", "string", "",
        "Directory for the AMP decision log: the graph before and after the rewrite and the four lists in "
        "effect (TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_LOG_PATH).", {}},
       StringFlag(&Flags::amp_log_path)},
      {{"device", "string", "auto",
        "Execution device: auto, cpu, cuda or cuda:N. auto picks cuda:0 when the build has the GPU runtime "
        "and a CUDA driver reports a device, else the CPU; cuda without a CUDA driver or device is an error.",
        {}},
       Custom([](const Flags& f) { return f.device; },
       [](Flags& f, absl::string_view v, bool has) -> absl::Status {
         bool ok = has && (v == "auto" || v == "cpu" || v == "cuda");
         int n;
         if (has && absl::StartsWith(v, "cuda:") && absl::SimpleAtoi(v.substr(5), &n) && n >= 0) ok = true;
         if (!ok) return BadValue("device", v, "auto, cpu, cuda or cuda:N");
         f.device = std::string(v);
         return absl::OkStatus();
       })},
      {{"gpu_arch", "string", "",
        "PTX target of GPU code: sm_75, sm_80, sm_86, sm_87, sm_89, sm_90 or sm_90a; empty = the device's own.",
        {"xla_gpu_arch"}},
       Custom([](const Flags& f) { return f.gpu_arch; },
       [](Flags& f, absl::string_view v, bool has) -> absl::Status {
         static const char* kArchs[] = {"sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_90a"};
         bool ok = has && v.empty();
         for (const char* a : kArchs) ok = ok || (has && v == a);
         if (!ok) return BadValue("gpu_arch", v, "sm_75, sm_80, sm_86, sm_87, sm_89, sm_90 or sm_90a");
         f.gpu_arch = std::string(v);
         return absl::OkStatus();
       })},
      {{"gpu_allocator", "string", "caching",
        "GPU memory allocator (as TF_GPU_ALLOCATOR): caching (freed blocks reused per size class) or "
        "cuda_malloc_async (the driver's stream-ordered pool).",
        {}},
       OneOfFlag(&Flags::gpu_allocator, "gpu_allocator", {"caching", "cuda_malloc_async"},
                 "caching or cuda_malloc_async")},
      {{"gpu_graph_level", "int", "1",
        "CUDA graphs (XLA's xla_gpu_graph_level; torch.compile's reduce-overhead): 0 = launch every step of a GPU "
        "run; 1 = from the second run of an input signature whose steps all run on the device, replay one "
        "captured graph of them (one launch instead of one per kernel and library call).",
        {"xla_gpu_graph_level"}},
       IntFlag(&Flags::gpu_graph_level, "gpu_graph_level", 0, 1)},
      {{"cuda_data_dir", "string", "/usr/local/cuda",
        "CUDA toolkit directory; GPU code links <dir>/nvvm/libdevice/libdevice.10.bc.", {"xla_gpu_cuda_data_dir"}},
       StringFlag(&Flags::cuda_data_dir)},
      {{"persistent_cache_dir", "string", "",
        "Directory of the persistent compilation cache (created if missing); empty = memory cache only.",
        {"xla_gpu_persistent_cache_dir", "persistent_cache_directory"}},
       StringFlag(&Flags::persistent_cache_dir)},
      {{"persistent_cache_read_only", "bool", "false", "Use the persistent cache (and the --remote_cache tier) without writing to either.", {}},
       BoolFlag(&Flags::persistent_cache_read_only, "persistent_cache_read_only")},
      {{"persistent_cache_max_bytes", "int", "0",
        "Keep the persistent cache under this many bytes by least-recently-used eviction; 0 = unbounded.", {}},
       Int64Flag(&Flags::persistent_cache_max_bytes, "persistent_cache_max_bytes", 0)},
      {{"remote_cache", "string", "",
        "A fleet-shared cache tier behind --persistent_cache_dir (docs/caching.md): redis://HOST[:PORT][/DB] or "
        "unix:///PATH[?db=N]. Compiled CPU code and autotuning results are looked up there on a local miss and "
        "written there (signed, write-behind); needs --remote_cache_key_file. As TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE.",
        {}},
       StringFlag(&Flags::remote_cache)},
      {{"remote_cache_key_file", "string", "",
        "The fleet key file of --remote_cache: one key (>= 16 bytes) per line, the first signs, every one "
        "verifies (rotation); must be mode 600 and owned by this user.", {}},
       StringFlag(&Flags::remote_cache_key_file)},
      {{"remote_cache_timeout_ms", "int", "100",
        "Longest wait for the remote cache (connect, each reply); after 3 errors in a row it is skipped for "
        "5-60 s.", {}},
       IntFlag(&Flags::remote_cache_timeout_ms, "remote_cache_timeout_ms", 1, 60000)},
      {{"remote_cache_ttl_s", "int", "604800", "Lifetime of entries written to the remote cache; 0 = no expiry.", {}},
       Int64Flag(&Flags::remote_cache_ttl_s, "remote_cache_ttl_s", 0)},
      {{"remote_cache_max_entry_mb", "int", "64", "Entries larger than this are not written to the remote cache.",
        {}},
       Int64Flag(&Flags::remote_cache_max_entry_mb, "remote_cache_max_entry_mb", 1)},
      {{"remote_cache_lease_ms", "int", "15000",
        "Compile and tune once per fleet: a process that misses --remote_cache takes a lease of this many ms "
        "on the entry; the others that miss it meanwhile run their fallback path (default algorithms) until "
        "it is published or the lease expires. 0 = no leases (every process compiles what it misses).", {}},
       Int64Flag(&Flags::remote_cache_lease_ms, "remote_cache_lease_ms", 0)},
      {{"max_tensor_bytes", "int", "0",
        "Largest tensor (bytes) a model may create: an initializer, an input, a shape-inferred or computed "
        "output over it is an error naming the node. 0 = half of this machine's physical memory.", {}},
       Int64Flag(&Flags::max_tensor_bytes, "max_tensor_bytes", 0)},
      {{"trace_to", "string", "",
        "Write a Chrome trace-event JSON file (Perfetto UI, chrome://tracing) of every run, specialization, "
        "compilation and cache decision here, when the session ends (or at Session::EndProfiling). A second "
        "session of the process given the same path writes PATH with .1, .2 ... before the extension.",
        {"xla_trace_to"}},
       StringFlag(&Flags::trace_to)},
      {{"trace_max_events", "int", "1000000",
        "At most this many trace events per session; later ones are dropped and one 'trace truncated' event "
        "marks the cut.", {}},
       Int64Flag(&Flags::trace_max_events, "trace_max_events", 1)},
      {{"dump_to", "string", "",
        "Dump directory (as --xla_dump_to): per input signature the IR after each pass, clustering decisions, "
        "a Graphviz .dot of the clustered graph, and per compiled cluster its fusion plan, LLVM IR before and "
        "after optimization and the assembly (CPU) or PTX (GPU), indexed by manifest.json.",
        {"xla_dump_to"}},
       StringFlag(&Flags::dump_to)},
      {{"dump_pass_re", "string", ".*",
        "Dump the IR only after passes whose name matches this regular expression (as "
        "--xla_dump_hlo_pass_re).", {"xla_dump_hlo_pass_re"}},
       Custom([](const Flags& f) { return f.dump_pass_re; },
       [](Flags& f, absl::string_view v, bool has) -> absl::Status {
         if (!has) return BadValue("dump_pass_re", v, "a regular expression");
         try {
           std::regex re{std::string(v)};
         } catch (const std::regex_error&) {
           return BadValue("dump_pass_re", v, "a valid (ECMAScript) regular expression");
         }
         f.dump_pass_re = std::string(v);
         return absl::OkStatus();
       })},
      {{"dump_after", "string", "",
        "Comma-separated pass names (`cjit opt --list`): dump the IR after each of them to --dump_to, whatever "
        "--dump_pass_re says (as LLVM's -print-after).", {}},
       StringFlag(&Flags::dump_after)},
      {{"disable_passes", "string", "",
        "Comma-separated pass names (`cjit opt --list`) the specialization pipeline skips (as "
        "--xla_disable_hlo_passes); for bisecting a miscompile or a slowdown.", {"xla_disable_hlo_passes"}},
       StringFlag(&Flags::disable_passes)},
      {{"enable_nvtx_ranges", "bool", "false",
        "NVTX ranges around every traced event, named as the trace events (as TF_ENABLE_NVTX_RANGES); they "
        "reach Nsight Systems when it is attached and cost nothing otherwise.", {}},
       BoolFlag(&Flags::enable_nvtx_ranges, "enable_nvtx_ranges")},
      {{"nvtx_detailed", "bool", "false", "NVTX range and trace event names carry input shapes.", {}},
       BoolFlag(&Flags::nvtx_detailed, "nvtx_detailed")},
      {{"fail_compilation_for_testing", "string", "",
        "Test hook: every compilation fails with this message, so clusters run on the fallback path.", {}},
       StringFlag(&Flags::fail_compilation_for_testing)},
      {{"v", "int", "0", "Global VLOG verbosity (as TF_CPP_MAX_VLOG_LEVEL).", {}},
       IntFlag(&Flags::v, "v", 0, 100)},
      {{"vmodule", "string", "",
        "Per-file VLOG levels, FILE=N,FILE2=M (FILE without extension, globs allowed; as "
        "TF_CPP_VMODULE).",
        {}},
       Custom([](const Flags& f) { return f.vmodule; },
       [](Flags& f, absl::string_view v, bool has) -> absl::Status {
         if (!has) return BadValue("vmodule", v, "FILE=N[,FILE=N...]");
         if (!v.empty()) {
           for (absl::string_view item : absl::StrSplit(v, ',')) {
             std::vector<absl::string_view> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
             int level;
             if (kv.size() != 2 || kv[0].empty() || !absl::SimpleAtoi(kv[1], &level) || level < 0) {
               return BadValue("vmodule", v, "FILE=N[,FILE=N...]");
             }
           }
         }
         f.vmodule = std::string(v);
         return absl::OkStatus();
       })},
      {{"stderrthreshold", "int", "1",
        "Log messages at or above this severity go to stderr: 0 INFO, 1 WARNING, 2 ERROR.", {}},
       IntFlag(&Flags::stderrthreshold, "stderrthreshold", 0, 3)},
  };
  return *table;
}

const FlagDef* FindFlag(absl::string_view name) {
  for (const FlagDef& def : Table()) {
    if (def.info.name == name) return &def;
    for (const std::string& alias : def.info.aliases) {
      if (alias == name) return &def;
    }
  }
  return nullptr;
}

// Splits on whitespace, honouring '...' and "..." quotes anywhere in a token.
absl::StatusOr<std::vector<std::string>> Tokenize(absl::string_view text, absl::string_view source) {
  std::vector<std::string> tokens;
  std::string cur;
  bool in_token = false;
  char quote = 0;
  for (char c : text) {
    if (quote) {
      if (c == quote) {
        quote = 0;
      } else {
        cur.push_back(c);
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_token = true;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      if (in_token) tokens.push_back(std::move(cur));
      cur.clear();
      in_token = false;
    } else {
      cur.push_back(c);
      in_token = true;
    }
  }
  if (quote) {
    return absl::InvalidArgumentError(absl::StrCat("unterminated quote in ", source));
  }
  if (in_token) tokens.push_back(std::move(cur));
  return tokens;
}

// `from_file`: the text came from a flags file; then errors never echo what did not parse (a flags "file"
// may be any file — /etc/shadow was once passed as one), only token positions and known flag names.
absl::Status ParseInto(absl::string_view text, absl::string_view source, int depth, Flags& flags, bool from_file) {
  if (depth > 8) {
    return absl::InvalidArgumentError(absl::StrCat("flag files nested too deep at ", source));
  }
  auto tokens = Tokenize(text, source);
  if (!tokens.ok()) return tokens.status();
  int index = 0;
  for (const std::string& token : *tokens) {
    ++index;
    std::string where = from_file ? absl::StrCat(source, ", token ", index) : std::string(source);
    if (token.empty() || token[0] != '-') {
      // A flags file: a regular file of at most 1 MiB, so /dev/zero or a FIFO cannot hang or exhaust us.
      absl::StatusOr<std::string> contents = ReadRegularFile(token, int64_t{1} << 20, "flags file");
      if (!contents.ok()) {
        if (from_file) {
          return absl::InvalidArgumentError(absl::StrCat(
              "in ", where, ": not a flag (--name=value), and not the name of a readable flags file"));
        }
        return absl::InvalidArgumentError(absl::StrCat("in ", source, ": '", token,
                                                       "' does not start with '-' so it names a flags file, but: ",
                                                       contents.status().message()));
      }
      absl::Status st = ParseInto(*contents, token, depth + 1, flags, true);
      if (!st.ok()) return st;
      continue;
    }
    absl::string_view body = token;
    body.remove_prefix(body.size() > 1 && body[1] == '-' ? 2 : 1);
    size_t eq = body.find('=');
    absl::string_view name = body.substr(0, eq);
    bool has_value = eq != absl::string_view::npos;
    absl::string_view value = has_value ? body.substr(eq + 1) : absl::string_view();
    const FlagDef* def = FindFlag(name);
    if (def == nullptr && absl::StartsWith(name, "tf_xla_")) def = FindFlag(name.substr(7));
    if (def == nullptr) {
      if (from_file) {
        return absl::InvalidArgumentError(absl::StrCat("unknown flag in ", where, "; `cjit flags` lists every flag"));
      }
      std::string nearest = NearestFlag(name);
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown flag --", name, " in ", source,
          nearest.empty() ? "" : absl::StrCat(" (did you mean --", nearest, "?)"),
          "; `cjit flags` lists every flag"));
    }
    if (!has_value && def->info.type != "bool" && def->info.type != "bool|auto") {
      return absl::InvalidArgumentError(
          absl::StrCat("flag --", def->info.name, " in ", where, " needs a value (--", def->info.name, "=...)"));
    }
    absl::Status st = def->access.set(flags, value, has_value);
    if (!st.ok()) {
      if (from_file) {
        return absl::InvalidArgumentError(absl::StrCat("bad value for flag --", def->info.name, " in ", where));
      }
      return absl::InvalidArgumentError(absl::StrCat(st.message(), " (in ", source, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string CodeChangingFlagText(const Flags& flags) {
  std::string text;
  for (const FlagDef& def : Table()) {
    if (def.info.changes_code) absl::StrAppend(&text, text.empty() ? "" : " ", def.info.name, "=", def.access.get(flags));
  }
  return text;
}

namespace {

// A flag's current value as the text its setter accepts (for validating a Flags struct filled in code).
std::string FlagValueText(const Flags& f, absl::string_view name) {
  for (const FlagDef& def : Table()) {
    if (def.info.name == name) return def.access.get(f);
  }
  return std::string();
}

}  // namespace

absl::Status ValidateFlags(const Flags& flags, absl::string_view source) {
  for (const FlagDef& def : Table()) {
    Flags scratch = flags;
    std::string text = FlagValueText(flags, def.info.name);
    absl::Status st = def.access.set(scratch, text, true);
    if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat(st.message(), " (in ", source, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> GetFlag(const Flags& flags, absl::string_view name) {
  const FlagDef* def = FindFlag(name);
  if (def == nullptr && absl::StartsWith(name, "tf_xla_")) def = FindFlag(name.substr(7));
  if (def == nullptr) {
    std::string nearest = NearestFlag(name);
    return absl::NotFoundError(absl::StrCat("unknown flag --", name,
                                            nearest.empty() ? "" : absl::StrCat(" (did you mean --", nearest, "?)")));
  }
  return FlagValueText(flags, def->info.name);
}

absl::Status SetFlag(Flags& flags, absl::string_view name, absl::string_view value, absl::string_view source) {
  const FlagDef* def = FindFlag(name);
  if (def == nullptr && absl::StartsWith(name, "tf_xla_")) def = FindFlag(name.substr(7));
  if (def == nullptr) {
    std::string nearest = NearestFlag(name);
    return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " in ", source,
                                                   nearest.empty() ? "" : absl::StrCat(" (did you mean --", nearest, "?)"),
                                                   "; `cjit flags` lists every flag"));
  }
  Flags scratch = flags;
  if (scratch.intra_op_threads <= 0) scratch.intra_op_threads = DefaultThreads();
  absl::Status st = def->access.set(scratch, value, true);
  if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat(st.message(), " (in ", source, ")"));
  flags = scratch;
  return absl::OkStatus();
}

absl::StatusOr<Flags> ParseFlags(absl::string_view text, const Flags& base, absl::string_view source) {
  Flags flags = base;
  if (flags.intra_op_threads <= 0) flags.intra_op_threads = DefaultThreads();
  absl::Status st = ParseInto(text, source, 0, flags, false);
  if (!st.ok()) return st;
  return flags;
}

std::string TfMixedPrecisionFlagText(const std::function<const char*(const char*)>& getenv_fn) {
  std::string tf;
  if (const char* e = getenv_fn("TF_ENABLE_AUTO_MIXED_PRECISION"); e != nullptr && *e != '\0') {
    absl::StrAppend(&tf, " --auto_mixed_precision=", e);
  }
  for (const char* list : {"ALLOWLIST", "INFERLIST", "DENYLIST", "CLEARLIST"}) {
    for (const char* action : {"ADD", "REMOVE"}) {
      std::string var = absl::StrCat("TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_", list, "_", action);
      if (const char* e = getenv_fn(var.c_str()); e != nullptr && *e != '\0') {
        absl::StrAppend(&tf, " --amp_", absl::AsciiStrToLower(list), "_", absl::AsciiStrToLower(action), "=", e);
      }
    }
  }
  if (const char* e = getenv_fn("TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_LOG_PATH"); e != nullptr && *e != '\0') {
    absl::StrAppend(&tf, " --amp_log_path=", e);
  }
  // Tensor-op math for float32 (TensorFlow guide §7.1): enabling means TF32-class precision ("high").
  auto is_one = [&](const char* var) {
    const char* e = getenv_fn(var);
    return e != nullptr && std::string_view(e) == "1";
  };
  if (is_one("TF_ENABLE_CUBLAS_TENSOR_OP_MATH_FP32")) absl::StrAppend(&tf, " --matmul_precision=high");
  if (is_one("TF_DISABLE_CUBLAS_TENSOR_OP_MATH")) absl::StrAppend(&tf, " --matmul_precision=highest");
  if (is_one("TF_ENABLE_CUDNN_TENSOR_OP_MATH_FP32")) absl::StrAppend(&tf, " --conv_precision=high");
  if (is_one("TF_DISABLE_CUDNN_TENSOR_OP_MATH")) absl::StrAppend(&tf, " --conv_precision=highest");
  // TensorFlow's autotuning threshold (executions before an op is tuned).
  if (const char* e = getenv_fn("TF_AUTOTUNE_THRESHOLD"); e != nullptr && *e != '\0') {
    absl::StrAppend(&tf, " --autotune_threshold=", e);
  }
  return tf;
}

const absl::StatusOr<Flags>& FlagsFromEnvironment() {
  static const absl::StatusOr<Flags>* flags = [] {
    const char* env = std::getenv("CJIT_FLAGS");
    // TensorFlow's mixed-precision variables map onto the AMP flags; CJIT_FLAGS, parsed after, wins.
    std::string tf = TfMixedPrecisionFlagText([](const char* v) { return std::getenv(v); });
    if (!tf.empty()) {
      absl::StatusOr<Flags> base = ParseFlags(tf, Flags{}, "TF_*_MIXED_PRECISION variables");
      if (!base.ok()) return new absl::StatusOr<Flags>(base.status());
      return new absl::StatusOr<Flags>(ParseFlags(env ? env : "", *base, "CJIT_FLAGS"));
    }
    return new absl::StatusOr<Flags>(ParseFlags(env ? env : "", Flags{}, "CJIT_FLAGS"));
  }();
  return *flags;
}

std::vector<std::pair<std::string, std::string>> OpListFlagValues(const Flags& flags) {
  Table();  // builds the table, which registers the op-list flags
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, field] : OpListFields()) out.emplace_back(name, flags.*field);
  return out;
}

std::vector<FlagInfo> ListFlags() {
  std::vector<FlagInfo> out;
  for (const FlagDef& def : Table()) out.push_back(def.info);
  return out;
}

std::string NearestFlag(absl::string_view name) {
  if (absl::StartsWith(name, "tf_xla_")) name.remove_prefix(7);
  std::vector<std::string> names;
  for (const FlagDef& def : Table()) names.push_back(def.info.name);
  return NearestName(name, names);
}

bool AsyncCompilationEnabled(const Flags& flags) {
  switch (flags.async_compilation) {
    case Flags::AsyncCompilation::kTrue: return true;
    case Flags::AsyncCompilation::kFalse: return false;
    case Flags::AsyncCompilation::kAuto: break;
  }
  // --enable_lazy_compilation=false asks for compiled code from the first execution: no fallback runs.
  return flags.enable_lazy_compilation && flags.intra_op_threads > 0 &&
         (flags.intra_op_threads < UsableCpus() || flags.intra_op_threads >= 2);
}

bool LendsCpuToCompiles(const Flags& flags) {
  return flags.async_compilation == Flags::AsyncCompilation::kAuto && AsyncCompilationEnabled(flags) &&
         flags.intra_op_threads >= UsableCpus() && flags.intra_op_threads >= 2;
}

int UsableCpus() {
  static const int cpus = [] {
    int n = 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) n = CPU_COUNT(&set);
    if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
    // A cgroup v2 CPU quota ("max 100000" = none, "200000 100000" = 2 CPUs), as container runtimes set it.
    std::ifstream f("/sys/fs/cgroup/cpu.max");
    std::string quota, period;
    if (f >> quota >> period && quota != "max") {
      double q = 0, p = 0;
      if (absl::SimpleAtod(quota, &q) && absl::SimpleAtod(period, &p) && q > 0 && p > 0) {
        n = std::min(n, std::max(1, static_cast<int>(std::ceil(q / p))));
      }
    }
    return std::max(1, n);
  }();
  return cpus;
}

}  // namespace cjit
