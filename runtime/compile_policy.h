// When to compile a cluster signature (DESIGN.md "Compile policy"; TensorFlow user guide §9.2.1.2, NVIDIA's
// lazy-compilation heuristic): the first --compile_threshold executions of a signature run the fallback
// path and the next one compiles; a cluster whose compilation took longer than --compile_time_cutoff_s is
// compiled for no further signatures (with threshold_per_structure the first count is per cluster
// structure: see CompilePolicyOptions); a cluster that keeps seeing new signatures (more than 10 compiles and
// fewer than 50 executions per compile, as TensorFlow's profiler) is megamorphic and stays on the fallback
// for new signatures; a failed compile sends that cluster to the fallback for good.
// --always_defer_compilation never compiles; --enable_lazy_compilation=false compiles on first execution.
//
// A cluster is identified across signatures by its shape-free canonical text.
// Thread-safety: all methods are safe to call concurrently.
#ifndef CJIT_RUNTIME_COMPILE_POLICY_H_
#define CJIT_RUNTIME_COMPILE_POLICY_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include "base/mutex.h"

namespace cjit {

struct CompilePolicyOptions {
  int compile_threshold = 2;
  double compile_time_cutoff_s = 30;
  bool always_defer = false;
  bool lazy = true;
  // Count the threshold's fallback executions per cluster structure, over all its signatures, rather than
  // per signature (with --polymorphic_clusters): in a stream where every signature is new and runs once,
  // a structure still compiles on its (threshold+1)-th execution, and later signatures instantiate it.
  bool threshold_per_structure = false;
};

class CompilePolicy {
 public:
  enum class Decision { kFallback, kCompile };

  explicit CompilePolicy(CompilePolicyOptions options) : options_(options) {}

  // Records one execution of (cluster, signature) that has no executable yet and decides how to run it.
  // `reason` (optional) receives why a fallback was chosen.
  Decision OnExecution(const std::string& cluster, const std::string& signature, std::string* reason = nullptr);
  // Claims the compilation of `cluster`'s structure for one signature: false while another signature of the
  // same structure is compiling (its kernels serve this one too once ready: a polymorphic instantiation),
  // so a stream of new signatures queues one compile per structure, not one per signature. Ended by
  // RecordCompile, or by AbandonCompile when the claimed compile never started.
  bool BeginCompile(const std::string& cluster);
  void AbandonCompile(const std::string& cluster);
  // Records the outcome of a compilation (and ends its claim).
  void RecordCompile(const std::string& cluster, double seconds, bool ok);
  // Records one execution of an already compiled signature (for the megamorphic ratio).
  void RecordCompiledExecution(const std::string& cluster);
  // True if some signature of `cluster` compiled successfully and none failed: its structure is known, so
  // a new signature may be instantiated from already compiled kernels (a polymorphic hit, which is
  // neither a compile nor counted toward megamorphism).
  bool HasCompiled(const std::string& cluster);
  // Whether `cluster`'s structure may run without generating code: true until RecordNeedsCodegen. A
  // structure whose fusion plan has no fused kernel, or only kernels already compiled in this process
  // (by other clusters), is instantiated on its first execution without a compile; one whose first such
  // attempt failed follows the lazy policy (and is instantiated for new signatures once it compiled).
  bool MayRunWithoutCodegen(const std::string& cluster);
  void RecordNeedsCodegen(const std::string& cluster);

 private:
  struct State {
    std::map<std::string, int64_t> fallback_runs;  // per signature
    int64_t structure_fallback_runs = 0;           // over all signatures (threshold_per_structure)
    int compiles = 0;
    bool compiled_ok = false;
    int64_t executions = 0;
    bool too_slow = false;
    bool failed = false;
    bool compiling = false;  // a BeginCompile claim is open
    bool needs_codegen = false;
  };
  CompilePolicyOptions options_;
  Mutex mu_;
  std::map<std::string, State> clusters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cjit

#endif  // CJIT_RUNTIME_COMPILE_POLICY_H_
