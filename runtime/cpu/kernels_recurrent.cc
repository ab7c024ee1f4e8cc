// LSTM, GRU and RNN (ONNX operator specification, opsets 7-14 semantics incl. layout, peepholes,
// sequence_lens, clip, input_forget, linear_before_reset, bidirectional). Plain loops in float/double.
#include <cmath>
#include <map>
#include <set>

#include "compiler/ir/status_macros.h"
#include "runtime/cpu/dispatch.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/kernel.h"

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

// kind: 0 RNN, 1 GRU, 2 LSTM.
absl::Status Recurrent(KernelContext& ctx, int kind) {
  const Node& n = *ctx.node;
  const Tensor& X = ctx.in(0);
  bool batch_major = n.GetInt("layout", 0) == 1;
  std::string direction = n.GetString("direction", "forward");
  int nd = direction == "bidirectional" ? 2 : 1;
  int64_t H = n.GetInt("hidden_size", 0);
  int gates = kind == 0 ? 1 : kind == 1 ? 3 : 4;
  if (H <= 0) H = ctx.in(2).dim(2);
  int64_t S = X.dim(batch_major ? 1 : 0), B = X.dim(batch_major ? 0 : 1), I = X.dim(2);
  double clip = n.GetFloat("clip", 0.0f);
  bool input_forget = n.GetInt("input_forget", 0) != 0;
  bool lbr = n.GetInt("linear_before_reset", 0) != 0;
  std::vector<std::string> dflt = kind == 0 ? std::vector<std::string>{"Tanh"}
                                : kind == 1 ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                            : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
  CJIT_ASSIGN_OR_RETURN(std::vector<Activation> acts, Activations(ctx, dflt, nd));
  // Every operand against the ONNX RNN/GRU/LSTM signature (X [S, B, I] or [B, S, I] with layout=1).
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional") {
    return ctx.Error(absl::StrCat("unsupported direction '", direction, "'"));
  }
  if (X.rank() != 3) return ctx.Error(absl::StrCat("X must be 3-D, got ", DimsToString(X.dims())));
  auto expect = [&](int i, const char* what, Dims want) -> absl::Status {
    if (!ctx.has(i) || ctx.in(i).dims() == want) return absl::OkStatus();
    return ctx.Error(absl::StrCat(what, " must have dims ", DimsToString(want), ", got ", DimsToString(ctx.in(i).dims())));
  };
  CJIT_RETURN_IF_ERROR(expect(1, "W", {nd, gates * H, I}));
  CJIT_RETURN_IF_ERROR(expect(2, "R", {nd, gates * H, H}));
  CJIT_RETURN_IF_ERROR(expect(3, "B", {nd, 2 * gates * H}));
  CJIT_RETURN_IF_ERROR(expect(4, "sequence_lens", {B}));
  CJIT_RETURN_IF_ERROR(expect(5, "initial_h", batch_major ? Dims{B, nd, H} : Dims{nd, B, H}));
  if (kind == 2) {
    CJIT_RETURN_IF_ERROR(expect(6, "initial_c", batch_major ? Dims{B, nd, H} : Dims{nd, B, H}));
    CJIT_RETURN_IF_ERROR(expect(7, "P", {nd, 3 * H}));
  }
  if (ctx.has(4)) {
    if (!IsInteger(ctx.in(4).dtype())) return ctx.Error("sequence_lens must be an integer tensor");
    for (int64_t len : ctx.in(4).ToInt64Vector()) {
      if (len < 0 || len > S) return ctx.Error(absl::StrCat("sequence_lens value ", len, " is outside [0, ", S, "]"));
    }
  }
  // float32 weights are used in place (Eigen matrix-vector products); other dtypes go through double.
  bool f32 = X.dtype() == DType::kF32 && ctx.in(1).dtype() == DType::kF32 && ctx.in(2).dtype() == DType::kF32;
  std::vector<double> x, W, R;
  if (!f32) {
    x = X.ToDoubleVector();
    W = ctx.in(1).ToDoubleVector();
    R = ctx.in(2).ToDoubleVector();
  }
  std::vector<double> bias = ctx.has(3) ? ctx.in(3).ToDoubleVector() : std::vector<double>(nd * 2 * gates * H, 0.0);
  std::vector<int64_t> lens = ctx.has(4) ? ctx.in(4).ToInt64Vector() : std::vector<int64_t>(B, S);
  std::vector<double> h0 = ctx.has(5) ? ctx.in(5).ToDoubleVector() : std::vector<double>(nd * B * H, 0.0);
  std::vector<double> c0 = kind == 2 && ctx.has(6) ? ctx.in(6).ToDoubleVector() : std::vector<double>(nd * B * H, 0.0);
  std::vector<double> P = kind == 2 && ctx.has(7) ? ctx.in(7).ToDoubleVector() : std::vector<double>(nd * 3 * H, 0.0);
  if (batch_major) {  // layout=1: initial_h / initial_c are [B, num_directions, H]; the loops read [nd, B, H]
    auto to_direction_major = [&](std::vector<double>& v) {
      std::vector<double> t(v.size());
      for (int d = 0; d < nd; ++d)
        for (int64_t b = 0; b < B; ++b)
          for (int64_t k = 0; k < H; ++k) t[(d * B + b) * H + k] = v[(b * nd + d) * H + k];
      v.swap(t);
    };
    to_direction_major(h0);
    to_direction_major(c0);
  }
  std::vector<double> Y(S * nd * B * H, 0.0), Yh(nd * B * H), Yc(nd * B * H);
  auto X_at = [&](int64_t t, int64_t b, int64_t i) {
    return batch_major ? x[(b * S + t) * I + i] : x[(t * B + b) * I + i];
  };
  using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::VectorXf hf(H), gxf(gates * H), ghf(gates * H);
  auto clipf = [&](double v) { return clip > 0 ? std::max(-clip, std::min(clip, v)) : v; };
  for (int d = 0; d < nd; ++d) {
    bool reverse = direction == "reverse" || d == 1;
    const double* w = f32 ? nullptr : W.data() + d * gates * H * I;
    const double* r = f32 ? nullptr : R.data() + d * gates * H * H;
    const float* wf = f32 ? ctx.in(1).data<float>() + d * gates * H * I : nullptr;
    const float* rf = f32 ? ctx.in(2).data<float>() + d * gates * H * H : nullptr;
    const double* wb = bias.data() + d * 2 * gates * H;
    const double* rb = wb + gates * H;
    const double* p = P.data() + d * 3 * H;
    const Activation* act = acts.data() + d * dflt.size();
    // float32: the input projections of every time step in one GEMM, X[S*B, I] x W^T[I, gates*H] (as ONNX
    // Runtime does); the recurrence then only multiplies by R.
    std::vector<float> xw;
    if (f32 && S * B > 1) {
      xw.resize(static_cast<size_t>(S * B * gates * H));
      if (!batch_major) {
        if (!Sgemm(false, true, S * B, gates * H, I, 1.0f, X.data<float>(), I, wf, I, 0.0f, xw.data(), gates * H)) {
          return ctx.Error("input projection GEMM: invalid arguments");
        }
      } else {
        xw.clear();  // [B, S, I] rows are (b, t): projected per step below
      }
    }
    for (int64_t b = 0; b < B; ++b) {
      std::vector<double> h(h0.begin() + (d * B + b) * H, h0.begin() + (d * B + b + 1) * H);
      std::vector<double> c(c0.begin() + (d * B + b) * H, c0.begin() + (d * B + b + 1) * H);
      std::vector<double> gx(gates * H), gh(gates * H), hn(H);
      int64_t len = std::min<int64_t>(lens[b], S);
      for (int64_t step = 0; step < len; ++step) {
        int64_t t = reverse ? len - 1 - step : step;
        if (f32) {
          const float* xrow = X.data<float>() + (batch_major ? (b * S + t) * I : (t * B + b) * I);
          for (int64_t k = 0; k < H; ++k) hf[k] = static_cast<float>(h[k]);
          const float* projected = xw.empty() ? nullptr : xw.data() + (t * B + b) * gates * H;
          if (projected == nullptr) {
            gxf.noalias() = Eigen::Map<const RowMatrix>(wf, gates * H, I) * Eigen::Map<const Eigen::VectorXf>(xrow, I);
            projected = gxf.data();
          }
          ghf.noalias() = Eigen::Map<const RowMatrix>(rf, gates * H, H) * hf;
          for (int64_t g = 0; g < gates * H; ++g) {
            gx[g] = wb[g] + projected[g];
            gh[g] = rb[g] + ghf[g];
          }
        } else {
          for (int64_t g = 0; g < gates * H; ++g) {
            double sx = wb[g], sh = rb[g];
            for (int64_t i = 0; i < I; ++i) sx += w[g * I + i] * X_at(t, b, i);
            for (int64_t k = 0; k < H; ++k) sh += r[g * H + k] * h[k];
            gx[g] = sx;
            gh[g] = sh;
          }
        }
        if (kind == 0) {
          for (int64_t k = 0; k < H; ++k) hn[k] = act[0](clipf(gx[k] + gh[k]));
        } else if (kind == 1) {  // z, r, h
          // ht = g(Xt Wh^T + (rt (.) Ht-1) Rh^T + Rbh + Wbh), or with linear_before_reset
          // ht = g(Xt Wh^T + rt (.) (Ht-1 Rh^T + Rbh) + Wbh)  (ONNX GRU).
          std::vector<double> rv(H);
          for (int64_t k = 0; k < H; ++k) rv[k] = act[0](clipf(gx[H + k] + gh[H + k]));
          for (int64_t k = 0; k < H; ++k) {
            double z = act[0](clipf(gx[k] + gh[k]));
            double hh;
            if (lbr) {
              hh = act[1](clipf(gx[2 * H + k] + rv[k] * gh[2 * H + k]));
            } else {
              double s = rb[2 * H + k];
              for (int64_t j = 0; j < H; ++j) {
                double rkj = f32 ? static_cast<double>(rf[(2 * H + k) * H + j]) : r[(2 * H + k) * H + j];
                s += rkj * rv[j] * h[j];
              }
              hh = act[1](clipf(gx[2 * H + k] + s));
            }
            hn[k] = (1 - z) * hh + z * h[k];
          }
        } else {  // i, o, f, c
          for (int64_t k = 0; k < H; ++k) {
            double ig = act[0](clipf(gx[k] + gh[k] + p[k] * c[k]));
            double fg = act[0](clipf(gx[2 * H + k] + gh[2 * H + k] + p[2 * H + k] * c[k]));
            if (input_forget) ig = 1 - fg;
            double cg = act[1](clipf(gx[3 * H + k] + gh[3 * H + k]));
            double cn = fg * c[k] + ig * cg;
            double og = act[0](clipf(gx[H + k] + gh[H + k] + p[H + k] * cn));
            c[k] = cn;
            hn[k] = og * act[2](cn);
          }
        }
        h = hn;
        for (int64_t k = 0; k < H; ++k) Y[((t * nd + d) * B + b) * H + k] = h[k];
      }
      for (int64_t k = 0; k < H; ++k) {
        Yh[(d * B + b) * H + k] = h[k];
        Yc[(d * B + b) * H + k] = c[k];
      }
    }
  }
  auto store = [&](int idx, const std::vector<double>& v, Dims dims) -> absl::Status {
    if (!ctx.wants(idx)) return absl::OkStatus();
    Tensor& out = ctx.Alloc(idx, X.dtype(), dims);
    return DispatchFloat(X.dtype(), [&](auto tag) {
      using T = decltype(tag);
      for (size_t i = 0; i < v.size(); ++i) out.data<T>()[i] = static_cast<T>(v[i]);
    });
  };
  if (batch_major) {
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

}  // namespace

void RegisterRecurrentKernels() {
  RegisterKernel("RNN", [](KernelContext& ctx) { return Recurrent(ctx, 0); });
  RegisterKernel("GRU", [](KernelContext& ctx) { return Recurrent(ctx, 1); });
  RegisterKernel("LSTM", [](KernelContext& ctx) { return Recurrent(ctx, 2); });
}

}  // namespace cjit
