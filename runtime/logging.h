// Logging setup (glog): applies --v, --vmodule and --stderrthreshold from Flags, and lets a host
// application receive clusterjit's log lines through its own sink instead of (or besides) stderr.
// Thread-safety: InitLogging is idempotent and safe to call from several threads.
#ifndef CJIT_RUNTIME_LOGGING_H_
#define CJIT_RUNTIME_LOGGING_H_

#include <glog/logging.h>

#include "flags/flags.h"

namespace cjit {

void InitLogging(const Flags& flags);

// Routes every log message to `sink` (see google::LogSink: override send()). With also_stderr=false,
// clusterjit prints nothing to stderr itself. The sink must outlive its registration.
void AddLogSink(google::LogSink* sink, bool also_stderr = true);
void RemoveLogSink(google::LogSink* sink);

}  // namespace cjit

#endif  // CJIT_RUNTIME_LOGGING_H_
