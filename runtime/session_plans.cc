// Session's plans (runtime/session.h): the specialization of an input signature (replayed from an earlier
// one of its structure, or the full pass pipeline), replay templates and dynamic-shape families by
// structure, the executor of each plan and the bounded plan cache.
#include "runtime/session.h"

#include "compiler/passes/auto_mixed_precision.h"
#include "compiler/ir/cpu_isa.h"

#include <omp.h>

#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "compiler/codegen/fusion_plan.h"
#include "base/status_macros.h"
#include "compiler/ir/verifier.h"
#include "compiler/onnx/onnx_import.h"
#include "compiler/ops/op_schemas.h"
#include "compiler/passes/decompose.h"
#include "compiler/passes/layout.h"
#include "compiler/passes/quantization.h"
#include "compiler/passes/simplify.h"
#include "compiler/passes/specialization_replay.h"
#include "compiler/passes/specialize_shapes.h"
#include "compiler/passes/mark_for_compilation.h"
#include "compiler/passes/pipeline.h"
#include "absl/strings/match.h"
#include "runtime/cluster_runner.h"
#include "runtime/executable.h"
#include "runtime/cuda/gpu_executor.h"
#include "runtime/dump.h"
#include "runtime/executor.h"
#include "runtime/profiler.h"
#include "base/logging.h"
#include "base/mutex.h"

namespace cjit {

namespace {

// The shape-derived constants of a replay template, evaluated from its recipes at other dims (for a
// dynamic-shape family's InstantiateDims).
class TemplateDerivedConstants : public DerivedConstants {
 public:
  TemplateDerivedConstants(std::shared_ptr<const ReplayTemplate> tmpl, int threads)
      : tmpl_(std::move(tmpl)), threads_(threads) {}
  bool Derives(const std::string& name) const override { return tmpl_->frontier.count(name) > 0; }
  absl::StatusOr<std::shared_ptr<const Tensor>> Evaluate(
      const std::string& name, const std::function<const Dims*(const std::string&)>& dims_of) const override {
    const int threads = threads_;
    ConstantEvaluator evaluate = [threads](const Node& n, const std::vector<const Tensor*>& args) {
      return EvaluateNode(n, args, threads);
    };
    RecipeEvaluator recipes(*tmpl_, evaluate, dims_of);
    return recipes.EvalConstant(name);
  }

 private:
  std::shared_ptr<const ReplayTemplate> tmpl_;
  int threads_;
};

// "" when every reader of `t`'s shape-derived constants is inside a cluster body: a Reshape reading it as
// its target (input 1), or an elementwise op reading a non-scalar one (fused, it reads the value from
// memory); then the template's clusters may serve other dims with those constants re-derived
// (CpuExecutable::InstantiateDims checks each reader), and nothing outside the clusters depends on them.
// Otherwise the first reader that is not, for the log.
std::string DerivedConstantsOutsideFusibleReaders(const ReplayTemplate& t) {
  auto derived = [&](const Value* v) { return v != nullptr && v->is_constant() && t.frontier.count(v->name) > 0; };
  auto reason = [](const Value* v, const std::string& where) {
    return absl::StrCat("%", v->name, " (derived from dims) is read by ", where);
  };
  for (const Value* v : t.graph->outputs()) {
    if (derived(v)) return reason(v, "the graph's outputs");
  }
  for (const auto& n : t.graph->nodes()) {
    for (const Value* v : n->inputs) {
      if (derived(v)) return reason(v, n->Describe() + " outside the clusters");
    }
    for (const Value* v : n->implicit_inputs) {
      if (derived(v)) return reason(v, n->Describe() + "'s subgraph");
    }
    const Graph* body = n->op_type == kClusterOp ? n->GetGraph("body") : nullptr;
    if (body == nullptr) continue;
    for (const Value* v : body->outputs()) {
      if (derived(v)) return reason(v, "a cluster's outputs");
    }
    for (const auto& b : body->nodes()) {
      for (size_t i = 0; i < b->inputs.size(); ++i) {
        const Value* v = b->inputs[i];
        // (A scalar is folded into a fused kernel's code: InstantiateDims would miss at every signature.)
        if (derived(v) && !(b->op_type == "Reshape" && i == 1) && (!IsFusibleElementwise(*b) || IsScalarConstant(v))) {
          return reason(v, b->Describe());
        }
      }
      for (const Value* v : b->implicit_inputs) {
        if (derived(v)) return reason(v, b->Describe() + "'s subgraph");
      }
    }
  }
  return "";
}

}  // namespace

Session::Plan Session::DynamicPlan(std::shared_ptr<const Executor> family_executor,
                                   std::shared_ptr<DynamicOutcomes> outcomes) {
  Plan p;
  p.cpu = std::move(family_executor);
  p.dynamic = true;
  p.outcomes = std::move(outcomes);
  return p;
}

namespace {

// The plan-cache key of `inputs`: each input's dtype and dims (and value where by_value), e.g.
// "f32[1x3x224x224];i64[scalar]=7;"; sequences and optionals by kind and element type only.
std::string SignatureOf(const std::vector<Tensor>& inputs, const std::vector<bool>& by_value) {
  std::string signature;
  signature.reserve(32 * inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.is_tensor()) {  // a sequence's / optional's contents are data: not specialized on
      absl::StrAppend(&signature, ValueKindName(t.kind()), "(", DTypeName(t.dtype()), ");");
      continue;
    }
    absl::StrAppend(&signature, DTypeName(t.dtype()), "[");
    for (size_t d = 0; d < t.dims().size(); ++d) {
      if (d) signature.push_back('x');
      absl::StrAppend(&signature, t.dims()[d]);
    }
    if (t.dims().empty()) signature.append("scalar");
    signature.push_back(']');
    if (by_value[i]) absl::StrAppend(&signature, "=", t.ToInt64Vector()[0]);
    signature += ";";
  }
  return signature;
}

// The replay-template key of `inputs`: dtypes, ranks and which dims are 0, 1 or other ("n"), by-value
// inputs with their value; 0 and 1 are kept apart from other sizes (broadcasting, empty tensors), as
// torch.compile's 0/1 specialization.
std::string StructureOf(const std::vector<Tensor>& inputs, const std::vector<bool>& by_value) {
  std::string structure;
  for (size_t i = 0; i < inputs.size(); ++i) {
    absl::StrAppend(&structure, DTypeName(inputs[i].dtype()), "[");
    for (int64_t d : inputs[i].dims()) structure.push_back(d == 0 ? '0' : d == 1 ? '1' : 'n');
    structure.push_back(']');
    if (by_value[i]) absl::StrAppend(&structure, "=", inputs[i].ToInt64Vector()[0]);
    structure.push_back(';');
  }
  return structure;
}

}  // namespace

// Keeps `made` (may be null: this signature cannot be replayed) as the replay template of `structure`, with
// a dynamic-shape family where the template allows one, and counts a full specialization. Returns the
// family this signature's executor publishes its executables to (null for none).
std::shared_ptr<ShapeFamily> Session::RecordReplayTemplate(const std::string& structure, const std::string& signature,
                                                           std::shared_ptr<const ReplayTemplate> made) {
  // A template whose specialization read no concrete dim (no shape-derived constant, no identity
  // removed by its dims) is valid at every signature of its structure: its clusters can run at any dims
  // (compiler/passes/specialization_replay.h gives the argument). One whose shape-derived constants are
  // read only by Reshape targets and fused elementwise ops inside clusters is too, with those constants
  // re-derived per signature (CpuExecutable::InstantiateDims).
  DynamicFamily dyn;
  std::shared_ptr<ShapeFamily> family;
  // (Dynamic plans run compiled code at other dims: polymorphic execution, off with --polymorphic_clusters.)
  if (made && made->guards.empty() && flags_.dynamic_shape_plans && flags_.polymorphic_clusters &&
      flags_.specialization_replay == "true" && gpu_ == nullptr) {
    std::string why_not;
    if (made->frontier.empty()) {
      dyn.executables = std::make_shared<ShapeFamily>();
    } else if ((why_not = DerivedConstantsOutsideFusibleReaders(*made)).empty()) {
      dyn.executables = std::make_shared<ShapeFamily>(
          std::make_shared<TemplateDerivedConstants>(made, flags_.intra_op_threads));
      for (const auto& n : made->graph->nodes()) {
        if (n->op_type == kClusterOp) dyn.cluster_ids.push_back(static_cast<int>(n->GetInt("cluster_id", 0)));
      }
    }
    if (dyn.executables) {
      dyn.tmpl = made;
      family = dyn.executables;
    } else {
      CJIT_VLOG(1) << "no dynamic-shape plan for the structure of " << signature << ": " << why_not;
    }
  } else if (made && !made->guards.empty()) {
    CJIT_VLOG(1) << "no dynamic-shape plan for the structure of " << signature << ": " << made->guards.size()
                 << " reshapes removed as identities at its dims";
  }
  MutexLock lock(&mu_);
  ++specializations_;
  if (made) {
    // A structure's family follows its template (a later full specialization replaces both).
    if (dyn.executables) {
      families_[structure] = std::move(dyn);
    } else {
      families_.erase(structure);
    }
    replay_templates_[structure] = std::move(made);
    constexpr size_t kMaxTemplates = 64;
    if (replay_templates_.size() > kMaxTemplates) {
      families_.erase(replay_templates_.begin()->first);
      replay_templates_.erase(replay_templates_.begin());
    }
  }
  return family;
}

// The specialized, clustered graph of `inputs` (signature `signature`, dump index `sig`): replayed from
// `tmpl` (may be null) when it applies, else the full pipeline (BuildSpecializedGraph), recording a replay
// template when `replayable`. *family: the dynamic-shape family the signature's executor publishes to
// (replays keep the one given; a full specialization sets its own or null).
absl::StatusOr<std::shared_ptr<Graph>> Session::SpecializedGraphFor(const std::vector<Tensor>& inputs,
                                                                    const std::vector<bool>& by_value,
                                                                    const std::string& signature,
                                                                    const std::string& structure, int sig,
                                                                    bool replayable,
                                                                    const std::shared_ptr<const ReplayTemplate>& tmpl,
                                                                    std::shared_ptr<ShapeFamily>* family_out) {
  std::shared_ptr<ShapeFamily>& family = *family_out;
  std::shared_ptr<Graph> g;
  if (tmpl) {
    TraceScope rs(profiler_.get(), "replay", "specialize");
    std::vector<Dims> dims;
    for (const Tensor& t : inputs) dims.push_back(t.dims());
    const int threads = flags_.intra_op_threads;
    auto replayed = ReplaySpecialization(*tmpl, dims, [threads](const Node& n, const std::vector<const Tensor*>& args) {
      return EvaluateNode(n, args, threads);
    });
    if (replayed.ok()) {
      if (flags_.specialization_replay == "verify") {
        ClusteringReport unused;
        CJIT_ASSIGN_OR_RETURN(std::shared_ptr<Graph> full, BuildSpecializedGraph(inputs, by_value, &unused));
        std::string diff = DescribeGraphDifference(**replayed, *full);
        if (!diff.empty()) {
          return absl::InternalError(absl::StrCat("--specialization_replay=verify: the replayed specialization of ",
                                                  signature, " differs from the full one: ", diff));
        }
      }
      g = std::move(*replayed);
      if (rs.active()) rs.args().Add("result", "replayed").Add("constants_rederived", tmpl->constants_rederived);
      if (sig >= 0 && dumper_) dumper_->DumpGraph(sig, "replayed", *g);
    } else {
      CJIT_VLOG(1) << "specialization replay missed for " << signature << ": " << replayed.status().message();
      if (rs.active()) rs.args().Add("result", "missed").Add("why", std::string(replayed.status().message()));
    }
  }
  if (g) {
    MutexLock lock(&mu_);
    ++specialization_replays_;
  } else {
    family = nullptr;  // this signature's graph will not be the template's
    std::optional<ReplayRecorder> recorder;
    if (replayable) recorder.emplace(SpecializeOptions{}.max_folded_elements);
    CJIT_ASSIGN_OR_RETURN(g, BuildSpecializedGraph(inputs, by_value, nullptr, sig, recorder ? &*recorder : nullptr));
    std::shared_ptr<const ReplayTemplate> made;
    if (recorder) {
      std::string why;
      made = recorder->Finish(g, &why);
      if (!made) CJIT_VLOG(1) << "signature " << signature << " cannot be replayed: " << why;
    }
    family = RecordReplayTemplate(structure, signature, std::move(made));
  }
  return g;
}

// The executor of specialized graph `g`: the GPU executor on a GPU, else the CPU executor (trusting the
// graph's shapes; publishing compiled clusters to `family` when not null).
absl::StatusOr<Session::Plan> Session::MakePlan(std::shared_ptr<Graph> g, int sig,
                                                std::shared_ptr<ShapeFamily> family) {
  Plan plan;
  if (gpu_) {
    GpuExecutorOptions go;
    go.host_threads = flags_.intra_op_threads;
    go.graph_level = flags_.gpu_graph_level;
    go.autotuner = clusters_->autotuner();
    CJIT_ASSIGN_OR_RETURN(std::unique_ptr<GpuExecutor> gx, GpuExecutor::Create(g, gpu_, go));
    plan.gpu = std::move(gx);
  } else {
    ExecutorOptions eo;
    eo.threads = flags_.intra_op_threads;
    eo.clusters = clusters_.get();
    eo.trust_shapes = true;
    eo.profiler = profiler_.get();
    eo.signature_index = sig;
    eo.family = family;
    TraceScope create(profiler_.get(), "create_executor", "specialize");
    CJIT_ASSIGN_OR_RETURN(std::unique_ptr<Executor> ex, Executor::Create(g, eo));
    plan.cpu = std::move(ex);
  }
  return plan;
}

// Adds `plan` as the plan of `signature` (unless another thread added one meanwhile: that one wins) and
// evicts the least recently used beyond --max_cached_signatures. Returns the signature's plan.
Session::Plan Session::CachePlan(const std::string& signature, Plan plan) {
  // Evicted plans are destroyed after the lock is released (a Run still using one holds its own reference).
  std::vector<Plan> evicted;
  Plan out;
  {
    MutexLock lock(&mu_);
    auto [it, inserted] = plans_.try_emplace(signature);
    if (inserted) {
      it->second.plan = std::move(plan);
      plan_lru_.push_front(signature);
      it->second.lru = plan_lru_.begin();
      const size_t cap = static_cast<size_t>(flags_.max_cached_signatures);
      while (cap > 0 && plans_.size() > cap) {
        auto victim = plans_.find(plan_lru_.back());
        CJIT_VLOG(1) << "evicting the specialization of signature " << victim->first
                     << " (--max_cached_signatures=" << cap << ")";
        evicted.push_back(std::move(victim->second.plan));
        plans_.erase(victim);
        plan_lru_.pop_back();
        ++plan_evictions_;
      }
    }
    out = it->second.plan;  // another thread may have specialized the same signature meanwhile: one plan wins
  }
  return out;
}

absl::StatusOr<Session::Plan> Session::Specialize(const std::vector<Tensor>& inputs, bool allow_dynamic) {
  std::vector<bool> by_value = ValueSpecialized(inputs);
  const std::string signature = SignatureOf(inputs, by_value);
  {
    MutexLock lock(&mu_);
    auto it = plans_.find(signature);
    if (it != plans_.end()) {
      plan_lru_.splice(plan_lru_.begin(), plan_lru_, it->second.lru);
      return it->second.plan;
    }
  }
  TraceScope scope(profiler_.get(), "specialize", "specialize");
  if (scope.active()) scope.args().Add("signature", signature);
  int sig = dumper_ ? dumper_->NewSignature(signature) : -1;
  // Replay of an earlier specialization of the same structure (compiler/passes/specialization_replay.h):
  // mixed precision stays on the full path (its painting and a host's rule are not recorded).
  const bool replayable = flags_.specialization_replay != "false" && flags_.auto_mixed_precision == "off" && !amp_rule_;
  std::string structure;
  std::shared_ptr<const ReplayTemplate> tmpl;
  std::shared_ptr<ShapeFamily> family;  // the dynamic-shape family this signature's plan publishes to
  DynamicFamily dynamic_family;          // a family whose executor this signature's run creates
  if (replayable) {
    structure = StructureOf(inputs, by_value);
    MutexLock lock(&mu_);
    auto it = replay_templates_.find(structure);
    if (it != replay_templates_.end()) tmpl = it->second;
    auto fam = families_.find(structure);
    if (fam != families_.end() && fam->second.tmpl == tmpl) {
      family = fam->second.executables;  // published to only by plans replayed from this template
      // The signature's first two runs: the family's executor at these dims (no specialization); its
      // third specializes (a steady shape gets its own plan: trusted shapes, autotuned steps).
      constexpr int kDynamicRunsPerSignature = 2;
      constexpr size_t kMaxServedSignatures = 1 << 14;
      if (allow_dynamic) {
        if (dynamic_served_.size() >= kMaxServedSignatures) dynamic_served_.clear();
        int& served = dynamic_served_[signature];
        bool ready = true;  // a family with shape-derived constants: every cluster has an executable
        for (int id : fam->second.cluster_ids) ready &= fam->second.executables->Has(id);
        // A family whose every try missed (its kernels or constants do not fit other dims) is not tried
        // again: each miss ran part of the graph for nothing.
        constexpr int64_t kMissesWithoutARun = 8;
        const DynamicOutcomes& o = *fam->second.outcomes;
        ready &= o.runs.load() > 0 || o.misses.load() < kMissesWithoutARun;
        if (ready && served < kDynamicRunsPerSignature) {
          ++served;
          if (fam->second.executor) return DynamicPlan(fam->second.executor, fam->second.outcomes);
          dynamic_family = fam->second;  // its executor is made below, unlocked
        }
      }
    }
  }
  if (dynamic_family.executables) {
    // The family's executor, made at its first use (a structure run at one signature never needs it): the
    // template's graph with shapes inferred per run, its clusters run at any dims (runtime/cluster_runner.h).
    ExecutorOptions eo;
    eo.threads = flags_.intra_op_threads;
    eo.clusters = clusters_.get();
    eo.trust_shapes = false;
    eo.profiler = profiler_.get();
    eo.family = dynamic_family.executables;
    eo.dynamic_clusters = true;
    auto ex = Executor::Create(dynamic_family.tmpl->graph, eo);
    if (ex.ok()) {
      MutexLock lock(&mu_);
      auto fam = families_.find(structure);
      if (fam != families_.end() && fam->second.executables == dynamic_family.executables) {
        if (!fam->second.executor) fam->second.executor = std::move(*ex);
        return DynamicPlan(fam->second.executor, fam->second.outcomes);
      }
    } else {
      CJIT_VLOG(1) << "no dynamic-shape plan for " << signature << ": " << ex.status().message();
    }
  }
  CJIT_ASSIGN_OR_RETURN(std::shared_ptr<Graph> g,
                        SpecializedGraphFor(inputs, by_value, signature, structure, sig, replayable, tmpl, &family));
  if (CJIT_VLOG_IS_ON(1)) {
    int clusters = 0;
    for (const auto& n : g->nodes()) clusters += n->op_type == kClusterOp;
    CJIT_VLOG(1) << "specialized signature " << signature << ": " << g->nodes().size() << " nodes, " << clusters
                 << " clusters";
  }
  CJIT_ASSIGN_OR_RETURN(Plan plan, MakePlan(g, sig, family));
  return CachePlan(signature, std::move(plan));
}

}  // namespace cjit
