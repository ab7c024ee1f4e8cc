#include "compiler/passes/quantization.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/ops/op_registry.h"
#include "base/logging.h"
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
      else if (MovesValues(*op) && DropQdq(q, op)) ++fused;
    }
    for (const auto& owned : g_.nodes()) {
      if (FuseWeightDq(owned.get())) ++fused;
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

  // The weights of DequantizeLinear(constant W) as MatMulNBits describes them: codes of `bits` bits, and a
  // float32 scale and an integer zero point per (column j, block b of `block` rows of K), j-major.
  struct WeightCodes {
    Node* dq = nullptr;
    DType type = DType::kInvalid;  // W's: int8 / uint8 / int4 / uint4
    int bits = 8;
    int64_t block = 32;
    std::vector<float> scale;
    std::vector<int> zero_point;
  };

  // W [K, N] (k_axis 0) or [N, K] (k_axis 1) from a DequantizeLinear of a constant 8- or 4-bit tensor: per
  // tensor, per column, or blocked along K (opset 21) with a power-of-two block_size in [16, 65536] (what
  // MatMulNBits takes). False for anything else, which stays a float product.
  bool ReadWeightCodes(Value* v, int k_axis, WeightCodes* c) {
    Node* dq = v == nullptr ? nullptr : v->producer;
    if (!IsOp(dq, "DequantizeLinear") || dq->num_inputs() < 2 || dq->input(0) == nullptr ||
        !dq->input(0)->is_constant() || dq->input(1) == nullptr || !dq->input(1)->is_constant()) {
      return false;
    }
    const Tensor& w = *dq->input(0)->constant;
    const Tensor& s = *dq->input(1)->constant;
    const Tensor* z = dq->num_inputs() > 2 && dq->input(2) != nullptr
                          ? (dq->input(2)->is_constant() ? dq->input(2)->constant.get() : nullptr)
                          : nullptr;
    if (dq->num_inputs() > 2 && dq->input(2) != nullptr && z == nullptr) return false;
    c->type = w.dtype();
    if (w.rank() != 2 || (!IsByte(c->type) && c->type != DType::kI4 && c->type != DType::kU4)) return false;
    if (s.dtype() != DType::kF32 || (z != nullptr && (z->dtype() != c->type || z->dims() != s.dims()))) return false;
    const int64_t K = w.dim(k_axis), N = w.dim(1 - k_axis);
    if (K == 0 || N == 0) return false;
    const int64_t block = dq->GetInt("block_size", 0);
    const int64_t axis = dq->GetInt("axis", 1) < 0 ? dq->GetInt("axis", 1) + 2 : dq->GetInt("axis", 1);
    // Column j's block b finds its parameter at j * sj + b * sb, by granularity.
    int64_t sj = 0, sb = 0;  // per tensor
    if (s.numel() != 1 && block == 0) {
      if (s.rank() != 1 || axis != 1 - k_axis || s.dim(0) != N) return false;
      sj = 1;
    } else if (s.numel() != 1) {
      if (axis != k_axis || block < 16 || block > 65536 || (block & (block - 1)) != 0 || s.rank() != 2 ||
          s.dim(k_axis) != (K + block - 1) / block || s.dim(1 - k_axis) != N) {
        return false;
      }
      sj = k_axis == 0 ? 1 : s.dim(1);
      sb = k_axis == 0 ? N : 1;
    }
    c->dq = dq;
    c->bits = c->type == DType::kI4 || c->type == DType::kU4 ? 4 : 8;
    // Blocked 8-bit weights fold to float32 instead, as in ONNX Runtime (its fusion takes 4-bit ones): the
    // float32 products of MatMulNBits dequantize per run, slower than a float32 MatMul from 5 rows on and
    // level with it below (tools/weight-only-bench.sh).
    if (block > 0 && c->bits == 8) return false;
    c->block = block > 0 ? block : 32;
    const int64_t blocks = (K + c->block - 1) / c->block;
    const std::vector<double> sv = s.ToDoubleVector();
    const std::vector<double> zv = z != nullptr ? z->ToDoubleVector() : std::vector<double>(sv.size(), 0.0);
    c->scale.resize(N * blocks);
    c->zero_point.resize(N * blocks);
    for (int64_t j = 0; j < N; ++j) {
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t i = j * sj + b * sb;
        if (!(sv[i] > 0) || !std::isfinite(sv[i])) return false;
        c->scale[j * blocks + b] = static_cast<float>(sv[i]);
        c->zero_point[j * blocks + b] = static_cast<int>(zv[i]);
      }
    }
    return true;
  }

  // MatMul / Gemm of a float A and DQ(constant 8- or 4-bit W) whose result is not quantized again (a
  // classifier's last layer; an int4 / int8 weight-only quantized LLM's projections, as ONNX Runtime's
  // DQMatMulToMatMulNBits fusion takes them): MatMulNBits with the weights' codes, W kept in its bits (a
  // 1280 x 1000 product of one row reads 1.3 MB instead of 5.1 MB; 4-bit weights a quarter of that).
  bool FuseWeightDq(Node* n) {
    const bool gemm = IsOp(n, "Gemm");
    if ((!gemm && !IsOp(n, "MatMul")) || n->num_inputs() < 2 || n->outputs.size() != 1 || n->outputs[0] == nullptr ||
        reads_[n->outputs[0]] == 0 || n->input(0) == nullptr) {
      return false;  // (a product fused above is left unread)
    }
    if (gemm &&
        (n->GetInt("transA", 0) != 0 || n->GetFloat("alpha", 1.0f) != 1.0f || n->GetFloat("beta", 1.0f) != 1.0f)) {
      return false;
    }
    const bool tb = gemm && n->GetInt("transB", 0) != 0;
    WeightCodes c;
    if (!ReadWeightCodes(n->input(1), tb ? 1 : 0, &c)) return false;
    const Tensor& w = *c.dq->input(0)->constant;
    const int64_t K = tb ? w.dim(1) : w.dim(0), N = tb ? w.dim(0) : w.dim(1);
    Value* bias = nullptr;
    if (gemm && n->num_inputs() > 2 && n->input(2) != nullptr) {
      Value* cv = n->input(2);
      if (!cv->is_constant() || cv->constant->dtype() != DType::kF32 || cv->constant->numel() != N ||
          cv->constant->rank() < 1 || cv->constant->rank() > 2 || cv->constant->dims().back() != N) {
        return false;
      }
      Tensor b(DType::kF32, {N});
      std::memcpy(b.raw(), cv->constant->raw(), N * sizeof(float));
      bias = g_.AddConstant(n->name + "/bias", std::move(b));
    }
    // Codes unsigned (signed W and its zero point shifted by 2^(bits-1): the difference stays); the padding
    // rows of a partial last block hold the zero point. 4-bit codes and zero points two per byte, the first
    // in the low nibble (MatMulNBits' packing).
    const int64_t block = c.block, blocks = (K + block - 1) / block;
    const bool is_signed = c.type == DType::kI8 || c.type == DType::kI4;
    const int shift = is_signed ? 1 << (c.bits - 1) : 0;
    const int64_t row_bytes = block * c.bits / 8, zp_row = (blocks * c.bits + 7) / 8;
    Tensor codes(DType::kU8, {N, blocks, row_bytes}), scales(DType::kF32, {N * blocks}), zps(DType::kU8, {N * zp_row});
    std::memset(codes.raw(), 0, codes.nbytes());
    std::memset(zps.raw(), 0, zps.nbytes());
    uint8_t* cp = codes.data<uint8_t>();
    uint8_t* zpp = zps.data<uint8_t>();
    auto put = [&](uint8_t* row, int64_t i, int v) {
      if (c.bits == 8) row[i] = static_cast<uint8_t>(v);
      else row[i / 2] = static_cast<uint8_t>(row[i / 2] | ((v & 0xF) << (4 * (i % 2))));
    };
    for (int64_t j = 0; j < N; ++j) {
      for (int64_t b = 0; b < blocks; ++b) {
        const int z = c.zero_point[j * blocks + b] + shift;
        scales.data<float>()[j * blocks + b] = c.scale[j * blocks + b];
        put(zpp + j * zp_row, b, z);
        uint8_t* row = cp + (j * blocks + b) * row_bytes;
        for (int64_t i = 0; i < block; ++i) {
          const int64_t k = b * block + i;
          const int64_t e = tb ? j * K + k : k * N + j;
          const int v = k >= K ? z : is_signed ? static_cast<const int8_t*>(w.raw())[e] + shift
                                              : static_cast<const uint8_t*>(w.raw())[e];
          put(row, i, v);
        }
      }
    }
    std::vector<Value*> ins = {n->input(0), g_.AddConstant(n->name + "/B", std::move(codes)),
                               g_.AddConstant(n->name + "/scales", std::move(scales)),
                               g_.AddConstant(n->name + "/zero_points", std::move(zps))};
    if (bias != nullptr) {
      ins.push_back(nullptr);
      ins.push_back(bias);
    }
    n->op_type = "MatMulNBits";
    n->domain = std::string(kInternalDomain);
    n->opset_version = 1;
    n->attrs.clear();
    n->attrs["K"] = Attribute::Int(K);
    n->attrs["N"] = Attribute::Int(N);
    n->attrs["bits"] = Attribute::Int(c.bits);
    n->attrs["block_size"] = Attribute::Int(block);
    n->inputs = std::move(ins);
    for (Value* v : n->inputs) if (v) ++reads_[v];
    return true;
  }

  // Ops whose outputs are input values (of input 0), moved or selected, with one output.
  static bool MovesValues(const Node& n) {
    static const char* const kOps[] = {"MaxPool", "Reshape",  "Transpose", "Flatten",      "Squeeze",     "Unsqueeze",
                                       "Identity", "Slice",   "Gather",    "DepthToSpace", "SpaceToDepth"};
    if (!n.domain.empty() || n.num_inputs() < 1) return false;
    for (size_t k = 1; k < n.outputs.size(); ++k) {
      if (n.outputs[k] != nullptr) return false;  // MaxPool's Indices
    }
    return std::any_of(std::begin(kOps), std::end(kOps), [&](const char* op) { return n.op_type == op; });
  }

  // Q(op(DQ(x), ...)) -> op(x, ...) when the DQ and the Q quantize alike (one scale, zero point and dtype).
  bool DropQdq(Node* q, Node* op) {
    QParams xp, yp;
    DType xt = DType::kInvalid, yt = DType::kInvalid;
    if (!QOut(q, &yp, &yt)) return false;
    Node* dq = Dq(op->input(0), &xp, false, &xt);
    if (dq == nullptr || xp.count != 1 || xt != yt) return false;
    auto zero_point = [](const QParams& p) {
      return p.zero_point == nullptr ? 0.0 : p.zero_point->constant->ToDoubleVector()[0];
    };
    if (xp.scale->constant->ToDoubleVector()[0] != yp.scale->constant->ToDoubleVector()[0] ||
        zero_point(xp) != zero_point(yp)) {
      return false;
    }
    q->op_type = op->op_type;
    q->domain = op->domain;
    q->name = op->name.empty() ? q->name : op->name;
    q->attrs = op->attrs;
    for (Value* v : q->inputs) if (v) --reads_[v];  // the op's output is now unread
    q->inputs = op->inputs;
    q->inputs[0] = dq->input(0);
    q->opset_version = op->opset_version;
    for (Value* v : q->inputs) if (v) ++reads_[v];
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
    for (Value* v : q->inputs) if (v) --reads_[v];  // the float op's output is now unread
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
  CJIT_VLOG(1) << "FuseQdqIntoIntegerOps: " << fused
               << " QDQ patterns fused into QLinearConv / QLinearMatMul or ops on the bytes";
  return fused;
}

namespace {

// Symmetric int8 per output channel: channel c holds `count` values at w[c * cs + i * is] (i < count).
// Returns false when a value is not finite (such a weight is left float32).
bool QuantizeChannelsInt8(const float* w, int64_t channels, int64_t count, int64_t cs, int64_t is, int8_t* q,
                          int64_t qcs, int64_t qis, float* scales) {
  // Walk in memory order (a MatMul's [K, N] weights hold a column's values N apart): channel maxima first,
  // then the codes. The callers' q strides follow w's, so both walks are sequential.
  const bool channel_inner = cs < is;
  const int64_t outer = channel_inner ? count : channels, inner = channel_inner ? channels : count;
  auto at = [&](int64_t o, int64_t i) { return channel_inner ? i * cs + o * is : o * cs + i * is; };
  auto qat = [&](int64_t o, int64_t i) { return channel_inner ? i * qcs + o * qis : o * qcs + i * qis; };
  std::vector<float> m(static_cast<size_t>(channels), 0.0f);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const float v = w[at(o, i)];
      if (!std::isfinite(v)) return false;
      float& mc = m[channel_inner ? i : o];
      mc = std::max(mc, std::fabs(v));
    }
  }
  for (int64_t c = 0; c < channels; ++c) {
    scales[c] = m[c] / 127.0f;
    if (!(scales[c] > 0)) scales[c] = 1.0f;  // all zeros, or values so small that the scale underflows
  }
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const float r = std::nearbyint(w[at(o, i)] / scales[channel_inner ? i : o]);
      q[qat(o, i)] = static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f));
    }
  }
  return true;
}

class AutoQuantizer {
 public:
  AutoQuantizer(Graph& g, const AutoQuantizeOptions& o) : g_(g), o_(o) {}

  absl::StatusOr<std::vector<std::string>> Run() {
    std::vector<Node*> candidates;
    for (const auto& n : g_.nodes()) candidates.push_back(n.get());
    std::vector<std::string> done;
    for (Node* n : candidates) {
      if (!n->domain.empty() || !o_.op_types.count(n->op_type) || o_.denied_nodes.count(n->name)) continue;
      if (n->outputs.size() != 1 || n->outputs[0] == nullptr || n->num_inputs() < 2) continue;
      Value* w = n->input(1);
      if (w == nullptr || !w->is_constant() || w->constant->dtype() != DType::kF32) continue;
      if (w->constant->numel() < std::max<int64_t>(o_.min_weights, 1)) continue;
      if (o_.rule && !o_.rule(*n)) continue;
      bool ok = false;
      if (n->op_type == "Conv") ok = o_.mode == AutoQuantizeOptions::Mode::kDynamic && Conv(n);
      else if (n->op_type == "MatMul" || n->op_type == "Gemm") ok = Product(n);
      if (ok) done.push_back(n->name);
    }
    return done;
  }

 private:
  // Value and node names: the node's name (not unique in every model) and a per-pass counter.
  std::string Name(const Node* n, const char* what) {
    auto [it, added] = ids_.try_emplace(n, static_cast<int>(ids_.size()));
    return absl::StrCat(n->name, "/auto_quantize", it->second, "/", what);
  }

  Node* Add(const char* op, const Node* at, const char* what, std::vector<Value*> ins, DType out) {
    Node* m = g_.AddNode(op, Name(at, what), std::move(ins), {Name(at, what)});
    m->opset_version = std::max<int64_t>(g_.opset, 13);
    m->outputs[0]->dtype = out;
    return m;
  }

  Value* Constant(const Node* at, const char* what, Tensor t) { return g_.AddConstant(Name(at, what), std::move(t)); }

  // (Aq, a_scale, a_zero_point) of a float activation: one DynamicQuantizeLinear per value.
  const std::vector<Value*>& Quantized(Value* a) {
    auto it = dql_.find(a);
    if (it != dql_.end()) return it->second;
    const std::string base = absl::StrCat(a->name, "/auto_quantize/DynamicQuantizeLinear");
    Node* q = g_.AddNode("DynamicQuantizeLinear", base, {a}, {base + ":0", base + ":1", base + ":2"});
    q->opset_version = std::max<int64_t>(g_.opset, 11);
    q->outputs[0]->dtype = DType::kU8;
    q->outputs[1]->dtype = DType::kF32;
    q->outputs[2]->dtype = DType::kU8;
    return dql_[a] = q->outputs;
  }

  // The node becomes `op` over `ins` (keeping its output value and name).
  static void Become(Node* n, const char* op, std::vector<Value*> ins) {
    n->op_type = op;
    n->domain.clear();
    n->attrs.clear();
    n->inputs = std::move(ins);
    n->opset_version = 14;
  }

  // Gemm's C term as something to add to the product: beta * C (a new constant when beta != 1), or null
  // when absent; *ok = false when C is not constant and beta != 1.
  Value* GemmAddend(Node* n, bool* ok) {
    *ok = true;
    Value* c = n->input(2);
    if (c == nullptr) return nullptr;
    const float beta = n->GetFloat("beta", 1.0f);
    if (beta == 1.0f) return c;
    if (!c->is_constant() || c->constant->dtype() != DType::kF32) {
      *ok = false;
      return nullptr;
    }
    Tensor t(DType::kF32, c->constant->dims());
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = beta * c->constant->data<float>()[i];
    return Constant(n, "beta_C", std::move(t));
  }

  bool Product(Node* n) {
    const Tensor& w = *n->input(1)->constant;
    if (w.rank() != 2) return false;
    const bool gemm = n->op_type == "Gemm";
    if (gemm && n->GetInt("transA", 0) != 0) return false;
    const bool tb = gemm && n->GetInt("transB", 0) != 0;
    const int64_t K = tb ? w.dim(1) : w.dim(0), N = tb ? w.dim(0) : w.dim(1);
    const int64_t sk = tb ? 1 : N, sn = tb ? K : 1;
    const float alpha = gemm ? n->GetFloat("alpha", 1.0f) : 1.0f;
    const float* wd = w.data<float>();
    for (int64_t i = 0; i < w.numel(); ++i) {
      if (!std::isfinite(wd[i])) return false;
    }
    bool ok = std::isfinite(alpha);
    Value* addend = gemm && ok ? GemmAddend(n, &ok) : nullptr;
    if (!ok) return false;
    Value* a = n->input(0);
    if (o_.mode == AutoQuantizeOptions::Mode::kWeightOnly) {
      const int64_t blocks = (K + o_.block_size - 1) / o_.block_size;
      Tensor packed(DType::kU8, {N, blocks, o_.block_size * o_.weight_bits / 8});
      Tensor scales(DType::kF32, {N * blocks});
      QuantizeWeightsNBits(wd, K, N, sk, sn, o_.weight_bits, o_.block_size, packed.data<uint8_t>(),
                           scales.data<float>());
      for (int64_t i = 0; i < scales.numel(); ++i) scales.data<float>()[i] *= alpha;
      std::vector<Value*> ins = {a, Constant(n, "B", std::move(packed)), Constant(n, "scales", std::move(scales))};
      // A constant [N] / [1, N] term is MatMulNBits' bias; anything else an Add after it.
      if (addend != nullptr && addend->is_constant() && addend->constant->numel() == N &&
          addend->constant->rank() >= 1 && addend->constant->dims().back() == N && addend->constant->rank() <= 2) {
        Tensor bias(DType::kF32, {N});
        std::memcpy(bias.raw(), addend->constant->raw(), N * sizeof(float));
        ins.push_back(nullptr);
        ins.push_back(nullptr);
        ins.push_back(Constant(n, "bias", std::move(bias)));
        addend = nullptr;
      }
      Node* m = n;
      if (addend != nullptr) m = Add("MatMulNBits", n, "MatMulNBits", {}, DType::kF32);
      Become(m, "MatMulNBits", std::move(ins));
      m->domain = std::string(kInternalDomain);
      m->opset_version = 1;
      m->attrs["K"] = Attribute::Int(K);
      m->attrs["N"] = Attribute::Int(N);
      m->attrs["bits"] = Attribute::Int(o_.weight_bits);
      m->attrs["block_size"] = Attribute::Int(o_.block_size);
      if (addend != nullptr) Become(n, "Add", {m->outputs[0], addend});
      return true;
    }
    Tensor q(DType::kI8, {K, N});
    std::vector<float> ws(N);
    if (!QuantizeChannelsInt8(wd, N, K, sn, sk, q.data<int8_t>(), 1, N, ws.data())) return false;
    Tensor scale(DType::kF32, {N});
    for (int64_t j = 0; j < N; ++j) scale.data<float>()[j] = ws[j] * alpha;
    const std::vector<Value*>& aq = Quantized(a);
    Node* mm = Add("MatMulInteger", n, "MatMulInteger", {aq[0], Constant(n, "B_int8", std::move(q)), aq[2]},
                   DType::kI32);
    ScaleIntegerProduct(n, mm, aq[1], std::move(scale), addend);
    return true;
  }

  // The float result of an integer product `op` (MatMulInteger / ConvInteger, int32): n becomes
  // Cast(op) * (a_scale * w_scale) [+ addend], keeping its output value.
  void ScaleIntegerProduct(Node* n, Node* op, Value* a_scale, Tensor w_scale, Value* addend) {
    op->opset_version = std::max<int64_t>(g_.opset, 10);
    Node* f = Add("Cast", n, "Cast", {op->outputs[0]}, DType::kF32);
    f->attrs["to"] = Attribute::Int(1);
    Node* s = Add("Mul", n, "scale", {a_scale, Constant(n, "w_scale", std::move(w_scale))}, DType::kF32);
    if (addend == nullptr) {
      Become(n, "Mul", {f->outputs[0], s->outputs[0]});
    } else {
      Node* y = Add("Mul", n, "scaled", {f->outputs[0], s->outputs[0]}, DType::kF32);
      Become(n, "Add", {y->outputs[0], addend});
    }
  }

  bool Conv(Node* n) {
    const Tensor& w = *n->input(1)->constant;
    if (w.rank() < 3) return false;
    Value* bias = n->input(2);
    if (bias != nullptr && (!bias->is_constant() || bias->constant->dtype() != DType::kF32 ||
                            bias->constant->numel() != w.dim(0))) {
      return false;
    }
    const int64_t oc = w.dim(0), per = w.numel() / std::max<int64_t>(oc, 1);
    Tensor q(DType::kI8, w.dims());
    std::vector<float> ws(oc);
    if (!QuantizeChannelsInt8(w.data<float>(), oc, per, per, 1, q.data<int8_t>(), per, 1, ws.data())) return false;
    Dims bdims(w.rank(), 1);
    bdims[1] = oc;
    Tensor scale(DType::kF32, bdims);
    std::memcpy(scale.raw(), ws.data(), oc * sizeof(float));
    const std::vector<Value*>& xq = Quantized(n->input(0));
    Node* ci = Add("ConvInteger", n, "ConvInteger", {xq[0], Constant(n, "W_int8", std::move(q)), xq[2]}, DType::kI32);
    ci->attrs = n->attrs;
    Value* addend = nullptr;
    if (bias != nullptr) {
      Tensor b(DType::kF32, bdims);
      std::memcpy(b.raw(), bias->constant->raw(), oc * sizeof(float));
      addend = Constant(n, "B", std::move(b));
    }
    ScaleIntegerProduct(n, ci, xq[1], std::move(scale), addend);
    return true;
  }

  Graph& g_;
  const AutoQuantizeOptions& o_;
  std::unordered_map<Value*, std::vector<Value*>> dql_;
  std::unordered_map<const Node*, int> ids_;
};

}  // namespace

void QuantizeWeightsNBits(const float* w, int64_t K, int64_t N, int64_t stride_k, int64_t stride_n, int bits,
                          int64_t block_size, uint8_t* packed, float* scales) {
  std::vector<float> wt;
  if (stride_k != 1) {
    // W^T [N, K] in 32 x 32 tiles first: the blocks below then read K-contiguous runs.
    wt.resize(static_cast<size_t>(N * K));
    for (int64_t k0 = 0; k0 < K; k0 += 32) {
      for (int64_t n0 = 0; n0 < N; n0 += 32) {
        for (int64_t k = k0; k < std::min(K, k0 + 32); ++k) {
          for (int64_t n = n0; n < std::min(N, n0 + 32); ++n) wt[n * K + k] = w[k * stride_k + n * stride_n];
        }
      }
    }
    w = wt.data();
    stride_k = 1;
    stride_n = K;
  }
  const int64_t blocks = (K + block_size - 1) / block_size, blob = block_size * bits / 8;
  const int zp = 1 << (bits - 1), qmax = zp - 1;
  std::memset(packed, 0, static_cast<size_t>(N * blocks * blob));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t k0 = b * block_size, k1 = std::min(K, k0 + block_size);
      float m = 0;
      for (int64_t k = k0; k < k1; ++k) m = std::max(m, std::fabs(w[k * stride_k + n * stride_n]));
      float s = m / static_cast<float>(qmax);
      if (!(s > 0)) s = 1.0f;  // all zeros, or values so small that the scale underflows
      scales[n * blocks + b] = s;
      uint8_t* out = packed + (n * blocks + b) * blob;
      for (int64_t i = 0; i < block_size; ++i) {
        int code = zp;
        if (k0 + i < k1) {
          const float r = std::nearbyint(w[(k0 + i) * stride_k + n * stride_n] / s);
          code = static_cast<int>(std::clamp(r, static_cast<float>(-qmax), static_cast<float>(qmax))) + zp;
        }
        out[(i * bits) / 8] |= static_cast<uint8_t>(code << ((i * bits) % 8));
      }
    }
  }
}

absl::StatusOr<std::vector<std::string>> AutoQuantize(Graph& graph, const AutoQuantizeOptions& options) {
  if (options.mode == AutoQuantizeOptions::Mode::kWeightOnly) {
    const int b = options.weight_bits;
    const int64_t bs = options.block_size;
    if ((b != 2 && b != 4 && b != 8) || bs < 16 || (bs & (bs - 1)) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("AutoQuantize: weight_only needs 2, 4 or 8 bits (got ", b,
                                                     ") and a power-of-two block size >= 16 (got ", bs, ")"));
    }
  }
  AutoQuantizer q(graph, options);
  CJIT_ASSIGN_OR_RETURN(std::vector<std::string> done, q.Run());
  if (!done.empty()) graph.RemoveUnusedValues();
  CJIT_VLOG(1) << "AutoQuantize: " << done.size() << " nodes quantized";
  return done;
}

}  // namespace cjit
