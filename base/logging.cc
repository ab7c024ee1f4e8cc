#include "base/logging.h"

#include <fnmatch.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <mutex>
#include <string>
#include <utility>
#include <vector>
#include "base/mutex.h"

namespace cjit {
namespace log_internal {
std::atomic<uint32_t> g_level_generation{0};
}  // namespace log_internal

namespace {

struct LogState {
  Mutex mu;
  int v = 0;
  std::vector<std::pair<std::string, int>> vmodule;  // (pattern, level), first match wins
  int stderrthreshold = 1;
  LogSinkFn sink;
};

LogState& State() {
  static LogState* s = new LogState();  // never destroyed: logging may happen during static destruction
  return *s;
}

std::string_view BaseName(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string_view StripExtension(std::string_view name) {
  size_t dot = name.find('.');
  return dot == std::string_view::npos ? name : name.substr(0, dot);
}

}  // namespace

void SetLogLevels(int v, std::string_view vmodule, int stderrthreshold) {
  LogState& s = State();
  {
    MutexLock lock(&s.mu);
    s.v = v;
    s.vmodule.clear();
    size_t pos = 0;
    while (pos <= vmodule.size() && !vmodule.empty()) {
      size_t comma = vmodule.find(',', pos);
      std::string_view item =
          vmodule.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
      size_t eq = item.find('=');
      if (eq != std::string_view::npos && eq > 0) {
        int level = 0;
        bool ok = eq + 1 < item.size();
        for (char c : item.substr(eq + 1)) ok &= c >= '0' && c <= '9';
        if (ok) {
          for (char c : item.substr(eq + 1)) level = level * 10 + (c - '0');
          s.vmodule.emplace_back(std::string(item.substr(0, eq)), level);
        }
      }
      if (comma == std::string_view::npos) break;
      pos = comma + 1;
    }
    bool wants_vlog = v > 0;
    for (const auto& [pattern, level] : s.vmodule) wants_vlog |= level > 0;
    s.stderrthreshold = wants_vlog ? 0 : stderrthreshold;
  }
  log_internal::g_level_generation.fetch_add(1, std::memory_order_relaxed);
}

void SetLogSink(LogSinkFn sink) {
  LogState& s = State();
  MutexLock lock(&s.mu);
  s.sink = std::move(sink);
}

int VlogLevelForFile(const char* file) {
  std::string name(StripExtension(BaseName(file)));
  LogState& s = State();
  MutexLock lock(&s.mu);
  for (const auto& [pattern, level] : s.vmodule) {
    if (fnmatch(pattern.c_str(), name.c_str(), 0) == 0) return level;
  }
  return s.v;
}

namespace log_internal {

LogMessage::~LogMessage() {
  std::string text = stream_.str();
  std::string_view base = BaseName(file_);
  LogState& s = State();
  MutexLock lock(&s.mu);
  if (static_cast<int>(severity_) < s.stderrthreshold) return;
  if (s.sink) {
    std::string file(base);
    s.sink(severity_, file.c_str(), line_, text);
    return;
  }
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  struct tm tm;
  localtime_r(&tv.tv_sec, &tm);
  static const char kLetter[] = {'I', 'W', 'E'};
  std::fprintf(stderr, "cjit %c %02d:%02d:%02d.%06ld %.*s:%d] %s\n", kLetter[static_cast<int>(severity_)], tm.tm_hour,
               tm.tm_min, tm.tm_sec, static_cast<long>(tv.tv_usec), static_cast<int>(base.size()), base.data(), line_,
               text.c_str());
}

}  // namespace log_internal
}  // namespace cjit
