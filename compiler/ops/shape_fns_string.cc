// Shape/dtype functions of the string operators (ONNX operator specification: StringNormalizer-10,
// StringConcat-20, StringSplit-20, RegexFullMatch-20). Cast / CastLike to and from string and TfIdfVectorizer's string
// pool share their numeric ops' functions.
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/ops/op_registry.h"
#include "compiler/ops/shape_fn_util.h"

namespace cjit {
namespace {

using namespace shape_fn;  // NOLINT: Inputs, Outputs, C, A, Reg

absl::Status ExpectStrings(const Node& n, Inputs in, size_t count) {
  for (size_t i = 0; i < count && i < in.size(); ++i) {
    if (in[i].present && in[i].dtype != DType::kInvalid && in[i].dtype != DType::kString) {
      return NodeError(n, absl::StrCat("input ", i, " is ", DTypeName(in[i].dtype), "; ", n.op_type, " takes strings"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterStringOps() {
  // X [C] or [1, C] -> Y [C'] / [1, C'] (C' known only from the data).
  Reg("StringNormalizer", C::kOther, false, A::kDeny, 1, 1, [](const Node& n, Inputs in, Outputs& out) {
    CJIT_RETURN_IF_ERROR(ExpectStrings(n, in, 1));
    const Shape& x = in[0].shape;
    if (x.rank_known && x.rank() != 1 && !(x.rank() == 2 && (!x.dims[0].known() || x.dims[0].value == 1))) {
      return NodeError(n, absl::StrCat("X must be [C] or [1, C], got ", x.ToString()));
    }
    out[0].dtype = DType::kString;
    if (x.rank_known) {
      out[0].shape.rank_known = true;
      out[0].shape.dims.assign(x.rank(), Dim{});
      if (x.rank() == 2) out[0].shape.dims[0] = Dim{1, ""};
    }
    return absl::OkStatus();
  });
  Reg("StringConcat", C::kOther, false, A::kDeny, 2, 2, [](const Node& n, Inputs in, Outputs& out) {
    CJIT_RETURN_IF_ERROR(ExpectStrings(n, in, 2));
    CJIT_ASSIGN_OR_RETURN(out[0].shape, BroadcastShapes(n, {in[0].shape, in[1].shape}));
    out[0].dtype = DType::kString;
    return absl::OkStatus();
  });
  Reg("RegexFullMatch", C::kOther, false, A::kDeny, 1, 1, [](const Node& n, Inputs in, Outputs& out) {
    CJIT_RETURN_IF_ERROR(ExpectStrings(n, in, 1));
    if (!n.HasAttr("pattern")) return NodeError(n, "the 'pattern' attribute is missing");
    out[0] = InferOutput{DType::kBool, in[0].shape};
    return absl::OkStatus();
  });
  // Y: X's dims + [longest split]; Z: int64 of X's dims.
  Reg("StringSplit", C::kOther, false, A::kDeny, 1, 1, [](const Node& n, Inputs in, Outputs& out) {
    CJIT_RETURN_IF_ERROR(ExpectStrings(n, in, 1));
    out[0].dtype = DType::kString;
    if (in[0].shape.rank_known) {
      out[0].shape = in[0].shape;
      out[0].shape.dims.push_back(Dim{});
    }
    if (out.size() > 1) out[1] = InferOutput{DType::kI64, in[0].shape};
    return absl::OkStatus();
  });
}

}  // namespace cjit
