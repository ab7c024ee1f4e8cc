// Sequence and optional kernels (ONNX operator specification: SequenceEmpty, SequenceConstruct,
// SequenceInsert, SequenceAt, SequenceErase, SequenceLength, SplitToSequence, ConcatFromSequence-11,
// SequenceMap-17, Optional-15, OptionalHasElement / OptionalGetElement-15/18). Sequences are immutable
// (Tensor::Sequence): every op makes a new one that shares the unchanged tensors, so no element is copied
// except by SplitToSequence and ConcatFromSequence, which move element data.

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/tensor_util.h"

namespace cjit {
namespace {

constexpr uint64_t kItemOverheadBytes = sizeof(Tensor) + 64;  // a Tensor and its buffer's allocation

absl::StatusOr<const Tensor*> SequenceInput(const KernelContext& ctx, int i) {
  const Tensor& t = ctx.in(i);
  if (t.kind() != ValueKind::kSequence) {
    return ctx.Error(absl::StrCat("input ", i, " is a ", ValueKindName(t.kind()), ", not a sequence"));
  }
  return &t;
}

// The scalar position input `i` (int32 or int64), or `dflt` when the node leaves it out; in [lo, hi] after
// adding n to a negative value (ONNX: "negative value means counting positions from the back").
absl::StatusOr<int64_t> Position(const KernelContext& ctx, int i, int64_t dflt, int64_t n, int64_t lo, int64_t hi) {
  if (!ctx.has(i)) return dflt;
  const Tensor& p = ctx.in(i);
  if (!p.is_tensor() || p.numel() != 1 || (p.dtype() != DType::kI32 && p.dtype() != DType::kI64)) {
    return ctx.Error(absl::StrCat("position must be an int32 or int64 scalar, got ", p.Describe()));
  }
  const int64_t raw = p.ToInt64Vector()[0];
  const int64_t pos = raw < 0 ? raw + n : raw;
  if (pos < lo || pos > hi) {
    return ctx.Error(absl::StrCat("position ", raw, " is out of range for a sequence of ", n, " tensors (accepted: [",
                                  lo - n, ", ", hi, "])"));
  }
  return pos;
}

absl::Status SequenceInsert(KernelContext& ctx) {
  CJIT_ASSIGN_OR_RETURN(const Tensor* seq, SequenceInput(ctx, 0));
  const Tensor& t = ctx.in(1);
  if (!t.is_tensor() || t.dtype() != seq->dtype()) {
    return ctx.Error(absl::StrCat("cannot insert ", t.Describe(), " into a sequence of ", DTypeName(seq->dtype())));
  }
  const int64_t n = static_cast<int64_t>(seq->items().size());
  CJIT_ASSIGN_OR_RETURN(int64_t pos, Position(ctx, 2, n, n, 0, n));
  // A sequence grown in a loop is bounded like one tensor (--max_tensor_bytes), each item counted with its
  // bookkeeping, so a runaway loop stops with an error instead of exhausting memory.
  const uint64_t bytes = seq->item_bytes() + t.nbytes() + static_cast<uint64_t>(n + 1) * kItemOverheadBytes;
  if (bytes > MaxTensorBytes()) {
    return ctx.Error(absl::StrCat("the sequence would hold ", n + 1, " tensors of ", bytes,
                                  " bytes in all, more than --max_tensor_bytes (", MaxTensorBytes(), ")"));
  }
  if (pos == n && ctx.input0_dies && seq->SoleOwnerOfItems()) {
    // An append to a sequence no later node reads and no other value shares (a list built in a loop): take
    // the dying input's storage and grow it in place. Its holder is this run's own slot or input vector.
    Tensor grown = std::move(const_cast<Tensor&>(*seq));
    grown.AppendInPlace(t);
    ctx.outputs[0] = std::move(grown);
    return absl::OkStatus();
  }
  std::vector<Tensor> items;
  items.reserve(static_cast<size_t>(n) + 1);
  items.insert(items.end(), seq->items().begin(), seq->items().begin() + pos);
  items.push_back(t);
  items.insert(items.end(), seq->items().begin() + pos, seq->items().end());
  ctx.outputs[0] = Tensor::Sequence(seq->dtype(), std::move(items));
  return absl::OkStatus();
}

absl::Status SequenceAt(KernelContext& ctx) {
  CJIT_ASSIGN_OR_RETURN(const Tensor* seq, SequenceInput(ctx, 0));
  const int64_t n = static_cast<int64_t>(seq->items().size());
  if (n == 0) return ctx.Error("the sequence is empty");
  CJIT_ASSIGN_OR_RETURN(int64_t pos, Position(ctx, 1, 0, n, 0, n - 1));
  ctx.outputs[0] = seq->items()[pos];
  return absl::OkStatus();
}

absl::Status SequenceErase(KernelContext& ctx) {
  CJIT_ASSIGN_OR_RETURN(const Tensor* seq, SequenceInput(ctx, 0));
  const int64_t n = static_cast<int64_t>(seq->items().size());
  if (n == 0) return ctx.Error("cannot erase from an empty sequence");
  CJIT_ASSIGN_OR_RETURN(int64_t pos, Position(ctx, 1, n - 1, n, 0, n - 1));
  std::vector<Tensor> items = seq->items();
  items.erase(items.begin() + pos);
  ctx.outputs[0] = Tensor::Sequence(seq->dtype(), std::move(items));
  return absl::OkStatus();
}

// `x` split along `axis` into pieces of `sizes` (summing to the axis' dim), each a strided copy.
std::vector<Tensor> SplitAlong(const Tensor& x, int axis, const std::vector<int64_t>& sizes, bool drop_axis,
                               int threads) {
  std::vector<int64_t> start(x.rank(), 0), step(x.rank(), 1);
  std::vector<Tensor> out;
  for (int64_t size : sizes) {
    Dims d = x.dims();
    d[axis] = size;
    Tensor piece(x.dtype(), d);
    StridedCopy(x, piece, start, step, threads);
    start[axis] += size;
    if (drop_axis) {
      d.erase(d.begin() + axis);
      piece = piece.Reshaped(d);
    }
    out.push_back(std::move(piece));
  }
  return out;
}

absl::Status SplitToSequence(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  if (x.rank() == 0) return ctx.Error("cannot split a scalar");
  CJIT_ASSIGN_OR_RETURN(int axis, NormalizeAxis(*ctx.node, ctx.node->GetInt("axis", 0), x.rank()));
  const int64_t dim = x.dim(axis);
  std::vector<int64_t> sizes;
  bool drop_axis = false;
  if (!ctx.has(1)) {
    sizes.assign(static_cast<size_t>(dim), 1);  // one piece per index; keepdims=0 drops the axis
    drop_axis = ctx.node->GetInt("keepdims", 1) == 0;
  } else {
    const Tensor& split = ctx.in(1);
    std::vector<int64_t> s = split.ToInt64Vector();
    if (split.rank() == 0) {
      if (s[0] <= 0) return ctx.Error(absl::StrCat("a scalar split must be positive, got ", s[0]));
      for (int64_t b = 0; b < dim; b += s[0]) sizes.push_back(std::min(s[0], dim - b));
    } else if (split.rank() == 1) {
      int64_t total = 0;
      for (int64_t v : s) {
        if (v < 0) return ctx.Error(absl::StrCat("split sizes must not be negative, got ", v));
        if (v > dim - total) return ctx.Error(absl::StrCat("split sizes add up to more than the axis' ", dim));
        total += v;
      }
      if (total != dim) return ctx.Error(absl::StrCat("split sizes add up to ", total, "; the axis has ", dim));
      sizes = std::move(s);
    } else {
      return ctx.Error(absl::StrCat("split must be a scalar or 1-D, got ", split.Describe()));
    }
  }
  if (sizes.size() * kItemOverheadBytes + x.nbytes() > MaxTensorBytes()) {
    return ctx.Error(absl::StrCat(sizes.size(), " pieces of ", x.Describe(),
                                  " would take more than --max_tensor_bytes (", MaxTensorBytes(), ")"));
  }
  if (x.dtype() == DType::kString) return ctx.Error("sequences of strings are not supported");
  ctx.outputs[0] = Tensor::Sequence(x.dtype(), SplitAlong(x, axis, sizes, drop_axis, ctx.threads));
  return absl::OkStatus();
}

absl::Status ConcatFromSequence(KernelContext& ctx) {
  CJIT_ASSIGN_OR_RETURN(const Tensor* seq, SequenceInput(ctx, 0));
  const std::vector<Tensor>& items = seq->items();
  if (items.empty()) return ctx.Error("cannot concatenate an empty sequence");
  const bool new_axis = ctx.node->GetInt("new_axis", 0) != 0;
  const Tensor& first = items[0];
  const int out_rank = first.rank() + (new_axis ? 1 : 0);
  if (out_rank == 0) return ctx.Error("cannot concatenate scalars without new_axis=1");
  CJIT_ASSIGN_OR_RETURN(int axis, NormalizeAxis(*ctx.node, ctx.node->GetInt("axis", 0), out_rank));
  Dims out_dims = first.dims();
  if (new_axis) out_dims.insert(out_dims.begin() + axis, 0);
  else out_dims[axis] = 0;
  std::vector<Tensor> stacked;  // new_axis: each item with a unit dim at `axis` (a buffer alias)
  std::vector<const Tensor*> parts;
  for (size_t k = 0; k < items.size(); ++k) {
    const Tensor& t = items[k];
    bool same = t.rank() == first.rank();
    for (int d = 0; same && d < t.rank(); ++d) same = t.dim(d) == first.dim(d) || (!new_axis && d == axis);
    if (!same) {
      return ctx.Error(absl::StrCat("tensor ", k, " is ", t.Describe(), "; tensor 0 is ", first.Describe(),
                                    new_axis ? " (stacked tensors must have the same dims)"
                                             : absl::StrCat(" (dims may differ on axis ", axis, " only)")));
    }
    out_dims[axis] += new_axis ? 1 : t.dim(axis);
    parts.push_back(&t);
  }
  if (new_axis) {
    Dims unit = first.dims();
    unit.insert(unit.begin() + axis, 1);
    stacked.reserve(items.size());
    for (const Tensor*& p : parts) {
      stacked.push_back(p->Reshaped(unit));
      p = &stacked.back();
    }
  }
  ConcatAlong(parts, axis, ctx.Alloc(0, first.dtype(), out_dims));
  return absl::OkStatus();
}

// SequenceMap-17: the body once per position i of input 0, given item i of every sequence input (all of
// input 0's length) and every tensor input whole; output k is the sequence of the body's output k.
absl::Status SequenceMap(KernelContext& ctx) {
  if (ctx.run_subgraph == nullptr) return ctx.Error("no subgraph runner");
  const Graph* body = ctx.node->GetGraph("body");
  if (body == nullptr) return ctx.Error("has no body");
  CJIT_ASSIGN_OR_RETURN(const Tensor* seq, SequenceInput(ctx, 0));
  const size_t n = seq->items().size();
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    const Tensor& t = ctx.in(i);
    if (t.kind() == ValueKind::kSequence && t.items().size() != n) {
      return ctx.Error(absl::StrCat("sequence input ", i, " has ", t.items().size(), " tensors; input 0 has ", n));
    }
    if (t.kind() != ValueKind::kSequence && !t.is_tensor()) {
      return ctx.Error(
          absl::StrCat("input ", i, " is a ", ValueKindName(t.kind()), "; SequenceMap takes tensors or sequences"));
    }
  }
  const auto caps = SubgraphCaptures(ctx);
  std::vector<std::vector<Tensor>> results(ctx.outputs.size());
  for (size_t pos = 0; pos < n; ++pos) {
    std::vector<Tensor> in;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor& t = ctx.in(i);
      in.push_back(t.kind() == ValueKind::kSequence ? t.items()[pos] : t);
    }
    CJIT_ASSIGN_OR_RETURN(std::vector<Tensor> outs, (*ctx.run_subgraph)(*body, in, caps));
    if (outs.size() != results.size()) return ctx.Error("the body's output count differs from the node's");
    for (size_t k = 0; k < outs.size(); ++k) {
      if (!outs[k].is_tensor()) return ctx.Error(absl::StrCat("body output ", k, " is not a tensor"));
      results[k].push_back(std::move(outs[k]));
    }
  }
  for (size_t k = 0; k < results.size(); ++k) {
    DType elem = ctx.infer()[k].dtype;
    if (!results[k].empty()) elem = results[k][0].dtype();
    if (elem == DType::kInvalid) return ctx.Error(absl::StrCat("output ", k, " has no known element type"));
    for (const Tensor& t : results[k]) {
      if (t.dtype() != elem) return ctx.Error(absl::StrCat("body output ", k, " changes dtype across positions"));
    }
    ctx.outputs[k] = Tensor::Sequence(elem, std::move(results[k]));
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterSequenceKernels() {
  RegisterKernel("SequenceEmpty", [](KernelContext& ctx) -> absl::Status {
    ctx.outputs[0] = Tensor::Sequence(ctx.infer()[0].dtype, {});
    return absl::OkStatus();
  });
  RegisterKernel("SequenceConstruct", [](KernelContext& ctx) -> absl::Status {
    std::vector<Tensor> items;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor& t = ctx.in(i);
      if (!t.is_tensor() || t.dtype() != ctx.in(0).dtype()) {
        return ctx.Error(absl::StrCat("input ", i, " is ", t.Describe(), "; a sequence of ",
                                      DTypeName(ctx.in(0).dtype()), " tensors cannot hold it"));
      }
      items.push_back(t);
    }
    ctx.outputs[0] = Tensor::Sequence(ctx.in(0).dtype(), std::move(items));
    return absl::OkStatus();
  });
  RegisterKernel("SequenceInsert", SequenceInsert);
  RegisterKernel("SequenceAt", SequenceAt);
  RegisterKernel("SequenceErase", SequenceErase);
  RegisterKernel("SequenceLength", [](KernelContext& ctx) -> absl::Status {
    CJIT_ASSIGN_OR_RETURN(const Tensor* seq, SequenceInput(ctx, 0));
    Tensor& out = ctx.Alloc(0, DType::kI64, {});
    *out.data<int64_t>() = static_cast<int64_t>(seq->items().size());
    return absl::OkStatus();
  });
  RegisterKernel("SplitToSequence", SplitToSequence);
  RegisterKernel("ConcatFromSequence", ConcatFromSequence);
  RegisterKernel("SequenceMap", SequenceMap);
  RegisterKernel("Optional", [](KernelContext& ctx) -> absl::Status {
    if (ctx.has(0)) {
      if (IsOptionalKind(ctx.in(0).kind())) return ctx.Error("input 0 is already an optional");
      ctx.outputs[0] = Tensor::Optional(ctx.in(0));
    } else {
      const InferOutput& o = ctx.infer()[0];
      if (!IsOptionalKind(o.kind)) return ctx.Error("an Optional without an input needs the 'type' attribute");
      ctx.outputs[0] = Tensor::OptionalNone(o.kind, o.dtype);
    }
    return absl::OkStatus();
  });
  RegisterKernel("OptionalHasElement", [](KernelContext& ctx) -> absl::Status {
    bool present = false;
    if (ctx.has(0)) present = IsOptionalKind(ctx.in(0).kind()) ? ctx.in(0).has_element() : true;
    Tensor& out = ctx.Alloc(0, DType::kBool, {});
    *out.data<uint8_t>() = present ? 1 : 0;
    return absl::OkStatus();
  });
  RegisterKernel("OptionalGetElement", [](KernelContext& ctx) -> absl::Status {
    const Tensor& o = ctx.in(0);
    if (!IsOptionalKind(o.kind())) {
      ctx.outputs[0] = o;  // OptionalGetElement-18: a tensor or sequence is its own element
      return absl::OkStatus();
    }
    if (!o.has_element()) return ctx.Error("the optional input holds no element");
    ctx.outputs[0] = o.items()[0];
    return absl::OkStatus();
  });
}

}  // namespace cjit
