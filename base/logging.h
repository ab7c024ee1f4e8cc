// clusterjit's logging: severities INFO / WARNING / ERROR and verbose levels (VLOG) with per-file levels in
// the style of TF_CPP_VMODULE, delivered to one process-wide sink that the host controls.
//
// A library must not reconfigure a host's logging, so clusterjit does not use glog (whose flags, log files
// and sinks are process-global and shared with a host that uses glog itself): these macros and their state
// belong to clusterjit alone. Without a host sink, messages at or above --stderrthreshold go to stderr,
// one line each: "cjit W 12:34:56.789012 disk_cache.cc:173] message". With a host sink (SetLogSink, or the
// C API's cjit_set_log_callback), every emitted message goes to the sink and nothing to stderr.
//
//   CJIT_LOG(WARNING) << "persistent cache: ignoring entry " << path;
//   CJIT_VLOG(2) << "not clustering " << node << ": " << why;      // emitted when the file's level >= 2
//   if (CJIT_VLOG_IS_ON(2)) { ...expensive message... }
//
// Levels: --v=N is the default level of every file; --vmodule=NAME=N,NAME2=M overrides it for files whose
// base name without extension matches NAME (shell globs allowed: "cluster_*=1"). The names worth knowing
// are in docs/profiling.md (mark_for_compilation, compile_policy, cluster_runner, disk_cache, cpu_compiler,
// nvptx_compiler, gpu_executor, session, simplify).
//
// Nothing here aborts: there is no FATAL severity and no CHECK.
// Thread-safety: every function and macro may be used from any thread; the sink is called under a lock,
// one message at a time.
#ifndef CJIT_BASE_LOGGING_H_
#define CJIT_BASE_LOGGING_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <string_view>

namespace cjit {

enum class LogSeverity : int { kInfo = 0, kWarning = 1, kError = 2 };

// Receives each emitted message: severity, source file base name, line, text (no trailing newline).
using LogSinkFn = std::function<void(LogSeverity severity, const char* file, int line, std::string_view message)>;

// Sets the process-wide verbose level (--v), per-file levels (--vmodule, "NAME=N,..."; an item that does
// not parse is ignored: flags/ validates the text) and the stderr threshold (0 INFO, 1 WARNING, 2 ERROR,
// 3 nothing). Asking for VLOG output (v > 0 or a vmodule) lowers the stderr threshold to INFO, as TF does.
void SetLogLevels(int v, std::string_view vmodule, int stderrthreshold);
// Routes every message to `sink` instead of stderr; an empty function restores stderr. The previous sink
// is no longer called once this returns.
void SetLogSink(LogSinkFn sink);
// The VLOG level in effect for source file `file` (a path; its base name without extension is matched).
int VlogLevelForFile(const char* file);

namespace log_internal {

// Bumped by SetLogLevels so cached per-site levels are recomputed.
extern std::atomic<uint32_t> g_level_generation;

// The cached level of one VLOG call site (static per site).
class VlogSite {
 public:
  explicit VlogSite(const char* file) : file_(file) {}
  int level() {
    uint64_t packed = state_.load(std::memory_order_relaxed);
    uint32_t gen = g_level_generation.load(std::memory_order_relaxed);
    if (static_cast<uint32_t>(packed >> 32) != gen + 1) {
      int lvl = VlogLevelForFile(file_);
      packed = (static_cast<uint64_t>(gen + 1) << 32) | static_cast<uint32_t>(lvl);
      state_.store(packed, std::memory_order_relaxed);
    }
    return static_cast<int>(static_cast<uint32_t>(packed));
  }

 private:
  const char* file_;
  std::atomic<uint64_t> state_{0};  // (generation + 1) << 32 | level; 0 = not resolved
};

class LogMessage {
 public:
  LogMessage(const char* file, int line, LogSeverity severity) : file_(file), line_(line), severity_(severity) {}
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  const char* file_;
  int line_;
  LogSeverity severity_;
  std::ostringstream stream_;
};

// Lets the ternary in CJIT_VLOG have type void on both sides.
struct Voidify {
  void operator&(std::ostream&) {}
};

constexpr LogSeverity kSeverity_INFO = LogSeverity::kInfo;
constexpr LogSeverity kSeverity_WARNING = LogSeverity::kWarning;
constexpr LogSeverity kSeverity_ERROR = LogSeverity::kError;

}  // namespace log_internal
}  // namespace cjit

#define CJIT_LOG(severity) \
  ::cjit::log_internal::LogMessage(__FILE__, __LINE__, ::cjit::log_internal::kSeverity_##severity).stream()

#define CJIT_VLOG_IS_ON(n)                                                   \
  ([]() -> ::cjit::log_internal::VlogSite& {                                 \
    static ::cjit::log_internal::VlogSite site(__FILE__);                    \
    return site;                                                             \
  }().level() >= (n))

#define CJIT_VLOG(n)                                 \
  !CJIT_VLOG_IS_ON(n) ? (void)0                      \
                      : ::cjit::log_internal::Voidify() & CJIT_LOG(INFO)

#endif  // CJIT_BASE_LOGGING_H_
