#include "compiler/ir/buffer_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <utility>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older glibc headers lack the name
#endif

#if defined(__SANITIZE_ADDRESS__)
#define CJIT_ARENA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CJIT_ARENA_ASAN 1
#endif
#endif
#ifdef CJIT_ARENA_ASAN
#include <sanitizer/asan_interface.h>
#include "base/mutex.h"
#define CJIT_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define CJIT_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define CJIT_POISON(p, n) ((void)(p), (void)(n))
#define CJIT_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace cjit {
namespace {

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// 1 supported, 0 not (EINVAL: kernel before 5.14), -1 not probed yet.
std::atomic<int> g_populate_supported{-1};

// Prefaults [p, p + n) writable; false when the kernel cannot (then pages fault in at first touch, as
// without it). Other errors (ENOMEM under a memory limit) are left to the first touch as well.
bool Populate(char* p, size_t n) {
  if (g_populate_supported.load(std::memory_order_relaxed) == 0) return false;
  if (madvise(p, n, MADV_POPULATE_WRITE) == 0) {
    g_populate_supported.store(1, std::memory_order_relaxed);
    return true;
  }
  if (errno == EINVAL) g_populate_supported.store(0, std::memory_order_relaxed);
  return false;
}

}  // namespace

bool BufferArena::PopulateSupported() {
  if (g_populate_supported.load() < 0) {
    void* page = std::aligned_alloc(kGranule, kGranule);
    if (page != nullptr) {
      Populate(static_cast<char*>(page), kGranule);
      std::free(page);
    }
  }
  return g_populate_supported.load() == 1;
}

BufferArena::BufferArena(Options options) : options_(options) {}

BufferArena::~BufferArena() {
  for (Region& r : regions_) {
    if (r.base != nullptr) {
      CJIT_UNPOISON(r.base, r.size);
      std::free(r.base);
    }
  }
}

void BufferArena::InsertFree(char* p, Chunk& c) {
  c.free = true;
  free_.emplace(c.size, p);
}

void BufferArena::EraseFree(char* p, const Chunk& c) { free_.erase({c.size, p}); }

bool BufferArena::AddRegion(size_t at_least) {
  const size_t need = RoundUp(at_least, kRegionAlignment);
  if (need > options_.max_bytes || reserved_ > options_.max_bytes - need) return false;
  // Geometric growth (at least what is reserved already), within the cap.
  size_t size = std::max({need, RoundUp(options_.min_region_bytes, kRegionAlignment), reserved_});
  size = std::min(size, options_.max_bytes - reserved_) / kRegionAlignment * kRegionAlignment;
  size = std::max(size, need);
  char* base = static_cast<char*>(std::aligned_alloc(kRegionAlignment, size));
  if (base == nullptr) return false;
  CJIT_POISON(base, size);
  int index = -1;
  for (size_t i = 0; i < regions_.size(); ++i) {
    if (regions_[i].base == nullptr) {
      index = static_cast<int>(i);
      break;
    }
  }
  if (index < 0) {
    index = static_cast<int>(regions_.size());
    regions_.push_back({});
  }
  regions_[index] = {base, size, std::vector<bool>(size / kGranule, false)};
  reserved_ += size;
  Chunk& c = chunks_[base];
  c.size = size;
  c.region = index;
  InsertFree(base, c);
  return true;
}

void BufferArena::ReleaseFreeRegions() {
  for (Region& r : regions_) {
    if (r.base == nullptr) continue;
    auto it = chunks_.find(r.base);
    if (it == chunks_.end() || !it->second.free || it->second.size != r.size) continue;
    EraseFree(it->first, it->second);
    chunks_.erase(it);
    CJIT_UNPOISON(r.base, r.size);
    std::free(r.base);
    reserved_ -= r.size;
    r = {};
  }
}

void* BufferArena::Allocate(size_t bytes, size_t* usable) {
  std::vector<std::pair<char*, size_t>> to_populate;  // page runs first used by this block
  void* p = AllocateLocked(bytes, usable, &to_populate);
  for (const auto& [q, n] : to_populate) {
    if (Populate(q, n)) populated_.fetch_add(n, std::memory_order_relaxed);
  }
  return p;
}

void* BufferArena::AllocateLocked(size_t bytes, size_t* usable, std::vector<std::pair<char*, size_t>>* to_populate) {
  if (bytes == 0 || bytes > options_.max_bytes) return nullptr;
  const size_t size = RoundUp(bytes, kGranule);
  MutexLock lock(&mu_);
  auto best = free_.lower_bound({size, nullptr});
  if (best == free_.end()) {
    if (!AddRegion(size)) {
      ReleaseFreeRegions();
      if (!AddRegion(size)) return nullptr;
    }
    best = free_.lower_bound({size, nullptr});
    if (best == free_.end()) return nullptr;  // not reached: the new region fits
  }
  char* p = best->second;
  free_.erase(best);
  Chunk& c = chunks_[p];
  if (c.size - size >= kMinSplitBytes) {
    Chunk& rest = chunks_[p + size];
    rest.size = c.size - size;
    rest.region = c.region;
    InsertFree(p + size, rest);
    c.size = size;
  }
  c.free = false;
  in_use_ += c.size;
  if (usable != nullptr) *usable = c.size;
  CJIT_UNPOISON(p, c.size);
  if (options_.populate) {
    // Pages of this block never used before, as runs; marked now (the block is this caller's until it is
    // freed, so no other thread can be handed these pages before they are prefaulted).
    Region& r = regions_[c.region];
    const size_t first = static_cast<size_t>(p - r.base) / kGranule, count = c.size / kGranule;
    for (size_t i = first; i < first + count;) {
      if (r.populated[i]) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < first + count && !r.populated[j]) r.populated[j++] = true;
      to_populate->push_back({r.base + i * kGranule, (j - i) * kGranule});
      i = j;
    }
  }
  return p;
}

void BufferArena::Free(void* ptr) {
  if (ptr == nullptr) return;
  char* p = static_cast<char*>(ptr);
  MutexLock lock(&mu_);
  auto it = chunks_.find(p);
  if (it == chunks_.end() || it->second.free) {
    // Not a block of this arena, or freed twice: a bug of the caller. Sanitizer builds stop here; others
    // leave the arena as it is (a library never aborts its host).
#ifdef CJIT_ARENA_ASAN
    __builtin_trap();
#endif
    return;
  }
  in_use_ -= it->second.size;
  CJIT_POISON(p, it->second.size);
  // Merge with the following and the preceding chunk of the same region when they are free.
  auto next = std::next(it);
  if (next != chunks_.end() && next->second.free && next->second.region == it->second.region &&
      next->first == p + it->second.size) {
    EraseFree(next->first, next->second);
    it->second.size += next->second.size;
    chunks_.erase(next);
  }
  if (it != chunks_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.free && prev->second.region == it->second.region &&
        prev->first + prev->second.size == p) {
      EraseFree(prev->first, prev->second);
      prev->second.size += it->second.size;
      chunks_.erase(it);
      it = prev;
    }
  }
  InsertFree(it->first, it->second);
}

bool BufferArena::Owns(const void* ptr) {
  const char* p = static_cast<const char*>(ptr);
  MutexLock lock(&mu_);
  for (const Region& r : regions_) {
    if (r.base != nullptr && p >= r.base && p < r.base + r.size) return true;
  }
  return false;
}

BufferArena::Stats BufferArena::stats() {
  MutexLock lock(&mu_);
  Stats s;
  s.reserved_bytes = reserved_;
  s.in_use_bytes = in_use_;
  for (const Region& r : regions_) s.regions += r.base != nullptr;
  s.free_chunks = free_.size();
  s.populated_bytes = populated_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace cjit
