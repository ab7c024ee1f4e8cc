// Channels-last convolutions without a per-shape JIT (see conv_gemm.h).
#include "compiler/ir/cpu_isa.h"
#include "runtime/cpu/conv_gemm.h"
#include "runtime/cpu/parallel.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include <omp.h>

#include "absl/strings/str_cat.h"
#include "compiler/codegen/fusion_plan.h"
#include "base/status_macros.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/onednn_util.h"

namespace cjit {
namespace {

// Vector helpers are always inlined into functions compiled for one ISA; no vector crosses a call
// boundary. Each ISA's bodies use its native register width as the widest vector (VW: V16f for AVX-512,
// V8f for AVX2, V4f for the SSE2 baseline): GCC lowers a generic vector wider than the target's registers
// element by element through the stack (measured on a Zen 3 AVX2 CPU: the epilogue and depthwise loops
// written with 64-byte vectors ran 3-5x slower than with 32-byte ones).
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float V16f __attribute__((vector_size(64)));
typedef float V8f __attribute__((vector_size(32)));
typedef float V4f __attribute__((vector_size(16)));

// Calls f(V{}, c) for the channel blocks [c, c + lanes) of [0, C): blocks of VW, then (where VW is
// wider) of V8f, then f(float{}, c) for single channels. Returns nothing; the order is increasing c.
template <typename VW, typename F>
inline __attribute__((always_inline)) void ForChannelBlocks(int64_t C, F&& f) {
  constexpr int64_t kW = sizeof(VW) / sizeof(float);
  int64_t c = 0;
  for (; c + kW <= C; c += kW) f(VW{}, c);
  if constexpr (kW > 8) {
    for (; c + 8 <= C; c += 8) f(V8f{}, c);
  }
  for (; c < C; ++c) f(0.0f, c);
}

// As ForChannelBlocks for kernels whose channels are independent outputs written once from inputs they do
// not overwrite (y != x): the last partial block is one more full vector ending at C, overlapping channels
// already written (recomputed to the same values), instead of narrower vectors and single channels.
// Narrower vectors (V8f, V4f, the same overlap) only where C is below the widest. Channel counts of 28, 36
// or 42 (BlazeFace) left 4-12 channels to a scalar loop that cost as much as the other 24-32 channels.
template <typename VW, typename F>
inline __attribute__((always_inline)) void ForChannelBlocksOverlapping(int64_t C, F&& f) {
  constexpr int64_t kW = sizeof(VW) / sizeof(float);
  int64_t c = 0;
  for (; c + kW <= C; c += kW) f(VW{}, c);
  if (c == C) return;
  if (C >= kW) return f(VW{}, C - kW);
  if constexpr (kW > 8) {
    for (; c + 8 <= C; c += 8) f(V8f{}, c);
    if (c == C) return;
    if (C >= 8) return f(V8f{}, C - 8);
  }
  if constexpr (kW > 4) {
    for (; c + 4 <= C; c += 4) f(V4f{}, c);
    if (c == C) return;
    if (C >= 4) return f(V4f{}, C - 4);
  }
  for (; c < C; ++c) f(0.0f, c);
}

template <typename V>
inline __attribute__((always_inline)) V LoadV(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename V>
inline __attribute__((always_inline)) void StoreV(float* p, V v) { std::memcpy(p, &v, sizeof v); }
// *p in every lane: one vbroadcastss from memory for 256- and 512-bit vectors (AVX and up). Written as
// `zero + *p`, the add must stay (-0 + +0 is +0): a scalar add and a register broadcast per use in the
// register-tiled loops; written as a uniform vector ({s, s, ..} or any fold of it), GCC 12 built the
// vector lane by lane with 16 masked broadcasts (7.4 instead of 2.0 ms on ResNet's stem).
template <typename V>
inline __attribute__((always_inline)) V BroadcastLoad(const float* p) {
  if constexpr (sizeof(V) >= 32) {
    V r;
    asm("vbroadcastss %1, %0" : "=v"(r) : "m"(*p));
    return r;
  } else {
    return V{} + *p;
  }
}

inline __attribute__((always_inline)) float ScalarOp(const PostOp& op, float v, int64_t channel) {
  switch (op.kind) {
    case PostOp::Kind::kRelu: return v < 0.0f ? 0.0f : v;
    case PostOp::Kind::kClip: return v < op.a ? op.a : (v > op.b ? op.b : v);
    case PostOp::Kind::kSigmoid: return 1.0f / (1.0f + std::exp(-v));
    case PostOp::Kind::kTanh: return std::tanh(v);
    case PostOp::Kind::kHardSwish: {
      float h = v / 6.0f + 0.5f;
      h = h < 0.0f ? 0.0f : (h > 1.0f ? 1.0f : h);
      return v * h;
    }
    case PostOp::Kind::kLinear: return op.a * v + op.b;
    case PostOp::Kind::kLeakyRelu: return v < 0.0f ? op.a * v : v;
    case PostOp::Kind::kSwish: return v / (1.0f + std::exp(-v));
    case PostOp::Kind::kAddChannel:
    case PostOp::Kind::kBiasLastDim: return v + static_cast<const float*>(op.tensor->constant->raw())[channel];
  }
  return v;
}

// The shared core of ExpV and ExpExactV: for c within the float exponent range, exp(c) = p * 2^n with
// n = round(c / ln2) (by the 1.5 * 2^23 trick: |c / ln2| < 2^22, and no fast-math, so it is not folded),
// r = c - n ln2 (ln2 in two parts) and p = exp(r) by Cephes' degree-6 polynomial. Returns p, *n the
// rounded exponent.
template <typename V>
inline __attribute__((always_inline)) V ExpReduced(V c, V* n) {
  const V zero = {};
  *n = c * 1.44269504088896341f;
  *n = (*n + 12582912.0f) - 12582912.0f;
  V r = c - *n * 0.693359375f;
  r = r - *n * -2.12194440e-4f;
  V p = zero + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * (r * r) + r + 1.0f;
}

// 2^e per lane for integer exponents e in [-126, 127] (built in the exponent bits).
template <typename V, typename VI>
inline __attribute__((always_inline)) V Pow2(VI e) {
  const VI bits = (e + 127) << 23;
  V out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// exp(x) per lane (Cephes' expf: x = n ln2 + r with ln2 in two parts, a degree-6 polynomial in r,
// times 2^n built in the exponent bits; within 2 ulp of the correctly rounded value over the normal
// range). NaN stays NaN; x > 88.72 gives +inf; x below -87.34 gives about 1e-38 instead of a subnormal
// or 0 (a logistic turns either into 1). Elementwise logistic on the detector's 640 x 640 map: the
// per-lane std::exp took 0.87 ms, ORT's vector logistic 0.12 ms.
template <typename V>
inline __attribute__((always_inline)) V ExpV(V x) {
  typedef int32_t VI __attribute__((vector_size(sizeof(V))));
  const V zero = {};
  V c = x > zero + 88.3762626647949f ? zero + 88.3762626647949f : x;
  c = c < zero - 87.3365447504f ? zero - 87.3365447504f : c;
  V n;
  const V p = ExpReduced(c, &n);
  const V e = p * Pow2<V>(__builtin_convertvector(n, VI));
  return x > zero + 88.72283905206835f ? zero + __builtin_inff() : e;
}

// tanh(x) per lane: the rational approximation of Eigen's generic_fast_tanh_float (the one XLA's CPU
// backend emits), within 7 ulp of float64 tanh (4e-7 relative) over the float range, one division and 11
// multiply-adds; NaN stays NaN, +-inf give +-1, -0 stays -0. Cephes' tanhf (a polynomial below 0.625,
// 1 - 2 / (exp(2|x|) + 1) above, both computed for a vector) was within 4 ulp and took twice as long: the
// Tanh op at 2x ORT's time on AVX2. The recurrent kernels' gates and the Tanh op use it.
template <typename V>
inline __attribute__((always_inline)) V TanhV(V x) {
  const V zero = {}, one = zero + 1.0f;
  const V ax = x < zero ? -x : x;
  // x clamped to +-7.99881 (NaN handled at the end); p(x) / q(x) with p odd of degree 13, q even of degree 6.
  const V c = zero + 7.99881172180175781f;
  const V xc = ax < c ? x : (x < zero ? -c : c);
  const V x2 = xc * xc;
  V p = zero - 2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 - 8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  p = p * xc;
  V q = zero + 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  V r = p / q;
  r = ax < zero + 0.0004f ? x : r;                       // tanh(x) = x to float precision (and -0 stays -0)
  r = ax > zero + 9.0f ? (x < zero ? -one : one) : r;    // +-1 exactly (tanh(9) rounds to 1), +-inf included
  return x == x ? r : x;                                 // NaN stays NaN
}
// One post-op of kind K on a vector (or a float: ScalarOp) of channels [c, c + lanes).
template <PostOp::Kind K, typename V>
inline __attribute__((always_inline)) V ApplyKind(V v, const PostOp& op, int64_t c) {
  if constexpr (std::is_same_v<V, float>) {
    return ScalarOp(op, v, c);
  } else {
    constexpr int kLanes = sizeof(V) / sizeof(float);
    const V zero = {}, onev = zero + 1.0f;
    if constexpr (K == PostOp::Kind::kRelu) {
      return v < zero ? zero : v;
    } else if constexpr (K == PostOp::Kind::kClip) {
      V lo = zero + op.a, hi = zero + op.b;
      v = v < lo ? lo : v;
      return v > hi ? hi : v;
    } else if constexpr (K == PostOp::Kind::kHardSwish) {
      V h = v / 6.0f + 0.5f;
      h = h < zero ? zero : h;
      h = h > onev ? onev : h;
      return v * h;
    } else if constexpr (K == PostOp::Kind::kLinear) {
      return op.a * v + op.b;
    } else if constexpr (K == PostOp::Kind::kLeakyRelu) {
      return v < zero ? v * op.a : v;
    } else if constexpr (K == PostOp::Kind::kAddChannel || K == PostOp::Kind::kBiasLastDim) {
      return v + LoadV<V>(static_cast<const float*>(op.tensor->constant->raw()) + c);
    } else if constexpr (K == PostOp::Kind::kSigmoid) {
      return onev / (onev + ExpV(-v));
    } else if constexpr (K == PostOp::Kind::kSwish) {
      return v / (onev + ExpV(-v));
    } else if constexpr (K == PostOp::Kind::kTanh) {
      return TanhV(v);
    } else {
      for (int j = 0; j < kLanes; ++j) v[j] = ScalarOp(op, v[j], c + j);
      return v;
    }
  }
}

// Calls f(std::integral_constant<PostOp::Kind, K>{}) for op.kind == K: the one switch over post-op
// kinds, so a caller instantiates ApplyKind per kind.
template <typename F>
inline __attribute__((always_inline)) void DispatchKind(const PostOp& op, F&& f) {
  switch (op.kind) {
#define CJIT_POST_OP_KIND(K) \
  case PostOp::Kind::K: return f(std::integral_constant<PostOp::Kind, PostOp::Kind::K>{});
    CJIT_POST_OP_KIND(kRelu)
    CJIT_POST_OP_KIND(kClip)
    CJIT_POST_OP_KIND(kHardSwish)
    CJIT_POST_OP_KIND(kLinear)
    CJIT_POST_OP_KIND(kAddChannel)
    CJIT_POST_OP_KIND(kBiasLastDim)
    CJIT_POST_OP_KIND(kSigmoid)
    CJIT_POST_OP_KIND(kTanh)
    CJIT_POST_OP_KIND(kLeakyRelu)
    CJIT_POST_OP_KIND(kSwish)
#undef CJIT_POST_OP_KIND
  }
}

// `ops` applied to channels [c, c + lanes). Comparisons with a NaN are false, so every select keeps a
// NaN (ONNX semantics).
template <typename V>
inline __attribute__((always_inline)) V ApplyOpsVec(V v, const std::vector<PostOp>* ops, int64_t c) {
  if (!ops) return v;
  for (const PostOp& op : *ops) {
    DispatchKind(op, [&](auto kind) __attribute__((always_inline)) { v = ApplyKind<decltype(kind)::value>(v, op, c); });
  }
  return v;
}

// `ops` applied to N vectors of a register tile, acc[j] holding channels [chan(j), chan(j) + lanes): one
// dispatch per op for the whole tile (a switch per vector and op cost a depthwise convolution as much as a
// separate pass over its output), and the op's parameters are read once per tile.
template <int N, typename V, typename ChanFn>
inline __attribute__((always_inline)) void ApplyOpsTile(V* acc, const std::vector<PostOp>* ops, ChanFn&& chan) {
  if (!ops) return;
  for (const PostOp& op : *ops) {
    DispatchKind(op, [&](auto kind) __attribute__((always_inline)) {
#pragma GCC unroll 32
      for (int j = 0; j < N; ++j) acc[j] = ApplyKind<decltype(kind)::value>(acc[j], op, chan(j));
    });
  }
}

// y[r, c] = f(y[r, c], c) over rows x channels, in channel blocks of VW, V8f, then single floats.
template <typename VW, typename F>
inline __attribute__((always_inline)) void ForEachChannelBlock(float* y, int64_t rows, int64_t channels, F&& f) {
  for (int64_t r = 0; r < rows; ++r) {
    float* p = y + r * channels;
    ForChannelBlocks<VW>(channels, [&](auto vtag, int64_t c) __attribute__((always_inline)) {
      using V = decltype(vtag);
      if constexpr (std::is_same_v<V, float>) {
        p[c] = f(p[c], c);
      } else {
        StoreV(p + c, f(LoadV<V>(p + c), c));
      }
    });
  }
}

// Bias then each post-op, one pass per op over the (cache-resident) block: the op's kind is dispatched
// once per pass, not once per vector (with 8-32 channels a row is 1-4 vectors, and a switch per vector
// and op was most of the epilogue's time on AVX2).
template <typename VW>
inline __attribute__((always_inline)) void EpilogueBody(float* y, int64_t rows, int64_t channels, const float* bias,
                                                        const std::vector<PostOp>* ops) {
  if (bias) {
    ForEachChannelBlock<VW>(y, rows, channels, [&](auto v, int64_t c) __attribute__((always_inline)) {
      using V = decltype(v);
      if constexpr (std::is_same_v<V, float>) {
        return v + bias[c];
      } else {
        return v + LoadV<V>(bias + c);
      }
    });
  }
  if (!ops) return;
  for (const PostOp& op : *ops) {
    DispatchKind(op, [&](auto kind) __attribute__((always_inline)) {
      ForEachChannelBlock<VW>(y, rows, channels, [&](auto v, int64_t c) __attribute__((always_inline)) {
        return ApplyKind<decltype(kind)::value>(v, op, c);
      });
    });
  }
}

// y[i] = ops(x[i]) for ops without per-channel operands (the unary activations).
template <typename VW>
inline __attribute__((always_inline)) void UnaryBody(const float* x, float* y, int64_t n, const std::vector<PostOp>* ops) {
  constexpr int64_t kW = sizeof(VW) / sizeof(float);
  int64_t i = 0;
  for (; i + kW <= n; i += kW) StoreV(y + i, ApplyOpsVec(LoadV<VW>(x + i), ops, 0));
  for (; i < n; ++i) {
    float v = x[i];
    for (const PostOp& op : *ops) v = ScalarOp(op, v, 0);
    y[i] = v;
  }
}
__attribute__((target("avx512f,fma"))) void UnaryAvx512(const float* x, float* y, int64_t n, const std::vector<PostOp>* ops) {
  UnaryBody<V16f>(x, y, n, ops);
}
__attribute__((target("avx2,fma"))) void UnaryAvx2(const float* x, float* y, int64_t n, const std::vector<PostOp>* ops) {
  UnaryBody<V8f>(x, y, n, ops);
}
void UnaryBaseline(const float* x, float* y, int64_t n, const std::vector<PostOp>* ops) { UnaryBody<V4f>(x, y, n, ops); }

// exp(x) per lane with the code generator's FastExp semantics (cpu_compiler.cc): x clamped to [-103.97,
// 88.72], n = round(x / ln2), exp(r) by Cephes' polynomial, times 2^n applied as 2^a * 2^(n - a) so that
// subnormal results come out right; +inf above 88.72, 0 below -103.97 (so exp(-inf) = 0), NaN stays NaN.
// Relative error ~1e-7 where the result is a normal float.
template <typename V>
inline __attribute__((always_inline)) V ExpExactV(V x) {
  typedef int32_t VI __attribute__((vector_size(sizeof(V))));
  const V zero = {};
  V c = x > zero + 88.72283905206835f ? zero + 88.72283905206835f : x;
  c = c < zero - 103.97208f ? zero - 103.97208f : c;
  V n;
  const V p = ExpReduced(c, &n);
  const VI ni = __builtin_convertvector(n, VI);
  const VI a = ni >> 1;
  V e = p * Pow2<V>(a) * Pow2<V>(ni - a);
  e = x > zero + 88.72283905206835f ? zero + __builtin_inff() : e;
  e = x < zero - 103.97208f ? zero : e;
  return x != x ? x : e;
}

// erf(x) per lane with the code generator's FastErf semantics (cpu_compiler.cc; Eigen's
// generic_fast_erf_float, the approximation XLA emits): x clamped to [-4, 4], x * P(x^2) / Q(x^2), the
// result clamped to [-1, 1], 2 x / sqrt(pi) for |x| < 1e-30; relative error <= 4.2e-7 against float64 erf;
// NaN stays NaN.
template <typename V>
inline __attribute__((always_inline)) V ErfV(V x) {
  const V zero = {};
  V c = x > zero + 4.0f ? zero + 4.0f : x;  // selects: a NaN stays NaN
  c = c < zero - 4.0f ? zero - 4.0f : c;
  const V x2 = c * c;
  V p = zero - 2.72614225801306e-10f;
  for (float k : {2.77068142495902e-08f, -2.10102402082508e-06f, -5.69250639462346e-05f, -7.34990630326855e-04f,
                  -2.95459980854025e-03f, -1.60960333262415e-02f}) {
    p = p * x2 + k;
  }
  V q = zero - 1.45660718464996e-05f;
  for (float k : {-2.13374055278905e-04f, -1.68282697438203e-03f, -7.37332916720468e-03f, -1.42647390514189e-02f}) {
    q = q * x2 + k;
  }
  V r = c * p / q;
  r = r > zero + 1.0f ? zero + 1.0f : r;
  r = r < zero - 1.0f ? zero - 1.0f : r;
  // Below 1e-30 the product c * P underflows into subnormals and loses bits: erf(x) = 2 x / sqrt(pi) there.
  const V ax = x < zero ? -x : x;
  return ax < zero + 1e-30f ? x * 1.1283791670955126f : r;
}

// y[i] = Op::Apply(x[i]) over n floats in vectors of VW, the tail through one more vector in a zero-padded
// copy. Op is a type with an always-inline template Apply, not a lambda: a lambda is compiled without its
// caller's target ISA and returns its vector through the baseline ABI.
struct ExpOp {
  template <typename V>
  static inline __attribute__((always_inline)) V Apply(V v) { return ExpExactV(v); }
};
struct ErfOp {
  template <typename V>
  static inline __attribute__((always_inline)) V Apply(V v) { return ErfV(v); }
};
template <typename VW, typename Op>
inline __attribute__((always_inline)) void MapBody(const float* x, float* y, int64_t n) {
  constexpr int64_t kW = sizeof(VW) / sizeof(float);
  int64_t i = 0;
  for (; i + kW <= n; i += kW) StoreV(y + i, Op::Apply(LoadV<VW>(x + i)));
  if (i < n) {
    alignas(64) float in[kW] = {}, out[kW];
    std::memcpy(in, x + i, static_cast<size_t>(n - i) * sizeof(float));
    StoreV(out, Op::Apply(LoadV<VW>(in)));
    std::memcpy(y + i, out, static_cast<size_t>(n - i) * sizeof(float));
  }
}
#define CJIT_MAP_VARIANTS(NAME)                                                                         \
  __attribute__((target("avx512f,fma"))) void NAME##Avx512(const float* x, float* y, int64_t n) {       \
    MapBody<V16f, NAME##Op>(x, y, n);                                                                   \
  }                                                                                                     \
  __attribute__((target("avx2,fma"))) void NAME##Avx2(const float* x, float* y, int64_t n) {            \
    MapBody<V8f, NAME##Op>(x, y, n);                                                                    \
  }                                                                                                     \
  void NAME##Baseline(const float* x, float* y, int64_t n) { MapBody<V4f, NAME##Op>(x, y, n); }
CJIT_MAP_VARIANTS(Exp)
CJIT_MAP_VARIANTS(Erf)
#undef CJIT_MAP_VARIANTS

// A softmax row: m = max(x) (NaN ignored, as the scalar loop it replaces), y = exp(x - m), returns m and
// sum(y) (vector partial sums per 512 values, added in double).
template <typename VW>
inline __attribute__((always_inline)) void SoftmaxRowBody(const float* x, float* y, int64_t n, float* max_out,
                                                          double* sum_out) {
  constexpr int64_t kW = sizeof(VW) / sizeof(float);
  const VW ninf = VW{} - __builtin_inff();
  VW vm = ninf;
  int64_t i = 0;
  for (; i + kW <= n; i += kW) {
    const VW v = LoadV<VW>(x + i);
    vm = v > vm ? v : vm;
  }
  float m = -__builtin_inff();
  for (int j = 0; j < kW; ++j) m = vm[j] > m ? vm[j] : m;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  double sum = 0;
  for (int64_t b = 0; b < n; b += 512) {
    const int64_t e = std::min(n, b + 512);
    VW acc = VW{};
    int64_t k = b;
    for (; k + kW <= e; k += kW) {
      const VW v = ExpExactV(LoadV<VW>(x + k) - m);
      StoreV(y + k, v);
      acc += v;
    }
    float s = 0;
    for (int j = 0; j < kW; ++j) s += acc[j];
    if (k < e) {  // the tail through one more vector of a -inf-padded copy (exp(-inf) = 0)
      alignas(64) float in[kW], out[kW];
      for (int j = 0; j < kW; ++j) in[j] = k + j < e ? x[k + j] - m : -__builtin_inff();
      StoreV(out, ExpExactV(LoadV<VW>(in)));
      for (int j = 0; k + j < e; ++j) {
        y[k + j] = out[j];
        s += out[j];
      }
    }
    sum += s;
  }
  *max_out = m;
  *sum_out = sum;
}
__attribute__((target("avx512f,fma"))) void SoftmaxRowAvx512(const float* x, float* y, int64_t n, float* m, double* s) {
  SoftmaxRowBody<V16f>(x, y, n, m, s);
}
__attribute__((target("avx2,fma"))) void SoftmaxRowAvx2(const float* x, float* y, int64_t n, float* m, double* s) {
  SoftmaxRowBody<V8f>(x, y, n, m, s);
}
void SoftmaxRowBaseline(const float* x, float* y, int64_t n, float* m, double* s) {
  SoftmaxRowBody<V4f>(x, y, n, m, s);
}

__attribute__((target("avx512f,fma"))) void EpilogueAvx512(float* y, int64_t rows, int64_t channels,
                                                           const float* bias, const std::vector<PostOp>* ops) {
  EpilogueBody<V16f>(y, rows, channels, bias, ops);
}
__attribute__((target("avx2,fma"))) void EpilogueAvx2(float* y, int64_t rows, int64_t channels, const float* bias,
                                                      const std::vector<PostOp>* ops) {
  EpilogueBody<V8f>(y, rows, channels, bias, ops);
}
void EpilogueBaseline(float* y, int64_t rows, int64_t channels, const float* bias, const std::vector<PostOp>* ops) {
  EpilogueBody<V4f>(y, rows, channels, bias, ops);
}

// A 1-D or 2-D window (1-D as 2-D with a unit leading axis): kernel, strides, leading pads, dilations.
struct Window2d {
  int64_t KH, KW, sh, sw, ph, pw, dh, dw;
};
Window2d ToWindow2d(const WindowGeometry& g) {
  size_t n = g.kernel.size();
  bool two = n == 2;
  return {two ? g.kernel[0] : 1,    g.kernel[n - 1],    two ? g.strides[0] : 1,   g.strides[n - 1],
          two ? g.pad_begin[0] : 0, g.pad_begin[n - 1], two ? g.dilations[0] : 1, g.dilations[n - 1]};
}
// {H, W} of a rank-3 (1-D: H = 1) or rank-4 tensor in either layout.
std::pair<int64_t, int64_t> SpatialHW(const Tensor& t, bool channels_last) {
  int r = t.rank();
  return {r == 4 ? (channels_last ? t.dim(1) : t.dim(2)) : 1, channels_last ? t.dim(r - 2) : t.dim(r - 1)};
}

// Depthwise convolution over 2-D (1-D as H = 1) channels-last data. Weights packed [KH, KW, C].
struct DwArgs : Window2d {
  const float* x;
  const float* w;     // [KH, KW, C]
  const float* bias;  // [C] or null
  float* y;
  int64_t H, W, C, OH, OW;
  const std::vector<PostOp>* ops;
  // `x` holds input rows [x_row0, H) of each image from its start (the fused pointwise -> depthwise kernel
  // keeps a band of rows in a buffer); 0 for a whole tensor.
  int64_t x_row0;
};

// The interior tile of the depthwise loop: kDwPix output pixels (`step` floats apart) of one channel block,
// every tap inside the input along W; rows kh in [0, kh_n) from `x` (tap (kh, 0) of pixel 0 at x + kh *
// row_stride), weights from `w` (tap (kh, kw) at w + (kh * KW + kw) * C). acc[kDwPix] is read and written.
// Out of line, one function per vector width (and ISA): inlined into DepthwiseBody with its other variants,
// the inner loop ran out of general registers and reloaded its base pointer and stride from the stack for
// each multiply-add (three loads per FMA; the loop ran at half the FMA rate).
constexpr int kDwPix = 8;  // DwTileBody's loop is written for 8
template <typename V, int KWT>
inline __attribute__((always_inline)) void DwTileBody(const float* x, const float* w, int64_t kh_n, int64_t KW_,
                                                      int64_t C, int64_t row_stride, int64_t tap_stride, int64_t step,
                                                      V* acc_io) {
  const int64_t KW = KWT ? KWT : KW_;
  V acc[kDwPix];
#pragma GCC unroll 8
  for (int j = 0; j < kDwPix; ++j) acc[j] = acc_io[j];
  // Pixel j at p0 + j * step for j < 4 and p4 + (j - 4) * step: base + index * {1, 2} and a 3 * step
  // register, all x86 addressing modes, so the loop needs 5 general registers whatever the kernel size.
  const int64_t s1 = step, s3 = 3 * step;
  for (int64_t kh = 0; kh < kh_n; ++kh) {
    const float* p0 = x + kh * row_stride;
    const float* wr = w + kh * KW * C;
    for (int64_t kw = 0; kw < KW; ++kw) {
      const V wv = LoadV<V>(wr);
      const float* p4 = p0 + 4 * s1;
      acc[0] += LoadV<V>(p0) * wv;
      acc[1] += LoadV<V>(p0 + s1) * wv;
      acc[2] += LoadV<V>(p0 + 2 * s1) * wv;
      acc[3] += LoadV<V>(p0 + s3) * wv;
      acc[4] += LoadV<V>(p4) * wv;
      acc[5] += LoadV<V>(p4 + s1) * wv;
      acc[6] += LoadV<V>(p4 + 2 * s1) * wv;
      acc[7] += LoadV<V>(p4 + s3) * wv;
      wr += C;
      p0 += tap_stride;
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < kDwPix; ++j) acc_io[j] = acc[j];
}
#define CJIT_DW_TILE(NAME, ATTR, V)                                                                            \
  ATTR __attribute__((noinline)) void NAME(const float* x, const float* w, int64_t kh_n, int64_t KW, int64_t C, \
                                           int64_t row_stride, int64_t tap_stride, int64_t step, V* acc) {     \
    switch (KW) {                                                                                              \
      case 3: return DwTileBody<V, 3>(x, w, kh_n, KW, C, row_stride, tap_stride, step, acc);                   \
      case 5: return DwTileBody<V, 5>(x, w, kh_n, KW, C, row_stride, tap_stride, step, acc);                   \
      case 7: return DwTileBody<V, 7>(x, w, kh_n, KW, C, row_stride, tap_stride, step, acc);                   \
      default: return DwTileBody<V, 0>(x, w, kh_n, KW, C, row_stride, tap_stride, step, acc);                  \
    }                                                                                                          \
  }
CJIT_DW_TILE(DwTile16, __attribute__((target("avx512f,fma"))), V16f)
CJIT_DW_TILE(DwTile8, __attribute__((target("avx2,fma"))), V8f)
CJIT_DW_TILE(DwTile4, , V4f)
#undef CJIT_DW_TILE
// The tile function for vector type V (only called from code of an ISA that has V's width).
template <typename V>
inline __attribute__((always_inline)) void DwTile(const float* x, const float* w, int64_t kh_n, int64_t KW, int64_t C,
                                                  int64_t row_stride, int64_t tap_stride, int64_t step, V* acc) {
  if constexpr (std::is_same_v<V, V16f>) DwTile16(x, w, kh_n, KW, C, row_stride, tap_stride, step, acc);
  else if constexpr (std::is_same_v<V, V8f>) DwTile8(x, w, kh_n, KW, C, row_stride, tap_stride, step, acc);
  else DwTile4(x, w, kh_n, KW, C, row_stride, tap_stride, step, acc);
}

// Rows [row_begin, row_end) of N * OH output rows. KHT/KWT: the kernel size when known at compile time
// (the tap loops unroll), else 0. One channel block (a vector of channels, ForChannelBlocksOverlapping) at
// a time over all the rows: the KH input rows a row of outputs reads then stay in L1 for the next rows
// (all channels of five 64 x 32 rows are 40 KiB, more than a 32 KiB L1: each multiply-add waited on L2,
// 0.5 per cycle; one 16-channel block's are 20 KiB). Output pixels run kDwPix at a time (DwTile: kDwPix
// independent accumulators). Interior groups (every tap inside the input along W) read the input in
// place; border groups (the first and last pixels of a row, and a last partial group) read a zero-padded
// copy of the kh_n x span window of the block's channels they cover, so they run the same tile (with one
// accumulator per pixel and a check per tap, a 64-wide 5x5 convolution spent as long on its 8 border
// pixels as on the other 56). Single channels only where C < 4.
template <typename VW, int KHT, int KWT>
inline __attribute__((always_inline)) void DepthwiseBody(const DwArgs& a, int64_t row_begin, int64_t row_end) {
  const int64_t KH = KHT ? KHT : a.KH, KW = KWT ? KWT : a.KW, C = a.C;
  const std::vector<PostOp>* ops = a.ops && !a.ops->empty() ? a.ops : nullptr;
  constexpr int kPix = kDwPix;
  // Interior output columns: ow * sw - pw >= 0 and ow * sw - pw + (KW - 1) * dw <= W - 1.
  int64_t ow_lo = (a.pw + a.sw - 1) / a.sw;
  int64_t last = a.W - 1 + a.pw - (KW - 1) * a.dw;
  int64_t ow_hi = last < 0 ? 0 : std::min(a.OW, last / a.sw + 1);
  if (ow_lo > ow_hi) ow_lo = ow_hi;
  // The input columns a group of kPix pixels covers, and the padded window for border groups.
  const int64_t span = (kPix - 1) * a.sw + (KW - 1) * a.dw + 1;
  constexpr int64_t kMaxLanes = sizeof(VW) / sizeof(float);
  std::vector<float> window(static_cast<size_t>(KH * span * kMaxLanes));
  ForChannelBlocksOverlapping<VW>(C, [&](auto vtag, int64_t c0) __attribute__((always_inline)) {
    using V = decltype(vtag);
    constexpr int64_t lanes = std::is_same_v<V, float> ? 1 : sizeof(V) / sizeof(float);
    for (int64_t row = row_begin; row < row_end; ++row) {
      const int64_t n = row / a.OH, oh = row % a.OH;
      const float* xn = a.x + n * a.H * a.W * C;
      float* yr = a.y + row * a.OW * C;
      const int64_t ih0 = oh * a.sh - a.ph;
      // The rows of the window inside the input: kh in [kh_lo, kh_hi).
      int64_t kh_lo = 0, kh_hi = KH;
      while (kh_lo < KH && ih0 + kh_lo * a.dh < 0) ++kh_lo;
      while (kh_hi > kh_lo && ih0 + (kh_hi - 1) * a.dh >= a.H) --kh_hi;
      const int64_t kh_n = kh_hi - kh_lo;
      // np (<= kPix) pixels from ow; `x0` holds tap (kh_lo, 0) of pixel ow at the block's first channel,
      // columns `ld` floats apart, kh rows row_stride apart.
      auto group = [&](int64_t ow, int np, const float* x0, int64_t ld, int64_t row_stride) __attribute__((always_inline)) {
        if constexpr (std::is_same_v<V, float>) {
          for (int j = 0; j < np; ++j) {
            float acc = a.bias ? a.bias[c0] : 0.0f;
            for (int64_t kh = 0; kh < kh_n; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw)
                acc += x0[kh * row_stride + (j * a.sw + kw * a.dw) * ld] * a.w[((kh_lo + kh) * KW + kw) * C + c0];
            if (ops) {
              for (const PostOp& op : *ops) acc = ScalarOp(op, acc, c0);
            }
            yr[(ow + j) * C + c0] = acc;
          }
        } else {
          V b = {};
          if (a.bias) b = LoadV<V>(a.bias + c0);
          V acc[kPix];
#pragma GCC unroll 8
          for (int j = 0; j < kPix; ++j) acc[j] = b;
          if (kh_n > 0) {
            DwTile<V>(x0, a.w + kh_lo * KW * C + c0, kh_n, KW, C, row_stride, a.dw * ld, a.sw * ld, acc);
          }
          ApplyOpsTile<kPix>(acc, ops, [c0](int) { return c0; });
          float* yp = yr + ow * C + c0;
          if (np == kPix) {
#pragma GCC unroll 8
            for (int j = 0; j < kPix; ++j) StoreV(yp + j * C, acc[j]);
          } else {
            for (int j = 0; j < np; ++j) StoreV(yp + j * C, acc[j]);
          }
        }
      };
      // A border group: the block's channels of window columns [iw0, iw0 + span), zeros outside [0, W).
      auto border = [&](int64_t ow, int np) __attribute__((always_inline)) {
        const int64_t iw0 = ow * a.sw - a.pw;
        const int64_t lo = std::clamp<int64_t>(-iw0, 0, span), hi = std::clamp<int64_t>(a.W - iw0, lo, span);
        for (int64_t kh = 0; kh < kh_n; ++kh) {
          float* dst = window.data() + kh * span * lanes;
          const float* src = xn + ((ih0 + (kh_lo + kh) * a.dh - a.x_row0) * a.W + iw0) * C + c0;
          std::fill(dst, dst + lo * lanes, 0.0f);
          for (int64_t q = lo; q < hi; ++q) std::memcpy(dst + q * lanes, src + q * C, lanes * sizeof(float));
          std::fill(dst + hi * lanes, dst + span * lanes, 0.0f);
        }
        group(ow, np, window.data(), lanes, span * lanes);
      };
      int64_t ow = 0;
      for (; ow < ow_lo; ow += kPix) border(ow, static_cast<int>(std::min<int64_t>(kPix, a.OW - ow)));
      const float* row0 = xn + (ih0 + kh_lo * a.dh - a.x_row0) * a.W * C + c0;
      for (; ow + kPix <= ow_hi; ow += kPix) group(ow, kPix, row0 + (ow * a.sw - a.pw) * C, C, a.dh * a.W * C);
      for (; ow < a.OW; ow += kPix) border(ow, static_cast<int>(std::min<int64_t>(kPix, a.OW - ow)));
    }
  });
}

#define CJIT_DEPTHWISE_DISPATCH(VW)                                              \
  if (a.KH == 3 && a.KW == 3) return DepthwiseBody<VW, 3, 3>(a, r0, r1);  \
  if (a.KH == 5 && a.KW == 5) return DepthwiseBody<VW, 5, 5>(a, r0, r1);  \
  if (a.KH == 1 && a.KW == 3) return DepthwiseBody<VW, 1, 3>(a, r0, r1);  \
  if (a.KH == 1 && a.KW == 5) return DepthwiseBody<VW, 1, 5>(a, r0, r1);  \
  if (a.KH == 7 && a.KW == 7) return DepthwiseBody<VW, 7, 7>(a, r0, r1);  \
  return DepthwiseBody<VW, 0, 0>(a, r0, r1);

__attribute__((target("avx512f,fma"))) void DepthwiseAvx512(const DwArgs& a, int64_t r0, int64_t r1) {
  CJIT_DEPTHWISE_DISPATCH(V16f)
}
__attribute__((target("avx2,fma"))) void DepthwiseAvx2(const DwArgs& a, int64_t r0, int64_t r1) {
  CJIT_DEPTHWISE_DISPATCH(V8f)
}
void DepthwiseBaseline(const DwArgs& a, int64_t r0, int64_t r1) {
  CJIT_DEPTHWISE_DISPATCH(V4f)
}
#undef CJIT_DEPTHWISE_DISPATCH

// Direct convolution with few input channels (C = CT, 1-4: an image network's stem), channels-last,
// group 1, 1-D or 2-D: per output pixel and block of output channels, sum over taps and input channels
// of x (broadcast) * w[(kh, kw, c), oc block] — weights packed [KH, KW, C] x OC, as for im2col. Four
// output pixels at a time (four accumulation chains). The im2col + GEMM path it replaces copied 4-16
// bytes per tap and ran a GEMM whose K (C x KH x KW, 27 for 3x3x3) and N (8-32) leave its kernel mostly
// idle: 5.5 GFLOP/s on ppocr_mobile_cls's stem on a Zen 3.
struct FcArgs : Window2d {
  const float* x;
  const float* w;     // [KH, KW, C, OC]
  const float* bias;  // [OC] or null
  float* y;
  int64_t H, W, C, OC, OH, OW;
  const std::vector<PostOp>* ops;
};

// The end of a register tile: P rows x NB vectors accumulated for channels [c0, c0 + NB * lanes), the
// post-ops applied, the first `rows` rows stored at y (row r at y + r * ldy). The post-ops work on a copy:
// an accumulator array whose address escapes stays in memory, and GCC then stored and reloaded all of it
// once per multiply-add step of the tile's loop.
template <typename V, int P, int NB>
inline __attribute__((always_inline)) void StoreTileWithOps(const V (&acc)[P][NB], const std::vector<PostOp>* ops,
                                                            int64_t c0, float* y, int64_t ldy, int rows) {
  constexpr int64_t L = sizeof(V) / sizeof(float);
  V out[P * NB];
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) {
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) out[p * NB + j] = acc[p][j];
  }
  ApplyOpsTile<P * NB>(out, ops, [c0](int i) { return c0 + (i % NB) * L; });
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) {
    if (p >= rows) break;
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) StoreV(y + p * ldy + j * L, out[p * NB + j]);
  }
}

// P output pixels (ow.., `np` of them valid) x NB vectors of output channels from o0 of one output row,
// P * NB accumulators in registers (6 x 4 or 12 x 2 of 16 lanes: 24 of the 32 zmm registers, plus NB
// weight vectors and a broadcast). Checked: some pixel's window crosses the left or right edge (each tap's
// column is tested); else none does and no test runs.
template <typename V, int CT, int P, int NB, bool Checked>
inline __attribute__((always_inline)) void FewChannelTile(const FcArgs& a, const float* xn, int64_t ih0, float* yr,
                                                          int64_t ow, int np, int64_t o0,
                                                          const std::vector<PostOp>* ops) {
  constexpr int64_t C = CT, L = sizeof(V) / sizeof(float);
  const int64_t OC = a.OC, KW = a.KW;
  const V zero = {};
  V acc[P][NB];
#pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) {
    const V b = a.bias ? LoadV<V>(a.bias + o0 + j * L) : zero;
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) acc[p][j] = b;
  }
  for (int64_t kh = 0; kh < a.KH; ++kh) {
    const int64_t ih = ih0 + kh * a.dh;
    if (static_cast<uint64_t>(ih) >= static_cast<uint64_t>(a.H)) continue;
    const float* xrow = xn + ih * a.W * C;
    for (int64_t kw = 0; kw < KW; ++kw) {
      const int64_t iw0 = ow * a.sw - a.pw + kw * a.dw;
      const float* wp = a.w + (kh * KW + kw) * C * OC + o0;
#pragma GCC unroll 4
      for (int64_t c = 0; c < C; ++c) {
        V wv[NB];
#pragma GCC unroll 8
        for (int j = 0; j < NB; ++j) wv[j] = LoadV<V>(wp + c * OC + j * L);
#pragma GCC unroll 16
        for (int p = 0; p < P; ++p) {
          const int64_t iw = iw0 + p * a.sw;
          if (Checked && (p >= np || static_cast<uint64_t>(iw) >= static_cast<uint64_t>(a.W))) continue;
          const V xv = BroadcastLoad<V>(xrow + iw * C + c);
#pragma GCC unroll 8
          for (int j = 0; j < NB; ++j) acc[p][j] += xv * wv[j];
        }
      }
    }
  }
  StoreTileWithOps<V, P, NB>(acc, ops, o0, yr + ow * OC + o0, OC, np);
}

// One output row's pixels for output channels [o0, o0 + NB * L): tiles of P pixels, unchecked where every
// window of the tile lies inside the row.
template <typename V, int CT, int P, int NB>
inline __attribute__((always_inline)) void FewChannelRow(const FcArgs& a, const float* xn, int64_t ih0, float* yr,
                                                         int64_t o0, const std::vector<PostOp>* ops) {
  // Interior output columns: ow * sw - pw >= 0 and ow * sw - pw + (KW - 1) * dw <= W - 1.
  const int64_t ow_lo = std::min(a.OW, (a.pw + a.sw - 1) / a.sw);
  const int64_t last = a.W - 1 + a.pw - (a.KW - 1) * a.dw;
  const int64_t ow_hi = last < 0 ? 0 : std::min(a.OW, last / a.sw + 1);
  int64_t ow = 0;
  for (; ow < a.OW;) {
    const int np = static_cast<int>(std::min<int64_t>(P, a.OW - ow));
    if (ow >= ow_lo && ow + P <= ow_hi) {
      FewChannelTile<V, CT, P, NB, false>(a, xn, ih0, yr, ow, P, o0, ops);
    } else {
      FewChannelTile<V, CT, P, NB, true>(a, xn, ih0, yr, ow, np, o0, ops);
    }
    ow += np;
  }
}

template <typename VW, int CT>
inline __attribute__((always_inline)) void FewChannelBody(const FcArgs& a, int64_t row_begin, int64_t row_end) {
  constexpr int64_t C = CT;
  constexpr int64_t L = sizeof(VW) / sizeof(float);
  const int64_t OC = a.OC, KH = a.KH, KW = a.KW;
  const std::vector<PostOp>* ops = a.ops && !a.ops->empty() ? a.ops : nullptr;
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t n = row / a.OH, oh = row % a.OH;
    const float* xn = a.x + n * a.H * a.W * C;
    float* yr = a.y + row * a.OW * OC;
    const int64_t ih0 = oh * a.sh - a.ph;
    // Wide register tiles over the output channels while 2+ vectors remain (AVX-512: 32 registers; a
    // 4-pixel x 1-vector tile kept 4 multiply-add chains in flight, half the two FMA pipes' capacity:
    // ResNet's 7x7 3 -> 64 stem at 224 x 224 took 1.97 ms against ORT's 0.98).
    int64_t o_wide = 0;
    if constexpr (L == 16) {
      for (; o_wide + 4 * L <= OC; o_wide += 4 * L) FewChannelRow<VW, CT, 6, 4>(a, xn, ih0, yr, o_wide, ops);
      for (; o_wide + 2 * L <= OC; o_wide += 2 * L) FewChannelRow<VW, CT, 12, 2>(a, xn, ih0, yr, o_wide, ops);
    }
    if (o_wide == OC) continue;
    for (int64_t ow = 0; ow < a.OW; ow += 4) {
      const int np = static_cast<int>(std::min<int64_t>(4, a.OW - ow));
      ForChannelBlocksOverlapping<VW>(OC - o_wide, [&](auto vtag, int64_t o_rel) __attribute__((always_inline)) {
        const int64_t o0 = o_wide + o_rel;
        using V = decltype(vtag);
        V acc[4];
        // No lambda returning a vector here: a lambda is not compiled for this function's target ISA, so
        // unless inlined (an -O0 build) it would pass the vector under another ABI.
        V b{};
        if constexpr (std::is_same_v<V, float>) {
          if (a.bias) b = a.bias[o0];
        } else {
          if (a.bias) b = LoadV<V>(a.bias + o0);
        }
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) acc[j] = b;
        for (int64_t kh = 0; kh < KH; ++kh) {
          const int64_t ih = ih0 + kh * a.dh;
          if (static_cast<uint64_t>(ih) >= static_cast<uint64_t>(a.H)) continue;
          const float* xrow = xn + ih * a.W * C;
          for (int64_t kw = 0; kw < KW; ++kw) {
            const float* wp = a.w + (kh * KW + kw) * C * OC + o0;
            V wv[C];
#pragma GCC unroll 4
            for (int64_t c = 0; c < C; ++c) {
              if constexpr (std::is_same_v<V, float>) wv[c] = wp[c * OC];
              else wv[c] = LoadV<V>(wp + c * OC);
            }
#pragma GCC unroll 4
            for (int j = 0; j < 4; ++j) {
              const int64_t iw = (ow + j) * a.sw - a.pw + kw * a.dw;
              if (j >= np || static_cast<uint64_t>(iw) >= static_cast<uint64_t>(a.W)) continue;
              const float* xp = xrow + iw * C;
#pragma GCC unroll 4
              for (int64_t c = 0; c < C; ++c) acc[j] += xp[c] * wv[c];
            }
          }
        }
        for (int j = 0; j < np; ++j) {
          float* yp = yr + (ow + j) * OC + o0;
          if constexpr (std::is_same_v<V, float>) {
            float v = acc[j];
            if (ops) {
              for (const PostOp& op : *ops) v = ScalarOp(op, v, o0);
            }
            *yp = v;
          } else {
            StoreV(yp, ApplyOpsVec(acc[j], ops, o0));
          }
        }
      });
    }
  }
}

#define CJIT_FEW_CHANNEL_DISPATCH(VW)                            \
  switch (a.C) {                                                 \
    case 1: return FewChannelBody<VW, 1>(a, r0, r1);             \
    case 2: return FewChannelBody<VW, 2>(a, r0, r1);             \
    case 3: return FewChannelBody<VW, 3>(a, r0, r1);             \
    default: return FewChannelBody<VW, 4>(a, r0, r1);            \
  }
__attribute__((target("avx512f,fma"))) void FewChannelAvx512(const FcArgs& a, int64_t r0, int64_t r1) {
  CJIT_FEW_CHANNEL_DISPATCH(V16f)
}
__attribute__((target("avx2,fma"))) void FewChannelAvx2(const FcArgs& a, int64_t r0, int64_t r1) {
  CJIT_FEW_CHANNEL_DISPATCH(V8f)
}
void FewChannelBaseline(const FcArgs& a, int64_t r0, int64_t r1) { CJIT_FEW_CHANNEL_DISPATCH(V4f) }
#undef CJIT_FEW_CHANNEL_DISPATCH

// Pointwise convolution with few input channels, Y [M, OC] = X [M, C] * W [C, OC] + bias, then the
// post-ops, without a GEMM library: register tiles of P pixels x NB vectors of output channels accumulate
// C broadcast-multiply-adds each (W stays in L1 for kSmallKWeights floats, in L2 for an im2col product's
// kSmallKGemmWeights), and the bias and post-ops are applied in registers before the only store. Rows of X
// are ldx >= C floats apart, or overlap (ldx < C: the in-place im2col rows of a 1-D convolution). BLIS
// packs both operands on every call, and with C of 16-32 its packing (the activation panels through a
// reference kernel) cost as much as the products; a MobileNet stage's 16 -> 64 expansion at 320 x 320
// took 2.2 ms through BLIS against ORT's 1.1 ms. `w` points at the tile's first output channel (n0) of
// weight rows ldw floats apart (W [C, OC]: w + n0 and OC; a panel of PanelProductWeights: its width).
// Sums run over k in increasing order with fused multiply-adds where the ISA has them (as BLIS's kernels).
// The parts of a register tile of P rows x NB vectors of output channels [n0, n0 + NB * lanes): the
// accumulators start at the bias (or 0); then row p accumulates xp[p][k] * w[k * ldw ..] for k < C (rows
// beyond `rows` are skipped). All inline, so the accumulators stay in registers.
template <typename V, int P, int NB>
inline __attribute__((always_inline)) void InitTile(V (&acc)[P][NB], const float* bias, int64_t n0) {
  constexpr int64_t L = sizeof(V) / sizeof(float);
  const V zero = {};
#pragma GCC unroll 8
  for (int j = 0; j < NB; ++j) {
    const V b = bias ? LoadV<V>(bias + n0 + j * L) : zero;
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) acc[p][j] = b;
  }
}

template <typename V, int P, int NB>
inline __attribute__((always_inline)) void AccumulateTile(V (&acc)[P][NB], const float* const (&xp)[P], int64_t C,
                                                          const float* w, int64_t ldw, int rows) {
  constexpr int64_t L = sizeof(V) / sizeof(float);
  for (int64_t k = 0; k < C; ++k) {
    V wv[NB];
#pragma GCC unroll 8
    for (int j = 0; j < NB; ++j) wv[j] = LoadV<V>(w + k * ldw + j * L);
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) {
      if (p >= rows) break;
      const V xv = BroadcastLoad<V>(xp[p] + k);
#pragma GCC unroll 8
      for (int j = 0; j < NB; ++j) acc[p][j] += xv * wv[j];
    }
  }
}

template <typename V, int P, int NB>
inline __attribute__((always_inline)) void SmallKTile(const float* x, int64_t ldx, int64_t C, const float* w, int64_t ldw,
                                                      int64_t OC, const float* bias, const std::vector<PostOp>* ops,
                                                      float* y, int64_t n0, int rows) {
  V acc[P][NB];
  InitTile<V, P, NB>(acc, bias, n0);
  const float* xp[P];
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) xp[p] = x + p * ldx;
  AccumulateTile<V, P, NB>(acc, xp, C, w, ldw, rows);
  StoreTileWithOps<V, P, NB>(acc, ops, n0, y + n0, OC, rows);
}

template <typename VW>
inline __attribute__((always_inline)) void SmallKPointwiseBody(const float* x, const float* w, const float* bias,
                                                               const std::vector<PostOp>* ops, float* y, int64_t M,
                                                               int64_t C, int64_t OC, int64_t ldx) {
  constexpr int64_t L = sizeof(VW) / sizeof(float);
  // Registers: P x NB accumulators plus NB weight vectors and a broadcast (32 zmm: 24 + 4 + 1).
  constexpr int P = 6, NB = 4;
  int64_t n0 = 0;
  for (; n0 + NB * L <= OC; n0 += NB * L) {
    for (int64_t m = 0; m < M; m += P) {
      SmallKTile<VW, P, NB>(x + m * ldx, ldx, C, w + n0, OC, OC, bias, ops, y + m * OC, n0,
                            static_cast<int>(std::min<int64_t>(P, M - m)));
    }
  }
  for (; n0 + L <= OC; n0 += L) {
    for (int64_t m = 0; m < M; m += 2 * P) {
      SmallKTile<VW, 2 * P, 1>(x + m * ldx, ldx, C, w + n0, OC, OC, bias, ops, y + m * OC, n0,
                               static_cast<int>(std::min<int64_t>(2 * P, M - m)));
    }
  }
  if constexpr (L > 8) {
    for (; n0 + 8 <= OC && OC < L; n0 += 8) {
      for (int64_t m = 0; m < M; m += 2 * P) {
        SmallKTile<V8f, 2 * P, 1>(x + m * ldx, ldx, C, w + n0, OC, OC, bias, ops, y + m * OC, n0,
                                  static_cast<int>(std::min<int64_t>(2 * P, M - m)));
      }
    }
  }
  // The last partial block as one more vector ending at OC (ForChannelBlocksOverlapping): the full width
  // where OC allows, else 8 lanes.
  if (n0 < OC && OC >= L) {
    for (int64_t m = 0; m < M; m += 2 * P) {
      SmallKTile<VW, 2 * P, 1>(x + m * ldx, ldx, C, w + OC - L, OC, OC, bias, ops, y + m * OC, OC - L,
                               static_cast<int>(std::min<int64_t>(2 * P, M - m)));
    }
    n0 = OC;
  }
  if constexpr (L > 8) {
    if (n0 < OC && OC >= 8) {
      for (int64_t m = 0; m < M; m += 2 * P) {
        SmallKTile<V8f, 2 * P, 1>(x + m * ldx, ldx, C, w + OC - 8, OC, OC, bias, ops, y + m * OC, OC - 8,
                                  static_cast<int>(std::min<int64_t>(2 * P, M - m)));
      }
      n0 = OC;
    }
  }
  for (; n0 < OC; ++n0) {
    for (int64_t m = 0; m < M; ++m) {
      float acc = bias ? bias[n0] : 0.0f;
      for (int64_t k = 0; k < C; ++k) acc += x[m * ldx + k] * w[k * OC + n0];
      if (ops) {
        for (const PostOp& op : *ops) acc = ScalarOp(op, acc, n0);
      }
      y[m * OC + n0] = acc;
    }
  }
}
__attribute__((target("avx512f,fma"))) void SmallKPointwiseAvx512(const float* x, const float* w, const float* bias,
                                                                  const std::vector<PostOp>* ops, float* y, int64_t M,
                                                                  int64_t C, int64_t OC, int64_t ldx) {
  SmallKPointwiseBody<V16f>(x, w, bias, ops, y, M, C, OC, ldx);
}

// Weights in panels for PanelPointwiseBody: output channels in groups of kPanelWidth (the last group
// narrower, a multiple of 8), each group k-major: panel q starts at q * C * kPanelWidth and holds
// w[k][n] for k < C, n < its width, n fastest. A tile's weights for one k are one contiguous run of
// 64-256 bytes, the panel's rows adjacent: read in order from L2 (the [C, OC] layout strides OC floats
// per k, a new 4 KiB page every few k for wide layers).
constexpr int64_t kPanelWidth = 64;

// Y [M, OC] (rows [m0, m1), panels [q0, q1)) = X [M, C] (rows ldx floats apart) x panels + bias, then the
// post-ops, for OC a multiple of 8 (AVX-512): row blocks whose X rows stay in L2 (about 96 KiB), each
// swept by every panel in tiles of 6 rows x 4 vectors (24 accumulators), 8 x 3, or 12 x 2 / 12 x 1, and
// 12 rows x 8 channels for a panel's last 8 when its width is not a multiple of 16.
// Replaces BLIS for pointwise convolutions, which packed X and W on every call: ~1.5x slower than
// oneDNN's jit_1x1 / brgconv_1x1 on MobileNetV2's and ResNet-50's 1x1 convolutions.
// Rows [r0, r1) of Y's channels [n0, n0 + NB * lanes) in tiles of P rows, weights `w` rows ldw apart.
template <typename V, int P, int NB>
inline __attribute__((always_inline)) void PanelTiles(const float* x, int64_t ldx, int64_t C, const float* w,
                                                      int64_t ldw, int64_t OC, const float* bias,
                                                      const std::vector<PostOp>* ops, float* y, int64_t n0,
                                                      int64_t r0, int64_t r1) {
  for (int64_t m = r0; m < r1; m += P) {
    SmallKTile<V, P, NB>(x + m * ldx, ldx, C, w, ldw, OC, bias, ops, y + m * OC, n0,
                         static_cast<int>(std::min<int64_t>(P, r1 - m)));
  }
}

template <typename V>
inline __attribute__((always_inline)) void PanelPointwiseBody(const float* x, int64_t ldx, const float* panels,
                                                              const float* bias, const std::vector<PostOp>* ops,
                                                              float* y, int64_t m0, int64_t m1, int64_t q0,
                                                              int64_t q1, int64_t C, int64_t OC) {
  constexpr int64_t L = sizeof(V) / sizeof(float);
  const int64_t rb = std::max<int64_t>(24, (int64_t{96} << 10) / (4 * std::max<int64_t>(C, 1)) / 24 * 24);
  for (int64_t r0 = m0; r0 < m1; r0 += rb) {
    const int64_t r1 = std::min(m1, r0 + rb);
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t n0 = q * kPanelWidth, nr = std::min(kPanelWidth, OC - n0);
      const float* wq = panels + q * C * kPanelWidth;
      // A panel width of 8 mod 16 (24, 40, .. output channels): its last 8 channels as a half-width tile.
      const int64_t nv = nr / L * L;
      if (nv < nr) PanelTiles<V8f, 12, 1>(x, ldx, C, wq + nv, nr, OC, bias, ops, y, n0 + nv, r0, r1);
      switch (nr / L) {
        case 0: break;
        case 4: PanelTiles<V, 6, 4>(x, ldx, C, wq, nr, OC, bias, ops, y, n0, r0, r1); break;
        case 3: PanelTiles<V, 8, 3>(x, ldx, C, wq, nr, OC, bias, ops, y, n0, r0, r1); break;
        case 2: PanelTiles<V, 12, 2>(x, ldx, C, wq, nr, OC, bias, ops, y, n0, r0, r1); break;
        default: PanelTiles<V, 12, 1>(x, ldx, C, wq, nr, OC, bias, ops, y, n0, r0, r1); break;
      }
    }
  }
}
__attribute__((target("avx512f,fma"))) void PanelPointwiseAvx512(const float* x, int64_t ldx, const float* panels,
                                                                 const float* bias, const std::vector<PostOp>* ops,
                                                                 float* y, int64_t m0, int64_t m1, int64_t q0,
                                                                 int64_t q1, int64_t C, int64_t OC) {
  PanelPointwiseBody<V16f>(x, ldx, panels, bias, ops, y, m0, m1, q0, q1, C, OC);
}

// Indirect convolution (M. Dukhan, "The Indirect Convolution Algorithm", arXiv:1907.02129, as XNNPACK):
// a channels-last convolution of any window, group 1, without im2col and without a per-shape JIT. Each
// output pixel m has, per tap t = kh * KW + kw, a pointer to the C floats of the input pixel the tap reads
// (or to C zeros where the tap falls in the padding): the indirection buffer, rebuilt per block of pixels.
// The product is then PanelPointwiseBody's over K = taps x C: weights in panels of kPanelWidth output
// channels, k = t * C + c, register tiles of P pixels x NB vectors accumulating every tap before the only
// store (bias and post-ops applied in registers).
struct IndirectArgs {
  Window2d win;
  const float* x;
  const float* panels;  // PackIndirectWeights
  const float* bias;
  const std::vector<PostOp>* ops;
  float* y;
  const float* zeros;  // at least C zeros
  int64_t H, W, C, OH, OW, OC;
};

template <typename V, int P, int NB>
inline __attribute__((always_inline)) void IndirectTile(const float* const* ptrs, int64_t T, int64_t C, const float* w,
                                                        int64_t ldw, int64_t OC, const float* bias,
                                                        const std::vector<PostOp>* ops, float* y, int64_t n0,
                                                        int rows) {
  V acc[P][NB];
  InitTile<V, P, NB>(acc, bias, n0);
  for (int64_t t = 0; t < T; ++t) {
    const float* xp[P];
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) xp[p] = ptrs[(p < rows ? p : 0) * T + t];
    AccumulateTile<V, P, NB>(acc, xp, C, w + t * C * ldw, ldw, rows);
  }
  StoreTileWithOps<V, P, NB>(acc, ops, n0, y + n0, OC, rows);
}

template <typename V, int P, int NB>
inline __attribute__((always_inline)) void IndirectTiles(const IndirectArgs& a, const float* const* ptrs, int64_t T,
                                                         const float* w, int64_t ldw, int64_t n0, int64_t r0,
                                                         int64_t r1) {
  for (int64_t m = r0; m < r1; m += P) {
    IndirectTile<V, P, NB>(ptrs + (m - r0) * T, T, a.C, w, ldw, a.OC, a.bias, a.ops, a.y + m * a.OC, n0,
                           static_cast<int>(std::min<int64_t>(P, r1 - m)));
  }
}

// Output pixels [m0, m1) (m = (n * OH + oh) * OW + ow) x panels [q0, q1).
template <typename V>
inline __attribute__((always_inline)) void IndirectBody(const IndirectArgs& a, int64_t m0, int64_t m1, int64_t q0,
                                                        int64_t q1) {
  constexpr int64_t L = sizeof(V) / sizeof(float);
  const Window2d& g = a.win;
  const int64_t T = g.KH * g.KW;
  // Pixel blocks whose input rows (about KH rows of the block's width) stay in L2 while every panel sweeps
  // them.
  const int64_t rb = std::clamp<int64_t>((int64_t{192} << 10) / (4 * std::max<int64_t>(a.C * g.KH, 1)) / 24 * 24,
                                         24, 480);
  std::vector<const float*> ptrs(static_cast<size_t>(rb * T));
  for (int64_t r0 = m0; r0 < m1; r0 += rb) {
    const int64_t r1 = std::min(m1, r0 + rb);
    for (int64_t m = r0; m < r1; ++m) {
      const int64_t n = m / (a.OH * a.OW), oh = m / a.OW % a.OH, ow = m % a.OW;
      const float** row = ptrs.data() + (m - r0) * T;
      for (int64_t kh = 0; kh < g.KH; ++kh) {
        const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
        const bool in_h = ih >= 0 && ih < a.H;
        for (int64_t kw = 0; kw < g.KW; ++kw) {
          const int64_t iw = ow * g.sw - g.pw + kw * g.dw;
          row[kh * g.KW + kw] = in_h && iw >= 0 && iw < a.W ? a.x + ((n * a.H + ih) * a.W + iw) * a.C : a.zeros;
        }
      }
    }
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t n0 = q * kPanelWidth, nr = std::min(kPanelWidth, a.OC - n0);
      const float* wq = a.panels + q * T * a.C * kPanelWidth;
      const int64_t nv = nr / L * L;
      if (nv < nr) IndirectTiles<V8f, 12, 1>(a, ptrs.data(), T, wq + nv, nr, n0 + nv, r0, r1);
      switch (nr / L) {
        case 0: break;
        case 4: IndirectTiles<V, 6, 4>(a, ptrs.data(), T, wq, nr, n0, r0, r1); break;
        case 3: IndirectTiles<V, 8, 3>(a, ptrs.data(), T, wq, nr, n0, r0, r1); break;
        case 2: IndirectTiles<V, 12, 2>(a, ptrs.data(), T, wq, nr, n0, r0, r1); break;
        default: IndirectTiles<V, 12, 1>(a, ptrs.data(), T, wq, nr, n0, r0, r1); break;
      }
    }
  }
}
__attribute__((target("avx512f,fma"))) void IndirectAvx512(const IndirectArgs& a, int64_t m0, int64_t m1, int64_t q0,
                                                           int64_t q1) {
  IndirectBody<V16f>(a, m0, m1, q0, q1);
}

struct Isa {
  void (*epilogue)(float*, int64_t, int64_t, const float*, const std::vector<PostOp>*);
  void (*depthwise)(const DwArgs&, int64_t, int64_t);
  void (*unary)(const float*, float*, int64_t, const std::vector<PostOp>*);
  void (*exp)(const float*, float*, int64_t);
  void (*erf)(const float*, float*, int64_t);
  void (*softmax_row)(const float*, float*, int64_t, float*, double*);
  void (*few_channel)(const FcArgs&, int64_t, int64_t);
  // AVX-512 only: the AVX2 and SSE2 variants of the loop (fewer registers: 2-pixel tiles) were slower than
  // BLIS on the detector's pointwise convolutions (all of them: 26.6 / 50.4 ms vs 23.2 / 31.1 ms, 1 thread,
  // forced on this AVX-512 CPU), so those ISAs keep BLIS.
  void (*small_k_pointwise)(const float*, const float*, const float*, const std::vector<PostOp>*, float*, int64_t,
                            int64_t, int64_t, int64_t);
  // AVX-512 only, as small_k_pointwise.
  void (*panel_pointwise)(const float*, int64_t, const float*, const float*, const std::vector<PostOp>*, float*,
                          int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
  // AVX-512 only, as panel_pointwise (the same tiles).
  void (*indirect)(const IndirectArgs&, int64_t, int64_t, int64_t, int64_t);
};

// Indexed by ConvLoopIsa.
const Isa kIsas[] = {
    {&EpilogueBaseline, &DepthwiseBaseline, &UnaryBaseline, &ExpBaseline, &ErfBaseline, &SoftmaxRowBaseline, &FewChannelBaseline,
     nullptr, nullptr, nullptr},
    {&EpilogueBaseline, &DepthwiseBaseline, &UnaryBaseline, &ExpBaseline, &ErfBaseline, &SoftmaxRowBaseline, &FewChannelBaseline,
     nullptr, nullptr, nullptr},
    {&EpilogueAvx2, &DepthwiseAvx2, &UnaryAvx2, &ExpAvx2, &ErfAvx2, &SoftmaxRowAvx2, &FewChannelAvx2, nullptr, nullptr, nullptr},
    {&EpilogueAvx512, &DepthwiseAvx512, &UnaryAvx512, &ExpAvx512, &ErfAvx512, &SoftmaxRowAvx512, &FewChannelAvx512,
     &SmallKPointwiseAvx512, &PanelPointwiseAvx512, &IndirectAvx512}};
std::atomic<int> forced_isa{0};  // SetConvLoopIsaForTest

bool CpuSupports(ConvLoopIsa isa) {
  __builtin_cpu_init();
  switch (isa) {
    case ConvLoopIsa::kAvx512: return CpuHasAvx512();
    case ConvLoopIsa::kAvx2: return CpuHasAvx2();
    default: return true;
  }
}

const Isa& PickIsa() {
  const int detected = CpuSupports(ConvLoopIsa::kAvx512) ? 3 : CpuSupports(ConvLoopIsa::kAvx2) ? 2 : 1;
  const int forced = forced_isa.load(std::memory_order_relaxed);
  return kIsas[forced ? forced : detected];
}

}  // namespace

bool SetConvLoopIsaForTest(ConvLoopIsa isa) {
  if (!CpuSupports(isa)) return false;
  forced_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
  return true;
}

namespace {

bool AllEqual(const std::vector<int64_t>& v, int64_t value) {
  return std::all_of(v.begin(), v.end(), [&](int64_t e) { return e == value; });
}

// SmallKPointwiseBody's limits: input channels, and weights (floats: 48 KiB) that stay in L1 or close. On
// the detector of tools/make_detector.py at 640 x 640 (1 thread, per convolution, against the BLIS path):
// 16 -> 16 443 vs 534 us, 16 -> 64 (+ depthwise) 2291 vs 2682, 24 -> 96 727 vs 1090, 72 -> 24 767 vs
// 851, 40 -> 240 (+ depthwise) 869 vs 971, 40 -> 96 250 vs 386; the whole model 43-45 vs 45-46 ms.
constexpr int64_t kSmallKMaxChannels = 128;
constexpr int64_t kSmallKWeights = 12288;
// For channels-last im2col products (K = channels x taps): weights up to 256 KiB (L2). oww_embedding's
// 3-tap 72- and 96-channel convolutions over 16-256 pixels: 60-62 -> 44-46 us (ORT 43-46), 23-24 -> 17-19.
constexpr int64_t kSmallKGemmWeights = 65536;
bool UseSmallKPointwise(int64_t C, int64_t OC) {
  return PickIsa().small_k_pointwise != nullptr && C <= kSmallKMaxChannels && C * OC <= kSmallKWeights;
}
// The same loop for a channels-last im2col product (K = channels x taps).
bool UseSmallKGemm(int64_t K, int64_t OC) {
  return PickIsa().small_k_pointwise != nullptr && K * OC <= kSmallKGemmWeights;
}

// Y [M, OC] = X [M, C] * W[OC, C]^T, then bias and post-ops, in row chunks of about 128 KiB of output so
// the epilogue reads what the GEMM just wrote from cache. With several threads and enough chunks, each
// thread runs whole chunks (Sgemm then runs single-threaded inside the parallel region); otherwise Sgemm
// parallelizes each chunk itself (runtime/cpu/gemm.h).
// `w` is [OC, C] (transposed = false) or [C, OC] (transposed = true, the packed constant weights: a GEMM
// is ~10% faster with B not transposed).
absl::Status PointwiseGemm(KernelContext& ctx, const float* x, const float* w, bool w_is_c_by_oc, const float* bias,
                           float* y, int64_t M, int64_t C, int64_t OC) {
  const std::vector<PostOp>* ops = ctx.post_ops;
  const Isa& isa = PickIsa();
  int64_t rows = std::max<int64_t>(256, (int64_t{128} << 10) / (4 * std::max<int64_t>(OC, 1)));
  rows = std::min(rows, M);
  int64_t chunks = (M + rows - 1) / rows;
  int nt = ThreadsForWork(ctx.threads, static_cast<double>(M) * C * OC);
  if (w_is_c_by_oc && UseSmallKPointwise(C, OC)) {
    // Few input channels: the register-tiled loop (bias and post-ops included), rows split over threads.
    const int64_t parts = std::min<int64_t>(std::max(nt, 1), (M + 63) / 64);
    ParallelFor(static_cast<int>(parts), parts, [&](int64_t t) {
      const int64_t m0 = M * t / parts, m1 = M * (t + 1) / parts;
      isa.small_k_pointwise(x + m0 * C, w, bias, ops, y + m0 * OC, m1 - m0, C, OC, C);
    });
    return absl::OkStatus();
  }
  int failed = 0;
  auto chunk = [&](int64_t i) {
    int64_t m0 = i * rows, m = std::min(rows, M - m0);
    const bool ok = w_is_c_by_oc ? Sgemm(false, false, m, OC, C, 1.0f, x + m0 * C, C, w, OC, 0.0f, y + m0 * OC, OC)
                                 : Sgemm(false, true, m, OC, C, 1.0f, x + m0 * C, C, w, C, 0.0f, y + m0 * OC, OC);
    if (!ok) {
      failed = 1;
      return;
    }
    isa.epilogue(y + m0 * OC, m, OC, bias, ops);
  };
  if (nt > 1 && chunks >= 2 * nt) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t i = 0; i < chunks; ++i) chunk(i);
    MarkParallelEnd();
  } else {
    for (int64_t i = 0; i < chunks; ++i) chunk(i);
  }
  if (failed) return ctx.Error("BLIS sgemm: invalid arguments on a pointwise convolution");
  return absl::OkStatus();
}

// Depthwise weights ONNX [C, 1, KH, KW] -> [KH, KW, C].
void PackDepthwise(const float* w, int64_t C, int64_t KH, int64_t KW, float* out) {
  for (int64_t c = 0; c < C; ++c)
    for (int64_t k = 0; k < KH * KW; ++k) out[k * C + c] = w[c * KH * KW + k];
}

// Pointwise weights W (input `index`, [OC, C, 1, 1]) packed as [C, OC] when constant (once per buffer,
// cached); null when W is not constant (the GEMM then reads W [OC, C] transposed). Keep the entry while
// reading the packed weights.
std::shared_ptr<DnnlEntry> PackedPointwiseWeights(const KernelContext& ctx, int index, int64_t C, int64_t OC) {
  if (!ctx.is_constant(index)) return nullptr;
  const Tensor& w = ctx.in(index);
  const float* wp = static_cast<const float*>(w.raw());
  return CachedPackedWeights(w, absl::StrCat("pwpack:", reinterpret_cast<uintptr_t>(w.raw()), ":", C, ":", OC), C * OC,
                             [&](float* out) {
                               for (int64_t o = 0; o < OC; ++o)
                                 for (int64_t c = 0; c < C; ++c) out[c * OC + o] = wp[o * C + c];
                             });
}

// The panel loop for a pointwise convolution C -> OC: AVX-512, OC a multiple of 8, and not one the
// few-input-channel loop takes (its [C, OC] weights stay in L1).
bool UsePanelPointwise(int64_t C, int64_t OC) {
  return PickIsa().panel_pointwise != nullptr && C > 0 && OC > 0 && OC % 8 == 0 && !UseSmallKPointwise(C, OC);
}

// B (input `index`, constant, [N, K] when b_is_nk else [K, N], from float `offset` on) in panels
// (kPanelWidth above), cached once per buffer and offset; pointwise weights W [OC, C, 1, 1] are B [N = OC,
// K = C]. Keep the entry while reading them.
// Writes B [K, N] (element (k, n) = value(k, n)) as panels of kPanelWidth columns, each k-major: panel q at
// out + q * K * kPanelWidth holds B[k][n0 + j] at k * width + j. The layout PanelPointwiseBody and
// IndirectBody read.
template <typename F>
void FillPanels(float* out, int64_t K, int64_t N, F value, bool row_major_source = false) {
  if (row_major_source) {
    // value(k, n) walks a row-major [K, N] matrix (the usual MatMul weights): row by row it is read once in
    // order, each row scattered into the panels' 64-byte lines (panel by panel it was read N / kPanelWidth
    // times with a stride of N floats: a decoder's first run packed its 14 MB of weights 3 ms slower).
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t n0 = 0; n0 < N; n0 += kPanelWidth) {
        const int64_t nr = std::min(kPanelWidth, N - n0);
        float* row = out + n0 * K + k * nr;
        for (int64_t j = 0; j < nr; ++j) row[j] = value(k, n0 + j);
      }
    }
    return;
  }
  for (int64_t n0 = 0; n0 < N; n0 += kPanelWidth) {
    const int64_t nr = std::min(kPanelWidth, N - n0);
    float* panel = out + n0 * K;
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < nr; ++j) panel[k * nr + j] = value(k, n0 + j);
  }
}

std::shared_ptr<DnnlEntry> PanelProductWeights(const KernelContext& ctx, int index, bool b_is_nk, int64_t K, int64_t N,
                                               int64_t offset = 0) {
  const Tensor& w = ctx.in(index);
  const float* wp = static_cast<const float*>(w.raw()) + offset;
  const int64_t panels = (N + kPanelWidth - 1) / kPanelWidth;
  return CachedPackedWeights(
      w, absl::StrCat("panel:", reinterpret_cast<uintptr_t>(w.raw()), ":", b_is_nk, ":", K, ":", N, ":", offset),
      panels * K * kPanelWidth, [&](float* out) {
        if (b_is_nk) {
          FillPanels(out, K, N, [&](int64_t k, int64_t n) { return wp[n * K + k]; });
        } else {
          FillPanels(out, K, N, [&](int64_t k, int64_t n) { return wp[k * N + n]; }, /*row_major_source=*/true);
        }
      });
}

// Runs run(m0, m1, q0, q1) over rows [0, M) x panels [0, np) of a panel product of `macs` multiply-adds on up
// to `threads` threads: the rows split over them, or the panels where the rows are few (a 7 x 7 map's 49
// pixels against 1280 output channels).
template <typename F>
void SplitRowsOrPanels(int threads, double macs, int64_t M, int64_t np, F run) {
  const int nt = ThreadsForWork(std::max(threads, 1), macs);
  if (nt == 1) {
    run(0, M, 0, np);
  } else if (M >= 64 * nt || np < nt) {
    ParallelFor(nt, nt, [&](int64_t t) { run(M * t / nt, M * (t + 1) / nt, 0, np); });
  } else {
    ParallelFor(nt, nt, [&](int64_t t) { run(0, M, np * t / nt, np * (t + 1) / nt); });
  }
}

// Y [M, OC] = X [M, C] x panels + bias, post-ops, on up to `threads` threads (SplitRowsOrPanels).
// A matrix-vector product (at most 4 rows) streams its weights once: memory-bound, each multiply-add costs
// about 8 of a GEMM's (a 1 x 256 x 1024 product: 18 us, against 2-3 us of compute), so its work counts 8x in
// the fork rule (parallel.h, which is calibrated in compute-bound multiply-adds).
constexpr double kMatrixVectorWorkFactor = 8;

void RunPanelPointwise(int threads, const float* x, const float* panels, const float* bias,
                       const std::vector<PostOp>* ops, float* y, int64_t M, int64_t C, int64_t OC) {
  const auto fn = PickIsa().panel_pointwise;
  const double work = static_cast<double>(M) * C * OC * (M <= 4 ? kMatrixVectorWorkFactor : 1);
  SplitRowsOrPanels(threads, work, M, (OC + kPanelWidth - 1) / kPanelWidth,
                    [&](int64_t m0, int64_t m1, int64_t q0, int64_t q1) {
                      fn(x, C, panels, bias, ops, y, m0, m1, q0, q1, C, OC);
                    });
}


// Depthwise weights W (input `index`, [C, 1, KH, KW]) packed as [KH, KW, C]: cached once per buffer when
// constant (held by *entry), else packed into *local.
const float* PackedDepthwiseWeights(const KernelContext& ctx, int index, int64_t C, int64_t KH, int64_t KW,
                                    std::shared_ptr<DnnlEntry>* entry, std::vector<float>* local) {
  const Tensor& w = ctx.in(index);
  auto pack = [&](float* out) { PackDepthwise(static_cast<const float*>(w.raw()), C, KH, KW, out); };
  if (ctx.is_constant(index)) {
    *entry = CachedPackedWeights(
        w, absl::StrCat("dwpack:", reinterpret_cast<uintptr_t>(w.raw()), ":", C, ":", KH, ":", KW), C * KH * KW, pack);
    return static_cast<const float*>((*entry)->weights.get_data_handle());
  }
  local->resize(C * KH * KW);
  pack(local->data());
  return local->data();
}

}  // namespace

std::optional<PanelWeights> PackPanelWeights(const KernelContext& ctx, int index, int64_t offset, bool b_is_nk,
                                             int64_t K, int64_t N) {
  if (PickIsa().panel_pointwise == nullptr || K <= 0 || N <= 0 || N % 8 != 0 || offset < 0 || !ctx.is_constant(index) ||
      ctx.in(index).dtype() != DType::kF32 || ctx.in(index).numel() < offset + K * N) {
    return std::nullopt;
  }
  std::shared_ptr<DnnlEntry> entry = PanelProductWeights(ctx, index, b_is_nk, K, N, offset);
  PanelWeights w;
  w.panels = static_cast<const float*>(entry->weights.get_data_handle());
  w.hold = std::move(entry);
  w.K = K;
  w.N = N;
  return w;
}

void PanelMultiply(const PanelWeights& w, const float* x, int64_t M, const float* bias, float* y, int threads) {
  RunPanelPointwise(threads, x, w.panels, bias, nullptr, y, M, w.K, w.N);
}

void PanelMultiplyOne(const float* panel, int64_t n0, const float* x, int64_t M, int64_t K, int64_t N,
                      const float* bias, float* y) {
  const int64_t q = n0 / kPanelWidth;
  // The loop finds panel q at panels + q * K * kPanelWidth: offset the base so that it is `panel`.
  const float* base = panel - q * K * kPanelWidth;
  PickIsa().panel_pointwise(x, K, base, bias, nullptr, y, 0, M, q, q + 1, K, N);
}

bool CpuHasPanelLoop() { return PickIsa().panel_pointwise != nullptr; }

bool PanelProductFits(const KernelContext& ctx, int b_index, int64_t N) {
  return CpuHasPanelLoop() && N > 0 && N % 8 == 0 && ctx.is_constant(b_index) &&
         ctx.in(b_index).dtype() == DType::kF32;
}

bool TryPanelProduct(const KernelContext& ctx, int b_index, bool b_is_nk, const float* x, int64_t M, int64_t K,
                     int64_t N, float* y) {
  if (!PanelProductFits(ctx, b_index, N) || M <= 0 || K <= 0 || ctx.in(b_index).numel() != K * N) return false;
  const std::shared_ptr<DnnlEntry> panels = PanelProductWeights(ctx, b_index, b_is_nk, K, N);  // held while this runs
  // As Sgemm: 5 to kMinParallelGemmRows - 1 rows stay on the calling thread (parallel.h); a matrix-vector
  // product (<= 4 rows, memory-bound) splits its panels (MobileNetV2's 1 x 1280 x 1000 head).
  const int threads = M > 4 && M < kMinParallelGemmRows ? 1 : ctx.threads;
  RunPanelPointwise(threads, x, static_cast<const float*>(panels->weights.get_data_handle()), nullptr, nullptr, y,
                    M, K, N);
  return true;
}

void ApplyUnaryPostOps(const float* x, float* y, int64_t n, const std::vector<PostOp>& ops, int threads) {
  auto fn = PickIsa().unary;
  const int64_t chunk = 16384;
  int64_t chunks = (n + chunk - 1) / chunk;
  int nt = static_cast<int>(std::min<int64_t>(ThreadsForElements(threads, n), chunks));
  ParallelFor(nt, chunks, [&](int64_t c) { fn(x + c * chunk, y + c * chunk, std::min(chunk, n - c * chunk), &ops); });
}

namespace {
void MapF32(void (*fn)(const float*, float*, int64_t), const float* x, float* y, int64_t n, int threads) {
  const int64_t chunk = 16384;
  const int64_t chunks = (n + chunk - 1) / chunk;
  const int nt = static_cast<int>(std::min<int64_t>(ThreadsForElements(threads, n), chunks));
  ParallelFor(nt, chunks, [&](int64_t c) { fn(x + c * chunk, y + c * chunk, std::min(chunk, n - c * chunk)); });
}
}  // namespace

void ExpF32(const float* x, float* y, int64_t n, int threads) { MapF32(PickIsa().exp, x, y, n, threads); }

void ErfF32(const float* x, float* y, int64_t n, int threads) { MapF32(PickIsa().erf, x, y, n, threads); }

void SoftmaxRowF32(const float* x, float* y, int64_t n, float* max, double* sum) {
  PickIsa().softmax_row(x, y, n, max, sum);
}

void ApplyChannelEpilogue(float* y, int64_t rows, int64_t channels, const float* bias, const std::vector<PostOp>* ops) {
  PickIsa().epilogue(y, rows, channels, bias, ops);
}

NhwcConvPath NhwcConvPathFor(const Dims& x, const Dims& w, const Dims& y, const WindowGeometry& g, int64_t group) {
  size_t nsp = g.kernel.size();
  if (x.size() != nsp + 2 || y.size() != nsp + 2) return NhwcConvPath::kNone;
  int64_t C = x.back(), OC = y.back();
  int64_t ksz = 1;
  for (int64_t k : g.kernel) ksz *= k;
  int64_t wn = 1;
  for (int64_t d : w) wn *= d;
  // The weights must hold exactly what the geometry reads (a kernel_shape attribute that disagrees with W
  // goes to the general path, which reports it).
  if (C == 0 || group <= 0 || C % group != 0 || w.size() != nsp + 2 || w[0] != OC || wn != OC * (C / group) * ksz ||
      x[0] != y[0]) {
    return NhwcConvPath::kNone;
  }
  // Pointwise: every output pixel is one row of a GEMM.
  if (group == 1 && AllEqual(g.kernel, 1) && AllEqual(g.strides, 1) && AllEqual(g.pad_begin, 0) &&
      AllEqual(g.pad_end, 0)) {
    return NhwcConvPath::kPointwise;
  }
  if (group == C && OC == C && (nsp == 1 || nsp == 2)) return NhwcConvPath::kDepthwise;
  return NhwcConvPath::kNone;
}

absl::StatusOr<bool> TryNhwcConvWithoutJit(KernelContext& ctx, const WindowGeometry& g, int64_t group, Tensor& y,
                                           NhwcConvPath only) {
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  const float* bias = ctx.has(2) ? static_cast<const float*>(ctx.in(2).raw()) : nullptr;
  const NhwcConvPath path = NhwcConvPathFor(x.dims(), w.dims(), y.dims(), g, group);
  if (path == NhwcConvPath::kNone || (only != NhwcConvPath::kNone && path != only)) return false;
  int64_t C = x.dim(x.rank() - 1), OC = y.dim(y.rank() - 1);
  const float* xp = static_cast<const float*>(x.raw());
  float* yp = static_cast<float*>(y.raw());
  if (path == NhwcConvPath::kPointwise) {
    int64_t M = x.numel() / C;
    if (ctx.is_constant(1) && UsePanelPointwise(C, OC)) {
      const std::shared_ptr<DnnlEntry> panels = PanelProductWeights(ctx, 1, true, C, OC);  // held while this runs
      RunPanelPointwise(ctx.threads, xp, static_cast<const float*>(panels->weights.get_data_handle()), bias,
                        ctx.post_ops, yp, M, C, OC);
      if (ctx.want_impl) ctx.impl = "pointwise convolution, panel-packed register-tiled loop (shape-generic)";
      return true;
    }
    // holds the packed constant weights while this call runs
    const std::shared_ptr<DnnlEntry> entry = PackedPointwiseWeights(ctx, 1, C, OC);
    CJIT_RETURN_IF_ERROR(PointwiseGemm(ctx, xp,
                                       entry ? static_cast<const float*>(entry->weights.get_data_handle())
                                             : static_cast<const float*>(w.raw()),
                                       entry != nullptr, bias, yp, M, C, OC));
    if (ctx.want_impl) {
      ctx.impl = entry != nullptr && UseSmallKPointwise(C, OC)
                     ? "pointwise convolution, register-tiled loop (shape-generic)"
                     : absl::StrCat("pointwise convolution as ", SgemmImplementation(), " (shape-generic)");
    }
    return true;
  }
  // Depthwise (one filter per channel), 1-D or 2-D.
  if (path == NhwcConvPath::kDepthwise) {
    DwArgs a{};
    static_cast<Window2d&>(a) = ToWindow2d(g);
    a.C = C;
    int64_t n = x.dim(0);
    std::tie(a.H, a.W) = SpatialHW(x, true);
    std::tie(a.OH, a.OW) = SpatialHW(y, true);
    std::shared_ptr<DnnlEntry> entry;  // holds the packed constant weights while this call runs
    std::vector<float> local;
    a.w = PackedDepthwiseWeights(ctx, 1, C, a.KH, a.KW, &entry, &local);
    a.x = xp, a.bias = bias, a.y = yp, a.ops = ctx.post_ops;
    int64_t total = n * a.OH;
    const int nt = ThreadsForWork(static_cast<int>(std::min<int64_t>(ctx.threads, total)),
                                  static_cast<double>(total) * a.OW * C * a.KH * a.KW);
    auto fn = PickIsa().depthwise;
    ParallelFor(nt, nt, [&](int64_t t) { fn(a, total * t / nt, total * (t + 1) / nt); });
    if (ctx.want_impl) ctx.impl = "depthwise convolution, channel-vectorized loop (shape-generic)";
    return true;
  }
  return false;
}

bool IndirectConvFits(const Dims& x, const Dims& w, const Dims& y, const WindowGeometry& g, int64_t group) {
  if (PickIsa().indirect == nullptr || group != 1 || x.size() != 4 || y.size() != 4 || g.kernel.size() != 2) return false;
  const int64_t C = x.back(), OC = y.back();
  return C >= kIndirectMinChannels && OC % 8 == 0 && w.size() == 4 && w[0] == OC && w[1] == C &&
         w[2] == g.kernel[0] && w[3] == g.kernel[1] && x[0] == y[0];
}

bool UseIndirectConv(const Dims& x, const Dims& w, const Dims& y, const WindowGeometry& g, int64_t group) {
  return IndirectConvFits(x, w, y, g, group) && y.back() % 16 == 0 &&
         x.back() * g.kernel[0] * g.kernel[1] <= kIndirectMaxTapChannels;
}

absl::StatusOr<bool> TryIndirectConv(KernelContext& ctx, const WindowGeometry& g, int64_t group, Tensor& y) {
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  if (!IndirectConvFits(x.dims(), w.dims(), y.dims(), g, group)) return false;
  IndirectArgs a{};
  a.win = ToWindow2d(g);
  a.H = x.dim(1), a.W = x.dim(2), a.C = x.dim(3), a.OH = y.dim(1), a.OW = y.dim(2), a.OC = y.dim(3);
  const int64_t T = a.win.KH * a.win.KW, K = T * a.C, OC = a.OC;
  const int64_t np = (OC + kPanelWidth - 1) / kPanelWidth;
  const float* wp = static_cast<const float*>(w.raw());
  // Panels of B [K = T x C, OC] with k = t * C + c, from W [OC, C, KH, KW].
  auto pack = [&](float* out) {
    const int64_t C = a.C;
    FillPanels(out, K, OC, [&](int64_t k, int64_t n) { return wp[(n * C + k % C) * T + k / C]; });
  };
  std::shared_ptr<DnnlEntry> entry;  // holds the packed constant weights while this call runs
  std::vector<float> local;
  if (ctx.is_constant(1)) {
    entry = CachedPackedWeights(w, absl::StrCat("indirect:", reinterpret_cast<uintptr_t>(w.raw()), ":", OC, ":", K),
                                np * K * kPanelWidth, pack);
    a.panels = static_cast<const float*>(entry->weights.get_data_handle());
  } else {
    local.resize(static_cast<size_t>(np * K * kPanelWidth));
    pack(local.data());
    a.panels = local.data();
  }
  std::vector<float> zeros(static_cast<size_t>(a.C), 0.0f);
  a.zeros = zeros.data();
  a.x = static_cast<const float*>(x.raw());
  a.bias = ctx.has(2) ? static_cast<const float*>(ctx.in(2).raw()) : nullptr;
  a.ops = ctx.post_ops;
  a.y = static_cast<float*>(y.raw());
  const int64_t M = x.dim(0) * a.OH * a.OW;
  const auto fn = PickIsa().indirect;
  SplitRowsOrPanels(ctx.threads, static_cast<double>(M) * K * OC, M, np,
                    [&](int64_t m0, int64_t m1, int64_t q0, int64_t q1) { fn(a, m0, m1, q0, q1); });
  if (ctx.want_impl) ctx.impl = "indirect convolution, panel-packed register-tiled loop (shape-generic)";
  return true;
}

absl::Status RunPointwiseDepthwiseConv(KernelContext& ctx) {
  if (!ctx.has(0) || !ctx.has(1) || !ctx.has(3)) return ctx.Error("X, W1 and W2 are required");
  const Tensor& x = ctx.in(0);
  const Tensor& w1 = ctx.in(1);
  const Tensor& w2 = ctx.in(3);
  for (int i = 0; i < 5; ++i) {
    if (ctx.has(i) && ctx.in(i).dtype() != DType::kF32) return ctx.Error("every operand must be float32");
  }
  if (x.rank() != 4 || w1.rank() != 4 || w2.rank() != 4) return ctx.Error("X, W1 and W2 must be 4-D");
  const int64_t N = x.dim(0), H = x.dim(1), W = x.dim(2), C = x.dim(3), M = w1.dim(0);
  if (w1.dim(1) != C || w1.dim(2) != 1 || w1.dim(3) != 1 || w2.dim(0) != M || w2.dim(1) != 1 ||
      (ctx.has(2) && ctx.in(2).numel() != M) || (ctx.has(4) && ctx.in(4).numel() != M)) {
    return ctx.Error("operands do not form a pointwise [M, C, 1, 1] -> depthwise [M, 1, KH, KW] pair");
  }
  CJIT_ASSIGN_OR_RETURN(WindowGeometry g, ComputeWindowGeometry(*ctx.node, {H, W}, {w2.dim(2), w2.dim(3)}, false, false));
  Tensor& y = ctx.Alloc(0);
  if (y.numel() == 0) return absl::OkStatus();
  if (y.rank() != 4 || y.dim(0) != N || y.dim(1) != g.out[0] || y.dim(2) != g.out[1] || y.dim(3) != M) {
    return ctx.Error("output shape disagrees with the depthwise geometry");
  }
  // The ops between the two convolutions (mid_ops / mid_params, compiler/passes/layout.h).
  std::vector<PostOp> mid;
  const auto names_it = ctx.node->attrs.find("mid_ops");
  const std::vector<std::string> names =
      names_it == ctx.node->attrs.end() ? std::vector<std::string>{} : names_it->second.strings;
  const std::vector<float> params = ctx.node->GetFloats("mid_params");
  if (params.size() != 2 * names.size()) return ctx.Error("mid_params must hold two values per mid_ops entry");
  for (size_t i = 0; i < names.size(); ++i) {
    PostOp op{PostOp::Kind::kRelu, params[2 * i], params[2 * i + 1], nullptr};
    if (names[i] == "Clip") op.kind = PostOp::Kind::kClip;
    else if (names[i] == "HardSwish") op.kind = PostOp::Kind::kHardSwish;
    else if (names[i] == "Linear") op.kind = PostOp::Kind::kLinear;
    else if (names[i] != "Relu") return ctx.Error(absl::StrCat("unknown mid_ops entry '", names[i], "'"));
    mid.push_back(op);
  }
  // Weights packed as the unfused paths pack them (and cached under the same keys): W1 in panels where the
  // panel loop takes it, else as [C, M] where constant (else read transposed); W2 as [KH, KW, M].
  DwArgs a{};
  static_cast<Window2d&>(a) = ToWindow2d(g);
  const std::shared_ptr<DnnlEntry> panel_entry =
      ctx.is_constant(1) && UsePanelPointwise(C, M) ? PanelProductWeights(ctx, 1, true, C, M) : nullptr;
  const float* panels = panel_entry ? static_cast<const float*>(panel_entry->weights.get_data_handle()) : nullptr;
  const std::shared_ptr<DnnlEntry> pw_entry = panels ? nullptr : PackedPointwiseWeights(ctx, 1, C, M);
  const float* w1p = pw_entry ? static_cast<const float*>(pw_entry->weights.get_data_handle())
                              : static_cast<const float*>(w1.raw());
  std::shared_ptr<DnnlEntry> dw_entry;
  std::vector<float> dw_local;
  a.w = PackedDepthwiseWeights(ctx, 3, M, a.KH, a.KW, &dw_entry, &dw_local);
  const float* b1 = ctx.has(2) ? static_cast<const float*>(ctx.in(2).raw()) : nullptr;
  a.bias = ctx.has(4) ? static_cast<const float*>(ctx.in(4).raw()) : nullptr;
  a.ops = ctx.post_ops;
  a.H = H, a.W = W, a.C = M, a.OH = y.dim(1), a.OW = y.dim(2);
  // Bands: B output rows read `span(B)` intermediate rows; a thread's buffer holds about 384 KiB of them
  // (at least one output row's window), so the pointwise GEMM writes and the depthwise loop reads it from
  // the core's L2. Consecutive bands share rows (the window's overlap): those are moved, not recomputed.
  const int64_t row_floats = W * M;
  const int64_t window = (a.KH - 1) * a.dh + 1;
  auto span = [&](int64_t b) { return (b - 1) * a.sh + window; };
  int64_t band = std::max<int64_t>(1, ((int64_t{384} << 10) / (4 * std::max<int64_t>(row_floats, 1)) - window) / a.sh + 1);
  band = std::min(band, a.OH);
  const int64_t total = N * a.OH;
  // At least one band per thread: on the small maps of a network's last stages (7 x 7, 14 x 14) one band
  // held every row and ran on one thread (MobileNetV2's 160 -> 960 -> depthwise at 7 x 7: 129 us at 2
  // threads against 110 at 1). Bands overlap by the window's extra rows, recomputed per band.
  const int threads = ThreadsForWork(ctx.threads, static_cast<double>(N) * H * W * C * M +
                                                      static_cast<double>(total) * a.OW * M * a.KH * a.KW);
  if (threads > 1 && total >= threads) band = std::min(band, (total + threads - 1) / threads);
  const int64_t cap = std::min(span(band), H);  // rows a buffer holds
  int nt = static_cast<int>(std::min<int64_t>(threads, (total + band - 1) / band));
  if (nt < 1) nt = 1;
  // The buffers come from the tensor arena (reused, already-touched pages), one per thread.
  Tensor scratch(DType::kF32, {nt, std::max<int64_t>(cap, 1) * row_floats});
  const float* xp = static_cast<const float*>(x.raw());
  float* yp = static_cast<float*>(y.raw());
  const auto isa_dw = PickIsa().depthwise;
  const auto isa_epilogue = PickIsa().epilogue;
  const auto isa_small_k = PickIsa().small_k_pointwise;
  const bool small_k = pw_entry && UseSmallKPointwise(C, M);
  const auto isa_panel = PickIsa().panel_pointwise;
  const int64_t num_panels = (M + kPanelWidth - 1) / kPanelWidth;
  std::atomic<int> failed{0};
  auto work = [&](int t) {
    float* buf = static_cast<float*>(scratch.raw()) + t * cap * row_floats;
    const int64_t r_begin = total * t / nt, r_end = total * (t + 1) / nt;
    for (int64_t r = r_begin; r < r_end;) {
      const int64_t n = r / a.OH;
      const int64_t o_end = std::min(r_end, (n + 1) * a.OH) - n * a.OH;  // this image's rows in the chunk
      int64_t have_lo = 0, have_hi = 0;  // intermediate rows [have_lo, have_hi) are in buf
      for (int64_t ob = r - n * a.OH; ob < o_end; ob += band) {
        const int64_t oe = std::min(ob + band, o_end);
        const int64_t need_lo = std::clamp<int64_t>(ob * a.sh - a.ph, 0, H);
        const int64_t need_hi = std::clamp<int64_t>((oe - 1) * a.sh - a.ph + window, need_lo, H);
        if (have_lo <= need_lo && need_lo < have_hi) {
          std::memmove(buf, buf + (need_lo - have_lo) * row_floats, (have_hi - need_lo) * row_floats * sizeof(float));
          have_lo = need_lo;
        } else {
          have_lo = have_hi = need_lo;
        }
        if (need_hi > have_hi) {  // the intermediate's new rows: GEMM, then bias and the mid ops
          const int64_t rows = (need_hi - have_hi) * W;
          float* out = buf + (have_hi - have_lo) * row_floats;
          const float* xr = xp + (n * H + have_hi) * W * C;
          if (small_k) {
            isa_small_k(xr, w1p, b1, mid.empty() ? nullptr : &mid, out, rows, C, M, C);
          } else if (panels) {
            isa_panel(xr, C, panels, b1, mid.empty() ? nullptr : &mid, out, 0, rows, 0, num_panels, C, M);
          } else {
            if (!(pw_entry ? Sgemm(false, false, rows, M, C, 1.0f, xr, C, w1p, M, 0.0f, out, M)
                           : Sgemm(false, true, rows, M, C, 1.0f, xr, C, w1p, C, 0.0f, out, M))) {
              failed = 1;
              return;
            }
            isa_epilogue(out, rows, M, b1, mid.empty() ? nullptr : &mid);
          }
          have_hi = need_hi;
        }
        DwArgs b = a;
        b.x = buf;
        b.x_row0 = have_lo;
        b.y = yp + n * a.OH * a.OW * M;
        isa_dw(b, ob, oe);  // rows of image 0 of `b`: the buffer and y are this image's
      }
      r = n * a.OH + o_end;
    }
  };
  if (nt > 1) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; ++t) work(t);
    MarkParallelEnd();
  } else {
    work(0);
  }
  if (failed) return ctx.Error("BLIS sgemm: invalid arguments on the pointwise convolution");
  if (ctx.want_impl) {
    ctx.impl = absl::StrCat("pointwise ",
                            small_k  ? "register-tiled loop"
                            : panels ? "panel-packed register-tiled loop"
                                     : SgemmImplementation(),
                            " -> depthwise loop in bands of ", band, " output rows (shape-generic)");
  }
  return absl::OkStatus();
}

// Shortest run of output pixels of a row that reads its im2col rows in place (see below).
constexpr int64_t kIm2colInPlaceMinRun = 32;
// Multiply-adds from which a channels-last im2col product of few chunks is split over the threads.
constexpr double kIm2colSplitMinMacs = kMinParallelWork;

namespace {

// Depthwise convolution on NCHW planes: per output row, one pass per tap over the row's interior columns
// (those whose tap lies inside the input row), vectorized along W (stride SW at compile time for 1 and 2,
// 0: any); columns whose tap falls in the padding add nothing. The output row stays in L1 across taps.
struct DwPlaneArgs {
  const float* x;
  const float* w;     // [C, KH, KW]
  const float* bias;  // [C] or null
  float* y;
  int64_t C, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw;
};
template <int SW>
inline __attribute__((always_inline)) void DwPlaneBody(const DwPlaneArgs& a, int64_t p0, int64_t p1) {
  const int64_t sw = SW ? SW : a.sw;
  for (int64_t p = p0; p < p1; ++p) {  // plane = n * C + c
    const int64_t c = p % a.C;
    const float* xp = a.x + p * a.H * a.W;
    float* yp = a.y + p * a.OH * a.OW;
    const float* wc = a.w + c * a.KH * a.KW;
    const float b = a.bias ? a.bias[c] : 0.0f;
    for (int64_t oh = 0; oh < a.OH; ++oh) {
      float* __restrict yr = yp + oh * a.OW;
      for (int64_t ow = 0; ow < a.OW; ++ow) yr[ow] = b;
      for (int64_t kh = 0; kh < a.KH; ++kh) {
        const int64_t ih = oh * a.sh - a.ph + kh * a.dh;
        if (ih < 0 || ih >= a.H) continue;
        const float* __restrict xr = xp + ih * a.W;
        for (int64_t kw = 0; kw < a.KW; ++kw) {
          const float wv = wc[kh * a.KW + kw];
          const int64_t off = kw * a.dw - a.pw;  // iw = ow * sw + off
          // ow in [lo, hi): 0 <= ow * sw + off < W
          const int64_t lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
          const int64_t hi = std::min(a.OW, off >= a.W ? 0 : (a.W - 1 - off) / sw + 1);
          const float* __restrict xo = xr + off;
#pragma omp simd
          for (int64_t ow = lo; ow < hi; ++ow) yr[ow] += wv * xo[ow * sw];
        }
      }
    }
  }
}
#define CJIT_DW_PLANE(NAME, ATTR)                                                \
  ATTR void NAME(const DwPlaneArgs& a, int64_t p0, int64_t p1) {                 \
    if (a.sw == 1) return DwPlaneBody<1>(a, p0, p1);                             \
    if (a.sw == 2) return DwPlaneBody<2>(a, p0, p1);                             \
    DwPlaneBody<0>(a, p0, p1);                                                   \
  }
#if defined(__x86_64__)
CJIT_DW_PLANE(DwPlaneAvx512, __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,fma"))))
CJIT_DW_PLANE(DwPlaneAvx2, __attribute__((target("avx2,fma"))))
#endif
CJIT_DW_PLANE(DwPlaneBase, )
#undef CJIT_DW_PLANE

}  // namespace

absl::StatusOr<bool> TryNchwDepthwiseConv(KernelContext& ctx, const WindowGeometry& g, int64_t group, Tensor& y) {
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  if (x.dtype() != DType::kF32 || w.dtype() != DType::kF32 || y.dtype() != DType::kF32) return false;
  const size_t nsp = g.kernel.size();
  if ((nsp != 1 && nsp != 2) || x.rank() != static_cast<int>(nsp) + 2 || y.rank() != x.rank()) return false;
  const int64_t C = x.dim(1);
  if (group != C || y.dim(1) != C || w.rank() != x.rank() || w.dim(0) != C || w.dim(1) != 1 || x.dim(0) != y.dim(0)) {
    return false;
  }
  if (ctx.has(2) && (ctx.in(2).dtype() != DType::kF32 || ctx.in(2).numel() != C)) return false;
  const Window2d win = ToWindow2d(g);
  DwPlaneArgs a{};
  a.x = x.data<float>(), a.w = w.data<float>(), a.bias = ctx.has(2) ? ctx.in(2).data<float>() : nullptr;
  a.y = y.data<float>();
  a.C = C;
  std::tie(a.H, a.W) = SpatialHW(x, false);
  std::tie(a.OH, a.OW) = SpatialHW(y, false);
  a.KH = win.KH, a.KW = win.KW, a.sh = win.sh, a.sw = win.sw, a.ph = win.ph, a.pw = win.pw, a.dh = win.dh, a.dw = win.dw;
  if (w.numel() != C * a.KH * a.KW) return false;
  const int64_t planes = x.dim(0) * C;
  const int nt = ThreadsForWork(static_cast<int>(std::min<int64_t>(ctx.threads, planes)),
                                static_cast<double>(y.numel()) * a.KH * a.KW);
#if defined(__x86_64__)
  auto fn = CpuHasAvx512() ? &DwPlaneAvx512 : CpuHasAvx2() ? &DwPlaneAvx2 : &DwPlaneBase;
#else
  auto fn = &DwPlaneBase;
#endif
  ParallelFor(nt, nt, [&](int64_t t) { fn(a, planes * t / nt, planes * (t + 1) / nt); });
  if (ctx.want_impl) ctx.impl = "depthwise convolution on NCHW planes, row-vectorized loop (shape-generic)";
  return true;
}

absl::StatusOr<bool> TryIm2colConv(KernelContext& ctx, const WindowGeometry& g, int64_t group, bool channels_last,
                                    Tensor& y, int64_t max_channels) {
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  size_t nsp = g.kernel.size();
  if (group != 1 || (nsp != 1 && nsp != 2) || x.rank() != static_cast<int>(nsp) + 2) return false;
  int64_t C = channels_last ? x.dim(x.rank() - 1) : x.dim(1);
  int64_t OC = channels_last ? y.dim(y.rank() - 1) : y.dim(1);
  // Plain locals, not structured bindings: clang cannot capture those in OpenMP regions.
  const Window2d win = ToWindow2d(g);
  const int64_t KH = win.KH, KW = win.KW, sh = win.sh, sw = win.sw, ph = win.ph, pw = win.pw, dh = win.dh, dw = win.dw;
  int64_t K = C * KH * KW;
  if (w.rank() != static_cast<int>(nsp) + 2 || w.dim(0) != OC || w.numel() != OC * K) return false;
  int64_t N = x.dim(0);
  int64_t H, W, OH, OW;
  std::tie(H, W) = SpatialHW(x, channels_last);
  std::tie(OH, OW) = SpatialHW(y, channels_last);
  int64_t P = OH * OW;
  if (P == 0 || K == 0) return false;
  const bool few_pixels = static_cast<double>(N) * P <= kIm2colFewPixels &&
                          static_cast<double>(N) * P * K * OC <= kIm2colFewPixelsMaxMacs;
  if (C > max_channels && !few_pixels) return false;
  // Channels-last: output pixels in chunks of ~256 KiB of im2col rows (threads take whole chunks; Sgemm
  // then runs single-threaded inside the parallel region). NCHW: one im2col matrix of at most
  // kIm2colMaxBytes.
  int64_t rows = std::min<int64_t>(P, std::clamp<int64_t>((int64_t{256} << 10) / (K * 4), 16, 1024));
  // Channels-last products of a few chunks but enough work split into one chunk per thread (at least 48
  // rows each: the register tiles are 6 rows): oww_embedding's 3-tap convolutions over 240 pixels were one
  // chunk, on one thread at any thread count.
  const bool split = channels_last && ctx.threads > 1 && (P + rows - 1) / rows < 2 * ctx.threads &&
                     static_cast<double>(N) * P * K * OC >= kIm2colSplitMinMacs && P >= 48 * ctx.threads;
  if (split) rows = (P + ctx.threads - 1) / ctx.threads;
  int64_t chunks = (P + rows - 1) / rows;
  int nt = ctx.threads > 1 && (split || chunks >= 2 * ctx.threads)
               ? ThreadsForWork(ctx.threads, static_cast<double>(N) * P * K * OC)
               : 1;
  if (!channels_last && static_cast<double>(P) * K * sizeof(float) > kIm2colMaxBytes) return false;
  if (channels_last && static_cast<double>(nt) * rows * K * sizeof(float) > kIm2colMaxBytes) return false;
  const float* xp = static_cast<const float*>(x.raw());
  const float* wp = static_cast<const float*>(w.raw());
  const float* bias = ctx.has(2) ? static_cast<const float*>(ctx.in(2).raw()) : nullptr;
  float* yp = static_cast<float*>(y.raw());
  std::shared_ptr<DnnlEntry> entry;  // channels-last: weights packed [KH, KW, C] x OC, held while this runs
  std::vector<float> local;
  const float* packed = nullptr;
  if (channels_last) {
    auto pack = [&](float* out) {
      for (int64_t o = 0; o < OC; ++o)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t k = 0; k < KH * KW; ++k) out[(k * C + c) * OC + o] = wp[(o * C + c) * KH * KW + k];
    };
    if (ctx.is_constant(1)) {
      entry = CachedPackedWeights(w, absl::StrCat("im2colpack:", reinterpret_cast<uintptr_t>(w.raw()), ":", OC, ":", K),
                                  K * OC, pack);
      packed = static_cast<const float*>(entry->weights.get_data_handle());
    } else {
      local.resize(static_cast<size_t>(K * OC));
      pack(local.data());
      packed = local.data();
    }
  }
  if (channels_last && C <= kIm2colMaxChannels && max_channels == kIm2colMaxChannels) {
    FcArgs a{};
    static_cast<Window2d&>(a) = win;
    a.x = xp, a.w = packed, a.bias = bias, a.y = yp, a.ops = ctx.post_ops;
    a.H = H, a.W = W, a.C = C, a.OC = OC, a.OH = OH, a.OW = OW;
    const int64_t total = N * OH;
    const int dt = ThreadsForWork(static_cast<int>(std::min<int64_t>(ctx.threads, total)),
                                  static_cast<double>(total) * OW * OC * K);
    auto fn = PickIsa().few_channel;
    ParallelFor(dt, dt, [&](int64_t t) { fn(a, total * t / dt, total * (t + 1) / dt); });
    if (ctx.want_impl) ctx.impl = "direct convolution, few input channels (shape-generic)";
    return true;
  }
  // Scratch as tensors: large ones come from the recycled-buffer pool (compiler/ir/tensor.cc), not a fresh
  // mmap (and page faults) on every run.
  Tensor cols_t(DType::kF32, {channels_last ? nt * rows * K : P * K});
  ctx.scratch_bytes = static_cast<int64_t>(cols_t.nbytes());
  float* cols = cols_t.data<float>();
  // NCHW im2col of one image: element (p, k), p = oh * OW + ow and k = (c * KH + kh) * KW + kw, at
  // cols[p * p_stride + k * k_stride] (zero where the window is outside the image).
  auto im2col_nchw = [&](const float* xn, int64_t p_stride, int64_t k_stride) {
    if (k_stride == 1) {
      // Rows of K contiguous floats (the few-output-pixels layout): pixel-major, so that each row is
      // written sequentially (kernel-major order wrote one float per cache line, K floats apart: a
      // spectrogram's 512-tap, stride-160 framing convolution spent 0.5 ms of its 0.75 here).
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          float* row = cols + (oh * OW + ow) * p_stride;
          const int64_t iw0 = ow * sw - pw;
          const bool inside_w = iw0 >= 0 && iw0 + (KW - 1) * dw < W;
          for (int64_t c = 0; c < C; ++c)
            for (int64_t kh = 0; kh < KH; ++kh) {
              float* dst = row + (c * KH + kh) * KW;
              const int64_t ih = oh * sh - ph + kh * dh;
              if (static_cast<uint64_t>(ih) >= static_cast<uint64_t>(H)) {
                std::fill(dst, dst + KW, 0.0f);
                continue;
              }
              const float* src = xn + (c * H + ih) * W;
              if (inside_w && dw == 1) {
                std::copy(src + iw0, src + iw0 + KW, dst);
                continue;
              }
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t iw = iw0 + kw * dw;
                dst[kw] = static_cast<uint64_t>(iw) < static_cast<uint64_t>(W) ? src[iw] : 0.0f;
              }
            }
        }
      return;
    }
    for (int64_t c = 0; c < C; ++c)
      for (int64_t kh = 0; kh < KH; ++kh)
        for (int64_t kw = 0; kw < KW; ++kw) {
          float* col = cols + ((c * KH + kh) * KW + kw) * k_stride;
          for (int64_t oh = 0; oh < OH; ++oh) {
            int64_t ih = oh * sh - ph + kh * dh;
            bool row_inside = static_cast<uint64_t>(ih) < static_cast<uint64_t>(H);
            const float* src = row_inside ? xn + (c * H + ih) * W : xn;
            for (int64_t ow = 0; ow < OW; ++ow) {
              int64_t iw = ow * sw - pw + kw * dw;
              col[(oh * OW + ow) * p_stride] =
                  row_inside && static_cast<uint64_t>(iw) < static_cast<uint64_t>(W) ? src[iw] : 0.0f;
            }
          }
        }
  };
  for (int64_t n = 0; n < N; ++n) {
    if (channels_last) {  // cols [rows, (kh, kw, c)] per chunk of output pixels, then Y rows = cols x Wp
      const float* xn = xp + n * H * W * C;
      float* yn = yp + n * P * OC;
      int failed = 0;
      // The im2col row of output pixel p: (kh, kw, c), zero where the window is outside the image.
      auto gather_row = [&](int64_t p, float* row) {
        const int64_t oh = p / OW, ow = p % OW;
        for (int64_t kh = 0; kh < KH; ++kh) {
          const int64_t ih = oh * sh - ph + kh * dh;
          for (int64_t kw = 0; kw < KW; ++kw) {
            const int64_t iw = ow * sw - pw + kw * dw;
            float* dst = row + (kh * KW + kw) * C;
            if (static_cast<uint64_t>(ih) >= static_cast<uint64_t>(H) ||
                static_cast<uint64_t>(iw) >= static_cast<uint64_t>(W)) {
              std::fill(dst, dst + C, 0.0f);
            } else {
              std::copy(xn + (ih * W + iw) * C, xn + (ih * W + iw + 1) * C, dst);
            }
          }
        }
      };
      // A stride-1 convolution along W with one kernel row (the 1xK sequence convolutions of a text
      // recognizer): an output pixel whose window lies inside the row reads its im2col row in place,
      // X[(ih, iw0..iw0+KW)] is KW * C contiguous floats, so runs of such pixels are one GEMM over
      // overlapping rows of X (lda = C; gemm.h) without copying; only border pixels are gathered.
      // Only where a row's in-place run is long: each run and each border pixel is its own GEMM, and BLIS
      // packs the weights on every call (oww_embedding's 1x3 convolutions over 8-pixel rows: 3 GEMMs per
      // row, 100-134 us against 30-60 us with every row gathered into one GEMM).
      const int64_t ow_lo = pw, ow_hi = W - KW + 1 + pw;  // pixels [ow_lo, ow_hi) of a row read in place
      // Products whose weights stay in L2 run the register-tiled loop (no per-call packing), the rest BLIS.
      const auto small_k_gemm = PickIsa().small_k_pointwise;
      const bool small_k = UseSmallKGemm(K, OC);
      const bool in_place = KH == 1 && sw == 1 && dw == 1 && ow_hi - ow_lo >= kIm2colInPlaceMinRun;
      // Output pixels [p0, p0 + m): segments read in place or gathered into `cols`, each one GEMM.
      auto chunk = [&](int64_t i, float* cols) {
        const int64_t p0 = i * rows, m = std::min(rows, P - p0);
        for (int64_t p = p0; p < p0 + m;) {
          const float* a = cols;
          int64_t lda = K, q = p0 + m;
          if (in_place) {
            const int64_t oh = p / OW, ow = p % OW, row_end = std::min(p0 + m, (oh + 1) * OW);
            const int64_t ih = oh * sh - ph;
            const bool row_inside = static_cast<uint64_t>(ih) < static_cast<uint64_t>(H);
            if (row_inside && ow >= ow_lo && ow < ow_hi) {
              q = std::min(row_end, oh * OW + ow_hi);
              a = xn + (ih * W + ow - pw) * C;
              lda = C;
            } else {  // border pixels up to the next in-place run (or the row's end)
              q = row_inside && ow < ow_lo ? std::min(row_end, oh * OW + ow_lo) : row_end;
            }
          }
          if (a == cols) {
            for (int64_t r = p; r < q; ++r) gather_row(r, cols + (r - p) * K);
          }
          if (small_k) {
            small_k_gemm(a, packed, nullptr, nullptr, yn + p * OC, q - p, K, OC, lda);
          } else if (!Sgemm(false, false, q - p, OC, K, 1.0f, a, lda, packed, OC, 0.0f, yn + p * OC, OC)) {
            failed = 1;
            return;
          }
          p = q;
        }
        ApplyChannelEpilogue(yn + p0 * OC, m, OC, bias, ctx.post_ops);
      };
      if (nt > 1) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t i = 0; i < chunks; ++i) chunk(i, cols + omp_get_thread_num() * rows * K);
        MarkParallelEnd();
      } else {
        for (int64_t i = 0; i < chunks; ++i) chunk(i, cols);
      }
      if (failed) return ctx.Error("BLIS sgemm: invalid arguments on a convolution");
    } else if (P < OC) {  // few output pixels (a short signal): cols [P, (c, kh, kw)]; Y = W x cols^T
      im2col_nchw(xp + n * C * H * W, K, 1);
      float* yn = yp + n * OC * P;
      if (!Sgemm(false, true, OC, P, K, 1.0f, wp, K, cols, K, 0.0f, yn, P)) {
        return ctx.Error("BLIS sgemm: invalid arguments on a convolution");
      }
      if (bias) {
        for (int64_t o = 0; o < OC; ++o) {
          const float b = bias[o];
          float* r = yn + o * P;
          for (int64_t i = 0; i < P; ++i) r[i] += b;
        }
      }
    } else {  // cols [(c, kh, kw), P]; Y [OC, P] = W [OC, K] x cols
      im2col_nchw(xp + n * C * H * W, 1, P);
      float* yn = yp + n * OC * P;
      if (!Sgemm(false, false, OC, P, K, 1.0f, wp, K, cols, P, 0.0f, yn, P)) {
        return ctx.Error("BLIS sgemm: invalid arguments on a convolution");
      }
      if (bias) {
        for (int64_t o = 0; o < OC; ++o) {
          float b = bias[o];
          float* r = yn + o * P;
          for (int64_t i = 0; i < P; ++i) r[i] += b;
        }
      }
    }
  }
  if (ctx.want_impl) {
    ctx.impl = absl::StrCat("im2col + ",
                            channels_last && UseSmallKGemm(K, OC) ? "register-tiled GEMM" : SgemmImplementation(),
                            " (few input channels or output pixels, shape-generic)");
  }
  return true;
}

absl::StatusOr<bool> TryGemmConvTranspose(KernelContext& ctx, const WindowGeometry& g, int64_t group, Tensor& y) {
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  size_t nsp = g.kernel.size();
  if ((nsp != 1 && nsp != 2) || x.rank() != static_cast<int>(nsp) + 2 || y.rank() != x.rank()) return false;
  int64_t N = x.dim(0), C = x.dim(1), OC = y.dim(1);
  if (group <= 0 || C % group != 0 || OC % group != 0) return false;
  int64_t Cg = C / group, OCg = OC / group;
  // Plain locals, not structured bindings: clang cannot capture those in OpenMP regions.
  const Window2d win = ToWindow2d(g);
  const int64_t KH = win.KH, KW = win.KW, sh = win.sh, sw = win.sw, ph = win.ph, pw = win.pw, dh = win.dh, dw = win.dw;
  int64_t K = KH * KW;
  if (w.rank() != x.rank() || w.dim(0) != C || w.numel() != C * OCg * K) return false;
  int64_t H, W, OH, OW;
  std::tie(H, W) = SpatialHW(x, false);
  std::tie(OH, OW) = SpatialHW(y, false);
  int64_t P = H * W, M = OCg * K;
  if (P == 0 || static_cast<double>(M) * P * sizeof(float) > kIm2colMaxBytes) return false;
  Tensor cols_t(DType::kF32, {M * P});  // from the recycled-buffer pool when large
  float* cols = cols_t.data<float>();
  const float* xp = static_cast<const float*>(x.raw());
  const float* wp = static_cast<const float*>(w.raw());
  const float* bias = ctx.has(2) ? static_cast<const float*>(ctx.in(2).raw()) : nullptr;
  float* yp = static_cast<float*>(y.raw());
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t gi = 0; gi < group; ++gi) {
      // cols [(oc, kh, kw), (h, w)] = W_g^T [(oc, kh, kw), c] x X_g [c, (h, w)]
      const float* xg = xp + (n * C + gi * Cg) * P;
      const float* wg = wp + gi * Cg * M;
      if (!Sgemm(true, false, M, P, Cg, 1.0f, wg, M, xg, P, 0.0f, cols, P)) {
        return ctx.Error("BLIS sgemm: invalid arguments on a transposed convolution");
      }
      // col2im: y[oc, ih * sh - ph + kh * dh, iw * sw - pw + kw * dw] += cols[(oc, kh, kw), (ih, iw)]; each
      // output channel's plane is written by one thread.
      const int nt = ThreadsForWork(static_cast<int>(std::min<int64_t>(ctx.threads, OCg)),
                                    static_cast<double>(OCg) * K * P);
      ParallelFor(nt, OCg, [&](int64_t oc) {
        float* yo = yp + (n * OC + gi * OCg + oc) * OH * OW;
        std::fill(yo, yo + OH * OW, bias ? bias[gi * OCg + oc] : 0.0f);
        for (int64_t kh = 0; kh < KH; ++kh)
          for (int64_t kw = 0; kw < KW; ++kw) {
            const float* cr = cols + ((oc * KH + kh) * KW + kw) * P;
            for (int64_t ih = 0; ih < H; ++ih) {
              int64_t oh = ih * sh - ph + kh * dh;
              if (static_cast<uint64_t>(oh) >= static_cast<uint64_t>(OH)) continue;
              float* yr = yo + oh * OW;
              const float* crow = cr + ih * W;
              int64_t ow = -pw + kw * dw;
              for (int64_t iw = 0; iw < W; ++iw, ow += sw) {
                if (static_cast<uint64_t>(ow) < static_cast<uint64_t>(OW)) yr[ow] += crow[iw];
              }
            }
          }
      });
    }
  }
  if (ctx.want_impl) ctx.impl = absl::StrCat("GEMM + col2im via ", SgemmImplementation(), " (shape-generic)");
  return true;
}

}  // namespace cjit
