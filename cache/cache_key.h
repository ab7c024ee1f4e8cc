// Cache keys of compiled clusters (DESIGN.md "Cache"): a canonical serialization of everything that
// affects the generated code — the cluster's ops, attributes and constant values (by content, never by
// pointer or node/value name), the input dtypes and dims, the target, the codegen flags and a format
// version — and its 64-bit hash (xxHash XXH3, which names the entry). Two clusters with equal canonical
// text generate identical code; the full text is kept and compared on every lookup, so that a collision of
// the 64-bit hash is a miss, never a wrong entry. Constant values enter the text as their SHA-256 digest
// (ContentDigest): a constant cannot be crafted to collide with another's, as it could with a fast hash.
//
// Thread-safety: pure functions (ConstantDigest's memo is internally locked).
#ifndef CJIT_CACHE_CACHE_KEY_H_
#define CJIT_CACHE_CACHE_KEY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>

#include "absl/strings/string_view.h"
#include "compiler/ir/graph.h"

namespace cjit {

// Bump by hand whenever generated code or the executable's layout changes for the same inputs, and say why.
// 1: first CPU code generator (fused elementwise kernels + library steps).
// 2: row (reduction) kernels, shape-generic kernels with per-kernel object code in the payload.
// 3: kernel inputs read through strided views (absorbed Transpose/Slice/Expand/Reshape): new meta layout.
// 4: Conv epilogues as oneDNN post-ops (different kernels for the same cluster).
// (In-place Concat changes only buffer assignment at run time: no bump.)
// 5: Slice-1 (attribute form) read as a strided view too (different kernels for the same cluster).
// 6: float16/bfloat16 values and Cast in fused kernels; dtypes in kernel structures.
// 7: PTX row kernels come with a block-per-row variant (shared-memory reduction).
// 8: constants and tensor attributes by SHA-256 in the canonical text (were 64-bit XXH3).
// 9: CPU erf and tanh as vectorizable rational functions (were libm calls); Softmax multiplies by the
//    reciprocal of the row sum: different kernel code.
// 10: single-op fused groups run as library steps on the CPU (FusionPlanOptions::single_op_groups_as_library):
//    fewer kernels in a plan's payload.
// 11: LeakyRelu and Max/Min with a scalar are convolution post-ops (fewer kernels in a plan's payload).
// 12: Swish (x * Sigmoid(x)), the HardSwish op and scale/shift with the constant first are convolution
//     post-ops; runs of scale/shift merge.
// 13: the CPU row kernel stores a Softmax's exponentials in its output and reads them back: different code.
// 14: CPU row kernels compiled with the optimizing code generator (CodeGenOptLevel::Default): different
//     object code for the same kernels.
inline constexpr int kCacheFormatVersion = 14;

struct CacheKey {
  std::string canonical;  // full text
  uint64_t hash = 0;
  std::string Hex() const;
  bool operator==(const CacheKey& o) const { return hash == o.hash && canonical == o.canonical; }
};

// Canonical text of a cluster body. With include_shapes=false the input dims and the values of integer
// constants (shape operands computed from the input dims) are left out, giving the cluster's identity
// across shape signatures (used by the compile policy; never as a cache key).
std::string CanonicalClusterText(const Graph& body, bool include_shapes);

// Constants named by the identity of their tensor object instead of their content (see below).
using ConstantObjects = std::unordered_set<const Tensor*>;
inline constexpr int64_t kObjectNamedConstantBytes = 64 * 1024;

// Both texts in one pass (either pointer may be null): `keyed` = CanonicalClusterText(body, true),
// `identity` = CanonicalClusterText(body, false). A new signature needs both for every cluster.
// Constants enter by SHA-256 digest (ConstantDigest), as every key that outlives the process must (the
// persistent cache). `loaded` (optional): the session's loaded weights (alive with the session, shared by
// every signature's clone). With it, the identity takes every other constant (folded per signature) by
// dtype and rank only, as it does integer constants: a position-embedding table sliced to the sequence
// length has other contents at every length, and the cluster must keep one identity across lengths.
// `name_loaded_by_object` (sessions without a persistent cache): loaded weights of at least
// kObjectNamedConstantBytes enter both texts by their object (ConstantName kObject) instead of SHA-256,
// which cost ~0.5 ms per MB on a model's first signature (8 ms for a 17 MB decoder).
void CanonicalClusterTexts(const Graph& body, std::string* keyed, std::string* identity,
                           const ConstantObjects* loaded = nullptr, bool name_loaded_by_object = false);

CacheKey MakeCacheKey(const Graph& body, absl::string_view target, absl::string_view codegen_flags);
// The key of a body whose CanonicalClusterText(body, true) is `canonical_text`.
CacheKey MakeCacheKeyFromText(absl::string_view canonical_text, absl::string_view target,
                              absl::string_view codegen_flags);

uint64_t Fingerprint64(absl::string_view bytes);
// Canonical text of one attribute value (tensors by ConstantDigest; subgraphs as "G").
std::string AttrText(const Attribute& a);
// Lowercase hex SHA-256 of `bytes` (OpenSSL): how constant contents enter the canonical text.
std::string ContentDigest(absl::string_view bytes);
// ContentDigest of a constant's bytes, memoized while the tensor lives: a graph's per-signature clones
// share their constants (shared_ptr<const Tensor>, immutable by the IR's contract, compiler/ir/graph.h),
// so each weight is hashed once per process rather than once per cluster and signature. Thread-safe.
std::string ConstantDigest(const std::shared_ptr<const Tensor>& t);
// How many constants of more than 64 bytes ConstantDigest has hashed in this process (its memo's misses;
// the same live object is hashed once): for tests.
int64_t ConstantDigestsComputed();
// How `t` enters a canonical text: ConstantDigest (kContent), or "object#N" with N unique to the tensor object
// in this process (kObject, for tensors of at least kObjectNamedConstantBytes). Thread-safe.
enum class ConstantNaming { kContent, kObject };
std::string ConstantName(const std::shared_ptr<const Tensor>& t, ConstantNaming naming);

}  // namespace cjit

#endif  // CJIT_CACHE_CACHE_KEY_H_
