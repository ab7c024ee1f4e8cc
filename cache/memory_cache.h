// The in-memory cache of compiled clusters: key -> entry, bounded in bytes with least-recently-used
// eviction. Entries are shared (std::shared_ptr), so an evicted entry stays alive while a run uses it.
// Lookups compare the full canonical key text, so a hash collision is a miss, never a wrong entry.
//
// Thread-safety: every method is safe to call concurrently.
#ifndef CJIT_CACHE_MEMORY_CACHE_H_
#define CJIT_CACHE_MEMORY_CACHE_H_

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "cache/cache_key.h"
#include "base/mutex.h"

namespace cjit {

class CacheEntry {
 public:
  virtual ~CacheEntry() = default;
  virtual size_t bytes() const = 0;
};

class MemoryCache {
 public:
  // 256 MiB by default: entries are counted by CacheEntry::bytes() (code and an estimate of what an entry
  // keeps alive); a service that sees ever new shapes keeps the most recent executables within it.
  explicit MemoryCache(size_t max_bytes = size_t{256} << 20) : max_bytes_(max_bytes) {}

  std::shared_ptr<const CacheEntry> Lookup(const CacheKey& key);
  void Insert(const CacheKey& key, std::shared_ptr<const CacheEntry> entry);
  size_t size() const;
  size_t bytes() const;

 private:
  struct Item {
    CacheKey key;
    std::shared_ptr<const CacheEntry> entry;
  };
  mutable Mutex mu_;
  size_t max_bytes_;
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::list<Item> lru_ ABSL_GUARDED_BY(mu_);  // front = most recent
  std::unordered_multimap<uint64_t, std::list<Item>::iterator> index_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cjit

#endif  // CJIT_CACHE_MEMORY_CACHE_H_
