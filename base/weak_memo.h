// A process-wide memo of values derived from live objects, keyed by the object (and whatever else names
// the derivation), that never keeps an object alive: each entry holds a weak reference to its source and
// counts only while that source is the same live object — a freed object's address may be reused by a new
// one, whose lookup then finds an expired entry and starts afresh. Entries of freed sources are swept when
// the memo has doubled since the last sweep (at least 256 entries).
//
// Used for a session's constants: their content digests (cache/cache_key.cc), the constants derived from
// them by passes (compiler/ir/constant_memo.h) and converted copies of constant kernel inputs
// (runtime/cpu/kernel.h).
//
// Thread-safety: every call may come from any thread; `fn` runs under the memo's one mutex (a
// Mutex, which ThreadSanitizer sees).
#ifndef CJIT_BASE_WEAK_MEMO_H_
#define CJIT_BASE_WEAK_MEMO_H_

#include <algorithm>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include "base/mutex.h"

namespace cjit {

template <typename Key, typename Source, typename Value>
class WeakMemo {
 public:
  // Runs fn(value&) on the entry of `key` whose source is `source` (a value-initialized Value when there is
  // none, or when the entry's source is another or a freed object) and returns what fn returns.
  template <typename Fn>
  auto With(const Key& key, const std::shared_ptr<Source>& source, Fn&& fn) {
    MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second.source.lock() != source) {
      if (it != entries_.end()) entries_.erase(it);
      if (entries_.size() >= sweep_at_) {
        for (auto e = entries_.begin(); e != entries_.end();) {
          e = e->second.source.expired() ? entries_.erase(e) : std::next(e);
        }
        sweep_at_ = std::max<size_t>(256, 2 * entries_.size());
      }
      it = entries_.emplace(key, Entry{source, Value{}}).first;
    }
    return fn(it->second.value);
  }

 private:
  struct Entry {
    std::weak_ptr<Source> source;
    Value value;
  };
  Mutex mu_;
  std::map<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
  size_t sweep_at_ ABSL_GUARDED_BY(mu_) = 256;
};

}  // namespace cjit

#endif  // CJIT_BASE_WEAK_MEMO_H_
