#include "runtime/cuda/device_allocator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/mutex.h"

namespace cjit {

CachingDeviceAllocator::CachingDeviceAllocator(std::unique_ptr<DeviceMemoryBackend> backend, bool release_on_oom)
    : backend_(std::move(backend)), release_on_oom_(release_on_oom) {}

CachingDeviceAllocator::~CachingDeviceAllocator() {
  MutexLock lock(&mu_);
  if (!in_use_.empty()) CJIT_LOG(WARNING) << "device allocator destroyed with " << in_use_.size() << " blocks in use";
  for (const auto& [address, size] : in_use_) backend_->Free(address);
  ReleaseCacheLocked();
}

size_t CachingDeviceAllocator::RoundSize(size_t bytes) {
  constexpr size_t kGranule = 512, kSmall = size_t{1} << 20;
  if (bytes == 0) bytes = 1;
  if (bytes <= kSmall) return (bytes + kGranule - 1) / kGranule * kGranule;
  // 8 classes per power of two: step = 2^(floor(log2(bytes)) - 3).
  int log2 = 63 - __builtin_clzll(static_cast<unsigned long long>(bytes));
  size_t step = size_t{1} << (log2 - 3);
  return (bytes + step - 1) / step * step;
}

absl::StatusOr<uint64_t> CachingDeviceAllocator::Allocate(size_t bytes) {
  size_t size = RoundSize(bytes);
  MutexLock lock(&mu_);
  uint64_t address = 0;
  auto it = free_.find(size);
  if (it != free_.end() && !it->second.empty()) {
    address = it->second.back();
    it->second.pop_back();
    stats_.bytes_cached -= static_cast<int64_t>(size);
    ++stats_.cache_hits;
  } else {
    absl::StatusOr<uint64_t> got = backend_->Allocate(size);
    if (release_on_oom_ && absl::IsResourceExhausted(got.status()) && stats_.bytes_cached > 0) {
      ReleaseCacheLocked();
      got = backend_->Allocate(size);
    }
    if (!got.ok()) {
      return absl::Status(got.status().code(),
                          absl::StrCat("device allocation of ", bytes, " bytes failed: ", got.status().message(),
                                       " (in use: ", stats_.bytes_in_use, " bytes in ", in_use_.size(),
                                       " blocks; peak ", stats_.peak_bytes_in_use, ")"));
    }
    address = *got;
    ++stats_.backend_allocations;
  }
  in_use_[address] = size;
  stats_.bytes_in_use += static_cast<int64_t>(size);
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return address;
}

void CachingDeviceAllocator::Free(uint64_t address) {
  MutexLock lock(&mu_);
  auto it = in_use_.find(address);
  if (it == in_use_.end()) {
    CJIT_LOG(ERROR) << "device allocator: Free of unknown address 0x" << std::hex << address;
    return;
  }
  size_t size = it->second;
  in_use_.erase(it);
  stats_.bytes_in_use -= static_cast<int64_t>(size);
  stats_.bytes_cached += static_cast<int64_t>(size);
  free_[size].push_back(address);
}

AllocatorStats CachingDeviceAllocator::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

void CachingDeviceAllocator::ReleaseCache() {
  MutexLock lock(&mu_);
  ReleaseCacheLocked();
}

void CachingDeviceAllocator::ReleaseCacheLocked() {
  for (auto& [size, blocks] : free_) {
    for (uint64_t a : blocks) backend_->Free(a);
    stats_.cache_releases += static_cast<int64_t>(blocks.size());
  }
  free_.clear();
  stats_.bytes_cached = 0;
}

}  // namespace cjit
