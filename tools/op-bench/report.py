#!/usr/bin/python3
"""Merges the two sides of the op-level benchmark (tools/op-bench/run.sh) into one table.

usage: report.py CASES.json RESULTS_DIR THREADS... [--markdown OUT.md] [--json OUT.json]

RESULTS_DIR holds cjit_T.jsonl (cjit-op-bench) and ort_T.jsonl (tools/ort-bench/ort_ops.js) per thread count
T. Prints, per thread count, every case sorted by cjit / ORT time (worst first): both medians, the ratio,
cjit's fallback path, whether the outputs matched ONNX Runtime's, and for memory-bound ops the effective
bandwidth (inputs + outputs once, per second) and the time of a memcpy moving as many bytes at that size and
thread count over cjit's time (the fraction of copy bandwidth). Then the geomean ratio per family and overall, the cases over 1.5x, and the memory-bound ops
under half of copy bandwidth.
"""
import json
import math
import os
import sys


def load(path):
    rows = {}
    extra = {}
    if not os.path.exists(path):
        return rows, extra
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if "name" in r:
            rows[r["name"]] = r
        else:
            extra.update(r)
    return rows, extra


def geomean(xs):
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main():
    args = sys.argv[1:]
    md_path = json_path = None
    if "--markdown" in args:
        md_path = args[args.index("--markdown") + 1]
        args = [a for a in args if a not in ("--markdown", md_path)]
    if "--json" in args:
        json_path = args[args.index("--json") + 1]
        args = [a for a in args if a not in ("--json", json_path)]
    manifest, results = args[0], args[1]
    threads = args[2:]
    cases = json.load(open(manifest))["cases"]
    lines, summary = [], {}
    for t in threads:
        cj, extra = load(os.path.join(results, f"cjit_{t}.jsonl"))
        ort, _ = load(os.path.join(results, f"ort_{t}.jsonl"))
        copy = extra.get("copy_gbps", float("nan"))
        table = []
        for c in cases:
            a, b = cj.get(c["name"], {}), ort.get(c["name"], {})
            if not a and not b:
                continue  # not run (--filter)
            ratio = a["cjit_ms"] / b["ort_ms"] if "cjit_ms" in a and "ort_ms" in b and b["ort_ms"] > 0 else float("nan")
            bw = a["bytes"] / (a["cjit_ms"] * 1e6) if "cjit_ms" in a and a.get("bytes") else float("nan")
            # Of a memcpy of as many bytes at the same size (cache-resident sizes copy faster than DRAM).
            frac = a["copy_ms"] / a["cjit_ms"] if "cjit_ms" in a and a.get("copy_ms") else float("nan")
            table.append(dict(name=c["name"], family=c["family"], variant=c["variant"], memory_bound=c["memory_bound"],
                              cjit_ms=a.get("cjit_ms"), fallback_ms=a.get("fallback_ms"), ort_ms=b.get("ort_ms"),
                              ratio=ratio, ok=a.get("ok", False), problem=a.get("problem", b.get("error", "")),
                              gbps=bw, copy_fraction=frac if c["memory_bound"] else None))
        table.sort(key=lambda r: -(r["ratio"] if math.isfinite(r["ratio"]) else 1e9))
        fams = sorted({r["family"] for r in table})
        s = {"threads": int(t), "copy_gbps": copy, "geomean": geomean([r["ratio"] for r in table]),
             "families": {f: geomean([r["ratio"] for r in table if r["family"] == f]) for f in fams},
             "over_1_5": [r["name"] for r in table if r["ratio"] > 1.5],
             "under_half_bandwidth": [r["name"] for r in table if r["copy_fraction"] is not None and r["copy_fraction"] < 0.5],
             "mismatches": [r["name"] for r in table if not r["ok"]], "cases": table}
        summary[t] = s
        lines.append(f"\n### {t} thread{'s' if t != '1' else ''}: memcpy of 64 MiB {copy:.1f} GB/s (read + write)\n")
        lines.append("| case | family | cjit ms | ORT ms | cjit / ORT | fallback ms | GB/s (of copy) | ok |")
        lines.append("|---|---|---|---|---|---|---|---|")
        for r in table:
            f = lambda v, p=3: "—" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{p}f}"
            bw = f"{r['gbps']:.1f} ({100 * r['copy_fraction']:.0f}%)" if r["copy_fraction"] is not None and math.isfinite(r["gbps"]) else "—"
            ok = "yes" if r["ok"] else f"NO: {r['problem'][:80]}"
            lines.append(f"| {r['name']} | {r['family']} | {f(r['cjit_ms'])} | {f(r['ort_ms'])} | {f(r['ratio'], 2)} | "
                         f"{f(r['fallback_ms'])} | {bw} | {ok} |")
        lines.append("")
        lines.append(f"geomean cjit / ORT: **{s['geomean']:.2f}**; by family: " +
                     ", ".join(f"{k} {v:.2f}" for k, v in s["families"].items()))
        lines.append(f"over 1.5x ORT ({len(s['over_1_5'])}): {', '.join(s['over_1_5']) or 'none'}")
        lines.append(f"memory-bound under 50% of copy bandwidth ({len(s['under_half_bandwidth'])}): "
                     f"{', '.join(s['under_half_bandwidth']) or 'none'}")
        lines.append(f"outputs differing from ORT's ({len(s['mismatches'])}): {', '.join(s['mismatches']) or 'none'}")
    text = "\n".join(lines)
    print(text)
    if md_path:
        open(md_path, "w").write(text + "\n")
    if json_path:
        json.dump(summary, open(json_path, "w"), indent=1)


if __name__ == "__main__":
    main()
