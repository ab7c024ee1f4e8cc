#!/usr/bin/python3
"""Operators beyond the float32 core that ONNX models from other tools carry: opset 1-6 legacy
broadcasting, signal ops (DFT, STFT, MelWeightMatrix), detection ops (RoiAlign) and ONNX Runtime's
com.microsoft contrib ops. Each case is checked against an independent numpy (float64) computation written
here from the ONNX operator specification (https://onnx.ai/onnx/operators/) or ONNX Runtime's contrib-op
documentation (https://github.com/microsoft/onnxruntime/blob/main/docs/ContribOperators.md). Writes one
ONNX test-data directory per case; tests/op_reference_suite.sh runs them on both paths.

usage: coverage_suite.py OUT_DIR
"""
import os
import sys

import numpy as np
from onnx import helper

import case_writer

RNG = np.random.default_rng(42)
rnd = case_writer.uniform_sampler(RNG)


def f32(a):
    return np.asarray(a, dtype=np.float32)


def legacy_cases(root):
    # Opset 6 Caffe2-style bias adds: B aligned at `axis` of A, where A comes from a node (rank unknown at
    # import). Legacy broadcasting (ONNX docs/Broadcasting.md): B's dims match A's dims axis, axis+1, ...
    x = rnd(2, 3, 4, 5)
    for op, fn in (("Add", np.add), ("Mul", np.multiply), ("Sub", np.subtract), ("Div", np.divide)):
        for axis, bshape in ((1, (3,)), (1, (3, 4)), (2, (4, 5)), (0, (2, 1, 4))):
            b = rnd(*bshape, lo=0.5, hi=2.0)
            aligned = b.reshape(bshape + (1,) * (4 - axis - len(bshape)))
            case_writer.write_case(
                root, "legacy_%s_axis%d_rank%d" % (op, axis, len(bshape)),
                [helper.make_node("Relu", ["x"], ["r"]),
                 helper.make_node(op, ["r", "b"], ["y"], broadcast=1, axis=axis)],
                [("x", x)], [("y", f32(fn(np.maximum(x, 0).astype(np.float64), aligned)))], opset=6,
                inits=[("b", b)], tol=(1e-5, 1e-6), declare_output_shapes=False)
    slope = rnd(3, lo=0.1, hi=0.5)
    case_writer.write_case(
        root, "legacy_PRelu_channel_slope",
        [helper.make_node("Identity", ["x"], ["r"]), helper.make_node("PRelu", ["r", "s"], ["y"])],
        [("x", x)], [("y", f32(np.where(x > 0, x, x * slope.reshape(3, 1, 1))))], opset=6,
        inits=[("s", slope)], tol=(1e-6, 1e-7), declare_output_shapes=False)


def ri(z):
    """complex array -> [..., 2] float (real, imaginary), as the DFT/STFT outputs lay it out."""
    return np.stack([z.real, z.imag], axis=-1)


def dft_cases(root):
    # DFT: np.fft in float64 is the reference (https://onnx.ai/onnx/operators/onnx__DFT.html).
    def case(name, x, y, opset, dft_length=None, axis_input=None, dtype=np.float32, tol=(2e-4, 2e-4), **attrs):
        names = ["x", "n" if dft_length is not None else ""]
        inits = [("n", np.array(dft_length, np.int64))] if dft_length is not None else []
        if axis_input is not None:
            names.append("axis")
            inits.append(("axis", np.array(axis_input, np.int64)))
        while names and names[-1] == "":
            names.pop()
        case_writer.write_case(root, "dft_" + name, [helper.make_node("DFT", names, ["y"], **attrs)],
                               [("x", x.astype(dtype))], [("y", y.astype(dtype))], opset=opset, inits=inits, tol=tol,
                               declare_output_shapes=False)

    for n in (16, 400, 97, 15, 1):  # power of two, 2^4 * 5^2, a prime (generic radix), odd composite, one
        x = rnd(3, n, 1)
        case("real_n%d" % n, x, ri(np.fft.fft(x[..., 0].astype(np.float64), axis=1)), 17, axis=1)
        case("real_onesided_n%d" % n, x, ri(np.fft.rfft(x[..., 0].astype(np.float64), axis=1)), 17, axis=1, onesided=1)
        c = rnd(2, n, 2)
        z = c[..., 0] + 1j * c[..., 1].astype(np.float64)
        case("complex_n%d" % n, c, ri(np.fft.fft(z, axis=1)), 17, axis=1)
        case("inverse_n%d" % n, c, ri(np.fft.ifft(z, axis=1)), 17, axis=1, inverse=1)
    x = rnd(2, 6, 10, 1)
    case("axis2_of_4d", x, ri(np.fft.fft(x[..., 0].astype(np.float64), axis=2)), 17, axis=2)
    case("axis1_of_4d_onesided", x, ri(np.fft.rfft(x[..., 0].astype(np.float64), axis=1)), 17, axis=1, onesided=1)
    case("dft_length_pads", x, ri(np.fft.fft(x[..., 0].astype(np.float64), n=16, axis=2)), 17, dft_length=16, axis=2)
    case("dft_length_truncates", x, ri(np.fft.fft(x[..., 0].astype(np.float64), n=7, axis=2)), 17, dft_length=7,
         axis=2)
    case("float64", x, ri(np.fft.fft(x[..., 0].astype(np.float64), axis=2)), 17, axis=2, dtype=np.float64,
         tol=(1e-10, 1e-10))
    # Opset 20: the axis is an input (default -2, the last signal dim).
    case("opset20_default_axis", x, ri(np.fft.fft(x[..., 0].astype(np.float64), axis=2)), 20)
    case("opset20_axis_input", x, ri(np.fft.fft(x[..., 0].astype(np.float64), axis=1)), 20, axis_input=-3)
    case("opset20_axis_input_onesided_length", x, ri(np.fft.rfft(x[..., 0].astype(np.float64), n=12, axis=1)), 20,
         dft_length=12, axis_input=1, onesided=1)


def stft_cases(root):
    # STFT-17: frames of frame_length every frame_step samples, times the window, then a DFT (no centering).
    def ref(sig, step, window, frame, onesided):
        frames = 1 + (sig.shape[1] - frame) // step
        out = []
        for f in range(frames):
            seg = sig[:, f * step:f * step + frame].astype(np.complex128) * window
            out.append(np.fft.fft(seg, axis=1)[:, :frame // 2 + 1 if onesided else frame])
        return ri(np.stack(out, axis=1))

    sig = rnd(2, 1000, 1)
    win = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(400) / 400)).astype(np.float32)
    for name, step, window, frame, onesided, inputs in (
            ("hann_400_160", 160, win, 400, 1, ["x", "step", "w"]),
            ("hann_400_160_twosided", 160, win, 400, 0, ["x", "step", "w"]),
            ("frame_length_only", 100, np.ones(256, np.float32), 256, 1, ["x", "step", "", "len"]),
            ("window_and_length", 128, win[:256] * 0 + np.hamming(256).astype(np.float32), 256, 1,
             ["x", "step", "w", "len"])):
        inits = [("step", np.array(step, np.int64))]
        if "w" in inputs:
            inits.append(("w", window.astype(np.float32)))
        if "len" in inputs:
            inits.append(("len", np.array(frame, np.int64)))
        case_writer.write_case(
            root, "stft_" + name, [helper.make_node("STFT", inputs, ["y"], onesided=onesided)], [("x", sig)],
            [("y", f32(ref(sig[..., 0], step, window.astype(np.float64), frame, onesided)))], opset=17, inits=inits,
            tol=(2e-4, 5e-4), declare_output_shapes=False)
    c = rnd(1, 300, 2)
    z = c[..., 0] + 1j * c[..., 1].astype(np.float64)
    case_writer.write_case(
        root, "stft_complex_signal",
        [helper.make_node("STFT", ["x", "step", "", "len"], ["y"], onesided=0)], [("x", c)],
        [("y", f32(ref(z, 50, np.ones(64), 64, 0)))], opset=17,
        inits=[("step", np.array(50, np.int64)), ("len", np.array(64, np.int64))], tol=(2e-4, 5e-4),
        declare_output_shapes=False)


def mel_reference(mels, dft_length, rate, low, high):
    """The ONNX reference's triangular filters, written from its definition (spec + reference op)."""
    def to_mel(hz):
        return 2595.0 * np.log10(1.0 + hz / 700.0)
    step = (to_mel(high) - to_mel(low)) / (mels + 2)
    hz = 700.0 * (10.0 ** ((np.arange(mels + 2) * step + to_mel(low)) / 2595.0) - 1.0)
    pts = np.floor((dft_length + 1) * hz / rate).astype(int)
    w = np.zeros((dft_length // 2 + 1, mels))
    for i in range(mels):
        lo, ce, hi = pts[i], pts[i + 1], pts[i + 2]
        if ce == lo:
            w[ce, i] = 1
        else:
            w[lo:ce + 1, i] = (np.arange(lo, ce + 1) - lo) / (ce - lo)
        if hi > ce:
            w[ce:hi, i] = (hi - np.arange(ce, hi)) / (hi - ce)
    return w


def mel_cases(root):
    for name, mels, n, rate, low, high in (("whisper_like", 80, 400, 16000, 0.0, 8000.0),
                                           ("kws_40", 40, 512, 16000, 20.0, 7600.0),
                                           ("small", 8, 64, 8000, 100.0, 3000.0)):
        inits = [("m", np.array(mels, np.int64)), ("n", np.array(n, np.int64)), ("r", np.array(rate, np.int64)),
                 ("lo", np.array(low, np.float32)), ("hi", np.array(high, np.float32))]
        case_writer.write_case(root, "mel_" + name,
                               [helper.make_node("MelWeightMatrix", ["m", "n", "r", "lo", "hi"], ["y"])], [],
                               [("y", f32(mel_reference(mels, n, rate, low, high)))], opset=17, inits=inits,
                               tol=(1e-6, 1e-6))
    # A log-mel front end: STFT -> power -> MatMul by the mel matrix, as exported speech models do.
    sig = rnd(1, 4000, 1)
    win = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(400) / 400)).astype(np.float32)
    frames = np.stack([np.fft.rfft(sig[0, f * 160:f * 160 + 400, 0].astype(np.float64) * win)
                       for f in range(1 + (4000 - 400) // 160)])
    power = np.abs(frames) ** 2
    logmel = np.log(power @ mel_reference(80, 400, 16000, 0.0, 8000.0) + 1e-6)
    nodes = [helper.make_node("STFT", ["x", "step", "w"], ["s"]),
             helper.make_node("Mul", ["s", "s"], ["s2"]),
             helper.make_node("ReduceSum", ["s2", "last"], ["p"], keepdims=0),
             helper.make_node("MelWeightMatrix", ["m", "n", "r", "lo", "hi"], ["mel"]),
             helper.make_node("MatMul", ["p", "mel"], ["pm"]),
             helper.make_node("Add", ["pm", "eps"], ["pe"]),
             helper.make_node("Log", ["pe"], ["y"])]
    inits = [("step", np.array(160, np.int64)), ("w", win), ("last", np.array([-1], np.int64)),
             ("m", np.array(80, np.int64)), ("n", np.array(400, np.int64)), ("r", np.array(16000, np.int64)),
             ("lo", np.array(0.0, np.float32)), ("hi", np.array(8000.0, np.float32)),
             ("eps", np.array(1e-6, np.float32))]
    case_writer.write_case(root, "mel_log_mel_frontend", nodes, [("x", sig)], [("y", f32(logmel[None]))], opset=17,
                           inits=inits, tol=(1e-3, 2e-3), declare_output_shapes=False)


def roi_align_reference(x, rois, batch, oh, ow, ratio, scale, mode, half_pixel):
    """RoiAlign from the ONNX operator text and its reference: grid samples per bin, bilinear weights,
    samples outside [-1, H] x [-1, W] count as zero; max mode takes the largest weighted corner."""
    n_rois, (c, h, w) = rois.shape[0], x.shape[1:]
    y = np.zeros((n_rois, c, oh, ow))
    for r in range(n_rois):
        off = 0.5 if half_pixel else 0.0
        x1, y1, x2, y2 = rois[r].astype(np.float64) * scale - off
        rw, rh = x2 - x1, y2 - y1
        if not half_pixel:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        gh = ratio if ratio > 0 else int(np.ceil(rh / oh))
        gw = ratio if ratio > 0 else int(np.ceil(rw / ow))
        plane = x[batch[r]].astype(np.float64)
        for ph in range(oh):
            for pw in range(ow):
                vals = []
                for iy in range(gh):
                    for ix in range(gw):
                        yy = y1 + ph * rh / oh + (iy + 0.5) * rh / oh / gh
                        xx = x1 + pw * rw / ow + (ix + 0.5) * rw / ow / gw
                        if yy < -1 or yy > h or xx < -1 or xx > w:
                            vals.append(np.zeros((4, c)))
                            continue
                        yy, xx = max(yy, 0.0), max(xx, 0.0)
                        yl, xl = int(yy), int(xx)
                        yh, xh = min(yl + 1, h - 1), min(xl + 1, w - 1)
                        if yl >= h - 1:
                            yl, yy = h - 1, float(h - 1)
                        if xl >= w - 1:
                            xl, xx = w - 1, float(w - 1)
                        ly, lx = yy - yl, xx - xl
                        vals.append(np.stack([(1 - ly) * (1 - lx) * plane[:, yl, xl], (1 - ly) * lx * plane[:, yl, xh],
                                              ly * (1 - lx) * plane[:, yh, xl], ly * lx * plane[:, yh, xh]]))
                v = np.stack(vals)  # [samples, 4, c]
                if mode == "avg":
                    y[r, :, ph, pw] = v.sum(axis=(0, 1)) / max(gh * gw, 1)
                else:
                    y[r, :, ph, pw] = v.max(axis=1).max(axis=0)
    return y


def roi_align_cases(root):
    x = rnd(2, 8, 20, 24)
    rois = np.array([[0, 0, 9, 9], [2.5, 3.1, 15.2, 11.7], [10, 4, 23, 19], [-3, -2, 5, 4], [20, 15, 30, 25],
                     [4, 4, 4.2, 4.1]], np.float32)
    batch = np.array([0, 1, 1, 0, 1, 0], np.int64)
    for name, oh, ow, ratio, scale, mode, ctm, opset in (
            ("avg_half_pixel", 5, 5, 2, 1.0, "avg", "half_pixel", 16),
            ("avg_adaptive_grid", 3, 4, 0, 1.0, "avg", "half_pixel", 16),
            ("avg_output_half_pixel", 4, 4, 2, 1.0, "avg", "output_half_pixel", 16),
            ("opset10_scale", 7, 7, 0, 0.5, "avg", None, 10),
            ("max", 3, 3, 2, 1.0, "max", "half_pixel", 16)):
        attrs = dict(output_height=oh, output_width=ow, sampling_ratio=ratio, spatial_scale=scale, mode=mode)
        if ctm is not None:
            attrs["coordinate_transformation_mode"] = ctm
        ref = roi_align_reference(x, rois, batch, oh, ow, ratio, scale, mode, ctm != "output_half_pixel" and opset >= 16)
        case_writer.write_case(root, "roialign_" + name,
                               [helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], **attrs)],
                               [("x", x), ("rois", rois), ("bi", batch)], [("y", f32(ref))], opset=opset,
                               tol=(1e-5, 1e-5))


MS = [("com.microsoft", 1)]


def ms_node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, domain="com.microsoft", **attrs)


def gelu(x):
    from math import erf
    return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))


def layer_norm(x, g, b, eps):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * g + (0 if b is None else b)


def rms_norm(x, g, eps, axes=(-1,)):
    return x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps) * g


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def attention(q, k, v, heads, bias=None, causal=False, scale=None):
    """q [B,S,D], k [B,T,D], v [B,T,Dv] (float64) -> [B,S,Dv]; bias broadcast to [B,N,S,T]."""
    b, s, d = q.shape
    t = k.shape[1]
    h = d // heads
    qh = q.reshape(b, s, heads, h).transpose(0, 2, 1, 3)
    kh = k.reshape(b, t, heads, h).transpose(0, 2, 1, 3)
    vh = v.reshape(b, t, heads, -1).transpose(0, 2, 1, 3)
    sc = qh @ kh.transpose(0, 1, 3, 2) * (scale if scale is not None else 1 / np.sqrt(h))
    if bias is not None:
        sc = sc + bias
    if causal:
        allowed = np.arange(t)[None, :] <= np.arange(s)[:, None] + (t - s)
        sc = sc + np.where(allowed, 0.0, -10000.0)
    o = softmax(sc) @ vh
    return o.transpose(0, 2, 1, 3).reshape(b, s, -1)


def contrib_cases(root):
    # ONNX Runtime's com.microsoft transformer ops (docs/ContribOperators.md), each against float64 numpy.
    def case(name, nodes, inputs, outputs, inits=(), opset=17, tol=(1e-4, 1e-5)):
        outputs = [(n, a if np.asarray(a).dtype.kind in "iu" else f32(a)) for n, a in outputs]
        case_writer.write_case(root, "contrib_" + name, nodes, inputs, outputs, opset=opset,
                               inits=inits, tol=tol, declare_output_shapes=False, domains=MS)

    x = rnd(2, 16, 64)
    xd = x.astype(np.float64)
    bias = rnd(64)
    case("Gelu", [ms_node("Gelu", ["x"], ["y"])], [("x", x)], [("y", gelu(xd))])
    case("BiasGelu", [ms_node("BiasGelu", ["x", "b"], ["y"])], [("x", x)], [("y", gelu(xd + bias))], [("b", bias)])
    tanh_gelu = lambda z: 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))  # noqa: E731
    case("FastGelu_bias", [ms_node("FastGelu", ["x", "b"], ["y"])], [("x", x)], [("y", tanh_gelu(xd + bias))],
         [("b", bias)])
    case("FastGelu", [ms_node("FastGelu", ["x"], ["y"])], [("x", x)], [("y", tanh_gelu(xd))])
    case("QuickGelu", [ms_node("QuickGelu", ["x"], ["y"], alpha=1.5)], [("x", x)],
         [("y", xd / (1 + np.exp(-1.5 * xd)))])
    skip = rnd(2, 16, 64)
    case("BiasAdd", [ms_node("BiasAdd", ["x", "b", "s"], ["y"])], [("x", x), ("s", skip)], [("y", xd + bias + skip)],
         [("b", bias)])
    gamma, beta = rnd(64, lo=0.5, hi=1.5), rnd(64)
    summed = xd + skip + bias
    case("SkipLayerNormalization", [ms_node("SkipLayerNormalization", ["x", "s", "g", "be", "b"], ["y", "", "", "sum"],
                                            epsilon=1e-5)],
         [("x", x), ("s", skip)], [("y", layer_norm(summed, gamma, beta, 1e-5)), ("sum", summed)],
         [("g", gamma), ("be", beta), ("b", bias)])
    case("SkipLayerNormalization_no_beta_bias", [ms_node("SkipLayerNormalization", ["x", "s", "g"], ["y"], epsilon=1e-12)],
         [("x", x), ("s", skip)], [("y", layer_norm(xd + skip, gamma, None, 1e-12))], [("g", gamma)])
    case("SkipSimplifiedLayerNormalization",
         [ms_node("SkipSimplifiedLayerNormalization", ["x", "s", "g", "b"], ["y", "", "", "sum"], epsilon=1e-6)],
         [("x", x), ("s", skip)], [("y", rms_norm(summed, gamma, 1e-6)), ("sum", summed)], [("g", gamma), ("b", bias)])
    # ONNX Runtime's default-domain operators: SimplifiedLayerNormalization, LayerNormalization before opset 17.
    case("SimplifiedLayerNormalization_opset14", [helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["y"],
                                                                   epsilon=1e-5)],
         [("x", x)], [("y", rms_norm(xd, gamma, 1e-5))], [("g", gamma)], opset=14)
    g2 = rnd(16, 64, lo=0.5, hi=1.5)
    case("SimplifiedLayerNormalization_axis1", [helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["y"],
                                                                 axis=1, epsilon=1e-5)],
         [("x", x)], [("y", rms_norm(xd, g2, 1e-5, axes=(1, 2)))], [("g", g2)], opset=14)
    case("LayerNormalization_opset13", [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], epsilon=1e-5)],
         [("x", x)], [("y", layer_norm(xd, gamma, beta, 1e-5))], [("g", gamma), ("b", beta)], opset=13)
    # EmbedLayerNormalization: BERT embeddings + mask lengths.
    ids = RNG.integers(0, 100, (2, 16)).astype(np.int32)
    seg = RNG.integers(0, 2, (2, 16)).astype(np.int32)
    mask = np.ones((2, 16), np.int32)
    mask[1, 11:] = 0
    we, pe, se = rnd(100, 64), rnd(32, 64), rnd(2, 64)
    emb = we[ids].astype(np.float64) + pe[:16] + se[seg]
    case("EmbedLayerNormalization",
         [ms_node("EmbedLayerNormalization", ["ids", "seg", "we", "pe", "se", "g", "be", "m"], ["y", "mi", "sum"],
                  epsilon=1e-12)],
         [("ids", ids), ("seg", seg), ("m", mask)],
         [("y", layer_norm(emb, gamma, beta, 1e-12)), ("mi", np.array([16, 11], np.int32)), ("sum", emb)],
         [("we", we), ("pe", pe), ("se", se), ("g", gamma), ("be", beta)])
    # Attention (BERT): packed QKV weights, 1-D lengths mask (ORT's mask_index) and raw 2-D mask.
    w, wb = rnd(64, 192, lo=-0.3, hi=0.3), rnd(192, lo=-0.1, hi=0.1)
    qkv = xd @ w + wb
    q, k, v = qkv[..., :64], qkv[..., 64:128], qkv[..., 128:]
    lengths = np.array([16, 11], np.int32)
    keep = (np.arange(16)[None, :] < lengths[:, None]).astype(np.float64)
    mbias = ((1 - keep) * -10000.0)[:, None, None, :]
    case("Attention_mask_lengths", [ms_node("Attention", ["x", "w", "wb", "m"], ["y"], num_heads=4)],
         [("x", x), ("m", lengths)], [("y", attention(q, k, v, 4, mbias))], [("w", w), ("wb", wb)])
    case("Attention_raw_mask", [ms_node("Attention", ["x", "w", "wb", "m"], ["y"], num_heads=4)],
         [("x", x), ("m", keep.astype(np.int32))], [("y", attention(q, k, v, 4, mbias))], [("w", w), ("wb", wb)])
    ab = rnd(1, 8, 16, 16)
    case("Attention_bias_scale", [ms_node("Attention", ["x", "w", "wb", "", "", "ab"], ["y"], num_heads=8, scale=0.3)],
         [("x", x), ("ab", ab)], [("y", attention_ab(q, k, v, 8, ab, 0.3))], [("w", w), ("wb", wb)])
    # GPT-2 style: unidirectional with past -> present.
    past = rnd(2, 2, 4, 5, 16)
    pk = past[0].transpose(0, 2, 1, 3).reshape(2, 5, 64).astype(np.float64)
    pv = past[1].transpose(0, 2, 1, 3).reshape(2, 5, 64).astype(np.float64)
    kt, vt = np.concatenate([pk, k], 1), np.concatenate([pv, v], 1)
    present = np.stack([kt.reshape(2, 21, 4, 16).transpose(0, 2, 1, 3), vt.reshape(2, 21, 4, 16).transpose(0, 2, 1, 3)])
    case("Attention_unidirectional_past",
         [ms_node("Attention", ["x", "w", "wb", "", "past"], ["y", "present"], num_heads=4, unidirectional=1)],
         [("x", x), ("past", past)], [("y", attention(q, kt, vt, 4, causal=True)), ("present", present)],
         [("w", w), ("wb", wb)])
    # MultiHeadAttention: cross attention (S != L), bias, key padding mask, past/present.
    mq, mk, mv = rnd(2, 6, 64), rnd(2, 9, 64), rnd(2, 9, 32)
    mb = rnd(160, lo=-0.1, hi=0.1)
    kpm = np.ones((2, 9), np.int32)
    kpm[0, 7:] = 0
    qd, kd, vd = mq + mb[:64].astype(np.float64), mk + mb[64:128].astype(np.float64), mv + mb[128:].astype(np.float64)
    kbias = ((1 - kpm) * -10000.0)[:, None, None, :]
    case("MultiHeadAttention_cross_bias_mask",
         [ms_node("MultiHeadAttention", ["q", "k", "v", "b", "kpm"], ["y", "pk", "pv"], num_heads=4)],
         [("q", mq), ("k", mk), ("v", mv), ("kpm", kpm)],
         [("y", attention(qd, kd, vd, 4, kbias)), ("pk", kd.reshape(2, 9, 4, 16).transpose(0, 2, 1, 3)),
          ("pv", vd.reshape(2, 9, 4, 8).transpose(0, 2, 1, 3))], [("b", mb)])
    pkey, pval = rnd(2, 4, 3, 16), rnd(2, 4, 3, 8)
    kall = np.concatenate([pkey.transpose(0, 2, 1, 3).reshape(2, 3, 64), mk], 1).astype(np.float64)
    vall = np.concatenate([pval.transpose(0, 2, 1, 3).reshape(2, 3, 32), mv], 1).astype(np.float64)
    case("MultiHeadAttention_causal_past",
         [ms_node("MultiHeadAttention", ["q", "k", "v", "", "", "", "pkey", "pval"], ["y", "pk", "pv"], num_heads=4,
                  unidirectional=1)],
         [("q", mk), ("k", mk), ("v", mv), ("pkey", pkey), ("pval", pval)],
         [("y", attention(mk.astype(np.float64), kall, vall, 4, causal=True)),
          ("pk", kall.reshape(2, 12, 4, 16).transpose(0, 2, 1, 3)), ("pv", vall.reshape(2, 12, 4, 8).transpose(0, 2, 1, 3))])
    # RotaryEmbedding: [B, N, S, H] halves; [B, S, N*H] interleaved with num_heads; an offset position; R < H.
    def rope(xh, cos, sin, rot, interleaved):
        """xh [B, N, S, H] float64, cos/sin [B, 1, S, rot/2]."""
        out = xh.copy()
        xr = xh[..., :rot]
        if interleaved:
            a, b = xr[..., 0::2], xr[..., 1::2]
            out[..., 0:rot:2] = a * cos - b * sin
            out[..., 1:rot:2] = b * cos + a * sin
        else:
            a, b = xr[..., :rot // 2], xr[..., rot // 2:]
            out[..., :rot // 2] = a * cos - b * sin
            out[..., rot // 2:rot] = b * cos + a * sin
        return out

    pos = np.array([[0, 1, 2, 3, 4, 5], [3, 4, 5, 6, 7, 8]], np.int64)
    theta = np.arange(64)[:, None] * (10000.0 ** (-np.arange(8) / 8))[None, :]
    cc, sc = np.cos(theta).astype(np.float32), np.sin(theta).astype(np.float32)
    xh = rnd(2, 4, 6, 16)
    cos_b = cc[pos].astype(np.float64)[:, None]
    sin_b = sc[pos].astype(np.float64)[:, None]
    case("RotaryEmbedding_bnsh", [ms_node("RotaryEmbedding", ["x", "p", "c", "s"], ["y"])],
         [("x", xh), ("p", pos)], [("y", rope(xh.astype(np.float64), cos_b, sin_b, 16, False))], [("c", cc), ("s", sc)])
    # The input's rank undeclared (produced by a node), as in exported decoders.
    case("RotaryEmbedding_rank_from_producer", [helper.make_node("Identity", ["x"], ["xi"]),
                                                ms_node("RotaryEmbedding", ["xi", "p", "c", "s"], ["y"])],
         [("x", xh), ("p", pos)], [("y", rope(xh.astype(np.float64), cos_b, sin_b, 16, False))], [("c", cc), ("s", sc)])
    x3 = xh.transpose(0, 2, 1, 3).reshape(2, 6, 64)
    case("RotaryEmbedding_bsd_interleaved", [ms_node("RotaryEmbedding", ["x", "p", "c", "s"], ["y"], interleaved=1,
                                                     num_heads=4)],
         [("x", x3), ("p", pos)],
         [("y", rope(xh.astype(np.float64), cos_b, sin_b, 16, True).transpose(0, 2, 1, 3).reshape(2, 6, 64))],
         [("c", cc), ("s", sc)])
    off = np.array([5], np.int64)
    pos_off = np.arange(6)[None, :] + 5
    cc8, sc8 = cc[:, :4], sc[:, :4]
    case("RotaryEmbedding_offset_partial", [ms_node("RotaryEmbedding", ["x", "p", "c", "s"], ["y"],
                                                    rotary_embedding_dim=8, num_heads=4)],
         [("x", x3), ("p", off)],
         [("y", rope(xh.astype(np.float64), cc8[pos_off].astype(np.float64)[:, None],
                     sc8[pos_off].astype(np.float64)[:, None], 8, False).transpose(0, 2, 1, 3).reshape(2, 6, 64))],
         [("c", cc8), ("s", sc8)])


def gqa_reference(q, k, v, heads, kv_heads, past_k, past_v, seqlens, total, softcap=0.0, rope=None):
    """GroupQueryAttention as ONNX Runtime's CPU kernel computes it (its ContribOperators.md and
    gqa_attention_base.h): q [B,S,N*H], k/v [B,S,Nk*H], past [B,Nk,P,H], seqlens[b] = row b's total length - 1,
    `total` = total_sequence_length. A first prompt (S == total) starts every row at 0; otherwise row b's new
    tokens start at seqlens[b] + 1 - S. Present [B,Nk,max(total,P),H] = past rows before the start, the new
    rows, zeros. Query i of row b attends keys t <= start + i and t <= seqlens[b]; rotary at start + i. (The
    outputs at a prompt's padding positions are not defined by ONNX Runtime; this computes them as any row.)"""
    b, s, _ = q.shape
    p = 0 if past_k is None else past_k.shape[2]
    length = max(int(total), p)
    start = np.zeros(b, np.int64) if s == int(total) else seqlens.astype(np.int64) + 1 - s
    pos = start[:, None] + np.arange(s)[None, :]  # [B, S]
    qh = q.reshape(b, s, heads, -1)
    kh = k.reshape(b, s, kv_heads, -1)
    vh = v.reshape(b, s, kv_heads, -1).transpose(0, 2, 1, 3)
    h = qh.shape[-1]
    if rope is not None:
        cos, sin = rope  # [max, H/2]
        c, sn = cos[pos][:, :, None, :], sin[pos][:, :, None, :]

        def rot(x):
            a, bb = x[..., :h // 2], x[..., h // 2:]
            return np.concatenate([a * c - bb * sn, bb * c + a * sn], -1)
        qh, kh = rot(qh), rot(kh)
    qh, kh = qh.transpose(0, 2, 1, 3), kh.transpose(0, 2, 1, 3)
    pk, pv = np.zeros((b, kv_heads, length, h)), np.zeros((b, kv_heads, length, h))
    for r in range(b):
        st = start[r]
        if past_k is not None:
            pk[r, :, :st], pv[r, :, :st] = past_k[r, :, :st], past_v[r, :, :st]
        pk[r, :, st:st + s], pv[r, :, st:st + s] = kh[r], vh[r]
    g = heads // kv_heads
    krep, vrep = np.repeat(pk, g, axis=1), np.repeat(pv, g, axis=1)
    sc = qh @ krep.transpose(0, 1, 3, 2) / np.sqrt(h)
    if softcap > 0:
        sc = softcap * np.tanh(sc / softcap)
    cols = np.arange(length)[None, None, :]
    allowed = (cols <= seqlens[:, None, None]) & (cols <= pos[:, :, None])
    sc = np.where(allowed[:, None], sc, -np.inf)
    o = softmax(sc) @ vrep
    return o.transpose(0, 2, 1, 3).reshape(b, s, -1), pk, pv


def gqa_cases(root):
    def case(name, nodes, inputs, outputs, inits=()):
        outputs = [(n, f32(a)) for n, a in outputs]
        case_writer.write_case(root, "contrib_" + name, nodes, inputs, outputs, opset=17, inits=inits, tol=(1e-4, 1e-5),
                               declare_output_shapes=False, domains=MS)

    n_heads, kv, h = 4, 2, 8
    theta = np.arange(32)[:, None] * (10000.0 ** (-np.arange(4) / 4))[None, :]
    cc, sc = np.cos(theta).astype(np.float32), np.sin(theta).astype(np.float32)
    # Prompt with right padding (lengths 5 and 3), rotary.
    q, k, v = rnd(2, 5, n_heads * h), rnd(2, 5, kv * h), rnd(2, 5, kv * h)
    seq = np.array([4, 2], np.int32)
    y, pk, pv = gqa_reference(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), n_heads, kv, None, None,
                              seq, 5, rope=(cc.astype(np.float64), sc.astype(np.float64)))
    case("GroupQueryAttention_prompt_rotary",
         [ms_node("GroupQueryAttention", ["q", "k", "v", "", "", "seq", "total", "cos", "sin"], ["y", "pk", "pv"],
                  num_heads=n_heads, kv_num_heads=kv, do_rotary=1)],
         [("q", q), ("k", k), ("v", v), ("seq", seq)], [("y", y), ("pk", pk), ("pv", pv)],
         [("total", np.array(5, np.int32)), ("cos", cc), ("sin", sc)])
    # One decode step after 6 cached tokens, packed QKV, softcap.
    qkv = rnd(2, 1, (n_heads + 2 * kv) * h)
    past_k, past_v = rnd(2, kv, 6, h), rnd(2, kv, 6, h)
    seq = np.array([6, 6], np.int32)
    qd = qkv[..., :n_heads * h].astype(np.float64)
    kd = qkv[..., n_heads * h:(n_heads + kv) * h].astype(np.float64)
    vd = qkv[..., (n_heads + kv) * h:].astype(np.float64)
    y, pk, pv = gqa_reference(qd, kd, vd, n_heads, kv, past_k.astype(np.float64), past_v.astype(np.float64), seq, 7,
                              softcap=5.0)
    case("GroupQueryAttention_decode_packed_softcap",
         [ms_node("GroupQueryAttention", ["qkv", "", "", "pk_in", "pv_in", "seq", "total"], ["y", "pk", "pv"],
                  num_heads=n_heads, kv_num_heads=kv, softcap=5.0)],
         [("qkv", qkv), ("pk_in", past_k), ("pv_in", past_v), ("seq", seq)], [("y", y), ("pk", pk), ("pv", pv)],
         [("total", np.array(7, np.int32))])
    # A ragged batch decoding into a past buffer longer than either row's cache (onnxruntime-genai's
    # past_present_share_buffer layout): rows at 3 and 6 cached tokens, buffer 8; rows past each cache hold
    # stale values that must not be read or kept. Rotary at each row's own position.
    qd, kd, vd = rnd(2, 1, n_heads * h), rnd(2, 1, kv * h), rnd(2, 1, kv * h)
    past_k, past_v = rnd(2, kv, 8, h), rnd(2, kv, 8, h)
    seq = np.array([3, 6], np.int32)
    y, pk, pv = gqa_reference(qd.astype(np.float64), kd.astype(np.float64), vd.astype(np.float64), n_heads, kv,
                              past_k.astype(np.float64), past_v.astype(np.float64), seq, 7,
                              rope=(cc.astype(np.float64), sc.astype(np.float64)))
    case("GroupQueryAttention_ragged_decode_buffer",
         [ms_node("GroupQueryAttention", ["q", "k", "v", "pk_in", "pv_in", "seq", "total", "cos", "sin"],
                  ["y", "pk", "pv"], num_heads=n_heads, kv_num_heads=kv, do_rotary=1)],
         [("q", qd), ("k", kd), ("v", vd), ("pk_in", past_k), ("pv_in", past_v), ("seq", seq),
          ("total", np.array(7, np.int32))], [("y", y), ("pk", pk), ("pv", pv)], [("cos", cc), ("sin", sc)])
    # A prompt continuing a past (3 new tokens after 4 cached, buffer 5): present grows to the total, 7.
    qd, kd, vd = rnd(1, 3, n_heads * h), rnd(1, 3, kv * h), rnd(1, 3, kv * h)
    past_k, past_v = rnd(1, kv, 5, h), rnd(1, kv, 5, h)
    seq = np.array([6], np.int32)
    y, pk, pv = gqa_reference(qd.astype(np.float64), kd.astype(np.float64), vd.astype(np.float64), n_heads, kv,
                              past_k.astype(np.float64), past_v.astype(np.float64), seq, 7)
    case("GroupQueryAttention_continued_prompt",
         [ms_node("GroupQueryAttention", ["q", "k", "v", "pk_in", "pv_in", "seq", "total"], ["y", "pk", "pv"],
                  num_heads=n_heads, kv_num_heads=kv)],
         [("q", qd), ("k", kd), ("v", vd), ("pk_in", past_k), ("pv_in", past_v), ("seq", seq),
          ("total", np.array(7, np.int32))], [("y", y), ("pk", pk), ("pv", pv)])


def scan_cases(root):
    """Scan-11 (TensorFlow/Keras exports of recurrent code): a running state over two scan inputs, one read
    along axis 1 in reverse; outputs stacked along axis 1, one in reverse, one with a negative axis."""
    from onnx import TensorProto
    body = helper.make_graph(
        [helper.make_node("Mul", ["x_t", "y_t"], ["xy"]), helper.make_node("Add", ["s", "xy"], ["s_next"]),
         helper.make_node("Identity", ["s_next"], ["s_out"]), helper.make_node("Mul", ["x_t", "two"], ["x2"])],
        "body",
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, [3]), helper.make_tensor_value_info("x_t", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("y_t", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("s_next", TensorProto.FLOAT, [3]), helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("x2", TensorProto.FLOAT, [3])],
        initializer=[helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])])
    s0, x, y = rnd(3), rnd(5, 3), rnd(3, 5)  # x scanned along axis 0, y along axis 1 reversed
    state = s0.astype(np.float64)
    outs, doubled = [], []
    for t in range(5):
        state = state + x[t] * y[:, 4 - t]
        outs.append(state.copy())
        doubled.append(2.0 * x[t])
    outs = np.stack(outs[::-1], axis=1)      # axis 1, reverse direction
    doubled = np.stack(doubled, axis=-1)     # axis -1
    case_writer.write_case(
        root, "scan11_axes_directions",
        [helper.make_node("Scan", ["s0", "x", "y"], ["s_final", "states", "doubled"], body=body, num_scan_inputs=2,
                          scan_input_axes=[0, 1], scan_input_directions=[0, 1], scan_output_axes=[1, -1],
                          scan_output_directions=[1, 0])],
        [("s0", s0), ("x", x), ("y", y)], [("s_final", f32(state)), ("states", f32(outs)), ("doubled", f32(doubled))],
        opset=11, tol=(1e-5, 1e-6), declare_output_shapes=False)


def tfidf_reference(x, min_n, max_n, max_skip, pool_by_len, indexes, mode, weights):
    """TfIdfVectorizer from the ONNX operator text: n-grams of min_n..max_n items spaced 1..max_skip+1
    apart (unigrams once), looked up in the pool; TF counts, IDF weight if present, TFIDF count * weight."""
    grams, k = {}, 0
    for length, items in enumerate(pool_by_len, start=1):
        for i in range(0, len(items), length):
            if min_n <= length <= max_n:
                grams[tuple(items[i:i + length])] = indexes[k]
            k += 1
    size = max(indexes) + 1
    rows = x.reshape(-1, x.shape[-1]) if x.ndim == 2 else x.reshape(1, -1)
    out = np.zeros((rows.shape[0], size))
    for r, row in enumerate(rows):
        for n in range(min_n, max_n + 1):
            for d in (range(1, max_skip + 2) if n > 1 else [1]):
                for start in range(len(row)):
                    pos = [start + j * d for j in range(n)]
                    if pos[-1] < len(row) and tuple(row[pos]) in grams:
                        out[r, grams[tuple(row[pos])]] += 1
    w = np.ones(size) if weights is None else np.asarray(weights, np.float64)
    if mode == "IDF":
        out = (out > 0) * w
    elif mode == "TFIDF":
        out = out * w
    return out if x.ndim == 2 else out[0]


def tfidf_cases(root):
    x = RNG.integers(0, 6, (3, 12)).astype(np.int64)
    pool_by_len = [[2, 3, 5], [2, 3, 5, 1, 1, 4, 0, 2], [3, 5, 1]]  # 3 unigrams, 4 bigrams, 1 trigram
    pool = [v for p in pool_by_len for v in p]
    counts = [0, 3, 11]
    indexes = [7, 0, 3, 1, 5, 2, 6, 4]
    weights = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0]
    for name, min_n, max_n, skip, mode, w in (("tf_uni_bi_tri_skip2", 1, 3, 2, "TF", None),
                                              ("idf_bigrams_skip0", 2, 2, 0, "IDF", weights),
                                              ("tfidf_uni_bi_skip1", 1, 2, 1, "TFIDF", weights),
                                              ("idf_default_weights", 1, 3, 0, "IDF", None),
                                              # a skip beyond the row: as max_skip_count = 11 (no hang)
                                              ("tf_skip_beyond_row", 1, 3, 1000, "TF", None)):
        attrs = dict(min_gram_length=min_n, max_gram_length=max_n, max_skip_count=skip, mode=mode,
                     ngram_counts=counts, ngram_indexes=indexes, pool_int64s=pool)
        if w is not None:
            attrs["weights"] = w
        ref = tfidf_reference(x, min_n, max_n, skip, pool_by_len, indexes, mode, w)
        case_writer.write_case(root, "tfidf_" + name, [helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs)],
                               [("x", x)], [("y", f32(ref))], opset=9, tol=(1e-6, 1e-6), declare_output_shapes=False)
    x1 = x[0].astype(np.int32)
    case_writer.write_case(root, "tfidf_1d_int32",
                           [helper.make_node("TfIdfVectorizer", ["x"], ["y"], min_gram_length=1, max_gram_length=2,
                                             max_skip_count=3, mode="TF", ngram_counts=counts[:2],
                                             ngram_indexes=indexes[:7], pool_int64s=pool[:11])],
                           [("x", x1)], [("y", f32(tfidf_reference(x1, 1, 2, 3, pool_by_len[:2], indexes[:7], "TF",
                                                                   None)))],
                           opset=9, tol=(1e-6, 1e-6), declare_output_shapes=False)


def conv_transpose_cases(root):
    """ConvTranspose with an output_shape beyond the full output: ONNX's pad formula gives negative pads
    (floor division), the output extends with zeros at the end (SAME_UPPER: at the start)."""
    x, w = rnd(1, 2, 4, 5), rnd(2, 3, 3, 3)
    s = 2
    full = np.zeros((1, 3, (4 - 1) * s + 3, (5 - 1) * s + 3))
    for i in range(4):
        for j in range(5):
            full[0, :, i * s:i * s + 3, j * s:j * s + 3] += np.einsum("c,cokl->okl", x[0, :, i, j].astype(np.float64), w)
    for name, target, auto_pad in (("extend_end", (10, 13), None), ("extend_same_upper", (11, 12), "SAME_UPPER"),
                                   ("crop_and_extend", (8, 12), None)):
        out = np.zeros((1, 3) + target)
        pads = []
        for d, t in enumerate(target):
            total = full.shape[2 + d] - t
            half = total // 2  # floor, as ONNX's reference
            pads.append(half if auto_pad == "SAME_UPPER" else total - half)
        for i in range(target[0]):
            for j in range(target[1]):
                fi, fj = i + pads[0], j + pads[1]
                if 0 <= fi < full.shape[2] and 0 <= fj < full.shape[3]:
                    out[0, :, i, j] = full[0, :, fi, fj]
        attrs = dict(strides=[s, s], output_shape=list(target))
        if auto_pad:
            attrs["auto_pad"] = auto_pad
        case_writer.write_case(root, "convtranspose_output_shape_" + name,
                               [helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)], [("x", x)],
                               [("y", f32(out))], opset=13, inits=[("w", w)], tol=(1e-5, 1e-5),
                               declare_output_shapes=False)


def attention_ab(q, k, v, heads, ab, scale):
    return attention(q, k, v, heads, ab.astype(np.float64), scale=scale)


def main():
    root = sys.argv[1]
    os.makedirs(root, exist_ok=True)
    legacy_cases(root)
    dft_cases(root)
    stft_cases(root)
    mel_cases(root)
    roi_align_cases(root)
    contrib_cases(root)
    gqa_cases(root)
    scan_cases(root)
    tfidf_cases(root)
    conv_transpose_cases(root)


if __name__ == "__main__":
    main()
