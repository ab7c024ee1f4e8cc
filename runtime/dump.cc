#include "runtime/dump.h"


#include <cstring>
#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/text.h"
#include "compiler/passes/mark_for_compilation.h"
#include "base/file_util.h"
#include "base/logging.h"
#include "nlohmann/json.hpp"
#include "base/mutex.h"

namespace cjit {
namespace {


std::string DotEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c == '\n' ? ' ' : c);
  }
  return out;
}

std::string ShapeLabel(const Value* v) {
  if (v == nullptr) return "";
  return absl::StrCat(DTypeName(v->dtype), v->shape.ToString());
}

}  // namespace

absl::StatusOr<std::shared_ptr<Dumper>> Dumper::Create(const std::string& dir, const std::string& pass_re) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dump_to: cannot use '", dir, "' as a directory", ec ? absl::StrCat(": ", ec.message()) : ""));
  }
  std::shared_ptr<Dumper> d(new Dumper());
  d->dir_ = dir;
  try {
    d->pass_re_ = std::regex(pass_re);
  } catch (const std::regex_error&) {
    return absl::InvalidArgumentError(absl::StrCat("--dump_pass_re: bad regular expression '", pass_re, "'"));
  }
  return d;
}

int Dumper::NewSignature(const std::string& signature) {
  MutexLock lock(&mu_);
  signatures_.push_back(signature);
  pass_counter_.push_back(1);
  return static_cast<int>(signatures_.size()) - 1;
}

bool Dumper::WantsPass(const std::string& pass) const { return std::regex_search(pass, pass_re_); }

void Dumper::DumpGraph(int sig, const std::string& pass, const Graph& graph, bool always) {
  if (!always && pass != "input" && !WantsPass(pass)) return;
  int counter;
  {
    MutexLock lock(&mu_);
    counter = pass == "input" ? 0 : pass_counter_[sig]++;
  }
  Entry e;
  e.file = absl::StrFormat("sig_%04d.%02d.%s.txt", sig, counter, pass == "input" ? "input" : "after_" + pass);
  e.kind = "ir";
  e.sig = sig;
  e.pass = pass;
  Write(std::move(e), PrintGraph(graph));
}

void Dumper::DumpClustering(int sig, const ClusteringReport& report) {
  std::string text = absl::StrCat(report.clusters.size(), " clusters\n");
  for (const ClusterInfo& c : report.clusters) {
    std::vector<std::string> hist;
    for (const auto& [op, n] : c.op_histogram) hist.push_back(absl::StrCat(op, ":", n));
    absl::StrAppend(&text, "cluster_", c.id, ": ", c.num_ops, " ops (", absl::StrJoin(hist, " "), ")\n  inputs: ",
                    absl::StrJoin(c.inputs, ", "), "\n  outputs: ", absl::StrJoin(c.outputs, ", "), "\n");
  }
  absl::StrAppend(&text, "\n", report.excluded.size(), " nodes outside clusters:\n");
  for (const auto& [node, why] : report.excluded) absl::StrAppend(&text, "  ", node, ": ", why, "\n");
  absl::StrAppend(&text, "\n", report.refused_merges.size(), " refused merges (producer -> consumer):\n");
  for (const auto& m : report.refused_merges)
    absl::StrAppend(&text, "  ", m.producer, " -> ", m.consumer, ": ", m.reason, "\n");
  Entry e;
  e.file = absl::StrFormat("sig_%04d.clustering.txt", sig);
  e.kind = "clustering";
  e.sig = sig;
  Write(std::move(e), text);
}

void Dumper::DumpDot(int sig, const Graph& clustered) {
  Entry e;
  e.file = absl::StrFormat("sig_%04d.clustered.dot", sig);
  e.kind = "dot";
  e.sig = sig;
  Write(std::move(e), GraphToDot(clustered));
}

void Dumper::DumpCluster(int sig, int cluster, const std::string& kind, const std::string& suffix,
                         std::string_view contents) {
  Entry e;
  e.file = sig >= 0 ? absl::StrFormat("sig_%04d.cluster_%d.%s", sig, cluster, suffix)
                    : absl::StrFormat("cluster_%d.%s", cluster, suffix);
  e.kind = kind;
  e.sig = sig;
  e.cluster = cluster;
  Write(std::move(e), contents);
}

void Dumper::Write(Entry e, std::string_view contents) {
  absl::Status st = WriteFileAtomically((std::filesystem::path(dir_) / e.file).string(), contents);
  MutexLock lock(&mu_);
  if (!st.ok()) {
    if (!warned_) CJIT_LOG(WARNING) << "--dump_to: " << st.message() << " (further dump errors are not logged)";
    warned_ = true;
    return;
  }
  if (e.sig >= 0 && e.sig < static_cast<int>(signatures_.size())) e.signature = signatures_[e.sig];
  bool replaced = false;
  for (Entry& old : entries_) {
    if (old.file == e.file) {
      old = e;
      replaced = true;
    }
  }
  if (!replaced) entries_.push_back(std::move(e));
  WriteManifestLocked();
}

void Dumper::WriteManifestLocked() {
  nlohmann::json files = nlohmann::json::array();
  for (const Entry& e : entries_) {
    nlohmann::json j{{"file", e.file}, {"kind", e.kind}};
    if (e.sig >= 0) {
      j["signature_index"] = e.sig;
      j["signature"] = e.signature;
    }
    if (!e.pass.empty()) j["pass"] = e.pass;
    if (e.cluster >= 0) j["cluster"] = e.cluster;
    files.push_back(std::move(j));
  }
  nlohmann::json doc{{"tool", "clusterjit"}, {"files", files}};
  absl::Status st = WriteFileAtomically((std::filesystem::path(dir_) / "manifest.json").string(), doc.dump(1));
  if (!st.ok() && !warned_) {
    CJIT_LOG(WARNING) << "--dump_to: " << st.message();
    warned_ = true;
  }
}

std::string GraphToDot(const Graph& graph) {
  std::string out = "digraph clusterjit {\n  rankdir=TB;\n  node [shape=box, fontname=\"Helvetica\", fontsize=10];\n"
                    "  edge [fontname=\"Helvetica\", fontsize=8];\n";
  std::map<const Value*, std::string> producer_id;  // value -> dot node that produces it
  int next = 0;
  auto new_id = [&next] { return absl::StrCat("n", next++); };
  for (const Value* v : graph.inputs()) {
    std::string id = new_id();
    absl::StrAppend(&out, "  ", id, " [label=\"input ", DotEscape(v->name), "\\n", DotEscape(ShapeLabel(v)),
                    "\", shape=ellipse];\n");
    producer_id[v] = id;
  }
  std::vector<std::string> edges;
  auto edge = [&](const Value* v, const std::string& to) {
    if (v == nullptr || v->is_constant()) return;
    auto it = producer_id.find(v);
    if (it == producer_id.end()) return;
    edges.push_back(absl::StrCat("  ", it->second, " -> ", to, " [label=\"", DotEscape(ShapeLabel(v)), "\"];\n"));
  };
  auto order = graph.TopologicalOrder();
  if (!order.ok()) return absl::StrCat("// ", order.status().message(), "\n", out, "}\n");
  for (const Node* n : *order) {
    if (n->op_type == kClusterOp) {
      const Graph* body = n->GetGraph("body");
      int64_t cid = n->GetInt("cluster_id", 0);
      absl::StrAppend(&out, "  subgraph cluster_", cid, " {\n    label=\"cluster_", cid, " (",
                      body ? body->nodes().size() : 0, " ops)\";\n    style=filled; color=lightblue;\n");
      std::map<const Value*, std::string> inner;  // body value -> dot node producing it
      if (body != nullptr) {
        for (size_t i = 0; i < body->inputs().size() && i < n->inputs.size(); ++i) {
          auto it = producer_id.find(n->inputs[i]);
          if (it != producer_id.end()) inner[body->inputs()[i]] = it->second;
        }
        auto body_order = body->TopologicalOrder();
        if (body_order.ok()) {
          for (const Node* b : *body_order) {
            std::string id = new_id();
            absl::StrAppend(&out, "    ", id, " [label=\"", DotEscape(b->op_type), "\\n", DotEscape(b->name), "\"];\n");
            for (const Value* v : b->inputs) {
              if (v == nullptr || v->is_constant()) continue;
              auto it = inner.find(v);
              if (it != inner.end()) {
                edges.push_back(
                    absl::StrCat("  ", it->second, " -> ", id, " [label=\"", DotEscape(ShapeLabel(v)), "\"];\n"));
              }
            }
            for (const Value* v : b->outputs) {
              if (v) inner[v] = id;
            }
          }
        }
        for (size_t k = 0; k < body->outputs().size() && k < n->outputs.size(); ++k) {
          auto it = inner.find(body->outputs()[k]);
          if (it != inner.end() && n->outputs[k]) producer_id[n->outputs[k]] = it->second;
        }
      }
      out.append("  }\n");
      continue;
    }
    std::string id = new_id();
    absl::StrAppend(&out, "  ", id, " [label=\"", DotEscape(n->op_type), "\\n", DotEscape(n->name), "\"];\n");
    for (const Value* v : n->inputs) edge(v, id);
    for (const Value* v : n->implicit_inputs) edge(v, id);
    for (const Value* v : n->outputs) {
      if (v) producer_id[v] = id;
    }
  }
  for (const Value* v : graph.outputs()) {
    std::string id = new_id();
    absl::StrAppend(&out, "  ", id, " [label=\"output ", DotEscape(v->name), "\", shape=ellipse];\n");
    edge(v, id);
  }
  for (const std::string& e : edges) out.append(e);
  out.append("}\n");
  return out;
}

}  // namespace cjit
