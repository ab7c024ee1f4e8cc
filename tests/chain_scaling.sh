#!/usr/bin/env bash
# Super-linear cost guard (issue 11): a 100,000-node elementwise chain loads, clusters, compiles and runs
# (`cjit run`, default flags, so the lazy policy compiles its cluster). The ctest TIMEOUT (120 s) catches a
# quadratic step coming back (it took 153 s before it was fixed); the time is printed for the record —
# tools/bench-chain.sh is the benchmark (4-5 s on the 2-core CI machine).
# usage: chain_scaling.sh CJIT_BINARY [N=100000]
set -euo pipefail
cjit=$1
n=${2:-100000}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 "$here/gen_chain.py" "$n" "$work/chain.onnx"
start=$(date +%s.%N)
"$cjit" run "$work/chain.onnx" --iterations 3 --warmup 1 --stats-json "$work/stats.json" | tail -1
end=$(date +%s.%N)
compiles=$(/usr/bin/python3 -c "import json;print(json.load(open('$work/stats.json'))['totals']['compiles'])")
[[ "$compiles" -ge 1 ]] || { echo "FAIL: the chain's cluster was never compiled"; exit 1; }
echo "chain of $n nodes: load + cluster + compile + 4 runs in $(python3 -c "print(round($end - $start, 2))") s"
