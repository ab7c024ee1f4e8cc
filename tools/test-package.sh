#!/usr/bin/env bash
# The installable package, as a host application sees it (issue 10): installs build/ into a temporary
# prefix, then builds the examples/ host apps (C99 and C++17) three ways and runs each on a real model from
# 4 threads with zero-copy inputs and bound outputs, against the reference outputs:
#   1. find_package(clusterjit 0.2 CONFIG) on the installed package,
#   2. pkg-config --cflags --libs clusterjit (plain compiler commands),
#   3. add_subdirectory of the source tree.
# Then the Python package: installed by cmake, and pip-installed into a venv against the installed library.
# Also checks the installed headers compile alone as C99 and C++17 and include only the standard library.
# usage: tools/test-package.sh [MODEL_DIR]   (default: the shared ppocr_mobile_cls)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
model=${1:-}
if [[ -z "$model" ]]; then
  if [[ -d ../shared/models ]]; then model=$(cd ../shared/models/ppocr_mobile_cls && pwd); else model=$root/models/ppocr_mobile_cls; fi
fi
[[ -f "$model/model.onnx" ]] || { echo "test-package: no model at $model"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
echo "== install into $prefix"
cmake --install build --prefix "$prefix" >/dev/null
ls "$prefix/lib/libclusterjit.so" "$prefix/include/clusterjit/clusterjit.h" "$prefix/include/clusterjit/clusterjit.hpp" \
   "$prefix/lib/cmake/clusterjit/clusterjitConfig.cmake" "$prefix/lib/pkgconfig/clusterjit.pc" >/dev/null
grep -q 'SONAME.*libclusterjit.so.0.2' <<< "$(readelf -d "$prefix/lib/libclusterjit.so")" || { echo "FAIL: SONAME"; exit 1; }
exported=$(nm -D --defined-only "$prefix/lib/libclusterjit.so" | awk '$2 ~ /^[A-Z]$/ {print $3}' | grep -v '^cjit_' || true)
[[ -z "$exported" ]] || { echo "FAIL: exports more than the C API:"; echo "$exported" | head; exit 1; }

echo "== public headers alone: C99 and C++17, standard library only"
printf '#include <clusterjit/clusterjit.h>\nint main(void) { return cjit_status_code(0); }\n' > "$work/h.c"
printf '#include <clusterjit/clusterjit.hpp>\nint main() { return cjit::Version().empty(); }\n' > "$work/h.cc"
cc -std=c99 -Wall -Wextra -pedantic -Werror -I"$prefix/include" -c "$work/h.c" -o "$work/h.o"
c++ -std=c++17 -Wall -Wextra -pedantic -Werror -I"$prefix/include" -c "$work/h.cc" -o "$work/hh.o"
for src in "$work/h.c" "$work/h.cc"; do
  compiler=cc; std=-std=c99
  [[ $src == *.cc ]] && { compiler=c++; std=-std=c++17; }
  deps=$($compiler $std -I"$prefix/include" -M "$src" | tr ' \\' '\n\n' | grep '^/' | sort -u)
  bad=$(echo "$deps" | grep -v -x -F "$src" | grep -v -E "^$prefix/include/clusterjit/|^/usr/include/[^/]+\.h$|^/usr/include/(bits|sys|gnu|linux|asm|asm-generic)/|^/usr/include/x86_64-linux-gnu/|^/usr/include/c\+\+/|^/usr/lib/gcc/" || true)
  [[ -z "$bad" ]] || { echo "FAIL: $src includes non-standard headers:"; echo "$bad"; exit 1; }
done

run_both() {  # DIR_WITH_BINARIES LABEL
  for exe in run_model_c run_model_cpp; do
    echo "-- $2: $exe"
    "$1/$exe" "$model" 4 10 | tail -2
  done
}

echo "== 1. find_package(clusterjit 0.2 CONFIG)"
cmake -S examples -B "$work/b1" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/b1" -j2 >/dev/null
run_both "$work/b1" find_package

echo "== 2. pkg-config"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
flags=$(pkg-config --cflags --libs clusterjit)
libdir=$(pkg-config --variable=libdir clusterjit)
mkdir -p "$work/b2"
cc -std=c99 -D_POSIX_C_SOURCE=200809L -D_ISOC11_SOURCE -Wall -c examples/tensor_pb.c -o "$work/b2/tensor_pb.o"
cc -std=c99 -D_POSIX_C_SOURCE=200809L -D_ISOC11_SOURCE -Wall -o "$work/b2/run_model_c" examples/run_model.c "$work/b2/tensor_pb.o" \
  $flags -Wl,-rpath,"$libdir" -lpthread -lm
c++ -std=c++17 -Wall -o "$work/b2/run_model_cpp" examples/run_model.cc "$work/b2/tensor_pb.o" $flags -Wl,-rpath,"$libdir" -lpthread
run_both "$work/b2" pkg-config

echo "== 3. add_subdirectory"
cmake -S examples -B "$work/b3" -G Ninja -DCLUSTERJIT_FROM_SOURCE=ON -DCLUSTERJIT_SOURCE_DIR="$root" >/dev/null
cmake --build "$work/b3" -j2 --target run_model_c run_model_cpp >/dev/null
run_both "$work/b3" add_subdirectory
echo "== 4. Python: the installed package, and pip install into a virtual environment"
pydir=$(ls -d "$prefix"/lib/python3*/dist-packages)
dims=(--dim p2o.DynamicDimension.1=48 --dim p2o.DynamicDimension.2=192)
if [[ $(basename "$model") != ppocr_mobile_cls ]]; then dims=(); fi
PYTHONPATH=$pydir /usr/bin/python3 examples/run_model.py "$model/model.onnx" --runs 3 "${dims[@]}" | tail -2
PYTHONPATH=$pydir /usr/bin/python3 -m clusterjit flags | grep -q intra_op_threads || { echo "FAIL: python3 -m clusterjit flags"; exit 1; }
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
CJIT_PREFIX=$prefix "$work/venv/bin/pip" install -q --no-build-isolation --no-index "$root/python"
(cd "$work" && "$work/venv/bin/python" "$root/examples/run_model.py" "$model/model.onnx" --runs 3 "${dims[@]}" | tail -2)
"$work/venv/bin/python" -c "import clusterjit, sys; sys.exit(0 if clusterjit.__file__.startswith('$work/venv') else 1)" \
  || { echo "FAIL: the venv's clusterjit is not the one pip installed"; exit 1; }
echo "test-package: PASS"
