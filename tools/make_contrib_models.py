#!/usr/bin/python3
"""Writes transformer models in the form ONNX Runtime's own tooling leaves them (seeded random weights), to
run clusterjit and ONNX Runtime side by side on com.microsoft contrib ops:

  bert_ort_optimized  what ORT's transformers optimizer makes of a BERT encoder: EmbedLayerNormalization
                      (word + position + segment, mask -> mask_index), then per layer Attention (packed QKV,
                      mask_index), SkipLayerNormalization, MatMul + FastGelu(bias), MatMul,
                      SkipLayerNormalization. 4 layers, hidden 256, 4 heads, intermediate 1024, opset 14.
                      Inputs input_ids / segment_ids / attention_mask int32 [1, 128].
  llm_decode_gqa      one decode step of an onnxruntime-genai style decoder: token embedding Gather, per
                      layer SimplifiedLayerNormalization (RMSNorm), MatMulNBits (4-bit, block 32) packed QKV
                      projection, GroupQueryAttention (8 query / 2 kv heads of 64, rotary from cos/sin caches,
                      KV cache in and out), MatMulNBits output projection, SkipSimplifiedLayerNormalization,
                      SiLU-gated MLP in MatMulNBits, and a MatMulNBits LM head. 4 layers, hidden 512, vocab 4096,
                      opset 17. Inputs input_ids int64 [1, 1], past_key_values.L.key/value float [1, 2, 127, 64],
                      seqlens_k int32 [1], total_sequence_length int32 [].

Operator contracts: ONNX Runtime's docs/ContribOperators.md.

--small writes the same graphs at test size (hidden 64 / 128, 2 layers, 16 tokens, 7 cached tokens, vocab 256):
tests/data/contrib_transformer holds them with ONNX Runtime's outputs.

usage: make_contrib_models.py OUT_DIR [--small]   (writes OUT_DIR/<model>/model.onnx)
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnx_builder

RNG = np.random.default_rng(11)
MS = "com.microsoft"


class Builder:
    def __init__(self):
        self.nodes, self.inits, self.count = [], [], 0

    def fresh(self, prefix):
        self.count += 1
        return "%s_%d" % (prefix, self.count)

    def const(self, prefix, a):
        n = self.fresh(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(a), n))
        return n

    def node(self, op, ins, outputs=1, domain="", names=None, **attrs):
        outs = names or [self.fresh(op.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op, ins, outs, name=self.fresh(op), domain=domain, **attrs))
        return outs[0] if len(outs) == 1 else outs

    def save(self, path, inputs, outputs, opset):
        m = onnx_builder.make_model(self.nodes, os.path.basename(os.path.dirname(path)), inputs, outputs, self.inits,
                                    opset, [(MS, 1)], ir_version=8)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        onnx.save(m, path)


def w(*shape, scale=None):
    scale = scale if scale is not None else 1.0 / np.sqrt(shape[0])
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def bert(out, small):
    b = Builder()
    hidden, heads, inter, layers, seq = (64, 4, 128, 2, 16) if small else (256, 4, 1024, 4, 128)
    gamma = lambda: (1 + 0.1 * RNG.standard_normal(hidden)).astype(np.float32)  # noqa: E731
    beta = lambda: (0.1 * RNG.standard_normal(hidden)).astype(np.float32)  # noqa: E731
    vocab, positions = (100, 32) if small else (1000, 512)
    x, mask_index = b.node("EmbedLayerNormalization",
                           ["input_ids", "segment_ids", b.const("word", w(vocab, hidden, scale=0.5)),
                            b.const("pos", w(positions, hidden, scale=0.5)), b.const("seg", w(2, hidden, scale=0.5)),
                            b.const("g", gamma()), b.const("b", beta()), "attention_mask"],
                           outputs=2, domain=MS, epsilon=1e-12)
    for _ in range(layers):
        a = b.node("Attention", [x, b.const("qkv_w", w(hidden, 3 * hidden)), b.const("qkv_b", w(3 * hidden, scale=0.02)),
                                 mask_index], domain=MS, num_heads=heads)
        a = b.node("MatMul", [a, b.const("o_w", w(hidden, hidden))])
        x = b.node("SkipLayerNormalization", [a, x, b.const("g", gamma()), b.const("b", beta()),
                                              b.const("o_b", w(hidden, scale=0.02))], domain=MS, epsilon=1e-12)
        h = b.node("MatMul", [x, b.const("fc1", w(hidden, inter))])
        h = b.node("FastGelu", [h, b.const("fc1_b", w(inter, scale=0.02))], domain=MS)
        h = b.node("MatMul", [h, b.const("fc2", w(inter, hidden))])
        x = b.node("SkipLayerNormalization", [h, x, b.const("g", gamma()), b.const("b", beta()),
                                              b.const("fc2_b", w(hidden, scale=0.02))], domain=MS, epsilon=1e-12)
    b.node("Identity", [x], names=["last_hidden_state"])
    ids = [helper.make_tensor_value_info(n, TensorProto.INT32, [1, seq])
           for n in ("input_ids", "segment_ids", "attention_mask")]
    b.save(os.path.join(out, "bert_ort_optimized", "model.onnx"), ids,
           [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, seq, hidden])], opset=14)


def nbits(b, k, n, block=32):
    """MatMulNBits weights: 4-bit codes [N, K/block, block/2] (two per byte, low nibble first), scales."""
    codes = RNG.integers(0, 16, (n, k // block, block)).astype(np.uint8)
    packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    scales = (RNG.uniform(0.5, 1.5, (n, k // block)) / (8 * np.sqrt(k))).astype(np.float32)
    return b.const("nbits", packed), b.const("scales", scales.reshape(-1))


def matmul_nbits(b, x, k, n):
    q, s = nbits(b, k, n)
    return b.node("MatMulNBits", [x, q, s], domain=MS, K=k, N=n, bits=4, block_size=32)


def decoder(out, small):
    b = Builder()
    hidden, heads, kv_heads, head, inter, layers, vocab, past = ((128, 4, 2, 32, 256, 2, 256, 7) if small else
                                                                 (512, 8, 2, 64, 1408, 4, 4096, 127))
    theta = np.arange(32 if small else 2048)[:, None] * (10000.0 ** (-np.arange(head // 2) / (head // 2)))[None, :]
    cos, sin = b.const("cos_cache", np.cos(theta).astype(np.float32)), b.const("sin_cache", np.sin(theta).astype(np.float32))
    x = b.node("Gather", [b.const("embed", w(vocab, hidden, scale=0.5)), "input_ids"])
    norm_w = lambda: (1 + 0.1 * RNG.standard_normal(hidden)).astype(np.float32)  # noqa: E731
    inputs, outputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, 1])], []
    h = b.node("SimplifiedLayerNormalization", [x, b.const("ln", norm_w())], epsilon=1e-6)
    residual = x
    for layer in range(layers):
        qkv = matmul_nbits(b, h, hidden, (heads + 2 * kv_heads) * head)
        pk, pv = "past_key_values.%d.key" % layer, "past_key_values.%d.value" % layer
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, kv_heads, past, head]) for n in (pk, pv)]
        names = ["attn_%d" % layer, "present.%d.key" % layer, "present.%d.value" % layer]
        a = b.node("GroupQueryAttention", [qkv, "", "", pk, pv, "seqlens_k", "total_sequence_length", cos, sin],
                   domain=MS, names=names, num_heads=heads, kv_num_heads=kv_heads, do_rotary=1)[0]
        outputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, kv_heads, past + 1, head]) for n in names[1:]]
        a = matmul_nbits(b, a, heads * head, hidden)
        h, _, _, residual = b.node("SkipSimplifiedLayerNormalization", [a, residual, b.const("ln", norm_w())],
                                   outputs=4, domain=MS, epsilon=1e-6)
        gate = matmul_nbits(b, h, hidden, inter)
        up = matmul_nbits(b, h, hidden, inter)
        m = b.node("Mul", [b.node("Mul", [gate, b.node("Sigmoid", [gate])]), up])
        d = matmul_nbits(b, m, inter, hidden)
        if layer + 1 < layers:
            h, _, _, residual = b.node("SkipSimplifiedLayerNormalization", [d, residual, b.const("ln", norm_w())],
                                       outputs=4, domain=MS, epsilon=1e-6)
        else:
            h = b.node("SkipSimplifiedLayerNormalization", [d, residual, b.const("ln", norm_w())], domain=MS,
                       epsilon=1e-6)
    logits = matmul_nbits(b, h, hidden, vocab)
    b.node("Identity", [logits], names=["logits"])
    inputs += [helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, [1]),
               helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, [])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1, vocab])] + outputs
    b.save(os.path.join(out, "llm_decode_gqa", "model.onnx"), inputs, outputs, opset=17)


def main():
    out = sys.argv[1]
    small = "--small" in sys.argv[2:]
    bert(out, small)
    decoder(out, small)


if __name__ == "__main__":
    main()
