#include "compiler/codegen/for_loop.h"

#include "llvm/IR/Metadata.h"

namespace cjit {

ForLoop::ForLoop(llvm::IRBuilder<>& b, const std::string& name, const std::string& index_name, llvm::Value* start,
                 llvm::Value* end, llvm::Value* step, const Options& options)
    : b_(b), options_(options), end_(end), step_(step) {
  llvm::LLVMContext& ctx = b.getContext();
  llvm::Function* fn = b.GetInsertBlock()->getParent();
  preheader_ = b.GetInsertBlock();
  llvm::BasicBlock* body = options.body;
  if (options.top_tested) {
    header_ = options.header ? options.header : llvm::BasicBlock::Create(ctx, name, fn);
    if (!body) body = llvm::BasicBlock::Create(ctx, name + "_body", fn);
  } else {
    header_ = body ? body : llvm::BasicBlock::Create(ctx, name, fn);
  }
  exit_ = options.exit ? options.exit : llvm::BasicBlock::Create(ctx, name + "_exit", fn);
  if (options.top_tested || options.unguarded) {
    b.CreateBr(header_);
  } else {
    b.CreateCondBr(options.guard ? options.guard : Condition(start), header_, exit_);
  }
  b.SetInsertPoint(header_);
  index_ = b.CreatePHI(start->getType(), 2, index_name);
  index_->addIncoming(start, preheader_);
  if (options.top_tested) {
    b.CreateCondBr(Condition(index_), body, exit_);
    b.SetInsertPoint(body);
  }
}

llvm::Value* ForLoop::Condition(llvm::Value* i) {
  llvm::Value* x = options_.lookahead ? b_.CreateAdd(i, options_.lookahead) : i;
  return options_.unsigned_compare ? b_.CreateICmpULT(x, end_) : b_.CreateICmpSLT(x, end_);
}

llvm::PHINode* ForLoop::Carry(llvm::Value* init, const std::string& name) {
  llvm::IRBuilderBase::InsertPointGuard guard(b_);
  b_.SetInsertPoint(header_, header_->getFirstNonPHIIt());
  llvm::PHINode* phi = b_.CreatePHI(init->getType(), 2, name);
  phi->addIncoming(init, preheader_);
  carried_.push_back(phi);
  return phi;
}

llvm::BranchInst* ForLoop::End(llvm::ArrayRef<llvm::Value*> next, bool stay) {
  next_index_ = b_.CreateAdd(index_, step_);
  latch_ = b_.GetInsertBlock();
  index_->addIncoming(next_index_, latch_);
  for (size_t k = 0; k < carried_.size() && k < next.size(); ++k) carried_[k]->addIncoming(next[k], latch_);
  llvm::BranchInst* br =
      options_.top_tested ? b_.CreateBr(header_) : b_.CreateCondBr(Condition(next_index_), header_, exit_);
  if (!stay) b_.SetInsertPoint(exit_);
  return br;
}

llvm::PHINode* ForLoop::ExitValue(llvm::Value* if_skipped, llvm::Value* if_ran, const std::string& name) {
  llvm::PHINode* phi = b_.CreatePHI(if_ran->getType(), 2, name);
  phi->addIncoming(if_skipped, preheader_);
  phi->addIncoming(if_ran, latch_);
  return phi;
}

void ForLoop::DisableUnroll(llvm::BranchInst* latch_branch, bool no_interleave) {
  llvm::LLVMContext& ctx = latch_branch->getContext();
  llvm::SmallVector<llvm::Metadata*, 3> ops = {nullptr};
  if (no_interleave) {
    ops.push_back(llvm::MDNode::get(
        ctx, {llvm::MDString::get(ctx, "llvm.loop.interleave.count"),
              llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(llvm::Type::getInt32Ty(ctx), 1))}));
  }
  ops.push_back(llvm::MDNode::get(ctx, {llvm::MDString::get(ctx, "llvm.loop.unroll.disable")}));
  llvm::MDNode* loop_id = llvm::MDNode::getDistinct(ctx, ops);
  loop_id->replaceOperandWith(0, loop_id);
  latch_branch->setMetadata(llvm::LLVMContext::MD_loop, loop_id);
}

}  // namespace cjit
