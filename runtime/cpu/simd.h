// Vector helpers of the hand-written CPU loops (runtime/cpu/vec_math.cc, conv_kernels_spatial.cc,
// conv_kernels_pointwise.cc): GCC/Clang generic vectors of 4, 8 and 16 floats, loads and stores, exp and
// tanh per lane, the fused post-ops (compiler/codegen/fusion_plan.h PostOp, ONNX semantics: a NaN stays a
// NaN) applied to a vector, a register tile or a block of channels. Everything here is inline and
// templated on the vector type; the including file instantiates it inside functions compiled for one ISA
// (`__attribute__((target(...)))`). Internal to runtime/cpu.
#ifndef CJIT_RUNTIME_CPU_SIMD_H_
#define CJIT_RUNTIME_CPU_SIMD_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "compiler/codegen/fusion_plan.h"

namespace cjit::simd {

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

}  // namespace cjit::simd

#endif  // CJIT_RUNTIME_CPU_SIMD_H_
