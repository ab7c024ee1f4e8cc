#!/usr/bin/env bash
# ONNX Runtime's com.microsoft operators (expanded at import: compiler/onnx/contrib_ops.h) against ONNX
# Runtime's own outputs, on the fallback path and compiled, within each case's tolerance.txt: the quantized
# operators (tests/data/contrib_quant, written by tests/contrib_quant_models.py and
# tools/ort-bench/make_test_data.js) or another directory of cases (tests/data/contrib_transformer: the
# models of tools/make_contrib_models.py --small).
# usage: contrib_quant_check.sh CJIT_BINARY [DATA_DIR]
set -uo pipefail
cjit=$1
here=$(cd "$(dirname "$0")" && pwd)
fail=0
total=0
data=${2:-$here/data/contrib_quant}
for dir in "$data"/*/; do
  read -r rtol atol < "$dir/tolerance.txt"
  for flags in "--device=cpu --auto_jit=-1" "--device=cpu --auto_jit=1 --min_cluster_size=1 --enable_lazy_compilation=false"; do
    total=$((total + 1))
    if ! out=$(CJIT_FLAGS="$flags" "$cjit" check "$dir" --rtol "$rtol" --atol "$atol" 2>&1); then
      echo "FAIL $(basename "$dir") ($flags): $(echo "$out" | tail -3 | tr '\n' ' ')"
      fail=$((fail + 1))
    fi
  done
done
echo "$(basename "$data"): $((total - fail)) of $total runs pass"
[[ $total -gt 0 && $fail -eq 0 ]]
