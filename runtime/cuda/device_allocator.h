// Device memory allocators of the GPU runtime (--gpu_allocator, as TF_GPU_ALLOCATOR):
//  * CachingDeviceAllocator (default, "bfc"-like in purpose): freed blocks stay cached per size class and
//    are handed out again without a driver call; sizes are rounded up to a class (512 B granules up to
//    1 MiB, then 8 classes per power of two, so at most 12.5% is wasted above 1 MiB). When the backend
//    runs out of memory, every cached block is released and the allocation retried once.
//  * cuda_malloc_async: the driver's stream-ordered pool (cuMemAllocAsync/cuMemFreeAsync) — see
//    runtime/cuda/cuda_device.h; it needs no cache of ours.
// Reuse is safe because every kernel and copy of a device runs on that device's single stream: a block
// freed after enqueuing its last reader is only written by work enqueued later on the same stream.
//
// Addresses are device addresses (CUdeviceptr) as uint64_t; no CUDA header is needed here, so this file is
// built and unit-tested without the toolkit. Errors: ResourceExhaustedError naming the request size and the
// allocator's state when memory is exhausted. Thread-safety: Allocate/Free/stats may be called concurrently.
#ifndef CJIT_RUNTIME_CUDA_DEVICE_ALLOCATOR_H_
#define CJIT_RUNTIME_CUDA_DEVICE_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/mutex.h"

namespace cjit {

struct AllocatorStats {
  int64_t bytes_in_use = 0;       // rounded sizes of blocks handed out and not freed
  int64_t peak_bytes_in_use = 0;
  int64_t bytes_cached = 0;       // freed blocks kept for reuse
  int64_t backend_allocations = 0, cache_hits = 0, cache_releases = 0;
};

// Where memory comes from (cuMemAlloc for a device; host memory in tests).
class DeviceMemoryBackend {
 public:
  virtual ~DeviceMemoryBackend() = default;
  // ResourceExhaustedError when out of memory; other errors are passed through.
  virtual absl::StatusOr<uint64_t> Allocate(size_t bytes) = 0;
  virtual void Free(uint64_t address) = 0;
};

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  virtual absl::StatusOr<uint64_t> Allocate(size_t bytes) = 0;  // bytes 0 gives a valid unique block
  virtual void Free(uint64_t address) = 0;                     // an address this allocator returned
  virtual AllocatorStats stats() const = 0;
  virtual std::string name() const = 0;
  // Returns cached free blocks to the driver (a no-op for allocators that keep none).
  virtual void ReleaseCache() {}
};

class CachingDeviceAllocator : public DeviceAllocator {
 public:
  // release_on_oom: when the backend is out of memory, release every cached block and retry once. Off for
  // a CUDA graph's private pool, whose cached blocks are still addressed by the graph.
  explicit CachingDeviceAllocator(std::unique_ptr<DeviceMemoryBackend> backend, bool release_on_oom = true);
  ~CachingDeviceAllocator() override;  // returns every block to the backend (none may be in use)

  absl::StatusOr<uint64_t> Allocate(size_t bytes) override;
  void Free(uint64_t address) override;
  AllocatorStats stats() const override;
  std::string name() const override { return "caching"; }
  // Returns every cached block to the backend.
  void ReleaseCache() override;

  // The size class a request is rounded up to.
  static size_t RoundSize(size_t bytes);

 private:
  void ReleaseCacheLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::unique_ptr<DeviceMemoryBackend> backend_;
  bool release_on_oom_ = true;
  mutable Mutex mu_;
  std::map<size_t, std::vector<uint64_t>> free_ ABSL_GUARDED_BY(mu_);  // by rounded size
  std::map<uint64_t, size_t> in_use_ ABSL_GUARDED_BY(mu_);             // address -> rounded size
  AllocatorStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cjit

#endif  // CJIT_RUNTIME_CUDA_DEVICE_ALLOCATOR_H_
