#include "runtime/profiler.h"

#include "base/file_util.h"

#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/ir/graph.h"

#if CJIT_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#include "base/mutex.h"
#endif

namespace cjit {
namespace {

void AppendJsonString(std::string* out, std::string_view s) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      default:
        if (c < 0x20) {
          absl::StrAppendFormat(out, "\\u%04x", c);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

// Microseconds with nanosecond precision, exactly (no floating-point rounding), so nested events stay nested.
std::string Micros(int64_t ns) {
  bool neg = ns < 0;
  uint64_t a = neg ? static_cast<uint64_t>(-ns) : static_cast<uint64_t>(ns);
  return absl::StrFormat("%s%" PRIu64 ".%03" PRIu64, neg ? "-" : "", a / 1000, a % 1000);
}

// Paths handed out in this process, so two sessions tracing to one path write separate files.
std::string UniquePath(const std::string& path) {
  static Mutex mu;
  static std::set<std::string>* used = new std::set<std::string>();
  MutexLock lock(&mu);
  if (used->insert(path).second) return path;
  std::filesystem::path p(path);
  std::string stem = p.stem().string(), ext = p.extension().string();
  for (int n = 1;; ++n) {
    std::string candidate = (p.parent_path() / absl::StrCat(stem, ".", n, ext)).string();
    if (p.parent_path().empty()) candidate = absl::StrCat(stem, ".", n, ext);
    if (used->insert(candidate).second) return candidate;
  }
}

std::atomic<int> g_next_tid{0};

}  // namespace

// --- TraceArgs ---

void TraceArgs::Key(std::string_view key) {
  if (!body_.empty()) body_.append(", ");
  AppendJsonString(&body_, key);
  body_.append(": ");
}

TraceArgs& TraceArgs::Add(std::string_view key, std::string_view value) {
  Key(key);
  AppendJsonString(&body_, value);
  return *this;
}

TraceArgs& TraceArgs::Add(std::string_view key, int64_t value) {
  Key(key);
  absl::StrAppend(&body_, value);
  return *this;
}

TraceArgs& TraceArgs::Add(std::string_view key, double value) {
  Key(key);
  if (std::isfinite(value)) {
    absl::StrAppendFormat(&body_, "%.6g", value);
  } else {
    body_.append("null");
  }
  return *this;
}

namespace {

void AppendShapeList(std::string* out, const std::vector<Value*>& values, int64_t* bytes) {
  bool first = true;
  for (const Value* v : values) {
    if (!first) out->append(", ");
    first = false;
    if (v == nullptr) {
      out->append("none");
      continue;
    }
    absl::StrAppend(out, DTypeName(v->dtype), "[");
    if (v->shape.fully_known()) {
      Dims d = v->shape.concrete();
      out->append(DimsToString(d));
      *bytes += NumElements(d) * static_cast<int64_t>(DTypeSize(v->dtype));
    } else {
      out->append("?");
    }
    out->push_back(']');
  }
}

}  // namespace

std::string NodeArgsFromGraph(const Node& node, int cluster) {
  TraceArgs args;
  args.Add("op_type", node.op_type).Add("node", node.name);
  if (cluster >= 0) args.Add("cluster", static_cast<int64_t>(cluster));
  std::string& body = args.mutable_body();
  int64_t bytes = 0;
  body.append(", \"inputs\": \"");
  AppendShapeList(&body, node.inputs, &bytes);
  body.append("\", \"outputs\": \"");
  AppendShapeList(&body, node.outputs, &bytes);
  body.append("\"");
  args.Add("bytes", bytes);
  return args.body();
}

std::string TensorSummary(const Tensor& t) {
  if (!t.defined()) return "none";
  return absl::StrCat(DTypeName(t.dtype()), "[", DimsToString(t.dims()), "]");
}

// --- Profiler ---

Profiler::Profiler(const ProfilerOptions& options) : options_(options), start_ns_(Now()) {}

Profiler::~Profiler() = default;

std::shared_ptr<Profiler> Profiler::Create(const ProfilerOptions& options) {
  std::shared_ptr<Profiler> p(new Profiler(options));
  if (!options.path.empty()) p->path_ = UniquePath(options.path);
  return p;
}

int Profiler::ThreadId() {
  thread_local int tid = g_next_tid.fetch_add(1) + 1;
  return tid;
}

void Profiler::Append(TraceEvent e) {
  MutexLock lock(&mu_);
  if (stopped_) return;
  if (e.tid != last_tid_) {
    last_tid_ = e.tid;
    if (!thread_names_.count(e.tid)) thread_names_[e.tid] = absl::StrCat("thread ", e.tid);
  }
  if (static_cast<int64_t>(events_.size()) >= options_.max_events) {
    if (!truncated_) {
      truncated_ = true;
      TraceEvent t;
      t.name = "trace truncated";
      t.cat = "profiler";
      t.ph = 'i';
      t.ts_ns = e.ts_ns;
      t.tid = e.tid;
      t.args = absl::StrCat("\"max_events\": ", options_.max_events);
      events_.push_back(std::move(t));
    }
    dropped_.fetch_add(1);
    return;
  }
  events_.push_back(std::move(e));
}

void Profiler::Complete(std::string_view name, const char* cat, int64_t start_ns, int64_t end_ns,
                        const TraceArgs* args) {
  Complete(name, cat, start_ns, end_ns, args ? std::string(args->body()) : std::string());
}

void Profiler::Complete(std::string_view name, const char* cat, int64_t start_ns, int64_t end_ns,
                        std::string&& args) {
  if (!options_.record) return;
  TraceEvent e;
  e.name = std::string(name);
  e.cat = cat;
  e.ph = 'X';
  e.ts_ns = start_ns - start_ns_;
  e.dur_ns = std::max<int64_t>(0, end_ns - start_ns);
  e.tid = ThreadId();
  e.args = std::move(args);
  Append(std::move(e));
}

void Profiler::CompleteNode(const Node* node, const char* cat, int cluster, int64_t start_ns, int64_t end_ns,
                            std::string&& extra) {
  if (!options_.record) return;
  TraceEvent e;  // name and args are filled by Materialize
  e.cat = cat;
  e.ph = 'X';
  e.ts_ns = start_ns - start_ns_;
  e.dur_ns = std::max<int64_t>(0, end_ns - start_ns);
  e.tid = ThreadId();
  e.node = node;
  e.cluster = cluster;
  e.args = std::move(extra);
  Append(std::move(e));
}

void Profiler::Materialize() {
  MutexLock lock(&mu_);
  for (size_t i = materialized_; i < events_.size(); ++i) {
    TraceEvent& e = events_[i];
    if (e.node == nullptr) continue;
    std::string extra = std::move(e.args);
    e.name = e.node->op_type;
    e.args = NodeArgsFromGraph(*e.node, e.cluster);
    if (!extra.empty()) absl::StrAppend(&e.args, ", ", extra);
    e.node = nullptr;
  }
  materialized_ = events_.size();
}

void Profiler::Instant(std::string_view name, const char* cat, const TraceArgs* args) {
  if (!options_.record) return;
  TraceEvent e;
  e.name = std::string(name);
  e.cat = cat;
  e.ph = 'i';
  e.ts_ns = Now() - start_ns_;
  e.tid = ThreadId();
  if (args) e.args = args->body();
  Append(std::move(e));
}

void Profiler::Flow(char ph, uint64_t id, std::string_view name, int64_t at_ns) {
  if (!options_.record) return;
  TraceEvent e;
  e.name = std::string(name);
  e.cat = "flow";
  e.ph = ph;
  e.id = id;
  e.ts_ns = at_ns - start_ns_;
  e.tid = ThreadId();
  Append(std::move(e));
}

void Profiler::FlowStart(uint64_t id, std::string_view name, int64_t at_ns) { Flow('s', id, name, at_ns); }

void Profiler::FlowEnd(uint64_t id, std::string_view name, int64_t at_ns) { Flow('f', id, name, at_ns); }

void Profiler::NameThisThread(std::string_view name) {
  int tid = ThreadId();
  MutexLock lock(&mu_);
  thread_names_[tid] = absl::StrCat(std::string(name), " (", tid, ")");
}

std::vector<TraceEvent> Profiler::Events() const {
  const_cast<Profiler*>(this)->Materialize();
  MutexLock lock(&mu_);
  std::vector<TraceEvent> out;
  out.reserve(events_.size());
  for (size_t i = 0; i < events_.size(); ++i) out.push_back(events_[i]);
  return out;
}

bool Profiler::written() const {
  MutexLock lock(&mu_);
  return written_;
}

std::string Profiler::ToJson() const {
  const_cast<Profiler*>(this)->Materialize();
  MutexLock lock(&mu_);
  int pid = static_cast<int>(::getpid());
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  auto sep = [&] {
    if (!first) out.append(",\n");
    first = false;
  };
  sep();
  absl::StrAppend(&out, "{\"name\": \"process_name\", \"ph\": \"M\", \"ts\": 0, \"pid\": ", pid,
                  ", \"tid\": 0, \"args\": {\"name\": \"clusterjit\"}}");
  for (const auto& [tid, name] : thread_names_) {
    sep();
    absl::StrAppend(&out, "{\"name\": \"thread_name\", \"ph\": \"M\", \"ts\": 0, \"pid\": ", pid, ", \"tid\": ", tid,
                    ", \"args\": {\"name\": ");
    AppendJsonString(&out, name);
    out.append("}}");
  }
  for (size_t i = 0; i < events_.size(); ++i) {
    const TraceEvent& e = events_[i];
    sep();
    out.append("{\"name\": ");
    AppendJsonString(&out, e.name);
    out.append(", \"cat\": ");
    AppendJsonString(&out, e.cat);
    absl::StrAppend(&out, ", \"ph\": \"", std::string(1, e.ph), "\", \"ts\": ", Micros(e.ts_ns));
    if (e.ph == 'X') absl::StrAppend(&out, ", \"dur\": ", Micros(e.dur_ns));
    if (e.ph == 'i') out.append(", \"s\": \"t\"");
    if (e.ph == 's' || e.ph == 'f') absl::StrAppend(&out, ", \"id\": ", e.id);
    if (e.ph == 'f') out.append(", \"bp\": \"e\"");
    absl::StrAppend(&out, ", \"pid\": ", pid, ", \"tid\": ", e.tid);
    if (!e.args.empty()) absl::StrAppend(&out, ", \"args\": {", e.args, "}");
    out.append("}");
  }
  absl::StrAppend(&out, "\n], \"otherData\": {\"dropped_events\": ", dropped_.load(), "}}\n");
  return out;
}

absl::StatusOr<std::string> Profiler::Write() {
  {
    MutexLock lock(&mu_);
    if (written_) return path_;
    if (path_.empty()) return absl::FailedPreconditionError("profiling without a trace file (--trace_to is empty)");
    stopped_ = true;
  }
  absl::Status st = WriteFileAtomically(path_, ToJson());
  if (!st.ok()) return absl::Status(st.code(), absl::StrCat("--trace_to: ", st.message()));
  MutexLock lock(&mu_);
  written_ = true;
  return path_;
}

Profiler::Aggregate Profiler::Summarize(int64_t since_ns) const {
  std::vector<TraceEvent> events = Events();
  int64_t since = since_ns == 0 ? std::numeric_limits<int64_t>::min() : since_ns - start_ns_;
  std::map<std::string, Row> by_entry, by_type, clusters;
  Aggregate agg;
  // A string or number member of an args body.
  auto arg = [](const std::string& args, const char* key) -> std::string {
    std::string k = absl::StrCat("\"", key, "\": ");
    size_t p = args.find(k);
    if (p == std::string::npos) return "";
    p += k.size();
    if (p < args.size() && args[p] == '"') {
      size_t e = args.find('"', p + 1);
      return e == std::string::npos ? "" : args.substr(p + 1, e - p - 1);
    }
    size_t e = args.find_first_of(",}", p);
    return args.substr(p, e == std::string::npos ? std::string::npos : e - p);
  };
  for (const TraceEvent& e : events) {
    if (e.ph != 'X' || e.ts_ns < since) continue;
    if (e.cat == "session" && e.name == "Run") {
      agg.run_ns += e.dur_ns;
      ++agg.runs;
      continue;
    }
    if (e.cat == "cluster") {
      std::string key = absl::StrCat(e.name, " (", arg(e.args, "path"), ")");
      Row& r = clusters[key];
      r.kind = "cluster";
      r.name = key;
      ++r.count;
      r.total_ns += e.dur_ns;
      continue;
    }
    if (e.cat != "op" && e.cat != "kernel" && e.cat != "library") continue;
    std::string node = arg(e.args, "node");
    std::string cluster = arg(e.args, "cluster");
    std::string kind = e.cat == "op" ? (cluster.empty() ? "node" : "node in cluster")
                       : e.cat == "kernel" ? "fused kernel" : "library step";
    std::string name = e.cat == "kernel" ? absl::StrCat("cluster_", cluster, "/", e.name)
                       : node.empty()    ? e.name
                                         : node;
    Row& r = by_entry[absl::StrCat(kind, "\t", name)];
    r.kind = kind;
    r.name = name;
    r.op = e.cat == "kernel" ? arg(e.args, "ops") : e.name;
    ++r.count;
    r.total_ns += e.dur_ns;
    std::string type = e.cat == "kernel" ? "(fused kernel)" : e.name;
    Row& t = by_type[type];
    t.kind = "op type";
    t.name = type;
    ++t.count;
    t.total_ns += e.dur_ns;
  }
  auto sorted = [](const std::map<std::string, Row>& m) {
    std::vector<Row> v;
    for (const auto& [k, r] : m) v.push_back(r);
    std::stable_sort(v.begin(), v.end(), [](const Row& a, const Row& b) { return a.total_ns > b.total_ns; });
    return v;
  };
  agg.entries = sorted(by_entry);
  agg.by_type = sorted(by_type);
  agg.clusters = sorted(clusters);
  return agg;
}

std::string Profiler::SummaryTable(int64_t since_ns, int top) const {
  Aggregate agg = Summarize(since_ns);
  auto pct = [&](int64_t ns) {
    return agg.run_ns > 0 ? 100.0 * static_cast<double>(ns) / static_cast<double>(agg.run_ns) : 0.0;
  };
  std::string out = absl::StrFormat("%d runs, %.3f ms in Run (mean %.3f ms per run)\n", agg.runs, agg.run_ns / 1e6,
                                    agg.runs ? agg.run_ns / 1e6 / static_cast<double>(agg.runs) : 0.0);
  int64_t leaves_ns = 0;
  for (const Row& r : agg.entries) leaves_ns += r.total_ns;
  absl::StrAppendFormat(&out, "ops, kernels and library steps account for %.3f ms (%.1f%% of Run)\n\n", leaves_ns / 1e6,
                        pct(leaves_ns));
  absl::StrAppendFormat(&out, "Top %d by total time:\n%-16s %-44s %-26s %8s %11s %10s %7s\n", top, "kind", "name", "op",
                        "count", "total ms", "mean us", "% run");
  int n = 0;
  for (const Row& r : agg.entries) {
    if (n++ >= top) break;
    std::string name = r.name.size() > 44 ? r.name.substr(0, 41) + "..." : r.name;
    std::string op = r.op.size() > 26 ? r.op.substr(0, 23) + "..." : r.op;
    absl::StrAppendFormat(&out, "%-16s %-44s %-26s %8d %11.3f %10.1f %6.1f%%\n", r.kind, name, op, r.count,
                          r.total_ns / 1e6, r.total_ns / 1e3 / static_cast<double>(r.count), pct(r.total_ns));
  }
  absl::StrAppendFormat(&out, "\nBy op type:\n%-30s %8s %11s %10s %7s\n", "op type", "count", "total ms", "mean us",
                        "% run");
  for (const Row& r : agg.by_type) {
    absl::StrAppendFormat(&out, "%-30s %8d %11.3f %10.1f %6.1f%%\n", r.name, r.count, r.total_ns / 1e6,
                          r.total_ns / 1e3 / static_cast<double>(r.count), pct(r.total_ns));
  }
  if (!agg.clusters.empty()) {
    absl::StrAppendFormat(&out, "\nClusters:\n%-30s %8s %11s %10s %7s\n", "cluster (path)", "count", "total ms",
                          "mean us", "% run");
    for (const Row& r : agg.clusters) {
      absl::StrAppendFormat(&out, "%-30s %8d %11.3f %10.1f %6.1f%%\n", r.name, r.count, r.total_ns / 1e6,
                            r.total_ns / 1e3 / static_cast<double>(r.count), pct(r.total_ns));
    }
  }
  return out;
}

// --- TraceScope ---

void TraceScope::Begin(std::string_view name, const char* cat) {
  name_ = name;
  cat_ = cat;
  start_ = Profiler::Now();
  if (p_->nvtx()) {
    nvtx_ = true;
    NvtxPush(std::string(name_));
  }
}

void TraceScope::StopNow() {
  end_ = Profiler::Now();
  if (nvtx_) {
    NvtxPop();
    nvtx_ = false;
  }
}

void TraceScope::End() {
  if (end_ == 0) StopNow();
  if (node_ != nullptr) {
    p_->CompleteNode(node_, cat_, cluster_, start_, end_, std::move(args_.mutable_body()));
  } else {
    p_->Complete(name_, cat_, start_, end_, std::move(args_.mutable_body()));
  }
}

// --- NVTX ---

#if CJIT_HAVE_NVTX
void NvtxPush(const std::string& name) { nvtxRangePushA(name.c_str()); }
void NvtxPop() { nvtxRangePop(); }
bool NvtxAvailable() { return true; }
#else
void NvtxPush(const std::string&) {}
void NvtxPop() {}
bool NvtxAvailable() { return false; }
#endif

}  // namespace cjit
