#include "runtime/executor.h"

#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/ir/status_macros.h"
#include "compiler/passes/mark_for_compilation.h"
#include "runtime/cluster_runner.h"

namespace cjit {

Executor::~Executor() = default;

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(std::shared_ptr<const Graph> graph, int threads,
                                                           ClusterRuntime* clusters, bool trust_shapes) {
  std::unique_ptr<Executor> ex(new Executor());
  ex->graph_ = graph;
  ex->threads_ = std::max(1, threads);
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
      CJIT_ASSIGN_OR_RETURN(st.cluster, ClusterRunner::Create(*n, graph, clusters, ex->threads_));
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
    std::lock_guard<std::mutex> lock(sub_mu_);
    auto it = subgraphs_.find(&g);
    if (it == subgraphs_.end()) {
      // Subgraphs are owned by node attributes of graph_ (shared_ptr); alias them without owning.
      std::shared_ptr<const Graph> alias(graph_, &g);
      CJIT_ASSIGN_OR_RETURN(std::unique_ptr<Executor> e, Create(alias, threads_));
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
  std::vector<Tensor> slots(num_slots_);
  for (const auto& [s, t] : constants_) slots[s] = *t;
  for (size_t i = 0; i < inputs.size(); ++i) slots[input_slots_[i]] = inputs[i];
  for (const auto& [name, s] : capture_slots_) {
    bool found = false;
    for (const auto& [cn, t] : captures) {
      if (cn == name) {
        slots[s] = t;
        found = true;
      }
    }
    if (!found) return absl::InvalidArgumentError(absl::StrCat("captured value '", name, "' was not provided"));
  }
  for (const Step& st : steps_) {
    KernelContext ctx;
    ctx.node = st.node;
    ctx.threads = threads_;
    ctx.run_subgraph = &runner_;
    ctx.input_is_constant = st.in_const;
    for (int s : st.in) ctx.inputs.push_back(s >= 0 ? &slots[s] : nullptr);
    for (int s : st.implicit) ctx.implicit.push_back(&slots[s]);
    if (st.static_shapes) {
      ctx.inferred = st.inferred;
    } else {
      CJIT_RETURN_IF_ERROR(InferNode(*st.node, InferInputsFromValues(ctx.inputs), ctx.inferred));
    }
    ctx.outputs.resize(st.out.size());
    absl::Status status;
    if (st.cluster) {
      auto outs = st.cluster->Run(ctx.inputs);
      if (outs.ok()) ctx.outputs = std::move(*outs);
      status = outs.status();
    } else {
      status = (*st.kernel)(ctx);
    }
    CJIT_RETURN_IF_ERROR(CheckKernelResult(ctx, status, st.out));
    for (size_t k = 0; k < st.out.size(); ++k) {
      if (st.out[k] >= 0) slots[st.out[k]] = std::move(ctx.outputs[k]);
    }
    for (int s : st.free_after) slots[s] = Tensor();
  }
  std::vector<Tensor> outputs;
  for (int s : output_slots_) outputs.push_back(slots[s]);
  return outputs;
}

}  // namespace cjit
