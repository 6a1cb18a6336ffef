#!/usr/bin/env bash
# Compile the CUDA kernels ahead of time (sm_80, sm_90, sm_100, sm_120) with NVRTC from pip (no
# GPU, no CUDA toolkit) into target/prebuilt-kernels, and print the export that makes the next
# release build embed them:   eval "$(bash scripts/prebuild_kernels.sh)"
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
[ -x "$python" ] || python=python3
"$python" -c 'import nvidia.cu13' 2>/dev/null ||
    "$python" -m pip install --quiet "$(grep '^nvidia-cuda-nvrtc' requirements-test.txt)" >&2
nvrtc_lib=$("$python" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))')
dir=$PWD/target/prebuilt-kernels
# Built first, then run: NVRTC's minutes hold no lock on target/, so another cargo command (the
# lints, in scripts/test.sh) can run beside them.
cargo build --quiet -p ns-compute --example prebuild_kernels >&2
LD_LIBRARY_PATH="$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "${CARGO_TARGET_DIR:-target}/debug/examples/prebuild_kernels" "$dir" >&2
echo "export NEXTSTAT_PREBUILT_KERNELS=$dir"
