#!/usr/bin/python3
"""Writes three models that use ONNX sequences or strings inside (tensor inputs and outputs, so ONNX Runtime's
Node binding runs them too), each as a test-data directory (model.onnx + test_data_set_0/input_*.pb):

  list_loop   What torch.onnx exports for ``torch.stack([f(x[i]) for i in range(n)])`` and for detection
              post-processing loops (opset 17): Loop over the n = 512 rows of x [512, 256]; the body gathers
              row i, applies Relu(row * w + b), and appends it with SequenceInsert; ConcatFromSequence
              (new_axis = 1) stacks the list and a Softmax over the last axis follows.
  split_map   SplitToSequence of x [64, 4096] into 64 rows, SequenceMap with a body Sigmoid(row) * row,
              ConcatFromSequence along axis 0.
  text_tfidf  A scikit-learn-style text featurizer (sklearn-onnx's shape): StringNormalizer (lower case,
              English stopwords) of 4,096 tokens, then TfIdfVectorizer (1- and 2-grams, TFIDF) over a pool of
              2,000 words and 1,000 bigrams; then a Gemm classifier head [3000 -> 16].

usage: make_sequence_models.py OUT_DIR
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

import onnx_builder

RNG = np.random.default_rng(11)
F = TensorProto.FLOAT


def write(out, name, graph, opset, inputs):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    save(onnx_builder.model_from_graph(graph, opset, ir_version=8, check=True), os.path.join(d, "model.onnx"))
    onnx_builder.write_test_data(d, inputs)


def list_loop(out):
    rows, width = 512, 256
    w = numpy_helper.from_array(RNG.normal(0, 1, width).astype(np.float32), "w")
    b = numpy_helper.from_array(RNG.normal(0, 0.1, width).astype(np.float32), "b")
    n = numpy_helper.from_array(np.array(rows, np.int64), "n")
    body = helper.make_graph([
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
        helper.make_node("Mul", ["row", "w"], ["scaled"]),
        helper.make_node("Add", ["scaled", "b"], ["shifted"]),
        helper.make_node("Relu", ["shifted"], ["act"]),
        helper.make_node("SequenceInsert", ["acc", "act"], ["acc_out"]),
    ], "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                helper.make_tensor_sequence_value_info("acc", F, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("acc_out", F, None)])
    g = helper.make_graph([
        helper.make_node("SequenceEmpty", [], ["empty"], dtype=F),
        helper.make_node("Loop", ["n", "", "empty"], ["list"], body=body),
        helper.make_node("ConcatFromSequence", ["list"], ["stacked"], axis=0, new_axis=1),
        helper.make_node("Softmax", ["stacked"], ["y"], axis=-1),
    ], "list_loop", [helper.make_tensor_value_info("x", F, [rows, width])],
        [helper.make_tensor_value_info("y", F, [rows, width])], initializer=[w, b, n])
    write(out, "list_loop", g, 17, [("x", RNG.normal(0, 1, (rows, width)).astype(np.float32))])


def split_map(out):
    rows, width = 64, 4096
    body = helper.make_graph([
        helper.make_node("Sigmoid", ["r"], ["s"]),
        helper.make_node("Mul", ["s", "r"], ["o"]),
    ], "map_body", [helper.make_tensor_value_info("r", F, [1, width])], [helper.make_tensor_value_info("o", F, [1, width])])
    g = helper.make_graph([
        helper.make_node("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=1),
        helper.make_node("SequenceMap", ["rows"], ["mapped"], body=body),
        helper.make_node("ConcatFromSequence", ["mapped"], ["y"], axis=0),
    ], "split_map", [helper.make_tensor_value_info("x", F, [rows, width])],
        [helper.make_tensor_value_info("y", F, [rows, width])])
    write(out, "split_map", g, 17, [("x", RNG.normal(0, 1, (rows, width)).astype(np.float32))])


def text_tfidf(out):
    vocab = ["w%d" % i for i in range(2000)]
    bigrams = [(vocab[RNG.integers(0, 2000)], vocab[RNG.integers(0, 2000)]) for _ in range(1000)]
    pool = vocab + [w for pair in bigrams for w in pair]
    stop = ["the", "a", "of", "and", "to"]
    tokens = np.array([("W%d" % RNG.integers(0, 2400)) if RNG.random() > 0.1 else stop[RNG.integers(0, 5)]
                       for _ in range(4096)], dtype=object)
    head_w = numpy_helper.from_array(RNG.normal(0, 0.05, (3000, 16)).astype(np.float32), "head_w")
    head_b = numpy_helper.from_array(np.zeros(16, np.float32), "head_b")
    g = helper.make_graph([
        helper.make_node("StringNormalizer", ["text"], ["norm"], case_change_action="LOWER", stopwords=stop,
                         locale="C"),  # ORT builds a std::locale of it; C(.UTF-8) exists everywhere
        helper.make_node("TfIdfVectorizer", ["norm"], ["tf"], mode="TFIDF", min_gram_length=1, max_gram_length=2,
                         max_skip_count=0, ngram_counts=[0, 2000], ngram_indexes=list(range(3000)),
                         pool_strings=pool, weights=list(RNG.uniform(0.5, 2, 3000).astype(np.float32))),
        helper.make_node("Unsqueeze", ["tf", "zero"], ["tf2"]),
        helper.make_node("Gemm", ["tf2", "head_w", "head_b"], ["y"]),
    ], "text_tfidf", [helper.make_tensor_value_info("text", TensorProto.STRING, [4096])],
        [helper.make_tensor_value_info("y", F, [1, 16])],
        initializer=[head_w, head_b, numpy_helper.from_array(np.array([0], np.int64), "zero")])
    write(out, "text_tfidf", g, 13, [("text", tokens)])


def main():
    out = sys.argv[1]
    list_loop(out)
    split_map(out)
    text_tfidf(out)
    print("wrote list_loop, split_map, text_tfidf in", out)


if __name__ == "__main__":
    main()
