#include "cache/remote_cache.h"

#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstring>
#include <deque>
#include <algorithm>
#include <map>
#include <set>
#include <mutex>
#include <thread>

#include <hiredis/hiredis.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "cache/disk_cache.h"
#include "base/mutex.h"

namespace cjit {
namespace {

constexpr char kMagic[8] = {'C', 'J', 'I', 'T', 'R', 'M', 'T', '1'};
constexpr size_t kIdBytes = 8, kMacBytes = 32, kHeaderBytes = 8 + kIdBytes + kMacBytes;
constexpr int kErrorsBeforeBackoff = 3;
constexpr int kFirstBackoffMs = 5000, kMaxBackoffMs = 60000;
constexpr int kMaxRejectLogs = 10;
constexpr char kIndexKey[] = "cjit-index:autotune";
constexpr int kIndexMaxAgeMs = 1000;

struct Endpoint {
  bool unix_socket = false;
  std::string host_or_path;
  int port = 6379;
  int db = 0;
};

absl::StatusOr<Endpoint> ParseUrl(absl::string_view url) {
  Endpoint e;
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("--remote_cache=", url, ": ", why,
                                                   " (expected redis://HOST[:PORT][/DB] or unix:///PATH[?db=N])"));
  };
  absl::string_view rest = url;
  if (absl::ConsumePrefix(&rest, "unix://")) {
    e.unix_socket = true;
    absl::string_view query;
    if (size_t q = rest.find('?'); q != absl::string_view::npos) {
      query = rest.substr(q + 1);
      rest = rest.substr(0, q);
    }
    if (rest.empty() || rest[0] != '/') return bad("the socket path must be absolute");
    e.host_or_path = std::string(rest);
    if (!query.empty()) {
      if (!absl::ConsumePrefix(&query, "db=") || !absl::SimpleAtoi(query, &e.db) || e.db < 0) return bad("bad db");
    }
    return e;
  }
  if (!absl::ConsumePrefix(&rest, "redis://")) return bad("unknown scheme");
  if (size_t slash = rest.find('/'); slash != absl::string_view::npos) {
    if (!absl::SimpleAtoi(rest.substr(slash + 1), &e.db) || e.db < 0) return bad("bad database number");
    rest = rest.substr(0, slash);
  }
  if (size_t colon = rest.rfind(':'); colon != absl::string_view::npos) {
    if (!absl::SimpleAtoi(rest.substr(colon + 1), &e.port) || e.port <= 0 || e.port > 65535) return bad("bad port");
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) return bad("no host");
  e.host_or_path = std::string(rest);
  return e;
}

std::string KeyId(const std::string& key) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), digest);
  return std::string(reinterpret_cast<const char*>(digest), kIdBytes);
}

std::string Mac(const std::string& key, absl::string_view redis_key, absl::string_view entry) {
  std::string data = absl::StrCat(redis_key, "\n", entry);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

using Clock = std::chrono::steady_clock;

}  // namespace

absl::StatusOr<std::vector<std::string>> ReadRemoteCacheKeys(const std::string& path) {
  const std::string what = absl::StrCat("--remote_cache_key_file=", path);
  if (path.empty()) {
    return absl::InvalidArgumentError("--remote_cache needs --remote_cache_key_file (entries are signed; an "
                                      "unsigned shared cache would let anyone who can write to it run code here)");
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(what, ": cannot read it (", std::strerror(errno), ")"));
  }
  if (st.st_uid != ::geteuid()) {
    return absl::PermissionDeniedError(absl::StrCat(what, ": owned by uid ", st.st_uid, ", not by this user"));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(what, ": the fleet key file is accessible by other users (mode ",
                                                    absl::StrFormat("%03o", st.st_mode & 0777),
                                                    "); chmod 600 it, as ssh requires of private keys"));
  }
  CJIT_ASSIGN_OR_RETURN(std::string text, ReadRegularFile(path, 1 << 20, "remote cache key file"));
  std::vector<std::string> keys;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    if (line.size() < 16) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": a key of ", line.size(), " bytes (at least 16)"));
    }
    keys.emplace_back(line);
  }
  if (keys.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": no key in the file"));
  return keys;
}

struct RemoteCache::Impl {
  RemoteCacheOptions options;
  Endpoint endpoint;
  std::vector<std::string> keys;  // [0] signs
  std::map<std::string, size_t> key_by_id;

  // Reads: one connection under read_mu. Writes: the writer thread's own connection.
  Mutex read_mu;
  redisContext* read_ctx = nullptr;
  redisContext* write_ctx = nullptr;

  // Back-off after repeated errors.
  Mutex health_mu;
  int consecutive_errors ABSL_GUARDED_BY(health_mu) = 0;
  int backoff_ms ABSL_GUARDED_BY(health_mu) = kFirstBackoffMs;
  Clock::time_point skip_until ABSL_GUARDED_BY(health_mu){};

  // This process's lease token: random, with the host name and pid for `redis-cli get` readers.
  std::string lease_token;

  // Write-behind queue: entry writes and lease releases, in order.
  struct Write {
    std::string redis_key, value;
    bool release_lease = false;  // value = the token; delete redis_key if it still holds it
    std::string index_member;    // an autotuning entry: its key hash, added to the index after the SET
  };

  // The index of autotuning entries (kIndexKey: a Redis set of key hashes, written with each entry): a
  // process asks for it once (again when older than kIndexMaxAgeMs) and does not send a GET for a result
  // it does not list. Most autotuning lookups of a warm host are for op signatures nobody tuned: each
  // would cost a round trip on the first run. The index is a hint, never trusted for content: a key it
  // lists is still read and verified, and a producer's last look before tuning (TieredCache's lease path)
  // bypasses it, so a stale index costs a tuning's default algorithm for a while, never a second tuning.
  Mutex index_mu;
  bool index_loaded ABSL_GUARDED_BY(index_mu) = false;
  Clock::time_point index_at ABSL_GUARDED_BY(index_mu){};
  std::set<std::string> index ABSL_GUARDED_BY(index_mu);
  Mutex queue_mu;
  CondVar queue_cv, idle_cv;
  std::deque<Write> queue ABSL_GUARDED_BY(queue_mu);
  int64_t queued_bytes ABSL_GUARDED_BY(queue_mu) = 0;
  bool writing ABSL_GUARDED_BY(queue_mu) = false;
  bool stop ABSL_GUARDED_BY(queue_mu) = false;
  std::thread writer;

#define CJIT_REMOTE_CACHE_ATOMIC(name) std::atomic<int64_t> name{0};
  CJIT_REMOTE_CACHE_COUNTERS(CJIT_REMOTE_CACHE_ATOMIC)
#undef CJIT_REMOTE_CACHE_ATOMIC
  std::atomic<int> reject_logs{0};

  ~Impl() {
    if (read_ctx) redisFree(read_ctx);
    if (write_ctx) redisFree(write_ctx);
  }

  timeval Timeout() const {
    timeval tv;
    tv.tv_sec = options.timeout_ms / 1000;
    tv.tv_usec = (options.timeout_ms % 1000) * 1000;
    return tv;
  }

  bool Available() {
    MutexLock lock(&health_mu);
    return Clock::now() >= skip_until;
  }

  void Succeeded() {
    MutexLock lock(&health_mu);
    consecutive_errors = 0;
    backoff_ms = kFirstBackoffMs;
  }

  void Failed(const std::string& why) {
    ++errors;
    MutexLock lock(&health_mu);
    if (++consecutive_errors < kErrorsBeforeBackoff) return;
    consecutive_errors = 0;
    skip_until = Clock::now() + std::chrono::milliseconds(backoff_ms);
    ++backoffs;
    CJIT_LOG(WARNING) << "remote cache " << options.url << ": " << why << "; not used for " << backoff_ms / 1000
                      << " s (local tiers only)";
    backoff_ms = std::min(backoff_ms * 2, kMaxBackoffMs);
  }

  // A connected context in *ctx, or an error text.
  std::string Connect(redisContext** ctx) {
    if (*ctx != nullptr) return "";
    const timeval tv = Timeout();
    redisContext* c = endpoint.unix_socket ? redisConnectUnixWithTimeout(endpoint.host_or_path.c_str(), tv)
                                           : redisConnectWithTimeout(endpoint.host_or_path.c_str(), endpoint.port, tv);
    if (c == nullptr) return "cannot allocate a connection";
    if (c->err) {
      std::string why = absl::StrCat("cannot connect: ", c->errstr);
      redisFree(c);
      return why;
    }
    redisSetTimeout(c, tv);
    if (endpoint.db != 0) {
      auto* r = static_cast<redisReply*>(redisCommand(c, "SELECT %d", endpoint.db));
      const bool ok = r != nullptr && r->type == REDIS_REPLY_STATUS;
      std::string why = r == nullptr ? c->errstr : r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : "";
      if (r) freeReplyObject(r);
      if (!ok) {
        redisFree(c);
        return absl::StrCat("SELECT ", endpoint.db, ": ", why);
      }
    }
    *ctx = c;
    return "";
  }

  void Reject(const std::string& redis_key, absl::string_view why) {
    ++rejects;
    if (reject_logs.fetch_add(1) < kMaxRejectLogs) {
      CJIT_LOG(WARNING) << "remote cache " << options.url << ": entry " << redis_key << " rejected (" << why
                        << "); not loaded";
    }
  }

  // The payload of a value read under `redis_key` whose signature verifies with a key of the key file and
  // whose entry decodes and belongs under that Redis key; else an error saying why.
  absl::StatusOr<std::string> Check(const std::string& redis_key, absl::string_view value, std::string* key_text,
                                    uint32_t* kind) {
    if (value.size() < kHeaderBytes) return absl::DataLossError("truncated");
    if (std::memcmp(value.data(), kMagic, 8) != 0) return absl::DataLossError("bad magic");
    auto it = key_by_id.find(std::string(value.substr(8, kIdBytes)));
    if (it == key_by_id.end()) return absl::PermissionDeniedError("signed with a key this host does not have");
    absl::string_view mac = value.substr(8 + kIdBytes, kMacBytes);
    absl::string_view entry = value.substr(kHeaderBytes);
    const std::string expect = Mac(keys[it->second], redis_key, entry);
    if (expect.size() != kMacBytes || CRYPTO_memcmp(expect.data(), mac.data(), kMacBytes) != 0) {
      return absl::PermissionDeniedError(
          "the signature does not verify (tampered with, truncated, or stored under another key)");
    }
    CJIT_ASSIGN_OR_RETURN(std::string payload, DiskCache::Decode(entry, key_text, kind));
    CacheKey decoded{*key_text, Fingerprint64(*key_text)};
    if (RemoteCache::RedisKey(decoded, static_cast<PayloadKind>(*kind)) != redis_key) {
      return absl::DataLossError("a valid entry of another cache key");
    }
    return payload;
  }

  std::optional<std::string> Verify(const std::string& redis_key, absl::string_view value, const CacheKey& key,
                                    PayloadKind kind) {
    std::string key_text;
    uint32_t entry_kind = 0;
    absl::StatusOr<std::string> payload = Check(redis_key, value, &key_text, &entry_kind);
    if (!payload.ok()) return Reject(redis_key, payload.status().message()), std::nullopt;
    if (key_text != key.canonical || entry_kind != static_cast<uint32_t>(kind)) {
      return Reject(redis_key, "a valid entry of another cache key"), std::nullopt;
    }
    return std::move(*payload);
  }

  // One command on the read connection for the maintenance calls (errors name the URL).
  absl::StatusOr<redisReply*> Command(const char* what, const std::vector<std::string>& argv) {
    if (std::string why = Connect(&read_ctx); !why.empty()) {
      return absl::UnavailableError(absl::StrCat("remote cache ", options.url, ": ", why));
    }
    std::vector<const char*> args;
    std::vector<size_t> lens;
    for (const std::string& a : argv) {
      args.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* r =
        static_cast<redisReply*>(redisCommandArgv(read_ctx, static_cast<int>(args.size()), args.data(), lens.data()));
    if (r == nullptr) {
      std::string why = read_ctx->errstr;
      redisFree(read_ctx);
      read_ctx = nullptr;
      return absl::UnavailableError(absl::StrCat("remote cache ", options.url, ": ", what, ": ", why));
    }
    if (r->type == REDIS_REPLY_ERROR) {
      std::string why(r->str, r->len);
      freeReplyObject(r);
      return absl::FailedPreconditionError(absl::StrCat("remote cache ", options.url, ": ", what, ": ", why));
    }
    return r;
  }

  // One command on the read connection (read_mu held, connected): the reply, or null after the connection
  // was dropped and the error counted toward the back-off (`what` names the command in its log).
  redisReply* ReadCommand(const char* what, const char* format, ...) {
    va_list ap;
    va_start(ap, format);
    auto* r = static_cast<redisReply*>(redisvCommand(read_ctx, format, ap));
    va_end(ap);
    if (r == nullptr) {
      std::string why = absl::StrCat(what, ": ", read_ctx->errstr);
      redisFree(read_ctx);
      read_ctx = nullptr;
      Failed(why);
    }
    return r;
  }

  // SADD (and the entries' TTL on the index); a failure only makes readers look the entry up at tune time.
  void AddToIndex(redisContext* ctx, const std::string& member) {
    auto* r = static_cast<redisReply*>(redisCommand(ctx, "SADD %s %b", kIndexKey, member.data(), member.size()));
    if (r != nullptr) freeReplyObject(r);
    if (r != nullptr && options.ttl_s > 0) {
      r = static_cast<redisReply*>(redisCommand(ctx, "PEXPIRE %s %lld", kIndexKey,
                                                static_cast<long long>(options.ttl_s) * 1000));
      if (r != nullptr) freeReplyObject(r);
    }
  }

  // Whether the index lists `member` (fetching it at the first autotuning lookup, and again when older
  // than kIndexMaxAgeMs); true when it cannot be read. Lock order: index_mu, then read_mu.
  bool Indexed(const std::string& member) {
    MutexLock lock(&index_mu);
    const auto now = Clock::now();
    if (!index_loaded || now - index_at > std::chrono::milliseconds(kIndexMaxAgeMs)) {
      std::set<std::string> fresh;
      bool ok = false;
      {
        MutexLock read_lock(&read_mu);
        if (Connect(&read_ctx).empty()) {
          auto* r = static_cast<redisReply*>(redisCommand(read_ctx, "SMEMBERS %s", kIndexKey));
          if (r == nullptr) {
            redisFree(read_ctx);
            read_ctx = nullptr;
          } else {
            if (r->type == REDIS_REPLY_ARRAY) {
              ok = true;
              for (size_t i = 0; i < r->elements; ++i) fresh.emplace(r->element[i]->str, r->element[i]->len);
            }
            freeReplyObject(r);
          }
        }
      }
      if (!ok) return true;  // no index: look the entry up
      index = std::move(fresh);
      index_loaded = true;
      index_at = now;
    }
    return index.count(member) > 0;
  }

  void WriterLoop() {
    {
      // Connect the read connection while the model loads and specializes (a connect is the dearest
      // part of the first lookup); an error here is left for that lookup to report and count.
      MutexLock lock(&read_mu);
      if (Available()) Connect(&read_ctx);
    }
    for (;;) {
      Write w;
      {
        MutexLock lock(&queue_mu);
        while (!stop && queue.empty()) queue_cv.Wait(&queue_mu);
        if (queue.empty()) return;  // stop, and nothing left
        w = std::move(queue.front());
        queue.pop_front();
        queued_bytes -= static_cast<int64_t>(w.value.size());
        writing = true;
      }
      if (!Available()) {
        if (!w.release_lease) ++dropped_writes;  // a lease not released expires on its own
      } else if (std::string why = Connect(&write_ctx); !why.empty()) {
        if (!w.release_lease) ++write_errors;
        Failed(why);
      } else if (w.release_lease) {
        static constexpr char kRelease[] =
            "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
        auto* r = static_cast<redisReply*>(redisCommand(write_ctx, "EVAL %s 1 %b %b", kRelease, w.redis_key.data(),
                                                        w.redis_key.size(), w.value.data(), w.value.size()));
        if (r == nullptr) {
          Failed(absl::StrCat("lease release: ", write_ctx->errstr));
          redisFree(write_ctx);
          write_ctx = nullptr;
        } else {  // an error reply leaves the lease to expire
          if (r->type == REDIS_REPLY_ERROR)
            CJIT_VLOG(1) << "remote cache lease release: " << std::string(r->str, r->len);
          freeReplyObject(r);
        }
      } else {
        redisReply* r;
        if (options.ttl_s > 0) {
          r = static_cast<redisReply*>(redisCommand(write_ctx, "SET %b %b PX %lld", w.redis_key.data(),
                                                    w.redis_key.size(), w.value.data(), w.value.size(),
                                                    static_cast<long long>(options.ttl_s) * 1000));
        } else {
          r = static_cast<redisReply*>(redisCommand(write_ctx, "SET %b %b", w.redis_key.data(), w.redis_key.size(),
                                                    w.value.data(), w.value.size()));
        }
        if (r == nullptr) {
          ++write_errors;
          Failed(absl::StrCat("write: ", write_ctx->errstr));
          redisFree(write_ctx);
          write_ctx = nullptr;
        } else if (r->type == REDIS_REPLY_ERROR) {
          ++write_errors;  // e.g. OOM under maxmemory noeviction: the server is up, the entry is not kept
          CJIT_VLOG(1) << "remote cache write of " << w.redis_key << ": " << std::string(r->str, r->len);
          freeReplyObject(r);
        } else {
          ++writes;
          bytes_written += static_cast<int64_t>(w.value.size());
          Succeeded();
          freeReplyObject(r);
          if (!w.index_member.empty()) AddToIndex(write_ctx, w.index_member);
        }
      }
      {
        MutexLock lock(&queue_mu);
        writing = false;
        if (queue.empty()) idle_cv.SignalAll();
      }
    }
  }
};

RemoteCache::RemoteCache(std::unique_ptr<Impl> impl) : options_(impl->options), impl_(std::move(impl)) {
  impl_->writer = std::thread([this] { impl_->WriterLoop(); });
}

RemoteCache::~RemoteCache() {
  Flush(2000);
  {
    MutexLock lock(&impl_->queue_mu);
    impl_->stop = true;
    impl_->queue.clear();  // what the flush could not send in time
  }
  impl_->queue_cv.SignalAll();
  impl_->writer.join();
}

absl::StatusOr<std::shared_ptr<RemoteCache>> RemoteCache::Open(const RemoteCacheOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  CJIT_ASSIGN_OR_RETURN(impl->endpoint, ParseUrl(options.url));
  CJIT_ASSIGN_OR_RETURN(impl->keys, ReadRemoteCacheKeys(options.key_file));
  for (size_t i = 0; i < impl->keys.size(); ++i) impl->key_by_id.emplace(KeyId(impl->keys[i]), i);
  if (options.timeout_ms <= 0) return absl::InvalidArgumentError("--remote_cache_timeout_ms must be positive");
  {
    unsigned char random[12];
    if (RAND_bytes(random, sizeof(random)) != 1)
      return absl::InternalError("remote cache: no random bytes for a lease token");
    char host[256] = {0};
    ::gethostname(host, sizeof(host) - 1);
    impl->lease_token = absl::StrCat(host, ":", ::getpid(), ":",
                                     absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(random), 12)));
  }
  return std::shared_ptr<RemoteCache>(new RemoteCache(std::move(impl)));
}

absl::StatusOr<std::shared_ptr<RemoteCache>> RemoteCache::Shared(const RemoteCacheOptions& options) {
  static Mutex mu;
  static auto* instances = new std::map<std::string, std::weak_ptr<RemoteCache>>();
  const std::string id = absl::StrCat(options.url, "\n", options.key_file, "\n", options.timeout_ms, "\n",
                                      options.ttl_s, "\n", options.max_entry_bytes, "\n", options.max_queue_bytes,
                                      "\n", options.lease_ms);
  MutexLock lock(&mu);
  if (auto it = instances->find(id); it != instances->end()) {
    if (std::shared_ptr<RemoteCache> alive = it->second.lock()) return alive;
  }
  CJIT_ASSIGN_OR_RETURN(std::shared_ptr<RemoteCache> rc, Open(options));
  (*instances)[id] = rc;
  return rc;
}

std::string RemoteCache::RedisKey(const CacheKey& key, PayloadKind payload_kind) {
  return absl::StrCat("cjit:", key.Hex(), ":", static_cast<uint32_t>(payload_kind));
}

std::string RemoteCache::LeaseKey(const CacheKey& key, PayloadKind payload_kind) {
  return absl::StrCat("cjit-lease:", key.Hex(), ":", static_cast<uint32_t>(payload_kind));
}

RemoteCache::Lease RemoteCache::TryLease(const CacheKey& key, PayloadKind payload_kind) {
  Impl& m = *impl_;
  if (m.options.lease_ms <= 0 || !m.Available()) return Lease::kUnavailable;
  const std::string lease_key = LeaseKey(key, payload_kind);
  MutexLock lock(&m.read_mu);
  if (std::string why = m.Connect(&m.read_ctx); !why.empty()) {
    m.Failed(why);
    return Lease::kUnavailable;
  }
  redisReply* r = m.ReadCommand("lease", "SET %b %b NX PX %lld", lease_key.data(), lease_key.size(),
                                m.lease_token.data(), m.lease_token.size(), static_cast<long long>(m.options.lease_ms));
  if (r == nullptr) return Lease::kUnavailable;
  Lease result = Lease::kUnavailable;
  if (r->type == REDIS_REPLY_STATUS) {  // "OK": set
    result = Lease::kAcquired;
    ++m.leases;
  } else if (r->type == REDIS_REPLY_NIL) {  // NX: another process holds it
    result = Lease::kHeld;
    // A lease no process of this fleet could have set (no expiry, or longer than ours) is not honoured:
    // whoever can write to the server must not be able to stop every process from compiling.
    redisReply* t = m.ReadCommand("lease PTTL", "PTTL %b", lease_key.data(), lease_key.size());
    if (t == nullptr) result = Lease::kUnavailable;  // connection dropped: compile locally
    if (t != nullptr && t->type == REDIS_REPLY_INTEGER && (t->integer == -1 || t->integer > m.options.lease_ms)) {
      result = Lease::kUnavailable;
      if (m.reject_logs.fetch_add(1) < kMaxRejectLogs) {
        CJIT_LOG(WARNING) << "remote cache " << m.options.url << ": lease " << lease_key << " has "
                          << (t->integer == -1
                                  ? std::string("no expiry")
                                  : absl::StrCat(t->integer, " ms left (more than --remote_cache_lease_ms)"))
                          << "; not waiting for it";
      }
    }
    if (t != nullptr) freeReplyObject(t);
    if (result == Lease::kHeld) ++m.lease_waits;
  } else {
    CJIT_VLOG(1) << "remote cache lease " << lease_key << ": unexpected reply "
                 << (r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : std::to_string(r->type));
  }
  freeReplyObject(r);
  if (result != Lease::kUnavailable) m.Succeeded();
  return result;
}

void RemoteCache::ReleaseLease(const CacheKey& key, PayloadKind payload_kind) {
  Impl& m = *impl_;
  if (m.options.lease_ms <= 0) return;
  Impl::Write w;
  w.redis_key = LeaseKey(key, payload_kind);
  w.value = m.lease_token;
  w.release_lease = true;
  {
    MutexLock lock(&m.queue_mu);
    if (m.stop) return;  // the lease expires on its own
    m.queued_bytes += static_cast<int64_t>(w.value.size());
    m.queue.push_back(std::move(w));
  }
  m.queue_cv.Signal();
}

std::string RemoteCache::SignedValue(const std::string& redis_key, const CacheKey& key, PayloadKind payload_kind,
                                     absl::string_view payload) const {
  const std::string entry = DiskCache::Encode(key, payload_kind, payload);
  const std::string& signing = impl_->keys[0];
  return absl::StrCat(absl::string_view(kMagic, 8), KeyId(signing), Mac(signing, redis_key, entry), entry);
}

std::optional<std::string> RemoteCache::Lookup(const CacheKey& key, PayloadKind payload_kind, bool use_index) {
  Impl& m = *impl_;
  if (!m.Available()) {
    ++m.skipped;
    return std::nullopt;
  }
  if (use_index && payload_kind == PayloadKind::kAutotune && !m.Indexed(key.Hex())) {
    ++m.misses;  // no host published it (as of the index's last read)
    return std::nullopt;
  }
  const std::string redis_key = RedisKey(key, payload_kind);
  std::string value;
  {
    MutexLock lock(&m.read_mu);
    if (std::string why = m.Connect(&m.read_ctx); !why.empty()) {
      m.Failed(why);
      return std::nullopt;
    }
    redisReply* r = m.ReadCommand("read", "GET %b", redis_key.data(), redis_key.size());
    if (r == nullptr) return std::nullopt;
    if (r->type == REDIS_REPLY_NIL) {
      freeReplyObject(r);
      m.Succeeded();
      ++m.misses;
      return std::nullopt;
    }
    if (r->type != REDIS_REPLY_STRING) {
      std::string why = r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : "unexpected reply type";
      freeReplyObject(r);
      m.Failed(absl::StrCat("GET: ", why));
      return std::nullopt;
    }
    value.assign(r->str, r->len);
    freeReplyObject(r);
    m.Succeeded();
  }
  m.bytes_read += static_cast<int64_t>(value.size());
  std::optional<std::string> payload = m.Verify(redis_key, value, key, payload_kind);
  if (payload) ++m.hits;
  return payload;
}

void RemoteCache::StoreAsync(const CacheKey& key, PayloadKind payload_kind, absl::string_view payload) {
  Impl& m = *impl_;
  if (static_cast<int64_t>(payload.size()) > m.options.max_entry_bytes) {
    ++m.dropped_writes;
    return;
  }
  Impl::Write w;
  w.redis_key = RedisKey(key, payload_kind);
  w.value = SignedValue(w.redis_key, key, payload_kind, payload);
  if (payload_kind == PayloadKind::kAutotune) w.index_member = key.Hex();
  {
    MutexLock lock(&m.queue_mu);
    if (m.stop || m.queued_bytes + static_cast<int64_t>(w.value.size()) > m.options.max_queue_bytes) {
      ++m.dropped_writes;
      return;
    }
    m.queued_bytes += static_cast<int64_t>(w.value.size());
    m.queue.push_back(std::move(w));
  }
  m.queue_cv.Signal();
}

bool RemoteCache::Flush(int timeout_ms) {
  Impl& m = *impl_;
  MutexLock lock(&m.queue_mu);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!m.queue.empty() || m.writing) {
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) return false;
    m.idle_cv.WaitFor(&m.queue_mu, left);
  }
  return true;
}

absl::StatusOr<std::vector<RemoteCache::EntryInfo>> RemoteCache::List(std::vector<std::string>* payloads,
                                                                      std::vector<std::string>* keys) {
  Impl& m = *impl_;
  MutexLock lock(&m.read_mu);
  std::vector<std::string> names;
  std::string cursor = "0";
  do {
    CJIT_ASSIGN_OR_RETURN(redisReply * r, (m.Command("SCAN", {"SCAN", cursor, "MATCH", "cjit:*", "COUNT", "1000"})));
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
      freeReplyObject(r);
      return absl::DataLossError(absl::StrCat("remote cache ", m.options.url, ": unexpected SCAN reply"));
    }
    cursor.assign(r->element[0]->str, r->element[0]->len);
    for (size_t i = 0; i < r->element[1]->elements; ++i) {
      names.emplace_back(r->element[1]->element[i]->str, r->element[1]->element[i]->len);
    }
    freeReplyObject(r);
  } while (cursor != "0");
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());  // SCAN may return a key twice
  std::vector<EntryInfo> out;
  for (const std::string& name : names) {
    CJIT_ASSIGN_OR_RETURN(redisReply * r, (m.Command("GET", {"GET", name})));
    if (r->type == REDIS_REPLY_NIL) {  // expired or deleted since the SCAN
      freeReplyObject(r);
      continue;
    }
    EntryInfo e;
    e.redis_key = name;
    std::string value;
    if (r->type == REDIS_REPLY_STRING) value.assign(r->str, r->len);
    freeReplyObject(r);
    e.bytes = static_cast<int64_t>(value.size());
    CJIT_ASSIGN_OR_RETURN(redisReply * t, (m.Command("TTL", {"TTL", name})));
    if (t->type == REDIS_REPLY_INTEGER && t->integer >= 0) e.ttl_s = t->integer;
    freeReplyObject(t);
    std::string key_text;
    absl::StatusOr<std::string> payload = m.Check(name, value, &key_text, &e.payload_kind);
    e.ok = payload.ok();
    if (!e.ok) e.problem = std::string(payload.status().message());
    e.key_head = key_text.substr(0, key_text.find('\n'));
    if (payloads != nullptr) payloads->push_back(e.ok ? std::move(*payload) : std::string());
    if (keys != nullptr) keys->push_back(e.ok ? key_text : std::string());
    out.push_back(std::move(e));
  }
  return out;
}

absl::Status RemoteCache::PutNow(const CacheKey& key, PayloadKind payload_kind, absl::string_view payload) {
  Impl& m = *impl_;
  const std::string redis_key = RedisKey(key, payload_kind);
  std::vector<std::string> argv = {"SET", redis_key, SignedValue(redis_key, key, payload_kind, payload)};
  if (m.options.ttl_s > 0) {
    argv.push_back("PX");
    argv.push_back(std::to_string(m.options.ttl_s * 1000));
  }
  MutexLock lock(&m.read_mu);
  CJIT_ASSIGN_OR_RETURN(redisReply * r, (m.Command("SET", argv)));
  freeReplyObject(r);
  if (payload_kind == PayloadKind::kAutotune) m.AddToIndex(m.read_ctx, key.Hex());
  ++m.writes;
  m.bytes_written += static_cast<int64_t>(argv[2].size());
  return absl::OkStatus();
}

std::vector<std::pair<const char*, int64_t>> RemoteCacheStatsFields(const RemoteCacheStats& s) {
  std::vector<std::pair<const char*, int64_t>> fields;
#define CJIT_REMOTE_CACHE_NAMED(name) fields.emplace_back(#name, s.name);
  CJIT_REMOTE_CACHE_COUNTERS(CJIT_REMOTE_CACHE_NAMED)
#undef CJIT_REMOTE_CACHE_NAMED
  return fields;
}

RemoteCacheStats RemoteCache::stats() const {
  const Impl& m = *impl_;
  RemoteCacheStats s;
#define CJIT_REMOTE_CACHE_COPY(name) s.name = m.name;
  CJIT_REMOTE_CACHE_COUNTERS(CJIT_REMOTE_CACHE_COPY)
#undef CJIT_REMOTE_CACHE_COPY
  return s;
}

}  // namespace cjit
