#!/usr/bin/env bash
# The op reference suite (tests/op_reference_suite.py): every case on the fallback path and compiled (each
# op its own cluster, compiled on first use), against numpy float64 references, with the tolerance the
# case's tolerance.txt gives. Compiled, the elementwise, reduction, softmax, normalization and cast cases
# must have run generated code (not only library calls): the suite proves it exercised the code generator
# for every op family the emitter lowers.
# The same runner serves tests/opset_suite.py (operator versions of opsets 18-21 against numpy).
# With a third argument (float16 / bfloat16), the generator writes its cases in that 16-bit type
# (op_reference_suite.py's 16-bit mode): every op family in float16 and bfloat16, both paths, against numpy.
# CJIT_EXTRA_FLAGS (environment) are added to both modes' flags (e.g. --max_cpu_isa=avx2).
# usage: op_reference_suite.sh CJIT_BINARY [GENERATOR.py [float16|bfloat16]]
set -uo pipefail
cjit=$1
here=$(cd "$(dirname "$0")" && pwd)
generator=${2:-$here/op_reference_suite.py}
low=${3:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 "$generator" "$work/cases" $low || exit 1
# Families the emitter does not lower (they run as library steps inside the cluster): integer arithmetic,
# float-to-integer Cast, Atan. Keep this list short and true: a case listed here that starts generating
# code is fine; a case not listed that stops generating code fails.
not_lowered='(_i64$|^cast_f32_i32$|^unary_Atan$)'
fail=0
total=0
for dir in "$work"/cases/*/; do
  name=$(basename "$dir")
  read -r rtol atol < "$dir/tolerance.txt"
  for mode in fallback compiled; do
    flags="--device=cpu --auto_jit=-1"
    [[ $mode == compiled ]] && flags="--device=cpu --auto_jit=1 --min_cluster_size=1 --enable_lazy_compilation=false --cpu_codegen_single_ops=true"
    flags="$flags ${CJIT_EXTRA_FLAGS:-}"
    total=$((total + 1))
    if ! out=$(CJIT_FLAGS="$flags" "$cjit" check "$dir" --rtol "$rtol" --atol "$atol" 2>&1); then
      echo "FAIL $name ($mode): $(echo "$out" | grep -v '^PASS\|^FAIL (\|^clusters:' | head -3 | tr '\n' ' ')"
      fail=$((fail + 1))
    elif [[ $mode == compiled && ( ( $name =~ ^(unary|binary|reduce_Reduce|softmax|norm_Layer|cast)_ &&
            ! $name =~ $not_lowered ) || $name =~ ^(de)?quantizelinear_.*_tensor || $name =~ ^qdq_ ) ]] &&
         ! grep -qE "generated code in [1-9]" <<< "$out"; then
      # (A here-string: `echo "$out" | grep -q` under pipefail failed when grep left before echo's last write.)
      echo "FAIL $name (compiled): no generated code ran ($(echo "$out" | grep '^clusters:'))"
      fail=$((fail + 1))
    fi
  done
done
echo "$(basename "$generator" .py)${low:+ ($low)}: $((total - fail)) of $total cases pass"
[[ $fail -eq 0 ]]
