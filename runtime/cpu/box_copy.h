// Data movement as one primitive (runtime/cpu, the CPU kernels of the data-movement ops): a dense output
// box whose every element reads one source element through per-dimension index maps, or a fill value.
//
//   dst[i_0, .., i_{r-1}] = any map_d[i_d] == kFill ? fill : src[sum_d map_d[i_d]]     (offsets in elements)
//
// Pad in every mode (constant -> kFill, edge -> clamped, reflect, wrap), Slice with any steps, Tile (i mod
// n), Expand (0 for a broadcast dim), crops and reversals are all separable maps like this. The copy runs at
// memcpy speed where the maps allow: the innermost dims (enough of them for a long row) are merged into one
// table of offsets, cut into runs of a constant source stride — stride 1 copied with memcpy, stride 0 by
// replicating one element, kFill with the fill value — computed once per call; the outer dims' offsets are
// added per row, and rows are split over threads. Transposes go through TransposeTensor (16 x 16 tiles).
//
// Element sizes 1, 2, 4 and 8 bytes (any dtype). Thread-safety: reentrant; `threads` is the intra-op
// count (parallel.h decides whether to fork).
#ifndef CJIT_RUNTIME_CPU_BOX_COPY_H_
#define CJIT_RUNTIME_CPU_BOX_COPY_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cjit {

inline constexpr int64_t kFill = -1;

// maps[d] has one entry per output index of dim d (the output's dims are the maps' sizes): a source offset
// in elements (>= 0), or kFill. `fill` points to one element of `elem_bytes` (unused without kFill).
void BoxCopy(const void* src, void* dst, size_t elem_bytes, const std::vector<std::vector<int64_t>>& maps,
             const void* fill, int threads);

// The map of one dim of ONNX Pad (https://onnx.ai/onnx/operators/onnx__Pad.html): output index i reads
// source index i - begin of a dim of n elements (source stride `stride`), outside [0, n) by `mode`:
// "constant" -> kFill, "edge" -> the nearest element, "reflect" -> mirrored without repeating the edge,
// "wrap" -> modulo n. n == 0 fills every index.
std::vector<int64_t> PadMap(int64_t out, int64_t begin, int64_t n, int64_t stride, const char* mode);

// y[b][j][i] = x[b][i][j] for x [batch, rows, cols] of `elem_bytes` (1, 2, 4 or 8) elements: the layout
// change between channels-first and channels-last ([C, spatial] <-> [spatial, C] per image), in 16 x 16
// register tiles (AVX-512) or 8 x 8 (AVX2) for 4-byte elements. x and y must not overlap.
void BatchedTranspose(const void* x, void* y, size_t elem_bytes, int64_t batch, int64_t rows, int64_t cols,
                      int threads);

}  // namespace cjit

#endif  // CJIT_RUNTIME_CPU_BOX_COPY_H_
