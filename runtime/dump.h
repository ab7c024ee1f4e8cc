// The dump directory (--dump_to=DIR, as XLA's --xla_dump_to; --dump_pass_re as --xla_dump_hlo_pass_re).
//
// Files, for the N-th input signature a session specializes (sig_NNNN, from 0):
//   sig_NNNN.00.input.txt                  the imported graph (textual IR, compiler/ir/text.h)
//   sig_NNNN.NN.after_<pass>.txt           the graph after each pass whose name matches --dump_pass_re:
//                                          specialize_shapes, simplify, mark_for_compilation
//   sig_NNNN.clustering.txt                every clustering decision with its reason (as
//                                          --tf_xla_clustering_debug): clusters and nodes left out
//   sig_NNNN.clustered.dot                 Graphviz of the clustered graph (clusters as subgraphs)
//   sig_NNNN.cluster_C.fusion_plan.txt     per compiled cluster: fused kernels and library steps
//   sig_NNNN.cluster_C.kernel_K.ll         LLVM IR of each fused kernel as emitted, then
//   sig_NNNN.cluster_C.kernel_K.opt.ll     after optimization, and
//   sig_NNNN.cluster_C.kernel_K.s          the host assembly (CPU), or
//   sig_NNNN.cluster_C.<sm_XY>.ptx         the PTX of the cluster (GPU)
//   manifest.json                          {"files": [{"file", "kind", "signature_index", "signature",
//                                          "pass" | "cluster"}]}, rewritten atomically after each file.
// A write error is logged once and dumping continues; it never fails a run.
//
// Thread-safety: every method may be called from any thread.
#ifndef CJIT_RUNTIME_DUMP_H_
#define CJIT_RUNTIME_DUMP_H_

#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"
#include "base/mutex.h"

namespace cjit {

struct ClusteringReport;
struct FusionPlan;

class Dumper {
 public:
  // Creates `dir` if missing. Error: it cannot be created or is not a directory; a bad regex.
  static absl::StatusOr<std::shared_ptr<Dumper>> Create(const std::string& dir, const std::string& pass_re);

  // A new signature: its index, used as sig_NNNN in file names.
  int NewSignature(const std::string& signature);
  // Whether the IR after `pass` is dumped (--dump_pass_re).
  bool WantsPass(const std::string& pass) const;
  // IR of `graph` after `pass` (the pass counter orders the files of one signature).
  // `always`: whatever --dump_pass_re says (--dump_after).
  void DumpGraph(int sig, const std::string& pass, const Graph& graph, bool always = false);
  void DumpClustering(int sig, const ClusteringReport& report);
  void DumpDot(int sig, const Graph& clustered);
  // A cluster's artifact: kind is "fusion_plan", "llvm_ir", "llvm_ir_opt", "asm" or "ptx"; `suffix` the
  // file name's tail after sig_NNNN.cluster_C. ("fusion_plan.txt", "kernel_0.ll", "sm_90.ptx").
  void DumpCluster(int sig, int cluster, const std::string& kind, const std::string& suffix, std::string_view contents);

  const std::string& dir() const { return dir_; }

 private:
  struct Entry {
    std::string file, kind, signature, pass;
    int sig = -1, cluster = -1;
  };
  Dumper() = default;
  void Write(Entry e, std::string_view contents);
  void WriteManifestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::string dir_;
  std::regex pass_re_;
  Mutex mu_;
  std::vector<std::string> signatures_ ABSL_GUARDED_BY(mu_);  // by index
  std::vector<int> pass_counter_ ABSL_GUARDED_BY(mu_);        // by signature
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
  bool warned_ ABSL_GUARDED_BY(mu_) = false;
};

// Graphviz text of `graph`: nodes by op type and name, edges labelled with dtype and shape, every
// cjit.Cluster node drawn as a subgraph ("cluster_<id>") holding its body's nodes. Renders with `dot`.
std::string GraphToDot(const Graph& graph);

}  // namespace cjit

#endif  // CJIT_RUNTIME_DUMP_H_
