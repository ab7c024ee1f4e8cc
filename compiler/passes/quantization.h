// Graph passes for quantized models.
//
// FuseQdqIntoIntegerOps: the QDQ format (QuantizeLinear / DequantizeLinear pairs around float ops, what ONNX
// Runtime's quantize_static, TensorRT's explicit quantization and NNCF write) made into integer ops, as ONNX
// Runtime's QDQ transformers (qdq_selector_action_transformer) and TensorRT do:
//   Q(Conv(DQ(x), DQ(w), [bias])) -> QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, [bias32])
//   Q(MatMul(DQ(a), DQ(b)))       -> QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp)
// Conditions (anything else is left as it is, and runs as DQ -> float op -> Q):
//   * x / a are uint8 or int8 with one constant scale and zero point; w / b are uint8 or int8 constants,
//     per tensor or per output channel (Conv: axis 0 of w; MatMul: the last axis of b);
//   * the float op's output is read only by the QuantizeLinear, whose scale and zero point are constants
//     (uint8 / int8, one value);
//   * the Conv bias is absent, DequantizeLinear of an int32 constant with zero point 0 and scale
//     x_scale * w_scale[c] (relative difference under 1e-6, as quantize_static writes it), or a float32
//     constant, then quantized to int32 as round(bias / (x_scale * w_scale[c])) - a difference of at most
//     half a unit of the accumulator, below the output's rounding.
// The fused ops round once, from exact integer sums (runtime/cpu/kernels_quant.cc), where the float path
// rounds the float sum: outputs may differ by one quantization step, as ONNX Runtime's fused kernels do.
// Returns the number of fused patterns. Thread-safety: mutates `graph`; not concurrent with other users.
#ifndef CJIT_COMPILER_PASSES_QUANTIZATION_H_
#define CJIT_COMPILER_PASSES_QUANTIZATION_H_

#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"

namespace cjit {

absl::StatusOr<int> FuseQdqIntoIntegerOps(Graph& graph);

}  // namespace cjit

#endif  // CJIT_COMPILER_PASSES_QUANTIZATION_H_
