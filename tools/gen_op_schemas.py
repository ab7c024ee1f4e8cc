#!/usr/bin/python3
"""Generates compiler/ops/op_schemas.inc: for every operator version of the default ONNX domain, its
name, since_version, attributes (name, type, required), formal inputs and outputs (name, option: S single,
O optional, V homogeneous variadic, H heterogeneous variadic; and type: a type parameter such as T, or !dtype
for a fixed type), the allowed input and output counts, and the type constraints (T=f32|f64|...; only the
element types clusterjit has). Versions up to opset 17 come from the ONNX
schemas of Debian's python3-onnx (1.12); the versions of opsets 18-21 (ONNX 1.13-1.16) of operators
clusterjit supports are listed below by hand from the ONNX operator specification
(https://onnx.ai/onnx/operators/, docs/Changelog.md of the onnx repository), since that package
predates them. The importer checks every node against this table, not against libonnx.

usage: tools/gen_op_schemas.py > compiler/ops/op_schemas.inc
"""
import onnx
import onnx.defs

TYPES = {1: "FLOAT", 2: "INT", 3: "STRING", 4: "TENSOR", 5: "GRAPH", 6: "FLOATS", 7: "INTS", 8: "STRINGS",
         9: "TENSORS", 10: "GRAPHS", 11: "SPARSE_TENSOR", 12: "SPARSE_TENSORS", 13: "TYPE_PROTO", 14: "TYPE_PROTOS"}

# (op, since_version, [(attr, type, required)]) for opsets 18-21.
POOL = [("auto_pad", "STRING", 0), ("ceil_mode", "INT", 0), ("dilations", "INTS", 0), ("kernel_shape", "INTS", 1),
        ("pads", "INTS", 0), ("strides", "INTS", 0)]
REDUCE = [("keepdims", "INT", 0), ("noop_with_empty_axes", "INT", 0)]
RESIZE = [("antialias", "INT", 0), ("axes", "INTS", 0), ("coordinate_transformation_mode", "STRING", 0),
          ("cubic_coeff_a", "FLOAT", 0), ("exclude_outside", "INT", 0), ("extrapolation_value", "FLOAT", 0),
          ("keep_aspect_ratio_policy", "STRING", 0), ("mode", "STRING", 0), ("nearest_mode", "STRING", 0)]
CONSTANT = [("sparse_value", "SPARSE_TENSOR", 0), ("value", "TENSOR", 0), ("value_float", "FLOAT", 0),
            ("value_floats", "FLOATS", 0), ("value_int", "INT", 0), ("value_ints", "INTS", 0),
            ("value_string", "STRING", 0), ("value_strings", "STRINGS", 0)]
NEWER = [
    # opset 18 (ONNX 1.13)
    ("BitwiseAnd", 18, []), ("BitwiseOr", 18, []), ("BitwiseXor", 18, []), ("BitwiseNot", 18, []),
    ("CenterCropPad", 18, [("axes", "INTS", 0)]),
    ("Col2Im", 18, [("dilations", "INTS", 0), ("pads", "INTS", 0), ("strides", "INTS", 0)]),
    ("GroupNormalization", 18, [("epsilon", "FLOAT", 0), ("num_groups", "INT", 1)]),
    ("LpPool", 18, POOL + [("p", "INT", 0)]),
    ("Mish", 18, []),
    ("Pad", 18, [("mode", "STRING", 0)]),
    ("Resize", 18, RESIZE),
    ("ScatterElements", 18, [("axis", "INT", 0), ("reduction", "STRING", 0)]),
    ("ScatterND", 18, [("reduction", "STRING", 0)]),
    ("Split", 18, [("axis", "INT", 0), ("num_outputs", "INT", 0)]),
] + [(op, 18, REDUCE) for op in ["ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
                                  "ReduceMin", "ReduceProd", "ReduceSumSquare"]] + [
    # opset 19 (ONNX 1.14)
    ("AveragePool", 19, POOL + [("count_include_pad", "INT", 0)]),
    ("Cast", 19, [("saturate", "INT", 0), ("to", "INT", 1)]),
    ("CastLike", 19, [("saturate", "INT", 0)]),
    ("Constant", 19, CONSTANT),
    ("DequantizeLinear", 19, [("axis", "INT", 0)]),
    ("Equal", 19, []),
    ("Identity", 19, []),
    ("If", 19, [("else_branch", "GRAPH", 1), ("then_branch", "GRAPH", 1)]),
    ("Loop", 19, [("body", "GRAPH", 1)]),
    ("Pad", 19, [("mode", "STRING", 0)]),
    ("QuantizeLinear", 19, [("axis", "INT", 0), ("saturate", "INT", 0)]),
    ("Reshape", 19, [("allowzero", "INT", 0)]),
    ("Resize", 19, RESIZE),
    ("Shape", 19, [("end", "INT", 0), ("start", "INT", 0)]),
    ("Size", 19, []),
    # opset 20 (ONNX 1.15)
    ("ConstantOfShape", 20, [("value", "TENSOR", 0)]),
    ("DFT", 20, [("inverse", "INT", 0), ("onesided", "INT", 0)]),
    ("Gelu", 20, [("approximate", "STRING", 0)]),
    ("IsInf", 20, [("detect_negative", "INT", 0), ("detect_positive", "INT", 0)]),
    ("IsNaN", 20, []),
    ("ReduceMax", 20, REDUCE), ("ReduceMin", 20, REDUCE),
    # opset 21 (ONNX 1.16)
    ("Cast", 21, [("saturate", "INT", 0), ("to", "INT", 1)]),
    ("CastLike", 21, [("saturate", "INT", 0)]),
    ("Constant", 21, CONSTANT),
    ("ConstantOfShape", 21, [("value", "TENSOR", 0)]),
    ("DequantizeLinear", 21, [("axis", "INT", 0), ("block_size", "INT", 0)]),
    ("Flatten", 21, [("axis", "INT", 0)]),
    ("GroupNormalization", 21, [("epsilon", "FLOAT", 0), ("num_groups", "INT", 1), ("stash_type", "INT", 0)]),
    ("Identity", 21, []),
    ("If", 21, [("else_branch", "GRAPH", 1), ("then_branch", "GRAPH", 1)]),
    ("Loop", 21, [("body", "GRAPH", 1)]),
    ("Pad", 21, [("mode", "STRING", 0)]),
    ("QuantizeLinear", 21, [("axis", "INT", 0), ("block_size", "INT", 0), ("output_dtype", "INT", 0),
                            ("saturate", "INT", 0)]),
    ("Reshape", 21, [("allowzero", "INT", 0)]),
    ("Shape", 21, [("end", "INT", 0), ("start", "INT", 0)]),
    ("Size", 21, []),
    ("Squeeze", 21, []),
    ("Transpose", 21, [("perm", "INTS", 0)]),
    ("Unsqueeze", 21, []),
]


# Formal inputs / outputs of the opset 18-21 versions whose signature differs from the operator's previous
# version (or that are new): ("name:S|O|V:type,...", min, max) for inputs, then for outputs, then the type
# constraints. Versions not listed keep the signature of the previous version of the operator.
INF = 2147483647
FLOATS = "f16|bf16|f32|f64"
INTS = "i8|i16|i32|i64|u8|u16|u32|u64"
ALL = FLOATS + "|" + INTS + "|bool"
REDUCE_IO = (("data:S:T,axes:O:!i64", 1, 2), ("reduced:S:T", 1, 1), "T=" + FLOATS + "|i32|i64|u32|u64|i8|u8")
SIGNATURES = {
    ("BitwiseAnd", 18): (("A:S:T,B:S:T", 2, 2), ("C:S:T", 1, 1), "T=" + INTS),
    ("BitwiseOr", 18): (("A:S:T,B:S:T", 2, 2), ("C:S:T", 1, 1), "T=" + INTS),
    ("BitwiseXor", 18): (("A:S:T,B:S:T", 2, 2), ("C:S:T", 1, 1), "T=" + INTS),
    ("BitwiseNot", 18): (("X:S:T", 1, 1), ("Y:S:T", 1, 1), "T=" + INTS),
    ("CenterCropPad", 18): (("input_data:S:T,shape:S:Tind", 2, 2), ("output_data:S:T", 1, 1), "T=" + ALL + ";Tind=i32|i64"),
    ("Col2Im", 18): (("input:S:T,image_shape:S:!i64,block_shape:S:!i64", 3, 3), ("output:S:T", 1, 1), "T=" + ALL),
    ("GroupNormalization", 18): (("X:S:T,scale:S:T,bias:S:T", 3, 3), ("Y:S:T", 1, 1), "T=" + FLOATS),
    ("Mish", 18): (("X:S:T", 1, 1), ("Y:S:T", 1, 1), "T=" + FLOATS),
    ("Pad", 18): (("data:S:T,pads:S:!i64,constant_value:O:T,axes:O:Tind", 2, 4), ("output:S:T", 1, 1),
                  "T=" + ALL + ";Tind=i32|i64"),
    ("Split", 18): (("input:S:T,split:O:!i64", 1, 2), ("outputs:V:T", 1, INF), "T=" + ALL),
    ("Gelu", 20): (("X:S:T", 1, 1), ("Y:S:T", 1, 1), "T=" + FLOATS),
    ("DFT", 20): (("input:S:T1,dft_length:O:T2,axis:O:!i64", 1, 3), ("output:S:T1", 1, 1), "T1=" + FLOATS + ";T2=i32|i64"),
    # Opset 19: float16 / bfloat16 x and scales (float8 types: clusterjit has none); opset 21 adds int16 /
    # uint16 / int4 / uint4 and blocked quantization.
    ("QuantizeLinear", 19): (("x:S:T1,y_scale:S:T1,y_zero_point:O:T2", 2, 3), ("y:S:T2", 1, 1),
                             "T1=f32|f16|bf16|i32;T2=i8|u8"),
    ("DequantizeLinear", 19): (("x:S:T1,x_scale:S:T2,x_zero_point:O:T1", 2, 3), ("y:S:T2", 1, 1),
                               "T1=i8|u8|i32;T2=f32|f16|bf16"),
    ("QuantizeLinear", 21): (("x:S:T1,y_scale:S:T1,y_zero_point:O:T2", 2, 3), ("y:S:T2", 1, 1),
                             "T1=f32|f16|bf16|i32;T2=i8|u8|i16|u16|u4|i4"),
    ("DequantizeLinear", 21): (("x:S:T1,x_scale:S:T2,x_zero_point:O:T1", 2, 3), ("y:S:T2", 1, 1),
                               "T1=i8|u8|i16|u16|i32|u4|i4;T2=f32|f16|bf16"),
}
for _op in ["ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin",
            "ReduceProd", "ReduceSumSquare"]:
    SIGNATURES[(_op, 18)] = REDUCE_IO
SIGNATURES[("ReduceMax", 20)] = (REDUCE_IO[0], REDUCE_IO[1], REDUCE_IO[2] + "|bool")
SIGNATURES[("ReduceMin", 20)] = SIGNATURES[("ReduceMax", 20)]
DTYPES = {"float": "f32", "double": "f64", "float16": "f16", "bfloat16": "bf16", "int8": "i8", "uint8": "u8",
          "int16": "i16", "uint16": "u16", "int32": "i32", "int64": "i64", "uint32": "u32", "uint64": "u64",
          "bool": "bool"}


def option(p):
    o = int(p.option)
    return "S" if o == 0 else "O" if o == 1 else ("V" if p.isHomogeneous else "H")


def type_of(p):
    t = p.typeStr
    if t.startswith("tensor(") and t.endswith(")"):
        return "!" + DTYPES.get(t[7:-1], "none")
    return t


def formals(params):
    return ",".join("%s:%s:%s" % (p.name, option(p), type_of(p)) for p in params)


def constraints(schema):
    out = []
    for c in schema.type_constraints:
        types = [DTYPES[t[7:-1]] for t in c.allowed_type_strs
                 if t.startswith("tensor(") and t[7:-1] in DTYPES]
        out.append("%s=%s" % (c.type_param_str, "|".join(types)))
    return ";".join(out)


def main():
    rows = []
    for s in onnx.defs.get_all_schemas_with_history():
        if s.domain not in ("", "ai.onnx"):
            continue
        attrs = sorted((a.name, TYPES[int(a.type)], 1 if a.required else 0) for a in s.attributes.values())
        io = ((formals(s.inputs), s.min_input, s.max_input), (formals(s.outputs), s.min_output, s.max_output),
              constraints(s))
        rows.append((s.name, s.since_version, attrs, 1 if s.deprecated else 0, io))
    for op, since, attrs in NEWER:
        io = SIGNATURES.get((op, since))
        if io is None:
            earlier = [r for r in rows if r[0] == op and r[1] < since]
            if not earlier:
                raise SystemExit("gen_op_schemas: no signature for new operator %s-%d" % (op, since))
            io = max(earlier, key=lambda r: r[1])[4]
        rows.append((op, since, sorted(attrs), 0, io))
    rows.sort()
    print("// Generated by tools/gen_op_schemas.py; do not edit. ONNX %s schemas (opsets <= 17) + the operator"
          % onnx.__version__)
    print("// versions of opsets 18-21 that clusterjit supports (ONNX operator specification).")
    print("// {op, since_version, deprecated, \"attr:TYPE:required,...\", \"input:S|O|V|H:type,...\", min inputs,")
    print("//  max inputs, \"output:...\", min outputs, max outputs, \"T=f32|f64;...\"}")
    for op, since, attrs, dep, ((ins, imin, imax), (outs, omin, omax), cons) in rows:
        text = ",".join("%s:%s:%d" % a for a in attrs)
        print('{"%s", %d, %d, "%s", "%s", %d, %d, "%s", %d, %d, "%s"},' % (op, since, dep, text, ins, imin, imax, outs,
                                                                          omin, omax, cons))


if __name__ == "__main__":
    main()
