// Pooling: MaxPool (with indices), AveragePool, LpPool, their global forms and the channels-last NhwcMaxPool /
// NhwcAveragePool of the layout pass; 2-D rows through row_pool.inc (baseline and AVX2), float32 / bfloat16
// through oneDNN where it is exact, else loops. Semantics: ONNX operator specification.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "compiler/ir/cpu_isa.h"
#include "compiler/ir/float16.h"
#include "runtime/cpu/dispatch.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/onednn_util.h"
#include "runtime/cpu/parallel.h"

namespace cjit {
namespace {

using dnnl::memory;

// How many of the taps start + k * step, k in [0, taps), are below `limit` (start >= the first padded
// position, step >= 1): the taps are increasing, so a prefix.
int64_t TapsBelow(int64_t start, int64_t step, int64_t taps, int64_t limit) {
  if (start >= limit) return 0;
  return std::min(taps, (limit - 1 - start) / step + 1);
}

// RowPool2d (row_pool.inc) for the baseline ISA and for AVX2, the latter where the CPU has it.
namespace isa_base {
#include "runtime/cpu/row_pool.inc"
}  // namespace isa_base
#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace isa_avx2 {
#include "runtime/cpu/row_pool.inc"
}  // namespace isa_avx2
#pragma GCC pop_options
#endif

bool RowPool2d(KernelContext& ctx, int kind, const WindowGeometry& g, Tensor& y, bool channels_last = false) {
#if defined(__x86_64__)
  if (CpuHasAvx2()) return isa_avx2::RowPool2d(ctx, kind, g, y, channels_last);
#endif
  return isa_base::RowPool2d(ctx, kind, g, y, channels_last);
}

// float32 and bfloat16 max/average pooling through oneDNN (pooling_v2: dilations; bfloat16 averages are
// accumulated in float32 and rounded once, as the loop does). Returns false when the case is not one it
// expresses exactly, or the CPU has no bfloat16 pooling (then the loop implementation runs). Under
// bfloat16 AMP, ppocr_mobile_cls's MaxPool took 0.51 ms in the loop.
absl::StatusOr<bool> DnnlPool(KernelContext& ctx, int kind, const WindowGeometry& g, Tensor& y) {
  const Tensor& x = ctx.in(0);
  size_t nsp = g.kernel.size();
  const bool bf16 = x.dtype() == DType::kBF16;
  if ((x.dtype() != DType::kF32 && !bf16) || kind == 2 || ctx.wants(1) || nsp < 1 || nsp > 3) return false;
  const memory::data_type dt = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  bool count_pad = ctx.node->GetInt("count_include_pad", 0) != 0;
  memory::dims st, ker, dil, pl, pr;
  for (size_t i = 0; i < nsp; ++i) {
    int64_t in = x.dim(static_cast<int>(2 + i));
    int64_t eff = (g.kernel[i] - 1) * g.dilations[i] + 1;
    // oneDNN needs (in + pl + pr - eff) / s + 1 == out: extend the right padding for ceil_mode.
    int64_t right = (g.out[i] - 1) * g.strides[i] + eff - in - g.pad_begin[i];
    if (right < 0) right = g.pad_end[i];
    if (kind == 1 && count_pad && right != g.pad_end[i]) return false;  // ceil-mode padding is not counted
    st.push_back(g.strides[i]);
    ker.push_back(g.kernel[i]);
    dil.push_back(g.dilations[i] - 1);
    pl.push_back(g.pad_begin[i]);
    pr.push_back(right);
  }
  memory::dims xd = ToDnnlDims(x.dims()), yd = ToDnnlDims(y.dims());
  dnnl::algorithm alg = kind == 0 ? dnnl::algorithm::pooling_max
                        : count_pad ? dnnl::algorithm::pooling_avg_include_padding
                                    : dnnl::algorithm::pooling_avg_exclude_padding;
  std::string key = absl::StrCat("pool:", bf16 ? "bf16:" : "", static_cast<int>(alg), ":", absl::StrJoin(xd, ","), ":",
                                 absl::StrJoin(yd, ","), ":", absl::StrJoin(st, ","), ":", absl::StrJoin(ker, ","), ":",
                                 absl::StrJoin(dil, ","), ":", absl::StrJoin(pl, ","), ":", absl::StrJoin(pr, ","));
  bool failed = false;
  auto entry = GetOrCreateDnnl(key, [&]() -> std::shared_ptr<DnnlEntry> {
    auto e = std::make_shared<DnnlEntry>();
    e->src_md = memory::desc(xd, dt, DenseStrides(xd));
    e->dst_md = memory::desc(yd, dt, DenseStrides(yd));
    try {
      dnnl::pooling_v2_forward::desc d(dnnl::prop_kind::forward_inference, alg, e->src_md, e->dst_md, st, ker, dil, pl,
                                       pr);
      dnnl::pooling_v2_forward::primitive_desc pd(d, DnnlAttr(), CpuEngine());
      e->prim = dnnl::pooling_v2_forward(pd);
      e->scratchpad_md = pd.scratchpad_desc();
      e->impl = absl::StrCat("oneDNN pooling ", pd.impl_info_str());
    } catch (const dnnl::error&) {
      failed = true;
      return nullptr;
    }
    return e;
  });
  if (failed || !entry) return false;
  dnnl::stream s(CpuEngine());
  memory src(entry->src_md, CpuEngine(), const_cast<void*>(x.raw()));
  memory dst(entry->dst_md, CpuEngine(), y.raw());
  ExecuteDnnl(entry->prim, s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}}, entry->scratchpad_md);
  if (ctx.want_impl) ctx.impl = entry->impl;
  return true;
}

// Max / average / Lp pooling over N-d windows, any float dtype.
absl::Status Pool(KernelContext& ctx, int kind) {  // 0 max, 1 avg, 2 lp
  const Tensor& x = ctx.in(0);
  std::vector<int64_t> in(x.dims().begin() + 2, x.dims().end());
  CJIT_ASSIGN_OR_RETURN(WindowGeometry g, ComputeWindowGeometry(*ctx.node, in, ctx.node->GetInts("kernel_shape"),
                                                                false, ctx.node->GetInt("ceil_mode", 0) != 0));
  Tensor& y = ctx.Alloc(0);
  if (RowPool2d(ctx, kind, g, y)) return absl::OkStatus();
  CJIT_ASSIGN_OR_RETURN(bool done, DnnlPool(ctx, kind, g, y));
  if (done) return absl::OkStatus();
  Tensor* idx = ctx.wants(1) ? &ctx.Alloc(1) : nullptr;
  bool count_pad = ctx.node->GetInt("count_include_pad", 0) != 0;
  double p = static_cast<double>(ctx.node->GetInt("p", 2));
  bool col_major_idx = ctx.node->GetInt("storage_order", 0) != 0;
  size_t nsp = in.size();
  int64_t NC = x.dim(0) * x.dim(1);
  int64_t isz = 1, osz = 1;
  for (size_t i = 0; i < nsp; ++i) { isz *= in[i]; osz *= g.out[i]; }
  return DispatchNumeric(x.dtype(), [&](auto t) {
    using T = decltype(t);
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    int nt = ThreadsForElements(ctx.threads, NC * osz);
    ParallelFor(nt, NC, [&](int64_t c) {
      const T* px = x.data<T>() + c * isz;
      std::vector<int64_t> o(nsp, 0), k(nsp);
      for (int64_t oi = 0; oi < osz; ++oi) {
        int64_t rem = oi;
        for (int d = static_cast<int>(nsp) - 1; d >= 0; --d) { o[d] = rem % g.out[d]; rem /= g.out[d]; }
        A acc = kind == 0 ? -std::numeric_limits<A>::infinity() : A(0);
        int64_t best = -1, count = 0, ksz = 1;
        for (int64_t kk : g.kernel) ksz *= kk;
        for (int64_t ki = 0; ki < ksz; ++ki) {
          int64_t r2 = ki, off = 0;
          bool inside = true, in_padded = true;
          for (int d = static_cast<int>(nsp) - 1; d >= 0; --d) { k[d] = r2 % g.kernel[d]; r2 /= g.kernel[d]; }
          for (size_t d = 0; d < nsp; ++d) {
            int64_t pos = o[d] * g.strides[d] - g.pad_begin[d] + k[d] * g.dilations[d];
            if (pos < 0 || pos >= in[d]) inside = false;
            if (pos >= in[d] + g.pad_end[d]) in_padded = false;
            off = off * in[d] + pos;
          }
          if (!inside) {
            if (in_padded && count_pad) ++count;
            continue;
          }
          A v = static_cast<A>(px[off]);
          ++count;
          if (kind == 0) {
            if (v > acc || best < 0) { acc = v; best = off; }
          } else if (kind == 1) {
            acc += v;
          } else {
            acc += static_cast<A>(std::pow(std::abs(static_cast<double>(v)), p));
          }
        }
        if (kind == 1) acc = count ? acc / static_cast<A>(count) : A(0);
        if (kind == 2) acc = static_cast<A>(std::pow(static_cast<double>(acc), 1.0 / p));
        y.data<T>()[c * osz + oi] = static_cast<T>(acc);
        if (idx) {
          int64_t flat = best;
          if (col_major_idx && nsp == 2) flat = (best % in[1]) * in[0] + best / in[1];
          idx->data<int64_t>()[c * osz + oi] = c * isz + flat;
        }
      }
    });
  });
}

// com.clusterjit.NhwcMaxPool / NhwcAveragePool (compiler/passes/layout.h): MaxPool / AveragePool's
// attributes over X [N, (H,) W, C] -> Y [N, (OH,) OW, C], float32 (max: also uint8 / int8), 1-D or 2-D, no
// Indices output.
absl::Status NhwcPool(KernelContext& ctx, int kind) {
  const Tensor& x = ctx.in(0);
  const bool bytes = kind == 0 && (x.dtype() == DType::kU8 || x.dtype() == DType::kI8);
  if ((x.dtype() != DType::kF32 && !bytes) || (x.rank() != 3 && x.rank() != 4)) {
    return ctx.Error("channels-last pooling takes float32 (max: also uint8 / int8) X [N, (H,) W, C] only");
  }
  std::vector<int64_t> in(x.dims().begin() + 1, x.dims().end() - 1);
  CJIT_ASSIGN_OR_RETURN(WindowGeometry g, ComputeWindowGeometry(*ctx.node, in, ctx.node->GetInts("kernel_shape"),
                                                                false, ctx.node->GetInt("ceil_mode", 0) != 0));
  Tensor& y = ctx.Alloc(0);
  if (!RowPool2d(ctx, kind, g, y, /*channels_last=*/true)) return ctx.Error("channels-last pooling: unsupported case");
  return absl::OkStatus();
}

absl::Status GlobalPool(KernelContext& ctx, int kind) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.Alloc(0);
  int64_t NC = x.dim(0) * x.dim(1), sp = x.numel() / std::max<int64_t>(NC, 1);
  if (x.dtype() == DType::kF32 && kind < 2 && sp > 0) {
    // Eigen's vectorized row reductions.
    Eigen::Map<const Eigen::Array<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> m(x.data<float>(), NC, sp);
    Eigen::Map<Eigen::ArrayXf> out(y.data<float>(), NC);
    if (kind == 0) out = m.rowwise().maxCoeff();
    else out = m.rowwise().sum() / static_cast<float>(sp);
    return absl::OkStatus();
  }
  double p = static_cast<double>(ctx.node->GetInt("p", 2));
  return DispatchFloat(x.dtype(), [&](auto t) {
    using T = decltype(t);
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    for (int64_t c = 0; c < NC; ++c) {
      const T* px = x.data<T>() + c * sp;
      A acc = kind == 0 ? -std::numeric_limits<A>::infinity() : A(0);
      for (int64_t i = 0; i < sp; ++i) {
        A v = static_cast<A>(px[i]);
        if (kind == 0) acc = std::max(acc, v);
        else if (kind == 1) acc += v;
        else acc += static_cast<A>(std::pow(std::abs(static_cast<double>(v)), p));
      }
      if (kind == 1) acc /= static_cast<A>(sp);
      if (kind == 2) acc = static_cast<A>(std::pow(static_cast<double>(acc), 1.0 / p));
      y.data<T>()[c] = static_cast<T>(acc);
    }
  });
}

}  // namespace

void RegisterPoolKernels() {
  RegisterKernel("MaxPool", [](KernelContext& ctx) { return Pool(ctx, 0); });
  RegisterKernel("AveragePool", [](KernelContext& ctx) { return Pool(ctx, 1); });
  RegisterKernel("LpPool", [](KernelContext& ctx) { return Pool(ctx, 2); });
  RegisterKernel("NhwcMaxPool", [](KernelContext& ctx) { return NhwcPool(ctx, 0); });
  RegisterKernel("NhwcAveragePool", [](KernelContext& ctx) { return NhwcPool(ctx, 1); });
  RegisterKernel("GlobalMaxPool", [](KernelContext& ctx) { return GlobalPool(ctx, 0); });
  RegisterKernel("GlobalAveragePool", [](KernelContext& ctx) { return GlobalPool(ctx, 1); });
  RegisterKernel("GlobalLpPool", [](KernelContext& ctx) { return GlobalPool(ctx, 2); });
}

}  // namespace cjit
