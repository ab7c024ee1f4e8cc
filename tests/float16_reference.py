#!/usr/bin/python3
"""Independent references for float16/bfloat16 conversions (tests/float16_test.cc reads the file).

float32 -> float16: numpy's astype(np.float16) (its own round-to-nearest-even code).
float32 -> bfloat16: the nearest of the two bfloat16 neighbours, chosen by exact float64 distance, ties to
the even mantissa, infinity standing for 2^128 (IEEE 754 overflow rule) -- no bit tricks shared with ours.
float16 -> float32: numpy's astype(np.float32) of every one of the 65,536 patterns.
NaN inputs are left out here (numpy keeps signalling NaNs signalling); the C++ test checks NaN rules.

File: uint32 n, then n records (uint32 float32 bits, uint16 float16 bits, uint16 bfloat16 bits), then
65,536 uint32 float32 bits of the float16 patterns. Little-endian.
usage: float16_reference.py OUT_FILE
"""
import sys

import numpy as np


def inputs():
    rng = np.random.default_rng(20261123)
    parts = [rng.integers(0, 2**32, size=300000, dtype=np.uint64).astype(np.uint32)]
    # Every float16 value, its float32 neighbours, and the float32 values half-way between float16 values
    # (ties) and next to them; the same around bfloat16 values.
    h = np.arange(0, 65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    h = h[np.isfinite(h)].view(np.uint32)
    mid = ((h.view(np.float32).astype(np.float64)[:-1] + h.view(np.float32).astype(np.float64)[1:]) / 2)
    mid = mid[np.abs(mid) < 3.4e38].astype(np.float32).view(np.uint32)
    for a in (h, mid):
        parts += [a, a + 1, a - 1, a | 0x80000000]
    b = (np.arange(0, 65536, dtype=np.uint32) << 16)
    parts += [b, b | 0x8000, b | 0x7FFF, b | 0x8001, b + 0x18000]
    # Subnormals, overflow boundaries, zeros, infinities.
    parts += [np.arange(0, 70000, dtype=np.uint32), np.arange(0x007F0000, 0x00810000, 7, dtype=np.uint32),
              np.array([0x477FEFFF, 0x477FF000, 0x477FF001, 0x477FE000, 0x7F7FFFFF, 0x7F7F8000, 0x7F7F7FFF,
                        0x7F800000, 0x33000000, 0x33000001, 0x32FFFFFF, 0x387FFFFF, 0x38800000],
                       dtype=np.uint32)]
    x = np.concatenate([p.astype(np.uint32) for p in parts])
    x = np.concatenate([x, x ^ 0x80000000])
    f = x.view(np.float32)
    return np.unique(x[~np.isnan(f)])


def to_bf16(x):
    f = x.view(np.float32).astype(np.float64)
    a = np.abs(f)
    sign = x & 0x80000000
    lo = (x & 0x7FFF0000)
    hi = lo + 0x10000
    lo_v = lo.view(np.float32).astype(np.float64)
    hi_v = np.where(hi >= 0x7F800000, 2.0**128, hi.astype(np.uint32).view(np.float32).astype(np.float64))
    d_lo, d_hi = a - lo_v, hi_v - a
    lo_even = ((lo >> 16) & 1) == 0
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & ~lo_even)
    r = np.where(pick_hi, np.minimum(hi, 0x7F800000), lo)
    r = np.where(np.isinf(f), 0x7F800000, r)
    return ((r | sign) >> 16).astype(np.uint16)


def main():
    x = inputs()
    with np.errstate(over="ignore", invalid="ignore"):
        f16 = x.view(np.float32).astype(np.float16).view(np.uint16)
        bf16 = to_bf16(x)
    rec = np.zeros(len(x), dtype=[("f", "<u4"), ("h", "<u2"), ("b", "<u2")])
    rec["f"], rec["h"], rec["b"] = x, f16, bf16
    widen = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    with open(sys.argv[1], "wb") as out:
        out.write(np.array([len(x)], dtype="<u4").tobytes())
        out.write(rec.tobytes())
        out.write(widen.view(np.uint32).astype("<u4").tobytes())
    print(f"{len(x)} float32 inputs written to {sys.argv[1]}")


if __name__ == "__main__":
    main()
