// Graph passes for quantized models.
//
// FuseQdqIntoIntegerOps: the QDQ format (QuantizeLinear / DequantizeLinear pairs around float ops, what ONNX
// Runtime's quantize_static, TensorRT's explicit quantization and NNCF write) made into integer ops, as ONNX
// Runtime's QDQ transformers (qdq_selector_action_transformer) and TensorRT do:
//   Q(Conv(DQ(x), DQ(w), [bias])) -> QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, [bias32])
//   Q(MatMul(DQ(a), DQ(b)))       -> QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp)
//   Q(op(DQ(x), ...))             -> op(x, ...)  for ops whose outputs are input values, moved or selected
//     (MaxPool, Reshape, Transpose, Flatten, Squeeze, Unsqueeze, Identity, Slice, Gather of the data,
//     DepthToSpace, SpaceToDepth), when the DQ and the Q have the same scale and zero point (ORT's "drop
//     DQ/Q" selectors): Q(DQ(v)) = v exactly, and max commutes with a dequantization of positive scale.
//   MatMul(A, DQ(w)) / Gemm(A, DQ(w)[, C]) -> com.clusterjit.MatMulNBits(A, codes, scales, zero points[, bias])
//     for a constant 8-bit w (per tensor or per output column) when the product is not quantized again (a
//     classifier's last layer): 8-bit codes in blocks of 32 along K, so a memory-bound product reads a
//     quarter of the float32 weights; products in float32 as the float op's (summation order may differ).
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

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"

namespace cjit {

absl::StatusOr<int> FuseQdqIntoIntegerOps(Graph& graph);

// AutoQuantize: load-time quantization of a float32 model's products with constant weights.
//
// kDynamic, as ONNX Runtime's quantize_dynamic writes it (onnxruntime/python/tools/quantization), with no
// offline step: each quantized MatMul(A, W) / Gemm(A, W, C) / Conv(X, W, B) becomes
//   (Aq, a_scale, a_zp) = DynamicQuantizeLinear(A)          one per distinct A, shared by its readers
//   acc = MatMulInteger(Aq, Wq, a_zp)  |  ConvInteger(Xq, Wq, x_zp, <Conv's attributes>)      int32
//   Y   = Cast(acc, float) * (a_scale * w_scale * alpha) [+ beta * C | + B]
// with Wq int8, symmetric per output column (MatMul / Gemm) or per output channel (Conv):
// w_scale[c] = max|W[.., c]| / 127, Wq = round_half_even(W / w_scale) in [-127, 127] (an all-zero
// column gets scale 1). The integer products are exact (runtime/cpu/int8_gemm.h); the error is the
// rounding of A to 8 bits per run and of W once.
//
// kWeightOnly: MatMul(A, W) / Gemm(A, W, C) becomes com.clusterjit.MatMulNBits (ONNX Runtime's
// com.microsoft.MatMulNBits: Y = A * dequant(B)^T + bias) with W^T [N, K] stored in `weight_bits` bits per
// value, symmetric per block of `block_size` values along K: scale = max|block| / (2^(bits-1) - 1),
// q = round_half_even(w / scale) + 2^(bits-1) (the op's default zero point, so none is stored).
// Products run in float32 on the weights dequantized per tile: the weights take bits/32 of their memory.
//
// Candidates: nodes of the default domain whose op type is in `op_types` (by default those of ONNX
// Runtime's quantize_dynamic: MatMul, Gemm, Conv), with a float32 constant weight of at least `min_weights`
// elements (depthwise and other small convolutions stay float32: they are memory-bound) (MatMul: rank 2 [K, N]; Gemm:
// transA = 0; Conv: any rank, dynamic only), not named in `denied_nodes`, and accepted by `rule` when set. Gemm with a
// non-constant C and beta != 1 stays float32. Returns the names of the quantized nodes, in graph order. Thread-safety:
// mutates `graph`; `rule` is called on this thread.
struct AutoQuantizeOptions {
  enum class Mode { kDynamic, kWeightOnly };
  Mode mode = Mode::kDynamic;
  std::set<std::string> op_types = {"MatMul", "Gemm", "Conv"};
  std::set<std::string> denied_nodes;
  std::function<bool(const Node&)> rule;  // false keeps the node float32
  int64_t min_weights = 16384;
  int weight_bits = 8;       // kWeightOnly: 2, 4 or 8
  int64_t block_size = 32;   // kWeightOnly: a power of two >= 16
};

absl::StatusOr<std::vector<std::string>> AutoQuantize(Graph& graph, const AutoQuantizeOptions& options);

// Packs a float32 weight W [K, N] whose element (k, n) is w[k * stride_k + n * stride_n] (MatMul's B:
// stride_k = N, stride_n = 1; Gemm's transposed B: 1, K) as MatMulNBits' B [N, ceil(K / block_size),
// block_size * bits / 8] (codes low bits first along K, padding codes at the zero point) and scales
// [N * ceil(K / block_size)], as described above. Exposed for tests and tools.
void QuantizeWeightsNBits(const float* w, int64_t K, int64_t N, int64_t stride_k, int64_t stride_n, int bits,
                          int64_t block_size, uint8_t* packed, float* scales);

}  // namespace cjit

#endif  // CJIT_COMPILER_PASSES_QUANTIZATION_H_
