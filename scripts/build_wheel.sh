#!/usr/bin/env bash
# The Python wheel as it is released: manylinux2014 (glibc >= 2.17), abi3 (CPython >= 3.9), the
# CUDA kernels compiled ahead of time and embedded (CUDA itself is still loaded at run time, so
# the one wheel runs on machines without a GPU), linked by zig from PyPI (no Docker).
#   bash scripts/build_wheel.sh [TARGET ...]     default: x86_64-unknown-linux-gnu
# Wheels go to $WHEEL_DIR (default dist/); the build shares target/ with the workspace.
# NEXTSTAT_WHEEL_BINS="ns-cli ns-server" also builds those packages' binaries in the wheel's
# environment, reusing its compiled dependencies (target/<target>/release/; scripts/wheel_cargo.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
[ -x "$python" ] || python=python3
# Absolute, not resolved: a venv's interpreter is a link that must keep its name.
case $python in */*) python=$(realpath -s "$python") ;; esac
out=${WHEEL_DIR:-dist}
case $out in /*) ;; *) out=$PWD/$out ;; esac
targets=${*:-x86_64-unknown-linux-gnu}
"$python" -c 'import maturin, ziglang' 2>/dev/null ||
  "$python" -m pip install --quiet --disable-pip-version-check -r requirements-build.txt
[ -n "${NEXTSTAT_PREBUILT_KERNELS:-}" ] || eval "$(PYTHON=$python bash scripts/prebuild_kernels.sh)"
mkdir -p "$out"
for target in $targets; do
  rustup target list --installed | grep -qx "$target" || rustup target add "$target" >&2
  # maturin runs zig through this interpreter's ziglang package.
  (cd bindings/ns-py && PATH="$(dirname "$python"):$PATH" CARGO_TARGET_DIR="$PWD/../../target" \
    CARGO="$PWD/../../scripts/wheel_cargo.sh" "$python" -m maturin build --quiet --release --zig --compatibility manylinux2014 \
    --target "$target" --out "$out") >&2
done
ls "$out"/nextstat-*.whl
