// One output element per op; see elemental_emitter.h. Example: HardSigmoid(x) with alpha=0.2, beta=0.5
// becomes  %t = fmul 0.2, %x ; %u = fadd %t, 0.5 ; %v = maxnum(%u, 0) ; minnum(%v, 1).
#include "compiler/codegen/elemental_emitter.h"

#include "base/status_macros.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "compiler/codegen/fusion_plan.h"
#include "compiler/ir/numeric_cast.h"
#include "llvm/IR/Intrinsics.h"

namespace cjit {
namespace {

llvm::Value* F(llvm::IRBuilder<>& b, double v) { return llvm::ConstantFP::get(b.getFloatTy(), v); }

// NaN-propagating max/min, as numpy's maximum/minimum (ONNX Max/Min): a NaN in either operand gives NaN
// (x + y carries one of the NaNs through).
llvm::Value* Max(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y) {
  return b.CreateSelect(b.CreateFCmpUNO(x, y), b.CreateFAdd(x, y), b.CreateSelect(b.CreateFCmpOGT(x, y), x, y));
}
llvm::Value* Min(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y) {
  return b.CreateSelect(b.CreateFCmpUNO(x, y), b.CreateFAdd(x, y), b.CreateSelect(b.CreateFCmpOLT(x, y), x, y));
}
llvm::Value* Clamp(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* lo, llvm::Value* hi) {
  llvm::Value* t = b.CreateSelect(b.CreateFCmpOLT(x, lo), lo, x);
  return b.CreateSelect(b.CreateFCmpOGT(t, hi), hi, t);
}

}  // namespace

namespace {

absl::StatusOr<llvm::Value*> EmitElementalF32(llvm::IRBuilder<>& b, TargetMath& math, const Node& n,
                                              const std::vector<llvm::Value*>& in) {
  const std::string& op = n.op_type;
  auto x = [&](int i) { return in[i]; };
  // Bool values are 0.0 / 1.0; an operand is true when nonzero (NaN included, as C's conversion).
  auto as_float = [&](llvm::Value* c) { return b.CreateSelect(c, F(b, 1), F(b, 0)); };
  auto truth = [&](llvm::Value* v) { return b.CreateFCmpUNE(v, F(b, 0)); };
  const bool to_bool = !n.outputs.empty() && n.outputs[0] && n.outputs[0]->dtype == DType::kBool;
  if (op == "DequantizeLinear") return b.CreateFMul(in.size() > 2 && in[2] ? b.CreateFSub(x(0), in[2]) : x(0), x(1));
  if (op == "QuantizeLinear") {
    // saturate(rint(x / scale) + zero_point), the quotient first clamped to +-kQuantClamp (a NaN lands low),
    // as the op's kernel (runtime/cpu/quant_rows.h): the same bits.
    llvm::Value* q = b.CreateFDiv(x(0), x(1));
    q = b.CreateSelect(b.CreateFCmpOGT(q, F(b, -kQuantClamp)), q, F(b, -kQuantClamp));
    q = b.CreateSelect(b.CreateFCmpOLT(q, F(b, kQuantClamp)), q, F(b, kQuantClamp));
    q = math.Unary(b, "round", q);
    if (in.size() > 2 && in[2]) q = b.CreateFAdd(q, in[2]);
    const bool s = !n.outputs.empty() && n.outputs[0] && n.outputs[0]->dtype == DType::kI8;
    return Clamp(b, q, F(b, s ? -128 : 0), F(b, s ? 127 : 255));
  }
  if (op == "Cast" && to_bool) return as_float(truth(x(0)));
  if (op == "Identity" || op == "Cast") return x(0);  // Cast between float types: the rounding is done below
  if (op == "Where") return b.CreateSelect(truth(x(0)), x(1), x(2));
  if (op == "IsNaN") return as_float(b.CreateFCmpUNO(x(0), x(0)));
  if (op == "IsInf") {
    llvm::Value* c = b.getFalse();
    if (n.GetInt("detect_positive", 1) != 0) {
      c = b.CreateOr(c, b.CreateFCmpOEQ(x(0), F(b, std::numeric_limits<double>::infinity())));
    }
    if (n.GetInt("detect_negative", 1) != 0) {
      c = b.CreateOr(c, b.CreateFCmpOEQ(x(0), F(b, -std::numeric_limits<double>::infinity())));
    }
    return as_float(c);
  }
  if (op == "Not") return as_float(b.CreateNot(truth(x(0))));
  if (op == "And") return as_float(b.CreateAnd(truth(x(0)), truth(x(1))));
  if (op == "Or") return as_float(b.CreateOr(truth(x(0)), truth(x(1))));
  if (op == "Xor") return as_float(b.CreateXor(truth(x(0)), truth(x(1))));
  // Ordered comparisons: false when either side is NaN (IEEE 754, as numpy).
  if (op == "Equal") return as_float(b.CreateFCmpOEQ(x(0), x(1)));
  if (op == "Less") return as_float(b.CreateFCmpOLT(x(0), x(1)));
  if (op == "LessOrEqual") return as_float(b.CreateFCmpOLE(x(0), x(1)));
  if (op == "Greater") return as_float(b.CreateFCmpOGT(x(0), x(1)));
  if (op == "GreaterOrEqual") return as_float(b.CreateFCmpOGE(x(0), x(1)));
  if (op == "Add") return b.CreateFAdd(x(0), x(1));
  if (op == "Sub") return b.CreateFSub(x(0), x(1));
  if (op == "Mul") return b.CreateFMul(x(0), x(1));
  if (op == "Div") return b.CreateFDiv(x(0), x(1));
  if (op == "Max" || op == "Min" || op == "Sum" || op == "Mean") {
    llvm::Value* acc = x(0);
    for (size_t i = 1; i < in.size(); ++i) {
      if (op == "Max") acc = Max(b, acc, x(static_cast<int>(i)));
      else if (op == "Min") acc = Min(b, acc, x(static_cast<int>(i)));
      else acc = b.CreateFAdd(acc, x(static_cast<int>(i)));
    }
    if (op == "Mean") acc = b.CreateFDiv(acc, F(b, static_cast<double>(in.size())));
    return acc;
  }
  if (op == "Pow") {
    if (auto* c = llvm::dyn_cast<llvm::ConstantFP>(x(1))) {
      double e = c->getValueAPF().convertToFloat();
      if (e == 2.0) return b.CreateFMul(x(0), x(0));
      if (e == 1.0) return x(0);
      if (e == 0.5) return math.Unary(b, "sqrt", x(0));
      if (e == 3.0) return b.CreateFMul(b.CreateFMul(x(0), x(0)), x(0));
    }
    return math.Pow(b, x(0), x(1));
  }
  if (op == "Neg") return b.CreateFNeg(x(0));
  if (op == "Abs") return b.CreateSelect(b.CreateFCmpOLT(x(0), F(b, 0)), b.CreateFNeg(x(0)), x(0));
  if (op == "Relu") return b.CreateSelect(b.CreateFCmpOLT(x(0), F(b, 0)), F(b, 0), x(0));
  if (op == "Sigmoid") {
    // 1 / (1 + exp(-x)), exact enough for float32 on the whole range (exp overflows to inf -> 0).
    return b.CreateFDiv(F(b, 1), b.CreateFAdd(F(b, 1), math.Unary(b, "exp", b.CreateFNeg(x(0)))));
  }
  if (op == "Tanh") return math.Unary(b, "tanh", x(0));
  if (op == "Exp") return math.Unary(b, "exp", x(0));
  if (op == "Log") return math.Unary(b, "log", x(0));
  if (op == "Sqrt") return math.Unary(b, "sqrt", x(0));
  if (op == "Erf") return math.Unary(b, "erf", x(0));
  if (op == "Sin") return math.Unary(b, "sin", x(0));
  if (op == "Cos") return math.Unary(b, "cos", x(0));
  if (op == "Floor") return math.Unary(b, "floor", x(0));
  if (op == "Ceil") return math.Unary(b, "ceil", x(0));
  if (op == "Round") return math.Unary(b, "round", x(0));
  if (op == "Reciprocal") return b.CreateFDiv(F(b, 1), x(0));
  if (op == "Sign") {  // NaN stays NaN (numpy sign)
    llvm::Value* pos = b.CreateSelect(b.CreateFCmpOGT(x(0), F(b, 0)), F(b, 1), F(b, 0));
    llvm::Value* r = b.CreateSelect(b.CreateFCmpOLT(x(0), F(b, 0)), F(b, -1), pos);
    return b.CreateSelect(b.CreateFCmpUNO(x(0), x(0)), x(0), r);
  }
  if (op == "Clip") {
    llvm::Value* lo = F(b, -std::numeric_limits<float>::infinity());
    llvm::Value* hi = F(b, std::numeric_limits<float>::infinity());
    if (n.HasAttr("min")) lo = F(b, n.GetFloat("min", 0));
    if (n.HasAttr("max")) hi = F(b, n.GetFloat("max", 0));
    if (in.size() > 1 && in[1]) lo = in[1];
    if (in.size() > 2 && in[2]) hi = in[2];
    return Clamp(b, x(0), lo, hi);
  }
  if (op == "HardSigmoid") {
    llvm::Value* t = b.CreateFAdd(b.CreateFMul(F(b, n.GetFloat("alpha", 0.2f)), x(0)), F(b, n.GetFloat("beta", 0.5f)));
    return Clamp(b, t, F(b, 0), F(b, 1));
  }
  if (op == "HardSwish") {
    llvm::Value* t = b.CreateFAdd(b.CreateFMul(F(b, 1.0 / 6.0), x(0)), F(b, 0.5));
    return b.CreateFMul(x(0), Clamp(b, t, F(b, 0), F(b, 1)));
  }
  if (op == "LeakyRelu" || op == "PRelu") {
    llvm::Value* slope = op == "PRelu" ? x(1) : F(b, n.GetFloat("alpha", 0.01f));
    return b.CreateSelect(b.CreateFCmpOLT(x(0), F(b, 0)), b.CreateFMul(slope, x(0)), x(0));
  }
  if (op == "ThresholdedRelu") {
    return b.CreateSelect(b.CreateFCmpOGT(x(0), F(b, n.GetFloat("alpha", 1.0f))), x(0), F(b, 0));
  }
  if (op == "Elu" || op == "Selu" || op == "Celu") {
    double alpha = n.GetFloat("alpha", op == "Selu" ? 1.67326319217681884765625f : 1.0f);
    double gamma = op == "Selu" ? n.GetFloat("gamma", 1.05070102214813232421875f) : 1.0;
    llvm::Value* arg = op == "Celu" ? b.CreateFDiv(x(0), F(b, alpha)) : x(0);
    llvm::Value* neg = b.CreateFMul(F(b, alpha), b.CreateFSub(math.Unary(b, "exp", arg), F(b, 1)));
    llvm::Value* r = b.CreateSelect(b.CreateFCmpOLE(x(0), F(b, 0)), neg, x(0));
    return gamma == 1.0 ? r : b.CreateFMul(F(b, gamma), r);
  }
  // max(x, 0) + log1p(exp(-|x|)), stable for large |x|; log1p(u) as log(w) * u / (w - 1) with w = 1 + u
  // (exact to a few ulp where log(1 + u) alone would lose u's low bits; Goldberg 1991, thm. 4).
  auto softplus = [&](llvm::Value* v) {
    llvm::Value* ax = b.CreateSelect(b.CreateFCmpOLT(v, F(b, 0)), b.CreateFNeg(v), v);
    llvm::Value* u = math.Unary(b, "exp", b.CreateFNeg(ax));
    llvm::Value* w = b.CreateFAdd(F(b, 1), u);
    llvm::Value* l = b.CreateSelect(b.CreateFCmpOEQ(w, F(b, 1)), u,
                                    b.CreateFDiv(b.CreateFMul(math.Unary(b, "log", w), u), b.CreateFSub(w, F(b, 1))));
    return b.CreateFAdd(b.CreateSelect(b.CreateFCmpOGT(v, F(b, 0)), v, F(b, 0)), l);
  };
  if (op == "Softplus") return softplus(x(0));
  // Mish (ONNX opset 18): x * tanh(softplus(x)).
  if (op == "Mish") return b.CreateFMul(x(0), math.Unary(b, "tanh", softplus(x(0))));
  // Gelu (ONNX opset 20): 0.5 x (1 + erf(x / sqrt(2))), or with approximate = "tanh"
  // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) (Hendrycks & Gimpel, arXiv:1606.08415).
  if (op == "Gelu") {
    llvm::Value* t;
    if (n.GetString("approximate", "none") == "tanh") {
      llvm::Value* cube = b.CreateFMul(b.CreateFMul(x(0), x(0)), x(0));
      llvm::Value* arg = b.CreateFMul(F(b, 0.7978845608028654), b.CreateFAdd(x(0), b.CreateFMul(F(b, 0.044715), cube)));
      t = math.Unary(b, "tanh", arg);
    } else {
      t = math.Unary(b, "erf", b.CreateFMul(x(0), F(b, 0.7071067811865476)));
    }
    return b.CreateFMul(b.CreateFMul(F(b, 0.5), x(0)), b.CreateFAdd(F(b, 1), t));
  }
  if (op == "Softsign") {
    llvm::Value* ax = b.CreateSelect(b.CreateFCmpOLT(x(0), F(b, 0)), b.CreateFNeg(x(0)), x(0));
    return b.CreateFDiv(x(0), b.CreateFAdd(F(b, 1), ax));
  }
  return absl::UnimplementedError(absl::StrCat(n.Describe(), ": no elemental emitter"));
}

// bfloat16 conversions are written out on integer bits (no target lowers them without a runtime library
// call, and the CPU JIT has none): the upper half of a float32, rounded to nearest even; NaN stays a quiet
// NaN.
llvm::Value* BFloatBitsToF32(llvm::IRBuilder<>& b, llvm::Value* bits16) {
  return b.CreateBitCast(b.CreateShl(b.CreateZExt(bits16, b.getInt32Ty()), 16), b.getFloatTy());
}

llvm::Value* F32ToBFloatBits(llvm::IRBuilder<>& b, llvm::Value* x) {
  llvm::Value* bits = b.CreateBitCast(x, b.getInt32Ty());
  llvm::Value* lsb = b.CreateAnd(b.CreateLShr(bits, 16), 1);
  llvm::Value* rounded = b.CreateLShr(b.CreateAdd(bits, b.CreateAdd(b.getInt32(0x7FFF), lsb)), 16);
  llvm::Value* quiet_nan = b.CreateOr(b.CreateLShr(bits, 16), b.getInt32(0x40));
  llvm::Value* is_nan = b.CreateFCmpUNO(x, x);
  return b.CreateTrunc(b.CreateSelect(is_nan, quiet_nan, rounded), b.getInt16Ty());
}

}  // namespace

llvm::Type* StorageType(llvm::IRBuilder<>& b, DType dtype) {
  switch (dtype) {
    case DType::kF16: return b.getHalfTy();
    case DType::kBF16: return b.getInt16Ty();  // raw bits, see F32ToBFloatBits
    case DType::kBool: return b.getInt8Ty();
    case DType::kU8: return b.getInt8Ty();
    case DType::kI8: return b.getInt8Ty();
    case DType::kI32: return b.getInt32Ty();
    case DType::kI64: return b.getInt64Ty();
    default: return b.getFloatTy();
  }
}

llvm::Value* RoundTo(llvm::IRBuilder<>& b, DType dtype, llvm::Value* x) {
  if (dtype == DType::kF16) return b.CreateFPExt(b.CreateFPTrunc(x, b.getHalfTy()), b.getFloatTy());
  if (dtype == DType::kBF16) return BFloatBitsToF32(b, F32ToBFloatBits(b, x));
  return x;
}

llvm::Value* LoadF32(llvm::IRBuilder<>& b, DType dtype, llvm::Value* base, llvm::Value* index) {
  llvm::Type* t = StorageType(b, dtype);
  llvm::Value* v = b.CreateLoad(t, index ? b.CreateInBoundsGEP(t, base, index) : base);
  if (dtype == DType::kF16) return b.CreateFPExt(v, b.getFloatTy());
  if (dtype == DType::kBF16) return BFloatBitsToF32(b, v);
  if (dtype == DType::kBool) {  // any nonzero byte is true
    return b.CreateSelect(b.CreateICmpNE(v, b.getInt8(0)), F(b, 1), F(b, 0));
  }
  if (dtype == DType::kI32 || dtype == DType::kI64 || dtype == DType::kI8) return b.CreateSIToFP(v, b.getFloatTy());
  if (dtype == DType::kU8) return b.CreateUIToFP(v, b.getFloatTy());
  return v;
}

void StoreF32(llvm::IRBuilder<>& b, DType dtype, llvm::Value* value, llvm::Value* base, llvm::Value* index) {
  llvm::Type* t = StorageType(b, dtype);
  if (dtype == DType::kF16) value = b.CreateFPTrunc(value, t);
  if (dtype == DType::kBF16) value = F32ToBFloatBits(b, value);
  if (dtype == DType::kBool) value = b.CreateZExt(b.CreateFCmpUNE(value, F(b, 0)), t);
  // uint8 / int8: an integer of the type's range (QuantizeLinear's result), saturated as Cast's conversion
  // (compiler/ir/numeric_cast.h) would anyway.
  if (dtype == DType::kU8 || dtype == DType::kI8) {
    value = b.CreateTrunc(b.CreateFPToSI(Clamp(b, value, F(b, dtype == DType::kU8 ? 0 : -128),
                                                   F(b, dtype == DType::kU8 ? 255 : 127)),
                                         b.getInt32Ty()),
                          t);
  }
  b.CreateStore(value, index ? b.CreateInBoundsGEP(t, base, index) : base);
}

absl::StatusOr<llvm::Value*> EmitElemental(llvm::IRBuilder<>& b, TargetMath& math, const Node& n,
                                           const std::vector<llvm::Value*>& in, bool excess_precision) {
  // An explicit Cast is a rounding point even with excess precision: its operand is first rounded to the
  // type it is declared in (so Cast(f16 -> bf16) sees the float16 value, as on the op-by-op path).
  if (excess_precision && n.op_type == "Cast" && !in.empty() && in[0] != nullptr && n.input(0) != nullptr) {
    std::vector<llvm::Value*> rounded = in;
    rounded[0] = RoundTo(b, n.input(0)->dtype, in[0]);
    CJIT_ASSIGN_OR_RETURN(llvm::Value* r, EmitElementalF32(b, math, n, rounded));
    return n.outputs.empty() || !n.outputs[0] ? r : RoundTo(b, n.outputs[0]->dtype, r);
  }
  CJIT_ASSIGN_OR_RETURN(llvm::Value* r, EmitElementalF32(b, math, n, in));
  // A float16/bfloat16 result is rounded like the op-by-op path rounds each op's result (always for an
  // explicit Cast; with excess precision, other ops keep float32 inside the kernel).
  if (excess_precision) return r;
  return n.outputs.empty() || !n.outputs[0] ? r : RoundTo(b, n.outputs[0]->dtype, r);
}

absl::Status EmitRowReductions(llvm::IRBuilder<>& b, TargetMath& math, const std::vector<const Node*>& nodes,
                               llvm::Value* row_length, const ReducePass& reduce,
                               std::map<const Value*, llvm::Value*>& row_vals,
                               std::map<const Node*, std::pair<llvm::Value*, llvm::Value*>>& softmax) {
  for (const Node* node : nodes) {
    if (!IsRowReduction(*node)) continue;
    const std::string& op = node->op_type;
    const Value* x = node->inputs[0];
    if (op == "Softmax" || op == "LogSoftmax") {
      absl::StatusOr<llvm::Value*> mx = reduce(x, ReduceKind::kMax, nullptr);
      if (!mx.ok()) return mx.status();
      absl::StatusOr<llvm::Value*> sum = reduce(x, ReduceKind::kSumExp, *mx);
      if (!sum.ok()) return sum.status();
      softmax[node] = {*mx, *sum};
      continue;
    }
    ReduceKind kind = op == "ReduceMax" ? ReduceKind::kMax
                      : op == "ReduceMin" ? ReduceKind::kMin
                      : (op == "ReduceSumSquare" || op == "ReduceL2") ? ReduceKind::kSumSq
                                                                       : ReduceKind::kSum;
    absl::StatusOr<llvm::Value*> v = reduce(x, kind, nullptr);
    if (!v.ok()) return v.status();
    llvm::Value* r = *v;
    if (op == "ReduceMean") r = b.CreateFDiv(r, b.CreateSIToFP(row_length, b.getFloatTy()));
    if (op == "ReduceL2") r = math.Unary(b, "sqrt", r);
    row_vals[node->outputs[0]] = r;
  }
  return absl::OkStatus();
}

absl::StatusOr<llvm::Value*> ValueEmitter::Elem(const Value* v, llvm::Value* j, Memo& memo) {
  llvm::Type* f32 = b_.getFloatTy();
  if (auto it = row_vals.find(v); it != row_vals.end()) return it->second;
  if (auto it = memo.find(v); it != memo.end()) return it->second;
  if (IsScalarConstant(v)) {
    auto it = params.find(v);
    return it != params.end() ? it->second : llvm::ConstantFP::get(f32, ScalarConstantValue(v));
  }
  llvm::Value* out = nullptr;
  auto in_it = std::find(inputs_.begin(), inputs_.end(), v);
  if (in_it != inputs_.end()) {
    out = load_(static_cast<size_t>(in_it - inputs_.begin()), j);
  } else {
    const Node* node = v->producer;
    if (node == nullptr) return absl::InternalError(absl::StrCat("fused kernel lost value %", v->name));
    if (node->op_type == "Softmax" || node->op_type == "LogSoftmax") {
      auto st = softmax.find(node);
      if (st == softmax.end()) return absl::InternalError("softmax used before its passes");
      llvm::Value* inv = b_.CreateFDiv(llvm::ConstantFP::get(f32, 1.0), st->second.second);
      if (auto stored = softmax_exp.find(node); stored != softmax_exp.end() && node->op_type == "Softmax") {
        out = b_.CreateFMul(stored->second(j), inv);
      } else {
        absl::StatusOr<llvm::Value*> x = Elem(node->inputs[0], j, memo);
        if (!x.ok()) return x.status();
        llvm::Value* d = b_.CreateFSub(*x, st->second.first);
        // exp(d) * (1 / sum), as the op-by-op kernel computes it: the reciprocal is row-invariant (hoisted
        // out of the loop), so no division per element.
        out = node->op_type == "Softmax" ? b_.CreateFMul(math_.Unary(b_, "exp", d), inv)
                                         : b_.CreateFSub(d, math_.Unary(b_, "log", st->second.second));
      }
    } else if (IsRowReduction(*node)) {
      return absl::InternalError(absl::StrCat("reduction %", v->name, " used before its pass"));
    } else {
      std::vector<llvm::Value*> ops;
      for (const Value* in : node->inputs) {
        if (in == nullptr) {
          ops.push_back(nullptr);
        } else if (IsScalarConstant(in) && node->op_type == "Pow") {
          ops.push_back(llvm::ConstantFP::get(f32, ScalarConstantValue(in)));
        } else {
          absl::StatusOr<llvm::Value*> o = Elem(in, j, memo);
          if (!o.ok()) return o.status();
          ops.push_back(*o);
        }
      }
      absl::StatusOr<llvm::Value*> e = EmitElemental(b_, math_, *node, ops, excess_precision_);
      if (!e.ok()) return e.status();
      out = *e;
    }
  }
  memo[v] = out;
  return out;
}

}  // namespace cjit
