// `cjit amp-check`: automatic mixed precision against float32.
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

int CmdAmpCheck(const std::string& dir, double rtol, double atol, const std::string& low) {
  if (!std::isfinite(rtol) || !std::isfinite(atol) || rtol < 0 || atol < 0) {
    return Fail(absl::InvalidArgumentError("--rtol and --atol must be finite and >= 0"), 2);
  }
  Flags base = *FlagsFromEnvironment();
  base.auto_jit = "-1";
  base.auto_mixed_precision = "off";
  SessionOptions o32;
  o32.use_environment_flags = false;
  o32.flags = base;
  auto s32 = Session::Load(dir + "/model.onnx", o32);
  if (!s32.ok()) return LoadFailure(s32.status());
  auto sets = ReadDataSets(dir, **s32);
  if (!sets.ok()) return Fail(sets.status());
  if (sets->empty()) return Fail(absl::NotFoundError("no test_data_set_* in " + dir));
  std::vector<std::vector<NamedTensor>> ref;
  for (const DataSet& set : *sets) {
    auto out = (*s32)->Run(set.inputs);
    if (!out.ok()) return Fail(out.status());
    ref.push_back(std::move(*out));
  }
  std::mutex mu;
  std::map<std::string, std::string> paintable;  // node name -> op type (seen by the rule hook)
  struct Trial {
    bool ok = true;
    std::map<std::string, std::pair<double, double>> worst;  // output -> max abs, max rel
  };
  auto trial = [&](const std::set<std::string>& deny_nodes, const std::string& deny_ops) -> absl::StatusOr<Trial> {
    SessionOptions o;
    o.use_environment_flags = false;
    o.flags = base;
    o.flags.auto_mixed_precision = low;
    o.flags.amp_denylist_add = deny_ops;
    o.amp_rule = [&, deny_nodes](const Node& n) -> std::optional<AmpRule> {
      {
        std::lock_guard<std::mutex> lock(mu);
        paintable[n.name] = n.op_type;
      }
      if (deny_nodes.count(n.name)) return AmpRule{AmpClass::kDeny, DType::kF32, DType::kInvalid};
      return std::nullopt;
    };
    CJIT_ASSIGN_OR_RETURN(auto s, Session::Load(dir + "/model.onnx", o));
    Trial t;
    for (size_t k = 0; k < sets->size(); ++k) {
      CJIT_ASSIGN_OR_RETURN(auto out, s->Run((*sets)[k].inputs));
      for (size_t i = 0; i < out.size(); ++i) {
        OutputComparison c = CompareTensors(out[i].name, out[i].tensor, ref[k][i].tensor, rtol, atol);
        if (!c.problem.empty()) return absl::InternalError(absl::StrCat(out[i].name, ": ", c.problem));
        auto& w = t.worst[out[i].name];
        w.first = std::max(w.first, c.max_abs);
        w.second = std::max(w.second, c.max_rel);
        t.ok = t.ok && c.ok;
      }
    }
    return t;
  };
  auto first = trial({}, "");
  if (!first.ok()) return Fail(first.status());
  std::printf("auto mixed precision (%s) vs float32 over %zu data sets (rtol %g, atol %g):\n", low.c_str(),
              sets->size(), rtol, atol);
  for (const auto& [name, w] : first->worst) {
    std::printf("  %s: max_abs %.3g max_rel %.3g\n", name.c_str(), w.first, w.second);
  }
  if (first->ok) {
    std::printf("PASS: within tolerance\n");
    return 0;
  }
  std::set<std::string> all;
  for (const auto& [name, op] : paintable) all.insert(name);
  auto passes = [&](const std::set<std::string>& deny) -> bool {
    auto t = trial(deny, "");
    return t.ok() && t->ok;
  };
  if (!passes(all)) {
    std::printf("FAIL: the error exceeds the tolerance even with every convertible node float32\n");
    return 1;
  }
  // Bisection (delta debugging by halves): drop chunks of the deny set while accuracy holds.
  std::vector<std::string> keep(all.begin(), all.end());
  int trials = 2;
  for (size_t chunk = std::max<size_t>(1, keep.size() / 2);; chunk = std::max<size_t>(1, chunk / 2)) {
    for (size_t i = 0; i < keep.size();) {
      std::set<std::string> without;
      for (size_t j = 0; j < keep.size(); ++j) {
        if (j < i || j >= i + chunk) without.insert(keep[j]);
      }
      ++trials;
      if (passes(without)) keep.assign(without.begin(), without.end());
      else i += chunk;
    }
    if (chunk == 1) break;
  }
  std::set<std::string> ops;
  for (const std::string& n : keep) ops.insert(paintable[n]);
  const std::string op_list = absl::StrJoin(ops, ",");
  std::printf("nodes to keep float32 (%zu of %zu convertible, %d trials): %s\n", keep.size(), all.size(), trials,
              absl::StrJoin(keep, " ").c_str());
  auto with_ops = trial({}, op_list);
  const bool restored = with_ops.ok() && with_ops->ok;
  std::printf("deny-list additions: --amp_denylist_add=%s (TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_DENYLIST_ADD=%s)\n",
              op_list.c_str(), op_list.c_str());
  if (with_ops.ok()) {
    for (const auto& [name, w] : with_ops->worst) {
      std::printf("  with them: %s: max_abs %.3g max_rel %.3g\n", name.c_str(), w.first, w.second);
    }
  }
  std::printf("%s\n", restored ? "PASS with the deny-list additions"
                               : "the op-type additions do not restore it: deny the nodes above with a host rule "
                                 "(SessionOptions::amp_rule)");
  return restored ? 0 : 1;
}

}  // namespace cjit
