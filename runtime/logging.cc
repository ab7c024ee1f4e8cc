#include "runtime/logging.h"

#include <mutex>

#include "absl/strings/str_split.h"
#include "absl/strings/numbers.h"

namespace cjit {

void InitLogging(const Flags& flags) {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!google::IsGoogleLoggingInitialized()) google::InitGoogleLogging("clusterjit");
    FLAGS_logtostderr = false;
    FLAGS_alsologtostderr = false;
    // A library never writes log files: messages go to stderr (by threshold) and to host sinks.
    for (int sev = google::GLOG_INFO; sev < google::NUM_SEVERITIES; ++sev) google::SetLogDestination(sev, "");
  });
  FLAGS_v = flags.v;
  // Asking for VLOG output (--v / --vmodule) means showing it.
  FLAGS_stderrthreshold = (flags.v > 0 || !flags.vmodule.empty()) ? 0 : flags.stderrthreshold;
  if (!flags.vmodule.empty()) {
    for (absl::string_view item : absl::StrSplit(flags.vmodule, ',')) {
      std::vector<std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
      int level = 0;
      if (kv.size() == 2 && absl::SimpleAtoi(kv[1], &level)) google::SetVLOGLevel(kv[0].c_str(), level);
    }
  }
}

void AddLogSink(google::LogSink* sink, bool also_stderr) {
  google::AddLogSink(sink);
  if (!also_stderr) FLAGS_stderrthreshold = google::NUM_SEVERITIES;
}

void RemoveLogSink(google::LogSink* sink) { google::RemoveLogSink(sink); }

}  // namespace cjit
