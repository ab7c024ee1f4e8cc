// Incremental cycle detection over a directed graph with a dynamic topological order (Pearce & Kelly,
// "A Dynamic Topological Sort Algorithm for Directed Acyclic Graphs", JEA 2007) — the structure TensorFlow's
// XLA auto-clustering uses (tensorflow/compiler/jit/graphcycles). Nodes are dense ints. InsertEdge refuses an
// edge that would close a cycle; ContractEdge merges the head of an edge into its tail unless another path
// between them exists (which would make the merged node part of a cycle).
//
// Cost: InsertEdge and ContractEdge visit only nodes whose rank lies between the edge's endpoints.
// Thread-safety: none; one instance per pass invocation.
#ifndef CJIT_COMPILER_PASSES_GRAPH_CYCLES_H_
#define CJIT_COMPILER_PASSES_GRAPH_CYCLES_H_

#include <cstdint>
#include <set>
#include <vector>

namespace cjit {

class GraphCycles {
 public:
  explicit GraphCycles(int num_nodes);

  // Adds x -> y. Returns false (and adds nothing) if it would create a cycle.
  bool InsertEdge(int x, int y);
  void RemoveEdge(int x, int y);
  bool HasEdge(int x, int y) const;
  // True if there is a path from x to y (x == y counts).
  bool IsReachable(int x, int y);
  // Merges b into a along the edge a -> b: every edge of b becomes an edge of a, b is left isolated.
  // Returns false (graph unchanged) if a path a -> ... -> b other than the direct edge exists.
  bool ContractEdge(int a, int b);

  const std::set<int>& Successors(int x) const { return out_[x]; }
  const std::set<int>& Predecessors(int x) const { return in_[x]; }

 private:
  bool ForwardDfs(int n, int upper_bound, std::vector<int>& visited);
  void BackwardDfs(int n, int lower_bound, std::vector<int>& visited);
  void Reorder(std::vector<int>& forward, std::vector<int>& backward);

  std::vector<int> rank_;
  std::vector<std::set<int>> in_, out_;
  std::vector<bool> mark_;
};

}  // namespace cjit

#endif  // CJIT_COMPILER_PASSES_GRAPH_CYCLES_H_
