#!/usr/bin/python3
"""Validates a clusterjit trace (Chrome trace-event JSON) against tests/trace_event.schema.json and the
rules a viewer relies on: every complete event nests properly within the others of its thread, flow events
come in start/finish pairs, and (with --op-sum-tolerance) the executed nodes of each run account for the
run's duration within the tolerance.

usage: trace_check.py TRACE.json [--op-sum-tolerance 0.10] [--expect-cat CAT ...]
Exit 0 when every check passes; prints what failed otherwise.
"""
import argparse
import collections
import json
import os
import sys

import jsonschema


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--op-sum-tolerance", type=float, default=None)
    # The time between op events is the executor's dispatch, proportional to the op count: a run of ~60 ops
    # in 0.1 ms (silero_vad on the fallback path) spends ~10% there, with every op traced. A gap within
    # this many microseconds per op passes too; a missing kind of op event leaves far more.
    ap.add_argument("--op-gap-us-per-op", type=float, default=0.0)
    ap.add_argument("--expect-cat", action="append", default=[])
    args = ap.parse_args()
    schema_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "trace_event.schema.json")
    with open(schema_path) as f:
        schema = json.load(f)
    with open(args.trace) as f:
        doc = json.load(f)
    errors = []
    try:
        jsonschema.validate(doc, schema)
    except jsonschema.ValidationError as e:
        errors.append("schema: %s at %s" % (e.message, list(e.absolute_path)))
    events = doc.get("traceEvents", [])
    # Nesting: per (pid, tid), complete events sorted by start (longer first on ties) form a proper tree.
    per_thread = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            per_thread[(e["pid"], e["tid"])].append(e)
    for key, evs in per_thread.items():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in evs:
            start, end = e["ts"], e["ts"] + e["dur"]
            while stack and stack[-1][1] <= start + 1e-9:
                stack.pop()
            if stack and end > stack[-1][1] + 1e-6:
                errors.append("thread %s: '%s' [%.3f, %.3f] overlaps '%s' ending at %.3f" %
                              (key, e["name"], start, end, stack[-1][2], stack[-1][1]))
                break
            stack.append((start, end, e["name"]))
    # Flows: every id has one start and one finish.
    flows = collections.defaultdict(list)
    for e in events:
        if e.get("ph") in ("s", "f"):
            flows[e["id"]].append(e["ph"])
    for fid, phs in flows.items():
        if sorted(phs) != ["f", "s"]:
            errors.append("flow %s has events %s" % (fid, phs))
    cats = collections.Counter(e.get("cat") for e in events)
    for c in args.expect_cat:
        if cats[c] == 0:
            errors.append("no event of category '%s' (have %s)" % (c, dict(cats)))
    if args.op_sum_tolerance is not None:
        runs = [e for e in events if e.get("ph") == "X" and e.get("cat") == "session" and e["name"] == "Run"]
        leaves = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("op", "kernel", "library")]
        specializations = [e for e in events if e.get("ph") == "X" and e.get("name") == "specialize"]
        checked, run_total, op_total, worst, gaps, dispatch_gaps = 0, 0.0, 0.0, 0.0, [], []
        for r in runs:
            lo, hi = r["ts"], r["ts"] + r["dur"]
            if any(lo <= s["ts"] < hi for s in specializations):
                continue  # the first run of a signature also specializes it
            inside = [e for e in leaves if e["tid"] == r["tid"] and lo <= e["ts"] < hi]
            total = sum(e["dur"] for e in inside)
            if total > r["dur"] + 1e-3:
                errors.append("run at %.3f us: ops sum to %.3f us, more than the run's %.3f us" % (lo, total, r["dur"]))
            checked += 1
            run_total += r["dur"]
            op_total += total
            worst = max(worst, (r["dur"] - total) / r["dur"])
            gaps.append((r["dur"] - total) / r["dur"])
            dispatch_gaps.append((r["dur"] - total) / max(len(inside), 1))
        if checked == 0:
            errors.append("no run without specialization to check the op sum on")
        else:
            # The median run's share outside op events: a run preempted by another process (ctest -j, CI
            # load) inflates the total and one run's share, not the typical run's.
            gap = sorted(gaps)[len(gaps) // 2]
            per_op = sorted(dispatch_gaps)[len(dispatch_gaps) // 2]
            print("op sum over %d runs: %.3f us of %.3f us in Run (%.1f%% outside ops in total, %.1f%% in the "
                  "median run; worst single run %.1f%%)" %
                  (checked, op_total, run_total, 100 * (run_total - op_total) / run_total, 100 * gap, 100 * worst))
            print("median time outside op events per op: %.3f us" % per_op)
            if gap > args.op_sum_tolerance and per_op > args.op_gap_us_per_op:
                errors.append("ops account for %.1f%% of the median run's time, below %.0f%%, and %.3f us per op "
                              "is outside op events (bound %.3f us)" %
                              (100 * (1 - gap), 100 * (1 - args.op_sum_tolerance), per_op, args.op_gap_us_per_op))
    print("%d events, categories %s" % (len(events), dict(cats)))
    for e in errors[:20]:
        print("FAIL:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
