// Integer and quantized linear algebra (ONNX MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv):
// exact int32 accumulation of (x - x_zero_point) * (w - w_zero_point), then (QLinear*) requantization
// y = saturate(round_half_even((acc + bias) * x_scale * w_scale / y_scale) + y_zero_point).
// Zero points and scales are per tensor or per row/column/output channel as the specification allows.
// Products run on oneDNN's 8-bit GEMM (int8_gemm.h); 1-D and 2-D convolutions take the paths of
// int8_conv.h. Convolutions of more than two spatial dims, and per-row A scales of QLinearMatMul, take the
// direct reference loops (IntMatMul / IntConv below).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <type_traits>

#include "compiler/ir/numeric_cast.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "runtime/cpu/box_copy.h"
#include "runtime/cpu/int8_conv.h"
#include "runtime/cpu/int8_gemm.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/quant_rows.h"
#include "runtime/cpu/tensor_util.h"

namespace cjit {
namespace quant {

absl::StatusOr<std::vector<int32_t>> ZeroPoints(const KernelContext& ctx, int i, const Tensor& operand,
                                                const char* what) {
  if (!ctx.has(i)) return std::vector<int32_t>{0};
  const Tensor& z = ctx.in(i);
  if (z.dtype() != operand.dtype()) {
    return ctx.Error(absl::StrCat("the zero point of ", what, " is ", DTypeName(z.dtype()), ", ", what, " is ",
                                  DTypeName(operand.dtype())));
  }
  if (z.numel() == 0) return ctx.Error(absl::StrCat("the zero point of ", what, " is empty"));
  std::vector<int32_t> v(z.numel());
  for (int64_t e = 0; e < z.numel(); ++e) {
    v[e] = z.dtype() == DType::kU8 ? static_cast<int32_t>(z.data<uint8_t>()[e]) : z.data<int8_t>()[e];
  }
  return v;
}

}  // namespace quant

namespace {

using quant::ConvSink;
using quant::FastIntConv;
using quant::IsInt8;
using quant::kScratchAcc;
using quant::Scratch;
using quant::ZeroPoints;

// Value k of an optional per-tensor-or-per-axis parameter (absent = 0).
double Param(const std::vector<double>& p, int64_t k) { return p.empty() ? 0.0 : (p.size() == 1 ? p[0] : p[k]); }

std::vector<double> Opt(const KernelContext& ctx, int i) {
  return ctx.has(i) ? ctx.in(i).ToDoubleVector() : std::vector<double>();
}

// A zero point or scale is absent, per tensor (one value) or per row/column/channel (`len` values).
absl::Status CheckParam(const KernelContext& ctx, const char* what, const std::vector<double>& p, int64_t len,
                        bool required = false) {
  if ((p.empty() && !required) || p.size() == 1 || static_cast<int64_t>(p.size()) == len) return absl::OkStatus();
  return ctx.Error(
      absl::StrCat(what, " has ", p.size(), " values; expected 1", len > 1 ? absl::StrCat(" or ", len) : ""));
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

// A scale input: finite; `positive` requires > 0 (a divisor).
absl::StatusOr<std::vector<double>> Scales(const KernelContext& ctx, int i, const char* what, bool positive) {
  std::vector<double> v = ctx.in(i).ToDoubleVector();
  if (v.empty()) return ctx.Error(absl::StrCat(what, " is empty"));
  for (double d : v) {
    if (!std::isfinite(d) || (positive && d <= 0)) {
      return ctx.Error(absl::StrCat(what, " must be ", positive ? "a positive" : "a", " finite number, got ", d));
    }
  }
  return v;
}

// An int8 operand as uint8 bytes: uint8 data as is, int8 data + 128 (bit 7 flipped) into `copy`.
const uint8_t* AsUint8(const Tensor& t, int64_t offset, int64_t count, std::vector<uint8_t>* copy) {
  const uint8_t* p = static_cast<const uint8_t*>(t.raw()) + offset;
  if (t.dtype() == DType::kU8) return p;
  copy->resize(count);
  for (int64_t i = 0; i < count; ++i) (*copy)[i] = p[i] ^ 0x80;
  return copy->data();
}

// Requantizes a rows x cols matrix of int32 sums (quant_rows.h; column j with bias[j] or none and mult[j])
// into y, in blocks of whole rows, one per thread.
void RequantizeMatrix(const int32_t* acc, int64_t rows, int64_t cols, const int32_t* bias, const float* mult,
                      int32_t zp, bool to_signed, uint8_t* y, int threads) {
  const int t = ThreadsForElements(threads, rows * cols);
  const int64_t piece = (rows + t - 1) / t;
  ParallelFor(t, t, [&](int64_t i) {
    const int64_t r = i * piece, nr = std::min(piece, rows - r);
    if (nr > 0) RequantizeColumnsI32(acc + r * cols, nr, cols, bias, mult, zp, to_signed, y + r * cols);
  });
}

// Allocates the int32 result of a product of the given dims and returns its data.
using Int32Alloc = std::function<int32_t*(const Dims&)>;

// acc (int32, the product's dims) = (A - azp) x (B - bzp) for uint8/int8 A and B through Int8Gemm.
absl::Status FastIntMatMul(const KernelContext& ctx, const Tensor& a, const Tensor& b, int azp_index, int bzp_index,
                           int b_index, const Int32Alloc& alloc) {
  auto geo = PlanMatMul(a.dims(), b.dims());
  if (!geo.ok()) return ctx.Error(geo.status().message());
  const MatMulGeometry& g = *geo;
  const int64_t M = g.M, K = g.K, N = g.N;
  CJIT_ASSIGN_OR_RETURN(std::vector<int32_t> azp, ZeroPoints(ctx, azp_index, a, "A"));
  CJIT_ASSIGN_OR_RETURN(std::vector<int32_t> bzp, ZeroPoints(ctx, bzp_index, b, "B"));
  if (azp.size() != 1 && static_cast<int64_t>(azp.size()) != M) {
    return ctx.Error(absl::StrCat("the zero point of A has ", azp.size(), " values; expected 1 or ", M));
  }
  if (bzp.size() != 1 && static_cast<int64_t>(bzp.size()) != N) {
    return ctx.Error(absl::StrCat("the zero point of B has ", bzp.size(), " values; expected 1 or ", N));
  }
  if (a.dtype() == DType::kI8) {
    for (int32_t& z : azp) z += 128;
  }
  Dims od = g.cd;
  if (a.rank() == 1) od.erase(od.end() - 2);
  if (b.rank() == 1) od.pop_back();
  int32_t* acc = alloc(od);
  std::vector<uint8_t> a_copy;
  // Prepared once only when B and its zero point are both constants (the zero point is folded into it).
  const bool b_constant = ctx.is_constant(b_index) && (!ctx.has(bzp_index) || ctx.is_constant(bzp_index));
  for (int64_t bi = 0; bi < g.batch; ++bi) {
    int64_t aoff, boff;
    g.Offsets(bi, &aoff, &boff);
    const uint8_t* ap = AsUint8(a, aoff, M * K, &a_copy);
    Int8Rhs rhs = PreparedInt8Rhs(
        b, b_constant, absl::StrCat("mm:", boff, ":", K, ":", N, ":", reinterpret_cast<uintptr_t>(ctx.node)), K, N, N,
        1, bzp.data(), bzp.size() > 1, [&](std::vector<uint8_t>*) -> const void* {
          return static_cast<const uint8_t*>(b.raw()) + boff;
        });
    Int8Gemm(ap, K, M, azp.data(), azp.size() > 1, rhs, acc + bi * M * N, N, ctx.threads);
  }
  return absl::OkStatus();
}

// The bias of QLinearConv (input 8, int32, OC values) or null.
absl::StatusOr<std::vector<int32_t>> ConvBias(const KernelContext& ctx, int64_t OC) {
  const Tensor& b = ctx.in(8);
  if (b.dtype() != DType::kI32 || b.numel() != OC) {
    return ctx.Error(absl::StrCat("the bias must be int32 with ", OC, " values, got ", DTypeName(b.dtype()), " ",
                                  DimsToString(b.dims())));
  }
  return std::vector<int32_t>(b.data<int32_t>(), b.data<int32_t>() + OC);
}

// The output zero point of QLinear* (one int8 or uint8 value).
absl::StatusOr<int32_t> OutputZeroPoint(const KernelContext& ctx, const Tensor& y_zp) {
  if (y_zp.numel() != 1 || (y_zp.dtype() != DType::kI8 && y_zp.dtype() != DType::kU8)) {
    return ctx.Error("y_zero_point must be one int8 or uint8 value");
  }
  return y_zp.dtype() == DType::kU8 ? static_cast<int32_t>(y_zp.data<uint8_t>()[0]) : y_zp.data<int8_t>()[0];
}

}  // namespace

absl::Status QLinearConvKernel(KernelContext& ctx, bool channels_last);

void RegisterQuantKernels() {
  RegisterKernel("MatMulInteger", [](KernelContext& ctx) -> absl::Status {
    Dims d;
    if (IsInt8(ctx.in(0)) && IsInt8(ctx.in(1))) {
      return FastIntMatMul(ctx, ctx.in(0), ctx.in(1), 2, 3, 1,
                           [&](const Dims& dims) { return ctx.Alloc(0, DType::kI32, dims).data<int32_t>(); });
    }
    CJIT_ASSIGN_OR_RETURN(std::vector<int64_t> acc, IntMatMul(ctx, ctx.in(0), ctx.in(1), Opt(ctx, 2), Opt(ctx, 3), &d));
    return StoreInt32(ctx, acc, d);
  });
  RegisterKernel("ConvInteger", [](KernelContext& ctx) -> absl::Status {
    Dims d;
    bool handled = false;
    int32_t* y = nullptr;
    int32_t* img = nullptr;  // one image's sums channels-last; the calling thread's buffer, shared with workers
    ConvSink sink{[&](const Dims& dims) {
                    y = ctx.Alloc(0, DType::kI32, dims).data<int32_t>();
                    img = Scratch<int32_t>(kScratchAcc, NumElements(dims) / std::max<int64_t>(dims[0], 1));
                    return absl::OkStatus();
                  },
                  [&](int64_t, int64_t p0, int64_t count, const int32_t* acc, int64_t, int64_t OC) {
                    std::memcpy(img + p0 * OC, acc, count * OC * sizeof(int32_t));
                  },
                  [&](int64_t n, int64_t P, int64_t OC) {
                    BatchedTranspose(img, y + n * OC * P, 4, 1, P, OC, ctx.threads);
                  }};
    CJIT_RETURN_IF_ERROR(FastIntConv(ctx, ctx.in(0), ctx.in(1), 2, 3, 1, sink, &handled));
    if (handled) return absl::OkStatus();
    CJIT_ASSIGN_OR_RETURN(std::vector<int64_t> acc, IntConv(ctx, ctx.in(0), ctx.in(1), Opt(ctx, 2), Opt(ctx, 3), &d));
    return StoreInt32(ctx, acc, d);
  });
  // com.clusterjit.NhwcConvInteger: X [N, (H,) W, C] and Y [N, (OH,) OW, OC] int32 (the layout pass's twin
  // of ConvInteger in a channels-last region: --auto_quantize=dynamic convolutions).
  RegisterKernel("NhwcConvInteger", [](KernelContext& ctx) -> absl::Status {
    bool handled = false;
    int32_t* y = nullptr;
    ConvSink sink{[&](const Dims& dims) {
                    y = ctx.Alloc(0, DType::kI32, dims).data<int32_t>();
                    return absl::OkStatus();
                  },
                  [&](int64_t n, int64_t p0, int64_t count, const int32_t* acc, int64_t P, int64_t OC) {
                    std::memcpy(y + (n * P + p0) * OC, acc, count * OC * sizeof(int32_t));
                  },
                  [&](int64_t, int64_t, int64_t) {}};
    CJIT_RETURN_IF_ERROR(FastIntConv(ctx, ctx.in(0), ctx.in(1), 2, 3, 1, sink, &handled, /*channels_last=*/true));
    if (!handled) return ctx.Error("a channels-last ConvInteger needs uint8 / int8 X and W of rank 3 or 4");
    return absl::OkStatus();
  });
  RegisterKernel("QLinearMatMul", [](KernelContext& ctx) -> absl::Status {
    Dims d;
    CJIT_ASSIGN_OR_RETURN(std::vector<double> a_scale, Scales(ctx, 1, "a_scale", false));
    CJIT_ASSIGN_OR_RETURN(std::vector<double> b_scale, Scales(ctx, 4, "b_scale", false));
    CJIT_ASSIGN_OR_RETURN(std::vector<double> y_scale, Scales(ctx, 6, "y_scale", true));
    if (a_scale.size() == 1 && y_scale.size() == 1 && IsInt8(ctx.in(0)) && IsInt8(ctx.in(3))) {
      int32_t* acc = nullptr;
      CJIT_RETURN_IF_ERROR(FastIntMatMul(ctx, ctx.in(0), ctx.in(3), 2, 5, 3, [&](const Dims& dims) {
        d = dims;
        return acc = Scratch<int32_t>(kScratchAcc, NumElements(dims));
      }));
      CJIT_ASSIGN_OR_RETURN(int32_t zp, OutputZeroPoint(ctx, ctx.in(7)));
      const int64_t n = d.empty() ? 1 : d.back();
      if (b_scale.size() != 1 && static_cast<int64_t>(b_scale.size()) != n) {
        return ctx.Error(absl::StrCat("b_scale has ", b_scale.size(), " values; expected 1 or ", n));
      }
      std::vector<float> mult(n);  // per column of the product
      for (int64_t j = 0; j < n; ++j) {
        mult[j] = static_cast<float>(a_scale[0]) * static_cast<float>(b_scale[b_scale.size() > 1 ? j : 0]) /
                  static_cast<float>(y_scale[0]);
      }
      Tensor& y = ctx.Alloc(0, ctx.in(7).dtype(), d);
      RequantizeMatrix(acc, NumElements(d) / std::max<int64_t>(n, 1), n, nullptr, mult.data(), zp,
                       y.dtype() == DType::kI8, static_cast<uint8_t*>(y.raw()), ctx.threads);
      return absl::OkStatus();
    }
    CJIT_ASSIGN_OR_RETURN(std::vector<int64_t> acc, IntMatMul(ctx, ctx.in(0), ctx.in(3), ctx.in(2).ToDoubleVector(),
                                                              ctx.in(5).ToDoubleVector(), &d));
    int64_t n = d.empty() ? 1 : d.back();
    return Requantize(ctx, acc, d, a_scale.at(0), b_scale, b_scale.size() > 1 ? n : 1, 1, y_scale.at(0), ctx.in(7),
                      nullptr);
  });
  RegisterKernel("QLinearConv", [](KernelContext& ctx) { return QLinearConvKernel(ctx, false); });
  RegisterKernel("NhwcQLinearConv", [](KernelContext& ctx) { return QLinearConvKernel(ctx, true); });
}

// QLinearConv, and its channels-last twin com.clusterjit.NhwcQLinearConv (X [N, d.., C], Y [N, o.., M]).
absl::Status QLinearConvKernel(KernelContext& ctx, bool channels_last) {
  Dims d;
  CJIT_ASSIGN_OR_RETURN(std::vector<double> x_scale, Scales(ctx, 1, "x_scale", false));
  CJIT_ASSIGN_OR_RETURN(std::vector<double> w_scale, Scales(ctx, 4, "w_scale", false));
  CJIT_ASSIGN_OR_RETURN(std::vector<double> y_scale, Scales(ctx, 6, "y_scale", true));
  if (x_scale.size() != 1 || y_scale.size() != 1) return ctx.Error("x_scale and y_scale must be one value each");
  bool handled = false;
  // Requantized channels-last (one multiplier and bias per column): straight into a channels-last Y, or
  // into a buffer moved to NCHW as bytes per image.
  Tensor* y = nullptr;
  uint8_t* img = nullptr;  // NCHW Y: one image channels-last (the calling thread's buffer, shared with workers)
  int32_t zp = 0;
  std::vector<float> mult;
  std::vector<int32_t> bias;
  ConvSink sink{[&](const Dims& dims) -> absl::Status {
                  const int64_t OC = channels_last ? dims.back() : dims[1];
                  CJIT_ASSIGN_OR_RETURN(zp, OutputZeroPoint(ctx, ctx.in(7)));
                  if (w_scale.size() != 1 && static_cast<int64_t>(w_scale.size()) != OC) {
                    return ctx.Error(absl::StrCat("w_scale has ", w_scale.size(), " values; expected 1 or ", OC));
                  }
                  if (ctx.has(8)) {
                    CJIT_ASSIGN_OR_RETURN(bias, ConvBias(ctx, OC));
                  }
                  mult.resize(OC);
                  for (int64_t j = 0; j < OC; ++j) {
                    mult[j] = static_cast<float>(x_scale[0]) * static_cast<float>(w_scale[w_scale.size() > 1 ? j : 0]) /
                              static_cast<float>(y_scale[0]);
                  }
                  y = &ctx.Alloc(0, ctx.in(7).dtype(), dims);
                  if (!channels_last)
                    img = Scratch<uint8_t>(kScratchAcc, NumElements(dims) / std::max<int64_t>(dims[0], 1));
                  return absl::OkStatus();
                },
                [&](int64_t n, int64_t p0, int64_t count, const int32_t* acc, int64_t P, int64_t OC) {
                  uint8_t* q = channels_last ? static_cast<uint8_t*>(y->raw()) + (n * P + p0) * OC : img + p0 * OC;
                  RequantizeMatrix(acc, count, OC, bias.empty() ? nullptr : bias.data(), mult.data(), zp,
                                   y->dtype() == DType::kI8, q, ctx.threads);
                },
                [&](int64_t n, int64_t P, int64_t OC) {
                  if (channels_last) return;
                  BatchedTranspose(img, static_cast<uint8_t*>(y->raw()) + n * OC * P, 1, 1, P, OC, ctx.threads);
                },
                [&](int64_t n, int64_t p0, Int8Requant* rq) {
                  const int64_t OC = static_cast<int64_t>(mult.size());
                  const int64_t P = channels_last ? NumElements(y->dims()) / std::max<int64_t>(y->dim(0) * OC, 1) : 0;
                  rq->bias = bias.empty() ? nullptr : bias.data();
                  rq->mult = mult.data();
                  rq->zp = zp;
                  rq->to_signed = y->dtype() == DType::kI8;
                  rq->y = channels_last ? static_cast<uint8_t*>(y->raw()) + (n * P + p0) * OC : img + p0 * OC;
                  rq->ldy = OC;
                  return true;
                }};
  CJIT_RETURN_IF_ERROR(FastIntConv(ctx, ctx.in(0), ctx.in(3), 2, 5, 3, sink, &handled, channels_last));
  if (handled) return absl::OkStatus();
  if (channels_last) return ctx.Error("a channels-last QLinearConv needs uint8 / int8 X and W of rank 3 or 4");
  CJIT_ASSIGN_OR_RETURN(std::vector<int64_t> acc,
                        IntConv(ctx, ctx.in(0), ctx.in(3), ctx.in(2).ToDoubleVector(), ctx.in(5).ToDoubleVector(), &d));
  std::vector<double> bias_values = Opt(ctx, 8);
  int64_t inner = NumElements(d) / std::max<int64_t>(d[0] * d[1], 1);
  return Requantize(ctx, acc, d, x_scale.at(0), w_scale, d[1], inner, y_scale.at(0), ctx.in(7),
                    bias_values.empty() ? nullptr : &bias_values);
}

}  // namespace cjit
