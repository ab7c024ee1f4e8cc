// `cjit compile`: PTX for a GPU target without a GPU.
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

int CmdCompile(const std::string& model, const std::vector<std::string>& input_args,
               const std::vector<std::string>& shape_args, const std::string& target_arg, const std::string& dump_to) {
  auto session = Session::Load(model);
  if (!session.ok()) return LoadFailure(session.status());
  auto inputs = PrepareInputs(**session, input_args, shape_args);
  if (!inputs.ok()) return Fail(inputs.status(), 2);
  auto graph = (*session)->SpecializeAndCluster(*inputs, nullptr);
  if (!graph.ok()) return Fail(graph.status());
  std::string target = target_arg;
  if (target.empty()) target = (*session)->flags().gpu_arch.empty() ? "sm_80" : (*session)->flags().gpu_arch;
  std::error_code ec;
  std::filesystem::create_directories(dump_to, ec);
  if (ec) return Fail(absl::InvalidArgumentError(absl::StrCat("cannot create ", dump_to, ": ", ec.message())), 2);
  int written = 0;
  for (const auto& node : (*graph)->nodes()) {
    if (node->op_type != kClusterOp) continue;
    const Graph* body = node->GetGraph("body");
    FusionPlanOptions gpu;  // as the GPU runtime plans clusters: Conv epilogues stay fused kernels
    gpu.conv_post_ops = false;
    auto plan = BuildFusionPlan(*body, gpu);
    if (!plan.ok()) return Fail(plan.status());
    PtxOptions po;
    po.gpu_arch = target;
    po.libdevice = LibdevicePath((*session)->flags().cuda_data_dir);
    auto ptx = CompileForNvptx(*plan, po);
    if (!ptx.ok()) return Fail(ptx.status(), ptx.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1);
    std::string path = absl::StrCat(dump_to, "/cluster_", node->GetInt("cluster_id", 0), ".", target, ".ptx");
    std::ofstream f(path);
    f << ptx->ptx;
    if (!f) return Fail(absl::InternalError("cannot write " + path));
    int library = 0;
    for (const auto& st : plan->steps) library += st.kind == PlanStep::Kind::kLibrary;
    std::printf("%s: %zu kernels (%d library steps run by cuBLASLt/cuDNN/fallback kernels, not in the PTX)\n",
                path.c_str(), ptx->kernels.size(), library);
    ++written;
  }
  std::printf("%d clusters compiled for %s\n", written, target.c_str());
  return 0;
}

}  // namespace cjit
