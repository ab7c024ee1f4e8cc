// Shorthands shared by the shape_fns_*.cc files (internal to compiler/ops).
#ifndef CJIT_COMPILER_OPS_SHAPE_FN_UTIL_H_
#define CJIT_COMPILER_OPS_SHAPE_FN_UTIL_H_

#include <span>
#include <string>
#include <vector>

#include "compiler/ops/op_registry.h"

namespace cjit::shape_fn {

using Inputs = std::span<const InferInput>;
using Outputs = std::vector<InferOutput>;
using C = OpCategory;
using A = AmpClass;

inline void Reg(const std::string& name, C cat, bool clusterable, A amp, int min_in, int max_in, InferFn fn) {
  RegisterOp(OpDef{name, cat, clusterable, amp, min_in, max_in, std::move(fn)});
}

}  // namespace cjit::shape_fn

#endif  // CJIT_COMPILER_OPS_SHAPE_FN_UTIL_H_
