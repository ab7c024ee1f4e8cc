// CPU kernels of ONNX QuantizeLinear and DequantizeLinear (opsets 10-21: per tensor, per axis and blocked
// scales; 4/8/16-bit integer types; float16/bfloat16 scales) and DynamicQuantizeLinear, per the operator
// specification and its reference implementation (onnx/reference/ops/op_quantize_linear.py). Per-tensor and
// per-axis 8-bit rows of float32 run the vector loops of quant_rows.h; everything else a double loop.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/ir/numeric_cast.h"
#include "runtime/cpu/dispatch.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/quant_rows.h"
#include "runtime/cpu/tensor_util.h"

namespace cjit {
namespace {

// x (input 0), scale (input 1) and zero point (input 2, optional) of QuantizeLinear / DequantizeLinear:
// which scale each element of x takes. ONNX QuantizeLinear-21 / DequantizeLinear-21 define three
// granularities by the scale's shape: a scalar (per tensor), 1-D of x.dims[axis] (per axis), or x's rank with
// ceil(x.dims[axis] / block_size) along `axis` and x's dims elsewhere (blocked, block_size > 0); the zero
// point has the scale's shape.
struct QuantArgsShape {
  int axis = 0;
  int64_t block = 0;  // > 0: blocked
  int64_t dim = 1, inner = 1, pdim = 1;  // x.dims[axis], the product of x's dims after it, scale.dims[axis]
  bool per_tensor = true;
};

// Index into the scale / zero point of x's element e (row-major).
int64_t ParamIndex(const QuantArgsShape& q, int64_t e) {
  if (q.per_tensor) return 0;
  const int64_t i = e % q.inner, r = e / q.inner, d = r % q.dim;
  if (q.block == 0) return d;
  return ((r / q.dim) * q.pdim + d / q.block) * q.inner + i;
}

// x, scale and zero point as doubles, with the granularity.
struct QuantArgs {
  std::vector<double> xv, sv, zv;
  QuantArgsShape shape;
};

bool IsByteQuant(DType t) { return t == DType::kU8 || t == DType::kI8; }

// The granularity checks of QuantizeLinear / DequantizeLinear's parameters (see QuantArgsShape).
absl::StatusOr<QuantArgsShape> CheckQuantShapes(const KernelContext& ctx) {
  QuantArgsShape q;
  const Tensor& x = ctx.in(0);
  const Tensor& scale = ctx.in(1);
  const int64_t block = ctx.node->GetInt("block_size", 0);
  if (block < 0) return ctx.Error(absl::StrCat("block_size must be >= 0, got ", block));
  if (scale.numel() == 0) return ctx.Error("the scale is empty");
  if (ctx.has(2) && ctx.in(2).dims() != scale.dims() && !(ctx.in(2).numel() == 1 && scale.numel() == 1)) {
    return ctx.Error(absl::StrCat("the zero point has dims ", DimsToString(ctx.in(2).dims()), ", the scale ",
                                  DimsToString(scale.dims())));
  }
  if (scale.numel() == 1) return q;
  q.per_tensor = false;
  CJIT_ASSIGN_OR_RETURN(q.axis, NormalizeAxis(*ctx.node, ctx.node->GetInt("axis", 1), x.rank()));
  q.dim = x.dim(q.axis);
  for (int i = q.axis + 1; i < x.rank(); ++i) q.inner *= x.dim(i);
  if (block == 0) {
    if (scale.rank() != 1 || scale.dim(0) != q.dim) {
      return ctx.Error(absl::StrCat("a per-axis scale must have dims [", q.dim, "] (input dim ", q.axis, "), got ",
                                    DimsToString(scale.dims()), " (blocked quantization needs block_size)"));
    }
    q.pdim = q.dim;
    return q;
  }
  q.block = block;
  Dims want = x.dims();
  want[q.axis] = q.dim == 0 ? 0 : (q.dim - 1) / block + 1;  // ceil, without overflow for a huge block_size
  if (scale.dims() != want) {
    return ctx.Error(absl::StrCat("a blocked scale (block_size ", block, ", axis ", q.axis, ") must have dims ",
                                  DimsToString(want), " for input dims ", DimsToString(x.dims()), ", got ",
                                  DimsToString(scale.dims())));
  }
  q.pdim = want[q.axis];
  return q;
}

// The shape checks, and an 8-bit zero point (the vector rows' case).
absl::StatusOr<QuantArgsShape> CheckQuantArgs(const KernelContext& ctx) {
  CJIT_ASSIGN_OR_RETURN(QuantArgsShape q, CheckQuantShapes(ctx));
  if (ctx.has(2) && !IsByteQuant(ctx.in(2).dtype())) return ctx.Error("the zero point must be int8 or uint8 here");
  return q;
}

absl::StatusOr<QuantArgs> ReadQuantArgs(const KernelContext& ctx) {
  QuantArgs q;
  CJIT_ASSIGN_OR_RETURN(q.shape, CheckQuantShapes(ctx));
  q.xv = ctx.in(0).ToDoubleVector();
  q.sv = ctx.in(1).ToDoubleVector();
  q.zv = ctx.has(2) ? ctx.in(2).ToDoubleVector() : std::vector<double>(q.sv.size(), 0.0);
  return q;
}

// Per tensor or per axis with float32 x / scale and 8-bit results: the vector rows of quant_rows.h.
bool RowQuantizable(const KernelContext& ctx, DType bytes, DType real) {
  return ctx.in(1).dtype() == DType::kF32 && real == DType::kF32 && IsByteQuant(bytes) &&
         ctx.node->GetInt("block_size", 0) == 0 && ctx.in(1).rank() <= 1;
}

// v rounded to the float type t (float16 / bfloat16 round to nearest even; float32 and float64 unchanged
// after the float32 rounding the callers do).
double RoundToFloatType(double v, DType t) {
  if (t == DType::kF16) return static_cast<double>(static_cast<float>(Eigen::half(static_cast<float>(v))));
  if (t == DType::kBF16) return static_cast<double>(static_cast<float>(Eigen::bfloat16(static_cast<float>(v))));
  return v;
}

// float32 x, float32 scale, uint8/int8 zero point (or none: uint8): the vector rows of quant_rows.h, per
// tensor or per axis (one scale per block of `inner` values). False when another dtype takes the generic loop.
// Scale and zero point k of a per-tensor or per-axis parameter pair, the zero point read from its bytes.
int32_t ZeroPointAt(const KernelContext& ctx, int64_t k) {
  if (!ctx.has(2)) return 0;
  const Tensor& z = ctx.in(2);
  const int64_t i = z.numel() == 1 ? 0 : k;
  return z.dtype() == DType::kI8 ? static_cast<int32_t>(z.data<int8_t>()[i])
                                 : static_cast<int32_t>(z.data<uint8_t>()[i]);
}

// outer x channels x inner blocks of x for a per-axis parameter of `channels` values along `axis`
// (channels 1: one block).
void AxisBlocks(const Tensor& x, int64_t channels, int axis, int64_t* outer, int64_t* inner) {
  *inner = 1;
  *outer = 1;
  if (channels == 1) {
    *inner = x.numel();
    return;
  }
  for (int i = axis + 1; i < x.rank(); ++i) *inner *= x.dim(i);
  for (int i = 0; i < axis; ++i) *outer *= x.dim(i);
}

// Calls row(offset, count, scale, zero point) over runs of x's elements that share one scale and zero
// point: pieces of the whole tensor for the threads (per tensor), or the blocks of each channel along the
// axis (per axis). Runs are disjoint; they may run on several threads at once.
template <typename Row>
void ForEachQuantRun(const KernelContext& ctx, const QuantArgsShape& a, Row&& row) {
  const Tensor& x = ctx.in(0);
  const Tensor& scale = ctx.in(1);
  const int64_t channels = scale.numel();
  int64_t outer, inner;
  AxisBlocks(x, channels, a.axis, &outer, &inner);
  const int64_t blocks = outer * channels;
  const int threads = ThreadsForElements(ctx.threads, x.numel());
  if (blocks == 1) {
    const int64_t piece = std::max<int64_t>(4096, (inner + threads - 1) / std::max(threads, 1));
    const float sc = scale.data<float>()[0];
    const int32_t zp = ZeroPointAt(ctx, 0);
    ParallelFor(threads, (inner + piece - 1) / piece, [&](int64_t i) {
      const int64_t lo = i * piece;
      row(lo, std::min(piece, inner - lo), sc, zp);
    });
    return;
  }
  ParallelFor(threads, blocks, [&](int64_t b) {
    const int64_t c = b % channels;
    row(b * inner, inner, scale.data<float>()[c], ZeroPointAt(ctx, c));
  });
}

absl::Status FastQuantize(KernelContext& ctx, const QuantArgsShape& a) {
  Tensor& y = ctx.Alloc(0);
  const bool s = y.dtype() == DType::kI8;
  const float* xp = ctx.in(0).data<float>();
  uint8_t* yp = static_cast<uint8_t*>(y.raw());
  ForEachQuantRun(ctx, a, [&](int64_t off, int64_t n, float sc, int32_t zp) {
    QuantizeRowF32(xp + off, n, sc, zp, s, yp + off);
  });
  return absl::OkStatus();
}

absl::Status FastDequantize(KernelContext& ctx, const QuantArgsShape& a) {
  Tensor& y = ctx.Alloc(0);
  const bool s = ctx.in(0).dtype() == DType::kI8;
  const uint8_t* xp = static_cast<const uint8_t*>(ctx.in(0).raw());
  float* yp = y.data<float>();
  ForEachQuantRun(ctx, a, [&](int64_t off, int64_t n, float sc, int32_t zp) {
    DequantizeRowF32(xp + off, s, n, zp, sc, yp + off);
  });
  return absl::OkStatus();
}

absl::Status Quantize(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const DType out = ctx.infer()[0].dtype;
  if (RowQuantizable(ctx, out, x.dtype())) {
    CJIT_ASSIGN_OR_RETURN(QuantArgsShape a, CheckQuantArgs(ctx));
    return FastQuantize(ctx, a);
  }
  if (!IsInteger(out) || DTypeSize(out) > 2) {
    return ctx.Error(absl::StrCat("cannot quantize to ", DTypeName(out), " (int8, uint8, int16, uint16, int4, uint4)"));
  }
  if (ctx.has(2) && ctx.in(2).dtype() != out) {
    return ctx.Error(absl::StrCat("the zero point is ", DTypeName(ctx.in(2).dtype()), ", the output ", DTypeName(out)));
  }
  Tensor& y = ctx.Alloc(0);
  CJIT_ASSIGN_OR_RETURN(QuantArgs a, ReadQuantArgs(ctx));
  double lo, hi;
  IntegerRange(y.dtype(), &lo, &hi);
  const bool float_x = IsFloat(x.dtype()) && x.dtype() != DType::kF64;
  std::vector<double> q(a.xv.size());
  for (size_t e = 0; e < a.xv.size(); ++e) {
    const int64_t p = ParamIndex(a.shape, static_cast<int64_t>(e));
    // The division in the float type of x and the scale, as the reference implementation does: float32
    // division, rounded once more to float16 / bfloat16 (float32 holds 2p + 2 bits of either, so this is
    // their correctly rounded quotient); integer x in double. Then round half to even and saturate.
    const double scaled = float_x
                              ? RoundToFloatType(static_cast<float>(a.xv[e]) / static_cast<float>(a.sv[p]), x.dtype())
                              : a.xv[e] / a.sv[p];
    q[e] = std::isnan(scaled) ? lo : std::clamp(std::nearbyint(scaled) + a.zv[p], lo, hi);
  }
  return StoreDoubles(y, q);
}

absl::Status Dequantize(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& scale = ctx.in(1);
  if (IsByteQuant(x.dtype()) && RowQuantizable(ctx, x.dtype(), ctx.infer()[0].dtype)) {
    CJIT_ASSIGN_OR_RETURN(QuantArgsShape a, CheckQuantArgs(ctx));
    return FastDequantize(ctx, a);
  }
  if (!IsFloat(scale.dtype()))
    return ctx.Error(absl::StrCat("the scale must be a float tensor, got ", DTypeName(scale.dtype())));
  if (ctx.has(2) && ctx.in(2).dtype() != x.dtype()) {
    return ctx.Error(absl::StrCat("the zero point is ", DTypeName(ctx.in(2).dtype()), ", x ", DTypeName(x.dtype())));
  }
  Tensor& y = ctx.Alloc(0);
  CJIT_ASSIGN_OR_RETURN(QuantArgs a, ReadQuantArgs(ctx));
  std::vector<double> out(a.xv.size());
  for (size_t e = 0; e < a.xv.size(); ++e) {
    const int64_t p = ParamIndex(a.shape, static_cast<int64_t>(e));
    // (x - zero point) * scale in float32 (rounded to the output type by the store), as the reference does.
    out[e] = static_cast<float>((a.xv[e] - a.zv[p]) * static_cast<float>(a.sv[p]));
  }
  return StoreDoubles(y, out);
}

absl::Status DynamicQuantize(KernelContext& ctx) {
  // ONNX DynamicQuantizeLinear: the range includes 0; scale = (max - min) / 255; zero point
  // saturate(rint(0 - min / scale)); y = saturate(rint(x / scale) + zero point). The input is float32 (the
  // importer's schema check rejects other types).
  const Tensor& x = ctx.in(0);
  if (x.dtype() != DType::kF32) return ctx.Error(absl::StrCat("x must be float32, got ", DTypeName(x.dtype())));
  const float* xp = x.data<float>();
  const int64_t n = x.numel();
  const int threads = ThreadsForElements(ctx.threads, n);
  const int64_t piece = std::max<int64_t>(4096, (n + threads - 1) / std::max(threads, 1));
  const int64_t pieces = (n + piece - 1) / piece;
  std::vector<float> mns(pieces, 0.0f), mxs(pieces, 0.0f);
  ParallelFor(threads, pieces, [&](int64_t i) {
    MinMaxF32(xp + i * piece, std::min(piece, n - i * piece), &mns[i], &mxs[i]);
  });
  float mn = 0, mx = 0;
  for (int64_t i = 0; i < pieces; ++i) {
    mn = std::min(mn, mns[i]);
    mx = std::max(mx, mxs[i]);
  }
  const float scale = (mx - mn) / 255.0f;
  // An infinite range (scale inf) gives 0 - min / scale = 0 or NaN (-inf / inf): zero point 0.
  const float zpf =
      scale == 0 || !std::isfinite(scale) ? 0 : std::clamp(std::nearbyint(0.0f - mn / scale), 0.0f, 255.0f);
  const int32_t zp = static_cast<int32_t>(zpf);
  Tensor& y = ctx.Alloc(0);
  uint8_t* yp = y.data<uint8_t>();
  if (scale == 0 || !std::isfinite(scale)) {
    // All zeros (or an infinite range, which has no usable scale): every value is the zero point.
    std::memset(yp, zp, n);
  } else {
    ParallelFor(threads, pieces, [&](int64_t i) {
      QuantizeRowF32(xp + i * piece, std::min(piece, n - i * piece), scale, zp, false, yp + i * piece);
    });
  }
  *ctx.Alloc(1).data<float>() = scale;
  *ctx.Alloc(2).data<uint8_t>() = static_cast<uint8_t>(zp);
  return absl::OkStatus();
}

}  // namespace

void RegisterQdqKernels() {
  RegisterKernel("QuantizeLinear", Quantize);
  RegisterKernel("DequantizeLinear", Dequantize);
  RegisterKernel("DynamicQuantizeLinear", DynamicQuantize);
}

}  // namespace cjit
