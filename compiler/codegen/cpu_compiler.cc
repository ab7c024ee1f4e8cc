// CPU code generation for fused kernels. For a kernel over dims [2, 16, 48, 48] reading x (same dims) and
// s ([1, 16, 1, 1]), the collapsed iteration space is rows = 2*16 (outer) x 2304 (inner, contiguous for x,
// stride 0 for s); the generated loop is
//   for r in [row_begin, row_end): base_x = r*2304; base_s = (r % 16)
//     for j in [0, 2304): out[r*2304 + j] = f(x[base_x + j], s[base_s])
// which LLVM's loop vectorizer turns into SIMD code for the host.
#include "compiler/codegen/cpu_compiler.h"

#include <atomic>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/codegen/elemental_emitter.h"
#include "compiler/ir/status_macros.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/ObjectTransformLayer.h"
#include "llvm/ExecutionEngine/Orc/ThreadSafeModule.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/Config/llvm-config.h"

namespace cjit {
namespace {

class CpuMath : public TargetMath {
 public:
  explicit CpuMath(llvm::Module& m) : m_(m) {}
  llvm::Value* Unary(llvm::IRBuilder<>& b, const char* name, llvm::Value* x) override {
    std::string n = name;
    llvm::Type* f = b.getFloatTy();
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
    // tanh, erf: libm.
    llvm::FunctionCallee fn = m_.getOrInsertFunction(n + "f", llvm::FunctionType::get(f, {f}, false));
    return b.CreateCall(fn, {x});
  }
  llvm::Value* Pow(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y) override {
    return b.CreateCall(llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::pow, {b.getFloatTy()}), {x, y});
  }

 private:
  llvm::Module& m_;
};

struct Collapsed {
  std::vector<int64_t> dims;                   // collapsed iteration dims
  std::vector<std::vector<int64_t>> strides;   // [input][dim], element strides (0 = broadcast)
};

Collapsed Collapse(const Dims& out, const std::vector<Dims>& ins) {
  int r = static_cast<int>(out.size());
  size_t n = ins.size();
  std::vector<std::vector<int64_t>> stride(r, std::vector<int64_t>(n + 1, 0));
  for (size_t k = 0; k <= n; ++k) {
    const Dims& d = k < n ? ins[k] : out;  // the last column is the output (dense)
    int off = r - static_cast<int>(d.size());
    int64_t s = 1;
    for (int i = r - 1; i >= 0; --i) {
      int j = i - off;
      stride[i][k] = (j < 0 || d[j] == 1) ? 0 : s;
      if (j >= 0) s *= d[j];
    }
  }
  Collapsed c;
  std::vector<std::vector<int64_t>> cs;
  for (int i = 0; i < r; ++i) {
    if (out[i] == 1) continue;
    if (!c.dims.empty()) {
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
  c.strides.assign(n, std::vector<int64_t>(c.dims.size()));
  for (size_t k = 0; k < n; ++k)
    for (size_t d = 0; d < c.dims.size(); ++d) c.strides[k][d] = cs[d][k];
  return c;
}

absl::Status EmitKernel(llvm::Module& m, const FusedKernel& k, const std::string& symbol, CpuKernel* info) {
  llvm::LLVMContext& ctx = m.getContext();
  llvm::IRBuilder<> b(ctx);
  llvm::Type* i64 = b.getInt64Ty();
  llvm::Type* f32 = b.getFloatTy();
  llvm::Type* ptr = b.getPtrTy();
  auto* fty = llvm::FunctionType::get(b.getVoidTy(), {ptr, i64, i64}, false);
  auto* fn = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, symbol, m);
  fn->addFnAttr(llvm::Attribute::NoUnwind);
  llvm::Value* args = fn->getArg(0);
  llvm::Value* row_begin = fn->getArg(1);
  llvm::Value* row_end = fn->getArg(2);
  std::vector<Dims> in_dims;
  for (const Value* v : k.inputs) in_dims.push_back(v->shape.concrete());
  Collapsed c = Collapse(k.shape, in_dims);
  int nd = static_cast<int>(c.dims.size());
  int64_t inner = c.dims.back();
  int64_t rows = 1;
  for (int d = 0; d < nd - 1; ++d) rows *= c.dims[d];
  info->rows = rows;
  info->row_elems = inner;

  auto* entry = llvm::BasicBlock::Create(ctx, "entry", fn);
  auto* outer_head = llvm::BasicBlock::Create(ctx, "outer", fn);
  auto* inner_head = llvm::BasicBlock::Create(ctx, "inner", fn);
  auto* inner_exit = llvm::BasicBlock::Create(ctx, "inner_exit", fn);
  auto* done = llvm::BasicBlock::Create(ctx, "done", fn);
  b.SetInsertPoint(entry);
  size_t n_in = k.inputs.size(), n_out = k.outputs.size();
  std::vector<llvm::Value*> bufs;
  for (size_t i = 0; i < n_in + n_out; ++i) {
    llvm::Value* slot = b.CreateInBoundsGEP(ptr, args, b.getInt64(i));
    auto* load = b.CreateLoad(ptr, slot);
    bufs.push_back(load);
  }
  b.CreateCondBr(b.CreateICmpSLT(row_begin, row_end), outer_head, done);

  b.SetInsertPoint(outer_head);
  llvm::PHINode* r = b.CreatePHI(i64, 2, "r");
  r->addIncoming(row_begin, entry);
  // Per-input base offsets for this row (compile-time strides and dims: divisions by constants).
  std::vector<llvm::Value*> base(n_in);
  for (size_t i = 0; i < n_in; ++i) base[i] = b.getInt64(0);
  llvm::Value* rem = r;
  for (int d = nd - 2; d >= 0; --d) {
    llvm::Value* idx = b.CreateURem(rem, b.getInt64(c.dims[d]));
    rem = b.CreateUDiv(rem, b.getInt64(c.dims[d]));
    for (size_t i = 0; i < n_in; ++i) {
      if (c.strides[i][d] != 0) base[i] = b.CreateAdd(base[i], b.CreateMul(idx, b.getInt64(c.strides[i][d])));
    }
  }
  llvm::Value* out_base = b.CreateMul(r, b.getInt64(inner));
  b.CreateBr(inner_head);

  b.SetInsertPoint(inner_head);
  llvm::PHINode* j = b.CreatePHI(i64, 2, "j");
  j->addIncoming(b.getInt64(0), outer_head);
  std::map<const Value*, llvm::Value*> vals;
  for (size_t i = 0; i < n_in; ++i) {
    int64_t s = c.strides[i][nd - 1];
    llvm::Value* idx = s == 0 ? base[i] : b.CreateAdd(base[i], s == 1 ? j : b.CreateMul(j, b.getInt64(s)));
    vals[k.inputs[i]] = b.CreateLoad(f32, b.CreateInBoundsGEP(f32, bufs[i], idx));
  }
  CpuMath math(m);
  for (const Node* node : k.nodes) {
    std::vector<llvm::Value*> ops;
    for (const Value* v : node->inputs) {
      if (v == nullptr) {
        ops.push_back(nullptr);
      } else if (IsScalarConstant(v)) {
        ops.push_back(llvm::ConstantFP::get(f32, *v->constant->data<float>()));
      } else {
        auto it = vals.find(v);
        if (it == vals.end()) return absl::InternalError(absl::StrCat("fused kernel lost value %", v->name));
        ops.push_back(it->second);
      }
    }
    CJIT_ASSIGN_OR_RETURN(llvm::Value* res, EmitElemental(b, math, *node, ops));
    vals[node->outputs[0]] = res;
  }
  llvm::Value* oidx = b.CreateAdd(out_base, j);
  for (size_t o = 0; o < n_out; ++o) {
    b.CreateStore(vals.at(k.outputs[o]), b.CreateInBoundsGEP(f32, bufs[n_in + o], oidx));
  }
  llvm::Value* j_next = b.CreateAdd(j, b.getInt64(1));
  j->addIncoming(j_next, b.GetInsertBlock());
  b.CreateCondBr(b.CreateICmpSLT(j_next, b.getInt64(inner)), inner_head, inner_exit);

  b.SetInsertPoint(inner_exit);
  llvm::Value* r_next = b.CreateAdd(r, b.getInt64(1));
  r->addIncoming(r_next, inner_exit);
  b.CreateCondBr(b.CreateICmpSLT(r_next, row_end), outer_head, done);

  b.SetInsertPoint(done);
  b.CreateRetVoid();
  return absl::OkStatus();
}

std::string ToString(llvm::Error err) { return llvm::toString(std::move(err)); }

// The process-wide JIT: one LLJIT; each compiled cluster lives under its own ResourceTracker.
struct Jit {
  std::mutex mu;
  std::unique_ptr<llvm::orc::LLJIT> lljit;
  std::unique_ptr<llvm::TargetMachine> tm;
  std::map<std::string, size_t> object_bytes;  // by module identifier
  std::string error;
};

Jit& GetJit() {
  static Jit* jit = [] {
    auto* j = new Jit();
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!jtmb) {
      j->error = ToString(jtmb.takeError());
      return j;
    }
    jtmb->setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
    auto tm = jtmb->createTargetMachine();
    if (!tm) {
      j->error = ToString(tm.takeError());
      return j;
    }
    j->tm = std::move(*tm);
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
          j->object_bytes[obj->getBufferIdentifier().str()] += obj->getBufferSize();
          return std::move(obj);
        });
    return j;
  }();
  return *jit;
}

class CpuCodeImpl : public CpuCode {
 public:
  ~CpuCodeImpl() override {
    if (tracker_) {
      std::lock_guard<std::mutex> lock(GetJit().mu);
      llvm::consumeError(tracker_->remove());
    }
  }
  const std::vector<CpuKernel>& kernels() const override { return kernels_; }
  size_t code_bytes() const override { return code_bytes_; }

  std::vector<CpuKernel> kernels_;
  size_t code_bytes_ = 0;
  llvm::orc::ResourceTrackerSP tracker_;
};

}  // namespace

std::string HostTargetDescription() {
  std::vector<std::string> feats;
  for (const auto& f : llvm::sys::getHostCPUFeatures()) {
    if (f.second) feats.push_back(f.first().str());
  }
  std::sort(feats.begin(), feats.end());
  return absl::StrCat("cpu=", llvm::sys::getHostCPUName().str(), " features=", absl::StrJoin(feats, ","),
                      " llvm=", LLVM_VERSION_STRING);
}

absl::StatusOr<std::unique_ptr<CpuCode>> CompileForCpu(const FusionPlan& plan, const CpuCompileOptions& options) {
  if (!options.fail_for_testing.empty()) {
    return absl::InternalError(absl::StrCat("compilation failed (test hook): ", options.fail_for_testing));
  }
  auto code = std::make_unique<CpuCodeImpl>();
  code->kernels_.resize(plan.kernels.size());
  if (plan.kernels.empty()) return code;
  Jit& jit = GetJit();
  std::lock_guard<std::mutex> lock(jit.mu);
  if (!jit.lljit) return absl::InternalError(absl::StrCat("LLVM JIT unavailable: ", jit.error));
  static std::atomic<int64_t> counter{0};
  std::string prefix = absl::StrCat("cjit_m", counter++);
  auto ctx = std::make_unique<llvm::LLVMContext>();
  auto module = std::make_unique<llvm::Module>(prefix, *ctx);
  module->setDataLayout(jit.lljit->getDataLayout());
  module->setTargetTriple(jit.lljit->getTargetTriple().str());
  std::vector<std::string> symbols;
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    symbols.push_back(absl::StrCat(prefix, "_", plan.kernels[i].name));
    CJIT_RETURN_IF_ERROR(EmitKernel(*module, plan.kernels[i], symbols.back(), &code->kernels_[i]));
  }
  std::string verify_errors;
  llvm::raw_string_ostream os(verify_errors);
  if (llvm::verifyModule(*module, &os)) {
    return absl::InternalError(absl::StrCat("generated LLVM IR is invalid: ", os.str()));
  }
  {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PassBuilder pb(jit.tm.get());
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
    mpm.run(*module, mam);
  }
  code->tracker_ = jit.lljit->getMainJITDylib().createResourceTracker();
  if (llvm::Error err = jit.lljit->addIRModule(code->tracker_,
                                               llvm::orc::ThreadSafeModule(std::move(module), std::move(ctx)))) {
    return absl::InternalError(absl::StrCat("LLVM JIT rejected the module: ", ToString(std::move(err))));
  }
  for (size_t i = 0; i < symbols.size(); ++i) {
    auto addr = jit.lljit->lookup(symbols[i]);
    if (!addr) return absl::InternalError(absl::StrCat("LLVM JIT lookup failed: ", ToString(addr.takeError())));
    code->kernels_[i].fn = addr->toPtr<CpuKernelFn>();
  }
  for (const auto& [id, bytes] : jit.object_bytes) {
    if (id.find(prefix) != std::string::npos) code->code_bytes_ += bytes;
  }
  return code;
}

}  // namespace cjit
