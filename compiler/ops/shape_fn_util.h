// Shorthands shared by the shape_fns_*.cc files (internal to compiler/ops).
#ifndef CJIT_COMPILER_OPS_SHAPE_FN_UTIL_H_
#define CJIT_COMPILER_OPS_SHAPE_FN_UTIL_H_

#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ops/op_registry.h"

namespace cjit::shape_fn {

using Inputs = std::span<const InferInput>;
using Outputs = std::vector<InferOutput>;
using C = OpCategory;
using A = AmpClass;

inline void Reg(const std::string& name, C cat, bool clusterable, A amp, int min_in, int max_in, InferFn fn) {
  RegisterOp(OpDef{name, cat, clusterable, amp, min_in, max_in, std::move(fn)});
}

// Reg for an op with OpDef::non_tensor_values: it may read and make sequences and optionals.
inline void RegNonTensor(const std::string& name, C cat, bool clusterable, A amp, int min_in, int max_in, InferFn fn) {
  OpDef def{name, cat, clusterable, amp, min_in, max_in, std::move(fn)};
  def.non_tensor_values = true;
  RegisterOp(std::move(def));
}

// Inputs [first, end) that are present are of `kind`; the error names the node, the input and both kinds.
inline absl::Status ExpectKind(const Node& n, Inputs in, ValueKind kind, size_t first, size_t end) {
  for (size_t i = first; i < end && i < in.size(); ++i) {
    if (in[i].present && in[i].kind != kind) {
      return NodeError(n, absl::StrCat("input ", i, " is a ", ValueKindName(in[i].kind), "; ", n.op_type, " takes a ",
                                       ValueKindName(kind), " there"));
    }
  }
  return absl::OkStatus();
}

}  // namespace cjit::shape_fn

#endif  // CJIT_COMPILER_OPS_SHAPE_FN_UTIL_H_
