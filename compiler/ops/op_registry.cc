#include "compiler/ops/op_registry.h"

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
  if (!domain.empty() && domain != "ai.onnx") return nullptr;
  auto it = Table().find(op_type);
  return it == Table().end() ? nullptr : &it->second;
}

std::vector<std::string> SupportedOps() {
  std::vector<std::string> out;
  for (const auto& [k, v] : Table()) out.push_back(k);
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
  outputs.assign(node.outputs.size(), InferOutput{});
  absl::Status st = def->infer(node, inputs, outputs);
  if (!st.ok()) return st;
  // A shape that cannot be allocated is an error here, not an abort later.
  for (const InferOutput& o : outputs) {
    if (!o.shape.fully_known()) continue;
    absl::StatusOr<size_t> bytes = CheckedByteSize(o.dtype == DType::kInvalid ? DType::kU8 : o.dtype, o.shape.concrete());
    if (!bytes.ok()) return NodeError(node, absl::StrCat("output ", o.shape.ToString(), ": ", bytes.status().message()));
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
  if (axis < -rank || axis >= std::max(rank, 1) + (rank == 0 ? 0 : 0)) {
    if (!(rank == 0 && (axis == 0 || axis == -1))) {
      return NodeError(node, absl::StrCat("axis ", axis, " is out of range for rank ", rank));
    }
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
  for (size_t i = 0; i < n; ++i) {
    if (g.strides[i] <= 0 || g.dilations[i] <= 0 || g.kernel[i] <= 0) {
      return NodeError(node, "strides, dilations and kernel sizes must be positive");
    }
  }
  g.pad_begin.assign(pads.begin(), pads.begin() + n);
  g.pad_end.assign(pads.begin() + n, pads.end());
  std::string auto_pad = node.GetString("auto_pad", "NOTSET");
  g.out.resize(n);
  std::vector<int64_t> out_pad = node.GetInts("output_padding", std::vector<int64_t>(n, 0));
  std::vector<int64_t> out_shape = node.GetInts("output_shape");
  if (out_pad.size() != n) out_pad.assign(n, 0);
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
        int64_t total = full - target;
        if (auto_pad == "SAME_UPPER") {
          g.pad_begin[i] = total / 2;
          g.pad_end[i] = total - total / 2;
        } else {
          g.pad_end[i] = total / 2;
          g.pad_begin[i] = total - total / 2;
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
