// The sampling of ONNX Resize (opsets 10-19) and Upsample (7-9), shared by the CPU kernel and the GPU
// placement (which lowers integer-factor nearest upsampling to a broadcast copy): per dim, the input
// indices and weights each output position reads, from the attributes and the roi / scales inputs, as the
// specification defines them (https://onnx.ai/onnx/operators/onnx__Resize.html: the coordinate
// transformation modes, the nearest modes, linear and cubic with cubic_coeff_a / exclude_outside).
#ifndef CJIT_RUNTIME_CPU_RESIZE_H_
#define CJIT_RUNTIME_CPU_RESIZE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"
#include "compiler/ir/tensor.h"

namespace cjit {

// One dim's taps: output position i reads input indices idx[i * n + k] with weights w[i * n + k],
// k < n (1 for nearest or an unchanged dim, 2 linear, 4 cubic); outside[i]: tf_crop_and_resize places i
// outside the input (the extrapolation value is written).
struct ResizeTaps {
  int n = 1;
  std::vector<int64_t> idx;
  std::vector<double> w;
  std::vector<bool> outside;
};

// Taps of every dim of Resize/Upsample node `n` from input dims `x` to output dims `y` (same rank, the
// input not empty where the output is not). `roi` and `scales` are the inputs (null when absent; for
// Upsample and Resize-10 `scales` is input 1), `sizes_given`: the sizes input is present and not empty.
// Errors (InvalidArgument): a mode, coordinate_transformation_mode or nearest_mode outside the
// specification, or ranks that differ. Thread-safe (pure).
absl::StatusOr<std::vector<ResizeTaps>> ResizeTapsOf(const Node& n, const Dims& x, const Dims& y, const Tensor* roi,
                                                     const Tensor* scales, bool sizes_given);

}  // namespace cjit

#endif  // CJIT_RUNTIME_CPU_RESIZE_H_
