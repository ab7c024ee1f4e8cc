// If and Loop (ONNX operator specification): bodies run through the executor's SubgraphRunner, with the
// node's implicit inputs bound by name to the subgraph's captures.
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/cpu/kernel.h"

namespace cjit {
namespace {

std::vector<std::pair<std::string, Tensor>> Captures(const KernelContext& ctx) {
  std::vector<std::pair<std::string, Tensor>> caps;
  for (size_t i = 0; i < ctx.node->implicit_inputs.size(); ++i) {
    caps.push_back({ctx.node->implicit_names[i], *ctx.implicit[i]});
  }
  return caps;
}

absl::Status If(KernelContext& ctx) {
  if (ctx.run_subgraph == nullptr) return ctx.Error("no subgraph runner");
  bool cond = ctx.in(0).ToDoubleVector().at(0) != 0;
  const Graph* g = ctx.node->GetGraph(cond ? "then_branch" : "else_branch");
  if (g == nullptr) return ctx.Error("missing branch");
  CJIT_ASSIGN_OR_RETURN(std::vector<Tensor> outs, (*ctx.run_subgraph)(*g, {}, Captures(ctx)));
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
    return ctx.Error(absl::StrCat("the body takes ", body->inputs().size(), " inputs; the node gives it ", 2 + n_carried));
  }
  std::vector<std::vector<Tensor>> scans(n_scan);
  std::vector<uint64_t> scan_bytes(n_scan, 0);
  auto caps = Captures(ctx);
  for (int64_t it = 0; it < max_trip && cond; ++it) {
    std::vector<Tensor> in;
    Tensor iter(DType::kI64, {});
    *iter.data<int64_t>() = it;
    Tensor c(DType::kBool, {});
    *c.data<uint8_t>() = 1;
    in.push_back(iter);
    in.push_back(c);
    for (const Tensor& t : carried) in.push_back(t);
    CJIT_ASSIGN_OR_RETURN(std::vector<Tensor> out, (*ctx.run_subgraph)(*body, in, caps));
    if (static_cast<int>(out.size()) != 1 + n_carried + n_scan) return ctx.Error("body output count mismatch");
    cond = out[0].ToDoubleVector().at(0) != 0;
    for (int i = 0; i < n_carried; ++i) carried[i] = out[1 + i];
    for (int i = 0; i < n_scan; ++i) {
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

}  // namespace

void RegisterControlFlowKernels() {
  RegisterKernel("If", If);
  RegisterKernel("Loop", Loop);
}

}  // namespace cjit
