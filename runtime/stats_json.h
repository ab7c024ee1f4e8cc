// The session's counters (runtime/session.h SessionStats) as JSON pieces, one definition for every place
// that reports them: `cjit run --stats-json` and the C API's cjit_session_stats_json.
#ifndef CJIT_RUNTIME_STATS_JSON_H_
#define CJIT_RUNTIME_STATS_JSON_H_

#include "cache/remote_cache.h"
#include "nlohmann/json.hpp"
#include "runtime/session.h"

namespace cjit {

inline nlohmann::json ClusterCountersJson(const ClusterStatsSnapshot& c) {
  return {{"compiles", c.compiles},
          {"compile_ms", c.compile_ms},
          {"fallback_executions", c.fallback_executions},
          {"compiled_executions", c.compiled_executions},
          {"memory_hits", c.memory_hits},
          {"disk_hits", c.disk_hits},
          {"disk_writes", c.disk_writes},
          {"disk_rejects", c.disk_rejects},
          {"polymorphic_hits", c.polymorphic_hits},
          {"code_bytes", c.code_bytes},
          {"fused_kernels", c.fused_kernels}};
}

inline nlohmann::json AutotuneCountersJson(const AutotuneStatsSnapshot& a) {
  return {{"ops_tuned", a.ops_tuned},     {"candidates_timed", a.candidates_timed},
          {"candidates_rejected", a.candidates_rejected}, {"tuning_ms", a.tuning_ms},
          {"memory_hits", a.memory_hits}, {"disk_hits", a.disk_hits},
          {"file_hits", a.file_hits},     {"ignored_entries", a.ignored_entries},
          {"lease_waits", a.lease_waits}};
}

// Adds "remote_cache" to `j` when the session uses the fleet-shared tier.
inline void AddRemoteCacheJson(const SessionStats& s, nlohmann::json& j) {
  if (!s.remote_enabled) return;
  for (const auto& [name, value] : RemoteCacheStatsFields(s.remote)) j["remote_cache"][name] = value;
}

}  // namespace cjit

#endif  // CJIT_RUNTIME_STATS_JSON_H_
