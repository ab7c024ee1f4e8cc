// Shape/dtype functions of the sequence and optional operators (ONNX operator specification: SequenceEmpty,
// SequenceConstruct, SequenceInsert, SequenceAt, SequenceErase, SequenceLength-11, SplitToSequence-11,
// ConcatFromSequence-11, SequenceMap-17, Optional-15, OptionalHasElement / OptionalGetElement-15 and -18).
// Each checks the kind (ValueKind) of every input and sets its outputs' kinds; the element dims inside a
// sequence are data (known at run time only), so sequence outputs carry no shape.
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/ops/op_registry.h"
#include "compiler/ops/shape_fn_util.h"

namespace cjit {
namespace {

using namespace shape_fn;  // NOLINT: Inputs, Outputs, C, A, RegNonTensor, ExpectKind

// The sequence and optional ops: no category of their own, never clustered, no float arithmetic for AMP.
void RegSequenceOp(const std::string& name, int min_in, int max_in, InferFn fn) {
  RegNonTensor(name, C::kOther, false, A::kDeny, min_in, max_in, std::move(fn));
}

absl::Status Expect(const Node& n, Inputs in, size_t i, ValueKind kind) { return ExpectKind(n, in, kind, i, i + 1); }

// Every input from `first` on is a tensor.
absl::Status ExpectTensors(const Node& n, Inputs in, size_t first) {
  return ExpectKind(n, in, ValueKind::kTensor, first, in.size());
}

// A scalar integer position / split input (int32 or int64), when its shape is known.
absl::Status ExpectIndex(const Node& n, Inputs in, size_t i, const char* what, bool scalar_only) {
  if (i >= in.size() || !in[i].present) return absl::OkStatus();
  if (in[i].dtype != DType::kI32 && in[i].dtype != DType::kI64) {
    return NodeError(n, absl::StrCat(what, " must be int32 or int64, got ", DTypeName(in[i].dtype)));
  }
  // A scalar; one-element tensors are accepted too, as ONNX Runtime does (ONNX's own test data has [1]).
  if (scalar_only && in[i].shape.fully_known() && NumElements(in[i].shape.concrete()) != 1) {
    return NodeError(n, absl::StrCat(what, " must be a scalar, got ", in[i].shape.ToString()));
  }
  return absl::OkStatus();
}

InferOutput SequenceOf(DType elem) { return InferOutput{elem, Shape::Unknown(), ValueKind::kSequence}; }

absl::Status SameElementType(const Node& n, Inputs in, size_t seq, size_t tensor) {
  if (in[seq].dtype != DType::kInvalid && in[tensor].dtype != DType::kInvalid && in[seq].dtype != in[tensor].dtype) {
    return NodeError(n, absl::StrCat("the tensor is ", DTypeName(in[tensor].dtype), " but the sequence holds ",
                                     DTypeName(in[seq].dtype)));
  }
  return absl::OkStatus();
}

absl::Status SequenceMapInfer(const Node& n, Inputs in, Outputs& out) {
  CJIT_RETURN_IF_ERROR(Expect(n, in, 0, ValueKind::kSequence));
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i].kind != ValueKind::kTensor && in[i].kind != ValueKind::kSequence) {
      return NodeError(n, absl::StrCat("additional input ", i, " is a ", ValueKindName(in[i].kind),
                                       "; SequenceMap takes tensors or sequences"));
    }
  }
  const Graph* body = n.GetGraph("body");
  if (body == nullptr) return NodeError(n, "has no body");
  if (body->inputs().size() != in.size()) {
    return NodeError(n, absl::StrCat("the body takes ", body->inputs().size(), " inputs; the node has ", in.size()));
  }
  if (body->outputs().size() != out.size()) {
    return NodeError(n, absl::StrCat("the body has ", body->outputs().size(), " outputs; the node has ", out.size()));
  }
  for (size_t k = 0; k < out.size(); ++k) {
    if (body->outputs()[k]->kind != ValueKind::kTensor) {
      return NodeError(n, absl::StrCat("body output ", k, " is a ", ValueKindName(body->outputs()[k]->kind),
                                       "; SequenceMap's body makes tensors"));
    }
    out[k] = SequenceOf(body->outputs()[k]->dtype);
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterSequenceOps() {
  RegSequenceOp("SequenceEmpty", 0, 0, [](const Node& n, Inputs, Outputs& out) {
    const DType t = DTypeFromOnnxCode(n.GetInt("dtype", 1));
    if (t == DType::kInvalid) return NodeError(n, absl::StrCat("unsupported dtype ", n.GetInt("dtype", 1)));
    out[0] = SequenceOf(t);
    return absl::OkStatus();
  });
  RegSequenceOp("SequenceConstruct", 1, 1 << 20, [](const Node& n, Inputs in, Outputs& out) {
    CJIT_RETURN_IF_ERROR(ExpectTensors(n, in, 0));
    for (size_t i = 1; i < in.size(); ++i) {
      if (in[i].dtype != in[0].dtype) {
        return NodeError(n, absl::StrCat("input ", i, " is ", DTypeName(in[i].dtype), " but input 0 is ",
                                         DTypeName(in[0].dtype), "; a sequence holds tensors of one type"));
      }
    }
    out[0] = SequenceOf(in[0].dtype);
    return absl::OkStatus();
  });
  RegSequenceOp("SequenceInsert", 2, 3, [](const Node& n, Inputs in, Outputs& out) {
    CJIT_RETURN_IF_ERROR(Expect(n, in, 0, ValueKind::kSequence));
    CJIT_RETURN_IF_ERROR(ExpectTensors(n, in, 1));
    CJIT_RETURN_IF_ERROR(SameElementType(n, in, 0, 1));
    CJIT_RETURN_IF_ERROR(ExpectIndex(n, in, 2, "position", true));
    out[0] = SequenceOf(in[0].dtype);
    return absl::OkStatus();
  });
  RegSequenceOp("SequenceAt", 2, 2, [](const Node& n, Inputs in, Outputs& out) {
    CJIT_RETURN_IF_ERROR(Expect(n, in, 0, ValueKind::kSequence));
    CJIT_RETURN_IF_ERROR(ExpectTensors(n, in, 1));
    CJIT_RETURN_IF_ERROR(ExpectIndex(n, in, 1, "position", true));
    out[0] = InferOutput{in[0].dtype, Shape::Unknown(), ValueKind::kTensor};
    return absl::OkStatus();
  });
  RegSequenceOp("SequenceErase", 1, 2, [](const Node& n, Inputs in, Outputs& out) {
    CJIT_RETURN_IF_ERROR(Expect(n, in, 0, ValueKind::kSequence));
    CJIT_RETURN_IF_ERROR(ExpectTensors(n, in, 1));
    CJIT_RETURN_IF_ERROR(ExpectIndex(n, in, 1, "position", true));
    out[0] = SequenceOf(in[0].dtype);
    return absl::OkStatus();
  });
  RegSequenceOp("SequenceLength", 1, 1, [](const Node& n, Inputs in, Outputs& out) {
    CJIT_RETURN_IF_ERROR(Expect(n, in, 0, ValueKind::kSequence));
    out[0] = InferOutput{DType::kI64, Shape::Of({}), ValueKind::kTensor};
    return absl::OkStatus();
  });
  RegSequenceOp("SplitToSequence", 1, 2, [](const Node& n, Inputs in, Outputs& out) {
    CJIT_RETURN_IF_ERROR(ExpectTensors(n, in, 0));
    CJIT_RETURN_IF_ERROR(ExpectIndex(n, in, 1, "split", false));
    if (in.size() > 1 && in[1].present && in[1].shape.rank_known && in[1].shape.rank() > 1) {
      return NodeError(n, absl::StrCat("split must be a scalar or 1-D, got ", in[1].shape.ToString()));
    }
    if (in[0].shape.rank_known) {
      if (in[0].shape.rank() == 0) return NodeError(n, "cannot split a scalar");
      CJIT_RETURN_IF_ERROR(NormalizeAxis(n, n.GetInt("axis", 0), in[0].shape.rank()).status());
    }
    out[0] = SequenceOf(in[0].dtype);
    return absl::OkStatus();
  });
  RegSequenceOp("ConcatFromSequence", 1, 1, [](const Node& n, Inputs in, Outputs& out) {
    CJIT_RETURN_IF_ERROR(Expect(n, in, 0, ValueKind::kSequence));
    if (!n.HasAttr("axis")) return NodeError(n, "the required attribute 'axis' is missing");
    out[0] = InferOutput{in[0].dtype, Shape::Unknown(), ValueKind::kTensor};
    return absl::OkStatus();
  });
  RegSequenceOp("SequenceMap", 1, 1 << 20, SequenceMapInfer);
  // Optional-15: an optional of the input, or an empty optional of the `type` attribute's type.
  RegSequenceOp("Optional", 0, 1, [](const Node& n, Inputs in, Outputs& out) {
    if (!in.empty() && in[0].present) {
      if (IsOptionalKind(in[0].kind)) return NodeError(n, "input 0 is already an optional");
      out[0] = InferOutput{in[0].dtype, Shape::Unknown(), OptionalKindOf(in[0].kind)};
      return absl::OkStatus();
    }
    auto it = n.attrs.find("type");
    if (it == n.attrs.end() || it->second.kind != Attribute::Kind::kType || it->second.ints.empty()) {
      return NodeError(n, "an Optional without an input needs the 'type' attribute");
    }
    const ValueKind kind = static_cast<ValueKind>(it->second.i);
    if (kind != ValueKind::kTensor && kind != ValueKind::kSequence) {
      return NodeError(n,
                       absl::StrCat("'type' is a ", ValueKindName(kind), "; an optional holds a tensor or a sequence"));
    }
    out[0] = InferOutput{static_cast<DType>(it->second.ints[0]), Shape::Unknown(), OptionalKindOf(kind)};
    return absl::OkStatus();
  });
  // OptionalHasElement / OptionalGetElement-18 also take a plain tensor or sequence (then present / itself);
  // OptionalHasElement-18's input may be absent (false).
  RegSequenceOp("OptionalHasElement", 0, 1, [](const Node& n, Inputs in, Outputs& out) {
    if ((in.empty() || !in[0].present) && n.opset_version > 0 && n.opset_version < 18) {
      return NodeError(n, "OptionalHasElement-15 needs its input");
    }
    if (!in.empty() && in[0].present && !IsOptionalKind(in[0].kind) && n.opset_version > 0 && n.opset_version < 18) {
      return NodeError(
          n, absl::StrCat("input 0 is a ", ValueKindName(in[0].kind), "; OptionalHasElement-15 takes an optional"));
    }
    out[0] = InferOutput{DType::kBool, Shape::Of({}), ValueKind::kTensor};
    return absl::OkStatus();
  });
  RegSequenceOp("OptionalGetElement", 1, 1, [](const Node& n, Inputs in, Outputs& out) {
    if (!IsOptionalKind(in[0].kind) && n.opset_version > 0 && n.opset_version < 18) {
      return NodeError(
          n, absl::StrCat("input 0 is a ", ValueKindName(in[0].kind), "; OptionalGetElement-15 takes an optional"));
    }
    const ValueKind elem = IsOptionalKind(in[0].kind) ? ElementKindOf(in[0].kind) : in[0].kind;
    out[0] = InferOutput{in[0].dtype, IsOptionalKind(in[0].kind) ? Shape::Unknown() : in[0].shape, elem};
    return absl::OkStatus();
  });
}

}  // namespace cjit
