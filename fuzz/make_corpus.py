#!/usr/bin/python3
"""Writes the committed seed models of the fuzz target (fuzz/corpus/*.onnx): small graphs that reach the
parts a mutation should start from — a conv net with post-ops, a transformer-style block (MatMul, Softmax,
LayerNormalization), recurrent ops, control flow, resize/pad/slice with data-dependent inputs, integer and
bool ops, and operators of opsets 18-21. The fuzzer's other seeds (conformance and shared models) are taken
from the machine by tools/fuzz.sh.

usage: fuzz/make_corpus.py OUT_DIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import onnx_builder  # noqa: E402  (tools/onnx_builder.py: the one model builder)

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def save(out, name, nodes, inputs, outputs, inits=(), opset=13, microsoft=False):
    m = onnx_builder.make_model(nodes, name, inputs, outputs, inits, opset,
                                [("com.microsoft", 1)] if microsoft else [], ir_version=8)
    onnx.save(m, os.path.join(out, name + ".onnx"))


def vi(name, elem, dims):
    return helper.make_tensor_value_info(name, elem, dims)


def arr(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)
    save(out, "convnet", [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], group=4, pads=[1, 1, 1, 1]),
        helper.make_node("HardSwish", ["c2"], ["h"]),
        helper.make_node("MaxPool", ["h"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
        helper.make_node("Softmax", ["y"], ["z"], axis=-1),
    ], [vi("x", F, [1, 3, 8, 8])], [vi("z", F, None)],
        [arr("w1", f32(4, 3, 3, 3)), arr("b1", f32(4)), arr("w2", f32(4, 1, 3, 3)), arr("wf", f32(5, 4)),
         arr("bf", f32(5))], opset=14)
    save(out, "attention", [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Div", ["s", "scale"], ["sd"]),
        helper.make_node("Softmax", ["sd"], ["a"], axis=-1),
        helper.make_node("MatMul", ["a", "x"], ["o"]),
        helper.make_node("Add", ["o", "x"], ["res"]),
        helper.make_node("LayerNormalization", ["res", "gamma", "beta"], ["y"], axis=-1),
        helper.make_node("Gelu", ["y"], ["z"]),
    ], [vi("x", F, ["N", 4, 8])], [vi("z", F, None)],
        [arr("wq", f32(8, 8)), arr("wk", f32(8, 8)), arr("scale", np.float32(2.83)), arr("gamma", f32(8)),
         arr("beta", f32(8))], opset=20)
    save(out, "lstm_gru", [
        helper.make_node("LSTM", ["x", "w", "r", "b", "", "h0"], ["y", "yh"], hidden_size=3),
        helper.make_node("Squeeze", ["y", "ax1"], ["ys"]),
        helper.make_node("GRU", ["ys", "gw", "gr"], ["gy"], hidden_size=2, linear_before_reset=1),
    ], [vi("x", F, [5, 2, 4]), vi("h0", F, [1, 2, 3])], [vi("gy", F, None), vi("yh", F, None)],
        [arr("w", f32(1, 12, 4)), arr("r", f32(1, 12, 3)), arr("b", f32(1, 24)), arr("ax1", np.array([1])),
         arr("gw", f32(1, 6, 3)), arr("gr", f32(1, 6, 2))])
    body = helper.make_graph([
        helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        helper.make_node("Mul", ["acc_out", "acc_out"], ["scan"]),
    ], "body", [vi("i", I64, []), vi("cond_in", TensorProto.BOOL, []), vi("acc_in", F, [2])],
        [vi("cond_out", TensorProto.BOOL, []), vi("acc_out", F, [2]), vi("scan", F, [2])],
        initializer=[arr("step", np.array([1.0, 0.5], np.float32))])
    then_g = helper.make_graph([helper.make_node("Neg", ["final"], ["t"])], "then", [], [vi("t", F, [2])])
    else_g = helper.make_graph([helper.make_node("Abs", ["final"], ["e"])], "else", [], [vi("e", F, [2])])
    save(out, "control_flow", [
        helper.make_node("Loop", ["trip", "cond", "init"], ["final", "scans"], body=body),
        helper.make_node("ReduceSum", ["final"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["pos"]),
        helper.make_node("If", ["pos"], ["y"], then_branch=then_g, else_branch=else_g),
    ], [vi("trip", I64, []), vi("init", F, [2])], [vi("y", F, None), vi("scans", F, None)],
        [arr("cond", np.array(True)), arr("zero", np.float32(0))])
    save(out, "dynamic_shapes", [
        helper.make_node("Shape", ["x"], ["shp"]),
        helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["sl"]),
        helper.make_node("Pad", ["sl", "pads", "pv", "pax"], ["pd"], mode="reflect"),
        helper.make_node("Resize", ["pd", "", "scales"], ["rs"], mode="linear"),
        helper.make_node("Reshape", ["rs", "newshape"], ["rsh"]),
        helper.make_node("Expand", ["rsh", "eshape"], ["ex"]),
        helper.make_node("Tile", ["ex", "reps"], ["y"]),
        helper.make_node("ConstantOfShape", ["shp"], ["zeros"], value=helper.make_tensor("v", F, [1], [0.5])),
    ], [vi("x", F, [1, 1, 6, 6])], [vi("y", F, None), vi("zeros", F, None)],
        [arr("starts", np.array([1, 0])), arr("ends", np.array([5, 6])), arr("axes", np.array([2, 3])),
         arr("steps", np.array([1, 2])), arr("pads", np.array([1, 1, 1, 1])), arr("pv", np.float32(0)),
         arr("pax", np.array([2, 3])), arr("scales", np.array([1, 1, 2, 2], np.float32)),
         arr("newshape", np.array([1, -1])), arr("eshape", np.array([2, 1])), arr("reps", np.array([1, 2]))],
        opset=18)
    save(out, "indices", [
        helper.make_node("Gather", ["data", "idx"], ["g"], axis=1),
        helper.make_node("GatherElements", ["data", "eidx"], ["ge"], axis=0),
        helper.make_node("ScatterND", ["data", "ndidx", "upd"], ["sc"], reduction="add"),
        helper.make_node("ScatterElements", ["data", "eidx", "eupd"], ["se"], axis=0, reduction="max"),
        helper.make_node("TopK", ["data", "k"], ["tv", "ti"], axis=1),
        helper.make_node("ArgMax", ["data"], ["am"], axis=1),
        helper.make_node("OneHot", ["idx", "depth", "ohv"], ["oh"]),
        helper.make_node("Split", ["data"], ["s0", "s1"], axis=1, num_outputs=2),
    ], [vi("data", F, [3, 4]), vi("idx", I64, [2])],
        [vi(n, 0, None) for n in ["g", "ge", "sc", "se", "tv", "ti", "am", "oh", "s0", "s1"]],
        [arr("eidx", np.array([[0, 1, 2, 0], [2, 0, 1, 1]])), arr("ndidx", np.array([[0], [2]])),
         arr("upd", f32(2, 4)), arr("eupd", f32(2, 4)), arr("k", np.array([2])), arr("depth", np.array(5)),
         arr("ohv", np.array([0.0, 1.0], np.float32))], opset=18)
    save(out, "integers", [
        helper.make_node("Cast", ["x"], ["xi"], to=TensorProto.INT32),
        helper.make_node("Div", ["xi", "d"], ["q"]),
        helper.make_node("Mod", ["xi", "d"], ["m"], fmod=0),
        helper.make_node("BitShift", ["u", "sh"], ["bs"], direction="LEFT"),
        helper.make_node("BitwiseAnd", ["q", "m"], ["ba"]),
        helper.make_node("Equal", ["q", "m"], ["eq"]),
        helper.make_node("Not", ["eq"], ["ne"]),
        helper.make_node("Where", ["ne", "q", "m"], ["w"]),
        helper.make_node("CumSum", ["w", "cax"], ["cs"]),
        helper.make_node("ReduceProd", ["cs"], ["rp"], keepdims=0),
    ], [vi("x", F, [6]), vi("u", TensorProto.UINT8, [6])], [vi("rp", 0, None), vi("bs", 0, None), vi("ba", 0, None)],
        [arr("d", np.array([3, -2, 1, 5, -7, 2], np.int32)), arr("sh", np.array([1, 2, 3, 0, 7, 1], np.uint8)),
         arr("cax", np.array(0))], opset=18)
    save(out, "normalization", [
        helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["bn"]),
        helper.make_node("InstanceNormalization", ["bn", "s", "b"], ["inn"]),
        helper.make_node("GroupNormalization", ["inn", "gs", "gb"], ["gn"], num_groups=2),
        helper.make_node("LRN", ["gn"], ["lrn"], size=3),
        helper.make_node("ReduceMean", ["lrn", "rax"], ["rm"], keepdims=1),
        helper.make_node("Sub", ["lrn", "rm"], ["ctr"]),
        helper.make_node("Clip", ["ctr", "lo", "hi"], ["y"]),
    ], [vi("x", F, [2, 4, 3, 3])], [vi("y", F, None)],
        [arr("s", f32(4)), arr("b", f32(4)), arr("m", f32(4)), arr("v", np.abs(f32(4)) + 0.1), arr("gs", f32(4)),
         arr("gb", f32(4)), arr("rax", np.array([2, 3])), arr("lo", np.float32(-1)), arr("hi", np.float32(1))],
        opset=21)
    save(out, "quantized", [
        helper.make_node("QuantizeLinear", ["x", "sc", "zp"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "sc", "zp"], ["dq"]),
        helper.make_node("MatMulInteger", ["q", "wq", "zp", "wzp"], ["mi"]),
        helper.make_node("Cast", ["mi"], ["mf"], to=F),
        helper.make_node("Add", ["mf", "dq"], ["y"]),
    ], [vi("x", F, [2, 2])], [vi("y", F, None)],
        [arr("sc", np.float32(0.1)), arr("zp", np.uint8(128)), arr("wq", np.array([[1, 2], [3, 4]], np.uint8)),
         arr("wzp", np.uint8(1))], opset=13)
    # QDQ Conv (fused into QLinearConv at load) feeding a QLinearConv chain laid out channels-last.
    save(out, "quantized_qdq_conv", [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
        helper.make_node("DequantizeLinear", ["b", "bs"], ["bd"], axis=0),
        helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["cq"]),
        helper.make_node("QLinearConv", ["cq", "ys", "yz", "w2", "ws2", "wz2", "xs", "xz"], ["c2"], group=2,
                         pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("DequantizeLinear", ["c2", "xs", "xz"], ["y"]),
    ], [vi("x", F, [1, 2, 6, 6])], [vi("y", F, None)],
        [arr("xs", np.float32(0.05)), arr("xz", np.uint8(120)),
         arr("w", np.arange(-36, 36, dtype=np.int8).reshape(4, 2, 3, 3)), arr("ws", np.float32([0.01, 0.02, 0.03, 0.04])),
         arr("wz", np.zeros(4, np.int8)), arr("b", np.int32([5, -5, 50, -50])),
         arr("bs", np.float32([0.0005, 0.001, 0.0015, 0.002])), arr("ys", np.float32(0.2)), arr("yz", np.uint8(10)),
         arr("w2", np.arange(-18, 18, dtype=np.int8).reshape(2, 2, 3, 3)), arr("ws2", np.float32(0.02)),
         arr("wz2", np.int8(0))], opset=13)
    # Dynamic quantization: DynamicQuantizeLinear -> ConvInteger (uint8 weights with a zero point) -> Cast -> Mul.
    save(out, "quantized_dynamic_conv", [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "qs", "qz"]),
        helper.make_node("ConvInteger", ["q", "w", "qz", "wz"], ["acc"], pads=[0, 1, 0, 1]),
        helper.make_node("Cast", ["acc"], ["accf"], to=F),
        helper.make_node("Mul", ["accf", "qs"], ["y"]),
    ], [vi("x", F, [1, 3, 5, 7])], [vi("y", F, None)],
        [arr("w", np.arange(0, 54, dtype=np.uint8).reshape(2, 3, 3, 3)), arr("wz", np.uint8(27))], opset=13)
    # Float products the fuzzer's --auto_quantize runs quantize (MatMul, Gemm with transB and C, Conv).
    save(out, "auto_quantize", [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Gemm", ["h", "b", "c"], ["g"], transB=1, alpha=0.5, beta=2.0),
        helper.make_node("Reshape", ["g", "shape"], ["img"]),
        helper.make_node("Conv", ["img", "k", "kb"], ["y"], pads=[1, 1, 1, 1]),
    ], [vi("x", F, [2, 16])], [vi("y", F, None)],
        [arr("w", f32(16, 32)), arr("b", f32(16, 32)), arr("c", f32(16)), arr("shape", np.int64([2, 4, 2, 2])),
         arr("k", f32(3, 4, 3, 3)), arr("kb", f32(3))], opset=13)
    # ONNX Runtime's weight-only product: 4-bit codes, packed uint8 zero points, a bias.
    save(out, "matmul_nbits", [
        helper.make_node("MatMulNBits", ["a", "B", "scales", "zp", "", "bias"], ["y"], domain="com.microsoft",
                         K=40, N=8, bits=4, block_size=16),
    ], [vi("a", F, [3, 40])], [vi("y", F, None)],
        [arr("B", rng.integers(0, 256, (8, 3, 8)).astype(np.uint8)), arr("scales", np.abs(f32(24))),
         arr("zp", rng.integers(0, 256, 16).astype(np.uint8)), arr("bias", f32(8))], opset=13, microsoft=True)
    # Audio front end: STFT with a window, power, mel filters; a DFT with dft_length and an axis input.
    save(out, "signal", [
        helper.make_node("STFT", ["x", "step", "win"], ["s"]),
        helper.make_node("ReduceSumSquare", ["s"], ["p"], axes=[-1], keepdims=0),
        helper.make_node("MelWeightMatrix", ["m", "n", "r", "lo", "hi"], ["mel"]),
        helper.make_node("MatMul", ["p", "mel"], ["y"]),
        helper.make_node("DFT", ["x", "len"], ["z"], axis=1, onesided=1),
    ], [vi("x", F, [1, 96, 1])], [vi("y", F, None), vi("z", F, None)],
        [arr("step", np.int64(16)), arr("win", np.hanning(32).astype(np.float32)), arr("m", np.int64(8)),
         arr("n", np.int64(32)), arr("r", np.int64(16000)), arr("lo", np.float32(0)), arr("hi", np.float32(8000)),
         arr("len", np.int64(50))], opset=17)
    save(out, "roi_align", [
        helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], output_height=3, output_width=3, sampling_ratio=2,
                         mode="max"),
    ], [vi("x", F, [2, 3, 8, 8]), vi("rois", F, [2, 4]), vi("bi", I64, [2])], [vi("y", F, None)], opset=16)
    # ONNX Runtime's transformer contrib ops: embeddings, attention with a lengths mask, skip layer norm,
    # FastGelu, rotary embedding.
    ms = dict(domain="com.microsoft")
    save(out, "contrib_transformer", [
        helper.make_node("EmbedLayerNormalization", ["ids", "", "we", "pe", "", "g", "b", "mask"], ["e", "mi"], **ms),
        helper.make_node("Attention", ["e", "w", "wb", "mi"], ["a"], num_heads=2, **ms),
        helper.make_node("SkipLayerNormalization", ["a", "e", "g", "b"], ["n"], **ms),
        helper.make_node("FastGelu", ["n", "b"], ["f"], **ms),
        helper.make_node("RotaryEmbedding", ["f", "pos", "cos", "sin"], ["y"], num_heads=2, **ms),
    ], [vi("ids", TensorProto.INT32, [1, 5]), vi("mask", TensorProto.INT32, [1, 5]), vi("pos", I64, [1, 5])],
        [vi("y", F, None)],
        [arr("we", f32(20, 8)), arr("pe", f32(16, 8)), arr("g", f32(8)), arr("b", f32(8)), arr("w", f32(8, 24)),
         arr("wb", f32(24)), arr("cos", f32(16, 2)), arr("sin", f32(16, 2))], opset=17, microsoft=True)
    # Sequences and optionals: a sequence input, every sequence op, SequenceMap with a body, optionals.
    seq_f = helper.make_tensor_sequence_value_info("xs", F, None)
    map_body = helper.make_graph([helper.make_node("Add", ["e", "e"], ["d"])], "map_body",
                                 [vi("e", F, None)], [vi("d", F, None)])
    save(out, "sequences", [
        helper.make_node("SplitToSequence", ["x", "split"], ["parts"], axis=1),
        helper.make_node("SequenceInsert", ["parts", "x", "pos"], ["more"]),
        helper.make_node("SequenceErase", ["more", "pos"], ["fewer"]),
        helper.make_node("SequenceAt", ["fewer", "pos"], ["at"]),
        helper.make_node("SequenceLength", ["xs"], ["n"]),
        helper.make_node("SequenceMap", ["xs"], ["doubled"], body=map_body),
        helper.make_node("ConcatFromSequence", ["doubled"], ["cat"], axis=0, new_axis=1),
        helper.make_node("SequenceConstruct", ["at", "at"], ["pair"]),
        helper.make_node("ConcatFromSequence", ["pair"], ["y"], axis=-1),
        helper.make_node("Optional", ["y"], ["opt"]),
        helper.make_node("OptionalGetElement", ["opt"], ["z"]),
        helper.make_node("SequenceEmpty", [], ["empty"], dtype=F),
        helper.make_node("OptionalHasElement", ["opt"], ["has"]),
    ], [vi("x", F, [2, 4]), seq_f], [vi("z", F, None), vi("n", I64, None), vi("cat", F, None),
                                    helper.make_tensor_sequence_value_info("empty", F, None),
                                    vi("has", TensorProto.BOOL, None)],
        [arr("split", np.array([1, 3])), arr("pos", np.array(1))], opset=18)
    # String tensors: Cast both ways, the string ops, TfIdfVectorizer over a string pool.
    S = TensorProto.STRING
    save(out, "strings", [
        helper.make_node("Cast", ["x"], ["xs"], to=S),
        helper.make_node("StringConcat", ["xs", "words"], ["joined"]),
        helper.make_node("StringSplit", ["joined"], ["pieces", "counts"], delimiter=".", maxsplit=1),
        helper.make_node("StringNormalizer", ["words"], ["norm"], case_change_action="UPPER",
                         stopwords=["b"]),
        helper.make_node("TfIdfVectorizer", ["words"], ["tf"], mode="TF", min_gram_length=1, max_gram_length=2,
                         max_skip_count=1, ngram_counts=[0, 2], ngram_indexes=[0, 1, 2],
                         pool_strings=["a", "b", "a", "c"]),
        helper.make_node("Cast", ["norm"], ["back"], to=F),
        helper.make_node("RegexFullMatch", ["joined"], ["matched"], pattern=r"[0-9]+\.?[a-z]*"),
    ], [vi("x", F, [4]), vi("words", S, [4])],
        [vi("pieces", S, None), vi("counts", I64, None), vi("tf", F, None), vi("back", F, None),
         vi("matched", TensorProto.BOOL, None)], opset=20)
    # Opset-21 quantization: int4 / uint4 initializers (packed two per byte), blocked DequantizeLinear into
    # MatMul (the 4-bit MatMulNBits fusion), blocked QuantizeLinear to int16, QuantizeLinear to int4 by
    # output_dtype alone.
    def nibbles(code, name, a):
        flat = np.append(a.ravel().astype(np.int64) & 0xF, np.zeros(a.size % 2, np.int64))
        t = TensorProto()
        t.name, t.data_type = name, code
        t.dims.extend(a.shape)
        t.raw_data = (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8).tobytes()
        return t
    g = helper.make_graph([
        helper.make_node("DequantizeLinear", ["w4", "s4"], ["w"], axis=0, block_size=16),
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("DequantizeLinear", ["u4", "su", "zu"], ["u"], axis=0, block_size=16),
        helper.make_node("MatMul", ["h", "u"], ["y"]),
        helper.make_node("QuantizeLinear", ["y", "sq", "zq"], ["q16"], axis=1, block_size=4),
        helper.make_node("QuantizeLinear", ["h", "sh"], ["q4"], output_dtype=22),
        helper.make_node("DequantizeLinear", ["q4", "sh"], ["dq4"]),
    ], "quantized_opset21", [vi("x", F, [2, 40])],
        [vi("q16", TensorProto.INT16, None), vi("dq4", F, None)],
        initializer=[nibbles(22, "w4", rng.integers(-8, 8, (40, 8))), arr("s4", np.abs(f32(3, 8)) + 0.01),
                     nibbles(21, "u4", rng.integers(0, 16, (8, 6))), arr("su", np.abs(f32(1, 6)) + 0.01),
                     nibbles(21, "zu", rng.integers(0, 16, (1, 6))),
                     arr("sq", np.abs(f32(2, 2)) + 0.01), arr("zq", np.zeros((2, 2), np.int16)),
                     arr("sh", np.float32(0.25))])
    onnx.save(onnx_builder.model_from_graph(g, opset=21), os.path.join(out, "quantized_opset21.onnx"))
    print("fuzz corpus: %d models in %s" % (len(os.listdir(out)), out))


if __name__ == "__main__":
    main()
