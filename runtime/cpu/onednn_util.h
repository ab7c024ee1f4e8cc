// oneDNN helpers for CPU kernels: the process-wide engine and a thread-safe cache of primitives (and of
// weights reordered into a primitive's preferred layout, for constant weights). Internal to runtime/cpu.
#ifndef CJIT_RUNTIME_CPU_ONEDNN_UTIL_H_
#define CJIT_RUNTIME_CPU_ONEDNN_UTIL_H_

#include <functional>
#include <memory>
#include <string>

#include "oneapi/dnnl/dnnl.hpp"

namespace cjit {

dnnl::engine& CpuEngine();

// A cached entry: a primitive with the memory descriptors it was created for, and (optionally) weights
// already reordered into its layout.
struct DnnlEntry {
  dnnl::primitive prim;
  dnnl::memory::desc src_md, weights_md, dst_md, bias_md;
  dnnl::memory weights;  // reordered constant weights, or empty
  // Reorders between plain (NCHW) activations and the primitive's chosen layouts, created once.
  dnnl::primitive src_reorder, dst_reorder;
  bool has_src_reorder = false, has_dst_reorder = false;
  std::weak_ptr<uint8_t> weights_source;  // the buffer `weights` was reordered from
};

// Returns the entry for `key`, creating it with `make` on first use. Entries live for the process.
// `valid` (optional) rejects a cached entry, which is then re-created (e.g. its weights' buffer was freed
// and the address reused by another tensor).
std::shared_ptr<DnnlEntry> GetOrCreateDnnl(const std::string& key,
                                           const std::function<std::shared_ptr<DnnlEntry>()>& make,
                                           const std::function<bool(const DnnlEntry&)>& valid = nullptr);

}  // namespace cjit

#endif  // CJIT_RUNTIME_CPU_ONEDNN_UTIL_H_
