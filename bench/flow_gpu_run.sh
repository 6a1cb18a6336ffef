#!/usr/bin/env bash
# On the GPU machine, with dist-flow/ carried (built here by bench/flow_gpu_build.sh): the CUDA
# tests of the mixture reduction and of unbinned models, the flow tests with PyTorch on the GPU
# (zero-copy from a torch flow), the flow benchmark, and which ONNX Runtime providers load.
# Results go to $OUT (or ./flow-results).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-flow-results}
mkdir -p "$out"
export NEXTSTAT_KERNEL_CACHE=/tmp/nextstat-kernels XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"
python3 - <<'PY' | tee "$out/python.txt"
import sys, torch, numpy, onnxruntime
print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available(), "numpy", numpy.__version__, "onnxruntime", onnxruntime.__version__, onnxruntime.get_available_providers())
PY
ORT_DYLIB_PATH=$(python3 -c 'import onnxruntime, os, glob; print(sorted(glob.glob(os.path.join(os.path.dirname(onnxruntime.__file__), "capi", "libonnxruntime.so.*")))[-1])')
export ORT_DYLIB_PATH
echo "== CUDA: mixture reduction and unbinned models"
for t in unbinned_reduce_cuda unbinned_cuda; do
  dist-flow/$t --include-ignored --test-threads 1 2>&1 | tee "$out/$t.log" | grep -E "^test |test result|panicked"
done
echo "== Python: flow tests with torch on the GPU"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/nextstat-py dist-flow/wheels/nextstat-*.whl
python3 -c 'import onnx' 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/nextstat-py dist-flow/extra/*.whl
export PYTHONPATH=/tmp/nextstat-py
NEXTSTAT_BIN=$PWD/dist-flow/nextstat python3 -m pytest -q -p no:cacheprovider -rs tests/python/test_unbinned_flows.py 2>&1 | tee "$out/flows_pytest.log" | tail -6
echo "== providers: tensorrt,cuda,cpu on this machine's onnxruntime"
python3 - <<'PY' | tee "$out/providers.json"
import json, sys, tempfile, os
os.environ["NEXTSTAT_FLOW_PROVIDERS"] = "tensorrt,cuda,cpu"  # read when nextstat is imported
sys.path.insert(0, "tests/python")
import flowlib
from nextstat import unbinned
from pathlib import Path
d = Path(tempfile.mkdtemp())
m = unbinned.export_flow(flowlib.Spline1D(5.0, 2.5), d, [("x", 0.0, 10.0)], dtype=__import__("torch").float32)
f = unbinned.load_flow(m)
print(json.dumps({"provider": f.provider, "fallbacks": f.fallbacks}, indent=1))
PY
echo "== flow benchmark"
python3 bench/flow_bench.py --out "$out" 2>&1 | grep -v Warning
