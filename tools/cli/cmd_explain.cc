// `cjit explain`: clusters and placement for one input signature.
#include "tools/cli/commands.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <thread>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "CLI/CLI.hpp"
#include "base/status_macros.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "absl/strings/str_join.h"
#include "compiler/passes/mark_for_compilation.h"
#include "cache/disk_cache.h"
#include "compiler/codegen/fusion_plan.h"
#include "compiler/codegen/nvptx_compiler.h"
#include "runtime/dump.h"
#include "runtime/executable.h"
#include "runtime/profiler.h"
#include "runtime/session.h"
#include "compiler/ir/text.h"
#include "runtime/cuda/gpu_executor.h"
#include "tools/check_lib.h"
#include "tools/quant_check.h"

#include "tools/cli/cli_common.h"

namespace cjit {

int CmdExplain(const std::string& model, const std::vector<std::string>& input_args,
               const std::vector<std::string>& shape_args, bool print_graph, bool gpu_placement, bool dot) {
  auto session = Session::Load(model);
  if (!session.ok()) return LoadFailure(session.status());
  auto inputs = PrepareInputs(**session, input_args, shape_args);
  if (!inputs.ok()) return Fail(inputs.status(), 2);
  if (dot) {
    // Only the Graphviz text on stdout, so `cjit explain --dot MODEL | dot -Tsvg > g.svg` works.
    auto graph = (*session)->SpecializeAndCluster(*inputs, nullptr);
    if (!graph.ok()) return Fail(graph.status());
    std::printf("%s", GraphToDot(**graph).c_str());
    return 0;
  }
  if (print_graph) {
    auto graph = (*session)->SpecializeAndCluster(*inputs, nullptr);
    if (!graph.ok()) return Fail(graph.status());
    std::printf("%s\n", PrintGraph(**graph).c_str());
  }
  if (gpu_placement) {
    // The GPU executor's placement decisions for the graph a GPU session builds, made here on the host
    // backend (no GPU needed); on a GPU, cuBLASLt/cuDNN may still decline a shape, which then runs on the
    // host too.
    SessionOptions o;
    o.device_backend = MakeHostBackend();
    auto gpu_session = Session::Load(model, o);
    if (!gpu_session.ok()) return LoadFailure(gpu_session.status());
    auto graph = (*gpu_session)->SpecializeAndCluster(*inputs, nullptr);
    if (!graph.ok()) return Fail(graph.status());
    auto ex = GpuExecutor::Create(*graph, o.device_backend, {});
    if (!ex.ok()) return Fail(ex.status());
    std::printf("GPU placement: %s\n", (*ex)->placement().ToString().c_str());
  }
  auto report = (*session)->Explain(*inputs);
  if (!report.ok()) return Fail(report.status());
  std::printf("%zu clusters\n", report->clusters.size());
  std::printf("%-4s %-5s %-60s %s\n", "id", "ops", "op histogram", "inputs -> outputs");
  for (const ClusterInfo& c : report->clusters) {
    std::vector<std::string> hist;
    for (const auto& [op, n] : c.op_histogram) hist.push_back(absl::StrCat(op, ":", n));
    std::printf("%-4d %-5d %-60s %zu -> %zu (%s -> %s)\n", c.id, c.num_ops, absl::StrJoin(hist, " ").c_str(),
                c.inputs.size(), c.outputs.size(), absl::StrJoin(c.inputs, ",").c_str(),
                absl::StrJoin(c.outputs, ",").c_str());
  }
  std::printf("\n%zu nodes outside clusters:\n", report->excluded.size());
  for (const auto& [node, why] : report->excluded) std::printf("  %s: %s\n", node.c_str(), why.c_str());
  return 0;
}

}  // namespace cjit
