// Products with a constant B through the panel loop (runtime/cpu/conv_gemm.h TryPanelProduct) or Eigen's
// matrix-vector product: Gemm and batched MatMul against float64, 1 and 2 threads, op by op and compiled.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ir/text.h"
#include "gtest/gtest.h"
#include "runtime/session.h"
#include "tests/graph_util.h"
#include "tests/model_builder.h"
#include "tests/random_floats.h"
#include "tests/session_options.h"

namespace cjit {
namespace {

using testing::kOpByOpAndCompiled;
using testing::RunModelBytes;

// Runs model `m` (input x of dims `x_dims`, random from `seed`; output y = x B (+ bias) with B [K, N], or
// [N, K] when b_is_nk) at 1 and 2 threads, op by op and compiled, and checks every element against float64.
void ExpectProductMatchesFloat64(const testing::ModelBuilder& m, const std::vector<int64_t>& x_dims,
                                 const std::vector<float>& b, bool b_is_nk, const std::vector<float>* bias, int64_t N,
                                 unsigned seed) {
  const int64_t K = x_dims.back();
  Tensor x(DType::kF32, x_dims);
  const int64_t rows = x.numel() / K;
  const std::vector<float> xv = testing::RandomFloats(static_cast<size_t>(x.numel()), seed);
  std::copy(xv.begin(), xv.end(), x.data<float>());
  for (const char* threads : {"--intra_op_threads=1 ", "--intra_op_threads=2 "}) {
    for (const char* mode : kOpByOpAndCompiled) {
      auto y = RunModelBytes(m.Bytes(), std::string("--device=cpu --autotune_level=0 ") + threads + mode, x);
      ASSERT_TRUE(y.ok()) << y.status();
      ASSERT_EQ(y->numel(), rows * N);
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t n = 0; n < N; ++n) {
          double want = bias ? (*bias)[n] : 0.0;
          for (int64_t k = 0; k < K; ++k) want += double(xv[i * K + k]) * b[b_is_nk ? n * K + k : k * N + n];
          ASSERT_NEAR(y->data<float>()[i * N + n], want, 1e-5 * std::sqrt(double(K)) * (1 + std::abs(want)))
              << "rows=" << rows << " K=" << K << " N=" << N << " at " << i << "," << n << " " << threads << mode;
        }
    }
  }
}

// Gemm with constant B and at most 4 rows (a classifier head) from 256 Ki weights runs the panel loop of
// the pointwise convolutions (runtime/cpu/conv_gemm.h TryPanelProduct): B as [N, K] (transB) or [K, N],
// N = 64 q + 8 / + 48 / full panels, with C broadcast, 1 and 2 threads (columns split), op by op and
// compiled, against float64.
TEST(PanelProductTest, MatrixVectorGemmMatchesFloat64) {
  struct Case {
    int64_t M, K, N;
    bool trans_b, bias;
  };
  const std::vector<Case> cases = {{1, 1280, 1000, true, true}, {3, 1100, 264, false, true},
                                   {2, 2048, 136, true, false}, {1, 256, 1024, false, true},
                                   {4, 1031, 304, true, true}};
  unsigned seed = 150;
  for (const Case& c : cases) {
    testing::ModelBuilder m(13);
    m.Input("x", onnx::TensorProto::FLOAT, {c.M, c.K}).Output("y");
    const std::vector<float> b = testing::RandomFloats(static_cast<size_t>(c.K * c.N), seed++);
    const std::vector<float> bias = testing::RandomFloats(static_cast<size_t>(c.N), seed++);
    m.InitFloats("b", c.trans_b ? std::vector<int64_t>{c.N, c.K} : std::vector<int64_t>{c.K, c.N}, b);
    std::vector<std::string> ins{"x", "b"};
    if (c.bias) {
      m.InitFloats("c", {1, c.N}, bias);
      ins.push_back("c");
    }
    testing::ModelBuilder::AttrInt(m.Node("Gemm", ins, {"y"}), "transB", c.trans_b ? 1 : 0);
    ASSERT_NO_FATAL_FAILURE(ExpectProductMatchesFloat64(m, {c.M, c.K}, b, c.trans_b, c.bias ? &bias : nullptr, c.N,
                                                        seed++));
  }
}

// MatMul with batch dims and a shared constant B whose rows (batch x M) are at most 4 — a decode step's
// projections, [1, 1, K] x [K, N] — runs the panel loop (from 256 Ki weights) or Eigen's GEMV, not BLIS
// (which packed all of B on every call): against float64, 1 and 2 threads, op by op and compiled.
TEST(PanelProductTest, MatrixVectorMatMulWithBatchDimsMatchesFloat64) {
  struct Case {
    std::vector<int64_t> a_dims;  // [..., M, K]
    int64_t N;
  };
  const std::vector<Case> cases = {{{1, 1, 256}, 1024}, {{2, 1, 512}, 520}, {{1, 1, 256}, 768}, {{4, 1, 64}, 48}};
  unsigned seed = 170;
  for (const Case& c : cases) {
    const int64_t K = c.a_dims.back();
    testing::ModelBuilder m(13);
    m.Input("x", onnx::TensorProto::FLOAT, c.a_dims).Output("y");
    const std::vector<float> b = testing::RandomFloats(static_cast<size_t>(K * c.N), seed++);
    m.InitFloats("b", {K, c.N}, b);
    m.Node("MatMul", {"x", "b"}, {"y"});
    ASSERT_NO_FATAL_FAILURE(ExpectProductMatchesFloat64(m, c.a_dims, b, false, nullptr, c.N, seed++));
  }
}

}  // namespace
}  // namespace cjit
