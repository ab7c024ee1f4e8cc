#include "compiler/passes/pipeline.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/logging.h"
#include "base/nearest_name.h"
#include "base/status_macros.h"
#include "compiler/ir/verifier.h"
#include "compiler/passes/decompose.h"
#include "compiler/passes/layout.h"
#include "compiler/passes/simplify.h"

namespace cjit {
namespace {

// Adapters to the one pass signature.
template <typename F>
std::function<absl::StatusOr<bool>(Graph&, PassContext&)> Changed(F f) {
  return [f](Graph& g, PassContext&) -> absl::StatusOr<bool> { return f(g); };
}

template <typename F>
std::function<absl::StatusOr<bool>(Graph&, PassContext&)> CountChanged(F f) {
  return [f](Graph& g, PassContext&) -> absl::StatusOr<bool> {
    CJIT_ASSIGN_OR_RETURN(int n, f(g));
    return n > 0;
  };
}

bool Cpu(const PassContext& c) { return !c.gpu; }

std::vector<Pass> MakePipeline() {
  std::vector<Pass> p;
  p.push_back({"decompose_layer_norm",
               "LayerNormalization as its ONNX function body (clustered: one row kernel with its neighbours)",
               false,
               [](const PassContext& c) { return c.gpu || c.clustering.mode != ClusteringMode::kOff; },
               Changed(DecomposeLayerNormalization)});
  p.push_back({"simplify", "no-op removal, constant folding into Conv, CSE, GroupNorm fusion, dead nodes", true,
               [](const PassContext&) { return true; },
               [](Graph& g, PassContext&) -> absl::StatusOr<bool> {
                 CJIT_RETURN_IF_ERROR(SimplifyGraph(g));
                 return true;  // (its sub-passes do not report changes; verified every time)
               }});
  p.push_back({"auto_mixed_precision", "float32 -> bfloat16/float16 by op lists (--auto_mixed_precision)", false,
               [](const PassContext& c) { return c.flags->auto_mixed_precision != "off"; },
               [](Graph& g, PassContext& c) -> absl::StatusOr<bool> {
                 CJIT_RETURN_IF_ERROR(RunAutoMixedPrecision(g, *c.flags, c.gpu, c.amp_rule, c.sig));
                 return true;
               }});
  p.push_back({"matmul_precision", "the cjit_precision attribute of MatMul/Gemm/Conv (--matmul_precision)", false,
               [](const PassContext& c) {
                 return c.flags->matmul_precision != "highest" || c.flags->conv_precision != "highest";
               },
               [](Graph& g, PassContext& c) -> absl::StatusOr<bool> {
                 ApplyMatmulPrecision(g, *c.flags);
                 return false;  // attributes only
               }});
  p.push_back({"fuse_transpose_into_matmul", "a Transpose of a MatMul operand into the FusedMatMul's flags", true,
               Cpu, Changed(FuseTransposeIntoMatMul)});
  p.push_back({"fold_pad_into_conv", "a constant-mode Pad into the next Conv's pads (NCHW)", true, Cpu,
               CountChanged(FoldPadIntoConv)});
  p.push_back({"channels_last_layout", "channels-last regions around convolutions, transpose pairs cancelled", true,
               [](const PassContext& c) { return Cpu(c) && c.flags->cpu_channels_last; },
               [](Graph& g, PassContext& c) -> absl::StatusOr<bool> {
                 CJIT_ASSIGN_OR_RETURN(c.channels_last, AssignChannelsLastLayout(g));
                 if (c.channels_last) CJIT_RETURN_IF_ERROR(RemoveNoOps(g).status());
                 return c.channels_last;
               }});
  // Again after the layout pass (which moves a tf2onnx model's Pad next to its channels-last Conv), before
  // the pointwise-depthwise fusion (a Pad between the two would keep them apart).
  p.push_back({"fold_pad_into_conv_channels_last", "fold_pad_into_conv after the layout pass", true,
               [](const PassContext& c) { return Cpu(c) && c.channels_last; }, CountChanged(FoldPadIntoConv)});
  p.push_back({"fuse_pointwise_depthwise", "a 1x1 Conv feeding a depthwise Conv as one channels-last op", true,
               [](const PassContext& c) { return c.channels_last && c.flags->cpu_fuse_pointwise_depthwise; },
               CountChanged(FusePointwiseDepthwise)});
  p.push_back({"mark_for_compilation", "auto-clustering: fusible ops into cjit.Cluster nodes", true,
               [](const PassContext& c) { return c.clustering.mode != ClusteringMode::kOff; },
               [](Graph& g, PassContext& c) -> absl::StatusOr<bool> {
                 ClusteringOptions options = c.clustering;
                 options.quantize_ops = !c.gpu;
                 CJIT_ASSIGN_OR_RETURN(ClusteringReport r, MarkForCompilation(g, options));
                 const bool changed = !r.clusters.empty();
                 if (c.clustering_report != nullptr) *c.clustering_report = std::move(r);
                 return changed;
               }});
  return p;
}

std::set<std::string> NameSet(const std::string& list) {
  std::set<std::string> out;
  for (absl::string_view n : absl::StrSplit(list, ',', absl::SkipWhitespace())) out.insert(std::string(n));
  return out;
}

}  // namespace

const std::vector<Pass>& SpecializationPipeline() {
  static const std::vector<Pass>* pipeline = new std::vector<Pass>(MakePipeline());
  return *pipeline;
}

const Pass* FindPass(absl::string_view name) {
  for (const Pass& p : SpecializationPipeline()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::vector<std::string> PassNames() {
  std::vector<std::string> out;
  for (const Pass& p : SpecializationPipeline()) out.push_back(p.name);
  return out;
}

absl::Status CheckPassNames(const std::vector<std::string>& names, absl::string_view what) {
  for (const std::string& n : names) {
    if (FindPass(n) != nullptr) continue;
    const std::string near = NearestName(n, PassNames());
    return absl::InvalidArgumentError(absl::StrCat(what, ": unknown pass '", n, "'",
                                                   near.empty() ? "" : absl::StrCat(" (did you mean '", near, "'?)"),
                                                   "; the passes: ", absl::StrJoin(PassNames(), ", ")));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> RunPasses(Graph& graph, const std::vector<const Pass*>& passes,
                                                   PassContext& context, const PassHooks& hooks,
                                                   const std::set<std::string>& disabled, bool only_if_applies) {
  if (context.flags == nullptr) return absl::InvalidArgumentError("RunPasses: the context has no flags");
  std::vector<std::string> ran;
  for (const Pass* pass : passes) {
    if (disabled.count(pass->name)) {
      CJIT_VLOG(1) << "pass " << pass->name << ": disabled (--disable_passes)";
      continue;
    }
    if (only_if_applies && !pass->applies(context)) continue;
    bool changed = false;
    auto run = [&]() -> absl::Status {
      CJIT_ASSIGN_OR_RETURN(changed, pass->run(graph, context));
      if (changed) {
        absl::Status verified = VerifyGraph(graph);
        if (!verified.ok()) {
          return absl::Status(verified.code(), absl::StrCat("after pass ", pass->name, ": ", verified.message()));
        }
      }
      return absl::OkStatus();
    };
    CJIT_RETURN_IF_ERROR(hooks.around ? hooks.around(*pass, run) : run());
    CJIT_VLOG(2) << "pass " << pass->name << (changed ? ": changed the graph" : ": no change");
    ran.push_back(pass->name);
    if (hooks.after) hooks.after(*pass, graph, changed);
  }
  return ran;
}

absl::StatusOr<std::vector<std::string>> RunSpecializationPipeline(Graph& graph, PassContext& context,
                                                                   const PassHooks& hooks) {
  if (context.flags == nullptr) return absl::InvalidArgumentError("RunPasses: the context has no flags");
  std::vector<const Pass*> all;
  for (const Pass& p : SpecializationPipeline()) all.push_back(&p);
  return RunPasses(graph, all, context, hooks, NameSet(context.flags->disable_passes));
}

}  // namespace cjit
