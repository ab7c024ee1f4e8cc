// Elementwise CPU kernels: unary math and activations, binary arithmetic/comparison/logic with
// broadcasting, variadic Max/Min/Sum/Mean, Where, Clip, Cast. Semantics: ONNX operator specification.
#include <atomic>
#include <cmath>
#include <limits>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "compiler/ir/cpu_isa.h"
#include "compiler/ir/float16.h"
#include "compiler/ir/numeric_cast.h"
#include "base/status_macros.h"
#include "absl/strings/str_join.h"
#include "compiler/codegen/fusion_plan.h"
#include "runtime/cpu/vec_math.h"
#include "runtime/cpu/broadcast.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/dispatch.h"
#include "runtime/cpu/kernel.h"

namespace cjit {

Dims BroadcastDims(const std::vector<Dims>& shapes) {
  size_t r = 0;
  for (const Dims& d : shapes) r = std::max(r, d.size());
  Dims out(r, 1);
  for (const Dims& d : shapes) {
    size_t off = r - d.size();
    for (size_t i = 0; i < d.size(); ++i) {
      if (d[i] != 1) out[off + i] = d[i];
    }
  }
  // A zero-sized dim wins over 1.
  for (const Dims& d : shapes) {
    size_t off = r - d.size();
    for (size_t i = 0; i < d.size(); ++i) if (d[i] == 0) out[off + i] = 0;
  }
  return out;
}

namespace {

// numpy's maximum/minimum: a NaN operand gives NaN (std::max/min would return the other operand).
template <typename A>
inline A NanMax(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    if (std::isnan(a) || std::isnan(b)) return a + b;
  }
  return a < b ? b : a;
}
template <typename A>
inline A NanMin(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    if (std::isnan(a) || std::isnan(b)) return a + b;
  }
  return b < a ? b : a;
}

template <typename D, typename S>
inline D ConvertTo(S v) {
  if constexpr (std::is_same_v<D, bool>) {
    return static_cast<float>(v) != 0.0f;
  } else if constexpr (std::is_same_v<D, half>) {
    // Round to nearest even, NaN kept quiet (compiler/ir/float16.h; Eigen's bfloat16 drops NaN payloads).
    // float64 and integers (exact in float64 up to 2^53) round once, through float32 rounded to odd.
    if constexpr (std::is_same_v<S, double> || std::is_integral_v<S>) {
      return Eigen::numext::bit_cast<half>(DoubleToHalfBits(static_cast<double>(v)));
    } else {
      return Eigen::numext::bit_cast<half>(FloatToHalfBits(static_cast<float>(v)));
    }
  } else if constexpr (std::is_same_v<D, bfloat16>) {
    if constexpr (std::is_same_v<S, double> || std::is_integral_v<S>) {
      return Eigen::numext::bit_cast<bfloat16>(DoubleToBfloat16Bits(static_cast<double>(v)));
    } else {
      return Eigen::numext::bit_cast<bfloat16>(FloatToBfloat16Bits(static_cast<float>(v)));
    }
  } else if constexpr (std::is_same_v<S, half> || std::is_same_v<S, bfloat16>) {
    const float f = std::is_same_v<S, half> ? HalfBitsToFloat(Eigen::numext::bit_cast<uint16_t>(v))
                                            : Bfloat16BitsToFloat(Eigen::numext::bit_cast<uint16_t>(v));
    if constexpr (std::is_integral_v<D>) return NumericCast<D>(f);  // as float -> integer
    return static_cast<D>(f);
  } else if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>) {
    return NumericCast<D>(v);  // NaN -> 0, saturating (compiler/ir/numeric_cast.h)
  } else {
    return static_cast<D>(v);
  }
}

// ---------- unary ----------

template <typename T, typename F>
void UnaryLoop(const Tensor& x, Tensor& y, int threads, F f) {
  const T* a = x.data<T>();
  T* b = y.data<T>();
  int64_t n = x.numel();
  using A = typename Acc<T>::type;
  // `simd`: GCC's -O2 cost model does not vectorize loops that need an alias check (b may be a; an
  // in-place activation writes each element where it read it, which vector code does too). No parallel
  // region for little work (runtime/cpu/parallel.h ThreadsForElements; an if(false) one still builds a team).
  threads = ThreadsForElements(threads, n);
  if (threads <= 1) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) b[i] = static_cast<T>(f(static_cast<A>(a[i])));
    return;
  }
#pragma omp parallel for simd num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) b[i] = static_cast<T>(f(static_cast<A>(a[i])));
  MarkParallelEnd();
}

// Registers a unary op computed in the accumulation type, over float dtypes only or over all numeric ones.
template <bool kFloatOnly, typename Make>
void RegisterUnaryOp(const std::string& name, Make make) {
  RegisterKernel(name, [make](KernelContext& ctx) -> absl::Status {
    const Tensor& x = ctx.in(0);
    Tensor& y = ctx.Alloc(0);
    auto body = [&](auto t) {
      using T = decltype(t);
      using A = typename Acc<T>::type;
      UnaryLoop<T>(x, y, ctx.threads, make(A{}, *ctx.node));
    };
    if constexpr (kFloatOnly) return DispatchFloat(x.dtype(), body);
    else return DispatchNumeric(x.dtype(), body);
  });
}

template <typename Make>
void FloatUnary(const std::string& name, Make make) { RegisterUnaryOp<true>(name, make); }
template <typename Make>
void NumericUnary(const std::string& name, Make make) { RegisterUnaryOp<false>(name, make); }

// Registers a float32 path for op `name`: y = f32(ctx, x, y) when X is float32; every other dtype keeps the
// kernel registered before (the generic one).
void RegisterF32Path(const std::string& name,
                     std::function<void(const KernelContext& ctx, const Tensor& x, Tensor& y)> f32) {
  const KernelFn* generic = FindKernelDuringRegistration(name);
  KernelFn fallback = generic ? *generic : KernelFn();
  RegisterKernel(name, [f32, fallback](KernelContext& ctx) -> absl::Status {
    const Tensor& x = ctx.in(0);
    if (x.dtype() != DType::kF32) return fallback(ctx);
    f32(ctx, x, ctx.Alloc(0));
    return absl::OkStatus();
  });
}

// Fast float32 paths through Eigen's vectorized array functions.
template <typename F>
void EigenUnaryF32(const std::string& name, F f) {
  RegisterF32Path(name, [f](const KernelContext& ctx, const Tensor& x, Tensor& y) {
    int64_t n = x.numel();
    const int64_t chunk = 16384;
    int64_t chunks = (n + chunk - 1) / chunk;
    int nt = ThreadsForElements(ctx.threads, n);
    ParallelFor(nt, chunks, [&](int64_t c) {
      int64_t lo = c * chunk, len = std::min(chunk, n - lo);
      Eigen::Map<const Eigen::ArrayXf> in(x.data<float>() + lo, len);
      Eigen::Map<Eigen::ArrayXf> out(y.data<float>() + lo, len);
      f(in, out);
    });
  });
}

// Float32 activations through the vectorized post-op code of the convolution epilogues (conv_gemm.h): the
// generic loop computes in double, one element at a time (HardSwish on a 352x480 detector's activations
// took 2 ms per op on the fallback path).
void VectorActivationF32(const std::string& name, std::function<std::vector<PostOp>(const Node&)> ops_of) {
  RegisterF32Path(name, [ops_of](const KernelContext& ctx, const Tensor& x, Tensor& y) {
    ApplyUnaryPostOps(x.data<float>(), y.data<float>(), x.numel(), ops_of(*ctx.node), ctx.threads);
  });
}

// The square root instruction (correctly rounded, IEEE on NaN, +-0, +inf and negative inputs) at the widest
// width --max_cpu_isa allows; a scalar sqrtf keeps errno handling that stops the compiler from vectorizing.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) void SqrtAvx512(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_sqrt_ps(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, _mm512_sqrt_ps(_mm512_maskz_loadu_ps(m, x + i)));
  }
}
__attribute__((target("avx2"))) void SqrtAvx2(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_sqrt_ps(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(x[i])));
}
void SqrtBase(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(y + i, _mm_sqrt_ps(_mm_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(x[i])));
}
#endif

void SqrtF32(const float* x, float* y, int64_t n, int threads) {
  const int64_t chunk = 16384, chunks = (n + chunk - 1) / chunk;
  ParallelFor(ThreadsForElements(threads, n), chunks, [&](int64_t c) {
    const int64_t lo = c * chunk, len = std::min(chunk, n - lo);
#if defined(__x86_64__)
    if (CpuHasAvx512()) return SqrtAvx512(x + lo, y + lo, len);
    if (CpuHasAvx2()) return SqrtAvx2(x + lo, y + lo, len);
    SqrtBase(x + lo, y + lo, len);
#else
    for (int64_t i = lo; i < lo + len; ++i) y[i] = std::sqrt(x[i]);
#endif
  });
}

PostOp MakePostOp(PostOp::Kind kind, float a = 0, float b = 0) {
  PostOp op;
  op.kind = kind;
  op.a = a;
  op.b = b;
  return op;
}

// Registers `fn` (a vectorized float32 map, runtime/cpu/conv_gemm.h) as op `name`'s float32 path.
void VectorMapF32(const char* name, void (*fn)(const float*, float*, int64_t, int)) {
  RegisterF32Path(name, [fn](const KernelContext& ctx, const Tensor& x, Tensor& y) {
    fn(x.data<float>(), y.data<float>(), x.numel(), ctx.threads);
  });
}

void RegisterUnary() {
#define CJIT_FLOAT_UNARY(NAME, EXPR) \
  FloatUnary(NAME, [](auto a, const Node& n) { using A = decltype(a); (void)n; return [=](A x) -> A { return EXPR; }; })
  CJIT_FLOAT_UNARY("Sqrt", std::sqrt(x));
  CJIT_FLOAT_UNARY("Exp", std::exp(x));
  CJIT_FLOAT_UNARY("Log", std::log(x));
  CJIT_FLOAT_UNARY("Sin", std::sin(x));
  CJIT_FLOAT_UNARY("Cos", std::cos(x));
  CJIT_FLOAT_UNARY("Tan", std::tan(x));
  CJIT_FLOAT_UNARY("Asin", std::asin(x));
  CJIT_FLOAT_UNARY("Acos", std::acos(x));
  CJIT_FLOAT_UNARY("Atan", std::atan(x));
  CJIT_FLOAT_UNARY("Sinh", std::sinh(x));
  CJIT_FLOAT_UNARY("Cosh", std::cosh(x));
  CJIT_FLOAT_UNARY("Asinh", std::asinh(x));
  CJIT_FLOAT_UNARY("Acosh", std::acosh(x));
  CJIT_FLOAT_UNARY("Atanh", std::atanh(x));
  CJIT_FLOAT_UNARY("Erf", std::erf(x));
  CJIT_FLOAT_UNARY("Tanh", std::tanh(x));
  CJIT_FLOAT_UNARY("Sigmoid", x >= 0 ? A(1) / (A(1) + std::exp(-x)) : std::exp(x) / (A(1) + std::exp(x)));
  CJIT_FLOAT_UNARY("Reciprocal", A(1) / x);
  CJIT_FLOAT_UNARY("Floor", std::floor(x));
  CJIT_FLOAT_UNARY("Ceil", std::ceil(x));
  CJIT_FLOAT_UNARY("Round", std::nearbyint(x));
  CJIT_FLOAT_UNARY("Softplus", x > A(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)));
  CJIT_FLOAT_UNARY("Softsign", x / (A(1) + std::abs(x)));
  CJIT_FLOAT_UNARY("Mish", x * std::tanh(std::log1p(std::exp(x))));
#undef CJIT_FLOAT_UNARY
#define CJIT_FLOAT_UNARY_ATTR(NAME, SETUP, EXPR)                \
  FloatUnary(NAME, [](auto a, const Node& n) {                   \
    using A = decltype(a);                                       \
    SETUP;                                                       \
    return [=](A x) -> A { return EXPR; };                       \
  })
  CJIT_FLOAT_UNARY_ATTR("LeakyRelu", A alpha = n.GetFloat("alpha", 0.01f), x < A(0) ? alpha * x : x);
  CJIT_FLOAT_UNARY_ATTR("Elu", A alpha = n.GetFloat("alpha", 1.0f), x < A(0) ? alpha * (std::exp(x) - A(1)) : x);
  CJIT_FLOAT_UNARY_ATTR("Celu", A alpha = n.GetFloat("alpha", 1.0f),
                        NanMax(A(0), x) + NanMin(A(0), alpha * (std::exp(x / alpha) - A(1))));
  CJIT_FLOAT_UNARY_ATTR("Selu", A alpha = n.GetFloat("alpha", 1.67326319217681884765625f);
                        A gamma = n.GetFloat("gamma", 1.05070102214813232421875f),
                        x <= A(0) ? gamma * (alpha * std::exp(x) - alpha) : gamma * x);
  CJIT_FLOAT_UNARY_ATTR("HardSigmoid", A alpha = n.GetFloat("alpha", 0.2f); A beta = n.GetFloat("beta", 0.5f),
                        NanMax(A(0), NanMin(A(1), alpha * x + beta)));
  CJIT_FLOAT_UNARY_ATTR("HardSwish", (void)0, x * NanMax(A(0), NanMin(A(1), x / A(6) + A(0.5))));
  CJIT_FLOAT_UNARY_ATTR("ThresholdedRelu", A alpha = n.GetFloat("alpha", 1.0f), x > alpha ? x : A(0));
  CJIT_FLOAT_UNARY_ATTR("Shrink", A bias = n.GetFloat("bias", 0.0f); A lambd = n.GetFloat("lambd", 0.5f),
                        x < -lambd ? x + bias : (x > lambd ? x - bias : A(0)));
  CJIT_FLOAT_UNARY_ATTR("Gelu", bool tanh_approx = n.GetString("approximate", "none") == "tanh",
                        tanh_approx
                            ? A(0.5) * x * (A(1) + std::tanh(A(0.7978845608028654) * (x + A(0.044715) * x * x * x)))
                            : A(0.5) * x * (A(1) + std::erf(x * A(0.7071067811865476))));
#undef CJIT_FLOAT_UNARY_ATTR
  NumericUnary("Abs", [](auto a, const Node&) {
    using A = decltype(a);
    return [](A x) -> A {
      // Abs(INT_MIN) wraps to INT_MIN (numpy), not undefined behavior.
      if constexpr (std::is_unsigned_v<A>) return x; else return x < A(0) ? WrappingSub(A(0), x) : x;
    };
  });
  NumericUnary("Neg", [](auto a, const Node&) {
    using A = decltype(a);
    return [](A x) -> A { return WrappingSub(A(0), x); };
  });
  NumericUnary("Relu", [](auto a, const Node&) {
    using A = decltype(a);
    return [](A x) -> A { return x > A(0) ? x : A(0); };
  });
  NumericUnary("Sign", [](auto a, const Node&) {
    using A = decltype(a);
    return [](A x) -> A {
      if constexpr (std::is_floating_point_v<A>) {
        if (std::isnan(x)) return x;  // numpy sign(nan) is nan
      }
      return x > A(0) ? A(1) : (x < A(0) ? A(-1) : A(0));
    };
  });
  NumericUnary("BitwiseNot", [](auto a, const Node&) {
    using A = decltype(a);
    return [](A x) -> A {
      if constexpr (std::is_integral_v<A> && !std::is_same_v<A, bool>) return A(~x);
      else return x;
    };
  });
  // Vectorized float32 versions of the hottest ones. Each keeps IEEE results on special values (NaN, +-inf,
  // +-0, subnormals; tests/nan_inf_suite.py): Eigen's log flushes subnormal inputs, so those elements are
  // recomputed with std::log; the square root is the exact instruction (sqrtps), not Eigen's fast-math
  // reciprocal-square-root estimate (which gives NaN for +inf and 0 for subnormals); the logistic is
  // 1 / (1 + exp(-x)) with a polynomial exp (Eigen's own logistic approximation is off by ~3e-5 relative).
  // The code generator's exp at the CPU's vector width (Eigen's ran at the SSE2 baseline: 268 vs 60 us for
  // ORT on 151 Ki elements), and its erf (std::erf per element: 1.4 ms of a BERT step's 9.8 at 128 tokens).
  VectorMapF32("Exp", ExpF32);
  VectorMapF32("Erf", ErfF32);
  EigenUnaryF32("Log", [](const auto& in, auto& out) {
    out = in.log();
    for (Eigen::Index i = 0; i < in.size(); ++i) {
      float v = in[i];
      if (v > 0.0f && v < std::numeric_limits<float>::min()) out[i] = std::log(v);
    }
  });
  VectorMapF32("Sqrt", SqrtF32);
  VectorActivationF32("Tanh", [](const Node&) { return std::vector<PostOp>{MakePostOp(PostOp::Kind::kTanh)}; });
  // The logistic through the conv epilogues' vector code (ExpV, runtime/cpu/simd.h): AVX-512 / AVX2 where the
  // CPU has them, where Eigen's exp runs at the SSE2 baseline width.
  VectorActivationF32("Sigmoid", [](const Node&) { return std::vector<PostOp>{MakePostOp(PostOp::Kind::kSigmoid)}; });
  EigenUnaryF32("Relu", [](const auto& in, auto& out) { out = in.max(0.0f); });
  VectorActivationF32("HardSwish",
                      [](const Node&) { return std::vector<PostOp>{MakePostOp(PostOp::Kind::kHardSwish)}; });
  VectorActivationF32("HardSigmoid", [](const Node& n) {
    return std::vector<PostOp>{MakePostOp(PostOp::Kind::kLinear, n.GetFloat("alpha", 0.2f), n.GetFloat("beta", 0.5f)),
                               MakePostOp(PostOp::Kind::kClip, 0.0f, 1.0f)};
  });
  // softplus(x) = log(1 + e^x) = max(x, 0) + log1p(e^-|x|) (no overflow), in float32 through Eigen's
  // vectorized exp and log1p: the generic kernel's scalar double path took 15.6 ms for 800k values (ORT
  // 10.2). NaN stays NaN; +inf -> +inf, -inf -> 0.
  EigenUnaryF32("Softplus", [](const auto& in, auto& out) { out = in.max(0.0f) + (-in.abs()).exp().log1p(); });
  EigenUnaryF32("Abs", [](const auto& in, auto& out) { out = in.abs(); });
  EigenUnaryF32("Neg", [](const auto& in, auto& out) { out = -in; });
  EigenUnaryF32("Reciprocal", [](const auto& in, auto& out) { out = in.inverse(); });

  RegisterKernel("Not", [](KernelContext& ctx) -> absl::Status {
    const Tensor& x = ctx.in(0);
    Tensor& y = ctx.Alloc(0);
    for (int64_t i = 0; i < x.numel(); ++i) y.data<uint8_t>()[i] = !x.data<uint8_t>()[i];
    return absl::OkStatus();
  });
  for (const char* name : {"IsNaN", "IsInf"}) {
    bool is_nan = std::string(name) == "IsNaN";
    RegisterKernel(name, [is_nan](KernelContext& ctx) -> absl::Status {
      const Tensor& x = ctx.in(0);
      Tensor& y = ctx.Alloc(0);
      bool pos = ctx.node->GetInt("detect_positive", 1), neg = ctx.node->GetInt("detect_negative", 1);
      return DispatchFloat(x.dtype(), [&](auto t) {
        using T = decltype(t);
        for (int64_t i = 0; i < x.numel(); ++i) {
          float v = static_cast<float>(x.data<T>()[i]);
          y.data<uint8_t>()[i] = is_nan ? std::isnan(v) : (std::isinf(v) && ((v > 0 && pos) || (v < 0 && neg)));
        }
      });
    });
  }
}

// ---------- binary ----------

template <typename T, typename R, typename Op>
void BinaryLoop(const Tensor& a, const Tensor& b, Tensor& out, int threads, Op op) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  R* po = out.data<R>();
  ForEachBroadcastRow<2>(out.dims(), {&a.dims(), &b.dims()}, threads,
                         [&](std::array<int64_t, 2> off, int64_t o, int64_t n, std::array<int64_t, 2> s) {
                           const T* x = pa + off[0];
                           const T* y = pb + off[1];
                           R* z = po + o;
                           // `omp simd` as in UnaryLoop: vector code without GCC's alias check (z is a
                           // fresh buffer, or an input read at the same index).
                           if (s[0] == 1 && s[1] == 1) {
#pragma omp simd
                             for (int64_t i = 0; i < n; ++i) z[i] = op(x[i], y[i]);
                           } else if (s[0] == 0 && s[1] == 1) {
                             T xv = x[0];
#pragma omp simd
                             for (int64_t i = 0; i < n; ++i) z[i] = op(xv, y[i]);
                           } else if (s[0] == 1 && s[1] == 0) {
                             T yv = y[0];
#pragma omp simd
                             for (int64_t i = 0; i < n; ++i) z[i] = op(x[i], yv);
                           } else {
                             for (int64_t i = 0; i < n; ++i) z[i] = op(x[i * s[0]], y[i * s[1]]);
                           }
                         });
}

template <typename T>
T IntPow(T base, T exp) {
  if constexpr (std::is_same_v<T, bool>) {
    return exp ? base : T(1);
  } else {
    if (exp < T(0)) {
      if (base == T(1)) return T(1);
      if constexpr (std::is_signed_v<T>) {
        if (base == T(-1)) return (exp & T(1)) ? T(-1) : T(1);
      }
      return T(0);
    }
    // Two's-complement wrap-around on overflow (as numpy), computed without signed overflow.
    using U = std::make_unsigned_t<T>;
    U r = 1, b = static_cast<U>(base);
    while (exp > T(0)) {
      if (exp & T(1)) r = static_cast<U>(r * b);
      b = static_cast<U>(b * b);
      exp >>= 1;
    }
    return static_cast<T>(r);
  }
}

template <typename T>
T FloorMod(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == 0) return 0;
    if constexpr (std::is_signed_v<T>) {
      if (b == T(-1)) return T(0);  // INT_MIN % -1 traps in C
    }
    T r = a % b;
    if constexpr (std::is_signed_v<T>) {
      if (r != 0 && ((r < 0) != (b < 0))) r += b;
    }
    return r;
  } else {
    using A = typename Acc<T>::type;
    A r = std::fmod(static_cast<A>(a), static_cast<A>(b));
    if (r != 0 && ((r < 0) != (static_cast<A>(b) < 0))) r += static_cast<A>(b);
    return static_cast<T>(r);
  }
}

// Every input must broadcast to the output's dims (numpy rules: each dim equal or 1, rank at most the
// output's). The output dims come from shape inference; the broadcast loops index the inputs by them, so
// an input that disagrees (a shape known only at run time, e.g. an Upsample whose scales are data, found
// by the fuzzer reading past a Min input) is an error here instead of an out-of-bounds read.
absl::Status CheckInputsBroadcastTo(const KernelContext& ctx, const Dims& out) {
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has(i)) continue;
    const Dims& d = ctx.in(i).dims();
    bool ok = d.size() <= out.size();
    for (size_t k = 0; ok && k < d.size(); ++k) {
      int64_t o = out[out.size() - d.size() + k];
      ok = d[k] == o || d[k] == 1;
    }
    if (!ok) {
      return ctx.Error(absl::StrCat("input ", i, " of shape [", absl::StrJoin(d, ","),
                                    "] does not broadcast to the output shape [", absl::StrJoin(out, ","), "]"));
    }
  }
  return absl::OkStatus();
}

absl::Status Arith(KernelContext& ctx, const std::string& op) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  Tensor& out = ctx.Alloc(0);
  CJIT_RETURN_IF_ERROR(CheckInputsBroadcastTo(ctx, out.dims()));
  if (op == "Pow" && a.dtype() != b.dtype()) {
    // Pow allows a different exponent type: compute in double.
    std::vector<double> ea = a.ToDoubleVector(), eb = b.ToDoubleVector();
    Tensor da(DType::kF64, a.dims()), db(DType::kF64, b.dims()), dout(DType::kF64, out.dims());
    std::copy(ea.begin(), ea.end(), da.data<double>());
    std::copy(eb.begin(), eb.end(), db.data<double>());
    BinaryLoop<double, double>(da, db, dout, ctx.threads, [](double x, double y) { return std::pow(x, y); });
    return DispatchNumeric(out.dtype(), [&](auto t) {
      using T = decltype(t);
      for (int64_t i = 0; i < out.numel(); ++i) out.data<T>()[i] = ConvertTo<T>(dout.data<double>()[i]);
    });
  }
  if (a.dtype() != b.dtype()) return ctx.Error("inputs have different dtypes");
  BinaryArithmetic code;
  if (a.dtype() == DType::kF32 && ParseBinaryArithmetic(op, &code)) {
    // The rows compiled for AVX-512 / AVX2 (BinaryArithmeticF32, the compiled clusters' library step):
    // Max of two 800k-value tensors took 0.84 ms element by element, ORT 0.58.
    BinaryArithmeticF32(code, a, b, out, ctx.threads);
    return absl::OkStatus();
  }
  bool fmod = ctx.node->GetInt("fmod", 0) != 0;
  std::atomic<bool> int_div_by_zero{false};
  absl::Status st = DispatchNumeric(a.dtype(), [&](auto t) {
    using T = decltype(t);
    using A = typename Acc<T>::type;
    if (op == "Add") BinaryLoop<T, T>(a, b, out, ctx.threads, [](T x, T y) { return WrappingAdd(x, y); });
    else if (op == "Sub") BinaryLoop<T, T>(a, b, out, ctx.threads, [](T x, T y) { return WrappingSub(x, y); });
    else if (op == "Mul") BinaryLoop<T, T>(a, b, out, ctx.threads, [](T x, T y) { return WrappingMul(x, y); });
    else if (op == "Div") {
      BinaryLoop<T, T>(a, b, out, ctx.threads, [&](T x, T y) {
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          if (y == T(0)) {
            int_div_by_zero.store(true, std::memory_order_relaxed);
            return T(0);
          }
          if constexpr (std::is_signed_v<T>) {
            // INT_MIN / -1 overflows (SIGFPE in C): the two's-complement wrap, INT_MIN, as numpy gives.
            if (y == T(-1)) return static_cast<T>(std::make_unsigned_t<T>(0) - static_cast<std::make_unsigned_t<T>>(x));
          }
          return T(x / y);
        } else {
          return T(x / y);
        }
      });
    } else if (op == "Pow") {
      if constexpr (std::is_floating_point_v<A> && sizeof(T) <= 4) {
        // x ^ 2 as x * x (a power spectrum's square, as numpy's fast path does): powf per element cost a
        // spectrogram's 257 x 197 map 0.39 ms on the fallback path. Correctly rounded either way.
        if (b.numel() == 1 && static_cast<double>(static_cast<A>(b.data<T>()[0])) == 2.0) {
          BinaryLoop<T, T>(a, b, out, ctx.threads, [](T x, T) {
            const A v = static_cast<A>(x);
            return static_cast<T>(v * v);
          });
          return;
        }
      }
      BinaryLoop<T, T>(a, b, out, ctx.threads, [](T x, T y) {
        if constexpr (std::is_integral_v<T>) return IntPow(x, y);
        else return static_cast<T>(std::pow(static_cast<A>(x), static_cast<A>(y)));
      });
    } else if (op == "Mod") {
      if (fmod) {
        BinaryLoop<T, T>(a, b, out, ctx.threads, [&](T x, T y) {
          if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
            if (y == T(0)) {
              int_div_by_zero.store(true, std::memory_order_relaxed);
              return T(0);
            }
            if constexpr (std::is_signed_v<T>) {
              if (y == T(-1)) return T(0);
            }
            return T(x % y);
          } else {
            return static_cast<T>(std::fmod(static_cast<A>(x), static_cast<A>(y)));
          }
        });
      } else {
        BinaryLoop<T, T>(a, b, out, ctx.threads, [&](T x, T y) {
          if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
            if (y == T(0)) int_div_by_zero.store(true, std::memory_order_relaxed);
          }
          return FloorMod(x, y);
        });
      }
    } else if (op == "Max") {
      BinaryLoop<T, T>(a, b, out, ctx.threads, [](T x, T y) { return static_cast<T>(NanMax<A>(x, y)); });
    } else if (op == "Min") {
      BinaryLoop<T, T>(a, b, out, ctx.threads, [](T x, T y) { return static_cast<T>(NanMin<A>(x, y)); });
    } else if (op == "PRelu") {
      BinaryLoop<T, T>(a, b, out, ctx.threads, [](T x, T y) { return x < T(0) ? WrappingMul(x, y) : x; });
    } else if (op == "BitShift" || op == "BitwiseAnd" || op == "BitwiseOr" || op == "BitwiseXor") {
      if constexpr (std::is_integral_v<T>) {
        bool left = ctx.node->GetString("direction", "LEFT") == "LEFT";
        if (op == "BitShift") BinaryLoop<T, T>(a, b, out, ctx.threads, [left](T x, T y) {
          if (y >= T(sizeof(T) * 8)) return T(0);
          return left ? T(x << y) : T(x >> y);
        });
        else if (op == "BitwiseAnd") BinaryLoop<T, T>(a, b, out, ctx.threads, [](T x, T y) { return T(x & y); });
        else if (op == "BitwiseOr") BinaryLoop<T, T>(a, b, out, ctx.threads, [](T x, T y) { return T(x | y); });
        else BinaryLoop<T, T>(a, b, out, ctx.threads, [](T x, T y) { return T(x ^ y); });
      }
    }
  });
  CJIT_RETURN_IF_ERROR(st);
  // ONNX leaves integer division by zero undefined; it is an error here rather than a trap or a made-up value.
  if (int_div_by_zero.load()) return ctx.Error("integer division by zero");
  return absl::OkStatus();
}

}  // namespace

bool ParseBinaryArithmetic(const std::string& op_type, BinaryArithmetic* op) {
  static const std::pair<const char*, BinaryArithmetic> kOps[] = {
      {"Add", BinaryArithmetic::kAdd}, {"Sub", BinaryArithmetic::kSub}, {"Mul", BinaryArithmetic::kMul},
      {"Div", BinaryArithmetic::kDiv}, {"Max", BinaryArithmetic::kMax}, {"Min", BinaryArithmetic::kMin}};
  for (const auto& [name, code] : kOps) {
    if (op_type == name) {
      *op = code;
      return true;
    }
  }
  return false;
}

// Rows of float32 Add/Sub/Mul/Div/Max/Min for BinaryArithmeticF32: each op compiled for AVX-512, AVX2 and
// baseline x86-64 (target attributes) and picked once by CPUID, since the build targets baseline x86-64 and
// these loops are bandwidth-bound at the widest vectors (the JIT's kernels use them). Not GCC's
// target_clones: its ifunc resolvers run before ThreadSanitizer's runtime is up (the TSan build died at
// start). Stride 1 or 0 per input (ForEachBroadcastRow rows); same element functions as Arith.
namespace {

using BinaryRowsFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t);
#define CJIT_BINARY_ROWS_BODY(EXPR)                                                                       \
  if (sx == 1 && sy == 1) {                                                                               \
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) { float a = x[i], b = y[i]; z[i] = (EXPR); }     \
  } else if (sx == 0 && sy == 1) {                                                                        \
    const float a = x[0];                                                                                 \
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) { float b = y[i]; z[i] = (EXPR); }               \
  } else if (sx == 1 && sy == 0) {                                                                        \
    const float b = y[0];                                                                                 \
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) { float a = x[i]; z[i] = (EXPR); }               \
  } else {                                                                                                \
    for (int64_t i = 0; i < n; ++i) { float a = x[i * sx], b = y[i * sy]; z[i] = (EXPR); }               \
  }
#if defined(__x86_64__) && defined(__GNUC__)
// Max / Min for AVX2 in intrinsics: GCC does not vectorize NanMax's NaN test for AVX2 (0.6 ms for 800k
// values against 0.11 on AVX-512). max_ps(b, a) is a < b ? b : a; an unordered pair gives a + b (NaN).
template <bool kMax>
__attribute__((target("avx2"))) void MinMaxRowsAvx2(const float* x, int64_t sx, const float* y, int64_t sy, float* z,
                                                    int64_t n) {
  int64_t i = 0;
  if ((sx == 1 || sx == 0) && (sy == 1 || sy == 0)) {
    for (; i + 8 <= n; i += 8) {
      const __m256 a = sx ? _mm256_loadu_ps(x + i) : _mm256_set1_ps(x[0]);
      const __m256 b = sy ? _mm256_loadu_ps(y + i) : _mm256_set1_ps(y[0]);
      const __m256 m = kMax ? _mm256_max_ps(b, a) : _mm256_min_ps(b, a);
      const __m256 nan = _mm256_cmp_ps(a, b, _CMP_UNORD_Q);
      _mm256_storeu_ps(z + i, _mm256_blendv_ps(m, _mm256_add_ps(a, b), nan));
    }
  }
  for (; i < n; ++i) {
    const float a = x[i * sx], b = y[i * sy];
    z[i] = kMax ? static_cast<float>(NanMax<float>(a, b)) : static_cast<float>(NanMin<float>(a, b));
  }
}
// CJIT_BINARY_ROWS_WITH_AVX2 takes the AVX2 variant as written (Max / Min); CJIT_BINARY_ROWS compiles it.
#define CJIT_BINARY_ROWS_WITH_AVX2(NAME, EXPR, AVX2)                                                          \
  __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw"))) void NAME##Avx512(                            \
      const float* x, int64_t sx, const float* y, int64_t sy, float* z, int64_t n) { CJIT_BINARY_ROWS_BODY(EXPR) } \
  void NAME##Base(const float* x, int64_t sx, const float* y, int64_t sy, float* z, int64_t n) {              \
    CJIT_BINARY_ROWS_BODY(EXPR)                                                                               \
  }                                                                                                           \
  BinaryRowsFn NAME() { return CpuHasAvx512() ? &NAME##Avx512 : CpuHasAvx2() ? (AVX2) : &NAME##Base; }
#define CJIT_BINARY_ROWS(NAME, EXPR)                                                                          \
  __attribute__((target("avx2"))) void NAME##Avx2(const float* x, int64_t sx, const float* y, int64_t sy,      \
                                                  float* z, int64_t n) { CJIT_BINARY_ROWS_BODY(EXPR) }         \
  CJIT_BINARY_ROWS_WITH_AVX2(NAME, EXPR, &NAME##Avx2)
#else
#define CJIT_BINARY_ROWS(NAME, EXPR)                                                                          \
  void NAME##Base(const float* x, int64_t sx, const float* y, int64_t sy, float* z, int64_t n) {              \
    CJIT_BINARY_ROWS_BODY(EXPR)                                                                               \
  }                                                                                                           \
  BinaryRowsFn NAME() { return &NAME##Base; }
#define CJIT_BINARY_ROWS_WITH_AVX2(NAME, EXPR, AVX2) CJIT_BINARY_ROWS(NAME, EXPR)
#endif
CJIT_BINARY_ROWS(AddRowsF32, a + b)
CJIT_BINARY_ROWS(SubRowsF32, a - b)
CJIT_BINARY_ROWS(MulRowsF32, a * b)
CJIT_BINARY_ROWS(DivRowsF32, a / b)
CJIT_BINARY_ROWS_WITH_AVX2(MaxRowsF32, static_cast<float>(NanMax<float>(a, b)), &MinMaxRowsAvx2<true>)
CJIT_BINARY_ROWS_WITH_AVX2(MinRowsF32, static_cast<float>(NanMin<float>(a, b)), &MinMaxRowsAvx2<false>)
#undef CJIT_BINARY_ROWS_WITH_AVX2
#undef CJIT_BINARY_ROWS
#undef CJIT_BINARY_ROWS_BODY

}  // namespace

void BinaryArithmeticF32(BinaryArithmetic op, const Tensor& a, const Tensor& b, Tensor& out, int threads) {
  BinaryRowsFn rows = nullptr;
  switch (op) {
    case BinaryArithmetic::kAdd: rows = AddRowsF32(); break;
    case BinaryArithmetic::kSub: rows = SubRowsF32(); break;
    case BinaryArithmetic::kMul: rows = MulRowsF32(); break;
    case BinaryArithmetic::kDiv: rows = DivRowsF32(); break;
    case BinaryArithmetic::kMax: rows = MaxRowsF32(); break;
    case BinaryArithmetic::kMin: rows = MinRowsF32(); break;
  }
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  ForEachBroadcastRow<2>(out.dims(), {&a.dims(), &b.dims()}, threads,
                         [&](std::array<int64_t, 2> off, int64_t o, int64_t n, std::array<int64_t, 2> s) {
                           rows(pa + off[0], s[0], pb + off[1], s[1], po + o, n);
                         });
}

namespace {

absl::Status Compare(KernelContext& ctx, const std::string& op) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  if (a.dtype() != b.dtype()) return ctx.Error("inputs have different dtypes");
  Tensor& out = ctx.Alloc(0);
  CJIT_RETURN_IF_ERROR(CheckInputsBroadcastTo(ctx, out.dims()));
  return DispatchAll(a.dtype(), [&](auto t) {
    using T = decltype(t);
    if (op == "Equal") BinaryLoop<T, bool>(a, b, out, ctx.threads, [](T x, T y) { return x == y; });
    else if (op == "Less") BinaryLoop<T, bool>(a, b, out, ctx.threads, [](T x, T y) { return x < y; });
    else if (op == "Greater") BinaryLoop<T, bool>(a, b, out, ctx.threads, [](T x, T y) { return y < x; });
    else if (op == "LessOrEqual") BinaryLoop<T, bool>(a, b, out, ctx.threads, [](T x, T y) { return x <= y; });
    else if (op == "GreaterOrEqual") BinaryLoop<T, bool>(a, b, out, ctx.threads, [](T x, T y) { return y <= x; });
    else if (op == "And") BinaryLoop<T, bool>(a, b, out, ctx.threads, [](T x, T y) { return bool(x) && bool(y); });
    else if (op == "Or") BinaryLoop<T, bool>(a, b, out, ctx.threads, [](T x, T y) { return bool(x) || bool(y); });
    else if (op == "Xor") BinaryLoop<T, bool>(a, b, out, ctx.threads, [](T x, T y) { return bool(x) != bool(y); });
  });
}

absl::Status Variadic(KernelContext& ctx, const std::string& op) {
  Tensor& out = ctx.Alloc(0);
  CJIT_RETURN_IF_ERROR(CheckInputsBroadcastTo(ctx, out.dims()));
  DType t = ctx.in(0).dtype();
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    if (ctx.in(i).dtype() != t) return ctx.Error("inputs have different dtypes");
  }
  // acc = broadcast(in0); acc = acc op in_k.
  Tensor acc = Tensor::Zeros(t, out.dims());
  std::string first = op == "Max" || op == "Min" ? op : "Add";
  CJIT_RETURN_IF_ERROR(DispatchNumeric(t, [&](auto tag) {
    using T = decltype(tag);
    BinaryLoop<T, T>(acc, ctx.in(0), out, ctx.threads, [](T, T y) { return y; });
  }));
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    CJIT_RETURN_IF_ERROR(DispatchNumeric(t, [&](auto tag) {
      using T = decltype(tag);
      Tensor cur = out.Clone();
      using A = typename Acc<T>::type;
      if (first == "Max") {
        BinaryLoop<T, T>(cur, ctx.in(i), out, ctx.threads,
                         [](T x, T y) { return static_cast<T>(NanMax<A>(static_cast<A>(x), static_cast<A>(y))); });
      } else if (first == "Min") {
        BinaryLoop<T, T>(cur, ctx.in(i), out, ctx.threads,
                         [](T x, T y) { return static_cast<T>(NanMin<A>(static_cast<A>(x), static_cast<A>(y))); });
      } else {
        BinaryLoop<T, T>(cur, ctx.in(i), out, ctx.threads, [](T x, T y) { return T(x + y); });
      }
    }));
  }
  if (op == "Mean") {
    CJIT_RETURN_IF_ERROR(DispatchFloat(t, [&](auto tag) {
      using T = decltype(tag);
      for (int64_t i = 0; i < out.numel(); ++i) {
        out.data<T>()[i] = static_cast<T>(static_cast<float>(out.data<T>()[i]) / ctx.num_inputs());
      }
    }));
  }
  return absl::OkStatus();
}

absl::Status Where(KernelContext& ctx) {
  const Tensor& c = ctx.in(0);
  const Tensor& x = ctx.in(1);
  const Tensor& y = ctx.in(2);
  Tensor& out = ctx.Alloc(0);
  CJIT_RETURN_IF_ERROR(CheckInputsBroadcastTo(ctx, out.dims()));
  return DispatchAll(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const uint8_t* pc = c.data<uint8_t>();
    const T* px = x.data<T>();
    const T* py = y.data<T>();
    T* po = out.data<T>();
    ForEachBroadcastRow<3>(out.dims(), {&c.dims(), &x.dims(), &y.dims()}, ctx.threads,
                           [&](std::array<int64_t, 3> off, int64_t o, int64_t n, std::array<int64_t, 3> s) {
                             if (s[0] == 0) {  // one condition for the row (a mask broadcast along it)
                               const bool take_x = pc[off[0]] != 0;
                               const T* src = take_x ? px + off[1] : py + off[2];
                               const int64_t step = take_x ? s[1] : s[2];
                               if (step == 1) std::copy(src, src + n, po + o);
                               else std::fill(po + o, po + o + n, *src);
                               return;
                             }
                             for (int64_t i = 0; i < n; ++i) {
                               po[o + i] = pc[off[0] + i * s[0]] ? px[off[1] + i * s[1]] : py[off[2] + i * s[2]];
                             }
                           });
  });
}

absl::Status Clip(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.Alloc(0);
  return DispatchNumeric(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = typename Acc<T>::type;
    A lo = std::numeric_limits<A>::lowest(), hi = std::numeric_limits<A>::max();
    if (ctx.node->HasAttr("min")) lo = NumericCast<A>(ctx.node->GetFloat("min", 0));
    if (ctx.node->HasAttr("max")) hi = NumericCast<A>(ctx.node->GetFloat("max", 0));
    if (ctx.has(1) && ctx.in(1).numel() > 0) lo = static_cast<A>(ctx.in(1).data<T>()[0]);
    if (ctx.has(2) && ctx.in(2).numel() > 0) hi = static_cast<A>(ctx.in(2).data<T>()[0]);
    // min(max(v, lo), hi): with lo > hi every value becomes hi (ONNX Clip-13); NaN stays NaN.
    UnaryLoop<T>(x, y, ctx.threads, [=](A v) -> A {
      A t = v < lo ? lo : v;
      return t > hi ? hi : t;
    });
  });
}

// float32 -> bool / int64 / int32 for elements [lo, lo + n) of the output `out`, with ConvertTo's semantics.
#define CJIT_CAST_F32_BODY                                                                                  \
  if (to == DType::kBool) {                                                                                 \
    uint8_t* o = static_cast<uint8_t*>(out) + lo;                                                           \
    for (int64_t i = 0; i < n; ++i) o[i] = ConvertTo<bool>(in[i]);                                          \
  } else if (to == DType::kI64) {                                                                           \
    int64_t* o = static_cast<int64_t*>(out) + lo;                                                           \
    for (int64_t i = 0; i < n; ++i) o[i] = ConvertTo<int64_t>(in[i]);                                       \
  } else {                                                                                                  \
    int32_t* o = static_cast<int32_t*>(out) + lo;                                                           \
    for (int64_t i = 0; i < n; ++i) o[i] = ConvertTo<int32_t>(in[i]);                                       \
  }
void CastF32Base(const float* in, void* out, DType to, int64_t lo, int64_t n) { CJIT_CAST_F32_BODY }
#if defined(__x86_64__)
__attribute__((target("avx2"))) void CastF32Avx2(const float* in, void* out, DType to, int64_t lo, int64_t n) {
  if (to == DType::kBool) {
    // 32 floats per step: compare with 0 (unordered: NaN is true, as ConvertTo), narrow the masks to bytes
    // (the packs work within 128-bit lanes: a permute restores the order), keep 0 / 1.
    uint8_t* o = static_cast<uint8_t*>(out) + lo;
    const __m256 zero = _mm256_setzero_ps();
    const __m256i one = _mm256_set1_epi8(1), order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      const __m256i a = _mm256_castps_si256(_mm256_cmp_ps(_mm256_loadu_ps(in + i), zero, _CMP_NEQ_UQ));
      const __m256i b = _mm256_castps_si256(_mm256_cmp_ps(_mm256_loadu_ps(in + i + 8), zero, _CMP_NEQ_UQ));
      const __m256i c = _mm256_castps_si256(_mm256_cmp_ps(_mm256_loadu_ps(in + i + 16), zero, _CMP_NEQ_UQ));
      const __m256i d = _mm256_castps_si256(_mm256_cmp_ps(_mm256_loadu_ps(in + i + 24), zero, _CMP_NEQ_UQ));
      const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
      const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), order);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i), _mm256_and_si256(bytes, one));
    }
    for (; i < n; ++i) o[i] = ConvertTo<bool>(in[i]);
    return;
  }
  // Integers: 8 floats truncated at once where all are numbers inside int32's range (|v| < 2^31, ordered:
  // NaN fails), widened to int64 as needed; any other block takes the scalar saturating conversion.
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)), limit = _mm256_set1_ps(2147483648.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(in + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(v, abs_mask), limit, _CMP_LT_OQ)) != 0xFF) {
      CastF32Base(in + i, out, to, lo + i, 8);
      continue;
    }
    const __m256i t = _mm256_cvttps_epi32(v);
    if (to == DType::kI32) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<int32_t*>(out) + lo + i), t);
    } else {
      int64_t* o = static_cast<int64_t*>(out) + lo + i;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), _mm256_cvtepi32_epi64(_mm256_castsi256_si128(t)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 4), _mm256_cvtepi32_epi64(_mm256_extracti128_si256(t, 1)));
    }
  }
  if (i < n) CastF32Base(in + i, out, to, lo + i, n - i);
}
#endif
#undef CJIT_CAST_F32_BODY
void CastF32(const float* in, void* out, DType to, int64_t lo, int64_t n) {
#if defined(__x86_64__)
  if (CpuHasAvx2()) return CastF32Avx2(in, out, to, lo, n);
#endif
  CastF32Base(in, out, to, lo, n);
}

absl::Status Cast(KernelContext& ctx, DType to) {
  const Tensor& x = ctx.in(0);
  if ((x.dtype() == DType::kString) != (to == DType::kString)) return CastStrings(ctx, to);
  Tensor& y = ctx.Alloc(0, to, x.dims());
  if (x.dtype() == to) {
    y = x;
    return absl::OkStatus();
  }
  int64_t n = x.numel();
  // float32 <-> float16 / bfloat16: the bulk converters (F16C / AVX-512 BF16 where the CPU has them).
  const bool bulk = (x.dtype() == DType::kF32) != (to == DType::kF32) &&
                    (x.dtype() == DType::kF16 || x.dtype() == DType::kBF16 || to == DType::kF16 || to == DType::kBF16);
  if (bulk) {
    const size_t in_size = DTypeSize(x.dtype()), out_size = DTypeSize(to);
    const int64_t chunk = 32768, chunks = (n + chunk - 1) / chunk;
    const int nt = n >= 4 * chunk ? ctx.threads : 1;
    const char* src = static_cast<const char*>(x.raw());
    char* dst = static_cast<char*>(y.raw());
    ParallelFor(nt, chunks, [&](int64_t c) {
      const int64_t lo = c * chunk, len = std::min(chunk, n - lo);
      ConvertFloatBuffer(src + lo * in_size, x.dtype(), dst + lo * out_size, to, static_cast<size_t>(len));
    });
    return absl::OkStatus();
  }
  if (x.dtype() == DType::kF32 && (to == DType::kBool || to == DType::kI64 || to == DType::kI32)) {
    // The casts of masks and indices (float32 -> bool / integers), vectorized (CastF32Avx2 where the CPU has
    // AVX2) and split over threads.
    const int64_t chunk = 65536, chunks = (n + chunk - 1) / chunk;
    const float* in = x.data<float>();
    ParallelFor(n >= 4 * chunk ? ctx.threads : 1, chunks, [&](int64_t c) {
      const int64_t lo = c * chunk, len = std::min(chunk, n - lo);
      CastF32(in + lo, y.raw(), to, lo, len);
    });
    return absl::OkStatus();
  }
  absl::Status inner = absl::OkStatus();
  absl::Status outer = DispatchAll(x.dtype(), [&](auto s) {
    using S = decltype(s);
    inner = DispatchAll(to, [&](auto d) {
      using D = decltype(d);
      const S* in = x.data<S>();
      D* out = y.data<D>();
      for (int64_t i = 0; i < n; ++i) out[i] = ConvertTo<D>(in[i]);
    });
  });
  CJIT_RETURN_IF_ERROR(outer);
  return inner;
}

}  // namespace

void RegisterElementwiseKernels() {
  RegisterUnary();
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "PRelu", "BitShift", "BitwiseAnd",
                         "BitwiseOr", "BitwiseXor"}) {
    std::string name = op;
    RegisterKernel(name, [name](KernelContext& ctx) { return Arith(ctx, name); });
  }
  for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"}) {
    std::string name = op;
    RegisterKernel(name, [name](KernelContext& ctx) { return Compare(ctx, name); });
  }
  for (const char* op : {"Max", "Min", "Sum", "Mean"}) {
    std::string name = op;
    RegisterKernel(name, [name](KernelContext& ctx) {
      if (ctx.num_inputs() == 2 && (name == "Max" || name == "Min")) return Arith(ctx, name);
      return Variadic(ctx, name);
    });
  }
  RegisterKernel("Where", Where);
  RegisterKernel("Clip", Clip);
  RegisterKernel("Cast", [](KernelContext& ctx) { return Cast(ctx, ctx.infer()[0].dtype); });
  RegisterKernel("CastLike", [](KernelContext& ctx) { return Cast(ctx, ctx.in(1).dtype()); });
}

}  // namespace cjit
