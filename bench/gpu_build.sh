#!/usr/bin/env bash
# Build, on this (CPU) machine, everything the GPU machine runs: the nextstat binary, the GPU
# benchmark, the CUDA parity tests and the Python wheel, into dist-gpu/ (ignored by git; name it in the device
# tool's `carry`), with a copy of the shared pyhf references. Then, on the GPU machine:
#   bash bench/gpu_run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p dist-gpu
# The CUDA kernels compiled ahead of time (sm_80/90/100/120), embedded by every build below.
eval "$(bash scripts/prebuild_kernels.sh)"
cargo build --release -p ns-cli --bin nextstat && cargo build --release -p ns-inference --example gpu_bench --features ns-compute/wgpu
# The test binaries with CUDA arms: the backend parity suite and the differentiable layer.
cargo test --release -p ns-tests --test backend_parity --test differentiable --test f32_parity --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import sys, json, shutil
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] in ("backend_parity", "differentiable", "f32_parity") and m.get("executable"):
        shutil.copy(m["executable"], "dist-gpu/" + m["target"]["name"])'
# The unbinned CUDA parity tests and benchmark (crates/ns-unbinned).
cargo test --release -p ns-unbinned --test cuda --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import sys, json, shutil
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "cuda" and m.get("executable"):
        shutil.copy(m["executable"], "dist-gpu/unbinned_cuda")'
cargo build --release -p ns-unbinned --example unbinned_bench
cp target/release/nextstat target/release/examples/gpu_bench target/release/examples/unbinned_bench dist-gpu/
strip dist-gpu/nextstat dist-gpu/gpu_bench dist-gpu/backend_parity dist-gpu/differentiable dist-gpu/f32_parity dist-gpu/unbinned_cuda dist-gpu/unbinned_bench
# The dlsym tracer of bench/gpu_hardening.sh (which CUDA entry points a process resolves).
cc -shared -fPIC -O2 -o dist-gpu/dlsym_trace.so bench/dlsym_trace.c -ldl
# The Vulkan loader, for a GPU machine without one (NVIDIA's driver brings the ICD).
cp -L /usr/lib/x86_64-linux-gnu/libvulkan.so.1 dist-gpu/ 2>/dev/null || true
rm -rf dist-gpu/pyhf-ref dist-gpu/likelihoods && cp -r ../shared/pyhf-ref dist-gpu/pyhf-ref && cp -r ../shared/likelihoods dist-gpu/likelihoods
(cd bindings/ns-py && maturin build --release -o ../../dist-gpu/wheels)
ls -la dist-gpu dist-gpu/wheels
