#include "cache/memory_cache.h"
#include "base/mutex.h"

namespace cjit {

std::shared_ptr<const CacheEntry> MemoryCache::Lookup(const CacheKey& key) {
  MutexLock lock(&mu_);
  auto [lo, hi] = index_.equal_range(key.hash);
  for (auto it = lo; it != hi; ++it) {
    if (it->second->key.canonical == key.canonical) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->entry;
    }
  }
  return nullptr;
}

void MemoryCache::Insert(const CacheKey& key, std::shared_ptr<const CacheEntry> entry) {
  MutexLock lock(&mu_);
  auto [lo, hi] = index_.equal_range(key.hash);
  for (auto it = lo; it != hi; ++it) {
    if (it->second->key.canonical == key.canonical) return;  // first insert wins
  }
  bytes_ += entry->bytes();
  lru_.push_front(Item{key, std::move(entry)});
  index_.emplace(key.hash, lru_.begin());
  while (bytes_ > max_bytes_ && lru_.size() > 1) {
    auto last = std::prev(lru_.end());
    auto [a, b] = index_.equal_range(last->key.hash);
    for (auto it = a; it != b; ++it) {
      if (it->second == last) {
        index_.erase(it);
        break;
      }
    }
    bytes_ -= last->entry->bytes();
    lru_.erase(last);
  }
}

size_t MemoryCache::size() const {
  MutexLock lock(&mu_);
  return lru_.size();
}

size_t MemoryCache::bytes() const {
  MutexLock lock(&mu_);
  return bytes_;
}

}  // namespace cjit
