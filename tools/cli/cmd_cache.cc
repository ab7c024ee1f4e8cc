// `cjit cache`: inspect or maintain a persistent cache directory.
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

int CmdCache(const std::string& action, const std::string& dir, int64_t max_bytes) {
  if (action == "clear") {
    auto n = DiskCache::Clear(dir);
    if (!n.ok()) return Fail(n.status());
    std::printf("removed %lld files from %s\n", static_cast<long long>(*n), dir.c_str());
    return 0;
  }
  if (action == "prune") {
    if (max_bytes < 0) return Fail(absl::InvalidArgumentError("cache prune needs --max-bytes N"), 2);
    auto n = DiskCache::Prune(dir, max_bytes);
    if (!n.ok()) return Fail(n.status());
    std::printf("evicted %lld entries (least recently used first) to stay under %lld bytes\n",
                static_cast<long long>(*n), static_cast<long long>(max_bytes));
    return 0;
  }
  auto entries = DiskCache::List(dir);
  if (!entries.ok()) return Fail(entries.status());
  int64_t total = 0, bad = 0;
  for (const auto& e : *entries) {
    total += e.bytes;
    bad += !e.ok;
  }
  if (action == "ls") {
    for (const auto& e : *entries) {
      const char* kind = e.payload_kind == kAutotunePayloadKind ? "autotune"
                         : e.payload_kind == CpuExecutable::kPayloadKind ? "cpu-code"
                                                                         : "gpu-code";
      std::printf("%s %8lld bytes  %-9s %s%s\n", e.file.c_str(), static_cast<long long>(e.bytes), e.ok ? kind : "",
                  e.ok ? "ok" : "BAD: ", e.ok ? "" : e.problem.c_str());
    }
  } else if (action == "verify") {
    for (const auto& e : *entries) {
      if (!e.ok) std::printf("BAD %s: %s\n", e.file.c_str(), e.problem.c_str());
    }
    std::printf("%zu entries, %lld bad\n", entries->size(), static_cast<long long>(bad));
    return bad ? 1 : 0;
  } else if (action == "stats") {
    std::printf("{\"dir\": \"%s\", \"entries\": %zu, \"bytes\": %lld, \"bad\": %lld}\n", dir.c_str(), entries->size(),
                static_cast<long long>(total), static_cast<long long>(bad));
  } else {
    return Fail(absl::InvalidArgumentError("cache action must be ls, stats, verify, clear or prune"), 2);
  }
  return 0;
}

}  // namespace cjit
