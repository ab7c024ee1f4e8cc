#!/usr/bin/python3
"""The op-level benchmark's regression check (ctest op_bench_ci): timings of the small fixed `--set ci` cases
as ratios to baselines measured in the same process, never as wall time (a CI machine's speed varies):

  - copy ratio: cjit's time over a memcpy moving as many bytes at the same size and thread count (the
    `copy_ms` of cjit-op-bench --copy-bandwidth). Each case has a bound in ci_bounds.json, about 4x the
    ratio measured on the project's machine: a kernel that falls off its fast path (the 128 ms Pad of
    issue 37 was 500x a copy) fails, run-to-run noise (2x on a shared VM) does not;
  - fallback ratio: cjit as a user gets it over the fallback path (--auto_jit=-1) of the same op, at most
    --max-fallback-ratio (compiling a one-op graph must not cost steady-state time).

usage: ci_check.py CJIT.jsonl BOUNDS.json [--max-fallback-ratio R]        exit 1 with the failures listed
       ci_check.py CJIT.jsonl --write-bounds BOUNDS.json [--slack S]      record bounds (S x measured)
"""
import json
import sys


def load(path):
    rows = {}
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            if "name" in r:
                rows[r["name"]] = r
    return rows


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    rows = load(args[0])
    if not rows:
        print(f"ci_check: no results in {args[0]}", file=sys.stderr)
        return 1
    if args[1] == "--write-bounds":
        slack = float(args[args.index("--slack") + 1]) if "--slack" in args else 4.0
        bounds = {n: round(slack * r["cjit_ms"] / r["copy_ms"], 1) for n, r in sorted(rows.items())
                  if r.get("ok") and r.get("copy_ms")}
        json.dump({"slack": slack, "copy_ratio_bounds": bounds}, open(args[2], "w"), indent=1, sort_keys=True)
        print(f"ci_check: wrote {len(bounds)} bounds to {args[2]}")
        return 0
    spec = json.load(open(args[1]))
    bounds = spec["copy_ratio_bounds"]
    max_fb = float(args[args.index("--max-fallback-ratio") + 1]) if "--max-fallback-ratio" in args else 1.5
    failures = []
    for name, bound in sorted(bounds.items()):
        r = rows.get(name)
        if r is None:
            failures.append(f"{name}: not run")
            continue
        if not r.get("ok") or "cjit_ms" not in r:
            failures.append(f"{name}: failed: {r.get('problem', 'no timing')}")
            continue
        copy_ratio = r["cjit_ms"] / r["copy_ms"]
        fb_ratio = r["cjit_ms"] / r["fallback_ms"]
        status = "ok"
        if copy_ratio > bound:
            status = "SLOW"
            failures.append(f"{name}: {r['cjit_ms']:.3f} ms is {copy_ratio:.1f}x a copy of its bytes (bound {bound})")
        if fb_ratio > max_fb:
            status = "SLOW"
            failures.append(f"{name}: compiled {r['cjit_ms']:.3f} ms is {fb_ratio:.2f}x the fallback path "
                            f"{r['fallback_ms']:.3f} ms (bound {max_fb})")
        print(f"{name:45s} {r['cjit_ms']:8.3f} ms  copy x{copy_ratio:6.1f} (bound {bound:6.1f})  "
              f"fallback x{fb_ratio:4.2f}  {status}")
    for name in sorted(set(rows) - set(bounds)):
        failures.append(f"{name}: no bound in {args[1]} (record one with --write-bounds)")
    if failures:
        print("ci_check: FAIL\n  " + "\n  ".join(failures))
        return 1
    print(f"ci_check: PASS ({len(bounds)} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
