#include "runtime/run_options.h"

#include "absl/strings/str_cat.h"

namespace cjit {
namespace {
thread_local const RunOptions* current_run_options = nullptr;
}  // namespace

ScopedRunOptions::ScopedRunOptions(const RunOptions* options) : previous_(current_run_options) {
  current_run_options = options;
}

ScopedRunOptions::~ScopedRunOptions() { current_run_options = previous_; }

const char* RunCancellationReason() {
  const RunOptions* o = current_run_options;
  if (o == nullptr) return nullptr;
  if (o->terminate != nullptr && o->terminate->load(std::memory_order_relaxed)) return "RunOptions.terminate";
  if (o->should_terminate && o->should_terminate()) return "the host's interrupt check";
  return nullptr;
}

absl::Status RunCancelledError(const char* reason, absl::string_view where) {
  return absl::CancelledError(absl::StrCat("run cancelled by ", reason, " before ", where));
}

}  // namespace cjit
