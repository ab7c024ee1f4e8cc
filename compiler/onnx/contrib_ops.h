// ONNX Runtime's com.microsoft quantized operators, which its quantization tools (quantize_static with
// QuantFormat.QOperator, quantize_dynamic) write into models, expanded at import into standard ONNX nodes
// with the semantics of ONNX Runtime's contrib-op documentation (docs/ContribOperators.md):
//
//   QLinearAdd / QLinearMul (A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp)
//       C = QuantizeLinear(DequantizeLinear(A) op DequantizeLinear(B), C_scale, C_zp)
//   QLinearSigmoid / QLinearLeakyRelu (alpha) (X, X_scale, X_zp, Y_scale, Y_zp)
//       Y = QuantizeLinear(f(DequantizeLinear(X)), Y_scale, Y_zp)
//   QLinearAveragePool (AveragePool's attributes, channels_last) / QLinearGlobalAveragePool (channels_last)
//       the same around AveragePool / GlobalAveragePool (channels_last: 4-D X [N, H, W, C], transposed around)
//   QLinearConcat (axis) (Y_scale, Y_zp, then (X_i, X_i_scale, X_i_zp) per input)
//       Y = QuantizeLinear(Concat(DequantizeLinear(X_i)...), Y_scale, Y_zp)
//   QGemm (alpha, transA, transB) (A, a_scale, a_zp, B, b_scale, b_zp, C, y_scale, y_zp)
//       Y = alpha * (DQ(A) * DQ(B) + C * a_scale * b_scale) (C added to the int32 sums before the scaling, as
//       ONNX Runtime's kernel does), quantized to y_scale / y_zp when y_scale is given
//       (float otherwise); b_scale / b_zp per tensor or per column of op(B)
//   MatMulIntegerToFloat (A, B, a_scale, b_scale, a_zp, b_zp, bias)
//       Y = Cast(MatMulInteger(A, B, a_zp, b_zp)) * (a_scale * b_scale) + bias
//   DynamicQuantizeMatMul (A, B, b_scale, b_zp, bias)
//       A quantized by DynamicQuantizeLinear, then as MatMulIntegerToFloat.
// The QuantizeLinear / DequantizeLinear they become are then fused like any QDQ model's
// (compiler/passes/quantization.h) where the patterns allow. Outputs can differ from ONNX Runtime's by one
// quantization step (its kernels use fixed-point or lookup-table arithmetic where these round in float).
// The transformer-family operators (Gelu, BiasGelu, FastGelu, QuickGelu, BiasAdd, SkipLayerNormalization,
// SkipSimplifiedLayerNormalization, EmbedLayerNormalization, Attention, MultiHeadAttention,
// RotaryEmbedding, GroupQueryAttention) and ORT's default-domain SimplifiedLayerNormalization /
// pre-opset-17 LayerNormalization expand in contrib_transformer_ops.cc (contracts and unsupported forms:
// docs/operators.md). Other com.microsoft operators are left for the importer to reject by name.
// Thread-safety: mutates `graph` only.
#ifndef CJIT_COMPILER_ONNX_CONTRIB_OPS_H_
#define CJIT_COMPILER_ONNX_CONTRIB_OPS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace onnx {
class GraphProto;
}

namespace cjit {

// Standard nodes written by an expansion carry this domain: the importer reads them as default-domain
// nodes with the newest supported opset's semantics (LayerNormalization, Gelu, Split with a sizes input),
// whatever opset the model imports.
inline constexpr std::string_view kExpansionDomain = "com.clusterjit.expansion";

// Expands the operators above in `graph` and its subgraphs. `opset` is the model's default-domain opset
// (QuantizeLinear / DequantizeLinear with per-axis parameters need 13). Errors name the node.
absl::Status ExpandContribOps(onnx::GraphProto* graph, int64_t opset, const std::string& source);

}  // namespace cjit

#endif  // CJIT_COMPILER_ONNX_CONTRIB_OPS_H_
