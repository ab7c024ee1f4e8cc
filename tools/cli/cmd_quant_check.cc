// `cjit quant-check`: --auto_quantize against float32 (tools/quant_check.h).
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

int CmdQuantCheck(const std::string& dir, const std::string& mode, double min_cosine) {
  QuantCheckOptions o;
  o.mode = mode;
  o.min_cosine = min_cosine;
  auto r = QuantCheck(dir, o);
  if (!r.ok()) return Fail(r.status(), 2);
  auto print = [](const char* indent, const std::vector<QuantAccuracy>& acc) {
    for (const QuantAccuracy& a : acc) {
      std::printf("%s%s: cosine %.6f  SQNR %.1f dB  max_abs %.3g\n", indent, a.output.c_str(), a.cosine, a.sqnr_db,
                  a.max_abs);
    }
  };
  std::printf("--auto_quantize=%s: %zu nodes quantized (%s)\n", mode.c_str(), r->candidates.size(),
              absl::StrJoin(r->candidates, " ").c_str());
  if (r->candidates.empty()) {
    std::printf("nothing to quantize (MatMul / Gemm / Conv with constant float32 weights of >= "
                "--auto_quantize_min_weights elements)\n");
    return 0;
  }
  std::printf("against float32:\n");
  print("  ", r->all_quantized);
  std::printf("most sensitive node (bisection): %s; quantized alone:\n", r->most_sensitive.c_str());
  print("  ", r->most_sensitive_alone);
  if (r->ok) {
    std::printf("PASS: cosine >= %g on every output (%d sessions)\n", min_cosine, r->trials);
    return 0;
  }
  std::printf("nodes to keep float32 (%zu of %zu, %d sessions): --auto_quantize_denylist_nodes=%s\n",
              r->keep_float.size(), r->candidates.size(), r->trials, absl::StrJoin(r->keep_float, ",").c_str());
  print("  with them: ", r->with_keep_float);
  std::printf("%s\n", r->restored ? "PASS with the deny list" : "FAIL: the deny list does not restore it");
  return r->restored ? 0 : 1;
}

}  // namespace cjit
