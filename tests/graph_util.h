// Helpers for tests that write a graph in textual IR, specialize it and run it op by op.
#ifndef CJIT_TESTS_GRAPH_UTIL_H_
#define CJIT_TESTS_GRAPH_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/executor.h"
#include "tools/check_lib.h"

namespace cjit {
namespace testing {

// The graph of textual IR `ir` with its shapes specialized (SpecializedGraphFromText); null, with a test
// failure, when it does not parse or specialize.
inline std::shared_ptr<Graph> Specialized(const std::string& ir) {
  auto g = SpecializedGraphFromText(ir);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? std::shared_ptr<Graph>(std::move(*g)) : nullptr;
}

// The number of nodes of `g` (not of its subgraphs) whose op is `op`.
inline int CountOps(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op_type == op;
  return n;
}

// Runs `g` op by op on one thread (no clustering); the outputs, or none with a test failure.
inline std::vector<Tensor> RunGraph(std::shared_ptr<Graph> g, const std::vector<Tensor>& in) {
  auto ex = Executor::Create(g, ExecutorOptions{1, nullptr, true});
  EXPECT_TRUE(ex.ok()) << ex.status();
  if (!ex.ok()) return {};
  auto out = (*ex)->Run(in);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::vector<Tensor>{};
}

}  // namespace testing
}  // namespace cjit

#endif  // CJIT_TESTS_GRAPH_UTIL_H_
