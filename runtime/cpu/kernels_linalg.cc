// MatMul and Gemm. float32 small products (at most kSmallProductMacs multiply-adds in all) and Gemm's
// matrix-vector products run through Eigen: oneDNN generates its GEMM kernels on the first call of the
// process (~17 ms measured here), which would dominate the first run of a model whose products are all
// small. Gemm (B a weight matrix) and MatMul with B shared by every batch run one BLIS product
// (runtime/cpu/gemm.h); other MatMuls oneDNN's matmul primitive (batch broadcasting, strided operands for
// transposes). The autotuner (runtime/autotune.h) may pick another of these per op signature. Other
// dtypes use plain loops with float/double accumulation.
#include <cstdlib>
#include <list>
#include <mutex>
#include <new>
#include <unordered_map>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/float16.h"
#include "compiler/ir/numeric_cast.h"
#include "base/status_macros.h"
#include "runtime/cpu/broadcast.h"
#include "runtime/cpu/conv_gemm.h"
#include "runtime/cpu/dispatch.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/onednn_util.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/tensor_util.h"
#include "base/mutex.h"

namespace cjit {

dnnl::memory::dims ToDnnlDims(const std::vector<int64_t>& d) { return dnnl::memory::dims(d.begin(), d.end()); }

dnnl::memory::dims DenseStrides(const dnnl::memory::dims& d) {
  dnnl::memory::dims s(d.size(), 1);
  for (int i = static_cast<int>(d.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * d[i + 1];
  return s;
}

dnnl::memory::dims ChannelsLastStrides(const dnnl::memory::dims& d) {
  dnnl::memory::dims s(d.size());
  int64_t acc = d[1];
  s[1] = 1;
  for (size_t i = d.size() - 1; i >= 2; --i) {
    s[i] = acc;
    acc *= d[i];
  }
  s[0] = acc;
  return s;
}

dnnl::engine& CpuEngine() {
  static auto* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *e;
}

namespace {

struct DnnlCache {
  Mutex mu;
  std::list<std::string> lru;  // most recently used first
  struct Slot {
    std::shared_ptr<DnnlEntry> entry;
    std::list<std::string>::iterator pos;
  };
  std::unordered_map<std::string, Slot> map;

  // Requires mu. Drops entries whose constant weights are gone, then the least recently used over the bound.
  void Trim() {
    for (auto it = map.begin(); it != map.end();) {
      if (it->second.entry->holds_weights && it->second.entry->weights_source.expired()) {
        lru.erase(it->second.pos);
        it = map.erase(it);
      } else {
        ++it;
      }
    }
    while (map.size() > kMaxDnnlEntries) {
      map.erase(lru.back());
      lru.pop_back();
    }
  }
};

DnnlCache& Cache() {
  static auto* cache = new DnnlCache();
  return *cache;
}

}  // namespace

size_t DnnlCacheSize() {
  MutexLock lock(&Cache().mu);
  return Cache().map.size();
}

namespace {

// GetOrCreateDnnl without the thread count in the key (packed weights do not depend on it).
std::shared_ptr<DnnlEntry> GetOrCreateCached(const std::string& key,
                                             const std::function<std::shared_ptr<DnnlEntry>()>& make,
                                             const std::function<bool(const DnnlEntry&)>& valid) {
  DnnlCache& c = Cache();
  {
    MutexLock lock(&c.mu);
    auto it = c.map.find(key);
    if (it != c.map.end() && (!valid || valid(*it->second.entry))) {
      c.lru.splice(c.lru.begin(), c.lru, it->second.pos);
      return it->second.entry;
    }
  }
  std::shared_ptr<DnnlEntry> e = make();
  if (!e) return e;
  MutexLock lock(&c.mu);
  auto it = c.map.find(key);
  if (it != c.map.end()) {
    if (!valid || valid(*it->second.entry)) {
      c.lru.splice(c.lru.begin(), c.lru, it->second.pos);
      return it->second.entry;
    }
    it->second.entry = e;
    c.lru.splice(c.lru.begin(), c.lru, it->second.pos);
  } else {
    c.lru.push_front(key);
    c.map.emplace(key, DnnlCache::Slot{e, c.lru.begin()});
  }
  c.Trim();
  return e;
}

}  // namespace

std::shared_ptr<DnnlEntry> GetOrCreateDnnl(const std::string& key,
                                           const std::function<std::shared_ptr<DnnlEntry>()>& make,
                                           const std::function<bool(const DnnlEntry&)>& valid) {
  return GetOrCreateCached(absl::StrCat(key, "|nthr=", omp_get_max_threads()), make, valid);
}

std::shared_ptr<DnnlEntry> CachedPackedWeights(const Tensor& w, const std::string& key, int64_t count,
                                               const std::function<void(float*)>& pack) {
  return GetOrCreateCached(key, [&] {
    auto e = std::make_shared<DnnlEntry>();
    e->weights = dnnl::memory(dnnl::memory::desc({count}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a),
                              CpuEngine());
    pack(static_cast<float*>(e->weights.get_data_handle()));
    e->weights_source = w.buffer();
    e->holds_weights = true;
    e->impl = key.substr(0, key.find(':'));
    return e;
  }, [&](const DnnlEntry& e) { return !e.weights_source.expired() && e.weights_source.lock() == w.buffer(); });
}

dnnl::primitive_attr DnnlAttr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

dnnl::reorder MakeDnnlReorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to,
                              dnnl::memory::desc* scratch) {
  dnnl::reorder::primitive_desc pd(CpuEngine(), from, CpuEngine(), to, DnnlAttr());
  *scratch = pd.scratchpad_desc();
  return dnnl::reorder(pd);
}

void ExecuteDnnl(const dnnl::primitive& prim, dnnl::stream& s, std::unordered_map<int, dnnl::memory> args,
                 const dnnl::memory::desc& scratchpad_md) {
  size_t bytes = scratchpad_md.get_size();
  if (bytes > 0) {
    // One buffer per calling thread; a primitive's worker threads share it as oneDNN intends.
    struct Buffer {
      void* p = nullptr;
      size_t size = 0;
      ~Buffer() { std::free(p); }
    };
    thread_local Buffer buf;
    if (buf.size < bytes) {
      std::free(buf.p);
      size_t rounded = (bytes + 4095) / 4096 * 4096;
      buf.p = std::aligned_alloc(4096, rounded);
      if (buf.p == nullptr) {
        buf.size = 0;
        throw std::bad_alloc();
      }
      buf.size = rounded;
    }
    args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(scratchpad_md, CpuEngine(), buf.p);
  }
  prim.execute(s, args);
  s.wait();
  // oneDNN parallelizes on the same OpenMP runtime: its workers are awake now (runtime/cpu/parallel.h).
  if (omp_get_max_threads() > 1) MarkParallelEnd();
}

namespace {

using dnnl::memory;

// Batched matmul of a [B..., M, K] (strides given) and b [B..., K, N] into c [B..., M, N] (dense), in
// float32, or with bfloat16 operands and result (float32 accumulation; AVX-512 BF16 dot products).
absl::Status DnnlMatMul(const void* a, const memory::dims& ad, const memory::dims& as, const void* b,
                        const memory::dims& bd, const memory::dims& bs, void* c, const memory::dims& cd,
                        float alpha, std::string* impl, memory::data_type dt = memory::data_type::f32,
                        memory::data_type dst_dt = memory::data_type::undef) {
  if (dst_dt == memory::data_type::undef) dst_dt = dt;
  double macs = 1;  // batch x M x N x K: the product of C's dims and A's last
  for (int64_t d : cd) macs *= static_cast<double>(d);
  if (!ad.empty()) macs *= static_cast<double>(ad.back());
  // Small products stay on this thread; the primitive is created under the same setting it runs with
  // (GetOrCreateDnnl keys it by that setting).
  ScopedLibraryThreadsForWork library_threads(macs);
  std::string key =
      absl::StrCat("mm:", static_cast<int>(dt), ":", static_cast<int>(dst_dt), ":", absl::StrJoin(ad, ","), "/",
                   absl::StrJoin(as, ","), ":", absl::StrJoin(bd, ","), "/", absl::StrJoin(bs, ","), ":", alpha);
  auto entry = GetOrCreateDnnl(key, [&] {
    auto e = std::make_shared<DnnlEntry>();
    e->src_md = memory::desc(ad, dt, as);
    e->weights_md = memory::desc(bd, dt, bs);
    memory::dims cs(cd.size(), 1);
    for (int i = static_cast<int>(cd.size()) - 2; i >= 0; --i) cs[i] = cs[i + 1] * cd[i + 1];
    e->dst_md = memory::desc(cd, dst_dt, cs);
    dnnl::primitive_attr attr = DnnlAttr();
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    dnnl::matmul::desc d(e->src_md, e->weights_md, e->dst_md);
    dnnl::matmul::primitive_desc pd(d, attr, CpuEngine());
    e->prim = dnnl::matmul(pd);
    e->scratchpad_md = pd.scratchpad_desc();
    e->impl = absl::StrCat("oneDNN matmul ", pd.impl_info_str());
    return e;
  });
  dnnl::stream s(CpuEngine());
  memory ma(entry->src_md, CpuEngine(), const_cast<void*>(a));
  memory mb(entry->weights_md, CpuEngine(), const_cast<void*>(b));
  memory mc(entry->dst_md, CpuEngine(), c);
  ExecuteDnnl(entry->prim, s, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}}, entry->scratchpad_md);
  if (impl) *impl = entry->impl;
  return absl::OkStatus();
}

constexpr int64_t kSmallProductMacs = int64_t{1} << 17;
// Gemm with at most this many rows (a batch-1 classifier head: 1 x 3264 x 128) is a matrix-vector product:
// Eigen's GEMV reads the weights once, where oneDNN's matmul primitive took 2.6x as long (49.6 vs 18.9 us,
// the autotuner's measurement on oww_timer) and generates code per shape.
constexpr int64_t kMatrixVectorRows = 4;
// From this many weights (512 KiB) a matrix-vector product with constant B runs the panel loop
// (runtime/cpu/conv_gemm.h TryPanelProduct): streaming the weights dominates there (a decoder's 1 x 256 x 768
// projection: Eigen's GEMV 10 us, the panel loop 5). Below, they are in cache and the panel loop's few
// accumulator chains per panel (one row: 1-4) lose to Eigen's GEMV: oww_hello_deepa's 1 x 2400 x 32 took 7
// instead of 5 us.
constexpr int64_t kPanelGemvWeights = int64_t{1} << 17;

void EigenMatMul(const float* a, const float* b, float* c, int64_t M, int64_t K, int64_t N, int64_t as_m, int64_t as_k,
                 int64_t bs_k, int64_t bs_n, float alpha);

// float32 matmul precision below "highest" (--matmul_precision; PyTorch's set_float32_matmul_precision):
// "medium" rounds both operands to bfloat16 and multiplies them with float32 accumulation; "high" is
// bfloat16x3 (Henry, Tang, Heinecke, "Leveraging the bfloat16 Artificial Intelligence Datatype for
// Higher-Precision Computations", ARITH 2019): each operand split into a bfloat16 high part and a
// bfloat16 remainder, C = Ah*Bh + Ah*Bl + Al*Bh, as one bfloat16 GEMM over K' = 3K of [Ah|Ah|Al] and
// [Bh;Bl;Bh]. c (M x N, dense float32) = alpha * a (strides as_m, as_k) * b (strides bs_k, bs_n).
absl::Status ReducedPrecisionMatMul(bool high, const float* a, const float* b, float* c, int64_t M, int64_t K,
                                    int64_t N, int64_t as_m, int64_t as_k, int64_t bs_k, int64_t bs_n, float alpha,
                                    std::string* impl) {
  const int64_t parts = high ? 3 : 1, KK = parts * K;
  std::vector<uint16_t> a16(static_cast<size_t>(M * KK)), b16(static_cast<size_t>(KK * N));
  std::vector<float> row(static_cast<size_t>(std::max(K, N)));
  std::vector<uint16_t> hi(row.size()), lo(row.size());
  auto split = [&](int64_t n) {  // row[0, n) -> hi, lo (bfloat16 high part and remainder)
    if (high) {
      SplitFloatToBfloat16(row.data(), hi.data(), lo.data(), static_cast<size_t>(n));
    } else {
      ConvertFloatToBfloat16(row.data(), hi.data(), static_cast<size_t>(n));
    }
  };
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) row[k] = a[m * as_m + k * as_k];
    split(K);
    uint16_t* dst = a16.data() + m * KK;
    std::copy(hi.begin(), hi.begin() + K, dst);
    if (high) {
      std::copy(hi.begin(), hi.begin() + K, dst + K);
      std::copy(lo.begin(), lo.begin() + K, dst + 2 * K);
    }
  }
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t n = 0; n < N; ++n) row[n] = b[k * bs_k + n * bs_n];
    split(N);
    std::copy(hi.begin(), hi.begin() + N, b16.data() + k * N);
    if (high) {
      std::copy(lo.begin(), lo.begin() + N, b16.data() + (K + k) * N);
      std::copy(hi.begin(), hi.begin() + N, b16.data() + (2 * K + k) * N);
    }
  }
  if (CpuHasBfloat16Math()) {
    CJIT_RETURN_IF_ERROR(DnnlMatMul(a16.data(), {M, KK}, {KK, 1}, b16.data(), {KK, N}, {N, 1}, c, {M, N}, alpha, impl,
                                    memory::data_type::bf16, memory::data_type::f32));
  } else {
    // No bfloat16 arithmetic on this CPU (oneDNN offers no bf16 matmul): the same products in float32 on
    // the bfloat16 values widened (exact), each product of two bfloat16 values exact in float32, float32
    // accumulation — the numerics of the bfloat16 kernels up to summation order.
    std::vector<float> a32(a16.size()), b32(b16.size());
    for (size_t i = 0; i < a16.size(); ++i) a32[i] = Bfloat16BitsToFloat(a16[i]);
    for (size_t i = 0; i < b16.size(); ++i) b32[i] = Bfloat16BitsToFloat(b16[i]);
    EigenMatMul(a32.data(), b32.data(), c, M, KK, N, KK, 1, N, 1, alpha);
    if (impl) *impl = "Eigen on bfloat16 values widened to float32 (no bfloat16 arithmetic on this CPU)";
  }
  if (impl)
    *impl =
        absl::StrCat(high ? "bfloat16x3 (--matmul_precision=high): " : "bfloat16 (--matmul_precision=medium): ", *impl);
  return absl::OkStatus();
}

// The node's float32 precision: the cjit_precision attribute the session sets from --matmul_precision.
// "high" runs bfloat16x3 only where it is faster than float32: with AMX-BF16 (16x float32's throughput);
// with AVX-512 BF16 (2x) its three products cost 1.5 float32 GEMMs (measured 2x slower here), so "high"
// runs as "highest" — more accurate and faster. "bf16x3" forces it (tests).
enum class Float32Precision { kHighest, kMedium, kBf16x3 };

Float32Precision PrecisionOf(const KernelContext& ctx) {
  const auto it = ctx.node->attrs.find("cjit_precision");
  if (it == ctx.node->attrs.end()) return Float32Precision::kHighest;
  const std::string& p = it->second.s;
  if (p == "high") return CpuHasAmxBfloat16() ? Float32Precision::kBf16x3 : Float32Precision::kHighest;
  if (p == "bf16x3") return Float32Precision::kBf16x3;
  // "medium" lets the product use bfloat16 operands (a hint, as oneDNN's fpmath mode and PyTorch's
  // set_float32_matmul_precision): on a CPU without bfloat16 arithmetic it runs as "highest" — faster
  // there and more accurate.
  return p == "medium" && CpuHasBfloat16Math() ? Float32Precision::kMedium : Float32Precision::kHighest;
}

// c (M x N, dense) = alpha * a (M x K, strides as_m, as_k) * b (K x N, strides bs_k, bs_n), float32 in
// Eigen (float accumulation, as oneDNN's). Operands whose elements are contiguous along one dimension are
// mapped with that dimension as the inner one (row- or column-major with an outer stride): Eigen's
// vectorized GEMV / GEMM kernels need a unit inner stride, and with a runtime inner stride it runs its
// scalar fallback (a 1 x 2400 x 32 Gemm with transB, the wake-word model's first layer: 18 -> 3 us).
template <typename MapA, typename MapB>
void EigenProduct(const MapA& ma, const MapB& mb, float* c, int64_t M, int64_t N, float alpha) {
  Eigen::Map<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> mc(c, M, N);
  mc.noalias() = ma * mb;
  if (alpha != 1.0f) mc *= alpha;
}

template <typename MapA>
void EigenProductB(const MapA& ma, const float* b, float* c, int64_t M, int64_t K, int64_t N, int64_t bs_k,
                   int64_t bs_n, float alpha) {
  using Outer = Eigen::OuterStride<Eigen::Dynamic>;
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ColMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
  if (bs_n == 1 && bs_k >= N) {
    EigenProduct(ma, Eigen::Map<const RowMajor, 0, Outer>(b, K, N, Outer(bs_k)), c, M, N, alpha);
  } else if (bs_k == 1 && bs_n >= K) {
    EigenProduct(ma, Eigen::Map<const ColMajor, 0, Outer>(b, K, N, Outer(bs_n)), c, M, N, alpha);
  } else {
    using Strides = Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>;
    EigenProduct(ma, Eigen::Map<const RowMajor, 0, Strides>(b, K, N, Strides(bs_k, bs_n)), c, M, N, alpha);
  }
}

void EigenMatMul(const float* a, const float* b, float* c, int64_t M, int64_t K, int64_t N, int64_t as_m, int64_t as_k,
                 int64_t bs_k, int64_t bs_n, float alpha) {
  using Outer = Eigen::OuterStride<Eigen::Dynamic>;
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ColMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
  if (as_k == 1 && as_m >= K) {
    EigenProductB(Eigen::Map<const RowMajor, 0, Outer>(a, M, K, Outer(as_m)), b, c, M, K, N, bs_k, bs_n, alpha);
  } else if (as_m == 1 && as_k >= M) {
    EigenProductB(Eigen::Map<const ColMajor, 0, Outer>(a, M, K, Outer(as_k)), b, c, M, K, N, bs_k, bs_n, alpha);
  } else {
    using Strides = Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>;
    EigenProductB(Eigen::Map<const RowMajor, 0, Strides>(a, M, K, Strides(as_m, as_k)), b, c, M, K, N, bs_k, bs_n,
                  alpha);
  }
}

template <typename T>
void LoopMatMul(const T* a, const T* b, T* c, int64_t M, int64_t K, int64_t N, int64_t as_m, int64_t as_k,
                int64_t bs_k, int64_t bs_n) {
  using A = std::conditional_t<std::is_same_v<T, double>, double,
                               std::conditional_t<std::is_integral_v<T>, int64_t, float>>;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      A acc = 0;
      // Integers wrap on overflow (numpy's int64 matmul), never C++'s undefined signed overflow.
      for (int64_t k = 0; k < K; ++k) {
        acc = WrappingAdd(acc,
                          WrappingMul(static_cast<A>(a[m * as_m + k * as_k]), static_cast<A>(b[k * bs_k + n * bs_n])));
      }
      c[m * N + n] = static_cast<T>(acc);
    }
}

// float32 product algorithms (autotuning candidates, KernelContext::algorithm): "onednn_matmul" (oneDNN's
// matmul primitive, code generated per shape), "sgemm" (dnnl_sgemm per batch, kernels generated once per
// process), "eigen" (Eigen's blocked GEMM), "blis" (BLIS sgemm per batch, runtime/cpu/gemm.h), "panel" (a
// constant B packed once into panels and the pointwise convolutions' register-tiled loop, conv_gemm.h
// TryPanelProduct: what ONNX Runtime's prepacked MLAS GEMM does for weights). Default (no algorithm): the
// panel loop for a constant B shared by every batch where it fits (N a multiple of 8, AVX-512), else Eigen
// for small products, one BLIS sgemm when B is shared by every batch, else the oneDNN matmul primitive.
// The panel loop against BLIS (which packs B on every call), one thread, this project's Zen 5 VM:
// [M x 256] x [256 x 768] 30 -> 14 us (M = 7), 138 -> 101 (64), 1.71 -> 1.63 ms (1024); [M x 768] x
// [768 x 3072] 0.51 -> 0.17 ms (7), 2.4 -> 1.26 (64), 22.5 -> 19.7 (1024); [M x 512] x [512 x 64] 7 -> 3 us
// (7), 0.38 -> 0.27 ms (1024); a BERT stream of 12 sequence lengths: its MatMuls 38.8 -> 31.1 ms.
enum class ProductAlgorithm { kDefault, kOneDnnMatMul, kSgemm, kEigen, kBlis, kPanel };

// y [rows, N] = a [rows, K] (dense) x B (input 1 of ctx: [N, K] when b_is_nk, else [K, N]) for rows <=
// kMatrixVectorRows: the panel loop for a constant B of at least kPanelGemvWeights weights, else Eigen's
// GEMV (which reads the weights once; BLIS would pack all of B on every call).
void MatrixVectorProduct(KernelContext& ctx, const float* a, int64_t rows, int64_t K, int64_t N, bool b_is_nk,
                         float* y) {
  if ((K * N >= kPanelGemvWeights || (K * N >= kPanelGemvWeights / 2 && N >= 128)) &&
      TryPanelProduct(ctx, 1, b_is_nk, a, rows, K, N, y)) {
    if (ctx.want_impl) ctx.impl = "panel-packed register-tiled loop (matrix-vector, shape-generic)";
    return;
  }
  EigenMatMul(a, ctx.in(1).data<float>(), y, rows, K, N, K, 1, b_is_nk ? 1 : N, b_is_nk ? K : 1, 1.0f);
  if (ctx.want_impl) ctx.impl = "Eigen (matrix-vector)";
}

absl::StatusOr<ProductAlgorithm> ParseProductAlgorithm(const KernelContext& ctx) {
  if (ctx.algorithm == nullptr || ctx.algorithm->empty()) return ProductAlgorithm::kDefault;
  if (*ctx.algorithm == "onednn_matmul") return ProductAlgorithm::kOneDnnMatMul;
  if (*ctx.algorithm == "sgemm") return ProductAlgorithm::kSgemm;
  if (*ctx.algorithm == "eigen") return ProductAlgorithm::kEigen;
  if (*ctx.algorithm == "blis") return ProductAlgorithm::kBlis;
  if (*ctx.algorithm == "panel") return ProductAlgorithm::kPanel;
  return ctx.Error(absl::StrCat("unknown MatMul/Gemm algorithm '", *ctx.algorithm, "'"));
}

// batch * M when B is shared by every batch (weights: [K, N] or [1.., K, N]) and A is dense, so the product
// is one [batch * M, K] x [K, N] matrix product; else 0.
int64_t SharedWeightRows(const MatMulGeometry& g) {
  int64_t a_batch = 1, b_batch = 1;
  for (size_t i = 0; i + 2 < g.ad.size(); ++i) a_batch *= g.ad[i];
  for (size_t i = 0; i + 2 < g.bd.size(); ++i) b_batch *= g.bd[i];
  return b_batch == 1 && a_batch == g.batch ? g.batch * g.M : 0;
}

// The candidates for a float32 product at precision "highest" (others are not tuned).
std::vector<AlgorithmCandidate> ProductAlgorithms(const KernelContext& ctx, bool gemm) {
  if (!ctx.has(0) || !ctx.has(1) || ctx.in(0).dtype() != DType::kF32 || ctx.in(1).dtype() != DType::kF32 ||
      PrecisionOf(ctx) != Float32Precision::kHighest) {
    return {};
  }
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  if (gemm) {
    if (a.rank() != 2 || b.rank() != 2 || a.numel() == 0 || b.numel() == 0) return {};
    std::vector<AlgorithmCandidate> out = {{"onednn_matmul"}, {"sgemm"}, {"eigen"}, {"blis"}};
    const bool tb = ctx.node->GetInt("transB", 0) != 0;
    if (ctx.node->GetInt("transA", 0) == 0 && ctx.node->GetFloat("alpha", 1.0f) == 1.0f &&
        PanelProductFits(ctx, 1, tb ? b.dim(0) : b.dim(1))) {
      out.push_back({"panel"});
    }
    return out;
  }
  auto geo = PlanMatMul(a.dims(), b.dims());
  if (!geo.ok() || geo->K == 0 || geo->M == 0 || geo->N == 0 || geo->batch == 0) return {};
  std::vector<AlgorithmCandidate> out;
  if (geo->cd.size() <= 12) out.push_back({"onednn_matmul"});
  out.push_back({"sgemm"});
  out.push_back({"eigen"});
  out.push_back({"blis"});
  if (SharedWeightRows(*geo) > 0 && PanelProductFits(ctx, 1, geo->N)) out.push_back({"panel"});
  return out;
}

absl::Status MatMul(KernelContext& ctx) {
  CJIT_ASSIGN_OR_RETURN(const ProductAlgorithm algo, ParseProductAlgorithm(ctx));
  Tensor a = ctx.in(0), b = ctx.in(1);
  if (a.dtype() != b.dtype()) return ctx.Error("inputs have different dtypes");
  Tensor& y = ctx.Alloc(0);
  if (y.numel() == 0) return absl::OkStatus();
  auto geo = PlanMatMul(a.dims(), b.dims());
  if (!geo.ok()) return ctx.Error(geo.status().message());
  const MatMulGeometry& g = *geo;
  if (g.K == 0) {
    std::memset(y.raw(), 0, y.nbytes());
    return absl::OkStatus();
  }
  const Float32Precision precision = PrecisionOf(ctx);
  if (algo != ProductAlgorithm::kDefault) {
    if (a.dtype() != DType::kF32 || precision != Float32Precision::kHighest) {
      return ctx.Error(absl::StrCat("algorithm '", *ctx.algorithm, "' is for float32 at precision highest"));
    }
    if (algo == ProductAlgorithm::kPanel) {
      const int64_t rows = SharedWeightRows(g);
      if (rows == 0 || !TryPanelProduct(ctx, 1, false, a.data<float>(), rows, g.K, g.N, y.data<float>())) {
        return ctx.Error("panel: B is not a constant shared by every batch with N a multiple of 8 (or no AVX-512)");
      }
      if (ctx.want_impl) ctx.impl = "panel-packed register-tiled loop (autotuned)";
      return absl::OkStatus();
    }
    if (algo == ProductAlgorithm::kOneDnnMatMul) {
      if (g.cd.size() > 12) return ctx.Error("onednn_matmul: more than 12 dims");
      return DnnlMatMul(a.raw(), g.ad, DenseStrides(g.ad), b.raw(), g.bd, DenseStrides(g.bd), y.raw(), g.cd, 1.0f,
                        ctx.want_impl ? &ctx.impl : nullptr);
    }
    for (int64_t bi = 0; bi < g.batch; ++bi) {
      int64_t aoff, boff;
      g.Offsets(bi, &aoff, &boff);
      float* yb = y.data<float>() + bi * g.M * g.N;
      if (algo == ProductAlgorithm::kEigen) {
        EigenMatMul(a.data<float>() + aoff, b.data<float>() + boff, yb, g.M, g.K, g.N, g.K, 1, g.N, 1, 1.0f);
      } else if (algo == ProductAlgorithm::kBlis) {
        if (!Sgemm(false, false, g.M, g.N, g.K, 1.0f, a.data<float>() + aoff, g.K, b.data<float>() + boff, g.N, 0.0f,
                   yb, g.N)) {
          return ctx.Error("BLIS sgemm: invalid arguments");
        }
      } else if (dnnl_sgemm('N', 'N', g.M, g.N, g.K, 1.0f, a.data<float>() + aoff, g.K, b.data<float>() + boff, g.N,
                            0.0f, yb, g.N) != dnnl_success) {
        return ctx.Error("oneDNN sgemm failed");
      }
    }
    if (ctx.want_impl) {
      ctx.impl = algo == ProductAlgorithm::kEigen  ? "Eigen (autotuned)"
                 : algo == ProductAlgorithm::kBlis ? absl::StrCat(SgemmImplementation(), " (autotuned)")
                                                   : "oneDNN sgemm (autotuned)";
    }
    return absl::OkStatus();
  }
  if (a.dtype() == DType::kF32 && precision != Float32Precision::kHighest) {
    const bool high = precision == Float32Precision::kBf16x3;
    for (int64_t bi = 0; bi < g.batch; ++bi) {
      int64_t aoff, boff;
      g.Offsets(bi, &aoff, &boff);
      CJIT_RETURN_IF_ERROR(ReducedPrecisionMatMul(high, a.data<float>() + aoff, b.data<float>() + boff,
                                                  y.data<float>() + bi * g.M * g.N, g.M, g.K, g.N, g.K, 1, g.N, 1,
                                                  1.0f, ctx.want_impl ? &ctx.impl : nullptr));
    }
    return absl::OkStatus();
  }
  const int64_t shared_rows = SharedWeightRows(g);  // 0: B is not one matrix for every batch
  if (a.dtype() == DType::kF32 && shared_rows > kMatrixVectorRows &&
      TryPanelProduct(ctx, 1, false, a.data<float>(), shared_rows, g.K, g.N, y.data<float>())) {
    if (ctx.want_impl) ctx.impl = "panel-packed register-tiled loop (shape-generic)";
    return absl::OkStatus();
  }
  if (a.dtype() == DType::kF32 && shared_rows > 0 && shared_rows <= kMatrixVectorRows) {
    // A decode step's projections (also below kSmallProductMacs: 1 x 256 x 256 streams 256 KiB of weights).
    MatrixVectorProduct(ctx, a.data<float>(), shared_rows, g.K, g.N, false, y.data<float>());
    return absl::OkStatus();
  }
  if (a.dtype() == DType::kF32 && g.batch * g.M * g.N * g.K <= kSmallProductMacs) {
    for (int64_t bi = 0; bi < g.batch; ++bi) {
      int64_t aoff, boff;
      g.Offsets(bi, &aoff, &boff);
      EigenMatMul(a.data<float>() + aoff, b.data<float>() + boff, y.data<float>() + bi * g.M * g.N, g.M, g.K, g.N,
                  g.K, 1, g.N, 1, 1.0f);
    }
    if (ctx.want_impl) ctx.impl = "Eigen (small product)";
    return absl::OkStatus();
  }
  if (a.dtype() == DType::kF32 && shared_rows > 0) {
    // B shared by every batch (weights: [K, N] or [1.., K, N]) and A dense: one GEMM of batch * M rows
    // through BLIS (runtime/cpu/gemm.h: no code generation at all). oneDNN's matmul primitive would
    // generate code for every new M (a new sequence length or image width): 0.1-0.15 ms per MatMul on a
    // shape's first run, as much as the product itself for these sizes.
    if (!Sgemm(false, false, shared_rows, g.N, g.K, 1.0f, a.data<float>(), g.K, b.data<float>(), g.N, 0.0f,
               y.data<float>(), g.N)) {
      return ctx.Error("BLIS sgemm: invalid arguments");
    }
    if (ctx.want_impl) ctx.impl = absl::StrCat(SgemmImplementation(), " (shape-generic)");
    return absl::OkStatus();
  }
  if ((a.dtype() == DType::kF32 || (a.dtype() == DType::kBF16 && CpuHasBfloat16Math())) && g.cd.size() <= 12) {
    return DnnlMatMul(a.raw(), g.ad, DenseStrides(g.ad), b.raw(), g.bd, DenseStrides(g.bd), y.raw(), g.cd, 1.0f,
                      ctx.want_impl ? &ctx.impl : nullptr,
                      a.dtype() == DType::kBF16 ? memory::data_type::bf16 : memory::data_type::f32);
  }
  if (ctx.want_impl) ctx.impl = "loops";
  // Loop path: iterate the broadcast batch.
  return DispatchNumeric(a.dtype(), [&](auto t) {
    using T = decltype(t);
    for (int64_t bi = 0; bi < g.batch; ++bi) {
      int64_t aoff, boff;
      g.Offsets(bi, &aoff, &boff);
      LoopMatMul<T>(a.data<T>() + aoff, b.data<T>() + boff, y.data<T>() + bi * g.M * g.N, g.M, g.K, g.N, g.K, 1,
                    g.N, 1);
    }
  });
}

absl::Status Gemm(KernelContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  if (a.dtype() != b.dtype()) return ctx.Error("A and B have different dtypes");
  bool ta = ctx.node->GetInt("transA", 0), tb = ctx.node->GetInt("transB", 0);
  float alpha = ctx.node->GetFloat("alpha", 1.0f), beta = ctx.node->GetFloat("beta", 1.0f);
  Tensor& y = ctx.Alloc(0);
  int64_t M = y.dim(0), N = y.dim(1), K = ta ? a.dim(0) : a.dim(1);
  int64_t as_m = ta ? 1 : K, as_k = ta ? M : 1, bs_k = tb ? 1 : N, bs_n = tb ? K : 1;
  const Float32Precision precision = PrecisionOf(ctx);
  CJIT_ASSIGN_OR_RETURN(const ProductAlgorithm algo, ParseProductAlgorithm(ctx));
  if (algo != ProductAlgorithm::kDefault &&
      (a.dtype() != DType::kF32 || precision != Float32Precision::kHighest || K <= 0 || M <= 0 || N <= 0)) {
    return ctx.Error(
        absl::StrCat("algorithm '", *ctx.algorithm, "' is for non-empty float32 products at precision highest"));
  }
  if (algo == ProductAlgorithm::kPanel) {
    if (ta || alpha != 1.0f || !TryPanelProduct(ctx, 1, tb, a.data<float>(), M, K, N, y.data<float>())) {
      return ctx.Error("panel: needs transA = 0, alpha = 1 and a constant B with N a multiple of 8 (and AVX-512)");
    }
    if (ctx.want_impl) ctx.impl = "panel-packed register-tiled loop (autotuned)";
  } else if (algo == ProductAlgorithm::kEigen) {
    EigenMatMul(a.data<float>(), b.data<float>(), y.data<float>(), M, K, N, as_m, as_k, bs_k, bs_n, alpha);
    if (ctx.want_impl) ctx.impl = "Eigen (autotuned)";
  } else if (algo == ProductAlgorithm::kSgemm) {
    if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, a.data<float>(), ta ? M : K, b.data<float>(),
                   tb ? K : N, 0.0f, y.data<float>(), N) != dnnl_success) {
      return ctx.Error("oneDNN sgemm failed");
    }
    if (ctx.want_impl) ctx.impl = "oneDNN sgemm (autotuned)";
  } else if (algo == ProductAlgorithm::kBlis) {
    if (!Sgemm(ta, tb, M, N, K, alpha, a.data<float>(), ta ? M : K, b.data<float>(), tb ? K : N, 0.0f, y.data<float>(),
               N)) {
      return ctx.Error("BLIS sgemm: invalid arguments");
    }
    if (ctx.want_impl) ctx.impl = absl::StrCat(SgemmImplementation(), " (autotuned)");
  } else if (algo == ProductAlgorithm::kOneDnnMatMul) {
    CJIT_RETURN_IF_ERROR(DnnlMatMul(a.raw(), {M, K}, {as_m, as_k}, b.raw(), {K, N}, {bs_k, bs_n}, y.raw(), {M, N},
                                    alpha, ctx.want_impl ? &ctx.impl : nullptr));
  } else if (a.dtype() == DType::kF32 && K > 0 && M > 0 && N > 0 && precision != Float32Precision::kHighest) {
    CJIT_RETURN_IF_ERROR(ReducedPrecisionMatMul(precision == Float32Precision::kBf16x3, a.data<float>(),
                                                b.data<float>(), y.data<float>(), M, K, N, as_m, as_k, bs_k, bs_n,
                                                alpha, ctx.want_impl ? &ctx.impl : nullptr));
  } else if (a.dtype() == DType::kF32 && K > 0 && M > 0 && N > 0 && M <= kMatrixVectorRows && !ta && alpha == 1.0f) {
    MatrixVectorProduct(ctx, a.data<float>(), M, K, N, tb, y.data<float>());
  } else if (a.dtype() == DType::kF32 && K > 0 && N > 0 && !ta && alpha == 1.0f &&
             TryPanelProduct(ctx, 1, tb, a.data<float>(), M, K, N, y.data<float>())) {
    if (ctx.want_impl) ctx.impl = "panel-packed register-tiled loop (shape-generic)";
  } else if (a.dtype() == DType::kF32 && K > 0 && M > 0 && N > 0 &&
             (M * N * K <= kSmallProductMacs || M <= kMatrixVectorRows)) {
    EigenMatMul(a.data<float>(), b.data<float>(), y.data<float>(), M, K, N, as_m, as_k, bs_k, bs_n, alpha);
    if (ctx.want_impl) ctx.impl = M <= kMatrixVectorRows ? "Eigen (matrix-vector)" : "Eigen (small product)";
  } else if (a.dtype() == DType::kF32 && K > 0 && M > 0 && N > 0) {
    // B is a weight matrix: one BLIS product (no code generated per shape, as MatMul with a shared B).
    if (!Sgemm(ta, tb, M, N, K, alpha, a.data<float>(), ta ? M : K, b.data<float>(), tb ? K : N, 0.0f,
               y.data<float>(), N)) {
      return ctx.Error("BLIS sgemm: invalid arguments");
    }
    if (ctx.want_impl) ctx.impl = SgemmImplementation();
  } else if ((a.dtype() == DType::kF32 || (a.dtype() == DType::kBF16 && CpuHasBfloat16Math())) && K > 0 && M > 0 &&
             N > 0) {
    CJIT_RETURN_IF_ERROR(DnnlMatMul(a.raw(), {M, K}, {as_m, as_k}, b.raw(), {K, N}, {bs_k, bs_n}, y.raw(), {M, N},
                                    alpha, ctx.want_impl ? &ctx.impl : nullptr,
                                    a.dtype() == DType::kBF16 ? memory::data_type::bf16 : memory::data_type::f32));
  } else {
    if (ctx.want_impl) ctx.impl = "loops";
    CJIT_RETURN_IF_ERROR(DispatchNumeric(a.dtype(), [&](auto t) {
      using T = decltype(t);
      LoopMatMul<T>(a.data<T>(), b.data<T>(), y.data<T>(), M, K, N, as_m, as_k, bs_k, bs_n);
      if (alpha != 1.0f) {
        for (int64_t i = 0; i < M * N; ++i)
          y.data<T>()[i] = static_cast<T>(static_cast<double>(y.data<T>()[i]) * alpha);
      }
    }));
  }
  if (ctx.has(2) && beta != 0.0f) {
    const Tensor& c = ctx.in(2);
    return DispatchNumeric(y.dtype(), [&](auto t) {
      using T = decltype(t);
      T* py = y.data<T>();
      const T* pc = c.data<T>();
      ForEachBroadcastRow<1>(y.dims(), {&c.dims()}, 1,
                             [&](std::array<int64_t, 1> off, int64_t o, int64_t n, std::array<int64_t, 1> s) {
                               for (int64_t i = 0; i < n; ++i) {
                                 py[o + i] =
                                     static_cast<T>(static_cast<typename Acc<T>::type>(py[o + i]) +
                                                    static_cast<typename Acc<T>::type>(beta) *
                                                        static_cast<typename Acc<T>::type>(pc[off[0] + i * s[0]]));
                               }
                             });
    });
  }
  return absl::OkStatus();
}

// com.clusterjit.FusedMatMul (float32): MatMul with A and/or B read transposed in their last two dims
// (transA / transB), so the Transpose before it (attention's K^T) does not run: Eigen maps the operand
// column-major for small products, BLIS takes the transposition for larger ones (runtime/cpu/gemm.h).
// Batch dims broadcast as MatMul's.
absl::Status FusedMatMul(KernelContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  if (a.dtype() != DType::kF32 || b.dtype() != DType::kF32) return ctx.Error("FusedMatMul takes float32 inputs");
  const bool ta = ctx.node->GetInt("transA", 0) != 0, tb = ctx.node->GetInt("transB", 0) != 0;
  Dims ad = a.dims(), bd = b.dims();
  for (auto [d, t] : {std::pair<Dims*, bool>{&ad, ta}, {&bd, tb}}) {
    if (!t) continue;
    if (d->size() < 2) return ctx.Error("a transposed operand needs rank >= 2");
    std::swap((*d)[d->size() - 1], (*d)[d->size() - 2]);
  }
  Tensor& y = ctx.Alloc(0);
  if (y.numel() == 0) return absl::OkStatus();
  auto geo = PlanMatMul(ad, bd);
  if (!geo.ok()) return ctx.Error(geo.status().message());
  const MatMulGeometry& g = *geo;
  if (g.K == 0) {
    std::memset(y.raw(), 0, y.nbytes());
    return absl::OkStatus();
  }
  // Element strides of A (M x K) and B (K x N) as stored.
  const int64_t as_m = ta ? 1 : g.K, as_k = ta ? g.M : 1, bs_k = tb ? 1 : g.N, bs_n = tb ? g.K : 1;
  const bool small = g.batch * g.M * g.N * g.K <= kSmallProductMacs;
  if (!small && g.cd.size() <= 12) {
    // oneDNN's matmul reads strided operands: the logical dims with the stored layout's strides (what the
    // MatMul kernel runs for these sizes after a Transpose, without the copy).
    // A transposed operand (rank >= 2, left-padded with 1s to the result's rank by PlanMatMul): its stored
    // dense strides, padded, the last two swapped. The other operand as MatMul passes it.
    auto transposed_strides = [](const Dims& stored, size_t rank) {
      memory::dims st = DenseStrides(stored);
      const int64_t total = std::max<int64_t>(1, NumElements(stored));
      while (st.size() < rank) st.insert(st.begin(), total);
      std::swap(st[st.size() - 1], st[st.size() - 2]);
      return st;
    };
    const memory::dims sa = ta ? transposed_strides(a.dims(), g.ad.size()) : DenseStrides(g.ad);
    const memory::dims sb = tb ? transposed_strides(b.dims(), g.bd.size()) : DenseStrides(g.bd);
    return DnnlMatMul(a.raw(), g.ad, sa, b.raw(), g.bd, sb, y.raw(), g.cd, 1.0f, ctx.want_impl ? &ctx.impl : nullptr);
  }
  for (int64_t bi = 0; bi < g.batch; ++bi) {
    int64_t aoff, boff;
    g.Offsets(bi, &aoff, &boff);
    float* yb = y.data<float>() + bi * g.M * g.N;
    if (small) {
      EigenMatMul(a.data<float>() + aoff, b.data<float>() + boff, yb, g.M, g.K, g.N, as_m, as_k, bs_k, bs_n, 1.0f);
    } else if (!Sgemm(ta, tb, g.M, g.N, g.K, 1.0f, a.data<float>() + aoff, ta ? g.M : g.K, b.data<float>() + boff,
                      tb ? g.K : g.N, 0.0f, yb, g.N)) {
      return ctx.Error("BLIS sgemm: invalid arguments");
    }
  }
  if (ctx.want_impl) {
    ctx.impl = absl::StrCat(small ? "Eigen (small product)" : SgemmImplementation(), ", operands read transposed");
  }
  return absl::OkStatus();
}

}  // namespace

namespace {
KernelFn SixteenBit(KernelFn f32_kernel) {
  return [f32_kernel](KernelContext& ctx) -> absl::Status {
    const DType t = ctx.in(0).dtype();
    if (t == DType::kF16 || (t == DType::kBF16 && !CpuHasBfloat16Math())) return RunInFloat32(f32_kernel, ctx);
    return f32_kernel(ctx);
  };
}
}  // namespace

void RegisterLinalgKernels() {
  RegisterKernel("MatMul", SixteenBit(MatMul));
  RegisterKernel("Gemm", SixteenBit(Gemm));
  RegisterKernel("FusedMatMul", FusedMatMul);
  RegisterAlgorithms("MatMul", [](const KernelContext& ctx) { return ProductAlgorithms(ctx, false); });
  RegisterAlgorithms("Gemm", [](const KernelContext& ctx) { return ProductAlgorithms(ctx, true); });
}

}  // namespace cjit
