#!/usr/bin/env bash
# Build, on this (CPU) machine, everything the GPU machine runs: the nextstat binary, the GPU
# benchmark, the CUDA parity tests and the Python wheel, into dist-gpu/ (ignored by git; name it in the device
# tool's `carry`), with a copy of the shared pyhf references. Then, on the GPU machine:
#   bash bench/gpu_run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p dist-gpu
cargo build --release -p ns-cli --bin nextstat && cargo build --release -p ns-inference --example gpu_bench
test_bin=$(cargo test --release -p ns-tests --test backend_parity --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import sys, json
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "backend_parity" and m.get("executable"):
        print(m["executable"])')
cp target/release/nextstat target/release/examples/gpu_bench dist-gpu/
cp "$test_bin" dist-gpu/backend_parity
strip dist-gpu/nextstat dist-gpu/gpu_bench dist-gpu/backend_parity
rm -rf dist-gpu/pyhf-ref dist-gpu/likelihoods && cp -r ../shared/pyhf-ref dist-gpu/pyhf-ref && cp -r ../shared/likelihoods dist-gpu/likelihoods
(cd bindings/ns-py && maturin build --release -o ../../dist-gpu/wheels)
ls -la dist-gpu dist-gpu/wheels
