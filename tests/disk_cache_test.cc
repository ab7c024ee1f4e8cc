// The persistent cache: every fault of a cache file is ignored, removed, counted and recompiled — never a
// crash or a wrong result; full disk and read-only use; LRU size bound; warm start compiles nothing.
#include "cache/disk_cache.h"
#include "cache/cache_key.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/test_data.h"
#include "base/logging.h"
#include "runtime/session.h"
#include "tools/check_lib.h"

namespace cjit {
namespace {

namespace fs = std::filesystem;

// Every directory FreshDir hands out is removed when the test binary exits, whatever a test left there.
struct ScratchDirs {
  std::vector<std::string> dirs;
  ~ScratchDirs() {
    for (const std::string& d : dirs) {
      std::error_code ec;
      fs::permissions(d, fs::perms::owner_all, fs::perm_options::add, ec);  // a test may have made it read-only
      fs::remove_all(d, ec);
    }
  }
};

std::string FreshDir(const std::string& name) {
  static ScratchDirs scratch;
  std::string dir = ::testing::TempDir() + "/cjit_disk_" + name + "_" + std::to_string(::getpid());
  fs::remove_all(dir);
  scratch.dirs.push_back(dir);
  return dir;
}

CacheKey Key(const std::string& text) {
  CacheKey k;
  k.canonical = text;
  k.hash = Fingerprint64(text);
  return k;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::unique_ptr<DiskCache> Open(const std::string& dir, bool read_only = false, int64_t max_bytes = 0) {
  auto c = DiskCache::Open({dir, read_only, max_bytes});
  // An exception (reported by GoogleTest as a failure of the test) rather than a dereference of an error.
  if (!c.ok()) throw std::runtime_error(absl::StrCat("DiskCache::Open(", dir, "): ", c.status().message()));
  return std::move(*c);
}

// Constants enter the key by their SHA-256 (references from Python's hashlib), so that two different
// constants cannot share a key by a crafted collision of a fast 64-bit hash; equal keys need equal text.
TEST(CacheKeyTest, ConstantsEnterTheKeyBySha256) {
  EXPECT_EQ(ContentDigest("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // Both implementations (nettle below 1 MiB, OpenSSL from 1 MiB on), each side of the switch.
  EXPECT_EQ(ContentDigest(std::string((1 << 20) - 1, 'a')),
            "3311ea1faad557de3899e89a39076c69d9d0cc5b4cff56a0b61339f487395d56");
  EXPECT_EQ(ContentDigest(std::string(1 << 21, 'a')),
            "5256ec18f11624025905d057d6befb03d77b243511ac5f77ed5e0221ce6d84b5");
  auto key_for = [](float second) {
    Graph g;
    Value* x = g.AddInput("x", DType::kF32, Shape::Of({2}));
    Tensor w(DType::kF32, {2});
    w.data<float>()[0] = 0.5f;
    w.data<float>()[1] = second;
    Value* c = g.AddConstant("w", std::move(w));
    Node* n = g.AddNode("Mul", "mul", {x, c}, {"y"});
    g.AddOutput(n->outputs[0]);
    return MakeCacheKey(g, "x86_64", "");
  };
  CacheKey a = key_for(1.0f), b = key_for(2.0f);
  EXPECT_NE(a.canonical.find("9612447463caefad31915f64e51022988711393baf3f6c81ed61c38a46e24351"), std::string::npos)
      << a.canonical;
  EXPECT_NE(b.canonical.find("3db69239f50371dcc56738da07a74d1211d086cc6f2cdaffe6243cd1859e2408"), std::string::npos);
  EXPECT_FALSE(a == b);
  // Same 64-bit hash, different text: not equal (the memory cache and disk entries compare the text).
  CacheKey forged = b;
  forged.hash = a.hash;
  EXPECT_FALSE(a == forged);
}

// The policy identity (include_shapes=false) leaves out integer constants' values (shape operands that
// specialization computes from the input dims) and input dims; the cache key never does.
TEST(CacheKeyTest, PolicyIdentityIgnoresShapeOperandsButTheKeyDoesNot) {
  auto body = [](int64_t cols) {
    auto g = std::make_unique<Graph>();
    Value* x = g->AddInput("x", DType::kF32, Shape::Of({2, cols}));
    Tensor shape(DType::kI64, {2});
    shape.data<int64_t>()[0] = cols;
    shape.data<int64_t>()[1] = 2;
    Node* r = g->AddNode("Reshape", "r", {x, g->AddConstant("s", std::move(shape))}, {"y"});
    g->AddOutput(r->outputs[0]);
    return g;
  };
  auto a = body(3), b = body(5);
  EXPECT_EQ(CanonicalClusterText(*a, false), CanonicalClusterText(*b, false));
  EXPECT_NE(CanonicalClusterText(*a, true), CanonicalClusterText(*b, true));
  EXPECT_FALSE(MakeCacheKey(*a, "t", "") == MakeCacheKey(*b, "t", ""));
}

// ConstantDigest is memoized per live tensor object; a new object (even at a reused address) is hashed
// by its own content.
TEST(CacheKeyTest, ConstantDigestFollowsContentAcrossObjects) {
  for (int round = 0; round < 50; ++round) {
    Tensor t(DType::kF32, {4096});
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(round * 7 + i);
    std::string bytes(static_cast<const char*>(t.raw()), t.nbytes());
    auto c = std::make_shared<const Tensor>(std::move(t));
    const int64_t hashed = ConstantDigestsComputed();
    EXPECT_EQ(ConstantDigest(c), ContentDigest(bytes)) << round;
    EXPECT_EQ(ConstantDigest(c), ContentDigest(bytes)) << round << " (memoized)";
    EXPECT_EQ(ConstantDigestsComputed(), hashed + 1) << round << ": the same live object hashed again";
  }
}

// Memory-only keys (ConstantNaming::kObject) name a large constant by its tensor object: equal contents in
// two objects get two names (never one name for different contents, which a content-free key could give
// if names were reused), the same object keeps its name, a new object at a reused address gets a new one;
// small constants and kContent name by SHA-256 as before.
TEST(CacheKeyTest, ObjectNamingNamesLargeConstantsByObjectAndSmallOnesByContent) {
  auto filled = [](int64_t n, float v) {
    Tensor t(DType::kF32, {n});
    for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = v + static_cast<float>(i);
    return std::make_shared<const Tensor>(std::move(t));
  };
  const int64_t big = kObjectNamedConstantBytes / 4;
  auto a = filled(big, 1), b = filled(big, 1);
  EXPECT_NE(ConstantName(a, ConstantNaming::kObject), ConstantName(b, ConstantNaming::kObject));
  EXPECT_EQ(ConstantName(a, ConstantNaming::kObject), ConstantName(a, ConstantNaming::kObject));
  EXPECT_EQ(ConstantName(a, ConstantNaming::kContent), ConstantName(b, ConstantNaming::kContent));
  EXPECT_EQ(ConstantName(a, ConstantNaming::kContent), ConstantDigest(a));
  auto small1 = filled(big - 1, 2), small2 = filled(big - 1, 2);
  EXPECT_EQ(ConstantName(small1, ConstantNaming::kObject), ConstantName(small2, ConstantNaming::kObject));
  EXPECT_EQ(ConstantName(small1, ConstantNaming::kObject), ConstantDigest(small1));
  std::set<std::string> names;
  for (int round = 0; round < 20; ++round) {
    auto t = filled(big, 3);  // freed each round: its address is likely reused
    EXPECT_TRUE(names.insert(ConstantName(t, ConstantNaming::kObject)).second) << round;
  }
}

TEST(DiskCacheTest, RoundTrip) {
  std::string dir = FreshDir("roundtrip");
  auto c = Open(dir);
  ASSERT_TRUE(c->Store(Key("k1"), PayloadKind::kCpuCode, "payload one").ok());
  auto got = c->Lookup(Key("k1"), PayloadKind::kCpuCode);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, "payload one");
  EXPECT_FALSE(c->Lookup(Key("k2"), PayloadKind::kCpuCode).has_value());
  EXPECT_EQ(c->stats().hits, 1);
  EXPECT_EQ(c->stats().misses, 1);
  EXPECT_EQ(c->stats().writes, 1);
}

// Each corruption of a valid entry: the entry is rejected, removed, and counted.
TEST(DiskCacheTest, EveryCorruptionIsRejectedAndRemoved) {
  struct Fault {
    const char* name;
    std::function<void(std::string&)> corrupt;
  };
  std::vector<Fault> faults = {
      {"bad magic", [](std::string& b) { b[0] = 'X'; }},
      {"other version", [](std::string& b) { b[8] = static_cast<char>(b[8] + 1); }},
      {"bad checksum", [](std::string& b) { b[b.size() - 1] ^= 0x5a; }},
      {"truncated", [](std::string& b) { b.resize(b.size() - 3); }},
      {"truncated header", [](std::string& b) { b.resize(10); }},
      {"empty", [](std::string& b) { b.clear(); }},
      {"oversized", [](std::string& b) { b += "extra"; }},
  };
  for (const Fault& f : faults) {
    std::string dir = FreshDir("corrupt");
    auto c = Open(dir);
    CacheKey k = Key("the key");
    ASSERT_TRUE(c->Store(k, PayloadKind::kCpuCode, std::string(1000, 'p')).ok());
    std::string path = dir + "/" + k.Hex() + ".cjit";
    std::string bytes = ReadFile(path);
    f.corrupt(bytes);
    WriteFile(path, bytes);
    EXPECT_FALSE(c->Lookup(k, PayloadKind::kCpuCode).has_value()) << f.name;
    EXPECT_EQ(c->stats().rejects, 1) << f.name;
    EXPECT_FALSE(fs::exists(path)) << f.name << ": a bad entry must be removed";
    // Recompiled and stored again: valid.
    ASSERT_TRUE(c->Store(k, PayloadKind::kCpuCode, "fresh").ok());
    EXPECT_EQ(c->Lookup(k, PayloadKind::kCpuCode).value_or(""), "fresh") << f.name;
  }
}

TEST(DiskCacheTest, KeyMismatchAndWrongKindAreRejected) {
  std::string dir = FreshDir("mismatch");
  auto c = Open(dir);
  CacheKey a = Key("key A"), b = Key("key B");
  ASSERT_TRUE(c->Store(a, PayloadKind::kCpuCode, "A's payload").ok());
  // An entry for key A sitting under key B's file name (as a hash collision would).
  fs::copy_file(dir + "/" + a.Hex() + ".cjit", dir + "/" + b.Hex() + ".cjit");
  EXPECT_FALSE(c->Lookup(b, PayloadKind::kCpuCode).has_value());
  EXPECT_EQ(c->stats().rejects, 1);
  EXPECT_FALSE(c->Lookup(a, PayloadKind::kPtx).has_value()) << "payload kind must match";
  EXPECT_EQ(c->stats().rejects, 2);
}

TEST(DiskCacheTest, UnreadableEntryIsRejected) {
  std::string dir = FreshDir("unreadable");
  auto c = Open(dir);
  CacheKey k = Key("k");
  // A directory where the entry file should be: open succeeds but reading fails.
  fs::create_directories(dir + "/" + k.Hex() + ".cjit");
  EXPECT_FALSE(c->Lookup(k, PayloadKind::kCpuCode).has_value());
  EXPECT_EQ(c->stats().rejects, 1);
}

TEST(DiskCacheTest, ReadOnlyNeverWrites) {
  std::string dir = FreshDir("readonly");
  {
    auto w = Open(dir);
    ASSERT_TRUE(w->Store(Key("k"), PayloadKind::kCpuCode, "v").ok());
  }
  auto r = Open(dir, /*read_only=*/true);
  EXPECT_EQ(r->Lookup(Key("k"), PayloadKind::kCpuCode).value_or(""), "v");
  ASSERT_TRUE(r->Store(Key("other"), PayloadKind::kCpuCode, "w").ok());
  EXPECT_FALSE(fs::exists(dir + "/" + Key("other").Hex() + ".cjit"));
  auto missing = DiskCache::Open({dir + "/does-not-exist", true, 0});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("does not exist"), std::string::npos) << missing.status();
}

// A full disk (RLIMIT_FSIZE in a child process): the write fails cleanly, the process lives, no partial
// or temporary file is left, and an existing entry stays valid.
TEST(DiskCacheTest, FullDiskFailsCleanly) {
  std::string dir = FreshDir("full");
  {
    auto c = Open(dir);
    ASSERT_TRUE(c->Store(Key("small"), PayloadKind::kCpuCode, "ok").ok());
  }
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    struct rlimit lim {4096, 4096};
    setrlimit(RLIMIT_FSIZE, &lim);
    auto c = DiskCache::Open({dir, false, 0});
    if (!c.ok()) _exit(3);
    absl::Status st = (*c)->Store(Key("big"), PayloadKind::kCpuCode, std::string(1 << 20, 'x'));
    _exit(st.ok() ? 1 : 0);  // the store must fail, not kill us
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died from a signal: " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    EXPECT_TRUE(name == Key("small").Hex() + ".cjit" || name == ".lock") << "left behind: " << name;
  }
  auto c = Open(dir);
  EXPECT_EQ(c->Lookup(Key("small"), PayloadKind::kCpuCode).value_or(""), "ok");
  auto list = DiskCache::List(dir);
  ASSERT_TRUE(list.ok());
  for (const auto& e : *list) EXPECT_TRUE(e.ok) << e.file << ": " << e.problem;
}

TEST(DiskCacheTest, MaxBytesHoldsWithLruEviction) {
  std::string dir = FreshDir("lru");
  const int64_t max_bytes = 20000;
  auto c = Open(dir, false, max_bytes);
  std::string payload(3000, 'z');
  ASSERT_TRUE(c->Store(Key("keep"), PayloadKind::kCpuCode, payload).ok());
  for (int i = 0; i < 30; ++i) {
    ASSERT_TRUE(c->Store(Key("k" + std::to_string(i)), PayloadKind::kCpuCode, payload).ok());
    ASSERT_TRUE(c->Lookup(Key("keep"), PayloadKind::kCpuCode).has_value())
        << "a recently hit entry must survive eviction (i=" << i << ")";
    int64_t total = 0;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".cjit") total += static_cast<int64_t>(fs::file_size(e.path()));
    }
    EXPECT_LE(total, max_bytes);
  }
  EXPECT_GT(c->stats().evictions, 0);
  auto pruned = DiskCache::Prune(dir, 7000);
  ASSERT_TRUE(pruned.ok());
  auto list = DiskCache::List(dir);
  ASSERT_TRUE(list.ok());
  EXPECT_LE(list->size(), 2u);
}

fs::path SharedModel(const std::string& name) {
  return fs::path(testing::ModelsDir()) / name;
}

// Warm start on a real model: the second session compiles nothing and gives byte-identical outputs;
// corrupted entries are rejected, recompiled and replaced, with correct results.
// A directory shared with an untrusted user (docs/security.md): planted symlinks, FIFOs and huge sparse
// files are refused without being followed, blocking, or read; the lock file is never followed.
TEST(DiskCacheHostileTest, PlantedSymlinksFifosAndHugeFiles) {
  std::string dir = FreshDir("hostile");
  auto cache = Open(dir);
  std::string victim = dir + "_victim";
  WriteFile(victim, "secret");
  CacheKey k1 = Key("key one"), k2 = Key("key two"), k3 = Key("key three");
  // 1. An entry that is a symlink to a file elsewhere: refused (not read), and the target is untouched.
  fs::create_symlink(victim, dir + "/" + k1.Hex() + ".cjit");
  EXPECT_FALSE(cache->Lookup(k1, PayloadKind::kCpuCode).has_value());
  EXPECT_EQ(ReadFile(victim), "secret");
  // 2. A FIFO as an entry: refused at once (no blocking open).
  ASSERT_EQ(::mkfifo((dir + "/" + k2.Hex() + ".cjit").c_str(), 0644), 0);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(cache->Lookup(k2, PayloadKind::kCpuCode).has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  // 3. A sparse 3 GiB entry: refused from its size, never read.
  {
    int fd = ::open((dir + "/" + k3.Hex() + ".cjit").c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, int64_t{3} << 30), 0);
    ::close(fd);
  }
  t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(cache->Lookup(k3, PayloadKind::kCpuCode).has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_EQ(cache->stats().rejects, 3);
  // 4. A planted .lock symlink: eviction refuses it and does not create its target.
  fs::remove(dir + "/.lock");
  std::string target = dir + "_lock_target";
  fs::remove(target);
  fs::create_symlink(target, dir + "/.lock");
  auto bounded = Open(dir, false, 1);
  EXPECT_FALSE(bounded->Store(Key("key four"), PayloadKind::kCpuCode, "payload").ok() && fs::exists(target));
  EXPECT_FALSE(fs::exists(target));
  // 5. Writes never go through a planted name: temporary files are unpredictable and exclusive, and the
  //    entry itself replaces (renames over) a planted symlink rather than writing through it.
  fs::remove(dir + "/.lock");
  CacheKey k5 = Key("key five");
  fs::create_symlink(victim, dir + "/" + k5.Hex() + ".cjit");
  ASSERT_TRUE(cache->Store(k5, PayloadKind::kCpuCode, "payload").ok());
  EXPECT_EQ(ReadFile(victim), "secret");
  EXPECT_FALSE(fs::is_symlink(dir + "/" + k5.Hex() + ".cjit"));
  EXPECT_EQ(*cache->Lookup(k5, PayloadKind::kCpuCode), "payload");
  fs::remove_all(dir);
  fs::remove(victim);
}

// Entries are machine code: a valid entry (right magic, key, checksum) written by another user is never
// loaded, and not removed (it is not ours). Simulated with trusted_uid = another uid, so that the files
// this process writes look foreign; when run as root, also with a file really chowned to another user.
TEST(DiskCacheHostileTest, EntriesOwnedByAnotherUserAreNeverLoaded) {
  std::string dir = FreshDir("foreign");
  CacheKey k = Key("planted");
  ASSERT_TRUE(Open(dir)->Store(k, PayloadKind::kCpuCode, "attacker's code").ok());
  uid_t other = ::geteuid() == 0 ? 12345 : ::geteuid() + 1;
  auto strict = DiskCache::Open({dir, false, 0, static_cast<int64_t>(other)});
  ASSERT_TRUE(strict.ok());
  if (::geteuid() == 0) {
    // Root's own files are trusted by everyone: make the entry really belong to `other` instead.
    ASSERT_EQ(::chown((dir + "/" + k.Hex() + ".cjit").c_str(), other, other), 0);
    strict = DiskCache::Open({dir, false, 0, -1});
    ASSERT_TRUE(strict.ok());
  }
  EXPECT_FALSE((*strict)->Lookup(k, PayloadKind::kCpuCode).has_value());
  EXPECT_EQ((*strict)->stats().hits, 0);
  EXPECT_TRUE(fs::exists(dir + "/" + k.Hex() + ".cjit")) << "another user's file must be left in place";
  auto list = DiskCache::List(dir, ::geteuid() == 0 ? -1 : static_cast<int64_t>(other));
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_FALSE((*list)[0].ok);
  EXPECT_NE((*list)[0].problem.find("owned by uid"), std::string::npos) << (*list)[0].problem;
  fs::remove_all(dir);
}

TEST(DiskCacheHostileTest, OrphanedTemporaryFilesAreReportedAndReclaimed) {
  std::string dir = FreshDir("orphans");
  Open(dir);
  WriteFile(dir + "/.tmp-old", "partial");
  WriteFile(dir + "/.tmp-new", "partial");
  struct timespec times[2] = {{::time(nullptr) - 7200, 0}, {::time(nullptr) - 7200, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (dir + "/.tmp-old").c_str(), times, 0), 0);
  auto list = DiskCache::List(dir);
  ASSERT_TRUE(list.ok());
  int temps = 0;
  for (const auto& e : *list) {
    if (e.file.rfind(".tmp-", 0) == 0) {
      ++temps;
      EXPECT_FALSE(e.ok);
      EXPECT_NE(e.problem.find("unfinished write"), std::string::npos) << e.problem;
    }
  }
  EXPECT_EQ(temps, 2);  // `cjit cache verify` reports them
  Open(dir);            // a writable open reclaims the old one only
  EXPECT_FALSE(fs::exists(dir + "/.tmp-old"));
  EXPECT_TRUE(fs::exists(dir + "/.tmp-new"));
  fs::remove_all(dir);
}

TEST(DiskCacheHostileTest, ReadOnlyRejectSaysTheEntryStaysAndClearReportsFailures) {
  std::string dir = FreshDir("readonly_msg");
  auto cache = Open(dir);
  CacheKey k = Key("key");
  ASSERT_TRUE(cache->Store(k, PayloadKind::kCpuCode, "payload").ok());
  WriteFile(dir + "/" + k.Hex() + ".cjit", "garbage");
  std::vector<std::string> lines;
  SetLogSink([&](LogSeverity, const char*, int, std::string_view m) { lines.emplace_back(m); });
  auto ro = Open(dir, true);
  EXPECT_FALSE(ro->Lookup(k, PayloadKind::kCpuCode).has_value());
  SetLogSink(nullptr);
  EXPECT_TRUE(fs::exists(dir + "/" + k.Hex() + ".cjit"));
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines.back().find("left in place"), std::string::npos) << lines.back();
  EXPECT_EQ(lines.back().find("removed"), std::string::npos) << lines.back();
  // clear: an entry that cannot be removed (here a non-empty directory named like one) is an error.
  fs::create_directories(dir + "/stuck.cjit/inner");
  auto cleared = DiskCache::Clear(dir);
  ASSERT_FALSE(cleared.ok());
  EXPECT_NE(cleared.status().message().find("could not be removed"), std::string::npos) << cleared.status();
  fs::remove_all(dir);
}

TEST(DiskCacheTest, WarmStartOnRealModel) {
  auto dir = SharedModel("ppocr_mobile_cls");
  CJIT_REQUIRE_DATA(dir / "model.onnx");
  std::string cache = FreshDir("warm");
  SessionOptions o;
  o.flags.device = "cpu";  // the CPU path under test, also on a machine with a GPU
  o.use_environment_flags = false;
  o.flags.intra_op_threads = 2;
  o.flags.async_compilation = Flags::AsyncCompilation::kFalse;  // counts at fixed runs below
  o.flags.persistent_cache_dir = cache;
  // Compiled-code entries only: autotuning entries (and their corruption) are tests/autotune_test.cc's, and
  // a re-tune after corruption may pick another algorithm, so bitwise equality would not hold.
  o.flags.autotune_level = 0;
  // Errors end the test as failures (an exception GoogleTest reports), never a dereference of an error.
  auto check = [](const absl::Status& st) {
    if (!st.ok()) throw std::runtime_error(std::string(st.message()));
  };
  auto run = [&](int times, std::vector<NamedTensor>* last) {
    auto s = Session::Load((dir / "model.onnx").string(), o);
    check(s.status());
    auto sets = ReadDataSets(dir.string(), **s);
    check(sets.status());
    for (int i = 0; i < times; ++i) {
      auto out = (*s)->Run((*sets)[0].inputs);
      check(out.status());
      OutputComparison cmp = CompareTensors("y", (*out)[0].tensor, (*sets)[0].outputs[0].tensor, 1e-3, 1e-4);
      EXPECT_TRUE(cmp.ok) << "run " << i << " max_abs " << cmp.max_abs;
      *last = *out;
    }
    return (*s)->stats();
  };
  std::vector<NamedTensor> cold_out, warm_out, healed_out;
  SessionStats cold = run(3, &cold_out);
  EXPECT_GT(cold.totals.compiles, 0);
  EXPECT_EQ(cold.totals.disk_writes, cold.totals.compiles);
  SessionStats warm = run(1, &warm_out);
  EXPECT_EQ(warm.totals.compiles, 0);
  EXPECT_GT(warm.totals.disk_hits, 0);
  EXPECT_EQ(warm.totals.fallback_executions, 0) << "a disk hit runs compiled from the first execution";
  EXPECT_TRUE(warm_out[0].tensor.BitwiseEquals(cold_out[0].tensor));
  // Corrupt every entry.
  for (const auto& e : fs::directory_iterator(cache)) {
    if (e.path().extension() != ".cjit") continue;
    std::string b = ReadFile(e.path().string());
    b[b.size() / 2] ^= 0x33;
    WriteFile(e.path().string(), b);
  }
  SessionStats healed = run(3, &healed_out);
  EXPECT_GT(healed.totals.disk_rejects, 0);
  // Rejected entries are recompiled, or instantiated from the kernels this process compiled for the cold
  // session (the process-wide kernel cache): generated code runs either way.
  EXPECT_GT(healed.totals.compiles + healed.totals.polymorphic_hits, 0);
  EXPECT_TRUE(healed_out[0].tensor.BitwiseEquals(cold_out[0].tensor));
  auto list = DiskCache::List(cache);
  ASSERT_TRUE(list.ok());
  for (const auto& e : *list) EXPECT_TRUE(e.ok) << "bad entry left: " << e.file << " " << e.problem;
}

}  // namespace
}  // namespace cjit
