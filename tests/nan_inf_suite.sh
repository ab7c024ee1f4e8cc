#!/usr/bin/env bash
# The NaN/Inf op suite (tests/nan_inf_suite.py): every case on the fallback path and compiled (each op its
# own cluster, compiled on first use), against numpy. NaN must match NaN and +-inf the same infinity exactly
# (so both paths agree in classifying NaN/Inf); finite values within rtol 1e-5 + atol 1e-37.
# usage: nan_inf_suite.sh CJIT_BINARY
set -uo pipefail
cjit=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 "$here/nan_inf_suite.py" "$work/cases" || exit 1
fail=0
total=0
for dir in "$work"/cases/*/; do
  name=$(basename "$dir")
  for mode in fallback compiled; do
    flags="--device=cpu --auto_jit=-1"
    [[ $mode == compiled ]] && flags="--device=cpu --auto_jit=1 --min_cluster_size=1 --enable_lazy_compilation=false"
    total=$((total + 1))
    if ! out=$(CJIT_FLAGS="$flags" "$cjit" check "$dir" --rtol 1e-5 --atol 1e-37 2>&1); then
      echo "FAIL $name ($mode): $(echo "$out" | grep -v '^PASS\|^FAIL (' | head -3 | tr '\n' ' ')"
      fail=$((fail + 1))
    fi
  done
done
echo "nan_inf_suite: $((total - fail)) of $total cases pass"
[[ $fail -eq 0 ]]
