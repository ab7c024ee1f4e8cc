// Integer and quantized linear algebra (ONNX MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv):
// exact int32 accumulation of (x - x_zero_point) * (w - w_zero_point) in direct loops, then (QLinear*)
// requantization y = saturate(round_half_even(acc * x_scale * w_scale / y_scale) + y_zero_point).
// Zero points and scales are per tensor or per row/column/output channel as the specification allows.
#include <cmath>

#include "compiler/ir/numeric_cast.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/status_macros.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/tensor_util.h"

namespace cjit {
namespace {

// Value k of an optional per-tensor-or-per-axis parameter (absent = 0).
double Param(const std::vector<double>& p, int64_t k) { return p.empty() ? 0.0 : (p.size() == 1 ? p[0] : p[k]); }

std::vector<double> Opt(const KernelContext& ctx, int i) { return ctx.has(i) ? ctx.in(i).ToDoubleVector() : std::vector<double>(); }

// A zero point or scale is absent, per tensor (one value) or per row/column/channel (`len` values).
absl::Status CheckParam(const KernelContext& ctx, const char* what, const std::vector<double>& p, int64_t len,
                        bool required = false) {
  if ((p.empty() && !required) || p.size() == 1 || static_cast<int64_t>(p.size()) == len) return absl::OkStatus();
  return ctx.Error(absl::StrCat(what, " has ", p.size(), " values; expected 1", len > 1 ? absl::StrCat(" or ", len) : ""));
}

// acc[b][m][n] = sum_k (A[b][m][k] - azp[m]) * (B[b][k][n] - bzp[n]) with numpy batch broadcasting.
absl::StatusOr<std::vector<int64_t>> IntMatMul(const KernelContext& ctx, const Tensor& a, const Tensor& b,
                                               const std::vector<double>& azp, const std::vector<double>& bzp,
                                               Dims* out_dims) {
  auto geo = PlanMatMul(a.dims(), b.dims());
  if (!geo.ok()) return ctx.Error(geo.status().message());
  const MatMulGeometry& g = *geo;
  int64_t M = g.M, K = g.K, N = g.N;
  const Dims& cd = g.cd;
  CJIT_RETURN_IF_ERROR(CheckParam(ctx, "the zero point of A", azp, M));
  CJIT_RETURN_IF_ERROR(CheckParam(ctx, "the zero point of B", bzp, N));
  std::vector<double> av = a.ToDoubleVector(), bv = b.ToDoubleVector();
  std::vector<int64_t> acc(NumElements(cd), 0);
  for (int64_t bi = 0; bi < g.batch; ++bi) {
    int64_t aoff, boff;
    g.Offsets(bi, &aoff, &boff);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        int64_t s = 0;
        for (int64_t k = 0; k < K; ++k) {
          s += static_cast<int64_t>(av[aoff + m * K + k] - Param(azp, m)) *
               static_cast<int64_t>(bv[boff + k * N + n] - Param(bzp, n));
        }
        acc[bi * M * N + m * N + n] = s;
      }
  }
  Dims od = cd;
  if (a.rank() == 1) od.erase(od.end() - 2);
  if (b.rank() == 1) od.pop_back();
  *out_dims = od;
  return acc;
}

// Direct N-d convolution with groups, int64 accumulation: acc[n][oc][spatial].
absl::StatusOr<std::vector<int64_t>> IntConv(const KernelContext& ctx, const Tensor& x, const Tensor& w,
                                             const std::vector<double>& xzp, const std::vector<double>& wzp,
                                             Dims* out_dims) {
  if (x.rank() < 3 || w.rank() != x.rank()) {
    return ctx.Error(absl::StrCat("x must be N x C x spatial and w of the same rank, got ", DimsToString(x.dims()),
                                  " and ", DimsToString(w.dims())));
  }
  CJIT_RETURN_IF_ERROR(CheckParam(ctx, "the zero point of x", xzp, 1));
  CJIT_RETURN_IF_ERROR(CheckParam(ctx, "the zero point of w", wzp, w.dim(0)));
  std::vector<int64_t> in(x.dims().begin() + 2, x.dims().end());
  std::vector<int64_t> k = ctx.node->GetInts("kernel_shape");
  const std::vector<int64_t> w_spatial(w.dims().begin() + 2, w.dims().end());
  if (k.empty()) k = w_spatial;
  // The loops index W by the kernel's taps: an attribute that disagrees with W would read past it.
  if (k != w_spatial) {
    return ctx.Error(absl::StrCat("kernel_shape [", absl::StrJoin(k, ","), "] disagrees with the spatial dims of w ",
                                  DimsToString(w.dims())));
  }
  CJIT_ASSIGN_OR_RETURN(WindowGeometry g, ComputeWindowGeometry(*ctx.node, in, k, false, false));
  int64_t N = x.dim(0), C = x.dim(1), OC = w.dim(0), group = ctx.node->GetInt("group", 1);
  if (group <= 0 || C % group || OC % group || w.dim(1) * group != C) return ctx.Error("bad group/channels");
  int64_t cpg = C / group, ocpg = OC / group;
  size_t nsp = in.size();
  int64_t isz = 1, osz = 1, ksz = 1;
  for (size_t i = 0; i < nsp; ++i) {
    isz *= in[i];
    osz *= g.out[i];
    ksz *= k[i];
  }
  std::vector<double> xv = x.ToDoubleVector(), wv = w.ToDoubleVector();
  std::vector<int64_t> acc(N * OC * osz, 0);
  std::vector<int64_t> o(nsp), kk(nsp);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oc = 0; oc < OC; ++oc) {
      int64_t gi = oc / ocpg;
      for (int64_t oi = 0; oi < osz; ++oi) {
        int64_t rem = oi;
        for (int d = static_cast<int>(nsp) - 1; d >= 0; --d) { o[d] = rem % g.out[d]; rem /= g.out[d]; }
        int64_t s = 0;
        for (int64_t ic = 0; ic < cpg; ++ic) {
          int64_t c = gi * cpg + ic;
          for (int64_t ki = 0; ki < ksz; ++ki) {
            int64_t r2 = ki, off = 0;
            bool inside = true;
            for (int d = static_cast<int>(nsp) - 1; d >= 0; --d) { kk[d] = r2 % k[d]; r2 /= k[d]; }
            for (size_t d = 0; d < nsp; ++d) {
              int64_t pos = o[d] * g.strides[d] - g.pad_begin[d] + kk[d] * g.dilations[d];
              inside &= pos >= 0 && pos < in[d];
              off = off * in[d] + pos;
            }
            // Padding is the zero point (contributes 0 after subtraction).
            if (!inside) continue;
            double xval = xv[(n * C + c) * isz + off] - Param(xzp, 0);
            double wval = wv[(oc * cpg + ic) * ksz + ki] - Param(wzp, oc);
            s += static_cast<int64_t>(xval) * static_cast<int64_t>(wval);
          }
        }
        acc[(n * OC + oc) * osz + oi] = s;
      }
    }
  *out_dims = {N, OC};
  for (int64_t d : g.out) out_dims->push_back(d);
  return acc;
}

absl::Status StoreInt32(KernelContext& ctx, const std::vector<int64_t>& acc, const Dims& dims) {
  Tensor& y = ctx.Alloc(0, DType::kI32, dims);
  for (size_t i = 0; i < acc.size(); ++i) y.data<int32_t>()[i] = static_cast<int32_t>(acc[i]);
  return absl::OkStatus();
}

// Requantizes acc (channel = index / inner % channels) into y_zero_point's dtype.
absl::Status Requantize(KernelContext& ctx, const std::vector<int64_t>& acc, const Dims& dims, double x_scale,
                        const std::vector<double>& w_scale, int64_t channels, int64_t inner, double y_scale,
                        const Tensor& y_zp, const std::vector<double>* bias) {
  if (y_zp.numel() != 1 || (y_zp.dtype() != DType::kI8 && y_zp.dtype() != DType::kU8)) {
    return ctx.Error("y_zero_point must be one int8 or uint8 value");
  }
  CJIT_RETURN_IF_ERROR(CheckParam(ctx, "the weight scale", w_scale, channels, true));
  if (bias != nullptr && static_cast<int64_t>(bias->size()) != channels) {
    return ctx.Error(absl::StrCat("the bias has ", bias->size(), " values for ", channels, " output channels"));
  }
  Tensor& y = ctx.Alloc(0, y_zp.dtype(), dims);
  double zp = y_zp.ToDoubleVector().at(0);
  double lo = y_zp.dtype() == DType::kI8 ? -128 : 0, hi = y_zp.dtype() == DType::kI8 ? 127 : 255;
  for (size_t i = 0; i < acc.size(); ++i) {
    int64_t c = channels > 1 ? (static_cast<int64_t>(i) / inner) % channels : 0;
    double a = static_cast<double>(acc[i]) + (bias ? (*bias)[c] : 0.0);
    double v = std::clamp(std::nearbyint(a * x_scale * Param(w_scale, c) / y_scale) + zp, lo, hi);
    if (y_zp.dtype() == DType::kI8) y.data<int8_t>()[i] = NumericCast<int8_t>(v);
    else y.data<uint8_t>()[i] = NumericCast<uint8_t>(v);
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterQuantKernels() {
  RegisterKernel("MatMulInteger", [](KernelContext& ctx) -> absl::Status {
    Dims d;
    CJIT_ASSIGN_OR_RETURN(std::vector<int64_t> acc, IntMatMul(ctx, ctx.in(0), ctx.in(1), Opt(ctx, 2), Opt(ctx, 3), &d));
    return StoreInt32(ctx, acc, d);
  });
  RegisterKernel("ConvInteger", [](KernelContext& ctx) -> absl::Status {
    Dims d;
    CJIT_ASSIGN_OR_RETURN(std::vector<int64_t> acc, IntConv(ctx, ctx.in(0), ctx.in(1), Opt(ctx, 2), Opt(ctx, 3), &d));
    return StoreInt32(ctx, acc, d);
  });
  RegisterKernel("QLinearMatMul", [](KernelContext& ctx) -> absl::Status {
    Dims d;
    CJIT_ASSIGN_OR_RETURN(std::vector<int64_t> acc,
                          IntMatMul(ctx, ctx.in(0), ctx.in(3), ctx.in(2).ToDoubleVector(), ctx.in(5).ToDoubleVector(), &d));
    std::vector<double> bscale = ctx.in(4).ToDoubleVector();
    int64_t n = d.empty() ? 1 : d.back();
    return Requantize(ctx, acc, d, ctx.in(1).ToDoubleVector().at(0), bscale, bscale.size() > 1 ? n : 1, 1,
                      ctx.in(6).ToDoubleVector().at(0), ctx.in(7), nullptr);
  });
  RegisterKernel("QLinearConv", [](KernelContext& ctx) -> absl::Status {
    Dims d;
    CJIT_ASSIGN_OR_RETURN(std::vector<int64_t> acc,
                          IntConv(ctx, ctx.in(0), ctx.in(3), ctx.in(2).ToDoubleVector(), ctx.in(5).ToDoubleVector(), &d));
    std::vector<double> wscale = ctx.in(4).ToDoubleVector();
    std::vector<double> bias = Opt(ctx, 8);
    int64_t inner = NumElements(d) / std::max<int64_t>(d[0] * d[1], 1);
    return Requantize(ctx, acc, d, ctx.in(1).ToDoubleVector().at(0), wscale, d[1], inner,
                      ctx.in(6).ToDoubleVector().at(0), ctx.in(7), bias.empty() ? nullptr : &bias);
  });
}

}  // namespace cjit
