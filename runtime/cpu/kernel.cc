#include "compiler/ir/cpu_isa.h"
#include "runtime/cpu/kernel.h"

#include <optional>
#include <tuple>

#include "base/weak_memo.h"

#include <map>
#include <mutex>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/ir/float16.h"
#include "base/status_macros.h"

namespace cjit {
namespace {

std::map<std::string, KernelFn>& Raw() {
  static auto* m = new std::map<std::string, KernelFn>();
  return *m;
}

const std::map<std::string, KernelFn>& Registered() {
  static bool once = [] {
    RegisterElementwiseKernels();
    RegisterReduceKernels();
    RegisterLinalgKernels();
    RegisterConvKernels();
    RegisterPoolKernels();
    RegisterNormKernels();
    RegisterResizeKernels();
    RegisterMovementKernels();
    RegisterRecurrentKernels();
    RegisterControlFlowKernels();
    RegisterMiscKernels();
    RegisterQdqKernels();
    RegisterSignalKernels();
    RegisterRandomKernels();
    RegisterQuantKernels();
    RegisterMatMulNBitsKernel();
    RegisterSequenceKernels();
    RegisterStringKernels();
    return true;
  }();
  (void)once;
  return Raw();
}

bool Is16BitFloat(DType t) { return t == DType::kF16 || t == DType::kBF16; }

// Converted copies of constant inputs (16-bit -> float32, or float32 -> bfloat16), one per source buffer.
Tensor ConvertedConstant(const Tensor& t) {
  return DerivedConstant(t, "convert", [](const Tensor& c) {
    return ConvertFloatTensor(c, c.dtype() == DType::kF32 ? DType::kBF16 : DType::kF32);
  });
}

}  // namespace

Tensor DerivedConstant(const Tensor& t, const std::string& kind, const std::function<Tensor(const Tensor&)>& make) {
  // Keyed by the buffer's address, the derivation and the view of it (dims, dtype): one buffer may back
  // views of other dims.
  using Key = std::tuple<const void*, std::string, Dims, DType>;
  static auto* memo = new WeakMemo<Key, uint8_t, std::optional<Tensor>>();
  return memo->With(Key{t.raw(), kind, t.dims(), t.dtype()}, t.buffer(), [&](std::optional<Tensor>& derived) {
    if (!derived.has_value()) derived = make(t);
    return *derived;
  });
}

bool CpuHasBfloat16Math() { return CpuHasAvx512Bf16(); }

bool CpuHasAmxBfloat16() { return CpuHasAmx(); }

Tensor ToBfloat16(const KernelContext& ctx, int i) {
  const Tensor& t = ctx.in(i);
  return ctx.is_constant(i) ? ConvertedConstant(t) : ConvertFloatTensor(t, DType::kBF16);
}

absl::Status RunInFloat32(const KernelFn& fn, KernelContext& ctx) {
  bool any = false;
  for (const Tensor* t : ctx.inputs) any = any || (t != nullptr && Is16BitFloat(t->dtype()));
  for (const InferOutput& o : ctx.infer()) any = any || Is16BitFloat(o.dtype);
  if (!any) return fn(ctx);
  KernelContext sub = ctx;
  std::vector<Tensor> widened(ctx.inputs.size());
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    const Tensor* t = ctx.inputs[i];
    if (t == nullptr || !Is16BitFloat(t->dtype())) continue;
    widened[i] = ctx.is_constant(static_cast<int>(i)) ? ConvertedConstant(*t) : ConvertFloatTensor(*t, DType::kF32);
    sub.inputs[i] = &widened[i];
  }
  sub.inferred = ctx.infer();
  sub.static_inferred = nullptr;
  for (InferOutput& o : sub.inferred) {
    if (Is16BitFloat(o.dtype)) o.dtype = DType::kF32;
  }
  for (Tensor& t : sub.outputs) t = Tensor();  // preset 16-bit destinations are filled below
  CJIT_RETURN_IF_ERROR(fn(sub));
  ctx.impl = std::move(sub.impl);
  for (size_t i = 0; i < sub.outputs.size() && i < ctx.outputs.size(); ++i) {
    const Tensor& r = sub.outputs[i];
    if (!r.defined()) continue;
    const DType want = i < ctx.infer().size() ? ctx.infer()[i].dtype : r.dtype();
    if (r.dtype() != DType::kF32 || !Is16BitFloat(want)) {
      ctx.outputs[i] = r;
      continue;
    }
    Tensor& out = ctx.Alloc(static_cast<int>(i), want, r.dims());
    ConvertFloatBuffer(r.raw(), DType::kF32, out.raw(), want, static_cast<size_t>(r.numel()));
  }
  return absl::OkStatus();
}

Tensor& KernelContext::Alloc(int i) {
  const InferOutput& o = infer()[i];
  if (!o.shape.fully_known()) {
    throw TensorError(absl::StrCat(node->Describe(), ": output ", i, " has unknown dims ", o.shape.ToString()));
  }
  return Alloc(i, o.dtype, o.shape.concrete());
}

Tensor& KernelContext::Alloc(int i, DType dtype, Dims dims) {
  // A preset output (e.g. a slice of an in-place Concat's buffer) of the right type is written in place.
  if (outputs[i].defined() && outputs[i].dtype() == dtype && outputs[i].dims() == dims) return outputs[i];
  outputs[i] = Tensor(dtype, std::move(dims));
  return outputs[i];
}

void KernelContext::ThrowMissingInput(int i) const {
  throw IndexError(absl::StrCat("input ", i, " is required by the kernel but the node ",
                                i < num_inputs() ? "leaves it empty" : absl::StrCat("has only ", num_inputs())));
}

absl::Status RunKernel(const KernelFn& fn, KernelContext& ctx) {
  try {
    return fn(ctx);
  } catch (const IndexError& e) {
    return absl::InvalidArgumentError(absl::StrCat(ctx.node->Describe(), ": ", e.what()));
  } catch (const std::out_of_range& e) {  // vector::at on an input with fewer values than the op reads
    return absl::InvalidArgumentError(
        absl::StrCat(ctx.node->Describe(), ": an input holds fewer values than the operator needs (", e.what(), ")"));
  } catch (const TensorError& e) {
    return absl::ResourceExhaustedError(absl::StrCat(ctx.node->Describe(), ": ", e.what()));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(ctx.node->Describe(), ": out of memory"));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(ctx.node->Describe(), ": ", e.what()));
  }
}

const KernelFn* FindKernelDuringRegistration(const std::string& op_type) {
  auto it = Raw().find(op_type);
  return it == Raw().end() ? nullptr : &it->second;
}

void RegisterKernel(const std::string& op_type, KernelFn fn) { Raw()[op_type] = std::move(fn); }

namespace {
std::map<std::string, AlgorithmsFn>& RawAlgorithms() {
  static auto* m = new std::map<std::string, AlgorithmsFn>();
  return *m;
}
}  // namespace

// Called during kernel registration only (under Registered()'s one-time initialization).
void RegisterAlgorithms(const std::string& op_type, AlgorithmsFn fn) { RawAlgorithms()[op_type] = std::move(fn); }

const AlgorithmsFn* FindAlgorithms(const std::string& op_type) {
  Registered();
  const auto& m = RawAlgorithms();
  auto it = m.find(op_type);
  return it == m.end() ? nullptr : &it->second;
}

const KernelFn* FindKernel(const std::string& op_type) {
  const auto& m = Registered();
  auto it = m.find(op_type);
  return it == m.end() ? nullptr : &it->second;
}

std::vector<InferInput> InferInputsFromValues(const std::vector<const Tensor*>& inputs) {
  std::vector<InferInput> in(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr) {
      in[i].present = false;
      continue;
    }
    in[i].dtype = inputs[i]->dtype();
    in[i].kind = inputs[i]->kind();
    in[i].shape = inputs[i]->is_tensor() ? Shape::Of(inputs[i]->dims()) : Shape::Unknown();
    in[i].value = inputs[i];
  }
  return in;
}

absl::StatusOr<std::vector<Tensor>> EvaluateNode(const Node& node, const std::vector<const Tensor*>& inputs,
                                                 int threads, const SubgraphRunner* runner,
                                                 const std::vector<bool>* input_is_constant,
                                                 const std::vector<PostOp>* post_ops,
                                                 std::vector<Tensor>* preset_outputs, std::string* impl,
                                                 const std::vector<InferOutput>* static_inferred,
                                                 const std::string* algorithm, int64_t* scratch_bytes) {
  const KernelFn* fn = FindKernel(node.op_type);
  if (fn == nullptr) return absl::UnimplementedError(absl::StrCat(node.Describe(), ": no CPU kernel"));
  KernelContext ctx;
  ctx.node = &node;
  ctx.inputs = inputs;
  ctx.threads = threads;
  ctx.run_subgraph = runner;
  ctx.input_is_constant = input_is_constant;
  ctx.post_ops = post_ops;
  if (post_ops && !post_ops->empty() && node.op_type != "Conv" && node.op_type != "NhwcConv" &&
      node.op_type != "NhwcPointwiseDepthwiseConv") {
    return absl::InternalError(absl::StrCat(node.Describe(), ": post-ops are only supported on Conv"));
  }
  bool known = static_inferred == nullptr && !node.outputs.empty();
  for (const Value* v : node.outputs) known &= v == nullptr || (v->dtype != DType::kInvalid && v->shape.fully_known());
  if (static_inferred != nullptr) {
    ctx.static_inferred = static_inferred;
  } else if (known) {
    for (const Value* v : node.outputs) ctx.inferred.push_back(v ? InferOutput{v->dtype, v->shape} : InferOutput{});
  } else {
    CJIT_RETURN_IF_ERROR(InferNode(node, InferInputsFromValues(inputs), ctx.inferred));
  }
  ctx.outputs.resize(node.outputs.size());
  if (preset_outputs) {
    for (size_t k = 0; k < preset_outputs->size() && k < ctx.outputs.size(); ++k) ctx.outputs[k] = (*preset_outputs)[k];
  }
  ctx.want_impl = impl != nullptr;
  ctx.algorithm = algorithm;
  CJIT_RETURN_IF_ERROR(RunKernel(*fn, ctx));
  if (impl) *impl = std::move(ctx.impl);
  if (scratch_bytes) *scratch_bytes = ctx.scratch_bytes;
  return std::move(ctx.outputs);
}

absl::Status CheckKernelResult(const KernelContext& ctx, const absl::Status& status,
                               const std::vector<int>& out_slots) {
  if (!status.ok()) {
    if (absl::StrContains(status.message(), ctx.node->name)) return status;
    return absl::Status(status.code(), absl::StrCat(ctx.node->Describe(), ": ", status.message()));
  }
  for (size_t k = 0; k < out_slots.size(); ++k) {
    if (out_slots[k] >= 0 && (k >= ctx.outputs.size() || !ctx.outputs[k].defined())) {
      return absl::InternalError(absl::StrCat(ctx.node->Describe(), ": kernel did not produce output ", k));
    }
  }
  return absl::OkStatus();
}

}  // namespace cjit
