// Layout assignment for CPU convolutions: channels-last (NHWC) activations between consecutive convolutions.
//
// oneDNN's fastest float32 convolutions on AVX-512 (brgconv, brdgmm depthwise) read and write channels-last
// activations; with ONNX's NCHW tensors every Conv paid two layout reorders (NCHW -> NHWC before, back after:
// ~30% of the convolution time of ppocrv4_rec, measured with ONEDNN_VERBOSE). This pass does what ONNX
// Runtime's NHWC / NCHWc transformers and TensorFlow's grappler layout optimizer do:
//
//  1. Each float32 Conv (1-3 spatial dims, constant weights, known shapes) that is connected to another
//     such Conv through layout-transparent ops becomes
//        Transpose(to channels-last) -> com.clusterjit.NhwcConv -> Transpose(back to channels-first).
//     A QLinearConv (uint8 / int8 activations, constant weights, 1-2 spatial dims) connected the same way
//     becomes com.clusterjit.NhwcQLinearConv (ONNX Runtime's NhwcTransformer does the same): a quantized
//     model's activations stay channels-last bytes from one integer convolution to the next, and the
//     per-tensor QuantizeLinear / DequantizeLinear between them are layout-transparent. A ConvInteger (8-bit
//     X, constant weights, 1-2 spatial dims; what --auto_quantize=dynamic writes) becomes
//     com.clusterjit.NhwcConvInteger (channels-last int32 sums); the DynamicQuantizeLinear before it is
//     layout-transparent (its scale and zero point come from the whole tensor's minimum and maximum).
//  2. Transposes to channels-first are pushed down through layout-transparent ops, which then work on
//     channels-last tensors: unary elementwise ops, binary elementwise ops (the other operand is another
//     such transpose, a constant — permuted here — or a small tensor of the same rank, transposed), Concat
//     (its axis remapped), Split, Resize, GlobalAveragePool / GlobalMaxPool (as ReduceMean / ReduceMax over
//     the channels-last spatial axes, keepdims), and float32 1-D/2-D MaxPool / AveragePool without an
//     Indices output (as com.clusterjit.NhwcMaxPool / NhwcAveragePool: the same attributes, X [N, d.., C],
//     Y [N, o.., C]). Convolutions connect through all of these.
//  3. RemoveNoOps (simplify.h) then cancels each Transpose(to channels-last) of a Transpose(to
//     channels-first), and dead transposes go.
//
// Before:  %a = Conv(%x, %W1)   %b = Relu(%a)   %c = Conv(%b, %W2)
// After:   %t = Transpose(%x, perm=[0,2,3,1])   %a' = NhwcConv(%t, %W1)   %b' = Relu(%a')
//          %c' = NhwcConv(%b', %W2)   %c = Transpose(%c', perm=[0,3,1,2])
//
// com.clusterjit.NhwcConv: ONNX Conv's attributes, W and B; X [N, d1..dn, C], Y [N, o1..on, M] (the ONNX
// Conv output permuted). Only the CPU runs it (runtime/cpu/kernels_conv.cc). Graph values keep their names,
// dtypes and shapes: every original value is still produced (by a Transpose where its producer moved to
// channels-last), so graph outputs and readers outside the rewritten region see ONNX layouts.
#ifndef CJIT_COMPILER_PASSES_LAYOUT_H_
#define CJIT_COMPILER_PASSES_LAYOUT_H_

#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"

namespace cjit {

// Expects a specialized graph (fully known shapes). Returns whether it changed the graph; run RemoveNoOps
// (or SimplifyGraph) after it to cancel transpose pairs.
absl::StatusOr<bool> AssignChannelsLastLayout(Graph& graph);

// Fuses a channels-last pointwise convolution (NhwcConv, 1x1, stride 1, no padding, group 1, float32,
// constant weights) whose output goes, through Relu / Clip / HardSwish / HardSigmoid ops only, into a
// depthwise NhwcConv (group = channels, 2-D, float32, constant weights), each value in between read by
// the next op alone, into one com.clusterjit.NhwcPointwiseDepthwiseConv: the inverted-residual block of
// MobileNetV2/V3 (Sandler et al., CVPR 2018), whose expanded intermediate is the largest activation of
// such networks. The CPU kernel (runtime/cpu/conv_gemm.h) computes the intermediate a band of rows at a
// time into a cache-sized buffer, never the whole tensor.
//   X [N, H, W, C], W1 [M, C, 1, 1], B1 [M] or absent, W2 [M, 1, KH, KW], B2 [M] or absent
//   -> Y [N, OH, OW, M] = dwconv(mid(pwconv(X, W1) + B1), W2) + B2
// with the depthwise convolution's attributes (kernel_shape, pads, strides, dilations, auto_pad, group)
// and mid_ops (strings: Relu, Clip, HardSwish, Linear) with mid_params (floats, two per op: Clip [a, b],
// Linear a * x + b). The decision depends on the graph's structure only (never on sizes), so a replayed
// specialization (specialization_replay.h) makes the same graph. Returns the number of pairs fused.
absl::StatusOr<int> FusePointwiseDepthwise(Graph& graph);

// Folds a zero-filling Pad into the convolution that alone reads it (ONNX Runtime's PadFusion): Pad (mode
// "constant", value absent or 0, constant pads, opset 2-18 forms) of the spatial axes only, non-negative,
// read by exactly one Conv (ONNX, NCHW) or NhwcConv (channels-last) as X, whose auto_pad is NOTSET, becomes
// that convolution's extra pads (begin and end added per spatial axis), as long as each side's total stays
// within the dilated kernel's extent minus one (no output window entirely in padding). Exporters write
// such Pads for TensorFlow's asymmetric "SAME" padding of strided convolutions (tf2onnx) and for explicit
// ZeroPadding2D layers (keras2onnx); the convolution then reads the unpadded tensor instead of a padded
// copy. The decision depends on structure and constants only. Run it before AssignChannelsLastLayout (NCHW
// Pads) and after it (the Pads it moved next to an NhwcConv). Returns the number of Pads folded.
absl::StatusOr<int> FoldPadIntoConv(Graph& graph);

}  // namespace cjit

#endif  // CJIT_COMPILER_PASSES_LAYOUT_H_
