#include "cache/disk_cache.h"


#include <fcntl.h>
#include "base/logging.h"
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <ctime>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/mutex.h"

namespace cjit {
namespace {

namespace fs = std::filesystem;

constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8 + 8 + 8;
// No entry is larger (payloads are object code or PTX of one cluster: kilobytes); a larger file is refused
// unread, so a planted sparse multi-gigabyte file costs nothing.
constexpr int64_t kMaxEntryBytes = int64_t{256} << 20;

template <typename T>
void PutRaw(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}
template <typename T>
T GetRaw(absl::string_view in, size_t off) {
  T v;
  std::memcpy(&v, in.data() + off, sizeof(v));
  return v;
}

uint64_t Checksum(absl::string_view key, absl::string_view payload) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, key.data(), key.size());
  XXH3_64bits_update(st, payload.data(), payload.size());
  uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

// An entry's bytes, read without trusting the directory (it may be shared with other users): the final
// component is opened with O_NOFOLLOW (a planted symlink is refused, not followed) and O_NONBLOCK (a FIFO
// cannot block); only a regular file of at most kMaxEntryBytes is read. NotFound when the file is gone;
// PermissionDenied for a file owned by neither `trusted_uid` (-1: the effective uid) nor root.
absl::StatusOr<std::string> ReadEntry(const std::string& path, int64_t trusted_uid) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(err)));
    if (err == ELOOP) return absl::DataLossError("a symlink, not a cache entry (not followed)");
    return absl::DataLossError(absl::StrCat("cannot open: ", std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::DataLossError("not a regular file");
  }
  uid_t trusted = trusted_uid < 0 ? ::geteuid() : static_cast<uid_t>(trusted_uid);
  if (st.st_uid != trusted && st.st_uid != 0) {
    ::close(fd);
    return absl::PermissionDeniedError(absl::StrCat("owned by uid ", st.st_uid, ", not by this user (uid ", trusted,
                                                    ") or root: another user's machine code is never loaded"));
  }
  if (st.st_size > kMaxEntryBytes) {
    ::close(fd);
    return absl::DataLossError(absl::StrCat("has ", st.st_size, " bytes, more than the ", kMaxEntryBytes,
                                            " an entry may have (not read)"));
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (done != out.size()) return absl::DataLossError("cannot read the whole file");
  return out;
}

// Temporary files of writers that died (killed mid-write) are removed once older than this.
constexpr int64_t kOrphanAgeSeconds = 3600;

bool IsTemp(const fs::path& p) { return p.filename().string().rfind(".tmp-", 0) == 0; }

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// Writing past RLIMIT_FSIZE raises SIGXFSZ, which kills the process by default; with it ignored the
// write fails with EFBIG and the cache reports an error instead.
void IgnoreSigXfsz() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old {};
    if (sigaction(SIGXFSZ, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) signal(SIGXFSZ, SIG_IGN);
  });
}

bool IsEntry(const fs::path& p) { return p.extension() == ".cjit"; }

// The directory's lock file, never through a symlink (a planted DIR/.lock -> /elsewhere is refused, and
// its target not created).
absl::StatusOr<int> OpenLock(const std::string& dir) {
  std::string lock_path = dir + "/.lock";
  int fd = ::open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd < 0) return Errno("cannot open lock file", lock_path);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InternalError(absl::StrCat("lock file ", lock_path, " is not a regular file"));
  }
  return fd;
}

// Removes temporary files older than kOrphanAgeSeconds (their writer died); returns how many.
int64_t ReclaimOrphans(const std::string& dir) {
  int64_t removed = 0;
  std::error_code ec;
  time_t now = ::time(nullptr);
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!IsTemp(e.path())) continue;
    struct stat st {};
    if (::lstat(e.path().c_str(), &st) != 0) continue;
    if (now - st.st_mtime > kOrphanAgeSeconds && ::unlink(e.path().c_str()) == 0) ++removed;
  }
  if (removed > 0) CJIT_VLOG(1) << "persistent cache: removed " << removed << " orphaned temporary files in " << dir;
  return removed;
}

// LRU eviction under an advisory lock.
absl::StatusOr<int64_t> EvictTo(const std::string& dir, int64_t max_bytes) {
  absl::StatusOr<int> lock = OpenLock(dir);
  if (!lock.ok()) return lock.status();
  int fd = *lock;
  std::string lock_path = dir + "/.lock";
  if (flock(fd, LOCK_EX) != 0) {
    ::close(fd);
    return Errno("cannot lock", lock_path);
  }
  struct Item {
    std::string path;
    int64_t bytes;
    int64_t mtime_ns;
  };
  std::vector<Item> items;
  int64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!IsEntry(e.path())) continue;
    struct stat st {};
    if (::lstat(e.path().c_str(), &st) != 0) continue;
    items.push_back({e.path().string(), static_cast<int64_t>(st.st_size),
                     static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec});
    total += st.st_size;
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.mtime_ns < b.mtime_ns; });
  int64_t removed = 0;
  for (const Item& it : items) {
    if (total <= max_bytes) break;
    if (::unlink(it.path.c_str()) == 0) {
      total -= it.bytes;
      ++removed;
    }
  }
  flock(fd, LOCK_UN);
  ::close(fd);
  return removed;
}

}  // namespace

std::string DiskCache::Encode(const CacheKey& key, PayloadKind kind, absl::string_view payload) {
  std::string out;
  out.reserve(kHeaderBytes + key.canonical.size() + payload.size());
  out.append(kDiskMagic, 8);
  PutRaw<uint32_t>(out, kDiskFormatVersion);
  PutRaw<uint32_t>(out, static_cast<uint32_t>(kind));
  PutRaw<uint64_t>(out, key.canonical.size());
  PutRaw<uint64_t>(out, payload.size());
  PutRaw<uint64_t>(out, Checksum(key.canonical, payload));
  out.append(key.canonical);
  out.append(payload.data(), payload.size());
  return out;
}

absl::StatusOr<std::string> DiskCache::Decode(absl::string_view bytes, std::string* key_text, uint32_t* kind) {
  if (bytes.size() < kHeaderBytes) return absl::DataLossError("truncated header");
  if (std::memcmp(bytes.data(), kDiskMagic, 8) != 0) return absl::DataLossError("bad magic");
  uint32_t version = GetRaw<uint32_t>(bytes, 8);
  if (version != kDiskFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("format version ", version, " (expected ", kDiskFormatVersion, ")"));
  }
  *kind = GetRaw<uint32_t>(bytes, 12);
  uint64_t key_len = GetRaw<uint64_t>(bytes, 16), payload_len = GetRaw<uint64_t>(bytes, 24),
           sum = GetRaw<uint64_t>(bytes, 32);
  if (key_len > bytes.size() || payload_len > bytes.size() || kHeaderBytes + key_len + payload_len != bytes.size()) {
    return absl::DataLossError(absl::StrCat("truncated or oversized: header says ",
                                            kHeaderBytes + key_len + payload_len, " bytes, file has ", bytes.size()));
  }
  absl::string_view key = bytes.substr(kHeaderBytes, key_len);
  absl::string_view payload = bytes.substr(kHeaderBytes + key_len, payload_len);
  if (Checksum(key, payload) != sum) return absl::DataLossError("checksum mismatch");
  *key_text = std::string(key);
  return std::string(payload);
}

absl::StatusOr<std::unique_ptr<DiskCache>> DiskCache::Open(const DiskCacheOptions& options) {
  if (options.dir.empty()) return absl::InvalidArgumentError("persistent cache directory is empty");
  std::error_code ec;
  if (!options.read_only) fs::create_directories(options.dir, ec);
  if (!fs::is_directory(options.dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("persistent cache directory ", options.dir,
                                                   options.read_only ? " does not exist" : " cannot be created",
                                                   ec ? absl::StrCat(": ", ec.message()) : ""));
  }
  IgnoreSigXfsz();
  if (!options.read_only) ReclaimOrphans(options.dir);
  return std::unique_ptr<DiskCache>(new DiskCache(options));
}

std::string DiskCache::PathFor(const CacheKey& key) const {
  return absl::StrCat(options_.dir, "/", key.Hex(), ".cjit");
}

void DiskCache::Reject(const std::string& path, absl::string_view why) {
  ++rejects_;
  // Say what happened to the file: removed, left in place (read-only), or could not be removed.
  std::string fate = "; it will be recompiled";
  if (options_.read_only) {
    fate = " (left in place: read-only cache); it will be recompiled";
  } else if (::unlink(path.c_str()) == 0) {
    fate = " (removed; it will be recompiled)";
  } else if (errno != ENOENT) {
    fate = absl::StrCat(" (could not be removed: ", std::strerror(errno), "); it will be recompiled");
  }
  static Mutex mu;
  static std::set<std::string>* warned = new std::set<std::string>();
  MutexLock lock(&mu);
  if (warned->insert(path).second) {
    CJIT_LOG(WARNING) << "persistent cache: ignoring entry " << path << ": " << why << fate;
  }
}

std::optional<std::string> DiskCache::Lookup(const CacheKey& key, PayloadKind payload_kind) {
  std::string path = PathFor(key);
  auto bytes = ReadEntry(path, options_.trusted_uid);
  if (!bytes.ok()) {
    if (bytes.status().code() == absl::StatusCode::kNotFound) {  // no entry, or evicted meanwhile
      ++misses_;
      return std::nullopt;
    }
    if (bytes.status().code() == absl::StatusCode::kPermissionDenied) {  // another user's file: not ours to remove
      ++misses_;
      ++rejects_;
      static Mutex mu;
      static std::set<std::string>* warned = new std::set<std::string>();
      MutexLock lock(&mu);
      if (warned->insert(path).second) {
        CJIT_LOG(WARNING) << "persistent cache: ignoring entry " << path << ": " << bytes.status().message()
                          << " (left in place; it will be recompiled)";
      }
      return std::nullopt;
    }
    Reject(path, bytes.status().message());
    return std::nullopt;
  }
  std::string key_text;
  uint32_t kind = 0;
  auto payload = Decode(*bytes, &key_text, &kind);
  if (!payload.ok()) {
    Reject(path, payload.status().message());
    return std::nullopt;
  }
  if (key_text != key.canonical) {
    Reject(path, "key mismatch (hash collision or foreign entry)");
    return std::nullopt;
  }
  if (kind != static_cast<uint32_t>(payload_kind)) {
    Reject(path, absl::StrCat("payload kind ", kind, " (expected ", static_cast<uint32_t>(payload_kind), ")"));
    return std::nullopt;
  }
  if (!options_.read_only) ::utimensat(AT_FDCWD, path.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);  // LRU: refresh on hit
  ++hits_;
  return std::move(*payload);
}

absl::Status DiskCache::Store(const CacheKey& key, PayloadKind payload_kind, absl::string_view payload,
                              bool durable) {
  if (options_.read_only) return absl::OkStatus();
  std::string final_path = PathFor(key);
  // An unpredictable name created exclusively (mkstemp: O_CREAT | O_EXCL, so a planted file or symlink at
  // that name is never opened or followed), in the same directory so the rename is atomic.
  std::string tmpl = absl::StrCat(options_.dir, "/.tmp-XXXXXX");
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  std::string bytes = Encode(key, payload_kind, payload);
  int fd = ::mkostemp(name.data(), O_CLOEXEC);
  std::string tmp(name.data());
  if (fd < 0) {
    ++write_errors_;
    return Errno("cannot create", tmp);
  }
  ::fchmod(fd, 0644);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status st = Errno("cannot write", tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      ++write_errors_;
      return st;
    }
    done += static_cast<size_t>(n);
  }
  if ((durable && ::fsync(fd) != 0) || ::close(fd) != 0) {
    absl::Status st = Errno("cannot flush", tmp);
    ::unlink(tmp.c_str());
    ++write_errors_;
    return st;
  }
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    absl::Status st = Errno("cannot rename into", final_path);
    ::unlink(tmp.c_str());
    ++write_errors_;
    return st;
  }
  ++writes_;
  if (options_.max_bytes > 0) {
    auto removed = EvictTo(options_.dir, options_.max_bytes);
    if (removed.ok()) {
      evictions_ += *removed;
      if (*removed > 0) {
        CJIT_VLOG(1) << "persistent cache: evicted " << *removed << " least recently used entries to stay under "
                     << options_.max_bytes << " bytes";
      }
    }
  }
  CJIT_VLOG(2) << "persistent cache: wrote " << final_path << " (" << payload.size() << " payload bytes)";
  return absl::OkStatus();
}

DiskCacheStats DiskCache::stats() const {
  DiskCacheStats s;
  s.hits = hits_;
  s.misses = misses_;
  s.writes = writes_;
  s.rejects = rejects_;
  s.evictions = evictions_;
  s.write_errors = write_errors_;
  return s;
}

absl::StatusOr<std::vector<DiskCache::EntryInfo>> DiskCache::List(const std::string& dir, int64_t trusted_uid) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return absl::NotFoundError(absl::StrCat("no cache directory ", dir));
  std::vector<EntryInfo> out;
  time_t now = ::time(nullptr);
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    bool temp = IsTemp(e.path());
    if (!IsEntry(e.path()) && !temp) continue;
    EntryInfo info;
    info.file = e.path().filename().string();
    struct stat st {};
    if (::lstat(e.path().c_str(), &st) == 0) {
      info.bytes = st.st_size;
      info.mtime = st.st_mtim.tv_sec;
    }
    if (temp) {
      // A write in progress, or the leftover of a writer that died: reported, reclaimed when old.
      int64_t age = now - info.mtime;
      info.problem = absl::StrCat("temporary file of an unfinished write, ", age, " s old",
                                  age > kOrphanAgeSeconds ? " (orphaned: removed at the next open or prune)" : "");
      out.push_back(std::move(info));
      continue;
    }
    auto bytes = ReadEntry(e.path().string(), trusted_uid);
    if (!bytes.ok()) {
      info.problem = std::string(bytes.status().message());
    } else {
      std::string key;
      auto payload = Decode(*bytes, &key, &info.payload_kind);
      if (!payload.ok()) {
        info.problem = std::string(payload.status().message());
      } else {
        CacheKey k;
        k.canonical = key;
        k.hash = Fingerprint64(key);
        if (absl::StrCat(k.Hex(), ".cjit") != info.file) {
          info.problem = "file name does not match the key's hash";
        } else {
          info.ok = true;
        }
        size_t nl = key.find('\n', key.find('\n') + 1);
        info.key_head = key.substr(0, std::min<size_t>(nl, 160));
      }
    }
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(), [](const EntryInfo& a, const EntryInfo& b) { return a.file < b.file; });
  return out;
}

absl::StatusOr<int64_t> DiskCache::Prune(const std::string& dir, int64_t max_bytes) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return absl::NotFoundError(absl::StrCat("no cache directory ", dir));
  ReclaimOrphans(dir);
  return EvictTo(dir, max_bytes);
}

absl::StatusOr<int64_t> DiskCache::Clear(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return absl::NotFoundError(absl::StrCat("no cache directory ", dir));
  int64_t removed = 0, failed = 0;
  std::string first_error;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (IsEntry(e.path()) || IsTemp(e.path())) {
      if (::unlink(e.path().c_str()) == 0) {
        ++removed;
      } else if (errno != ENOENT) {
        if (failed++ == 0) first_error = absl::StrCat(e.path().string(), ": ", std::strerror(errno));
      }
    }
  }
  if (failed > 0) {
    return absl::PermissionDeniedError(absl::StrCat("removed ", removed, " files, but ", failed,
                                                    " could not be removed (first: ", first_error, ")"));
  }
  return removed;
}

}  // namespace cjit
