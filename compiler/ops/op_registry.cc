#include "compiler/ops/op_registry.h"

#include "compiler/ops/op_schemas.h"

#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cjit {
namespace {

std::map<std::string, OpDef, std::less<>>& RawTable() {
  static auto* raw = new std::map<std::string, OpDef, std::less<>>();
  return *raw;
}

std::map<std::string, OpDef, std::less<>>& Table() {
  auto* table = &RawTable();
  static bool registered = [] {
    RegisterMathOps();
    RegisterNnOps();
    RegisterTensorOps();
    RegisterMiscOps();
    RegisterSequenceOps();
    RegisterStringOps();
    AssignOpTraits(RawTable());
    return true;
  }();
  (void)registered;
  return *table;
}

}  // namespace

void RegisterOp(OpDef def) {
  std::string name = def.name;
  RawTable()[name] = std::move(def);
}



const OpDef* FindOp(absl::string_view domain, absl::string_view op_type) {
  bool internal = domain == kInternalDomain;
  if (!domain.empty() && domain != "ai.onnx" && !internal) return nullptr;
  auto it = Table().find(op_type);
  if (it == Table().end() || it->second.internal != internal) return nullptr;
  return &it->second;
}

const OpTraits& TraitsOf(absl::string_view domain, absl::string_view op_type) {
  static const OpTraits kNoTraits;
  const OpDef* def = FindOp(domain, op_type);
  return def == nullptr ? kNoTraits : def->traits;
}

std::vector<std::string> OpsWhere(const std::function<bool(const OpTraits&)>& pred) {
  std::vector<std::string> out;
  for (const auto& [k, v] : Table()) {
    if (!v.internal && pred(v.traits)) out.push_back(k);
  }
  return out;
}

std::vector<std::string> SupportedOps() {
  std::vector<std::string> out;
  for (const auto& [k, v] : Table()) {
    if (!v.internal) out.push_back(k);
  }
  return out;
}

absl::Status NodeError(const Node& node, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(node.Describe(), ": ", what));
}

absl::Status InferNode(const Node& node, std::span<const InferInput> inputs,
                       std::vector<InferOutput>& outputs) {
  const OpDef* def = FindOp(node.domain, node.op_type);
  if (def == nullptr) {
    return absl::UnimplementedError(absl::StrCat(node.Describe(), ": unsupported operator"));
  }
  int present = static_cast<int>(inputs.size());
  if (present < def->min_inputs || present > def->max_inputs) {
    return NodeError(node, absl::StrCat("has ", present, " inputs, expected ", def->min_inputs,
                                        def->max_inputs == def->min_inputs
                                            ? std::string()
                                            : absl::StrCat(" to ", def->max_inputs)));
  }
  for (int i = 0; i < def->min_inputs; ++i) {
    if (!inputs[i].present) return NodeError(node, absl::StrCat("required input ", i, " is missing"));
  }
  if (node.outputs.empty()) return NodeError(node, "has no outputs (every ONNX operator has at least one)");
  if (!def->string_values) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].present && inputs[i].dtype == DType::kString) {
        return NodeError(node,
                         absl::StrCat("input ", i, " is a string tensor; ", node.op_type, " does not take strings"));
      }
    }
  }
  if (!def->non_tensor_values) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].present && inputs[i].kind != ValueKind::kTensor) {
        return NodeError(node, absl::StrCat("input ", i, " is a ", ValueKindName(inputs[i].kind), "; ", node.op_type,
                                            " takes tensors"));
      }
    }
  }
  // Element types against the ONNX type constraints of the version in force (op_schemas.h): kernels read
  // their inputs with the types the constraints promise (an int64 Y with a float32 X would be read past
  // its end).
  if (node.domain.empty() && node.opset_version > 0) {
    int first = 0;
    if (const OpSchemaVersion* schema = FindOpSchema(node.op_type, static_cast<int>(node.opset_version), &first)) {
      std::vector<DType> dtypes;
      // The table lists numeric tensor types only: sequences, optionals and strings are typed by their ops'
      // shape functions (non_tensor_values, string_values).
      for (const InferInput& in : inputs) {
        const bool checked = in.present && in.kind == ValueKind::kTensor && in.dtype != DType::kString;
        dtypes.push_back(checked ? in.dtype : DType::kInvalid);
      }
      std::string bad = CheckInputTypes(*schema, dtypes);
      if (!bad.empty()) return NodeError(node, bad);
    }
  }
  return InferNodeDims(*def, node, inputs, outputs);
}

absl::Status InferNodeDims(const OpDef& def, const Node& node, std::span<const InferInput> inputs,
                           std::vector<InferOutput>& outputs) {
  outputs.assign(node.outputs.size(), InferOutput{});
  absl::Status st;
  try {
    st = def.infer(node, inputs, outputs);
  } catch (const std::exception& e) {  // IndexError from Tensor::dim on a constant input, a bad_alloc...
    return NodeError(node, e.what());
  }
  if (!st.ok()) return st;
  // A shape that cannot be allocated is an error here, not an abort later.
  for (const InferOutput& o : outputs) {
    if (!o.shape.fully_known()) continue;
    absl::StatusOr<size_t> bytes =
        CheckedByteSize(o.dtype == DType::kInvalid ? DType::kU8 : o.dtype, o.shape.concrete());
    if (!bytes.ok())
      return NodeError(node, absl::StrCat("output ", o.shape.ToString(), ": ", bytes.status().message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<Shape> BroadcastShapes(const Node& node, const std::vector<Shape>& shapes) {
  Shape out;
  out.rank_known = true;
  int rank = 0;
  for (const Shape& s : shapes) {
    if (!s.rank_known) return Shape::Unknown();
    rank = std::max(rank, s.rank());
  }
  out.dims.assign(rank, Dim{1, ""});
  for (const Shape& s : shapes) {
    int off = rank - s.rank();
    for (int i = 0; i < s.rank(); ++i) {
      Dim& o = out.dims[off + i];
      const Dim& d = s.dims[i];
      if (d.known() && d.value == 1) continue;
      if (o.known() && o.value == 1) {
        o = d;
      } else if (d.known() && o.known()) {
        if (d.value != o.value) {
          std::vector<std::string> strs;
          for (const Shape& t : shapes) strs.push_back(t.ToString());
          return NodeError(node, absl::StrCat("cannot broadcast shapes ", absl::StrJoin(strs, " and ")));
        }
      } else if (!d.known() && o.known()) {
        // o is known and != 1, so d must equal it (or be 1): keep o.
      } else if (!d.known() && !o.known()) {
        if (!(d.symbol == o.symbol && !d.symbol.empty())) o = Dim{};
      }
    }
  }
  return out;
}

absl::StatusOr<Shape> ShapeFromValues(const Node& node, const std::vector<int64_t>& dims, absl::string_view what) {
  for (int64_t d : dims) {
    if (d < 0) {
      return NodeError(node, absl::StrCat(what, " has a negative dim ", d, " (", absl::StrJoin(dims, ","), ")"));
    }
  }
  return Shape::Of(dims);
}

absl::StatusOr<int> NormalizeAxis(const Node& node, int64_t axis, int rank) {
  // ONNX: axis in [-r, r - 1]; a scalar (rank 0) has no axis.
  if (axis < -rank || axis >= rank) {
    return NodeError(node, absl::StrCat("axis ", axis, " is out of range for rank ", rank));
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

}  // namespace cjit

namespace cjit {

absl::StatusOr<std::vector<int64_t>> AttrOrInputInts(const Node& node, std::span<const InferInput> in,
                                                     const std::string& attr, int input_index,
                                                     bool* present, bool* known) {
  *known = true;
  *present = false;
  if (node.HasAttr(attr)) {
    *present = true;
    return node.GetInts(attr);
  }
  if (input_index < static_cast<int>(in.size()) && in[input_index].present) {
    *present = true;
    if (in[input_index].value == nullptr) {
      *known = false;
      return std::vector<int64_t>{};
    }
    return in[input_index].value->ToInt64Vector();
  }
  return std::vector<int64_t>{};
}

absl::StatusOr<WindowGeometry> ComputeWindowGeometry(const Node& node, const std::vector<int64_t>& in,
                                                     const std::vector<int64_t>& kernel,
                                                     bool transposed, bool ceil_mode) {
  size_t n = in.size();
  WindowGeometry g;
  g.kernel = kernel;
  g.strides = node.GetInts("strides", std::vector<int64_t>(n, 1));
  g.dilations = node.GetInts("dilations", std::vector<int64_t>(n, 1));
  std::vector<int64_t> pads = node.GetInts("pads", std::vector<int64_t>(2 * n, 0));
  if (g.kernel.size() != n || g.strides.size() != n || g.dilations.size() != n || pads.size() != 2 * n) {
    return NodeError(node, absl::StrCat("kernel_shape/strides/dilations/pads do not match ", n,
                                        " spatial dims"));
  }
  // Bounds that keep every product below in int64 (dims are below 2^40: CheckedByteSize); ONNX requires
  // positive strides/dilations/kernel sizes and non-negative pads.
  constexpr int64_t kMaxWindowAttr = int64_t{1} << 24;
  for (size_t i = 0; i < n; ++i) {
    if (g.strides[i] <= 0 || g.dilations[i] <= 0 || g.kernel[i] <= 0) {
      return NodeError(node, "strides, dilations and kernel sizes must be positive");
    }
    if (g.strides[i] > kMaxWindowAttr || g.dilations[i] > kMaxWindowAttr || g.kernel[i] > kMaxWindowAttr ||
        in[i] > (int64_t{1} << 40)) {
      return NodeError(node, absl::StrCat("strides, dilations and kernel sizes must be at most ", kMaxWindowAttr));
    }
  }
  for (int64_t p : pads) {
    if (p < 0 || p > kMaxWindowAttr) {
      return NodeError(node, absl::StrCat("pads must be in [0, ", kMaxWindowAttr, "], got ", p));
    }
  }
  g.pad_begin.assign(pads.begin(), pads.begin() + n);
  g.pad_end.assign(pads.begin() + n, pads.end());
  std::string auto_pad = node.GetString("auto_pad", "NOTSET");
  g.out.resize(n);
  std::vector<int64_t> out_pad = node.GetInts("output_padding", std::vector<int64_t>(n, 0));
  std::vector<int64_t> out_shape = node.GetInts("output_shape");
  if (transposed) {
    if (out_pad.size() != n) {
      return NodeError(node, absl::StrCat("output_padding has ", out_pad.size(), " values for ", n, " spatial dims"));
    }
    if (!out_shape.empty() && out_shape.size() != n && out_shape.size() != n + 2) {
      return NodeError(node, absl::StrCat("output_shape has ", out_shape.size(), " values for ", n, " spatial dims"));
    }
    for (size_t i = 0; i < n; ++i) {
      if (out_pad[i] < 0 || out_pad[i] > kMaxWindowAttr) {
        return NodeError(node, absl::StrCat("output_padding must be in [0, ", kMaxWindowAttr, "], got ", out_pad[i]));
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    int64_t eff_k = (g.kernel[i] - 1) * g.dilations[i] + 1;
    if (!transposed) {
      if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
        int64_t out = (in[i] + g.strides[i] - 1) / g.strides[i];
        int64_t total = std::max<int64_t>(0, (out - 1) * g.strides[i] + eff_k - in[i]);
        int64_t small = total / 2, large = total - small;
        g.pad_begin[i] = auto_pad == "SAME_UPPER" ? small : large;
        g.pad_end[i] = auto_pad == "SAME_UPPER" ? large : small;
        g.out[i] = out;
      } else {
        if (auto_pad == "VALID") g.pad_begin[i] = g.pad_end[i] = 0;
        int64_t span = in[i] + g.pad_begin[i] + g.pad_end[i] - eff_k;
        if (span < 0) return NodeError(node, "kernel is larger than the padded input");
        int64_t out = (ceil_mode ? (span + g.strides[i] - 1) / g.strides[i] : span / g.strides[i]) + 1;
        // ceil_mode: the last window must start inside the input or left padding.
        if (ceil_mode && (out - 1) * g.strides[i] >= in[i] + g.pad_begin[i]) --out;
        g.out[i] = out;
      }
    } else {
      int64_t full = g.strides[i] * (in[i] - 1) + out_pad[i] + eff_k;
      if (!out_shape.empty()) {
        int64_t target = out_shape[out_shape.size() - n + i];
        // Checked before the subtraction: a hostile output_shape (INT64_MIN / huge) must not overflow it. A
        // target beyond the full output gives negative pads: the output extends with zeros (ONNX's formula,
        // with its floor division: the extension goes to the end, as the ONNX reference computes).
        if (target <= 0 || target > full + kMaxWindowAttr) {
          return NodeError(node, absl::StrCat("output_shape ", target, " along spatial dim ", i,
                                              " is outside [1, ", full + kMaxWindowAttr, "] (the full output is ", full,
                                              ")"));
        }
        const int64_t total = full - target;
        const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);  // floor(total / 2)
        if (auto_pad == "SAME_UPPER") {
          g.pad_begin[i] = half;
          g.pad_end[i] = total - half;
        } else {
          g.pad_end[i] = half;
          g.pad_begin[i] = total - half;
        }
        g.out[i] = target;
      } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
        int64_t target = in[i] * g.strides[i];
        int64_t total = std::max<int64_t>(0, full - target);
        if (auto_pad == "SAME_UPPER") {
          g.pad_begin[i] = total / 2;
          g.pad_end[i] = total - total / 2;
        } else {
          g.pad_end[i] = total / 2;
          g.pad_begin[i] = total - total / 2;
        }
        g.out[i] = target;
      } else {
        if (auto_pad == "VALID") g.pad_begin[i] = g.pad_end[i] = 0;
        g.out[i] = full - g.pad_begin[i] - g.pad_end[i];
      }
    }
    if (g.out[i] <= 0) return NodeError(node, "output spatial size is not positive");
  }
  return g;
}

}  // namespace cjit
