// PTX for a FusionPlan's kernels through the persistent cache (--persistent_cache_dir): an entry is keyed
// by the kernels' structures (kernel_layout.h: everything but dims and constants, which are launch
// arguments), the GPU target, the PTX ISA version, the LLVM version and libdevice, and the cache format
// version; its payload (PayloadKind::kPtx) is the kernel names and the PTX text. A hit skips LLVM
// entirely (the driver still JIT-compiles the PTX, and keeps its own cache of that). No CUDA needed:
// this is tested without a GPU.
//
// Errors: code generation errors (nvptx_compiler.h). A malformed payload is logged, ignored and replaced.
// Thread-safety: as CompileForNvptx and TieredCache (reentrant).
#ifndef CJIT_RUNTIME_CUDA_PTX_CACHE_H_
#define CJIT_RUNTIME_CUDA_PTX_CACHE_H_

#include "absl/status/statusor.h"
#include "cache/tiered_cache.h"
#include "compiler/codegen/fusion_plan.h"
#include "compiler/codegen/nvptx_compiler.h"

namespace cjit {

CacheKey PtxCacheKey(const FusionPlan& plan, const PtxOptions& options);

struct CachedPtx {
  std::string ptx;
  std::vector<std::string> kernel_names;  // one per plan.kernels entry
  bool from_disk = false;
};

// From `disk` (may be null) when it holds a valid entry; else generated and, unless read-only, stored.
absl::StatusOr<CachedPtx> PtxForPlan(const FusionPlan& plan, const PtxOptions& options, TieredCache* disk);

}  // namespace cjit

#endif  // CJIT_RUNTIME_CUDA_PTX_CACHE_H_
