#!/bin/bash
# Packs what the GPU machine needs (docs/gpu-validation.md), since it has CUDA and a driver but none of our
# Debian libraries and no package registry:
#   .device/cjit-gpu-bin.tar.xz   the binaries, every shared library ldd lists for them except glibc's own
#                                 (oneDNN, abseil, protobuf...; LLVM is linked in statically), and libdevice;
#   .device/cjit-gpu-data.tar.xz  the shared real models and the ONNX backend conformance data.
# Each stays under the device tool's 64 MiB per call; carry them in separate calls if together they do not.
# Usage: bash tools/gpu-bundle.sh [build-dir]   (.device/ is git-ignored)
# CJIT_BUNDLE_BINS="cjit" packs only those binaries (and their libraries); CJIT_BUNDLE_DATA=0 skips the data
# archive (tools/gpu-peers needs neither the tests nor the data).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
out=$root/.device
mkdir -p "$out"
names=(${CJIT_BUNDLE_BINS:-cjit cjit-gpu-bench cjit_gpu_tests conformance_runner})
cmake --build "$build" -j2 --target "${names[@]}"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/cjit/bin" "$stage/cjit/lib" "$stage/cjit/lib-compat" "$stage/cjit/cuda/nvvm/libdevice"
bins=()
for n in "${names[@]}"; do
  for d in tools tests; do [ -x "$build/$d/$n" ] && bins+=("$build/$d/$n"); done
done
cp "${bins[@]}" "$stage/cjit/bin/"
for b in "${bins[@]}"; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | grep -vE '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux-x86-64)\.so' | while read -r lib; do
  case "$(basename "$lib")" in
    # The C++ runtime is used only where the machine's own is older than ours (gpu-validate.sh decides).
    libstdc++.so*|libgcc_s.so*) cp -L "$lib" "$stage/cjit/lib-compat/" ;;
    *) cp -L "$lib" "$stage/cjit/lib/" ;;
  esac
done
cp /usr/local/cuda/nvvm/libdevice/libdevice.10.bc "$stage/cjit/cuda/nvvm/libdevice/"
strip --strip-unneeded "$stage"/cjit/bin/* 2>/dev/null || true
tar -C "$stage" -cf - cjit | xz -T2 -9 > "$out/cjit-gpu-bin.tar.xz"  # -9: a 64 MiB window finds the four binaries' shared code
if [ "${CJIT_BUNDLE_DATA:-1}" = 0 ]; then ls -la "$out"; exit 0; fi
data=$(mktemp -d)
mkdir -p "$data/cjit-data"
[ -d "$root/../shared/models" ] && cp -r "$root/../shared/models" "$data/cjit-data/models"
[ -d /usr/share/libonnx-testdata/data ] && cp -r /usr/share/libonnx-testdata/data "$data/cjit-data/onnx-testdata"
tar -C "$data" -cf - cjit-data | xz -T2 -6 > "$out/cjit-gpu-data.tar.xz"
rm -rf "$data"
ls -la "$out"
