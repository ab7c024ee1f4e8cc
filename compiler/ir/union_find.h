// Disjoint sets over 0..n-1 with group sizes, for the contraction loops of clustering
// (compiler/passes/mark_for_compilation.cc) and fusion planning (compiler/codegen/fusion_plan.cc): both
// contract edges through GraphCycles, which keeps the first node of a contracted edge as the
// representative, so MergeInto is directed rather than union by rank.
// Find is iterative with path compression (a recursive one could overflow the stack on a long chain).
// Thread-safety: none (one owner).
#ifndef CJIT_COMPILER_IR_UNION_FIND_H_
#define CJIT_COMPILER_IR_UNION_FIND_H_

#include <numeric>
#include <vector>

namespace cjit {

class UnionFind {
 public:
  explicit UnionFind(int n) : rep_(n), size_(n, 1) { std::iota(rep_.begin(), rep_.end(), 0); }

  int Find(int x) {
    int root = x;
    while (rep_[root] != root) root = rep_[root];
    while (rep_[x] != root) {
      int next = rep_[x];
      rep_[x] = root;
      x = next;
    }
    return root;
  }
  // `from`'s group joins `into`'s; both must be representatives (Find results), and `into` stays one.
  void MergeInto(int into, int from) {
    rep_[from] = into;
    size_[into] += size_[from];
  }
  // Members of the group whose representative is `root`.
  int size(int root) const { return size_[root]; }

 private:
  std::vector<int> rep_, size_;
};

}  // namespace cjit

#endif  // CJIT_COMPILER_IR_UNION_FIND_H_
