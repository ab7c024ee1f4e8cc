// If and Loop (ONNX operator specification): bodies run through the executor's SubgraphRunner, with the
// node's implicit inputs bound by name to the subgraph's captures.
#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/cpu/kernel.h"

namespace cjit {

std::vector<std::pair<std::string, Tensor>> SubgraphCaptures(const KernelContext& ctx) {
  std::vector<std::pair<std::string, Tensor>> caps;
  for (size_t i = 0; i < ctx.node->implicit_inputs.size(); ++i) {
    caps.push_back({ctx.node->implicit_names[i], *ctx.implicit[i]});
  }
  return caps;
}

namespace {

absl::Status If(KernelContext& ctx) {
  if (ctx.run_subgraph == nullptr) return ctx.Error("no subgraph runner");
  bool cond = ctx.in(0).ToDoubleVector().at(0) != 0;
  const Graph* g = ctx.node->GetGraph(cond ? "then_branch" : "else_branch");
  if (g == nullptr) return ctx.Error("missing branch");
  CJIT_ASSIGN_OR_RETURN(std::vector<Tensor> outs, (*ctx.run_subgraph)(*g, {}, SubgraphCaptures(ctx)));
  if (outs.size() != ctx.outputs.size()) return ctx.Error("branch output count differs from node outputs");
  ctx.outputs = std::move(outs);
  return absl::OkStatus();
}

constexpr uint64_t kScanSliceOverheadBytes = sizeof(Tensor) + 64;

absl::Status Loop(KernelContext& ctx) {
  if (ctx.run_subgraph == nullptr) return ctx.Error("no subgraph runner");
  const Graph* body = ctx.node->GetGraph("body");
  if (body == nullptr) return ctx.Error("missing body");
  if (ctx.num_inputs() < 2) return ctx.Error("needs the M and cond input positions (each may be empty)");
  int64_t max_trip = ctx.has(0) ? ctx.in(0).ToInt64Vector().at(0) : std::numeric_limits<int64_t>::max();
  bool cond = ctx.has(1) ? ctx.in(1).ToDoubleVector().at(0) != 0 : true;
  int n_carried = ctx.num_inputs() - 2;
  std::vector<Tensor> carried;
  for (int i = 0; i < n_carried; ++i) carried.push_back(ctx.in(2 + i));
  int n_scan = static_cast<int>(ctx.outputs.size()) - n_carried;
  if (n_scan < 0) {
    return ctx.Error(absl::StrCat("has ", n_carried, " loop-carried inputs but only ", ctx.outputs.size(), " outputs"));
  }
  if (static_cast<int>(body->inputs().size()) != 2 + n_carried) {
    return ctx.Error(
        absl::StrCat("the body takes ", body->inputs().size(), " inputs; the node gives it ", 2 + n_carried));
  }
  std::vector<std::vector<Tensor>> scans(n_scan);
  std::vector<uint64_t> scan_bytes(n_scan, 0);
  auto caps = SubgraphCaptures(ctx);
  for (int64_t it = 0; it < max_trip && cond; ++it) {
    std::vector<Tensor> in;
    Tensor iter(DType::kI64, {});
    *iter.data<int64_t>() = it;
    Tensor c(DType::kBool, {});
    *c.data<uint8_t>() = 1;
    in.push_back(iter);
    in.push_back(c);
    for (int i = 0; i < n_carried; ++i) {
      // A body input declared optional that is carried a plain tensor or sequence (Loop-16 with an optional
      // initial value, a sequence from the second iteration on) receives it as a present optional. Carried
      // values move into the body's inputs (replaced by its outputs below), so a sequence the body appends
      // to has one holder and grows in place (SequenceInsert).
      const Value* formal = body->inputs()[2 + i];
      Tensor t = std::move(carried[i]);
      in.push_back(IsOptionalKind(formal->kind) && !IsOptionalKind(t.kind()) ? Tensor::Optional(std::move(t))
                                                                             : std::move(t));
    }
    CJIT_ASSIGN_OR_RETURN(std::vector<Tensor> out, (*ctx.run_subgraph)(*body, in, caps));
    if (static_cast<int>(out.size()) != 1 + n_carried + n_scan) return ctx.Error("body output count mismatch");
    cond = out[0].ToDoubleVector().at(0) != 0;
    for (int i = 0; i < n_carried; ++i) carried[i] = std::move(out[1 + i]);
    for (int i = 0; i < n_scan; ++i) {
      if (!out[1 + n_carried + i].is_tensor() || out[1 + n_carried + i].dtype() == DType::kString) {
        return ctx.Error(absl::StrCat("scan output ", i, " of the body is ", out[1 + n_carried + i].Describe(),
                                      "; Loop stacks numeric tensors only"));
      }
      // The stacked scan output is one tensor: stop as soon as it could no longer be allocated, instead of
      // collecting iterations without bound. Each iteration's slice is held as its own tensor until then,
      // so it counts with its bookkeeping (the Tensor and its buffer's allocation, ~100 bytes): a scalar
      // scan bounded by its 4-byte payload alone ran 52k iterations under a 256 KiB limit (5 s per input
      // in the fuzzer's sanitizer build).
      scan_bytes[i] += out[1 + n_carried + i].nbytes() + kScanSliceOverheadBytes;
      if (scan_bytes[i] > MaxTensorBytes()) {
        return ctx.Error(absl::StrCat("scan output ", i, " after ", it + 1, " iterations exceeds --max_tensor_bytes (",
                                      MaxTensorBytes(), ")"));
      }
      scans[i].push_back(out[1 + n_carried + i]);
    }
  }
  for (int i = 0; i < n_carried; ++i) ctx.outputs[i] = carried[i];
  for (int i = 0; i < n_scan; ++i) {
    if (scans[i].empty()) {
      DType t = ctx.infer()[n_carried + i].dtype;
      ctx.outputs[n_carried + i] = Tensor(t == DType::kInvalid ? DType::kF32 : t, {0});
      continue;
    }
    Dims d = scans[i][0].dims();
    d.insert(d.begin(), static_cast<int64_t>(scans[i].size()));
    Tensor& out = ctx.Alloc(n_carried + i, scans[i][0].dtype(), d);
    size_t bytes = scans[i][0].nbytes();
    for (size_t k = 0; k < scans[i].size(); ++k) {
      if (scans[i][k].nbytes() != bytes) return ctx.Error("scan output changes shape across iterations");
      std::memcpy(static_cast<uint8_t*>(out.raw()) + k * bytes, scans[i][k].raw(), bytes);
    }
  }
  return absl::OkStatus();
}

// x's slice t along `axis` (that axis removed).
Tensor SliceAlong(const Tensor& x, int axis, int64_t t) {
  Dims d = x.dims();
  const int64_t n = d[axis];
  int64_t outer = 1, inner = static_cast<int64_t>(DTypeSize(x.dtype()));
  for (int i = 0; i < axis; ++i) outer *= d[i];
  for (int i = axis + 1; i < x.rank(); ++i) inner *= d[i];
  d.erase(d.begin() + axis);
  Tensor y(x.dtype(), d);
  const uint8_t* src = static_cast<const uint8_t*>(x.raw());
  uint8_t* dst = static_cast<uint8_t*>(y.raw());
  for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + o * inner, src + (o * n + t) * inner, inner);
  return y;
}

// The slices stacked along a new `axis` (all of one dtype and dims).
absl::StatusOr<Tensor> StackAlong(const std::vector<Tensor>& parts, int axis, const Node& node) {
  if (!parts[0].is_tensor() || parts[0].dtype() == DType::kString) {
    return NodeError(node,
                     absl::StrCat("a scan output is ", parts[0].Describe(), "; Scan stacks numeric tensors only"));
  }
  Dims d = parts[0].dims();
  if (axis < 0 || axis > static_cast<int>(d.size()))
    return NodeError(node, absl::StrCat("scan axis ", axis, " out of range"));
  const int64_t n = static_cast<int64_t>(parts.size());
  int64_t outer = 1, inner = static_cast<int64_t>(DTypeSize(parts[0].dtype()));
  for (int i = 0; i < axis; ++i) outer *= d[i];
  for (size_t i = axis; i < d.size(); ++i) inner *= d[i];
  d.insert(d.begin() + axis, n);
  Tensor y(parts[0].dtype(), d);
  uint8_t* dst = static_cast<uint8_t*>(y.raw());
  for (int64_t t = 0; t < n; ++t) {
    if (parts[t].dims() != parts[0].dims() || parts[t].dtype() != parts[0].dtype()) {
      return NodeError(node, "a scan output changes dtype or shape across iterations");
    }
    const uint8_t* src = static_cast<const uint8_t*>(parts[t].raw());
    for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + (o * n + t) * inner, src + o * inner, inner);
  }
  return y;
}

// One scan (ONNX Scan-9+ semantics): the body runs once per slice of the scan inputs along their axes (in
// their directions), carrying the states; each scan output's slices are stacked along its axis.
absl::Status ScanOnce(KernelContext& ctx, const Graph& body, std::vector<Tensor>& states,
                      const std::vector<Tensor>& scan_in, const std::vector<int64_t>& in_axes,
                      const std::vector<int64_t>& in_dirs, const std::vector<int64_t>& out_axes,
                      const std::vector<int64_t>& out_dirs, int n_scan_out, int64_t steps,
                      std::vector<Tensor>* scan_out) {
  const auto caps = SubgraphCaptures(ctx);
  std::vector<std::vector<Tensor>> slices(n_scan_out);
  uint64_t bytes = 0;
  for (int64_t t = 0; t < steps; ++t) {
    std::vector<Tensor> in = states;
    for (size_t j = 0; j < scan_in.size(); ++j) {
      const int64_t len = scan_in[j].dim(static_cast<int>(in_axes[j]));
      in.push_back(SliceAlong(scan_in[j], static_cast<int>(in_axes[j]), in_dirs[j] ? len - 1 - t : t));
    }
    CJIT_ASSIGN_OR_RETURN(std::vector<Tensor> out, (*ctx.run_subgraph)(body, in, caps));
    if (out.size() != states.size() + n_scan_out) {
      return ctx.Error(
          absl::StrCat("the body returns ", out.size(), " values; the node needs ", states.size() + n_scan_out));
    }
    for (size_t i = 0; i < states.size(); ++i) states[i] = out[i];
    for (int k = 0; k < n_scan_out; ++k) {
      bytes += out[states.size() + k].nbytes() + kScanSliceOverheadBytes;
      if (bytes > MaxTensorBytes()) {
        return ctx.Error(absl::StrCat("scan outputs after ", t + 1, " iterations exceed --max_tensor_bytes (",
                                      MaxTensorBytes(), ")"));
      }
      slices[k].push_back(out[states.size() + k]);
    }
  }
  scan_out->clear();
  for (int k = 0; k < n_scan_out; ++k) {
    if (slices[k].empty()) return ctx.Error("a scan over zero iterations has no output shape");
    if (out_dirs[k]) std::reverse(slices[k].begin(), slices[k].end());
    CJIT_ASSIGN_OR_RETURN(Tensor y, StackAlong(slices[k], static_cast<int>(out_axes[k]), *ctx.node));
    scan_out->push_back(std::move(y));
  }
  return absl::OkStatus();
}

// ONNX Scan. Scan-9+: inputs = N states then M scan inputs (num_scan_inputs), axes / directions per scan
// input and output (negative axes count from the back). Scan-8: a leading optional sequence_lens and a
// batch axis 0 on every input and output; the scan axis is 1 (of the batched tensor), `directions` gives
// the input directions; a sequence shorter than the batch's longest zero-fills its remaining output slices.
absl::Status Scan(KernelContext& ctx) {
  if (ctx.run_subgraph == nullptr) return ctx.Error("no subgraph runner");
  const Graph* body = ctx.node->GetGraph("body");
  if (body == nullptr) return ctx.Error("missing body");
  const bool batched = ctx.node->opset_version < 9;
  const int first = batched ? 1 : 0;
  const int64_t num_scan_inputs = ctx.node->GetInt("num_scan_inputs", 0);
  if (num_scan_inputs < 1 || num_scan_inputs > ctx.num_inputs() - first ||
      ctx.num_inputs() - first - num_scan_inputs > static_cast<int64_t>(ctx.outputs.size())) {
    return ctx.Error(absl::StrCat("num_scan_inputs ", num_scan_inputs, " does not fit ", ctx.num_inputs(),
                                  " inputs and ", ctx.outputs.size(), " outputs"));
  }
  const int m = static_cast<int>(num_scan_inputs);
  const int n = ctx.num_inputs() - first - m;
  const int k = static_cast<int>(ctx.outputs.size()) - n;
  if (static_cast<int>(body->inputs().size()) != n + m) {
    return ctx.Error(absl::StrCat("the body takes ", body->inputs().size(), " inputs; the node gives it ", n + m));
  }
  auto attr = [&](const char* name, int count) -> absl::StatusOr<std::vector<int64_t>> {
    std::vector<int64_t> v = ctx.node->GetInts(name);
    if (v.empty()) v.assign(count, 0);
    if (static_cast<int>(v.size()) != count)
      return ctx.Error(absl::StrCat(name, " has ", v.size(), " values, not ", count));
    return v;
  };
  std::vector<Tensor> states, scans;
  for (int i = 0; i < n; ++i) states.push_back(ctx.in(first + i));
  for (int j = 0; j < m; ++j) scans.push_back(ctx.in(first + n + j));
  if (!batched) {
    CJIT_ASSIGN_OR_RETURN(std::vector<int64_t> in_axes, attr("scan_input_axes", m));
    CJIT_ASSIGN_OR_RETURN(std::vector<int64_t> in_dirs, attr("scan_input_directions", m));
    CJIT_ASSIGN_OR_RETURN(std::vector<int64_t> out_axes, attr("scan_output_axes", k));
    CJIT_ASSIGN_OR_RETURN(std::vector<int64_t> out_dirs, attr("scan_output_directions", k));
    int64_t steps = -1;
    for (int j = 0; j < m; ++j) {
      const int r = scans[j].rank();
      if (in_axes[j] < -r || in_axes[j] >= r)
        return ctx.Error(absl::StrCat("scan_input_axes[", j, "] is out of range"));
      if (in_axes[j] < 0) in_axes[j] += r;
      const int64_t len = scans[j].dim(static_cast<int>(in_axes[j]));
      if (steps >= 0 && len != steps) return ctx.Error("the scan inputs differ in length along their scan axes");
      steps = len;
    }
    std::vector<Tensor> outs;
    // Output axes are normalized against the stacked rank (the slice's rank + 1), known after the first step.
    std::vector<int64_t> axes = out_axes;
    for (int64_t& a : axes) a = a < 0 ? 0 : a;
    CJIT_RETURN_IF_ERROR(ScanOnce(ctx, *body, states, scans, in_axes, in_dirs, axes, out_dirs, k, steps, &outs));
    for (int q = 0; q < k; ++q) {
      if (out_axes[q] < 0) {  // restack along the normalized negative axis
        const int r = outs[q].rank();
        if (out_axes[q] < -r) return ctx.Error(absl::StrCat("scan_output_axes[", q, "] is out of range"));
        std::vector<Tensor> parts;
        for (int64_t t = 0; t < outs[q].dim(0); ++t) parts.push_back(SliceAlong(outs[q], 0, t));
        CJIT_ASSIGN_OR_RETURN(outs[q], StackAlong(parts, static_cast<int>(out_axes[q] + r), *ctx.node));
      }
    }
    for (int i = 0; i < n; ++i) ctx.outputs[i] = states[i];
    for (int q = 0; q < k; ++q) ctx.outputs[n + q] = std::move(outs[q]);
    return absl::OkStatus();
  }
  // Scan-8: per batch entry, with the scan along axis 1 of the batched inputs (axis 0 of each entry).
  CJIT_ASSIGN_OR_RETURN(std::vector<int64_t> in_dirs, attr("directions", m));
  const int64_t batch = scans[0].rank() > 1 ? scans[0].dim(0) : 0;
  std::vector<int64_t> lens;
  if (ctx.has(0)) lens = ctx.in(0).ToInt64Vector();
  std::vector<std::vector<Tensor>> out_states(n), out_scans(k);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<Tensor> st, sc;
    for (const Tensor& t : states) st.push_back(SliceAlong(t, 0, b));
    for (const Tensor& t : scans) {
      if (t.rank() < 2 || t.dim(0) != batch) return ctx.Error("every scan input needs [batch, sequence, ...]");
      sc.push_back(SliceAlong(t, 0, b));
    }
    const int64_t full = sc[0].dim(0);
    const int64_t steps = lens.empty() ? full : lens.at(b);
    if (steps < 1 || steps > full)
      return ctx.Error(absl::StrCat("sequence_lens[", b, "] = ", steps, " is outside [1, ", full, "]"));
    std::vector<Tensor> sc_used;
    for (const Tensor& t : sc) {
      // The first `steps` positions; a reverse direction starts at position steps - 1.
      std::vector<Tensor> parts;
      for (int64_t p = 0; p < steps; ++p) parts.push_back(SliceAlong(t, 0, p));
      CJIT_ASSIGN_OR_RETURN(Tensor used, StackAlong(parts, 0, *ctx.node));
      sc_used.push_back(std::move(used));
    }
    std::vector<Tensor> outs;
    CJIT_RETURN_IF_ERROR(ScanOnce(ctx, *body, st, sc_used, std::vector<int64_t>(m, 0), in_dirs,
                                  std::vector<int64_t>(k, 0), std::vector<int64_t>(k, 0), k, steps, &outs));
    for (int i = 0; i < n; ++i) out_states[i].push_back(st[i]);
    for (int q = 0; q < k; ++q) {
      if (steps < full) {  // zero-filled tail up to the longest sequence
        Dims d = outs[q].dims();
        d[0] = full;
        Tensor padded(outs[q].dtype(), d);
        std::memset(padded.raw(), 0, padded.nbytes());
        std::memcpy(padded.raw(), outs[q].raw(), outs[q].nbytes());
        outs[q] = std::move(padded);
      }
      out_scans[q].push_back(outs[q]);
    }
  }
  if (batch == 0) return ctx.Error("Scan-8 needs a batch axis of at least one entry");
  for (int i = 0; i < n; ++i) {
    CJIT_ASSIGN_OR_RETURN(ctx.outputs[i], StackAlong(out_states[i], 0, *ctx.node));
  }
  for (int q = 0; q < k; ++q) {
    CJIT_ASSIGN_OR_RETURN(ctx.outputs[n + q], StackAlong(out_scans[q], 0, *ctx.node));
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterControlFlowKernels() {
  RegisterKernel("If", If);
  RegisterKernel("Loop", Loop);
  RegisterKernel("Scan", Scan);
}

}  // namespace cjit
