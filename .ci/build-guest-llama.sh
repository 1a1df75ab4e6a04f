#!/bin/bash
# llama.cpp's libraries for the 6.1 guest (`kmemsim vm`): the same version as the venv's
# llama-cpp-python, built for the CPU qemu emulates (TCG: AVX2, FMA, F16C, no AVX-512) instead of
# this machine's (-march=native: AVX-512 here, SIGILL in the guest). The guest's llama_cpp loads them
# through LLAMA_CPP_LIB_PATH (llama_cpp/llama_cpp.py), which `kmemsim vm run` sets.
# Usage: build-guest-llama.sh VENV OUTDIR
set -euo pipefail
VENV=$1 OUT=$2
VER=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))')
WORK=$(mktemp -d /tmp/kmemsim-guest-llama.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
"$VENV/bin/python" -m pip --disable-pip-version-check -q download --no-deps --no-binary :all: \
    "llama-cpp-python==$VER" -d "$WORK"
tar -xzf "$WORK"/llama_cpp_python-*.tar.gz -C "$WORK"
SRC=$(echo "$WORK"/llama_cpp_python-*/vendor/llama.cpp)
# the libraries find each other beside themselves ($ORIGIN), as the venv's do
cmake -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DCMAKE_INSTALL_RPATH='$ORIGIN' \
    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
    -DGGML_AVX512=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_COMMON=OFF >/dev/null
cmake --build "$WORK/build" --target llama -j "$(nproc)" >/dev/null
mkdir -p "$OUT.tmp/lib"
find "$WORK/build" -name '*.so*' \( -type f -o -type l \) -exec cp -a {} "$OUT.tmp/lib/" \;
echo "$VER" > "$OUT.tmp/version"
rm -rf "$OUT" && mv "$OUT.tmp" "$OUT"
echo "built llama.cpp $VER for the guest's CPU into $OUT/lib"
