#include "runtime/compile_policy.h"
#include "base/mutex.h"

namespace cjit {

CompilePolicy::Decision CompilePolicy::OnExecution(const std::string& cluster, const std::string& signature,
                                                   std::string* reason) {
  MutexLock lock(&mu_);
  State& s = clusters_[cluster];
  ++s.executions;
  auto fallback = [&](const char* why) {
    if (reason) *reason = why;
    return Decision::kFallback;
  };
  if (options_.always_defer) return fallback("--always_defer_compilation");
  if (s.failed) return fallback("an earlier compilation of this cluster failed");
  if (s.too_slow) return fallback("an earlier compilation exceeded --compile_time_cutoff_s");
  if (s.compiles > 10 && s.executions < 50LL * s.compiles) return fallback("megamorphic cluster");
  int64_t& runs = options_.threshold_per_structure ? s.structure_fallback_runs : s.fallback_runs[signature];
  if (options_.lazy && runs < options_.compile_threshold) {
    ++runs;
    return fallback("below --compile_threshold");
  }
  return Decision::kCompile;
}

bool CompilePolicy::BeginCompile(const std::string& cluster) {
  MutexLock lock(&mu_);
  State& s = clusters_[cluster];
  if (s.compiling) return false;
  s.compiling = true;
  return true;
}

void CompilePolicy::AbandonCompile(const std::string& cluster) {
  MutexLock lock(&mu_);
  clusters_[cluster].compiling = false;
}

void CompilePolicy::RecordCompile(const std::string& cluster, double seconds, bool ok) {
  MutexLock lock(&mu_);
  State& s = clusters_[cluster];
  s.compiling = false;
  ++s.compiles;
  if (!ok) s.failed = true;
  else s.compiled_ok = true;
  if (seconds > options_.compile_time_cutoff_s) s.too_slow = true;
}

bool CompilePolicy::HasCompiled(const std::string& cluster) {
  MutexLock lock(&mu_);
  auto it = clusters_.find(cluster);
  return it != clusters_.end() && it->second.compiled_ok && !it->second.failed;
}

bool CompilePolicy::MayRunWithoutCodegen(const std::string& cluster) {
  MutexLock lock(&mu_);
  auto it = clusters_.find(cluster);
  return it == clusters_.end() || (!it->second.needs_codegen && !it->second.failed);
}

void CompilePolicy::RecordNeedsCodegen(const std::string& cluster) {
  MutexLock lock(&mu_);
  clusters_[cluster].needs_codegen = true;
}

void CompilePolicy::RecordCompiledExecution(const std::string& cluster) {
  MutexLock lock(&mu_);
  ++clusters_[cluster].executions;
}

}  // namespace cjit
