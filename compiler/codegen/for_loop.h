// The counted-loop skeleton both kernel emitters (cpu_emit.cc, nvptx_compiler.cc) build their loops from,
// as XLA's llvm_ir::ForLoop: an index i = start, start + step, ... while a condition holds (default
// i < end, signed), with optional loop-carried values. Includes LLVM headers: only compiler/codegen/*.cc
// may include this file.
//
// Rotated form (the default; LLVM's canonical guarded do-while, which the loop vectorizer expects):
//   preheader: br cond(start) ? body : exit          (or the caller's guard; or br body when unguarded)
//   body:      i = phi [start, preheader], [i + step, latch]
//              c = phi [init, preheader], [next, latch]         (each Carry)
//              ... the caller's code; it may add blocks, the last one is the latch ...
//   latch:     br cond(i + step) ? body : exit
// Top-tested form (Options::top_tested; a while loop):
//   preheader: br header
//   header:    i = phi [start, preheader], [i + step, latch]; c = phi ...; br cond(i) ? body : exit
//   body:      ... the caller's code ...      latch: br header
// Not thread-safe (an IRBuilder is not); one ForLoop per loop, used between its constructor and End.
#ifndef CJIT_COMPILER_CODEGEN_FOR_LOOP_H_
#define CJIT_COMPILER_CODEGEN_FOR_LOOP_H_

#include <string>
#include <vector>

#include "llvm/ADT/ArrayRef.h"
#include "llvm/IR/IRBuilder.h"

namespace cjit {

class ForLoop {
 public:
  struct Options {
    // The guard's condition instead of cond(start) (rotated form), when the caller knows more, e.g. that
    // an inner loop of the body would be empty.
    llvm::Value* guard = nullptr;
    // No guard: the body runs at least once (the caller checked already; rotated form).
    bool unguarded = false;
    // The condition compares i + lookahead < end instead of i < end (a loop whose body handles
    // lookahead / step + 1 steps at once).
    llvm::Value* lookahead = nullptr;
    bool unsigned_compare = false;  // ult instead of slt
    bool top_tested = false;
    // Where both the guard and the latch go when the condition fails; null: a new block `name`_exit,
    // created right after the body's.
    llvm::BasicBlock* exit = nullptr;
    // Blocks the caller created already (to keep its block order): the body, and the header of a
    // top-tested loop. Null: new blocks `name` (rotated: the body; top-tested: the header) and `name`_body.
    llvm::BasicBlock* body = nullptr;
    llvm::BasicBlock* header = nullptr;
  };

  // Emits the guard at b's insert point (the preheader) and leaves b in the body, after the index PHI
  // (named `index_name`) and before the caller's code. Blocks are created in b's current function.
  ForLoop(llvm::IRBuilder<>& b, const std::string& name, const std::string& index_name, llvm::Value* start,
          llvm::Value* end, llvm::Value* step, const Options& options);
  ForLoop(llvm::IRBuilder<>& b, const std::string& name, const std::string& index_name, llvm::Value* start,
          llvm::Value* end, llvm::Value* step)
      : ForLoop(b, name, index_name, start, end, step, Options()) {}

  llvm::PHINode* index() const { return index_; }
  llvm::BasicBlock* preheader() const { return preheader_; }
  llvm::BasicBlock* exit() const { return exit_; }

  // A loop-carried value: `init` on entry, End's `next[k]` (k = the order of Carry calls) after each
  // iteration. Call right after the constructor, before the caller's code adds instructions.
  llvm::PHINode* Carry(llvm::Value* init, const std::string& name = "");

  // Closes the loop at b's insert point (the latch): i + step, the carried values' next values, and the
  // back edge; leaves b at the start of the exit block unless `stay` (the caller moves on itself). Returns
  // the latch's branch (for loop metadata) and keeps the next index in next_index().
  llvm::BranchInst* End(llvm::ArrayRef<llvm::Value*> next = {}, bool stay = false);
  llvm::Value* next_index() const { return next_index_; }
  llvm::BasicBlock* latch() const { return latch_; }

  // After End, at the start of the exit block of a rotated loop whose only predecessors are the guard and
  // the latch: a PHI that is `if_skipped` when the loop did not run and `if_ran` when it did (e.g. a
  // carried value's final value).
  llvm::PHINode* ExitValue(llvm::Value* if_skipped, llvm::Value* if_ran, const std::string& name = "");

  // Loop metadata on `latch_branch`: llvm.loop.unroll.disable, and llvm.loop.interleave.count = 1 when
  // `no_interleave` (vectorize, but neither unroll nor interleave).
  static void DisableUnroll(llvm::BranchInst* latch_branch, bool no_interleave);

 private:
  llvm::Value* Condition(llvm::Value* i);

  llvm::IRBuilder<>& b_;
  Options options_;
  llvm::Value* end_ = nullptr;
  llvm::Value* step_ = nullptr;
  llvm::BasicBlock* preheader_ = nullptr;
  llvm::BasicBlock* header_ = nullptr;  // where the index PHI is: the body (rotated) or the header
  llvm::BasicBlock* exit_ = nullptr;
  llvm::BasicBlock* latch_ = nullptr;
  llvm::PHINode* index_ = nullptr;
  llvm::Value* next_index_ = nullptr;
  std::vector<llvm::PHINode*> carried_;
};

}  // namespace cjit

#endif  // CJIT_COMPILER_CODEGEN_FOR_LOOP_H_
