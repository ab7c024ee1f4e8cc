// LLVM IR emission of CPU fused kernels (cpu_emit.h).
#include "compiler/codegen/cpu_emit.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/codegen/elemental_emitter.h"
#include "compiler/codegen/for_loop.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/LLVMContext.h"

namespace cjit {
namespace {

class CpuMath : public TargetMath {
 public:
  explicit CpuMath(llvm::Module& m) : m_(m) {}
  llvm::Value* Unary(llvm::IRBuilder<>& b, const char* name, llvm::Value* x) override {
    std::string n = name;
    llvm::Type* f = b.getFloatTy();
    if (n == "exp") return FastExp(b, x);
    if (n == "erf") return FastErf(b, x);
    if (n == "tanh") return FastTanh(b, x);
    llvm::Intrinsic::ID id = llvm::Intrinsic::not_intrinsic;
    if (n == "exp") id = llvm::Intrinsic::exp;
    else if (n == "log") id = llvm::Intrinsic::log;
    else if (n == "sqrt") id = llvm::Intrinsic::sqrt;
    else if (n == "floor") id = llvm::Intrinsic::floor;
    else if (n == "ceil") id = llvm::Intrinsic::ceil;
    else if (n == "round") id = llvm::Intrinsic::roundeven;
    else if (n == "sin") id = llvm::Intrinsic::sin;
    else if (n == "cos") id = llvm::Intrinsic::cos;
    if (id != llvm::Intrinsic::not_intrinsic) {
      return b.CreateCall(llvm::Intrinsic::getDeclaration(&m_, id, {f}), {x});
    }
    // Others: libm (a call per element: the loop does not vectorize).
    llvm::FunctionCallee fn = m_.getOrInsertFunction(n + "f", llvm::FunctionType::get(f, {f}, false));
    return b.CreateCall(fn, {x});
  }
  llvm::Value* Pow(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y) override {
    return b.CreateCall(llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::pow, {b.getFloatTy()}), {x, y});
  }

  // exp in straight-line IR, so that loops calling it vectorize (libm's expf does not): Cephes expf —
  // n = floor(x log2(e) + 1/2), r = x - n ln2 (ln2 split in two), exp(r) by a degree-6 polynomial,
  // times 2^n built in the exponent bits. Relative error ~1e-7 wherever the result is a normal float;
  // +inf above 88.72, 0 below -103.9, NaN passes through.
  llvm::Value* FastExp(llvm::IRBuilder<>& b, llvm::Value* x) {
    llvm::Type* f = b.getFloatTy();
    auto c = [&](double v) { return llvm::ConstantFP::get(f, v); };
    llvm::Value* xc = b.CreateSelect(b.CreateFCmpOGT(x, c(88.72283905206835)), c(88.72283905206835), x);
    xc = b.CreateSelect(b.CreateFCmpOLT(xc, c(-103.97208)), c(-103.97208), xc);
    llvm::Value* fx = b.CreateFAdd(b.CreateFMul(xc, c(1.44269504088896341)), c(0.5));
    fx = b.CreateCall(llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::floor, {f}), {fx});
    llvm::Value* r = b.CreateFSub(xc, b.CreateFMul(fx, c(0.693359375)));
    r = b.CreateFSub(r, b.CreateFMul(fx, c(-2.12194440e-4)));
    llvm::Value* z = b.CreateFMul(r, r);
    llvm::Value* y = c(1.9875691500E-4);
    for (double k : {1.3981999507E-3, 8.3334519073E-3, 4.1665795894E-2, 1.6666665459E-1, 5.0000001201E-1}) {
      y = b.CreateFAdd(b.CreateFMul(y, r), c(k));
    }
    y = b.CreateFAdd(b.CreateFAdd(b.CreateFMul(y, z), r), c(1.0));
    // 2^n as 2^a * 2^(n-a) with a = n/2, so that n in [-150, 128] never leaves the exponent range
    // (denormal results come out of the second multiplication).
    llvm::Value* n = b.CreateFPToSI(fx, b.getInt32Ty());
    llvm::Value* a = b.CreateAShr(n, 1);
    llvm::Value* rest = b.CreateSub(n, a);
    auto pow2 = [&](llvm::Value* e) { return b.CreateBitCast(b.CreateShl(b.CreateAdd(e, b.getInt32(127)), 23), f); };
    llvm::Value* res = b.CreateFMul(b.CreateFMul(y, pow2(a)), pow2(rest));
    res = b.CreateSelect(b.CreateFCmpOGT(x, c(88.72283905206835)), c(std::numeric_limits<float>::infinity()), res);
    res = b.CreateSelect(b.CreateFCmpOLT(x, c(-103.97208)), c(0.0), res);
    return b.CreateSelect(b.CreateFCmpUNO(x, x), x, res);
  }

  // erf and tanh as rational functions in straight-line IR (a libm call per element kept a Gelu kernel
  // scalar: 5.6 ns per element). Eigen's generic_fast_erf_float / generic_fast_tanh_float (the
  // approximations XLA emits for these ops): x * P(x^2) / Q(x^2) with the input clamped where float32's
  // result is +-1 (erf: |x| <= 4; tanh: |x| <= 7.9053111), tanh(x) = x for |x| < 0.0004. Checked against
  // float64 erf / tanh on [-10, 10]: relative error <= 4.2e-7; NaN passes through; the result is clamped
  // to [-1, 1].
  llvm::Value* Rational(llvm::IRBuilder<>& b, llvm::Value* x, double clamp, std::initializer_list<double> num,
                        std::initializer_list<double> den) {
    llvm::Type* f = b.getFloatTy();
    auto c = [&](double v) { return llvm::ConstantFP::get(f, v); };
    // Selects, not minnum/maxnum: a NaN input stays NaN.
    llvm::Value* xc = b.CreateSelect(b.CreateFCmpOGT(x, c(clamp)), c(clamp), x);
    xc = b.CreateSelect(b.CreateFCmpOLT(xc, c(-clamp)), c(-clamp), xc);
    llvm::Value* x2 = b.CreateFMul(xc, xc);
    auto horner = [&](std::initializer_list<double> coeffs) {
      auto it = coeffs.begin();
      llvm::Value* acc = c(*it++);
      for (; it != coeffs.end(); ++it) acc = b.CreateFAdd(b.CreateFMul(x2, acc), c(*it));
      return acc;
    };
    llvm::Value* r = b.CreateFDiv(b.CreateFMul(xc, horner(num)), horner(den));
    r = b.CreateSelect(b.CreateFCmpOGT(r, c(1.0)), c(1.0), r);
    return b.CreateSelect(b.CreateFCmpOLT(r, c(-1.0)), c(-1.0), r);
  }
  llvm::Value* FastErf(llvm::IRBuilder<>& b, llvm::Value* x) {
    llvm::Type* f = b.getFloatTy();
    // Below 1e-30, x * P(x^2) underflows into subnormals and loses bits: erf(x) = 2 x / sqrt(pi) there (as
    // the fallback's ErfF32, runtime/cpu/vec_math.cc).
    llvm::Value* ax = b.CreateSelect(b.CreateFCmpOLT(x, llvm::ConstantFP::get(f, 0.0)), b.CreateFNeg(x), x);
    llvm::Value* tiny = b.CreateFCmpOLT(ax, llvm::ConstantFP::get(f, 1e-30));
    return b.CreateSelect(tiny, b.CreateFMul(x, llvm::ConstantFP::get(f, 1.1283791670955126)), RationalErf(b, x));
  }
  llvm::Value* RationalErf(llvm::IRBuilder<>& b, llvm::Value* x) {
    return Rational(b, x, 4.0,
                    {-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
                     -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02},
                    {-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
                     -1.42647390514189e-02});
  }
  llvm::Value* FastTanh(llvm::IRBuilder<>& b, llvm::Value* x) {
    llvm::Value* r = Rational(b, x, 7.90531110763549805,
                              {-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                               5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
                               4.89352455891786e-03},
                              {1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
                               4.89352518554385e-03});
    llvm::Value* ax =
        b.CreateSelect(b.CreateFCmpOLT(x, llvm::ConstantFP::get(b.getFloatTy(), 0.0)), b.CreateFNeg(x), x);
    return b.CreateSelect(b.CreateFCmpOLT(ax, llvm::ConstantFP::get(b.getFloatTy(), 0.0004)), x, r);
  }

 private:
  llvm::Module& m_;
};

absl::Status EmitKernel(llvm::Module& m, const FusedKernel& k, const Collapsed& c, const std::string& symbol) {
  llvm::LLVMContext& ctx = m.getContext();
  llvm::IRBuilder<> b(ctx);
  llvm::Type* i64 = b.getInt64Ty();
  llvm::Type* f32 = b.getFloatTy();
  llvm::Type* ptr = b.getPtrTy();
  size_t n_in = k.inputs.size(), n_out = k.outputs.size();
  int nd = static_cast<int>(c.dims.size());
  // Inner function: one noalias pointer per buffer (outputs are fresh allocations, never aliasing inputs),
  // so the loop vectorizer needs no runtime alias checks. The exported wrapper unpacks `args`.
  std::vector<llvm::Type*> params(n_in + n_out, ptr);
  params.push_back(ptr);  // meta
  params.push_back(ptr);  // consts
  params.push_back(i64);
  params.push_back(i64);
  auto* ity = llvm::FunctionType::get(b.getVoidTy(), params, false);
  auto* inner_fn = llvm::Function::Create(ity, llvm::Function::InternalLinkage, symbol + "_body", m);
  inner_fn->addFnAttr(llvm::Attribute::NoUnwind);
  inner_fn->addFnAttr(llvm::Attribute::AlwaysInline);
  for (size_t i = 0; i < n_in + n_out; ++i) inner_fn->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::NoAlias);
  {
    auto* wty = llvm::FunctionType::get(b.getVoidTy(), {ptr, ptr, ptr, i64, i64}, false);
    auto* w = llvm::Function::Create(wty, llvm::Function::ExternalLinkage, symbol, m);
    w->addFnAttr(llvm::Attribute::NoUnwind);
    b.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", w));
    std::vector<llvm::Value*> call_args;
    for (size_t i = 0; i < n_in + n_out; ++i) {
      call_args.push_back(b.CreateLoad(ptr, b.CreateInBoundsGEP(ptr, w->getArg(0), b.getInt64(i))));
    }
    call_args.push_back(w->getArg(1));
    call_args.push_back(w->getArg(2));
    call_args.push_back(w->getArg(3));
    call_args.push_back(w->getArg(4));
    b.CreateCall(inner_fn, call_args);
    b.CreateRetVoid();
  }
  llvm::Function* fn = inner_fn;
  llvm::Value* meta = fn->getArg(static_cast<unsigned>(n_in + n_out));
  llvm::Value* consts = fn->getArg(static_cast<unsigned>(n_in + n_out + 1));
  llvm::Value* row_begin = fn->getArg(static_cast<unsigned>(n_in + n_out + 2));
  llvm::Value* row_end = fn->getArg(static_cast<unsigned>(n_in + n_out + 3));
  b.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", fn));
  auto meta_at = [&](int64_t i) { return b.CreateLoad(i64, b.CreateInBoundsGEP(i64, meta, b.getInt64(i))); };
  llvm::Value* inner = meta_at(0);
  std::vector<llvm::Value*> dims(nd - 1);
  for (int d = 0; d < nd - 1; ++d) dims[d] = meta_at(1 + d);
  std::vector<std::vector<llvm::Value*>> strides(n_in, std::vector<llvm::Value*>(nd));
  std::vector<llvm::Value*> offsets(n_in);
  for (size_t i = 0; i < n_in; ++i) {
    for (int d = 0; d < nd; ++d) strides[i][d] = meta_at(MetaIndex(nd, i, d));
    offsets[i] = meta_at(MetaIndex(nd, i, nd));
  }
  // Scalar parameters, loaded once (the emitter sees them as loop-invariant values).
  std::vector<llvm::Value*> params_v;
  {
    int64_t np = 0;
    for (const Node* node : k.nodes)
      for (const Value* v : node->inputs) np += v && IsScalarConstant(v) && node->op_type != "Pow";
    for (int64_t i = 0; i < np; ++i)
      params_v.push_back(b.CreateLoad(f32, b.CreateInBoundsGEP(f32, consts, b.getInt64(i))));
  }
  ForLoop::Options rows;
  rows.guard = b.CreateAnd(b.CreateICmpSLT(row_begin, row_end), b.CreateICmpSGT(inner, b.getInt64(0)));
  ForLoop outer(b, "outer", "r", row_begin, row_end, b.getInt64(1), rows);
  llvm::PHINode* r = outer.index();
  std::vector<llvm::Value*> base(offsets);
  llvm::Value* rem = r;
  for (int d = nd - 2; d >= 0; --d) {
    llvm::Value* idx = d == 0 ? rem : b.CreateURem(rem, dims[d]);
    if (d > 0) rem = b.CreateUDiv(rem, dims[d]);
    for (size_t i = 0; i < n_in; ++i) base[i] = b.CreateAdd(base[i], b.CreateMul(idx, strides[i][d]));
  }
  llvm::Value* out_base = b.CreateMul(r, inner);
  std::vector<llvm::Value*> in_ptr(n_in);
  for (size_t i = 0; i < n_in; ++i) {
    in_ptr[i] = b.CreateInBoundsGEP(StorageType(b, k.inputs[i]->dtype), fn->getArg(static_cast<unsigned>(i)), base[i]);
  }
  std::vector<llvm::Value*> out_ptr(n_out);
  for (size_t o = 0; o < n_out; ++o) {
    out_ptr[o] =
        b.CreateInBoundsGEP(StorageType(b, k.outputs[o]->dtype), fn->getArg(static_cast<unsigned>(n_in + o)), out_base);
  }
  // Broadcast (innermost stride 0) inputs are loop-invariant.
  std::map<const Value*, llvm::Value*> vals;
  for (size_t i = 0; i < n_in; ++i) {
    if (c.strides[i].back() == 0) vals[k.inputs[i]] = LoadF32(b, k.inputs[i]->dtype, in_ptr[i], nullptr);
  }
  ForLoop::Options row;
  row.unguarded = true;  // the rows' guard checked inner > 0
  ForLoop inner_loop(b, "inner", "j", b.getInt64(0), inner, b.getInt64(1), row);
  llvm::PHINode* j = inner_loop.index();
  for (size_t i = 0; i < n_in; ++i) {
    char cls = InnerClass(c, i);
    if (cls == 'b') continue;
    llvm::Value* idx = cls == 'c' ? j : b.CreateMul(j, strides[i][nd - 1]);
    vals[k.inputs[i]] = LoadF32(b, k.inputs[i]->dtype, in_ptr[i], idx);
  }
  CpuMath math(m);
  size_t next_param = 0;
  for (const Node* node : k.nodes) {
    std::vector<llvm::Value*> ops;
    for (const Value* v : node->inputs) {
      if (v == nullptr) {
        ops.push_back(nullptr);
      } else if (IsScalarConstant(v) && node->op_type == "Pow") {
        ops.push_back(llvm::ConstantFP::get(f32, ScalarConstantValue(v)));
      } else if (IsScalarConstant(v)) {
        ops.push_back(params_v.at(next_param++));
      } else {
        auto it = vals.find(v);
        if (it == vals.end()) return absl::InternalError(absl::StrCat("fused kernel lost value %", v->name));
        ops.push_back(it->second);
      }
    }
    CJIT_ASSIGN_OR_RETURN(llvm::Value* res, EmitElemental(b, math, *node, ops, k.excess_precision));
    vals[node->outputs[0]] = res;
  }
  for (size_t o = 0; o < n_out; ++o) StoreF32(b, k.outputs[o]->dtype, vals.at(k.outputs[o]), out_ptr[o], j);
  // Vectorize, but do not interleave or unroll: most rows are short, and it halves compile time.
  ForLoop::DisableUnroll(inner_loop.End(), /*no_interleave=*/true);
  outer.End();
  b.CreateRetVoid();
  return absl::OkStatus();
}

// Row kernel: per row, one pass over the last dim per reduction (two for Softmax/LogSoftmax: max, then the
// sum of exponentials), then a final pass storing the full-shaped outputs; row-shaped outputs are stored
// once per row. Per-element values are recomputed in each pass that needs them (cheaper than storing);
// values that depend only on row values are loop-invariant and hoisted by LLVM.
class RowEmitter {
 public:
  RowEmitter(llvm::Module& m, const FusedKernel& k, const Collapsed& c) : m_(m), k_(k), c_(c), b_(m.getContext()) {}

  absl::Status Emit(const std::string& symbol) {
    llvm::LLVMContext& ctx = m_.getContext();
    llvm::Type* i64 = b_.getInt64Ty();
    llvm::Type* f32 = b_.getFloatTy();
    llvm::Type* ptr = b_.getPtrTy();
    size_t n_in = k_.inputs.size(), n_out = k_.outputs.size();
    int nd = static_cast<int>(c_.dims.size());
    std::vector<llvm::Type*> params(n_in + n_out, ptr);
    params.insert(params.end(), {ptr, ptr, i64, i64});
    fn_ = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), params, false),
                                 llvm::Function::InternalLinkage, symbol + "_body", m_);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    fn_->addFnAttr(llvm::Attribute::AlwaysInline);
    for (size_t i = 0; i < n_in + n_out; ++i) fn_->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::NoAlias);
    {
      auto* w = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, ptr, i64, i64}, false),
                                       llvm::Function::ExternalLinkage, symbol, m_);
      w->addFnAttr(llvm::Attribute::NoUnwind);
      b_.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", w));
      std::vector<llvm::Value*> args;
      for (size_t i = 0; i < n_in + n_out; ++i) {
        args.push_back(b_.CreateLoad(ptr, b_.CreateInBoundsGEP(ptr, w->getArg(0), b_.getInt64(i))));
      }
      for (unsigned a = 1; a <= 4; ++a) args.push_back(w->getArg(a));
      b_.CreateCall(fn_, args);
      b_.CreateRetVoid();
    }
    llvm::Value* meta = fn_->getArg(static_cast<unsigned>(n_in + n_out));
    llvm::Value* consts = fn_->getArg(static_cast<unsigned>(n_in + n_out + 1));
    llvm::Value* row_begin = fn_->getArg(static_cast<unsigned>(n_in + n_out + 2));
    llvm::Value* row_end = fn_->getArg(static_cast<unsigned>(n_in + n_out + 3));
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", fn_));
    auto meta_at = [&](int64_t i) { return b_.CreateLoad(i64, b_.CreateInBoundsGEP(i64, meta, b_.getInt64(i))); };
    inner_ = meta_at(0);
    std::vector<llvm::Value*> dims(nd - 1);
    for (int d = 0; d < nd - 1; ++d) dims[d] = meta_at(1 + d);
    strides_.assign(n_in, std::vector<llvm::Value*>(nd));
    std::vector<llvm::Value*> offsets(n_in);
    for (size_t i = 0; i < n_in; ++i) {
      for (int d = 0; d < nd; ++d) strides_[i][d] = meta_at(MetaIndex(nd, i, d));
      offsets[i] = meta_at(MetaIndex(nd, i, nd));
    }
    int64_t np = 0;
    for (const Node* node : k_.nodes)
      for (const Value* v : node->inputs) {
        if (v && IsScalarConstant(v) && node->op_type != "Pow" && !params_.count(v)) {
          params_[v] = b_.CreateLoad(f32, b_.CreateInBoundsGEP(f32, consts, b_.getInt64(np++)));
        } else if (v && IsScalarConstant(v) && node->op_type != "Pow") {
          ++np;  // every use has its own slot (KernelConsts order); the first one is used
        }
      }
    ForLoop rows(b_, "outer", "r", row_begin, row_end, b_.getInt64(1));
    llvm::PHINode* r = rows.index();
    std::vector<llvm::Value*> base(offsets);
    llvm::Value* rem = r;
    for (int d = nd - 2; d >= 0; --d) {
      llvm::Value* idx = d == 0 ? rem : b_.CreateURem(rem, dims[d]);
      if (d > 0) rem = b_.CreateUDiv(rem, dims[d]);
      for (size_t i = 0; i < n_in; ++i) base[i] = b_.CreateAdd(base[i], b_.CreateMul(idx, strides_[i][d]));
    }
    in_ptr_.resize(n_in);
    for (size_t i = 0; i < n_in; ++i) {
      in_ptr_[i] =
          b_.CreateInBoundsGEP(StorageType(b_, k_.inputs[i]->dtype), fn_->getArg(static_cast<unsigned>(i)), base[i]);
      if (c_.strides[i].back() == 0) row_vals_[k_.inputs[i]] = LoadF32(b_, k_.inputs[i]->dtype, in_ptr_[i], nullptr);
    }
    Dims rd = k_.shape;
    rd.back() = 1;
    // One Softmax and a full-shaped float32 output: its sum pass stores exp(x - max) in that output's row,
    // which the final pass reads back (and overwrites element by element): each exp once, not twice.
    llvm::Value* out_base = b_.CreateMul(r, inner_);
    scratch_node_ = nullptr;
    int softmaxes = 0;
    for (const Node* node : k_.nodes) softmaxes += node->op_type == "Softmax" || node->op_type == "LogSoftmax";
    for (size_t o = 0; o < n_out && softmaxes == 1; ++o) {
      if (k_.outputs[o]->shape.concrete() != k_.shape || k_.outputs[o]->dtype != DType::kF32) continue;
      for (const Node* node : k_.nodes) {
        if (node->op_type == "Softmax") scratch_node_ = node;
      }
      scratch_ = b_.CreateInBoundsGEP(f32, fn_->getArg(static_cast<unsigned>(n_in + o)), out_base);
      break;
    }
    // Reductions in topological order, each one or two passes.
    CJIT_RETURN_IF_ERROR(EmitRowReductions(
        b_, math_, k_.nodes, inner_,
        [&](const Value* x, ReduceKind kind, llvm::Value* offset) { return Reduce(x, kind, offset); }, row_vals_,
        softmax_));
    // Final pass: full-shaped outputs.
    bool any_full = false;
    for (const Value* v : k_.outputs) any_full |= v->shape.concrete() == k_.shape;
    if (any_full) {
      CJIT_RETURN_IF_ERROR(Loop([&](llvm::Value* j) -> absl::Status {
        std::map<const Value*, llvm::Value*> memo;
        // Every value first, then the stores: one output's row may hold the stored exponentials.
        std::vector<std::pair<size_t, llvm::Value*>> vals;
        for (size_t o = 0; o < n_out; ++o) {
          if (k_.outputs[o]->shape.concrete() != k_.shape) continue;
          CJIT_ASSIGN_OR_RETURN(llvm::Value* val, Elem(k_.outputs[o], j, memo));
          vals.emplace_back(o, val);
        }
        for (const auto& [o, val] : vals) {
          DType dt = k_.outputs[o]->dtype;
          llvm::Value* p =
              b_.CreateInBoundsGEP(StorageType(b_, dt), fn_->getArg(static_cast<unsigned>(n_in + o)), out_base);
          StoreF32(b_, dt, val, p, j);
        }
        return absl::OkStatus();
      }, {}, nullptr));
    }
    // Row-shaped outputs: once per row.
    std::map<const Value*, llvm::Value*> memo;
    for (size_t o = 0; o < n_out; ++o) {
      if (k_.outputs[o]->shape.concrete() == k_.shape) continue;
      CJIT_ASSIGN_OR_RETURN(llvm::Value* val, Elem(k_.outputs[o], b_.getInt64(0), memo));
      StoreF32(b_, k_.outputs[o]->dtype, val, fn_->getArg(static_cast<unsigned>(n_in + o)), r);
    }
    rows.End();
    b_.CreateRetVoid();
    return absl::OkStatus();
  }

 private:

  // A loop over j in [0, inner); `accs` are (init, step(acc, j) -> next) accumulators; their final values
  // (init for an empty row) go to `results`.
  using Step = std::function<absl::StatusOr<llvm::Value*>(llvm::Value* acc, llvm::Value* j)>;
  absl::Status Loop(const std::function<absl::Status(llvm::Value*)>& body,
                    const std::vector<std::pair<llvm::Value*, Step>>& accs, std::vector<llvm::Value*>* results) {
    ForLoop::Options options;
    options.guard = b_.CreateICmpSGT(inner_, b_.getInt64(0));
    ForLoop loop(b_, "pass", "j", b_.getInt64(0), inner_, b_.getInt64(1), options);
    std::vector<llvm::PHINode*> phis;
    for (const auto& a : accs) phis.push_back(loop.Carry(a.first));
    if (body) CJIT_RETURN_IF_ERROR(body(loop.index()));
    std::vector<llvm::Value*> next;
    for (size_t a = 0; a < accs.size(); ++a) {
      CJIT_ASSIGN_OR_RETURN(llvm::Value* nv, accs[a].second(phis[a], loop.index()));
      next.push_back(nv);
    }
    ForLoop::DisableUnroll(loop.End(next), /*no_interleave=*/false);
    if (results) {
      for (size_t a = 0; a < accs.size(); ++a) results->push_back(loop.ExitValue(accs[a].first, next[a]));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<llvm::Value*> Reduce(const Value* x, ReduceKind kind, llvm::Value* offset) {
    llvm::Type* f32 = b_.getFloatTy();
    double init = kind == ReduceKind::kMax ? -std::numeric_limits<float>::infinity()
                : kind == ReduceKind::kMin ? std::numeric_limits<float>::infinity() : 0.0;
    llvm::FastMathFlags fmf;
    fmf.setAllowReassoc();
    fmf.setNoSignedZeros();
    Step step = [&, x, kind, offset, fmf](llvm::Value* acc, llvm::Value* j) -> absl::StatusOr<llvm::Value*> {
      std::map<const Value*, llvm::Value*> memo;
      CJIT_ASSIGN_OR_RETURN(llvm::Value* e, Elem(x, j, memo));
      llvm::IRBuilder<>::FastMathFlagGuard guard(b_);
      b_.setFastMathFlags(fmf);
      switch (kind) {
        case ReduceKind::kSum: return b_.CreateFAdd(acc, e);
        case ReduceKind::kSumSq: return b_.CreateFAdd(acc, b_.CreateFMul(e, e));
        case ReduceKind::kSumExp: {
          llvm::Value* ex = CpuMath(m_).Unary(b_, "exp", b_.CreateFSub(e, offset));
          if (scratch_node_ != nullptr && x == scratch_node_->inputs[0]) {
            b_.CreateStore(ex, b_.CreateInBoundsGEP(b_.getFloatTy(), scratch_, j));
          }
          return b_.CreateFAdd(acc, ex);
        }
        // llvm.maximum / llvm.minimum propagate NaN (as numpy's max/min and ONNX ReduceMax/ReduceMin).
        case ReduceKind::kMax: return b_.CreateMaximum(acc, e);
        case ReduceKind::kMin: return b_.CreateMinimum(acc, e);
      }
      return acc;
    };
    std::vector<llvm::Value*> results;
    CJIT_RETURN_IF_ERROR(Loop(nullptr, {{llvm::ConstantFP::get(f32, init), step}}, &results));
    return results[0];
  }

  absl::StatusOr<llvm::Value*> Elem(const Value* v, llvm::Value* j, std::map<const Value*, llvm::Value*>& memo) {
    ValueEmitter ve(
        b_, math_, k_.inputs,
        [&](size_t i, llvm::Value* jj) -> llvm::Value* {
          char cls = InnerClass(c_, i);
          llvm::Value* idx = cls == 'c' ? jj : b_.CreateMul(jj, strides_[i][c_.dims.size() - 1]);
          return LoadF32(b_, k_.inputs[i]->dtype, in_ptr_[i], idx);
        },
        k_.excess_precision);
    ve.row_vals = row_vals_;
    ve.params = params_;
    ve.softmax = softmax_;
    if (scratch_node_ != nullptr) {
      ve.softmax_exp[scratch_node_] = [this](llvm::Value* jj) {
        return b_.CreateLoad(b_.getFloatTy(), b_.CreateInBoundsGEP(b_.getFloatTy(), scratch_, jj));
      };
    }
    return ve.Elem(v, j, memo);
  }

  llvm::Module& m_;
  const FusedKernel& k_;
  const Collapsed& c_;
  llvm::IRBuilder<> b_;
  CpuMath math_{m_};
  llvm::Function* fn_ = nullptr;
  llvm::Value* inner_ = nullptr;
  std::vector<llvm::Value*> in_ptr_;
  std::vector<std::vector<llvm::Value*>> strides_;
  std::map<const Value*, llvm::Value*> row_vals_, params_;
  std::map<const Node*, std::pair<llvm::Value*, llvm::Value*>> softmax_;
  const Node* scratch_node_ = nullptr;  // the Softmax whose exps the sum pass stores at scratch_
  llvm::Value* scratch_ = nullptr;      // the row of a full-shaped float32 output
};

}  // namespace

absl::Status EmitCpuKernel(llvm::Module& m, const FusedKernel& k, const Collapsed& c, const std::string& symbol) {
  if (k.row_reduction) return RowEmitter(m, k, c).Emit(symbol);
  return EmitKernel(m, k, c, symbol);
}

}  // namespace cjit
