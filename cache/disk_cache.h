// The persistent compilation cache (DESIGN.md "Cache"; --persistent_cache_dir): one file per entry,
//   magic "CJITCCH1" | u32 disk format version | u32 payload kind | u64 key length | u64 payload length |
//   u64 checksum (XXH3 of key bytes + payload bytes) | key bytes (the full canonical key) | payload
// named <key hash>.cjit. Writes go to a temporary file in the same directory, are flushed (fsync) and
// renamed into place, so a reader never sees a partial entry and many processes may write the same key.
// A read that finds bad magic, another format version, a different key, a bad checksum, a truncated or
// unreadable file ignores the entry, removes it (unless read-only), counts it in `rejects` and logs it
// once at WARNING (saying whether it was removed) — never trusted, never fatal. The directory may be shared
// with untrusted users (docs/security.md): entries are opened with O_NOFOLLOW and O_NONBLOCK, only regular
// files of bounded size are read, temporary files are created with mkstemp (unpredictable, exclusive) and
// the lock file is never followed through a symlink. Entries hold machine code, so only files owned by
// this user (or root) are read: an entry written by another user is ignored (a miss, logged once), never
// loaded — the checksum detects corruption, file ownership is what authenticates the writer. Temporary files older than
// an hour (their writer died) are removed when a cache is opened writable, and by prune. With max_bytes > 0 the
// directory is kept under that size by least-recently-used eviction (a hit refreshes the entry's mtime), under an
// advisory lock (flock on DIR/.lock) so that concurrent processes evict consistently.
//
// Thread-safety: all methods may be called concurrently, also from several processes.
#ifndef CJIT_CACHE_DISK_CACHE_H_
#define CJIT_CACHE_DISK_CACHE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cache/cache_key.h"
#include "cache/cache_tier.h"
#include "cache/payload_kind.h"

namespace cjit {

// Bump when the file layout changes.
inline constexpr uint32_t kDiskFormatVersion = 1;
inline constexpr char kDiskMagic[8] = {'C', 'J', 'I', 'T', 'C', 'C', 'H', '1'};

struct DiskCacheOptions {
  std::string dir;
  bool read_only = false;
  int64_t max_bytes = 0;  // 0 = unbounded
  // Entries are compiled machine code: only files owned by this user id (or root) are read; an entry
  // another user planted in a shared directory is a miss, never loaded (docs/security.md). -1 = the
  // process's effective uid (set otherwise only by tests).
  int64_t trusted_uid = -1;
};

struct DiskCacheStats {
  int64_t hits = 0, misses = 0, writes = 0, rejects = 0, evictions = 0, write_errors = 0;
};

// The disk tier (cache/cache_tier.h); TieredCache puts the remote tier behind it.
class DiskCache : public CacheTier {
 public:
  // Creates the directory if missing (unless read-only). Errors name the directory.
  static absl::StatusOr<std::unique_ptr<DiskCache>> Open(const DiskCacheOptions& options);

  // The payload of a valid entry for `key` with `payload_kind`, or nullopt (miss or rejected entry).
  std::optional<std::string> Lookup(const CacheKey& key, PayloadKind payload_kind);
  // Writes an entry (nothing when read-only). An I/O error (disk full, file too large, permissions) is
  // returned after cleaning up the temporary file; the cache stays consistent. `durable`: fsync before the
  // rename; copies of remote hits skip it (on the first run's critical path, ~1 ms per entry here): a copy
  // lost or torn by a crash is a miss or a checksum reject, fetched again.
  absl::Status Store(const CacheKey& key, PayloadKind payload_kind, absl::string_view payload, bool durable = true);

  // CacheTier.
  const char* tier_name() const override { return "disk"; }
  std::optional<std::string> Get(const CacheKey& key, PayloadKind kind) override { return Lookup(key, kind); }
  absl::Status Put(const CacheKey& key, PayloadKind kind, absl::string_view payload, bool copy_of_hit) override {
    return Store(key, kind, payload, /*durable=*/!copy_of_hit);
  }

  DiskCacheStats stats() const;
  const DiskCacheOptions& options() const { return options_; }

  // --- directory maintenance (`cjit cache`) ---
  struct EntryInfo {
    std::string file;
    int64_t bytes = 0;
    int64_t mtime = 0;      // seconds since the epoch
    bool ok = false;
    std::string problem;    // why the entry is bad
    std::string key_head;   // first line of the key's target/flags, for display
    uint32_t payload_kind = 0;
  };
  static absl::StatusOr<std::vector<EntryInfo>> List(const std::string& dir, int64_t trusted_uid = -1);
  // Evicts least-recently-used entries until the directory holds at most max_bytes.
  static absl::StatusOr<int64_t> Prune(const std::string& dir, int64_t max_bytes);
  // Removes every entry (and stray temporary files); returns how many files were removed, or an error
  // (PermissionDenied) when some could not be removed. List reports temporary files as bad entries.
  static absl::StatusOr<int64_t> Clear(const std::string& dir);

  // Parses and checks one entry's bytes; on success returns the payload and fills kind / key text.
  static absl::StatusOr<std::string> Decode(absl::string_view bytes, std::string* key_text, uint32_t* payload_kind);
  static std::string Encode(const CacheKey& key, PayloadKind payload_kind, absl::string_view payload);

 private:
  explicit DiskCache(DiskCacheOptions options) : options_(std::move(options)) {}
  std::string PathFor(const CacheKey& key) const;
  void Reject(const std::string& path, absl::string_view why);

  DiskCacheOptions options_;
  mutable std::atomic<int64_t> hits_{0}, misses_{0}, writes_{0}, rejects_{0}, evictions_{0}, write_errors_{0};
};

}  // namespace cjit

#endif  // CJIT_CACHE_DISK_CACHE_H_
