#include "compiler/passes/quantization.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "flags/logging.h"
#include "compiler/passes/simplify.h"

namespace cjit {
namespace {

bool IsByte(DType t) { return t == DType::kU8 || t == DType::kI8; }

bool IsOp(const Node* n, const char* op) { return n != nullptr && n->op_type == op && n->domain.empty(); }

// A DequantizeLinear / QuantizeLinear's constant parameters: float32 scale (input 1) and, when present,
// zero point (input 2) of the same number of values.
struct QParams {
  Value* scale = nullptr;
  Value* zero_point = nullptr;  // null: absent (0)
  int64_t count = 0;
  int64_t axis = 1;
};

bool ReadQParams(const Node& n, QParams* p) {
  if (n.num_inputs() < 2 || n.input(1) == nullptr || !n.input(1)->is_constant()) return false;
  if (n.HasAttr("block_size") && n.GetInt("block_size", 0) != 0) return false;
  const Tensor& s = *n.input(1)->constant;
  if (s.dtype() != DType::kF32 || s.numel() < 1 || s.rank() > 1) return false;
  p->scale = n.input(1);
  p->count = s.numel();
  p->axis = n.GetInt("axis", 1);
  if (n.num_inputs() > 2 && n.input(2) != nullptr) {
    if (!n.input(2)->is_constant()) return false;
    const Tensor& z = *n.input(2)->constant;
    if (!IsByte(z.dtype()) && z.dtype() != DType::kI32) return false;
    if (z.numel() != p->count) return false;
    p->zero_point = n.input(2);
  }
  for (double v : s.ToDoubleVector()) {
    if (!(v > 0) || !std::isfinite(v)) return false;  // the fused kernels divide by scales
  }
  return true;
}

// The zero point of `p` as a value (a new constant 0 of `dtype` when absent).
Value* ZeroPointOf(Graph& g, const QParams& p, DType dtype, const std::string& name) {
  if (p.zero_point != nullptr) return p.zero_point;
  Tensor z(dtype, p.count == 1 ? Dims{} : Dims{p.count});
  std::memset(z.raw(), 0, z.nbytes());
  return g.AddConstant(name, std::move(z));
}

class Fuser {
 public:
  explicit Fuser(Graph& g) : g_(g) {
    for (const auto& n : g.nodes()) {
      for (const Value* v : n->inputs) if (v) ++reads_[v];
      for (const Value* v : n->implicit_inputs) ++reads_[v];
    }
    for (const Value* v : g.outputs()) reads_[v] += 2;
  }

  int Run() {
    int fused = 0;
    for (const auto& owned : g_.nodes()) {
      Node* q = owned.get();
      if (!IsOp(q, "QuantizeLinear") || q->input(0) == nullptr) continue;
      Node* op = q->input(0)->producer;
      if (op == nullptr || reads_[q->input(0)] != 1) continue;
      if (IsOp(op, "Conv") && FuseConv(q, op)) ++fused;
      else if (IsOp(op, "MatMul") && FuseMatMul(q, op)) ++fused;
    }
    return fused;
  }

 private:
  // DequantizeLinear producing `v` with byte input (its dtype in *t) and constant parameters; null otherwise.
  Node* Dq(Value* v, QParams* p, bool constant_input, DType* t) {
    if (v == nullptr) return nullptr;
    Node* dq = v->producer;
    if (!IsOp(dq, "DequantizeLinear") || dq->input(0) == nullptr || !ReadQParams(*dq, p)) return nullptr;
    Value* x = dq->input(0);
    if (constant_input && !x->is_constant()) return nullptr;
    // At load an intermediate value's dtype may not be inferred yet: the zero point's is the input's.
    *t = x->is_constant() ? x->constant->dtype() : x->dtype;
    if (*t == DType::kInvalid && p->zero_point != nullptr) *t = p->zero_point->constant->dtype();
    if (!IsByte(*t)) return nullptr;
    if (p->zero_point != nullptr && p->zero_point->constant->dtype() != *t) return nullptr;
    return dq;
  }

  // The QuantizeLinear's parameters with one value each; its output dtype in *t.
  bool QOut(Node* q, QParams* p, DType* t) {
    if (!ReadQParams(*q, p) || p->count != 1) return false;
    if (q->HasAttr("output_dtype")) return false;
    *t = p->zero_point != nullptr ? p->zero_point->constant->dtype() : DType::kU8;
    return IsByte(*t);
  }

  // Output-channel scales of a weight DQ along `axis` of a constant of rank `rank` with `channels` there.
  static bool PerChannelOk(const QParams& p, int64_t axis, int rank, int64_t channels) {
    if (p.count == 1) return true;
    int64_t a = p.axis < 0 ? p.axis + rank : p.axis;
    return a == axis && p.count == channels;
  }

  bool FuseConv(Node* q, Node* conv) {
    QParams xp, wp, yp;
    DType xt = DType::kInvalid, wt = DType::kInvalid, yt = DType::kInvalid;
    if (conv->num_inputs() < 2 || !QOut(q, &yp, &yt)) return false;
    Node* dqx = Dq(conv->input(0), &xp, false, &xt);
    Node* dqw = Dq(conv->input(1), &wp, true, &wt);
    if (dqx == nullptr || dqw == nullptr || xp.count != 1) return false;
    const Tensor& w = *dqw->input(0)->constant;
    if (w.rank() < 3 || !PerChannelOk(wp, 0, w.rank(), w.dim(0))) return false;
    const int64_t oc = w.dim(0);
    const double xs = xp.scale->constant->ToDoubleVector()[0];
    const std::vector<double> ws = wp.scale->constant->ToDoubleVector();
    Value* bias = nullptr;
    if (conv->num_inputs() > 2 && conv->input(2) != nullptr) {
      bias = QuantizedBias(conv->input(2), xs, ws, oc, conv->name);
      if (bias == nullptr) return false;
    }
    std::vector<Value*> ins = {dqx->input(0), xp.scale, ZeroPointOf(g_, xp, xt, conv->name + "/x_zero_point"),
                               dqw->input(0), wp.scale, ZeroPointOf(g_, wp, wt, conv->name + "/w_zero_point"),
                               yp.scale, ZeroPointOf(g_, yp, yt, conv->name + "/y_zero_point")};
    if (bias != nullptr) ins.push_back(bias);
    Rewrite(q, conv, "QLinearConv", std::move(ins));
    return true;
  }

  bool FuseMatMul(Node* q, Node* mm) {
    QParams ap, bp, yp;
    DType at = DType::kInvalid, bt = DType::kInvalid, yt = DType::kInvalid;
    if (mm->num_inputs() != 2 || !QOut(q, &yp, &yt)) return false;
    Node* dqa = Dq(mm->input(0), &ap, false, &at);
    Node* dqb = Dq(mm->input(1), &bp, true, &bt);
    if (dqa == nullptr || dqb == nullptr || ap.count != 1) return false;
    const Tensor& b = *dqb->input(0)->constant;
    if (b.rank() < 2 || !PerChannelOk(bp, b.rank() - 1, b.rank(), b.dim(b.rank() - 1))) return false;
    if (bp.count != 1 && b.rank() != 2) return false;  // QLinearMatMul's per-column scale is 1-D
    Rewrite(q, mm, "QLinearMatMul",
            {dqa->input(0), ap.scale, ZeroPointOf(g_, ap, at, mm->name + "/a_zero_point"), dqb->input(0), bp.scale,
             ZeroPointOf(g_, bp, bt, mm->name + "/b_zero_point"), yp.scale,
             ZeroPointOf(g_, yp, yt, mm->name + "/y_zero_point")});
    return true;
  }

  // The int32 bias of a fused convolution from `v`: DQ(int32 constant) with scale x_scale * w_scale[c] and
  // zero point 0, or a float32 constant quantized to that scale. Null when neither.
  Value* QuantizedBias(Value* v, double xs, const std::vector<double>& ws, int64_t oc, const std::string& name) {
    auto scale_at = [&](int64_t c) { return xs * ws[ws.size() == 1 ? 0 : c]; };
    Node* dq = v->producer;
    if (IsOp(dq, "DequantizeLinear")) {
      QParams bp;
      if (!ReadQParams(*dq, &bp) || dq->input(0) == nullptr || !dq->input(0)->is_constant()) return nullptr;
      const Tensor& b = *dq->input(0)->constant;
      if (b.dtype() != DType::kI32 || b.numel() != oc) return nullptr;
      if (bp.zero_point != nullptr) {
        for (double z : bp.zero_point->constant->ToDoubleVector()) {
          if (z != 0) return nullptr;
        }
      }
      const std::vector<double> bs = bp.scale->constant->ToDoubleVector();
      if (bp.count != 1 && bp.count != oc) return nullptr;
      for (int64_t c = 0; c < oc; ++c) {
        const double want = scale_at(c), have = bs[bs.size() == 1 ? 0 : c];
        if (std::fabs(have - want) > 1e-6 * want) return nullptr;
      }
      return dq->input(0);
    }
    if (!v->is_constant() || v->constant->dtype() != DType::kF32 || v->constant->numel() != oc) return nullptr;
    const std::vector<double> bf = v->constant->ToDoubleVector();
    Tensor b(DType::kI32, {oc});
    for (int64_t c = 0; c < oc; ++c) {
      const double q = std::nearbyint(bf[c] / scale_at(c));
      if (!(std::fabs(q) < 2147483647.0)) return nullptr;
      b.data<int32_t>()[c] = static_cast<int32_t>(q);
    }
    return g_.AddConstant(name + "/bias_int32", std::move(b));
  }

  // q becomes the integer op (keeping its output value and name); `op` is left unread (removed later).
  void Rewrite(Node* q, Node* op, const char* type, std::vector<Value*> ins) {
    q->op_type = type;
    q->domain.clear();
    q->name = op->name.empty() ? q->name : op->name;
    q->attrs = op->attrs;
    q->inputs = std::move(ins);
    q->opset_version = std::max<int64_t>(q->opset_version, 10);
    for (Value* v : q->inputs) if (v) ++reads_[v];
  }

  Graph& g_;
  std::unordered_map<const Value*, int> reads_;
};

}  // namespace

absl::StatusOr<int> FuseQdqIntoIntegerOps(Graph& graph) {
  Fuser f(graph);
  const int fused = f.Run();
  if (fused > 0) {
    RemoveDeadNodes(graph);
    graph.RemoveUnusedValues();
  }
  CJIT_VLOG(1) << "FuseQdqIntoIntegerOps: " << fused << " QDQ patterns fused into QLinearConv / QLinearMatMul";
  return fused;
}

}  // namespace cjit
