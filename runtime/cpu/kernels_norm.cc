// Normalizations: BatchNormalization (inference), LayerNormalization, InstanceNormalization,
// GroupNormalization (and the FlatGroupNorm / NhwcGroupNorm forms passes produce), LRN and
// MeanVarianceNormalization. Row moments in double (RowMoments). Semantics: ONNX operator specification.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/cpu/dispatch.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/parallel.h"

namespace cjit {
namespace {

absl::Status BatchNorm(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  float eps = ctx.node->GetFloat("epsilon", 1e-5f);
  Tensor& y = ctx.Alloc(0);
  int64_t N = x.dim(0), C = x.rank() > 1 ? x.dim(1) : 1, sp = x.numel() / std::max<int64_t>(N * C, 1);
  if (x.rank() < 2) return ctx.Error(absl::StrCat("X must have a channel dim, got ", DimsToString(x.dims())));
  for (int i = 1; i <= 4; ++i) {
    if (ctx.in(i).dims() != Dims{C}) {
      return ctx.Error(
          absl::StrCat("input ", i, " has dims ", DimsToString(ctx.in(i).dims()), ", X has ", C, " channels"));
    }
  }
  std::vector<double> sc = ctx.in(1).ToDoubleVector(), b = ctx.in(2).ToDoubleVector(),
                      mean = ctx.in(3).ToDoubleVector(), var = ctx.in(4).ToDoubleVector();
  bool training = ctx.node->GetInt("training_mode", 0) != 0;
  if (training) {
    // Batch statistics (ONNX BatchNormalization-15 training mode).
    std::vector<double> v = x.ToDoubleVector();
    double mom = ctx.node->GetFloat("momentum", 0.9f);
    std::vector<double> bm(C, 0), bv(C, 0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < sp; ++i) bm[c] += v[(n * C + c) * sp + i];
    for (int64_t c = 0; c < C; ++c) bm[c] /= N * sp;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < sp; ++i) { double d = v[(n * C + c) * sp + i] - bm[c]; bv[c] += d * d; }
    for (int64_t c = 0; c < C; ++c) bv[c] /= N * sp;
    if (ctx.wants(1)) {
      Tensor& rm = ctx.Alloc(1);
      Tensor& rv = ctx.Alloc(2);
      CJIT_RETURN_IF_ERROR(DispatchFloat(rm.dtype(), [&](auto t) {
        using T = decltype(t);
        for (int64_t c = 0; c < C; ++c) {
          rm.data<T>()[c] = static_cast<T>(mean[c] * mom + bm[c] * (1 - mom));
          rv.data<T>()[c] = static_cast<T>(var[c] * mom + bv[c] * (1 - mom));
        }
      }));
    }
    mean = bm;
    var = bv;
  }
  return DispatchFloat(x.dtype(), [&](auto t) {
    using T = decltype(t);
    using A = typename Acc<T>::type;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) {
        A s = static_cast<A>(sc[c] / std::sqrt(var[c] + eps));
        A sh = static_cast<A>(b[c] - mean[c] * sc[c] / std::sqrt(var[c] + eps));
        const T* px = x.data<T>() + (n * C + c) * sp;
        T* py = y.data<T>() + (n * C + c) * sp;
        for (int64_t i = 0; i < sp; ++i) py[i] = static_cast<T>(static_cast<A>(px[i]) * s + sh);
      }
  });
}

template <typename T>
std::pair<double, double> RowMoments(const T* p, int64_t n);

absl::Status LayerNorm(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(*ctx.node, ctx.node->GetInt("axis", -1), x.rank()));
  float eps = ctx.node->GetFloat("epsilon", 1e-5f);
  Tensor& y = ctx.Alloc(0);
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < ax; ++i) outer *= x.dim(i);
  for (int i = ax; i < x.rank(); ++i) inner *= x.dim(i);
  Tensor* mean_out = ctx.wants(1) ? &ctx.Alloc(1) : nullptr;
  Tensor* inv_out = ctx.wants(2) ? &ctx.Alloc(2) : nullptr;
  const Tensor& scale = ctx.in(1);
  const Tensor* bias = ctx.has(2) ? &ctx.in(2) : nullptr;
  // Scale and bias broadcast to the normalized dims x.dims[axis:]: after leading 1s, a suffix of them.
  for (const Tensor* p : {&scale, bias}) {
    if (p == nullptr) continue;
    Dims d = p->dims();
    while (!d.empty() && d.front() == 1 && static_cast<int>(d.size()) > 0) d.erase(d.begin());
    bool ok = p->dtype() == x.dtype() && static_cast<int>(d.size()) <= x.rank() - ax;
    for (size_t i = 0; ok && i < d.size(); ++i) ok = d[d.size() - 1 - i] == x.dim(x.rank() - 1 - static_cast<int>(i));
    if (!ok) {
      return ctx.Error(absl::StrCat(p == &scale ? "Scale" : "B", " (", DTypeName(p->dtype()), "[",
                                    DimsToString(p->dims()), "]) does not broadcast to the normalized dims of X (",
                                    DTypeName(x.dtype()), "[", DimsToString(x.dims()), "], axis ", ax, ")"));
    }
  }
  if (x.dtype() == DType::kF32 && outer > 0 && inner > 0) {
    // float32: each row's moments summed in double over float blocks (RowMoments, vectorized), rows over
    // the threads, the normalization one vector pass (it summed sequentially in float: 1.06 ms of a BERT
    // step at 128 tokens, where ORT took 0.15).
    std::vector<float> sv(static_cast<size_t>(inner)), bv(static_cast<size_t>(inner), 0.0f);
    for (int64_t i = 0; i < inner; ++i) {
      sv[i] = scale.data<float>()[scale.numel() == inner ? i : i % scale.numel()];
      if (bias) bv[i] = bias->data<float>()[bias->numel() == inner ? i : i % bias->numel()];
    }
    const float* px0 = x.data<float>();
    float* py0 = y.data<float>();
    const int nt = static_cast<int>(std::clamp<int64_t>(ThreadsForElements(ctx.threads, outer * inner), 1, outer));
    ParallelFor(nt, nt, [&](int64_t t) {
      for (int64_t o = outer * t / nt; o < outer * (t + 1) / nt; ++o) {
        const float* px = px0 + o * inner;
        float* py = py0 + o * inner;
        const auto [mean, var] = RowMoments(px, inner);
        const float m = static_cast<float>(mean);
        const float inv = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps)));
        const float* ps = sv.data();
        const float* pb = bv.data();
#pragma omp simd
        for (int64_t i = 0; i < inner; ++i) py[i] = (px[i] - m) * inv * ps[i] + pb[i];
        if (mean_out) mean_out->data<float>()[o] = m;
        if (inv_out) inv_out->data<float>()[o] = inv;
      }
    });
    return absl::OkStatus();
  }
  Tensor sb = Tensor(x.dtype(), {inner}), bb = Tensor(x.dtype(), {inner});
  return DispatchFloat(x.dtype(), [&](auto t) {
    using T = decltype(t);
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    // Broadcast scale/bias to [inner].
    auto bcast = [&](const Tensor& s, int64_t i) -> A {
      return static_cast<A>(s.data<T>()[s.numel() == inner ? i : i % s.numel()]);
    };
    for (int64_t o = 0; o < outer; ++o) {
      const T* px = x.data<T>() + o * inner;
      T* py = y.data<T>() + o * inner;
      A mean = 0, var = 0;
      for (int64_t i = 0; i < inner; ++i) mean += static_cast<A>(px[i]);
      mean /= inner;
      for (int64_t i = 0; i < inner; ++i) { A d = static_cast<A>(px[i]) - mean; var += d * d; }
      var /= inner;
      A inv = A(1) / std::sqrt(var + static_cast<A>(eps));
      for (int64_t i = 0; i < inner; ++i) {
        A v = (static_cast<A>(px[i]) - mean) * inv * bcast(scale, i);
        if (bias) v += bcast(*bias, i);
        py[i] = static_cast<T>(v);
      }
      if (mean_out) mean_out->data<float>()[o] = static_cast<float>(mean);
      if (inv_out) inv_out->data<float>()[o] = static_cast<float>(inv);
    }
  });
}

// Mean and (population) variance of the n values at p, in double. Float rows are summed in blocks of 512
// in float lanes (vectorized: an OpenMP simd reduction) whose sums are added in double, and the variance is
// taken about the mean in a second pass (no cancellation of sum-of-squares minus squared sum).
template <typename T>
std::pair<double, double> RowMoments(const T* p, int64_t n) {
  if (n <= 0) return {0.0, 0.0};
  constexpr int64_t kBlock = 512;
  double sum = 0, sq = 0;
  if constexpr (std::is_same_v<T, float>) {
    for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
      const int64_t e = std::min(n, i0 + kBlock);
      float s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t i = i0; i < e; ++i) s += p[i];
      sum += s;
    }
    const float m = static_cast<float>(sum / n);
    for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
      const int64_t e = std::min(n, i0 + kBlock);
      float s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t i = i0; i < e; ++i) s += (p[i] - m) * (p[i] - m);
      sq += s;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(p[i]);
    const double m = sum / n;
    for (int64_t i = 0; i < n; ++i) sq += (static_cast<double>(p[i]) - m) * (static_cast<double>(p[i]) - m);
  }
  return {sum / n, sq / n};
}

// y = x * s + sh over n values (float arithmetic for float and 16-bit types, double for double).
template <typename T>
void AffineRow(const T* px, T* py, int64_t n, double s, double sh) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const A as = static_cast<A>(s), ash = static_cast<A>(sh);
  if constexpr (std::is_same_v<T, float>) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) py[i] = px[i] * as + ash;
  } else {
    for (int64_t i = 0; i < n; ++i) py[i] = static_cast<T>(static_cast<A>(px[i]) * as + ash);
  }
}

// The normalization of InstanceNormalization and GroupNormalization: `rows` rows of `segments` x
// `seg_len` values each; every row is normalized by its own mean and variance, then segment j of row r
// scaled and shifted by scale[param(r, j)], bias[param(r, j)]. Rows are split over the threads.
template <typename T, typename Param>
void NormalizeRows(const KernelContext& ctx, const T* x, T* y, int64_t rows, int64_t segments, int64_t seg_len,
                   double eps, const std::vector<double>& scale, const std::vector<double>& bias, Param param) {
  const int64_t len = segments * seg_len;
  if (rows <= 0) return;
  const int nt = static_cast<int>(std::clamp<int64_t>(ThreadsForElements(ctx.threads, rows * len), 1, rows));
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* px = x + r * len;
    T* py = y + r * len;
    const auto [mean, var] = RowMoments(px, len);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t j = 0; j < segments; ++j) {
      const int64_t k = param(r, j);
      const double s = inv * scale[k];
      AffineRow(px + j * seg_len, py + j * seg_len, seg_len, s, bias[k] - mean * s);
    }
  }
  if (nt > 1) MarkParallelEnd();
}

absl::Status InstanceNorm(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  float eps = ctx.node->GetFloat("epsilon", 1e-5f);
  Tensor& y = ctx.Alloc(0);
  int64_t N = x.dim(0), C = x.dim(1), sp = x.numel() / std::max<int64_t>(N * C, 1);
  std::vector<double> sc = ctx.in(1).ToDoubleVector(), b = ctx.in(2).ToDoubleVector();
  if (static_cast<int64_t>(sc.size()) != C || static_cast<int64_t>(b.size()) != C) {
    return ctx.Error(absl::StrCat("scale and B must have C = ", C, " values"));
  }
  return DispatchFloat(x.dtype(), [&](auto t) {
    using T = decltype(t);
    NormalizeRows(ctx, x.data<T>(), y.data<T>(), N * C, 1, sp, eps, sc, b,
                  [C](int64_t r, int64_t) { return r % C; });
  });
}

// GroupNormalization (ONNX -18: scale/bias per group; -21: per channel): statistics over each group of
// C / num_groups channels and all spatial positions.
absl::Status GroupNorm(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  float eps = ctx.node->GetFloat("epsilon", 1e-5f);
  int64_t G = ctx.node->GetInt("num_groups", 0);
  if (x.rank() < 2 || G <= 0 || x.dim(1) % G != 0)
    return ctx.Error("X must be N x C x ... with C divisible by num_groups");
  int64_t N = x.dim(0), C = x.dim(1), sp = x.numel() / std::max<int64_t>(N * C, 1), cpg = C / G;
  bool per_channel = ctx.node->opset_version >= 21;
  int64_t plen = per_channel ? C : G;
  if (ctx.in(1).numel() != plen || ctx.in(2).numel() != plen) {
    return ctx.Error(absl::StrCat("scale and bias must have ", plen, " values"));
  }
  Tensor& y = ctx.Alloc(0);
  std::vector<double> sc = ctx.in(1).ToDoubleVector(), b = ctx.in(2).ToDoubleVector();
  return DispatchFloat(x.dtype(), [&](auto t) {
    using T = decltype(t);
    NormalizeRows(ctx, x.data<T>(), y.data<T>(), N * G, cpg, sp, eps, sc, b,
                  [G, cpg, per_channel](int64_t r, int64_t j) { return per_channel ? (r % G) * cpg + j : r % G; });
  });
}

// com.clusterjit.FlatGroupNorm (compiler/passes/simplify.h): rows of X [N, ...] split into num_groups
// contiguous parts per sample (what Reshape to [N, G, M] gives), each normalized, then scale[g] and bias[g].
absl::Status FlatGroupNorm(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const int64_t groups = ctx.node->GetInt("num_groups", 0);
  const int64_t rows = x.rank() >= 1 ? x.dim(0) * groups : 0;
  if (groups <= 0 || (rows > 0 && x.numel() % rows != 0) || ctx.in(1).numel() != groups ||
      ctx.in(2).numel() != groups) {
    return ctx.Error(absl::StrCat("X (", DimsToString(x.dims()), ") does not split into N x num_groups (", groups,
                                  ") rows, or scale / bias do not have num_groups values"));
  }
  Tensor& y = ctx.Alloc(0);
  if (rows == 0) return absl::OkStatus();
  std::vector<double> sc = ctx.in(1).ToDoubleVector(), b = ctx.in(2).ToDoubleVector();
  return DispatchFloat(x.dtype(), [&](auto t) {
    using T = decltype(t);
    NormalizeRows(ctx, x.data<T>(), y.data<T>(), rows, 1, x.numel() / rows, ctx.node->GetFloat("epsilon", 1e-5f), sc,
                  b, [groups](int64_t r, int64_t) { return r % groups; });
  });
}

// com.clusterjit.NhwcGroupNorm (compiler/passes/layout.h): X [N, d.., C] channels-last, float32; group g
// holds channels [g * C/G, (g + 1) * C/G) of every position. Per sample: per-channel sums over the positions
// (vectorized over the contiguous channels, float blocks of 256 positions added in double, positions split
// over the threads), combined per group; the squared deviations from the group mean likewise; then
// y = x * a[c] + b[c].
absl::Status NhwcGroupNorm(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const int64_t groups = ctx.node->GetInt("num_groups", 0);
  if (x.dtype() != DType::kF32 || x.rank() < 3 || groups <= 0 || x.dim(x.rank() - 1) % groups != 0 ||
      ctx.in(1).numel() != groups || ctx.in(2).numel() != groups) {
    return ctx.Error(absl::StrCat("X (", DimsToString(x.dims()), ") must be float32 [N, .., C] with C divisible by ",
                                  "num_groups (", groups, "), scale / bias num_groups values"));
  }
  Tensor& y = ctx.Alloc(0);
  const int64_t N = x.dim(0), C = x.dim(x.rank() - 1), S = x.numel() / std::max<int64_t>(N * C, 1), cpg = C / groups;
  if (x.numel() == 0) return absl::OkStatus();
  const double eps = ctx.node->GetFloat("epsilon", 1e-5f);
  const std::vector<double> sc = ctx.in(1).ToDoubleVector(), bs = ctx.in(2).ToDoubleVector();
  const int nt = static_cast<int>(std::clamp<int64_t>(ThreadsForElements(ctx.threads, x.numel()), 1, S));
  std::vector<std::vector<double>> part(nt, std::vector<double>(C));
  std::vector<float> center(C), a(C), b(C);
  // Per-channel sums of x (or of its squared deviation from `center`) over the positions of one sample,
  // summed per group.
  auto group_sums = [&](const float* px, bool squared) {
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
      const int t = nt > 1 ? omp_get_thread_num() : 0;
      const int64_t s0 = S * t / nt, s1 = S * (t + 1) / nt;
      std::vector<double>& acc = part[t];
      std::fill(acc.begin(), acc.end(), 0.0);
      std::vector<float> blk(C);
      for (int64_t b0 = s0; b0 < s1; b0 += 256) {
        std::fill(blk.begin(), blk.end(), 0.0f);
        for (int64_t p = b0; p < std::min(s1, b0 + 256); ++p) {
          const float* row = px + p * C;
          if (squared) {
#pragma omp simd
            for (int64_t c = 0; c < C; ++c) blk[c] += (row[c] - center[c]) * (row[c] - center[c]);
          } else {
#pragma omp simd
            for (int64_t c = 0; c < C; ++c) blk[c] += row[c];
          }
        }
        for (int64_t c = 0; c < C; ++c) acc[c] += blk[c];
      }
    }
    std::vector<double> g(groups, 0.0);
    for (int t = 0; t < nt; ++t)
      for (int64_t c = 0; c < C; ++c) g[c / cpg] += part[t][c];
    return g;
  };
  const double count = static_cast<double>(S * cpg);
  for (int64_t n = 0; n < N; ++n) {
    const float* px = x.data<float>() + n * S * C;
    float* py = y.data<float>() + n * S * C;
    std::vector<double> mean = group_sums(px, false);
    for (int64_t g = 0; g < groups; ++g) mean[g] /= count;
    for (int64_t c = 0; c < C; ++c) center[c] = static_cast<float>(mean[c / cpg]);
    std::vector<double> var = group_sums(px, true);
    for (int64_t c = 0; c < C; ++c) {
      const int64_t g = c / cpg;
      const double s = sc[g] / std::sqrt(var[g] / count + eps);
      a[c] = static_cast<float>(s);
      b[c] = static_cast<float>(bs[g] - mean[g] * s);
    }
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t p = 0; p < S; ++p) {
      const float* row = px + p * C;
      float* out = py + p * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) out[c] = row[c] * a[c] + b[c];
    }
  }
  if (nt > 1) MarkParallelEnd();
  return absl::OkStatus();
}

absl::Status Lrn(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.Alloc(0);
  double alpha = ctx.node->GetFloat("alpha", 1e-4f), beta = ctx.node->GetFloat("beta", 0.75f),
         bias = ctx.node->GetFloat("bias", 1.0f);
  int64_t size = ctx.node->GetInt("size", 1);
  int64_t N = x.dim(0), C = x.dim(1), sp = x.numel() / std::max<int64_t>(N * C, 1);
  std::vector<double> v = x.ToDoubleVector();
  return DispatchFloat(x.dtype(), [&](auto t) {
    using T = decltype(t);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < sp; ++i) {
          double sq = 0;
          int64_t lo = std::max<int64_t>(0, c - (size - 1) / 2), hi = std::min<int64_t>(C - 1, c + size / 2);
          for (int64_t k = lo; k <= hi; ++k) { double e = v[(n * C + k) * sp + i]; sq += e * e; }
          y.data<T>()[(n * C + c) * sp + i] =
              static_cast<T>(v[(n * C + c) * sp + i] / std::pow(bias + alpha / size * sq, beta));
        }
  });
}

absl::Status Mvn(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.Alloc(0);
  std::vector<int64_t> axes = ctx.node->GetInts("axes", {0, 2, 3});
  int r = x.rank();
  std::vector<bool> red(r, false);
  for (int64_t a : axes) {
    CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(*ctx.node, a, r));  // the default {0, 2, 3} needs rank >= 4
    red[ax] = true;
  }
  std::vector<double> v = x.ToDoubleVector();
  std::vector<int64_t> xs(r, 1);
  for (int i = r - 2; i >= 0; --i) xs[i] = xs[i + 1] * x.dim(i + 1);
  // Group elements by their non-reduced coordinates.
  std::map<int64_t, std::pair<double, double>> stats;
  std::map<int64_t, int64_t> counts;
  std::vector<int64_t> key(x.numel());
  for (int64_t e = 0; e < x.numel(); ++e) {
    int64_t k = 0;
    for (int d = 0; d < r; ++d) if (!red[d]) k = k * x.dim(d) + (e / xs[d]) % x.dim(d);
    key[e] = k;
    stats[k].first += v[e];
    stats[k].second += v[e] * v[e];
    ++counts[k];
  }
  return DispatchFloat(x.dtype(), [&](auto t) {
    using T = decltype(t);
    for (int64_t e = 0; e < x.numel(); ++e) {
      auto& s = stats[key[e]];
      double n = counts[key[e]], mean = s.first / n, var = s.second / n - mean * mean;
      y.data<T>()[e] = static_cast<T>((v[e] - mean) / (std::sqrt(std::max(var, 0.0)) + 1e-9));
    }
  });
}

}  // namespace

void RegisterNormKernels() {
  RegisterKernel("FlatGroupNorm", FlatGroupNorm);
  RegisterKernel("NhwcGroupNorm", NhwcGroupNorm);
  RegisterKernel("BatchNormalization", BatchNorm);
  RegisterKernel("LayerNormalization", LayerNorm);
  RegisterKernel("InstanceNormalization", InstanceNorm);
  RegisterKernel("GroupNormalization", GroupNorm);
  RegisterKernel("LRN", Lrn);
  RegisterKernel("MeanVarianceNormalization", Mvn);
}

}  // namespace cjit
