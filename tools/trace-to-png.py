#!/usr/bin/python3
"""Renders a clusterjit trace (Chrome trace-event JSON) as a timeline picture, for docs and for machines
where Perfetto UI cannot be opened: one lane per thread, complete events stacked by nesting depth and
coloured by category, flow arrows drawn from compile to first compiled execution.

usage: trace-to-png.py TRACE.json OUT.png [--from-us T0] [--to-us T1] [--title TEXT]
(Debian: python3-matplotlib.)
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"session": "#4c72b0", "specialize": "#8172b2", "compile": "#c44e52", "cache": "#ccb974",
          "cluster": "#55a868", "kernel": "#64b5cd", "library": "#dd8452", "op": "#937860"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--from-us", type=float, default=None)
    ap.add_argument("--to-us", type=float, default=None)
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    events = json.load(open(a.trace))["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    xs = [e for e in events if e.get("ph") == "X"]
    lo = a.from_us if a.from_us is not None else min(e["ts"] for e in xs)
    hi = a.to_us if a.to_us is not None else max(e["ts"] + e["dur"] for e in xs)
    xs = [e for e in xs if e["ts"] + e["dur"] >= lo and e["ts"] <= hi]
    tids = sorted({e["tid"] for e in xs})
    # Depth per event: nesting within its thread.
    depth = {}
    lanes = {}
    for tid in tids:
        evs = sorted((e for e in xs if e["tid"] == tid), key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in evs:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            depth[id(e)] = len(stack)
            stack.append(e)
        lanes[tid] = max((depth[id(e)] for e in evs), default=0) + 1
    fig_h = 1.6 + 0.32 * sum(lanes.values())
    fig, ax = plt.subplots(figsize=(16, fig_h))
    base, yticks, ylabels = 0, [], []
    offsets = {}
    for tid in tids:
        offsets[tid] = base
        yticks.append(base + lanes[tid] / 2)
        ylabels.append(names.get(tid, "thread %d" % tid))
        base += lanes[tid] + 0.6
    for e in xs:
        y = offsets[e["tid"]] + depth[id(e)]
        s, d = max(e["ts"], lo), min(e["ts"] + e["dur"], hi) - max(e["ts"], lo)
        ax.broken_barh([((s - lo) / 1000, d / 1000)], (y, 0.9), facecolors=COLORS.get(e.get("cat"), "#999999"),
                       edgecolor="white", linewidth=0.3)
        if d / (hi - lo) > 0.04:
            ax.text((s - lo + d / 2) / 1000, y + 0.45, e["name"], ha="center", va="center", fontsize=7, clip_on=True)
    flows = {}
    for e in events:
        if e.get("ph") in ("s", "f"):
            flows.setdefault(e["id"], {})[e["ph"]] = e
    for f in flows.values():
        if "s" in f and "f" in f and lo <= f["s"]["ts"] <= hi and lo <= f["f"]["ts"] <= hi:
            y0 = offsets.get(f["s"]["tid"], 0) + 0.5
            y1 = offsets.get(f["f"]["tid"], 0) + 0.5
            ax.annotate("", xy=((f["f"]["ts"] - lo) / 1000, y1), xytext=((f["s"]["ts"] - lo) / 1000, y0),
                        arrowprops=dict(arrowstyle="->", color="black", lw=0.8))
    ax.set_yticks(yticks)
    ax.set_yticklabels(ylabels)
    ax.invert_yaxis()
    ax.set_xlabel("ms since %.3f ms" % (lo / 1000))
    ax.set_xlim(0, (hi - lo) / 1000)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    ax.legend(handles, COLORS.keys(), loc="upper center", bbox_to_anchor=(0.5, -0.6), fontsize=8, ncol=len(COLORS),
              frameon=False)
    if a.title:
        ax.set_title(a.title)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
