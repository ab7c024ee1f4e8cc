// Shape/dtype functions of elementwise, comparison, reduction, softmax and matrix-product operators
// (ONNX operator specification, opsets 7-21).
#include <numeric>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/ops/op_registry.h"
#include "compiler/ops/shape_fn_util.h"

namespace cjit {
namespace {

using namespace shape_fn;  // NOLINT: Inputs, Outputs, C, A, Reg

absl::Status SameAsInput0(const Node&, Inputs in, Outputs& out) {
  out[0] = {in[0].dtype, in[0].shape};
  return absl::OkStatus();
}

InferFn BroadcastTo(DType fixed) {
  return [fixed](const Node& n, Inputs in, Outputs& out) -> absl::Status {
    std::vector<Shape> shapes;
    for (const InferInput& i : in) if (i.present) shapes.push_back(i.shape);
    CJIT_ASSIGN_OR_RETURN(Shape s, BroadcastShapes(n, shapes));
    DType t = fixed == DType::kInvalid ? in[0].dtype : fixed;
    out[0] = {t, s};
    return absl::OkStatus();
  };
}

absl::Status ReduceInfer(const Node& n, Inputs in, Outputs& out) {
  bool present, known;
  // ReduceSum takes axes as an input from opset 13, the others from opset 18.
  CJIT_ASSIGN_OR_RETURN(std::vector<int64_t> axes, AttrOrInputInts(n, in, "axes", 1, &present, &known));
  bool keep = n.GetInt("keepdims", 1) != 0;
  bool noop = n.GetInt("noop_with_empty_axes", 0) != 0;
  out[0].dtype = in[0].dtype;
  const Shape& s = in[0].shape;
  if (!s.rank_known || !known) {
    if (s.rank_known && keep) {
      out[0].shape.rank_known = true;
      out[0].shape.dims.assign(s.rank(), Dim{});
    }
    return absl::OkStatus();
  }
  int r = s.rank();
  std::vector<bool> reduce(r, false);
  if (axes.empty()) {
    if (!noop) reduce.assign(r, true);
  } else {
    for (int64_t a : axes) {
      if (a < -r || a >= r) return NodeError(n, absl::StrCat("axis ", a, " is out of range for rank ", r));
      reduce[a < 0 ? a + r : a] = true;
    }
  }
  out[0].shape.rank_known = true;
  for (int i = 0; i < r; ++i) {
    if (!reduce[i]) out[0].shape.dims.push_back(s.dims[i]);
    else if (keep) out[0].shape.dims.push_back(Dim{1, ""});
  }
  return absl::OkStatus();
}

absl::Status ArgInfer(const Node& n, Inputs in, Outputs& out) {
  out[0].dtype = DType::kI64;
  const Shape& s = in[0].shape;
  if (!s.rank_known) return absl::OkStatus();
  int64_t axis = n.GetInt("axis", 0);
  if (axis < -s.rank() || axis >= s.rank()) {
    return NodeError(n, absl::StrCat("axis ", axis, " is out of range for rank ", s.rank()));
  }
  int ax = static_cast<int>(axis < 0 ? axis + s.rank() : axis);
  if (s.dims[ax].known() && s.dims[ax].value == 0) {
    return NodeError(n, absl::StrCat("cannot take ", n.op_type, " over axis ", ax, ": it is empty"));
  }
  bool keep = n.GetInt("keepdims", 1) != 0;
  out[0].shape.rank_known = true;
  for (int i = 0; i < s.rank(); ++i) {
    if (i != ax) out[0].shape.dims.push_back(s.dims[i]);
    else if (keep) out[0].shape.dims.push_back(Dim{1, ""});
  }
  return absl::OkStatus();
}

absl::Status MatMulInfer(const Node& n, Inputs in, Outputs& out) {
  out[0].dtype = in[0].dtype;
  const Shape& a = in[0].shape;
  const Shape& b = in[1].shape;
  if (!a.rank_known || !b.rank_known) return absl::OkStatus();
  if (a.rank() == 0 || b.rank() == 0) {
    return NodeError(n, absl::StrCat(n.op_type, " operands must have rank >= 1, got a scalar"));
  }
  Shape a2 = a, b2 = b;
  if (a.rank() == 1) a2.dims.insert(a2.dims.begin(), Dim{1, ""});
  if (b.rank() == 1) b2.dims.push_back(Dim{1, ""});
  const Dim& ka = a2.dims[a2.rank() - 1];
  const Dim& kb = b2.dims[b2.rank() - 2];
  if (ka.known() && kb.known() && ka.value != kb.value) {
    return NodeError(n, absl::StrCat("MatMul inner dims differ: ", a.ToString(), " x ", b.ToString()));
  }
  Shape ba, bb;
  ba.rank_known = bb.rank_known = true;
  ba.dims.assign(a2.dims.begin(), a2.dims.end() - 2);
  bb.dims.assign(b2.dims.begin(), b2.dims.end() - 2);
  CJIT_ASSIGN_OR_RETURN(Shape batch, BroadcastShapes(n, {ba, bb}));
  if (a.rank() != 1) batch.dims.push_back(a2.dims[a2.rank() - 2]);
  if (b.rank() != 1) batch.dims.push_back(b2.dims[b2.rank() - 1]);
  out[0].shape = batch;
  return absl::OkStatus();
}

// com.clusterjit.FusedMatMul (compiler/passes/simplify.h FuseTransposeIntoMatMul): MatMul of A and B with
// the last two dims of A (transA) and/or B (transB) swapped first — ONNX Runtime's com.microsoft
// FusedMatMul without alpha or batch transposes. A transposed operand has rank >= 2.
absl::Status FusedMatMulInfer(const Node& n, Inputs in, Outputs& out) {
  std::vector<InferInput> swapped(in.begin(), in.end());
  const char* attr[2] = {"transA", "transB"};
  for (int i = 0; i < 2; ++i) {
    if (!n.GetInt(attr[i], 0) || !swapped[i].shape.rank_known) continue;
    Shape& s = swapped[i].shape;
    if (s.rank() < 2) return NodeError(n, absl::StrCat(attr[i], " needs an operand of rank >= 2, got ", s.ToString()));
    std::swap(s.dims[s.rank() - 1], s.dims[s.rank() - 2]);
  }
  return MatMulInfer(n, swapped, out);
}

absl::Status GemmInfer(const Node& n, Inputs in, Outputs& out) {
  out[0].dtype = in[0].dtype;
  const Shape& a = in[0].shape;
  const Shape& b = in[1].shape;
  if (!a.rank_known || !b.rank_known) return absl::OkStatus();
  if (a.rank() != 2 || b.rank() != 2) return NodeError(n, "Gemm inputs must be 2-D");
  bool ta = n.GetInt("transA", 0), tb = n.GetInt("transB", 0);
  Dim m = a.dims[ta ? 1 : 0], ka = a.dims[ta ? 0 : 1];
  Dim kb = b.dims[tb ? 1 : 0], nn = b.dims[tb ? 0 : 1];
  if (ka.known() && kb.known() && ka.value != kb.value) {
    return NodeError(n, absl::StrCat("Gemm inner dims differ: ", a.ToString(), " x ", b.ToString()));
  }
  out[0].shape.rank_known = true;
  out[0].shape.dims = {m, nn};
  // C broadcasts unidirectionally to (M, N) (ONNX Gemm).
  if (in.size() > 2 && in[2].present && in[2].shape.rank_known) {
    const Shape& c = in[2].shape;
    if (c.rank() > 2) return NodeError(n, absl::StrCat("C has rank ", c.rank(), ", at most 2"));
    for (int i = 0; i < c.rank(); ++i) {
      const Dim& cd = c.dims[c.rank() - 1 - i];
      const Dim& od = out[0].shape.dims[1 - i];
      if (cd.known() && od.known() && cd.value != 1 && cd.value != od.value) {
        return NodeError(n, absl::StrCat("C of shape ", c.ToString(), " does not broadcast to the output ",
                                         out[0].shape.ToString()));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CastInfer(const Node& n, Inputs in, Outputs& out) {
  int64_t to = n.GetInt("to", 0);
  DType t = DTypeFromOnnxCode(to);
  if (t == DType::kInvalid) return NodeError(n, absl::StrCat("unsupported Cast target type ", to));
  out[0] = {t, in[0].shape};
  return absl::OkStatus();
}

}  // namespace

void RegisterMathOps() {
  for (const char* op :
       {"Abs", "Neg", "Floor", "Ceil", "Round", "Sqrt", "Reciprocal", "Exp", "Log", "Sin", "Cos", "Tan",
        "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Sigmoid", "Tanh", "Relu",
        "LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Erf",
        "Sign", "ThresholdedRelu", "Shrink", "Not", "Mish", "Gelu", "BitwiseNot"}) {
    Reg(op, C::kElementwise, true, A::kInfer, 1, 1, SameAsInput0);  // AMP exceptions: op_traits.cc
  }
  Reg("Clip", C::kElementwise, true, A::kInfer, 1, 3, SameAsInput0);
  for (const char* op : {"IsNaN", "IsInf"}) {
    Reg(op, C::kElementwise, true, A::kInfer, 1, 1, [](const Node&, Inputs in, Outputs& out) {
      out[0] = {DType::kBool, in[0].shape};
      return absl::OkStatus();
    });
  }
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "PRelu", "BitShift", "And", "Or",
                         "Xor", "BitwiseAnd", "BitwiseOr", "BitwiseXor"}) {
    Reg(op, C::kElementwise, true, std::string(op) == "Pow" ? A::kDeny : A::kInfer, 2, 2,
        BroadcastTo(DType::kInvalid));
  }
  for (const char* op : {"Max", "Min", "Sum", "Mean"}) {
    Reg(op, C::kElementwise, true, A::kInfer, 1, 1 << 20, BroadcastTo(DType::kInvalid));
  }
  for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}) {
    Reg(op, C::kElementwise, true, A::kInfer, 2, 2, BroadcastTo(DType::kBool));
  }
  Reg("Where", C::kElementwise, true, A::kInfer, 3, 3,
      [](const Node& n, Inputs in, Outputs& out) -> absl::Status {
        CJIT_ASSIGN_OR_RETURN(Shape s, BroadcastShapes(n, {in[0].shape, in[1].shape, in[2].shape}));
        out[0] = {in[1].dtype, s};
        return absl::OkStatus();
      });
  Reg("Cast", C::kElementwise, true, A::kInfer, 1, 1, CastInfer);
  Reg("CastLike", C::kElementwise, true, A::kInfer, 2, 2, [](const Node&, Inputs in, Outputs& out) {
    out[0] = {in[1].dtype, in[0].shape};
    return absl::OkStatus();
  });
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                         "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}) {
    Reg(op, C::kReduction, true, A::kDeny, 1, 2, ReduceInfer);  // ReduceMax / ReduceMin: clear (op_traits.cc)
  }
  Reg("ArgMax", C::kReduction, true, A::kInfer, 1, 1, ArgInfer);
  Reg("ArgMin", C::kReduction, true, A::kInfer, 1, 1, ArgInfer);
  for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"}) {
    Reg(op, C::kReduction, true, A::kDeny, 1, 1, SameAsInput0);
  }
  Reg("CumSum", C::kOther, false, A::kDeny, 2, 2, SameAsInput0);
  Reg("MatMul", C::kContraction, true, A::kAllow, 2, 2, MatMulInfer);
  // MatMulInteger (A input 0, B input 1; int32) and QLinearMatMul (A 0, B 3; the dtype of y_zero_point).
  Reg("MatMulInteger", C::kContraction, false, A::kDeny, 2, 4, [](const Node& n, Inputs in, Outputs& out) {
    std::vector<InferInput> ab = {in[0], in[1]};
    CJIT_RETURN_IF_ERROR(MatMulInfer(n, ab, out));
    out[0].dtype = DType::kI32;
    return absl::OkStatus();
  });
  Reg("QLinearMatMul", C::kContraction, false, A::kDeny, 8, 8, [](const Node& n, Inputs in, Outputs& out) {
    std::vector<InferInput> ab = {in[0], in[3]};
    CJIT_RETURN_IF_ERROR(MatMulInfer(n, ab, out));
    out[0].dtype = in[7].dtype;
    return absl::OkStatus();
  });
  Reg("Gemm", C::kContraction, true, A::kAllow, 2, 3, GemmInfer);
  RegisterOp(OpDef{"FusedMatMul", C::kContraction, true, A::kDeny, 2, 2, FusedMatMulInfer, /*internal=*/true});
  // com.clusterjit.MatMulNBits: ONNX Runtime's com.microsoft.MatMulNBits (docs/ContribOperators.md), which
  // its weight-only quantizer writes and --auto_quantize=weight_only makes: A [..., K] float32, B uint8
  // [N, ceil(K / block_size), block_size * bits / 8], scales [N * ceil(K / block_size)], optional
  // zero_points (uint8 packed [N * ceil(ceil(K / block_size) * bits / 8)], or float32 [N * ceil(K /
  // block_size)]), g_idx (not supported), bias [N]; Y [..., N] float32.
  RegisterOp(OpDef{"MatMulNBits", C::kContraction, false, A::kDeny, 3, 6,
                   [](const Node& n, Inputs in, Outputs& out) -> absl::Status {
                     const int64_t K = n.GetInt("K", 0), N = n.GetInt("N", 0), bits = n.GetInt("bits", 4),
                                   bs = n.GetInt("block_size", 0);
                     constexpr int64_t kMaxDim = (int64_t{1} << 31) - 1;
                     if (K < 1 || N < 1 || K > kMaxDim || N > kMaxDim || (bits != 2 && bits != 4 && bits != 8) ||
                         bs < 16 || bs > 65536 || (bs & (bs - 1)) != 0) {
                       return NodeError(n, absl::StrCat("needs 1 <= K, N < 2^31, bits 2, 4 or 8 and a power-of-two "
                                                        "block_size in [16, 65536]; got K=", K, " N=", N, " bits=",
                                                        bits, " block_size=", bs));
                     }
                     if (in[0].dtype != DType::kInvalid && in[0].dtype != DType::kF32) {
                       return NodeError(n, absl::StrCat("A must be float32, got ", DTypeName(in[0].dtype)));
                     }
                     if (in.size() > 4 && in[4].present) return NodeError(n, "g_idx (act_order) is not supported");
                     const int64_t blocks = (K + bs - 1) / bs;
                     const std::vector<int64_t> bdims = {N, blocks, bs * bits / 8};
                     if (in[1].dtype != DType::kInvalid && in[1].dtype != DType::kU8) {
                       return NodeError(n, absl::StrCat("B must be uint8, got ", DTypeName(in[1].dtype)));
                     }
                     if (in[1].shape.fully_known() && in[1].shape.concrete() != bdims) {
                       return NodeError(n, absl::StrCat("B has shape ", in[1].shape.ToString(), "; K=", K, " N=", N,
                                                        " bits=", bits, " block_size=", bs, " need [", N, ",",
                                                        blocks, ",", bdims[2], "]"));
                     }
                     auto count = [&](int i, int64_t want, const char* what) -> absl::Status {
                       if (i >= static_cast<int>(in.size()) || !in[i].present || !in[i].shape.fully_known()) {
                         return absl::OkStatus();
                       }
                       const int64_t have = NumElements(in[i].shape.concrete());
                       if (have != want) {
                         return NodeError(n, absl::StrCat(what, " has ", have, " values; expected ", want));
                       }
                       return absl::OkStatus();
                     };
                     CJIT_RETURN_IF_ERROR(count(2, N * blocks, "scales"));
                     if (in.size() > 3 && in[3].present) {
                       const bool packed = in[3].dtype == DType::kU8;
                       if (!packed && in[3].dtype != DType::kF32 && in[3].dtype != DType::kInvalid) {
                         return NodeError(n, "zero_points must be uint8 (packed) or float32");
                       }
                       CJIT_RETURN_IF_ERROR(count(3, packed ? N * ((blocks * bits + 7) / 8) : N * blocks,
                                                  "zero_points"));
                     }
                     CJIT_RETURN_IF_ERROR(count(5, N, "bias"));
                     out[0].dtype = DType::kF32;
                     const Shape& a = in[0].shape;
                     if (!a.rank_known) return absl::OkStatus();
                     if (a.rank() == 0) return NodeError(n, "A must have rank >= 1, got a scalar");
                     const Dim& k = a.dims.back();
                     if (k.known() && k.value != K) {
                       return NodeError(n, absl::StrCat("A's last dim is ", k.value, "; attribute K is ", K));
                     }
                     out[0].shape = a;
                     out[0].shape.dims.back() = Dim{N, ""};
                     return absl::OkStatus();
                   },
                   /*internal=*/true});
}

}  // namespace cjit
