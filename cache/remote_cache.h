// The fleet-shared cache tier on Redis (--remote_cache; docs/caching.md): compiled CPU code and autotuning
// results that one host produced are found by the others, behind the local disk cache (memory -> disk ->
// remote; a verified remote hit is written to the disk tier).
//
// Entries are signed. The Redis value of an entry is
//   magic "CJITRMT1" | key id (8 bytes: the first 8 bytes of SHA-256 of the signing key) |
//   HMAC-SHA256(signing key, redis key name | entry) (32 bytes) | entry (DiskCache::Encode: the full
//   canonical cache key, payload kind, XXH3 checksum, payload)
// under the Redis key "cjit:<key hash hex>:<payload kind>". A read verifies the MAC with the key of that id
// (several keys may be given: rotation; the first signs), decodes the entry and checks that its canonical
// key and payload kind are the ones asked for: an entry tampered with, truncated, signed with another key,
// or a valid entry stored under another key is rejected (logged once, counted) and never loaded. Compiled
// code from a shared store is a code-execution path: without a key file the tier is not used.
//
// The key file (--remote_cache_key_file) holds one key per line (at least 16 bytes each); it must be owned
// by this user and not readable or writable by group or others (as ssh requires of private keys).
//
// Availability: reads wait at most --remote_cache_timeout_ms (connect and reply); writes are write-behind on
// one background thread through a bounded queue (a run never waits for one; a full queue drops the write,
// counted). After 3 consecutive errors the tier is skipped for a back-off period (5 s, doubling up to
// 60 s; logged once per period, counted), so a dead server costs a run nothing noticeable.
//
// Compile once per fleet: a process that misses takes a short lease on the entry's key (SET NX PX under
// "cjit-lease:<key hash hex>:<payload kind>", its value a token of this process) before it compiles or
// tunes; another process that misses the same key while the lease is held is told to wait (it runs its
// fallback path, or the default algorithm, and looks again on its next execution) until the entry appears
// or the lease expires (--remote_cache_lease_ms: a holder that died delays the others by at most that).
// The holder's release is queued behind its entry's write on the same connection, so the entry is in Redis
// before the lease is gone; a release deletes the lease only if it still holds this process's token. A
// lease without an expiry or with more time left than lease_ms was not set by this fleet's processes
// (with equal flags): it is ignored (logged), so a writer to the server cannot stop compilation.
//
// Thread-safety: every method may be called from any thread. One RemoteCache per (URL, key file) per
// process (Shared); destroying the last reference flushes queued writes for up to 2 s.
#ifndef CJIT_CACHE_REMOTE_CACHE_H_
#define CJIT_CACHE_REMOTE_CACHE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cache/cache_key.h"
#include "cache/cache_tier.h"
#include "cache/payload_kind.h"

namespace cjit {

struct RemoteCacheOptions {
  // redis://HOST[:PORT][/DB] or unix:///PATH[?db=N]
  std::string url;
  std::string key_file;
  int timeout_ms = 100;               // connect and each reply
  int64_t ttl_s = 7 * 24 * 3600;      // entry lifetime in Redis (0: no expiry)
  int64_t max_entry_bytes = 64 << 20; // larger entries are not sent
  int64_t max_queue_bytes = 256 << 20; // write-behind queue bound
  int64_t lease_ms = 15000;           // compile/tune lease lifetime; 0 = no leases
};

// The counters, listed once: reads (hits, misses, rejects, errors, skipped during back-off), write-behind
// (writes, write_errors, dropped_writes), bytes, backoffs (times the tier was switched off after repeated
// errors), leases (taken by this process) and lease_waits (misses told to wait for another process). X(name) per
// counter; the struct, the live atomics, the copy and the JSON names all expand it.
#define CJIT_REMOTE_CACHE_COUNTERS(X)                                                                    \
  X(hits) X(misses) X(rejects) X(errors) X(skipped) X(writes) X(write_errors) X(dropped_writes) X(bytes_read) \
  X(bytes_written) X(backoffs) X(leases) X(lease_waits)

struct RemoteCacheStats {
#define CJIT_REMOTE_CACHE_FIELD(name) int64_t name = 0;
  CJIT_REMOTE_CACHE_COUNTERS(CJIT_REMOTE_CACHE_FIELD)
#undef CJIT_REMOTE_CACHE_FIELD
};

// The counters by name, in a fixed order (for stats JSON).
std::vector<std::pair<const char*, int64_t>> RemoteCacheStatsFields(const RemoteCacheStats& s);

// The remote tier (cache/cache_tier.h; behind the disk tier in TieredCache).
class RemoteCache : public CacheTier {
 public:
  // Parses the URL, reads and checks the key file; does not connect (the first lookup does). Errors name
  // the flag at fault: a bad URL, a missing or unreadable key file, a key file readable by others, a key
  // shorter than 16 bytes.
  static absl::StatusOr<std::shared_ptr<RemoteCache>> Open(const RemoteCacheOptions& options);
  // The process's instance for these options (the same URL and key file share a connection and writer).
  static absl::StatusOr<std::shared_ptr<RemoteCache>> Shared(const RemoteCacheOptions& options);
  ~RemoteCache() override;
  RemoteCache(const RemoteCache&) = delete;
  RemoteCache& operator=(const RemoteCache&) = delete;

  // The payload of a verified entry for `key` and `payload_kind`, or nullopt (a miss, an error, a rejected
  // entry, or the tier in back-off). Waits at most about timeout_ms. Autotuning results are asked for only
  // when the fleet's index of them ("cjit-index:autotune", a set of key hashes written with each entry,
  // read once a second at most) lists the key, unless `use_index` is false.
  std::optional<std::string> Lookup(const CacheKey& key, PayloadKind payload_kind, bool use_index = true);
  // The lease on producing the entry (see above): kAcquired (this process produces it and calls
  // ReleaseLease after its Store), kHeld (another process does: wait), kUnavailable (leases off, the tier
  // in back-off or an error: produce it locally, as without a remote tier). Waits at most about timeout_ms.
  enum class Lease { kAcquired, kHeld, kUnavailable };
  Lease TryLease(const CacheKey& key, PayloadKind payload_kind);
  // Queues the release of a lease this process took, behind the writes queued before it (returns at once).
  void ReleaseLease(const CacheKey& key, PayloadKind payload_kind);
  // Queues a signed write (returns at once).
  void StoreAsync(const CacheKey& key, PayloadKind payload_kind, absl::string_view payload);

  // CacheTier: Lookup and StoreAsync.
  const char* tier_name() const override { return "remote"; }
  std::optional<std::string> Get(const CacheKey& key, PayloadKind kind) override { return Lookup(key, kind); }
  absl::Status Put(const CacheKey& key, PayloadKind kind, absl::string_view payload, bool /*copy_of_hit*/) override {
    StoreAsync(key, kind, payload);
    return absl::OkStatus();
  }
  // Waits until the queued writes are done or `timeout_ms` passed; true when the queue is empty.
  bool Flush(int timeout_ms);

  RemoteCacheStats stats() const;
  const RemoteCacheOptions& options() const { return options_; }

  // --- fleet maintenance (`cjit cache ls|stats|verify|push|pull --remote`): synchronous; an unreachable
  // server or an error reply is an error naming the URL (no back-off) ---
  struct EntryInfo {
    std::string redis_key;
    int64_t bytes = 0;       // the Redis value's size
    int64_t ttl_s = -1;      // seconds left; -1 = no expiry
    bool ok = false;         // the signature verifies with a key of the key file and the entry decodes
    std::string problem;     // why not
    std::string key_head;    // the canonical key's first line, for display
    uint32_t payload_kind = 0;
  };
  // Every entry under "cjit:*" (SCAN), each verified as a lookup would; with `payloads`, the payload of
  // each verified entry (index-aligned, "" for a bad one) and its canonical key text in `keys`.
  absl::StatusOr<std::vector<EntryInfo>> List(std::vector<std::string>* payloads = nullptr,
                                              std::vector<std::string>* keys = nullptr);
  // Writes one signed entry now (SET with the TTL); an error reply (e.g. maxmemory) is an error.
  absl::Status PutNow(const CacheKey& key, PayloadKind payload_kind, absl::string_view payload);

  // The Redis key and the signed value of an entry (tests and `cjit cache` tooling).
  static std::string RedisKey(const CacheKey& key, PayloadKind payload_kind);
  static std::string LeaseKey(const CacheKey& key, PayloadKind payload_kind);
  std::string SignedValue(const std::string& redis_key, const CacheKey& key, PayloadKind payload_kind,
                          absl::string_view payload) const;

  struct Impl;

 private:
  explicit RemoteCache(std::unique_ptr<Impl> impl);
  RemoteCacheOptions options_;
  std::unique_ptr<Impl> impl_;
};

// The fleet keys of a key file, first the signing key; errors as Open's. Exposed for tests.
absl::StatusOr<std::vector<std::string>> ReadRemoteCacheKeys(const std::string& path);

}  // namespace cjit

#endif  // CJIT_CACHE_REMOTE_CACHE_H_
