#!/usr/bin/env bash
# ONNX Runtime's com.microsoft quantized operators (expanded at import: compiler/onnx/contrib_ops.h) against
# ONNX Runtime's own outputs (tests/data/contrib_quant, written by tests/contrib_quant_models.py and
# tools/ort-bench/make_test_data.js), on the fallback path and compiled, within each case's tolerance.txt.
# usage: contrib_quant_check.sh CJIT_BINARY
set -uo pipefail
cjit=$1
here=$(cd "$(dirname "$0")" && pwd)
fail=0
total=0
for dir in "$here"/data/contrib_quant/*/; do
  read -r rtol atol < "$dir/tolerance.txt"
  for flags in "--device=cpu --auto_jit=-1" "--device=cpu --auto_jit=1 --min_cluster_size=1 --enable_lazy_compilation=false"; do
    total=$((total + 1))
    if ! out=$(CJIT_FLAGS="$flags" "$cjit" check "$dir" --rtol "$rtol" --atol "$atol" 2>&1); then
      echo "FAIL $(basename "$dir") ($flags): $(echo "$out" | tail -3 | tr '\n' ' ')"
      fail=$((fail + 1))
    fi
  done
done
echo "contrib_quant: $((total - fail)) of $total runs pass"
[[ $total -gt 0 && $fail -eq 0 ]]
