// Shape/dtype functions of losses, quantization and less common operators (ONNX operator specification):
// NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss, QuantizeLinear, DequantizeLinear,
// DynamicQuantizeLinear, NonMaxSuppression, Unique, ReverseSequence, MaxUnpool, Det, Hann/Hamming/
// BlackmanWindow, Einsum, GridSample, the signal ops DFT, STFT, MelWeightMatrix, RoiAlign, the random ops and
// TfIdfVectorizer.
#include <cctype>
#include <map>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/ops/op_registry.h"
#include "compiler/ops/shape_fn_util.h"

namespace cjit {
namespace {

using namespace shape_fn;  // NOLINT: Inputs, Outputs, C, A

// Ops of this file are never clustered.
void Reg(const std::string& name, C cat, A amp, int min_in, int max_in, InferFn fn) {
  shape_fn::Reg(name, cat, false, amp, min_in, max_in, std::move(fn));
}

Shape Unknown1D() {
  Shape s;
  s.rank_known = true;
  s.dims = {Dim{}};
  return s;
}

absl::Status LossInfer(const Node& n, Inputs in, Outputs& out) {
  bool none = n.GetString("reduction", "mean") == "none";
  out[0].dtype = in[0].dtype;
  out[0].shape = none ? in[1].shape : Shape::Of({});
  if (out.size() > 1) out[1] = {in[0].dtype, in[0].shape};
  return absl::OkStatus();
}

// The dtype of an ONNX TensorProto.DataType code (`dtype` / `output_datatype` attributes), or kInvalid.
DType OnnxCode(int64_t code) {
  switch (code) {
    case 1: return DType::kF32;
    case 2: return DType::kU8;
    case 3: return DType::kI8;
    case 4: return DType::kU16;
    case 5: return DType::kI16;
    case 6: return DType::kI32;
    case 7: return DType::kI64;
    case 9: return DType::kBool;
    case 10: return DType::kF16;
    case 11: return DType::kF64;
    case 12: return DType::kU32;
    case 13: return DType::kU64;
    case 16: return DType::kBF16;
    default: return DType::kInvalid;
  }
}

absl::Status EinsumInfer(const Node& n, Inputs in, Outputs& out) {
  out[0].dtype = in[0].dtype;
  std::string eq = n.GetString("equation", "");
  std::string spaced;
  for (char c : eq) if (!std::isspace(static_cast<unsigned char>(c))) spaced.push_back(c);
  size_t arrow = spaced.find("->");
  // ONNX Einsum: terms of ASCII letters and "...", separated by ',', one optional "->". Checked for implicit
  // outputs too (the kernel indexes by letter).
  for (size_t i = 0; i < spaced.size(); ++i) {
    char c = spaced[i];
    bool in_arrow = arrow != std::string::npos && (i == arrow || i == arrow + 1);
    bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!letter && !in_arrow && c != ',' && c != '.') {
      return NodeError(n, absl::StrCat("equation '", eq, "' has the character '", absl::CEscape(std::string(1, c)),
                                       "' (letters, ',', '...' and '->' only)"));
    }
  }
  if (arrow == std::string::npos) return absl::OkStatus();  // implicit output: computed at run time
  std::vector<std::string> terms;
  std::string lhs = spaced.substr(0, arrow), rhs = spaced.substr(arrow + 2);
  size_t start = 0;
  for (size_t i = 0; i <= lhs.size(); ++i) {
    if (i == lhs.size() || lhs[i] == ',') {
      terms.push_back(lhs.substr(start, i - start));
      start = i + 1;
    }
  }
  if (terms.size() != in.size()) return NodeError(n, "equation names a different number of operands");
  std::map<char, Dim> size;
  Shape ell;
  ell.rank_known = true;
  for (size_t k = 0; k < terms.size(); ++k) {
    const Shape& s = in[k].shape;
    if (!s.rank_known) return absl::OkStatus();
    std::string t = terms[k];
    size_t e = t.find("...");
    if (e != std::string::npos && t.find("...", e + 3) != std::string::npos) {
      return NodeError(n, absl::StrCat("equation term '", t, "' has more than one ellipsis"));
    }
    int n_ell = e == std::string::npos ? 0 : s.rank() - static_cast<int>(t.size() - 3);
    if (n_ell < 0 || (e == std::string::npos && static_cast<int>(t.size()) != s.rank())) {
      return NodeError(n, absl::StrCat("equation term '", t, "' does not match operand ", k, " of rank ", s.rank()));
    }
    for (char c : t) {
      if (c != '.' && !std::isalpha(static_cast<unsigned char>(c))) {
        return NodeError(n, absl::StrCat("equation term '", t, "' has the character '", std::string(1, c), "'"));
      }
    }
    int d = 0;
    for (size_t i = 0; i < t.size(); ++i) {
      if (t.compare(i, 3, "...") == 0) {
        Shape part;
        part.rank_known = true;
        for (int j = 0; j < n_ell; ++j) part.dims.push_back(s.dims[d + j]);
        CJIT_ASSIGN_OR_RETURN(ell, BroadcastShapes(n, {ell, part}));
        d += n_ell;
        i += 2;
        continue;
      }
      if (d >= s.rank()) return NodeError(n, "equation term longer than the operand's rank");
      size[t[i]] = s.dims[d++];
    }
  }
  out[0].shape.rank_known = true;
  for (size_t i = 0; i < rhs.size(); ++i) {
    if (rhs.compare(i, 3, "...") == 0) {
      for (const Dim& dm : ell.dims) out[0].shape.dims.push_back(dm);
      i += 2;
      continue;
    }
    if (!size.count(rhs[i]))
      return NodeError(n, absl::StrCat("output letter '", std::string(1, rhs[i]), "' is not an input letter"));
    out[0].shape.dims.push_back(size[rhs[i]]);
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterMiscOps() {
  Reg("NegativeLogLikelihoodLoss", C::kReduction, A::kDeny, 2, 3, LossInfer);
  Reg("SoftmaxCrossEntropyLoss", C::kReduction, A::kDeny, 2, 3, LossInfer);
  // Clusterable: per-tensor ones fuse into the CPU code generator's loops (ClusteringOptions::quantize_ops).
  // The output dtype is the zero point's, else output_dtype (opset 21), else uint8.
  shape_fn::Reg("QuantizeLinear", C::kElementwise, true, A::kDeny, 2, 3,
                [](const Node& n, Inputs in, Outputs& out) -> absl::Status {
    const int64_t code = n.GetInt("output_dtype", 0);
    const DType attr = code == 0 ? DType::kInvalid : DTypeFromOnnxCode(code);
    if (code != 0 && (attr == DType::kInvalid || !IsInteger(attr) || attr == DType::kI32 || DTypeSize(attr) > 2)) {
      return NodeError(n, absl::StrCat("output_dtype ", code, " is not a quantized type clusterjit supports "
                                       "(int8, uint8, int16, uint16, int4, uint4)"));
    }
    const bool has_zp = in.size() > 2 && in[2].present;
    if (has_zp && attr != DType::kInvalid && in[2].dtype != DType::kInvalid && in[2].dtype != attr) {
      return NodeError(n,
                       absl::StrCat("output_dtype is ", DTypeName(attr), ", the zero point ", DTypeName(in[2].dtype)));
    }
    const DType t = has_zp ? in[2].dtype : attr != DType::kInvalid ? attr : DType::kU8;
    out[0] = {t, in[0].shape};
    return absl::OkStatus();
  });
  shape_fn::Reg("DequantizeLinear", C::kElementwise, true, A::kDeny, 2, 3, [](const Node&, Inputs in, Outputs& out) {
    out[0] = {in[1].dtype, in[0].shape};
    return absl::OkStatus();
  });
  Reg("DynamicQuantizeLinear", C::kElementwise, A::kDeny, 1, 1, [](const Node&, Inputs in, Outputs& out) {
    out[0] = {DType::kU8, in[0].shape};
    out[1] = {DType::kF32, Shape::Of({})};
    out[2] = {DType::kU8, Shape::Of({})};
    return absl::OkStatus();
  });
  Reg("NonMaxSuppression", C::kOther, A::kDeny, 2, 5, [](const Node&, Inputs, Outputs& out) {
    out[0].dtype = DType::kI64;
    out[0].shape.rank_known = true;
    out[0].shape.dims = {Dim{}, Dim{3, ""}};
    return absl::OkStatus();
  });
  Reg("Unique", C::kOther, A::kInfer, 1, 1, [](const Node&, Inputs in, Outputs& out) {
    out[0].dtype = in[0].dtype;
    for (size_t i = 1; i < out.size(); ++i) out[i] = {DType::kI64, Unknown1D()};
    return absl::OkStatus();
  });
  Reg("ReverseSequence", C::kDataMovement, A::kInfer, 2, 2, [](const Node& n, Inputs in, Outputs& out) -> absl::Status {
    out[0] = {in[0].dtype, in[0].shape};
    int64_t ba = n.GetInt("batch_axis", 1), ta = n.GetInt("time_axis", 0);
    if (!((ba == 0 && ta == 1) || (ba == 1 && ta == 0))) {
      return NodeError(n, "batch_axis and time_axis must be 0 and 1, in either order");
    }
    const Shape& x = in[0].shape;
    if (x.rank_known && x.rank() < 2) return NodeError(n, "input must have rank >= 2");
    const Shape& l = in[1].shape;
    if (x.rank_known && l.rank_known &&
        (l.rank() != 1 || (l.dims[0].known() && x.dims[ba].known() && l.dims[0].value != x.dims[ba].value))) {
      return NodeError(n, absl::StrCat("sequence_lens has shape ", l.ToString(), " for a batch dim of ",
                                       x.dims[ba].known() ? absl::StrCat(x.dims[ba].value) : std::string("?")));
    }
    return absl::OkStatus();
  });
  Reg("MaxUnpool", C::kPooling, A::kInfer, 2, 3, [](const Node& n, Inputs in, Outputs& out) -> absl::Status {
    out[0].dtype = in[0].dtype;
    const Shape& x = in[0].shape;
    // ONNX MaxUnpool: X [N, C, spatial...], I like X, output_shape (optional) of X's rank and at least the
    // default unpooled size (in - 1) * stride + kernel - pads.
    if (!x.rank_known) return absl::OkStatus();
    if (x.rank() < 3) return NodeError(n, absl::StrCat("X must be N x C x spatial, got ", x.ToString()));
    const Shape& ind = in[1].shape;
    if (ind.rank_known && ind.rank() != x.rank()) {
      return NodeError(n, absl::StrCat("I has shape ", ind.ToString(), ", X ", x.ToString(), ": they must match"));
    }
    std::vector<int64_t> k = n.GetInts("kernel_shape");
    size_t sp = x.rank() - 2;
    std::vector<int64_t> st = n.GetInts("strides", std::vector<int64_t>(sp, 1));
    std::vector<int64_t> pads = n.GetInts("pads", std::vector<int64_t>(2 * sp, 0));
    if (k.size() != sp || st.size() != sp || pads.size() != 2 * sp)
      return NodeError(n, "bad kernel_shape/strides/pads");
    constexpr int64_t kMax = int64_t{1} << 24;
    for (size_t i = 0; i < sp; ++i) {
      if (k[i] <= 0 || k[i] > kMax || st[i] <= 0 || st[i] > kMax) {
        return NodeError(n, absl::StrCat("kernel_shape and strides must be in [1, ", kMax, "]"));
      }
    }
    for (int64_t p : pads) {
      if (p < 0 || p > kMax) return NodeError(n, absl::StrCat("pads must be in [0, ", kMax, "]"));
    }
    if (!x.fully_known()) return absl::OkStatus();
    Dims d = x.concrete();
    for (size_t i = 0; i < sp; ++i) {
      d[2 + i] = (d[2 + i] - 1) * st[i] + k[i] - pads[i] - pads[sp + i];
      if (d[2 + i] <= 0) return NodeError(n, "the unpooled spatial size is not positive");
    }
    if (in.size() > 2 && in[2].present) {
      if (!in[2].value) return absl::OkStatus();
      std::vector<int64_t> os = in[2].value->ToInt64Vector();
      if (os.size() != d.size()) {
        return NodeError(n, absl::StrCat("output_shape has ", os.size(), " values for a rank-", d.size(), " input"));
      }
      for (size_t i = 0; i < d.size(); ++i) {
        if (os[i] < d[i] || (i < 2 && os[i] != d[i])) {
          return NodeError(n, absl::StrCat("output_shape dim ", i, " (", os[i], ") is smaller than the unpooled ", d[i],
                                           i < 2 ? " or changes N/C" : ""));
        }
      }
      d = os;
    }
    out[0].shape = Shape::Of(d);
    return absl::OkStatus();
  });
  Reg("Det", C::kOther, A::kDeny, 1, 1, [](const Node& n, Inputs in, Outputs& out) -> absl::Status {
    out[0].dtype = in[0].dtype;
    const Shape& x = in[0].shape;
    if (x.rank_known && x.rank() < 2) return NodeError(n, "input must be a (batch of) square matrices");
    if (x.rank_known && x.dims[x.rank() - 1].known() && x.dims[x.rank() - 2].known() &&
        x.dims[x.rank() - 1].value != x.dims[x.rank() - 2].value) {
      return NodeError(n, absl::StrCat("input ", x.ToString(), " is not a (batch of) square matrices"));
    }
    if (in[0].shape.rank_known && in[0].shape.rank() >= 2) {
      out[0].shape = in[0].shape;
      out[0].shape.dims.resize(in[0].shape.rank() - 2);
    }
    return absl::OkStatus();
  });
  for (const char* op : {"HannWindow", "HammingWindow", "BlackmanWindow"}) {
    Reg(op, C::kShape, A::kDeny, 1, 1, [](const Node& n, Inputs in, Outputs& out) -> absl::Status {
      DType t = OnnxCode(n.GetInt("output_datatype", 1));
      if (t == DType::kInvalid) t = DType::kF32;
      out[0].dtype = t;
      out[0].shape = in[0].value ? Shape::Of({in[0].value->ToInt64Vector().at(0)}) : Unknown1D();
      return absl::OkStatus();
    });
  }
  // DFT-17 / DFT-20: input [..., signal dims ..., 1 (real) | 2 (complex)]; output the same dims with the
  // transformed axis n = dft_length (default: that axis' size), or n / 2 + 1 when onesided, and a last
  // dim of 2. The axis is an attribute (default 1) at opset 17, an input (default -2) from opset 20.
  Reg("DFT", C::kOther, A::kDeny, 1, 3, [](const Node& n, Inputs in, Outputs& out) -> absl::Status {
    out[0].dtype = in[0].dtype;
    if (in[0].dtype != DType::kInvalid && !IsFloat(in[0].dtype)) return NodeError(n, "input must be a float tensor");
    const Shape& x = in[0].shape;
    if (!x.rank_known) return absl::OkStatus();
    int64_t r = x.rank();
    if (r < 2) return NodeError(n, absl::StrCat("input must have rank >= 2 ([..., 1|2]), got ", x.ToString()));
    if (x.dims[r - 1].known() && x.dims[r - 1].value != 1 && x.dims[r - 1].value != 2) {
      return NodeError(n,
                       absl::StrCat("the last dim of the input must be 1 (real) or 2 (complex), got ", x.ToString()));
    }
    int64_t axis = n.GetInt("axis", 1);
    if (n.opset_version >= 20) {
      axis = -2;
      if (in.size() > 2 && in[2].present) {
        if (!in[2].value) {
          out[0].shape.rank_known = true;
          out[0].shape.dims.assign(r, Dim{});
          out[0].shape.dims[r - 1] = Dim{2, ""};
          return absl::OkStatus();
        }
        axis = in[2].value->ToInt64Vector().at(0);
      }
    }
    if (axis < -r || axis > r - 2 || axis == -1) {
      return NodeError(
          n, absl::StrCat("axis ", axis, " is outside [", -r, ", -2] and [0, ", r - 2, "] for ", x.ToString()));
    }
    if (axis < 0) axis += r;
    out[0].shape = x;
    out[0].shape.dims[r - 1] = Dim{2, ""};
    Dim len = x.dims[axis];
    if (in.size() > 1 && in[1].present) {
      if (!in[1].value) len = Dim{};
      else len = Dim{in[1].value->ToInt64Vector().at(0), ""};
      if (len.known() && len.value < 1) return NodeError(n, absl::StrCat("dft_length ", len.value, " is not positive"));
    }
    if (n.GetInt("onesided", 0) != 0 && len.known()) len = Dim{len.value / 2 + 1, ""};
    else if (n.GetInt("onesided", 0) != 0) len = Dim{};
    out[0].shape.dims[axis] = len;
    return absl::OkStatus();
  });
  // STFT-17: signal [batch, length, 1|2], frame_step, window [frame_length], frame_length; output
  // [batch, frames, bins, 2] with frames = 1 + (length - frame_length) / frame_step and bins =
  // frame_length / 2 + 1 when onesided (default), else frame_length.
  Reg("STFT", C::kOther, A::kDeny, 2, 4, [](const Node& n, Inputs in, Outputs& out) -> absl::Status {
    out[0].dtype = in[0].dtype;
    const Shape& x = in[0].shape;
    if (x.rank_known && (x.rank() != 3 || (x.dims[2].known() && x.dims[2].value != 1 && x.dims[2].value != 2))) {
      return NodeError(n, absl::StrCat("signal must be [batch, length, 1|2], got ", x.ToString()));
    }
    out[0].shape.rank_known = true;
    out[0].shape.dims = {x.rank_known ? x.dims[0] : Dim{}, Dim{}, Dim{}, Dim{2, ""}};
    Dim frame;
    if (in.size() > 3 && in[3].present) {
      if (in[3].value) frame = Dim{in[3].value->ToInt64Vector().at(0), ""};
    } else if (in.size() > 2 && in[2].present) {
      if (in[2].shape.rank_known && in[2].shape.rank() == 1) frame = in[2].shape.dims[0];
    } else if (x.rank_known) {
      frame = x.dims[1];
    }
    if (!frame.known()) return absl::OkStatus();
    if (frame.value < 1) return NodeError(n, absl::StrCat("frame_length ", frame.value, " is not positive"));
    out[0].shape.dims[2] = Dim{n.GetInt("onesided", 1) != 0 ? frame.value / 2 + 1 : frame.value, ""};
    if (x.rank_known && x.dims[1].known() && in[1].value) {
      int64_t step = in[1].value->ToInt64Vector().at(0);
      if (step < 1) return NodeError(n, absl::StrCat("frame_step ", step, " is not positive"));
      if (x.dims[1].value < frame.value) {
        return NodeError(n, absl::StrCat("the signal (", x.dims[1].value, " samples) is shorter than one frame (",
                                         frame.value, ")"));
      }
      out[0].shape.dims[1] = Dim{1 + (x.dims[1].value - frame.value) / step, ""};
    }
    return absl::OkStatus();
  });
  // MelWeightMatrix-17: [dft_length / 2 + 1, num_mel_bins] of output_datatype (default float).
  Reg("MelWeightMatrix", C::kShape, A::kDeny, 5, 5, [](const Node& n, Inputs in, Outputs& out) -> absl::Status {
    DType t = OnnxCode(n.GetInt("output_datatype", 1));
    if (t == DType::kInvalid)
      return NodeError(n, absl::StrCat("unsupported output_datatype ", n.GetInt("output_datatype", 1)));
    out[0].dtype = t;
    out[0].shape.rank_known = true;
    out[0].shape.dims = {Dim{}, Dim{}};
    if (in[1].value) out[0].shape.dims[0] = Dim{in[1].value->ToInt64Vector().at(0) / 2 + 1, ""};
    if (in[0].value) out[0].shape.dims[1] = Dim{in[0].value->ToInt64Vector().at(0), ""};
    return absl::OkStatus();
  });
  // RoiAlign-10/16: X [N, C, H, W], rois [R, 4] (x1, y1, x2, y2), batch_indices [R] -> [R, C, oh, ow].
  Reg("RoiAlign", C::kPooling, A::kDeny, 3, 3, [](const Node& n, Inputs in, Outputs& out) -> absl::Status {
    out[0].dtype = in[0].dtype;
    const Shape& x = in[0].shape;
    const Shape& rois = in[1].shape;
    const Shape& idx = in[2].shape;
    if ((x.rank_known && x.rank() != 4) || (rois.rank_known && (rois.rank() != 2 ||
                                                                (rois.dims[1].known() && rois.dims[1].value != 4))) ||
        (idx.rank_known && idx.rank() != 1)) {
      return NodeError(n, absl::StrCat("X must be [N, C, H, W], rois [R, 4] and batch_indices [R], got ", x.ToString(),
                                       ", ", rois.ToString(), " and ", idx.ToString()));
    }
    if (in[2].dtype != DType::kInvalid && in[2].dtype != DType::kI64)
      return NodeError(n, "batch_indices must be int64");
    std::string mode = n.GetString("mode", "avg");
    std::string ctm = n.GetString("coordinate_transformation_mode", "half_pixel");
    if (mode != "avg" && mode != "max") return NodeError(n, absl::StrCat("unsupported mode '", mode, "'"));
    if (ctm != "half_pixel" && ctm != "output_half_pixel") {
      return NodeError(n, absl::StrCat("unsupported coordinate_transformation_mode '", ctm, "'"));
    }
    int64_t oh = n.GetInt("output_height", 1), ow = n.GetInt("output_width", 1);
    if (oh < 1 || ow < 1 || n.GetInt("sampling_ratio", 0) < 0) {
      return NodeError(n, "output_height and output_width must be positive, sampling_ratio non-negative");
    }
    out[0].shape.rank_known = true;
    out[0].shape.dims = {rois.rank_known ? rois.dims[0] : idx.rank_known ? idx.dims[0] : Dim{},
                         x.rank_known ? x.dims[1] : Dim{}, Dim{oh, ""}, Dim{ow, ""}};
    return absl::OkStatus();
  });
  // Random ops (runtime/cpu/kernels_random.cc): RandomUniform / RandomNormal of the `shape` attribute;
  // the *Like ops and Bernoulli of the input's shape; `dtype` attribute, else float / the input's dtype.
  for (const char* op : {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Bernoulli"}) {
    const bool like = std::string(op) != "RandomUniform" && std::string(op) != "RandomNormal";
    Reg(op, C::kOther, A::kDeny, like ? 1 : 0, like ? 1 : 0,
        [like](const Node& n, Inputs in, Outputs& out) -> absl::Status {
          DType t = like ? in[0].dtype : DType::kF32;
          if (n.HasAttr("dtype")) {
            t = OnnxCode(n.GetInt("dtype", 1));
            if (t == DType::kInvalid) return NodeError(n, absl::StrCat("unsupported dtype ", n.GetInt("dtype", 1)));
          }
          out[0].dtype = t;
          if (like) {
            out[0].shape = in[0].shape;
          } else {
            std::vector<int64_t> shape = n.GetInts("shape");
            for (int64_t d : shape) {
              if (d < 0) return NodeError(n, absl::StrCat("shape has a negative dim ", d));
            }
            out[0].shape = Shape::Of(shape);
          }
          return absl::OkStatus();
        });
  }
  Reg("Multinomial", C::kOther, A::kDeny, 1, 1, [](const Node& n, Inputs in, Outputs& out) -> absl::Status {
    DType t = OnnxCode(n.GetInt("dtype", 6));
    if (t != DType::kI32 && t != DType::kI64) return NodeError(n, "dtype must be int32 or int64");
    out[0].dtype = t;
    out[0].shape.rank_known = true;
    out[0].shape.dims = {in[0].shape.rank_known && in[0].shape.rank() == 2 ? in[0].shape.dims[0] : Dim{},
                         Dim{n.GetInt("sample_size", 1), ""}};
    return absl::OkStatus();
  });
  // TfIdfVectorizer-9: X [C] or [B, C] of int32 / int64 -> float [max(ngram_indexes) + 1] or [B, ...].
  Reg("TfIdfVectorizer", C::kOther, A::kDeny, 1, 1, [](const Node& n, Inputs in, Outputs& out) -> absl::Status {
    // X: int32 / int64 with pool_int64s, or string with pool_strings.
    const bool strings = n.HasAttr("pool_strings");
    if (strings && n.HasAttr("pool_int64s")) return NodeError(n, "has both pool_strings and pool_int64s");
    if (strings && in[0].dtype != DType::kInvalid && in[0].dtype != DType::kString) {
      return NodeError(n, absl::StrCat("X is ", DTypeName(in[0].dtype), "; pool_strings needs string X"));
    }
    if (!strings && in[0].dtype != DType::kInvalid && in[0].dtype != DType::kI32 && in[0].dtype != DType::kI64) {
      return NodeError(n, "X must be int32 or int64 (or string, with pool_strings)");
    }
    std::vector<int64_t> idx = n.GetInts("ngram_indexes");
    if (idx.empty()) return NodeError(n, "ngram_indexes is empty");
    int64_t size = 0;
    for (int64_t i : idx) {
      if (i < 0 || i >= (int64_t{1} << 31)) return NodeError(n, absl::StrCat("ngram_indexes has ", i));
      size = std::max(size, i + 1);
    }
    out[0].dtype = DType::kF32;
    const Shape& x = in[0].shape;
    if (x.rank_known && x.rank() > 2) return NodeError(n, absl::StrCat("X must be [C] or [B, C], got ", x.ToString()));
    out[0].shape.rank_known = x.rank_known;
    if (x.rank_known) {
      out[0].shape.dims = x.rank() == 2 ? std::vector<Dim>{x.dims[0], Dim{size, ""}} : std::vector<Dim>{Dim{size, ""}};
    }
    return absl::OkStatus();
  });
  Reg("Einsum", C::kContraction, A::kAllow, 1, 1 << 20, EinsumInfer);
  // Integer / quantized linear algebra (MatMulInteger, QLinearMatMul: shape_fns_math.cc; ConvInteger,
  // QLinearConv: shape_fns_nn.cc).
  Reg("GridSample", C::kOther, A::kInfer, 2, 2, [](const Node& n, Inputs in, Outputs& out) {
    out[0].dtype = in[0].dtype;
    const Shape& x = in[0].shape;
    const Shape& g = in[1].shape;
    // ONNX GridSample-16: X [N, C, H, W], grid [N, H_out, W_out, 2] of a float type.
    if ((x.rank_known && x.rank() != 4) || (g.rank_known && g.rank() != 4) ||
        (g.rank_known && g.dims[3].known() && g.dims[3].value != 2) ||
        (x.rank_known && g.rank_known && x.dims[0].known() && g.dims[0].known() &&
         x.dims[0].value != g.dims[0].value)) {
      return NodeError(n, absl::StrCat("X must be [N, C, H, W] and grid [N, H_out, W_out, 2], got ", x.ToString(),
                                       " and ", g.ToString()));
    }
    if (in[1].dtype != DType::kInvalid && !IsFloat(in[1].dtype)) return NodeError(n, "grid must be a float tensor");
    for (const char* attr : {"mode", "padding_mode"}) {
      std::string v = n.GetString(attr, "");
      if (!v.empty() && v != "bilinear" && v != "nearest" && v != "bicubic" && v != "zeros" && v != "border" &&
          v != "reflection") {
        return NodeError(n, absl::StrCat("unsupported ", attr, " '", v, "'"));
      }
    }
    if (x.rank_known && g.rank_known) {
      out[0].shape.rank_known = true;
      out[0].shape.dims = {x.dims[0], x.dims[1], g.dims[1], g.dims[2]};
    }
    return absl::OkStatus();
  });
}

}  // namespace cjit
