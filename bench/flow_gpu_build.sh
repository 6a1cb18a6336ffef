#!/usr/bin/env bash
# Build here what bench/flow_gpu_run.sh runs on the GPU machine, into dist-flow/ (ignored by
# git; carry it): the nextstat binary, the CUDA tests of the mixture reduction and of unbinned
# models, the Python wheel, and onnx (which torch.onnx.export needs) for a machine without it.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p dist-flow/extra
cargo build --release -p ns-cli --bin nextstat
cargo test --release -p ns-unbinned --test reduce_cuda --test cuda --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import sys, json, shutil
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] in ("reduce_cuda", "cuda") and m.get("executable"):
        shutil.copy(m["executable"], "dist-flow/unbinned_" + m["target"]["name"])'
cp target/release/nextstat dist-flow/
strip dist-flow/nextstat dist-flow/unbinned_reduce_cuda dist-flow/unbinned_cuda
rm -rf dist-flow/wheels && (cd bindings/ns-py && maturin build --release -o ../../dist-flow/wheels)
python3 -m pip download -q onnx==1.23.2 protobuf ml_dtypes typing_extensions --no-deps --python-version 3.12 \
  --only-binary=:all: --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d dist-flow/extra
du -sh dist-flow
