// GPU placement: each op of a specialized graph lowered to a device step (a fused kernel, a cuBLASLt GEMM,
// a cuDNN convolution or pooling, a gather, pitched copies, a buffer alias) or kept on the host
// (runtime/cuda/gpu_executor.h GpuPlacement says which and why). Single-op kernels: gpu_single_op.cc.
#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "compiler/codegen/fusion_plan.h"
#include "compiler/codegen/kernel_layout.h"
#include "compiler/ops/op_registry.h"
#include "compiler/passes/decompose.h"
#include "compiler/passes/mark_for_compilation.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/resize.h"
#include "runtime/cuda/gpu_autotune.h"
#include "runtime/cuda/gpu_executor.h"
#include "runtime/cuda/gpu_executor_impl.h"
#include "runtime/executor.h"
#include "runtime/run_options.h"

namespace cjit {

FusionPlanOptions GpuPlanOptions() {
  FusionPlanOptions o;
  o.conv_post_ops = false;
  o.gemm_epilogues = true;
  return o;
}

namespace {

bool StaticF32(const Value* v) { return v && v->dtype == DType::kF32 && v->shape.fully_known(); }

// `v` has static dims and dtype `t`.
bool StaticOf(const Value* v, DType t) { return v && v->dtype == t && v->shape.fully_known(); }

// The library element type of a GEMM / convolution / pooling node: its output's, when that is float32,
// float16 or bfloat16 (the operands are then checked against it); kInvalid otherwise.
DType LibraryType(const Node& n) {
  return !n.outputs.empty() && n.outputs[0] && IsLibraryFloat(n.outputs[0]->dtype) ? n.outputs[0]->dtype
                                                                                     : DType::kInvalid;
}

// Whether a library call made for `n` can be used (`made` is its creation status): true; false when the
// library declines the shape (the op then runs on the host; logged); an error naming the node when the
// library itself is missing.
absl::StatusOr<bool> LibraryAccepts(const Node& n, const absl::Status& made) {
  if (made.ok()) return true;
  if (absl::IsFailedPrecondition(made))
    return absl::FailedPreconditionError(absl::StrCat(n.Describe(), ": ", made.message()));
  CJIT_LOG(WARNING) << n.Describe() << " runs on the host: " << made;
  return false;
}

// A Conv's constant bias (float32, float16 or bfloat16) moved out of the convolution into an Add(y, bias as [1, K, 1(,
// 1)]) when every consumer of y is a fusible elementwise op: the fusion plan then fuses the Add into the consumers'
// kernel (Relu, HardSwish, a residual Add...), which reads the bias as a per-channel broadcast — instead of
// cuDNN's separate cudnnAddTensor launch per convolution (a quarter of ppocr_mobile_cls's GPU time, Nsight
// Compute on an H200). The same sum in a different order: (conv + b) rounded once more at most. Returns the
// rewritten copy of `body` and the number of biases moved, or nullptr when no Conv qualifies.
std::unique_ptr<Graph> MoveConvBiasToConsumers(const Graph& body, int* moved) {
  std::unordered_map<const Value*, std::vector<const Node*>> users;
  std::set<const Value*> captured;
  for (const auto& n : body.nodes()) {
    for (const Value* v : n->inputs)
      if (v) users[v].push_back(n.get());
    for (const Value* v : n->implicit_inputs) captured.insert(v);
  }
  std::vector<size_t> picks;
  for (size_t i = 0; i < body.nodes().size(); ++i) {
    const Node& n = *body.nodes()[i];
    const DType dt = LibraryType(n);
    if (n.op_type != "Conv" || !n.domain.empty() || n.outputs.size() != 1 || dt == DType::kInvalid ||
        !StaticOf(n.outputs[0], dt)) {
      continue;
    }
    const Value* b = n.input(2);
    const Value* y = n.outputs[0];
    Dims yd = y->shape.concrete();
    if (b == nullptr || !b->is_constant() || b->dtype != dt || yd.size() < 3 ||
        b->constant->numel() != yd[1] || captured.count(y)) {
      continue;
    }
    auto it = users.find(y);
    if (it == users.end()) continue;
    if (std::all_of(it->second.begin(), it->second.end(), [](const Node* u) { return IsFusibleElementwise(*u); })) {
      picks.push_back(i);
    }
  }
  *moved = static_cast<int>(picks.size());
  if (picks.empty()) return nullptr;
  std::unique_ptr<Graph> g = body.Clone();  // node order is kept: picks index the copy too
  for (size_t i : picks) {
    Node* conv = g->nodes()[i].get();
    Value* y = conv->outputs[0];
    Dims bd(static_cast<size_t>(y->shape.rank()), 1);
    bd[1] = y->shape.dims[1].value;
    Value* bias = g->AddConstant(absl::StrCat(conv->name, "/bias"), conv->inputs[2]->constant->Reshaped(bd));
    conv->inputs.resize(2);
    Node* add =
        g->AddNode("Add", absl::StrCat(conv->name, "/bias_add"), {y, bias}, {absl::StrCat(conv->name, "/biased")});
    add->opset_version = 14;
    Value* sum = add->outputs[0];
    sum->dtype = y->dtype;
    sum->shape = y->shape;
    g->ReplaceAllUses(y, sum);  // the consumers and graph outputs read the biased value
    add->inputs[0] = y;
  }
  return g;
}

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Strides, dilations and begin/end padding of each spatial dim of a Conv or pool (`window`: its kernel
// dims), from `pads` or auto_pad — SAME_UPPER puts an odd extra pad at the end, SAME_LOWER at the
// beginning (ONNX Conv / MaxPool spec). False for attributes it cannot read.
bool SpatialWindows(const Node& n, const Dims& xd, const Dims& window, const Dims& yd, std::vector<int64_t>* strides,
                    std::vector<int64_t>* dil, std::vector<int64_t>* begin, std::vector<int64_t>* end) {
  int sp = static_cast<int>(xd.size()) - 2;
  if (sp < 1 || static_cast<int>(window.size()) != sp) return false;
  *strides = n.GetInts("strides");
  *dil = n.GetInts("dilations");
  std::vector<int64_t> pads = n.GetInts("pads");
  if (strides->empty()) strides->assign(sp, 1);
  if (dil->empty()) dil->assign(sp, 1);
  if (static_cast<int>(strides->size()) != sp || static_cast<int>(dil->size()) != sp) return false;
  std::string auto_pad = n.GetString("auto_pad", "NOTSET");
  begin->assign(sp, 0);
  end->assign(sp, 0);
  for (int i = 0; i < sp; ++i) {
    int64_t in = xd[2 + i], k = window[i], out = yd[2 + i];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      int64_t total = std::max<int64_t>(0, (out - 1) * (*strides)[i] + (k - 1) * (*dil)[i] + 1 - in);
      (*begin)[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      (*end)[i] = total - (*begin)[i];
    } else if (auto_pad == "NOTSET") {
      if (!pads.empty()) {
        if (static_cast<int>(pads.size()) != 2 * sp) return false;
        (*begin)[i] = pads[i];
        (*end)[i] = pads[sp + i];
      }
    } else if (auto_pad != "VALID") {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string GpuPlacement::ToString() const {
  std::string host;
  for (const auto& [op, count] : host_op_types) absl::StrAppend(&host, host.empty() ? "" : ", ", op, " x", count);
  return absl::StrCat(
      device, " (code for ", target, "): ", fused_kernels, " fused kernels, ", op_kernels, " single-op kernels, ",
      gemms, " GEMM calls (", epilogue_ops, " ops in their epilogues), ", convs, " convolutions (", conv_biases_moved,
      " biases in a consumer's kernel), ", pools, " pools, ", gathers, " gathers, ", tuned_library_calls,
      " library calls with tuned algorithms, ", aliases, " reshapes as aliases, ", copies, " concats/pads as copies, ",
      host_ops, " host ops", host.empty() ? "" : absl::StrCat(" (", host, ")"),
      prologue_ops > 0 ? absl::StrCat(", ", prologue_ops, " of them in the host prologue") : "", "; ", compiles,
      " kernel compilations, ", disk_hits, " from the persistent cache, in ", static_cast<int64_t>(compile_ms), " ms");
}

absl::StatusOr<bool> GpuExecutor::Impl::PlacePlan(const FusionPlan& plan, bool single_op) {
  auto t0 = std::chrono::steady_clock::now();
  DeviceBackend::CompileCounts counts;
  absl::StatusOr<std::vector<std::shared_ptr<const FusedKernelHandle>>> compiled =
      device->CompileKernels(plan, &counts);
  placement.compiles += counts.compiled;
  placement.disk_hits += counts.disk_hits;
  placement.compile_ms += MsSince(t0);
  if (!compiled.ok()) {
    CJIT_LOG(WARNING) << "GPU code generation failed (" << compiled.status()
                 << "); the ops run as single-op steps instead";
    return false;
  }
  for (const PlanStep& ps : plan.steps) {
    if (ps.kind == PlanStep::Kind::kLibrary) {
      CJIT_RETURN_IF_ERROR(PlaceNode(*ps.node, &ps));
      continue;
    }
    const FusedKernel& k = plan.kernels[ps.kernel];
    Collapsed c = Collapse(k.shape, Layouts(k), k.row_reduction);
    Step st;
    st.kind = Step::Kind::kKernel;
    st.fn = (*compiled)[ps.kernel];
    st.row_kernel = k.row_reduction;
    st.row_elems = c.dims.back();
    st.rows = 1;
    for (size_t d = 0; d + 1 < c.dims.size(); ++d) st.rows *= c.dims[d];
    std::vector<int64_t> meta = KernelMeta(c);
    std::vector<float> consts = KernelConsts(k);
    CJIT_ASSIGN_OR_RETURN(st.meta, Upload(meta.data(), meta.size() * sizeof(int64_t)));
    CJIT_ASSIGN_OR_RETURN(st.consts, Upload(consts.data(), consts.size() * sizeof(float)));
    for (const Value* v : k.input_sources) st.in.push_back(Slot(v));
    for (const Value* v : k.outputs) st.out.push_back(Slot(v));
    steps.push_back(std::move(st));
    ++(single_op ? placement.op_kernels : placement.fused_kernels);
  }
  return true;
}

absl::Status GpuExecutor::Impl::PlaceCluster(const Node& n) {
  const Graph* body = n.GetGraph("body");
  if (body == nullptr) return absl::InternalError(absl::StrCat(n.Describe(), ": cluster without a body"));
  int biases_moved = 0;
  if (std::unique_ptr<Graph> rewritten =
          options.move_conv_bias ? MoveConvBiasToConsumers(*body, &biases_moved) : nullptr) {
    body = rewritten.get();
    owned.push_back(std::move(rewritten));
    placement.conv_biases_moved += biases_moved;
  }
  for (size_t i = 0; i < body->inputs().size() && i < n.inputs.size(); ++i)
    slot_of[body->inputs()[i]] = Slot(n.inputs[i]);
  absl::StatusOr<FusionPlan> plan = BuildFusionPlan(*body, GpuPlanOptions());
  bool placed = false;
  if (plan.ok()) {
    CJIT_ASSIGN_OR_RETURN(placed, PlacePlan(*plan, false));
  } else {
    CJIT_LOG(WARNING) << n.Describe() << ": no fusion plan (" << plan.status() << "); its ops run one by one";
  }
  if (!placed) {
    CJIT_ASSIGN_OR_RETURN(std::vector<Node*> order, body->TopologicalOrder());
    for (const Node* bn : order) CJIT_RETURN_IF_ERROR(PlaceNode(*bn));
  }
  for (size_t j = 0; j < n.outputs.size() && j < body->outputs().size(); ++j) {
    if (n.outputs[j]) slot_of[n.outputs[j]] = Slot(body->outputs()[j]);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> GpuExecutor::Impl::TryGemm(const Node& n, const PlanStep* step) {
  if (n.op_type != "MatMul" && n.op_type != "Gemm") return false;
  const DType dt = LibraryType(n);
  if (n.outputs.size() != 1 || dt == DType::kInvalid || !StaticOf(n.outputs[0], dt) || !StaticOf(n.input(0), dt) ||
      !StaticOf(n.input(1), dt)) {
    return false;
  }
  Dims a = n.input(0)->shape.concrete(), b = n.input(1)->shape.concrete(), o = n.outputs[0]->shape.concrete();
  GemmShape s;
  s.dtype = dt;
  s.precision = ParseMathPrecision(n.GetString("cjit_precision", "highest"));  // --matmul_precision
  const Value* bias = nullptr;
  if (n.op_type == "MatMul") {
    Dims a_batch, b_batch;
    int64_t k = a.back(), m = 1;
    if (a.size() >= 2) {
      m = a[a.size() - 2];
      a_batch.assign(a.begin(), a.end() - 2);
    }
    int64_t kb = b.size() >= 2 ? b[b.size() - 2] : b[0], n_cols = b.size() >= 2 ? b.back() : 1;
    if (b.size() >= 2) b_batch.assign(b.begin(), b.end() - 2);
    if (kb != k) return false;
    s.k = k;
    s.n = n_cols;
    if (b_batch.empty()) {
      s.m = m * NumElements(a_batch);  // A's batch folds into its rows
    } else if (a_batch.empty()) {
      s.m = m;
      s.batch = NumElements(b_batch);
      s.stride_a = 0;
      s.stride_b = k * n_cols;
    } else if (a_batch == b_batch) {
      s.m = m;
      s.batch = NumElements(a_batch);
      s.stride_a = m * k;
      s.stride_b = k * n_cols;
    } else {
      return false;  // general batch broadcasting: host
    }
  } else {
    if (a.size() != 2 || b.size() != 2) return false;
    s.trans_a = n.GetInt("transA", 0) != 0;
    s.trans_b = n.GetInt("transB", 0) != 0;
    s.alpha = n.GetFloat("alpha", 1.0f);
    s.m = s.trans_a ? a[1] : a[0];
    s.k = s.trans_a ? a[0] : a[1];
    s.n = s.trans_b ? b[0] : b[1];
    if ((s.trans_b ? b[1] : b[0]) != s.k) return false;
    if (const Value* c = n.input(2)) {
      if (!StaticOf(c, dt) || n.GetFloat("beta", 1.0f) != 1.0f) return false;
      Dims cd = c->shape.concrete();
      if (!(cd == Dims{s.n} || cd == Dims{1, s.n})) return false;
      s.bias = true;
      bias = c;
    }
  }
  if (s.m == 0 || s.n == 0 || s.k == 0 || NumElements(o) != s.batch * s.m * s.n) return false;
  const Value* output = n.outputs[0];
  if (step != nullptr) {  // epilogue: bias over the last dim, Relu
    for (const PostOp& op : step->post_ops) {
      if (op.kind == PostOp::Kind::kBiasLastDim && !s.bias && op.tensor && op.tensor->dtype == dt) {
        s.bias = true;
        bias = op.tensor;
      } else if (op.kind == PostOp::Kind::kRelu) {
        s.relu = true;
      } else {
        return false;
      }
    }
    if (step->output) output = step->output;
  }
  std::string algorithm;
  absl::StatusOr<std::unique_ptr<GemmOp>> plan = MakeTunedGemm(*device, options.autotuner, s, n.Describe(), &algorithm);
  CJIT_ASSIGN_OR_RETURN(bool accepted, LibraryAccepts(n, plan.status()));
  if (!accepted) return false;
  Step st;
  st.kind = Step::Kind::kGemm;
  st.gemm = std::move(*plan);
  placement.tuned_library_calls += !algorithm.empty();
  AddLibraryStep(std::move(st), n, {Slot(n.input(0)), Slot(n.input(1)), bias ? Slot(bias) : -1}, output);
  ++placement.gemms;
  if (step != nullptr) placement.epilogue_ops += static_cast<int>(step->absorbed.size());
  return true;
}

// ONNX Conv (1-D or 2-D, float32, static shapes) as the backend's convolution. Padding from `pads` or
// auto_pad (SAME_UPPER puts an odd extra pad at the end, SAME_LOWER at the beginning), per the ONNX spec.
absl::StatusOr<bool> GpuExecutor::Impl::TryConv(const Node& n) {
  const DType dt = LibraryType(n);
  if (n.op_type != "Conv" || n.outputs.size() != 1 || dt == DType::kInvalid || !StaticOf(n.outputs[0], dt) ||
      !StaticOf(n.input(0), dt) || !StaticOf(n.input(1), dt)) {
    return false;
  }
  Dims xd = n.input(0)->shape.concrete(), wd = n.input(1)->shape.concrete(), yd = n.outputs[0]->shape.concrete();
  int rank = static_cast<int>(xd.size());
  if ((rank != 3 && rank != 4) || wd.size() != xd.size() || yd.size() != xd.size()) return false;
  int sp = rank - 2;  // spatial dims: 1 or 2
  std::vector<int64_t> strides, dil, begin, end;
  if (!SpatialWindows(n, xd, {wd.begin() + 2, wd.end()}, yd, &strides, &dil, &begin, &end)) return false;
  ConvShape s;
  s.dtype = dt;
  s.precision = ParseMathPrecision(n.GetString("cjit_precision", "highest"));  // --conv_precision
  s.n = xd[0];
  s.c = xd[1];
  s.k = wd[0];
  s.groups = n.GetInt("group", 1);
  if (s.groups <= 0 || s.c % s.groups != 0 || s.k % s.groups != 0 || wd[1] * s.groups != s.c || yd[1] != s.k)
    return false;
  if (sp == 2) {
    s.h = xd[2], s.w = xd[3], s.r = wd[2], s.s = wd[3], s.out_h = yd[2], s.out_w = yd[3];
    s.pad_top = begin[0], s.pad_left = begin[1], s.pad_bottom = end[0], s.pad_right = end[1];
    s.stride_h = strides[0], s.stride_w = strides[1], s.dil_h = dil[0], s.dil_w = dil[1];
  } else {
    s.w = xd[2], s.s = wd[2], s.out_w = yd[2];
    s.pad_left = begin[0], s.pad_right = end[0], s.stride_w = strides[0], s.dil_w = dil[0];
  }
  const Value* bias = n.input(2);
  if (bias) {
    if (!StaticOf(bias, dt) || NumElements(bias->shape.concrete()) != s.k) return false;
    s.bias = true;
  }
  if (NumElements(xd) == 0 || NumElements(yd) == 0) return false;
  std::string algorithm;
  absl::StatusOr<std::unique_ptr<ConvOp>> op = MakeTunedConv(*device, options.autotuner, s, n.Describe(), &algorithm);
  CJIT_ASSIGN_OR_RETURN(bool accepted, LibraryAccepts(n, op.status()));
  if (!accepted) return false;
  Step st;
  st.kind = Step::Kind::kConv;
  st.conv = std::move(*op);
  placement.tuned_library_calls += !algorithm.empty();
  AddLibraryStep(std::move(st), n, {Slot(n.input(0)), Slot(n.input(1)), bias ? Slot(bias) : -1});
  ++placement.convs;
  return true;
}

// ONNX ConvTranspose (1-D or 2-D, float32, static shapes; padding from pads, auto_pad or output_shape as the
// CPU kernel reads them: ComputeWindowGeometry) as the backend's transposed convolution; asymmetric padding
// the library declines runs on the host.
absl::StatusOr<bool> GpuExecutor::Impl::TryConvTranspose(const Node& n) {
  const DType dt = LibraryType(n);
  if (n.op_type != "ConvTranspose" || !n.domain.empty() || n.outputs.size() != 1 || dt == DType::kInvalid ||
      !StaticOf(n.outputs[0], dt) || !StaticOf(n.input(0), dt) || !StaticOf(n.input(1), dt)) {
    return false;
  }
  Dims xd = n.input(0)->shape.concrete(), wd = n.input(1)->shape.concrete(), yd = n.outputs[0]->shape.concrete();
  const int rank = static_cast<int>(xd.size());
  if ((rank != 3 && rank != 4) || wd.size() != xd.size() || yd.size() != xd.size()) return false;
  const int sp = rank - 2;
  absl::StatusOr<WindowGeometry> g = ComputeWindowGeometry(n, {xd.begin() + 2, xd.end()}, {wd.begin() + 2, wd.end()},
                                                            /*transposed=*/true, false);
  if (!g.ok() || static_cast<int>(g->out.size()) != sp) return false;
  for (int i = 0; i < sp; ++i)
    if (g->out[i] != yd[2 + i]) return false;
  ConvShape s;
  s.dtype = dt;
  s.precision = ParseMathPrecision(n.GetString("cjit_precision", "highest"));
  s.n = xd[0];
  s.c = xd[1];
  s.groups = n.GetInt("group", 1);
  s.k = yd[1];
  if (s.groups <= 0 || s.c % s.groups != 0 || wd[0] != s.c || wd[1] * s.groups != s.k) return false;
  if (sp == 2) {
    s.h = xd[2], s.w = xd[3], s.r = wd[2], s.s = wd[3], s.out_h = yd[2], s.out_w = yd[3];
    s.pad_top = g->pad_begin[0], s.pad_left = g->pad_begin[1], s.pad_bottom = g->pad_end[0],
    s.pad_right = g->pad_end[1];
    s.stride_h = g->strides[0], s.stride_w = g->strides[1], s.dil_h = g->dilations[0], s.dil_w = g->dilations[1];
  } else {
    s.w = xd[2], s.s = wd[2], s.out_w = yd[2];
    s.pad_left = g->pad_begin[0], s.pad_right = g->pad_end[0], s.stride_w = g->strides[0], s.dil_w = g->dilations[0];
  }
  const Value* bias = n.input(2);
  if (bias) {
    if (!StaticOf(bias, dt) || NumElements(bias->shape.concrete()) != s.k) return false;
    s.bias = true;
  }
  if (NumElements(xd) == 0 || NumElements(yd) == 0) return false;
  absl::StatusOr<std::unique_ptr<ConvOp>> op = device->MakeConvTranspose(s);
  CJIT_ASSIGN_OR_RETURN(bool accepted, LibraryAccepts(n, op.status()));
  if (!accepted) return false;
  Step st;
  st.kind = Step::Kind::kConv;
  st.conv = std::move(*op);
  AddLibraryStep(std::move(st), n, {Slot(n.input(0)), Slot(n.input(1)), bias ? Slot(bias) : -1});
  ++placement.convs;
  return true;
}

// MaxPool / AveragePool (1-D or 2-D, float32, floor mode, no dilation, no Indices output) as the backend's
// pooling.
absl::StatusOr<bool> GpuExecutor::Impl::TryPool(const Node& n) {
  bool max = n.op_type == "MaxPool";
  const DType dt = LibraryType(n);
  if ((!max && n.op_type != "AveragePool") || dt == DType::kInvalid || !StaticOf(n.input(0), dt) ||
      !StaticOf(n.outputs[0], dt)) {
    return false;
  }
  for (size_t j = 1; j < n.outputs.size(); ++j)
    if (n.outputs[j]) return false;  // Indices
  Dims xd = n.input(0)->shape.concrete(), yd = n.outputs[0]->shape.concrete();
  int rank = static_cast<int>(xd.size());
  std::vector<int64_t> window = n.GetInts("kernel_shape");
  if ((rank != 3 && rank != 4) || yd.size() != xd.size() || static_cast<int>(window.size()) != rank - 2) return false;
  if (n.GetInt("ceil_mode", 0) != 0 || yd[0] != xd[0] || yd[1] != xd[1]) return false;
  std::vector<int64_t> strides, dil, begin, end;
  if (!SpatialWindows(n, xd, Dims(window.begin(), window.end()), yd, &strides, &dil, &begin, &end)) return false;
  for (int64_t d : dil)
    if (d != 1) return false;
  PoolShape s;
  s.dtype = dt;
  s.n = xd[0];
  s.c = xd[1];
  s.max = max;
  s.count_include_pad = n.GetInt("count_include_pad", 0) != 0;
  if (rank == 4) {
    s.h = xd[2], s.w = xd[3], s.r = window[0], s.s = window[1], s.out_h = yd[2], s.out_w = yd[3];
    s.pad_top = begin[0], s.pad_left = begin[1], s.pad_bottom = end[0], s.pad_right = end[1];
    s.stride_h = strides[0], s.stride_w = strides[1];
  } else {
    s.w = xd[2], s.s = window[0], s.out_w = yd[2], s.pad_left = begin[0], s.pad_right = end[0], s.stride_w = strides[0];
  }
  if (NumElements(xd) == 0 || NumElements(yd) == 0) return false;
  absl::StatusOr<std::unique_ptr<PoolOp>> op = device->MakePool(s);
  CJIT_ASSIGN_OR_RETURN(bool accepted, LibraryAccepts(n, op.status()));
  if (!accepted) return false;
  Step st;
  st.kind = Step::Kind::kPool;
  st.pool = std::move(*op);
  AddLibraryStep(std::move(st), n, {Slot(n.input(0))});
  ++placement.pools;
  return true;
}

// Gather (any axis) and GatherND (batch_dims 0) of data of any dtype by int32/int64 indices in device memory
// (runtime values or constants), static shapes: the backend's gather (device_backend.h GatherShape).
absl::StatusOr<bool> GpuExecutor::Impl::TryGather(const Node& n) {
  if ((n.op_type != "Gather" && n.op_type != "GatherND") || !n.domain.empty() || n.outputs.size() != 1) return false;
  const Value* data = n.input(0);
  const Value* idx = n.input(1);
  const Value* out = n.outputs[0];
  auto fixed = [](const Value* v) { return v && v->shape.fully_known() && v->dtype != DType::kInvalid; };
  if (!fixed(data) || !fixed(idx) || !fixed(out) || (idx->dtype != DType::kI64 && idx->dtype != DType::kI32) ||
      out->dtype != data->dtype || DTypeSize(data->dtype) == 0) {
    return false;
  }
  const Dims dd = data->shape.concrete(), id = idx->shape.concrete();
  const int64_t es = static_cast<int64_t>(DTypeSize(data->dtype));
  const int r = static_cast<int>(dd.size());
  auto product = [&](int from, int to) {
    int64_t p = 1;
    for (int i = from; i < to; ++i) p *= dd[i];
    return p;
  };
  GatherShape s;
  s.indices_int64 = idx->dtype == DType::kI64;
  if (n.op_type == "Gather") {
    int64_t axis = n.GetInt("axis", 0);
    if (axis < 0) axis += r;
    if (axis < 0 || axis >= r) return false;
    const int a = static_cast<int>(axis);
    s.k = 1;
    s.n_outer = product(0, a);
    s.n_rows = NumElements(id);
    s.row_bytes = product(a + 1, r) * es;
    s.dims = {dd[a]};
    s.strides_bytes = {s.row_bytes};
    s.outer_stride_bytes = dd[a] * s.row_bytes;
  } else {
    if (n.GetInt("batch_dims", 0) != 0 || id.empty()) return false;
    const int64_t k = id.back();
    if (k < 1 || k > r) return false;
    s.k = k;
    s.n_rows = NumElements(id) / k;
    s.row_bytes = product(static_cast<int>(k), r) * es;
    for (int j = 0; j < k; ++j) {
      s.dims.push_back(dd[j]);
      s.strides_bytes.push_back(product(j + 1, r) * es);
    }
  }
  if (NumElements(out->shape.concrete()) * es != s.n_outer * s.n_rows * s.row_bytes) return false;
  absl::StatusOr<std::unique_ptr<GatherOp>> op = device->MakeGather(s);
  CJIT_ASSIGN_OR_RETURN(bool accepted, LibraryAccepts(n, op.status()));
  if (!accepted) return false;
  Step st;
  st.kind = Step::Kind::kGather;
  st.gather = std::move(*op);
  AddLibraryStep(std::move(st), n, {Slot(data), Slot(idx)});
  gathers.push_back(n.name);
  ++placement.gathers;
  return true;
}

// Concat (any dtype, static shapes) as pitched copies.
bool GpuExecutor::Impl::TryConcat(const Node& n) {
  return n.op_type == "Concat" && n.outputs.size() == 1 &&
         TryPitchedCopies(n, n.outputs[0], n.inputs, Step::Kind::kConcat);
}

// Split (any dtype, static shapes; https://onnx.ai/onnx/operators/onnx__Split.html) as pitched copies, the
// inverse of Concat's. The parts' sizes come from the inferred output shapes, so the `split` attribute
// (opset < 13), the `split` input (13+) and `num_outputs` (18+) are all covered.
bool GpuExecutor::Impl::TrySplit(const Node& n) {
  return n.op_type == "Split" && TryPitchedCopies(n, n.input(0), n.outputs, Step::Kind::kSplit);
}

// Constant-mode Pad of 4-byte elements with non-negative pads on the last two dims only, as a fill and one
// padded copy (https://onnx.ai/onnx/operators/onnx__Pad.html; pads from the attribute or a constant input,
// axes from a constant input, the value from the attribute or a constant input).
bool GpuExecutor::Impl::TryPad(const Node& n) {
  if (n.op_type != "Pad" || n.GetString("mode", "constant") != "constant" || n.outputs.size() != 1 || !n.outputs[0]) {
    return false;
  }
  const Value* x = n.input(0);
  const Value* y = n.outputs[0];
  if (!x || !x->shape.fully_known() || !y->shape.fully_known() || x->dtype != y->dtype) return false;
  if (x->dtype != DType::kF32 && x->dtype != DType::kI32) return false;
  int r = x->shape.rank();
  if (r < 1) return false;
  std::vector<int64_t> pads;
  if (n.HasAttr("pads")) {
    pads = n.GetInts("pads");
  } else if (n.input(1) && n.input(1)->is_constant()) {
    pads = n.input(1)->constant->ToInt64Vector();
  } else {
    return false;
  }
  std::vector<int64_t> axes;
  if (n.input(3)) {
    if (!n.input(3)->is_constant()) return false;
    for (int64_t a : n.input(3)->constant->ToInt64Vector()) axes.push_back(a < 0 ? a + r : a);
  } else {
    for (int i = 0; i < r; ++i) axes.push_back(i);
  }
  if (pads.size() != 2 * axes.size()) return false;
  std::vector<int64_t> begin(r, 0), end(r, 0);
  for (size_t k = 0; k < axes.size(); ++k) {
    if (axes[k] < 0 || axes[k] >= r || pads[k] < 0 || pads[axes.size() + k] < 0) return false;
    begin[axes[k]] = pads[k];
    end[axes[k]] = pads[axes.size() + k];
  }
  for (int d = 0; d + 2 < r; ++d)
    if (begin[d] != 0 || end[d] != 0) return false;
  uint32_t fill = 0;
  float fvalue = n.GetFloat("value", 0.0f);
  int32_t ivalue = static_cast<int32_t>(fvalue);
  if (n.input(2)) {
    if (!n.input(2)->is_constant() || n.input(2)->dtype != x->dtype || n.input(2)->constant->numel() > 1) return false;
    if (n.input(2)->constant->numel() == 1) {
      if (x->dtype == DType::kF32) fvalue = *n.input(2)->constant->data<float>();
      else ivalue = *n.input(2)->constant->data<int32_t>();
    }
  }
  if (x->dtype == DType::kF32) std::memcpy(&fill, &fvalue, 4);
  else std::memcpy(&fill, &ivalue, 4);
  Dims xd = x->shape.concrete();
  Step st;
  st.kind = Step::Kind::kPad;
  st.node = &n;
  st.pad_w = static_cast<size_t>(xd[r - 1]);
  st.pad_h = r >= 2 ? static_cast<size_t>(xd[r - 2]) : 1;
  st.pad_planes = 1;
  for (int d = 0; d + 2 < r; ++d) st.pad_planes *= static_cast<size_t>(xd[d]);
  st.pad_left = static_cast<size_t>(begin[r - 1]);
  st.pad_top = r >= 2 ? static_cast<size_t>(begin[r - 2]) : 0;
  st.pad_out_w = st.pad_w + st.pad_left + static_cast<size_t>(end[r - 1]);
  st.pad_out_h = st.pad_h + st.pad_top + (r >= 2 ? static_cast<size_t>(end[r - 2]) : 0);
  if (NumElements(y->shape.concrete()) != static_cast<int64_t>(st.pad_planes * st.pad_out_h * st.pad_out_w))
    return false;
  st.pad_fill = fill;
  st.in = {Slot(x)};
  st.out = {Slot(y)};
  steps.push_back(std::move(st));
  ++placement.copies;
  return true;
}

// Host steps whose inputs are all graph inputs, constants or results of earlier such steps (and reshapes of
// those results) need nothing the device computes, so they may run before every device step: each slot is
// written once, so no device step writes what they read. Hoisted, they no longer split the device steps,
// which can then be one CUDA graph. Example (a BERT export): Cast(attention_mask) -> GatherND -> And ->
// Where(mask, 0, -inf) and Gather(word_embeddings, input_ids) become the prologue; every matrix product,
// softmax and normalization after them is one graph.
void GpuExecutor::Impl::HoistHostPrologue() {
  std::vector<bool> available(slots.size(), false), from_prologue(slots.size(), false);
  for (int s : input_slots) available[s] = true;
  for (size_t s = 0; s < slots.size(); ++s) available[s] = available[s] || slots[s].constant != nullptr;
  std::vector<Step> prologue, rest;
  for (Step& st : steps) {
    bool hoist = st.kind == Step::Kind::kHost ||
                 (st.kind == Step::Kind::kAlias && st.in[0] >= 0 && from_prologue[st.in[0]]);
    for (int s : st.in) hoist = hoist && (s < 0 || available[s]);
    for (int s : st.implicit) hoist = hoist && available[s];
    if (!hoist) {
      rest.push_back(std::move(st));
      continue;
    }
    for (int s : st.out) {
      if (s >= 0) available[s] = from_prologue[s] = true;
    }
    if (st.kind == Step::Kind::kHost) ++placement.prologue_ops;
    prologue.push_back(std::move(st));
  }
  prologue_steps = prologue.size();
  std::vector<bool> boundary(slots.size(), false);
  for (const Step& st : rest) {
    for (int s : st.in)
      if (s >= 0 && from_prologue[s]) boundary[s] = true;
    for (int s : st.implicit)
      if (from_prologue[s]) boundary[s] = true;
  }
  for (int s : output_slots)
    if (from_prologue[s]) boundary[s] = true;
  boundary_slots.clear();
  for (size_t s = 0; s < slots.size(); ++s)
    if (boundary[s]) boundary_slots.push_back(static_cast<int>(s));
  steps = std::move(prologue);
  for (Step& st : rest) steps.push_back(std::move(st));
}

void GpuExecutor::Impl::AddAlias(int from, int to) {
  Step st;
  st.kind = Step::Kind::kAlias;
  st.in = {from};
  st.out = {to};
  steps.push_back(std::move(st));
  ++placement.aliases;
}

absl::Status GpuExecutor::Impl::AddHost(const Node& n, const std::vector<PostOp>* post_ops, const Value* output) {
  Step st;
  st.kind = Step::Kind::kHost;
  st.node = &n;
  st.kernel = FindKernel(n.op_type);
  if (st.kernel == nullptr)
    return absl::UnimplementedError(absl::StrCat(n.Describe(), ": no kernel for this operator"));
  if (post_ops) st.post_ops = *post_ops;
  for (const Value* v : n.inputs) {
    st.in.push_back(v ? Slot(v) : -1);
    st.in_const.push_back(v && v->is_constant());
  }
  for (const Value* v : n.implicit_inputs) st.implicit.push_back(Slot(v));
  st.static_shapes = true;
  for (size_t j = 0; j < n.outputs.size(); ++j) {
    const Value* v = (j == 0 && output) ? output : n.outputs[j];
    st.out.push_back(v ? Slot(v) : -1);
    if (v && (!v->shape.fully_known() || v->dtype == DType::kInvalid)) st.static_shapes = false;
    st.inferred.push_back(v ? InferOutput{v->dtype, v->shape} : InferOutput{});
  }
  if (CJIT_VLOG_IS_ON(2)) {
    std::string ins;
    for (const Value* v : n.inputs)
      if (v)
        absl::StrAppend(&ins, ins.empty() ? "" : ", ", DTypeName(v->dtype), v->shape.ToString(),
                        v->is_constant() ? " const" : "");
    CJIT_VLOG(2) << "GPU placement: " << n.Describe() << " runs on the host (inputs " << ins << ")";
  }
  steps.push_back(std::move(st));
  ++placement.host_ops;
  ++placement.host_op_types[n.op_type];
  return absl::OkStatus();
}

absl::Status GpuExecutor::Impl::PlaceNode(const Node& n, const PlanStep* step) {
  if (n.op_type == kClusterOp) return PlaceCluster(n);
  // Sequences, optionals and strings live on the host: so do the ops that read or make them.
  for (const std::vector<Value*>* vs : {&n.inputs, &n.outputs}) {
    for (const Value* v : *vs) {
      if (v != nullptr && (v->kind != ValueKind::kTensor || v->dtype == DType::kString))
        return AddHost(n, nullptr, nullptr);
    }
  }
  if (step != nullptr && !step->post_ops.empty()) {
    // A GEMM with its epilogue (the only post-ops of GPU plans); if the library declines, the product and
    // the absorbed ops are placed one by one.
    CJIT_ASSIGN_OR_RETURN(bool gemm, TryGemm(n, step));
    if (gemm) return absl::OkStatus();
    CJIT_RETURN_IF_ERROR(PlaceNode(n));
    for (const Node* a : step->absorbed) CJIT_RETURN_IF_ERROR(PlaceNode(*a));
    return absl::OkStatus();
  }
  CJIT_ASSIGN_OR_RETURN(bool gemm, TryGemm(n, nullptr));
  if (gemm) return absl::OkStatus();
  CJIT_ASSIGN_OR_RETURN(bool conv, TryConv(n));
  if (conv) return absl::OkStatus();
  CJIT_ASSIGN_OR_RETURN(bool deconv, TryConvTranspose(n));
  if (deconv) return absl::OkStatus();
  CJIT_ASSIGN_OR_RETURN(bool pool, TryPool(n));
  if (pool) return absl::OkStatus();
  CJIT_ASSIGN_OR_RETURN(bool kernel, TrySingleOpKernel(n));
  if (kernel) return absl::OkStatus();
  CJIT_ASSIGN_OR_RETURN(bool gather, TryGather(n));
  if (gather) return absl::OkStatus();
  if (TryConcat(n)) return absl::OkStatus();
  if (TrySplit(n)) return absl::OkStatus();
  if (TryPad(n)) return absl::OkStatus();
  return AddHost(n, nullptr, nullptr);
}

absl::StatusOr<std::unique_ptr<GpuExecutor>> GpuExecutor::Create(std::shared_ptr<const Graph> graph,
                                                                 std::shared_ptr<DeviceBackend> backend,
                                                                 const GpuExecutorOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->graph = graph;
  impl->options = options;
  impl->options.host_threads = std::max(1, options.host_threads);
  impl->device = std::move(backend);
  CJIT_RETURN_IF_ERROR(impl->device->MakeCurrent());
  impl->placement.device = impl->device->Describe();
  impl->placement.target = impl->device->target();
  Impl* self = impl.get();
  impl->runner = [self](const Graph& g, const std::vector<Tensor>& in,
                        const std::vector<std::pair<std::string, Tensor>>& caps) {
    return self->RunSubgraph(g, in, caps);
  };
  for (const Value* v : graph->inputs()) impl->input_slots.push_back(impl->Slot(v));
  CJIT_ASSIGN_OR_RETURN(std::vector<Node*> order, graph->TopologicalOrder());
  for (const Node* n : order) CJIT_RETURN_IF_ERROR(impl->PlaceNode(*n));
  for (const Value* v : graph->outputs()) impl->output_slots.push_back(impl->Slot(v));
  impl->HoistHostPrologue();
  // Constants read on the device are uploaded once.
  for (const Impl::Step& st : impl->steps) {
    if (st.kind == Impl::Step::Kind::kHost) continue;
    for (int s : st.in) {
      if (s < 0) continue;
      Impl::SlotInfo& info = impl->slots[s];
      if (info.constant && !info.constant_on_device) {
        CJIT_ASSIGN_OR_RETURN(info.constant_on_device, impl->Upload(info.constant->raw(), info.constant->nbytes()));
      }
    }
  }
  // Each value is freed after its last reader (graph outputs and constants are kept).
  std::vector<int> last(impl->slots.size(), -1);
  for (size_t i = 0; i < impl->steps.size(); ++i) {
    for (int s : impl->steps[i].in)
      if (s >= 0) last[s] = static_cast<int>(i);
    for (int s : impl->steps[i].implicit) last[s] = static_cast<int>(i);
  }
  std::vector<bool> keep(impl->slots.size(), false);
  for (int s : impl->output_slots) keep[s] = true;
  for (size_t s = 0; s < impl->slots.size(); ++s) {
    if (impl->slots[s].constant) keep[s] = true;
    if (!keep[s] && last[s] >= 0) impl->steps[last[s]].free_after.push_back(static_cast<int>(s));
  }
  if (impl->options.graph_level <= 0) impl->graph_ineligible = "--gpu_graph_level=0";
  for (size_t i = impl->prologue_steps; i < impl->steps.size(); ++i) {
    const Impl::Step& st = impl->steps[i];
    if (impl->graph_ineligible.empty() && st.kind == Impl::Step::Kind::kHost) {
      impl->graph_ineligible = absl::StrCat("the host runs ", st.node->op_type, " '", st.node->name, "'");
    }
  }
  for (const Impl::SlotInfo& info : impl->slots) {
    if (impl->graph_ineligible.empty() && !info.static_dims) {
      impl->graph_ineligible = absl::StrCat("value '", info.value->name, "' has no static shape");
    }
  }
  CJIT_RETURN_IF_ERROR(impl->device->Synchronize());  // uploads done
  CJIT_VLOG(1) << "GPU placement: " << impl->placement.ToString();
  return std::unique_ptr<GpuExecutor>(new GpuExecutor(std::move(impl)));
}

}  // namespace cjit
