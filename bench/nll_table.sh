#!/usr/bin/env bash
# Single-thread NLL + gradient: nextstat (criterion) vs pyhf (numpy logpdf; JAX jit value_and_grad),
# measured in one run on this machine. Prints a markdown table for docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
RAYON_NUM_THREADS=1 cargo bench -p ns-compute --bench nll -- --warm-up-time 2 --measurement-time 5 2>/dev/null \
  > /tmp/nextstat_nll.txt
JAX_PLATFORMS=cpu XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \
  .venv/bin/python bench/pyhf_nll.py > /tmp/pyhf_nll.json
.venv/bin/python - <<'PY'
import json, re
ours = {}
text = open("/tmp/nextstat_nll.txt").read()
# criterion prints "name  time: [lo mid hi]", or the name on its own line when it is long.
for name, value, unit in re.findall(r"^(\S+/nll(?:_grad)?)\s+time:\s+\[\S+ \S+ ([\d.]+) (ns|µs|ms)", text, re.M):
    ours[name] = float(value) * {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3}[unit]
pyhf = json.load(open("/tmp/pyhf_nll.json"))
print("| model | nextstat NLL | nextstat NLL+grad | pyhf numpy logpdf | pyhf JAX value+grad (jit) | NLL+grad vs JAX |")
print("|---|---|---|---|---|---|")
for model, p in pyhf.items():
    n, g = ours.get(f"{model}/nll"), ours.get(f"{model}/nll_grad")
    print(f"| {model} | {n*1e6:.1f} µs | {g*1e6:.1f} µs | {p['pyhf_numpy_logpdf_s']*1e3:.3f} ms | "
          f"{p['pyhf_jax_value_and_grad_s']*1e3:.3f} ms | {p['pyhf_jax_value_and_grad_s']/g:.0f}× |")
PY
