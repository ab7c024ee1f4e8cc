// Data-movement and shape CPU kernels: Reshape/Flatten/Squeeze/Unsqueeze/Identity (zero-copy),
// Transpose, Slice, Concat, Split, Gather, GatherElements, GatherND, ScatterElements, ScatterND, Pad,
// Expand, Tile, Shape, Size, ConstantOfShape, Range, Trilu, OneHot, EyeLike, NonZero, TopK, Compress,
// DepthToSpace, SpaceToDepth. Byte-level copies where the dtype does not matter; the tiled transpose and
// strided copies are tensor_util.cc's.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <cstring>
#include <numeric>

#include "compiler/ops/op_registry.h"
#include "compiler/ir/numeric_cast.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/cpu/box_copy.h"
#include "runtime/cpu/broadcast.h"
#include "runtime/cpu/dispatch.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/tensor_util.h"

namespace cjit {
namespace {

absl::Status ZeroCopy(KernelContext& ctx) {
  if (!ctx.in(0).is_tensor()) {  // Identity of a sequence or optional: the same value
    if (TraitsOf(*ctx.node).view != ViewKind::kIdentity) {
      return ctx.Error(
          absl::StrCat("input 0 is a ", ValueKindName(ctx.in(0).kind()), "; ", ctx.node->op_type, " takes a tensor"));
    }
    ctx.outputs[0] = ctx.in(0);
    return absl::OkStatus();
  }
  const InferOutput& o = ctx.infer()[0];
  ctx.outputs[0] = ctx.in(0).Reshaped(o.shape.concrete());
  return absl::OkStatus();
}

absl::Status Transpose(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  std::vector<int64_t> perm = ctx.node->GetInts("perm");
  if (perm.empty()) for (int i = x.rank() - 1; i >= 0; --i) perm.push_back(i);
  CJIT_ASSIGN_OR_RETURN(ctx.outputs[0], TransposeTensor(x, perm, ctx.threads));
  return absl::OkStatus();
}

absl::Status Slice(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (ctx.node->HasAttr("starts")) {
    starts = ctx.node->GetInts("starts");
    ends = ctx.node->GetInts("ends");
    axes = ctx.node->GetInts("axes");
  } else {
    starts = ctx.in(1).ToInt64Vector();
    ends = ctx.in(2).ToInt64Vector();
    if (ctx.has(3)) axes = ctx.in(3).ToInt64Vector();
    if (ctx.has(4)) steps = ctx.in(4).ToInt64Vector();
  }
  if (axes.empty()) for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  std::vector<int64_t> st(x.rank(), 0), sp(x.rank(), 1);
  for (size_t k = 0; k < starts.size(); ++k) {
    CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(*ctx.node, axes[k], x.rank()));
    int64_t dim = x.dim(ax), s = starts[k];
    if (s < 0) s += dim;
    // A negative step on an empty axis takes nothing ([0, dim - 1] would be an empty clamp range).
    s = steps[k] > 0 ? std::clamp<int64_t>(s, 0, dim) : dim == 0 ? 0 : std::clamp<int64_t>(s, 0, dim - 1);
    st[ax] = s;
    sp[ax] = steps[k];
  }
  Tensor& y = ctx.Alloc(0);
  StridedCopy(x, y, st, sp, ctx.threads);
  return absl::OkStatus();
}

absl::Status Concat(KernelContext& ctx) {
  Tensor& y = ctx.Alloc(0);
  CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(*ctx.node, ctx.node->GetInt("axis", 0), y.rank()));
  std::vector<const Tensor*> parts;
  for (int k = 0; k < ctx.num_inputs(); ++k) {
    if (ctx.in(k).dtype() != y.dtype()) return ctx.Error("inputs have different dtypes");
    parts.push_back(&ctx.in(k));
  }
  ConcatAlong(parts, ax, y);
  return absl::OkStatus();
}

absl::Status Split(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(*ctx.node, ctx.node->GetInt("axis", 0), x.rank()));
  std::vector<int64_t> start(x.rank(), 0), step(x.rank(), 1);
  for (size_t k = 0; k < ctx.outputs.size(); ++k) {
    Tensor& y = ctx.Alloc(static_cast<int>(k));
    StridedCopy(x, y, start, step, ctx.threads);
    start[ax] += y.dim(ax);
  }
  return absl::OkStatus();
}

absl::Status Gather(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& idx = ctx.in(1);
  CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(*ctx.node, ctx.node->GetInt("axis", 0), x.rank()));
  Tensor& y = ctx.Alloc(0);
  std::vector<int64_t> ind = idx.ToInt64Vector();
  size_t es = DTypeSize(x.dtype());
  int64_t outer = 1, inner = es, n = x.dim(ax);
  for (int i = 0; i < ax; ++i) outer *= x.dim(i);
  for (int i = ax + 1; i < x.rank(); ++i) inner *= x.dim(i);
  for (int64_t& i : ind) {
    if (i < -n || i >= n) return ctx.Error(absl::StrCat("index ", i, " out of range [", -n, ", ", n, ")"));
    if (i < 0) i += n;
  }
  const uint8_t* src = static_cast<const uint8_t*>(x.raw());
  uint8_t* dst = static_cast<uint8_t*>(y.raw());
  int64_t m = static_cast<int64_t>(ind.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < m; ++j) {
      std::memcpy(dst + (o * m + j) * inner, src + (o * n + ind[j]) * inner, inner);
    }
  }
  return absl::OkStatus();
}

// Element-index helpers for GatherElements / ScatterElements.
absl::Status ElementsOp(KernelContext& ctx, bool scatter) {
  const Tensor& x = ctx.in(0);
  const Tensor& idx = ctx.in(1);
  CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(*ctx.node, ctx.node->GetInt("axis", 0), x.rank()));
  // ONNX GatherElements / ScatterElements: integer indices of the data's rank, no larger than the data
  // along every other axis; updates shaped like the indices, of the data's type.
  int r = x.rank();
  if (!IsInteger(idx.dtype()) || idx.rank() != r) {
    return ctx.Error(absl::StrCat("indices must be an integer tensor of rank ", r, ", got ", DTypeName(idx.dtype()),
                                  "[", DimsToString(idx.dims()), "]"));
  }
  for (int d = 0; d < r; ++d) {
    if (d != ax && idx.dim(d) > x.dim(d)) {
      return ctx.Error(absl::StrCat("indices dim ", d, " (", idx.dim(d), ") exceeds the data's (", x.dim(d), ")"));
    }
  }
  if (scatter && (ctx.in(2).dims() != idx.dims() || ctx.in(2).dtype() != x.dtype())) {
    return ctx.Error(absl::StrCat("updates must be ", DTypeName(x.dtype()), "[", DimsToString(idx.dims()), "], got ",
                                  DTypeName(ctx.in(2).dtype()), "[", DimsToString(ctx.in(2).dims()), "]"));
  }
  std::vector<int64_t> xs(r, 1);
  for (int i = r - 2; i >= 0; --i) xs[i] = xs[i + 1] * x.dim(i + 1);
  const int64_t n_ax = x.dim(ax);
  const int64_t total = idx.numel();
  if (!scatter && ax == r - 1 && (idx.dtype() == DType::kI64 || idx.dtype() == DType::kI32) &&
      (DTypeSize(x.dtype()) == 4 || DTypeSize(x.dtype()) == 8)) {
    // GatherElements along the last axis (torch.gather(dim=-1)): one pass, row by row.
    Tensor& y = ctx.Alloc(0);
    const int64_t m = idx.dim(r - 1), rows = m ? total / m : 0;
    auto run = [&](auto elem, auto index) -> absl::Status {
      using E = decltype(elem);
      using I = decltype(index);
      const E* px = static_cast<const E*>(x.raw());
      E* py = static_cast<E*>(y.raw());
      const I* pi = idx.data<I>();
      std::vector<int64_t> pos(r, 0);
      for (int64_t row = 0; row < rows; ++row) {
        int64_t base = 0;
        for (int d = 0; d + 1 < r; ++d) base += pos[d] * xs[d];
        for (int64_t j = 0; j < m; ++j) {
          int64_t v = pi[row * m + j];
          if (v < -n_ax || v >= n_ax) return ctx.Error(absl::StrCat("index ", v, " out of range"));
          py[row * m + j] = px[base + (v < 0 ? v + n_ax : v)];
        }
        for (int d = r - 2; d >= 0; --d) {
          if (++pos[d] < idx.dim(d)) break;
          pos[d] = 0;
        }
      }
      return absl::OkStatus();
    };
    if (DTypeSize(x.dtype()) == 4) {
      return idx.dtype() == DType::kI64 ? run(uint32_t{}, int64_t{}) : run(uint32_t{}, int32_t{});
    }
    return idx.dtype() == DType::kI64 ? run(uint64_t{}, int64_t{}) : run(uint64_t{}, int32_t{});
  }
  // Each element's data offset, walking the indices in row-major order with an odometer (no division per
  // element); every index is checked before anything is written.
  std::vector<int64_t> offset(static_cast<size_t>(total));
  {
    std::vector<int64_t> converted;
    const int64_t* i64 = nullptr;
    const int32_t* i32 = nullptr;
    if (idx.dtype() == DType::kI64) {
      i64 = idx.data<int64_t>();
    } else if (idx.dtype() == DType::kI32) {
      i32 = idx.data<int32_t>();
    } else {
      converted = idx.ToInt64Vector();
      i64 = converted.data();
    }
    std::vector<int64_t> pos(r, 0);
    int64_t base = 0;  // sum over d != ax of pos[d] * xs[d]
    for (int64_t e = 0; e < total; ++e) {
      int64_t v = i64 ? i64[e] : i32[e];
      if (v < -n_ax || v >= n_ax) return ctx.Error(absl::StrCat("index ", v, " out of range"));
      if (v < 0) v += n_ax;
      offset[e] = base + v * xs[ax];
      for (int d = r - 1; d >= 0; --d) {
        if (++pos[d] < idx.dim(d)) {
          if (d != ax) base += xs[d];
          break;
        }
        if (d != ax) base -= (pos[d] - 1) * xs[d];
        pos[d] = 0;
      }
    }
  }
  size_t es = DTypeSize(x.dtype());
  Tensor& y = scatter ? (ctx.outputs[0] = x.Clone()) : ctx.Alloc(0);
  std::string reduction = ctx.node->GetString("reduction", "none");
  if (!scatter || reduction == "none") {
    char* dst = static_cast<char*>(y.raw());
    const char* src = static_cast<const char*>(scatter ? ctx.in(2).raw() : x.raw());
    auto copy = [&](auto tag) {
      using T = decltype(tag);
      T* d = reinterpret_cast<T*>(dst);
      const T* s = reinterpret_cast<const T*>(src);
      if (scatter) {
        for (int64_t e = 0; e < total; ++e) d[offset[e]] = s[e];
      } else {
        for (int64_t e = 0; e < total; ++e) d[e] = s[offset[e]];
      }
    };
    switch (es) {
      case 1: copy(uint8_t{}); break;
      case 2: copy(uint16_t{}); break;
      case 4: copy(uint32_t{}); break;
      case 8: copy(uint64_t{}); break;
      default:
        for (int64_t e = 0; e < total; ++e) {
          if (scatter) std::memcpy(dst + offset[e] * es, src + e * es, es);
          else std::memcpy(dst + e * es, src + offset[e] * es, es);
        }
    }
    return absl::OkStatus();
  }
  const int kind = reduction == "add"   ? 0
                   : reduction == "mul" ? 1
                   : reduction == "max" ? 2
                   : reduction == "min" ? 3
                                        : -1;
  if (kind < 0) return ctx.Error(absl::StrCat("unknown reduction '", reduction, "' (none, add, mul, max, min)"));
  const Tensor& upd = ctx.in(2);
  return DispatchNumeric(x.dtype(), [&](auto t) {
    using T = decltype(t);
    T* d = y.data<T>();
    const T* u = upd.data<T>();
    for (int64_t e = 0; e < total; ++e) {
      T& o = d[offset[e]];
      switch (kind) {
        case 0: o = WrappingAdd(o, u[e]); break;
        case 1: o = WrappingMul(o, u[e]); break;
        case 2: o = o < u[e] ? u[e] : o; break;
        default: o = u[e] < o ? u[e] : o;
      }
    }
  });
}

absl::Status GatherND(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& idx = ctx.in(1);
  int b = static_cast<int>(ctx.node->GetInt("batch_dims", 0));
  Tensor& y = ctx.Alloc(0);
  std::vector<int64_t> ind = idx.ToInt64Vector();
  int64_t last = idx.dim(idx.rank() - 1);
  size_t es = DTypeSize(x.dtype());
  int64_t slice = es;
  for (int i = b + static_cast<int>(last); i < x.rank(); ++i) slice *= x.dim(i);
  int64_t batch = 1;
  for (int i = 0; i < b; ++i) batch *= x.dim(i);
  int64_t per_batch_x = 1;
  for (int i = b; i < x.rank(); ++i) per_batch_x *= x.dim(i);
  int64_t n_idx = idx.numel() / last / batch;
  for (int64_t bi = 0; bi < batch; ++bi) {
    for (int64_t j = 0; j < n_idx; ++j) {
      int64_t off = 0;
      for (int64_t k = 0; k < last; ++k) {
        int64_t v = ind[(bi * n_idx + j) * last + k], dim = x.dim(b + static_cast<int>(k));
        if (v < -dim || v >= dim) return ctx.Error("index out of range");
        off = off * dim + (v < 0 ? v + dim : v);
      }
      for (int i = b + static_cast<int>(last); i < x.rank(); ++i) off *= x.dim(i);
      std::memcpy(static_cast<uint8_t*>(y.raw()) + (bi * n_idx + j) * slice,
                  static_cast<const uint8_t*>(x.raw()) + (bi * per_batch_x + off) * es, slice);
    }
  }
  return absl::OkStatus();
}

absl::Status ScatterND(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& idx = ctx.in(1);
  const Tensor& upd = ctx.in(2);
  if (idx.rank() < 1) return ctx.Error("indices must have rank >= 1");
  if (upd.dtype() != x.dtype()) return ctx.Error("updates and data have different dtypes");
  int64_t last = idx.dim(idx.rank() - 1);
  if (last > x.rank()) {
    return ctx.Error(absl::StrCat("indices address ", last, " dims of a rank-", x.rank(), " data tensor"));
  }
  // updates must be indices.shape[:-1] + data.shape[last:] (ONNX ScatterND).
  Dims want(idx.dims().begin(), idx.dims().end() - 1);
  for (int i = static_cast<int>(last); i < x.rank(); ++i) want.push_back(x.dim(i));
  if (upd.dims() != want) {
    return ctx.Error(absl::StrCat("updates have dims ", DimsToString(upd.dims()), ", indices and data need ",
                                  DimsToString(want)));
  }
  ctx.outputs[0] = x.Clone();
  Tensor& y = ctx.outputs[0];
  std::vector<int64_t> ind = idx.ToInt64Vector();
  int64_t slice = 1;
  for (int i = static_cast<int>(last); i < x.rank(); ++i) slice *= x.dim(i);
  int64_t n = 1;
  for (int i = 0; i + 1 < idx.rank(); ++i) n *= idx.dim(i);
  // Every index is checked before anything is written (ONNX: out-of-range indices are errors).
  std::vector<int64_t> offsets(n);
  for (int64_t j = 0; j < n; ++j) {
    int64_t off = 0;
    for (int64_t k = 0; k < last; ++k) {
      int64_t dim = x.dim(static_cast<int>(k)), v = ind[j * last + k];
      if (v < -dim || v >= dim) {
        return ctx.Error(absl::StrCat("index ", v, " is out of range for dim ", k, " of size ", dim));
      }
      off = off * dim + (v < 0 ? v + dim : v);
    }
    offsets[j] = off * slice;
  }
  std::string reduction = ctx.node->GetString("reduction", "none");
  if (reduction == "none") {  // slices copied whole, in index order (a later duplicate wins, as in ONNX's loop)
    const size_t bytes = static_cast<size_t>(slice) * DTypeSize(x.dtype());
    char* dst = static_cast<char*>(y.raw());
    const char* src = static_cast<const char*>(upd.raw());
    for (int64_t j = 0; j < n; ++j) std::memcpy(dst + offsets[j] * DTypeSize(x.dtype()), src + j * bytes, bytes);
    return absl::OkStatus();
  }
  const int kind = reduction == "add"   ? 0
                   : reduction == "mul" ? 1
                   : reduction == "max" ? 2
                   : reduction == "min" ? 3
                                        : -1;
  if (kind < 0) return ctx.Error(absl::StrCat("unknown reduction '", reduction, "' (none, add, mul, max, min)"));
  return DispatchNumeric(x.dtype(), [&](auto t) {
    using T = decltype(t);
    for (int64_t j = 0; j < n; ++j) {
      T* d = y.data<T>() + offsets[j];
      const T* u = upd.data<T>() + j * slice;
      for (int64_t s = 0; s < slice; ++s) {
        switch (kind) {
          case 0: d[s] = WrappingAdd(d[s], u[s]); break;
          case 1: d[s] = WrappingMul(d[s], u[s]); break;
          case 2: d[s] = d[s] < u[s] ? u[s] : d[s]; break;
          default: d[s] = u[s] < d[s] ? u[s] : d[s];
        }
      }
    }
  });
}

absl::Status Pad(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.Alloc(0);
  // An empty output has nothing to write; its other dims may be huge (one index map per dim is built below).
  if (y.numel() == 0) return absl::OkStatus();
  int r = x.rank();
  std::vector<int64_t> pads = ctx.node->HasAttr("pads") ? ctx.node->GetInts("pads") : ctx.in(1).ToInt64Vector();
  std::vector<int64_t> axes;
  if (ctx.has(3)) {
    for (int64_t a : ctx.in(3).ToInt64Vector()) axes.push_back(a < 0 ? a + r : a);
  } else {
    for (int i = 0; i < r; ++i) axes.push_back(i);
  }
  std::vector<int64_t> begin(r, 0);
  for (size_t k = 0; k < axes.size(); ++k) begin[axes[k]] = pads[k];
  std::string mode = ctx.node->GetString("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap") {
    return ctx.Error(absl::StrCat("unknown mode '", mode, "' (constant, reflect, edge, wrap)"));
  }
  const size_t es = DTypeSize(x.dtype());
  if (es == 1 || es == 2 || es == 4 || es == 8) {
    // Every mode is a separable index map per dim (box_copy.h): rows at memcpy speed.
    std::vector<int64_t> xs(r, 1);
    for (int i = r - 2; i >= 0; --i) xs[i] = xs[i + 1] * x.dim(i + 1);
    std::vector<std::vector<int64_t>> maps(r);
    for (int d = 0; d < r; ++d) maps[d] = PadMap(y.dim(d), begin[d], x.dim(d), xs[d], mode.c_str());
    uint64_t fill = 0;
    CJIT_RETURN_IF_ERROR(DispatchAll(x.dtype(), [&](auto t) {
      using T = decltype(t);
      if constexpr (sizeof(T) <= sizeof(fill) && std::is_trivially_copyable_v<T>) {
        T value = T(0);
        if (ctx.node->HasAttr("value")) value = NumericCast<T>(ctx.node->GetFloat("value", 0));
        if (ctx.has(2) && ctx.in(2).numel() > 0) value = ctx.in(2).data<T>()[0];
        std::memcpy(&fill, &value, sizeof(T));
      }
    }));
    BoxCopy(x.raw(), y.raw(), es, maps, &fill, ctx.threads);
    return absl::OkStatus();
  }
  return DispatchAll(x.dtype(), [&](auto t) {
    using T = decltype(t);
    T value = T(0);
    if (ctx.node->HasAttr("value"))
      value = NumericCast<T>(ctx.node->GetFloat("value", 0));  // saturating: see numeric_cast.h
    if (ctx.has(2) && ctx.in(2).numel() > 0) value = ctx.in(2).data<T>()[0];
    std::vector<int64_t> ys(r, 1), xs(r, 1);
    for (int i = r - 2; i >= 0; --i) {
      ys[i] = ys[i + 1] * y.dim(i + 1);
      xs[i] = xs[i + 1] * x.dim(i + 1);
    }
    T* out = y.data<T>();
    const T* in = x.data<T>();
    for (int64_t e = 0; e < y.numel(); ++e) {
      int64_t rem = e, off = 0;
      bool outside = false;
      for (int d = 0; d < r; ++d) {
        int64_t c = rem / ys[d] - begin[d];
        rem %= ys[d];
        int64_t n = x.dim(d);
        if (c < 0 || c >= n) {
          if (mode == "constant" || n == 0) { outside = true; break; }
          if (mode == "edge") c = c < 0 ? 0 : n - 1;
          else if (mode == "reflect") {
            int64_t period = 2 * (n - 1);
            if (period == 0) c = 0;
            else { c = ((c % period) + period) % period; if (c >= n) c = period - c; }
          } else {  // wrap
            c = ((c % n) + n) % n;
          }
        }
        off += c * xs[d];
      }
      out[e] = outside ? value : in[off];
    }
  });
}

absl::Status ExpandLike(KernelContext& ctx, const Tensor& x, Tensor& y) {
  // An empty output may still have a huge dim (the per-dim offset tables below are sized by each dim).
  if (y.numel() == 0) return absl::OkStatus();
  size_t es = DTypeSize(x.dtype());
  if ((es == 1 || es == 2 || es == 4 || es == 8) && x.rank() <= y.rank()) {
    // Broadcast dims read offset 0 (box_copy.h): a broadcast row is one element replicated.
    const int r = y.rank(), lead = r - x.rank();
    std::vector<int64_t> xs(x.rank(), 1);
    for (int i = x.rank() - 2; i >= 0; --i) xs[i] = xs[i + 1] * x.dim(i + 1);
    std::vector<std::vector<int64_t>> maps(r);
    for (int d = 0; d < r; ++d) {
      maps[d].assign(static_cast<size_t>(y.dim(d)), 0);
      if (d < lead || x.dim(d - lead) == 1) continue;
      for (int64_t i = 0; i < y.dim(d); ++i) maps[d][i] = i * xs[d - lead];
    }
    BoxCopy(x.raw(), y.raw(), es, maps, nullptr, ctx.threads);
    return absl::OkStatus();
  }
  const uint8_t* src = static_cast<const uint8_t*>(x.raw());
  uint8_t* dst = static_cast<uint8_t*>(y.raw());
  ForEachBroadcastRow<1>(y.dims(), {&x.dims()}, ctx.threads,
                         [&](std::array<int64_t, 1> off, int64_t o, int64_t n, std::array<int64_t, 1> s) {
                           if (s[0] == 1) {
                             std::memcpy(dst + o * es, src + off[0] * es, n * es);
                           } else {
                             for (int64_t i = 0; i < n; ++i)
                               std::memcpy(dst + (o + i) * es, src + (off[0] + i * s[0]) * es, es);
                           }
                         });
  return absl::OkStatus();
}

absl::Status Tile(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.Alloc(0);
  if (y.numel() == 0) return absl::OkStatus();  // as ExpandLike: a huge dim of an empty output sizes no table
  int r = x.rank();
  size_t es = DTypeSize(x.dtype());
  if ((es == 1 || es == 2 || es == 4 || es == 8) && y.rank() == r) {
    // Output index i of dim d reads i mod n_d (box_copy.h): each repeat of a row is a memcpy.
    std::vector<int64_t> xs(r, 1);
    for (int i = r - 2; i >= 0; --i) xs[i] = xs[i + 1] * x.dim(i + 1);
    std::vector<std::vector<int64_t>> maps(r);
    for (int d = 0; d < r; ++d) {
      maps[d].resize(static_cast<size_t>(y.dim(d)));
      for (int64_t i = 0; i < y.dim(d); ++i) maps[d][i] = x.dim(d) ? (i % x.dim(d)) * xs[d] : 0;
    }
    BoxCopy(x.raw(), y.raw(), es, maps, nullptr, ctx.threads);
    return absl::OkStatus();
  }
  std::vector<int64_t> ys(r, 1), xs(r, 1);
  for (int i = r - 2; i >= 0; --i) {
    ys[i] = ys[i + 1] * y.dim(i + 1);
    xs[i] = xs[i + 1] * x.dim(i + 1);
  }
  for (int64_t e = 0; e < y.numel(); ++e) {
    int64_t rem = e, off = 0;
    for (int d = 0; d < r; ++d) {
      off += ((rem / ys[d]) % x.dim(d)) * xs[d];
      rem %= ys[d];
    }
    std::memcpy(static_cast<uint8_t*>(y.raw()) + e * es, static_cast<const uint8_t*>(x.raw()) + off * es, es);
  }
  return absl::OkStatus();
}

absl::Status FillFromInts(Tensor& y, const std::vector<int64_t>& v) {
  std::copy(v.begin(), v.end(), y.data<int64_t>());
  return absl::OkStatus();
}

absl::Status TopK(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(*ctx.node, ctx.node->GetInt("axis", -1), x.rank()));
  int64_t k = ctx.node->HasAttr("k") ? ctx.node->GetInt("k", 0) : ctx.in(1).ToInt64Vector().at(0);
  if (k < 0 || k > x.dim(ax)) return ctx.Error(absl::StrCat("k=", k, " is out of range"));
  bool largest = ctx.node->GetInt("largest", 1), sorted = ctx.node->GetInt("sorted", 1);
  (void)sorted;
  Dims od = x.dims();
  od[ax] = k;
  Tensor& vals = ctx.Alloc(0, x.dtype(), od);
  Tensor& inds = ctx.Alloc(1, DType::kI64, od);
  int64_t outer = 1, n = x.dim(ax), inner = 1;
  for (int i = 0; i < ax; ++i) outer *= x.dim(i);
  for (int i = ax + 1; i < x.rank(); ++i) inner *= x.dim(i);
  return DispatchNumeric(x.dtype(), [&](auto t) {
    using T = decltype(t);
    std::vector<int64_t> order(n);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const T* p = x.data<T>() + o * n * inner + i;
        std::iota(order.begin(), order.end(), 0);
        // NaN ranks above every number (as torch.topk), so the order is strict weak also with NaN.
        auto less = [](T u, T v) {
          if constexpr (std::is_floating_point_v<T>) {
            if (std::isnan(u) || std::isnan(v)) return !std::isnan(u) && std::isnan(v);
          }
          return u < v;
        };
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
          return largest ? less(p[b * inner], p[a * inner]) : less(p[a * inner], p[b * inner]);
        });
        for (int64_t j = 0; j < k; ++j) {
          vals.data<T>()[(o * k + j) * inner + i] = p[order[j] * inner];
          inds.data<int64_t>()[(o * k + j) * inner + i] = order[j];
        }
      }
    }
  });
}

absl::Status SpaceDepth(KernelContext& ctx, bool to_space) {
  const Tensor& x = ctx.in(0);
  int64_t b = ctx.node->GetInt("blocksize", 1);
  int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  Tensor tmp;
  if (to_space && b >= 1 && C % (b * b) == 0 && DTypeSize(x.dtype()) == 4) {
    // DepthToSpace, 4-byte elements: output row (n, c, h * b + i) interleaves b input rows, element w * b + j
    // from channel (i * b + j) * C' + c (DCR) or c * b * b + i * b + j (CRD), row h.
    const bool crd = ctx.node->GetString("mode", "DCR") == "CRD";
    const int64_t Cp = C / (b * b), OW = W * b;
    Tensor& y = ctx.Alloc(0);
    const uint32_t* px = static_cast<const uint32_t*>(x.raw());
    uint32_t* py = static_cast<uint32_t*>(y.raw());
    const int64_t rows = N * Cp * H * b;
    ParallelFor(ThreadsForElements(ctx.threads, x.numel()), rows, [&](int64_t row) {
      const int64_t i = row % b, h = (row / b) % H, c = (row / (b * H)) % Cp, n = row / (b * H * Cp);
      uint32_t* out = py + row * OW;
      for (int64_t j = 0; j < b; ++j) {
        const int64_t ch = crd ? c * b * b + i * b + j : (i * b + j) * Cp + c;
        const uint32_t* in = px + ((n * C + ch) * H + h) * W;
        for (int64_t w = 0; w < W; ++w) out[w * b + j] = in[w];
      }
    });
    return absl::OkStatus();
  }
  if (to_space) {
    bool crd = ctx.node->GetString("mode", "DCR") == "CRD";
    Tensor v = crd ? x.Reshaped({N, C / (b * b), b, b, H, W}) : x.Reshaped({N, b, b, C / (b * b), H, W});
    std::vector<int64_t> perm = crd ? std::vector<int64_t>{0, 1, 4, 2, 5, 3} : std::vector<int64_t>{0, 3, 4, 1, 5, 2};
    CJIT_ASSIGN_OR_RETURN(tmp, TransposeTensor(v, perm, ctx.threads));
    ctx.outputs[0] = tmp.Reshaped({N, C / (b * b), H * b, W * b});
  } else {
    Tensor v = x.Reshaped({N, C, H / b, b, W / b, b});
    CJIT_ASSIGN_OR_RETURN(tmp, TransposeTensor(v, {0, 3, 5, 1, 2, 4}, ctx.threads));
    ctx.outputs[0] = tmp.Reshaped({N, C * b * b, H / b, W / b});
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterMovementKernels() {
  // Reshape-like ops and Identity (OpTraits::view): the output aliases the input's buffer.
  for (const std::string& op : OpsWhere([](const OpTraits& t) {
         return t.view == ViewKind::kReshape || t.view == ViewKind::kIdentity;
       })) {
    RegisterKernel(op, ZeroCopy);
  }
  RegisterKernel("Transpose", Transpose);
  RegisterKernel("Slice", Slice);
  RegisterKernel("Concat", Concat);
  RegisterKernel("Split", Split);
  RegisterKernel("Gather", Gather);
  RegisterKernel("GatherElements", [](KernelContext& ctx) { return ElementsOp(ctx, false); });
  RegisterKernel("ScatterElements", [](KernelContext& ctx) { return ElementsOp(ctx, true); });
  RegisterKernel("Scatter", [](KernelContext& ctx) { return ElementsOp(ctx, true); });
  RegisterKernel("GatherND", GatherND);
  RegisterKernel("ScatterND", ScatterND);
  RegisterKernel("Pad", Pad);
  // CenterCropPad-18: out[i] = x[i + offset] per axis, offset = (in - out) / 2 (negative when padding), zero
  // outside x. The output dims come from the shape function (validated there).
  RegisterKernel("CenterCropPad", [](KernelContext& ctx) -> absl::Status {
    const Tensor& x = ctx.in(0);
    Tensor& y = ctx.Alloc(0);
    int r = x.rank();
    if (y.rank() != r) return ctx.Error("internal: output rank differs from the input's");
    std::vector<int64_t> off(r), xs(r, 1);
    for (int d = 0; d < r; ++d) {
      int64_t diff = x.dim(d) - y.dim(d);
      off[d] = diff >= 0 ? diff / 2 : -((-diff) / 2);
    }
    for (int d = r - 2; d >= 0; --d) xs[d] = xs[d + 1] * x.dim(d + 1);
    size_t es = DTypeSize(x.dtype());
    std::memset(y.raw(), 0, y.nbytes());
    std::vector<int64_t> idx(r, 0);
    for (int64_t e = 0, n = y.numel(); e < n; ++e) {
      int64_t rem = e, src = 0;
      bool inside = true;
      for (int d = r - 1; d >= 0; --d) {
        int64_t i = rem % y.dim(d) + off[d];
        rem /= y.dim(d);
        inside &= i >= 0 && i < x.dim(d);
        src += i * xs[d];
      }
      if (inside) {
        std::memcpy(static_cast<uint8_t*>(y.raw()) + e * es, static_cast<const uint8_t*>(x.raw()) + src * es, es);
      }
    }
    return absl::OkStatus();
  });
  RegisterKernel("Expand", [](KernelContext& ctx) { return ExpandLike(ctx, ctx.in(0), ctx.Alloc(0)); });
  RegisterKernel("Tile", Tile);
  RegisterKernel("Shape", [](KernelContext& ctx) {
    Tensor& y = ctx.Alloc(0);
    const Dims& d = ctx.in(0).dims();
    int64_t r = static_cast<int64_t>(d.size());
    int64_t start = ctx.node->GetInt("start", 0), end = ctx.node->GetInt("end", r);
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = std::clamp<int64_t>(start, 0, r);
    end = std::clamp<int64_t>(end, 0, r);
    for (int64_t i = start; i < end; ++i) y.data<int64_t>()[i - start] = d[i];
    return absl::OkStatus();
  });
  RegisterKernel("Size", [](KernelContext& ctx) {
    *ctx.Alloc(0).data<int64_t>() = ctx.in(0).numel();
    return absl::OkStatus();
  });
  RegisterKernel("ConstantOfShape", [](KernelContext& ctx) {
    std::vector<int64_t> dims = ctx.in(0).ToInt64Vector();
    auto it = ctx.node->attrs.find("value");
    DType t = it != ctx.node->attrs.end() && it->second.t ? it->second.t->dtype() : DType::kF32;
    Tensor& y = ctx.Alloc(0, t, dims);
    size_t es = DTypeSize(t);
    for (int64_t i = 0; i < y.numel(); ++i) {
      if (it != ctx.node->attrs.end() && it->second.t)
        std::memcpy(static_cast<uint8_t*>(y.raw()) + i * es, it->second.t->raw(), es);
      else std::memset(static_cast<uint8_t*>(y.raw()) + i * es, 0, es);
    }
    return absl::OkStatus();
  });
  RegisterKernel("Range", [](KernelContext& ctx) {
    Tensor& y = ctx.Alloc(0);
    return DispatchNumeric(y.dtype(), [&](auto t) {
      using T = decltype(t);
      T s = ctx.in(0).data<T>()[0], d = ctx.in(2).data<T>()[0];
      for (int64_t i = 0; i < y.numel(); ++i) y.data<T>()[i] = WrappingAdd(s, WrappingMul(static_cast<T>(i), d));
    });
  });
  RegisterKernel("Trilu", [](KernelContext& ctx) -> absl::Status {
    const Tensor& x = ctx.in(0);
    Tensor& y = ctx.Alloc(0);
    int64_t k = ctx.has(1) ? ctx.in(1).ToInt64Vector().at(0) : 0;
    bool upper = ctx.node->GetInt("upper", 1);
    int64_t R = x.dim(x.rank() - 2), Cc = x.dim(x.rank() - 1);
    size_t es = DTypeSize(x.dtype());
    for (int64_t e = 0; e < x.numel(); ++e) {
      int64_t c = e % Cc, r = (e / Cc) % R;
      bool keep = upper ? (c - r >= k) : (c - r <= k);
      if (keep) std::memcpy(static_cast<uint8_t*>(y.raw()) + e * es, static_cast<const uint8_t*>(x.raw()) + e * es, es);
      else std::memset(static_cast<uint8_t*>(y.raw()) + e * es, 0, es);
    }
    return absl::OkStatus();
  });
  RegisterKernel("OneHot", [](KernelContext& ctx) -> absl::Status {
    const Tensor& idx = ctx.in(0);
    int64_t depth = NumericCast<int64_t>(ctx.in(1).ToDoubleVector().at(0));
    Dims od = idx.dims();
    CJIT_ASSIGN_OR_RETURN(int ax, NormalizeAxis(*ctx.node, ctx.node->GetInt("axis", -1), idx.rank() + 1));
    od.insert(od.begin() + ax, depth);
    const Tensor& vals = ctx.in(2);
    Tensor& y = ctx.Alloc(0, vals.dtype(), od);
    std::vector<int64_t> ind = idx.ToInt64Vector();
    size_t es = DTypeSize(vals.dtype());
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < ax; ++i) outer *= od[i];
    for (int i = ax + 1; i < static_cast<int>(od.size()); ++i) inner *= od[i];
    const uint8_t* off_v = static_cast<const uint8_t*>(vals.raw());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t d = 0; d < depth; ++d)
        for (int64_t i = 0; i < inner; ++i) {
          int64_t v = ind[o * inner + i];
          if (v < 0) v += depth;
          std::memcpy(static_cast<uint8_t*>(y.raw()) + ((o * depth + d) * inner + i) * es, off_v + (v == d ? es : 0),
                      es);
        }
    return absl::OkStatus();
  });
  RegisterKernel("EyeLike", [](KernelContext& ctx) {
    if (ctx.in(0).rank() != 2) return ctx.Error(absl::StrCat("input must be 2-D, got rank ", ctx.in(0).rank()));
    Tensor& y = ctx.Alloc(0);
    if (y.rank() != 2) return ctx.Error("internal: EyeLike output is not 2-D");
    int64_t k = ctx.node->GetInt("k", 0);
    return DispatchAll(y.dtype(), [&](auto t) {
      using T = decltype(t);
      int64_t R = y.dim(0), Cc = y.dim(1);
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < Cc; ++c) y.data<T>()[r * Cc + c] = static_cast<T>(c - r == k ? 1 : 0);
    });
  });
  RegisterKernel("NonZero", [](KernelContext& ctx) {
    const Tensor& x = ctx.in(0);
    std::vector<double> v = x.ToDoubleVector();
    std::vector<int64_t> hits;
    for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) if (v[i] != 0) hits.push_back(i);
    int r = x.rank();
    Tensor& y = ctx.Alloc(0, DType::kI64, {r, static_cast<int64_t>(hits.size())});
    for (size_t j = 0; j < hits.size(); ++j) {
      int64_t rem = hits[j];
      for (int d = r - 1; d >= 0; --d) {
        y.data<int64_t>()[d * hits.size() + j] = rem % x.dim(d);
        rem /= x.dim(d);
      }
    }
    return absl::OkStatus();
  });
  RegisterKernel("Compress", [](KernelContext& ctx) -> absl::Status {
    const Tensor& x = ctx.in(0);
    std::vector<double> cond = ctx.in(1).ToDoubleVector();
    bool has_axis = ctx.node->HasAttr("axis");
    Tensor src = has_axis ? x : x.Reshaped({x.numel()});
    int ax = 0;
    if (has_axis) {
      CJIT_ASSIGN_OR_RETURN(ax, NormalizeAxis(*ctx.node, ctx.node->GetInt("axis", 0), x.rank()));
    }
    std::vector<int64_t> keep;
    for (int64_t i = 0; i < std::min<int64_t>(cond.size(), src.dim(ax)); ++i) if (cond[i] != 0) keep.push_back(i);
    Dims od = src.dims();
    od[ax] = static_cast<int64_t>(keep.size());
    Tensor& y = ctx.Alloc(0, x.dtype(), od);
    size_t es = DTypeSize(x.dtype());
    int64_t outer = 1, inner = es;
    for (int i = 0; i < ax; ++i) outer *= src.dim(i);
    for (int i = ax + 1; i < src.rank(); ++i) inner *= src.dim(i);
    for (int64_t o = 0; o < outer; ++o)
      for (size_t j = 0; j < keep.size(); ++j)
        std::memcpy(static_cast<uint8_t*>(y.raw()) + (o * keep.size() + j) * inner,
                    static_cast<const uint8_t*>(src.raw()) + (o * src.dim(ax) + keep[j]) * inner, inner);
    return absl::OkStatus();
  });
  RegisterKernel("TopK", TopK);
  RegisterKernel("DepthToSpace", [](KernelContext& ctx) { return SpaceDepth(ctx, true); });
  RegisterKernel("SpaceToDepth", [](KernelContext& ctx) { return SpaceDepth(ctx, false); });
}

}  // namespace cjit
