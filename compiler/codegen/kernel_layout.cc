#include "compiler/codegen/kernel_layout.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace cjit {

// Collapses adjacent iteration dims that every input (and the dense output) walks contiguously.
// With keep_last, the last dim is never merged with the others (row kernels iterate over it per row).
Collapsed Collapse(const Dims& out, const std::vector<InputLayout>& ins, bool keep_last) {
  int r = static_cast<int>(out.size());
  size_t n = ins.size();
  std::vector<std::vector<int64_t>> stride(r, std::vector<int64_t>(n + 1, 0));
  for (size_t k = 0; k < n; ++k) {
    int off = r - static_cast<int>(ins[k].dims.size());
    for (int i = 0; i < r; ++i) {
      int j = i - off;
      stride[i][k] = (j < 0 || ins[k].dims[j] == 1) ? 0 : ins[k].strides[j];
    }
  }
  int64_t s = 1;
  for (int i = r - 1; i >= 0; --i) {  // the last column is the dense output
    stride[i][n] = s;
    s *= out[i];
  }
  Collapsed c;
  std::vector<std::vector<int64_t>> cs;
  for (int i = 0; i < r; ++i) {
    bool last = keep_last && i == r - 1;
    if (out[i] == 1 && !last) continue;
    if (!c.dims.empty() && !last) {
      bool merge = true;
      for (size_t k = 0; k <= n; ++k) merge &= cs.back()[k] == stride[i][k] * out[i];
      if (merge) {
        c.dims.back() *= out[i];
        cs.back() = stride[i];
        continue;
      }
    }
    c.dims.push_back(out[i]);
    cs.push_back(stride[i]);
  }
  if (c.dims.empty()) {
    c.dims.push_back(1);
    cs.push_back(std::vector<int64_t>(n + 1, 0));
  }
  if (keep_last && c.dims.size() == 1) {  // a row kernel always has an outer dim
    c.dims.insert(c.dims.begin(), 1);
    cs.insert(cs.begin(), std::vector<int64_t>(n + 1, 0));
  }
  c.strides.assign(n, std::vector<int64_t>(c.dims.size()));
  for (size_t k = 0; k < n; ++k)
    for (size_t d = 0; d < c.dims.size(); ++d) c.strides[k][d] = cs[d][k];
  for (size_t k = 0; k < n; ++k) c.offsets.push_back(ins[k].offset);
  return c;
}

std::vector<InputLayout> Layouts(const FusedKernel& k) {
  std::vector<Dims> dims;
  for (const Value* v : k.inputs) dims.push_back(v->shape.concrete());
  return Layouts(dims, k.input_offsets, k.input_strides);
}

std::vector<InputLayout> Layouts(const std::vector<Dims>& input_dims, const std::vector<int64_t>& input_offsets,
                                 const std::vector<std::vector<int64_t>>& input_strides) {
  std::vector<InputLayout> out;
  for (size_t i = 0; i < input_dims.size(); ++i) {
    InputLayout l;
    l.dims = input_dims[i];
    if (i < input_strides.size() && input_strides[i].size() == l.dims.size()) {
      l.strides = input_strides[i];
      l.offset = input_offsets[i];
    } else {
      l.strides.assign(l.dims.size(), 1);
      for (int d = static_cast<int>(l.dims.size()) - 2; d >= 0; --d) l.strides[d] = l.strides[d + 1] * l.dims[d + 1];
    }
    out.push_back(std::move(l));
  }
  return out;
}

// Innermost access of an input: 'b' broadcast (stride 0), 'c' contiguous (stride 1), 's' strided.
char InnerClass(const Collapsed& c, size_t i) {
  int64_t s = c.strides[i].back();
  return s == 0 ? 'b' : s == 1 ? 'c' : 's';
}

// The structure of a kernel (everything but its dims): the key of the process-wide kernel cache.
std::string KernelStructure(const FusedKernel& k, const Collapsed& c) {
  std::map<const Value*, std::string> ref;
  std::string s = absl::StrCat(k.row_reduction ? "row;" : "", k.excess_precision ? "xp;" : "", "nd=", c.dims.size(),
                               ";in=");
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    ref[k.inputs[i]] = absl::StrCat("i", i);
    absl::StrAppend(&s, std::string(1, InnerClass(c, i)), DTypeName(k.inputs[i]->dtype), ",");
  }
  int n = 0;
  for (const Node* node : k.nodes) {
    absl::StrAppend(&s, ";", node->op_type, "(");
    for (const Value* v : node->inputs) {
      if (v == nullptr) absl::StrAppend(&s, "_,");
      else if (IsScalarConstant(v) && node->op_type == "Pow") {
        absl::StrAppend(&s, "k", absl::StrFormat("%a", ScalarConstantValue(v)), ",");
      } else if (IsScalarConstant(v)) {
        absl::StrAppend(&s, "p,");  // a runtime scalar parameter
      }
      else absl::StrAppend(&s, ref.at(v), ",");
    }
    absl::StrAppend(&s, ")");
    for (const auto& [name, a] : node->attrs) {
      absl::StrAppend(&s, name, "=", a.i, "/", absl::StrFormat("%a", a.f), "/", a.s, "/", absl::StrJoin(a.ints, ":"),
                      "/");
      for (float f : a.floats) absl::StrAppend(&s, absl::StrFormat("%a:", f));
      absl::StrAppend(&s, ",");
    }
    absl::StrAppend(&s, ":", DTypeName(node->outputs[0]->dtype));
    ref[node->outputs[0]] = absl::StrCat("n", n++);
  }
  absl::StrAppend(&s, ";out=");
  for (const Value* v : k.outputs) {
    absl::StrAppend(&s, ref.at(v), v->shape.concrete() == k.shape ? "" : "r", ",");
  }
  return s;
}

// The scalar parameters of a kernel, in the order the emitters read them (one per use).
std::vector<float> KernelConsts(const FusedKernel& k) {
  std::vector<float> out;
  for (const Node* node : k.nodes) {
    for (const Value* v : node->inputs) {
      if (v && IsScalarConstant(v) && node->op_type != "Pow") out.push_back(ScalarConstantValue(v));
    }
  }
  return out;
}

// meta = [inner, outer dims (nd-1)..., then for each input: its strides over all nd dims, its offset].
std::vector<int64_t> KernelMeta(const Collapsed& c) {
  int nd = static_cast<int>(c.dims.size());
  std::vector<int64_t> meta{c.dims.back()};
  for (int d = 0; d < nd - 1; ++d) meta.push_back(c.dims[d]);
  for (size_t i = 0; i < c.strides.size(); ++i) {
    for (int d = 0; d < nd; ++d) meta.push_back(c.strides[i][d]);
    meta.push_back(c.offsets[i]);
  }
  return meta;
}

// Index of input i's stride d (d = nd-1 is the inner stride) or offset (d = nd) in the meta array.
int64_t MetaIndex(int nd, size_t i, int d) { return nd + static_cast<int64_t>(i) * (nd + 1) + d; }

}  // namespace cjit
