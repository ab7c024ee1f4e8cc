#!/usr/bin/python3
"""Writes the op-level benchmark cases of tools/op-bench: one small ONNX model per (op, attribute variant,
layout, rank, batch, dtype), with seeded inputs as TensorProto files, at realistic sizes (activations of
1-10 MB), and a manifest.

usage: gen_cases.py OUT_DIR [--set default|full|ci] [--list]

OUT_DIR/cases.json lists {name, family, op, variant, memory_bound, model, inputs: [file...]}; each case's
files are in OUT_DIR/<name>/. Families: data movement (Pad every mode, Slice, Concat, Split, Tile, Expand,
Gather*, Scatter*, Transpose every 4-D permutation, DepthToSpace/SpaceToDepth, Resize every mode and
coordinate transform, Cast), elementwise (unary, binary with the broadcast patterns real models use, Where,
Clip as ReLU6, activation chains), reductions and normalizations (Reduce*, ArgMax, Softmax, LayerNorm,
BatchNorm, InstanceNorm, GroupNorm as exported), pooling, convolutions (pointwise, 3x3, strided, depthwise
3/5/7, dilated, grouped, 1-D, ConvTranspose) in NCHW and NHWC-through-Transpose (the tf2onnx pattern), and
matrix products, quantized ops in ORT's three formats (QOperator, QDQ, dynamic), and signal ops (STFT, DFT). The `ci` set is the small fixed subset the regression check runs; `full` adds batch 8,
more sizes, float16 elementwise and 3-D spatial variants. Attribute combinations follow the ONNX operator
specification (https://onnx.ai/onnx/operators/) and the node tests of libonnx-testdata.
Runs with Debian's python3-onnx and python3-numpy (/usr/bin/python3).
"""
import json
import os
import sys

import numpy as np
from onnx import TensorProto, checker, helper, numpy_helper, save, shape_inference

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import onnx_builder  # noqa: E402  (tools/onnx_builder.py: the one model builder)

RNG = np.random.default_rng(2026)

NP = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16, TensorProto.INT64: np.int64,
      TensorProto.INT32: np.int32, TensorProto.BOOL: np.bool_, TensorProto.UINT8: np.uint8, TensorProto.INT8: np.int8}
F32, F16, I64, BOOL = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64, TensorProto.BOOL


class Case:
    """One model: graph inputs (name, type, shape, values or None for random), nodes, initializers."""

    def __init__(self, name, family, op, variant, memory_bound=True, atol=None):
        self.name, self.family, self.op, self.variant, self.memory_bound = name, family, op, variant, memory_bound
        self.atol = atol  # the output comparison's absolute tolerance against ORT, if not the default
        self.inputs, self.nodes, self.inits, self.outputs = [], [], [], []
        self._n = 0

    def input(self, shape, elem=F32, values=None, name=None):
        name = name or f"in{len(self.inputs)}"
        if values is None:
            t = NP[elem]
            if elem in (F32, F16):
                values = RNG.standard_normal(shape).astype(t)
            elif elem == BOOL:
                values = RNG.random(shape) > 0.5
            else:
                values = RNG.integers(0, 4, shape).astype(t)
        self.inputs.append((name, elem, list(shape), np.asarray(values)))
        return name

    def const(self, array, dtype=None):
        self._n += 1
        n = f"c{self._n}"
        self.inits.append(numpy_helper.from_array(np.asarray(array, dtype=dtype), n))
        return n

    def node(self, op, ins, outputs=1, **attrs):
        self._n += 1
        outs = [f"v{self._n}_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op, ins, outs, name=f"n{self._n}", **attrs))
        return outs[0] if outputs == 1 else outs

    def output(self, value, elem=F32):
        self.outputs.append(helper.make_tensor_value_info(value, elem, None))

    def write(self, root):
        d = os.path.join(root, self.name)
        os.makedirs(d, exist_ok=True)
        ins = [helper.make_tensor_value_info(n, e, s) for n, e, s, _ in self.inputs]
        model = onnx_builder.make_model(self.nodes, self.name, ins, self.outputs, self.inits)
        model = shape_inference.infer_shapes(model, data_prop=True)  # the outputs' shapes (the checker wants them)
        if all(o.type.tensor_type.HasField("shape") for o in model.graph.output):
            checker.check_model(model)
        save(model, os.path.join(d, "model.onnx"))
        files = []
        for k, (n, _, _, v) in enumerate(self.inputs):
            p = os.path.join(d, f"input_{k}.pb")
            with open(p, "wb") as f:
                f.write(numpy_helper.from_array(v, n).SerializeToString())
            files.append(p)
        entry = {"name": self.name, "family": self.family, "op": self.op, "variant": self.variant,
                 "memory_bound": self.memory_bound, "model": os.path.join(d, "model.onnx"), "inputs": files}
        if self.atol is not None:
            entry["atol"] = self.atol
        return entry


def i64(v):
    return np.array(v, np.int64)


def nhwc_wrap(c, x_nhwc, body):
    """tf2onnx's pattern: an NHWC graph input, Transpose to NCHW, the op, Transpose back."""
    x = c.node("Transpose", [x_nhwc], perm=[0, 3, 1, 2])
    return c.node("Transpose", [body(x)], perm=[0, 2, 3, 1])


def cases(which):
    full = which == "full"
    out = []

    def add(c):
        out.append(c)
        return c

    batches = [1, 8] if full else [1]
    # ---------------------------------------------------------------------------------------------- Pad
    for mode in ("constant", "reflect", "edge", "wrap"):
        for layout in ("nchw", "nhwc"):
            shape = [1, 32, 128, 128] if layout == "nchw" else [1, 128, 128, 32]
            pads = [0, 0, 1, 2, 0, 0, 1, 2] if layout == "nchw" else [0, 1, 2, 0, 0, 1, 2, 0]
            c = add(Case(f"Pad_{mode}_{layout}", "movement", "Pad", f"{mode}, {layout} {shape}, pads {pads}"))
            args = [c.input(shape), c.const(i64(pads))]
            if mode == "constant":
                args.append(c.const(np.array(0.5, np.float32)))
            if mode == "wrap":  # opset 19 only: wrap as the tf2onnx 'symmetric'-free equivalent is skipped
                out.pop()
                continue
            c.output(c.node("Pad", args, mode=mode))
    c = add(Case("Pad_constant_channels_nchw", "movement", "Pad", "constant, pads on C of [1,30,128,128]"))
    c.output(c.node("Pad", [c.input([1, 30, 128, 128]), c.const(i64([0, 1, 0, 0, 0, 1, 0, 0]))], mode="constant"))
    c = add(Case("Pad_crop_negative", "movement", "Pad", "constant, negative pads (a crop) of [1,32,130,130]"))
    c.output(c.node("Pad", [c.input([1, 32, 130, 130]), c.const(i64([0, 0, -1, -1, 0, 0, -1, -1]))]))
    c = add(Case("Pad_constant_nhwc_large", "movement", "Pad", "constant, [1,256,256,8] NHWC (the 128 ms case)"))
    c.output(c.node("Pad", [c.input([1, 256, 256, 8]), c.const(i64([0, 1, 1, 0, 0, 1, 1, 0]))], mode="constant"))
    # --------------------------------------------------------------------------------------- Slice
    for name, shape, starts, ends, axes, steps in (
            ("Slice_channels", [1, 64, 112, 112], [16], [48], [1], [1]),
            ("Slice_h", [1, 64, 112, 112], [8], [104], [2], [1]),
            ("Slice_w", [1, 64, 112, 112], [8], [104], [3], [1]),
            ("Slice_step2_hw", [1, 32, 128, 128], [0, 0], [128, 128], [2, 3], [2, 2]),
            ("Slice_negative_step", [1, 32, 128, 128], [-1], [-129], [3], [-1]),
            ("Slice_last_tokens", [8, 256, 768], [0], [128], [1], [1])):
        c = add(Case(name, "movement", "Slice", f"{shape} axes {axes} steps {steps}"))
        c.output(c.node("Slice", [c.input(shape), c.const(i64(starts)), c.const(i64(ends)), c.const(i64(axes)),
                                  c.const(i64(steps))]))
    # -------------------------------------------------------------------------------- Concat / Split
    for axis, shape in ((1, [1, 32, 112, 112]), (3, [1, 112, 112, 32]), (-1, [8, 128, 384])):
        for k in (2, 4):
            c = add(Case(f"Concat_axis{axis}_x{k}", "movement", "Concat", f"{k} x {shape} axis {axis}"))
            c.output(c.node("Concat", [c.input(shape) for _ in range(k)], axis=axis))
    for axis, shape in ((1, [1, 128, 112, 112]), (3, [1, 112, 112, 128]), (-1, [8, 128, 2304])):
        c = add(Case(f"Split_axis{axis}_x4", "movement", "Split", f"{shape} axis {axis} into 4"))
        parts = c.node("Split", [c.input(shape), c.const(i64([shape[axis] // 4] * 4))], outputs=4, axis=axis)
        for p in parts:
            c.output(p)
    # ----------------------------------------------------------------------------------- Tile / Expand
    c = add(Case("Tile_hw", "movement", "Tile", "[1,32,64,64] x [1,1,2,2]"))
    c.output(c.node("Tile", [c.input([1, 32, 64, 64]), c.const(i64([1, 1, 2, 2]))]))
    c = add(Case("Tile_batch", "movement", "Tile", "[1,64,56,56] x [8,1,1,1]"))
    c.output(c.node("Tile", [c.input([1, 64, 56, 56]), c.const(i64([8, 1, 1, 1]))]))
    for name, src, dst in (("Expand_channel", [1, 64, 1, 1], [1, 64, 112, 112]),
                           ("Expand_row", [1, 1, 1, 112], [1, 64, 112, 112]),
                           ("Expand_mask", [8, 1, 1, 128], [8, 12, 128, 128])):
        c = add(Case(name, "movement", "Expand", f"{src} -> {dst}"))
        c.output(c.node("Expand", [c.input(src), c.const(i64(dst))]))
    # ----------------------------------------------------------------------------- Gather / Scatter
    c = add(Case("Gather_embedding", "movement", "Gather", "[30522,768] by [8,128] ids, axis 0"))
    c.output(c.node("Gather", [c.const(RNG.standard_normal((30522, 768)).astype(np.float32)),
                               c.input([8, 128], I64, RNG.integers(0, 30522, (8, 128)))], axis=0))
    c = add(Case("Gather_axis1_channels", "movement", "Gather", "[1,128,56,56] channels by 64 indices, axis 1"))
    c.output(c.node("Gather", [c.input([1, 128, 56, 56]), c.const(RNG.integers(0, 128, 64).astype(np.int64))], axis=1))
    c = add(Case("Gather_last_axis", "movement", "Gather", "[8,128,768] by 384 indices, axis -1"))
    c.output(c.node("Gather", [c.input([8, 128, 768]), c.const(RNG.integers(0, 768, 384).astype(np.int64))], axis=-1))
    c = add(Case("GatherElements_axis1", "movement", "GatherElements", "[64,4096] axis 1"))
    c.output(c.node("GatherElements", [c.input([64, 4096]),
                                       c.input([64, 4096], I64, RNG.integers(0, 4096, (64, 4096)))], axis=1))
    c = add(Case("GatherND_rows", "movement", "GatherND", "[1024,768] by [512,1] indices"))
    c.output(c.node("GatherND", [c.input([1024, 768]), c.input([512, 1], I64, RNG.integers(0, 1024, (512, 1)))]))
    c = add(Case("ScatterND_rows", "movement", "ScatterND", "[1024,768] <- 256 rows"))
    c.output(c.node("ScatterND", [c.input([1024, 768]), c.input([256, 1], I64, RNG.permutation(1024)[:256].reshape(256, 1)),
                                  c.input([256, 768])]))
    c = add(Case("ScatterElements_axis1", "movement", "ScatterElements", "[64,4096] <- [64,1024] axis 1"))
    idx = np.stack([RNG.permutation(4096)[:1024] for _ in range(64)]).astype(np.int64)
    c.output(c.node("ScatterElements", [c.input([64, 4096]), c.input([64, 1024], I64, idx), c.input([64, 1024])], axis=1))
    # --------------------------------------------------------------------------------- Transpose
    import itertools
    for perm in itertools.permutations(range(4)):
        if list(perm) == [0, 1, 2, 3]:
            continue
        if not full and perm not in ((0, 2, 3, 1), (0, 3, 1, 2), (0, 2, 1, 3), (0, 1, 3, 2), (1, 0, 2, 3), (3, 2, 1, 0)):
            continue
        c = add(Case("Transpose_" + "".join(map(str, perm)), "movement", "Transpose", f"[8,32,64,64] perm {list(perm)}"))
        c.output(c.node("Transpose", [c.input([8, 32, 64, 64])], perm=list(perm)))
    c = add(Case("Transpose_attention_heads", "movement", "Transpose", "[8,128,12,64] perm [0,2,1,3]"))
    c.output(c.node("Transpose", [c.input([8, 128, 12, 64])], perm=[0, 2, 1, 3]))
    # ------------------------------------------------------------------ DepthToSpace / SpaceToDepth
    for mode in ("DCR", "CRD"):
        c = add(Case(f"DepthToSpace_{mode}", "movement", "DepthToSpace", f"[1,256,56,56] blocksize 2 {mode}"))
        c.output(c.node("DepthToSpace", [c.input([1, 256, 56, 56])], blocksize=2, mode=mode))
    c = add(Case("SpaceToDepth", "movement", "SpaceToDepth", "[1,64,112,112] blocksize 2"))
    c.output(c.node("SpaceToDepth", [c.input([1, 64, 112, 112])], blocksize=2))
    # ----------------------------------------------------------------------------------- Resize
    resize_variants = [("nearest", "asymmetric", "floor"), ("nearest", "half_pixel", "round_prefer_floor"),
                       ("linear", "half_pixel", None), ("linear", "align_corners", None),
                       ("linear", "asymmetric", None), ("linear", "pytorch_half_pixel", None),
                       ("cubic", "half_pixel", None), ("cubic", "align_corners", None)]
    for mode, ctm, nearest in resize_variants:
        for scale, tag in ((2.0, "up2"), (0.5, "down2"), (1.5, "up1.5")):
            if not full and tag == "up1.5" and mode != "linear":
                continue
            for layout in (("nchw", "nhwc") if (mode == "linear" and tag == "up2") or full else ("nchw",)):
                shape = [1, 32, 64, 64] if scale > 1 else [1, 32, 128, 128]
                name = f"Resize_{mode}_{ctm}_{tag}_{layout}"
                c = add(Case(name, "movement", "Resize", f"{mode} {ctm} x{scale} {layout} {shape}"))
                attrs = {"mode": mode, "coordinate_transformation_mode": ctm}
                if nearest:
                    attrs["nearest_mode"] = nearest
                scales = c.const(np.array([1, 1, scale, scale], np.float32))
                body = lambda x: c.node("Resize", [x, "", scales], **attrs)
                if layout == "nchw":
                    c.output(body(c.input(shape)))
                else:
                    c.output(nhwc_wrap(c, c.input([shape[0], shape[2], shape[3], shape[1]]), body))
    # Sizes computed from the input's shape (Shape -> Slice -> Mul -> Concat), as FPN heads export them.
    c = add(Case("Resize_linear_computed_sizes", "movement", "Resize", "linear half_pixel, sizes = 2 x H,W of a Shape"))
    x = c.input([1, 64, 64, 64])
    hw = c.node("Slice", [c.node("Shape", [x]), c.const(i64([2])), c.const(i64([4]))])
    sizes = c.node("Concat", [c.const(i64([1, 64])), c.node("Mul", [hw, c.const(i64([2, 2]))])], axis=0)
    c.output(c.node("Resize", [x, "", "", sizes], mode="linear", coordinate_transformation_mode="half_pixel"))
    # ------------------------------------------------------------------------------------------ Cast
    for dst, tag in ((F16, "f16"), (I64, "i64"), (BOOL, "bool")):
        c = add(Case(f"Cast_f32_{tag}", "movement", "Cast", f"[1,64,112,112] f32 -> {tag}"))
        c.output(c.node("Cast", [c.input([1, 64, 112, 112])], to=dst), dst)
    # --------------------------------------------------------------------------------- elementwise
    big = [1, 64, 112, 112]
    for op in ("Relu", "Sigmoid", "Tanh", "Exp", "Erf", "Abs", "Neg", "Sqrt", "Softplus", "HardSwish", "HardSigmoid"):
        c = add(Case(f"{op}", "elementwise", op, f"{big}"))
        x = c.input(big)
        if op == "Sqrt":
            x = c.node("Abs", [x])
        c.output(c.node(op, [x]))
    c = add(Case("Clip_relu6", "elementwise", "Clip", f"ReLU6 as Clip(0, 6), {big}"))
    c.output(c.node("Clip", [c.input(big), c.const(np.array(0, np.float32)), c.const(np.array(6, np.float32))]))
    for op in ("Add", "Mul", "Sub", "Div", "Pow", "Max"):
        patterns = [("same", big), ("channel", [1, 64, 1, 1]), ("row", [1, 1, 1, 112]), ("scalar", [])]
        if not full and op not in ("Add", "Mul"):
            patterns = patterns[:2]
        for pname, bshape in patterns:
            c = add(Case(f"{op}_{pname}", "elementwise", op, f"{big} {op} {bshape}"))
            a = c.input(big)
            b = c.input(bshape) if bshape else c.const(np.array(1.5, np.float32))
            if op == "Pow":
                a = c.node("Abs", [a])
            c.output(c.node(op, [a, b]))
    c = add(Case("Add_nhwc_channel", "elementwise", "Add", "[1,112,112,64] + [64] (channels-last bias)"))
    c.output(c.node("Add", [c.input([1, 112, 112, 64]), c.input([64])]))
    c = add(Case("Add_attention_mask", "elementwise", "Add", "[8,12,128,128] + [8,1,1,128]"))
    c.output(c.node("Add", [c.input([8, 12, 128, 128]), c.input([8, 1, 1, 128])]))
    c = add(Case("Where_mask", "elementwise", "Where", "[8,12,128,128] by bool [8,1,1,128]"))
    c.output(c.node("Where", [c.input([8, 1, 1, 128], BOOL), c.input([8, 12, 128, 128]),
                              c.const(np.array(-1e4, np.float32))]))
    c = add(Case("Gelu_erf_chain", "elementwise", "Gelu", "x * 0.5 * (1 + Erf(x / sqrt 2)), [8,128,3072]"))
    x = c.input([8, 128, 3072])
    e = c.node("Erf", [c.node("Div", [x, c.const(np.array(1.4142135, np.float32))])])
    c.output(c.node("Mul", [c.node("Mul", [x, c.node("Add", [e, c.const(np.array(1, np.float32))])]),
                            c.const(np.array(0.5, np.float32))]))
    c = add(Case("HardSwish_chain", "elementwise", "HardSwish", "x * Clip(x + 3, 0, 6) / 6 (as exported)"))
    x = c.input(big)
    t = c.node("Clip", [c.node("Add", [x, c.const(np.array(3, np.float32))]), c.const(np.array(0, np.float32)),
                        c.const(np.array(6, np.float32))])
    c.output(c.node("Div", [c.node("Mul", [x, t]), c.const(np.array(6, np.float32))]))
    if full:
        for op in ("Add", "Sigmoid"):
            c = add(Case(f"{op}_f16", "elementwise", op, f"float16 {big}"))
            a = c.input(big, F16)
            c.output(c.node(op, [a, c.input(big, F16)] if op == "Add" else [a]), F16)
    # -------------------------------------------------------------------- reductions, normalization
    for op, axes, keep in (("ReduceMean", [2, 3], 1), ("ReduceMean", [1], 0), ("ReduceMean", [-1], 1),
                           ("ReduceSum", [1], 1), ("ReduceMax", [-1], 0), ("ReduceL2", [2, 3], 1),
                           ("ReduceSumSquare", [-1], 1)):
        shape = [8, 128, 768] if -1 in axes else big
        c = add(Case(f"{op}_axes{''.join(str(a) for a in axes)}_keep{keep}", "reduction", op,
                     f"{shape} axes {axes} keepdims {keep}"))
        if op == "ReduceSum":  # opset 13+: axes as an input (the others follow at opset 18)
            c.output(c.node(op, [c.input(shape), c.const(i64(axes))], keepdims=keep))
        else:
            c.output(c.node(op, [c.input(shape)], axes=axes, keepdims=keep))
    c = add(Case("ArgMax_axis1", "reduction", "ArgMax", f"{big} axis 1"))
    c.output(c.node("ArgMax", [c.input(big)], axis=1, keepdims=0), I64)
    for axis, shape in ((-1, [8, 12, 128, 128]), (1, [8, 1000, 16, 16])):
        c = add(Case(f"Softmax_axis{axis}", "reduction", "Softmax", f"{shape} axis {axis}"))
        c.output(c.node("Softmax", [c.input(shape)], axis=axis))
    c = add(Case("LogSoftmax_last", "reduction", "LogSoftmax", "[64,8000] axis -1"))
    c.output(c.node("LogSoftmax", [c.input([64, 8000])], axis=-1))
    c = add(Case("LayerNormalization_768", "reduction", "LayerNormalization", "[8,128,768] axis -1"))
    c.output(c.node("LayerNormalization", [c.input([8, 128, 768]), c.const(RNG.standard_normal(768).astype(np.float32)),
                                           c.const(RNG.standard_normal(768).astype(np.float32))], axis=-1, epsilon=1e-5))
    c = add(Case("BatchNormalization_alone", "reduction", "BatchNormalization", f"{big}, inference, not after a Conv"))
    ch = big[1]
    c.output(c.node("BatchNormalization", [c.input(big), c.const(RNG.random(ch).astype(np.float32) + 0.5),
                                           c.const(RNG.standard_normal(ch).astype(np.float32)),
                                           c.const(RNG.standard_normal(ch).astype(np.float32)),
                                           c.const(RNG.random(ch).astype(np.float32) + 0.5)]))
    c = add(Case("InstanceNormalization", "reduction", "InstanceNormalization", f"{big}"))
    c.output(c.node("InstanceNormalization", [c.input(big), c.const(np.ones(ch, np.float32)),
                                              c.const(np.zeros(ch, np.float32))]))
    c = add(Case("GroupNorm_exported", "reduction", "GroupNorm", "Reshape -> InstanceNormalization -> Reshape, 32 groups"))
    x = c.input([1, 128, 64, 64])
    r = c.node("Reshape", [x, c.const(i64([0, 32, -1]))])
    n = c.node("InstanceNormalization", [r, c.const(np.ones(32, np.float32)), c.const(np.zeros(32, np.float32))])
    y = c.node("Reshape", [n, c.node("Shape", [x])])
    c.output(c.node("Add", [c.node("Mul", [y, c.const(RNG.standard_normal((128, 1, 1)).astype(np.float32))]),
                            c.const(RNG.standard_normal((128, 1, 1)).astype(np.float32))]))
    # ------------------------------------------------------------------------------------- pooling
    for b in batches:
        shape = [b, 64, 112, 112] if b == 1 else [b, 32, 56, 56]
        for name, op, attrs in (("MaxPool_3x3_s2", "MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
                                ("MaxPool_2x2_s2", "MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2])),
                                ("MaxPool_3x3_s2_ceil", "MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
                                ("AveragePool_3x3_s1_pad", "AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
                                ("AveragePool_3x3_include_pad", "AveragePool",
                                 dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)),
                                ("AveragePool_2x2_s2", "AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2])),
                                ("GlobalAveragePool", "GlobalAveragePool", {})):
            c = add(Case(f"{name}_b{b}", "pooling", op, f"{shape} {attrs}"))
            c.output(c.node(op, [c.input(shape)], **attrs))
        c = add(Case(f"MaxPool_nhwc_b{b}", "pooling", "MaxPool", "3x3 s2 through Transpose (tf2onnx)"))
        c.output(nhwc_wrap(c, c.input([shape[0], shape[2], shape[3], shape[1]]),
                           lambda x: c.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])))
    # -------------------------------------------------------------------------------- convolutions
    def conv(name, xs, w_shape, attrs, layout="nchw", bias=True, variant=""):
        c = add(Case(name, "conv", "Conv", variant or f"x {xs} w {w_shape} {attrs} {layout}", memory_bound=False))
        w = c.const((RNG.standard_normal(w_shape) * (1.0 / np.sqrt(np.prod(w_shape[1:])))).astype(np.float32))
        args = [w] + ([c.const(RNG.standard_normal(w_shape[0]).astype(np.float32))] if bias else [])
        body = lambda x: c.node("Conv", [x] + args, **attrs)
        if layout == "nchw":
            c.output(body(c.input(xs)))
        else:
            c.output(nhwc_wrap(c, c.input([xs[0], xs[2], xs[3], xs[1]]), body))

    for b in batches:
        s = 56 if b == 1 else 28
        conv(f"Conv_1x1_b{b}", [b, 64, s, s], [128, 64, 1, 1], {})
        conv(f"Conv_3x3_b{b}", [b, 64, s, s], [64, 64, 3, 3], dict(pads=[1, 1, 1, 1]))
        conv(f"Conv_3x3_s2_b{b}", [b, 64, 2 * s, 2 * s], [128, 64, 3, 3], dict(pads=[1, 1, 1, 1], strides=[2, 2]))
        conv(f"Conv_first_7x7_s2_b{b}", [b, 3, 224, 224], [64, 3, 7, 7], dict(pads=[3, 3, 3, 3], strides=[2, 2]))
        for k in (3, 5, 7):
            conv(f"Conv_depthwise_{k}x{k}_b{b}", [b, 128, s, s], [128, 1, k, k], dict(pads=[k // 2] * 4, group=128))
        conv(f"Conv_depthwise_3x3_s2_b{b}", [b, 128, 2 * s, 2 * s], [128, 1, 3, 3],
             dict(pads=[1, 1, 1, 1], strides=[2, 2], group=128))
        conv(f"Conv_dilated_3x3_d2_b{b}", [b, 64, s, s], [64, 64, 3, 3], dict(pads=[2, 2, 2, 2], dilations=[2, 2]))
        conv(f"Conv_grouped_g4_b{b}", [b, 128, s, s], [128, 32, 3, 3], dict(pads=[1, 1, 1, 1], group=4))
        conv(f"Conv_same_upper_s2_b{b}", [b, 64, 2 * s, 2 * s], [64, 64, 3, 3], dict(auto_pad="SAME_UPPER", strides=[2, 2]))
        for name, ws, attrs in (("1x1", [128, 64, 1, 1], {}), ("3x3", [64, 64, 3, 3], dict(pads=[1, 1, 1, 1])),
                                ("depthwise_5x5", [64, 1, 5, 5], dict(pads=[2, 2, 2, 2], group=64))):
            conv(f"Conv_nhwc_{name}_b{b}", [b, 64, s, s], ws, attrs, layout="nhwc")
    for k in (3, 5):
        c = add(Case(f"Conv1d_k{k}", "conv", "Conv", f"[1,256,2000] k {k}", memory_bound=False))
        c.output(c.node("Conv", [c.input([1, 256, 2000]), c.const((RNG.standard_normal((256, 256, k)) * 0.05).astype(np.float32))],
                        pads=[k // 2, k // 2]))
    for name, xs, ws, attrs in (("ConvTranspose_2x2_s2", [1, 128, 32, 32], [128, 64, 2, 2], dict(strides=[2, 2])),
                                ("ConvTranspose_4x4_s2_p1", [1, 64, 32, 32], [64, 32, 4, 4], dict(strides=[2, 2], pads=[1, 1, 1, 1]))):
        c = add(Case(name, "conv", "ConvTranspose", f"{xs} w {ws} {attrs}", memory_bound=False))
        c.output(c.node("ConvTranspose", [c.input(xs), c.const((RNG.standard_normal(ws) * 0.05).astype(np.float32))], **attrs))
    # Pad folded into the next convolution (tf2onnx writes explicit Pads before VALID convolutions).
    c = add(Case("Pad_then_conv_3x3", "conv", "Pad+Conv", "Pad 1 then a VALID 3x3 conv, [1,64,56,56]", memory_bound=False))
    p = c.node("Pad", [c.input([1, 64, 56, 56]), c.const(i64([0, 0, 1, 1, 0, 0, 1, 1]))], mode="constant")
    c.output(c.node("Conv", [p, c.const((RNG.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32))]))
    if full:
        c = add(Case("Conv3d_3x3x3", "conv", "Conv", "[1,32,16,32,32] 3x3x3", memory_bound=False))
        c.output(c.node("Conv", [c.input([1, 32, 16, 32, 32]),
                                 c.const((RNG.standard_normal((32, 32, 3, 3, 3)) * 0.05).astype(np.float32))], pads=[1] * 6))
    # ------------------------------------------------------------------------------------ products
    for name, a, b, attrs, op in (("MatMul_768x768", [8, 128, 768], [768, 768], {}, "MatMul"),
                                  ("MatMul_768x3072", [8, 128, 768], [768, 3072], {}, "MatMul"),
                                  ("MatMul_batched_qk", [8, 12, 128, 64], [8, 12, 64, 128], {}, "MatMul"),
                                  ("MatMul_vector", [1, 768], [768, 768], {}, "MatMul"),
                                  ("Gemm_transB", [64, 1024], [1000, 1024], dict(transB=1), "Gemm")):
        c = add(Case(name, "matmul", op, f"{a} x {b} {attrs}", memory_bound=False))
        w = c.input(b) if "batched" in name else c.const((RNG.standard_normal(b) * 0.05).astype(np.float32))
        c.output(c.node(op, [c.input(a), w], **attrs))
    # ---------------------------------------------------------------------------------- quantized
    # ORT's quantization conventions: uint8 activations (asymmetric), int8 per-channel symmetric weights,
    # int32 bias; the three formats (QOperator, QDQ, dynamic) as its quantize_static / quantize_dynamic write them.
    U8, I8, I32 = TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32

    def u8_input(c, shape):
        return c.input(shape, U8, RNG.integers(0, 256, shape).astype(np.uint8))

    def qweights(c, ws):
        w = c.const(RNG.integers(-127, 128, ws).astype(np.int8))
        return w, c.const(RNG.uniform(0.002, 0.01, ws[0]).astype(np.float32)), c.const(np.zeros(ws[0], np.int8))

    for name, xs, ws, attrs in (("3x3", [1, 64, 56, 56], [64, 64, 3, 3], dict(pads=[1, 1, 1, 1])),
                                ("1x1", [1, 64, 56, 56], [128, 64, 1, 1], {}),
                                ("3x3_s2", [1, 64, 112, 112], [128, 64, 3, 3], dict(pads=[1, 1, 1, 1], strides=[2, 2])),
                                ("depthwise_3x3", [1, 128, 56, 56], [128, 1, 3, 3], dict(pads=[1, 1, 1, 1], group=128)),
                                ("first_3x3_s2", [1, 3, 224, 224], [32, 3, 3, 3], dict(pads=[1, 1, 1, 1], strides=[2, 2]))):
        c = add(Case(f"QLinearConv_{name}", "quantized", "QLinearConv", f"u8 x {xs}, s8 per-channel w {ws} {attrs}",
                     memory_bound=False))
        w, wsc, wzp = qweights(c, ws)
        c.output(c.node("QLinearConv", [u8_input(c, xs), c.const(np.float32(0.02)), c.const(np.uint8(128)), w, wsc, wzp,
                                        c.const(np.float32(0.05)), c.const(np.uint8(120)),
                                        c.const(RNG.integers(-2000, 2000, ws[0]).astype(np.int32))], **attrs), U8)
        # QDQ: DQ(x), DQ(w) -> Conv -> Q, as quantize_static writes it.
        c = add(Case(f"QDQ_Conv_{name}", "quantized", "QDQ Conv", f"DQ -> Conv -> Q, x {xs} w {ws} {attrs}",
                     memory_bound=False))
        w, wsc, wzp = qweights(c, ws)
        dx = c.node("DequantizeLinear", [u8_input(c, xs), c.const(np.float32(0.02)), c.const(np.uint8(128))])
        dw = c.node("DequantizeLinear", [w, wsc, wzp], axis=0)
        y = c.node("Conv", [dx, dw, c.const(RNG.standard_normal(ws[0]).astype(np.float32))], **attrs)
        c.output(c.node("QuantizeLinear", [y, c.const(np.float32(0.05)), c.const(np.uint8(120))]), U8)
        # Dynamic: DynamicQuantizeLinear -> ConvInteger -> Cast -> Mul, as quantize_dynamic writes it.
        c = add(Case(f"ConvInteger_dynamic_{name}", "quantized", "ConvInteger", f"dynamic, x {xs} w {ws} {attrs}",
                     memory_bound=False))
        q, qs, qz = c.node("DynamicQuantizeLinear", [c.input(xs)], outputs=3)
        w = c.const(RNG.integers(-127, 128, ws).astype(np.int8))
        acc = c.node("ConvInteger", [q, w, qz, c.const(np.int8(0))], **attrs)  # ORT: one weight zero point
        scale = c.node("Mul", [qs, c.const(np.float32(0.004))])
        c.output(c.node("Mul", [c.node("Cast", [acc], to=F32), scale]))
    for name, a, b in (("768x768", [8, 128, 768], [768, 768]), ("768x3072", [8, 128, 768], [768, 3072])):
        c = add(Case(f"QLinearMatMul_{name}", "quantized", "QLinearMatMul", f"u8 {a} x s8 {b}", memory_bound=False))
        c.output(c.node("QLinearMatMul", [u8_input(c, a), c.const(np.float32(0.02)), c.const(np.uint8(128)),
                                          c.const(RNG.integers(-127, 128, b).astype(np.int8)), c.const(np.float32(0.004)),
                                          c.const(np.int8(0)), c.const(np.float32(0.1)), c.const(np.uint8(128))]), U8)
        c = add(Case(f"MatMulInteger_dynamic_{name}", "quantized", "MatMulInteger", f"dynamic, {a} x s8 {b}",
                     memory_bound=False))
        q, qs, qz = c.node("DynamicQuantizeLinear", [c.input(a)], outputs=3)
        acc = c.node("MatMulInteger", [q, c.const(RNG.integers(-127, 128, b).astype(np.int8)), qz, c.const(np.int8(0))])
        c.output(c.node("Mul", [c.node("Cast", [acc], to=F32), c.node("Mul", [qs, c.const(np.float32(0.004))])]))
    c = add(Case("QuantizeLinear_u8", "quantized", "QuantizeLinear", "[1,64,112,112] per tensor"))
    c.output(c.node("QuantizeLinear", [c.input([1, 64, 112, 112]), c.const(np.float32(0.02)), c.const(np.uint8(128))]), U8)
    c = add(Case("DequantizeLinear_s8_axis1", "quantized", "DequantizeLinear", "[1,64,112,112] per channel"))
    c.output(c.node("DequantizeLinear", [c.input([1, 64, 112, 112], I8, RNG.integers(-128, 128, [1, 64, 112, 112]).astype(np.int8)),
                                         c.const(RNG.uniform(0.01, 0.1, 64).astype(np.float32)),
                                         c.const(np.zeros(64, np.int8))], axis=1))
    c = add(Case("DynamicQuantizeLinear", "quantized", "DynamicQuantizeLinear", "[1,64,112,112]"))
    c.output(c.node("DynamicQuantizeLinear", [c.input([1, 64, 112, 112])], outputs=3)[0], U8)
    # ------------------------------------------------------------------------------------- signal
    # Audio front ends (opset 17): a 30 s, 16 kHz signal framed as Whisper / speech models do (n_fft 400, hop
    # 160, Hann window), the same frames as one DFT over a framed tensor, and complex / inverse transforms.
    hann = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(400) / 400)).astype(np.float32)
    c = add(Case("STFT_16k_30s_n400_hop160", "signal", "STFT", "[1,480000,1], Hann 400, hop 160, onesided",
                 memory_bound=False, atol=5e-3))
    c.output(c.node("STFT", [c.input([1, 480000, 1]), c.const(np.int64(160)), c.const(hann)]))
    # ORT's DFT of a length that is not a power of two is a direct O(n^2) sum in float32: 2.7e-3 from the
    # float64 transform here, where KissFFT's is 3e-5 (values up to ~80).
    c = add(Case("DFT_real_onesided_frames_400", "signal", "DFT", "[1,3000,400,1] axis 2, onesided",
                 memory_bound=False, atol=5e-3))
    c.output(c.node("DFT", [c.input([1, 3000, 400, 1])], axis=2, onesided=1))
    c = add(Case("DFT_complex_512", "signal", "DFT", "[256,512,2] axis 1", memory_bound=False))
    c.output(c.node("DFT", [c.input([256, 512, 2])], axis=1))
    c = add(Case("DFT_inverse_1024", "signal", "DFT", "[128,1024,2] axis 1, inverse", memory_bound=False))
    c.output(c.node("DFT", [c.input([128, 1024, 2])], axis=1, inverse=1))
    if which == "ci":
        keep = {"Pad_constant_nhwc", "Pad_reflect_nchw", "Slice_step2_hw", "Concat_axis1_x2", "Transpose_0231",
                "Resize_linear_half_pixel_up2_nchw", "Resize_nearest_asymmetric_up2_nchw", "Add_channel",
                "Softmax_axis-1", "MaxPool_3x3_s2_b1", "Gather_embedding", "DepthToSpace_DCR", "Expand_channel",
                "Conv_nhwc_depthwise_5x5_b1", "Cast_f32_f16", "Max_same"}
        out = [c for c in out if c.name in keep]
    return out


def main():
    args = sys.argv[1:]
    which = "default"
    if "--set" in args:
        which = args[args.index("--set") + 1]
    root = args[0]
    cs = cases(which)
    if "--list" in args:
        for c in cs:
            print(f"{c.name:48s} {c.family:12s} {c.variant}")
        return
    os.makedirs(root, exist_ok=True)
    manifest = []
    for c in cs:
        try:
            manifest.append(c.write(root))
        except Exception as e:
            raise RuntimeError(f"case {c.name}: {e}") from e
    with open(os.path.join(root, "cases.json"), "w") as f:
        json.dump({"set": which, "cases": manifest}, f, indent=1)
    print(f"{len(manifest)} cases in {root}/cases.json")


if __name__ == "__main__":
    main()
