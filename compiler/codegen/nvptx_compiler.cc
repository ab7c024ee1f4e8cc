// NVPTX code generation. The emitted IR of an elementwise kernel, for one element e of rows x inner:
//   for (e = blockIdx.x * blockDim.x + threadIdx.x; e < rows * inner; e += gridDim.x * blockDim.x)
//     r = e / inner; j = e % inner; out[e] = f(in_k[offset_k + sum_d(idx_d(r) * stride_kd) + j * s_k]...)
// A row kernel gives each row to one warp: lane = threadIdx.x % 32, passes stride j by 32.
#include "compiler/codegen/nvptx_compiler.h"

#include "base/logging.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "compiler/codegen/elemental_emitter.h"
#include "compiler/codegen/for_loop.h"
#include "compiler/codegen/kernel_layout.h"
#include "compiler/codegen/recover.h"
#include "base/status_macros.h"
#include "llvm/Bitcode/BitcodeReader.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/IR/IntrinsicsNVPTX.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Linker/Linker.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"

namespace cjit {
namespace {

constexpr char kTriple[] = "nvptx64-nvidia-cuda";

// libdevice: __nv_expf and friends (declared here, linked from libdevice.10.bc).
class NvptxMath : public TargetMath {
 public:
  explicit NvptxMath(llvm::Module& m) : m_(m) {}
  llvm::Value* Unary(llvm::IRBuilder<>& b, const char* name, llvm::Value* x) override {
    static const std::map<std::string, std::string> kNames = {
        {"exp", "__nv_expf"}, {"log", "__nv_logf"},     {"tanh", "__nv_tanhf"}, {"erf", "__nv_erff"},
        {"sin", "__nv_sinf"}, {"cos", "__nv_cosf"},     {"floor", "__nv_floorf"}, {"ceil", "__nv_ceilf"},
        {"sqrt", "__nv_sqrtf"}, {"round", "__nv_rintf"}};
    auto it = kNames.find(name);
    std::string fn = it != kNames.end() ? it->second : std::string("__nv_") + name + "f";
    llvm::Type* f = b.getFloatTy();
    return b.CreateCall(m_.getOrInsertFunction(fn, llvm::FunctionType::get(f, {f}, false)), {x});
  }
  llvm::Value* Pow(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y) override {
    llvm::Type* f = b.getFloatTy();
    return b.CreateCall(m_.getOrInsertFunction("__nv_powf", llvm::FunctionType::get(f, {f, f}, false)), {x, y});
  }

 private:
  llvm::Module& m_;
};

llvm::Value* Sreg(llvm::IRBuilder<>& b, llvm::Module& m, llvm::Intrinsic::ID id) {
  return b.CreateZExt(b.CreateCall(llvm::Intrinsic::getDeclaration(&m, id), {}), b.getInt64Ty());
}

// Emits one fused kernel (elementwise or row) as a PTX kernel function.
constexpr int kBlockWarps = kRowKernelBlockThreads / 32;

class GpuEmitter {
 public:
  // block_per_row: the row-kernel variant giving each row a whole block (see EmitRow); row_cache: that
  // variant keeping the row's inputs in dynamic shared memory (nvptx_compiler.h, kRowCacheSuffix).
  GpuEmitter(llvm::Module& m, const FusedKernel& k, const Collapsed& c, bool block_per_row = false,
             bool row_cache = false)
      : m_(m), k_(k), c_(c), b_(m.getContext()), math_(m), block_per_row_(block_per_row || row_cache),
        row_cache_(row_cache) {}

  absl::Status Emit(const std::string& name) {
    llvm::LLVMContext& ctx = m_.getContext();
    llvm::Type* i64 = b_.getInt64Ty();
    llvm::Type* ptr = b_.getPtrTy(1);  // global address space
    size_t n_in = k_.inputs.size(), n_out = k_.outputs.size();
    nd_ = static_cast<int>(c_.dims.size());
    std::vector<llvm::Type*> params(n_in + n_out, ptr);
    params.push_back(ptr);  // meta
    params.push_back(ptr);  // consts
    params.push_back(i64);  // rows
    fn_ = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), params, false),
                                 llvm::Function::ExternalLinkage, name, m_);
    fn_->setCallingConv(llvm::CallingConv::PTX_Kernel);
    for (size_t i = 0; i < n_in + n_out; ++i) fn_->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::NoAlias);
    // meta and consts are only read: their loads may leave the loops (LICM), once per thread instead of
    // once per row.
    for (size_t i = n_in + n_out; i < n_in + n_out + 2; ++i) {
      fn_->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::NoAlias);
      fn_->addParamAttr(static_cast<unsigned>(i), llvm::Attribute::ReadOnly);
    }
    // Also the classic nvvm.annotations kernel marker, which every LLVM version honours.
    m_.getOrInsertNamedMetadata("nvvm.annotations")
        ->addOperand(llvm::MDNode::get(ctx, {llvm::ValueAsMetadata::get(fn_), llvm::MDString::get(ctx, "kernel"),
                                             llvm::ConstantAsMetadata::get(b_.getInt32(1))}));
    auto* entry = llvm::BasicBlock::Create(ctx, "entry", fn_);
    b_.SetInsertPoint(entry);
    meta_ = fn_->getArg(static_cast<unsigned>(n_in + n_out));
    llvm::Value* consts = fn_->getArg(static_cast<unsigned>(n_in + n_out + 1));
    rows_ = fn_->getArg(static_cast<unsigned>(n_in + n_out + 2));
    inner_ = MetaAt(0);
    int64_t np = 0;
    for (const Node* node : k_.nodes)
      for (const Value* v : node->inputs) {
        if (v && IsScalarConstant(v) && node->op_type != "Pow") {
          llvm::Value* p =
              b_.CreateLoad(b_.getFloatTy(), b_.CreateInBoundsGEP(b_.getFloatTy(), consts, b_.getInt64(np++)));
          if (!params_.count(v)) params_[v] = p;
        }
      }
    tid_ = Sreg(b_, m_, llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
    llvm::Value* ctaid = Sreg(b_, m_, llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
    llvm::Value* ntid = Sreg(b_, m_, llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x);
    llvm::Value* nctaid = Sreg(b_, m_, llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x);
    gid_ = b_.CreateAdd(b_.CreateMul(ctaid, ntid), tid_);
    nthreads_ = b_.CreateMul(ntid, nctaid);
    return k_.row_reduction ? EmitRow() : EmitElementwise();
  }

 private:
  llvm::Value* MetaAt(int64_t i) {
    return b_.CreateLoad(b_.getInt64Ty(), b_.CreateInBoundsGEP(b_.getInt64Ty(), meta_, b_.getInt64(i)));
  }

  // Per-input base pointers for row r (offset + outer index * strides).
  void RowBases(llvm::Value* r) {
    size_t n_in = k_.inputs.size();
    std::vector<llvm::Value*> base(n_in);
    for (size_t i = 0; i < n_in; ++i) base[i] = MetaAt(MetaIndex(nd_, i, nd_));
    llvm::Value* rem = r;
    for (int d = nd_ - 2; d >= 0; --d) {
      llvm::Value* dim = MetaAt(1 + d);
      llvm::Value* idx = d == 0 ? rem : b_.CreateURem(rem, dim);
      if (d > 0) rem = b_.CreateUDiv(rem, dim);
      for (size_t i = 0; i < n_in; ++i)
        base[i] = b_.CreateAdd(base[i], b_.CreateMul(idx, MetaAt(MetaIndex(nd_, i, d))));
    }
    in_ptr_.assign(n_in, nullptr);
    inner_stride_.assign(n_in, nullptr);
    for (size_t i = 0; i < n_in; ++i) {
      in_ptr_[i] =
          b_.CreateInBoundsGEP(StorageType(b_, k_.inputs[i]->dtype), fn_->getArg(static_cast<unsigned>(i)), base[i]);
      inner_stride_[i] = MetaAt(MetaIndex(nd_, i, nd_ - 1));
    }
  }

  // Input i at element j of the current row (in_ptr_ set by RowBases), as float32. With the row cache:
  // from shared memory once an earlier pass filled it; else from global memory, and during a reduction
  // pass also stored into the cache (every j is this thread's own: passes stride j identically).
  llvm::Value* LoadInput(size_t i, llvm::Value* j) {
    char cls = InnerClass(c_, i);
    auto slot = cache_slot_.find(i);
    if (row_cache_ && cls != 'b' && slot != cache_slot_.end() && cached_.count(i)) {
      return b_.CreateLoad(b_.getFloatTy(), CacheAddress(slot->second, j));
    }
    llvm::Value* idx = cls == 'b' ? b_.getInt64(0) : cls == 'c' ? j : b_.CreateMul(j, inner_stride_[i]);
    llvm::Value* v = LoadF32(b_, k_.inputs[i]->dtype, in_ptr_[i], idx);
    if (row_cache_ && cls != 'b' && slot != cache_slot_.end() && in_reduce_pass_) {
      b_.CreateStore(v, CacheAddress(slot->second, j));
      filling_.insert(i);
    }
    return v;
  }

  llvm::Value* CacheAddress(int slot, llvm::Value* j) {
    llvm::Value* at = b_.CreateAdd(b_.CreateMul(b_.getInt64(slot), inner_), j);
    return b_.CreateInBoundsGEP(b_.getFloatTy(), cache_, at);
  }

  absl::StatusOr<llvm::Value*> Elem(const Value* v, llvm::Value* j, std::map<const Value*, llvm::Value*>& memo) {
    ValueEmitter ve(b_, math_, k_.inputs, [&](size_t i, llvm::Value* jj) { return LoadInput(i, jj); },
                    k_.excess_precision);
    ve.row_vals = row_vals_;
    ve.params = params_;
    ve.softmax = softmax_;
    return ve.Elem(v, j, memo);
  }

  // Elementwise kernels, three loops (the launch picks between the last two with gridDim.y):
  //  * one collapsed dim (every input contiguous or broadcast): e over rows x inner with a grid stride, no
  //    index division;
  //  * gridDim.y > 1: rows over blockIdx.y (grid stride gridDim.y), each row's base offsets computed once,
  //    then j over the row with a grid stride in x — no per-element division;
  //  * gridDim.y == 1: e with a grid stride, r = e / inner, j = e % inner (short rows).
  absl::Status EmitElementwise() {
    llvm::LLVMContext& ctx = m_.getContext();
    llvm::Value* total = b_.CreateMul(rows_, inner_);
    auto* done = llvm::BasicBlock::Create(ctx, "done", fn_);
    if (nd_ == 1) {
      CJIT_RETURN_IF_ERROR(EmitFlatLoop(total, /*divide=*/false, done));
    } else {
      auto* by_rows = llvm::BasicBlock::Create(ctx, "by_rows", fn_);
      auto* flat = llvm::BasicBlock::Create(ctx, "flat", fn_);
      llvm::Value* grid_y = Sreg(b_, m_, llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_y);
      b_.CreateCondBr(b_.CreateICmpUGT(grid_y, b_.getInt64(1)), by_rows, flat);
      b_.SetInsertPoint(flat);
      CJIT_RETURN_IF_ERROR(EmitFlatLoop(total, /*divide=*/true, done));
      b_.SetInsertPoint(by_rows);
      CJIT_RETURN_IF_ERROR(EmitRowLoop(grid_y, done));
    }
    b_.SetInsertPoint(done);
    b_.CreateRetVoid();
    return absl::OkStatus();
  }

  absl::Status StoreOutputs(llvm::Value* j, llvm::Value* e, std::map<const Value*, llvm::Value*> memo = {}) {
    for (size_t o = 0; o < k_.outputs.size(); ++o) {
      CJIT_ASSIGN_OR_RETURN(llvm::Value* val, Elem(k_.outputs[o], j, memo));
      StoreF32(b_, k_.outputs[o]->dtype, val, fn_->getArg(static_cast<unsigned>(k_.inputs.size() + o)), e);
    }
    return absl::OkStatus();
  }

  // A grid-strided loop j = start, start + stride, ... < bound, storing every output at element
  // `base + j`. A main loop first handles kUnroll elements per thread per iteration (coalesced across
  // threads), issuing all their loads before any store so that each thread keeps several memory requests
  // in flight; a single-element loop finishes the rest. RowBases must have set in_ptr_ already.
  static constexpr int kUnroll = 4;
  absl::Status EmitStridedLoop(llvm::Value* start, llvm::Value* stride, llvm::Value* bound, llvm::Value* base,
                               llvm::BasicBlock* exit) {
    auto at = [&](llvm::Value* j) { return base ? b_.CreateAdd(base, j) : j; };
    ForLoop::Options unrolled;
    unrolled.lookahead = b_.CreateMul(stride, b_.getInt64(kUnroll - 1));
    ForLoop main(b_, "main", "j4", start, bound, b_.CreateMul(stride, b_.getInt64(kUnroll)), unrolled);
    llvm::PHINode* j = main.index();
    std::vector<std::map<const Value*, llvm::Value*>> memo(kUnroll);
    std::vector<llvm::Value*> idx(kUnroll);
    for (int u = 0; u < kUnroll; ++u) {
      idx[u] = u == 0 ? static_cast<llvm::Value*>(j) : b_.CreateAdd(j, b_.CreateMul(stride, b_.getInt64(u)));
      for (size_t i = 0; i < k_.inputs.size(); ++i) memo[u][k_.inputs[i]] = LoadInput(i, idx[u]);
    }
    for (int u = 0; u < kUnroll; ++u) CJIT_RETURN_IF_ERROR(StoreOutputs(idx[u], at(idx[u]), memo[u]));
    main.End();
    llvm::PHINode* j0 = main.ExitValue(start, main.next_index(), "j_rest");
    ForLoop::Options rest;
    rest.exit = exit;
    ForLoop loop(b_, "loop", "j", j0, bound, stride, rest);
    CJIT_RETURN_IF_ERROR(StoreOutputs(loop.index(), at(loop.index())));
    loop.End({}, /*stay=*/true);
    return absl::OkStatus();
  }

  // Every input contiguous along the row (or broadcast over it) and float32 everywhere it streams:
  // 16-byte loads and stores (ld/st.global.v4.f32), a quarter of the memory instructions of the scalar
  // loop, when every contiguous input and every output starts 16-byte aligned (checked at run time, per row
  // in the row loop: a view's offset or an odd row length may break it; else the scalar loop).
  bool CanVectorize() const {
    for (size_t i = 0; i < k_.inputs.size(); ++i) {
      char cls = InnerClass(c_, i);
      if (cls != 'b' && (cls != 'c' || k_.inputs[i]->dtype != DType::kF32)) return false;
    }
    for (const Value* v : k_.outputs)
      if (v->dtype != DType::kF32) return false;
    return true;
  }

  // Whether every contiguous input (RowBases set in_ptr_) and every output at element `base` starts 16-byte
  // aligned.
  llvm::Value* VectorAligned(llvm::Value* base) {
    auto is_aligned = [&](llvm::Value* p) {
      return b_.CreateICmpEQ(b_.CreateAnd(b_.CreatePtrToInt(p, b_.getInt64Ty()), b_.getInt64(15)), b_.getInt64(0));
    };
    llvm::Value* aligned = b_.getTrue();
    size_t n_in = k_.inputs.size();
    for (size_t i = 0; i < n_in; ++i)
      if (InnerClass(c_, i) == 'c') aligned = b_.CreateAnd(aligned, is_aligned(in_ptr_[i]));
    for (size_t o = 0; o < k_.outputs.size(); ++o) {
      llvm::Value* out = fn_->getArg(static_cast<unsigned>(n_in + o));
      if (base) out = b_.CreateInBoundsGEP(b_.getFloatTy(), out, base);
      aligned = b_.CreateAnd(aligned, is_aligned(out));
    }
    return aligned;
  }

  // As EmitStridedLoop over j in [0, bound), four consecutive elements per thread and iteration (j4 =
  // start, start + stride, ... < bound / 4) through 16-byte loads and stores, then the bound % 4 last
  // elements one by one. The caller checked VectorAligned(base).
  absl::Status EmitVectorLoop(llvm::Value* start, llvm::Value* stride, llvm::Value* bound, llvm::Value* base,
                              llvm::BasicBlock* exit) {
    llvm::Type* f32 = b_.getFloatTy();
    auto* v4 = llvm::FixedVectorType::get(f32, 4);
    size_t n_in = k_.inputs.size();
    llvm::Value* n4 = b_.CreateLShr(bound, b_.getInt64(2));
    ForLoop vloop(b_, "vloop", "j4", start, n4, stride);
    llvm::Value* e = b_.CreateShl(vloop.index(), b_.getInt64(2));
    std::vector<std::map<const Value*, llvm::Value*>> memo(4);
    for (size_t i = 0; i < n_in; ++i) {
      if (InnerClass(c_, i) == 'b') {
        llvm::Value* x = LoadInput(i, e);
        for (int u = 0; u < 4; ++u) memo[u][k_.inputs[i]] = x;
        continue;
      }
      llvm::Value* x = b_.CreateAlignedLoad(v4, b_.CreateInBoundsGEP(f32, in_ptr_[i], e), llvm::Align(16));
      for (int u = 0; u < 4; ++u) memo[u][k_.inputs[i]] = b_.CreateExtractElement(x, static_cast<uint64_t>(u));
    }
    for (size_t o = 0; o < k_.outputs.size(); ++o) {
      llvm::Value* vec = llvm::PoisonValue::get(v4);
      for (int u = 0; u < 4; ++u) {
        CJIT_ASSIGN_OR_RETURN(llvm::Value* val, Elem(k_.outputs[o], b_.CreateAdd(e, b_.getInt64(u)), memo[u]));
        vec = b_.CreateInsertElement(vec, val, static_cast<uint64_t>(u));
      }
      llvm::Value* at = base ? b_.CreateAdd(base, e) : e;
      llvm::Value* out = b_.CreateInBoundsGEP(f32, fn_->getArg(static_cast<unsigned>(n_in + o)), at);
      b_.CreateAlignedStore(vec, out, llvm::Align(16));
    }
    vloop.End();
    return EmitStridedLoop(b_.CreateAdd(b_.CreateShl(n4, b_.getInt64(2)), start), stride, bound, base, exit);
  }

  // EmitStridedLoop, or — where CanVectorize() — EmitVectorLoop when VectorAligned(base) holds at run time
  // and EmitStridedLoop when it does not.
  absl::Status EmitContiguousLoop(llvm::Value* start, llvm::Value* stride, llvm::Value* bound, llvm::Value* base,
                                  llvm::BasicBlock* exit) {
    if (CanVectorize()) {
      llvm::LLVMContext& ctx = m_.getContext();
      auto* vec = llvm::BasicBlock::Create(ctx, "vec", fn_);
      auto* scalar = llvm::BasicBlock::Create(ctx, "scalar", fn_);
      b_.CreateCondBr(VectorAligned(base), vec, scalar);
      b_.SetInsertPoint(vec);
      CJIT_RETURN_IF_ERROR(EmitVectorLoop(start, stride, bound, base, exit));
      b_.SetInsertPoint(scalar);
    }
    return EmitStridedLoop(start, stride, bound, base, exit);
  }

  absl::Status EmitFlatLoop(llvm::Value* total, bool divide, llvm::BasicBlock* done) {
    if (!divide) {
      RowBases(b_.getInt64(0));
      return EmitContiguousLoop(gid_, nthreads_, total, nullptr, done);
    }
    ForLoop::Options options;
    options.exit = done;
    ForLoop loop(b_, "loop", "e", gid_, total, nthreads_, options);
    llvm::PHINode* e = loop.index();
    RowBases(b_.CreateUDiv(e, inner_));
    CJIT_RETURN_IF_ERROR(StoreOutputs(b_.CreateURem(e, inner_), e));
    loop.End({}, /*stay=*/true);
    return absl::OkStatus();
  }

  absl::Status EmitRowLoop(llvm::Value* grid_y, llvm::BasicBlock* done) {
    llvm::LLVMContext& ctx = m_.getContext();
    llvm::Value* row0 = Sreg(b_, m_, llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_y);
    llvm::Value* ntid = Sreg(b_, m_, llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x);
    llvm::Value* col0 =
        b_.CreateAdd(b_.CreateMul(Sreg(b_, m_, llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x), ntid), tid_);
    llvm::Value* col_stride = b_.CreateMul(ntid, Sreg(b_, m_, llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x));
    ForLoop::Options options;
    options.exit = done;
    ForLoop rows(b_, "row_loop", "r", row0, rows_, grid_y, options);
    auto* row_next = llvm::BasicBlock::Create(ctx, "row_next", fn_);
    llvm::PHINode* r = rows.index();
    RowBases(r);
    llvm::Value* row_start = b_.CreateMul(r, inner_);
    // Per row: 16-byte accesses where this row's inputs and outputs start aligned.
    CJIT_RETURN_IF_ERROR(EmitContiguousLoop(col0, col_stride, inner_, row_start, row_next));
    b_.SetInsertPoint(row_next);
    rows.End({}, /*stay=*/true);
    return absl::OkStatus();
  }

  // One pass over the row by this lane (j = lane, lane + 32, ...), then a butterfly warp reduction.
  absl::StatusOr<llvm::Value*> Reduce(const Value* x, ReduceKind kind, llvm::Value* offset) {
    llvm::LLVMContext& ctx = m_.getContext();
    llvm::Type* f32 = b_.getFloatTy();
    double init = kind == ReduceKind::kMax ? -std::numeric_limits<float>::infinity()
                : kind == ReduceKind::kMin ? std::numeric_limits<float>::infinity() : 0.0;
    auto combine = [&](llvm::Value* acc, llvm::Value* e) -> llvm::Value* {
      switch (kind) {
        case ReduceKind::kSum: case ReduceKind::kSumSq: case ReduceKind::kSumExp: return b_.CreateFAdd(acc, e);
        // llvm.maximum / llvm.minimum propagate NaN (as numpy's max/min and ONNX ReduceMax/ReduceMin).
        case ReduceKind::kMax: return b_.CreateMaximum(acc, e);
        case ReduceKind::kMin: return b_.CreateMinimum(acc, e);
      }
      return acc;
    };
    ForLoop pass(b_, "pass", "j", lane_, inner_, row_stride_);
    llvm::PHINode* j = pass.index();
    llvm::PHINode* acc = pass.Carry(llvm::ConstantFP::get(f32, init), "acc");
    std::map<const Value*, llvm::Value*> memo;
    in_reduce_pass_ = true;
    absl::StatusOr<llvm::Value*> elem = Elem(x, j, memo);
    in_reduce_pass_ = false;
    CJIT_RETURN_IF_ERROR(elem.status());
    llvm::Value* e = *elem;
    if (kind == ReduceKind::kSumSq) e = b_.CreateFMul(e, e);
    if (kind == ReduceKind::kSumExp) e = math_.Unary(b_, "exp", b_.CreateFSub(e, offset));
    llvm::Value* next_acc = combine(acc, e);
    pass.End({next_acc});
    // What this pass stored is readable from the next pass on.
    cached_.insert(filling_.begin(), filling_.end());
    filling_.clear();
    llvm::Value* v = pass.ExitValue(llvm::ConstantFP::get(f32, init), next_acc);
    llvm::Function* shfl = llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::nvvm_shfl_sync_bfly_f32);
    for (int delta = 16; delta >= 1; delta /= 2) {
      llvm::Value* other = b_.CreateCall(shfl, {b_.getInt32(0xffffffffu), v, b_.getInt32(delta), b_.getInt32(31)});
      v = combine(v, other);
    }
    if (!block_per_row_) return v;
    // Block per row: lane 0 of each warp publishes its warp's value in shared memory; after a barrier
    // every thread combines the kBlockWarps values (same order everywhere, so all threads agree); a second
    // barrier keeps the next pass from overwriting values still being read.
    llvm::Value* warp = b_.CreateUDiv(tid_, b_.getInt64(32));
    auto* publish = llvm::BasicBlock::Create(ctx, "publish", fn_);
    auto* published = llvm::BasicBlock::Create(ctx, "published", fn_);
    b_.CreateCondBr(b_.CreateICmpEQ(b_.CreateURem(tid_, b_.getInt64(32)), b_.getInt64(0)), publish, published);
    b_.SetInsertPoint(publish);
    b_.CreateStore(v, b_.CreateInBoundsGEP(smem_type_, smem_, {b_.getInt64(0), warp}));
    b_.CreateBr(published);
    b_.SetInsertPoint(published);
    llvm::Function* barrier = llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::nvvm_barrier0);
    b_.CreateCall(barrier, {});
    llvm::Value* total = b_.CreateLoad(f32, b_.CreateInBoundsGEP(smem_type_, smem_, {b_.getInt64(0), b_.getInt64(0)}));
    for (int w = 1; w < kBlockWarps; ++w) {
      total =
          combine(total, b_.CreateLoad(f32, b_.CreateInBoundsGEP(smem_type_, smem_, {b_.getInt64(0), b_.getInt64(w)})));
    }
    b_.CreateCall(barrier, {});
    return total;
  }

  absl::Status EmitRow() {
    llvm::LLVMContext& ctx = m_.getContext();
    // One warp per row: the whole warp stays converged (shuffles need every lane), so out-of-range warps
    // exit together. Block per row (kBlockWarps warps of one block share a row; for few long rows): the
    // block is uniform in its row, so every thread reaches every barrier.
    llvm::Value* row = nullptr;
    if (block_per_row_) {
      row = Sreg(b_, m_, llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
      lane_ = tid_;
      row_stride_ = b_.getInt64(32 * kBlockWarps);
      smem_type_ = llvm::ArrayType::get(b_.getFloatTy(), kBlockWarps);
      smem_ = new llvm::GlobalVariable(m_, smem_type_, false, llvm::GlobalValue::InternalLinkage,
                                       llvm::UndefValue::get(smem_type_), fn_->getName() + "_smem", nullptr,
                                       llvm::GlobalValue::NotThreadLocal, 3);
      if (row_cache_) {
        // extern __shared__ float cache[]: sized by the launch (RowCacheBytes).
        llvm::Type* dyn = llvm::ArrayType::get(b_.getFloatTy(), 0);
        auto* gv =
            new llvm::GlobalVariable(m_, dyn, false, llvm::GlobalValue::ExternalLinkage, nullptr,
                                     fn_->getName() + "_row_cache", nullptr, llvm::GlobalValue::NotThreadLocal, 3);
        gv->setAlignment(llvm::Align(16));
        cache_ = gv;
        int slot = 0;
        for (size_t i = 0; i < k_.inputs.size(); ++i)
          if (InnerClass(c_, i) != 'b') cache_slot_[i] = slot++;
      }
    } else {
      row = b_.CreateUDiv(gid_, b_.getInt64(32));
      lane_ = b_.CreateURem(tid_, b_.getInt64(32));
      row_stride_ = b_.getInt64(32);
    }
    auto* body = llvm::BasicBlock::Create(ctx, "row", fn_);
    auto* done = llvm::BasicBlock::Create(ctx, "done", fn_);
    b_.CreateCondBr(b_.CreateICmpSLT(row, rows_), body, done);
    b_.SetInsertPoint(body);
    RowBases(row);
    for (size_t i = 0; i < k_.inputs.size(); ++i) {
      if (InnerClass(c_, i) == 'b') row_vals_[k_.inputs[i]] = LoadF32(b_, k_.inputs[i]->dtype, in_ptr_[i], nullptr);
    }
    CJIT_RETURN_IF_ERROR(EmitRowReductions(
        b_, math_, k_.nodes, inner_,
        [&](const Value* x, ReduceKind kind, llvm::Value* offset) { return Reduce(x, kind, offset); }, row_vals_,
        softmax_));
    // Store pass (lane-strided) for full outputs; lane 0 stores row outputs.
    llvm::Value* out_base = b_.CreateMul(row, inner_);
    bool any_full = false;
    for (const Value* v : k_.outputs) any_full |= v->shape.concrete() == k_.shape;
    if (any_full) {
      ForLoop store(b_, "store", "j", lane_, inner_, row_stride_);
      llvm::PHINode* j = store.index();
      std::map<const Value*, llvm::Value*> memo;
      for (size_t o = 0; o < k_.outputs.size(); ++o) {
        if (k_.outputs[o]->shape.concrete() != k_.shape) continue;
        CJIT_ASSIGN_OR_RETURN(llvm::Value* val, Elem(k_.outputs[o], j, memo));
        DType dt = k_.outputs[o]->dtype;
        llvm::Value* p = b_.CreateInBoundsGEP(StorageType(b_, dt),
                                              fn_->getArg(static_cast<unsigned>(k_.inputs.size() + o)), out_base);
        StoreF32(b_, dt, val, p, j);
      }
      store.End();
    }
    bool any_row = false;
    for (const Value* v : k_.outputs) any_row |= v->shape.concrete() != k_.shape;
    if (any_row) {
      auto* store = llvm::BasicBlock::Create(ctx, "row_store", fn_);
      auto* after = llvm::BasicBlock::Create(ctx, "row_store_done", fn_);
      b_.CreateCondBr(b_.CreateICmpEQ(lane_, b_.getInt64(0)), store, after);
      b_.SetInsertPoint(store);
      std::map<const Value*, llvm::Value*> memo;
      for (size_t o = 0; o < k_.outputs.size(); ++o) {
        if (k_.outputs[o]->shape.concrete() == k_.shape) continue;
        CJIT_ASSIGN_OR_RETURN(llvm::Value* val, Elem(k_.outputs[o], b_.getInt64(0), memo));
        StoreF32(b_, k_.outputs[o]->dtype, val, fn_->getArg(static_cast<unsigned>(k_.inputs.size() + o)), row);
      }
      b_.CreateBr(after);
      b_.SetInsertPoint(after);
    }
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
    b_.CreateRetVoid();
    return absl::OkStatus();
  }

  llvm::Module& m_;
  const FusedKernel& k_;
  const Collapsed& c_;
  llvm::IRBuilder<> b_;
  NvptxMath math_;
  llvm::Function* fn_ = nullptr;
  int nd_ = 0;
  llvm::Value *meta_ = nullptr, *rows_ = nullptr, *inner_ = nullptr, *tid_ = nullptr, *gid_ = nullptr,
              *nthreads_ = nullptr, *lane_ = nullptr, *row_stride_ = nullptr;
  bool block_per_row_ = false, row_cache_ = false, in_reduce_pass_ = false;
  llvm::Value* cache_ = nullptr;
  std::map<size_t, int> cache_slot_;  // input index -> its row's slot in the cache
  std::set<size_t> cached_, filling_;  // inputs readable from the cache / being stored by this pass
  llvm::ArrayType* smem_type_ = nullptr;
  llvm::GlobalVariable* smem_ = nullptr;
  std::vector<llvm::Value*> in_ptr_, inner_stride_;
  std::map<const Value*, llvm::Value*> row_vals_, params_;
  std::map<const Node*, std::pair<llvm::Value*, llvm::Value*>> softmax_;
};

std::string ToString(llvm::Error err) { return llvm::toString(std::move(err)); }

}  // namespace

std::string PtxVersionFor(const std::string&) { return "ptx80"; }

int RowCacheInputs(const FusedKernel& k) {
  if (!k.row_reduction) return 0;
  Collapsed c = Collapse(k.shape, Layouts(k), k.row_reduction);
  int n = 0;
  for (size_t i = 0; i < k.inputs.size(); ++i) n += InnerClass(c, i) != 'b';
  return n;
}

std::string NvptxTargetDescription(const PtxOptions& options) {
  std::error_code ec;
  auto bytes = std::filesystem::file_size(options.libdevice, ec);
  // codegen=N: the revision of the kernels this file emits (2: row kernels gained the row-cache function and
  // float32 kernels 16-byte accesses; 3: meta/consts are noalias readonly).
  return absl::StrCat("nvptx64 ", options.gpu_arch, " +", PtxVersionFor(options.gpu_arch),
                      " codegen=3 llvm=", LLVM_VERSION_STRING,
                      " libdevice=", ec ? std::string("missing") : absl::StrCat(bytes));
}

absl::StatusOr<PtxModule> CompileForNvptxUnsafe(const FusionPlan& plan, const PtxOptions& options);

absl::StatusOr<PtxModule> CompileForNvptx(const FusionPlan& plan, const PtxOptions& options) {
  absl::StatusOr<PtxModule> result = absl::InternalError("not run");
  absl::Status st = RunLlvmRecoverably("PTX generation", [&]() -> absl::Status {
    result = CompileForNvptxUnsafe(plan, options);
    return result.status();
  });
  if (!st.ok()) return st;
  return result;
}

namespace {

absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> NvptxTargetMachine(const std::string& gpu_arch) {
  static const std::set<std::string> kArchs = {"sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_90a"};
  if (!kArchs.count(gpu_arch)) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported GPU target '", gpu_arch,
                                                   "' (sm_75, sm_80, sm_86, sm_87, sm_89, sm_90, sm_90a)"));
  }
  static std::once_flag init;
  std::call_once(init, [] {
    // The NVPTX target only: a statically linked LLVM then carries no other target's code.
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
  std::string err;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(kTriple, err);
  if (target == nullptr) return absl::InternalError(absl::StrCat("LLVM has no NVPTX target: ", err));
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      kTriple, gpu_arch, absl::StrCat("+", PtxVersionFor(gpu_arch)), llvm::TargetOptions(), std::nullopt,
      std::nullopt, llvm::CodeGenOptLevel::Default));
  if (!tm) return absl::InternalError("cannot create the NVPTX target machine");
  return tm;
}

// Verifies `module`, optimizes it (O2, the NVPTX pipeline) and returns its PTX text.
absl::StatusOr<std::string> OptimizeAndEmitPtx(llvm::Module& module, llvm::TargetMachine& tm) {
  std::string verify_errors;
  llvm::raw_string_ostream vs(verify_errors);
  if (llvm::verifyModule(module, &vs)) return absl::InternalError(absl::StrCat("invalid NVPTX IR: ", vs.str()));
  {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PassBuilder pb(&tm);
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2).run(module, mam);
  }
  llvm::SmallString<0> ptx;
  {
    llvm::raw_svector_ostream os(ptx);
    llvm::legacy::PassManager pm;
    if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile)) {
      return absl::InternalError("the NVPTX target cannot emit PTX");
    }
    pm.run(module);
  }
  return std::string(ptx.str());
}

void MarkKernel(llvm::Module& m, llvm::Function* fn) {
  llvm::LLVMContext& ctx = m.getContext();
  fn->setCallingConv(llvm::CallingConv::PTX_Kernel);
  m.getOrInsertNamedMetadata("nvvm.annotations")
      ->addOperand(llvm::MDNode::get(
          ctx, {llvm::ValueAsMetadata::get(fn), llvm::MDString::get(ctx, "kernel"),
                llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(llvm::Type::getInt32Ty(ctx), 1))}));
}

// One gather kernel moving `unit`-typed elements (see GatherKernelsPtx):
//   for (row = blockIdx.y; row < n_outer * n_rows; row += gridDim.y)   // one index tuple per row
//     o = row / n_rows; r = row % n_rows; off = o * outer_stride; ok = true
//     for j < k: v = idx[r * k + j]; v += v < 0 ? dims[j] : 0; ok &= 0 <= v < dims[j]; off += (ok_j ? v : 0) *
//     strides[j] if (!ok && first thread of the row's x range) *err = 1 for (u = blockIdx.x * blockDim.x + threadIdx.x;
//     u < row_units; u += gridDim.x * blockDim.x)
//       dst[row * row_units + u] = ok ? src[off + u] : 0
// A bad index reads within the source (its component counts as 0), writes zeros and raises the flag.
void EmitGatherKernel(llvm::Module& m, const std::string& name, llvm::Type* unit, unsigned align) {
  llvm::LLVMContext& ctx = m.getContext();
  llvm::IRBuilder<> b(ctx);
  llvm::Type* i64 = b.getInt64Ty();
  llvm::Type* i32 = b.getInt32Ty();
  llvm::Type* ptr = b.getPtrTy(1);
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(b.getVoidTy(), {ptr, ptr, ptr, ptr, ptr}, false),
                                    llvm::Function::ExternalLinkage, name, m);
  MarkKernel(m, fn);
  for (unsigned i = 0; i < 5; ++i) fn->addParamAttr(i, llvm::Attribute::NoAlias);
  for (unsigned i : {1u, 2u, 3u}) fn->addParamAttr(i, llvm::Attribute::ReadOnly);
  llvm::Value* dst = fn->getArg(0);
  llvm::Value* src = fn->getArg(1);
  llvm::Value* idx = fn->getArg(2);
  llvm::Value* meta = fn->getArg(3);
  llvm::Value* err = fn->getArg(4);
  auto* entry = llvm::BasicBlock::Create(ctx, "entry", fn);
  auto* row_head = llvm::BasicBlock::Create(ctx, "row_head", fn);
  auto* row_body = llvm::BasicBlock::Create(ctx, "row_body", fn);
  auto* k_head = llvm::BasicBlock::Create(ctx, "k_head", fn);
  auto* k_body = llvm::BasicBlock::Create(ctx, "k_body", fn);
  auto* load64 = llvm::BasicBlock::Create(ctx, "load64", fn);
  auto* load32 = llvm::BasicBlock::Create(ctx, "load32", fn);
  auto* k_next = llvm::BasicBlock::Create(ctx, "k_next", fn);
  auto* k_done = llvm::BasicBlock::Create(ctx, "k_done", fn);
  auto* report = llvm::BasicBlock::Create(ctx, "report", fn);
  auto* copy_pre = llvm::BasicBlock::Create(ctx, "copy_pre", fn);
  auto* u_head = llvm::BasicBlock::Create(ctx, "u_head", fn);
  auto* u_body = llvm::BasicBlock::Create(ctx, "u_body", fn);
  auto* row_latch = llvm::BasicBlock::Create(ctx, "row_latch", fn);
  auto* exit = llvm::BasicBlock::Create(ctx, "exit", fn);

  b.SetInsertPoint(entry);
  auto meta_at = [&](llvm::Value* i) { return b.CreateLoad(i64, b.CreateInBoundsGEP(i64, meta, i)); };
  llvm::Value* k = meta_at(b.getInt64(0));
  llvm::Value* idx64 = b.CreateICmpNE(meta_at(b.getInt64(1)), b.getInt64(0));
  llvm::Value* n_outer = meta_at(b.getInt64(2));
  llvm::Value* n_rows = meta_at(b.getInt64(3));
  llvm::Value* row_units = meta_at(b.getInt64(4));
  llvm::Value* outer_stride = meta_at(b.getInt64(5));
  llvm::Value* total_rows = b.CreateMul(n_outer, n_rows);
  llvm::Value* tid = Sreg(b, m, llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
  llvm::Value* ntid = Sreg(b, m, llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x);
  llvm::Value* ctaid_x = Sreg(b, m, llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
  llvm::Value* nctaid_x = Sreg(b, m, llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x);
  llvm::Value* ctaid_y = Sreg(b, m, llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_y);
  llvm::Value* nctaid_y = Sreg(b, m, llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_y);
  llvm::Value* u0 = b.CreateAdd(b.CreateMul(ctaid_x, ntid), tid);
  llvm::Value* u_stride = b.CreateMul(nctaid_x, ntid);
  // While loops (top-tested), over blocks created above in this order.
  auto while_loop = [](llvm::BasicBlock* header, llvm::BasicBlock* body, llvm::BasicBlock* exit,
                       bool unsigned_compare) {
    ForLoop::Options options;
    options.top_tested = true;
    options.unsigned_compare = unsigned_compare;
    options.header = header;
    options.body = body;
    options.exit = exit;
    return options;
  };
  ForLoop rows(b, "row_head", "row", ctaid_y, total_rows, nctaid_y, while_loop(row_head, row_body, exit, true));
  llvm::PHINode* row = rows.index();
  llvm::Value* o = b.CreateUDiv(row, n_rows);
  llvm::Value* r = b.CreateSub(row, b.CreateMul(o, n_rows));
  llvm::Value* base = b.CreateMul(o, outer_stride);
  ForLoop index_tuple(b, "k_head", "j", b.getInt64(0), k, b.getInt64(1), while_loop(k_head, k_body, k_done, false));
  llvm::PHINode* j = index_tuple.index();
  llvm::PHINode* off = index_tuple.Carry(base, "off");
  llvm::PHINode* ok = index_tuple.Carry(b.getTrue(), "ok");
  llvm::Value* e = b.CreateAdd(b.CreateMul(r, k), j);
  b.CreateCondBr(idx64, load64, load32);
  b.SetInsertPoint(load64);
  llvm::Value* v64 = b.CreateLoad(i64, b.CreateInBoundsGEP(i64, idx, e));
  b.CreateBr(k_next);
  b.SetInsertPoint(load32);
  llvm::Value* v32 = b.CreateSExt(b.CreateLoad(i32, b.CreateInBoundsGEP(i32, idx, e)), i64);
  b.CreateBr(k_next);
  b.SetInsertPoint(k_next);
  llvm::PHINode* v = b.CreatePHI(i64, 2, "v");
  v->addIncoming(v64, load64);
  v->addIncoming(v32, load32);
  llvm::Value* d = meta_at(b.CreateAdd(b.getInt64(6), j));
  llvm::Value* stride = meta_at(b.CreateAdd(b.CreateAdd(b.getInt64(6), k), j));
  llvm::Value* vn = b.CreateSelect(b.CreateICmpSLT(v, b.getInt64(0)), b.CreateAdd(v, d), v);
  llvm::Value* okj = b.CreateAnd(b.CreateICmpSGE(vn, b.getInt64(0)), b.CreateICmpSLT(vn, d));
  llvm::Value* off2 = b.CreateAdd(off, b.CreateMul(b.CreateSelect(okj, vn, b.getInt64(0)), stride));
  llvm::Value* ok2 = b.CreateAnd(ok, okj);
  index_tuple.End({off2, ok2});  // leaves b in k_done
  b.CreateCondBr(b.CreateAnd(b.CreateNot(ok), b.CreateICmpEQ(u0, b.getInt64(0))), report, copy_pre);
  b.SetInsertPoint(report);
  b.CreateStore(b.getInt32(1), err);
  b.CreateBr(copy_pre);

  b.SetInsertPoint(copy_pre);
  llvm::Value* dst_row = b.CreateMul(row, row_units);
  ForLoop units(b, "u_head", "u", u0, row_units, u_stride, while_loop(u_head, u_body, row_latch, true));
  llvm::PHINode* u = units.index();
  llvm::Value* loaded =
      b.CreateAlignedLoad(unit, b.CreateInBoundsGEP(unit, src, b.CreateAdd(off, u)), llvm::Align(align));
  llvm::Value* val = b.CreateSelect(ok, loaded, llvm::Constant::getNullValue(unit));
  b.CreateAlignedStore(val, b.CreateInBoundsGEP(unit, dst, b.CreateAdd(dst_row, u)), llvm::Align(align));
  units.End();  // leaves b in row_latch
  rows.End();   // leaves b in exit
  b.CreateRetVoid();
}

absl::StatusOr<std::string> GatherKernelsPtxUnsafe(const std::string& gpu_arch) {
  CJIT_ASSIGN_OR_RETURN(std::unique_ptr<llvm::TargetMachine> tm, NvptxTargetMachine(gpu_arch));
  llvm::LLVMContext ctx;
  llvm::Module module("cjit_gather", ctx);
  module.setTargetTriple(kTriple);
  module.setDataLayout(tm->createDataLayout());
  llvm::IRBuilder<> b(ctx);
  const std::pair<int, llvm::Type*> units[] = {{1, b.getInt8Ty()},
                                               {2, b.getInt16Ty()},
                                               {4, b.getInt32Ty()},
                                               {8, b.getInt64Ty()},
                                               {16, llvm::FixedVectorType::get(b.getInt32Ty(), 4)}};
  for (const auto& [bytes, type] : units) {
    EmitGatherKernel(module, absl::StrCat(kGatherKernelPrefix, bytes), type, static_cast<unsigned>(bytes));
  }
  return OptimizeAndEmitPtx(module, *tm);
}

}  // namespace

absl::StatusOr<std::string> GatherKernelsPtx(const std::string& gpu_arch) {
  absl::StatusOr<std::string> result = absl::InternalError("not run");
  CJIT_RETURN_IF_ERROR(RunLlvmRecoverably("PTX generation (gather)", [&]() -> absl::Status {
    result = GatherKernelsPtxUnsafe(gpu_arch);
    return result.status();
  }));
  return result;
}

absl::StatusOr<PtxModule> CompileForNvptxUnsafe(const FusionPlan& plan, const PtxOptions& options) {
  CJIT_ASSIGN_OR_RETURN(std::unique_ptr<llvm::TargetMachine> tm, NvptxTargetMachine(options.gpu_arch));
  llvm::LLVMContext ctx;
  auto module = std::make_unique<llvm::Module>("cjit_ptx", ctx);
  module->setTargetTriple(kTriple);
  module->setDataLayout(tm->createDataLayout());
  // libdevice's __nvvm_reflect("__CUDA_FTZ") reads this flag: no flush-to-zero (IEEE denormals).
  module->addModuleFlag(llvm::Module::Override, "nvvm-reflect-ftz", static_cast<uint32_t>(0));
  PtxModule out;
  out.arch = options.gpu_arch;
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    const FusedKernel& k = plan.kernels[i];
    Collapsed c = Collapse(k.shape, Layouts(k), k.row_reduction);
    PtxKernel pk;
    pk.name = absl::StrCat("cjit_", k.name);
    pk.row_reduction = k.row_reduction;
    pk.row_elems = c.dims.back();
    pk.rows = 1;
    for (size_t d = 0; d + 1 < c.dims.size(); ++d) pk.rows *= c.dims[d];
    pk.meta = KernelMeta(c);
    pk.consts = KernelConsts(k);
    GpuEmitter emitter(*module, k, c);
    CJIT_RETURN_IF_ERROR(emitter.Emit(pk.name));
    if (k.row_reduction) {
      GpuEmitter block_emitter(*module, k, c, /*block_per_row=*/true);
      CJIT_RETURN_IF_ERROR(block_emitter.Emit(pk.name + kBlockPerRowSuffix));
      GpuEmitter cached_emitter(*module, k, c, /*block_per_row=*/true, /*row_cache=*/true);
      CJIT_RETURN_IF_ERROR(cached_emitter.Emit(pk.name + kRowCacheSuffix));
    }
    out.kernels.push_back(std::move(pk));
  }
  if (out.kernels.empty()) return out;
  // Link libdevice (only the functions used), then optimize: the NVPTX pipeline runs NVVMReflect.
  auto buf = llvm::MemoryBuffer::getFile(options.libdevice);
  if (!buf) {
    return absl::NotFoundError(
        absl::StrCat("cannot read libdevice at ", options.libdevice, ": ", buf.getError().message()));
  }
  auto libdevice = llvm::parseBitcodeFile((*buf)->getMemBufferRef(), ctx);
  if (!libdevice) return absl::InternalError(absl::StrCat("bad libdevice bitcode: ", ToString(libdevice.takeError())));
  (*libdevice)->setTargetTriple(kTriple);
  (*libdevice)->setDataLayout(module->getDataLayout());
  if (llvm::Linker::linkModules(*module, std::move(*libdevice), llvm::Linker::Flags::LinkOnlyNeeded)) {
    return absl::InternalError("linking libdevice failed");
  }
  for (llvm::Function& f : *module) {
    if (!f.isDeclaration() && f.getCallingConv() != llvm::CallingConv::PTX_Kernel) {
      f.setLinkage(llvm::GlobalValue::InternalLinkage);
    }
  }
  CJIT_ASSIGN_OR_RETURN(out.ptx, OptimizeAndEmitPtx(*module, *tm));
  CJIT_VLOG(2) << "PTX for " << options.gpu_arch << ": " << out.kernels.size() << " kernels, " << out.ptx.size()
               << " bytes";
  return out;
}

}  // namespace cjit
