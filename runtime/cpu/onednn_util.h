// oneDNN helpers for CPU kernels: the process-wide engine and a thread-safe cache of primitives (and of
// weights reordered into a primitive's preferred layout, for constant weights). Internal to runtime/cpu.
#ifndef CJIT_RUNTIME_CPU_ONEDNN_UTIL_H_
#define CJIT_RUNTIME_CPU_ONEDNN_UTIL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"

namespace cjit {

class Tensor;

dnnl::engine& CpuEngine();

// oneDNN dims of a tensor's dims.
dnnl::memory::dims ToDnnlDims(const std::vector<int64_t>& d);
// Strides of dense row-major dims (the last dim contiguous).
dnnl::memory::dims DenseStrides(const dnnl::memory::dims& d);
// Strides of logical [N, C, d1..dn] dims stored channels-last ([N, d1..dn, C]: nwc / nhwc / ndhwc).
dnnl::memory::dims ChannelsLastStrides(const dnnl::memory::dims& d);

// A cached entry: a primitive with the memory descriptors it was created for, and (optionally) weights
// already reordered into its layout.
struct DnnlEntry {
  dnnl::primitive prim;
  dnnl::memory::desc src_md, weights_md, dst_md, bias_md;
  dnnl::memory weights;  // reordered constant weights, or empty
  // Reorders between plain (NCHW) activations and the primitive's chosen layouts, created once.
  dnnl::primitive src_reorder, dst_reorder;
  bool has_src_reorder = false, has_dst_reorder = false;
  // The reorders are plain NCHW <-> channels-last transposes (run with BatchedTranspose, box_copy.h: oneDNN's
  // reorder moved a 1 x 128 x 112 x 112 input at 4.7 GB/s, 1.4 ms, four times the convolution).
  bool src_is_transpose = false, dst_is_transpose = false;
  std::weak_ptr<uint8_t> weights_source;  // the buffer `weights` was reordered from
  bool holds_weights = false;             // `weights` is set: the entry is dead once weights_source expires
  // Every primitive is created in user scratchpad mode (DnnlAttr): each execution gets its own scratchpad
  // of these sizes (ExecuteDnnl), so one cached primitive can run on several threads at once. With
  // oneDNN's library-managed scratchpad, concurrent executions of one primitive are not safe (oneDNN
  // "Primitive Attributes: Scratchpad Memory"; the cause of wrong results from concurrent Session::Run).
  dnnl::memory::desc scratchpad_md, src_reorder_scratchpad_md, dst_reorder_scratchpad_md;
  std::string impl;  // primitive_desc::impl_info_str() of `prim`, e.g. "jit:avx512_core"
};

// Attributes every clusterjit primitive starts from: user scratchpad mode (see DnnlEntry).
dnnl::primitive_attr DnnlAttr();
// A reorder primitive between two layouts, in user scratchpad mode; its scratchpad descriptor in `*scratch`.
dnnl::reorder MakeDnnlReorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to,
                              dnnl::memory::desc* scratch);
// Executes `prim` on `s` with `args` plus a scratchpad of `scratchpad_md` from a buffer owned by the calling
// thread (grown as needed), then waits for the stream.
void ExecuteDnnl(const dnnl::primitive& prim, dnnl::stream& s, std::unordered_map<int, dnnl::memory> args,
                 const dnnl::memory::desc& scratchpad_md);

// Returns the entry for `key` and the calling thread's OpenMP thread count, creating it with `make` on
// first use. The thread count is part of the key because oneDNN fixes a primitive's thread partition when
// it is created (its kernels' nthr is the OpenMP setting then) and keeps it at every execution: a primitive
// created while a run had lent a CPU to a background compile (1 thread) would otherwise serve later runs
// on one thread. `valid` (optional) rejects a cached entry, which is then re-created (e.g. its weights'
// buffer was freed and the address reused by another tensor). The process-wide cache is bounded: entries whose weights'
// buffer is gone (the Session that owned the constant was destroyed) are dropped, and beyond kMaxDnnlEntries the least
// recently used go (a caller still holding one keeps it alive). Thread-safe.
constexpr size_t kMaxDnnlEntries = 1024;
// Number of cached entries (for tests).
size_t DnnlCacheSize();
std::shared_ptr<DnnlEntry> GetOrCreateDnnl(const std::string& key,
                                           const std::function<std::shared_ptr<DnnlEntry>()>& make,
                                           const std::function<bool(const DnnlEntry&)>& valid = nullptr);

// Constant weights repacked once per weight buffer by `pack` (`count` floats), cached beside oneDNN's
// primitives under `key` (which names the buffer; no thread count: packing does not depend on it) and
// dropped with the buffer. The caller keeps the
// returned entry while it reads the packed weights.
std::shared_ptr<DnnlEntry> CachedPackedWeights(const Tensor& w, const std::string& key, int64_t count,
                                               const std::function<void(float*)>& pack);

}  // namespace cjit

#endif  // CJIT_RUNTIME_CPU_ONEDNN_UTIL_H_
