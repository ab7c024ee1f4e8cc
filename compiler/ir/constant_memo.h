// Constants derived from a session's constants (a weight permuted to channels-last, converted to bfloat16),
// memoized per source tensor while it lives. Every input signature of a session re-runs its passes on a
// clone that shares the session's constants; with the memo each derived constant is made once, not once per
// signature, and it is the same tensor object every time, so caches keyed by a constant (the cluster key's
// constant digests, oneDNN's reordered weights) keep hitting across signatures.
//
// Thread-safety: safe to call concurrently (one mutex; `make` runs under it).
#ifndef CJIT_COMPILER_IR_CONSTANT_MEMO_H_
#define CJIT_COMPILER_IR_CONSTANT_MEMO_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "compiler/ir/tensor.h"

namespace cjit {

// The tensor `make()` builds from `source`, for the derivation named by `kind` (distinct per derivation
// and its parameters, e.g. a hash of "channels_last rank 4"). Entries whose source is freed are swept.
std::shared_ptr<const Tensor> DerivedConstant(const std::shared_ptr<const Tensor>& source, uint64_t kind,
                                              const std::function<Tensor()>& make);

}  // namespace cjit

#endif  // CJIT_COMPILER_IR_CONSTANT_MEMO_H_
