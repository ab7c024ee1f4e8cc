// The lookup chain of the persistent cache (docs/caching.md): the local disk tier, then the fleet-shared
// remote tier (--remote_cache) when there is one. A lookup asks each tier in order; a hit of a farther tier
// is written to the nearer ones (the next process on the host finds it on disk). A store writes every tier
// (the remote one write-behind). --persistent_cache_read_only holds for the whole chain: nothing is
// written anywhere, and no lease is taken. Compile once per fleet: after a miss, AcquireFleetLease asks the
// remote tier's lease (cache/remote_cache.h).
//
// Thread-safety: every method may be called concurrently.
#ifndef CJIT_CACHE_TIERED_CACHE_H_
#define CJIT_CACHE_TIERED_CACHE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/cache_tier.h"
#include "cache/disk_cache.h"
#include "cache/remote_cache.h"

namespace cjit {

class TieredCache {
 public:
  // Opens the disk tier (errors as DiskCache::Open's) with `remote` behind it (may be null).
  static absl::StatusOr<std::unique_ptr<TieredCache>> Open(const DiskCacheOptions& disk,
                                                          std::shared_ptr<RemoteCache> remote = nullptr);

  // The payload of a valid entry, nearest tier first, or nullopt. `tier` (optional) is set to the tier
  // that answered ("disk", "remote"), or "" on a miss.
  std::optional<std::string> Lookup(const CacheKey& key, PayloadKind kind, const char** tier = nullptr);
  // Writes every tier (nothing when read-only). The disk tier's error is returned (the remote write is
  // queued and never fails here); the chain stays consistent either way.
  absl::Status Store(const CacheKey& key, PayloadKind kind, absl::string_view payload);

  // Asked after a Lookup missed: kProduce: this process produces the entry, Stores it, then calls
  // ReleaseFleetLease; kWait: another process of the fleet is producing it (run without it, Lookup again
  // later); kFound: it appeared meanwhile and is in the disk tier now (Lookup hits). Without a remote tier,
  // or read-only, always kProduce.
  enum class FleetLease { kProduce, kWait, kFound };
  FleetLease AcquireFleetLease(const CacheKey& key, PayloadKind kind);
  void ReleaseFleetLease(const CacheKey& key, PayloadKind kind);

  bool read_only() const { return read_only_; }
  DiskCache* disk() const { return disk_.get(); }
  RemoteCache* remote() const { return remote_.get(); }
  // The tiers in lookup order.
  const std::vector<CacheTier*>& tiers() const { return tiers_; }
  // Hits of a farther tier (the remote one) served by this chain.
  int64_t far_hits() const { return far_hits_.load(); }

 private:
  TieredCache() = default;
  std::shared_ptr<DiskCache> disk_;
  std::shared_ptr<RemoteCache> remote_;
  std::vector<CacheTier*> tiers_;
  bool read_only_ = false;
  std::atomic<int64_t> far_hits_{0};
};

}  // namespace cjit

#endif  // CJIT_CACHE_TIERED_CACHE_H_
