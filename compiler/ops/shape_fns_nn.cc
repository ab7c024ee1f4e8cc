// Shape/dtype functions of convolution, pooling, normalization, resize and recurrent operators
// (ONNX operator specification, opsets 7-21).
#include <cmath>

#include "compiler/ir/numeric_cast.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/ops/op_registry.h"
#include "compiler/ops/shape_fn_util.h"

namespace cjit {
namespace {

using namespace shape_fn;  // NOLINT: Inputs, Outputs, C, A, Reg

// Output shape of a windowed op over NC + spatial input; `channels` overrides dim 1 when >= 0.
absl::Status WindowInfer(const Node& n, const Shape& x, std::vector<int64_t> kernel, bool transposed,
                         Dim channels, Outputs& out, DType dtype) {
  out[0].dtype = dtype;
  if (!x.rank_known) return absl::OkStatus();
  if (x.rank() < 3) return NodeError(n, absl::StrCat("input must be N x C x spatial, got ", x.ToString()));
  out[0].shape.rank_known = true;
  out[0].shape.dims = {x.dims[0], channels};
  std::vector<int64_t> in;
  bool known = true;
  for (int i = 2; i < x.rank(); ++i) {
    in.push_back(x.dims[i].value);
    known &= x.dims[i].known();
  }
  if (kernel.size() != in.size()) {
    return NodeError(n, absl::StrCat("kernel has ", kernel.size(), " spatial dims, input ", in.size()));
  }
  bool kernel_known = true;
  for (int64_t k : kernel) kernel_known &= k > 0;
  if (!known || !kernel_known) {
    for (size_t i = 0; i < in.size(); ++i) out[0].shape.dims.push_back(Dim{});
    return absl::OkStatus();
  }
  CJIT_ASSIGN_OR_RETURN(WindowGeometry g,
                        ComputeWindowGeometry(n, in, kernel, transposed, n.GetInt("ceil_mode", 0) != 0));
  for (int64_t o : g.out) out[0].shape.dims.push_back(Dim{o, ""});
  return absl::OkStatus();
}

// Conv / ConvTranspose weights against the input's channels, and the bias length against the output's.
absl::Status CheckConvOperands(const Node& n, Inputs in, bool transposed) {
  const Shape& x = in[0].shape;
  const Shape& w = in[1].shape;
  int64_t group = n.GetInt("group", 1);
  if (group <= 0) return NodeError(n, absl::StrCat("group must be positive, got ", group));
  if (x.rank_known && x.rank() < 3) return NodeError(n, absl::StrCat("X must be N x C x spatial, got ", x.ToString()));
  if (w.rank_known && w.rank() < 3)
    return NodeError(n, absl::StrCat("W must be M x C/group x kernel, got ", w.ToString()));
  if (x.rank_known && w.rank_known && x.rank() != w.rank()) {
    return NodeError(n, absl::StrCat("W has rank ", w.rank(), ", X has rank ", x.rank()));
  }
  Dim oc;
  if (w.rank_known && w.rank() >= 2) {
    const Dim& c = x.rank_known && x.rank() >= 2 ? x.dims[1] : Dim{};
    // W's dim 1 is per group in both forms (input channels of Conv, output channels of ConvTranspose).
    int64_t w1_total = 0;
    if (w.dims[1].known() && __builtin_mul_overflow(w.dims[1].value, group, &w1_total)) {
      return NodeError(n, absl::StrCat("W's dim 1 (", w.dims[1].value, " channels per group) times group ", group,
                                       " overflows int64"));
    }
    if (!transposed) {
      if (c.known() && w.dims[1].known() && w1_total != c.value) {
        return NodeError(n, absl::StrCat("W has ", w.dims[1].value, " input channels per group, X has ", c.value,
                                         " channels in ", group, " groups"));
      }
      if (w.dims[0].known() && w.dims[0].value % group != 0) {
        return NodeError(n,
                         absl::StrCat("W's ", w.dims[0].value, " output channels are not divisible by group ", group));
      }
      oc = w.dims[0];
    } else {
      if (c.known() && w.dims[0].known() && w.dims[0].value != c.value) {
        return NodeError(n, absl::StrCat("W has ", w.dims[0].value, " input channels, X has ", c.value));
      }
      if (w.dims[1].known()) oc = Dim{w1_total, ""};
    }
  }
  if (in.size() > 2 && in[2].present && in[2].shape.rank_known) {
    const Shape& b = in[2].shape;
    if (b.rank() != 1 || (oc.known() && b.dims[0].known() && b.dims[0].value != oc.value)) {
      return NodeError(n, absl::StrCat("bias B has shape ", b.ToString(), ", the output has ",
                                       oc.known() ? absl::StrCat(oc.value) : std::string("?"), " channels"));
    }
  }
  return absl::OkStatus();
}

absl::Status ConvInfer(const Node& n, Inputs in, Outputs& out) {
  CJIT_RETURN_IF_ERROR(CheckConvOperands(n, in, false));
  const Shape& w = in[1].shape;
  std::vector<int64_t> kernel = n.GetInts("kernel_shape");
  Dim channels;
  if (w.rank_known) {
    if (kernel.empty()) {
      for (int i = 2; i < w.rank(); ++i) kernel.push_back(w.dims[i].value);
    }
    channels = w.dims[0];
  }
  if (!w.rank_known && kernel.empty()) {
    out[0].dtype = in[0].dtype;
    return absl::OkStatus();
  }
  return WindowInfer(n, in[0].shape, kernel, false, channels, out, in[0].dtype);
}

// com.clusterjit.NhwcConv (compiler/passes/layout.h): ONNX Conv with X and Y channels-last ([N, d1..dn, C]
// and [N, o1..on, M]); W, B and the attributes as Conv's. float32, or X and W both bfloat16 / float16
// (mixed precision) with B of their type or float32.
// The channels-last twin of an NCHW shape function (com.clusterjit.NhwcConv, NhwcMaxPool, ...): X [N, d.., C]
// is given to `nchw_infer` as [N, C, d..] and its Y [N, C, o..] returned as [N, o.., C].
template <typename Infer>
absl::Status ChannelsLastInfer(const Node& n, Inputs in, Outputs& out, Infer&& nchw_infer) {
  std::vector<InferInput> nchw(in.begin(), in.end());
  const Shape& x = in[0].shape;
  if (x.rank_known && x.rank() >= 3) {  // [N, d.., C] -> [N, C, d..]
    nchw[0].shape.dims.erase(nchw[0].shape.dims.begin() + x.rank() - 1);
    nchw[0].shape.dims.insert(nchw[0].shape.dims.begin() + 1, x.dims.back());
  }
  nchw[0].value = nullptr;
  CJIT_RETURN_IF_ERROR(nchw_infer(n, nchw, out));
  Shape& y = out[0].shape;
  if (y.rank_known && y.rank() >= 3) {  // [N, C, o..] -> [N, o.., C]
    Dim c = y.dims[1];
    y.dims.erase(y.dims.begin() + 1);
    y.dims.push_back(c);
  }
  return absl::OkStatus();
}

absl::Status NhwcConvInfer(const Node& n, Inputs in, Outputs& out) {
  const DType t = in[0].dtype;
  const bool ok_type = t == DType::kF32 || t == DType::kBF16 || t == DType::kF16;
  if (!ok_type || in[1].dtype != t ||
      (in.size() > 2 && in[2].present && in[2].dtype != t && in[2].dtype != DType::kF32)) {
    return NodeError(n, "X and W must be float32 (or both bfloat16 / float16), B of their type or float32");
  }
  return ChannelsLastInfer(n, in, out, ConvInfer);
}

// com.clusterjit.NhwcPointwiseDepthwiseConv (compiler/passes/layout.h FusePointwiseDepthwise): X [N, H, W, C],
// W1 [M, C, 1, 1], B1 [M] (optional), W2 [M, 1, KH, KW], B2 [M] (optional); the node's attributes are the
// depthwise convolution's (group = M). Y [N, OH, OW, M], float32.
absl::Status NhwcPointwiseDepthwiseConvInfer(const Node& n, Inputs in, Outputs& out) {
  if (!in[0].present || !in[1].present || !in[3].present) return NodeError(n, "X, W1 and W2 are required");
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].present && in[i].dtype != DType::kF32) return NodeError(n, "every operand must be float32");
  }
  const Shape& x = in[0].shape;
  const Shape& w1 = in[1].shape;
  if (x.rank_known && x.rank() != 4) return NodeError(n, "X must be [N, H, W, C]");
  if (w1.rank_known && (w1.rank() != 4 || w1.dims[2].value != 1 || w1.dims[3].value != 1)) {
    return NodeError(n, "W1 must be [M, C, 1, 1]");
  }
  if (x.fully_known() && w1.fully_known() && w1.dims[1].value != x.dims[3].value) {
    return NodeError(n, absl::StrCat("W1 has ", w1.dims[1].value, " input channels, X has ", x.dims[3].value));
  }
  if (in[2].present && in[2].shape.fully_known() && w1.fully_known() &&
      (in[2].shape.rank() != 1 || in[2].shape.dims[0].value != w1.dims[0].value)) {
    return NodeError(n, "B1 must be [M]");
  }
  // The intermediate [N, H, W, M], then the depthwise convolution's own inference.
  InferInput mid = in[0];
  mid.value = nullptr;
  if (x.rank_known && w1.rank_known) mid.shape.dims[3] = w1.dims[0];
  std::vector<InferInput> dw{mid, in[3], in[4]};
  return NhwcConvInfer(n, dw, out);
}

absl::Status ConvTransposeInfer(const Node& n, Inputs in, Outputs& out) {
  CJIT_RETURN_IF_ERROR(CheckConvOperands(n, in, true));
  const Shape& w = in[1].shape;
  std::vector<int64_t> kernel = n.GetInts("kernel_shape");
  Dim channels;
  if (w.rank_known) {
    if (kernel.empty()) {
      for (int i = 2; i < w.rank(); ++i) kernel.push_back(w.dims[i].value);
    }
    if (w.dims[1].known()) channels = Dim{w.dims[1].value * n.GetInt("group", 1), ""};
  }
  return WindowInfer(n, in[0].shape, kernel, true, channels, out, in[0].dtype);
}

absl::Status PoolInfer(const Node& n, Inputs in, Outputs& out) {
  const Shape& x = in[0].shape;
  // Each pad must be smaller than the kernel along its axis (as ONNX Runtime requires): a window made
  // only of padding has no element to pool.
  std::vector<int64_t> kernel = n.GetInts("kernel_shape"), pads = n.GetInts("pads");
  if (kernel.empty()) return NodeError(n, "the required attribute 'kernel_shape' is missing");
  if (!pads.empty() && pads.size() == 2 * kernel.size()) {
    for (size_t i = 0; i < pads.size(); ++i) {
      if (pads[i] < 0) return NodeError(n, absl::StrCat("pads has a negative value ", pads[i]));
      if (pads[i] >= kernel[i % kernel.size()]) {
        return NodeError(n, absl::StrCat("pads value ", pads[i], " is not smaller than the kernel size ",
                                         kernel[i % kernel.size()], " of its axis"));
      }
    }
  }
  CJIT_RETURN_IF_ERROR(WindowInfer(n, x, n.GetInts("kernel_shape"), false,
                                   x.rank_known && x.rank() > 1 ? x.dims[1] : Dim{}, out, in[0].dtype));
  if (out.size() > 1) out[1] = {DType::kI64, out[0].shape};
  return absl::OkStatus();
}

// com.clusterjit.NhwcMaxPool / NhwcAveragePool (compiler/passes/layout.h): MaxPool's / AveragePool's
// attributes, X [N, d.., C] -> Y [N, o.., C] (ONNX's output permuted), float32, no Indices output.
absl::Status NhwcPoolInfer(const Node& n, Inputs in, Outputs& out) {
  const bool bytes = n.op_type == "NhwcMaxPool" && (in[0].dtype == DType::kU8 || in[0].dtype == DType::kI8);
  if (in[0].dtype != DType::kF32 && !bytes) return NodeError(n, "X must be float32 (NhwcMaxPool: or uint8 / int8)");
  return ChannelsLastInfer(n, in, out, PoolInfer);
}

// com.clusterjit.FlatGroupNorm (compiler/passes/simplify.h FuseGroupNormalization): X [N, ...] of a float
// type, scale and bias [num_groups] of X's type, `grouping` the reshape target [0, num_groups, -1], which
// must still reshape X (into N x num_groups rows). Y has X's dims.
absl::Status FlatGroupNormInfer(const Node& n, Inputs in, Outputs& out) {
  out[0] = {in[0].dtype, in[0].shape};
  const DType t = in[0].dtype;
  if (t != DType::kF32 && t != DType::kF16 && t != DType::kBF16 && t != DType::kF64) {
    return NodeError(n, "X must be a float type");
  }
  const int64_t groups = n.GetInt("num_groups", 0);
  if (groups <= 0) return NodeError(n, absl::StrCat("num_groups must be positive, got ", groups));
  for (int i = 1; i <= 2; ++i) {
    const Shape& p = in[i].shape;
    if (in[i].dtype != t || (p.fully_known() && NumElements(p.concrete()) != groups)) {
      return NodeError(n, absl::StrCat(i == 1 ? "scale" : "bias", " must have X's type and num_groups = ", groups,
                                       " values"));
    }
  }
  std::vector<InferOutput> grouped(1);
  std::vector<InferInput> args = {in[0], in[3]};
  return FindOp("", "Reshape")->infer(n, args, grouped);  // its error if X does not split so
}

// com.clusterjit.NhwcGroupNorm (compiler/passes/layout.h): FlatGroupNorm of the channels-last float32 X
// [N, d.., C] (its inputs and attributes; `grouping` as for the channels-first X), C divisible by num_groups.
absl::Status NhwcGroupNormInfer(const Node& n, Inputs in, Outputs& out) {
  if (in[0].dtype != DType::kF32) return NodeError(n, "X must be float32");
  const Shape& x = in[0].shape;
  const int64_t groups = n.GetInt("num_groups", 0);
  if (x.rank_known && x.rank() >= 3 && x.dims.back().known() && groups > 0 && x.dims.back().value % groups != 0) {
    return NodeError(n, absl::StrCat("X has ", x.dims.back().value, " channels, not divisible by num_groups ", groups));
  }
  return ChannelsLastInfer(n, in, out, FlatGroupNormInfer);
}

absl::Status GlobalPoolInfer(const Node& n, Inputs in, Outputs& out) {
  out[0].dtype = in[0].dtype;
  const Shape& x = in[0].shape;
  if (!x.rank_known) return absl::OkStatus();
  if (x.rank() < 3) return NodeError(n, "input must be N x C x spatial");
  out[0].shape = x;
  for (int i = 2; i < x.rank(); ++i) out[0].shape.dims[i] = Dim{1, ""};
  return absl::OkStatus();
}

// Per-channel parameters (BatchNormalization scale/B/mean/var, InstanceNormalization scale/B): 1-D of C.
absl::Status CheckChannelParams(const Node& n, Inputs in, int first, int count) {
  static const char* kNames[] = {"X", "scale", "B", "input_mean", "input_var"};
  const Shape& x = in[0].shape;
  if (x.rank_known && x.rank() < 2) return NodeError(n, "X must have a channel dim (rank >= 2)");
  Dim c = x.rank_known ? x.dims[1] : Dim{};
  for (int i = first; i < first + count && i < static_cast<int>(in.size()); ++i) {
    const Shape& p = in[i].shape;
    if (!in[i].present || !p.rank_known) continue;
    if (p.rank() != 1 || (c.known() && p.dims[0].known() && p.dims[0].value != c.value)) {
      return NodeError(n, absl::StrCat(kNames[i], " has shape ", p.ToString(), ", X has ",
                                       c.known() ? absl::StrCat(c.value) : std::string("?"), " channels"));
    }
  }
  return absl::OkStatus();
}

absl::Status BatchNormInfer(const Node& n, Inputs in, Outputs& out) {
  CJIT_RETURN_IF_ERROR(CheckChannelParams(n, in, 1, 4));
  out[0] = {in[0].dtype, in[0].shape};
  for (size_t i = 1; i < out.size(); ++i) out[i] = {in[0].dtype, in[1].shape};
  return absl::OkStatus();
}

absl::Status LayerNormInfer(const Node& n, Inputs in, Outputs& out) {
  out[0] = {in[0].dtype, in[0].shape};
  const Shape& x = in[0].shape;
  // Scale and B broadcast to the normalized dims x.dims[axis:] (after leading 1s, a suffix of them).
  if (x.rank_known) {
    CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(n, n.GetInt("axis", -1), x.rank()));
    for (int i = 1; i < 3 && i < static_cast<int>(in.size()); ++i) {
      const Shape& p = in[i].shape;
      if (!in[i].present || !p.rank_known) continue;
      std::vector<Dim> d = p.dims;
      while (!d.empty() && d.front().known() && d.front().value == 1) d.erase(d.begin());
      bool ok = static_cast<int>(d.size()) <= x.rank() - ax;
      for (size_t k = 0; ok && k < d.size(); ++k) {
        const Dim& a = d[d.size() - 1 - k];
        const Dim& b = x.dims[x.rank() - 1 - k];
        ok = !a.known() || !b.known() || a.value == b.value;
      }
      if (!ok) {
        return NodeError(n, absl::StrCat(i == 1 ? "Scale" : "B", " has shape ", p.ToString(),
                                         ", which does not broadcast to the normalized dims of X ", x.ToString()));
      }
    }
  }
  if (out.size() > 1) {
    Shape s;
    if (x.rank_known) {
      CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(n, n.GetInt("axis", -1), x.rank()));
      s = x;
      for (int i = ax; i < x.rank(); ++i) s.dims[i] = Dim{1, ""};
    }
    DType st = n.GetInt("stash_type", 1) == 1 ? DType::kF32 : in[0].dtype;
    for (size_t i = 1; i < out.size(); ++i) out[i] = {st, s};
  }
  return absl::OkStatus();
}

absl::Status ResizeInfer(const Node& n, Inputs in, Outputs& out) {
  out[0].dtype = in[0].dtype;
  const Shape& x = in[0].shape;
  if (!x.rank_known) return absl::OkStatus();
  int r = x.rank();
  out[0].shape.rank_known = true;
  out[0].shape.dims.assign(r, Dim{});
  // Upsample (opset 7-9) has scales as attribute or input 1; Resize-10 input 1; Resize-11+ input 2
  // (scales) and 3 (sizes).
  const Tensor* scales = nullptr;
  const Tensor* sizes = nullptr;
  bool unknown = false;
  auto take = [&](int i, const Tensor** t) {
    if (i < static_cast<int>(in.size()) && in[i].present) {
      if (in[i].value == nullptr) unknown = true;
      else if (in[i].value->numel() > 0) *t = in[i].value;
    }
  };
  std::vector<float> attr_scales = n.GetFloats("scales");
  if (n.op_type == "Upsample" || n.opset_version == 10) {
    take(1, &scales);
  } else {
    take(2, &scales);
    take(3, &sizes);
  }
  if (unknown) return absl::OkStatus();
  std::vector<int64_t> axes = n.GetInts("axes");
  std::vector<int> dims_sel;
  if (axes.empty()) {
    for (int i = 0; i < r; ++i) dims_sel.push_back(i);
  } else {
    for (int64_t a : axes) {
      CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(n, a, r));
      dims_sel.push_back(ax);
    }
  }
  for (int i = 0; i < r; ++i) out[0].shape.dims[i] = x.dims[i];
  if (sizes) {
    std::vector<int64_t> sz = sizes->ToInt64Vector();
    if (sz.size() != dims_sel.size()) return NodeError(n, "sizes has the wrong length");
    for (int64_t v : sz) {
      if (v <= 0 || v > (int64_t{1} << 32)) return NodeError(n, absl::StrCat("sizes has an invalid size ", v));
    }
    std::string policy = n.GetString("keep_aspect_ratio_policy", "stretch");
    if (policy != "stretch") {
      if (!x.fully_known()) return absl::OkStatus();
      double scale = policy == "not_larger" ? 1e300 : 0;
      for (size_t k = 0; k < sz.size(); ++k) {
        double s = static_cast<double>(sz[k]) / x.dims[dims_sel[k]].value;
        scale = policy == "not_larger" ? std::min(scale, s) : std::max(scale, s);
      }
      for (size_t k = 0; k < sz.size(); ++k) {
        out[0].shape.dims[dims_sel[k]] =
            Dim{NumericCast<int64_t>(std::round(scale * x.dims[dims_sel[k]].value)), ""};
      }
      return absl::OkStatus();
    }
    for (size_t k = 0; k < sz.size(); ++k) out[0].shape.dims[dims_sel[k]] = Dim{sz[k], ""};
    return absl::OkStatus();
  }
  std::vector<double> sc;
  if (scales) sc = scales->ToDoubleVector();
  else for (float f : attr_scales) sc.push_back(f);
  if (sc.size() != dims_sel.size()) {
    return NodeError(n, absl::StrCat("scales has ", sc.size(), " values for ", dims_sel.size(), " axes"));
  }
  for (double v : sc) {
    if (!(v > 0) || !std::isfinite(v) || v > 1e6) {
      return NodeError(n, absl::StrCat("scales has an invalid scale ", v, " (must be finite and positive)"));
    }
  }
  for (size_t k = 0; k < sc.size(); ++k) {
    const Dim& d = x.dims[dims_sel[k]];
    out[0].shape.dims[dims_sel[k]] =
        d.known() ? Dim{NumericCast<int64_t>(std::floor(d.value * static_cast<float>(sc[k]))), ""} : Dim{};
  }
  return absl::OkStatus();
}

// LSTM / GRU / RNN: X [seq, batch, input] (layout 0) or [batch, seq, input] (layout 1).
absl::Status RecurrentInfer(const Node& n, Inputs in, Outputs& out) {
  const Shape& x = in[0].shape;
  int64_t hidden = n.GetInt("hidden_size", -1);
  std::string dir = n.GetString("direction", "forward");
  int64_t num_dir = dir == "bidirectional" ? 2 : 1;
  bool batch_major = n.GetInt("layout", 0) == 1;
  Dim seq, batch;
  if (x.rank_known) {
    if (x.rank() != 3) return NodeError(n, "X must be 3-D");
    seq = x.dims[batch_major ? 1 : 0];
    batch = x.dims[batch_major ? 0 : 1];
  }
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional") {
    return NodeError(n, absl::StrCat("unknown direction '", dir, "'"));
  }
  int64_t gates = n.op_type == "LSTM" ? 4 : n.op_type == "GRU" ? 3 : 1;
  const Shape& w = in[1].shape;
  const Shape& r = in[2].shape;
  if (hidden < 0 && r.rank_known && r.rank() == 3 && r.dims[2].known()) hidden = r.dims[2].value;
  if (n.HasAttr("hidden_size") && (hidden <= 0 || hidden > (int64_t{1} << 30))) {
    return NodeError(n, absl::StrCat("hidden_size must be in [1, 2^30], got ", hidden));
  }
  Dim input_size = x.rank_known && x.rank() == 3 ? x.dims[2] : Dim{};
  auto check = [&](const Shape& s, const char* name, std::vector<int64_t> want) -> absl::Status {
    if (!s.rank_known) return absl::OkStatus();
    bool ok = s.rank() == static_cast<int>(want.size());
    for (size_t i = 0; ok && i < want.size(); ++i) ok = want[i] < 0 || !s.dims[i].known() || s.dims[i].value == want[i];
    if (ok) return absl::OkStatus();
    std::string w_text;
    for (int64_t v : want)
      absl::StrAppend(&w_text, w_text.empty() ? "" : ",", v < 0 ? std::string("?") : absl::StrCat(v));
    return NodeError(n, absl::StrCat(name, " has shape ", s.ToString(), ", expected [", w_text, "]"));
  };
  if (hidden > 0) {
    CJIT_RETURN_IF_ERROR(check(w, "W", {num_dir, gates * hidden, input_size.known() ? input_size.value : -1}));
    CJIT_RETURN_IF_ERROR(check(r, "R", {num_dir, gates * hidden, hidden}));
    if (in.size() > 3 && in[3].present) CJIT_RETURN_IF_ERROR(check(in[3].shape, "B", {num_dir, 2 * gates * hidden}));
    if (in.size() > 5 && in[5].present) {
      CJIT_RETURN_IF_ERROR(check(in[5].shape, "initial_h",
                                 batch_major
                                     ? std::vector<int64_t>{batch.known() ? batch.value : -1, num_dir, hidden}
                                     : std::vector<int64_t>{num_dir, batch.known() ? batch.value : -1, hidden}));
    }
  }
  if (in.size() > 4 && in[4].present && in[4].shape.rank_known) {
    const Shape& sl = in[4].shape;
    if (sl.rank() != 1 || (batch.known() && sl.dims[0].known() && sl.dims[0].value != batch.value)) {
      return NodeError(n, absl::StrCat("sequence_lens has shape ", sl.ToString(), " for a batch of ",
                                       batch.known() ? absl::StrCat(batch.value) : std::string("?")));
    }
  }
  Dim h{hidden, ""}, nd{num_dir, ""};
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].dtype = in[0].dtype;
    out[i].shape.rank_known = true;
    if (i == 0) {
      out[i].shape.dims = batch_major ? std::vector<Dim>{batch, seq, nd, h} : std::vector<Dim>{seq, nd, batch, h};
    } else {
      out[i].shape.dims = batch_major ? std::vector<Dim>{batch, nd, h} : std::vector<Dim>{nd, batch, h};
    }
  }
  return absl::OkStatus();
}

absl::Status SpaceDepthInfer(const Node& n, Inputs in, Outputs& out) {
  out[0].dtype = in[0].dtype;
  const Shape& x = in[0].shape;
  if (!x.fully_known()) return absl::OkStatus();
  if (x.rank() != 4) return NodeError(n, "input must be 4-D");
  int64_t b = n.GetInt("blocksize", 0);
  if (b <= 0 || b > (int64_t{1} << 20)) return NodeError(n, absl::StrCat("blocksize must be in [1, 2^20], got ", b));
  Dims d = x.concrete();
  if (n.op_type == "DepthToSpace") {
    if (d[1] % (b * b)) return NodeError(n, "channels not divisible by blocksize^2");
    out[0].shape = Shape::Of({d[0], d[1] / (b * b), d[2] * b, d[3] * b});
  } else {
    if (d[2] % b || d[3] % b) return NodeError(n, "spatial dims not divisible by blocksize");
    out[0].shape = Shape::Of({d[0], d[1] * b * b, d[2] / b, d[3] / b});
  }
  return absl::OkStatus();
}

// ConvInteger (X input 0, W input 1) and QLinearConv (X 0, W 3): Conv's output dims; int32, or the dtype of
// y_zero_point (input 7). `channels_last`: com.clusterjit.NhwcConvInteger / NhwcQLinearConv, X [N, d.., C]
// and Y [N, o.., M].
absl::Status QuantConvInfer(const Node& n, Inputs in, Outputs& out, int w_index, bool channels_last) {
  if (static_cast<int>(in.size()) <= w_index) return NodeError(n, "W is missing");
  std::vector<InferInput> xw = {in[0], in[w_index]};
  if (channels_last) {
    CJIT_RETURN_IF_ERROR(ChannelsLastInfer(n, xw, out, ConvInfer));
  } else {
    CJIT_RETURN_IF_ERROR(ConvInfer(n, xw, out));
  }
  out[0].dtype = w_index == 1 ? DType::kI32 : (in.size() > 7 ? in[7].dtype : DType::kU8);
  return absl::OkStatus();
}

}  // namespace

void RegisterNnOps() {
  Reg("Conv", C::kContraction, true, A::kAllow, 2, 3, ConvInfer);
  Reg("ConvTranspose", C::kContraction, true, A::kAllow, 2, 3, ConvTransposeInfer);
  RegisterOp(OpDef{"NhwcConv", C::kContraction, true, A::kDeny, 2, 3, NhwcConvInfer, /*internal=*/true});
  Reg("ConvInteger", C::kContraction, false, A::kDeny, 2, 4,
      [](const Node& n, Inputs in, Outputs& out) { return QuantConvInfer(n, in, out, 1, false); });
  Reg("QLinearConv", C::kContraction, false, A::kDeny, 8, 9,
      [](const Node& n, Inputs in, Outputs& out) { return QuantConvInfer(n, in, out, 3, false); });
  // com.clusterjit.NhwcConvInteger / NhwcQLinearConv (compiler/passes/layout.h): ConvInteger / QLinearConv
  // with X and Y channels-last.
  RegisterOp(OpDef{"NhwcConvInteger", C::kContraction, false, A::kDeny, 2, 4,
                   [](const Node& n, Inputs in, Outputs& out) { return QuantConvInfer(n, in, out, 1, true); },
                   /*internal=*/true});
  RegisterOp(OpDef{"NhwcQLinearConv", C::kContraction, false, A::kDeny, 8, 9,
                   [](const Node& n, Inputs in, Outputs& out) { return QuantConvInfer(n, in, out, 3, true); },
                   /*internal=*/true});
  RegisterOp(OpDef{"NhwcPointwiseDepthwiseConv", C::kContraction, true, A::kDeny, 5, 5,
                   NhwcPointwiseDepthwiseConvInfer, /*internal=*/true});
  Reg("MaxPool", C::kPooling, false, A::kInfer, 1, 1, PoolInfer);
  Reg("AveragePool", C::kPooling, false, A::kInfer, 1, 1, PoolInfer);
  Reg("LpPool", C::kPooling, false, A::kDeny, 1, 1, PoolInfer);
  RegisterOp(OpDef{"NhwcMaxPool", C::kPooling, true, A::kDeny, 1, 1, NhwcPoolInfer, /*internal=*/true});
  RegisterOp(OpDef{"NhwcAveragePool", C::kPooling, true, A::kDeny, 1, 1, NhwcPoolInfer, /*internal=*/true});
  RegisterOp(OpDef{"FlatGroupNorm", C::kNormalization, false, A::kDeny, 4, 4, FlatGroupNormInfer, /*internal=*/true});
  RegisterOp(OpDef{"NhwcGroupNorm", C::kNormalization, false, A::kDeny, 4, 4, NhwcGroupNormInfer, /*internal=*/true});
  Reg("GlobalAveragePool", C::kReduction, true, A::kInfer, 1, 1, GlobalPoolInfer);
  Reg("GlobalMaxPool", C::kReduction, true, A::kInfer, 1, 1, GlobalPoolInfer);
  Reg("GlobalLpPool", C::kReduction, false, A::kDeny, 1, 1, GlobalPoolInfer);
  Reg("BatchNormalization", C::kNormalization, true, A::kInfer, 5, 5, BatchNormInfer);
  Reg("LayerNormalization", C::kNormalization, true, A::kDeny, 2, 3, LayerNormInfer);
  Reg("InstanceNormalization", C::kNormalization, false, A::kDeny, 3, 3,
      [](const Node& n, Inputs in, Outputs& out) -> absl::Status {
        CJIT_RETURN_IF_ERROR(CheckChannelParams(n, in, 1, 2));
        out[0] = {in[0].dtype, in[0].shape};
        return absl::OkStatus();
      });
  // GroupNormalization-18: scale and bias per group [num_groups]; -21: per channel [C] (ONNX changed it).
  Reg("GroupNormalization", C::kNormalization, false, A::kDeny, 3, 3,
      [](const Node& n, Inputs in, Outputs& out) -> absl::Status {
        out[0] = {in[0].dtype, in[0].shape};
        const Shape& x = in[0].shape;
        int64_t groups = n.GetInt("num_groups", 0);
        if (groups <= 0) return NodeError(n, absl::StrCat("num_groups must be positive, got ", groups));
        if (!x.rank_known) return absl::OkStatus();
        if (x.rank() < 2) return NodeError(n, absl::StrCat("X must be N x C x ..., got ", x.ToString()));
        const Dim& c = x.dims[1];
        if (c.known() && c.value % groups != 0) {
          return NodeError(n, absl::StrCat("X has ", c.value, " channels, not divisible by num_groups ", groups));
        }
        Dim want = n.opset_version >= 21 ? c : Dim{groups, ""};
        for (int i = 1; i <= 2; ++i) {
          const Shape& p = in[i].shape;
          if (!p.rank_known) continue;
          if (p.rank() != 1 || (want.known() && p.dims[0].known() && p.dims[0].value != want.value)) {
            return NodeError(
                n, absl::StrCat(
                       i == 1 ? "scale" : "bias", " has shape ", p.ToString(), "; GroupNormalization-",
                       n.opset_version >= 21 ? "21 takes one value per channel" : "18 takes one value per group"));
          }
        }
        return absl::OkStatus();
      });
  // ONNX LRN: `size` (required) is the number of channels summed over, at least 1.
  Reg("LRN", C::kNormalization, false, A::kDeny, 1, 1, [](const Node& n, Inputs in, Outputs& out) -> absl::Status {
    int64_t size = n.GetInt("size", 0);
    if (size < 1) return NodeError(n, absl::StrCat("size must be at least 1, got ", size));
    if (in[0].shape.rank_known && in[0].shape.rank() < 2) {
      return NodeError(n, absl::StrCat("X must be N x C x ..., got ", in[0].shape.ToString()));
    }
    out[0] = {in[0].dtype, in[0].shape};
    return absl::OkStatus();
  });
  Reg("MeanVarianceNormalization", C::kNormalization, false, A::kDeny, 1, 1,
      [](const Node&, Inputs in, Outputs& out) {
        out[0] = {in[0].dtype, in[0].shape};
        return absl::OkStatus();
      });
  Reg("Resize", C::kOther, false, A::kInfer, 1, 4, ResizeInfer);
  Reg("Upsample", C::kOther, false, A::kInfer, 1, 2, ResizeInfer);
  Reg("LSTM", C::kRecurrent, false, A::kInfer, 3, 8, RecurrentInfer);
  Reg("GRU", C::kRecurrent, false, A::kInfer, 3, 6, RecurrentInfer);
  Reg("RNN", C::kRecurrent, false, A::kInfer, 3, 6, RecurrentInfer);
  Reg("DepthToSpace", C::kDataMovement, true, A::kInfer, 1, 1, SpaceDepthInfer);
  Reg("SpaceToDepth", C::kDataMovement, true, A::kInfer, 1, 1, SpaceDepthInfer);
}

}  // namespace cjit
