"""pyhf's side of docs/benchmarks.md: logpdf (numpy) and logpdf + gradient (JAX, jit) on the
same models, warm medians. Run: .venv/bin/python bench/pyhf_nll.py"""

import json
import sys
import time
from pathlib import Path

import numpy as np
import pyhf

SHARED = Path(__file__).resolve().parents[2] / "shared" / "pyhf-ref" / "workspaces"
MODELS = [("tHq_184", "nextstat_tHu.json"), ("tttt_249", "nextstat_tttt_prod.json"), ("synthetic_2000bins", "synthetic_large_2000bins.json")]


def median_seconds(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main():
    rows = {}
    for label, file in MODELS:
        spec = json.loads((SHARED / file).read_text())
        pyhf.set_backend("numpy")
        ws = pyhf.Workspace(spec)
        model = ws.model()
        data = np.asarray(ws.data(model))
        pars = np.asarray(model.config.suggested_init())
        numpy_s = median_seconds(lambda: model.logpdf(pars, data), 50)
        import jax

        jax.config.update("jax_enable_x64", True)
        pyhf.set_backend("jax")
        model_j = pyhf.Workspace(spec).model()
        data_j, pars_j = jax.numpy.asarray(data), jax.numpy.asarray(pars)
        vg = jax.jit(jax.value_and_grad(lambda p: -model_j.logpdf(p, data_j)[0]))
        jax_s = median_seconds(lambda: jax.block_until_ready(vg(pars_j)), 50)
        rows[label] = {"pyhf_numpy_logpdf_s": numpy_s, "pyhf_jax_value_and_grad_s": jax_s}
        print(label, rows[label], file=sys.stderr)
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
