// Vectorized float32 maps (exp, erf, the fused unary post-ops), softmax rows and the channel epilogue, per
// ISA (vec_math.h), and the choice of ISA for every hand-written loop of runtime/cpu.
#include "runtime/cpu/vec_math.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "compiler/codegen/fusion_plan.h"
#include "compiler/ir/cpu_isa.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/simd.h"

namespace cjit {
namespace simd {
namespace {

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
inline __attribute__((always_inline)) void UnaryBody(const float* x, float* y, int64_t n,
                                                     const std::vector<PostOp>* ops) {
  constexpr int64_t kW = sizeof(VW) / sizeof(float);
  int64_t i = 0;
  for (; i + kW <= n; i += kW) StoreV(y + i, ApplyOpsVec(LoadV<VW>(x + i), ops, 0));
  for (; i < n; ++i) {
    float v = x[i];
    for (const PostOp& op : *ops) v = ScalarOp(op, v, 0);
    y[i] = v;
  }
}
__attribute__((target("avx512f,fma"))) void UnaryAvx512(const float* x, float* y, int64_t n,
                                                        const std::vector<PostOp>* ops) {
  UnaryBody<V16f>(x, y, n, ops);
}
__attribute__((target("avx2,fma"))) void UnaryAvx2(const float* x, float* y, int64_t n,
                                                   const std::vector<PostOp>* ops) {
  UnaryBody<V8f>(x, y, n, ops);
}
void UnaryBaseline(const float* x, float* y, int64_t n, const std::vector<PostOp>* ops) {
  UnaryBody<V4f>(x, y, n, ops);
}

// exp(x) per lane with the code generator's FastExp semantics (compiler/codegen/cpu_emit.cc): x clamped to [-103.97,
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

// erf(x) per lane with the code generator's FastErf semantics (compiler/codegen/cpu_emit.cc; Eigen's
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

}  // namespace
}  // namespace simd

namespace {

struct VecKernels {
  void (*epilogue)(float*, int64_t, int64_t, const float*, const std::vector<PostOp>*);
  void (*unary)(const float*, float*, int64_t, const std::vector<PostOp>*);
  void (*exp)(const float*, float*, int64_t);
  void (*erf)(const float*, float*, int64_t);
  void (*softmax_row)(const float*, float*, int64_t, float*, double*);
};

// Indexed by ConvLoopIsa.
const VecKernels kVecKernels[] = {
    {&simd::EpilogueBaseline, &simd::UnaryBaseline, &simd::ExpBaseline, &simd::ErfBaseline,
     &simd::SoftmaxRowBaseline},
    {&simd::EpilogueBaseline, &simd::UnaryBaseline, &simd::ExpBaseline, &simd::ErfBaseline,
     &simd::SoftmaxRowBaseline},
    {&simd::EpilogueAvx2, &simd::UnaryAvx2, &simd::ExpAvx2, &simd::ErfAvx2, &simd::SoftmaxRowAvx2},
    {&simd::EpilogueAvx512, &simd::UnaryAvx512, &simd::ExpAvx512, &simd::ErfAvx512, &simd::SoftmaxRowAvx512}};

std::atomic<int> forced_isa{0};  // SetConvLoopIsaForTest

bool CpuSupports(ConvLoopIsa isa) {
  __builtin_cpu_init();
  switch (isa) {
    case ConvLoopIsa::kAvx512: return CpuHasAvx512();
    case ConvLoopIsa::kAvx2: return CpuHasAvx2();
    default: return true;
  }
}

const VecKernels& Kernels() { return kVecKernels[static_cast<int>(SelectedLoopIsa())]; }

void MapF32(void (*fn)(const float*, float*, int64_t), const float* x, float* y, int64_t n, int threads) {
  const int64_t chunk = 16384;
  const int64_t chunks = (n + chunk - 1) / chunk;
  const int nt = static_cast<int>(std::min<int64_t>(ThreadsForElements(threads, n), chunks));
  ParallelFor(nt, chunks, [&](int64_t c) { fn(x + c * chunk, y + c * chunk, std::min(chunk, n - c * chunk)); });
}

}  // namespace

ConvLoopIsa SelectedLoopIsa() {
  const int forced = forced_isa.load(std::memory_order_relaxed);
  if (forced) return static_cast<ConvLoopIsa>(forced);
  static const ConvLoopIsa detected = CpuSupports(ConvLoopIsa::kAvx512) ? ConvLoopIsa::kAvx512
                                      : CpuSupports(ConvLoopIsa::kAvx2) ? ConvLoopIsa::kAvx2
                                                                        : ConvLoopIsa::kBaseline;
  return detected;
}

bool SetConvLoopIsaForTest(ConvLoopIsa isa) {
  if (!CpuSupports(isa)) return false;
  forced_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
  return true;
}

void ApplyUnaryPostOps(const float* x, float* y, int64_t n, const std::vector<PostOp>& ops, int threads) {
  auto fn = Kernels().unary;
  const int64_t chunk = 16384;
  int64_t chunks = (n + chunk - 1) / chunk;
  int nt = static_cast<int>(std::min<int64_t>(ThreadsForElements(threads, n), chunks));
  ParallelFor(nt, chunks, [&](int64_t c) { fn(x + c * chunk, y + c * chunk, std::min(chunk, n - c * chunk), &ops); });
}

void ExpF32(const float* x, float* y, int64_t n, int threads) { MapF32(Kernels().exp, x, y, n, threads); }

void ErfF32(const float* x, float* y, int64_t n, int threads) { MapF32(Kernels().erf, x, y, n, threads); }

void SoftmaxRowF32(const float* x, float* y, int64_t n, float* max, double* sum) {
  Kernels().softmax_row(x, y, n, max, sum);
}

void ApplyChannelEpilogue(float* y, int64_t rows, int64_t channels, const float* bias, const std::vector<PostOp>* ops) {
  Kernels().epilogue(y, rows, channels, bias, ops);
}

}  // namespace cjit
