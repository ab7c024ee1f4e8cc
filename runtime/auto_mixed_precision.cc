#include "runtime/auto_mixed_precision.h"

#include <mutex>

#include "absl/strings/str_cat.h"
#include "compiler/ir/cpu_isa.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "compiler/ir/text.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "base/logging.h"

namespace cjit {
namespace {

std::set<std::string> Ops(const std::string& list) {
  std::set<std::string> out;
  for (absl::string_view op : absl::StrSplit(list, ',', absl::SkipEmpty())) out.insert(std::string(op));
  return out;
}

}  // namespace

void ApplyMatmulPrecision(Graph& graph, const Flags& flags) {
  if (flags.matmul_precision == "highest" && flags.conv_precision == "highest") return;
  for (const auto& n : graph.nodes()) {
    if (!n->domain.empty() || n->input(0) == nullptr || n->input(0)->dtype != DType::kF32) continue;
    const bool mm = n->op_type == "MatMul" || n->op_type == "Gemm";
    const bool conv = n->op_type == "Conv";
    const std::string& p = mm ? flags.matmul_precision : flags.conv_precision;
    if ((!mm && !conv) || p == "highest") continue;
    Attribute a;
    a.kind = Attribute::Kind::kString;
    a.s = p;
    n->attrs["cjit_precision"] = a;
  }
}

AmpOptions AmpOptionsFromFlags(const Flags& f, bool on_gpu, bool* enabled) {
  AmpOptions o;
  *enabled = f.auto_mixed_precision != "off";
  o.low = f.auto_mixed_precision == "float16" || (f.auto_mixed_precision == "auto" && on_gpu) ? DType::kF16
                                                                                              : DType::kBF16;
  o.allow_add = Ops(f.amp_allowlist_add);
  o.allow_remove = Ops(f.amp_allowlist_remove);
  o.infer_add = Ops(f.amp_inferlist_add);
  o.infer_remove = Ops(f.amp_inferlist_remove);
  o.deny_add = Ops(f.amp_denylist_add);
  o.deny_remove = Ops(f.amp_denylist_remove);
  o.clear_add = Ops(f.amp_clearlist_add);
  o.clear_remove = Ops(f.amp_clearlist_remove);
  o.min_allow_macs = on_gpu ? 0 : f.amp_min_allow_macs;
  return o;
}

std::string AmpMissingCpuIsa(const std::string& mode, DType* low) {
  const bool bf16 = CpuHasAvx512Bf16();  // AMX-BF16 CPUs have it too (cpu_isa.h's levels)
  const bool fp16 = CpuHasAvx512Fp16();
  if (mode == "auto") {
    if (bf16) {
      *low = DType::kBF16;
      return "";
    }
    if (fp16) {
      *low = DType::kF16;
      return "";
    }
    return "neither AVX512_BF16 / AMX-BF16 nor AVX512_FP16";
  }
  *low = mode == "float16" ? DType::kF16 : DType::kBF16;
  if (*low == DType::kBF16) return bf16 ? "" : "no AVX512_BF16 or AMX-BF16";
  return fp16 ? "" : "no AVX512_FP16";
}

absl::Status RunAutoMixedPrecision(Graph& graph, const Flags& flags, bool on_gpu, const AmpRuleHook& hook, int sig) {
  bool enabled = false;
  AmpOptions o = AmpOptionsFromFlags(flags, on_gpu, &enabled);
  if (!enabled) return absl::OkStatus();
  if (!on_gpu && flags.amp_require_native_isa) {
    DType low = o.low;
    const std::string missing = AmpMissingCpuIsa(flags.auto_mixed_precision, &low);
    if (!missing.empty()) {
      static std::once_flag warned;
      std::call_once(warned, [&] {
        CJIT_LOG(WARNING) << "--auto_mixed_precision=" << flags.auto_mixed_precision << ": this CPU has " << missing
                          << " instructions (within --max_cpu_isa=" << flags.max_cpu_isa
                          << "); emulated 16-bit arithmetic is slower than float32, so the model runs in float32 "
                             "(--amp_require_native_isa=false rewrites anyway)";
      });
      return absl::OkStatus();
    }
    o.low = low;
  }
  o.hook = hook;
  const std::string before = flags.amp_log_path.empty() ? std::string() : PrintGraph(graph);
  CJIT_ASSIGN_OR_RETURN(AmpReport r, AutoMixedPrecision(graph, o));
  for (const AmpDecision& d : r.decisions) {
    CJIT_VLOG(2) << "auto_mixed_precision: " << d.node << " (" << d.op_type << "): " << AmpClassName(d.list_class)
                 << " -> " << (d.low ? DTypeName(o.low) : "f32") << " (" << d.reason << ")";
  }
  for (const std::string& w : r.out_of_range) {
    CJIT_LOG(WARNING) << "auto_mixed_precision: float16 would not hold " << w << " (kept float32, not clamped)";
  }
  CJIT_VLOG(1) << "auto_mixed_precision (" << DTypeName(o.low) << "): " << r.converted << " of "
               << r.decisions.size() << " float nodes converted, " << r.casts << " casts, " << r.constants
               << " constants converted";
  if (!flags.amp_log_path.empty()) {
    const std::string base = absl::StrCat(flags.amp_log_path, "/amp_", sig < 0 ? 0 : sig);
    std::string lists = absl::StrCat("# low type: ", DTypeName(o.low), "\n");
    for (AmpClass c : {AmpClass::kAllow, AmpClass::kInfer, AmpClass::kDeny, AmpClass::kClear}) {
      absl::StrAppend(&lists, AmpClassName(c), "list: ", absl::StrJoin(AmpListInEffect(c, o), ","), "\n");
    }
    absl::StrAppend(&lists, "# decisions: node, op, list, dtype, reason\n");
    for (const AmpDecision& d : r.decisions) {
      absl::StrAppend(&lists, d.node, "\t", d.op_type, "\t", AmpClassName(d.list_class), "\t",
                      d.low ? DTypeName(o.low) : "f32", "\t", d.reason, "\n");
    }
    CJIT_RETURN_IF_ERROR(WriteFileAtomically(base + "_before.txt", before));
    CJIT_RETURN_IF_ERROR(WriteFileAtomically(base + "_after.txt", PrintGraph(graph)));
    CJIT_RETURN_IF_ERROR(WriteFileAtomically(base + "_lists.txt", lists));
  }
  return absl::OkStatus();
}

}  // namespace cjit
