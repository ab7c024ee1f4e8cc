// Best-fit arena with coalescing for large tensor buffers (the idea of TensorFlow's BFC allocator and ONNX
// Runtime's arena: "best-fit with coalescing", tensorflow/core/common_runtime/bfc_allocator.h).
//
// Why: a freshly mapped page costs a page fault at its first touch (~1.6 us per 4 KiB page on a VM: 64 MiB
// take 26 ms), and a model run on a new input shape allocates activations of sizes it never had before. A
// pool of whole freed blocks cannot serve them; this arena splits free chunks for smaller requests and merges
// neighbours again when they are freed, so memory that was touched once is reused for any later size.
//
// Memory comes in regions (2 MiB aligned; not advised as transparent huge pages: on a VM with THP defrag
// "madvise" that made the detector stream's total vary 750-1220 ms, against 810-845 ms without). A region
// is at least Options::min_region_bytes and at least the total already reserved (geometric growth: few
// regions); regions are never touched by the arena itself (untouched pages are not resident). The total reserved stays
// within Options::max_bytes: when a request does not fit, wholly free regions are released first, and if it still does
// not fit Allocate returns null (the caller allocates outside the arena).
//
// Pages a block uses for the first time are prefaulted in one madvise(MADV_POPULATE_WRITE) call (Linux
// 5.14+; Options::populate) outside the lock, instead of one page fault per 4 KiB page at first touch: on
// this project's VMs (paravirtualized guests, where each fault exits to the hypervisor) 64 MiB took
// 250-380 ms to fault in by touch and 50-80 ms prefaulted then touched. The arena records which pages it
// prefaulted (per region), so reused memory is never prefaulted twice.
//
// Chunks are multiples of kGranule bytes and kGranule-aligned; a free remainder smaller than
// kMinSplitBytes is left inside the chunk handed out (at most that much waste per block).
// Under AddressSanitizer free chunks are poisoned, so a use after free of an arena block is still reported.
//
// Thread-safety: every method may be called from any thread (one mutex).
#ifndef CJIT_COMPILER_IR_BUFFER_ARENA_H_
#define CJIT_COMPILER_IR_BUFFER_ARENA_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <utility>
#include <vector>
#include "base/mutex.h"

namespace cjit {

class BufferArena {
 public:
  static constexpr size_t kGranule = size_t{4} << 10;         // one page
  static constexpr size_t kMinSplitBytes = size_t{64} << 10;
  static constexpr size_t kRegionAlignment = size_t{2} << 20;

  struct Options {
    size_t max_bytes = size_t{1} << 30;        // cap on the bytes of all regions together
    size_t min_region_bytes = size_t{64} << 20;  // smallest region reserved (virtual until touched)
    bool populate = true;                        // prefault a block's first-used pages (see above)
  };
  struct Stats {
    size_t reserved_bytes = 0;  // all regions
    size_t in_use_bytes = 0;    // chunks handed out (rounded sizes)
    size_t regions = 0;
    size_t free_chunks = 0;
    size_t populated_bytes = 0;  // prefaulted by madvise so far (0 where the kernel lacks it)
  };

  explicit BufferArena(Options options);
  ~BufferArena();  // releases every region; blocks still handed out become invalid
  BufferArena(const BufferArena&) = delete;
  BufferArena& operator=(const BufferArena&) = delete;

  // A kGranule-aligned block of at least `bytes` bytes (its usable size in *usable, if given), or null when
  // `bytes` is 0 or does not fit within max_bytes. Contents are unspecified.
  void* Allocate(size_t bytes, size_t* usable = nullptr);
  // Returns a block from Allocate of this arena. Null is ignored.
  void Free(void* p);
  // True if `p` lies inside one of this arena's regions.
  bool Owns(const void* p);
  Stats stats();
  // Whether this kernel prefaults with MADV_POPULATE_WRITE (probed once per process).
  static bool PopulateSupported();

 private:
  struct Chunk {
    size_t size = 0;
    bool free = true;
    int region = 0;
  };
  struct Region {
    char* base = nullptr;
    size_t size = 0;
    std::vector<bool> populated;  // per kGranule page: prefaulted (or known touched) already
  };
  // Takes mu_; the caller prefaults `to_populate` after it is released.
  void* AllocateLocked(size_t bytes, size_t* usable, std::vector<std::pair<char*, size_t>>* to_populate)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Unlocked helpers (mu_ held).
  void InsertFree(char* p, Chunk& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseFree(char* p, const Chunk& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AddRegion(size_t at_least) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseFreeRegions() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Options options_;
  Mutex mu_;
  std::map<char*, Chunk> chunks_ ABSL_GUARDED_BY(mu_);              // every chunk by address
  std::set<std::pair<size_t, char*>> free_ ABSL_GUARDED_BY(mu_);  // by (size, address): best fit = lower_bound
  std::vector<Region> regions_ ABSL_GUARDED_BY(mu_);  // index = Chunk::region; released ones have base == null
  size_t reserved_ ABSL_GUARDED_BY(mu_) = 0;
  size_t in_use_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<size_t> populated_{0};  // counted after the prefault, outside mu_
};

}  // namespace cjit

#endif  // CJIT_COMPILER_IR_BUFFER_ARENA_H_
