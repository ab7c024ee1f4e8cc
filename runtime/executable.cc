#include "runtime/executable.h"

#include "runtime/autotune.h"

#include "compiler/codegen/kernel_layout.h"

#include "base/logging.h"
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/parallel.h"
#include "runtime/profiler.h"
#include "base/mutex.h"

namespace cjit {

absl::StatusOr<std::shared_ptr<const CpuExecutable>> CpuExecutable::Compile(std::shared_ptr<const Graph> body,
                                                                            const CpuCompileOptions& options,
                                                                            const CpuExecutable* like) {
  return Build(body, options, [&](const FusionPlan& plan) { return CompileForCpu(plan, options); }, like);
}

absl::StatusOr<std::shared_ptr<const CpuExecutable>> CpuExecutable::Load(std::shared_ptr<const Graph> body,
                                                                         absl::string_view payload,
                                                                         const CpuCompileOptions& options) {
  return Build(body, options, [&](const FusionPlan& plan) { return LoadCpuPayload(plan, payload); });
}

void CpuExecutable::DescribeKernels() {
  for (const FusedKernel& k : plan_.kernels) {
    std::string ops;
    for (const Node* n : k.nodes) absl::StrAppend(&ops, ops.empty() ? "" : "+", n->op_type);
    int64_t bytes = 0;
    for (const auto* list : {&k.input_sources, &k.outputs}) {
      for (const Value* v : *list) {
        if (v->shape.fully_known())
          bytes += NumElements(v->shape.concrete()) * static_cast<int64_t>(DTypeSize(v->dtype));
      }
    }
    TraceArgs args;
    args.Add("ops", ops).Add("kind", k.row_reduction ? "row reduction" : "elementwise");
    kernel_dims_free_args_.push_back(args.body());
    args.Add("shape", DimsToString(k.shape)).Add("bytes", bytes);
    kernel_args_.push_back(args.body());
    kernel_names_.push_back(absl::StrCat("fusion_", kernel_names_.size()));
  }
}

// The buffer plan: one slot per body value.
void CpuExecutable::AssignSlots() {
  std::unordered_map<const Value*, int> slot;
  auto slot_of = [&](const Value* v) {
    auto it = slot.find(v);
    if (it != slot.end()) return it->second;
    int s = static_cast<int>(slot_values_.size());
    slot_values_.push_back(v);
    slot[v] = s;
    return s;
  };
  for (const Value* v : body_->inputs()) input_slots_.push_back(slot_of(v));
  for (const PlanStep& s : plan_.steps) {
    std::vector<int> ins, outs;
    std::vector<bool> consts;
    if (s.kind == PlanStep::Kind::kFused) {
      const FusedKernel& k = plan_.kernels[s.kernel];
      for (const Value* v : k.input_sources) ins.push_back(slot_of(v));
      for (const Value* v : k.outputs) outs.push_back(slot_of(v));
    } else {
      for (const Value* v : s.node->inputs) {
        ins.push_back(v ? slot_of(v) : -1);
        consts.push_back(v && v->is_constant());
      }
      for (const Value* v : s.node->outputs) outs.push_back(v ? slot_of(v) : -1);
      if (s.output != nullptr) outs[0] = slot_of(s.output);  // the Conv computes its post-ops' result
    }
    step_inputs_.push_back(ins);
    step_outputs_.push_back(outs);
    step_input_const_.push_back(consts);
  }
  for (const Value* v : body_->outputs()) output_slots_.push_back(slot_of(v));
}

// In-place Concat: when the outer size is 1, every input is a contiguous byte range of the output. If each
// input is produced by a step of this executable and read by nothing else, producers write straight into
// the output and the Concat does not run.
void CpuExecutable::PlanInPlaceConcats() {
  alias_.assign(slot_values_.size(), AliasInto{});
  skip_step_.assign(plan_.steps.size(), false);
  {
    std::vector<int> readers(slot_values_.size(), 0), producer(slot_values_.size(), -1);
    for (size_t i = 0; i < step_inputs_.size(); ++i) {
      for (int s : step_inputs_[i])
        if (s >= 0) ++readers[s];
      for (int s : step_outputs_[i])
        if (s >= 0) producer[s] = static_cast<int>(i);
    }
    for (int s : output_slots_) ++readers[s];
    for (size_t i = 0; i < plan_.steps.size(); ++i) {
      const PlanStep& st = plan_.steps[i];
      if (st.kind != PlanStep::Kind::kLibrary || st.node->op_type != "Concat" || !st.post_ops.empty()) continue;
      const Value* out = st.node->outputs[0];
      if (!out || !out->shape.fully_known() || out->dtype == DType::kInvalid) continue;
      Dims od = out->shape.concrete();
      int64_t axis = st.node->GetInt("axis", 0);
      if (axis < 0) axis += static_cast<int64_t>(od.size());
      int64_t outer = 1;
      for (int64_t d = 0; d < axis; ++d) outer *= od[d];
      if (outer != 1) continue;
      bool ok = true;
      std::set<int> seen;
      for (int s : step_inputs_[i]) {
        const Value* v = s >= 0 ? slot_values_[s] : nullptr;
        ok &= v && !v->is_constant() && producer[s] >= 0 && readers[s] == 1 && seen.insert(s).second &&
              alias_[s].base_slot < 0 && v->dtype == out->dtype;
      }
      if (!ok) continue;
      size_t offset = 0;
      int out_slot = step_outputs_[i][0];
      for (int s : step_inputs_[i]) {
        alias_[s] = AliasInto{out_slot, offset};
        offset += static_cast<size_t>(NumElements(slot_values_[s]->shape.concrete())) * DTypeSize(out->dtype);
      }
      skip_step_[i] = true;
      CJIT_VLOG(2) << "in-place Concat " << st.node->name << ": " << step_inputs_[i].size()
                   << " inputs written in place";
    }
  }
}

// Each slot not kept (outputs, constants) is freed after the last step that reads it.
void CpuExecutable::PlanFrees() {
  std::vector<int> last(slot_values_.size(), -1);
  for (size_t i = 0; i < step_inputs_.size(); ++i) {
    for (int s : step_inputs_[i])
      if (s >= 0) last[s] = static_cast<int>(i);
  }
  free_after_.resize(step_inputs_.size());
  std::vector<bool> keep(slot_values_.size(), false);
  for (int s : output_slots_) keep[s] = true;
  for (size_t s = 0; s < slot_values_.size(); ++s) {
    if (slot_values_[s]->is_constant()) {
      keep[s] = true;
      constant_slots_.push_back(static_cast<int>(s));
    }
    if (!keep[s] && last[s] >= 0) free_after_[last[s]].push_back(static_cast<int>(s));
  }
}

// Library steps whose outputs are all known skip shape inference (the shapes are the body's); float32
// binary arithmetic without post-ops runs through one direct call.
void CpuExecutable::PlanStepShortcuts() {
  step_inferred_.resize(plan_.steps.size());
  for (size_t i = 0; i < plan_.steps.size(); ++i) {
    const PlanStep& st = plan_.steps[i];
    if (st.kind != PlanStep::Kind::kLibrary) continue;
    bool known = !st.node->outputs.empty();
    for (const Value* v : st.node->outputs)
      known &= v == nullptr || (v->dtype != DType::kInvalid && v->shape.fully_known());
    if (!known) continue;
    for (const Value* v : st.node->outputs) {
      step_inferred_[i].push_back(v ? InferOutput{v->dtype, v->shape} : InferOutput{});
    }
  }
  binary_step_.resize(plan_.steps.size());
  for (size_t i = 0; i < plan_.steps.size(); ++i) {
    const PlanStep& st = plan_.steps[i];
    BinaryArithmetic op;
    if (st.kind != PlanStep::Kind::kLibrary || !st.post_ops.empty() || skip_step_[i] ||
        !ParseBinaryArithmetic(st.node->op_type, &op) || st.node->inputs.size() != 2 || st.node->outputs.size() != 1) {
      continue;
    }
    bool f32 = true;
    for (const Value* v : {st.node->inputs[0], st.node->inputs[1], st.node->outputs[0]}) {
      f32 &= v != nullptr && v->dtype == DType::kF32 && v->shape.fully_known();
    }
    if (f32) binary_step_[i] = op;
  }
}

absl::StatusOr<std::shared_ptr<const CpuExecutable>> CpuExecutable::Build(
    std::shared_ptr<const Graph> body, const CpuCompileOptions& options,
    const std::function<absl::StatusOr<std::unique_ptr<CpuCode>>(const FusionPlan&)>& make_code,
    const CpuExecutable* like) {
  std::shared_ptr<CpuExecutable> ex(new CpuExecutable());
  ex->body_ = body;
  ex->excess_precision_ = options.excess_precision;
  ex->codegen_single_ops_ = options.codegen_single_ops;
  int64_t t0 = Profiler::Now();
  FusionPlanOptions plan_options;
  plan_options.excess_precision = options.excess_precision;
  plan_options.single_op_groups_as_library = !options.codegen_single_ops;
  if (like != nullptr && like->excess_precision_ == options.excess_precision &&
      like->codegen_single_ops_ == options.codegen_single_ops) {
    absl::StatusOr<FusionPlan> rebound = RebindFusionPlan(like->plan_, *like->body_, *body);
    if (rebound.ok()) {
      ex->plan_ = *std::move(rebound);
      ex->plan_rebound_ = true;
    } else {
      CJIT_VLOG(2) << rebound.status().message();
    }
  }
  if (!ex->plan_rebound_) {
    CJIT_ASSIGN_OR_RETURN(ex->plan_, BuildFusionPlan(*body, plan_options));
  }
  if (options.on_phase) options.on_phase("fusion_plan", t0, Profiler::Now());
  ex->DescribeKernels();
  for (const PlanStep& s : ex->plan_.steps) {
    if (s.kind == PlanStep::Kind::kLibrary && FindKernel(s.node->op_type) == nullptr) {
      return absl::UnimplementedError(absl::StrCat(s.node->Describe(), ": no CPU kernel for a library step"));
    }
  }
  CJIT_ASSIGN_OR_RETURN(ex->code_, make_code(ex->plan_));
  ex->AssignSlots();
  ex->PlanInPlaceConcats();
  ex->PlanFrees();
  ex->PlanStepShortcuts();
  ex->step_tuning_ = std::make_unique<StepTuning[]>(ex->plan_.steps.size());
  return std::shared_ptr<const CpuExecutable>(std::move(ex));
}

CpuExecutable::~CpuExecutable() = default;

bool CpuExecutable::ClaimAutotuneJob(const Autotuner& tuner) const {
  if (autotune_job_claimed_.load(std::memory_order_relaxed)) return false;
  bool ready = false;
  for (size_t i = 0; i < plan_.steps.size() && !ready; ++i) {
    ready = plan_.steps[i].kind == PlanStep::Kind::kLibrary && step_tuning_[i].pending() &&
            step_tuning_[i].RanLongEnough(tuner) && FindAlgorithms(plan_.steps[i].node->op_type) != nullptr;
  }
  return ready && !autotune_job_claimed_.exchange(true);
}

void CpuExecutable::Autotune(Autotuner& tuner, int threads, int64_t executions) const {
  // Candidates are timed at the runs' thread count: libraries that parallelize with OpenMP (oneDNN, BLIS)
  // read this thread's setting, and on the compile worker (a thread of ours) it is the CPU count. Timing
  // oneDNN on 2 threads for 1-thread runs chose it for ResNet's stem where it is no faster at 1 thread,
  // and its idle team spun on the CPU the runs use.
  const int previous = omp_get_max_threads();
  if (threads > 0 && previous != threads) omp_set_num_threads(threads);
  AutotuneSteps(tuner, threads, executions);
  if (threads > 0 && previous != threads) omp_set_num_threads(previous);
}

void CpuExecutable::AutotuneSteps(Autotuner& tuner, int threads, int64_t executions) const {
  for (size_t i = 0; i < plan_.steps.size() && !tuner.cancelled(); ++i) {
    const PlanStep& step = plan_.steps[i];
    if (step.kind != PlanStep::Kind::kLibrary || skip_step_[i] || FindAlgorithms(step.node->op_type) == nullptr)
      continue;
    // Stand-ins of the body's shapes for the non-constant inputs: the tuner reads their dtypes and dims
    // (and fills its own copies); constants are the real tensors (weights are cached by buffer).
    std::vector<Tensor> owned(step_inputs_[i].size());
    std::vector<const Tensor*> ins(step_inputs_[i].size(), nullptr);
    bool known = true;
    for (size_t k = 0; k < step_inputs_[i].size() && known; ++k) {
      const int slot = step_inputs_[i][k];
      if (slot < 0) continue;
      const Value* v = slot_values_[slot];
      if (v->is_constant()) {
        ins[k] = v->constant.get();
      } else if (v->dtype != DType::kInvalid && v->shape.fully_known()) {
        try {
          owned[k] = Tensor::Wrap(v->dtype, v->shape.concrete(), nullptr);  // dtype and dims only, no data
        } catch (const std::exception&) {
          known = false;
          continue;
        }
        ins[k] = &owned[k];
      } else {
        known = false;
      }
    }
    if (!known) continue;
    const std::vector<PostOp>* post_ops = step.post_ops.empty() ? nullptr : &step.post_ops;
    const std::vector<InferOutput>* inferred = step_inferred_[i].empty() ? nullptr : &step_inferred_[i];
    step_tuning_[i].Resolve(tuner, *step.node, ins, step_input_const_[i], post_ops, inferred, threads, executions);
  }
  // Steps below --autotune_min_op_time_ms were left untuned: a later execution may claim another job.
  autotune_job_claimed_.store(false, std::memory_order_release);
}

struct CpuExecutable::DimsLayout {
  std::vector<const Value*> values;                 // every value of the body
  std::unordered_map<const Value*, int> index;      // value -> position in `values`
  std::vector<const Node*> order;                   // topological
  std::vector<std::vector<int>> node_inputs;        // per node of `order`: value positions (-1 absent)
  std::vector<std::vector<int>> node_outputs;
  std::vector<int> input_values, slot_values;       // body inputs, slots -> value positions
  std::unordered_map<std::string, int> by_name;     // value name -> position
  std::unordered_map<const Node*, int> fused_kernel_of;  // member node -> its fused kernel
  std::vector<const OpDef*> op_defs;                // per node of `order` (its shape function)
  std::vector<int> producer;                        // per value: its producer's position in `order` (-1: none)
  std::vector<Dims> body_dims;                      // per value: its dims in the body
  std::unordered_set<const Node*> body_nodes;
  std::vector<int> kernel_rank;                     // per fused kernel: collapsed iteration rank
  std::vector<std::string> kernel_inner;            // per fused kernel: InnerClass of each input
};

struct CpuExecutable::DimsInstance {
  std::vector<Dims> slot_dims;                       // per slot
  struct Kernel {
    int64_t rows = 0, row_elems = 0;
    std::vector<int64_t> meta;
    Dims shape;
  };
  std::vector<Kernel> kernels;                       // per fused kernel
  std::vector<std::vector<InferOutput>> inferred;    // per step (library steps with known outputs)
  std::vector<size_t> alias_offset;                  // per slot aliased into a Concat's output
  std::vector<std::pair<int, std::shared_ptr<const Tensor>>> constants;  // derived constants' values, by slot
};

absl::StatusOr<std::shared_ptr<const CpuExecutable::DimsLayout>> CpuExecutable::GetDimsLayout() const {
  MutexLock lock(&dims_layout_mu_);
  if (dims_layout_) return dims_layout_;
  auto l = std::make_shared<DimsLayout>();
  auto add = [&](const Value* v) -> int {
    if (v == nullptr) return -1;
    auto [it, inserted] = l->index.emplace(v, static_cast<int>(l->values.size()));
    if (inserted) l->values.push_back(v);
    return it->second;
  };
  for (const Value* v : body_->inputs()) l->input_values.push_back(add(v));
  CJIT_ASSIGN_OR_RETURN(std::vector<Node*> order, body_->TopologicalOrder());
  for (const Node* n : order) {
    if (!n->implicit_inputs.empty()) return absl::NotFoundError(absl::StrCat(n->Describe(), " has a subgraph"));
    std::vector<int> ins, outs;
    for (const Value* v : n->inputs) ins.push_back(add(v));
    for (const Value* v : n->outputs) outs.push_back(add(v));
    l->order.push_back(n);
    const OpDef* def = FindOp(n->domain, n->op_type);
    if (def == nullptr) return absl::NotFoundError(absl::StrCat(n->Describe(), " has no shape function"));
    l->op_defs.push_back(def);
    l->node_inputs.push_back(std::move(ins));
    l->node_outputs.push_back(std::move(outs));
    l->body_nodes.insert(n);
  }
  for (const Value* v : slot_values_) l->slot_values.push_back(add(v));
  l->producer.assign(l->values.size(), -1);
  for (size_t n = 0; n < l->node_outputs.size(); ++n) {
    for (int x : l->node_outputs[n]) {
      if (x >= 0) l->producer[x] = static_cast<int>(n);
    }
  }
  for (size_t x = 0; x < l->values.size(); ++x) l->by_name.emplace(l->values[x]->name, static_cast<int>(x));
  for (size_t k = 0; k < plan_.kernels.size(); ++k) {
    for (const Node* n : plan_.kernels[k].nodes) l->fused_kernel_of.emplace(n, static_cast<int>(k));
  }
  for (const Value* v : l->values) {
    if (!v->shape.fully_known() || v->dtype == DType::kInvalid) {
      return absl::NotFoundError(absl::StrCat("%", v->name, " has no known shape in the body"));
    }
    l->body_dims.push_back(v->shape.concrete());
  }
  for (const FusedKernel& k : plan_.kernels) {
    Collapsed c = Collapse(k.shape, Layouts(k), k.row_reduction);
    l->kernel_rank.push_back(static_cast<int>(c.dims.size()));
    std::string inner;
    for (size_t i = 0; i < k.inputs.size(); ++i) inner.push_back(InnerClass(c, i));
    l->kernel_inner.push_back(std::move(inner));
  }
  dims_layout_ = l;
  return dims_layout_;
}

namespace {

// InstantiateDims' reason to decline: the caller falls back to specializing for these dims.
template <typename... A>
absl::Status DimsMiss(const A&... why) {
  return absl::NotFoundError(absl::StrCat(why...));
}

}  // namespace

// Per value of the layout: its dims at the new input dims, whether they changed, and the value of each
// constant derived from dims (Reshape targets, fused kernels' inputs), computed where first read.
struct CpuExecutable::DimsPropagation {
  std::vector<Dims> dims;
  std::vector<char> changed, is_derived;
  std::vector<std::shared_ptr<const Tensor>> derived_value;
  // v's dims at these dims, or null when v is not a value of the body (l's index).
  const Dims* DimsOf(const DimsLayout& l, const Value* v) const {
    auto it = l.index.find(v);
    return it != l.index.end() ? &dims[it->second] : nullptr;
  }
};

absl::Status CpuExecutable::DimsInferInputs(const DimsLayout& l, size_t n, const DerivedConstants* derived,
                                            DimsPropagation& s, std::vector<InferInput>& in) const {
  // `in` keeps its Shape objects from node to node (their dims vectors are reused, not reallocated).
  in.resize(l.node_inputs[n].size());
  for (size_t i = 0; i < l.node_inputs[n].size(); ++i) {
    const int x = l.node_inputs[n][i];
    if (x < 0) {
      in[i] = InferInput{DType::kInvalid, Shape{}, nullptr, false};
      continue;
    }
    const Value* v = l.values[x];
    const Tensor* value = v->constant.get();
    if (s.is_derived[x]) {
      if (!s.derived_value[x]) {
        // Only values already final here: inputs, constants, and outputs of nodes before this one.
        auto dims_of = [&](const std::string& name) -> const Dims* {
          auto it = l.by_name.find(name);
          if (it == l.by_name.end() || l.producer[it->second] >= static_cast<int>(n)) return nullptr;
          return &s.dims[it->second];
        };
        auto value_or = derived->Evaluate(v->name, dims_of);
        if (!value_or.ok()) return DimsMiss("%", v->name, ": ", value_or.status().message());
        if ((*value_or)->dtype() != v->dtype || (*value_or)->dims().size() != s.dims[x].size() ||
            ((*value_or)->numel() == 1) != (v->constant->numel() == 1)) {
          return DimsMiss("%", v->name, " changes its dtype, rank or scalar-ness at these dims");
        }
        s.derived_value[x] = *std::move(value_or);
        s.changed[x] = s.derived_value[x]->dims() != s.dims[x];
        s.dims[x] = s.derived_value[x]->dims();
      }
      value = s.derived_value[x].get();
    }
    const Dims& d = value ? value->dims() : s.dims[x];
    InferInput& ii = in[i];
    ii.dtype = v->dtype;
    ii.value = value;
    ii.present = true;
    ii.shape.rank_known = true;
    ii.shape.dims.resize(d.size());
    for (size_t k = 0; k < d.size(); ++k) {
      ii.shape.dims[k].value = d[k];
      ii.shape.dims[k].symbol.clear();
    }
  }
  return absl::OkStatus();
}

absl::Status CpuExecutable::PropagateDims(const DimsLayout& l, const std::vector<Dims>& input_dims,
                                          const DerivedConstants* derived, DimsPropagation& s) const {
  if (input_dims.size() != l.input_values.size()) return DimsMiss("input count differs");
  // Every value starts with its body dims; shape functions run only for nodes with an input whose dims
  // changed (they are pure functions of dtypes, dims, constant values and attributes): in a decode step
  // only the attention's values depend on the cache length.
  s.dims = l.body_dims;
  s.changed.assign(l.values.size(), 0);
  for (size_t i = 0; i < input_dims.size(); ++i) {
    const int x = l.input_values[i];
    if (input_dims[i].size() != s.dims[x].size()) return DimsMiss("input ", i, " has another rank");
    s.changed[x] = input_dims[i] != s.dims[x];
    s.dims[x] = input_dims[i];
  }
  s.is_derived.assign(l.values.size(), 0);
  s.derived_value.assign(l.values.size(), nullptr);
  if (derived != nullptr) {
    for (size_t x = 0; x < l.values.size(); ++x) {
      s.is_derived[x] = l.values[x]->is_constant() && derived->Derives(l.values[x]->name);
    }
  }
  std::vector<InferInput> in;
  std::vector<InferOutput> out;
  for (size_t n = 0; n < l.order.size(); ++n) {
    bool any = false, reads_derived = false;
    for (size_t i = 0; i < l.node_inputs[n].size(); ++i) {
      const int x = l.node_inputs[n][i];
      if (x < 0) continue;
      any |= s.changed[x];
      if (!s.is_derived[x]) continue;
      // A Reshape's target (its kernel reads the inferred dims), or an input a fused kernel reads from
      // memory (not a scalar: those are folded into the code).
      const Node* r = l.order[n];
      bool read_at_run_time = r->op_type == "Reshape" && i == 1;
      auto fk = l.fused_kernel_of.find(r);
      if (!read_at_run_time && fk != l.fused_kernel_of.end() && !IsScalarConstant(l.values[x])) {
        const auto& sources = plan_.kernels[fk->second].input_sources;
        read_at_run_time = std::find(sources.begin(), sources.end(), l.values[x]) != sources.end();
      }
      if (!read_at_run_time) {
        return DimsMiss(r->Describe(), " reads %", l.values[x]->name, ", a constant derived from dims");
      }
      reads_derived = true;
    }
    if (!any && !reads_derived) continue;
    CJIT_RETURN_IF_ERROR(DimsInferInputs(l, n, derived, s, in));
    out.clear();
    // The body's dtypes passed InferNode's checks when it was specialized; only dims change here.
    absl::Status st = InferNodeDims(*l.op_defs[n], *l.order[n], in, out);
    if (!st.ok()) return DimsMiss("shape inference: ", st.message());
    for (size_t k = 0; k < l.node_outputs[n].size(); ++k) {
      const int x = l.node_outputs[n][k];
      if (x < 0) continue;
      const Value* v = l.values[x];
      if (k >= out.size() || !out[k].shape.fully_known() || out[k].dtype != v->dtype ||
          out[k].shape.rank() != v->shape.rank()) {
        return DimsMiss(l.order[n]->Describe(), ": output ", k, " is not known with its dtype and rank at these dims");
      }
      Dims d = out[k].shape.concrete();
      s.changed[x] = d != s.dims[x];
      s.dims[x] = std::move(d);
    }
  }
  return absl::OkStatus();
}

absl::Status CpuExecutable::InstantiateKernels(const DimsLayout& l, const DimsPropagation& s,
                                               DimsInstance* inst) const {
  auto dims_of = [&](const Value* v, Dims*) { return s.DimsOf(l, v); };  // RederiveKernels' signature
  auto unchanged = [&](const Value* v) {
    auto it = l.index.find(v);
    return it != l.index.end() && !s.changed[it->second];
  };
  // A kernel whose sources and outputs kept their dims keeps its compiled metadata.
  std::vector<bool> same_kernel(plan_.kernels.size(), false);
  for (size_t k = 0; k < plan_.kernels.size(); ++k) {
    bool same = true;
    for (const Value* v : plan_.kernels[k].input_sources) same &= unchanged(v);
    for (const Value* v : plan_.kernels[k].outputs) same &= unchanged(v);
    same_kernel[k] = same;
  }
  CJIT_ASSIGN_OR_RETURN(std::vector<KernelDims> kernels, RederiveKernels(plan_, l.body_nodes, dims_of, &same_kernel));
  inst->kernels.resize(kernels.size());
  for (size_t k = 0; k < kernels.size(); ++k) {
    const FusedKernel& fk = plan_.kernels[k];
    if (same_kernel[k]) {
      const CpuKernel& ck = code_->kernels()[k];
      inst->kernels[k] = DimsInstance::Kernel{ck.rows, ck.row_elems, ck.meta, fk.shape};
      continue;
    }
    std::vector<Dims> input_dims_k;
    for (const Value* v : fk.inputs) {
      const Dims* d = s.DimsOf(l, v);
      if (d == nullptr)
        return DimsMiss("%", v->name, " (an input of ", kernel_names_[k], ") is not a value of the body");
      input_dims_k.push_back(*d);
    }
    Collapsed c = Collapse(kernels[k].shape, Layouts(input_dims_k, kernels[k].input_offsets, kernels[k].input_strides),
                           fk.row_reduction);
    bool same = static_cast<int>(c.dims.size()) == l.kernel_rank[k];
    for (size_t i = 0; i < fk.inputs.size() && same; ++i) same = InnerClass(c, i) == l.kernel_inner[k][i];
    if (!same) return DimsMiss(kernel_names_[k], " needs another kernel structure at these dims");
    DimsInstance::Kernel& ik = inst->kernels[k];
    ik.row_elems = c.dims.back();
    ik.rows = 1;
    for (size_t d = 0; d + 1 < c.dims.size(); ++d) ik.rows *= c.dims[d];
    ik.meta = KernelMeta(c);
    ik.shape = kernels[k].shape;
  }
  return absl::OkStatus();
}

absl::Status CpuExecutable::InstantiateSteps(const DimsLayout& l, const DimsPropagation& s,
                                             DimsInstance* inst) const {
  inst->slot_dims.resize(slot_values_.size());
  for (size_t i = 0; i < slot_values_.size(); ++i) {
    inst->slot_dims[i] = s.dims[l.slot_values[i]];
    if (s.derived_value[l.slot_values[i]]) {
      inst->constants.push_back({static_cast<int>(i), s.derived_value[l.slot_values[i]]});
    }
  }
  inst->inferred.resize(plan_.steps.size());
  for (size_t i = 0; i < plan_.steps.size(); ++i) {
    if (step_inferred_[i].empty()) continue;
    for (const Value* v : plan_.steps[i].node->outputs) {
      const Dims* d = v ? s.DimsOf(l, v) : nullptr;
      if (v != nullptr && d == nullptr) return DimsMiss("%", v->name, " is not a value of the body");
      inst->inferred[i].push_back(v ? InferOutput{v->dtype, Shape::Of(*d)} : InferOutput{});
    }
  }
  // In-place Concats: each input's byte offset in the output at these dims.
  inst->alias_offset.assign(slot_values_.size(), 0);
  for (size_t i = 0; i < plan_.steps.size(); ++i) {
    if (!skip_step_[i]) continue;
    const Node* concat = plan_.steps[i].node;
    const Dims* odp = s.DimsOf(l, concat->outputs[0]);
    if (odp == nullptr) return DimsMiss(concat->Describe(), ": its output is not a value of the body");
    const Dims& od = *odp;
    int64_t axis = concat->GetInt("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(od.size());
    int64_t outer = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= od[d];
    if (outer != 1) return DimsMiss(concat->Describe(), " is no longer written in place at these dims");
    size_t offset = 0;
    for (int slot : step_inputs_[i]) {
      inst->alias_offset[slot] = offset;
      offset += static_cast<size_t>(NumElements(inst->slot_dims[slot])) * DTypeSize(slot_values_[slot]->dtype);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const CpuExecutable::DimsInstance>> CpuExecutable::InstantiateDims(
    const std::vector<Dims>& input_dims, const DerivedConstants* derived) const {
  CJIT_ASSIGN_OR_RETURN(std::shared_ptr<const DimsLayout> layout, GetDimsLayout());
  DimsPropagation s;
  CJIT_RETURN_IF_ERROR(PropagateDims(*layout, input_dims, derived, s));
  auto inst = std::make_shared<DimsInstance>();
  CJIT_RETURN_IF_ERROR(InstantiateKernels(*layout, s, inst.get()));
  CJIT_RETURN_IF_ERROR(InstantiateSteps(*layout, s, inst.get()));
  return std::shared_ptr<const DimsInstance>(std::move(inst));
}

Tensor& CpuExecutable::Materialize(std::vector<Tensor>& slots, int slot, const DimsInstance* instance) const {
  const AliasInto& a = alias_[slot];
  const Value* v = slot_values_[slot];
  auto dims = [&](int s) { return instance ? instance->slot_dims[s] : slot_values_[s]->shape.concrete(); };
  if (a.base_slot < 0) {
    slots[slot] = Tensor(v->dtype, dims(slot));
    return slots[slot];
  }
  Tensor& base = slots[a.base_slot];
  if (!base.defined()) base = Tensor(slot_values_[a.base_slot]->dtype, dims(a.base_slot));
  slots[slot] = Tensor::Alias(base, instance ? instance->alias_offset[slot] : a.byte_offset, v->dtype, dims(slot));
  return slots[slot];
}

absl::StatusOr<std::vector<Tensor>> CpuExecutable::Run(const std::vector<const Tensor*>& inputs, int threads,
                                                       Profiler* profiler, int cluster_id, Autotuner* tuner,
                                                       int64_t execution, bool tune_inline,
                                                       const DimsInstance* instance) const {
  if (inputs.size() != input_slots_.size()) return absl::InternalError("compiled cluster: wrong input count");
  if (instance != nullptr) tuner = nullptr;  // choices were tuned at the body's dims
  // `slots` owns what this run computes; `view` points at every value (constants and inputs in place).
  std::vector<Tensor> slots(slot_values_.size());
  std::vector<const Tensor*> view(slot_values_.size(), nullptr);
  for (int s : constant_slots_) view[s] = slot_values_[s]->constant.get();
  if (instance != nullptr) {
    for (const auto& [s, value] : instance->constants) view[s] = value.get();
  }
  for (size_t i = 0; i < inputs.size(); ++i) view[input_slots_[i]] = inputs[i];
  auto materialize = [&](int s) -> Tensor& {
    Tensor& t = Materialize(slots, s, instance);
    view[s] = &t;
    if (alias_[s].base_slot >= 0) view[alias_[s].base_slot] = &slots[alias_[s].base_slot];
    return t;
  };
  for (size_t i = 0; i < plan_.steps.size(); ++i) {
    const PlanStep& step = plan_.steps[i];
    if (skip_step_[i]) {
      // In-place Concat: its inputs were written into its output.
      int out = step_outputs_[i][0];
      if (!slots[out].defined()) materialize(out);
    } else if (step.kind == PlanStep::Kind::kFused) {
      TraceScope scope(profiler, kernel_names_[step.kernel], "kernel");
      const CpuKernel& ck = code_->kernels()[step.kernel];
      void* args_buf[16];
      std::vector<void*> args_vec;
      size_t nargs = step_inputs_[i].size() + step_outputs_[i].size();
      void** args = args_buf;
      if (nargs > 16) {
        args_vec.resize(nargs);
        args = args_vec.data();
      }
      size_t a = 0;
      for (int s : step_inputs_[i]) args[a++] = const_cast<void*>(view[s]->raw());
      for (size_t o = 0; o < step_outputs_[i].size(); ++o) args[a++] = materialize(step_outputs_[i][o]).raw();
      const DimsInstance::Kernel* ik = instance ? &instance->kernels[step.kernel] : nullptr;
      const int64_t* meta = ik ? ik->meta.data() : ck.meta.data();
      int64_t rows = ik ? ik->rows : ck.rows, work = rows * (ik ? ik->row_elems : ck.row_elems);
      int nt = rows > 1 ? static_cast<int>(std::min<int64_t>(ThreadsForElements(threads, work), rows)) : 1;
      if (nt <= 1) {
        ck.fn(args, meta, ck.consts.data(), 0, rows);
      } else {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int t = 0; t < nt; ++t) {
          int64_t lo = rows * t / nt, hi = rows * (t + 1) / nt;
          if (lo < hi) ck.fn(args, meta, ck.consts.data(), lo, hi);
        }
        MarkParallelEnd();
      }
      if (scope.active()) {
        scope.Stop();
        scope.args().Add("cluster", cluster_id).Add("threads", nt);
        if (ik) {
          absl::StrAppend(&scope.args().mutable_body(), ", ", kernel_dims_free_args_[step.kernel]);
          scope.args().Add("shape", DimsToString(ik->shape)).Add("dims", "instance");
        } else {
          absl::StrAppend(&scope.args().mutable_body(), ", ", kernel_args_[step.kernel]);
        }
      }
    } else if (binary_step_[i].has_value()) {
      TraceScope scope(profiler, step.node->op_type, "library");
      const Tensor& a = *view[step_inputs_[i][0]];
      const Tensor& b = *view[step_inputs_[i][1]];
      BinaryArithmeticF32(*binary_step_[i], a, b, materialize(step_outputs_[i][0]), threads);
      if (scope.active()) {
        scope.Stop();
        scope.SetNode(step.node, cluster_id);
        scope.args().Add("impl", "float32 broadcast loop (direct)");
      }
    } else {
      TraceScope scope(profiler, step.node->op_type, "library");
      std::vector<const Tensor*> ins;
      ins.reserve(step_inputs_[i].size());
      for (int s : step_inputs_[i]) ins.push_back(s >= 0 ? view[s] : nullptr);
      std::vector<Tensor> preset(step_outputs_[i].size());
      bool any_alias = false;
      for (size_t k = 0; k < step_outputs_[i].size(); ++k) {
        int s = step_outputs_[i][k];
        if (s >= 0 && alias_[s].base_slot >= 0) {
          preset[k] = materialize(s);
          any_alias = true;
        }
      }
      std::string impl;
      const std::vector<PostOp>* post_ops = step.post_ops.empty() ? nullptr : &step.post_ops;
      const std::vector<InferOutput>* inferred =
          step_inferred_[i].empty() ? nullptr : instance ? &instance->inferred[i] : &step_inferred_[i];
      const std::string* algorithm =
          tuner != nullptr && tuner->enabled()
              ? step_tuning_[i].Resolve(*tuner, *step.node, ins, step_input_const_[i], post_ops, inferred, threads,
                                         execution, tune_inline)
              : nullptr;
      // The default's run time counts toward --autotune_min_op_time_ms while the step is untuned.
      const bool time_default = algorithm == nullptr && tuner != nullptr && tuner->enabled() &&
                                tuner->options().min_op_time_ms > 0 && step_tuning_[i].pending();
      const int64_t t0 = time_default ? Profiler::Now() : 0;
      auto evaluated = EvaluateNode(*step.node, ins, threads, nullptr, &step_input_const_[i], post_ops,
                                    any_alias ? &preset : nullptr, scope.active() ? &impl : nullptr, inferred,
                                    algorithm);
      if (time_default) step_tuning_[i].AddDefaultTime(Profiler::Now() - t0);
      if (!evaluated.ok() && algorithm != nullptr) {
        // A tuned algorithm that fails here (it passed on the same signature when tuned: e.g. memory for
        // its scratch is short now) never fails the run: the default algorithm runs instead.
        if (step_tuning_[i].MarkFailed()) {
          CJIT_LOG(WARNING) << step.node->Describe() << ": autotuned algorithm '" << *algorithm
                            << "' failed, running the default from now on: " << evaluated.status().message();
        }
        evaluated = EvaluateNode(*step.node, ins, threads, nullptr, &step_input_const_[i], post_ops,
                                 any_alias ? &preset : nullptr, scope.active() ? &impl : nullptr, inferred);
      }
      CJIT_ASSIGN_OR_RETURN(std::vector<Tensor> outs, std::move(evaluated));
      if (scope.active()) {
        scope.Stop();
        scope.SetNode(step.node, cluster_id);
        if (!impl.empty()) scope.args().Add("impl", impl);
        if (!step.absorbed.empty()) {
          std::string absorbed;
          for (const Node* n : step.absorbed) absl::StrAppend(&absorbed, absorbed.empty() ? "" : "+", n->op_type);
          scope.args().Add("post_ops", absorbed);
        }
      }
      for (size_t k = 0; k < step_outputs_[i].size(); ++k) {
        int s = step_outputs_[i][k];
        if (s < 0) continue;
        if (alias_[s].base_slot >= 0 && outs[k].raw() != preset[k].raw()) {
          // The kernel made its own buffer (e.g. a zero-copy reshape): copy into the destination.
          if (outs[k].nbytes() != preset[k].nbytes()) return absl::InternalError("in-place output size mismatch");
          std::memcpy(preset[k].raw(), outs[k].raw(), outs[k].nbytes());
          continue;
        }
        slots[s] = std::move(outs[k]);
        view[s] = &slots[s];
      }
    }
    for (int s : free_after_[i]) {
      slots[s] = Tensor();
      view[s] = nullptr;
    }
  }
  std::vector<Tensor> out;
  out.reserve(output_slots_.size());
  for (int s : output_slots_) {
    if (view[s] == nullptr) return absl::InternalError("compiled cluster: an output was never computed");
    out.push_back(*view[s]);
  }
  return out;
}

}  // namespace cjit
