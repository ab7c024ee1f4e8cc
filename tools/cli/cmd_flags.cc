// `cjit flags`: every CJIT_FLAGS flag.
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

int CmdFlags() {
  std::printf("CJIT_FLAGS: whitespace-separated --name=value (TF_XLA_FLAGS grammar); --tf_xla_NAME is an alias.\n\n");
  for (const FlagInfo& f : ListFlags()) {
    std::printf("--%s (%s, default %s)\n    %s\n", f.name.c_str(), f.type.c_str(), f.default_value.c_str(),
                f.help.c_str());
    for (const std::string& a : f.aliases) std::printf("    alias: --%s\n", a.c_str());
  }
  return 0;
}

}  // namespace cjit
