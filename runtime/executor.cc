#include "runtime/executor.h"

#include <omp.h>

#include <algorithm>
#include <set>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/ops/op_registry.h"
#include "base/status_macros.h"
#include "compiler/passes/mark_for_compilation.h"
#include "runtime/cluster_runner.h"
#include "runtime/profiler.h"
#include "runtime/run_options.h"
#include "base/mutex.h"

namespace cjit {

namespace {
thread_local const ClusterRuntime* run_threads_from = nullptr;
}  // namespace

int RunThreads(int configured) {
  if (run_threads_from == nullptr) return configured;
  const int cap = run_threads_from->RunThreadsNow();
  if (omp_get_max_threads() != cap) omp_set_num_threads(cap);
  return cap > 0 && cap < configured ? cap : configured;
}

ScopedRunThreads::ScopedRunThreads(const ClusterRuntime* runtime) : previous_(run_threads_from) {
  run_threads_from = runtime;
}
ScopedRunThreads::~ScopedRunThreads() { run_threads_from = previous_; }

Executor::~Executor() {
  // Node events of this executor's runs refer to its graph, which may go with it (an evicted plan):
  // format them now. Every run of this executor has ended (its caller held a reference).
  if (profiler_ != nullptr) profiler_->Materialize();
}

namespace {

// "f32[1x3x48x320], f32[8]" appended to `out` (no JSON escaping needed: dtype names and digits only).
template <typename Get>
int64_t AppendTensorList(std::string* out, size_t n, Get get) {
  int64_t bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    const Tensor* t = get(i);
    if (i) out->append(", ");
    if (t == nullptr || !t->defined()) {
      out->append("none");
      continue;
    }
    if (!t->is_tensor()) {  // "sequence(f32)[3 items]": no JSON escaping needed either
      out->append(t->Describe());
      continue;
    }
    absl::StrAppend(out, DTypeName(t->dtype()), "[");
    for (size_t d = 0; d < t->dims().size(); ++d) {
      if (d) out->push_back('x');
      absl::StrAppend(out, t->dims()[d]);
    }
    out->push_back(']');
    bytes += static_cast<int64_t>(t->nbytes());
  }
  return bytes;
}

}  // namespace

void Executor::AppendShapes(std::string* out, const Step& st, const std::vector<const Tensor*>& view) {
  AppendTensorList(out, st.in.size(), [&](size_t i) { return st.in[i] >= 0 ? view[st.in[i]] : nullptr; });
}

void AddNodeTraceArgs(TraceArgs& args, const Node& node, const std::vector<const Tensor*>& inputs,
                      const std::vector<Tensor>& outputs, int cluster_id, const std::string& impl) {
  args.Add("op_type", node.op_type).Add("node", node.name);
  if (cluster_id >= 0) args.Add("cluster", static_cast<int64_t>(cluster_id));
  std::string& body = args.mutable_body();
  body.append(", \"inputs\": \"");
  int64_t bytes = AppendTensorList(&body, inputs.size(), [&](size_t i) { return inputs[i]; });
  body.append("\", \"outputs\": \"");
  bytes += AppendTensorList(&body, outputs.size(), [&](size_t i) { return &outputs[i]; });
  body.append("\"");
  args.Add("bytes", bytes);
  if (!impl.empty()) args.Add("impl", impl);
}

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(std::shared_ptr<const Graph> graph,
                                                           const ExecutorOptions& options) {
  std::unique_ptr<Executor> ex(new Executor());
  ex->graph_ = graph;
  ex->options_ = options;
  ex->threads_ = std::max(1, options.threads);
  ex->profiler_ = options.profiler;
  ex->trace_cluster_id_ = options.trace_cluster_id;
  ClusterRuntime* clusters = options.clusters;
  bool trust_shapes = options.trust_shapes;
  std::unordered_map<const Value*, int> slot;
  auto slot_of = [&](const Value* v) {
    auto it = slot.find(v);
    if (it != slot.end()) return it->second;
    int s = ex->num_slots_++;
    slot[v] = s;
    return s;
  };
  for (const Value* v : graph->inputs()) ex->input_slots_.push_back(slot_of(v));
  for (const Value* v : graph->captures()) ex->capture_slots_.push_back({v->name, slot_of(v)});
  for (const auto& v : graph->values()) {
    if (v->is_constant()) ex->constants_.push_back({slot_of(v.get()), v->constant});
  }
  CJIT_ASSIGN_OR_RETURN(std::vector<Node*> order, graph->TopologicalOrder());
  std::vector<int> last_reader;
  for (Node* n : order) {
    Step st;
    st.node = n;
    st.kernel = FindKernel(n->op_type);
    if (n->op_type == kClusterOp) {
      if (clusters == nullptr) return absl::InternalError("cluster node in a graph without a cluster runtime");
      CJIT_ASSIGN_OR_RETURN(
          st.cluster, ClusterRunner::Create(*n, graph, clusters, ex->threads_, options.signature_index, options.family,
                                            options.dynamic_clusters));
    } else if (st.kernel == nullptr) {
      return absl::UnimplementedError(absl::StrCat(n->Describe(), ": no CPU kernel for this operator"));
    }
    for (const Value* v : n->inputs) {
      st.in.push_back(v ? slot_of(v) : -1);
      st.in_const.push_back(v && v->is_constant());
    }
    for (const Value* v : n->implicit_inputs) st.implicit.push_back(slot_of(v));
    for (const Value* v : n->outputs) st.out.push_back(v ? slot_of(v) : -1);
    st.static_shapes = trust_shapes;
    for (const Value* v : n->outputs) {
      if (v && (!v->shape.fully_known() || v->dtype == DType::kInvalid)) st.static_shapes = false;
      st.inferred.push_back(v ? InferOutput{v->dtype, v->shape} : InferOutput{});
    }
    ex->steps_.push_back(std::move(st));
  }
  for (const Value* v : graph->outputs()) ex->output_slots_.push_back(slot_of(v));
  // Last readers.
  last_reader.assign(ex->num_slots_, -1);
  for (size_t i = 0; i < ex->steps_.size(); ++i) {
    for (int s : ex->steps_[i].in) if (s >= 0) last_reader[s] = static_cast<int>(i);
    for (int s : ex->steps_[i].implicit) last_reader[s] = static_cast<int>(i);
  }
  std::vector<bool> keep(ex->num_slots_, false);
  for (int s : ex->output_slots_) keep[s] = true;
  for (auto& [s, t] : ex->constants_) keep[s] = true;  // constants are shared, never freed
  for (int s = 0; s < ex->num_slots_; ++s) {
    if (!keep[s] && last_reader[s] >= 0) ex->steps_[last_reader[s]].free_after.push_back(s);
  }
  for (Step& st : ex->steps_) {
    st.input0_dies = !st.in.empty() && st.in[0] >= 0 && !st.in_const[0] &&
                     std::count(st.in.begin(), st.in.end(), st.in[0]) == 1 &&
                     std::find(st.free_after.begin(), st.free_after.end(), st.in[0]) != st.free_after.end();
  }
  // In-place activations (OpTraits::in_place), with y of x's dtype and dims. Graph inputs and captures are
  // never slots here (they stay in `view`), and Run checks that the computed input is not shared.
  for (Step& st : ex->steps_) {
    if (st.cluster || !TraitsOf(*st.node).in_place || st.in.size() != 1 ||
        st.out.size() != 1 || st.in[0] < 0 || st.out[0] < 0 || st.in_const[0]) {
      continue;
    }
    const int s = st.in[0];
    bool input_or_capture = std::find(ex->input_slots_.begin(), ex->input_slots_.end(), s) != ex->input_slots_.end();
    for (const auto& [name, c] : ex->capture_slots_) input_or_capture |= c == s;
    if (!input_or_capture && std::find(st.free_after.begin(), st.free_after.end(), s) != st.free_after.end()) {
      st.inplace_slot = s;
    }
  }
  Executor* self = ex.get();
  ex->runner_ = [self](const Graph& g, const std::vector<Tensor>& in,
                       const std::vector<std::pair<std::string, Tensor>>& caps) {
    return self->RunSubgraph(g, in, caps);
  };
  return ex;
}

absl::StatusOr<std::vector<Tensor>> Executor::RunSubgraph(
    const Graph& g, const std::vector<Tensor>& inputs,
    const std::vector<std::pair<std::string, Tensor>>& captures) const {
  const Executor* sub = nullptr;
  {
    MutexLock lock(&sub_mu_);
    auto it = subgraphs_.find(&g);
    if (it == subgraphs_.end()) {
      // Subgraphs are owned by node attributes of graph_ (shared_ptr); alias them without owning.
      std::shared_ptr<const Graph> alias(graph_, &g);
      ExecutorOptions o;
      o.threads = threads_;
      o.profiler = profiler_;
      o.trace_cluster_id = trace_cluster_id_;
      CJIT_ASSIGN_OR_RETURN(std::unique_ptr<Executor> e, Create(alias, o));
      it = subgraphs_.emplace(&g, std::move(e)).first;
    }
    sub = it->second.get();
  }
  return sub->Run(inputs, captures);
}

absl::StatusOr<std::vector<Tensor>> Executor::Run(
    const std::vector<Tensor>& inputs, const std::vector<std::pair<std::string, Tensor>>& captures) const {
  if (inputs.size() != input_slots_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("graph '", graph_->name, "' takes ", input_slots_.size(), " inputs, got ", inputs.size()));
  }
  // `slots` owns the values computed here; `view` points at every value: constants and inputs are read
  // in place (no per-run copies).
  std::vector<Tensor> slots(num_slots_);
  std::vector<const Tensor*> view(num_slots_, nullptr);
  for (const auto& [s, t] : constants_) view[s] = t.get();
  for (size_t i = 0; i < inputs.size(); ++i) view[input_slots_[i]] = &inputs[i];
  for (const auto& [name, s] : capture_slots_) {
    for (const auto& [cn, t] : captures) {
      if (cn == name) view[s] = &t;
    }
    if (view[s] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("captured value '", name, "' was not provided"));
    }
  }
  for (const Step& st : steps_) {
    if (const char* why = RunCancellationReason()) return RunCancelledError(why, st.node->Describe());
    // Cluster nodes trace themselves (ClusterRunner); every other node is one "op" event. With
    // --nvtx_detailed its name (and NVTX range) carries the input shapes.
    std::string detailed;
    if (profiler_ != nullptr && profiler_->nvtx_detailed() && !st.cluster) {
      detailed = st.node->op_type + " ";
      AppendShapes(&detailed, st, view);
    }
    TraceScope scope(st.cluster ? nullptr : profiler_,
                     detailed.empty() ? std::string_view(st.node->op_type) : std::string_view(detailed), "op");
    KernelContext ctx;
    ctx.node = st.node;
    ctx.want_impl = scope.active();
    ctx.threads = RunThreads(threads_);
    ctx.run_subgraph = &runner_;
    ctx.input_is_constant = &st.in_const;
    ctx.input0_dies = st.input0_dies;
    ctx.inputs.reserve(st.in.size());
    for (int s : st.in) ctx.inputs.push_back(s >= 0 ? view[s] : nullptr);
    for (int s : st.implicit) ctx.implicit.push_back(view[s]);
    if (st.static_shapes) {
      ctx.static_inferred = &st.inferred;
    } else if (!st.cluster) {  // a cluster runner computes its outputs' shapes itself
      CJIT_RETURN_IF_ERROR(InferNode(*st.node, InferInputsFromValues(ctx.inputs), ctx.inferred));
    }
    ctx.outputs.resize(st.out.size());
    if (st.inplace_slot >= 0) {
      // The kernel's Alloc returns this preset output when its dtype and dims match (float32 only: the
      // 16-bit paths widen through separate buffers).
      const Tensor& x = slots[st.inplace_slot];
      if (view[st.inplace_slot] == &x && x.defined() && x.dtype() == DType::kF32 && x.buffer().use_count() == 1) {
        ctx.outputs[0] = x;
      }
    }
    absl::Status status;
    if (st.cluster) {
      auto outs = CatchAsStatus(st.node->Describe(), [&] { return st.cluster->Run(ctx.inputs); });
      if (outs.ok()) ctx.outputs = std::move(*outs);
      status = outs.status();
      if (IsDynamicShapeMiss(status)) return status;  // the session specializes instead
    } else {
      status = RunKernel(*st.kernel, ctx);
    }
    CJIT_RETURN_IF_ERROR(CheckKernelResult(ctx, status, st.out));
    for (size_t k = 0; k < st.out.size(); ++k) {
      if (st.out[k] >= 0) {
        slots[st.out[k]] = std::move(ctx.outputs[k]);
        view[st.out[k]] = &slots[st.out[k]];
      }
    }
    if (scope.active()) {
      scope.Stop();
      if (st.static_shapes && detailed.empty()) {
        // Shapes are in the graph: the args are formatted when the trace is read.
        scope.SetNode(st.node, trace_cluster_id_);
        if (!ctx.impl.empty()) scope.args().Add("impl", ctx.impl);
      } else {
        for (size_t k = 0; k < st.out.size(); ++k) {
          if (st.out[k] >= 0) ctx.outputs[k] = slots[st.out[k]];
        }
        AddNodeTraceArgs(scope.args(), *st.node, ctx.inputs, ctx.outputs, trace_cluster_id_, ctx.impl);
      }
    }
    for (int s : st.free_after) {
      slots[s] = Tensor();
      view[s] = nullptr;
    }
  }
  std::vector<Tensor> outputs;
  outputs.reserve(output_slots_.size());
  for (int s : output_slots_) {
    if (view[s] == nullptr) return absl::InternalError(absl::StrCat("graph output slot ", s, " was never computed"));
    outputs.push_back(*view[s]);
  }
  return outputs;
}

}  // namespace cjit
