// Per-run options of Session::Run: cancellation, in the style of ONNX Runtime's RunOptions.terminate.
//
// A run checks for cancellation at every step boundary of the executors (each op or cluster of the graph
// and of If/Loop/Scan bodies, each step of a GPU plan); a step in progress finishes first. A cancelled run
// returns absl::CancelledError and no outputs; the session stays usable. Cancellation does not reach a
// compilation in progress (it belongs to the session's cache, not to the run).
//
// Thread-safety: `terminate` may be set from any thread while runs read it; `should_terminate` is called
// on the thread that called Session::Run, at most once per step.
#ifndef CJIT_RUNTIME_RUN_OPTIONS_H_
#define CJIT_RUNTIME_RUN_OPTIONS_H_

#include <atomic>
#include <functional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace cjit {

struct RunOptions {
  // When non-null and true, runs using these options stop at the next step boundary.
  const std::atomic<bool>* terminate = nullptr;
  // When set, called at step boundaries; true stops the run (a host's interrupt check, e.g. Python's
  // KeyboardInterrupt). It must be cheap: rate-limit expensive checks inside it.
  std::function<bool()> should_terminate;
};

// Makes `options` the cancellation source of the runs on this thread until destroyed (nests).
class ScopedRunOptions {
 public:
  explicit ScopedRunOptions(const RunOptions* options);
  ~ScopedRunOptions();
  ScopedRunOptions(const ScopedRunOptions&) = delete;
  ScopedRunOptions& operator=(const ScopedRunOptions&) = delete;

 private:
  const RunOptions* previous_;
};

// Null while the current thread's run may go on; else why it stops ("RunOptions.terminate" or "the
// host's interrupt check"). One thread-local read when no run options are set.
const char* RunCancellationReason();
// The CancelledError of a run stopped for `reason` before the step `where`.
absl::Status RunCancelledError(const char* reason, absl::string_view where);

}  // namespace cjit

#endif  // CJIT_RUNTIME_RUN_OPTIONS_H_
