// Convolution and ConvTranspose (float32 / bfloat16; oneDNN convolution and deconvolution primitives, or the
// conv_gemm.h paths, chosen by autotuning or a heuristic), their post-ops, and the autotuning candidates.
// Semantics: ONNX operator specification (Conv, ConvTranspose).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <new>
#include <unordered_map>

#include "compiler/ir/cpu_isa.h"
#include "absl/base/casts.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/float16.h"
#include "base/status_macros.h"
#include "runtime/cpu/box_copy.h"
#include "runtime/cpu/conv_gemm.h"
#include "runtime/cpu/dispatch.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/parallel.h"
#include "compiler/codegen/fusion_plan.h"
#include "runtime/cpu/onednn_util.h"
#include "base/logging.h"

namespace cjit {
namespace {
using dnnl::memory;
}  // namespace

void CapLibraryCpuIsa(CpuIsa isa) {
  static const dnnl::cpu_isa kMap[] = {dnnl::cpu_isa::sse41,           dnnl::cpu_isa::avx2,
                                       dnnl::cpu_isa::avx512_core,     dnnl::cpu_isa::avx512_core_vnni,
                                       dnnl::cpu_isa::avx512_core_bf16, dnnl::cpu_isa::avx512_core_amx,
                                       dnnl::cpu_isa::all};
  try {
    dnnl::set_max_cpu_isa(kMap[static_cast<int>(isa)]);
  } catch (const dnnl::error& e) {
    CJIT_LOG(WARNING) << "--max_cpu_isa=" << CpuIsaName(isa) << ": oneDNN was used before in this process and keeps "
                      << "its instruction sets (" << e.what() << ")";
  }
}

namespace {

// Largest |v| of a float32 buffer, or +inf when it holds a NaN or an infinity (v * 0 is NaN exactly for
// NaN and +-inf). GCC vector extensions, compiled for AVX-512, AVX2 and the baseline and picked per call
// (compiler/ir/cpu_isa.h, --max_cpu_isa): this runs before every convolution with post-ops, so it must cost
// little next to the convolution. (Not target_clones: its ifunc resolver runs during relocation, before a
// sanitizer runtime is up, and crashes ThreadSanitizer/AddressSanitizer builds at start.)
// Each ISA's body uses its native register width (GCC lowers wider generic vectors element by element).
typedef float V16f __attribute__((vector_size(64)));
typedef float V8f __attribute__((vector_size(32)));
typedef float V4f __attribute__((vector_size(16)));

template <typename V>
inline __attribute__((always_inline)) float MaxAbsOrInfBody(const float* p, int64_t n) {
  constexpr int64_t kW = sizeof(V) / sizeof(float);
  V m = {}, z = {};
  int64_t i = 0;
  for (; i + kW <= n; i += kW) {
    V v;
    std::memcpy(&v, p + i, sizeof v);
    V a = v < 0 ? -v : v;
    m = m < a ? a : m;
    z += v * 0.0f;
  }
  float mx = 0, zs = 0;
  for (int j = 0; j < kW; ++j) {
    mx = std::max(mx, m[j]);
    zs += z[j];
  }
  for (; i < n; ++i) {
    mx = std::max(mx, std::fabs(p[i]));
    zs += p[i] * 0.0f;
  }
  return zs == 0.0f ? mx : std::numeric_limits<float>::infinity();
}

__attribute__((target("avx512f"))) float MaxAbsOrInfAvx512(const float* p, int64_t n) {
  return MaxAbsOrInfBody<V16f>(p, n);
}
__attribute__((target("avx2"))) float MaxAbsOrInfAvx2(const float* p, int64_t n) { return MaxAbsOrInfBody<V8f>(p, n); }
float MaxAbsOrInfBaseline(const float* p, int64_t n) { return MaxAbsOrInfBody<V4f>(p, n); }

float MaxAbsOrInf(const float* p, int64_t n) {
  if (CpuHasAvx512()) return MaxAbsOrInfAvx512(p, n);
  if (CpuHasAvx2()) return MaxAbsOrInfAvx2(p, n);
  return MaxAbsOrInfBaseline(p, n);
}

// The same for bfloat16, the upper half of a float32: with the sign bit cleared, the 15-bit patterns order
// as the magnitudes do, and 0x7f80 and above are Inf and NaN; one unsigned max per element (AVX-512BW:
// 32 per instruction; only CPUs with AVX-512 BF16 run bfloat16 convolutions natively).
typedef uint16_t V32u16 __attribute__((vector_size(64)));
typedef uint16_t V8u16 __attribute__((vector_size(16)));

template <typename V>
inline __attribute__((always_inline)) uint16_t MaxMagnitudeBitsBody(const uint16_t* p, int64_t n) {
  constexpr int64_t kW = sizeof(V) / sizeof(uint16_t);
  V m = {};
  int64_t i = 0;
  for (; i + kW <= n; i += kW) {
    V v;
    std::memcpy(&v, p + i, sizeof v);
    v &= 0x7fff;
    m = m < v ? v : m;
  }
  uint16_t mx = 0;
  for (int j = 0; j < kW; ++j) mx = std::max<uint16_t>(mx, m[j]);
  for (; i < n; ++i) mx = std::max<uint16_t>(mx, p[i] & 0x7fff);
  return mx;
}

__attribute__((target("avx512bw"))) uint16_t MaxMagnitudeBitsAvx512(const uint16_t* p, int64_t n) {
  return MaxMagnitudeBitsBody<V32u16>(p, n);
}
uint16_t MaxMagnitudeBitsBaseline(const uint16_t* p, int64_t n) { return MaxMagnitudeBitsBody<V8u16>(p, n); }

float MaxAbsOrInfBfloat16(const uint16_t* p, int64_t n) {
  const uint16_t m = CpuHasAvx512() ? MaxMagnitudeBitsAvx512(p, n) : MaxMagnitudeBitsBaseline(p, n);
  if (m >= 0x7f80) return std::numeric_limits<float>::infinity();
  return absl::bit_cast<float>(static_cast<uint32_t>(m) << 16);
}

}  // namespace

float MaxAbsOrInf(const Tensor& t) {
  if (t.dtype() == DType::kF32) return MaxAbsOrInf(static_cast<const float*>(t.raw()), t.numel());
  if (t.dtype() == DType::kBF16) return MaxAbsOrInfBfloat16(static_cast<const uint16_t*>(t.raw()), t.numel());
  return std::numeric_limits<float>::infinity();
}

namespace {

// oneDNN's eltwise post-ops (relu, clip, hardswish: max/min instructions) turn a NaN into a number, where
// ONNX (and the op-by-op path) keeps it. True when a convolution with these operands can produce a
// non-finite value: a NaN/Inf operand, or magnitudes whose sum of `reduction` products may overflow.
// MaxAbsOrInf of constant weights, computed once per buffer (cached beside oneDNN's primitives, dropped
// with the buffer): scanning ResNet-50's 3x3 512 -> 512 weights (9.4 MB) on every run cost ~0.1-0.3 ms
// per convolution, more than its Relu post-op saved.
float ConstantMaxAbsOrInf(const Tensor& w) {
  const std::shared_ptr<DnnlEntry> entry =
      CachedPackedWeights(w, absl::StrCat("maxabs:", reinterpret_cast<uintptr_t>(w.raw()), ":", w.numel()), 1,
                          [&](float* out) { out[0] = MaxAbsOrInf(w); });
  return *static_cast<const float*>(entry->weights.get_data_handle());
}

bool ConvMayBeNonFinite(const Tensor& x, const Tensor& w, bool w_is_constant, const Tensor* bias, int64_t reduction) {
  double bound = static_cast<double>(MaxAbsOrInf(x)) * (w_is_constant ? ConstantMaxAbsOrInf(w) : MaxAbsOrInf(w)) *
                     static_cast<double>(reduction) +
                 (bias ? MaxAbsOrInf(*bias) : 0.0f);
  return !(bound < 1e38);
}

// ApplyPostOpsExact (below) on float32 y.
void ApplyPostOpsExactF32(const std::vector<PostOp>& ops, Tensor& y, bool channels_last) {
  float* p = static_cast<float*>(y.raw());
  int64_t channels = channels_last ? y.dim(y.rank() - 1) : y.dim(1);
  int64_t n = y.numel(), inner = channels_last ? 1 : n / (y.dim(0) * channels);
  for (const PostOp& op : ops) {
    switch (op.kind) {
      case PostOp::Kind::kRelu:
        for (int64_t i = 0; i < n; ++i) p[i] = p[i] < 0.0f ? 0.0f : p[i];
        break;
      case PostOp::Kind::kClip:
        for (int64_t i = 0; i < n; ++i) p[i] = p[i] < op.a ? op.a : (p[i] > op.b ? op.b : p[i]);
        break;
      case PostOp::Kind::kSigmoid:
        for (int64_t i = 0; i < n; ++i) p[i] = 1.0f / (1.0f + std::exp(-p[i]));
        break;
      case PostOp::Kind::kTanh:
        for (int64_t i = 0; i < n; ++i) p[i] = std::tanh(p[i]);
        break;
      case PostOp::Kind::kHardSwish:
        for (int64_t i = 0; i < n; ++i) {
          float h = p[i] / 6.0f + 0.5f;
          h = h < 0.0f ? 0.0f : (h > 1.0f ? 1.0f : h);
          p[i] = p[i] * h;
        }
        break;
      case PostOp::Kind::kLinear:
        for (int64_t i = 0; i < n; ++i) p[i] = op.a * p[i] + op.b;
        break;
      case PostOp::Kind::kLeakyRelu:
        for (int64_t i = 0; i < n; ++i) p[i] = p[i] < 0.0f ? op.a * p[i] : p[i];
        break;
      case PostOp::Kind::kSwish:
        for (int64_t i = 0; i < n; ++i) p[i] = p[i] / (1.0f + std::exp(-p[i]));
        break;
      case PostOp::Kind::kAddChannel: {
        const float* c = static_cast<const float*>(op.tensor->constant->raw());
        for (int64_t i = 0; i < n; ++i) p[i] += c[(i / inner) % channels];
        break;
      }
      case PostOp::Kind::kBiasLastDim:
        break;  // rejected before the convolution ran
    }
  }
}

// The post-ops of a plan step applied to y (float32 or bfloat16, NCHW or channels-last) with ONNX
// semantics: NaN in, NaN out. bfloat16 values are widened, computed in float32 and rounded once.
void ApplyPostOpsExact(const std::vector<PostOp>& ops, Tensor& y, bool channels_last) {
  if (y.dtype() != DType::kBF16) return ApplyPostOpsExactF32(ops, y, channels_last);
  Tensor wide = ConvertFloatTensor(y, DType::kF32);
  ApplyPostOpsExactF32(ops, wide, channels_last);
  ConvertFloatBuffer(wide.raw(), DType::kF32, y.raw(), DType::kBF16, static_cast<size_t>(y.numel()));
}

absl::StatusOr<WindowGeometry> Geometry(const KernelContext& ctx, const Tensor& x, const Tensor& w, bool transposed,
                                        bool channels_last = false) {
  std::vector<int64_t> in = channels_last ? std::vector<int64_t>(x.dims().begin() + 1, x.dims().end() - 1)
                                          : std::vector<int64_t>(x.dims().begin() + 2, x.dims().end());
  std::vector<int64_t> k = ctx.node->GetInts("kernel_shape");
  if (k.empty()) k.assign(w.dims().begin() + 2, w.dims().end());
  return ComputeWindowGeometry(*ctx.node, in, k, transposed, false);
}

// oneDNN descriptors of a convolution: weights dims/strides in ONNX order, window, logical [N, C, d..]
// activations, data types, and the caller's (plain) activation layouts.
struct ConvDnnlDescs {
  memory::dims wd, ws, dil, pl, pr, st, xd, yd;
  int64_t ksz = 1;
  memory::data_type dt = memory::data_type::f32, dst_dt = memory::data_type::f32, bias_dt = memory::data_type::f32;
  memory::desc plain_x, plain_y;
};

ConvDnnlDescs MakeConvDescs(const KernelContext& ctx, const WindowGeometry& g, const Dims& xdims, const Dims& ydims,
                            int64_t C, int64_t OC, int64_t group, bool transposed, bool channels_last, bool bf16,
                            bool medium) {
  size_t nsp = g.kernel.size();
  ConvDnnlDescs D;
  memory::dims &wd = D.wd, &ws = D.ws;
  if (!transposed) {  // ONNX [OC, C/g, k...]
    wd = {group, OC / group, C / group};
  } else {            // ONNX [C, OC/g, k...] = [g][C/g][OC/g][k]
    wd = {group, OC / group, C / group};
  }
  int64_t& ksz = D.ksz;
  ksz = 1;
  for (int64_t k : g.kernel) ksz *= k;
  for (int64_t k : g.kernel) wd.push_back(k);
  ws.assign(wd.size(), 0);
  {
    memory::dims ks = DenseStrides(memory::dims(g.kernel.begin(), g.kernel.end()));
    for (size_t i = 0; i < nsp; ++i) ws[3 + i] = ks[i];
    if (!transposed) {
      ws[2] = ksz;                       // ic
      ws[1] = (C / group) * ksz;         // oc
      ws[0] = (OC / group) * ws[1];      // g
    } else {
      ws[1] = ksz;                       // oc
      ws[2] = (OC / group) * ksz;        // ic
      ws[0] = (C / group) * ws[2];       // g
    }
  }
  memory::dims &dil = D.dil, &pl = D.pl, &pr = D.pr, &st = D.st;
  for (size_t i = 0; i < nsp; ++i) {
    dil.push_back(g.dilations[i] - 1);
    st.push_back(g.strides[i]);
    pl.push_back(g.pad_begin[i]);
    std::vector<int64_t> op = ctx.node->GetInts("output_padding", std::vector<int64_t>(nsp, 0));
    pr.push_back(transposed ? g.pad_end[i] - (op.size() == nsp ? op[i] : 0) : g.pad_end[i]);
  }
  memory::dims xd = ToDnnlDims(xdims), yd = ToDnnlDims(ydims);
  if (channels_last) {  // oneDNN dims are logical [N, C, d..] whatever the memory layout
    xd.insert(xd.begin() + 1, xd.back());
    xd.pop_back();
    yd.insert(yd.begin() + 1, yd.back());
    yd.pop_back();
  }
  // The caller's tensors: dense NCHW, or channels-last.
  D.dt = bf16 || medium ? memory::data_type::bf16 : memory::data_type::f32;
  D.dst_dt = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  D.bias_dt =
      bf16 && ctx.has(2) && ctx.in(2).dtype() == DType::kBF16 ? memory::data_type::bf16 : memory::data_type::f32;
  D.plain_x = memory::desc(xd, D.dt, channels_last ? ChannelsLastStrides(xd) : DenseStrides(xd));
  D.plain_y = memory::desc(yd, D.dst_dt, channels_last ? ChannelsLastStrides(yd) : DenseStrides(yd));
  D.xd = xd;
  D.yd = yd;
  return D;
}

// Convolution algorithms (autotuning candidates, KernelContext::algorithm; ids are stable across runs):
//   own:pointwise_sgemm, own:depthwise  channels-last paths of conv_gemm.h (no per-shape JIT); own:depthwise
//                                       also NCHW (TryNchwDepthwiseConv)
//   own:indirect                        channels-last indirect convolution (conv_gemm.h), any window
//   own:im2col_sgemm                    im2col + dnnl_sgemm, any channel count (group 1, 1-D/2-D)
//   own:gemm_col2im                     ConvTranspose as GEMM + col2im
//   onednn:<impl>                       oneDNN convolution with layouts of its choice (format_tag::any:
//                                       blocked nChw16c where it prefers), reorders around it
//   onednn_plain:<impl>                 oneDNN with the caller's layout (NCHW or NHWC), no reorders
//   onednn_winograd:<impl>              oneDNN's Winograd algorithm (where the library offers it)
// where <impl> is oneDNN's primitive_desc::impl_info_str() ("brgconv:avx512_core", "jit:avx512_core",
// "gemm:jit", ...), found by iterating primitive_desc::next_impl().
struct ConvAlgorithm {
  enum Kind {
    kDefault,
    kOwnPointwise,
    kOwnDepthwise,
    kOwnIm2col,
    kOwnGemmCol2im,
    kOwnIndirect,
    kOneDnn
  } kind = kDefault;
  bool plain = false, winograd = false;
  std::string impl;
};

absl::StatusOr<ConvAlgorithm> ParseConvAlgorithm(const KernelContext& ctx) {
  ConvAlgorithm a;
  if (ctx.algorithm == nullptr || ctx.algorithm->empty()) return a;
  const std::string& id = *ctx.algorithm;
  if (id == "own:pointwise_sgemm") {
    a.kind = ConvAlgorithm::kOwnPointwise;
  } else if (id == "own:depthwise") {
    a.kind = ConvAlgorithm::kOwnDepthwise;
  } else if (id == "own:indirect") {
    a.kind = ConvAlgorithm::kOwnIndirect;
  } else if (id == "own:im2col_sgemm") {
    a.kind = ConvAlgorithm::kOwnIm2col;
  } else if (id == "own:gemm_col2im") {
    a.kind = ConvAlgorithm::kOwnGemmCol2im;
  } else if (absl::StartsWith(id, "onednn:") || absl::StartsWith(id, "onednn_plain:") ||
             absl::StartsWith(id, "onednn_winograd:")) {
    a.kind = ConvAlgorithm::kOneDnn;
    a.plain = absl::StartsWith(id, "onednn_plain:");
    a.winograd = absl::StartsWith(id, "onednn_winograd:");
    a.impl = id.substr(id.find(':') + 1);
  } else {
    return ctx.Error(absl::StrCat("unknown convolution algorithm '", id, "'"));
  }
  return a;
}

// --conv_precision (the node's cjit_precision attribute) of a float32 convolution, with AVX-512 BF16
// (elsewhere, and for 16-bit operands and ConvTranspose, float32): "medium" rounds both operands to
// bfloat16 (float32 accumulation and output: oneDNN's bfloat16 convolution with a float32 destination);
// "high" is bfloat16x3 (Bfloat16x3ConvInput) where it is faster than float32 — with AMX-BF16 — else
// float32, as MatMul's (kernels_linalg.cc); "bf16x3" forces it (tests).
enum class ConvPrecision { kHighest, kMedium, kBf16x3 };

ConvPrecision PrecisionOf(const KernelContext& ctx, bool transposed) {
  if (transposed || ctx.in(0).dtype() != DType::kF32 || ctx.in(1).dtype() != DType::kF32 || !CpuHasBfloat16Math()) {
    return ConvPrecision::kHighest;
  }
  const std::string p = ctx.node->GetString("cjit_precision", "highest");
  if (p == "bf16x3" || (p == "high" && CpuHasAmxBfloat16())) return ConvPrecision::kBf16x3;
  return p == "medium" ? ConvPrecision::kMedium : ConvPrecision::kHighest;
}

// bfloat16x3 operands of a convolution (Henry, Tang, Heinecke, "Leveraging the bfloat16 Artificial
// Intelligence Datatype for Higher-Precision Computations", ARITH 2019; as ReducedPrecisionMatMul): each
// float32 value v split into a bfloat16 high part h = bf16(v) and remainder l = bf16(v - h); X * W ~
// Xh*Wh + Xh*Wl + Xl*Wh, the three most significant partial products, as one bfloat16 convolution whose
// groups have three times the input channels: X' = [Xh | Xh | Xl] and W' = [Wh | Wl | Wh] along each
// group's input channels (float32 accumulation in oneDNN). X [N, C, d..] (or channels-last [N, d.., C]) ->
// bfloat16 [N, 3C, d..] ([N, d.., 3C]).
Tensor Bfloat16x3ConvInput(const Tensor& x, int64_t group, bool channels_last) {
  const int64_t N = x.dim(0), C = channels_last ? x.dim(x.rank() - 1) : x.dim(1), Cg = C / group;
  const int64_t P = N * C > 0 ? x.numel() / (N * C) : 0;  // pixels
  Dims d = x.dims();
  d[channels_last ? d.size() - 1 : 1] = 3 * C;
  Tensor out(DType::kBF16, d);
  std::vector<uint16_t> hi(static_cast<size_t>(x.numel())), lo(hi.size());
  SplitFloatToBfloat16(x.data<float>(), hi.data(), lo.data(), hi.size());
  uint16_t* o = static_cast<uint16_t*>(out.raw());
  // Runs of `len` values: a group's Cg channels of one pixel (channels-last) or Cg planes (NCHW).
  const int64_t len = channels_last ? Cg : Cg * P, runs = channels_last ? N * P * group : N * group;
  for (int64_t r = 0; r < runs; ++r) {
    const uint16_t* h = hi.data() + r * len;
    const uint16_t* l = lo.data() + r * len;
    uint16_t* dst = o + r * 3 * len;
    std::copy(h, h + len, dst);
    std::copy(h, h + len, dst + len);
    std::copy(l, l + len, dst + 2 * len);
  }
  return out;
}

// W [OC, C/group, k..] -> bfloat16 [OC, 3 C/group, k..], each output channel's row [Wh | Wl | Wh].
Tensor Bfloat16x3ConvWeights(const Tensor& w) {
  const int64_t OC = w.dim(0), row = OC > 0 ? w.numel() / OC : 0;
  Dims d = w.dims();
  d[1] *= 3;
  Tensor out(DType::kBF16, d);
  std::vector<uint16_t> hi(static_cast<size_t>(w.numel())), lo(hi.size());
  SplitFloatToBfloat16(w.data<float>(), hi.data(), lo.data(), hi.size());
  uint16_t* o = static_cast<uint16_t*>(out.raw());
  for (int64_t m = 0; m < OC; ++m) {
    std::copy(hi.data() + m * row, hi.data() + (m + 1) * row, o + m * 3 * row);
    std::copy(lo.data() + m * row, lo.data() + (m + 1) * row, o + m * 3 * row + row);
    std::copy(hi.data() + m * row, hi.data() + (m + 1) * row, o + m * 3 * row + 2 * row);
  }
  return out;
}

// ONNX Conv / ConvTranspose, and (channels_last) com.clusterjit.NhwcConv: X [N, d.., C], Y [N, o.., M].
// The error of an autotuned convolution algorithm that the convolution's geometry or types do not fit.
absl::Status ConvAlgorithmDoesNotFit(const KernelContext& ctx) {
  return ctx.Error(absl::StrCat("algorithm '", *ctx.algorithm, "' does not fit this convolution"));
}

// The convolution paths without a per-shape JIT (conv_gemm.h) that `algo` allows and the geometry fits, in
// order of preference: true when one ran (y written, post-ops applied), false for oneDNN.
absl::StatusOr<bool> TryOwnConvPaths(KernelContext& ctx, const ConvAlgorithm& algo, const WindowGeometry& g,
                                     int64_t group, bool transposed, bool channels_last, bool own_f32, Tensor& y) {
  const bool dflt = algo.kind == ConvAlgorithm::kDefault;
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  const int64_t C = channels_last ? x.dim(x.rank() - 1) : x.dim(1);
  const int64_t OC = channels_last ? y.dim(y.rank() - 1) : y.dim(1);
  if (channels_last && !transposed && own_f32 &&
      (dflt || algo.kind == ConvAlgorithm::kOwnPointwise || algo.kind == ConvAlgorithm::kOwnDepthwise)) {
    // pointwise / depthwise without a per-shape JIT (conv_gemm.h)
    const NhwcConvPath only = algo.kind == ConvAlgorithm::kOwnPointwise   ? NhwcConvPath::kPointwise
                              : algo.kind == ConvAlgorithm::kOwnDepthwise ? NhwcConvPath::kDepthwise
                                                                          : NhwcConvPath::kNone;
    CJIT_ASSIGN_OR_RETURN(bool done, TryNhwcConvWithoutJit(ctx, g, group, y, only));
    if (done) return true;
  }
  // The indirect convolution (no per-shape JIT: a new image size runs at once, where a oneDNN primitive
  // costs ~0.7 ms to generate per shape) by default where it is as fast as oneDNN's brgconv (UseIndirectConv).
  if (channels_last && !transposed && own_f32 &&
      (algo.kind == ConvAlgorithm::kOwnIndirect || (dflt && UseIndirectConv(x.dims(), w.dims(), y.dims(), g, group)))) {
    CJIT_ASSIGN_OR_RETURN(bool done, TryIndirectConv(ctx, g, group, y));
    if (done) return true;
  }
  if (transposed && !channels_last && (dflt || algo.kind == ConvAlgorithm::kOwnGemmCol2im)) {  // GEMM + col2im
    CJIT_ASSIGN_OR_RETURN(bool done, TryGemmConvTranspose(ctx, g, group, y));
    if (done) return true;
  }
  // NCHW depthwise: by default where the output is a quarter of the input or less (strides >= 2; oneDNN's
  // path reorders the whole input to channels-last for it) and the window is at most 5x5 (one pass over
  // the output row per tap); an autotuning candidate everywhere (at stride 1 oneDNN is 1.8-3.7x faster).
  const bool nchw_dw_default = dflt &&
                               std::all_of(g.strides.begin(), g.strides.end(), [](int64_t s) { return s >= 2; }) &&
                               w.numel() <= 25 * w.dim(0);
  if (!channels_last && !transposed && own_f32 && (nchw_dw_default || algo.kind == ConvAlgorithm::kOwnDepthwise)) {
    CJIT_ASSIGN_OR_RETURN(bool done, TryNchwDepthwiseConv(ctx, g, group, y));
    if (done) {
      if (ctx.post_ops != nullptr) ApplyPostOpsExact(*ctx.post_ops, y, false);
      return true;
    }
  }
  if (!channels_last && !transposed && own_f32 && dflt && group == 1 && C <= kIm2colMaxChannels && x.rank() == 4 &&
      y.dtype() == DType::kF32) {
    // An image stem (<= 4 input channels) on NCHW tensors: the channels-last direct loop between two
    // transposes (the input's is a cheap interleave of C planes). A ResNet-style 7x7 / 2 stem, 3 -> 64 at
    // 224 x 224 on its own: im2col + GEMM 4.3-6.6 ms, this 2.9, ORT 2.6 (1 thread).
    const int64_t N = x.dim(0), H = x.dim(2), W = x.dim(3), OH = y.dim(2), OW = y.dim(3);
    Tensor xl(DType::kF32, {N, H, W, C}), yl(DType::kF32, {N, OH, OW, OC});
    BatchedTranspose(x.raw(), xl.raw(), sizeof(float), N, C, H * W, ctx.threads);
    KernelContext lctx = ctx;
    lctx.inputs[0] = &xl;
    CJIT_ASSIGN_OR_RETURN(WindowGeometry gl, Geometry(lctx, xl, w, false, true));
    CJIT_ASSIGN_OR_RETURN(bool done, TryIm2colConv(lctx, gl, group, true, yl));
    if (done) {
      BatchedTranspose(yl.raw(), y.raw(), sizeof(float), N, OH * OW, OC, ctx.threads);
      if (ctx.want_impl) ctx.impl = absl::StrCat(lctx.impl, " (NCHW through channels-last, transposes around it)");
      ctx.scratch_bytes = lctx.scratch_bytes + static_cast<int64_t>(xl.nbytes() + yl.nbytes());
      return true;
    }
  }
  if (!transposed && own_f32 && (dflt || algo.kind == ConvAlgorithm::kOwnIm2col)) {
    // few input channels (any, as an autotuning candidate): im2col + GEMM (conv_gemm.h)
    CJIT_ASSIGN_OR_RETURN(bool done, TryIm2colConv(ctx, g, group, channels_last, y,
                                                   dflt ? kIm2colMaxChannels : std::numeric_limits<int64_t>::max()));
    if (done) {
      if (!channels_last && ctx.post_ops != nullptr) ApplyPostOpsExact(*ctx.post_ops, y, false);
      return true;
    }
  }
  return false;
}

// oneDNN post-ops for `post_ops` (may be null) on an output of rank `rank` with OC channels: the attribute,
// the per-channel tensors its binary ops read (in order) and a key for the primitive cache.
struct DnnlConvPostOps {
  std::string key;
  dnnl::post_ops po;
  std::vector<const Tensor*> binary_args;
};
DnnlConvPostOps MakeDnnlConvPostOps(const std::vector<PostOp>* post_ops, size_t rank, int64_t OC) {
  DnnlConvPostOps r;
  std::string& post_key = r.key;
  dnnl::post_ops& po = r.po;
  std::vector<const Tensor*>& binary_args = r.binary_args;
  if (post_ops != nullptr) {
    for (const PostOp& op : *post_ops) {
      absl::StrAppend(&post_key, static_cast<int>(op.kind), "/", op.a, "/", op.b, ";");
      switch (op.kind) {
        case PostOp::Kind::kRelu: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f); break;
        case PostOp::Kind::kClip: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, op.a, op.b); break;
        case PostOp::Kind::kSigmoid: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_logistic, 0.0f, 0.0f); break;
        case PostOp::Kind::kTanh: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_tanh, 0.0f, 0.0f); break;
        case PostOp::Kind::kHardSwish: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_hardswish, 0.0f, 0.0f); break;
        case PostOp::Kind::kLinear: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, op.a, op.b); break;
        // oneDNN's relu with a negative slope alpha is LeakyRelu.
        case PostOp::Kind::kLeakyRelu: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, op.a, 0.0f); break;
        // x * sigmoid(alpha x) with alpha 1.
        case PostOp::Kind::kSwish: po.append_eltwise(1.0f, dnnl::algorithm::eltwise_swish, 1.0f, 0.0f); break;
        case PostOp::Kind::kAddChannel: {
          memory::dims cd(rank, 1);
          cd[1] = OC;
          po.append_binary(dnnl::algorithm::binary_add, memory::desc(cd, memory::data_type::f32, DenseStrides(cd)));
          binary_args.push_back(op.tensor->constant.get());
          absl::StrAppend(&post_key, reinterpret_cast<uintptr_t>(op.tensor->constant->raw()), ";");
          break;
        }
        case PostOp::Kind::kBiasLastDim:  // rejected above
          break;
      }
    }
  }
  return r;
}

// A primitive cache entry for the (de)convolution of `descs`: oneDNN's primitive (`algo`: an autotuned
// implementation, plain layouts, Winograd) with the activation reorders around it and, for constant weights
// (const_w), `wsrc` reordered once. Null with *status set when oneDNN rejects it or `algo` does not fit.
std::shared_ptr<DnnlEntry> CreateConvEntry(const KernelContext& ctx, const ConvAlgorithm& algo,
                                           const ConvDnnlDescs& descs, int64_t OC, bool transposed, bool has_bias,
                                           bool const_w, const Tensor& wsrc, const DnnlConvPostOps& post,
                                           absl::Status* status) {
  const memory::dims &wd = descs.wd, &ws = descs.ws, &dil = descs.dil, &pl = descs.pl, &pr = descs.pr, &st = descs.st,
                     &xd = descs.xd, &yd = descs.yd;
  const memory::data_type dt = descs.dt, dst_dt = descs.dst_dt, bias_dt = descs.bias_dt;
  const memory::desc &plain_x = descs.plain_x, &plain_y = descs.plain_y;
  const std::string& post_key = post.key;
  const dnnl::post_ops& po = post.po;
  absl::Status& create_status = *status;
  auto not_fitting = [&]() { return ConvAlgorithmDoesNotFit(ctx); };
  auto e = std::make_shared<DnnlEntry>();
  // Activations: let oneDNN pick its blocked layout (nChw8c/16c: the direct JIT kernels, much faster than
  // gemm on plain NCHW); the kernel reorders from/to plain NCHW around the primitive.
  memory::desc src_md = algo.plain ? plain_x : memory::desc(xd, dt, memory::format_tag::any);
  memory::desc dst_md = algo.plain ? plain_y : memory::desc(yd, dst_dt, memory::format_tag::any);
  const dnnl::algorithm conv_alg =
      algo.winograd ? dnnl::algorithm::convolution_winograd : dnnl::algorithm::convolution_direct;
  // An autotuned implementation: walk oneDNN's list (its preference order) to the named one.
  auto pick_impl = [&](auto& pd) -> bool {
    if (algo.impl.empty()) return true;
    while (pd.impl_info_str() != algo.impl) {
      if (!pd.next_impl()) return false;
    }
    return true;
  };
  memory::desc w_any(wd, dt, memory::format_tag::any);
  memory::desc b_md({OC}, bias_dt, memory::format_tag::a);
  try {
    dnnl::primitive_attr attr = DnnlAttr();
    if (!post_key.empty()) attr.set_post_ops(po);
    if (!transposed) {
      auto d = has_bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, conv_alg, src_md,
                                                          w_any, b_md, dst_md, st, dil, pl, pr)
                        : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, conv_alg, src_md,
                                                          w_any, dst_md, st, dil, pl, pr);
      dnnl::convolution_forward::primitive_desc pd(d, attr, CpuEngine());
      if (!pick_impl(pd)) {
        create_status = not_fitting();
        return nullptr;
      }
      e->prim = dnnl::convolution_forward(pd);
      e->weights_md = pd.weights_desc();
      e->src_md = pd.src_desc();
      e->dst_md = pd.dst_desc();
      e->scratchpad_md = pd.scratchpad_desc();
      e->impl = absl::StrCat("oneDNN convolution ", pd.impl_info_str());
    } else {
      auto d = has_bias ? dnnl::deconvolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                            dnnl::algorithm::deconvolution_direct, src_md, w_any,
                                                            b_md, dst_md, st, dil, pl, pr)
                        : dnnl::deconvolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                            dnnl::algorithm::deconvolution_direct, src_md, w_any,
                                                            dst_md, st, dil, pl, pr);
      dnnl::deconvolution_forward::primitive_desc pd(d, attr, CpuEngine());
      if (algo.winograd || !pick_impl(pd)) {
        create_status = not_fitting();
        return nullptr;
      }
      e->prim = dnnl::deconvolution_forward(pd);
      e->weights_md = pd.weights_desc();
      e->src_md = pd.src_desc();
      e->dst_md = pd.dst_desc();
      e->scratchpad_md = pd.scratchpad_desc();
      e->impl = absl::StrCat("oneDNN deconvolution ", pd.impl_info_str());
    }
  } catch (const dnnl::error& err) {
    create_status = ctx.Error(absl::StrCat("oneDNN rejected the convolution: ", err.what()));
    return nullptr;
  }
  e->bias_md = b_md;
  if (e->src_md != plain_x) {
    e->src_reorder = MakeDnnlReorder(plain_x, e->src_md, &e->src_reorder_scratchpad_md);
    e->has_src_reorder = true;
    e->src_is_transpose = xd.size() >= 3 && plain_x == memory::desc(xd, dt, DenseStrides(xd)) &&
                          e->src_md == memory::desc(xd, dt, ChannelsLastStrides(xd));
  }
  if (e->dst_md != plain_y) {
    e->dst_reorder = MakeDnnlReorder(e->dst_md, plain_y, &e->dst_reorder_scratchpad_md);
    e->has_dst_reorder = true;
    e->dst_is_transpose = yd.size() >= 3 && plain_y == memory::desc(yd, dst_dt, DenseStrides(yd)) &&
                          e->dst_md == memory::desc(yd, dst_dt, ChannelsLastStrides(yd));
  }
  if (const_w) {
    dnnl::stream s(CpuEngine());
    memory user(memory::desc(wd, dt, ws), CpuEngine(), const_cast<void*>(wsrc.raw()));
    e->weights = memory(e->weights_md, CpuEngine());
    memory::desc scratch;
    dnnl::reorder r = MakeDnnlReorder(user.get_desc(), e->weights_md, &scratch);
    ExecuteDnnl(r, s, {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, e->weights}}, scratch);
    e->weights_source = wsrc.buffer();
    e->holds_weights = true;
  }
  return e;
}

// Runs entry's primitive on X (`xs`, the operands the library reads) and the weights (the entry's, or `wsrc`
// reordered now unless const_w) into y: activations reordered to and from the primitive's layouts (plain
// transposes where those are channels-last), the bias and the binary post-ops' tensors as arguments.
void RunConvEntry(KernelContext& ctx, const std::shared_ptr<DnnlEntry>& entry, const ConvDnnlDescs& descs,
                  const Tensor& xs, const Tensor& wsrc, bool const_w, bool has_bias,
                  const std::vector<PostOp>* post_ops, const std::vector<const Tensor*>& binary_args, int64_t OC,
                  Tensor& y) {
  const memory::dims &wd = descs.wd, &ws = descs.ws, &xd = descs.xd, &yd = descs.yd;
  const memory::desc &plain_x = descs.plain_x, &plain_y = descs.plain_y;
  const memory::data_type dt = descs.dt;
  dnnl::stream s(CpuEngine());
  memory wmem = entry->weights;
  if (!const_w) {
    memory user(memory::desc(wd, dt, ws), CpuEngine(), const_cast<void*>(wsrc.raw()));
    wmem = memory(entry->weights_md, CpuEngine());
    memory::desc scratch;
    dnnl::reorder r = MakeDnnlReorder(user.get_desc(), entry->weights_md, &scratch);
    ExecuteDnnl(r, s, {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, wmem}}, scratch);
  }
  memory user_src(plain_x, CpuEngine(), const_cast<void*>(xs.raw()));
  memory user_dst(plain_y, CpuEngine(), y.raw());
  memory src = user_src, dst = user_dst;
  // The reordered activations in per-thread buffers kept for the next call, as the scratchpads
  // (ExecuteDnnl): a fresh 6.4 MB oneDNN memory per call page-faulted its way through 1600 pages (~0.8 ms,
  // more than the convolution). Slot 0 src, slot 1 dst; a primitive's worker threads share them.
  auto reorder_buffer = [](int slot, size_t bytes) {
    struct Buffer {
      void* p = nullptr;
      size_t size = 0;
      ~Buffer() { std::free(p); }
    };
    thread_local Buffer bufs[2];
    Buffer& b = bufs[slot];
    if (b.size < bytes) {
      std::free(b.p);
      const size_t rounded = (bytes + 4095) / 4096 * 4096;
      b.p = std::aligned_alloc(4096, rounded);
      if (b.p == nullptr) {
        b.size = 0;
        throw std::bad_alloc();
      }
      b.size = rounded;
    }
    return b.p;
  };
  // [N, C, S] <-> [N, S, C] with S the product of the spatial dims.
  auto spatial = [](const memory::dims& d) {
    int64_t n = 1;
    for (size_t i = 2; i < d.size(); ++i) n *= d[i];
    return n;
  };
  if (entry->has_src_reorder) {
    src = memory(entry->src_md, CpuEngine(), reorder_buffer(0, entry->src_md.get_size()));
    if (entry->src_is_transpose) {
      BatchedTranspose(xs.raw(), src.get_data_handle(), DTypeSize(xs.dtype()), xd[0], xd[1], spatial(xd), ctx.threads);
    } else {
      ExecuteDnnl(entry->src_reorder, s, {{DNNL_ARG_FROM, user_src}, {DNNL_ARG_TO, src}},
                  entry->src_reorder_scratchpad_md);
    }
  }
  if (entry->has_dst_reorder) dst = memory(entry->dst_md, CpuEngine(), reorder_buffer(1, entry->dst_md.get_size()));
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wmem}, {DNNL_ARG_DST, dst}};
  if (has_bias) args[DNNL_ARG_BIAS] = memory(entry->bias_md, CpuEngine(), const_cast<void*>(ctx.in(2).raw()));
  for (size_t b = 0, idx = 0; post_ops && idx < post_ops->size(); ++idx) {
    if ((*post_ops)[idx].kind != PostOp::Kind::kAddChannel) continue;
    memory::dims cd(yd.size(), 1);
    cd[1] = OC;
    args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(idx)) | DNNL_ARG_SRC_1] =
        memory(memory::desc(cd, memory::data_type::f32, DenseStrides(cd)), CpuEngine(),
               const_cast<void*>(binary_args[b++]->raw()));
  }
  ctx.scratch_bytes = static_cast<int64_t>(entry->scratchpad_md.get_size()) +
                      (entry->has_src_reorder ? static_cast<int64_t>(entry->src_md.get_size()) : 0) +
                      (entry->has_dst_reorder ? static_cast<int64_t>(entry->dst_md.get_size()) : 0);
  ExecuteDnnl(entry->prim, s, std::move(args), entry->scratchpad_md);
  if (entry->has_dst_reorder) {
    if (entry->dst_is_transpose) {
      BatchedTranspose(dst.get_data_handle(), y.raw(), DTypeSize(y.dtype()), yd[0], spatial(yd), yd[1], ctx.threads);
    } else {
      ExecuteDnnl(entry->dst_reorder, s, {{DNNL_ARG_FROM, dst}, {DNNL_ARG_TO, user_dst}},
                  entry->dst_reorder_scratchpad_md);
    }
  }
}

// Post-ops that run after the primitive (from a Swish on): the vector epilogue over blocks of rows for
// channels-last output, exact ONNX semantics for NCHW.
void ApplyPostOpsAfterConv(const KernelContext& ctx, const std::vector<PostOp>& after_part, int64_t OC,
                           bool channels_last, Tensor& y) {
  if (channels_last) {
    // Blocks of ~64 KiB of rows (each op one pass over a cache-resident block), over the threads.
    float* yp = static_cast<float*>(y.raw());
    const int64_t rows = y.numel() / OC, block = std::max<int64_t>(1, 16384 / OC);
    const int64_t blocks = (rows + block - 1) / block;
    const int nt = ThreadsForElements(ctx.threads, y.numel());
    ParallelFor(nt, blocks, [&](int64_t b) {
      const int64_t r0 = b * block;
      ApplyChannelEpilogue(yp + r0 * OC, std::min(block, rows - r0), OC, nullptr, &after_part);
    });
  } else {
    ApplyPostOpsExact(after_part, y, false);
  }
}

absl::Status Conv(KernelContext& ctx, bool transposed, bool channels_last = false) {
  CJIT_ASSIGN_OR_RETURN(const ConvAlgorithm algo, ParseConvAlgorithm(ctx));
  const bool dflt = algo.kind == ConvAlgorithm::kDefault;
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  // float32, or bfloat16 (oneDNN's AVX-512 BF16 kernels; the registration widens it where the CPU has none).
  const bool bf16 = x.dtype() == DType::kBF16 && w.dtype() == DType::kBF16 && !transposed;
  if ((x.dtype() != DType::kF32 || w.dtype() != DType::kF32) && !bf16) {
    return ctx.Error(absl::StrCat("convolution computes in float32 or float16/bfloat16 (widened), got ",
                                  DTypeName(x.dtype()), " and ", DTypeName(w.dtype())));
  }
  const ConvPrecision precision = PrecisionOf(ctx, transposed);
  const bool x3 = precision == ConvPrecision::kBf16x3;
  const bool medium = precision != ConvPrecision::kHighest;
  Tensor x_low, w_low;  // the bfloat16 operands of medium / bfloat16x3, made once the shapes are checked
  const Tensor& xs = medium ? x_low : x;  // the operands the library reads
  const Tensor& wsrc = medium ? w_low : w;
  if (bf16 && ctx.has(2) && ctx.in(2).dtype() != DType::kBF16 && ctx.in(2).dtype() != DType::kF32) {
    return ctx.Error(absl::StrCat("bias B is ", DTypeName(ctx.in(2).dtype()), ", expected bf16 or f32"));
  }
  if (x.rank() < 3) return ctx.Error("X must be N x C x spatial");
  CJIT_ASSIGN_OR_RETURN(WindowGeometry g, Geometry(ctx, x, w, transposed, channels_last));
  int64_t group = ctx.node->GetInt("group", 1);
  int64_t C = channels_last ? x.dim(x.rank() - 1) : x.dim(1);
  Tensor& y = ctx.Alloc(0);
  if (y.numel() == 0) return absl::OkStatus();
  int64_t OC = channels_last ? y.dim(y.rank() - 1) : y.dim(1);
  if (group <= 0 || C % group || OC % group) return ctx.Error("channels are not divisible by group");
  if (!transposed && w.dim(1) * group != C) {
    return ctx.Error(absl::StrCat("weight has ", w.dim(1), " input channels per group, input has ", C, "/", group));
  }
  // kBiasLastDim is a GEMM epilogue (FusionPlanOptions::gemm_epilogues); no convolution path applies it.
  if (ctx.post_ops != nullptr) {
    for (const PostOp& op : *ctx.post_ops) {
      if (op.kind == PostOp::Kind::kBiasLastDim) return ctx.Error("internal: a GEMM epilogue post-op on a convolution");
    }
  }
  if (x3) {
    x_low = Bfloat16x3ConvInput(x, group, channels_last);
    w_low = ctx.is_constant(1) ? DerivedConstant(w, "bf16x3_conv_weights", Bfloat16x3ConvWeights)
                               : Bfloat16x3ConvWeights(w);
  } else if (medium) {
    x_low = ToBfloat16(ctx, 0);
    w_low = ToBfloat16(ctx, 1);
  }
  // The library's input channels: bfloat16x3 triples each group's.
  const int64_t lib_c = x3 ? 3 * C : C;
  const bool own_f32 = !bf16 && !medium;
  CJIT_ASSIGN_OR_RETURN(bool own_done, TryOwnConvPaths(ctx, algo, g, group, transposed, channels_last, own_f32, y));
  if (own_done) return absl::OkStatus();
  if (!dflt && algo.kind != ConvAlgorithm::kOneDnn) return ConvAlgorithmDoesNotFit(ctx);
  const ConvDnnlDescs descs =
      MakeConvDescs(ctx, g, xs.dims(), y.dims(), lib_c, OC, group, transposed, channels_last, bf16, medium);
  const memory::dims &wd = descs.wd, &dil = descs.dil, &pl = descs.pl, &pr = descs.pr, &st = descs.st, &xd = descs.xd,
                     &yd = descs.yd;
  const int64_t ksz = descs.ksz;
  // Small convolutions stay on this thread (runtime/cpu/parallel.h): oneDNN forks by the thread setting,
  // which the primitive is created under too (GetOrCreateDnnl keys it by that setting).
  ScopedLibraryThreadsForWork library_threads(static_cast<double>(y.numel()) * (lib_c / group) * ksz);
  const memory::data_type bias_dt = descs.bias_dt;
  bool has_bias = ctx.has(2);
  bool const_w = ctx.is_constant(1);
  // Post-ops (only for Conv steps of compiled clusters). When the convolution may produce NaN/Inf they run
  // after it in exact ONNX semantics instead (ApplyPostOpsExact).
  const std::vector<PostOp>* post_ops = transposed ? nullptr : ctx.post_ops;
  const std::vector<PostOp>* exact_post_ops = nullptr;
  if (post_ops != nullptr && !post_ops->empty() &&
      ConvMayBeNonFinite(x, w, const_w, has_bias ? &ctx.in(2) : nullptr, (C / group) * ksz)) {
    exact_post_ops = post_ops;
    post_ops = nullptr;
  }
  // A Swish and what follows it run after the primitive (our vector epilogue), not as oneDNN post-ops:
  // oneDNN's Winograd convolutions take no swish post-op, and on a YOLO-style network the convolutions
  // that lost Winograd cost more than the separate pass saved.
  // A bfloat16 destination takes the whole chain in oneDNN (it has no bfloat16 Winograd to lose, and the
  // vector epilogue reads float32).
  std::vector<PostOp> dnnl_part, after_part;
  if (post_ops != nullptr && !bf16) {
    size_t k = 0;
    while (k < post_ops->size() && (*post_ops)[k].kind != PostOp::Kind::kSwish) ++k;
    if (k < post_ops->size()) {
      dnnl_part.assign(post_ops->begin(), post_ops->begin() + static_cast<std::ptrdiff_t>(k));
      after_part.assign(post_ops->begin() + static_cast<std::ptrdiff_t>(k), post_ops->end());
      post_ops = dnnl_part.empty() ? nullptr : &dnnl_part;
    }
  }
  const DnnlConvPostOps post = MakeDnnlConvPostOps(post_ops, yd.size(), OC);
  const std::string& post_key = post.key;
  std::string key =
      absl::StrCat(transposed ? "deconv:" : "conv:", bf16 ? "bf16:" : "",
                   x3       ? "bf16x3:"
                   : medium ? "medium:"
                            : "",
                   static_cast<int>(bias_dt), post_key, ":", absl::StrJoin(xd, ","), ":", absl::StrJoin(wd, ","), ":",
                   absl::StrJoin(st, ","), ":", absl::StrJoin(dil, ","), ":", absl::StrJoin(pl, ","), ":",
                   absl::StrJoin(pr, ","), ":", has_bias, channels_last ? ":nxc:" : ":",
                   const_w ? absl::StrCat(reinterpret_cast<uintptr_t>(w.raw())) : "var",
                   dflt ? "" : absl::StrCat(":", *ctx.algorithm));
  absl::Status create_status = absl::OkStatus();
  auto entry = GetOrCreateDnnl(key, [&]() -> std::shared_ptr<DnnlEntry> {
    return CreateConvEntry(ctx, algo, descs, OC, transposed, has_bias, const_w, wsrc, post, &create_status);
  }, [&](const DnnlEntry& e) {
    // Cached reordered weights are only valid while the very buffer they came from is alive.
    return !const_w || (!e.weights_source.expired() && e.weights_source.lock() == wsrc.buffer());
  });
  CJIT_RETURN_IF_ERROR(create_status);
  if (!entry) return ctx.Error("oneDNN primitive creation failed");
  RunConvEntry(ctx, entry, descs, xs, wsrc, const_w, has_bias, post_ops, post.binary_args, OC, y);
  if (exact_post_ops != nullptr) ApplyPostOpsExact(*exact_post_ops, y, channels_last);
  if (!after_part.empty()) ApplyPostOpsAfterConv(ctx, after_part, OC, channels_last, y);
  if (ctx.want_impl) {
    ctx.impl = x3       ? absl::StrCat("bfloat16x3: ", entry->impl)
               : medium ? absl::StrCat("bfloat16 operands: ", entry->impl)
                        : entry->impl;
    if (exact_post_ops != nullptr) absl::StrAppend(&ctx.impl, " (post-ops after it: non-finite operands)");
    if (entry->has_src_reorder || entry->has_dst_reorder) absl::StrAppend(&ctx.impl, " (+ layout reorders)");
  }
  return absl::OkStatus();
}

}  // namespace

// Autotuning candidates of a convolution (see ConvAlgorithm above): the conv_gemm.h paths whose geometry
// fits, then every oneDNN implementation offered for the blocked (format_tag::any) and the caller's
// layouts, and Winograd where offered, each once, in oneDNN's preference order.
std::vector<AlgorithmCandidate> ConvAlgorithms(const KernelContext& ctx, bool transposed, bool channels_last) {
  std::vector<AlgorithmCandidate> out;
  if (!ctx.has(0) || !ctx.has(1) || ctx.infer().empty() || !ctx.infer()[0].shape.fully_known()) return out;
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  // As Conv: float32 (widened from 16-bit by the registration), or bfloat16 with AVX-512 BF16.
  const bool sixteen = x.dtype() == DType::kF16 || x.dtype() == DType::kBF16;
  const bool bf16 = x.dtype() == DType::kBF16 && w.dtype() == DType::kBF16 && !transposed && CpuHasBfloat16Math();
  if (sixteen && !bf16 && (x.dtype() != w.dtype())) return out;
  if (!sixteen && (x.dtype() != DType::kF32 || w.dtype() != DType::kF32)) return out;
  const ConvPrecision precision = sixteen ? ConvPrecision::kHighest : PrecisionOf(ctx, transposed);
  if (precision == ConvPrecision::kBf16x3) return out;  // not tuned: one oneDNN convolution over 3C
  const bool medium = precision == ConvPrecision::kMedium;
  if (x.rank() < 3) return out;
  auto geo = Geometry(ctx, x, w, transposed, channels_last);
  if (!geo.ok()) return out;
  const WindowGeometry& g = *geo;
  const Dims ydims = ctx.infer()[0].shape.concrete();
  if (static_cast<int>(ydims.size()) != x.rank()) return out;
  int64_t group = ctx.node->GetInt("group", 1);
  int64_t C = channels_last ? x.dim(x.rank() - 1) : x.dim(1);
  int64_t OC = channels_last ? ydims.back() : ydims[1];
  if (group <= 0 || C % group || OC % group || C == 0 || OC == 0) return out;
  for (int64_t d : ydims) {
    if (d == 0) return out;
  }
  const size_t nsp = g.kernel.size();
  std::vector<AlgorithmCandidate> own;
  const bool own_f32 = !bf16 && !medium;
  if (!transposed && own_f32) {
    if (channels_last) {
      NhwcConvPath p = NhwcConvPathFor(x.dims(), w.dims(), ydims, g, group);
      if (p == NhwcConvPath::kPointwise) own.push_back({"own:pointwise_sgemm"});
      if (p == NhwcConvPath::kDepthwise) own.push_back({"own:depthwise"});
      if (IndirectConvFits(x.dims(), w.dims(), ydims, g, group)) own.push_back({"own:indirect"});
    } else if (group == C && OC == C && (nsp == 1 || nsp == 2)) {
      own.push_back({"own:depthwise"});  // TryNchwDepthwiseConv
    }
    if (group == 1 && (nsp == 1 || nsp == 2)) own.push_back({"own:im2col_sgemm"});
  }
  if (transposed && !channels_last && (nsp == 1 || nsp == 2)) own.push_back({"own:gemm_col2im"});
  const ConvDnnlDescs D = MakeConvDescs(ctx, g, x.dims(), ydims, C, OC, group, transposed, channels_last, bf16, medium);
  // The thread setting Conv creates the primitive under: oneDNN offers some implementations (Winograd) only
  // for some thread counts.
  double work = static_cast<double>((C / group) * D.ksz);
  for (int64_t d : ydims) work *= static_cast<double>(d);
  ScopedLibraryThreadsForWork library_threads(work);
  const bool has_bias = ctx.has(2);
  memory::desc b_md({OC}, D.bias_dt, memory::format_tag::a);
  memory::desc w_any(D.wd, D.dt, memory::format_tag::any);
  auto enumerate = [&](const char* prefix, bool plain, bool winograd) {
    memory::desc src_md = plain ? D.plain_x : memory::desc(D.xd, D.dt, memory::format_tag::any);
    memory::desc dst_md = plain ? D.plain_y : memory::desc(D.yd, D.dst_dt, memory::format_tag::any);
    auto add_all = [&](auto& pd) {
      do {
        // oneDNN's reference implementations are correctness baselines, 100-1000x slower: never candidates.
        if (absl::StartsWith(pd.impl_info_str(), "ref:")) continue;
        std::string id = absl::StrCat(prefix, pd.impl_info_str());
        bool seen = false;
        for (const AlgorithmCandidate& c : out) seen = seen || c.id == id;
        if (!seen) out.push_back({id});
      } while (pd.next_impl());
    };
    // The operation descriptor `d` must outlive `pd`: oneDNN 2.x's next_impl() reads it again (building the
    // primitive_desc in a helper that returns it crashed with SIGFPE inside dnnl_primitive_desc_iterator_next).
    try {
      if (!transposed) {
        const dnnl::algorithm alg =
            winograd ? dnnl::algorithm::convolution_winograd : dnnl::algorithm::convolution_direct;
        auto d = has_bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, alg, src_md, w_any,
                                                            b_md, dst_md, D.st, D.dil, D.pl, D.pr)
                          : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, alg, src_md, w_any,
                                                            dst_md, D.st, D.dil, D.pl, D.pr);
        dnnl::convolution_forward::primitive_desc pd(d, DnnlAttr(), CpuEngine());
        add_all(pd);
      } else if (!winograd) {
        auto d = has_bias ? dnnl::deconvolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                              dnnl::algorithm::deconvolution_direct, src_md, w_any,
                                                              b_md, dst_md, D.st, D.dil, D.pl, D.pr)
                          : dnnl::deconvolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                              dnnl::algorithm::deconvolution_direct, src_md, w_any,
                                                              dst_md, D.st, D.dil, D.pl, D.pr);
        dnnl::deconvolution_forward::primitive_desc pd(d, DnnlAttr(), CpuEngine());
        add_all(pd);
      }
    } catch (const dnnl::error&) {
      // Not offered for this problem (e.g. no Winograd kernel for this ISA or shape).
    }
  };
  enumerate("onednn:", false, false);
  out.insert(out.end(), own.begin(), own.end());
  enumerate("onednn_plain:", true, false);
  enumerate("onednn_winograd:", false, true);
  return out;
}

// 16-bit convolutions: bfloat16 natively where the CPU has AVX-512 BF16 (oneDNN), else (and float16,
// which this CPU cannot multiply, and ConvTranspose) widened to float32.
absl::Status SixteenBitConv(KernelContext& ctx, bool channels_last) {
  const bool native = CpuHasBfloat16Math() && ctx.in(0).dtype() == DType::kBF16 && ctx.in(1).dtype() == DType::kBF16;
  if (native) return Conv(ctx, false, channels_last);
  return RunInFloat32([channels_last](KernelContext& c) { return Conv(c, false, channels_last); }, ctx);
}

void RegisterConvKernels() {
  RegisterKernel("Conv", [](KernelContext& ctx) { return SixteenBitConv(ctx, false); });
  RegisterAlgorithms("Conv", [](const KernelContext& ctx) { return ConvAlgorithms(ctx, false, false); });
  RegisterAlgorithms("NhwcConv", [](const KernelContext& ctx) { return ConvAlgorithms(ctx, false, true); });
  RegisterAlgorithms("ConvTranspose", [](const KernelContext& ctx) { return ConvAlgorithms(ctx, true, false); });
  RegisterKernel("NhwcConv", [](KernelContext& ctx) { return SixteenBitConv(ctx, true); });
  RegisterKernel("NhwcPointwiseDepthwiseConv", [](KernelContext& ctx) { return RunPointwiseDepthwiseConv(ctx); });
  RegisterKernel("ConvTranspose", [](KernelContext& ctx) {
    return RunInFloat32([](KernelContext& c) { return Conv(c, true); }, ctx);
  });
}

}  // namespace cjit
