// Resize (opsets 10-18) and Upsample (7-9): nearest / linear / cubic interpolation, separable over every
// dim, with all coordinate_transformation_modes and nearest_modes of the ONNX Resize specification.
// Each output element is the weighted sum over the product of per-dim taps (1, 2 or 4 per dim).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "compiler/ir/cpu_isa.h"
#include "absl/strings/str_cat.h"
#include "compiler/ir/numeric_cast.h"
#include "base/status_macros.h"
#include "runtime/cpu/dispatch.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/resize.h"

namespace cjit {
namespace {

namespace isa_base {
#include "runtime/cpu/resize_separable.inc"
}  // namespace isa_base
#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace isa_avx2 {
#include "runtime/cpu/resize_separable.inc"
}  // namespace isa_avx2
#pragma GCC pop_options
#endif

bool SeparableResizeF32(const Tensor& x, Tensor& y, const std::vector<ResizeTaps>& taps, int threads) {
#if defined(__x86_64__)
  const bool avx2 = CpuHasAvx2();
  if (avx2) return isa_avx2::SeparableResizeF32(x, y, taps, threads);
#endif
  return isa_base::SeparableResizeF32(x, y, taps, threads);
}

double CubicWeight(double s, double a) {
  s = std::abs(s);
  if (s <= 1) return ((a + 2) * s - (a + 3)) * s * s + 1;
  if (s < 2) return ((a * s - 5 * a) * s + 8 * a) * s - 4 * a;
  return 0;
}

}  // namespace

absl::StatusOr<std::vector<ResizeTaps>> ResizeTapsOf(const Node& n, const Dims& xd, const Dims& yd, const Tensor* roi_t,
                                                     const Tensor* scales_t, bool sizes_given) {
  int r = static_cast<int>(xd.size());
  if (static_cast<int>(yd.size()) != r) return absl::InvalidArgumentError("input and output ranks differ");
  bool legacy = n.op_type == "Upsample" || n.opset_version == 10;
  std::string mode = n.GetString("mode", "nearest");
  std::string ctm = legacy ? "asymmetric" : n.GetString("coordinate_transformation_mode", "half_pixel");
  std::string nearest = legacy ? "legacy" : n.GetString("nearest_mode", "round_prefer_floor");
  double a = n.GetFloat("cubic_coeff_a", -0.75f);
  bool exclude = n.GetInt("exclude_outside", 0) != 0;
  // Attribute values outside the specification are errors (an unknown mode used to run as cubic).
  if (mode != "nearest" && mode != "linear" && mode != "cubic") {
    return absl::InvalidArgumentError(absl::StrCat("unsupported mode '", mode, "' (nearest, linear or cubic)"));
  }
  static const char* kTransforms[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                      "tf_half_pixel_for_nn", "tf_crop_and_resize", "half_pixel_symmetric"};
  if (std::find(std::begin(kTransforms), std::end(kTransforms), ctm) == std::end(kTransforms)) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported coordinate_transformation_mode '", ctm, "'"));
  }
  static const char* kNearest[] = {"legacy", "round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  if (std::find(std::begin(kNearest), std::end(kNearest), nearest) == std::end(kNearest)) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported nearest_mode '", nearest, "'"));
  }
  // Scales per dim (output/input unless scales were given).
  std::vector<double> scale(r, 1.0);
  std::vector<int64_t> axes = n.GetInts("axes");
  std::vector<int> sel;
  if (axes.empty()) for (int i = 0; i < r; ++i) sel.push_back(i);
  else for (int64_t ax : axes) sel.push_back(static_cast<int>(ax < 0 ? ax + r : ax));
  if (scales_t && !sizes_given) {
    std::vector<double> s = scales_t->ToDoubleVector();
    for (size_t k = 0; k < sel.size() && k < s.size(); ++k) scale[sel[k]] = static_cast<float>(s[k]);
  } else if (n.HasAttr("scales")) {
    std::vector<float> s = n.GetFloats("scales");
    for (size_t k = 0; k < s.size() && k < static_cast<size_t>(r); ++k) scale[k] = s[k];
  } else {
    for (int d = 0; d < r; ++d) scale[d] = xd[d] ? static_cast<double>(yd[d]) / xd[d] : 1.0;
  }
  std::vector<double> roi;
  if (roi_t) roi = roi_t->ToDoubleVector();
  std::vector<ResizeTaps> taps(r);
  for (int d = 0; d < r; ++d) {
    int64_t in = xd[d], out = yd[d];
    ResizeTaps& t = taps[d];
    t.n = mode == "nearest" ? 1 : mode == "linear" ? 2 : 4;
    if (in == out && scale[d] == 1.0 && ctm != "tf_crop_and_resize") t.n = 1;
    t.idx.assign(out * t.n, 0);
    t.w.assign(out * t.n, 0);
    t.outside.assign(out, false);
    for (int64_t i = 0; i < out; ++i) {
      double s = scale[d], xo;
      if (in == out && s == 1.0 && ctm != "tf_crop_and_resize") {
        t.idx[i] = i;
        t.w[i] = 1;
        continue;
      }
      if (ctm == "half_pixel") xo = (i + 0.5) / s - 0.5;
      else if (ctm == "pytorch_half_pixel") xo = out > 1 ? (i + 0.5) / s - 0.5 : 0;
      else if (ctm == "align_corners") {
        // With scales given, length_resized is in * scale (not rounded), as the specification defines.
        double len = sizes_given || !scales_t ? static_cast<double>(out) : in * s;
        xo = len > 1 ? i * static_cast<double>(in - 1) / (len - 1) : 0;
      } else if (ctm == "tf_half_pixel_for_nn") xo = (i + 0.5) / s;
      else if (ctm == "half_pixel_symmetric") {
        double adj = static_cast<double>(out) / (s * in);
        double center = in / 2.0, offset = center * (1 - adj);
        xo = offset + (i + 0.5) / s - 0.5;
      } else if (ctm == "tf_crop_and_resize") {
        double start = roi.size() >= static_cast<size_t>(2 * r) ? roi[d] : 0;
        double end = roi.size() >= static_cast<size_t>(2 * r) ? roi[r + d] : 1;
        xo = out > 1 ? start * (in - 1) + i * (end - start) * (in - 1) / (out - 1) : 0.5 * (start + end) * (in - 1);
        if (xo < 0 || xo > in - 1) t.outside[i] = true;
      } else xo = i / s;  // asymmetric
      if (mode == "nearest") {
        int64_t k;
        if (nearest == "legacy") k = s < 1 ? NumericCast<int64_t>(std::ceil(xo)) : NumericCast<int64_t>(std::floor(xo));
        else if (nearest == "floor") k = NumericCast<int64_t>(std::floor(xo));
        else if (nearest == "ceil") k = NumericCast<int64_t>(std::ceil(xo));
        else if (nearest == "round_prefer_ceil") k = NumericCast<int64_t>(std::floor(xo + 0.5));
        else
          k = (xo - std::floor(xo) == 0.5) ? NumericCast<int64_t>(std::floor(xo))
                                           : NumericCast<int64_t>(std::round(xo));
        t.idx[i] = std::clamp<int64_t>(k, 0, in - 1);
        t.w[i] = 1;
      } else if (mode == "linear") {
        double xc = std::clamp(xo, 0.0, static_cast<double>(in - 1));
        int64_t x0 = NumericCast<int64_t>(std::floor(xc));
        int64_t x1 = std::min<int64_t>(x0 + 1, in - 1);
        double f = xc - x0;
        t.idx[i * 2] = x0;
        t.idx[i * 2 + 1] = x1;
        t.w[i * 2] = 1 - f;
        t.w[i * 2 + 1] = f;
      } else {
        // Beyond [-3, in + 2] every tap clamps to the same edge element (or, with exclude_outside, every
        // tap is outside): the result is the same for any coordinate there, so the coordinate is clamped
        // before the integer arithmetic (a huge roi or scale overflowed x0 - 1 + k).
        double xq = std::isnan(xo) ? xo : std::clamp(xo, -3.0, static_cast<double>(in) + 2.0);
        int64_t x0 = NumericCast<int64_t>(std::floor(xq));
        double f = xq - x0, sum = 0;
        for (int k = 0; k < 4; ++k) {
          int64_t p = x0 - 1 + k;
          double w = CubicWeight(f - (k - 1), a);
          if (exclude && (p < 0 || p >= in)) w = 0;
          sum += w;
          t.idx[i * 4 + k] = std::clamp<int64_t>(p, 0, in - 1);
          t.w[i * 4 + k] = w;
        }
        if (exclude && sum != 0) for (int k = 0; k < 4; ++k) t.w[i * 4 + k] /= sum;
      }
    }
  }
  return taps;
}

absl::Status ResizeKernel(KernelContext& ctx) {
  const Node& n = *ctx.node;
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.Alloc(0);
  int r = x.rank();
  bool legacy = n.op_type == "Upsample" || n.opset_version == 10;
  double extrap = n.GetFloat("extrapolation_value", 0.0f);
  const Tensor* scales_t = nullptr;
  if (legacy) scales_t = ctx.has(1) ? &ctx.in(1) : nullptr;
  else scales_t = ctx.has(2) && ctx.in(2).numel() > 0 ? &ctx.in(2) : nullptr;
  bool sizes_given = !legacy && ctx.has(3) && ctx.in(3).numel() > 0;
  if (x.numel() == 0 && y.numel() > 0) {
    return ctx.Error("cannot resize an empty input to a non-empty output (no values to interpolate from)");
  }
  // An empty output needs no taps; its other dims are bounded by nothing (one dim of 0 beside one of 2^40
  // would size the tap tables by the latter).
  if (y.numel() == 0) return absl::OkStatus();
  absl::StatusOr<std::vector<ResizeTaps>> taps_or =
      ResizeTapsOf(n, x.dims(), y.dims(), !legacy && ctx.has(1) ? &ctx.in(1) : nullptr, scales_t, sizes_given);
  if (!taps_or.ok()) return ctx.Error(std::string(taps_or.status().message()));
  const std::vector<ResizeTaps>& taps = *taps_or;
  std::vector<int64_t> xs(r, 1), ys(r, 1);
  for (int i = r - 2; i >= 0; --i) {
    xs[i] = xs[i + 1] * x.dim(i + 1);
    ys[i] = ys[i + 1] * y.dim(i + 1);
  }
  // Nearest (one tap per dim, no extrapolation): a gather along each dim. Output rows (all dims but the
  // trailing block) are walked with an odometer; the trailing dims that are copied unchanged (the channels
  // of channels-last data, or nothing) move as one block, the others element by element.
  bool nearest_only = true;
  for (int d = 0; d < r; ++d) {
    if (taps[d].n != 1) nearest_only = false;
    for (bool o : taps[d].outside) nearest_only &= !o;
  }
  if (nearest_only && r >= 1 && y.numel() > 0) {
    int split = r;  // dims [split, r) are identity: copied as contiguous blocks
    while (split > 0) {
      const ResizeTaps& t = taps[split - 1];
      int64_t in = x.dim(split - 1), out = y.dim(split - 1);
      bool identity = in == out;
      for (int64_t i = 0; identity && i < out; ++i) identity = t.idx[i] == i;
      if (!identity) break;
      --split;
    }
    int64_t block = 1;
    for (int d = split; d < r; ++d) block *= x.dim(d);
    if (split == 0) {  // nothing moves
      std::memcpy(y.raw(), x.raw(), x.nbytes());
      return absl::OkStatus();
    }
    int last = split - 1;  // innermost gathered dim
    int64_t rows = 1;
    for (int d = 0; d < last; ++d) rows *= y.dim(d);
    int64_t out_last = y.dim(last);
    size_t esize = DTypeSize(x.dtype());
    const uint8_t* px = static_cast<const uint8_t*>(x.raw());
    uint8_t* py = static_cast<uint8_t*>(y.raw());
    int nt = static_cast<int>(std::min<int64_t>(ThreadsForElements(ctx.threads, y.numel()), rows));
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int t = 0; t < nt; ++t) {
      int64_t r0 = rows * t / nt, r1 = rows * (t + 1) / nt;
      for (int64_t row = r0; row < r1; ++row) {
        int64_t rem = row, src = 0;
        for (int d = last - 1; d >= 0; --d) {
          int64_t o = rem % y.dim(d);
          rem /= y.dim(d);
          src += taps[d].idx[o] * xs[d];
        }
        uint8_t* dst = py + static_cast<size_t>(row * out_last * block) * esize;
        const ResizeTaps& tl = taps[last];
        if (block == 1) {
          switch (esize) {
            case 4: {
              const uint32_t* s4 = reinterpret_cast<const uint32_t*>(px) + src;
              uint32_t* d4 = reinterpret_cast<uint32_t*>(dst);
              for (int64_t i = 0; i < out_last; ++i) d4[i] = s4[tl.idx[i]];
              break;
            }
            default:
              for (int64_t i = 0; i < out_last; ++i) {
                std::memcpy(dst + i * esize, px + static_cast<size_t>(src + tl.idx[i]) * esize, esize);
              }
          }
        } else {
          for (int64_t i = 0; i < out_last; ++i) {
            std::memcpy(dst + static_cast<size_t>(i * block) * esize,
                        px + static_cast<size_t>(src + tl.idx[i] * xs[last]) * esize, block * esize);
          }
        }
      }
    }
    MarkParallelEnd();
    return absl::OkStatus();
  }
  if (SeparableResizeF32(x, y, taps, ctx.threads)) return absl::OkStatus();
  return DispatchNumeric(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    int nt = ThreadsForElements(ctx.threads, y.numel());
#pragma omp parallel for num_threads(nt) if (nt > 1)
    for (int64_t e = 0; e < y.numel(); ++e) {
      int64_t o_small[8];
      std::vector<int64_t> o_big(r > 8 ? r : 0);
      int64_t* o = r > 8 ? o_big.data() : o_small;
      int64_t rem = e, combos = 1;
      bool outside = false;
      for (int d = 0; d < r; ++d) {
        o[d] = rem / ys[d];
        rem %= ys[d];
        combos *= taps[d].n;
        outside |= taps[d].outside[o[d]];
      }
      if (outside) {
        // An integer output saturates (NaN -> 0) as Cast does (compiler/ir/numeric_cast.h): the attribute
        // is a float and may lie outside the type's range.
        py[e] = NumericCast<T>(extrap);
        continue;
      }
      double acc = 0;
      for (int64_t c = 0; c < combos; ++c) {
        int64_t cc = c, off = 0;
        double w = 1;
        for (int d = r - 1; d >= 0; --d) {
          int k = static_cast<int>(cc % taps[d].n);
          cc /= taps[d].n;
          off += taps[d].idx[o[d] * taps[d].n + k] * xs[d];
          w *= taps[d].w[o[d] * taps[d].n + k];
        }
        if (w != 0) acc += w * static_cast<double>(px[off]);
      }
      if constexpr (std::is_integral_v<T>) py[e] = NumericCast<T>(std::nearbyint(acc));
      else py[e] = static_cast<T>(acc);
    }
    MarkParallelEnd();
  });
}

void RegisterResizeKernels() {
  RegisterKernel("Resize", ResizeKernel);
  RegisterKernel("Upsample", ResizeKernel);
}

}  // namespace cjit
