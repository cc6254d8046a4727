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
# library and numpy (tests/runtime/test_imports.py keeps it that way).
for f in __init__.py errors.py config.py nd.py; do cp "$ROOT/kiln/$f" "$PKG/"; done
for d in runtime rpc exec; do
  mkdir -p "$PKG/$d"
  (cd "$ROOT/kiln" && find "$d" -name '*.py' -exec cp --parents {} "$PKG/" \;)
done
mkdir -p "$PKG/contrib"
for f in __init__.py utils.py cc.py tar.py; do cp "$ROOT/kiln/contrib/$f" "$PKG/contrib/"; done

# Optional C runtime builds, one per cross prefix ("" for this machine).
for cross in "$@"; do
  name=$(echo "${cross%-}" | sed 's/^$/host/')
  make -s -C "$ROOT/src/runtime" CROSS="$cross" OUT="$STAGE/build/$name" >/dev/null
  mkdir -p "$STAGE/kiln_runtime/$name"
  cp "$STAGE/build/$name/kiln_rpc" "$STAGE/build/$name/kiln_run" "$STAGE/build/$name/libkiln_runtime.so" \
     "$STAGE/build/$name/libkiln_runtime.a" "$STAGE/kiln_runtime/$name/"
  cp "$ROOT/src/runtime/kiln_runtime.h" "$ROOT/src/runtime/kiln_graph.h" "$STAGE/kiln_runtime/$name/"
  # The oneDNN shim (built where oneDNN's headers are): kiln_run finds it beside itself.
  if [ -f "$STAGE/build/$name/libkiln_dnnl.so" ]; then cp "$STAGE/build/$name/libkiln_dnnl.so" "$STAGE/kiln_runtime/$name/"; fi
done

cat > "$STAGE/kiln_runtime/README" <<'README'
kiln runtime package: run compiled kiln modules and serve RPC on a device.

Python (needs Python >= 3.11 and numpy; no compiler packages):
  export PYTHONPATH=$PWD/kiln_runtime/python:$PYTHONPATH
  python3 -m kiln.exec.rpc_server --tracker HOST:9190 --key KEY

No Python (if this package holds a <triple>/ folder):
  kiln_runtime/<triple>/kiln_rpc --tracker HOST:9190 --key KEY [--cc gcc]
  kiln_runtime/<triple>/kiln_run --package model.tar --input in.npz --output out.npz --dump-time

See docs/cross-compile.md and docs/c-runtime.md in the kiln repository.
README

mkdir -p "$(dirname "$OUTPUT")"
tar -C "$STAGE" -czf "$OUTPUT" kiln_runtime
echo "$OUTPUT"
