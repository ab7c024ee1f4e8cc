#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>

#include "compiler/ir/text.h"
#include "compiler/ir/verifier.h"
#include "compiler/passes/specialize_shapes.h"
#include "gtest/gtest.h"
#include "runtime/cpu/kernel.h"

namespace cjit {
namespace {

constexpr char kGraph[] = R"(
graph g(%x: f32[1,N], %n: i64[]) {
  %w = constant f32[2] {0.5, 2}
  %s = constant i64[1] {-1}
  %y: f32[1,N] = Mul(%x, %w)
  %z = Reshape(%y, %s)
  %a, %b = Split(%z) {axis=0}
  return %a, %b
}
)";

TEST(IrTextTest, RoundTrip) {
  auto g = ParseGraph(kGraph);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(VerifyGraph(**g).ok());
  std::string text = PrintGraph(**g);
  auto g2 = ParseGraph(text);
  ASSERT_TRUE(g2.ok()) << g2.status() << "\n" << text;
  EXPECT_EQ(PrintGraph(**g2), text);
  EXPECT_NE(text.find("%y: f32[1,N] = Mul(%x, %w)"), std::string::npos) << text;
  EXPECT_NE(text.find("{axis=0}"), std::string::npos) << text;
}

TEST(IrTextTest, ParseErrorsNamePosition) {
  auto g = ParseGraph("graph g(%x: f32[2]) {\n  %y = Add(%x, %q)\n  return %y\n}");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("undefined value %q"), std::string::npos) << g.status();
  EXPECT_NE(g.status().message().find("2:"), std::string::npos) << g.status();
  auto h = ParseGraph("graph g(%x: f99[2]) { return %x }");
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("unknown dtype 'f99'"), std::string::npos);
}

TEST(VerifierTest, DetectsCycle) {
  Graph g;
  Value* x = g.AddInput("x", DType::kF32, Shape::Of({2}));
  Node* a = g.AddNode("Relu", "a", {x}, {"a_out"});
  Node* b = g.AddNode("Relu", "b", {a->outputs[0]}, {"b_out"});
  a->inputs[0] = b->outputs[0];
  g.AddOutput(b->outputs[0]);
  absl::Status st = VerifyGraph(g);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cycle"), std::string::npos) << st;
}

TEST(SpecializeShapesTest, FoldsShapeChainsAndInfersDims) {
  auto g = ParseGraph(R"(
graph g(%x: f32[1,3,W]) {
  %i = constant i64[1] {2}
  %zero = constant i64[1] {-1}
  %s = Shape(%x)
  %w = Gather(%s, %i) {axis=0}
  %t = Concat(%zero, %w) {axis=0}
  %y = Reshape(%x, %t)
  %r = Relu(%y)
  return %r
})");
  ASSERT_TRUE(g.ok()) << g.status();
  auto eval = [](const Node& n, const std::vector<const Tensor*>& in) { return EvaluateNode(n, in, 1); };
  ASSERT_TRUE(SpecializeShapes(**g, {{1, 3, 48}}, eval).ok());
  std::string text = PrintGraph(**g);
  // Shape, Gather and Concat fold away; the Reshape target becomes the constant {-1, 48}.
  EXPECT_EQ(text.find("Shape("), std::string::npos) << text;
  EXPECT_EQ(text.find("Gather("), std::string::npos) << text;
  EXPECT_NE(text.find("f32[3,48] = Relu"), std::string::npos) << text;
}

TEST(SpecializeShapesTest, IncompatibleShapesNameTheNode) {
  auto g = ParseGraph("graph g(%x: f32[2,3], %y: f32[4]) {\n  %z = Add(%x, %y)\n  return %z\n}");
  ASSERT_TRUE(g.ok());
  auto eval = [](const Node& n, const std::vector<const Tensor*>& in) { return EvaluateNode(n, in, 1); };
  absl::Status st = SpecializeShapes(**g, {{2, 3}, {4}}, eval);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("node 'z' (Add)"), std::string::npos) << st;
  EXPECT_NE(st.message().find("cannot broadcast"), std::string::npos) << st;
}

}  // namespace
}  // namespace cjit

// Large tensor buffers come from the best-fit arena (compiler/ir/buffer_arena.h): memory freed by one
// shape serves later tensors of any smaller size (split) and, once neighbours are free again, larger ones
// (coalesced), so a run at a new shape does not page-fault fresh memory for every activation.
// The arena block under a tensor: tensors start at a "color" offset below 4 KiB into their page-aligned
// block (compiler/ir/tensor.cc), 64-byte aligned.
uintptr_t Block(const void* p) {
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  return reinterpret_cast<uintptr_t>(p) & ~uintptr_t{4095};
}

TEST(TensorArenaTest, TensorsReuseFreedMemoryOfAnySmallerSize) {
  uintptr_t first;
  {
    cjit::Tensor t(cjit::DType::kF32, {3 << 20});  // 12 MiB (+ 4 KiB for the color offset)
    first = Block(t.raw());
    std::memset(t.raw(), 0x5a, t.nbytes());
  }
  {
    cjit::Tensor a(cjit::DType::kF32, {1 << 20});  // 4 MiB: the front of the freed 12 MiB chunk
    cjit::Tensor b(cjit::DType::kF32, {1 << 20});  // the next 4 MiB (+ 4 KiB) of it
    EXPECT_EQ(Block(a.raw()), first);
    EXPECT_EQ(Block(b.raw()), first + (4 << 20) + 4096);
    EXPECT_NE(reinterpret_cast<uintptr_t>(a.raw()) % 4096, reinterpret_cast<uintptr_t>(b.raw()) % 4096)
        << "consecutive tensors get different colors";
    b.data<float>()[b.numel() - 1] = 1.0f;  // the whole requested range is writable
    EXPECT_EQ(b.data<float>()[b.numel() - 1], 1.0f);
  }
  cjit::Tensor whole(cjit::DType::kF32, {3 << 20});  // both freed: coalesced into the 12 MiB chunk again
  EXPECT_EQ(Block(whole.raw()), first);
  EXPECT_GE(cjit::TensorArenaStats().in_use_bytes, size_t{12} << 20);
}

// Activations of 32 KiB - 1 MiB (a small CNN at a new width; a 63 KiB layout transpose) are arena blocks
// too: glibc's heap trimming and mmap threshold made each run page-fault them again.
TEST(TensorArenaTest, MidSizedTensorsComeFromTheArena) {
  const cjit::BufferArena::Stats before = cjit::TensorArenaStats();
  uintptr_t first;
  {
    cjit::Tensor t(cjit::DType::kF32, {64 << 10});  // 256 KiB
    first = Block(t.raw());
    EXPECT_GE(cjit::TensorArenaStats().in_use_bytes, before.in_use_bytes + (size_t{256} << 10));
  }
  cjit::Tensor a(cjit::DType::kF32, {25 << 10});  // 100 KiB: the front of the freed 256 KiB chunk
  EXPECT_EQ(Block(a.raw()), first);
  cjit::Tensor small(cjit::DType::kF32, {1000});  // 4 KB: malloc, not the arena
  EXPECT_LT(cjit::TensorArenaStats().in_use_bytes, before.in_use_bytes + (size_t{256} << 10));
  const size_t in_use = cjit::TensorArenaStats().in_use_bytes;
  cjit::Tensor mid(cjit::DType::kF32, {16128});  // 63 KiB (oww_embedding's transpose output): the arena
  EXPECT_GE(cjit::TensorArenaStats().in_use_bytes, in_use + 16128 * 4);
}

TEST(BufferArenaTest, SplitsCoalescesAndNeverOverlaps) {
  cjit::BufferArena arena({size_t{256} << 20, size_t{32} << 20});
  std::mt19937 rng(7);
  struct Live {
    char* p;
    size_t n;
    uint8_t tag;
  };
  std::vector<Live> live;
  size_t want_in_use = 0;
  for (int step = 0; step < 3000; ++step) {
    const bool alloc = live.empty() || (live.size() < 24 && rng() % 3 != 0);
    if (alloc) {
      // Half small blocks (64 KiB - 1 MiB, split from and coalesced into the large ones), half large.
      const size_t n = rng() % 2 ? (size_t{64} << 10) + rng() % (size_t{1} << 20)
                                 : (size_t{1} << 20) + rng() % (size_t{24} << 20);
      size_t usable = 0;
      char* p = static_cast<char*>(arena.Allocate(n, &usable));
      if (p == nullptr) continue;  // the cap: fine, the caller allocates elsewhere
      ASSERT_GE(usable, n);
      ASSERT_EQ(reinterpret_cast<uintptr_t>(p) % cjit::BufferArena::kGranule, 0u);
      ASSERT_TRUE(arena.Owns(p) && arena.Owns(p + usable - 1));
      const uint8_t tag = static_cast<uint8_t>(step);
      std::memset(p, tag, n);
      live.push_back({p, n, tag});
      want_in_use += usable;
    } else {
      const size_t k = rng() % live.size();
      const Live l = live[k];
      // Every byte still holds this block's tag: no other block was placed over it.
      for (size_t off = 0; off < l.n; off += 4093) ASSERT_EQ(static_cast<uint8_t>(l.p[off]), l.tag) << "step " << step;
      ASSERT_EQ(static_cast<uint8_t>(l.p[l.n - 1]), l.tag);
      const size_t before = arena.stats().in_use_bytes;
      arena.Free(l.p);
      want_in_use -= before - arena.stats().in_use_bytes;
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
    ASSERT_EQ(arena.stats().in_use_bytes, want_in_use);
    ASSERT_LE(arena.stats().reserved_bytes, size_t{256} << 20);
  }
  for (const Live& l : live) arena.Free(l.p);
  const cjit::BufferArena::Stats st = arena.stats();
  EXPECT_EQ(st.in_use_bytes, 0u);
  EXPECT_EQ(st.free_chunks, st.regions) << "every region coalesced back into one free chunk";
}

// Resident pages of [p, p + n) by mincore (independent of the arena's own bookkeeping).
size_t ResidentPages(const void* p, size_t n) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v((n + page - 1) / page);
  if (mincore(const_cast<void*>(p), n, v.data()) != 0) return static_cast<size_t>(-1);
  size_t resident = 0;
  for (unsigned char b : v) resident += b & 1;
  return resident;
}

// A block's never-used pages are prefaulted (resident before anything touches them); pages used before
// are not prefaulted again; populate = false leaves them to the first touch.
TEST(BufferArenaTest, PrefaultsFirstUsedPagesOnce) {
  if (!cjit::BufferArena::PopulateSupported()) {
    GTEST_SKIP() << "this kernel lacks madvise(MADV_POPULATE_WRITE) (Linux < 5.14): pages fault in at first touch";
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t n = size_t{8} << 20;
  cjit::BufferArena arena({size_t{256} << 20, size_t{64} << 20, true});
  char* p = static_cast<char*>(arena.Allocate(n));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(ResidentPages(p, n), n / page);
  EXPECT_EQ(arena.stats().populated_bytes, n);
  arena.Free(p);
  char* q = static_cast<char*>(arena.Allocate(n));  // the same pages again: nothing new to prefault
  EXPECT_EQ(q, p);
  EXPECT_EQ(arena.stats().populated_bytes, n);
  char* r = static_cast<char*>(arena.Allocate(2 * n));  // 8 MiB of new pages
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(arena.stats().populated_bytes, 3 * n);
  EXPECT_EQ(ResidentPages(r, 2 * n), 2 * n / page);
  std::memset(r, 7, 2 * n);
  arena.Free(q);
  arena.Free(r);

  cjit::BufferArena lazy({size_t{256} << 20, size_t{64} << 20, false});
  char* z = static_cast<char*>(lazy.Allocate(n));
  ASSERT_NE(z, nullptr);
  EXPECT_EQ(ResidentPages(z, n), 0u);
  EXPECT_EQ(lazy.stats().populated_bytes, 0u);
  lazy.Free(z);
}

TEST(BufferArenaTest, CapReleasesFreeRegionsThenRefuses) {
  cjit::BufferArena arena({size_t{64} << 20, size_t{16} << 20});
  void* a = arena.Allocate(size_t{16} << 20);
  ASSERT_NE(a, nullptr);
  void* b = arena.Allocate(size_t{40} << 20);  // a second region (the first is full)
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(arena.Allocate(size_t{40} << 20), nullptr);  // beyond the cap: refused
  EXPECT_EQ(arena.Allocate(size_t{65} << 20), nullptr);
  EXPECT_EQ(arena.Allocate(0), nullptr);
  arena.Free(b);
  arena.Free(a);
  void* c = arena.Allocate(size_t{60} << 20);  // fits only after both free regions are released
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(arena.stats().regions, 1u);
  arena.Free(c);
  arena.Free(nullptr);
}

TEST(BufferArenaTest, ConcurrentAllocateAndFree) {
  cjit::BufferArena arena({size_t{512} << 20, size_t{64} << 20});
  std::atomic<int> corrupt{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      for (int i = 0; i < 300; ++i) {
        const size_t n = (size_t{1} << 20) + rng() % (size_t{8} << 20);
        char* p = static_cast<char*>(arena.Allocate(n));
        if (p == nullptr) continue;
        const char tag = static_cast<char>(t * 50 + i % 50);
        std::memset(p, tag, n);
        std::this_thread::yield();
        if (p[0] != tag || p[n / 2] != tag || p[n - 1] != tag) ++corrupt;
        arena.Free(p);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(corrupt.load(), 0);
  EXPECT_EQ(arena.stats().in_use_bytes, 0u);
}
