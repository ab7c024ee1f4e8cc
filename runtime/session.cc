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

Session::~Session() {
  // No background compile may run past this point (it would use this session's executors).
  if (clusters_) clusters_->Shutdown();
  if (profiler_ && !profiler_->path().empty() && !profiler_->written()) {
    absl::StatusOr<std::string> path = profiler_->Write();
    if (!path.ok()) CJIT_LOG(WARNING) << path.status().message();
  }
  // Events may refer to this session's graphs: format them before the graphs go.
  if (profiler_) profiler_->Materialize();
}

absl::StatusOr<std::string> Session::EndProfiling() {
  if (!profiler_ || profiler_->path().empty()) {
    return absl::FailedPreconditionError("EndProfiling: this session has no trace file (set --trace_to)");
  }
  return profiler_->Write();
}

std::string Session::ProfileSummary(int64_t since_ns) const {
  return profiler_ ? profiler_->SummaryTable(since_ns) : std::string();
}

namespace {

// The op-list flags name ONNX operators (flags/ checks their syntax only: it does not depend on the op
// table).
absl::Status ValidateOpListFlags(const Flags& f) {
  for (const auto& [name, value] : OpListFlagValues(f)) {
    for (absl::string_view op : absl::StrSplit(value, ',', absl::SkipEmpty())) {
      int first = 0;
      FindOpSchema(std::string(op), 1000, &first);
      if (first == 0) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, "=", value, ": '", op, "' is not an ONNX operator"));
      }
    }
  }
  return absl::OkStatus();
}

// --disable_passes and --dump_after name pipeline passes (compiler/passes/pipeline.h).
absl::Status ValidatePassListFlags(const Flags& f) {
  auto names = [](const std::string& list) {
    std::vector<std::string> out;
    for (absl::string_view n : absl::StrSplit(list, ',', absl::SkipWhitespace())) out.emplace_back(n);
    return out;
  };
  CJIT_RETURN_IF_ERROR(CheckPassNames(names(f.disable_passes), "--disable_passes"));
  CJIT_RETURN_IF_ERROR(CheckPassNames(names(f.dump_after), "--dump_after"));
  if (!f.dump_after.empty() && f.dump_to.empty()) {
    return absl::InvalidArgumentError("--dump_after needs --dump_to=DIR (where the IR after each pass goes)");
  }
  return absl::OkStatus();
}

// The session's flags: CJIT_FLAGS, or the options' own (validated), checked before the model is read.
absl::StatusOr<Flags> ResolveFlags(const SessionOptions& options) {
  Flags f;
  if (options.use_environment_flags) {
    CJIT_ASSIGN_OR_RETURN(f, FlagsFromEnvironment());
  } else {
    CJIT_RETURN_IF_ERROR(ValidateFlags(options.flags, "SessionOptions"));
    CJIT_ASSIGN_OR_RETURN(f, ParseFlags("", options.flags, "SessionOptions"));
  }
  CJIT_RETURN_IF_ERROR(ValidateOpListFlags(f));
  CJIT_RETURN_IF_ERROR(ValidatePassListFlags(f));
  return f;
}

// --auto_quantize and its lists as the pass's options (the base op list is AutoQuantizeOptions').
absl::StatusOr<AutoQuantizeOptions> AutoQuantizeOptionsFromFlags(const Flags& f) {
  AutoQuantizeOptions o;
  o.mode = f.auto_quantize == "weight_only" ? AutoQuantizeOptions::Mode::kWeightOnly
                                            : AutoQuantizeOptions::Mode::kDynamic;
  for (absl::string_view op : absl::StrSplit(f.auto_quantize_allowlist_add, ',', absl::SkipEmpty())) {
    if (op != "MatMul" && op != "Gemm" && op != "Conv") {
      return absl::InvalidArgumentError(absl::StrCat("--auto_quantize_allowlist_add: ", op,
                                                     " cannot be quantized (MatMul, Gemm and Conv can)"));
    }
    o.op_types.insert(std::string(op));
  }
  for (absl::string_view op : absl::StrSplit(f.auto_quantize_allowlist_remove, ',', absl::SkipEmpty())) {
    o.op_types.erase(std::string(op));
  }
  for (absl::string_view n : absl::StrSplit(f.auto_quantize_denylist_nodes, ',', absl::SkipEmpty())) {
    o.denied_nodes.insert(std::string(n));
  }
  o.min_weights = f.auto_quantize_min_weights;
  o.weight_bits = static_cast<int>(f.auto_quantize_weight_bits);
  o.block_size = f.auto_quantize_block_size;
  return o;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Session>> Session::Load(const std::string& path, const SessionOptions& options) {
  return CatchAsStatus(absl::StrCat("loading ", path), [&]() -> absl::StatusOr<std::unique_ptr<Session>> {
    CJIT_ASSIGN_OR_RETURN(Flags flags, ResolveFlags(options));
    ScopedMaxTensorBytes limit(static_cast<uint64_t>(flags.max_tensor_bytes));
    CJIT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, ImportOnnxFile(path));
    return FromGraph(std::move(graph), options);
  });
}

absl::StatusOr<std::unique_ptr<Session>> Session::LoadFromBytes(absl::string_view bytes, const SessionOptions& options,
                                                                const std::string& model_dir) {
  return CatchAsStatus("loading a model", [&]() -> absl::StatusOr<std::unique_ptr<Session>> {
    CJIT_ASSIGN_OR_RETURN(Flags flags, ResolveFlags(options));
    ScopedMaxTensorBytes limit(static_cast<uint64_t>(flags.max_tensor_bytes));
    ImportOptions io;
    io.model_dir = model_dir;
    CJIT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, ImportOnnxModel(bytes, io));
    return FromGraph(std::move(graph), options);
  });
}

namespace {

CudaBackendOptions CudaOptionsFor(const Flags& flags, int ordinal) {
  CudaBackendOptions bo;
  bo.ordinal = ordinal;
  bo.allocator = flags.gpu_allocator;
  bo.gpu_arch = flags.gpu_arch;
  bo.cuda_data_dir = flags.cuda_data_dir;
  bo.persistent_cache_dir = flags.persistent_cache_dir;
  bo.persistent_cache_read_only = flags.persistent_cache_read_only;
  bo.persistent_cache_max_bytes = flags.persistent_cache_max_bytes;
  if (!flags.remote_cache.empty() && !flags.persistent_cache_dir.empty()) {
    // The process's one instance for these flags (ClusterRuntime::Create opens the same and reports errors).
    if (auto remote = RemoteCache::Shared(RemoteCacheOptionsFromFlags(flags)); remote.ok()) bo.remote_cache = *remote;
  }
  return bo;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Session>> Session::FromGraph(std::unique_ptr<Graph> graph,
                                                            const SessionOptions& options) {
  std::unique_ptr<Session> s(new Session());
  CJIT_ASSIGN_OR_RETURN(s->flags_, ResolveFlags(options));
  SetLogLevels(s->flags_.v, s->flags_.vmodule, s->flags_.stderrthreshold);
  if (s->flags_.intra_op_threads > UsableCpus()) {
    // More compute threads than CPUs only wait for each other: OpenMP teams of 4 on 2 CPUs made
    // ppocr_mobile_cls 4x slower (each parallel region waits for a descheduled thread).
    static std::once_flag warned;
    std::call_once(warned, [&] {
      CJIT_LOG(WARNING) << "--intra_op_threads=" << s->flags_.intra_op_threads << " exceeds the " << UsableCpus()
                        << " CPUs this process may run on; using " << UsableCpus();
    });
    s->flags_.intra_op_threads = UsableCpus();
  }
  if (s->flags_.max_cpu_isa != "all") {
    CJIT_ASSIGN_OR_RETURN(CpuIsa isa, ParseCpuIsa(s->flags_.max_cpu_isa));
    if (isa != MaxCpuIsa()) {
      SetMaxCpuIsa(isa);
      CapLibraryCpuIsa(isa);
      CJIT_VLOG(1) << "--max_cpu_isa=" << s->flags_.max_cpu_isa << " (this CPU: " << CpuIsaName(HardwareCpuIsa())
                   << ")";
    }
  }
  if (options.device_backend) {
    s->gpu_ = options.device_backend;
    s->gpu_ordinal_ = 0;
  } else if (absl::StartsWith(s->flags_.device, "cuda")) {
    // The backend names what is missing: the driver, the device ordinal, or (a build without the CUDA
    // toolkit) the GPU runtime itself.
    int ordinal = s->flags_.device.size() > 5 ? std::stoi(s->flags_.device.substr(5)) : 0;
    absl::StatusOr<std::shared_ptr<DeviceBackend>> backend = MakeCudaBackend(CudaOptionsFor(s->flags_, ordinal));
    if (!backend.ok()) {
      return absl::Status(backend.status().code(),
                          absl::StrCat("--device=", s->flags_.device, ": ", backend.status().message()));
    }
    s->gpu_ = *backend;
    s->gpu_ordinal_ = ordinal;
  } else if (s->flags_.device == "auto") {
    absl::StatusOr<std::shared_ptr<DeviceBackend>> backend = MakeCudaBackend(CudaOptionsFor(s->flags_, 0));
    if (backend.ok()) {
      s->gpu_ = *backend;
      s->gpu_ordinal_ = 0;
    } else {
      CJIT_VLOG(1) << "--device=auto: no usable GPU (" << backend.status() << "); running on the CPU";
    }
  }
  CJIT_VLOG(1) << "session device: " << s->device();
  s->enable_clustering_ = options.enable_clustering;
  s->amp_rule_ = options.amp_rule;
  if (!s->flags_.trace_to.empty() || s->flags_.enable_nvtx_ranges || options.profile) {
    ProfilerOptions po;
    po.path = s->flags_.trace_to;
    po.record = !s->flags_.trace_to.empty() || options.profile;
    po.max_events = s->flags_.trace_max_events;
    po.nvtx = s->flags_.enable_nvtx_ranges;
    po.nvtx_detailed = s->flags_.nvtx_detailed;
    if (po.nvtx && !NvtxAvailable()) {
      CJIT_LOG(WARNING) << "--enable_nvtx_ranges: this build has no NVTX headers (built without the CUDA toolkit); "
                           "no ranges are emitted";
    }
    s->profiler_ = Profiler::Create(po);
  }
  if (!s->flags_.dump_to.empty()) {
    CJIT_ASSIGN_OR_RETURN(s->dumper_, Dumper::Create(s->flags_.dump_to, s->flags_.dump_pass_re));
  }
  CJIT_ASSIGN_OR_RETURN(s->clusters_, ClusterRuntime::Create(s->flags_, s->profiler_, s->dumper_));
  CJIT_RETURN_IF_ERROR(VerifyGraph(*graph));
  {
    TraceScope scope(s->profiler_.get(), "simplify_before_specialization", "load");
    CJIT_RETURN_IF_ERROR(SimplifyBeforeSpecialization(*graph));
  }
  if (s->gpu_ == nullptr && s->flags_.cpu_fuse_qdq) {
    // Before specialization: its constant folding would turn DequantizeLinear(weights) into float weights.
    TraceScope scope(s->profiler_.get(), "fuse_qdq", "load");
    CJIT_ASSIGN_OR_RETURN(int fused, FuseQdqIntoIntegerOps(*graph));
    if (fused > 0) CJIT_RETURN_IF_ERROR(VerifyGraph(*graph));
  }
  if (s->flags_.auto_quantize != "off") {
    if (s->gpu_ != nullptr) {
      CJIT_LOG(WARNING) << "--auto_quantize=" << s->flags_.auto_quantize
                        << " quantizes for the CPU kernels; this GPU session runs the float model";
    } else {
      TraceScope scope(s->profiler_.get(), "auto_quantize", "load");
      CJIT_ASSIGN_OR_RETURN(AutoQuantizeOptions qo, AutoQuantizeOptionsFromFlags(s->flags_));
      qo.rule = options.auto_quantize_rule;
      CJIT_ASSIGN_OR_RETURN(std::vector<std::string> quantized, AutoQuantize(*graph, qo));
      if (!quantized.empty()) CJIT_RETURN_IF_ERROR(VerifyGraph(*graph));
    }
  }
  if (graph->metadata) s->metadata_ = graph->metadata;
  for (const Value* v : graph->inputs()) s->inputs_.push_back({v->name, v->dtype, v->shape, v->kind});
  for (const Value* v : graph->outputs()) s->outputs_.push_back({v->name, v->dtype, v->shape, v->kind});
  s->value_shapes_graph_ = InputValuesShapeTheGraph(*graph);
  {
    // The loaded weights (shared by every signature's clone, alive as long as the session): the cluster
    // keys' constants of the model, as opposed to those folded per signature (cache/cache_key.h).
    auto weights = std::make_shared<ConstantObjects>();
    std::function<void(const Graph&)> collect = [&](const Graph& g) {
      for (const auto& v : g.values()) {
        if (v->is_constant()) weights->insert(v->constant.get());
      }
      for (const auto& n : g.nodes()) {
        for (const auto& [name, a] : n->attrs) {
          if (a.g) collect(*a.g);
          for (const auto& sub : a.graphs) {
            if (sub) collect(*sub);
          }
        }
      }
    };
    collect(*graph);
    s->clusters_->SetLoadedConstants(std::move(weights));
  }
  s->graph_ = std::move(graph);
  return s;
}

ClusteringOptions ClusteringOptionsFor(const Flags& flags, bool session_default) {
  ClusteringOptions o;
  if (flags.auto_jit == "-1" || (flags.auto_jit == "0" && !session_default)) o.mode = ClusteringMode::kOff;
  else if (flags.auto_jit == "fusible") o.mode = ClusteringMode::kFusible;
  else o.mode = ClusteringMode::kAll;
  o.min_cluster_size = flags.min_cluster_size;
  o.max_cluster_size = flags.max_cluster_size;
  o.fuel = flags.clustering_fuel;
  return o;
}

SessionStats Session::stats() const {
  SessionStats out;
  out.compiles_in_flight = clusters_->compiles_in_flight();
  {
    MutexLock lock(&mu_);
    out.signatures = static_cast<int>(plans_.size());
    out.signature_evictions = plan_evictions_;
    out.specializations = specializations_;
    out.specialization_replays = specialization_replays_;
    out.dynamic_shape_runs = dynamic_shape_runs_;
    out.dynamic_shape_misses = dynamic_shape_misses_;
  }
  if (TieredCache* cache = clusters_->persistent()) {
    out.totals.disk_rejects += cache->disk()->stats().rejects;
    if (const RemoteCache* remote = cache->remote()) {
      out.remote_enabled = true;
      out.remote = remote->stats();
    }
  }
  if (const Autotuner* t = clusters_->autotuner()) {
    const AutotuneCounters& c = t->counters();
    out.autotune.ops_tuned = c.ops_tuned;
    out.autotune.candidates_timed = c.candidates_timed;
    out.autotune.candidates_rejected = c.candidates_rejected;
    out.autotune.tuning_ms = c.tuning_us / 1e3;
    out.autotune.memory_hits = c.memory_hits;
    out.autotune.disk_hits = c.disk_hits;
    out.autotune.file_hits = c.file_hits;
    out.autotune.ignored_entries = c.ignored_entries;
    out.autotune.lease_waits = c.lease_waits;
  }
  {
    const ClusterRuntime::Totals r = clusters_->RetiredTotals();  // runners of evicted signatures
    out.totals.compiles += r.compiles;
    out.totals.compile_ms += r.compile_us / 1e3;
    out.totals.fallback_executions += r.fallback_executions;
    out.totals.compiled_executions += r.compiled_executions;
    out.totals.memory_hits += r.memory_hits;
    out.totals.disk_hits += r.disk_hits;
    out.totals.disk_writes += r.disk_writes;
    out.totals.disk_rejects += r.disk_rejects;
    out.totals.polymorphic_hits += r.polymorphic_hits;
  }
  for (const auto& s : clusters_->AllStats()) {
    ClusterStatsSnapshot c;
    c.id = s->id;
    c.ops = s->ops;
    c.signature = s->signature;
    c.compiles = s->compiles;
    c.compile_ms = s->compile_us / 1e3;
    c.fallback_executions = s->fallback_executions;
    c.compiled_executions = s->compiled_executions;
    c.memory_hits = s->memory_hits;
    c.disk_hits = s->disk_hits;
    c.disk_writes = s->disk_writes;
    c.disk_rejects = s->disk_rejects;
    c.polymorphic_hits = s->polymorphic_hits;
    c.code_bytes = s->code_bytes;
    c.fused_kernels = s->fused_kernels;
    out.totals.compiles += c.compiles;
    out.totals.compile_ms += c.compile_ms;
    out.totals.fallback_executions += c.fallback_executions;
    out.totals.compiled_executions += c.compiled_executions;
    out.totals.memory_hits += c.memory_hits;
    out.totals.disk_hits += c.disk_hits;
    out.totals.disk_writes += c.disk_writes;
    out.totals.disk_rejects += c.disk_rejects;
    out.totals.polymorphic_hits += c.polymorphic_hits;
    out.totals.code_bytes += c.code_bytes;
    out.totals.fused_kernels += c.fused_kernels;
    out.totals.ops += c.ops;
    out.clusters.push_back(std::move(c));
  }
  return out;
}

std::vector<AutotuneRecord> Session::AutotuneRecords() const {
  if (!clusters_ || clusters_->autotuner() == nullptr) return {};
  return clusters_->autotuner()->records();
}

int Session::num_signatures() const {
  MutexLock lock(&mu_);
  return static_cast<int>(plans_.size());
}

int64_t Session::signature_evictions() const {
  MutexLock lock(&mu_);
  return plan_evictions_;
}

namespace {

// `t` (a tensor, a sequence or an optional) against the model's declared input `info`: kind, element dtype,
// rank and known dims of every tensor it holds. Errors name the input.
absl::Status CheckValueType(const std::string& name, const TensorInfo& info, const Tensor& t) {
  const bool optional_ok =
      IsOptionalKind(info.kind) && !IsOptionalKind(t.kind()) && t.kind() == ElementKindOf(info.kind);
  if (t.kind() != info.kind && !optional_ok) {
    return absl::InvalidArgumentError(absl::StrCat("input '", name, "' is a ", ValueKindName(t.kind()),
                                                   ", the model expects a ", ValueKindName(info.kind)));
  }
  if (info.dtype != DType::kInvalid && t.dtype() != info.dtype) {
    return absl::InvalidArgumentError(absl::StrCat("input '", name, "' has dtype ", DTypeName(t.dtype()),
                                                   ", the model expects ", DTypeName(info.dtype)));
  }
  if (!t.is_tensor()) {  // each element (a tensor, or an optional's sequence) against the declared element type
    for (size_t k = 0; k < t.items().size(); ++k) {
      const Tensor& e = t.items()[k];
      CJIT_RETURN_IF_ERROR(
          CheckValueType(absl::StrCat(name, "[", k, "]"), {name, info.dtype, info.shape, e.kind()}, e));
    }
    return absl::OkStatus();
  }
  if (info.shape.rank_known) {
    if (t.rank() != info.shape.rank()) {
      return absl::InvalidArgumentError(absl::StrCat("input '", name, "' has rank ", t.rank(), " (dims ",
                                                     DimsToString(t.dims()), "), the model expects rank ",
                                                     info.shape.rank(), " ", info.shape.ToString()));
    }
    for (int d = 0; d < t.rank(); ++d) {
      if (info.shape.dims[d].known() && info.shape.dims[d].value != t.dim(d)) {
        return absl::InvalidArgumentError(absl::StrCat("input '", name, "' has dims ", DimsToString(t.dims()),
                                                       ", the model expects ", info.shape.ToString(), " (dim ", d,
                                                       " must be ", info.shape.dims[d].value, ")"));
      }
    }
  }
  if (!t.defined() && t.numel() != 0) return absl::InvalidArgumentError(absl::StrCat("input '", name, "' has no data"));
  return absl::OkStatus();
}

bool HasNonCanonicalBoolsIn(const Tensor& t) {
  if (t.is_tensor()) return HasNonCanonicalBools(t);
  for (const Tensor& e : t.items()) {
    if (HasNonCanonicalBoolsIn(e)) return true;
  }
  return false;
}

// A copy of `t` with every bool byte 0 or 1 (in the tensors a sequence or optional holds too).
Tensor CanonicalBoolsCopy(const Tensor& t) {
  if (t.is_tensor()) {
    Tensor c = t.Clone();
    CanonicalizeBools(c);
    return c;
  }
  std::vector<Tensor> items;
  for (const Tensor& e : t.items()) items.push_back(CanonicalBoolsCopy(e));
  if (t.kind() == ValueKind::kSequence) return Tensor::Sequence(t.dtype(), std::move(items));
  return items.empty() ? t : Tensor::Optional(std::move(items[0]));
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> Session::ValidateInputs(const std::vector<NamedTensor>& inputs) const {
  std::vector<Tensor> ordered(inputs_.size());
  std::vector<bool> seen(inputs_.size(), false);
  for (const NamedTensor& nt : inputs) {
    int idx = -1;
    for (size_t i = 0; i < inputs_.size(); ++i) if (inputs_[i].name == nt.name) idx = static_cast<int>(i);
    if (idx < 0) {
      std::string names;
      for (const TensorInfo& i : inputs_) absl::StrAppend(&names, names.empty() ? "" : ", ", i.name);
      return absl::InvalidArgumentError(
          absl::StrCat("unknown input name '", nt.name, "'; the model's inputs are: ", names));
    }
    if (seen[idx]) return absl::InvalidArgumentError(absl::StrCat("input '", nt.name, "' is given twice"));
    seen[idx] = true;
    const TensorInfo& info = inputs_[idx];
    const Tensor& t = nt.tensor;
    CJIT_RETURN_IF_ERROR(CheckValueType(nt.name, info, t));
    ordered[idx] = t;
    // An optional input given its element: the present optional.
    if (IsOptionalKind(info.kind) && !IsOptionalKind(t.kind())) ordered[idx] = Tensor::Optional(t);
    if (t.kind() == ValueKind::kTensor && (t.dtype() == DType::kI4 || t.dtype() == DType::kU4)) {
      // One element per byte in memory (compiler/ir/dtype.h): a byte outside the 4-bit range is no value.
      double lo, hi;
      IntegerRange(t.dtype(), &lo, &hi);
      const bool s = t.dtype() == DType::kI4;
      for (int64_t e = 0; e < t.numel(); ++e) {
        const int v = s ? static_cast<const int8_t*>(t.raw())[e] : static_cast<const uint8_t*>(t.raw())[e];
        if (v < lo || v > hi) {
          return absl::InvalidArgumentError(absl::StrCat("input '", nt.name, "' element ", e, " is ", v,
                                                         ", outside the range of ", DTypeName(t.dtype())));
        }
      }
    }
    if (HasNonCanonicalBoolsIn(t)) {  // a host buffer with bytes other than 0/1: copy, nonzero -> true
      ordered[idx] = CanonicalBoolsCopy(ordered[idx]);
    }
  }
  for (size_t i = 0; i < inputs_.size(); ++i) {
    if (!seen[i]) return absl::InvalidArgumentError(absl::StrCat("missing input '", inputs_[i].name, "'"));
  }
  return ordered;
}

// Scalar integer/bool inputs (a sample rate, a mode flag) are specialized by value, so control flow and
// shape arithmetic on them fold away; after kMaxValuesPerInput distinct values an input is treated as
// dynamic (value not in the signature) to bound the number of plans. An input whose value only flows as
// data (InputValuesShapeTheGraph: a token id into Gather, a position into Add) is never specialized by
// value: nothing folds away, and every new value would be a new plan.
constexpr size_t kMaxValuesPerInput = 8;

std::vector<bool> Session::ValueSpecialized(const std::vector<Tensor>& inputs) {
  std::vector<bool> out(inputs.size(), false);
  bool any = false;
  auto candidate = [this](const Tensor& t, size_t i) {
    return t.numel() == 1 && (IsInteger(t.dtype()) || t.dtype() == DType::kBool) &&
           (i >= value_shapes_graph_.size() || value_shapes_graph_[i]);
  };
  for (size_t i = 0; i < inputs.size(); ++i) any |= candidate(inputs[i], i);
  if (!any) return out;
  MutexLock lock(&mu_);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!candidate(t, i)) continue;
    std::set<int64_t>& seen = seen_values_[i];
    if (seen.size() > kMaxValuesPerInput) continue;
    seen.insert(t.ToInt64Vector()[0]);
    out[i] = seen.size() <= kMaxValuesPerInput;
  }
  return out;
}

absl::StatusOr<std::shared_ptr<Graph>> Session::BuildSpecializedGraph(const std::vector<Tensor>& inputs,
                                                                      const std::vector<bool>& by_value,
                                                                      ClusteringReport* report, int sig,
                                                                      ReplayRecorder* recorder) {
  Profiler* prof = profiler_.get();
  Dumper* dump = sig >= 0 ? dumper_.get() : nullptr;
  std::shared_ptr<Graph> g;
  {
    TraceScope scope(prof, "clone_graph", "specialize");
    g.reset(graph_->Clone().release());
  }
  if (dump) dump->DumpGraph(sig, "input", *g);
  std::vector<Dims> dims;
  for (size_t i = 0; i < inputs.size(); ++i) {
    g->inputs()[i]->dtype = inputs[i].dtype();
    dims.push_back(inputs[i].dims());
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!by_value[i]) continue;
    Value* in = g->inputs()[i];
    g->ReplaceAllUses(in, g->AddConstant(in->name + "/value", inputs[i].Clone()));
  }
  int threads = flags_.intra_op_threads;
  int64_t fold_ns = 0, folded = 0;
  auto evaluate = [threads, &fold_ns, &folded](const Node& n, const std::vector<const Tensor*>& args) {
    int64_t t0 = Profiler::Now();
    auto r = EvaluateNode(n, args, threads);
    fold_ns += Profiler::Now() - t0;
    ++folded;
    return r;
  };
  {
    TraceScope scope(prof, "specialize_shapes", "specialize");
    CJIT_RETURN_IF_ERROR(SpecializeShapes(*g, dims, evaluate));
    CJIT_RETURN_IF_ERROR(VerifyGraph(*g));
    if (recorder) recorder->AfterSpecializeShapes(*g);
    if (scope.active()) {
      scope.Stop();
      // Shape inference and constant folding interleave node by node; the folding share is measured inside.
      scope.args()
          .Add("shape_inference_ms", (Profiler::Now() - scope.start_ns() - fold_ns) / 1e6)
          .Add("constant_folding_ms", fold_ns / 1e6)
          .Add("nodes_evaluated", folded)
          .Add("nodes_after", g->nodes().size());
    }
  }
  if (dump) dump->DumpGraph(sig, "specialize_shapes", *g);
  // The pipeline (compiler/passes/pipeline.h): each pass traced, verified when it changed the graph, and
  // dumped after (--dump_to with --dump_pass_re or --dump_after).
  ClusteringReport r;
  PassContext ctx;
  ctx.flags = &flags_;
  ctx.gpu = gpu_ != nullptr;
  ctx.amp_rule = amp_rule_;
  ctx.sig = sig;
  ctx.clustering = ClusteringOptionsFor(flags_, enable_clustering_);
  ctx.clustering_report = &r;
  PassHooks hooks;
  hooks.around = [&](const Pass& pass, const std::function<absl::Status()>& run) -> absl::Status {
    TraceScope scope(prof, pass.name, "specialize");
    absl::Status st = run();
    if (scope.active()) {
      scope.args().Add("nodes_after", g->nodes().size());
      if (pass.name == "mark_for_compilation")
        scope.args().Add("clusters", r.clusters.size()).Add("excluded", r.excluded.size());
    }
    return st;
  };
  std::set<std::string> dump_after;
  for (absl::string_view n : absl::StrSplit(flags_.dump_after, ',', absl::SkipWhitespace())) dump_after.emplace(n);
  hooks.after = [&](const Pass& pass, const Graph& graph, bool) {
    if (dump) dump->DumpGraph(sig, pass.name, graph, dump_after.count(pass.name) > 0);
  };
  CJIT_RETURN_IF_ERROR(RunSpecializationPipeline(*g, ctx, hooks).status());
  if (dump) {
    dump->DumpClustering(sig, r);
    dump->DumpDot(sig, *g);
  }
  if (report) *report = std::move(r);
  return g;
}

absl::StatusOr<std::shared_ptr<Graph>> Session::SpecializeAndCluster(const std::vector<NamedTensor>& inputs,
                                                                     ClusteringReport* report) {
  ScopedMaxTensorBytes limit(static_cast<uint64_t>(flags_.max_tensor_bytes));
  return CatchAsStatus("SpecializeAndCluster", [&]() -> absl::StatusOr<std::shared_ptr<Graph>> {
    CJIT_ASSIGN_OR_RETURN(std::vector<Tensor> ordered, ValidateInputs(inputs));
    return BuildSpecializedGraph(ordered, ValueSpecialized(ordered), report);
  });
}

absl::StatusOr<ClusteringReport> Session::Explain(const std::vector<NamedTensor>& inputs) {
  ClusteringReport report;
  CJIT_RETURN_IF_ERROR(SpecializeAndCluster(inputs, &report).status());
  return report;
}

absl::StatusOr<std::vector<NamedTensor>> Session::Run(const std::vector<NamedTensor>& inputs) {
  // OpenMP's thread count is a per-thread setting of the caller: set ours for the call (oneDNN reads it),
  // then give the caller back its own.
  // While a background compile is in flight the run may lend it a CPU (LendsCpuToCompiles): one thread
  // fewer, for OpenMP (oneDNN, BLIS) and for our own kernels (RunThreads).
  const int threads = clusters_ ? clusters_->RunThreadsNow() : flags_.intra_op_threads;
  const int caller_threads = omp_get_max_threads();
  if (caller_threads != threads) omp_set_num_threads(threads);
  // The lent CPU comes back within the run once the compile ends (RunThreads reads it at every step).
  std::optional<ScopedRunThreads> live;
  if (clusters_) live.emplace(clusters_.get());
  ScopedMaxTensorBytes limit(static_cast<uint64_t>(flags_.max_tensor_bytes));
  auto result = CatchAsStatus("Run", [&] { return RunImpl(inputs); });
  live.reset();
  if (omp_get_max_threads() != caller_threads) omp_set_num_threads(caller_threads);
  return result;
}

absl::StatusOr<std::vector<NamedTensor>> Session::Run(const std::vector<NamedTensor>& inputs,
                                                      const RunOptions& options) {
  ScopedRunOptions scoped(&options);
  return Run(inputs);
}

absl::StatusOr<std::vector<NamedTensor>> Session::RunImpl(const std::vector<NamedTensor>& inputs) {
  TraceScope scope(profiler_.get(), "Run", "session");
  CJIT_ASSIGN_OR_RETURN(std::vector<Tensor> ordered, ValidateInputs(inputs));
  CJIT_ASSIGN_OR_RETURN(Plan plan, Specialize(ordered));
  std::vector<Tensor> outs;
  if (plan.dynamic) {
    auto dynamic = plan.cpu->Run(ordered);
    const bool miss = IsDynamicShapeMiss(dynamic.status());
    {
      MutexLock lock(&mu_);
      if (dynamic.ok()) ++dynamic_shape_runs_;
      if (miss) ++dynamic_shape_misses_;
    }
    if (dynamic.ok()) ++plan.outcomes->runs;
    if (miss) ++plan.outcomes->misses;
    if (!miss) {
      CJIT_ASSIGN_OR_RETURN(outs, std::move(dynamic));
    } else {
      // Nothing of the run escaped (outputs are returned only on success): specialize and run as usual.
      CJIT_VLOG(1) << dynamic.status().message() << "; specializing";
      CJIT_ASSIGN_OR_RETURN(plan, Specialize(ordered, /*allow_dynamic=*/false));
    }
  }
  if (plan.gpu) {
    CJIT_ASSIGN_OR_RETURN(outs, plan.gpu->Run(ordered));
  } else if (!plan.dynamic) {
    CJIT_ASSIGN_OR_RETURN(outs, plan.cpu->Run(ordered));
  }
  std::vector<NamedTensor> named;
  for (size_t i = 0; i < outs.size(); ++i) named.push_back({outputs_[i].name, std::move(outs[i])});
  return named;
}

std::string Session::device() const { return gpu_ordinal_ >= 0 ? absl::StrCat("cuda:", gpu_ordinal_) : "cpu"; }

std::vector<std::string> Session::GpuPlacements() const {
  std::vector<std::string> out;
  MutexLock lock(&mu_);
  std::map<std::string, const GpuExecutor*> by_signature;  // sorted, as before the LRU
  for (const auto& [signature, cached] : plans_) {
    if (cached.plan.gpu) by_signature[signature] = cached.plan.gpu.get();
  }
  for (const auto& [signature, gpu] : by_signature)
    out.push_back(absl::StrCat(signature, " ", gpu->placement().ToString(), "; ", gpu->GraphStatus()));
  if (gpu_ && !gpu_->MemoryReport().empty()) out.push_back(gpu_->MemoryReport());
  return out;
}

}  // namespace cjit
