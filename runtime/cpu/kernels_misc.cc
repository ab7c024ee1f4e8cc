// CPU kernels for losses (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss), NonMaxSuppression, Unique,
// ReverseSequence, MaxUnpool, Det, window functions, Einsum, GridSample, RoiAlign and TfIdfVectorizer.
// Semantics: ONNX operator specification.
// These are plain loops in double precision: correctness first, they are not on hot paths of the models.
#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>

#include "compiler/ir/numeric_cast.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "runtime/cpu/attribute_cache.h"
#include "runtime/cpu/dispatch.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/parallel.h"
#include "runtime/cpu/tensor_util.h"

namespace cjit {
namespace {

// loss over log-probabilities `lp` [N, C, D] (D = product of extra dims), labels [N, D].
absl::Status NllCore(KernelContext& ctx, const std::vector<double>& lp, const Dims& in_dims, const Tensor& target,
                     const Tensor* weight, Tensor& out) {
  // ONNX: input [N, C, d1...], target [N, d1...] (integer), weight [C].
  if (in_dims.size() < 2)
    return ctx.Error(absl::StrCat("input must have rank >= 2 ([N, C, ...]), got ", in_dims.size()));
  Dims want(in_dims);
  want.erase(want.begin() + 1);
  if (target.dims() != want || !IsInteger(target.dtype())) {
    return ctx.Error(absl::StrCat("target must be an integer tensor of dims ", DimsToString(want), ", got ",
                                  DTypeName(target.dtype()), "[", DimsToString(target.dims()), "]"));
  }
  if (weight != nullptr && weight->dims() != Dims{in_dims[1]}) {
    return ctx.Error(absl::StrCat("weight must have dims [", in_dims[1], "], got ", DimsToString(weight->dims())));
  }
  int64_t N = in_dims[0], Cc = in_dims[1], D = 1;
  for (size_t i = 2; i < in_dims.size(); ++i) D *= in_dims[i];
  std::vector<int64_t> t = target.ToInt64Vector();
  std::vector<double> w = weight ? weight->ToDoubleVector() : std::vector<double>();
  bool has_ignore = ctx.node->HasAttr("ignore_index");
  int64_t ignore = ctx.node->GetInt("ignore_index", 0);
  std::string reduction = ctx.node->GetString("reduction", "mean");
  std::vector<double> loss(N * D, 0.0);
  double wsum = 0, lsum = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) {
      int64_t c = t[n * D + d];
      if (has_ignore && c == ignore) continue;
      if (c < 0 || c >= Cc) return ctx.Error(absl::StrCat("target ", c, " is out of range [0, ", Cc, ")"));
      double wc = weight ? w[c] : 1.0;
      double l = -lp[(n * Cc + c) * D + d] * wc;
      loss[n * D + d] = l;
      lsum += l;
      wsum += wc;
    }
  if (reduction == "none") {
    out = Tensor(out.dtype(), target.dims());
    return StoreDoubles(out, loss);
  }
  double v = reduction == "sum" ? lsum : (wsum == 0 ? 0 : lsum / wsum);
  return StoreDoubles(out, {v});
}

absl::Status Nll(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& out = ctx.Alloc(0, x.dtype(), {});
  return NllCore(ctx, x.ToDoubleVector(), x.dims(), ctx.in(1), ctx.has(2) ? &ctx.in(2) : nullptr, out);
}

absl::Status Sce(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  int64_t N = x.dim(0), Cc = x.dim(1), D = x.numel() / std::max<int64_t>(N * Cc, 1);
  std::vector<double> v = x.ToDoubleVector(), lp(v.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) {
      double mx = -INFINITY, s = 0;
      for (int64_t c = 0; c < Cc; ++c) mx = std::max(mx, v[(n * Cc + c) * D + d]);
      for (int64_t c = 0; c < Cc; ++c) s += std::exp(v[(n * Cc + c) * D + d] - mx);
      for (int64_t c = 0; c < Cc; ++c) lp[(n * Cc + c) * D + d] = v[(n * Cc + c) * D + d] - mx - std::log(s);
    }
  Tensor& out = ctx.Alloc(0, x.dtype(), {});
  CJIT_RETURN_IF_ERROR(NllCore(ctx, lp, x.dims(), ctx.in(1), ctx.has(2) ? &ctx.in(2) : nullptr, out));
  if (ctx.wants(1)) {
    Tensor& l = ctx.Alloc(1, x.dtype(), x.dims());
    CJIT_RETURN_IF_ERROR(StoreDoubles(l, lp));
  }
  return absl::OkStatus();
}

absl::Status Nms(KernelContext& ctx) {
  const Tensor& boxes = ctx.in(0);
  const Tensor& scores = ctx.in(1);
  int64_t max_out = ctx.has(2) && ctx.in(2).numel() ? ctx.in(2).ToInt64Vector()[0] : 0;
  double iou_thr = ctx.has(3) && ctx.in(3).numel() ? ctx.in(3).ToDoubleVector()[0] : 0;
  bool has_score_thr = ctx.has(4) && ctx.in(4).numel();
  double score_thr = has_score_thr ? ctx.in(4).ToDoubleVector()[0] : 0;
  bool center = ctx.node->GetInt("center_point_box", 0) != 0;
  // ONNX: boxes [B, N, 4], scores [B, C, N].
  if (boxes.rank() != 3 || boxes.dim(2) != 4 || scores.rank() != 3 || scores.dim(0) != boxes.dim(0) ||
      scores.dim(2) != boxes.dim(1)) {
    return ctx.Error(absl::StrCat("boxes must be [B, N, 4] and scores [B, C, N], got boxes ",
                                  DimsToString(boxes.dims()), " and scores ", DimsToString(scores.dims())));
  }
  int64_t B = boxes.dim(0), N = boxes.dim(1), Cc = scores.dim(1);
  std::vector<double> bx = boxes.ToDoubleVector(), sc = scores.ToDoubleVector();
  auto corners = [&](int64_t b, int64_t i, double c[4]) {
    const double* p = &bx[(b * N + i) * 4];
    if (center) {
      c[0] = p[1] - p[3] / 2; c[1] = p[0] - p[2] / 2; c[2] = p[1] + p[3] / 2; c[3] = p[0] + p[2] / 2;
    } else {
      c[0] = std::min(p[0], p[2]);
      c[1] = std::min(p[1], p[3]);
      c[2] = std::max(p[0], p[2]);
      c[3] = std::max(p[1], p[3]);
    }
  };
  std::vector<int64_t> sel;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < Cc; ++c) {
      std::vector<int64_t> order;
      for (int64_t i = 0; i < N; ++i) if (!has_score_thr || sc[(b * Cc + c) * N + i] > score_thr) order.push_back(i);
      // Descending score; a NaN score sorts last (a strict weak order also with NaN).
      std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
        double sx = sc[(b * Cc + c) * N + x], sy = sc[(b * Cc + c) * N + y];
        if (std::isnan(sx) || std::isnan(sy)) return !std::isnan(sx) && std::isnan(sy);
        return sx > sy;
      });
      std::vector<int64_t> kept;
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) >= max_out) break;
        double a[4];
        corners(b, i, a);
        bool keep = true;
        for (int64_t j : kept) {
          double k[4];
          corners(b, j, k);
          double iw = std::max(0.0, std::min(a[2], k[2]) - std::max(a[0], k[0]));
          double ih = std::max(0.0, std::min(a[3], k[3]) - std::max(a[1], k[1]));
          double inter = iw * ih, uni = (a[2] - a[0]) * (a[3] - a[1]) + (k[2] - k[0]) * (k[3] - k[1]) - inter;
          if (uni > 0 && inter / uni > iou_thr) { keep = false; break; }
        }
        if (keep) kept.push_back(i);
      }
      for (int64_t i : kept) { sel.push_back(b); sel.push_back(c); sel.push_back(i); }
    }
  Tensor& y = ctx.Alloc(0, DType::kI64, {static_cast<int64_t>(sel.size() / 3), 3});
  std::copy(sel.begin(), sel.end(), y.data<int64_t>());
  return absl::OkStatus();
}

absl::Status Unique(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  bool has_axis = ctx.node->HasAttr("axis");
  bool sorted = ctx.node->GetInt("sorted", 1) != 0;
  Tensor src = has_axis ? x : x.Reshaped({x.numel()});
  int ax = 0;
  if (has_axis) {
    CJIT_ASSIGN_OR_RETURN(ax, NormalizeAxis(*ctx.node, ctx.node->GetInt("axis", 0), x.rank()));
  }
  int64_t outer = 1, n = src.dim(ax), inner = 1;
  for (int i = 0; i < ax; ++i) outer *= src.dim(i);
  for (int i = ax + 1; i < src.rank(); ++i) inner *= src.dim(i);
  std::vector<double> v = src.ToDoubleVector();
  auto slice = [&](int64_t k) {
    std::vector<double> s;
    for (int64_t o = 0; o < outer; ++o) for (int64_t i = 0; i < inner; ++i) s.push_back(v[(o * n + k) * inner + i]);
    return s;
  };
  std::vector<std::vector<double>> uniq;
  std::vector<int64_t> first, inverse(n), counts;
  // NaNs compare equal to each other (numpy.unique's equal_nan) and sort after every number, so that the
  // search and the sort see a total order.
  auto same = [](const std::vector<double>& a, const std::vector<double>& b) {
    for (size_t i = 0; i < a.size(); ++i) {
      if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
    }
    return true;
  };
  auto less = [](const std::vector<double>& a, const std::vector<double>& b) {
    for (size_t i = 0; i < a.size(); ++i) {
      bool na = std::isnan(a[i]), nb = std::isnan(b[i]);
      if (na || nb) {
        if (na != nb) return nb;
        continue;
      }
      if (a[i] != b[i]) return a[i] < b[i];
    }
    return false;
  };
  for (int64_t k = 0; k < n; ++k) {
    auto s = slice(k);
    auto it = std::find_if(uniq.begin(), uniq.end(), [&](const std::vector<double>& u) { return same(u, s); });
    if (it == uniq.end()) {
      inverse[k] = static_cast<int64_t>(uniq.size());
      uniq.push_back(s);
      first.push_back(k);
      counts.push_back(1);
    } else {
      inverse[k] = it - uniq.begin();
      ++counts[inverse[k]];
    }
  }
  std::vector<int64_t> order(uniq.size());
  std::iota(order.begin(), order.end(), 0);
  if (sorted) std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return less(uniq[a], uniq[b]); });
  std::vector<int64_t> rank(order.size());
  for (size_t i = 0; i < order.size(); ++i) rank[order[i]] = static_cast<int64_t>(i);
  int64_t u = static_cast<int64_t>(uniq.size());
  Dims od = src.dims();
  od[ax] = u;
  Tensor& y = ctx.Alloc(0, x.dtype(), od);
  std::vector<double> yv(y.numel());
  for (int64_t j = 0; j < u; ++j)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) yv[(o * u + j) * inner + i] = uniq[order[j]][o * inner + i];
  CJIT_RETURN_IF_ERROR(StoreDoubles(y, yv));
  auto put = [&](int idx, const std::vector<int64_t>& vals) {
    if (!ctx.wants(idx)) return;
    Tensor& t = ctx.Alloc(idx, DType::kI64, {static_cast<int64_t>(vals.size())});
    std::copy(vals.begin(), vals.end(), t.data<int64_t>());
  };
  std::vector<int64_t> f(u), c(u), inv(n);
  for (int64_t j = 0; j < u; ++j) { f[j] = first[order[j]]; c[j] = counts[order[j]]; }
  for (int64_t k = 0; k < n; ++k) inv[k] = rank[inverse[k]];
  put(1, f);
  put(2, inv);
  put(3, c);
  return absl::OkStatus();
}

absl::Status ReverseSequence(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  std::vector<int64_t> lens = ctx.in(1).ToInt64Vector();
  int ba = static_cast<int>(ctx.node->GetInt("batch_axis", 1)), ta = static_cast<int>(ctx.node->GetInt("time_axis", 0));
  int r = x.rank();
  if (r < 2 || ba < 0 || ta < 0 || ba >= r || ta >= r || ba == ta || ba > 1 || ta > 1) {
    return ctx.Error("batch_axis and time_axis must be 0 and 1 (in either order) of an input of rank >= 2");
  }
  if (static_cast<int64_t>(lens.size()) != x.dim(ba)) {
    return ctx.Error(absl::StrCat("sequence_lens has ", lens.size(), " values for a batch of ", x.dim(ba)));
  }
  for (int64_t l : lens) {
    if (l < 0 || l > x.dim(ta)) {
      return ctx.Error(absl::StrCat("sequence_lens value ", l, " is outside [0, ", x.dim(ta), "] (the time dim)"));
    }
  }
  Tensor& y = ctx.Alloc(0);
  std::vector<int64_t> xs(r, 1);
  for (int i = r - 2; i >= 0; --i) xs[i] = xs[i + 1] * x.dim(i + 1);
  size_t es = DTypeSize(x.dtype());
  for (int64_t e = 0; e < x.numel(); ++e) {
    int64_t b = (e / xs[ba]) % x.dim(ba), t = (e / xs[ta]) % x.dim(ta);
    int64_t src = e;
    if (t < lens[b]) src = e + (lens[b] - 1 - 2 * t) * xs[ta];
    std::memcpy(static_cast<uint8_t*>(y.raw()) + e * es, static_cast<const uint8_t*>(x.raw()) + src * es, es);
  }
  return absl::OkStatus();
}

absl::Status MaxUnpool(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  if (ctx.in(1).dims() != x.dims()) {
    return ctx.Error(absl::StrCat("I has dims ", DimsToString(ctx.in(1).dims()), ", X ", DimsToString(x.dims())));
  }
  std::vector<int64_t> idx = ctx.in(1).ToInt64Vector();
  Tensor& y = ctx.Alloc(0);
  std::memset(y.raw(), 0, y.nbytes());
  size_t es = DTypeSize(x.dtype());
  // Indices address the default unpooled shape ((in-1)*stride + k - pads); with output_shape given, each
  // index is re-laid out into the requested (larger) spatial dims.
  size_t sp = x.rank() - 2;
  std::vector<int64_t> k = ctx.node->GetInts("kernel_shape");
  std::vector<int64_t> st = ctx.node->GetInts("strides", std::vector<int64_t>(sp, 1));
  std::vector<int64_t> pads = ctx.node->GetInts("pads", std::vector<int64_t>(2 * sp, 0));
  if (k.size() != sp || st.size() != sp || pads.size() != 2 * sp) return ctx.Error("bad kernel_shape/strides/pads");
  Dims def(x.dims().begin(), x.dims().end());
  for (size_t i = 0; i < sp; ++i) def[2 + i] = (x.dim(2 + i) - 1) * st[i] + k[i] - pads[i] - pads[sp + i];
  int64_t def_n = NumElements(def);
  for (int64_t e = 0; e < x.numel(); ++e) {
    if (idx[e] < 0 || idx[e] >= def_n) return ctx.Error(absl::StrCat("index ", idx[e], " out of range"));
    int64_t rem = idx[e], off = 0;
    std::vector<int64_t> coord(def.size());
    for (int d = static_cast<int>(def.size()) - 1; d >= 0; --d) { coord[d] = rem % def[d]; rem /= def[d]; }
    for (size_t d = 0; d < def.size(); ++d) off = off * y.dim(static_cast<int>(d)) + coord[d];
    if (off >= y.numel()) return ctx.Error("index outside output_shape");
    std::memcpy(static_cast<uint8_t*>(y.raw()) + off * es, static_cast<const uint8_t*>(x.raw()) + e * es, es);
  }
  return absl::OkStatus();
}

absl::Status Det(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  if (x.rank() < 2 || x.dim(x.rank() - 1) != x.dim(x.rank() - 2)) {
    return ctx.Error(absl::StrCat("input ", DimsToString(x.dims()), " is not a (batch of) square matrices"));
  }
  int64_t m = x.dim(x.rank() - 1);
  int64_t batch = x.numel() / std::max<int64_t>(m * m, 1);
  std::vector<double> v = x.ToDoubleVector(), out(batch);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<double> a(v.begin() + b * m * m, v.begin() + (b + 1) * m * m);
    double det = 1;
    for (int64_t c = 0; c < m; ++c) {
      int64_t p = c;
      for (int64_t r = c + 1; r < m; ++r) if (std::abs(a[r * m + c]) > std::abs(a[p * m + c])) p = r;
      if (a[p * m + c] == 0) { det = 0; break; }
      if (p != c) { for (int64_t k = 0; k < m; ++k) std::swap(a[p * m + k], a[c * m + k]); det = -det; }
      det *= a[c * m + c];
      for (int64_t r = c + 1; r < m; ++r) {
        double f = a[r * m + c] / a[c * m + c];
        for (int64_t k = c; k < m; ++k) a[r * m + k] -= f * a[c * m + k];
      }
    }
    out[b] = det;
  }
  Tensor& y = ctx.Alloc(0);
  return StoreDoubles(y, out);
}

absl::Status Window(KernelContext& ctx, int kind) {
  int64_t size = ctx.in(0).ToInt64Vector().at(0);
  bool periodic = ctx.node->GetInt("periodic", 1) != 0;
  Tensor& y = ctx.Alloc(0);
  double N = periodic ? size : size - 1;
  std::vector<double> w(size);
  for (int64_t n = 0; n < size; ++n) {
    double t = 2 * M_PI * n / N;
    if (kind == 0) w[n] = 0.5 - 0.5 * std::cos(t);
    else if (kind == 1) w[n] = 25.0 / 46 - (1 - 25.0 / 46) * std::cos(t);
    else w[n] = 0.42 - 0.5 * std::cos(t) + 0.08 * std::cos(2 * t);
  }
  return StoreDoubles(y, w);
}

// Einsum by direct summation over every letter's range (ONNX Einsum; implicit output = sorted letters
// that appear once; "..." broadcast dims).
absl::Status Einsum(KernelContext& ctx) {
  std::string eq;
  for (char c : ctx.node->GetString("equation", "")) if (!std::isspace(static_cast<unsigned char>(c))) eq.push_back(c);
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  size_t start = 0;
  for (size_t i = 0; i <= lhs.size(); ++i) {
    if (i == lhs.size() || lhs[i] == ',') { terms.push_back(lhs.substr(start, i - start)); start = i + 1; }
  }
  if (static_cast<int>(terms.size()) != ctx.num_inputs()) return ctx.Error("operand count differs from the equation");
  // Replace "..." by placeholder characters 1, 2, ... (one per broadcast dim, right-aligned): never an
  // equation letter (EinsumInfer admits only ASCII letters), so upper-case letters of the equation keep
  // their own ranges.
  int max_ell = 0;
  for (size_t k = 0; k < terms.size(); ++k) {
    size_t e = terms[k].find("...");
    if (e != std::string::npos)
      max_ell = std::max<int>(max_ell, ctx.in(k).rank() - static_cast<int>(terms[k].size() - 3));
  }
  if (max_ell > 31) return ctx.Error("more than 31 dims under an ellipsis");
  std::string ell;
  for (int i = 0; i < max_ell; ++i) ell.push_back(static_cast<char>(1 + i));
  std::map<char, int64_t> size;
  for (size_t k = 0; k < terms.size(); ++k) {
    size_t e = terms[k].find("...");
    if (e != std::string::npos) {
      int n = ctx.in(k).rank() - static_cast<int>(terms[k].size() - 3);
      terms[k] = terms[k].substr(0, e) + ell.substr(max_ell - n) + terms[k].substr(e + 3);
    }
    if (static_cast<int>(terms[k].size()) != ctx.in(k).rank())
      return ctx.Error("term length differs from operand rank");
    for (size_t i = 0; i < terms[k].size(); ++i) {
      int64_t d = ctx.in(k).dim(static_cast<int>(i));
      auto it = size.find(terms[k][i]);
      if (it == size.end() || it->second == 1) size[terms[k][i]] = d;
      else if (d != 1 && d != it->second) return ctx.Error("inconsistent sizes for an equation letter");
    }
  }
  std::string out;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
    size_t e = out.find("...");
    if (e != std::string::npos) out = out.substr(0, e) + ell + out.substr(e + 3);
  } else {
    std::map<char, int> count;
    for (const auto& t : terms) for (char c : t) ++count[c];
    out = ell;
    for (const auto& [c, n] : count) if (n == 1 && std::islower(static_cast<unsigned char>(c))) out.push_back(c);
  }
  std::string letters = out;
  for (const auto& [c, d] : size) if (out.find(c) == std::string::npos) letters.push_back(c);
  Dims od;
  for (char c : out) od.push_back(size[c]);
  std::vector<std::vector<double>> vals;
  std::vector<std::vector<int64_t>> strides(terms.size());
  for (size_t k = 0; k < terms.size(); ++k) {
    vals.push_back(ctx.in(k).ToDoubleVector());
    std::vector<int64_t> st(ctx.in(k).rank(), 1);
    for (int i = ctx.in(k).rank() - 2; i >= 0; --i) st[i] = st[i + 1] * ctx.in(k).dim(i + 1);
    for (int i = 0; i < ctx.in(k).rank(); ++i) if (ctx.in(k).dim(i) == 1) st[i] = 0;
    strides[k] = st;
  }
  int64_t out_n = NumElements(od), sum_n = 1;
  for (size_t i = out.size(); i < letters.size(); ++i) sum_n *= size[letters[i]];
  std::vector<double> res(out_n, 0.0);
  // Index of each letter's current position, by the letter's byte value.
  std::vector<int64_t> idx(256, 0);
  auto at = [&idx](char c) -> int64_t& { return idx[static_cast<unsigned char>(c)]; };
  for (int64_t o = 0; o < out_n; ++o) {
    int64_t rem = o;
    for (int i = static_cast<int>(out.size()) - 1; i >= 0; --i) { at(out[i]) = rem % od[i]; rem /= od[i]; }
    double acc = 0;
    for (int64_t s = 0; s < sum_n; ++s) {
      int64_t r2 = s;
      for (int i = static_cast<int>(letters.size()) - 1; i >= static_cast<int>(out.size()); --i) {
        at(letters[i]) = r2 % size[letters[i]];
        r2 /= size[letters[i]];
      }
      double p = 1;
      for (size_t k = 0; k < terms.size(); ++k) {
        int64_t off = 0;
        for (size_t i = 0; i < terms[k].size(); ++i) off += at(terms[k][i]) * strides[k][i];
        p *= vals[k][off];
      }
      acc += p;
    }
    res[o] = acc;
  }
  Tensor& y = ctx.Alloc(0, ctx.in(0).dtype(), od);
  return StoreDoubles(y, res);
}

// GridSample (opset 16, 4-D): bilinear / nearest / bicubic; zeros / border / reflection padding.
absl::Status GridSample(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& grid = ctx.in(1);
  std::string mode = ctx.node->GetString("mode", "bilinear");
  std::string pad = ctx.node->GetString("padding_mode", "zeros");
  bool align = ctx.node->GetInt("align_corners", 0) != 0;
  int64_t N = x.dim(0), Cc = x.dim(1), H = x.dim(2), W = x.dim(3), Ho = grid.dim(1), Wo = grid.dim(2);
  Tensor& y = ctx.Alloc(0);
  std::vector<double> xv = x.ToDoubleVector(), gv = grid.ToDoubleVector(), out(N * Cc * Ho * Wo);
  auto unnorm = [&](double c, int64_t len) { return align ? (c + 1) / 2 * (len - 1) : ((c + 1) * len - 1) / 2; };
  // Reflects c into [lo, hi] (period 2 * range); fmod, not an integer count of periods, so that a huge
  // coordinate is not an out-of-range float-to-int conversion.
  auto reflect = [&](double c, double lo, double hi) {
    double range = hi - lo;
    if (range <= 0) return lo;
    if (c < lo) { double m = std::fmod(lo - c, 2 * range); return m < range ? lo + m : hi - (m - range); }
    if (c > hi) { double m = std::fmod(c - hi, 2 * range); return m < range ? hi - m : lo + (m - range); }
    return c;
  };
  // A sample position as an index: far-out positions (and +-inf) clamp to a value still outside the image.
  auto index = [](double v) { return static_cast<int64_t>(std::clamp(v, -1e15, 1e15)); };
  auto fix = [&](double c, int64_t len) {
    if (pad == "border") return std::clamp(c, 0.0, static_cast<double>(len - 1));
    if (pad == "reflection") return align ? reflect(c, 0, len - 1) : reflect(c, -0.5, len - 0.5);
    return c;
  };
  auto at = [&](int64_t n, int64_t c, int64_t yy, int64_t xx) -> double {
    if (pad != "zeros") { yy = std::clamp<int64_t>(yy, 0, H - 1); xx = std::clamp<int64_t>(xx, 0, W - 1); }
    if (yy < 0 || yy >= H || xx < 0 || xx >= W) return 0;
    return xv[((n * Cc + c) * H + yy) * W + xx];
  };
  auto cubic = [](double t, double a = -0.75) {
    t = std::abs(t);
    if (t <= 1) return ((a + 2) * t - (a + 3)) * t * t + 1;
    if (t < 2) return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a;
    return 0.0;
  };
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < Ho; ++i)
      for (int64_t j = 0; j < Wo; ++j) {
        double gx = unnorm(gv[((n * Ho + i) * Wo + j) * 2], W), gy = unnorm(gv[((n * Ho + i) * Wo + j) * 2 + 1], H);
        gx = fix(gx, W);
        gy = fix(gy, H);
        for (int64_t c = 0; c < Cc; ++c) {
          double v = 0;
          if (std::isnan(gx) || std::isnan(gy)) {
            v = std::numeric_limits<double>::quiet_NaN();  // a NaN position samples nothing: NaN, as in PyTorch
          } else if (mode == "nearest") {
            v = at(n, c, index(std::nearbyint(gy)), index(std::nearbyint(gx)));
          } else if (mode == "bilinear") {
            int64_t x0 = index(std::floor(gx)), y0 = index(std::floor(gy));
            double fx = gx - x0, fy = gy - y0;
            v = at(n, c, y0, x0) * (1 - fx) * (1 - fy) + at(n, c, y0, x0 + 1) * fx * (1 - fy) +
                at(n, c, y0 + 1, x0) * (1 - fx) * fy + at(n, c, y0 + 1, x0 + 1) * fx * fy;
          } else {
            int64_t x0 = index(std::floor(gx)), y0 = index(std::floor(gy));
            double fx = gx - x0, fy = gy - y0;
            for (int a = -1; a <= 2; ++a)
              for (int b = -1; b <= 2; ++b) v += at(n, c, y0 + a, x0 + b) * cubic(fy - a) * cubic(fx - b);
          }
          out[((n * Cc + c) * Ho + i) * Wo + j] = v;
        }
      }
  return StoreDoubles(y, out);
}

// RoiAlign (ONNX RoiAlign-10/16; Mask R-CNN's RoIAlign, He et al. 2017): each output bin averages (or, in
// max mode, takes the largest of) grid_h x grid_w bilinear samples; a sample's four weighted corner values
// are summed (avg) or their largest taken (max), as the ONNX reference and ONNX Runtime define it.
// Samples outside [-1, H] x [-1, W] contribute zero; the sample positions and weights are computed once per
// ROI and shared by its channels.
absl::Status RoiAlign(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& rois_t = ctx.in(1);
  const Tensor& idx_t = ctx.in(2);
  if (x.rank() != 4 || rois_t.rank() != 2 || rois_t.dim(1) != 4 || idx_t.rank() != 1 ||
      idx_t.dim(0) != rois_t.dim(0) || idx_t.dtype() != DType::kI64 || rois_t.dtype() != x.dtype()) {
    return ctx.Error(absl::StrCat("X must be [N, C, H, W], rois [R, 4] of X's dtype and batch_indices int64 [R], got ",
                                  DTypeName(x.dtype()), "[", DimsToString(x.dims()), "], ", DTypeName(rois_t.dtype()),
                                  "[", DimsToString(rois_t.dims()), "] and ", DTypeName(idx_t.dtype()), "[",
                                  DimsToString(idx_t.dims()), "]"));
  }
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), R = rois_t.dim(0);
  const int64_t oh = ctx.node->GetInt("output_height", 1), ow = ctx.node->GetInt("output_width", 1);
  const int64_t ratio = ctx.node->GetInt("sampling_ratio", 0);
  // The adaptive sampling (ratio 0) takes at most 1024 samples per side of a bin, an explicit ratio no more,
  // and one ROI's sample table (oh * ow * samples per bin) at most kMaxRoiSamples entries.
  constexpr int64_t kMaxRoiSamples = int64_t{1} << 22;
  if (ratio < 0 || ratio > 1024) {
    return ctx.Error(absl::StrCat("sampling_ratio ", ratio, " is outside [0, 1024]"));
  }
  if (oh <= 0 || ow <= 0 || oh > kMaxRoiSamples / ow ||
      (ratio > 0 && oh * ow > kMaxRoiSamples / (ratio * ratio))) {
    return ctx.Error(absl::StrCat("output_height ", oh, " x output_width ", ow, " with sampling_ratio ", ratio,
                                  " needs more than ", kMaxRoiSamples, " samples per ROI"));
  }
  // Samples per side of a bin the adaptive sampling may take within that table.
  const int64_t adaptive_max =
      std::clamp<int64_t>(static_cast<int64_t>(std::sqrt(static_cast<double>(kMaxRoiSamples / (oh * ow)))), 1, 1024);
  const double scale = ctx.node->GetFloat("spatial_scale", 1.0f);
  const bool max_mode = ctx.node->GetString("mode", "avg") == "max";
  // RoiAlign-10 has no coordinate_transformation_mode: its behaviour is output_half_pixel.
  const bool half_pixel = ctx.node->opset_version >= 16 &&
                          ctx.node->GetString("coordinate_transformation_mode", "half_pixel") == "half_pixel";
  std::vector<double> rois = rois_t.ToDoubleVector();
  const int64_t* bi = idx_t.data<int64_t>();
  for (int64_t r = 0; r < R; ++r) {
    if (bi[r] < 0 || bi[r] >= N) {
      return ctx.Error(absl::StrCat("batch_indices[", r, "] = ", bi[r], " is outside [0, ", N, ")"));
    }
    for (int k = 0; k < 4; ++k) {
      if (!std::isfinite(rois[r * 4 + k])) return ctx.Error(absl::StrCat("rois[", r, "] is not finite"));
    }
  }
  Tensor& y = ctx.Alloc(0, x.dtype(), {R, C, oh, ow});
  if (y.numel() == 0) return absl::OkStatus();
  if (H == 0 || W == 0) return ctx.Error("X has an empty spatial dim");
  struct Sample {
    int64_t pos[4];
    double w[4];
  };
  return DispatchFloat(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xd = x.data<T>();
    T* yd = y.data<T>();
    ParallelFor(ctx.threads, R, [&](int64_t r) {
      const double off = half_pixel ? 0.5 : 0.0;
      const double x0 = rois[r * 4] * scale - off, y0 = rois[r * 4 + 1] * scale - off;
      double rw = rois[r * 4 + 2] * scale - off - x0, rh = rois[r * 4 + 3] * scale - off - y0;
      if (!half_pixel) {
        rw = std::max(rw, 1.0);  // malformed ROIs become 1x1 (output_half_pixel, RoiAlign-10)
        rh = std::max(rh, 1.0);
      }
      const double bh = rh / oh, bw = rw / ow;
      // Bins of a degenerate or huge ROI: at most adaptive_max samples per side.
      const int64_t gh =
          ratio > 0 ? ratio : std::clamp<int64_t>(static_cast<int64_t>(std::ceil(rh / oh)), 0, adaptive_max);
      const int64_t gw =
          ratio > 0 ? ratio : std::clamp<int64_t>(static_cast<int64_t>(std::ceil(rw / ow)), 0, adaptive_max);
      const double count = static_cast<double>(std::max<int64_t>(gh * gw, 1));
      std::vector<Sample> samples(oh * ow * gh * gw);
      size_t s = 0;
      for (int64_t ph = 0; ph < oh; ++ph)
        for (int64_t pw = 0; pw < ow; ++pw)
          for (int64_t iy = 0; iy < gh; ++iy) {
            const double yy = y0 + ph * bh + (iy + 0.5) * bh / gh;
            for (int64_t ix = 0; ix < gw; ++ix, ++s) {
              double xx = x0 + pw * bw + (ix + 0.5) * bw / gw, yv = yy;
              Sample& sm = samples[s];
              if (yv < -1.0 || yv > H || xx < -1.0 || xx > W) {
                sm = Sample{{0, 0, 0, 0}, {0, 0, 0, 0}};
                continue;
              }
              yv = std::max(yv, 0.0);
              xx = std::max(xx, 0.0);
              int64_t ylo = static_cast<int64_t>(yv), xlo = static_cast<int64_t>(xx), yhi, xhi;
              if (ylo >= H - 1) yhi = ylo = H - 1, yv = static_cast<double>(ylo);
              else yhi = ylo + 1;
              if (xlo >= W - 1) xhi = xlo = W - 1, xx = static_cast<double>(xlo);
              else xhi = xlo + 1;
              const double ly = yv - ylo, lx = xx - xlo, hy = 1 - ly, hx = 1 - lx;
              sm = Sample{{ylo * W + xlo, ylo * W + xhi, yhi * W + xlo, yhi * W + xhi},
                          {hy * hx, hy * lx, ly * hx, ly * lx}};
            }
          }
      const int64_t per_bin = gh * gw;
      for (int64_t c = 0; c < C; ++c) {
        const T* plane = xd + (bi[r] * C + c) * H * W;
        T* out = yd + ((r * C + c) * oh) * ow;
        for (int64_t b = 0; b < oh * ow; ++b) {
          const Sample* sp = samples.data() + b * per_bin;
          double v = 0;
          if (!max_mode) {
            for (int64_t k = 0; k < per_bin; ++k) {
              const Sample& q = sp[k];
              v += q.w[0] * static_cast<double>(plane[q.pos[0]]) + q.w[1] * static_cast<double>(plane[q.pos[1]]) +
                   q.w[2] * static_cast<double>(plane[q.pos[2]]) + q.w[3] * static_cast<double>(plane[q.pos[3]]);
            }
            v /= count;
          } else {
            for (int64_t k = 0; k < per_bin; ++k) {
              const Sample& q = sp[k];
              double m = q.w[0] * static_cast<double>(plane[q.pos[0]]);
              for (int j = 1; j < 4; ++j) m = std::max(m, q.w[j] * static_cast<double>(plane[q.pos[j]]));
              v = k == 0 ? m : std::max(v, m);
            }
          }
          out[b] = NumericCast<T>(v);
        }
      }
    });
  });
}

// TfIdfVectorizer (ONNX TfIdfVectorizer-9) over an integer pool: for each row, every n-gram of length
// min_gram_length..max_gram_length whose items are skip_distance = 1..max_skip_count + 1 apart is looked up
// in the pool (pool_int64s, grouped by length at the offsets ngram_counts); a hit counts at its output
// column ngram_indexes[k] (k: the n-gram's position in the pool). Unigrams count once, not once per skip
// distance. mode TF = counts, IDF = weight if the count is positive, TFIDF = count * weight (weights
// default 1), as the ONNX reference computes.
// TfIdfVectorizer's lookup tables, built from the node's attributes once per distinct attribute set (a
// pool of thousands of strings or n-grams would otherwise be rebuilt at every run, as ONNX Runtime builds
// them once at session creation).
struct TfIdfTables {
  // A string pool: each distinct pool string's id (its first position among distinct strings); X's strings
  // map to their pool id, or -1 when absent. The n-gram counting then runs on ids.
  absl::flat_hash_map<std::string, int64_t> string_ids;
  // Pool n-gram -> output column (a later duplicate wins, as in the reference).
  absl::flat_hash_map<std::vector<int64_t>, int64_t> grams;
  int64_t size = 0;  // output columns: max(ngram_indexes) + 1
};

absl::StatusOr<std::shared_ptr<const TfIdfTables>> BuildTfIdfTables(const KernelContext& ctx, int64_t min_n,
                                                                    int64_t max_n) {
  const Node& node = *ctx.node;
  auto tables = std::make_shared<TfIdfTables>();
  const std::vector<int64_t> counts = node.GetInts("ngram_counts"), indexes = node.GetInts("ngram_indexes");
  std::vector<int64_t> pool = node.GetInts("pool_int64s");
  if (auto it = node.attrs.find("pool_strings"); it != node.attrs.end()) {
    pool.clear();
    for (const std::string& w : it->second.strings) {
      pool.push_back(tables->string_ids.emplace(w, static_cast<int64_t>(tables->string_ids.size())).first->second);
    }
  }
  for (int64_t i : indexes) tables->size = std::max(tables->size, i + 1);
  int64_t k = 0;
  for (size_t g = 0; g < counts.size(); ++g) {
    const int64_t len = static_cast<int64_t>(g) + 1;
    const int64_t begin = counts[g], end = g + 1 < counts.size() ? counts[g + 1] : static_cast<int64_t>(pool.size());
    if (begin < 0 || end < begin || end > static_cast<int64_t>(pool.size()) || (end - begin) % len != 0) {
      return ctx.Error(
          absl::StrCat("ngram_counts[", g, "] = ", begin, " does not split the pool into ", len, "-grams"));
    }
    for (int64_t at = begin; at < end; at += len, ++k) {
      if (k >= static_cast<int64_t>(indexes.size())) return ctx.Error("fewer ngram_indexes than pool n-grams");
      if (len >= min_n && len <= max_n) {
        tables->grams[std::vector<int64_t>(pool.begin() + at, pool.begin() + at + len)] = indexes[k];
      }
    }
  }
  return std::shared_ptr<const TfIdfTables>(std::move(tables));
}

// The tables of this node's attributes, from a process-wide cache keyed by their content (so two nodes or
// sessions with the same pool share one; at most 32 sets are kept). Thread-safe.
absl::StatusOr<std::shared_ptr<const TfIdfTables>> TfIdfTablesOf(const KernelContext& ctx, int64_t min_n,
                                                                int64_t max_n) {
  const Node& node = *ctx.node;
  std::string key = absl::StrCat(min_n, ";", max_n, ";", absl::StrJoin(node.GetInts("ngram_counts"), ","), ";",
                                 absl::StrJoin(node.GetInts("ngram_indexes"), ","), ";",
                                 absl::StrJoin(node.GetInts("pool_int64s"), ","), ";");
  if (auto it = node.attrs.find("pool_strings"); it != node.attrs.end()) {
    for (const std::string& w : it->second.strings) absl::StrAppend(&key, w.size(), ":", w);
  }
  static auto* cache = new AttributeCache<TfIdfTables>(32);
  return cache->GetOrBuild(std::move(key), [&] { return BuildTfIdfTables(ctx, min_n, max_n); });
}

absl::Status TfIdfVectorizer(KernelContext& ctx) {
  const Node& node = *ctx.node;
  const Tensor& x = ctx.in(0);
  if (x.rank() > 2) return ctx.Error("X must be [C] or [B, C]");
  const int64_t min_n = node.GetInt("min_gram_length", 1), max_n = node.GetInt("max_gram_length", 1);
  const int64_t max_skip = node.GetInt("max_skip_count", 0);
  const std::string mode = node.GetString("mode", "TF");
  const std::vector<float> weights = node.GetFloats("weights");
  const bool string_pool = node.HasAttr("pool_strings");
  if (string_pool && x.dtype() != DType::kString) return ctx.Error("pool_strings needs a string X");
  if (!string_pool && x.dtype() == DType::kString) return ctx.Error("a string X needs pool_strings");
  if (min_n < 1 || max_n < min_n || max_skip < 0) {
    return ctx.Error(absl::StrCat("need 1 <= min_gram_length <= max_gram_length and max_skip_count >= 0, got ", min_n,
                                  ", ", max_n, ", ", max_skip));
  }
  if (mode != "TF" && mode != "IDF" && mode != "TFIDF") return ctx.Error(absl::StrCat("unsupported mode '", mode, "'"));
  CJIT_ASSIGN_OR_RETURN(std::shared_ptr<const TfIdfTables> tables, TfIdfTablesOf(ctx, min_n, max_n));
  const int64_t size = tables->size;
  if (!weights.empty() && static_cast<int64_t>(weights.size()) < size) {
    return ctx.Error(absl::StrCat("weights has ", weights.size(), " values for ", size, " outputs"));
  }
  const auto& grams = tables->grams;
  const auto& string_ids = tables->string_ids;
  const int64_t rows = x.rank() == 2 ? x.dim(0) : 1, cols = x.rank() == 0 ? 1 : x.dim(x.rank() - 1);
  Tensor& y = ctx.Alloc(0, DType::kF32, x.rank() == 2 ? Dims{rows, size} : Dims{size});
  std::vector<int64_t> v, freq(rows * size, 0);
  if (x.dtype() == DType::kString) {
    v.resize(static_cast<size_t>(x.numel()));
    for (int64_t i = 0; i < x.numel(); ++i) {
      auto id = string_ids.find(x.data<std::string>()[i]);
      v[i] = id == string_ids.end() ? -1 : id->second;
    }
  } else {
    v = x.ToInt64Vector();
  }
  std::vector<int64_t> gram;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t* row = v.data() + r * cols;
    int64_t first = min_n;
    // A distance of cols or more leaves only unigrams, which the first distance counted.
    const int64_t last_skip = std::min<int64_t>(max_skip, std::max<int64_t>(cols - 1, 0)) + 1;
    for (int64_t skip = 1; skip <= last_skip; ++skip) {
      for (int64_t start = 0; start < cols; ++start) {
        gram.clear();
        for (int64_t len = 1, at = start; len <= max_n && at < cols; ++len, at += skip) {
          gram.push_back(row[at]);
          if (len < first) continue;
          if (auto it = grams.find(gram); it != grams.end()) ++freq[r * size + it->second];
        }
      }
      if (first == 1) {  // unigrams do not depend on the skip distance
        first = 2;
        if (first > max_n) break;
      }
    }
  }
  float* out = y.data<float>();
  for (int64_t i = 0; i < rows * size; ++i) {
    const double w = weights.empty() ? 1.0 : weights[i % size];
    out[i] = static_cast<float>(mode == "TF" ? freq[i] : mode == "IDF" ? (freq[i] > 0 ? w : 0.0) : freq[i] * w);
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterMiscKernels() {
  RegisterKernel("NegativeLogLikelihoodLoss", Nll);
  RegisterKernel("SoftmaxCrossEntropyLoss", Sce);
  RegisterKernel("NonMaxSuppression", Nms);
  RegisterKernel("Unique", Unique);
  RegisterKernel("ReverseSequence", ReverseSequence);
  RegisterKernel("MaxUnpool", MaxUnpool);
  RegisterKernel("Det", Det);
  RegisterKernel("HannWindow", [](KernelContext& ctx) { return Window(ctx, 0); });
  RegisterKernel("HammingWindow", [](KernelContext& ctx) { return Window(ctx, 1); });
  RegisterKernel("BlackmanWindow", [](KernelContext& ctx) { return Window(ctx, 2); });
  RegisterKernel("Einsum", Einsum);
  RegisterKernel("GridSample", GridSample);
  RegisterKernel("RoiAlign", RoiAlign);
  RegisterKernel("TfIdfVectorizer", TfIdfVectorizer);
}

}  // namespace cjit
