#include "compiler/passes/graph_cycles.h"

#include <algorithm>
#include <numeric>

namespace cjit {

GraphCycles::GraphCycles(int n) : rank_(n), in_(n), out_(n), mark_(n, false) {
  std::iota(rank_.begin(), rank_.end(), 0);
}

bool GraphCycles::HasEdge(int x, int y) const { return out_[x].count(y) > 0; }

void GraphCycles::RemoveEdge(int x, int y) {
  out_[x].erase(y);
  in_[y].erase(x);
}

bool GraphCycles::ForwardDfs(int start, int upper_bound, std::vector<int>& visited) {
  std::vector<int> stack{start};
  while (!stack.empty()) {
    int n = stack.back();
    stack.pop_back();
    if (mark_[n]) continue;
    mark_[n] = true;
    visited.push_back(n);
    for (int s : out_[n]) {
      if (rank_[s] == upper_bound) return false;  // reached the edge's tail: a cycle
      if (!mark_[s] && rank_[s] < upper_bound) stack.push_back(s);
    }
  }
  return true;
}

void GraphCycles::BackwardDfs(int start, int lower_bound, std::vector<int>& visited) {
  std::vector<int> stack{start};
  while (!stack.empty()) {
    int n = stack.back();
    stack.pop_back();
    if (mark_[n]) continue;
    mark_[n] = true;
    visited.push_back(n);
    for (int p : in_[n]) {
      if (!mark_[p] && rank_[p] > lower_bound) stack.push_back(p);
    }
  }
}

void GraphCycles::Reorder(std::vector<int>& forward, std::vector<int>& backward) {
  auto by_rank = [&](int a, int b) { return rank_[a] < rank_[b]; };
  std::sort(forward.begin(), forward.end(), by_rank);
  std::sort(backward.begin(), backward.end(), by_rank);
  // Nodes that can reach the tail go first, then those reachable from the head, reusing the same ranks.
  std::vector<int> nodes = backward;
  nodes.insert(nodes.end(), forward.begin(), forward.end());
  std::vector<int> ranks;
  for (int n : nodes) ranks.push_back(rank_[n]);
  std::sort(ranks.begin(), ranks.end());
  for (size_t i = 0; i < nodes.size(); ++i) rank_[nodes[i]] = ranks[i];
}

bool GraphCycles::InsertEdge(int x, int y) {
  if (x == y) return false;
  if (HasEdge(x, y)) return true;
  out_[x].insert(y);
  in_[y].insert(x);
  if (rank_[x] < rank_[y]) return true;
  std::vector<int> forward, backward;
  bool ok = ForwardDfs(y, rank_[x], forward);
  if (!ok) {
    for (int n : forward) mark_[n] = false;
    RemoveEdge(x, y);
    return false;
  }
  BackwardDfs(x, rank_[y], backward);
  for (int n : forward) mark_[n] = false;
  for (int n : backward) mark_[n] = false;
  Reorder(forward, backward);
  return true;
}

bool GraphCycles::IsReachable(int x, int y) {
  if (x == y) return true;
  if (rank_[x] >= rank_[y]) return false;
  std::vector<int> visited;
  bool no_hit = ForwardDfs(x, rank_[y], visited);
  for (int n : visited) mark_[n] = false;
  return !no_hit;
}

bool GraphCycles::ContractEdge(int a, int b) {
  RemoveEdge(a, b);
  if (IsReachable(a, b)) {
    InsertEdge(a, b);
    return false;
  }
  std::set<int> ins = in_[b], outs = out_[b];
  for (int p : ins) RemoveEdge(p, b);
  for (int s : outs) RemoveEdge(b, s);
  for (int p : ins) {
    if (p != a) InsertEdge(p, a);
  }
  for (int s : outs) {
    if (s != a) InsertEdge(a, s);
  }
  return true;
}

}  // namespace cjit
