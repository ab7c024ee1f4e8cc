// A process-wide cache of what a kernel derives from a node's attributes alone (TfIdfVectorizer's pool
// tables, RegexFullMatch's compiled pattern), keyed by the attributes' content so that two nodes or sessions
// with the same attributes share one entry, and a run does not rebuild it. Bounded: when `capacity` entries
// are held the next insertion starts afresh (entries in use stay alive through their shared_ptr).
//
// Thread-safety: GetOrBuild may be called from any thread; `build` runs outside the lock (two threads that
// miss together may both build; one result is kept). Entries are immutable (shared_ptr<const T>).
#ifndef CJIT_RUNTIME_CPU_ATTRIBUTE_CACHE_H_
#define CJIT_RUNTIME_CPU_ATTRIBUTE_CACHE_H_

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "base/mutex.h"

namespace cjit {

template <typename T>
class AttributeCache {
 public:
  explicit AttributeCache(size_t capacity) : capacity_(capacity) {}

  // The entry of `key`, or build() (an absl::StatusOr<std::shared_ptr<const T>>) kept under it; build's
  // error is returned and nothing is kept.
  template <typename Build>
  absl::StatusOr<std::shared_ptr<const T>> GetOrBuild(std::string key, Build&& build) {
    {
      MutexLock lock(&mu_);
      if (auto it = entries_.find(key); it != entries_.end()) return it->second;
    }
    absl::StatusOr<std::shared_ptr<const T>> built = build();
    if (!built.ok()) return built.status();
    MutexLock lock(&mu_);
    if (entries_.size() >= capacity_) entries_.clear();
    return entries_.emplace(std::move(key), *std::move(built)).first->second;
  }

 private:
  const size_t capacity_;
  Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const T>> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cjit

#endif  // CJIT_RUNTIME_CPU_ATTRIBUTE_CACHE_H_
