// `cjit cache`: inspect or maintain a persistent cache directory.
#include "tools/cli/commands.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <thread>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "CLI/CLI.hpp"
#include "base/status_macros.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "absl/strings/str_join.h"
#include "compiler/passes/mark_for_compilation.h"
#include "cache/disk_cache.h"
#include "cache/remote_cache.h"
#include "base/file_util.h"
#include "flags/flags.h"
#include "compiler/codegen/fusion_plan.h"
#include "compiler/codegen/nvptx_compiler.h"
#include "runtime/dump.h"
#include "runtime/executable.h"
#include "runtime/profiler.h"
#include "runtime/session.h"
#include "compiler/ir/text.h"
#include "runtime/cuda/gpu_executor.h"
#include "tools/check_lib.h"
#include "tools/quant_check.h"

#include "tools/cli/cli_common.h"

namespace cjit {

namespace {

// `cjit cache ACTION --remote URL`: the fleet tier's entries (ls, stats, verify), or copying between it and
// a local directory (push: every valid local entry, signed; pull: every verified remote entry).
int CmdRemoteCache(const std::string& action, const std::string& dir, const std::string& url,
                   const std::string& key_file) {
  RemoteCacheOptions o;
  o.url = url;
  o.key_file = key_file;
  o.timeout_ms = 5000;
  if (const auto& flags = FlagsFromEnvironment(); flags.ok()) {
    if (o.key_file.empty()) o.key_file = flags->remote_cache_key_file;
    o.ttl_s = flags->remote_cache_ttl_s;
  }
  auto remote = RemoteCache::Open(o);
  if (!remote.ok()) return Fail(remote.status(), 2);
  if (action == "push") {
    if (dir.empty()) return Fail(absl::InvalidArgumentError("cache push needs --dir (the directory to publish)"), 2);
    auto entries = DiskCache::List(dir);
    if (!entries.ok()) return Fail(entries.status());
    int64_t pushed = 0, bytes = 0, skipped = 0;
    for (const auto& e : *entries) {
      if (!e.ok) {
        ++skipped;
        continue;
      }
      auto file = ReadRegularFile(absl::StrCat(dir, "/", e.file), int64_t{1} << 31, "cache entry");
      std::string key_text;
      uint32_t kind = 0;
      auto payload =
          file.ok() ? DiskCache::Decode(*file, &key_text, &kind) : absl::StatusOr<std::string>(file.status());
      if (!payload.ok() || PayloadKindName(kind) == nullptr) {
        ++skipped;
        continue;
      }
      absl::Status st =
          (*remote)->PutNow(CacheKey{key_text, Fingerprint64(key_text)}, static_cast<PayloadKind>(kind), *payload);
      if (!st.ok()) return Fail(st);
      ++pushed;
      bytes += static_cast<int64_t>(payload->size());
    }
    std::printf("pushed %lld entries (%lld payload bytes) from %s to %s; %lld bad or unreadable entries skipped\n",
                static_cast<long long>(pushed), static_cast<long long>(bytes), dir.c_str(), url.c_str(),
                static_cast<long long>(skipped));
    return 0;
  }
  std::vector<std::string> payloads, keys;
  const bool pull = action == "pull";
  auto entries = (*remote)->List(pull ? &payloads : nullptr, pull ? &keys : nullptr);
  if (!entries.ok()) return Fail(entries.status());
  int64_t total = 0, bad = 0;
  for (const auto& e : *entries) {
    total += e.bytes;
    bad += !e.ok;
  }
  if (pull) {
    if (dir.empty()) return Fail(absl::InvalidArgumentError("cache pull needs --dir (the directory to fill)"), 2);
    DiskCacheOptions d;
    d.dir = dir;
    auto disk = DiskCache::Open(d);
    if (!disk.ok()) return Fail(disk.status());
    int64_t pulled = 0;
    for (size_t i = 0; i < entries->size(); ++i) {
      const auto& e = (*entries)[i];
      if (!e.ok) continue;
      absl::Status st = (*disk)->Store(CacheKey{keys[i], Fingerprint64(keys[i])},
                                       static_cast<PayloadKind>(e.payload_kind), payloads[i]);
      if (!st.ok()) return Fail(st);
      ++pulled;
    }
    std::printf("pulled %lld verified entries from %s into %s; %lld rejected (not loaded)\n",
                static_cast<long long>(pulled), url.c_str(), dir.c_str(), static_cast<long long>(bad));
    return 0;
  }
  if (action == "ls") {
    for (const auto& e : *entries) {
      const char* name = PayloadKindName(e.payload_kind);
      std::printf("%s %8lld bytes  ttl %6lld s  %-9s %s%s\n", e.redis_key.c_str(), static_cast<long long>(e.bytes),
                  static_cast<long long>(e.ttl_s), e.ok && name ? name : "", e.ok ? "ok" : "BAD: ",
                  e.ok ? "" : e.problem.c_str());
    }
  } else if (action == "verify") {
    for (const auto& e : *entries) {
      if (!e.ok) std::printf("BAD %s: %s\n", e.redis_key.c_str(), e.problem.c_str());
    }
    std::printf("%zu entries, %lld bad\n", entries->size(), static_cast<long long>(bad));
    return bad ? 1 : 0;
  } else if (action == "stats") {
    std::printf("{\"remote\": \"%s\", \"entries\": %zu, \"bytes\": %lld, \"bad\": %lld}\n", url.c_str(),
                entries->size(), static_cast<long long>(total), static_cast<long long>(bad));
  } else {
    return Fail(absl::InvalidArgumentError("with --remote, the cache action must be ls, stats, verify, push or pull "
                                           "(entries expire by --remote_cache_ttl_s; clear a fleet's tier with "
                                           "redis-cli)"),
                2);
  }
  return 0;
}

}  // namespace

int CmdCache(const std::string& action, const std::string& dir, int64_t max_bytes, const std::string& remote,
             const std::string& key_file) {
  if (!remote.empty()) return CmdRemoteCache(action, dir, remote, key_file);
  if (action == "push" || action == "pull") {
    return Fail(absl::InvalidArgumentError(absl::StrCat("cache ", action, " needs --remote URL")), 2);
  }
  if (dir.empty()) return Fail(absl::InvalidArgumentError("cache needs --dir (or --remote URL)"), 2);
  if (action == "clear") {
    auto n = DiskCache::Clear(dir);
    if (!n.ok()) return Fail(n.status());
    std::printf("removed %lld files from %s\n", static_cast<long long>(*n), dir.c_str());
    return 0;
  }
  if (action == "prune") {
    if (max_bytes < 0) return Fail(absl::InvalidArgumentError("cache prune needs --max-bytes N"), 2);
    auto n = DiskCache::Prune(dir, max_bytes);
    if (!n.ok()) return Fail(n.status());
    std::printf("evicted %lld entries (least recently used first) to stay under %lld bytes\n",
                static_cast<long long>(*n), static_cast<long long>(max_bytes));
    return 0;
  }
  auto entries = DiskCache::List(dir);
  if (!entries.ok()) return Fail(entries.status());
  int64_t total = 0, bad = 0;
  for (const auto& e : *entries) {
    total += e.bytes;
    bad += !e.ok;
  }
  if (action == "ls") {
    for (const auto& e : *entries) {
      const char* name = PayloadKindName(e.payload_kind);
      const char* kind = name != nullptr ? name : "unknown";
      std::printf("%s %8lld bytes  %-9s %s%s\n", e.file.c_str(), static_cast<long long>(e.bytes), e.ok ? kind : "",
                  e.ok ? "ok" : "BAD: ", e.ok ? "" : e.problem.c_str());
    }
  } else if (action == "verify") {
    for (const auto& e : *entries) {
      if (!e.ok) std::printf("BAD %s: %s\n", e.file.c_str(), e.problem.c_str());
    }
    std::printf("%zu entries, %lld bad\n", entries->size(), static_cast<long long>(bad));
    return bad ? 1 : 0;
  } else if (action == "stats") {
    std::printf("{\"dir\": \"%s\", \"entries\": %zu, \"bytes\": %lld, \"bad\": %lld}\n", dir.c_str(), entries->size(),
                static_cast<long long>(total), static_cast<long long>(bad));
  } else {
    return Fail(absl::InvalidArgumentError("cache action must be ls, stats, verify, clear or prune"), 2);
  }
  return 0;
}

}  // namespace cjit
