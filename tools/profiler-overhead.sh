#!/usr/bin/env bash
# What the profiler's hooks cost when tracing is off (issue 9): the same benchmark (tools/bench_run.cc:
# Session::Run on every shared model, fallback and clustered, 1 thread) in the normal build (hooks compiled
# in, no --trace_to) and in build-noprof/ (-DCJIT_PROFILER=OFF: hooks compiled out), interleaved
# REPS times; prints the median of each side by side with their ratio.
# usage: tools/profiler-overhead.sh [REPS=5]
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-5}
cmake --build build -j2 --target cjit_bench_run >/dev/null
cmake -S . -B build-noprof -G Ninja -DCJIT_PROFILER=OFF -DCJIT_BUILD_TESTS=OFF >/dev/null
cmake --build build-noprof -j2 --target cjit_bench_run >/dev/null
out=$(mktemp -d)
for ((r = 0; r < reps; ++r)); do
  build/tools/cjit_bench_run --benchmark_min_time=0.3 --benchmark_format=json > "$out/on_$r.json" 2>/dev/null
  build-noprof/tools/cjit_bench_run --benchmark_min_time=0.3 --benchmark_format=json > "$out/off_$r.json" 2>/dev/null
done
/usr/bin/python3 - "$out" "$reps" <<'PY'
import json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
def load(kind):
    res = {}
    for r in range(reps):
        for b in json.load(open(f"{out}/{kind}_{r}.json"))["benchmarks"]:
            res.setdefault(b["name"], []).append(b["real_time"])
    return res
on, off = load("on"), load("off")
print(f"{'benchmark':36s} {'hooks in, off (us)':>20s} {'compiled out (us)':>18s} {'ratio':>7s}")
for name in on:
    a, b = statistics.median(on[name]), statistics.median(off[name])
    print(f"{name:36s} {a:20.2f} {b:18.2f} {a / b:7.3f}")
PY
rm -rf "$out"
