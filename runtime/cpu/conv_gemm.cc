// Channels-last convolutions without a per-shape JIT (see conv_gemm.h).
#include "compiler/ir/cpu_isa.h"
#include "runtime/cpu/conv_gemm.h"
#include "runtime/cpu/conv_kernels.h"
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

const SpatialConvKernels& Spatial() { return SpatialConvKernelsFor(SelectedLoopIsa()); }
const PointwiseConvKernels& Pointwise() { return PointwiseConvKernelsFor(SelectedLoopIsa()); }

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
  return Pointwise().small_k_pointwise != nullptr && C <= kSmallKMaxChannels && C * OC <= kSmallKWeights;
}
// The same loop for a channels-last im2col product (K = channels x taps).
bool UseSmallKGemm(int64_t K, int64_t OC) {
  return Pointwise().small_k_pointwise != nullptr && K * OC <= kSmallKGemmWeights;
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
  const PointwiseConvKernels& isa = Pointwise();
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
    ApplyChannelEpilogue(y + m0 * OC, m, OC, bias, ops);
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
  return Pointwise().panel_pointwise != nullptr && C > 0 && OC > 0 && OC % 8 == 0 && !UseSmallKPointwise(C, OC);
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
  const auto fn = Pointwise().panel_pointwise;
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
  if (Pointwise().panel_pointwise == nullptr || K <= 0 || N <= 0 || N % 8 != 0 || offset < 0 ||
      !ctx.is_constant(index) || ctx.in(index).dtype() != DType::kF32 || ctx.in(index).numel() < offset + K * N) {
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
  Pointwise().panel_pointwise(x, K, base, bias, nullptr, y, 0, M, q, q + 1, K, N);
}

bool CpuHasPanelLoop() { return Pointwise().panel_pointwise != nullptr; }

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
    auto fn = Spatial().depthwise;
    ParallelFor(nt, nt, [&](int64_t t) { fn(a, total * t / nt, total * (t + 1) / nt); });
    if (ctx.want_impl) ctx.impl = "depthwise convolution, channel-vectorized loop (shape-generic)";
    return true;
  }
  return false;
}

bool IndirectConvFits(const Dims& x, const Dims& w, const Dims& y, const WindowGeometry& g, int64_t group) {
  if (Pointwise().indirect == nullptr || group != 1 || x.size() != 4 || y.size() != 4 || g.kernel.size() != 2)
    return false;
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
  const auto fn = Pointwise().indirect;
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
  CJIT_ASSIGN_OR_RETURN(WindowGeometry g,
                        ComputeWindowGeometry(*ctx.node, {H, W}, {w2.dim(2), w2.dim(3)}, false, false));
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
  int64_t band =
      std::max<int64_t>(1, ((int64_t{384} << 10) / (4 * std::max<int64_t>(row_floats, 1)) - window) / a.sh + 1);
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
  const auto isa_dw = Spatial().depthwise;
  const auto isa_small_k = Pointwise().small_k_pointwise;
  const bool small_k = pw_entry && UseSmallKPointwise(C, M);
  const auto isa_panel = Pointwise().panel_pointwise;
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
            ApplyChannelEpilogue(out, rows, M, b1, mid.empty() ? nullptr : &mid);
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
  a.KH = win.KH, a.KW = win.KW, a.sh = win.sh, a.sw = win.sw, a.ph = win.ph, a.pw = win.pw, a.dh = win.dh,
  a.dw = win.dw;
  if (w.numel() != C * a.KH * a.KW) return false;
  const int64_t planes = x.dim(0) * C;
  const int nt = ThreadsForWork(static_cast<int>(std::min<int64_t>(ctx.threads, planes)),
                                static_cast<double>(y.numel()) * a.KH * a.KW);
  const auto fn = Spatial().nchw_depthwise;
  ParallelFor(nt, nt, [&](int64_t t) { fn(a, planes * t / nt, planes * (t + 1) / nt); });
  if (ctx.want_impl) ctx.impl = "depthwise convolution on NCHW planes, row-vectorized loop (shape-generic)";
  return true;
}

namespace {

// The geometry of one 1-D or 2-D im2col convolution (1-D as H = 1), and how its output pixels are chunked.
struct Im2colPlan : Window2d {
  int64_t N, C, OC, K, H, W, OH, OW, P;
  int64_t rows;    // channels-last: output pixels per chunk
  int64_t chunks;  // channels-last: chunks per image
  int nt;          // channels-last: threads over the chunks
};

// Fills *q and returns true when the im2col path takes this convolution (see TryIm2colConv).
bool PlanIm2col(const KernelContext& ctx, const WindowGeometry& g, int64_t group, bool channels_last, const Tensor& y,
                int64_t max_channels, Im2colPlan* q) {
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  size_t nsp = g.kernel.size();
  if (group != 1 || (nsp != 1 && nsp != 2) || x.rank() != static_cast<int>(nsp) + 2) return false;
  static_cast<Window2d&>(*q) = ToWindow2d(g);
  q->C = channels_last ? x.dim(x.rank() - 1) : x.dim(1);
  q->OC = channels_last ? y.dim(y.rank() - 1) : y.dim(1);
  const int64_t C = q->C, OC = q->OC, K = q->K = C * q->KH * q->KW;
  if (w.rank() != static_cast<int>(nsp) + 2 || w.dim(0) != OC || w.numel() != OC * K) return false;
  const int64_t N = q->N = x.dim(0);
  std::tie(q->H, q->W) = SpatialHW(x, channels_last);
  std::tie(q->OH, q->OW) = SpatialHW(y, channels_last);
  const int64_t P = q->P = q->OH * q->OW;
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
  q->rows = rows;
  q->chunks = (P + rows - 1) / rows;
  q->nt = ctx.threads > 1 && (split || q->chunks >= 2 * ctx.threads)
              ? ThreadsForWork(ctx.threads, static_cast<double>(N) * P * K * OC)
              : 1;
  if (!channels_last && static_cast<double>(P) * K * sizeof(float) > kIm2colMaxBytes) return false;
  if (channels_last && static_cast<double>(q->nt) * rows * K * sizeof(float) > kIm2colMaxBytes) return false;
  return true;
}

// Channels-last weights packed [KH, KW, C] x OC: cached with a constant w (held by *entry while this runs),
// else into *local.
const float* PackIm2colWeights(const KernelContext& ctx, const Tensor& w, const Im2colPlan& q,
                               std::shared_ptr<DnnlEntry>* entry, std::vector<float>* local) {
  const float* wp = static_cast<const float*>(w.raw());
  const int64_t C = q.C, OC = q.OC, K = q.K, taps = q.KH * q.KW;
  auto pack = [&](float* out) {
    for (int64_t o = 0; o < OC; ++o)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t k = 0; k < taps; ++k) out[(k * C + c) * OC + o] = wp[(o * C + c) * taps + k];
  };
  if (ctx.is_constant(1)) {
    *entry = CachedPackedWeights(w, absl::StrCat("im2colpack:", reinterpret_cast<uintptr_t>(w.raw()), ":", OC, ":", K),
                                 K * OC, pack);
    return static_cast<const float*>((*entry)->weights.get_data_handle());
  }
  local->resize(static_cast<size_t>(K * OC));
  pack(local->data());
  return local->data();
}

// NCHW im2col of one image xn: element (p, k), p = oh * OW + ow and k = (c * KH + kh) * KW + kw, at
// cols[p * p_stride + k * k_stride] (zero where the window is outside the image).
void Im2colNchw(const Im2colPlan& q, const float* xn, float* cols, int64_t p_stride, int64_t k_stride) {
  const int64_t C = q.C, H = q.H, W = q.W, OH = q.OH, OW = q.OW, KH = q.KH, KW = q.KW;
  const int64_t sh = q.sh, sw = q.sw, ph = q.ph, pw = q.pw, dh = q.dh, dw = q.dw;
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
}

// The channels-last im2col row of output pixel p of image xn: (kh, kw, c), zero where the window is outside
// the image.
void Im2colRowChannelsLast(const Im2colPlan& q, const float* xn, int64_t p, float* row) {
  const int64_t C = q.C, H = q.H, W = q.W, OW = q.OW;
  const int64_t oh = p / OW, ow = p % OW;
  for (int64_t kh = 0; kh < q.KH; ++kh) {
    const int64_t ih = oh * q.sh - q.ph + kh * q.dh;
    for (int64_t kw = 0; kw < q.KW; ++kw) {
      const int64_t iw = ow * q.sw - q.pw + kw * q.dw;
      float* dst = row + (kh * q.KW + kw) * C;
      if (static_cast<uint64_t>(ih) >= static_cast<uint64_t>(H) ||
          static_cast<uint64_t>(iw) >= static_cast<uint64_t>(W)) {
        std::fill(dst, dst + C, 0.0f);
      } else {
        std::copy(xn + (ih * W + iw) * C, xn + (ih * W + iw + 1) * C, dst);
      }
    }
  }
}

// One channels-last image: cols [rows, (kh, kw, c)] per chunk of output pixels (each thread its own rows *
// K floats of cols), then Y rows = cols x packed, then the bias and post-ops. False when BLIS refuses.
bool Im2colChannelsLastImage(const KernelContext& ctx, const Im2colPlan& q, const float* xn, const float* packed,
                             const float* bias, float* cols, float* yn) {
  // Plain locals, not structured bindings: clang cannot capture those in OpenMP regions.
  const int64_t K = q.K, OC = q.OC, P = q.P, H = q.H, W = q.W, OW = q.OW, KW = q.KW;
  const int64_t rows = q.rows, chunks = q.chunks;
  const int nt = q.nt;
  int failed = 0;
  // A stride-1 convolution along W with one kernel row (the 1xK sequence convolutions of a text
  // recognizer): an output pixel whose window lies inside the row reads its im2col row in place,
  // X[(ih, iw0..iw0+KW)] is KW * C contiguous floats, so runs of such pixels are one GEMM over
  // overlapping rows of X (lda = C; gemm.h) without copying; only border pixels are gathered.
  // Only where a row's in-place run is long: each run and each border pixel is its own GEMM, and BLIS
  // packs the weights on every call (oww_embedding's 1x3 convolutions over 8-pixel rows: 3 GEMMs per
  // row, 100-134 us against 30-60 us with every row gathered into one GEMM).
  const int64_t ow_lo = q.pw, ow_hi = W - KW + 1 + q.pw;  // pixels [ow_lo, ow_hi) of a row read in place
  // Products whose weights stay in L2 run the register-tiled loop (no per-call packing), the rest BLIS.
  const auto small_k_gemm = Pointwise().small_k_pointwise;
  const bool small_k = UseSmallKGemm(K, OC);
  const bool in_place = q.KH == 1 && q.sw == 1 && q.dw == 1 && ow_hi - ow_lo >= kIm2colInPlaceMinRun;
  // Output pixels [p0, p0 + m): segments read in place or gathered into `cols`, each one GEMM.
  auto chunk = [&](int64_t i, float* cols) {
    const int64_t p0 = i * rows, m = std::min(rows, P - p0);
    for (int64_t p = p0; p < p0 + m;) {
      const float* a = cols;
      int64_t lda = K, e = p0 + m;
      if (in_place) {
        const int64_t oh = p / OW, ow = p % OW, row_end = std::min(p0 + m, (oh + 1) * OW);
        const int64_t ih = oh * q.sh - q.ph;
        const bool row_inside = static_cast<uint64_t>(ih) < static_cast<uint64_t>(H);
        if (row_inside && ow >= ow_lo && ow < ow_hi) {
          e = std::min(row_end, oh * OW + ow_hi);
          a = xn + (ih * W + ow - q.pw) * q.C;
          lda = q.C;
        } else {  // border pixels up to the next in-place run (or the row's end)
          e = row_inside && ow < ow_lo ? std::min(row_end, oh * OW + ow_lo) : row_end;
        }
      }
      if (a == cols) {
        for (int64_t r = p; r < e; ++r) Im2colRowChannelsLast(q, xn, r, cols + (r - p) * K);
      }
      if (small_k) {
        small_k_gemm(a, packed, nullptr, nullptr, yn + p * OC, e - p, K, OC, lda);
      } else if (!Sgemm(false, false, e - p, OC, K, 1.0f, a, lda, packed, OC, 0.0f, yn + p * OC, OC)) {
        failed = 1;
        return;
      }
      p = e;
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
  return !failed;
}

// One NCHW image: Y [OC, P] = W [OC, K] x cols, cols [(c, kh, kw), P]; with fewer output pixels than output
// channels (a short signal) cols [P, (c, kh, kw)] and Y = W x cols^T. Then the bias. False when BLIS refuses.
bool Im2colNchwImage(const Im2colPlan& q, const float* xn, const float* wp, const float* bias, float* cols, float* yn) {
  const int64_t K = q.K, OC = q.OC, P = q.P;
  if (P < OC) {
    Im2colNchw(q, xn, cols, K, 1);
    if (!Sgemm(false, true, OC, P, K, 1.0f, wp, K, cols, K, 0.0f, yn, P)) return false;
  } else {
    Im2colNchw(q, xn, cols, 1, P);
    if (!Sgemm(false, false, OC, P, K, 1.0f, wp, K, cols, P, 0.0f, yn, P)) return false;
  }
  if (bias) {
    for (int64_t o = 0; o < OC; ++o) {
      const float b = bias[o];
      float* r = yn + o * P;
      for (int64_t i = 0; i < P; ++i) r[i] += b;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<bool> TryIm2colConv(KernelContext& ctx, const WindowGeometry& g, int64_t group, bool channels_last,
                                   Tensor& y, int64_t max_channels) {
  Im2colPlan q;
  if (!PlanIm2col(ctx, g, group, channels_last, y, max_channels, &q)) return false;
  const Tensor& w = ctx.in(1);
  const float* xp = static_cast<const float*>(ctx.in(0).raw());
  const float* wp = static_cast<const float*>(w.raw());
  const float* bias = ctx.has(2) ? static_cast<const float*>(ctx.in(2).raw()) : nullptr;
  float* yp = static_cast<float*>(y.raw());
  std::shared_ptr<DnnlEntry> entry;
  std::vector<float> local;
  const float* packed = channels_last ? PackIm2colWeights(ctx, w, q, &entry, &local) : nullptr;
  if (channels_last && q.C <= kIm2colMaxChannels && max_channels == kIm2colMaxChannels) {
    FcArgs a{};
    static_cast<Window2d&>(a) = q;
    a.x = xp, a.w = packed, a.bias = bias, a.y = yp, a.ops = ctx.post_ops;
    a.H = q.H, a.W = q.W, a.C = q.C, a.OC = q.OC, a.OH = q.OH, a.OW = q.OW;
    const int64_t total = q.N * q.OH;
    const int dt = ThreadsForWork(static_cast<int>(std::min<int64_t>(ctx.threads, total)),
                                  static_cast<double>(total) * q.OW * q.OC * q.K);
    auto fn = Spatial().few_channel;
    ParallelFor(dt, dt, [&](int64_t t) { fn(a, total * t / dt, total * (t + 1) / dt); });
    if (ctx.want_impl) ctx.impl = "direct convolution, few input channels (shape-generic)";
    return true;
  }
  // Scratch as tensors: large ones come from the recycled-buffer pool (compiler/ir/tensor.cc), not a fresh
  // mmap (and page faults) on every run.
  Tensor cols_t(DType::kF32, {channels_last ? q.nt * q.rows * q.K : q.P * q.K});
  ctx.scratch_bytes = static_cast<int64_t>(cols_t.nbytes());
  float* cols = cols_t.data<float>();
  const int64_t image = q.H * q.W * q.C, out_image = q.P * q.OC;
  for (int64_t n = 0; n < q.N; ++n) {
    const bool ok = channels_last
                        ? Im2colChannelsLastImage(ctx, q, xp + n * image, packed, bias, cols, yp + n * out_image)
                        : Im2colNchwImage(q, xp + n * image, wp, bias, cols, yp + n * out_image);
    if (!ok) return ctx.Error("BLIS sgemm: invalid arguments on a convolution");
  }
  if (ctx.want_impl) {
    ctx.impl = absl::StrCat("im2col + ",
                            channels_last && UseSmallKGemm(q.K, q.OC) ? "register-tiled GEMM" : SgemmImplementation(),
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
