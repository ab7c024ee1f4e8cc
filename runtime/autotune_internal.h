// Pieces of the CPU autotuner shared by runtime/autotune.cc (tables, lookups, measurement) and
// runtime/autotune_trial.cc (the trial of one node's candidates). Not part of the runtime's API.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/autotune.h"
#include "runtime/cpu/kernel.h"

namespace cjit {
namespace autotune_internal {

// One algorithm the tuner may try for a node: an id the kernel's algorithm list offers (or the test-only
// candidate of SetTestOnlyCandidate).
struct Candidate {
  std::string id;
  bool deterministic = true;
  std::shared_ptr<const TestOnlyCandidate> test_only;  // set for the test-only candidate
};

// A KernelContext describing the node and its inputs (no outputs), for the candidate lists. Holds
// pointers to its arguments.
KernelContext DescribeContext(const Node& node, const std::vector<const Tensor*>& inputs,
                              const std::vector<bool>& is_constant, const std::vector<PostOp>* post_ops,
                              const std::vector<InferOutput>* inferred, int threads);

// The node's candidates, likeliest winners first, then the test-only candidate where one is set for its op.
std::vector<Candidate> ListCandidates(const KernelContext& ctx);

// Evicts the data of the measured problem from L1/L2 by rewriting 4 MiB (buffers pooled process-wide).
// Thread-safe.
void FlushCaches();

}  // namespace autotune_internal
}  // namespace cjit
