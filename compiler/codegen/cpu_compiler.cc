// CPU code generation for fused kernels. For a kernel over dims [2, 16, 48, 48] reading x (same dims) and
// s ([1, 16, 1, 1]), the collapsed iteration space is rows = 2*16 (outer) x 2304 (inner, contiguous for x,
// stride 0 for s); the generated loop is
//   for r in [row_begin, row_end): base_x = r*2304; base_s = (r % 16)
//     for j in [0, 2304): out[r*2304 + j] = f(x[base_x + j], s[base_s])
// which LLVM's loop vectorizer turns into SIMD code for the host.
#include "compiler/codegen/cpu_compiler.h"

#include "compiler/ir/cpu_isa.h"

#include "base/logging.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <limits>
#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/codegen/elemental_emitter.h"
#include "compiler/codegen/kernel_layout.h"
#include "compiler/codegen/recover.h"
#include "base/status_macros.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/ObjectTransformLayer.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/CrashRecoveryContext.h"
#include "llvm/Transforms/IPO/AlwaysInliner.h"
#include "llvm/Transforms/IPO/GlobalDCE.h"
#include "llvm/Transforms/InstCombine/InstCombine.h"
#include "llvm/Transforms/Scalar/EarlyCSE.h"
#include "llvm/Transforms/Scalar/IndVarSimplify.h"
#include "llvm/Transforms/Scalar/LICM.h"
#include "llvm/Transforms/Scalar/LoopPassManager.h"
#include "llvm/Transforms/Scalar/LoopRotation.h"
#include "llvm/Transforms/Scalar/SimplifyCFG.h"
#include "llvm/Transforms/Scalar/SROA.h"
#include "llvm/Transforms/Vectorize/LoopVectorize.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/xxhash.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/Config/llvm-config.h"

namespace cjit {

const char* CappedCpuName();  // below

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
    llvm::Value* ax = b.CreateSelect(b.CreateFCmpOLT(x, llvm::ConstantFP::get(b.getFloatTy(), 0.0)), b.CreateFNeg(x), x);
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
  auto* entry = llvm::BasicBlock::Create(ctx, "entry", fn);
  auto* outer_head = llvm::BasicBlock::Create(ctx, "outer", fn);
  auto* inner_head = llvm::BasicBlock::Create(ctx, "inner", fn);
  auto* inner_exit = llvm::BasicBlock::Create(ctx, "inner_exit", fn);
  auto* done = llvm::BasicBlock::Create(ctx, "done", fn);
  b.SetInsertPoint(entry);
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
    for (int64_t i = 0; i < np; ++i) params_v.push_back(b.CreateLoad(f32, b.CreateInBoundsGEP(f32, consts, b.getInt64(i))));
  }
  llvm::Value* has_work = b.CreateAnd(b.CreateICmpSLT(row_begin, row_end), b.CreateICmpSGT(inner, b.getInt64(0)));
  b.CreateCondBr(has_work, outer_head, done);

  b.SetInsertPoint(outer_head);
  llvm::PHINode* r = b.CreatePHI(i64, 2, "r");
  r->addIncoming(row_begin, entry);
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
    out_ptr[o] = b.CreateInBoundsGEP(StorageType(b, k.outputs[o]->dtype), fn->getArg(static_cast<unsigned>(n_in + o)), out_base);
  }
  // Broadcast (innermost stride 0) inputs are loop-invariant.
  std::map<const Value*, llvm::Value*> vals;
  for (size_t i = 0; i < n_in; ++i) {
    if (c.strides[i].back() == 0) vals[k.inputs[i]] = LoadF32(b, k.inputs[i]->dtype, in_ptr[i], nullptr);
  }
  b.CreateBr(inner_head);

  b.SetInsertPoint(inner_head);
  llvm::PHINode* j = b.CreatePHI(i64, 2, "j");
  j->addIncoming(b.getInt64(0), outer_head);
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
  llvm::Value* j_next = b.CreateAdd(j, b.getInt64(1));
  j->addIncoming(j_next, b.GetInsertBlock());
  auto* latch = b.CreateCondBr(b.CreateICmpSLT(j_next, inner), inner_head, inner_exit);
  // Vectorize, but do not interleave or unroll: most rows are short, and it halves compile time.
  llvm::MDNode* no_interleave = llvm::MDNode::get(
      ctx, {llvm::MDString::get(ctx, "llvm.loop.interleave.count"), llvm::ConstantAsMetadata::get(b.getInt32(1))});
  llvm::MDNode* no_unroll = llvm::MDNode::get(ctx, {llvm::MDString::get(ctx, "llvm.loop.unroll.disable")});
  llvm::MDNode* loop_id = llvm::MDNode::getDistinct(ctx, {nullptr, no_interleave, no_unroll});
  loop_id->replaceOperandWith(0, loop_id);
  latch->setMetadata(llvm::LLVMContext::MD_loop, loop_id);

  b.SetInsertPoint(inner_exit);
  llvm::Value* r_next = b.CreateAdd(r, b.getInt64(1));
  r->addIncoming(r_next, inner_exit);
  b.CreateCondBr(b.CreateICmpSLT(r_next, row_end), outer_head, done);

  b.SetInsertPoint(done);
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
    auto* entry = llvm::BasicBlock::Create(ctx, "entry", fn_);
    auto* outer = llvm::BasicBlock::Create(ctx, "outer", fn_);
    auto* done = llvm::BasicBlock::Create(ctx, "done", fn_);
    b_.SetInsertPoint(entry);
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
    b_.CreateCondBr(b_.CreateICmpSLT(row_begin, row_end), outer, done);

    b_.SetInsertPoint(outer);
    llvm::PHINode* r = b_.CreatePHI(i64, 2, "r");
    r->addIncoming(row_begin, entry);
    std::vector<llvm::Value*> base(offsets);
    llvm::Value* rem = r;
    for (int d = nd - 2; d >= 0; --d) {
      llvm::Value* idx = d == 0 ? rem : b_.CreateURem(rem, dims[d]);
      if (d > 0) rem = b_.CreateUDiv(rem, dims[d]);
      for (size_t i = 0; i < n_in; ++i) base[i] = b_.CreateAdd(base[i], b_.CreateMul(idx, strides_[i][d]));
    }
    in_ptr_.resize(n_in);
    for (size_t i = 0; i < n_in; ++i) {
      in_ptr_[i] = b_.CreateInBoundsGEP(StorageType(b_, k_.inputs[i]->dtype), fn_->getArg(static_cast<unsigned>(i)), base[i]);
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
          llvm::Value* p = b_.CreateInBoundsGEP(StorageType(b_, dt), fn_->getArg(static_cast<unsigned>(n_in + o)), out_base);
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
    llvm::Value* r_next = b_.CreateAdd(r, b_.getInt64(1));
    r->addIncoming(r_next, b_.GetInsertBlock());
    b_.CreateCondBr(b_.CreateICmpSLT(r_next, row_end), outer, done);
    b_.SetInsertPoint(done);
    b_.CreateRetVoid();
    return absl::OkStatus();
  }

 private:

  // A loop over j in [0, inner); `accs` are (init, step(acc, j) -> next) accumulators; their final values
  // (init for an empty row) go to `results`.
  using Step = std::function<absl::StatusOr<llvm::Value*>(llvm::Value* acc, llvm::Value* j)>;
  absl::Status Loop(const std::function<absl::Status(llvm::Value*)>& body, const std::vector<std::pair<llvm::Value*, Step>>& accs,
                    std::vector<llvm::Value*>* results) {
    llvm::LLVMContext& ctx = m_.getContext();
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* head = llvm::BasicBlock::Create(ctx, "pass", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx, "pass_exit", fn_);
    b_.CreateCondBr(b_.CreateICmpSGT(inner_, b_.getInt64(0)), head, exit);
    b_.SetInsertPoint(head);
    llvm::PHINode* j = b_.CreatePHI(b_.getInt64Ty(), 2, "j");
    j->addIncoming(b_.getInt64(0), pre);
    std::vector<llvm::PHINode*> phis;
    for (const auto& a : accs) {
      llvm::PHINode* p = b_.CreatePHI(b_.getFloatTy(), 2);
      p->addIncoming(a.first, pre);
      phis.push_back(p);
    }
    if (body) CJIT_RETURN_IF_ERROR(body(j));
    std::vector<llvm::Value*> next;
    for (size_t a = 0; a < accs.size(); ++a) {
      CJIT_ASSIGN_OR_RETURN(llvm::Value* nv, accs[a].second(phis[a], j));
      next.push_back(nv);
    }
    llvm::Value* j_next = b_.CreateAdd(j, b_.getInt64(1));
    llvm::BasicBlock* latch = b_.GetInsertBlock();
    j->addIncoming(j_next, latch);
    for (size_t a = 0; a < phis.size(); ++a) phis[a]->addIncoming(next[a], latch);
    auto* br = b_.CreateCondBr(b_.CreateICmpSLT(j_next, inner_), head, exit);
    llvm::MDNode* no_unroll = llvm::MDNode::get(ctx, {llvm::MDString::get(ctx, "llvm.loop.unroll.disable")});
    llvm::MDNode* loop_id = llvm::MDNode::getDistinct(ctx, {nullptr, no_unroll});
    loop_id->replaceOperandWith(0, loop_id);
    br->setMetadata(llvm::LLVMContext::MD_loop, loop_id);
    b_.SetInsertPoint(exit);
    if (results) {
      for (size_t a = 0; a < accs.size(); ++a) {
        llvm::PHINode* res = b_.CreatePHI(b_.getFloatTy(), 2);
        res->addIncoming(accs[a].first, pre);
        res->addIncoming(next[a], latch);
        results->push_back(res);
      }
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

std::string ToString(llvm::Error err) { return llvm::toString(std::move(err)); }

// The process-wide JIT: one LLJIT; each compiled cluster lives under its own ResourceTracker.
struct LoadedKernel {
  CpuKernelFn fn = nullptr;
  std::string symbol;
};

struct Jit {
  std::mutex mu;      // kernels, objects and the LLJIT's symbol table (adding and looking up code)
  // Target machines, each used by one thread at a time (a TargetMachine's subtarget cache is not
  // thread-safe): compiling threads and dumps take one (AcquireTm), made from the JIT's own builder so
  // their object code links into it.
  std::optional<llvm::orc::JITTargetMachineBuilder> jtmb;
  std::mutex tm_mu;
  std::vector<std::unique_ptr<llvm::TargetMachine>> idle_tms;
  std::map<std::string, LoadedKernel> kernels;  // structure -> loaded kernel (process lifetime)
  std::unique_ptr<llvm::orc::LLJIT> lljit;
  std::map<std::string, std::string> objects;  // symbol (= module identifier) -> object file bytes
  std::string error;
};

// Set once GetJit's JIT exists: a reuse-only instantiation (which can only use loaded kernels) asks it
// without creating the JIT (~1 ms on the run thread; the first compile, usually in the background, does).
std::atomic<bool> jit_created{false};

Jit& GetJit() {
  static Jit* jit = [] {
    auto t0 = std::chrono::steady_clock::now();
    auto* j = new Jit();
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!jtmb) {
      j->error = ToString(jtmb.takeError());
      return j;
    }
    // --max_cpu_isa below this CPU's: generate for the capped level's generic CPU (compiler/ir/cpu_isa.h).
    if (const char* cpu = CappedCpuName()) {
      jtmb->setCPU(cpu);
      jtmb->getFeatures() = llvm::SubtargetFeatures();
    }
    // The IR is already optimized (OptimizeModule: vectorized); the fast instruction selector and register
    // allocator halve compile time for elementwise loops at no measurable cost in their speed. Row kernels
    // switch their target machine to the full code generator (CompileKernelObject).
    jtmb->setCodeGenOptLevel(llvm::CodeGenOptLevel::None);
    // What LLJIT sets for JITLink on ELF x86-64 / AArch64 anyway; explicit, so that the object code our
    // compile threads make with target machines from `j->jtmb` is the code the JIT itself would make.
    jtmb->setRelocationModel(llvm::Reloc::PIC_);
    jtmb->setCodeModel(llvm::CodeModel::Small);
    j->jtmb = *jtmb;
    auto tm = jtmb->createTargetMachine();
    if (!tm) {
      j->error = ToString(tm.takeError());
      return j;
    }
    j->idle_tms.push_back(std::move(*tm));  // also checks that the host target can be built
    auto lljit = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(*jtmb).create();
    if (!lljit) {
      j->error = ToString(lljit.takeError());
      return j;
    }
    j->lljit = std::move(*lljit);
    auto gen = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
        j->lljit->getDataLayout().getGlobalPrefix());
    if (!gen) {
      j->error = ToString(gen.takeError());
      return j;
    }
    j->lljit->getMainJITDylib().addGenerator(std::move(*gen));
    j->lljit->getObjTransformLayer().setTransform(
        [j](std::unique_ptr<llvm::MemoryBuffer> obj) -> llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> {
          // Kept for the persistent cache (one kernel per module, a few KB each).
          // The identifier is "<module>-jitted-objectbuffer" (or similar): key by the module name part.
          std::string id = obj->getBufferIdentifier().str();
          size_t cut = id.find("-jitted");
          j->objects[cut == std::string::npos ? id : id.substr(0, cut)] = obj->getBuffer().str();
          return std::move(obj);
        });
    CJIT_VLOG(1) << "LLVM JIT ready in "
            << std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() << " ms";
    return j;
  }();
  jit_created.store(true, std::memory_order_release);
  return *jit;
}

class CpuCodeImpl : public CpuCode {
 public:
  const std::vector<CpuKernel>& kernels() const override { return kernels_; }
  size_t code_bytes() const override { return code_bytes_; }

  std::vector<CpuKernel> kernels_;
  size_t code_bytes_ = 0;
};

}  // namespace

// The LLVM CPU name of the --max_cpu_isa level where it is below this CPU's (x86-64-v2/-v3/-v4: the psABI
// micro-architecture levels), or null: the JIT then targets the host CPU itself.
const char* CappedCpuName() {
  const CpuIsa cap = MaxCpuIsa();
  if (cap >= HardwareCpuIsa()) return nullptr;
  if (cap <= CpuIsa::kBaseline) return "x86-64";
  if (cap == CpuIsa::kAvx2) return "x86-64-v3";
  return "x86-64-v4";  // AVX-512 F/BW/DQ/VL (VNNI, BF16, AMX are not used by generated code)
}

absl::Status RunLlvmRecoverably(const char* what, const std::function<absl::Status()>& fn) {
  static std::once_flag once;
  std::call_once(once, [] { llvm::CrashRecoveryContext::Enable(); });
  absl::Status status;
  llvm::CrashRecoveryContext crc;
  if (!crc.RunSafely([&] { status = fn(); })) {
    return absl::InternalError(absl::StrCat("LLVM failed fatally during ", what, " (recovered; the cluster stays on "
                                            "the fallback path)"));
  }
  return status;
}

std::string HostTargetDescription() {
  if (const char* cpu = CappedCpuName()) {
    return absl::StrCat("cpu=", cpu, " features=(capped: --max_cpu_isa=", CpuIsaName(MaxCpuIsa()), ") llvm=",
                        LLVM_VERSION_STRING);
  }
  std::vector<std::string> feats;
  for (const auto& f : llvm::sys::getHostCPUFeatures()) {
    if (f.second) feats.push_back(f.first().str());
  }
  std::sort(feats.begin(), feats.end());
  return absl::StrCat("cpu=", llvm::sys::getHostCPUName().str(), " features=", absl::StrJoin(feats, ","),
                      " llvm=", LLVM_VERSION_STRING);
}

namespace {

// The deterministic symbol of a kernel structure: identical in every process with the same target, so
// object files from the persistent cache link without clashes.
std::string KernelSymbol(const std::string& structure) {
  return absl::StrCat("cjit_k_", absl::StrFormat("%016x", llvm::xxh3_64bits(llvm::StringRef(structure))));
}

struct PlannedKernel {
  Collapsed collapsed;
  std::string structure;
};

std::vector<PlannedKernel> PlanKernels(const FusionPlan& plan, CpuCodeImpl* code) {
  std::vector<PlannedKernel> out(plan.kernels.size());
  code->kernels_.resize(plan.kernels.size());
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    const FusedKernel& k = plan.kernels[i];
    out[i].collapsed = Collapse(k.shape, Layouts(k), k.row_reduction);
    const Collapsed& c = out[i].collapsed;
    CpuKernel& info = code->kernels_[i];
    info.row_elems = c.dims.back();
    info.rows = 1;
    for (size_t d = 0; d + 1 < c.dims.size(); ++d) info.rows *= c.dims[d];
    info.meta = KernelMeta(c);
    info.consts = KernelConsts(k);
    out[i].structure = KernelStructure(k, c);
    CJIT_VLOG(3) << "kernel " << i << " structure " << out[i].structure;
  }
  return out;
}

absl::StatusOr<CpuKernelFn> Lookup(Jit& jit, const std::string& symbol) {
  auto addr = jit.lljit->lookup(symbol);
  if (!addr) return absl::InternalError(absl::StrCat("LLVM JIT lookup of ", symbol, " failed: ", ToString(addr.takeError())));
  return addr->toPtr<CpuKernelFn>();
}

// Emits one kernel into a fresh module of `ctx` (verified).
absl::StatusOr<std::unique_ptr<llvm::Module>> EmitKernelModule(Jit& jit, const FusedKernel& k, const PlannedKernel& pk,
                                                               const std::string& symbol, llvm::LLVMContext& ctx) {
  auto module = std::make_unique<llvm::Module>(symbol, ctx);
  module->setDataLayout(jit.lljit->getDataLayout());
  module->setTargetTriple(jit.lljit->getTargetTriple().str());
  if (k.row_reduction) {
    RowEmitter row(*module, k, pk.collapsed);
    CJIT_RETURN_IF_ERROR(row.Emit(symbol));
  } else {
    CJIT_RETURN_IF_ERROR(EmitKernel(*module, k, pk.collapsed, symbol));
  }
  std::string verify_errors;
  llvm::raw_string_ostream os(verify_errors);
  if (llvm::verifyModule(*module, &os)) {
    return absl::InternalError(absl::StrCat("generated LLVM IR is invalid: ", os.str()));
  }
  return module;
}

// The IR passes a generated kernel needs, not LLVM's general-purpose O2 pipeline. Our kernels are one
// loop nest over noalias buffers with straight-line math (no calls but the exported wrapper's, no
// allocas, no branches but the loops'), so what makes them fast is: inline the body into the wrapper
// (noalias parameters become alias scopes), clean up (SROA, early CSE, instcombine, simplifycfg), hoist
// the invariant row pointers and broadcast loads (loop rotation, LICM), canonicalize the induction
// variable, and vectorize the inner loop for the host's widest vectors with a vector epilogue. O2 adds the
// interprocedural, unrolling, GVN and SLP passes that change nothing measurable here but cost 3-4x the
// compile time (measured on the kernels of ppocr_mobile_cls and ppocrv4_rec: 4.5 -> 1.3 ms per
// elementwise kernel, 8.8 -> 4.1 ms for a row-reduction kernel; the inner vector loop is the same).
void OptimizeModule(llvm::TargetMachine* tm, llvm::Module& module) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm;
  mpm.addPass(llvm::AlwaysInlinerPass());
  mpm.addPass(llvm::GlobalDCEPass());  // the inlined internal body
  llvm::FunctionPassManager fpm;
  fpm.addPass(llvm::SROAPass(llvm::SROAOptions::ModifyCFG));
  fpm.addPass(llvm::EarlyCSEPass(/*UseMemorySSA=*/false));
  fpm.addPass(llvm::InstCombinePass());
  fpm.addPass(llvm::SimplifyCFGPass());
  {
    llvm::LoopPassManager lpm;
    lpm.addPass(llvm::LoopRotatePass());
    lpm.addPass(llvm::LICMPass(llvm::LICMOptions()));
    fpm.addPass(llvm::createFunctionToLoopPassAdaptor(std::move(lpm), /*UseMemorySSA=*/true));
  }
  fpm.addPass(llvm::createFunctionToLoopPassAdaptor(llvm::IndVarSimplifyPass()));
  fpm.addPass(llvm::LoopVectorizePass());
  fpm.addPass(llvm::InstCombinePass());
  fpm.addPass(llvm::SimplifyCFGPass());
  mpm.addPass(llvm::createModuleToFunctionPassAdaptor(std::move(fpm)));
  mpm.run(module, mam);
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A target machine for one compiling thread (Jit::idle_tms, else a new one); give it back with ReleaseTm.
absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> AcquireTm(Jit& jit) {
  {
    std::lock_guard<std::mutex> lock(jit.tm_mu);
    if (!jit.idle_tms.empty()) {
      auto tm = std::move(jit.idle_tms.back());
      jit.idle_tms.pop_back();
      return tm;
    }
  }
  auto tm = jit.jtmb->createTargetMachine();
  if (!tm) return absl::InternalError(absl::StrCat("LLVM target machine: ", ToString(tm.takeError())));
  return std::move(*tm);
}

void ReleaseTm(Jit& jit, std::unique_ptr<llvm::TargetMachine> tm) {
  std::lock_guard<std::mutex> lock(jit.tm_mu);
  jit.idle_tms.push_back(std::move(tm));
}

// Row kernels (reductions, Softmax, LayerNorm chains) get the optimizing instruction selector and the
// greedy register allocator (CpuCompileOptions::optimize_row_kernels): the fast ones kept every
// loop-carried value of their passes on the stack (a load and a store per vector step). ViT-S/16 at 1
// thread: Mul+Softmax 135 -> 78 us, a LayerNorm chain 30 -> 9 us; their machine code takes ~5x longer.
// Elementwise kernels (memory-bound, no loop-carried vectors) measured the same either way and keep the
// fast path (UNet: 1.65 ms of kernels per run both ways, machine code 9.4 vs 51.8 ms). Set per kernel:
// target machines are reused across kernels.
void SetCodegenLevel(llvm::TargetMachine* tm, const FusedKernel& k, bool optimize_row_kernels) {
  tm->setOptLevel(k.row_reduction && optimize_row_kernels ? llvm::CodeGenOptLevel::Default
                                                          : llvm::CodeGenOptLevel::None);
}

// One kernel compiled to relocatable object code in its own module and context, with the calling thread's
// own target machine: touches no shared JIT state, so kernels compile concurrently and other threads'
// polymorphic instantiations proceed meanwhile. Phase times go to options.on_phase (thread-safe: the
// profiler appends under its lock) from the compiling thread.
struct CompiledObject {
  std::string symbol, object;
  double opt_ms = 0, mc_ms = 0;
};
absl::StatusOr<CompiledObject> CompileKernelObject(Jit& jit, llvm::TargetMachine* tm, const FusedKernel& k,
                                                   const PlannedKernel& pk, const CpuCompileOptions& options) {
  CompiledObject out;
  out.symbol = KernelSymbol(pk.structure);
  llvm::LLVMContext ctx;
  int64_t t0 = NowNs();
  CJIT_ASSIGN_OR_RETURN(std::unique_ptr<llvm::Module> module, EmitKernelModule(jit, k, pk, out.symbol, ctx));
  int64_t t1 = NowNs();
  if (options.on_phase) options.on_phase("llvm_emit", t0, t1);
  OptimizeModule(tm, *module);
  int64_t t2 = NowNs();
  if (options.on_phase) options.on_phase("llvm_optimize", t1, t2);
  llvm::SmallVector<char, 0> buffer;
  {
    SetCodegenLevel(tm, k, options.optimize_row_kernels);
    llvm::raw_svector_ostream os(buffer);
    llvm::legacy::PassManager pm;
    llvm::MCContext* mc = nullptr;
    if (tm->addPassesToEmitMC(pm, mc, os)) return absl::InternalError("the host target cannot emit object code");
    pm.run(*module);
  }
  out.object.assign(buffer.begin(), buffer.end());
  int64_t t3 = NowNs();
  if (options.on_phase) options.on_phase("machine_code", t2, t3);
  out.opt_ms = (t2 - t1) / 1e6;
  out.mc_ms = (t3 - t2) / 1e6;
  return out;
}

// Links a compiled kernel's object code into the process JIT (jit.mu held). Another thread may have
// loaded the same structure meanwhile: then that kernel is used and this object dropped (its symbol is the
// same, so it must not be added twice).
absl::Status LoadKernel(Jit& jit, CompiledObject compiled, const FusedKernel& k, const PlannedKernel& pk,
                        const CpuCompileOptions& options) {
  if (jit.kernels.count(pk.structure)) return absl::OkStatus();
  int64_t t0 = NowNs();
  if (llvm::Error err =
          jit.lljit->addObjectFile(llvm::MemoryBuffer::getMemBufferCopy(compiled.object, compiled.symbol))) {
    return absl::InternalError(absl::StrCat("LLVM JIT rejected the object code: ", ToString(std::move(err))));
  }
  CJIT_ASSIGN_OR_RETURN(CpuKernelFn fn, Lookup(jit, compiled.symbol));
  int64_t t1 = NowNs();
  if (options.on_phase) options.on_phase("jit_link", t0, t1);
  jit.kernels[pk.structure] = LoadedKernel{fn, compiled.symbol};
  CJIT_VLOG(2) << "kernel " << compiled.symbol << " (" << k.nodes.size() << " ops): object code "
               << compiled.object.size() << " bytes, optimize " << compiled.opt_ms << " ms, machine code "
               << compiled.mc_ms << " ms, link " << (t1 - t0) / 1e3 << " us";
  jit.objects[compiled.symbol] = std::move(compiled.object);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CpuCode>> CompileForCpu(const FusionPlan& plan, const CpuCompileOptions& options) {
  if (!options.fail_for_testing.empty() && options.fail_for_testing != "llvm-fatal-error") {
    return absl::InternalError(absl::StrCat("compilation failed (test hook): ", options.fail_for_testing));
  }
  auto code = std::make_unique<CpuCodeImpl>();
  std::vector<PlannedKernel> planned = PlanKernels(plan, code.get());
  if (plan.kernels.empty()) return code;
  if (options.reuse_only && !jit_created.load(std::memory_order_acquire)) {
    return absl::NotFoundError("fused kernel 0 has a structure not compiled in this process (nothing compiled yet)");
  }
  Jit& jit = GetJit();
  if (!jit.lljit) return absl::InternalError(absl::StrCat("LLVM JIT unavailable: ", jit.error));
  // The structures not loaded yet (each once), decided under the lock; compiled without it.
  std::vector<size_t> missing;
  {
    std::lock_guard<std::mutex> lock(jit.mu);
    std::set<std::string> seen;
    for (size_t i = 0; i < plan.kernels.size(); ++i) {
      if (!jit.kernels.count(planned[i].structure) && seen.insert(planned[i].structure).second) missing.push_back(i);
    }
  }
  if (options.reuse_only && !missing.empty()) {
    return absl::NotFoundError(
        absl::StrCat("fused kernel ", missing[0], " has a structure not compiled in this process"));
  }
  auto t0 = std::chrono::steady_clock::now();
  // The new kernels compile on up to options.compile_threads threads (the calling one included), each
  // with its own target machine; each is linked into the JIT as soon as it is ready. The first error
  // (in kernel order) is returned after every thread has finished.
  std::vector<absl::Status> status(missing.size());
  std::vector<double> opt_ms(missing.size(), 0), mc_ms(missing.size(), 0);
  std::atomic<size_t> next{0};
  auto work = [&] {
    std::unique_ptr<llvm::TargetMachine> tm;
    for (size_t m; (m = next.fetch_add(1)) < missing.size();) {
      const size_t i = missing[m];
      status[m] = RunLlvmRecoverably("CPU code generation", [&]() -> absl::Status {
        if (options.fail_for_testing == "llvm-fatal-error") llvm::report_fatal_error("injected by the test hook");
        if (!tm) {
          CJIT_ASSIGN_OR_RETURN(tm, AcquireTm(jit));
        }
        CJIT_ASSIGN_OR_RETURN(CompiledObject compiled,
                              CompileKernelObject(jit, tm.get(), plan.kernels[i], planned[i], options));
        opt_ms[m] = compiled.opt_ms;
        mc_ms[m] = compiled.mc_ms;
        std::lock_guard<std::mutex> lock(jit.mu);  // per kernel: instantiations of other clusters interleave
        return LoadKernel(jit, std::move(compiled), plan.kernels[i], planned[i], options);
      });
      if (!status[m].ok()) {
        // An LLVM failure may leave the target machine in any state: dropped (leaked), never reused.
        tm.release();  // NOLINT(bugprone-unused-return-value): deliberately leaked
        next.store(missing.size());  // the cluster stays on the fallback path: stop the other threads early
      }
    }
    if (tm) ReleaseTm(jit, std::move(tm));
  };
  const int threads = static_cast<int>(std::min<size_t>(missing.size(), std::max(1, options.compile_threads)));
  std::vector<std::thread> helpers;
  for (int t = 1; t < threads; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& t : helpers) t.join();
  for (const absl::Status& st : status) CJIT_RETURN_IF_ERROR(st);
  std::lock_guard<std::mutex> lock(jit.mu);
  std::set<std::string> compiled_here;
  for (size_t m : missing) compiled_here.insert(planned[m].structure);
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    const LoadedKernel& loaded = jit.kernels.at(planned[i].structure);
    code->kernels_[i].fn = loaded.fn;
    // The first kernel of a structure compiled here is new; later ones of the same structure reuse it.
    const bool first_here = compiled_here.erase(planned[i].structure) > 0;
    code->kernels_[i].reused = !first_here;
    if (first_here) code->code_bytes_ += jit.objects[loaded.symbol].size();
  }
  CJIT_VLOG(2) << "CompileForCpu: " << plan.kernels.size() << " kernels, " << missing.size() << " new ("
               << plan.kernels.size() - missing.size() << " reused); total "
               << std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()
               << " ms on " << threads << " threads, optimize " << std::accumulate(opt_ms.begin(), opt_ms.end(), 0.0)
               << " ms, machine code " << std::accumulate(mc_ms.begin(), mc_ms.end(), 0.0) << " ms";
  return code;
}

absl::StatusOr<std::vector<CpuKernelDump>> DumpCpuKernels(const FusionPlan& plan) {
  CpuCodeImpl scratch;
  std::vector<PlannedKernel> planned = PlanKernels(plan, &scratch);
  std::vector<CpuKernelDump> out(plan.kernels.size());
  if (plan.kernels.empty()) return out;
  Jit& jit = GetJit();
  if (!jit.lljit) return absl::InternalError(absl::StrCat("LLVM JIT unavailable: ", jit.error));
  CJIT_ASSIGN_OR_RETURN(std::unique_ptr<llvm::TargetMachine> tm, AcquireTm(jit));
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    absl::Status st = RunLlvmRecoverably("dumping CPU code", [&]() -> absl::Status {
      llvm::LLVMContext ctx;
      std::string symbol = KernelSymbol(planned[i].structure);
      CJIT_ASSIGN_OR_RETURN(std::unique_ptr<llvm::Module> module, EmitKernelModule(jit, plan.kernels[i], planned[i], symbol, ctx));
      {
        llvm::raw_string_ostream os(out[i].llvm_ir);
        module->print(os, nullptr);
      }
      OptimizeModule(tm.get(), *module);
      {
        llvm::raw_string_ostream os(out[i].llvm_ir_opt);
        module->print(os, nullptr);
      }
      llvm::SmallString<0> asm_text;
      llvm::raw_svector_ostream os(asm_text);
      SetCodegenLevel(tm.get(), plan.kernels[i], /*optimize_row_kernels=*/true);
      llvm::legacy::PassManager pm;
      if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile)) {
        return absl::InternalError("the host target cannot emit assembly");
      }
      pm.run(*module);
      out[i].assembly = std::string(asm_text.str());
      out[i].symbol = symbol;
      return absl::OkStatus();
    });
    if (!st.ok()) {
      tm.release();  // NOLINT(bugprone-unused-return-value): after an LLVM failure, leaked, never reused
      return st;
    }
  }
  ReleaseTm(jit, std::move(tm));
  return out;
}

// Payload: u32 count, then per kernel structure: (u64 len + bytes) of structure, symbol, object file.
absl::StatusOr<std::string> ExportCpuPayload(const FusionPlan& plan) {
  CpuCodeImpl scratch;
  std::vector<PlannedKernel> planned = PlanKernels(plan, &scratch);
  Jit& jit = GetJit();
  std::lock_guard<std::mutex> lock(jit.mu);
  std::set<std::string> done;
  std::string out;
  std::vector<const PlannedKernel*> unique;
  for (const PlannedKernel& pk : planned) {
    if (done.insert(pk.structure).second) unique.push_back(&pk);
  }
  auto put = [&out](absl::string_view s) {
    uint64_t n = s.size();
    out.append(reinterpret_cast<const char*>(&n), 8);
    out.append(s.data(), s.size());
  };
  uint32_t count = static_cast<uint32_t>(unique.size());
  out.append(reinterpret_cast<const char*>(&count), 4);
  for (const PlannedKernel* pk : unique) {
    auto it = jit.kernels.find(pk->structure);
    if (it == jit.kernels.end()) return absl::FailedPreconditionError("kernel not compiled in this process");
    auto obj = jit.objects.find(it->second.symbol);
    if (obj == jit.objects.end()) return absl::FailedPreconditionError("kernel object code not retained");
    put(pk->structure);
    put(it->second.symbol);
    put(obj->second);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<CpuCode>> LoadCpuPayload(const FusionPlan& plan, absl::string_view payload) {
  std::map<std::string, std::pair<std::string, std::string>> objects;  // structure -> (symbol, object)
  size_t pos = 0;
  auto get = [&](std::string* s) -> bool {
    if (pos + 8 > payload.size()) return false;
    uint64_t n;
    std::memcpy(&n, payload.data() + pos, 8);
    pos += 8;
    if (n > payload.size() - pos) return false;
    *s = std::string(payload.substr(pos, n));
    pos += n;
    return true;
  };
  if (payload.size() < 4) return absl::DataLossError("payload too short");
  uint32_t count;
  std::memcpy(&count, payload.data(), 4);
  pos = 4;
  for (uint32_t i = 0; i < count; ++i) {
    std::string structure, symbol, object;
    if (!get(&structure) || !get(&symbol) || !get(&object)) return absl::DataLossError("payload truncated");
    if (symbol != KernelSymbol(structure)) return absl::DataLossError("payload symbol does not match its kernel");
    objects[structure] = {symbol, object};
  }
  if (pos != payload.size()) return absl::DataLossError("payload has trailing bytes");
  auto code = std::make_unique<CpuCodeImpl>();
  std::vector<PlannedKernel> planned = PlanKernels(plan, code.get());
  Jit& jit = GetJit();
  std::lock_guard<std::mutex> lock(jit.mu);
  if (!jit.lljit) return absl::InternalError(absl::StrCat("LLVM JIT unavailable: ", jit.error));
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    const std::string& structure = planned[i].structure;
    if (!jit.kernels.count(structure)) {
      auto it = objects.find(structure);
      if (it == objects.end()) return absl::DataLossError("payload lacks a kernel of this cluster");
      const auto& [symbol, object] = it->second;
      auto buffer = llvm::MemoryBuffer::getMemBufferCopy(object, symbol);
      if (llvm::Error err = jit.lljit->addObjectFile(std::move(buffer))) {
        return absl::DataLossError(absl::StrCat("cached object code rejected: ", ToString(std::move(err))));
      }
      CJIT_ASSIGN_OR_RETURN(CpuKernelFn fn, Lookup(jit, symbol));
      jit.kernels[structure] = LoadedKernel{fn, symbol};
      jit.objects[symbol] = object;
    }
    code->kernels_[i].fn = jit.kernels.at(structure).fn;
    code->kernels_[i].reused = true;
  }
  return code;
}

}  // namespace cjit
