// Reduction CPU kernels: ReduceX, ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax, CumSum.
// Each views the input as [outer, reduced, inner] (moving scattered reduced axes together with a
// transpose first) and accumulates in float (double for float64, int64 for integers).
#include <algorithm>
#include <cmath>
#include <limits>

#include "compiler/ir/cpu_isa.h"
#include "compiler/ir/numeric_cast.h"
#include "base/status_macros.h"
#include "runtime/cpu/vec_math.h"
#include "runtime/cpu/dispatch.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/tensor_util.h"

namespace cjit {
namespace {

struct ReduceView {
  Tensor x;  // possibly transposed so that reduced axes are contiguous
  int64_t outer = 1, red = 1, inner = 1;
};

absl::StatusOr<ReduceView> MakeView(const KernelContext& ctx, const Tensor& x, std::vector<bool> reduce) {
  int r = x.rank();
  int first = -1, last = -1;
  for (int i = 0; i < r; ++i) {
    if (reduce[i]) {
      if (first < 0) first = i;
      last = i;
    }
  }
  ReduceView v;
  bool contiguous = true;
  for (int i = first; i >= 0 && i <= last; ++i) contiguous &= reduce[i] || x.dim(i) == 1;
  if (first < 0) {
    v.x = x;
    v.outer = x.numel();
    return v;
  }
  if (contiguous) {
    v.x = x;
    for (int i = 0; i < first; ++i) v.outer *= x.dim(i);
    for (int i = first; i <= last; ++i) v.red *= reduce[i] ? x.dim(i) : 1;
    for (int i = last + 1; i < r; ++i) v.inner *= x.dim(i);
    return v;
  }
  std::vector<int64_t> perm;
  for (int i = 0; i < r; ++i) if (!reduce[i]) perm.push_back(i);
  for (int i = 0; i < r; ++i) if (reduce[i]) perm.push_back(i);
  CJIT_ASSIGN_OR_RETURN(v.x, TransposeTensor(x, perm, ctx.threads));
  for (int i = 0; i < r; ++i) (reduce[i] ? v.red : v.outer) *= x.dim(i);
  return v;
}

absl::StatusOr<std::vector<bool>> ReducedAxes(const KernelContext& ctx, int rank) {
  const Node& n = *ctx.node;
  std::vector<int64_t> axes;
  if (n.HasAttr("axes")) axes = n.GetInts("axes");
  else if (ctx.has(1)) axes = ctx.in(1).ToInt64Vector();
  std::vector<bool> reduce(rank, false);
  if (axes.empty()) {
    if (!n.GetInt("noop_with_empty_axes", 0)) reduce.assign(rank, true);
  } else {
    for (int64_t a : axes) {
      CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(n, a, rank));
      reduce[ax] = true;
    }
  }
  return reduce;
}

template <typename T, typename W>
void ReduceLoop(const ReduceView& v, T* out, int threads, const std::string& op) {
  using A =
      std::conditional_t<std::is_integral_v<T>, int64_t, std::conditional_t<std::is_same_v<T, double>, double, float>>;
  const T* x = v.x.data<T>();
  int64_t work = v.outer * v.inner;
  int nt = work > 1 ? ThreadsForElements(threads, work * v.red) : 1;
  int kind = op == "ReduceSum" ? 0 : op == "ReduceMean" ? 1 : op == "ReduceMax" ? 2 : op == "ReduceMin" ? 3
           : op == "ReduceProd" ? 4 : op == "ReduceL1" ? 5 : op == "ReduceL2" ? 6 : op == "ReduceLogSum" ? 7
           : op == "ReduceLogSumExp" ? 8 : 9;
  ParallelFor(nt, v.outer, [&](int64_t o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      const T* p = x + o * v.red * v.inner + i;
      A acc;
      switch (kind) {
        case 2:
          acc = std::numeric_limits<A>::has_infinity ? -std::numeric_limits<A>::infinity()
                                                     : std::numeric_limits<A>::lowest();
          break;
        case 3:
          acc =
              std::numeric_limits<A>::has_infinity ? std::numeric_limits<A>::infinity() : std::numeric_limits<A>::max();
          break;
        case 4: acc = 1; break;
        default: acc = 0;
      }
      A mx = 0;
      if (kind == 8) {
        mx = -std::numeric_limits<A>::infinity();
        for (int64_t k = 0; k < v.red; ++k) mx = std::max<A>(mx, static_cast<A>(p[k * v.inner]));
        if (v.red == 0 || !std::isfinite(static_cast<double>(mx))) mx = 0;
      }
      for (int64_t k = 0; k < v.red; ++k) {
        A e = static_cast<A>(p[k * v.inner]);
        switch (kind) {
          case 0: case 1: case 7: acc = WrappingAdd(acc, e); break;
          case 2: acc = (e > acc || e != e) ? e : acc; break;
          case 3: acc = (e < acc || e != e) ? e : acc; break;
          case 4: acc = WrappingMul(acc, e); break;
          case 5: acc = WrappingAdd(acc, e < 0 ? WrappingSub(A(0), e) : e); break;
          case 6: case 9: acc = WrappingAdd(acc, WrappingMul(e, e)); break;
          case 8: acc += static_cast<A>(std::exp(static_cast<double>(e) - static_cast<double>(mx))); break;
        }
      }
      if (kind == 1) acc = v.red ? static_cast<A>(acc / static_cast<A>(v.red)) : acc;
      else if (kind == 6) acc = NumericCast<A>(std::sqrt(static_cast<double>(acc)));
      else if (kind == 7) acc = NumericCast<A>(std::log(static_cast<double>(acc)));
      else if (kind == 8) acc = NumericCast<A>(std::log(static_cast<double>(acc)) + static_cast<double>(mx));
      out[o * v.inner + i] = NumericCast<T>(acc);
    }
  });
}

// float32 reductions over contiguous rows (inner == 1: the last axes, or axes a transpose made last):
// 16 accumulator lanes per row, combined pairwise at the end (vectorized; the order differs from the
// sequential loop's by float32 rounding only). Max/Min propagate NaN as the generic loop does.
template <int kKind>
inline float Combine(float acc, float e) {
  if constexpr (kKind == 0 || kKind == 1) return acc + e;
  else if constexpr (kKind == 2) return (e > acc || e != e) ? e : acc;
  else if constexpr (kKind == 3) return (e < acc || e != e) ? e : acc;
  else if constexpr (kKind == 4 || kKind == 5) return acc + e * e;
  else return acc + (e < 0 ? -e : e);
}

template <int kKind>
[[gnu::always_inline]] inline float ReduceRowBody(const float* p, int64_t n) {
  constexpr int kLanes = 16;
  alignas(64) float acc[kLanes];
  const float init = kKind == 2 ? -std::numeric_limits<float>::infinity()
                     : kKind == 3 ? std::numeric_limits<float>::infinity() : 0.0f;
  for (int j = 0; j < kLanes; ++j) acc[j] = init;
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
#pragma omp simd
    for (int j = 0; j < kLanes; ++j) acc[j] = Combine<kKind>(acc[j], p[k + j]);
  }
  for (int j = 0; k + j < n; ++j) acc[j] = Combine<kKind>(acc[j], p[k + j]);
  for (int w = kLanes / 2; w >= 1; w /= 2) {
    for (int j = 0; j < w; ++j) {
      // The lanes' partial results: sums of squares / absolute values are added as plain sums.
      acc[j] = kKind == 2 || kKind == 3 ? Combine<kKind>(acc[j], acc[j + w]) : acc[j] + acc[j + w];
    }
  }
  float r = acc[0];
  if constexpr (kKind == 1) r /= static_cast<float>(n);
  if constexpr (kKind == 5) r = std::sqrt(r);
  return r;
}

// The body compiled twice: for the baseline x86-64 the build targets, and with AVX2 (8-wide vectors),
// chosen at run time. Not target_clones (its ifunc resolvers run before ThreadSanitizer is up).
template <int kKind>
float ReduceRow(const float* p, int64_t n) {
  return ReduceRowBody<kKind>(p, n);
}
#if defined(__x86_64__)
template <int kKind>
__attribute__((target("avx2"))) float ReduceRowAvx2(const float* p, int64_t n) {
  return ReduceRowBody<kKind>(p, n);
}
#endif

bool ReduceRowsF32(const ReduceView& v, float* out, int threads, const std::string& op) {
  using RowFn = float (*)(const float*, int64_t);
  RowFn fn = op == "ReduceSum" ? ReduceRow<0> : op == "ReduceMean" ? ReduceRow<1> : op == "ReduceMax" ? ReduceRow<2>
           : op == "ReduceMin" ? ReduceRow<3> : op == "ReduceSumSquare" ? ReduceRow<4> : op == "ReduceL2" ? ReduceRow<5>
           : op == "ReduceL1" ? ReduceRow<6> : nullptr;
#if defined(__x86_64__)
  if (CpuHasAvx2()) {
    fn = op == "ReduceSum"         ? ReduceRowAvx2<0>
         : op == "ReduceMean"      ? ReduceRowAvx2<1>
         : op == "ReduceMax"       ? ReduceRowAvx2<2>
         : op == "ReduceMin"       ? ReduceRowAvx2<3>
         : op == "ReduceSumSquare" ? ReduceRowAvx2<4>
         : op == "ReduceL2"        ? ReduceRowAvx2<5>
         : op == "ReduceL1"        ? ReduceRowAvx2<6>
                                   : nullptr;
  }
#endif
  if (fn == nullptr || v.inner != 1 || v.red < 16) return false;
  const float* x = v.x.data<float>();
  const int nt = v.outer > 1 ? ThreadsForElements(threads, v.outer * v.red) : 1;
  ParallelFor(nt, v.outer, [&](int64_t o) { out[o] = fn(x + o * v.red, v.red); });
  return true;
}

absl::Status Reduce(KernelContext& ctx, const std::string& op) {
  const Tensor& x = ctx.in(0);
  CJIT_ASSIGN_OR_RETURN(std::vector<bool> reduce, ReducedAxes(ctx, x.rank()));
  Tensor& y = ctx.Alloc(0);
  bool any = false;
  for (bool b : reduce) any |= b;
  if (!any && (op == "ReduceSum" || op == "ReduceMean" || op == "ReduceMax" || op == "ReduceMin" ||
               op == "ReduceProd")) {
    y = x.Reshaped(y.dims());
    return absl::OkStatus();
  }
  CJIT_ASSIGN_OR_RETURN(ReduceView v, MakeView(ctx, x, reduce));
  if (!any) v.red = 1;
  if ((op == "ReduceMean" || op == "ReduceSum") && x.dtype() == DType::kF32 && v.inner > 1) {
    // Leading or middle axes (a channels-last global average pool: [N, H*W, C]): rows of `inner` values
    // accumulated in place, in the same order per element as ReduceLoop, reading memory once.
    // Threads (as ReduceLoop's) take blocks of columns.
    const float* p = v.x.data<float>();
    float* out = y.data<float>();
    constexpr int64_t kBlock = 256;
    int64_t blocks = (v.inner + kBlock - 1) / kBlock, work = v.outer * blocks;
    int nt = work > 1 ? ThreadsForElements(ctx.threads, v.outer * v.inner * v.red) : 1;
    bool mean = op == "ReduceMean";
    ParallelFor(nt, work, [&](int64_t w) {
      int64_t o = w / blocks, i0 = (w % blocks) * kBlock, n = std::min(v.inner, i0 + kBlock) - i0;
      // A local accumulator: through `out` the compiler must assume it aliases the rows (no vectors).
      alignas(64) float acc[kBlock];
      std::fill(acc, acc + n, 0.0f);
      for (int64_t k = 0; k < v.red; ++k) {
        const float* row = p + (o * v.red + k) * v.inner + i0;
        // omp simd: GCC -O2's very-cheap cost model leaves a loop of unknown trip count scalar.
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) acc[i] += row[i];
      }
      float* dst = out + o * v.inner + i0;
      if (mean && v.red) {
        const float count = static_cast<float>(v.red);
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) dst[i] = acc[i] / count;
      } else {
        std::copy(acc, acc + n, dst);
      }
    });
    return absl::OkStatus();
  }
  if (x.dtype() == DType::kF32 && ReduceRowsF32(v, y.data<float>(), ctx.threads, op)) return absl::OkStatus();
  return DispatchNumeric(x.dtype(), [&](auto t) {
    using T = decltype(t);
    ReduceLoop<T, void>(v, y.data<T>(), ctx.threads, op);
  });
}

// ArgMax/ArgMin of `n` columns (n <= 256) of `red` rows `inner` apart, into at[0, n): the rows compared
// in place (32-bit indices, as the floats, so the compare-and-select vectorizes). Compiled for the
// baseline ISA and for AVX2 (ArgBlockF32 picks).
#define CJIT_ARG_BLOCK_LOOP(BETTER)                                                                       \
  for (int64_t k = 1; k < red; ++k) {                                                                     \
    const float* row = base + k * inner;                                                                  \
    const int32_t kk = static_cast<int32_t>(k);                                                           \
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) {                                                 \
      const float e = row[i], b = best[i];                                                                \
      const bool better = (BETTER);                                                                       \
      best[i] = better ? e : b;                                                                           \
      at[i] = better ? kk : at[i];                                                                        \
    }                                                                                                     \
  }
#define CJIT_ARG_BLOCK_BODY                                                                              \
  alignas(64) float best[256];                                                                            \
  std::copy(base, base + n, best);                                                                        \
  std::fill(at, at + n, 0);                                                                               \
  if (is_max && !last) { CJIT_ARG_BLOCK_LOOP(b < e) }                                                     \
  else if (is_max) { CJIT_ARG_BLOCK_LOOP(!(e < b)) }                                                      \
  else if (!last) { CJIT_ARG_BLOCK_LOOP(e < b) }                                                          \
  else { CJIT_ARG_BLOCK_LOOP(!(b < e)) }
void ArgBlockBase(const float* base, int64_t inner, int64_t red, int64_t n, bool is_max, bool last, int32_t* at) {
  CJIT_ARG_BLOCK_BODY
}
#if defined(__x86_64__)
__attribute__((target("avx2"))) void ArgBlockAvx2(const float* base, int64_t inner, int64_t red, int64_t n,
                                                  bool is_max, bool last, int32_t* at) {
  CJIT_ARG_BLOCK_BODY
}
#endif
#undef CJIT_ARG_BLOCK_BODY
#undef CJIT_ARG_BLOCK_LOOP

void ArgBlockF32(const float* base, int64_t inner, int64_t red, int64_t n, bool is_max, bool last, int32_t* at) {
#if defined(__x86_64__)
  if (CpuHasAvx2()) return ArgBlockAvx2(base, inner, red, n, is_max, last, at);
#endif
  ArgBlockBase(base, inner, red, n, is_max, last, at);
}

absl::Status ArgReduce(KernelContext& ctx, bool is_max) {
  const Tensor& x = ctx.in(0);
  CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(*ctx.node, ctx.node->GetInt("axis", 0), x.rank()));
  std::vector<bool> reduce(x.rank(), false);
  reduce[ax] = true;
  CJIT_ASSIGN_OR_RETURN(ReduceView v, MakeView(ctx, x, reduce));
  Tensor& y = ctx.Alloc(0);
  bool last = ctx.node->GetInt("select_last_index", 0) != 0;
  if (x.dtype() == DType::kF32 && v.inner >= 16 && v.red <= std::numeric_limits<int32_t>::max()) {
    // Along a leading or middle axis (ArgMax over channels): the rows of `inner` values compared in place,
    // block by block of columns, reading memory once. The comparisons are the generic loop's.
    const float* p = v.x.data<float>();
    int64_t* out = y.data<int64_t>();
    constexpr int64_t kBlock = 256;
    const int64_t blocks = (v.inner + kBlock - 1) / kBlock;
    const int nt = ThreadsForElements(ctx.threads, v.outer * v.inner * v.red);
    ParallelFor(nt, v.outer * blocks, [&](int64_t w) {
      const int64_t o = w / blocks, i0 = (w % blocks) * kBlock, n = std::min(v.inner, i0 + kBlock) - i0;
      alignas(64) int32_t at[kBlock];
      ArgBlockF32(p + o * v.red * v.inner + i0, v.inner, v.red, n, is_max, last, at);
      for (int64_t i = 0; i < n; ++i) out[o * v.inner + i0 + i] = at[i];
    });
    return absl::OkStatus();
  }
  return DispatchNumeric(x.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* p = v.x.data<T>();
    int64_t* out = y.data<int64_t>();
    for (int64_t o = 0; o < v.outer; ++o) {
      for (int64_t i = 0; i < v.inner; ++i) {
        const T* q = p + o * v.red * v.inner + i;
        int64_t best = 0;
        for (int64_t k = 1; k < v.red; ++k) {
          T e = q[k * v.inner], b = q[best * v.inner];
          bool better = is_max ? (last ? !(e < b) : b < e) : (last ? !(b < e) : e < b);
          if (better) best = k;
        }
        out[o * v.inner + i] = best;
      }
    }
  });
}

// Softmax family. opset < 13: coerce to 2-D at `axis` (default 1); opset >= 13: one axis (default -1).
absl::Status SoftmaxLike(KernelContext& ctx, int kind) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.Alloc(0);
  int r = x.rank();
  bool legacy = ctx.node->opset_version > 0 && ctx.node->opset_version < 13;
  CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(*ctx.node, ctx.node->GetInt("axis", legacy ? 1 : -1), r));
  int64_t outer = 1, red = 1, inner = 1;
  for (int i = 0; i < ax; ++i) outer *= x.dim(i);
  if (legacy) {
    for (int i = ax; i < r; ++i) red *= x.dim(i);
  } else {
    red = r ? x.dim(ax) : 1;
    for (int i = ax + 1; i < r; ++i) inner *= x.dim(i);
  }
  if (x.dtype() == DType::kF32 && inner == 1 && kind != 2 && red > 0) {
    // float32 rows (the usual last-axis softmax): max, exponentials and their sum by the vector row loop
    // (conv_gemm.h SoftmaxRowF32). The loop below runs exp in double, one element at a time (a ViT's attention softmax
    // on the fallback path: 453 us against ONNX Runtime's 31).
    const float* px = x.data<float>();
    float* py = y.data<float>();
    const int nt = static_cast<int>(std::min<int64_t>(ThreadsForElements(ctx.threads, outer * red), outer));
    ParallelFor(nt, outer, [&](int64_t o) {
      const float* p = px + o * red;
      float* q = py + o * red;
      std::vector<float> e(kind == 1 ? red : 0);
      float mx = 0;
      double sum = 0;
      SoftmaxRowF32(p, kind == 1 ? e.data() : q, red, &mx, &sum);
      if (kind == 0) {
        const float inv = static_cast<float>(1.0 / sum);
#pragma omp simd
        for (int64_t i = 0; i < red; ++i) q[i] *= inv;
      } else {
        const float shift = mx + static_cast<float>(std::log(sum));
#pragma omp simd
        for (int64_t i = 0; i < red; ++i) q[i] = p[i] - shift;
      }
    });
    return absl::OkStatus();
  }
  return DispatchFloat(x.dtype(), [&](auto t) {
    using T = decltype(t);
    using A = typename Acc<T>::type;
    const T* px = x.data<T>();
    T* py = y.data<T>();
    int nt = ThreadsForElements(ctx.threads, outer * inner * red);
    ParallelFor(nt, outer, [&](int64_t o) {
      std::vector<A> buf(red);
      for (int64_t i = 0; i < inner; ++i) {
        const T* p = px + o * red * inner + i;
        T* q = py + o * red * inner + i;
        A mx = -std::numeric_limits<A>::infinity();
        int64_t arg = 0;
        for (int64_t k = 0; k < red; ++k) {
          A e = static_cast<A>(p[k * inner]);
          if (e > mx) { mx = e; arg = k; }
        }
        if (kind == 2) {
          for (int64_t k = 0; k < red; ++k) q[k * inner] = static_cast<T>(k == arg ? 1.0f : 0.0f);
          continue;
        }
        A sum = 0;
        for (int64_t k = 0; k < red; ++k) {
          buf[k] = std::exp(static_cast<A>(p[k * inner]) - mx);
          sum += buf[k];
        }
        if (kind == 0) {
          A inv = A(1) / sum;
          for (int64_t k = 0; k < red; ++k) q[k * inner] = static_cast<T>(buf[k] * inv);
        } else {
          A ls = std::log(sum);
          for (int64_t k = 0; k < red; ++k) q[k * inner] = static_cast<T>(static_cast<A>(p[k * inner]) - mx - ls);
        }
      }
    });
  });
}

absl::Status CumSum(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(*ctx.node, ctx.in(1).ToInt64Vector().at(0), x.rank()));
  bool exclusive = ctx.node->GetInt("exclusive", 0), reverse = ctx.node->GetInt("reverse", 0);
  Tensor& y = ctx.Alloc(0);
  int64_t outer = 1, red = x.dim(ax), inner = 1;
  for (int i = 0; i < ax; ++i) outer *= x.dim(i);
  for (int i = ax + 1; i < x.rank(); ++i) inner *= x.dim(i);
  return DispatchNumeric(x.dtype(), [&](auto t) {
    using T = decltype(t);
    using A = typename Acc<T>::type;
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        A acc = 0;
        for (int64_t kk = 0; kk < red; ++kk) {
          int64_t k = reverse ? red - 1 - kk : kk;
          int64_t idx = (o * red + k) * inner + i;
          A e = static_cast<A>(x.data<T>()[idx]);
          // Integers wrap on overflow (as numpy and ONNX Runtime), as in the Reduce* kernels.
          if (exclusive) { y.data<T>()[idx] = static_cast<T>(acc); acc = WrappingAdd(acc, e); }
          else { acc = WrappingAdd(acc, e); y.data<T>()[idx] = static_cast<T>(acc); }
        }
      }
    }
  });
}

}  // namespace

void RegisterReduceKernels() {
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                         "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}) {
    std::string name = op;
    RegisterKernel(name, [name](KernelContext& ctx) { return Reduce(ctx, name); });
  }
  RegisterKernel("ArgMax", [](KernelContext& ctx) { return ArgReduce(ctx, true); });
  RegisterKernel("ArgMin", [](KernelContext& ctx) { return ArgReduce(ctx, false); });
  RegisterKernel("Softmax", [](KernelContext& ctx) { return SoftmaxLike(ctx, 0); });
  RegisterKernel("LogSoftmax", [](KernelContext& ctx) { return SoftmaxLike(ctx, 1); });
  RegisterKernel("Hardmax", [](KernelContext& ctx) { return SoftmaxLike(ctx, 2); });
  RegisterKernel("CumSum", CumSum);
}

}  // namespace cjit
