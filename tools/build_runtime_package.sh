#!/bin/sh
# Build kiln_runtime.tar.gz: what a device needs to run modules and serve RPC, and nothing of
# the compiler (no llvmlite, no onnx). The documents' tvm_runtime.tar.gz, for kiln.
#
#   tools/build_runtime_package.sh [OUTPUT.tar.gz] [CROSS-PREFIX ...]
#
#   tools/build_runtime_package.sh                                   # Python runtime only
#   tools/build_runtime_package.sh dist/rt.tar.gz aarch64-linux-gnu- # + C runtime and kiln_rpc
#
# On the device:
#   tar -xzf kiln_runtime.tar.gz
#   export PYTHONPATH=`pwd`/kiln_runtime/python:$PYTHONPATH      # needs Python >= 3.11 + numpy
#   python3 -m kiln.exec.rpc_server --tracker HOST:9190 --key rasp
# or, without Python at all:
#   kiln_runtime/aarch64-linux-gnu/kiln_rpc --tracker HOST:9190 --key rasp
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUTPUT=${1:-kiln_runtime.tar.gz}
[ $# -gt 0 ] && shift
case "$OUTPUT" in /*) ;; *) OUTPUT="$(pwd)/$OUTPUT" ;; esac

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
PKG="$STAGE/kiln_runtime/python/kiln"
mkdir -p "$PKG"

# The runtime, the RPC server and the helpers they use; each imports only the standard
# library and numpy (tests/runtime/test_imports.py reads every import in these files, and
# tests/runtime/test_runtime_package.py runs this package in a venv with numpy only).
for f in __init__.py errors.py config.py nd.py limits.py; do cp "$ROOT/kiln/$f" "$PKG/"; done
for d in runtime rpc; do
  mkdir -p "$PKG/$d"
  (cd "$ROOT/kiln" && find "$d" -name '*.py' -exec cp --parents {} "$PKG/" \;)
done
# python -m kiln.exec.rpc_server / rpc_tracker / rpc_proxy / query_rpc_tracker (not tune_cli, cache_cli)
mkdir -p "$PKG/exec"
for f in __init__.py rpc_cli.py rpc_server.py rpc_tracker.py rpc_proxy.py query_rpc_tracker.py; do
  cp "$ROOT/kiln/exec/$f" "$PKG/exec/"
done
mkdir -p "$PKG/contrib"
for f in __init__.py utils.py cc.py tar.py graph_executor.py graph_runtime.py; do cp "$ROOT/kiln/contrib/$f" "$PKG/contrib/"; done

# The oneDNN shim for this machine, where oneDNN's headers are: libraries exported without it
# (or for this triple elsewhere) find it here (kiln/runtime/json_dnnl.py); the device never compiles it.
if [ -f /usr/include/dnnl.hpp ] && command -v c++ >/dev/null 2>&1; then
  mkdir -p "$STAGE/kiln_runtime/host"
  c++ -O2 -std=c++17 -shared -fPIC "$ROOT/src/contrib/dnnl_json_runtime.cc" -o "$STAGE/kiln_runtime/host/libkiln_dnnl.so" -ldnnl
fi

# Optional C runtime builds, one per cross prefix ("" for this machine).
for cross in "$@"; do
  name=$(echo "${cross%-}" | sed 's/^$/host/')
  make -s -C "$ROOT/src/runtime" CROSS="$cross" OUT="$STAGE/build/$name" >/dev/null
  mkdir -p "$STAGE/kiln_runtime/$name"
  cp "$STAGE/build/$name/kiln_rpc" "$STAGE/build/$name/kiln_run" "$STAGE/build/$name/libkiln_runtime.so" \
     "$STAGE/build/$name/libkiln_runtime.a" "$STAGE/kiln_runtime/$name/"
  cp "$ROOT/src/runtime/kiln_runtime.h" "$ROOT/src/runtime/kiln_graph.h" "$STAGE/kiln_runtime/$name/"
  # The oneDNN shim (built where oneDNN's headers are): kiln_run finds it beside itself.
  if [ -f "$STAGE/build/$name/libkiln_dnnl.so" ]; then cp -f "$STAGE/build/$name/libkiln_dnnl.so" "$STAGE/kiln_runtime/$name/"; fi
done

cat > "$STAGE/kiln_runtime/README" <<'README'
kiln runtime package: run compiled kiln modules and serve RPC on a device.

Python (needs Python >= 3.11 and numpy; no compiler packages):
  export PYTHONPATH=$PWD/kiln_runtime/python:$PYTHONPATH
  python3 -m kiln.exec.rpc_server --tracker HOST:9190 --key KEY
  + pyopencl for OpenCL modules, + cuda-bindings for CUDA modules (NVRTC only for modules
  exported without PTX); oneDNN-offloaded libraries need oneDNN's library (libdnnl).

No Python (if this package holds a <triple>/ folder):
  kiln_runtime/<triple>/kiln_rpc --tracker HOST:9190 --key KEY [--cc gcc]
  kiln_runtime/<triple>/kiln_run --package model.tar --input in.npz --output out.npz --dump-time

See docs/cross-compile.md and docs/c-runtime.md in the kiln repository.
README

mkdir -p "$(dirname "$OUTPUT")"
tar -C "$STAGE" -czf "$OUTPUT" kiln_runtime
echo "$OUTPUT"
