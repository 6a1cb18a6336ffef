#!/usr/bin/env bash
# On the GPU machine (after bench/gpu_build.sh here): the CUDA parity tests, then the standard GPU
# table (CPU with every core vs CUDA) on an 8-parameter and a 184-parameter model, and pyhf+JAX on
# the same GPU as the peer when its wheels are in .whl/. Results go to $OUT (or ./gpu-results).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-results}
mkdir -p "$out"
export NEXTSTAT_PYHF_REF=$PWD/dist-gpu/pyhf-ref NEXTSTAT_LIKELIHOODS=$PWD/dist-gpu/likelihoods NEXTSTAT_KERNEL_CACHE=/tmp/nextstat-kernels
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"
# --no-parity: the benchmarks only (the parity binaries need not be carried).
if [ "${1:-}" != --no-parity ]; then
  echo "== CUDA parity tests"
  for suite in backend_parity differentiable; do
    dist-gpu/$suite --include-ignored --test-threads 1 --nocapture 2>&1 | tee -a "$out/parity.log" | grep -E "^test |result|toys|panicked"
  done
fi
if ls dist-gpu/wheels/nextstat-*.whl >/dev/null 2>&1; then
  echo "== Python package with device=\"cuda\""
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/nextstat-py dist-gpu/wheels/nextstat-*.whl
  [ -e ../shared ] || ln -s "$PWD/dist-gpu" ../shared   # docs/python.md reads ../shared/pyhf-ref
  PYTHONPATH=/tmp/nextstat-py NEXTSTAT_BIN=$PWD/dist-gpu/nextstat python3 -m pytest -q -p no:cacheprovider \
    tests/python/test_python_gpu.py tests/python/test_docs.py 2>&1 | tee "$out/python_gpu.log" | tail -5
fi
ws=dist-gpu/pyhf-ref/workspaces
echo "== cold start: whole processes, tHq fit, each with an empty kernel cache unless said"
bash bench/cold_start.sh "$ws/nextstat_tHu.json" | tee "$out/cold_start.txt"
: > "$out/gpu_bench.jsonl"
# MODEL MU TOYS CPU_TOYS BIG_TOYS (μ near the expected limit, so that CLs is not 0)
while read -r file mu toys cpu_toys big; do
  echo "== $file"
  dist-gpu/gpu_bench "$ws/$file" --mu "$mu" --toys "$toys" --cpu-toys "$cpu_toys" --big-toys "$big" \
    | tee -a "$out/gpu_bench.jsonl"
done <<'MODELS'
nextstat_complex_workspace.json 2.5 1000 1000 0
nextstat_tHu.json 0.30 1000 1000 10000
MODELS
echo "== the same toys with the optimizer on the host (lockstep, one launch per step), for comparison"
NEXTSTAT_GPU_OPTIMIZER=host dist-gpu/gpu_bench "$ws/nextstat_tHu.json" --mu 0.30 --toys 1000 --cpu-toys 100 --big-toys 0 \
  | tee "$out/gpu_bench_host_optimizer.json"
if [ -d .gl ]; then
  # The f32 backend on the GPU's Vulkan driver, with the loader and GL vendor libraries carried in
  # .gl/ (docs/gpu-f32.md): its parity suite, then CPU / CUDA / Vulkan side by side.
  echo "== f32 on NVIDIA's Vulkan driver"
  for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
  dist-gpu/f32_parity --test-threads 1 --nocapture 2>&1 | tee "$out/f32_parity.log" | grep -E "^test |result|panicked"
  for model in "nextstat_complex_workspace.json 2.5" "nextstat_tHu.json 0.30"; do
    set -- $model
    dist-gpu/gpu_bench "$ws/$1" --mu "$2" --toys 1000 --devices cpu,cuda,vulkan | tee -a "$out/gpu_bench_vulkan.jsonl"
  done
fi
if ls .whl/*.whl >/dev/null 2>&1; then
  echo "== pyhf + JAX on the GPU"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && PYTHONPATH=/tmp/site python3 bench/pyhf_jax_gpu.py "$ws" | tee "$out/pyhf_jax.json"
fi
python3 bench/gpu_table.py "$out" | tee "$out/gpu_table.md"
