// `cjit opt FILE [--passes a,b]`: runs pipeline passes (compiler/passes/pipeline.h) on a textual IR file
// (compiler/ir/text.h) and prints the result, as LLVM's `opt`.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "compiler/ir/text.h"
#include "compiler/passes/pipeline.h"
#include "runtime/session.h"
#include "tools/cli/commands.h"

namespace cjit {

int CmdOpt(const std::string& file, const std::string& passes, const std::string& flags_text, bool gpu, bool list,
           bool print_after_all) {
  if (list) {
    for (const Pass& p : SpecializationPipeline()) {
      std::printf("%-34s %s%s\n", p.name.c_str(), p.summary.c_str(), p.reads_dims ? " [reads dims]" : "");
    }
    return 0;
  }
  std::stringstream text;
  if (file == "-") {
    text << std::cin.rdbuf();
  } else {
    std::ifstream in(file);
    if (!in) {
      std::fprintf(stderr, "cjit opt: cannot read %s\n", file.c_str());
      return 2;
    }
    text << in.rdbuf();
  }
  absl::StatusOr<Flags> flags = ParseFlags(flags_text, Flags{}, "--flags");
  if (!flags.ok()) {
    std::fprintf(stderr, "cjit opt: %s\n", std::string(flags.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<Graph>> graph = ParseGraph(text.str());
  if (!graph.ok()) {
    std::fprintf(stderr, "cjit opt: %s: %s\n", file.c_str(), std::string(graph.status().message()).c_str());
    return 2;
  }
  std::vector<const Pass*> selected;
  for (absl::string_view name : absl::StrSplit(passes, ',', absl::SkipWhitespace())) {
    absl::Status known = CheckPassNames({std::string(name)}, "--passes");
    if (!known.ok()) {
      std::fprintf(stderr, "cjit opt: %s\n", std::string(known.message()).c_str());
      return 2;
    }
    selected.push_back(FindPass(name));
  }
  const bool whole_pipeline = selected.empty();
  if (whole_pipeline) {
    for (const Pass& p : SpecializationPipeline()) selected.push_back(&p);
  }
  PassContext ctx;
  ctx.flags = &*flags;
  ctx.gpu = gpu;
  ctx.clustering = ClusteringOptionsFor(*flags, /*session_default=*/true);
  ClusteringReport report;
  ctx.clustering_report = &report;
  PassHooks hooks;
  if (print_after_all) {
    hooks.after = [](const Pass& pass, const Graph& g, bool changed) {
      std::printf("// after %s%s\n%s\n", pass.name.c_str(), changed ? "" : " (no change)", PrintGraph(g).c_str());
    };
  }
  absl::StatusOr<std::vector<std::string>> ran = RunPasses(**graph, selected, ctx, hooks, {}, whole_pipeline);
  if (!ran.ok()) {
    std::fprintf(stderr, "cjit opt: %s\n", std::string(ran.status().message()).c_str());
    return 1;
  }
  if (!print_after_all) std::printf("%s", PrintGraph(**graph).c_str());
  return 0;
}

}  // namespace cjit
