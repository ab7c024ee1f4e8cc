#include "runtime/executable.h"

#include <omp.h>

#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "compiler/ir/status_macros.h"
#include "runtime/cpu/kernel.h"

namespace cjit {

absl::StatusOr<std::shared_ptr<const CpuExecutable>> CpuExecutable::Compile(std::shared_ptr<const Graph> body,
                                                                            const CpuCompileOptions& options) {
  return Build(body, [&](const FusionPlan& plan) { return CompileForCpu(plan, options); });
}

absl::StatusOr<std::shared_ptr<const CpuExecutable>> CpuExecutable::Load(std::shared_ptr<const Graph> body,
                                                                         absl::string_view payload) {
  return Build(body, [&](const FusionPlan& plan) { return LoadCpuPayload(plan, payload); });
}

absl::StatusOr<std::shared_ptr<const CpuExecutable>> CpuExecutable::Build(
    std::shared_ptr<const Graph> body,
    const std::function<absl::StatusOr<std::unique_ptr<CpuCode>>(const FusionPlan&)>& make_code) {
  std::shared_ptr<CpuExecutable> ex(new CpuExecutable());
  ex->body_ = body;
  CJIT_ASSIGN_OR_RETURN(ex->plan_, BuildFusionPlan(*body));
  for (const PlanStep& s : ex->plan_.steps) {
    if (s.kind == PlanStep::Kind::kLibrary && FindKernel(s.node->op_type) == nullptr) {
      return absl::UnimplementedError(absl::StrCat(s.node->Describe(), ": no CPU kernel for a library step"));
    }
  }
  CJIT_ASSIGN_OR_RETURN(ex->code_, make_code(ex->plan_));
  // Buffer plan.
  std::unordered_map<const Value*, int> slot;
  auto slot_of = [&](const Value* v) {
    auto it = slot.find(v);
    if (it != slot.end()) return it->second;
    int s = static_cast<int>(ex->slot_values_.size());
    ex->slot_values_.push_back(v);
    slot[v] = s;
    return s;
  };
  for (const Value* v : body->inputs()) ex->input_slots_.push_back(slot_of(v));
  for (const PlanStep& s : ex->plan_.steps) {
    std::vector<int> ins, outs;
    std::vector<bool> consts;
    if (s.kind == PlanStep::Kind::kFused) {
      const FusedKernel& k = ex->plan_.kernels[s.kernel];
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
    ex->step_inputs_.push_back(ins);
    ex->step_outputs_.push_back(outs);
    ex->step_input_const_.push_back(consts);
  }
  for (const Value* v : body->outputs()) ex->output_slots_.push_back(slot_of(v));
  std::vector<int> last(ex->slot_values_.size(), -1);
  for (size_t i = 0; i < ex->step_inputs_.size(); ++i) {
    for (int s : ex->step_inputs_[i]) if (s >= 0) last[s] = static_cast<int>(i);
  }
  ex->free_after_.resize(ex->step_inputs_.size());
  std::vector<bool> keep(ex->slot_values_.size(), false);
  for (int s : ex->output_slots_) keep[s] = true;
  for (size_t s = 0; s < ex->slot_values_.size(); ++s) {
    if (ex->slot_values_[s]->is_constant()) keep[s] = true;
    if (!keep[s] && last[s] >= 0) ex->free_after_[last[s]].push_back(static_cast<int>(s));
  }
  return std::shared_ptr<const CpuExecutable>(std::move(ex));
}

absl::StatusOr<std::vector<Tensor>> CpuExecutable::Run(const std::vector<const Tensor*>& inputs, int threads) const {
  if (inputs.size() != input_slots_.size()) return absl::InternalError("compiled cluster: wrong input count");
  std::vector<Tensor> slots(slot_values_.size());
  for (size_t s = 0; s < slot_values_.size(); ++s) {
    if (slot_values_[s]->is_constant()) slots[s] = *slot_values_[s]->constant;
  }
  for (size_t i = 0; i < inputs.size(); ++i) slots[input_slots_[i]] = *inputs[i];
  for (size_t i = 0; i < plan_.steps.size(); ++i) {
    const PlanStep& step = plan_.steps[i];
    if (step.kind == PlanStep::Kind::kFused) {
      const FusedKernel& k = plan_.kernels[step.kernel];
      const CpuKernel& ck = code_->kernels()[step.kernel];
      std::vector<void*> args;
      for (int s : step_inputs_[i]) args.push_back(const_cast<void*>(slots[s].raw()));
      for (size_t o = 0; o < step_outputs_[i].size(); ++o) {
        int s = step_outputs_[i][o];
        slots[s] = Tensor(DType::kF32, k.outputs[o]->shape.concrete());
        args.push_back(slots[s].raw());
      }
      int64_t rows = ck.rows, work = rows * ck.row_elems;
      int nt = (work >= 32768 && rows > 1) ? std::min<int64_t>(threads, rows) : 1;
      if (nt <= 1) {
        ck.fn(args.data(), ck.meta.data(), ck.consts.data(), 0, rows);
      } else {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int t = 0; t < nt; ++t) {
          int64_t lo = rows * t / nt, hi = rows * (t + 1) / nt;
          if (lo < hi) ck.fn(args.data(), ck.meta.data(), ck.consts.data(), lo, hi);
        }
      }
    } else {
      std::vector<const Tensor*> ins;
      for (int s : step_inputs_[i]) ins.push_back(s >= 0 ? &slots[s] : nullptr);
      CJIT_ASSIGN_OR_RETURN(std::vector<Tensor> outs, EvaluateNode(*step.node, ins, threads, nullptr,
                                                                   &step_input_const_[i],
                                                                   step.post_ops.empty() ? nullptr : &step.post_ops));
      for (size_t k = 0; k < step_outputs_[i].size(); ++k) {
        if (step_outputs_[i][k] >= 0) slots[step_outputs_[i][k]] = std::move(outs[k]);
      }
    }
    for (int s : free_after_[i]) slots[s] = Tensor();
  }
  std::vector<Tensor> out;
  for (int s : output_slots_) out.push_back(slots[s]);
  return out;
}

}  // namespace cjit
