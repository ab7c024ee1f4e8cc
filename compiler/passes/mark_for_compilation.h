// Auto-clustering (TensorFlow's MarkForCompilationPass, TF user guide §9.1): groups clusterable ops of a
// specialized graph into clusters and replaces each cluster by one node `cjit.Cluster` whose "body"
// attribute holds the cluster as a subgraph (inputs = values read from outside, outputs = values used
// outside; constants read by the cluster are copied into the body, so they become part of its identity).
//
// Candidates are ops whose op-table entry is clusterable (MatMul/Gemm/Conv included for mode kAll, only
// elementwise/reduction/data-movement for kFusible), with fully known output shapes and no subgraphs.
// Edges are contracted in post order through GraphCycles, never creating a cycle between a cluster and
// the rest of the graph. Clusters smaller than min_cluster_size (Identity counts 0) are dropped. Every node
// left out and every refused contraction is logged at CJIT_VLOG(2) with its reason, and reported.
//
// Before:  %a = Mul(%x, %s)  %b = Add(%a, %t)  %c = Relu(%b)  %d = Shape(%c) ...
// After:   %c = cjit.Cluster(%x, %s, %t) {cluster_id=0, body=<graph cluster_0>}   %d = Shape(%c) ...
#ifndef CJIT_COMPILER_PASSES_MARK_FOR_COMPILATION_H_
#define CJIT_COMPILER_PASSES_MARK_FOR_COMPILATION_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"

namespace cjit {

enum class ClusteringMode { kOff, kAll, kFusible };

struct ClusteringOptions {
  ClusteringMode mode = ClusteringMode::kAll;
  int min_cluster_size = 4;
  int max_cluster_size = 1 << 30;
  int64_t fuel = -1;  // stop marking after this many ops (-1 = unbounded)
  // QuantizeLinear / DequantizeLinear join clusters (the CPU code generator fuses the per-tensor ones into its
  // loops: uint8 / int8 loads and stores with the scale and zero point inside). Off for the GPU executor.
  bool quantize_ops = false;
};

struct ClusterInfo {
  int id = 0;
  int num_ops = 0;
  std::map<std::string, int> op_histogram;
  std::vector<std::string> inputs, outputs;
};

struct ClusteringReport {
  std::vector<ClusterInfo> clusters;
  // node name -> why it is not in a cluster
  std::vector<std::pair<std::string, std::string>> excluded;
  // Producer -> consumer contractions that were refused, with the reason (--max_cluster_size, cycle).
  struct RefusedMerge {
    std::string producer, consumer, reason;
  };
  std::vector<RefusedMerge> refused_merges;
};

// The op type of cluster nodes.
inline constexpr char kClusterOp[] = "cjit.Cluster";

absl::StatusOr<ClusteringReport> MarkForCompilation(Graph& graph, const ClusteringOptions& options);

}  // namespace cjit

#endif  // CJIT_COMPILER_PASSES_MARK_FOR_COMPILATION_H_
