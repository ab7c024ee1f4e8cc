// What a cache entry holds: one number per payload format, written into every disk and remote entry
// (cache/disk_cache.h) and part of the Redis key (cache/remote_cache.h). A lookup names the kind it
// expects; an entry of another kind under the same key is a miss. Never renumber: entries already on disk
// and in a fleet's Redis carry these values.
#ifndef CJIT_CACHE_PAYLOAD_KIND_H_
#define CJIT_CACHE_PAYLOAD_KIND_H_

#include <cstdint>

namespace cjit {

enum class PayloadKind : uint32_t {
  kCpuCode = 1,   // CPU object code of a cluster's fused kernels (runtime/executable.h ExportPayload)
  kPtx = 2,       // kernel names + PTX text of a GPU fusion plan (runtime/cuda/ptx_cache.h)
  kAutotune = 3,  // one autotuning result: algorithm and times (runtime/autotune.h)
};

// "cpu-code", "ptx", "autotune", or nullptr for a number no build of this format wrote.
inline const char* PayloadKindName(uint32_t kind) {
  switch (static_cast<PayloadKind>(kind)) {
    case PayloadKind::kCpuCode: return "cpu-code";
    case PayloadKind::kPtx: return "ptx";
    case PayloadKind::kAutotune: return "autotune";
  }
  return nullptr;
}

}  // namespace cjit

#endif  // CJIT_CACHE_PAYLOAD_KIND_H_
