#!/usr/bin/env bash
# On the GPU machine (after bench/gpu_build.sh here): the checks of hardening round 3 (issue 22).
#  1. Every CUDA driver and NVRTC entry point the process resolves, traced (an LD_PRELOAD shim
#     over dlsym, built here with `cc -shared`), against ns_compute::cuda::library's lists.
#  2. The CUDA parity suite, the published toy ensembles included.
#  3. Toy CLs on every published likelihood, CPU and CUDA, same seed: failed fits and CLs.
# `bash bench/gpu_hardening.sh [parity|toys]` runs one part (both by default; TOYS=N toys per
# hypothesis, 500 by default). Results go to $OUT (or ./gpu-results).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-results}
mkdir -p "$out"
export NEXTSTAT_PYHF_REF=$PWD/dist-gpu/pyhf-ref NEXTSTAT_LIKELIHOODS=$PWD/dist-gpu/likelihoods
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
dist-gpu/nextstat devices | tee "$out/devices.txt"

part=${1:-all}
if [ "$part" != toys ]; then
echo "== CUDA parity (entry points traced)"
rm -f /tmp/dlsym_trace.log
LD_PRELOAD=$PWD/dist-gpu/dlsym_trace.so dist-gpu/backend_parity --include-ignored --test-threads 1 \
  2>&1 | tee "$out/parity.log" | grep -E "^test |test result|max \|Δq\||panicked"
LD_PRELOAD=$PWD/dist-gpu/dlsym_trace.so dist-gpu/differentiable --include-ignored --test-threads 1 \
  2>&1 | tee "$out/differentiable.log" | grep -E "test result|panicked"
sort -u /tmp/dlsym_trace.log > "$out/resolved_symbols.txt"
echo "resolved: $(wc -l < "$out/resolved_symbols.txt") entry points"; cat "$out/resolved_symbols.txt"
fi
[ "$part" = parity ] && exit 0

echo "== toy CLs on the published likelihoods, CPU vs CUDA (seed 0)"
for ws in dist-gpu/likelihoods/*/workspace.json; do
  name=$(basename "$(dirname "$ws")")
  for device in cpu cuda; do
    /usr/bin/time -f "%e" -o /tmp/t dist-gpu/nextstat hypotest-toys "$ws" --mu 1 --n-toys "${TOYS:-500}" --gpu $device \
      > "$out/toys_${name}_$device.json" 2> "$out/toys_${name}_$device.err"
    echo "$name $device exit=$? seconds=$(cat /tmp/t)"
  done
done | tee "$out/toys.txt"
python3 - "$out" <<'PY' | tee "$out/toys_table.md"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
print("| model | failed CPU | failed CUDA | CLs CPU | CLs CUDA | CLs_exp max abs diff |")
print("|---|---|---|---|---|---|")
for cpu in sorted(out.glob("toys_*_cpu.json")):
    name = cpu.name[len("toys_"):-len("_cpu.json")]
    gpu = out / f"toys_{name}_cuda.json"
    try:
        a, b = json.loads(cpu.read_text()), json.loads(gpu.read_text())
    except Exception as e:
        print(f"| {name} | error: {e} | | | | |")
        continue
    diff = max(abs(x - y) for x, y in zip(a["CLs_exp"], b["CLs_exp"]))
    print(f"| {name} | {a['n_failed']} | {b['n_failed']} | {a['CLs_obs']:.6g} | {b['CLs_obs']:.6g} | {diff:.2g} |")
PY
