// The fleet-shared tier (cache/remote_cache.h) against a real redis-server started by the fixture on a unix
// socket in a temp dir: every payload kind round-trips, the lease (compile once per fleet) behaves as its
// contract says, and the maintenance calls (`cjit cache ... --remote`) list, verify and write entries.
// tests/remote_cache.sh covers the same tier through cjit processes.
#include "cache/remote_cache.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cache/disk_cache.h"
#include "cache/tiered_cache.h"
#include "gtest/gtest.h"

extern char** environ;

namespace cjit {
namespace {

namespace fs = std::filesystem;

class RemoteCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cjit-redis-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    socket_ = dir_ + "/redis.sock";
    std::vector<std::string> args = {"redis-server", "--port", "0", "--unixsocket", socket_, "--save", "",
                                     "--appendonly", "no", "--dir", dir_};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    const int rc = posix_spawnp(&pid_, "redis-server", &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ASSERT_EQ(rc, 0) << "redis-server is not installed (tools/setup.sh installs it)";
    for (int i = 0; i < 100 && !fs::exists(socket_); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_TRUE(fs::exists(socket_)) << "redis-server did not start";
    key_file_ = WriteKeyFile("key", "0123456789abcdef0123456789abcdef");
  }
  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string WriteKeyFile(const std::string& name, const std::string& key) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << key << "\n";
    ::chmod(path.c_str(), 0600);
    return path;
  }
  std::shared_ptr<RemoteCache> Open(int64_t lease_ms = 15000, const std::string& key_file = "") {
    RemoteCacheOptions o;
    o.url = "unix://" + socket_;
    o.key_file = key_file.empty() ? key_file_ : key_file;
    o.timeout_ms = 1000;
    o.lease_ms = lease_ms;
    auto rc = RemoteCache::Open(o);
    EXPECT_TRUE(rc.ok()) << rc.status();
    return rc.ok() ? *rc : nullptr;
  }
  static CacheKey Key(const std::string& text) { return CacheKey{text, Fingerprint64(text)}; }

  std::string dir_, socket_, key_file_;
  pid_t pid_ = -1;
};

TEST_F(RemoteCacheTest, EveryPayloadKindRoundTrips) {
  auto writer = Open(), reader = Open();
  for (PayloadKind kind : {PayloadKind::kCpuCode, PayloadKind::kPtx, PayloadKind::kAutotune}) {
    const std::string payload = std::string("payload of kind ") + PayloadKindName(static_cast<uint32_t>(kind)) +
                                std::string(1000, '\0') + "end";
    writer->StoreAsync(Key("k"), kind, payload);
  }
  ASSERT_TRUE(writer->Flush(5000));
  for (PayloadKind kind : {PayloadKind::kCpuCode, PayloadKind::kPtx, PayloadKind::kAutotune}) {
    auto got = reader->Lookup(Key("k"), kind);
    ASSERT_TRUE(got.has_value()) << PayloadKindName(static_cast<uint32_t>(kind));
    EXPECT_EQ(got->substr(0, 16), "payload of kind ");
    EXPECT_EQ(got->size(), 16 + std::string(PayloadKindName(static_cast<uint32_t>(kind))).size() + 1003);
  }
  EXPECT_FALSE(reader->Lookup(Key("other"), PayloadKind::kCpuCode).has_value());
  EXPECT_EQ(reader->stats().hits, 3);
  EXPECT_EQ(reader->stats().misses, 1);
}

TEST_F(RemoteCacheTest, AutotuningLookupsAskOnlyForIndexedResults) {
  auto writer = Open(), reader = Open();
  writer->StoreAsync(Key("tuned"), PayloadKind::kAutotune, "v1\na\n1\n2");
  ASSERT_TRUE(writer->Flush(5000));
  EXPECT_TRUE(reader->Lookup(Key("tuned"), PayloadKind::kAutotune).has_value());  // reads the index
  // Published after the reader's read of the index: not asked for until the index is a second old ...
  writer->StoreAsync(Key("tuned later"), PayloadKind::kAutotune, "v1\nb\n1\n2");
  ASSERT_TRUE(writer->Flush(5000));
  const int64_t bytes = reader->stats().bytes_read;
  EXPECT_FALSE(reader->Lookup(Key("tuned later"), PayloadKind::kAutotune).has_value());
  EXPECT_EQ(reader->stats().bytes_read, bytes) << "no GET for a result the index does not list";
  // ... except by a lookup that bypasses it (a producer's last look before tuning), and then.
  EXPECT_TRUE(reader->Lookup(Key("tuned later"), PayloadKind::kAutotune, /*use_index=*/false).has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_TRUE(reader->Lookup(Key("tuned later"), PayloadKind::kAutotune).has_value());
  // Compiled code is not indexed: always asked for.
  writer->StoreAsync(Key("code"), PayloadKind::kCpuCode, "object code");
  ASSERT_TRUE(writer->Flush(5000));
  EXPECT_TRUE(reader->Lookup(Key("code"), PayloadKind::kCpuCode).has_value());
}

TEST_F(RemoteCacheTest, OneProcessHoldsALeaseUntilItPublishes) {
  auto a = Open(), b = Open();  // two instances: two processes' tokens
  const CacheKey k = Key("cluster");
  EXPECT_EQ(a->TryLease(k, PayloadKind::kCpuCode), RemoteCache::Lease::kAcquired);
  EXPECT_EQ(b->TryLease(k, PayloadKind::kCpuCode), RemoteCache::Lease::kHeld);
  EXPECT_EQ(a->TryLease(k, PayloadKind::kCpuCode), RemoteCache::Lease::kHeld) << "a lease is not reentrant";
  // Another payload kind under the same key is another lease.
  EXPECT_EQ(b->TryLease(k, PayloadKind::kAutotune), RemoteCache::Lease::kAcquired);
  // b's release of a lease it does not hold leaves a's in place.
  b->ReleaseLease(k, PayloadKind::kCpuCode);
  ASSERT_TRUE(b->Flush(5000));
  EXPECT_EQ(b->TryLease(k, PayloadKind::kCpuCode), RemoteCache::Lease::kHeld);
  // a publishes, then releases: whoever finds the lease gone finds the entry.
  a->StoreAsync(k, PayloadKind::kCpuCode, "code");
  a->ReleaseLease(k, PayloadKind::kCpuCode);
  ASSERT_TRUE(a->Flush(5000));
  EXPECT_EQ(b->Lookup(k, PayloadKind::kCpuCode).value_or(""), "code");
  EXPECT_EQ(b->TryLease(k, PayloadKind::kCpuCode), RemoteCache::Lease::kAcquired);
  EXPECT_EQ(a->stats().leases, 1);
  EXPECT_EQ(b->stats().lease_waits, 2);
}

TEST_F(RemoteCacheTest, ALeaseExpires) {
  auto a = Open(/*lease_ms=*/200), b = Open(/*lease_ms=*/200);
  const CacheKey k = Key("cluster");
  ASSERT_EQ(a->TryLease(k, PayloadKind::kCpuCode), RemoteCache::Lease::kAcquired);  // a dies holding it
  EXPECT_EQ(b->TryLease(k, PayloadKind::kCpuCode), RemoteCache::Lease::kHeld);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(b->TryLease(k, PayloadKind::kCpuCode), RemoteCache::Lease::kAcquired);
}

TEST_F(RemoteCacheTest, ForgedLeasesAreNotHonoured) {
  auto a = Open(/*lease_ms=*/1000), b = Open(/*lease_ms=*/1000);
  const CacheKey k = Key("cluster");
  // Planted without expiry, or for longer than any process of the fleet asks: not a reason to wait.
  ASSERT_TRUE(a->PutNow(Key("unused"), PayloadKind::kCpuCode, "x").ok());  // connects
  const std::string lease = RemoteCache::LeaseKey(k, PayloadKind::kCpuCode);
  auto redis = [&](const std::string& command) {
    const std::string cli = "redis-cli -s " + socket_ + " " + command + " >/dev/null";
    ASSERT_EQ(std::system(cli.c_str()), 0) << cli;
  };
  redis("set " + lease + " forged");
  EXPECT_EQ(b->TryLease(k, PayloadKind::kCpuCode), RemoteCache::Lease::kUnavailable);
  redis("set " + lease + " forged px 3600000");
  EXPECT_EQ(b->TryLease(k, PayloadKind::kCpuCode), RemoteCache::Lease::kUnavailable);
  redis("del " + lease);
  EXPECT_EQ(a->TryLease(k, PayloadKind::kCpuCode), RemoteCache::Lease::kAcquired);
  EXPECT_EQ(b->TryLease(k, PayloadKind::kCpuCode), RemoteCache::Lease::kHeld) << "an honest lease is honoured";
}

TEST_F(RemoteCacheTest, NoLeasesWhenOffOrUnreachable) {
  auto off = Open(/*lease_ms=*/0);
  EXPECT_EQ(off->TryLease(Key("k"), PayloadKind::kCpuCode), RemoteCache::Lease::kUnavailable);
  RemoteCacheOptions o;
  o.url = "unix://" + dir_ + "/nobody.sock";
  o.key_file = key_file_;
  o.timeout_ms = 50;
  auto dead = RemoteCache::Open(o);
  ASSERT_TRUE(dead.ok());
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ((*dead)->TryLease(Key("k"), PayloadKind::kCpuCode), RemoteCache::Lease::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

TEST_F(RemoteCacheTest, TheChainKeepsRemoteHitsOnDiskAndAsksForTheLeaseAfterAMiss) {
  auto host_a = Open(), host_b = Open();
  auto chain = [&](const std::string& name, std::shared_ptr<RemoteCache> remote, bool read_only = false) {
    DiskCacheOptions o;
    o.dir = dir_ + "/" + name;
    fs::create_directories(o.dir);
    o.read_only = read_only;
    auto c = TieredCache::Open(o, std::move(remote));
    EXPECT_TRUE(c.ok()) << c.status();
    return std::move(*c);
  };
  auto a = chain("a", host_a), b = chain("b", host_b), ro = chain("ro", host_b, /*read_only=*/true);
  ASSERT_EQ(a->tiers().size(), 2u);
  EXPECT_STREQ(a->tiers()[0]->tier_name(), "disk");
  EXPECT_STREQ(a->tiers()[1]->tier_name(), "remote");
  const CacheKey k = Key("tuning result");
  ASSERT_FALSE(a->Lookup(k, PayloadKind::kAutotune).has_value());
  EXPECT_EQ(a->AcquireFleetLease(k, PayloadKind::kAutotune), TieredCache::FleetLease::kProduce);
  EXPECT_EQ(b->AcquireFleetLease(k, PayloadKind::kAutotune), TieredCache::FleetLease::kWait);
  EXPECT_EQ(ro->AcquireFleetLease(k, PayloadKind::kAutotune), TieredCache::FleetLease::kProduce)
      << "a read-only host takes no lease (it publishes nothing)";
  ASSERT_TRUE(a->Store(k, PayloadKind::kAutotune, "v1\nalgo\n1\n2").ok());
  a->ReleaseFleetLease(k, PayloadKind::kAutotune);
  ASSERT_TRUE(host_a->Flush(5000));
  // b's next try finds the lease free and the entry published: it is kept on b's disk, nothing to produce.
  EXPECT_EQ(b->AcquireFleetLease(k, PayloadKind::kAutotune), TieredCache::FleetLease::kFound);
  ASSERT_TRUE(host_b->Flush(5000));
  const char* tier = nullptr;
  EXPECT_EQ(b->Lookup(k, PayloadKind::kAutotune, &tier).value_or(""), "v1\nalgo\n1\n2");
  EXPECT_STREQ(tier, "disk") << "served from b's own disk tier";
  // and b released the lease it took to look: a third host is not told to wait.
  auto c = chain("c", Open());
  EXPECT_NE(c->AcquireFleetLease(k, PayloadKind::kAutotune), TieredCache::FleetLease::kWait);
  // A lookup on a fresh host answers from the remote tier and keeps the entry on its disk; a read-only
  // host answers from the remote tier and writes nothing.
  auto d = chain("d", Open());
  EXPECT_EQ(d->Lookup(k, PayloadKind::kAutotune, &tier).value_or(""), "v1\nalgo\n1\n2");
  EXPECT_STREQ(tier, "remote");
  EXPECT_EQ(d->far_hits(), 1);
  EXPECT_EQ(d->disk()->Lookup(k, PayloadKind::kAutotune).value_or(""), "v1\nalgo\n1\n2");
  EXPECT_EQ(ro->Lookup(k, PayloadKind::kAutotune, &tier).value_or(""), "v1\nalgo\n1\n2");
  EXPECT_STREQ(tier, "remote");
  EXPECT_FALSE(ro->disk()->Lookup(k, PayloadKind::kAutotune).has_value());
}

TEST_F(RemoteCacheTest, ListVerifiesEveryEntryAndPutNowWrites) {
  auto fleet = Open();
  ASSERT_TRUE(fleet->PutNow(Key("one"), PayloadKind::kCpuCode, "code one").ok());
  ASSERT_TRUE(fleet->PutNow(Key("two"), PayloadKind::kPtx, "ptx two").ok());
  std::vector<std::string> payloads, keys;
  auto entries = fleet->List(&payloads, &keys);
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE((*entries)[i].ok) << (*entries)[i].problem;
    EXPECT_GT((*entries)[i].ttl_s, 0);
    EXPECT_EQ(payloads[i], keys[i] == "one" ? "code one" : "ptx two");
  }
  // Another fleet's key verifies nothing; the reason is given per entry.
  auto other = Open(15000, WriteKeyFile("other", "fedcba9876543210fedcba9876543210"));
  auto foreign = other->List();
  ASSERT_TRUE(foreign.ok());
  ASSERT_EQ(foreign->size(), 2u);
  EXPECT_FALSE((*foreign)[0].ok);
  EXPECT_NE((*foreign)[0].problem.find("key this host does not have"), std::string::npos);
  // An unreachable server is an error naming it.
  RemoteCacheOptions o;
  o.url = "unix://" + dir_ + "/nobody.sock";
  o.key_file = key_file_;
  auto dead = RemoteCache::Open(o);
  ASSERT_TRUE(dead.ok());
  auto none = (*dead)->List();
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("nobody.sock"), std::string::npos) << none.status();
  EXPECT_FALSE((*dead)->PutNow(Key("x"), PayloadKind::kCpuCode, "x").ok());
}

}  // namespace
}  // namespace cjit
