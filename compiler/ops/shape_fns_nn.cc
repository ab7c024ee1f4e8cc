// Shape/dtype functions of convolution, pooling, normalization, resize and recurrent operators
// (ONNX operator specification, opsets 7-18).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "compiler/ir/status_macros.h"
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

absl::Status ConvInfer(const Node& n, Inputs in, Outputs& out) {
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

absl::Status ConvTransposeInfer(const Node& n, Inputs in, Outputs& out) {
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
  CJIT_RETURN_IF_ERROR(WindowInfer(n, x, n.GetInts("kernel_shape"), false,
                                   x.rank_known && x.rank() > 1 ? x.dims[1] : Dim{}, out, in[0].dtype));
  if (out.size() > 1) out[1] = {DType::kI64, out[0].shape};
  return absl::OkStatus();
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

absl::Status BatchNormInfer(const Node&, Inputs in, Outputs& out) {
  out[0] = {in[0].dtype, in[0].shape};
  for (size_t i = 1; i < out.size(); ++i) out[i] = {in[0].dtype, in[1].shape};
  return absl::OkStatus();
}

absl::Status LayerNormInfer(const Node& n, Inputs in, Outputs& out) {
  out[0] = {in[0].dtype, in[0].shape};
  const Shape& x = in[0].shape;
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
            Dim{static_cast<int64_t>(std::round(scale * x.dims[dims_sel[k]].value)), ""};
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
  for (size_t k = 0; k < sc.size(); ++k) {
    const Dim& d = x.dims[dims_sel[k]];
    out[0].shape.dims[dims_sel[k]] =
        d.known() ? Dim{static_cast<int64_t>(std::floor(d.value * static_cast<float>(sc[k]))), ""} : Dim{};
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
  if (b <= 0) return NodeError(n, "blocksize must be positive");
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

}  // namespace

void RegisterNnOps() {
  Reg("Conv", C::kContraction, true, A::kAllow, 2, 3, ConvInfer);
  Reg("ConvTranspose", C::kContraction, true, A::kAllow, 2, 3, ConvTransposeInfer);
  Reg("MaxPool", C::kPooling, false, A::kInfer, 1, 1, PoolInfer);
  Reg("AveragePool", C::kPooling, false, A::kInfer, 1, 1, PoolInfer);
  Reg("LpPool", C::kPooling, false, A::kDeny, 1, 1, PoolInfer);
  Reg("GlobalAveragePool", C::kReduction, true, A::kInfer, 1, 1, GlobalPoolInfer);
  Reg("GlobalMaxPool", C::kReduction, true, A::kInfer, 1, 1, GlobalPoolInfer);
  Reg("GlobalLpPool", C::kReduction, false, A::kDeny, 1, 1, GlobalPoolInfer);
  Reg("BatchNormalization", C::kNormalization, true, A::kInfer, 5, 5, BatchNormInfer);
  Reg("LayerNormalization", C::kNormalization, true, A::kDeny, 2, 3, LayerNormInfer);
  Reg("InstanceNormalization", C::kNormalization, false, A::kDeny, 3, 3,
      [](const Node&, Inputs in, Outputs& out) {
        out[0] = {in[0].dtype, in[0].shape};
        return absl::OkStatus();
      });
  Reg("LRN", C::kNormalization, false, A::kDeny, 1, 1, [](const Node&, Inputs in, Outputs& out) {
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
