#!/usr/bin/env bash
# Copies the shared libraries the built tools need, other than the C runtime and CUDA's, into
# BUILD/rt, for a GPU machine that lacks the Debian packages (libzmq, jansson, pcre2 and their
# dependencies); scripts/cuda-device.sh puts BUILD/rt on LD_LIBRARY_PATH.
#   scripts/cuda-runtime-libs.sh [BUILD [BIN]]     (default build-cuda, bin-cuda)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-cuda} bin=${2:-bin-cuda}
mkdir -p "$build/rt"
for f in "$bin"/di-* "$build"/tests/test_*cuda "$build"/bench/cuda_bench; do
    [[ -x $f ]] || continue
    ldd "$f" | awk '$3 ~ /^\// {print $3}'
done | sort -u | grep -vE '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*|libcuda[^/]*|libcublas[^/]*|libresolv|libnsl|libutil)\.so' |
    while read -r lib; do cp -L "$lib" "$build/rt/"; done
ls "$build/rt"
