// Integer and quantized linear algebra (ONNX MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv):
// exact int32 accumulation of (x - x_zero_point) * (w - w_zero_point), then (QLinear*) requantization
// y = saturate(round_half_even((acc + bias) * x_scale * w_scale / y_scale) + y_zero_point).
// Zero points and scales are per tensor or per row/column/output channel as the specification allows.
// Products run on oneDNN's 8-bit GEMM (int8_gemm.h): matrix products directly, convolutions through an
// im2col matrix of uint8 patches (channels-last, one image at a time, in row chunks), depthwise
// convolutions in a direct channels-last int32 loop. Convolutions of more than two spatial dims, and
// per-row A scales of QLinearMatMul, take the direct reference loops (IntMatMul / IntConv below).
#include <immintrin.h>

// GCC 12 reports its own intrinsics headers (_mm512_undefined_*) as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

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
#include "runtime/cpu/depthwise_int8.h"
#include "runtime/cpu/int8_gemm.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/quant_rows.h"
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

// Per-thread scratch buffers, kept between calls: a fresh multi-MiB buffer per call costs its page faults
// (a 128 x 56 x 56 depthwise QLinearConv: 2.6 ms with new buffers, 0.8 with reused ones).
enum ScratchSlot {
  kScratchImage, kScratchColumns, kScratchProduct, kScratchAcc, kScratchRow, kScratchTaps, kScratchDwRows,
  kScratchSlots
};
template <typename T>
T* Scratch(ScratchSlot slot, int64_t count) {
  thread_local std::vector<uint8_t> buffers[kScratchSlots];
  std::vector<uint8_t>& b = buffers[slot];
  const size_t bytes = static_cast<size_t>(count) * sizeof(T);
  if (b.size() < bytes) b.resize(bytes);
  return reinterpret_cast<T*>(b.data());
}

bool IsInt8(const Tensor& t) { return t.dtype() == DType::kU8 || t.dtype() == DType::kI8; }

// Zero point input `i` as int32 values (absent: one 0). Its dtype must be the operand's.
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

// The taps of output pixel (oh, ow) whose input pixel lies inside the H x W image (padding adds nothing to
// a depthwise sum): for each, the input pixel's index ih * W + iw in pix[] and the tap's kh * KW + kw in
// tap[] (both sized KH * KW). Returns their count. Computed once per output pixel, for all its channels.
int64_t InsideTaps(const WindowGeometry& g, int64_t H, int64_t W, int64_t KH, int64_t KW, int64_t oh, int64_t ow,
                   int64_t* pix, int64_t* tap) {
  int64_t n = 0;
  for (int64_t kh = 0; kh < KH; ++kh) {
    const int64_t ih = oh * g.strides[0] - g.pad_begin[0] + kh * g.dilations[0];
    if (ih < 0 || ih >= H) continue;
    for (int64_t kw = 0; kw < KW; ++kw) {
      const int64_t iw = ow * g.strides[1] - g.pad_begin[1] + kw * g.dilations[1];
      if (iw < 0 || iw >= W) continue;
      pix[n] = ih * W + iw;
      tap[n++] = kh * KW + kw;
    }
  }
  return n;
}

// Depthwise (one input and one output channel per group) convolution of a channels-last uint8 image
// xt [H * W][C], one output row: acc [OW][C] = sum over taps of (x - azp) * wt[tap][c], wt = w - w_zp in
// int32. pix / tap: scratch of KH * KW entries each.
void DepthwiseRowInt32(const uint8_t* xt, int64_t H, int64_t W, int64_t C, const int32_t* wt, int64_t KH, int64_t KW,
                       const WindowGeometry& g, int32_t azp, int64_t oh, int32_t* acc, int64_t* pix, int64_t* tap) {
  for (int64_t ow = 0; ow < g.out[1]; ++ow) {
    int32_t* out = acc + ow * C;
    for (int64_t c = 0; c < C; ++c) out[c] = 0;
    const int64_t taps = InsideTaps(g, H, W, KH, KW, oh, ow, pix, tap);
    for (int64_t t = 0; t < taps; ++t) {
      const uint8_t* xr = xt + pix[t] * C;
      const int32_t* wr = wt + tap[t] * C;
      // Modulo 2^32 (unsigned): kernels of more than ~33,000 taps would overflow int32.
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        out[c] = static_cast<int32_t>(static_cast<uint32_t>(out[c]) +
                                      static_cast<uint32_t>((static_cast<int32_t>(xr[c]) - azp) * wr[c]));
      }
    }
  }
}

// The same in float32 for up to kMaxExactTaps taps: every product (x - azp) * (w - wzp) is an integer of at
// most 255 * 255 and every partial sum of at most 258 of them stays below 2^24, so float32 fused
// multiply-adds are exact in any order. x is read as uint8 channels-last (x - azp converted in registers),
// wf [taps][C] holds w - wzp; 64 channels (four registers) accumulate over all taps before one store.
constexpr int64_t kMaxExactTaps = 258;

// x - azp from 16 (8) channels-last uint8 values, as float32 (exact).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) inline __m512 LoadU8AsF32x16(const uint8_t* p, __m512i zp) {
  return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), zp));
}
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) inline __m512 LoadU8AsF32x16Masked(const uint8_t* p,
                                                                                                __mmask16 m, __m512i zp) {
  return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, p)), zp));
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void DepthwiseRowU8Avx512(
    const uint8_t* xt, int64_t H, int64_t W, int64_t C, const float* wf, int64_t KH, int64_t KW,
    const WindowGeometry& g, int32_t azp, int64_t oh, int32_t* acc, int64_t* pix, int64_t* tap) {
  const __m512i vz = _mm512_set1_epi32(azp);
  for (int64_t ow = 0; ow < g.out[1]; ++ow) {
    int32_t* out = acc + ow * C;
    const int64_t taps = InsideTaps(g, H, W, KH, KW, oh, ow, pix, tap);
    int64_t c0 = 0;
    for (; c0 + 64 <= C; c0 += 64) {
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t t = 0; t < taps; ++t) {
        const uint8_t* xr = xt + pix[t] * C + c0;
        const float* wr = wf + tap[t] * C + c0;
        a0 = _mm512_fmadd_ps(LoadU8AsF32x16(xr, vz), _mm512_loadu_ps(wr), a0);
        a1 = _mm512_fmadd_ps(LoadU8AsF32x16(xr + 16, vz), _mm512_loadu_ps(wr + 16), a1);
        a2 = _mm512_fmadd_ps(LoadU8AsF32x16(xr + 32, vz), _mm512_loadu_ps(wr + 32), a2);
        a3 = _mm512_fmadd_ps(LoadU8AsF32x16(xr + 48, vz), _mm512_loadu_ps(wr + 48), a3);
      }
      _mm512_storeu_si512(out + c0, _mm512_cvtps_epi32(a0));
      _mm512_storeu_si512(out + c0 + 16, _mm512_cvtps_epi32(a1));
      _mm512_storeu_si512(out + c0 + 32, _mm512_cvtps_epi32(a2));
      _mm512_storeu_si512(out + c0 + 48, _mm512_cvtps_epi32(a3));
    }
    for (; c0 < C; c0 += 16) {
      const __mmask16 m = static_cast<__mmask16>(C - c0 >= 16 ? 0xFFFF : (1u << (C - c0)) - 1);
      __m512 a0 = _mm512_setzero_ps();
      for (int64_t t = 0; t < taps; ++t) {
        a0 = _mm512_fmadd_ps(LoadU8AsF32x16Masked(xt + pix[t] * C + c0, m, vz),
                             _mm512_maskz_loadu_ps(m, wf + tap[t] * C + c0), a0);
      }
      _mm512_mask_storeu_epi32(out + c0, m, _mm512_cvtps_epi32(a0));
    }
  }
}

__attribute__((target("avx2,fma"))) inline __m256 LoadU8AsF32x8(const uint8_t* p, __m256i zp) {
  return _mm256_cvtepi32_ps(
      _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))), zp));
}

__attribute__((target("avx2,fma"))) void DepthwiseRowU8Avx2(const uint8_t* xt, int64_t H, int64_t W, int64_t C,
                                                            const float* wf, int64_t KH, int64_t KW,
                                                            const WindowGeometry& g, int32_t azp, int64_t oh,
                                                            int32_t* acc, int64_t* pix, int64_t* tap) {
  const __m256i vz = _mm256_set1_epi32(azp);
  for (int64_t ow = 0; ow < g.out[1]; ++ow) {
    int32_t* out = acc + ow * C;
    const int64_t taps = InsideTaps(g, H, W, KH, KW, oh, ow, pix, tap);
    int64_t c0 = 0;
    for (; c0 + 32 <= C; c0 += 32) {
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t t = 0; t < taps; ++t) {
        const uint8_t* xr = xt + pix[t] * C + c0;
        const float* wr = wf + tap[t] * C + c0;
        a0 = _mm256_fmadd_ps(LoadU8AsF32x8(xr, vz), _mm256_loadu_ps(wr), a0);
        a1 = _mm256_fmadd_ps(LoadU8AsF32x8(xr + 8, vz), _mm256_loadu_ps(wr + 8), a1);
        a2 = _mm256_fmadd_ps(LoadU8AsF32x8(xr + 16, vz), _mm256_loadu_ps(wr + 16), a2);
        a3 = _mm256_fmadd_ps(LoadU8AsF32x8(xr + 24, vz), _mm256_loadu_ps(wr + 24), a3);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c0), _mm256_cvtps_epi32(a0));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c0 + 8), _mm256_cvtps_epi32(a1));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c0 + 16), _mm256_cvtps_epi32(a2));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c0 + 24), _mm256_cvtps_epi32(a3));
    }
    for (; c0 < C; ++c0) {
      float a = 0;
      for (int64_t t = 0; t < taps; ++t) {
        a += static_cast<float>(static_cast<int32_t>(xt[pix[t] * C + c0]) - azp) * wf[tap[t] * C + c0];
      }
      out[c0] = static_cast<int32_t>(a);
    }
  }
}

// Depthwise rows from input rows converted once: each input row's x - azp, as float32 [W][C], is made once per
// thread block (not once per tap of every output pixel that reads it), and an output pixel's sum is then one
// fused multiply-add per tap and 16 (8) channels, with a memory operand. Exact as the functions above
// (kMaxExactTaps). rows[kh]: kernel row kh's converted input row, or null where it lies in the padding.
// Output pixels ow0 <= ow < ow1 have every tap inside the row (no bounds checks); the others skip their
// outside taps. acc [OW][C].
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void ConvertRowU8Avx512(const uint8_t* src, int64_t n,
                                                                                    int32_t azp, float* dst) {
  const __m512i vz = _mm512_set1_epi32(azp);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, LoadU8AsF32x16(src + i, vz));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(dst + i, m, LoadU8AsF32x16Masked(src + i, m, vz));
  }
}

// One output pixel's 16 channels from c0 (mask m), taps outside the row skipped.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) inline void DepthwisePixelF32Avx512(
    const float* const* rows, int64_t W, int64_t C, const float* wf, int64_t KH, int64_t KW, int64_t sw, int64_t pw,
    int64_t dw, int64_t ow, int64_t c0, __mmask16 m, int32_t* acc) {
  __m512 a = _mm512_setzero_ps();
  const int64_t iw0 = ow * sw - pw;
  for (int64_t kh = 0; kh < KH; ++kh) {
    if (rows[kh] == nullptr) continue;
    for (int64_t kw = 0; kw < KW; ++kw) {
      const int64_t iw = iw0 + kw * dw;
      if (iw < 0 || iw >= W) continue;
      a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, rows[kh] + iw * C + c0),
                          _mm512_maskz_loadu_ps(m, wf + (kh * KW + kw) * C + c0), a);
    }
  }
  _mm512_mask_storeu_epi32(acc + ow * C + c0, m, _mm512_cvtps_epi32(a));
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void DepthwiseRowF32Avx512(
    const float* const* rows, int64_t W, int64_t C, const float* wf, int64_t KH, int64_t KW, int64_t OW,
    int64_t sw, int64_t pw, int64_t dw, int64_t ow0, int64_t ow1, int32_t* acc) {
  for (int64_t c0 = 0; c0 < C; c0 += 16) {
    const __mmask16 m = static_cast<__mmask16>(C - c0 >= 16 ? 0xFFFF : (1u << (C - c0)) - 1);
    auto edge = [&](int64_t ow) { DepthwisePixelF32Avx512(rows, W, C, wf, KH, KW, sw, pw, dw, ow, c0, m, acc); };
    int64_t ow = 0;
    for (; ow < std::min(ow0, OW); ++ow) edge(ow);
    // Four inside pixels at a time share each weight load.
    for (; ow + 4 <= ow1; ow += 4) {
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      const int64_t step = sw * C;
      for (int64_t kh = 0; kh < KH; ++kh) {
        if (rows[kh] == nullptr) continue;
        const float* xr = rows[kh] + (ow * sw - pw) * C + c0;
        const float* wr = wf + kh * KW * C + c0;
        for (int64_t kw = 0; kw < KW; ++kw, xr += dw * C, wr += C) {
          const __m512 w = _mm512_maskz_loadu_ps(m, wr);
          a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, xr), w, a0);
          a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, xr + step), w, a1);
          a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, xr + 2 * step), w, a2);
          a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, xr + 3 * step), w, a3);
        }
      }
      int32_t* o = acc + ow * C + c0;
      _mm512_mask_storeu_epi32(o, m, _mm512_cvtps_epi32(a0));
      _mm512_mask_storeu_epi32(o + C, m, _mm512_cvtps_epi32(a1));
      _mm512_mask_storeu_epi32(o + 2 * C, m, _mm512_cvtps_epi32(a2));
      _mm512_mask_storeu_epi32(o + 3 * C, m, _mm512_cvtps_epi32(a3));
    }
    for (; ow < OW; ++ow) edge(ow);
  }
}

__attribute__((target("avx2,fma"))) void ConvertRowU8Avx2(const uint8_t* src, int64_t n, int32_t azp, float* dst) {
  const __m256i vz = _mm256_set1_epi32(azp);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, LoadU8AsF32x8(src + i, vz));
  for (; i < n; ++i) dst[i] = static_cast<float>(static_cast<int32_t>(src[i]) - azp);
}

// One output pixel's 8 channels from c0, taps outside the row skipped.
__attribute__((target("avx2,fma"))) inline void DepthwisePixelF32Avx2(const float* const* rows, int64_t W, int64_t C,
                                                                      const float* wf, int64_t KH, int64_t KW,
                                                                      int64_t sw, int64_t pw, int64_t dw, int64_t ow,
                                                                      int64_t c0, int32_t* acc) {
  __m256 a = _mm256_setzero_ps();
  const int64_t iw0 = ow * sw - pw;
  for (int64_t kh = 0; kh < KH; ++kh) {
    if (rows[kh] == nullptr) continue;
    for (int64_t kw = 0; kw < KW; ++kw) {
      const int64_t iw = iw0 + kw * dw;
      if (iw < 0 || iw >= W) continue;
      a = _mm256_fmadd_ps(_mm256_loadu_ps(rows[kh] + iw * C + c0), _mm256_loadu_ps(wf + (kh * KW + kw) * C + c0), a);
    }
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + ow * C + c0), _mm256_cvtps_epi32(a));
}

__attribute__((target("avx2,fma"))) void DepthwiseRowF32Avx2(const float* const* rows, int64_t W, int64_t C,
                                                             const float* wf, int64_t KH, int64_t KW, int64_t OW,
                                                             int64_t sw, int64_t pw, int64_t dw, int64_t ow0,
                                                             int64_t ow1, int32_t* acc) {
  int64_t c0 = 0;
  for (; c0 + 8 <= C; c0 += 8) {
    auto edge = [&](int64_t ow) { DepthwisePixelF32Avx2(rows, W, C, wf, KH, KW, sw, pw, dw, ow, c0, acc); };
    int64_t ow = 0;
    for (; ow < std::min(ow0, OW); ++ow) edge(ow);
    for (; ow + 4 <= ow1; ow += 4) {
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      const int64_t step = sw * C;
      for (int64_t kh = 0; kh < KH; ++kh) {
        if (rows[kh] == nullptr) continue;
        const float* xr = rows[kh] + (ow * sw - pw) * C + c0;
        const float* wr = wf + kh * KW * C + c0;
        for (int64_t kw = 0; kw < KW; ++kw, xr += dw * C, wr += C) {
          const __m256 w = _mm256_loadu_ps(wr);
          a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xr), w, a0);
          a1 = _mm256_fmadd_ps(_mm256_loadu_ps(xr + step), w, a1);
          a2 = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 2 * step), w, a2);
          a3 = _mm256_fmadd_ps(_mm256_loadu_ps(xr + 3 * step), w, a3);
        }
      }
      int32_t* o = acc + ow * C + c0;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), _mm256_cvtps_epi32(a0));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + C), _mm256_cvtps_epi32(a1));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 2 * C), _mm256_cvtps_epi32(a2));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 3 * C), _mm256_cvtps_epi32(a3));
    }
    for (; ow < OW; ++ow) edge(ow);
  }
  for (; c0 < C; ++c0) {  // the last C % 8 channels
    for (int64_t ow = 0; ow < OW; ++ow) {
      float a = 0;
      const int64_t iw0 = ow * sw - pw;
      for (int64_t kh = 0; kh < KH; ++kh) {
        if (rows[kh] == nullptr) continue;
        for (int64_t kw = 0; kw < KW; ++kw) {
          const int64_t iw = iw0 + kw * dw;
          if (iw >= 0 && iw < W) a += rows[kh][iw * C + c0] * wf[(kh * KW + kw) * C + c0];
        }
      }
      acc[ow * C + c0] = static_cast<int32_t>(a);
    }
  }
}

// Where a fast convolution's sums go: begin(output dims) once, on the calling thread; rows(n, p0, count,
// acc [count][OC], P, OC) for each run of output pixels p0.. of image n (channels-last int32 sums; runs of one
// image may come from several threads at once, never overlapping); image(n, P, OC) after an image's last
// run (the sink writes the image out in NCHW).
// Optionally requant(n, p0, &rq): where the requantized bytes of the run from pixel p0 of image n go (row
// stride rq.ldy), when the sink requantizes per column: the product then writes them itself (Int8Requant)
// and rows() is not called for that run.
struct ConvSink {
  std::function<absl::Status(const Dims&)> begin;
  std::function<void(int64_t n, int64_t p0, int64_t count, const int32_t* acc, int64_t P, int64_t OC)> rows;
  std::function<void(int64_t n, int64_t P, int64_t OC)> image;
  std::function<bool(int64_t n, int64_t p0, Int8Requant* rq)> requant;
};


// Output rows [oh0, oh1) of a depthwise convolution whose input rows are converted once each into a cache of
// `slots` rows (KH * dilation: input row ih goes to slot ih % slots, and the KH rows of one output row,
// ih0 + kh * dilation, never share one): slot_row(slot) is a slot's storage, build(ih, row) converts input
// row ih into it, run(oh, rows) computes output row oh from its KH rows (`padding` for rows outside the
// input).
template <typename Row, typename SlotRow, typename Build, typename RunRow>
void ForEachCachedRow(const WindowGeometry& g, int64_t oh0, int64_t oh1, int64_t KH, int64_t H, int64_t slots,
                      const Row* padding, SlotRow slot_row, Build build, RunRow run) {
  std::vector<int64_t> tags(slots, -1);
  std::vector<const Row*> rows(KH);
  for (int64_t oh = oh0; oh < oh1; ++oh) {
    for (int64_t kh = 0; kh < KH; ++kh) {
      const int64_t ih = oh * g.strides[0] - g.pad_begin[0] + kh * g.dilations[0];
      if (ih < 0 || ih >= H) {
        rows[kh] = padding;
        continue;
      }
      const int64_t slot = ih % slots;
      Row* row = slot_row(slot);
      if (tags[slot] != ih) {
        build(ih, row);
        tags[slot] = ih;
      }
      rows[kh] = row;
    }
    run(oh, rows.data());
  }
}

// 1-D and 2-D convolutions of uint8/int8 x and w; others return false in *handled.
absl::Status FastIntConv(const KernelContext& ctx, const Tensor& x, const Tensor& w, int xzp_index, int wzp_index,
                         int w_index, const ConvSink& sink, bool* handled, bool channels_last = false) {
  *handled = false;
  if (x.rank() < 3 || x.rank() > 4 || w.rank() != x.rank() || !IsInt8(x) || !IsInt8(w)) return absl::OkStatus();
  const bool one_d = x.rank() == 3;
  const int r = x.rank();
  // NCHW, or channels-last [N, (H,) W, C] (NhwcQLinearConv).
  const int64_t N = x.dim(0), C = channels_last ? x.dim(r - 1) : x.dim(1);
  const int64_t H = one_d ? 1 : x.dim(channels_last ? 1 : 2), W = x.dim(channels_last ? r - 2 : r - 1);
  const int64_t OC = w.dim(0), KH = one_d ? 1 : w.dim(2), KW = w.dim(w.rank() - 1);
  std::vector<int64_t> k = ctx.node->GetInts("kernel_shape");
  const std::vector<int64_t> w_spatial(w.dims().begin() + 2, w.dims().end());
  if (!k.empty() && k != w_spatial) {
    return ctx.Error(absl::StrCat("kernel_shape [", absl::StrJoin(k, ","), "] disagrees with the spatial dims of w ",
                                  DimsToString(w.dims())));
  }
  std::vector<int64_t> in = channels_last ? std::vector<int64_t>(x.dims().begin() + 1, x.dims().end() - 1)
                                           : std::vector<int64_t>(x.dims().begin() + 2, x.dims().end());
  CJIT_ASSIGN_OR_RETURN(WindowGeometry g1, ComputeWindowGeometry(*ctx.node, in, w_spatial, false, false));
  WindowGeometry g = g1;
  if (one_d) {  // as 2-D with H = 1
    g.strides.insert(g.strides.begin(), 1);
    g.dilations.insert(g.dilations.begin(), 1);
    g.pad_begin.insert(g.pad_begin.begin(), 0);
    g.pad_end.insert(g.pad_end.begin(), 0);
    g.out.insert(g.out.begin(), 1);
  }
  const int64_t group = ctx.node->GetInt("group", 1);
  if (group <= 0 || C % group || OC % group || w.dim(1) * group != C) {
    return ctx.Error(absl::StrCat("group ", group, " does not fit ", C, " input and ", OC, " output channels (w ",
                                  DimsToString(w.dims()), ")"));
  }
  CJIT_ASSIGN_OR_RETURN(std::vector<int32_t> xzp, ZeroPoints(ctx, xzp_index, x, "x"));
  CJIT_ASSIGN_OR_RETURN(std::vector<int32_t> wzp, ZeroPoints(ctx, wzp_index, w, "w"));
  if (xzp.size() != 1) return ctx.Error(absl::StrCat("the zero point of x has ", xzp.size(), " values; expected 1"));
  if (wzp.size() != 1 && static_cast<int64_t>(wzp.size()) != OC) {
    return ctx.Error(absl::StrCat("the zero point of w has ", wzp.size(), " values; expected 1 or ", OC));
  }
  *handled = true;
  const int32_t azp = xzp[0] + (x.dtype() == DType::kI8 ? 128 : 0);
  const int64_t cpg = C / group, ocpg = OC / group, OH = g.out[0], OW = g.out[1], P = OH * OW, HW = H * W;
  const int64_t K = KH * KW * cpg;
  Dims out_dims = {N};
  if (!channels_last) out_dims.push_back(OC);
  for (int64_t d : g1.out) out_dims.push_back(d);
  if (channels_last) out_dims.push_back(OC);
  CJIT_RETURN_IF_ERROR(sink.begin(out_dims));
  if (N == 0 || OC == 0 || P == 0) return absl::OkStatus();  // an empty output
  const bool depthwise = cpg == 1 && ocpg == 1 && group > 1;
  const bool pointwise = KH == 1 && KW == 1 && group == 1 && g.strides[0] == 1 && g.strides[1] == 1 &&
                         g.pad_begin[0] == 0 && g.pad_begin[1] == 0 && OH == H && OW == W;
  // Prepared once only when w and its zero point are both constants (the zero point is folded into it).
  const bool w_constant = ctx.is_constant(w_index) && (!ctx.has(wzp_index) || ctx.is_constant(wzp_index));
  uint8_t* xt = nullptr;
  std::vector<int32_t> wt;  // depthwise: [taps][C] = w - w_zp
  auto depthwise_values = [&](std::vector<int32_t>* out) {
    out->resize(KH * KW * C);
    const bool ws = w.dtype() == DType::kI8;
    for (int64_t c = 0; c < C; ++c)
      for (int64_t t = 0; t < KH * KW; ++t) {
        const int32_t v = ws ? w.data<int8_t>()[c * KH * KW + t] : w.data<uint8_t>()[c * KH * KW + t];
        (*out)[t * C + c] = v - wzp[wzp.size() > 1 ? c : 0];
      }
  };
  std::vector<Int8Rhs> rhs;
  if (!depthwise) {
    for (int64_t gi = 0; gi < group; ++gi) {
      const int64_t woff = gi * ocpg * cpg * KH * KW;
      const int32_t* zp = wzp.size() > 1 ? wzp.data() + gi * ocpg : wzp.data();
      // B[k][n] with k = (kh, kw, c) (the channels-last patch order) from w [OC][cpg][KH][KW].
      rhs.push_back(PreparedInt8Rhs(
          w, w_constant, absl::StrCat("conv:", gi, ":", K, ":", ocpg, ":", reinterpret_cast<uintptr_t>(ctx.node)), K,
          ocpg, 1, K, zp, wzp.size() > 1, [&](std::vector<uint8_t>* scratch) -> const void* {
            const uint8_t* src = static_cast<const uint8_t*>(w.raw()) + woff;
            scratch->resize(ocpg * K);
            for (int64_t o = 0; o < ocpg; ++o)
              for (int64_t c = 0; c < cpg; ++c)
                for (int64_t t = 0; t < KH * KW; ++t) (*scratch)[o * K + t * cpg + c] = src[(o * cpg + c) * KH * KW + t];
            return scratch->data();
          }));
    }
  }
  // Depthwise: on uint8 directly with AVX-512 VNNI where w - w_zp fits int8 (runtime/cpu/depthwise_int8.h),
  // requantized in the kernel when the sink requantizes; else float32 (exact, above) on AVX-512 / AVX2 for
  // kernels of up to kMaxExactTaps taps; else int32.
  DepthwiseVnniWeights dwv;
  bool dw_vnni = false;
  const int64_t dw_slots = KH * g.dilations[0];
  if (depthwise && DepthwiseVnniAvailable() && g.pad_begin[0] >= 0 && g.pad_begin[1] >= 0 && g.strides[1] > 0) {
    DepthwiseVnniGeometry geo;
    geo.C = C;
    geo.W = W;
    geo.KH = KH;
    geo.KW = KW;
    geo.OW = OW;
    geo.sw = g.strides[1];
    geo.pw = g.pad_begin[1];
    geo.dw = g.dilations[1];
    geo.x_zp = azp;
    Int8Requant rq0;
    const bool fuse = sink.requant && sink.requant(0, 0, &rq0);
    const int64_t row_bytes = DepthwiseVnniTapRowBytes(geo);
    // Under 64 channels the 16-channel chunks' rearrangement costs more than the float32 path (MobileNetV2's
    // 112x112x32 depthwise: 293 us against 222).
    dw_vnni = C >= 64 && (dw_slots + 1) * row_bytes <= (int64_t{16} << 20) &&
              PrepareDepthwiseVnni(w, w_constant,
                                   absl::StrCat(KH, ":", KW, ":", C, ":", reinterpret_cast<uintptr_t>(ctx.node)),
                                   depthwise_values, geo, fuse ? &rq0 : nullptr, &dwv);
  }
  if (depthwise && !dw_vnni) depthwise_values(&wt);
  const bool dw_f32 = depthwise && !dw_vnni && KH * KW <= kMaxExactTaps && (CpuHasAvx512() || CpuHasAvx2());
  std::vector<float> wf;
  if (dw_f32) wf.assign(wt.begin(), wt.end());
  // The float32 depthwise path converts input rows once into a per-thread cache of KH * dilation rows (up to
  // 16 MiB); output pixels dw_ow0 <= ow < dw_ow1 read only inside the row.
  const bool row_cache = dw_f32 && g.pad_begin[0] >= 0 && g.pad_begin[1] >= 0 && g.strides[1] > 0 &&
                         W * C <= (int64_t{4} << 20) / dw_slots;
  int64_t dw_ow0 = 0, dw_ow1 = 0;
  if (row_cache) {
    const int64_t sw = g.strides[1], pw = g.pad_begin[1], last = W - 1 - (KW - 1) * g.dilations[1] + pw;
    dw_ow0 = std::min<int64_t>((pw + sw - 1) / sw, OW);
    dw_ow1 = last < 0 ? 0 : std::min<int64_t>(last / sw + 1, OW);
  }
  // Output rows per chunk: the chunk's int32 sums (about 256 KiB) stay in cache until the sink requantizes
  // them, and its im2col patches stay near 1 MiB.
  int64_t chunk_pixels = (int64_t{1} << 16) / std::max<int64_t>(OC, 1);
  if (!pointwise && !depthwise) chunk_pixels = std::min(chunk_pixels, (int64_t{1} << 20) / std::max<int64_t>(K, 1));
  const int64_t chunk_rows = std::clamp<int64_t>(chunk_pixels / std::max<int64_t>(OW, 1), 1, OH);
  uint8_t* col = pointwise || depthwise ? nullptr : Scratch<uint8_t>(kScratchColumns, chunk_rows * OW * K);
  int32_t* chunk = depthwise ? nullptr : Scratch<int32_t>(kScratchProduct, chunk_rows * OW * OC);  // [rows*OW][OC]
  const uint8_t flip = x.dtype() == DType::kI8 ? 0x80 : 0;
  for (int64_t n = 0; n < N; ++n) {
    // Channels-last image, int8 made uint8: a transposed copy, or the input itself when it is channels-last.
    const uint8_t* image = static_cast<const uint8_t*>(x.raw()) + n * C * HW;
    if (channels_last && !flip) {
      xt = const_cast<uint8_t*>(image);  // only read below
    } else {
      xt = Scratch<uint8_t>(kScratchImage, HW * C);
      if (channels_last) {
        std::memcpy(xt, image, HW * C);
      } else {
        BatchedTranspose(image, xt, 1, 1, C, HW, ctx.threads);
      }
      if (flip) {
        for (int64_t i = 0; i < HW * C; ++i) xt[i] ^= flip;
      }
    }
    if (dw_vnni) {
      // As the float32 row cache below, with tap rows (runtime/cpu/depthwise_int8.h) built once per input row;
      // rows in the padding read one tap row of zero points.
      const int64_t row_bytes = DepthwiseVnniTapRowBytes(dwv);
      const int dt = ThreadsForWork(ctx.threads, static_cast<double>(P) * C * KH * KW);
      const int64_t blocks = std::min<int64_t>(std::max(dt, 1), OH);
      ParallelFor(dt, blocks, [&](int64_t b) {
        uint8_t* cache = Scratch<uint8_t>(kScratchDwRows, (dw_slots + 1) * row_bytes);
        uint8_t* padding = cache + dw_slots * row_bytes;
        BuildDepthwiseVnniTapRow(dwv, nullptr, padding);
        int32_t* out = dwv.requant ? nullptr : Scratch<int32_t>(kScratchRow, OW * C);
        ForEachCachedRow<uint8_t>(
            g, OH * b / blocks, OH * (b + 1) / blocks, KH, H, dw_slots, padding,
            [&](int64_t slot) { return cache + slot * row_bytes; },
            [&](int64_t ih, uint8_t* row) { BuildDepthwiseVnniTapRow(dwv, xt + ih * W * C, row); },
            [&](int64_t oh, const uint8_t* const* rows) {
              Int8Requant rq;
              if (dwv.requant && sink.requant(n, oh * OW, &rq)) {
                DepthwiseVnniRow(dwv, rows, rq.y, rq.ldy, nullptr);
              } else {
                DepthwiseVnniRow(dwv, rows, nullptr, 0, out);
                sink.rows(n, oh * OW, OW, out, P, OC);
              }
            });
      });
      sink.image(n, P, OC);
      continue;
    }
    if (depthwise && row_cache) {
      // Contiguous blocks of output rows over the threads; each block converts an input row once, into the
      // slot ih % slots of its cache (the KH rows of one output row, ih0 + kh * dilation, never share one).
      const int dt = ThreadsForWork(ctx.threads, static_cast<double>(P) * C * KH * KW);
      const int64_t blocks = std::min<int64_t>(std::max(dt, 1), OH);
      ParallelFor(dt, blocks, [&](int64_t b) {
        float* cache = Scratch<float>(kScratchDwRows, dw_slots * W * C);
        int32_t* out = Scratch<int32_t>(kScratchRow, OW * C);
        ForEachCachedRow<float>(
            g, OH * b / blocks, OH * (b + 1) / blocks, KH, H, dw_slots, /*padding=*/nullptr,
            [&](int64_t slot) { return cache + slot * W * C; },
            [&](int64_t ih, float* row) {
              if (CpuHasAvx512()) {
                ConvertRowU8Avx512(xt + ih * W * C, W * C, azp, row);
              } else {
                ConvertRowU8Avx2(xt + ih * W * C, W * C, azp, row);
              }
            },
            [&](int64_t oh, const float* const* rows) {
              if (CpuHasAvx512()) {
                DepthwiseRowF32Avx512(rows, W, C, wf.data(), KH, KW, OW, g.strides[1], g.pad_begin[1], g.dilations[1],
                                      dw_ow0, dw_ow1, out);
              } else {
                DepthwiseRowF32Avx2(rows, W, C, wf.data(), KH, KW, OW, g.strides[1], g.pad_begin[1], g.dilations[1],
                                    dw_ow0, dw_ow1, out);
              }
              sink.rows(n, oh * OW, OW, out, P, OC);
            });
      });
      sink.image(n, P, OC);
      continue;
    }
    if (depthwise) {
      // Row by row over the threads, each row's sums handed to the sink while in cache.
      const int dt = ThreadsForWork(ctx.threads, static_cast<double>(P) * C * KH * KW);
      ParallelFor(dt, OH, [&](int64_t oh) {
        // The running thread's buffers: the row's sums, then the inside taps' pixel and tap indices.
        int32_t* out = Scratch<int32_t>(kScratchRow, OW * C);
        int64_t* pix = Scratch<int64_t>(kScratchTaps, 2 * KH * KW);
        int64_t* tap = pix + KH * KW;
        if (dw_f32 && CpuHasAvx512()) {
          DepthwiseRowU8Avx512(xt, H, W, C, wf.data(), KH, KW, g, azp, oh, out, pix, tap);
        } else if (dw_f32) {
          DepthwiseRowU8Avx2(xt, H, W, C, wf.data(), KH, KW, g, azp, oh, out, pix, tap);
        } else {
          DepthwiseRowInt32(xt, H, W, C, wt.data(), KH, KW, g, azp, oh, out, pix, tap);
        }
        sink.rows(n, oh * OW, OW, out, P, OC);
      });
      sink.image(n, P, OC);
      continue;
    }
    for (int64_t r0 = 0; r0 < OH; r0 += chunk_rows) {
      const int64_t rows = std::min(chunk_rows, OH - r0);
      Int8Requant rq;
      const bool fusable = group == 1 && sink.requant && sink.requant(n, r0 * OW, &rq);
      bool requantized = false;
      if (pointwise) {
        requantized = Int8Gemm(xt + r0 * OW * C, C, rows * OW, &azp, false, rhs[0], chunk, OC, ctx.threads,
                               fusable ? &rq : nullptr);
      } else {
        for (int64_t gi = 0; gi < group; ++gi) {
          ParallelFor(ThreadsForElements(ctx.threads, rows * OW * K), rows * OW, [&](int64_t i) {
            const int64_t oh = r0 + i / OW, ow = i % OW;
            uint8_t* dst = col + i * K;
            const int64_t iw0 = ow * g.strides[1] - g.pad_begin[1];
            // One group, no dilation along W, the window inside the row: a kernel row's KW pixels are one
            // contiguous run of KW * C bytes (a 7x7 stem on 3 channels: 7 copies of 21 bytes, not 49 of 3).
            const bool whole_rows = group == 1 && g.dilations[1] == 1 && iw0 >= 0 && iw0 + KW <= W;
            for (int64_t kh = 0; kh < KH; ++kh) {
              const int64_t ih = oh * g.strides[0] - g.pad_begin[0] + kh * g.dilations[0];
              if (whole_rows) {
                if (ih < 0 || ih >= H) {
                  std::memset(dst, azp, KW * C);
                } else {
                  std::memcpy(dst, xt + (ih * W + iw0) * C, KW * C);
                }
                dst += KW * C;
                continue;
              }
              for (int64_t kw = 0; kw < KW; ++kw, dst += cpg) {
                const int64_t iw = ow * g.strides[1] - g.pad_begin[1] + kw * g.dilations[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) {
                  std::memset(dst, azp, cpg);  // padding is the zero point: contributes 0
                } else {
                  std::memcpy(dst, xt + (ih * W + iw) * C + gi * cpg, cpg);
                }
              }
            }
          });
          requantized = Int8Gemm(col, K, rows * OW, &azp, false, rhs[gi], chunk + gi * ocpg, OC, ctx.threads,
                                 fusable ? &rq : nullptr);
        }
      }
      if (!requantized) sink.rows(n, r0 * OW, rows * OW, chunk, P, OC);
    }
    sink.image(n, P, OC);
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
    CJIT_ASSIGN_OR_RETURN(std::vector<int64_t> acc,
                          IntMatMul(ctx, ctx.in(0), ctx.in(3), ctx.in(2).ToDoubleVector(), ctx.in(5).ToDoubleVector(), &d));
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
                  if (!channels_last) img = Scratch<uint8_t>(kScratchAcc, NumElements(dims) / std::max<int64_t>(dims[0], 1));
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
