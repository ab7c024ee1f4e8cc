// LSTM, GRU and RNN (ONNX operator specification, opsets 7-14 semantics incl. layout, peepholes,
// sequence_lens, clip, input_forget, linear_before_reset, bidirectional). Plain loops in float/double.
#include <cmath>
#include <map>
#include <set>

#include "compiler/codegen/fusion_plan.h"
#include "base/status_macros.h"
#include "runtime/cpu/conv_gemm.h"
#include "runtime/cpu/dispatch.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/parallel.h"

namespace cjit {
namespace {

struct Activation {
  enum class Kind { kSigmoid, kTanh, kRelu, kAffine, kLeakyRelu, kThresholdedRelu, kScaledTanh, kHardSigmoid, kElu,
                    kSoftsign, kSoftplus };
  std::string name;
  Kind kind = Kind::kSigmoid;
  double alpha = 0, beta = 0;
  // By an enum, not the name: this runs gates * H times per time step (string compares per element were
  // most of a 128-unit LSTM step).
  double operator()(double x) const {
    switch (kind) {
      case Kind::kSigmoid: return 1.0 / (1.0 + std::exp(-x));
      case Kind::kTanh: return std::tanh(x);
      case Kind::kRelu: return x > 0 ? x : 0;
      case Kind::kAffine: return alpha * x + beta;
      case Kind::kLeakyRelu: return x < 0 ? alpha * x : x;
      case Kind::kThresholdedRelu: return x > alpha ? x : 0;
      case Kind::kScaledTanh: return alpha * std::tanh(beta * x);
      case Kind::kHardSigmoid: return std::max(0.0, std::min(1.0, alpha * x + beta));
      case Kind::kElu: return x < 0 ? alpha * (std::exp(x) - 1) : x;
      case Kind::kSoftsign: return x / (1 + std::abs(x));
      case Kind::kSoftplus: return std::log1p(std::exp(x));
    }
    return x;
  }
};

absl::StatusOr<std::vector<Activation>> Activations(const KernelContext& ctx, std::vector<std::string> dflt,
                                                    int num_dir) {
  std::vector<std::string> names;
  auto it = ctx.node->attrs.find("activations");
  if (it != ctx.node->attrs.end()) names = it->second.strings;
  std::vector<float> alphas = ctx.node->GetFloats("activation_alpha"), betas = ctx.node->GetFloats("activation_beta");
  size_t per = dflt.size();
  std::vector<Activation> out;
  for (size_t i = 0; i < per * num_dir; ++i) {
    Activation a;
    a.name = i < names.size() ? names[i] : dflt[i % per];
    static const std::map<std::string, std::pair<double, double>> kDefaults = {
        {"LeakyRelu", {0.01, 0}}, {"ThresholdedRelu", {1.0, 0}}, {"ScaledTanh", {1.0, 1.0}},
        {"HardSigmoid", {0.2, 0.5}}, {"Elu", {1.0, 0}}, {"Affine", {1.0, 0}}};
    auto d = kDefaults.find(a.name);
    if (d != kDefaults.end()) { a.alpha = d->second.first; a.beta = d->second.second; }
    if (i < alphas.size()) a.alpha = alphas[i];
    if (i < betas.size()) a.beta = betas[i];
    using K = Activation::Kind;
    static const std::map<std::string, K> kKnown = {
        {"Sigmoid", K::kSigmoid}, {"Tanh", K::kTanh}, {"Relu", K::kRelu}, {"Affine", K::kAffine},
        {"LeakyRelu", K::kLeakyRelu}, {"ThresholdedRelu", K::kThresholdedRelu}, {"ScaledTanh", K::kScaledTanh},
        {"HardSigmoid", K::kHardSigmoid}, {"Elu", K::kElu}, {"Softsign", K::kSoftsign}, {"Softplus", K::kSoftplus}};
    auto known = kKnown.find(a.name);
    if (known == kKnown.end()) return ctx.Error("unsupported activation " + a.name);
    a.kind = known->second;
    out.push_back(a);
  }
  return out;
}

// What the float32 path needs of one node (validated by Recurrent before).
struct RecurrentF32Args {
  int kind = 0, nd = 1, gates = 1;
  bool batch_major = false, reverse_only = false, lbr = false;
  int64_t S = 0, B = 0, I = 0, H = 0;
  const std::vector<double>* bias = nullptr;  // [nd, 2 * gates * H]: Wb then Rb
  const std::vector<int64_t>* lens = nullptr;
  const std::vector<double>* h0 = nullptr;    // [nd, B, H]
  const std::vector<double>* c0 = nullptr;
};

// The float32 recurrence with the default activations and no clip, peepholes or input_forget: the input
// projections of all steps in one GEMM with the biases that sit outside the reset gate folded in (as ONNX
// Runtime does), then per step one matrix-vector product by R and the gates in float with the vector
// logistic and tanh (conv_gemm.h ApplyUnaryPostOps: ExpV / TanhV). The directions of a bidirectional node
// are independent and run on two threads when there is enough work. The general loop below computed the
// gates in double with per-element std::exp / std::tanh: a 2 x 128 bidirectional LSTM step took 11 us
// (ORT 3.3).
absl::Status RecurrentF32(KernelContext& ctx, const RecurrentF32Args& a) {
  const Tensor& X = ctx.in(0);
  const int64_t S = a.S, B = a.B, I = a.I, H = a.H, G = a.gates * H;
  auto op = [](PostOp::Kind k) {
    PostOp p;
    p.kind = k;
    return std::vector<PostOp>{p};
  };
  static const std::vector<PostOp> kSigmoid = op(PostOp::Kind::kSigmoid), kTanh = op(PostOp::Kind::kTanh);
  Tensor* Y = ctx.wants(0) ? &ctx.Alloc(0, DType::kF32, a.batch_major ? Dims{B, S, a.nd, H} : Dims{S, a.nd, B, H})
                           : nullptr;
  const Dims state_dims = a.batch_major ? Dims{B, a.nd, H} : Dims{a.nd, B, H};
  Tensor* Yh = ctx.wants(1) ? &ctx.Alloc(1, DType::kF32, state_dims) : nullptr;
  Tensor* Yc = a.kind == 2 && ctx.wants(2) ? &ctx.Alloc(2, DType::kF32, state_dims) : nullptr;
  if (Y) std::fill(Y->data<float>(), Y->data<float>() + Y->numel(), 0.0f);  // steps past sequence_lens
  auto y_at = [&](int64_t t, int d, int64_t b) {
    return Y->data<float>() + (a.batch_major ? ((b * S + t) * a.nd + d) * H : ((t * a.nd + d) * B + b) * H);
  };
  auto state_at = [&](Tensor* T, int d, int64_t b) {
    return T->data<float>() + (a.batch_major ? (b * a.nd + d) * H : (d * B + b) * H);
  };
  // Input projections, rows in X's order (t * B + b, or b * S + t with layout = 1), biases folded: all of
  // Wb and Rb, except GRU's Rbh with linear_before_reset, which the reset gate multiplies.
  std::vector<std::vector<float>> xw(a.nd, std::vector<float>(static_cast<size_t>(S * B * G)));
  // Constant W and R (as exported): packed once into the panels of the pointwise convolutions' loop
  // (conv_gemm.h PackPanelWeights), where the CPU has it; else BLIS / Eigen on the plain weights.
  // GRU without linear_before_reset multiplies R's hidden-gate rows by r (.) h: a separate product.
  const int64_t rows_h = a.kind == 1 && !a.lbr ? 2 * H : G;
  std::vector<std::optional<PanelWeights>> r_main(a.nd), r_hidden(a.nd);
  for (int d = 0; d < a.nd; ++d) {
    const double* wb = a.bias->data() + d * 2 * G;
    const double* rb = wb + G;
    std::vector<float> fold(G);
    for (int64_t g = 0; g < G; ++g) {
      const bool reset_gated = a.kind == 1 && a.lbr && g >= 2 * H;
      fold[g] = static_cast<float>(wb[g] + (reset_gated ? 0.0 : rb[g]));
    }
    if (std::optional<PanelWeights> pw = PackPanelWeights(ctx, 1, d * G * I, true, I, G); pw && S * B > 0) {
      PanelMultiply(*pw, X.data<float>(), S * B, fold.data(), xw[d].data(), ctx.threads);
    } else {
      const float* wf = ctx.in(1).data<float>() + d * G * I;
      if (S * B > 0 && !Sgemm(false, true, S * B, G, I, 1.0f, X.data<float>(), I, wf, I, 0.0f, xw[d].data(), G)) {
        return ctx.Error("input projection GEMM: invalid arguments");
      }
      for (int64_t row = 0; row < S * B; ++row) {
        float* p = xw[d].data() + row * G;
        for (int64_t g = 0; g < G; ++g) p[g] += fold[g];
      }
    }
    r_main[d] = PackPanelWeights(ctx, 2, d * G * H, true, H, rows_h);
    if (rows_h != G) r_hidden[d] = PackPanelWeights(ctx, 2, d * G * H + 2 * H * H, true, H, H);
  }
  // out [rows] = R rows [row0, row0 + rows) of direction d times v [H].
  auto r_product = [&](int d, bool hidden_rows, const float* v, float* out) {
    const std::optional<PanelWeights>& p = hidden_rows ? r_hidden[d] : r_main[d];
    if (p) {
      PanelMultiply(*p, v, 1, nullptr, out, 1);
      return;
    }
    using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const int64_t rows = hidden_rows ? H : rows_h;
    const float* rf = ctx.in(2).data<float>() + d * G * H + (hidden_rows ? 2 * H * H : 0);
    Eigen::Map<Eigen::VectorXf>(out, rows).noalias() =
        Eigen::Map<const RowMatrix>(rf, rows, H) * Eigen::Map<const Eigen::VectorXf>(v, H);
  };
  auto run_direction = [&](int d) {
    const bool reverse = a.reverse_only || d == 1;
    const double* rbh = a.bias->data() + d * 2 * G + G + 2 * H;  // GRU: Rb of the hidden gate
    std::vector<float> h(H), c(H), gates(G), gh(G), tmp(H);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t k = 0; k < H; ++k) {
        h[k] = static_cast<float>((*a.h0)[(d * B + b) * H + k]);
        c[k] = static_cast<float>((*a.c0)[(d * B + b) * H + k]);
      }
      const int64_t len = std::min<int64_t>((*a.lens)[b], S);
      for (int64_t step = 0; step < len; ++step) {
        const int64_t t = reverse ? len - 1 - step : step;
        const float* xr = xw[d].data() + (a.batch_major ? b * S + t : t * B + b) * G;
        if (a.kind == 0) {  // RNN: h = tanh(x + R h)
          r_product(d, false, h.data(), gates.data());
          for (int64_t k = 0; k < H; ++k) gates[k] += xr[k];
          ApplyUnaryPostOps(gates.data(), h.data(), H, kTanh, 1);
        } else if (a.kind == 2) {  // LSTM, gates i, o, f, c
          r_product(d, false, h.data(), gates.data());
          for (int64_t g = 0; g < G; ++g) gates[g] += xr[g];
          ApplyUnaryPostOps(gates.data(), gates.data(), 3 * H, kSigmoid, 1);
          ApplyUnaryPostOps(gates.data() + 3 * H, gates.data() + 3 * H, H, kTanh, 1);
          for (int64_t k = 0; k < H; ++k) c[k] = gates[2 * H + k] * c[k] + gates[k] * gates[3 * H + k];
          ApplyUnaryPostOps(c.data(), tmp.data(), H, kTanh, 1);
          for (int64_t k = 0; k < H; ++k) h[k] = gates[H + k] * tmp[k];
        } else {  // GRU, gates z, r, h (r_product: all three gates' rows with linear_before_reset, else z, r)
          r_product(d, false, h.data(), gh.data());
          for (int64_t g = 0; g < 2 * H; ++g) gates[g] = xr[g] + gh[g];
          ApplyUnaryPostOps(gates.data(), gates.data(), 2 * H, kSigmoid, 1);
          if (a.lbr) {  // hh = tanh(xh + r (.) (Rh h + Rbh))
            for (int64_t k = 0; k < H; ++k) {
              tmp[k] = xr[2 * H + k] + gates[H + k] * (gh[2 * H + k] + static_cast<float>(rbh[k]));
            }
          } else {  // hh = tanh(xh + (r (.) h) Rh^T + Rbh), Rbh folded into xh
            for (int64_t k = 0; k < H; ++k) tmp[k] = gates[H + k] * h[k];
            r_product(d, true, tmp.data(), gh.data() + 2 * H);
            for (int64_t k = 0; k < H; ++k) tmp[k] = xr[2 * H + k] + gh[2 * H + k];
          }
          ApplyUnaryPostOps(tmp.data(), tmp.data(), H, kTanh, 1);
          for (int64_t k = 0; k < H; ++k) h[k] = (1.0f - gates[k]) * tmp[k] + gates[k] * h[k];
        }
        if (Y) std::copy(h.begin(), h.end(), y_at(t, d, b));
      }
      if (Yh) std::copy(h.begin(), h.end(), state_at(Yh, d, b));
      if (Yc) std::copy(c.begin(), c.end(), state_at(Yc, d, b));
    }
  };
  const int nt = a.nd == 2 ? ThreadsForWork(std::min(ctx.threads, 2), static_cast<double>(S) * B * G * H) : 1;
  ParallelFor(nt, a.nd, [&](int64_t d) { run_direction(static_cast<int>(d)); });
  return absl::OkStatus();
}

// A recurrent node resolved: RecurrentF32Args (its pointers into the vectors below) plus what only the
// general loop handles, and the operands as double (initial states direction-major [nd, B, H]).
struct RecurrentSpec : RecurrentF32Args {
  double clip = 0;
  bool input_forget = false;
  std::vector<std::string> dflt;  // the default activations of one direction
  std::vector<Activation> acts;   // dflt.size() per direction
  std::vector<double> bias, h0, c0, P;
  std::vector<int64_t> lens;
};

// Reads and checks the attributes and operands of an RNN (kind 0), GRU (1) or LSTM (2) against the ONNX
// signature (X [S, B, I] or [B, S, I] with layout=1).
absl::Status ResolveRecurrent(const KernelContext& ctx, int kind, RecurrentSpec* s) {
  const Node& n = *ctx.node;
  const Tensor& X = ctx.in(0);
  s->kind = kind;
  s->batch_major = n.GetInt("layout", 0) == 1;
  const std::string direction = n.GetString("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional") {
    return ctx.Error(absl::StrCat("unsupported direction '", direction, "'"));
  }
  s->reverse_only = direction == "reverse";
  const int nd = s->nd = direction == "bidirectional" ? 2 : 1;
  int64_t H = n.GetInt("hidden_size", 0);
  const int gates = s->gates = kind == 0 ? 1 : kind == 1 ? 3 : 4;
  if (H <= 0) H = ctx.in(2).dim(2);
  s->H = H;
  if (X.rank() != 3) return ctx.Error(absl::StrCat("X must be 3-D, got ", DimsToString(X.dims())));
  const int64_t S = s->S = X.dim(s->batch_major ? 1 : 0), B = s->B = X.dim(s->batch_major ? 0 : 1);
  const int64_t I = s->I = X.dim(2);
  s->clip = n.GetFloat("clip", 0.0f);
  s->input_forget = n.GetInt("input_forget", 0) != 0;
  s->lbr = n.GetInt("linear_before_reset", 0) != 0;
  s->dflt = kind == 0   ? std::vector<std::string>{"Tanh"}
            : kind == 1 ? std::vector<std::string>{"Sigmoid", "Tanh"}
                        : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
  CJIT_ASSIGN_OR_RETURN(s->acts, Activations(ctx, s->dflt, nd));
  auto expect = [&](int i, const char* what, Dims want) -> absl::Status {
    if (!ctx.has(i) || ctx.in(i).dims() == want) return absl::OkStatus();
    return ctx.Error(
        absl::StrCat(what, " must have dims ", DimsToString(want), ", got ", DimsToString(ctx.in(i).dims())));
  };
  const Dims state_dims = s->batch_major ? Dims{B, nd, H} : Dims{nd, B, H};
  CJIT_RETURN_IF_ERROR(expect(1, "W", {nd, gates * H, I}));
  CJIT_RETURN_IF_ERROR(expect(2, "R", {nd, gates * H, H}));
  CJIT_RETURN_IF_ERROR(expect(3, "B", {nd, 2 * gates * H}));
  CJIT_RETURN_IF_ERROR(expect(4, "sequence_lens", {B}));
  CJIT_RETURN_IF_ERROR(expect(5, "initial_h", state_dims));
  if (kind == 2) {
    CJIT_RETURN_IF_ERROR(expect(6, "initial_c", state_dims));
    CJIT_RETURN_IF_ERROR(expect(7, "P", {nd, 3 * H}));
  }
  if (ctx.has(4)) {
    if (!IsInteger(ctx.in(4).dtype())) return ctx.Error("sequence_lens must be an integer tensor");
    for (int64_t len : ctx.in(4).ToInt64Vector()) {
      if (len < 0 || len > S) return ctx.Error(absl::StrCat("sequence_lens value ", len, " is outside [0, ", S, "]"));
    }
  }
  s->bias = ctx.has(3) ? ctx.in(3).ToDoubleVector() : std::vector<double>(nd * 2 * gates * H, 0.0);
  s->lens = ctx.has(4) ? ctx.in(4).ToInt64Vector() : std::vector<int64_t>(B, S);
  s->h0 = ctx.has(5) ? ctx.in(5).ToDoubleVector() : std::vector<double>(nd * B * H, 0.0);
  s->c0 = kind == 2 && ctx.has(6) ? ctx.in(6).ToDoubleVector() : std::vector<double>(nd * B * H, 0.0);
  s->P = kind == 2 && ctx.has(7) ? ctx.in(7).ToDoubleVector() : std::vector<double>(nd * 3 * H, 0.0);
  if (s->batch_major) {  // layout=1: initial_h / initial_c are [B, num_directions, H]; the loops read [nd, B, H]
    auto to_direction_major = [&](std::vector<double>& v) {
      std::vector<double> t(v.size());
      for (int d = 0; d < nd; ++d)
        for (int64_t b = 0; b < B; ++b)
          for (int64_t k = 0; k < H; ++k) t[(d * B + b) * H + k] = v[(b * nd + d) * H + k];
      v.swap(t);
    };
    to_direction_major(s->h0);
    to_direction_major(s->c0);
  }
  s->RecurrentF32Args::bias = &s->bias;
  s->RecurrentF32Args::lens = &s->lens;
  s->RecurrentF32Args::h0 = &s->h0;
  s->RecurrentF32Args::c0 = &s->c0;
  return absl::OkStatus();
}

// Whether the float32 recurrence (RecurrentF32) computes this node: float32 operands, the default
// activations, no clip, input_forget or peepholes.
bool TakesRecurrentF32(const KernelContext& ctx, const RecurrentSpec& s) {
  const bool f32 =
      ctx.in(0).dtype() == DType::kF32 && ctx.in(1).dtype() == DType::kF32 && ctx.in(2).dtype() == DType::kF32;
  bool default_activations = true;
  for (size_t i = 0; i < s.acts.size(); ++i) {
    const bool sigmoid = s.dflt[i % s.dflt.size()] == "Sigmoid";
    default_activations &= s.acts[i].kind == (sigmoid ? Activation::Kind::kSigmoid : Activation::Kind::kTanh);
  }
  bool peepholes = false;
  for (double v : s.P) peepholes |= v != 0.0;
  return f32 && default_activations && s.clip <= 0 && !s.input_forget && !peepholes;
}

// The weights of one direction for the general loop: float32 in place, or copies in double.
struct DirectionWeights {
  const double* w = nullptr;  // [gates * H, I]
  const double* r = nullptr;  // [gates * H, H]
  const float* wf = nullptr;
  const float* rf = nullptr;
  const double* wb = nullptr;  // [gates * H]
  const double* rb = nullptr;
  const double* p = nullptr;  // peepholes [3 * H]
  const Activation* act = nullptr;
  double R(int64_t row, int64_t col, int64_t H) const {
    return rf ? static_cast<double>(rf[row * H + col]) : r[row * H + col];
  }
};

// One step of the cell from its gate inputs gx = X W^T + Wb and gh = H R^T + Rb: the new hidden state into
// hn (and, for LSTM, the new cell state into c), per the ONNX RNN / GRU / LSTM equations.
void CellStep(const RecurrentSpec& s, const DirectionWeights& dw, const std::vector<double>& gx,
              const std::vector<double>& gh, const std::vector<double>& h, std::vector<double>& c,
              std::vector<double>& hn) {
  const int64_t H = s.H;
  const Activation* act = dw.act;
  const double clip = s.clip;
  auto clipf = [&](double v) { return clip > 0 ? std::max(-clip, std::min(clip, v)) : v; };
  if (s.kind == 0) {
    for (int64_t k = 0; k < H; ++k) hn[k] = act[0](clipf(gx[k] + gh[k]));
  } else if (s.kind == 1) {  // z, r, h
    // ht = g(Xt Wh^T + (rt (.) Ht-1) Rh^T + Rbh + Wbh), or with linear_before_reset
    // ht = g(Xt Wh^T + rt (.) (Ht-1 Rh^T + Rbh) + Wbh)  (ONNX GRU).
    std::vector<double> rv(H);
    for (int64_t k = 0; k < H; ++k) rv[k] = act[0](clipf(gx[H + k] + gh[H + k]));
    for (int64_t k = 0; k < H; ++k) {
      double z = act[0](clipf(gx[k] + gh[k]));
      double hh;
      if (s.lbr) {
        hh = act[1](clipf(gx[2 * H + k] + rv[k] * gh[2 * H + k]));
      } else {
        double sum = dw.rb[2 * H + k];
        for (int64_t j = 0; j < H; ++j) sum += dw.R(2 * H + k, j, H) * rv[j] * h[j];
        hh = act[1](clipf(gx[2 * H + k] + sum));
      }
      hn[k] = (1 - z) * hh + z * h[k];
    }
  } else {  // i, o, f, c
    const double* p = dw.p;
    for (int64_t k = 0; k < H; ++k) {
      double ig = act[0](clipf(gx[k] + gh[k] + p[k] * c[k]));
      double fg = act[0](clipf(gx[2 * H + k] + gh[2 * H + k] + p[2 * H + k] * c[k]));
      if (s.input_forget) ig = 1 - fg;
      double cg = act[1](clipf(gx[3 * H + k] + gh[3 * H + k]));
      double cn = fg * c[k] + ig * cg;
      double og = act[0](clipf(gx[H + k] + gh[H + k] + p[H + k] * cn));
      c[k] = cn;
      hn[k] = og * act[2](cn);
    }
  }
}

// X, W and R of the general loop: float32 ones are used in place (Eigen matrix-vector products); other
// dtypes are converted to double once, for every direction.
struct GeneralOperands {
  bool f32 = false;
  std::vector<double> x, W, R;
};

GeneralOperands GeneralOperandsOf(const KernelContext& ctx) {
  GeneralOperands o;
  o.f32 = ctx.in(0).dtype() == DType::kF32 && ctx.in(1).dtype() == DType::kF32 && ctx.in(2).dtype() == DType::kF32;
  if (!o.f32) {
    o.x = ctx.in(0).ToDoubleVector();
    o.W = ctx.in(1).ToDoubleVector();
    o.R = ctx.in(2).ToDoubleVector();
  }
  return o;
}

// The general loop of direction d in double (every activation, clip, peepholes, input_forget, any float
// dtype): Y [S, nd, B, H], Yh and Yc [nd, B, H].
absl::Status GeneralRecurrence(const KernelContext& ctx, const RecurrentSpec& s, const GeneralOperands& ops, int d,
                               std::vector<double>& Y, std::vector<double>& Yh, std::vector<double>& Yc) {
  const Tensor& X = ctx.in(0);
  const int64_t S = s.S, B = s.B, I = s.I, H = s.H, G = s.gates * H;
  const int nd = s.nd;
  const bool f32 = ops.f32;
  const std::vector<double>& x = ops.x;
  const std::vector<double>& W = ops.W;
  const std::vector<double>& R = ops.R;
  const bool reverse = s.reverse_only || d == 1;
  DirectionWeights dw;
  dw.w = f32 ? nullptr : W.data() + d * G * I;
  dw.r = f32 ? nullptr : R.data() + d * G * H;
  dw.wf = f32 ? ctx.in(1).data<float>() + d * G * I : nullptr;
  dw.rf = f32 ? ctx.in(2).data<float>() + d * G * H : nullptr;
  dw.wb = s.bias.data() + d * 2 * G;
  dw.rb = dw.wb + G;
  dw.p = s.P.data() + d * 3 * H;
  dw.act = s.acts.data() + d * s.dflt.size();
  auto X_at = [&](int64_t t, int64_t b, int64_t i) {
    return s.batch_major ? x[(b * S + t) * I + i] : x[(t * B + b) * I + i];
  };
  using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::VectorXf hf(H), gxf(G), ghf(G);
  // float32: the input projections of every time step in one GEMM, X[S*B, I] x W^T[I, gates*H] (as ONNX
  // Runtime does); the recurrence then only multiplies by R. [B, S, I] rows are (b, t): projected per step.
  std::vector<float> xw;
  if (f32 && S * B > 1 && !s.batch_major) {
    xw.resize(static_cast<size_t>(S * B * G));
    if (!Sgemm(false, true, S * B, G, I, 1.0f, X.data<float>(), I, dw.wf, I, 0.0f, xw.data(), G)) {
      return ctx.Error("input projection GEMM: invalid arguments");
    }
  }
  for (int64_t b = 0; b < B; ++b) {
    std::vector<double> h(s.h0.begin() + (d * B + b) * H, s.h0.begin() + (d * B + b + 1) * H);
    std::vector<double> c(s.c0.begin() + (d * B + b) * H, s.c0.begin() + (d * B + b + 1) * H);
    std::vector<double> gx(G), gh(G), hn(H);
    int64_t len = std::min<int64_t>(s.lens[b], S);
    for (int64_t step = 0; step < len; ++step) {
      int64_t t = reverse ? len - 1 - step : step;
      if (f32) {
        const float* xrow = X.data<float>() + (s.batch_major ? (b * S + t) * I : (t * B + b) * I);
        for (int64_t k = 0; k < H; ++k) hf[k] = static_cast<float>(h[k]);
        const float* projected = xw.empty() ? nullptr : xw.data() + (t * B + b) * G;
        if (projected == nullptr) {
          gxf.noalias() = Eigen::Map<const RowMatrix>(dw.wf, G, I) * Eigen::Map<const Eigen::VectorXf>(xrow, I);
          projected = gxf.data();
        }
        ghf.noalias() = Eigen::Map<const RowMatrix>(dw.rf, G, H) * hf;
        for (int64_t g = 0; g < G; ++g) {
          gx[g] = dw.wb[g] + projected[g];
          gh[g] = dw.rb[g] + ghf[g];
        }
      } else {
        for (int64_t g = 0; g < G; ++g) {
          double sx = dw.wb[g], sh = dw.rb[g];
          for (int64_t i = 0; i < I; ++i) sx += dw.w[g * I + i] * X_at(t, b, i);
          for (int64_t k = 0; k < H; ++k) sh += dw.r[g * H + k] * h[k];
          gx[g] = sx;
          gh[g] = sh;
        }
      }
      CellStep(s, dw, gx, gh, h, c, hn);
      h = hn;
      for (int64_t k = 0; k < H; ++k) Y[((t * nd + d) * B + b) * H + k] = h[k];
    }
    for (int64_t k = 0; k < H; ++k) {
      Yh[(d * B + b) * H + k] = h[k];
      Yc[(d * B + b) * H + k] = c[k];
    }
  }
  return absl::OkStatus();
}

// Writes the wanted outputs Y, Y_h, Y_c in X's dtype (layout=1: batch-major) from the direction-major
// results of the general loop.
absl::Status StoreRecurrentOutputs(KernelContext& ctx, const RecurrentSpec& s, const std::vector<double>& Y,
                                   const std::vector<double>& Yh, const std::vector<double>& Yc) {
  const Tensor& X = ctx.in(0);
  const int64_t S = s.S, B = s.B, H = s.H;
  const int nd = s.nd;
  auto store = [&](int idx, const std::vector<double>& v, Dims dims) -> absl::Status {
    if (!ctx.wants(idx)) return absl::OkStatus();
    Tensor& out = ctx.Alloc(idx, X.dtype(), dims);
    return DispatchFloat(X.dtype(), [&](auto tag) {
      using T = decltype(tag);
      for (size_t i = 0; i < v.size(); ++i) out.data<T>()[i] = static_cast<T>(v[i]);
    });
  };
  if (s.batch_major) {
    std::vector<double> Yb(Y.size()), Yhb(Yh.size()), Ycb(Yc.size());
    for (int64_t t = 0; t < S; ++t)
      for (int d = 0; d < nd; ++d)
        for (int64_t b = 0; b < B; ++b)
          for (int64_t k = 0; k < H; ++k) Yb[((b * S + t) * nd + d) * H + k] = Y[((t * nd + d) * B + b) * H + k];
    for (int d = 0; d < nd; ++d)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t k = 0; k < H; ++k) {
          Yhb[(b * nd + d) * H + k] = Yh[(d * B + b) * H + k];
          Ycb[(b * nd + d) * H + k] = Yc[(d * B + b) * H + k];
        }
    CJIT_RETURN_IF_ERROR(store(0, Yb, {B, S, nd, H}));
    CJIT_RETURN_IF_ERROR(store(1, Yhb, {B, nd, H}));
    return store(2, Ycb, {B, nd, H});
  }
  CJIT_RETURN_IF_ERROR(store(0, Y, {S, nd, B, H}));
  CJIT_RETURN_IF_ERROR(store(1, Yh, {nd, B, H}));
  return store(2, Yc, {nd, B, H});
}

// kind: 0 RNN, 1 GRU, 2 LSTM.
absl::Status Recurrent(KernelContext& ctx, int kind) {
  RecurrentSpec s;
  CJIT_RETURN_IF_ERROR(ResolveRecurrent(ctx, kind, &s));
  if (TakesRecurrentF32(ctx, s)) return RecurrentF32(ctx, s);
  const int64_t states = s.nd * s.B * s.H;
  std::vector<double> Y(s.S * states, 0.0), Yh(states), Yc(states);
  const GeneralOperands ops = GeneralOperandsOf(ctx);
  for (int d = 0; d < s.nd; ++d) CJIT_RETURN_IF_ERROR(GeneralRecurrence(ctx, s, ops, d, Y, Yh, Yc));
  return StoreRecurrentOutputs(ctx, s, Y, Yh, Yc);
}

}  // namespace

void RegisterRecurrentKernels() {
  RegisterKernel("RNN", [](KernelContext& ctx) { return Recurrent(ctx, 0); });
  RegisterKernel("GRU", [](KernelContext& ctx) { return Recurrent(ctx, 1); });
  RegisterKernel("LSTM", [](KernelContext& ctx) { return Recurrent(ctx, 2); });
}

}  // namespace cjit
