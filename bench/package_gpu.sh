#!/usr/bin/env bash
# On the GPU machine: the released artefacts (the manylinux2014 wheel and the glibc-2.17 CLI of
# scripts/release.sh, copied to dist-gpu/ with ../shared/pyhf-ref) on a real GPU — what the build
# says it embeds, the first GPU call of a fresh process with an empty kernel cache (the embedded
# kernels: no NVRTC compile), and the Python GPU tests from the installed wheel. Output in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-results}
mkdir -p "$out"
export NEXTSTAT_PYHF_REF=$PWD/dist-gpu/pyhf-ref
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/nextstat-py dist-gpu/wheels/nextstat-*.whl
export PYTHONPATH=/tmp/nextstat-py
{
  echo "== build info (wheel, CLI)"
  python3 -c 'import nextstat, json; print(json.dumps(nextstat.build_info()))'
  dist-gpu/nextstat --version
  dist-gpu/nextstat devices
  echo "== first CUDA fit of a fresh process, empty kernel cache (tHq, 184 parameters)"
  for run in wheel cli; do
    rm -rf /tmp/ns-cold && mkdir -p /tmp/ns-cold
    if [ $run = wheel ]; then
      NEXTSTAT_KERNEL_CACHE=/tmp/ns-cold python3 -c '
import time, nextstat
t0 = time.perf_counter()
m = nextstat.Workspace("dist-gpu/pyhf-ref/workspaces/nextstat_tHu.json").model()
r = nextstat.fit(m, device="cuda")
print(f"wheel: first cuda fit {time.perf_counter() - t0:.2f} s, converged {r.converged}, twice_nll {r.twice_nll:.9f}")'
    else
      t0=$EPOCHREALTIME
      NEXTSTAT_KERNEL_CACHE=/tmp/ns-cold dist-gpu/nextstat fit dist-gpu/pyhf-ref/workspaces/nextstat_tHu.json --gpu cuda >/dev/null
      python3 -c "print(f'cli: first cuda fit {$EPOCHREALTIME - $t0:.2f} s')"
    fi
    echo "kernel cache after it: $(ls /tmp/ns-cold | wc -l) files (0: nothing was compiled)"
  done
} 2>&1 | tee "$out/package.txt"
[ -e ../shared ] || ln -s "$PWD/dist-gpu" ../shared
NEXTSTAT_PREBUILT_KERNELS=embedded NEXTSTAT_BIN=$PWD/dist-gpu/nextstat python3 -m pytest -q -p no:cacheprovider -rs \
  tests/python/test_python_gpu.py tests/python/test_packaging.py 2>&1 | tee "$out/python_gpu.log" | tail -8
