// Numpy-style broadcast iteration for CPU kernels (ONNX Broadcasting.md). Internal to runtime/cpu.
#ifndef CJIT_RUNTIME_CPU_BROADCAST_H_
#define CJIT_RUNTIME_CPU_BROADCAST_H_

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "compiler/ir/tensor.h"

namespace cjit {

// Output dims of broadcasting `shapes` (caller has validated compatibility via the shape function).
Dims BroadcastDims(const std::vector<Dims>& shapes);

// Iterates the output of a broadcast of N inputs in rows: calls
//   row(std::array<int64_t, N> in_offsets, int64_t out_offset, int64_t n, std::array<int64_t, N> in_strides)
// for each maximal contiguous run of the innermost (collapsed) dimension; in_strides are 0 (broadcast) or
// the element stride of that input along the run. Rows are split across `threads` when the output is large.
template <size_t N, typename Row>
void ForEachBroadcastRow(const Dims& out, const std::array<const Dims*, N>& ins, int threads, Row&& row) {
  int r = static_cast<int>(out.size());
  int64_t total = NumElements(out);
  if (total == 0) return;
  // Per-input element strides aligned to out, 0 on broadcast dims.
  std::vector<std::array<int64_t, N>> stride(r);
  for (size_t k = 0; k < N; ++k) {
    const Dims& d = *ins[k];
    int off = r - static_cast<int>(d.size());
    int64_t s = 1;
    for (int i = r - 1; i >= 0; --i) {
      int j = i - off;
      if (j < 0 || d[j] == 1) {
        stride[i][k] = 0;
      } else {
        stride[i][k] = s;
      }
      if (j >= 0) s *= d[j];
    }
  }
  // Collapse adjacent dims that are contiguous for every input.
  std::vector<int64_t> dims;
  std::vector<std::array<int64_t, N>> strides;
  for (int i = 0; i < r; ++i) {
    if (out[i] == 1) continue;
    if (!dims.empty()) {
      bool merge = true;
      for (size_t k = 0; k < N; ++k) merge &= strides.back()[k] == stride[i][k] * out[i];
      if (merge) {
        dims.back() *= out[i];
        strides.back() = stride[i];
        continue;
      }
    }
    dims.push_back(out[i]);
    strides.push_back(stride[i]);
  }
  if (dims.empty()) {
    dims.push_back(1);
    strides.push_back({});
  }
  int nd = static_cast<int>(dims.size());
  int64_t inner = dims.back();
  std::array<int64_t, N> inner_stride = strides.back();
  int64_t rows = total / inner;
  int nt = total >= 32768 ? threads : 1;
  // Fewer rows than a few per thread (same-shape operands collapse to one row): each row in pieces, so
  // the threads share it (a same-shape Pow of 800k values ran on one thread of two).
  const int64_t pieces = nt > 1 && rows < 4 * nt ? std::max<int64_t>(1, std::min<int64_t>(4 * nt, inner / 4096)) : 1;
  if (rows * pieces <= 1) nt = 1;
  auto one_piece = [&](int64_t w) {
    const int64_t row_i = w / pieces, p = w % pieces;
    const int64_t begin = inner * p / pieces, end = inner * (p + 1) / pieces;
    std::array<int64_t, N> offs{};
    int64_t rem = row_i;
    for (int d = nd - 2; d >= 0; --d) {
      int64_t idx = rem % dims[d];
      rem /= dims[d];
      for (size_t k = 0; k < N; ++k) offs[k] += idx * strides[d][k];
    }
    for (size_t k = 0; k < N; ++k) offs[k] += begin * inner_stride[k];
    row(offs, row_i * inner + begin, end - begin, inner_stride);
  };
  const int64_t work = rows * pieces;
  if (nt <= 1) {
    // No parallel region at all: an `if(false)` one still sets up an OpenMP team (~1-3 us, as much as
    // the math on a small tensor).
    for (int64_t w = 0; w < work; ++w) one_piece(w);
    return;
  }
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t w = 0; w < work; ++w) one_piece(w);
}

}  // namespace cjit

#endif  // CJIT_RUNTIME_CPU_BROADCAST_H_
