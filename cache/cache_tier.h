// One tier of the persistent cache of compiled code, PTX and autotuning results (docs/caching.md): bytes by
// (CacheKey, PayloadKind). DiskCache (a directory of one host) and RemoteCache (a fleet's Redis) implement
// it; TieredCache (cache/tiered_cache.h) is the one lookup chain over them. The in-process tiers in front
// (the memory cache of executables, the autotuner's process table) hold live objects, not bytes, and stay
// with their owners.
//
// Thread-safety: implementations are safe to call concurrently.
#ifndef CJIT_CACHE_CACHE_TIER_H_
#define CJIT_CACHE_CACHE_TIER_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "cache/cache_key.h"
#include "cache/payload_kind.h"

namespace cjit {

class CacheTier {
 public:
  virtual ~CacheTier() = default;
  // "disk", "remote": for logs, traces and stats.
  virtual const char* tier_name() const = 0;
  // The payload of a valid entry of `kind` under `key`, or nullopt (a miss, a rejected entry, a tier that
  // is not answering). Never an error: a tier that fails is a miss.
  virtual std::optional<std::string> Get(const CacheKey& key, PayloadKind kind) = 0;
  // Writes an entry (the remote tier queues it and returns OK). `copy_of_hit`: a hit of a farther tier
  // kept here (the disk tier skips its fsync). An error names what could not be written.
  virtual absl::Status Put(const CacheKey& key, PayloadKind kind, absl::string_view payload, bool copy_of_hit) = 0;
};

}  // namespace cjit

#endif  // CJIT_CACHE_CACHE_TIER_H_
