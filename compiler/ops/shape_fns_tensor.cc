// Shape/dtype functions of data-movement, shape and control-flow operators
// (ONNX operator specification, opsets 7-21).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/ops/op_registry.h"
#include "compiler/ops/shape_fn_util.h"

namespace cjit {
namespace {

using namespace shape_fn;  // NOLINT: Inputs, Outputs, C, A, Reg

// The output shape of an op whose value inputs (pads, starts, repeats, a target shape...) are not known yet:
// rank r, dims unknown. Rank 0 stays wholly unknown: a scalar shape would read as fully known, and the
// executor would then skip the run-time inference that validates those values (fuzzer: Pad of a scalar
// with 8 pads and axes out of range reached its kernel).
Shape UnknownDimsOfRank(int r) {
  if (r == 0) return Shape::Unknown();
  Shape s;
  s.rank_known = true;
  s.dims.assign(r, Dim{});
  return s;
}

absl::Status ReshapeInfer(const Node& n, Inputs in, Outputs& out) {
  out[0].dtype = in[0].dtype;
  const Shape& x = in[0].shape;
  if (in[1].value == nullptr) {
    if (in[1].shape.fully_known() && in[1].shape.rank() == 1) {
      out[0].shape = UnknownDimsOfRank(static_cast<int>(in[1].shape.dims[0].value));
    }
    return absl::OkStatus();
  }
  std::vector<int64_t> target = in[1].value->ToInt64Vector();
  bool allowzero = n.GetInt("allowzero", 0) != 0;
  Shape s;
  s.rank_known = true;
  int infer_at = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t t = target[i];
    if (t == 0 && !allowzero) {
      if (!x.rank_known || static_cast<int>(i) >= x.rank()) {
        if (!x.rank_known) { s.dims.push_back(Dim{}); continue; }
        return NodeError(n, "shape has 0 at an index past the input rank");
      }
      s.dims.push_back(x.dims[i]);
    } else if (t == -1) {
      if (infer_at >= 0) return NodeError(n, "shape has more than one -1");
      infer_at = static_cast<int>(i);
      s.dims.push_back(Dim{});
    } else if (t < -1) {
      return NodeError(n, absl::StrCat("invalid target dim ", t));
    } else {
      s.dims.push_back(Dim{t, ""});
    }
  }
  if (x.fully_known()) {
    int64_t total = NumElements(x.concrete());
    int64_t known = 1;
    for (int i = 0; i < s.rank(); ++i) {
      if (i != infer_at && __builtin_mul_overflow(known, s.dims[i].value, &known)) {
        return NodeError(n, absl::StrCat("target shape ", s.ToString(), " has more elements than int64 holds"));
      }
    }
    if (infer_at >= 0) {
      if (known == 0 || total % known != 0) {
        return NodeError(n, absl::StrCat("cannot reshape ", x.ToString(), " to ", s.ToString()));
      }
      s.dims[infer_at] = Dim{total / known, ""};
    } else if (known != total) {
      return NodeError(n, absl::StrCat("cannot reshape ", x.ToString(), " (", total, " elements) to ",
                                       Shape::Of([&] {
                                         Dims d;
                                         for (auto& q : s.dims) d.push_back(q.value);
                                         return d;
                                       }())
                                           .ToString()));
    }
  }
  out[0].shape = s;
  return absl::OkStatus();
}

absl::Status FlattenInfer(const Node& n, Inputs in, Outputs& out) {
  out[0].dtype = in[0].dtype;
  const Shape& x = in[0].shape;
  if (!x.rank_known) return absl::OkStatus();
  int64_t axis = n.GetInt("axis", 1);
  if (axis < 0) axis += x.rank();
  if (axis < 0 || axis > x.rank()) return NodeError(n, "axis out of range");
  Dim a{1, ""}, b{1, ""};
  for (int i = 0; i < x.rank(); ++i) {
    Dim& t = i < axis ? a : b;
    if (t.known() && x.dims[i].known()) t.value *= x.dims[i].value;
    else t = Dim{};
  }
  out[0].shape.rank_known = true;
  out[0].shape.dims = {a, b};
  return absl::OkStatus();
}

absl::Status SqueezeInfer(const Node& n, Inputs in, Outputs& out) {
  out[0].dtype = in[0].dtype;
  const Shape& x = in[0].shape;
  bool present, known;
  CJIT_ASSIGN_OR_RETURN(std::vector<int64_t> axes, AttrOrInputInts(n, in, "axes", 1, &present, &known));
  if (!x.rank_known || !known) return absl::OkStatus();
  std::vector<bool> drop(x.rank(), false);
  if (!present || axes.empty()) {
    for (int i = 0; i < x.rank(); ++i) {
      if (!x.dims[i].known()) return absl::OkStatus();
      drop[i] = x.dims[i].value == 1;
    }
  } else {
    for (int64_t a : axes) {
      CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(n, a, x.rank()));
      if (x.dims[ax].known() && x.dims[ax].value != 1) {
        return NodeError(n, absl::StrCat("cannot squeeze axis ", a, " of size ", x.dims[ax].value));
      }
      drop[ax] = true;
    }
  }
  out[0].shape.rank_known = true;
  for (int i = 0; i < x.rank(); ++i) if (!drop[i]) out[0].shape.dims.push_back(x.dims[i]);
  return absl::OkStatus();
}

absl::Status UnsqueezeInfer(const Node& n, Inputs in, Outputs& out) {
  out[0].dtype = in[0].dtype;
  const Shape& x = in[0].shape;
  bool present, known;
  CJIT_ASSIGN_OR_RETURN(std::vector<int64_t> axes, AttrOrInputInts(n, in, "axes", 1, &present, &known));
  if (!present) return NodeError(n, "axes is required");
  if (!x.rank_known || !known) return absl::OkStatus();
  int r = x.rank() + static_cast<int>(axes.size());
  std::vector<bool> is_new(r, false);
  for (int64_t a : axes) {
    CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(n, a, r));
    if (is_new[ax]) return NodeError(n, "duplicate axis");
    is_new[ax] = true;
  }
  out[0].shape.rank_known = true;
  int k = 0;
  for (int i = 0; i < r; ++i) out[0].shape.dims.push_back(is_new[i] ? Dim{1, ""} : x.dims[k++]);
  return absl::OkStatus();
}

absl::Status TransposeInfer(const Node& n, Inputs in, Outputs& out) {
  out[0].dtype = in[0].dtype;
  const Shape& x = in[0].shape;
  if (!x.rank_known) return absl::OkStatus();
  std::vector<int64_t> perm = n.GetInts("perm");
  if (perm.empty()) for (int i = x.rank() - 1; i >= 0; --i) perm.push_back(i);
  if (static_cast<int>(perm.size()) != x.rank()) return NodeError(n, "perm length differs from rank");
  std::vector<bool> seen(x.rank(), false);
  out[0].shape.rank_known = true;
  for (int64_t p : perm) {
    if (p < 0 || p >= x.rank() || seen[p]) return NodeError(n, "perm is not a permutation");
    seen[p] = true;
    out[0].shape.dims.push_back(x.dims[p]);
  }
  return absl::OkStatus();
}

}  // namespace

// Elements Slice takes from a dim of size `dim` (ONNX Slice: negative start/end count from the end, then
// clamp to [0, dim] for positive steps and [-1, dim-1] for negative ones). Computed in 128 bits: starts,
// ends and steps may be any int64 (INT64_MIN included) without overflow.
int64_t SliceCount(int64_t dim, int64_t start, int64_t end, int64_t step) {
  __int128 s = start, e = end, st = step, d = dim;
  if (s < 0) s += d;
  if (e < 0) e += d;
  if (st > 0) {
    s = std::clamp<__int128>(s, 0, d);
    e = std::clamp<__int128>(e, 0, d);
    return e > s ? static_cast<int64_t>((e - s + st - 1) / st) : 0;
  }
  if (d == 0) return 0;  // nothing to take backwards (and [0, d - 1] would be an empty clamp range)
  s = std::clamp<__int128>(s, 0, d - 1);
  e = std::clamp<__int128>(e, -1, d - 1);
  return s > e ? static_cast<int64_t>((s - e + (-st) - 1) / (-st)) : 0;
}

namespace {

absl::Status SliceInfer(const Node& n, Inputs in, Outputs& out) {
  out[0].dtype = in[0].dtype;
  const Shape& x = in[0].shape;
  if (!x.rank_known) return absl::OkStatus();
  std::vector<int64_t> starts, ends, axes, steps;
  if (n.HasAttr("starts")) {  // opset < 10
    starts = n.GetInts("starts");
    ends = n.GetInts("ends");
    axes = n.GetInts("axes");
  } else {
    for (int i = 1; i < static_cast<int>(in.size()); ++i) {
      if (in[i].present && in[i].value == nullptr) {
        out[0].shape = UnknownDimsOfRank(x.rank());
        return absl::OkStatus();
      }
    }
    starts = in[1].value->ToInt64Vector();
    ends = in[2].value->ToInt64Vector();
    if (in.size() > 3 && in[3].present) axes = in[3].value->ToInt64Vector();
    if (in.size() > 4 && in[4].present) steps = in[4].value->ToInt64Vector();
  }
  if (axes.empty()) for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
    return NodeError(n, "starts/ends/axes/steps lengths differ");
  }
  out[0].shape = x;
  for (size_t k = 0; k < starts.size(); ++k) {
    CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(n, axes[k], x.rank()));
    if (steps[k] == 0) return NodeError(n, "step is 0");
    const Dim& d = x.dims[ax];
    if (!d.known()) {
      out[0].shape.dims[ax] = Dim{};
      continue;
    }
    out[0].shape.dims[ax] = Dim{SliceCount(d.value, starts[k], ends[k], steps[k]), ""};
  }
  return absl::OkStatus();
}

absl::Status ConcatInfer(const Node& n, Inputs in, Outputs& out) {
  out[0].dtype = in[0].dtype;
  int r = -1;
  for (const InferInput& i : in) if (i.shape.rank_known) r = i.shape.rank();
  if (!n.HasAttr("axis") && n.opset_version >= 4) return NodeError(n, "the required attribute 'axis' is missing");
  if (r < 0) return absl::OkStatus();
  CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(n, n.GetInt("axis", 0), r));
  Shape s = UnknownDimsOfRank(r);
  Dim total{0, ""};
  bool first = true;
  for (const InferInput& i : in) {
    if (!i.shape.rank_known) { total = Dim{}; continue; }
    if (i.shape.rank() != r) return NodeError(n, "inputs have different ranks");
    for (int d = 0; d < r; ++d) {
      if (d == ax) continue;
      if (first || (!s.dims[d].known() && i.shape.dims[d].known())) s.dims[d] = i.shape.dims[d];
      else if (s.dims[d].known() && i.shape.dims[d].known() && s.dims[d].value != i.shape.dims[d].value) {
        return NodeError(n, absl::StrCat("inputs differ in dim ", d, " (", s.dims[d].value, " vs ",
                                         i.shape.dims[d].value, ")"));
      }
    }
    first = false;
    if (total.known() && i.shape.dims[ax].known()) total.value += i.shape.dims[ax].value;
    else total = Dim{};
  }
  s.dims[ax] = total;
  out[0].shape = s;
  return absl::OkStatus();
}

absl::Status SplitInfer(const Node& n, Inputs in, Outputs& out) {
  const Shape& x = in[0].shape;
  for (auto& o : out) o.dtype = in[0].dtype;
  if (!x.rank_known) return absl::OkStatus();
  CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(n, n.GetInt("axis", 0), x.rank()));
  bool present, known;
  CJIT_ASSIGN_OR_RETURN(std::vector<int64_t> split, AttrOrInputInts(n, in, "split", 1, &present, &known));
  for (auto& o : out) o.shape = x;
  const Dim& d = x.dims[ax];
  if (!known || (!present && !d.known()) || (present && split.empty() && !d.known())) {
    for (auto& o : out) o.shape.dims[ax] = Dim{};
    return absl::OkStatus();
  }
  int k = static_cast<int>(out.size());
  if (split.empty()) {
    int64_t chunk = (d.value + k - 1) / k;
    for (int i = 0; i < k; ++i) split.push_back(std::max<int64_t>(0, std::min(chunk, d.value - i * chunk)));
  }
  if (static_cast<int>(split.size()) != k) return NodeError(n, "split has a different length than outputs");
  int64_t sum = 0;
  for (int64_t v : split) {
    if (v < 0) return NodeError(n, absl::StrCat("split has a negative size ", v));
    if (v > (int64_t{1} << 62) - sum) return NodeError(n, "split sizes overflow");
    sum += v;
  }
  if (d.known() && sum != d.value) return NodeError(n, "split does not sum to the axis size");
  for (int i = 0; i < k; ++i) out[i].shape.dims[ax] = Dim{split[i], ""};
  return absl::OkStatus();
}

absl::Status GatherInfer(const Node& n, Inputs in, Outputs& out) {
  out[0].dtype = in[0].dtype;
  const Shape& x = in[0].shape;
  const Shape& idx = in[1].shape;
  if (!x.rank_known || !idx.rank_known) return absl::OkStatus();
  CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(n, n.GetInt("axis", 0), x.rank()));
  out[0].shape.rank_known = true;
  for (int i = 0; i < ax; ++i) out[0].shape.dims.push_back(x.dims[i]);
  for (const Dim& d : idx.dims) out[0].shape.dims.push_back(d);
  for (int i = ax + 1; i < x.rank(); ++i) out[0].shape.dims.push_back(x.dims[i]);
  return absl::OkStatus();
}

absl::Status GatherNDInfer(const Node& n, Inputs in, Outputs& out) {
  out[0].dtype = in[0].dtype;
  const Shape& x = in[0].shape;
  const Shape& idx = in[1].shape;
  if (!x.rank_known || !idx.rank_known || idx.rank() == 0 || !idx.dims.back().known()) {
    return absl::OkStatus();
  }
  // ONNX GatherND: 0 <= batch_dims < min(rank(data), rank(indices)), 1 <= indices.shape[-1] <= rank(data) -
  // batch_dims.
  int64_t batch_dims = n.GetInt("batch_dims", 0);
  if (batch_dims < 0 || batch_dims >= std::min(x.rank(), idx.rank())) {
    return NodeError(n, absl::StrCat("batch_dims ", batch_dims, " is not in [0, min(rank(data), rank(indices)))"));
  }
  int b = static_cast<int>(batch_dims);
  int64_t last = idx.dims.back().value;
  if (last < 1 || last > x.rank() - b) {
    return NodeError(n, absl::StrCat("indices' last dim ", last, " is not in [1, rank(data) - batch_dims = ",
                                     x.rank() - b, "]"));
  }
  out[0].shape.rank_known = true;
  for (int i = 0; i < idx.rank() - 1; ++i) out[0].shape.dims.push_back(idx.dims[i]);
  for (int i = b + static_cast<int>(last); i < x.rank(); ++i) out[0].shape.dims.push_back(x.dims[i]);
  return absl::OkStatus();
}

absl::Status PadInfer(const Node& n, Inputs in, Outputs& out) {
  out[0].dtype = in[0].dtype;
  const Shape& x = in[0].shape;
  if (!x.rank_known) return absl::OkStatus();
  bool present, known;
  CJIT_ASSIGN_OR_RETURN(std::vector<int64_t> pads, AttrOrInputInts(n, in, "pads", 1, &present, &known));
  if (!known) {
    out[0].shape = UnknownDimsOfRank(x.rank());
    return absl::OkStatus();
  }
  int r = x.rank();
  std::vector<int> axes;
  if (in.size() > 3 && in[3].present) {
    if (!in[3].value) { out[0].shape = UnknownDimsOfRank(r); return absl::OkStatus(); }
    for (int64_t a : in[3].value->ToInt64Vector()) {
      CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(n, a, r));
      axes.push_back(ax);
    }
  } else {
    for (int i = 0; i < r; ++i) axes.push_back(i);
  }
  if (pads.size() != 2 * axes.size()) return NodeError(n, "pads has the wrong length");
  std::string mode = n.GetString("mode", "constant");
  if (mode != "constant" && mode != "edge" && mode != "reflect" && mode != "wrap") {
    return NodeError(n, absl::StrCat("unknown mode '", mode, "'"));
  }
  out[0].shape = x;
  for (size_t k = 0; k < axes.size(); ++k) {
    Dim& d = out[0].shape.dims[axes[k]];
    int64_t before = pads[k], after = pads[k + axes.size()];
    if (d.known()) {
      if (mode != "constant" && d.value == 0 && (before > 0 || after > 0)) {
        return NodeError(n, absl::StrCat("cannot pad an empty axis ", axes[k], " in '", mode,
                                         "' mode (there is nothing to repeat)"));
      }
      if (mode == "reflect" && (before >= d.value || after >= d.value) && (before > 0 || after > 0)) {
        return NodeError(n, absl::StrCat("reflect pads (", before, ", ", after, ") must be smaller than axis ",
                                         axes[k], " of size ", d.value));
      }
      __int128 v = static_cast<__int128>(d.value) + before + after;
      if (v < 0) return NodeError(n, "negative padded size");
      if (v > (int64_t{1} << 40)) return NodeError(n, "padded size is too large");
      d.value = static_cast<int64_t>(v);
    }
  }
  return absl::OkStatus();
}

absl::Status ExpandInfer(const Node& n, Inputs in, Outputs& out) {
  out[0].dtype = in[0].dtype;
  if (in[1].value == nullptr) return absl::OkStatus();
  CJIT_ASSIGN_OR_RETURN(Shape target, ShapeFromValues(n, in[1].value->ToInt64Vector(), "the shape input"));
  CJIT_ASSIGN_OR_RETURN(Shape s, BroadcastShapes(n, {in[0].shape, target}));
  out[0].shape = s;
  return absl::OkStatus();
}

absl::Status TileInfer(const Node& n, Inputs in, Outputs& out) {
  out[0].dtype = in[0].dtype;
  const Shape& x = in[0].shape;
  if (!x.rank_known) return absl::OkStatus();
  if (in[1].value == nullptr) {
    out[0].shape = UnknownDimsOfRank(x.rank());
    return absl::OkStatus();
  }
  std::vector<int64_t> reps = in[1].value->ToInt64Vector();
  if (static_cast<int>(reps.size()) != x.rank()) return NodeError(n, "repeats length differs from rank");
  out[0].shape = x;
  for (int i = 0; i < x.rank(); ++i) {
    if (reps[i] < 0) return NodeError(n, absl::StrCat("repeats has a negative value ", reps[i]));
    if (x.dims[i].known()) {
      if (reps[i] > 0 && x.dims[i].value > (int64_t{1} << 40) / reps[i]) return NodeError(n, "repeats are too large");
      out[0].shape.dims[i] = Dim{x.dims[i].value * reps[i], ""};
    }
  }
  return absl::OkStatus();
}

absl::Status ShapeInfer(const Node& n, Inputs in, Outputs& out) {
  out[0].dtype = DType::kI64;
  const Shape& x = in[0].shape;
  if (!x.rank_known) return absl::OkStatus();
  int64_t r = x.rank();
  int64_t start = n.GetInt("start", 0), end = n.GetInt("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, 0, r);
  out[0].shape = Shape::Of({std::max<int64_t>(0, end - start)});
  return absl::OkStatus();
}

absl::Status TopKInfer(const Node& n, Inputs in, Outputs& out) {
  out[0].dtype = in[0].dtype;
  out[1].dtype = DType::kI64;
  const Shape& x = in[0].shape;
  if (!x.rank_known) return absl::OkStatus();
  CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(n, n.GetInt("axis", -1), x.rank()));
  Shape s = x;
  if (n.HasAttr("k")) s.dims[ax] = Dim{n.GetInt("k", 0), ""};
  else if (in.size() > 1 && in[1].value) s.dims[ax] = Dim{in[1].value->ToInt64Vector().at(0), ""};
  else s.dims[ax] = Dim{};
  out[0].shape = out[1].shape = s;
  return absl::OkStatus();
}

absl::Status DataDependent(const Node&, Inputs in, Outputs& out) {
  for (auto& o : out) o.dtype = in[0].dtype;
  return absl::OkStatus();
}

}  // namespace

void RegisterTensorOps() {
  auto same = [](const Node&, Inputs in, Outputs& out) {
    for (size_t i = 0; i < out.size() && i < in.size(); ++i) out[i] = {in[i].dtype, in[i].shape, in[i].kind};
    return absl::OkStatus();
  };
  // Identity-14+ passes sequences and optionals through as well (a cluster boundary then: mark_for_compilation).
  RegNonTensor("Identity", C::kDataMovement, true, A::kInfer, 1, 1, same);
  Reg("Dropout", C::kDataMovement, true, A::kInfer, 1, 3, [](const Node&, Inputs in, Outputs& out) {
    out[0] = {in[0].dtype, in[0].shape};
    if (out.size() > 1) out[1] = {DType::kBool, in[0].shape};
    return absl::OkStatus();
  });
  Reg("Reshape", C::kDataMovement, true, A::kInfer, 2, 2, ReshapeInfer);
  Reg("Flatten", C::kDataMovement, true, A::kInfer, 1, 1, FlattenInfer);
  Reg("Squeeze", C::kDataMovement, true, A::kInfer, 1, 2, SqueezeInfer);
  Reg("Unsqueeze", C::kDataMovement, true, A::kInfer, 1, 2, UnsqueezeInfer);
  Reg("Transpose", C::kDataMovement, true, A::kInfer, 1, 1, TransposeInfer);
  Reg("Slice", C::kDataMovement, true, A::kInfer, 1, 5, SliceInfer);
  Reg("Concat", C::kDataMovement, true, A::kInfer, 1, 1 << 20, ConcatInfer);
  Reg("Split", C::kDataMovement, true, A::kInfer, 1, 2, SplitInfer);
  Reg("Gather", C::kDataMovement, true, A::kInfer, 2, 2, GatherInfer);
  Reg("GatherElements", C::kDataMovement, true, A::kInfer, 2, 2, [](const Node&, Inputs in, Outputs& out) {
    out[0] = {in[0].dtype, in[1].shape};
    return absl::OkStatus();
  });
  Reg("GatherND", C::kDataMovement, false, A::kInfer, 2, 2, GatherNDInfer);
  for (const char* op : {"ScatterElements", "Scatter", "ScatterND"}) {
    Reg(op, C::kDataMovement, false, A::kInfer, 3, 3, [](const Node& n, Inputs in, Outputs& out) -> absl::Status {
      out[0] = {in[0].dtype, in[0].shape};
      std::string reduction = n.GetString("reduction", "none");
      if (reduction != "none" && reduction != "add" && reduction != "mul" && reduction != "max" && reduction != "min") {
        return NodeError(n, absl::StrCat("unknown reduction '", reduction, "'"));
      }
      if (n.op_type != "ScatterND" && in[1].shape.rank_known && in[2].shape.rank_known &&
          in[1].shape.dims != in[2].shape.dims && in[1].shape.fully_known() && in[2].shape.fully_known()) {
        return NodeError(n, "indices and updates have different shapes");
      }
      return absl::OkStatus();
    });
  }
  Reg("Pad", C::kDataMovement, true, A::kInfer, 1, 4, PadInfer);
  // CenterCropPad-18: each axis of `axes` (default all) cropped or zero-padded, centred, to `shape`.
  Reg("CenterCropPad", C::kDataMovement, false, A::kInfer, 2, 2,
      [](const Node& n, Inputs in, Outputs& out) -> absl::Status {
        out[0].dtype = in[0].dtype;
        const Shape& x = in[0].shape;
        if (!x.rank_known) return absl::OkStatus();
        std::vector<int64_t> axes = n.GetInts("axes");
        if (axes.empty())
          for (int i = 0; i < x.rank(); ++i) axes.push_back(i);
        out[0].shape = x;
        if (in[1].value == nullptr) {
          for (int64_t a : axes) {
            CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(n, a, x.rank()));
            out[0].shape.dims[ax] = Dim{};
          }
          return absl::OkStatus();
        }
        std::vector<int64_t> shape = in[1].value->ToInt64Vector();
        if (shape.size() != axes.size()) {
          return NodeError(n, absl::StrCat("shape has ", shape.size(), " values for ", axes.size(), " axes"));
        }
        std::vector<bool> seen(x.rank(), false);
        for (size_t k = 0; k < axes.size(); ++k) {
          CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(n, axes[k], x.rank()));
          if (seen[ax]) return NodeError(n, absl::StrCat("axis ", axes[k], " is given twice"));
          seen[ax] = true;
          if (shape[k] < 0) return NodeError(n, absl::StrCat("shape has a negative value ", shape[k]));
          out[0].shape.dims[ax] = Dim{shape[k], ""};
        }
        return absl::OkStatus();
      });
  Reg("Expand", C::kDataMovement, true, A::kInfer, 2, 2, ExpandInfer);
  Reg("Tile", C::kDataMovement, true, A::kInfer, 2, 2, TileInfer);
  Reg("Trilu", C::kDataMovement, true, A::kInfer, 1, 2, [](const Node&, Inputs in, Outputs& out) {
    out[0] = {in[0].dtype, in[0].shape};
    return absl::OkStatus();
  });
  Reg("Shape", C::kShape, false, A::kInfer, 1, 1, ShapeInfer);
  Reg("Size", C::kShape, false, A::kInfer, 1, 1, [](const Node&, Inputs, Outputs& out) {
    out[0] = {DType::kI64, Shape::Of({})};
    return absl::OkStatus();
  });
  Reg("ConstantOfShape", C::kShape, false, A::kInfer, 1, 1, [](const Node& n, Inputs in, Outputs& out) -> absl::Status {
    auto it = n.attrs.find("value");
    out[0].dtype = it != n.attrs.end() && it->second.t ? it->second.t->dtype() : DType::kF32;
    if (in[0].shape.rank_known && in[0].shape.rank() != 1) return NodeError(n, "the shape input must be 1-D");
    if (in[0].value) {
      CJIT_ASSIGN_OR_RETURN(out[0].shape, ShapeFromValues(n, in[0].value->ToInt64Vector(), "the shape input"));
    } else if (in[0].shape.fully_known()) {
      out[0].shape = UnknownDimsOfRank(static_cast<int>(in[0].shape.dims[0].value));
    }
    return absl::OkStatus();
  });
  Reg("Range", C::kShape, false, A::kInfer, 3, 3, [](const Node& n, Inputs in, Outputs& out) -> absl::Status {
    out[0].dtype = in[0].dtype;
    if (in[0].value && in[1].value && in[2].value) {
      for (int i = 0; i < 3; ++i) {
        if (in[i].value->numel() != 1) return NodeError(n, "start, limit and delta must be scalars");
      }
      // ONNX Range: max(ceil((limit - start) / delta), 0) elements. Integers in 128 bits (no overflow),
      // floats in long double; a count beyond what could be allocated is an error, not a wrap.
      long double count;
      if (IsInteger(in[0].dtype)) {
        __int128 s = in[0].value->ToInt64Vector()[0], l = in[1].value->ToInt64Vector()[0],
                 d = in[2].value->ToInt64Vector()[0];
        if (d == 0) return NodeError(n, "delta is 0");
        __int128 span = l - s;
        __int128 q = span / d;
        if (q * d != span && ((span > 0) == (d > 0))) q += 1;  // ceil for a positive quotient
        count = static_cast<long double>(q);
      } else {
        long double s = in[0].value->ToDoubleVector()[0], l = in[1].value->ToDoubleVector()[0],
                    d = in[2].value->ToDoubleVector()[0];
        if (d == 0) return NodeError(n, "delta is 0");
        if (!std::isfinite(s) || !std::isfinite(l) || !std::isfinite(d)) {
          return NodeError(n, "start, limit and delta must be finite");
        }
        count = std::ceil((l - s) / d);
      }
      if (count > static_cast<long double>(int64_t{1} << 36)) {
        return NodeError(n, absl::StrCat("would produce ", static_cast<double>(count), " elements (too many)"));
      }
      out[0].shape = Shape::Of({count > 0 ? static_cast<int64_t>(count) : int64_t{0}});
    } else {
      out[0].shape = UnknownDimsOfRank(1);
    }
    return absl::OkStatus();
  });
  Reg("EyeLike", C::kShape, false, A::kInfer, 1, 1, [](const Node& n, Inputs in, Outputs& out) -> absl::Status {
    // ONNX EyeLike: the input must be 2-D.
    if (in[0].shape.rank_known && in[0].shape.rank() != 2) {
      return NodeError(n, absl::StrCat("input must be 2-D, got rank ", in[0].shape.rank()));
    }
    out[0] = {in[0].dtype, in[0].shape};
    if (n.HasAttr("dtype")) {
      Node tmp;
      tmp.attrs["to"] = n.attrs.at("dtype");
      std::vector<InferOutput> o(1);
      CJIT_RETURN_IF_ERROR(FindOp("", "Cast")->infer(tmp, in, o));
      out[0].dtype = o[0].dtype;
    }
    return absl::OkStatus();
  });
  Reg("OneHot", C::kOther, false, A::kInfer, 3, 3, [](const Node& n, Inputs in, Outputs& out) -> absl::Status {
    out[0].dtype = in[2].dtype;
    const Shape& idx = in[0].shape;
    if (!idx.rank_known) return absl::OkStatus();
    int r = idx.rank() + 1;
    CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(n, n.GetInt("axis", -1), r));
    Dim depth;
    if (in[1].value) {
      if (in[1].value->numel() != 1) return NodeError(n, "depth must have exactly one element");
      double d = in[1].value->ToDoubleVector()[0];
      if (!(d >= 0) || d > static_cast<double>(int64_t{1} << 36)) {
        return NodeError(n, absl::StrCat("depth must be a non-negative number of classes, got ", d));
      }
      depth = Dim{static_cast<int64_t>(d), ""};
    }
    out[0].shape = idx;
    out[0].shape.dims.insert(out[0].shape.dims.begin() + ax, depth);
    return absl::OkStatus();
  });
  Reg("TopK", C::kOther, false, A::kInfer, 1, 2, TopKInfer);
  Reg("NonZero", C::kOther, false, A::kInfer, 1, 1, [](const Node&, Inputs in, Outputs& out) {
    out[0].dtype = DType::kI64;
    if (in[0].shape.rank_known) {
      out[0].shape.rank_known = true;
      out[0].shape.dims = {Dim{in[0].shape.rank(), ""}, Dim{}};
    }
    return absl::OkStatus();
  });
  Reg("Compress", C::kOther, false, A::kInfer, 2, 2, DataDependent);
  // If and Loop return and carry sequences and optionals as well (of the kinds the bodies declare).
  RegNonTensor("If", C::kControlFlow, false, A::kInfer, 1, 1, [](const Node& n, Inputs in, Outputs& out) {
    CJIT_RETURN_IF_ERROR(ExpectKind(n, in, ValueKind::kTensor, 0, 1));
    const Graph* g = n.GetGraph("then_branch");
    for (size_t i = 0; g && i < out.size() && i < g->outputs().size(); ++i) {
      out[i].dtype = g->outputs()[i]->dtype;
      out[i].kind = g->outputs()[i]->kind;
    }
    return absl::OkStatus();
  });
  // M and cond are optional inputs (either may be "", ONNX Loop-11+): no input is required present; the
  // importer checks the count against the schema (at least the two positions) and the kernel again.
  // Scan: N states then K scan outputs, of the body's output dtypes (shapes from the run).
  Reg("Scan", C::kControlFlow, false, A::kInfer, 0, 1 << 20, [](const Node& n, Inputs, Outputs& out) {
    const Graph* g = n.GetGraph("body");
    for (size_t i = 0; g && i < out.size() && i < g->outputs().size(); ++i) out[i].dtype = g->outputs()[i]->dtype;
    return absl::OkStatus();
  });
  RegNonTensor("Loop", C::kControlFlow, false, A::kInfer, 0, 1 << 20, [](const Node& n, Inputs in, Outputs& out) {
    CJIT_RETURN_IF_ERROR(ExpectKind(n, in, ValueKind::kTensor, 0, 2));  // M and cond
    const Graph* g = n.GetGraph("body");
    for (size_t i = 0; g && i < out.size(); ++i) {
      if (i + 1 < g->outputs().size()) {
        const Value* body_out = g->outputs()[i + 1];
        out[i].dtype = body_out->dtype;
        out[i].kind = body_out->kind;
        // A carried value whose type the body leaves undeclared keeps its input's kind.
        if (body_out->dtype == DType::kInvalid && i + 2 < in.size() && in[i + 2].present) {
          out[i].dtype = in[i + 2].dtype;
          out[i].kind = in[i + 2].kind;
        }
      }
    }
    // Loop-carried values keep their input's shape only when the body preserves it; leave unknown.
    return absl::OkStatus();
  });
}

}  // namespace cjit
