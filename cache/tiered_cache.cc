#include "cache/tiered_cache.h"

#include "base/logging.h"
#include "base/status_macros.h"

namespace cjit {

absl::StatusOr<std::unique_ptr<TieredCache>> TieredCache::Open(const DiskCacheOptions& disk,
                                                               std::shared_ptr<RemoteCache> remote) {
  std::unique_ptr<TieredCache> c(new TieredCache());
  CJIT_ASSIGN_OR_RETURN(std::unique_ptr<DiskCache> d, DiskCache::Open(disk));
  c->disk_ = std::move(d);
  c->remote_ = std::move(remote);
  c->read_only_ = disk.read_only;
  c->tiers_.push_back(c->disk_.get());
  if (c->remote_) c->tiers_.push_back(c->remote_.get());
  return c;
}

std::optional<std::string> TieredCache::Lookup(const CacheKey& key, PayloadKind kind, const char** tier) {
  if (tier != nullptr) *tier = "";
  for (size_t i = 0; i < tiers_.size(); ++i) {
    std::optional<std::string> payload = tiers_[i]->Get(key, kind);
    if (!payload) continue;
    if (tier != nullptr) *tier = tiers_[i]->tier_name();
    if (i > 0) {
      ++far_hits_;
      for (size_t j = 0; j < i && !read_only_; ++j) {
        absl::Status st = tiers_[j]->Put(key, kind, *payload, /*copy_of_hit=*/true);
        if (!st.ok()) CJIT_VLOG(1) << "persistent cache: keeping a " << tiers_[i]->tier_name() << " hit in the "
                                   << tiers_[j]->tier_name() << " tier: " << st;
      }
    }
    return payload;
  }
  return std::nullopt;
}

absl::Status TieredCache::Store(const CacheKey& key, PayloadKind kind, absl::string_view payload) {
  if (read_only_) return absl::OkStatus();  // a read-only host (a serving fleet's) publishes nothing
  absl::Status first;
  for (CacheTier* t : tiers_) {
    absl::Status st = t->Put(key, kind, payload, /*copy_of_hit=*/false);
    if (first.ok()) first = st;
  }
  return first;
}

TieredCache::FleetLease TieredCache::AcquireFleetLease(const CacheKey& key, PayloadKind kind) {
  if (remote_ == nullptr || read_only_) return FleetLease::kProduce;
  switch (remote_->TryLease(key, kind)) {
    case RemoteCache::Lease::kHeld:
      return FleetLease::kWait;
    case RemoteCache::Lease::kUnavailable:
      return FleetLease::kProduce;
    case RemoteCache::Lease::kAcquired:
      break;
  }
  // The holder before us may have published and released between our miss and our lease.
  std::optional<std::string> payload = remote_->Lookup(key, kind, /*use_index=*/false);
  if (!payload) return FleetLease::kProduce;
  remote_->ReleaseLease(key, kind);
  ++far_hits_;
  if (absl::Status st = disk_->Put(key, kind, *payload, /*copy_of_hit=*/true); !st.ok()) {
    CJIT_VLOG(1) << "persistent cache: keeping a remote hit on disk: " << st;
    return FleetLease::kProduce;  // not on disk: produce it after all
  }
  return FleetLease::kFound;
}

void TieredCache::ReleaseFleetLease(const CacheKey& key, PayloadKind kind) {
  if (remote_ != nullptr && !read_only_) remote_->ReleaseLease(key, kind);
}

}  // namespace cjit
