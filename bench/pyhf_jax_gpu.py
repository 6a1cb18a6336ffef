"""pyhf 0.7.6 with its JAX backend on the GPU machine's GPU: the peer column of the GPU table.

    PYTHONPATH=<pyhf wheels> python3 bench/pyhf_jax_gpu.py WORKSPACE_DIR

Prints one JSON line per model: warm medians of an MLE fit and of a 21-point profile scan, a
ranking's refits timed on a few and scaled to all of them (pyhf has no ranking: the refits are the
fits cabinetry makes, θ fixed at θ̂ ± σ, pre- and post-fit for constrained parameters), and toy
CLs timed on a few toys and scaled to 1000 per hypothesis (pyhf fits toys one by one).
"""

import json
import sys
import time
from pathlib import Path

import numpy as np
import pyhf
from pyhf.tensor.jax_backend import jax_backend

# pyhf 0.7.6 calls percentile(interpolation=), which numpy 2.x removed (its toy expected set).
jax_backend.percentile = lambda self, t, q, axis=None, interpolation="linear": np.percentile(np.asarray(t), q, axis=axis, method=interpolation)

MODELS = [("nextstat_complex_workspace.json", 2.5, 20), ("nextstat_tHu.json", 0.30, 4)]


def median(fn, runs):
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def main():
    pyhf.set_backend("jax", "scipy")
    import jax

    for file, mu, toys in MODELS:
        ws = pyhf.Workspace(json.loads((Path(sys.argv[1]) / file).read_text()))
        model = ws.model()
        data = ws.data(model)
        fit = median(lambda: pyhf.infer.mle.fit(data, model), 3)
        values = np.linspace(0, 2 * mu, 21)
        scan = median(lambda: [pyhf.infer.mle.fixed_poi_fit(v, data, model) for v in values], 1)
        poi = model.config.poi_index
        best = pyhf.infer.mle.fit(data, model)
        refits, shifted = 0, []
        for name in model.config.par_order:
            slc = model.config.par_slice(name)
            constrained = model.config.param_set(name).constrained
            for i in range(slc.start, slc.stop):
                if i != poi and not model.config.suggested_fixed()[i]:
                    refits += 4 if constrained else 2
                    shifted.append(i)
        def refit(i):
            fixed = model.config.suggested_fixed()
            fixed[i] = True
            init = list(np.asarray(best))
            lo, hi = model.config.suggested_bounds()[i]
            init[i] = init[i] + 0.2 * (hi - init[i])  # a shift inside the bounds, as θ̂ + σ is
            pyhf.infer.mle.fit(data, model, init_pars=init, fixed_params=fixed)
        timed = shifted[:4]
        ranking = median(lambda: [refit(i) for i in timed], 1) / len(timed) * refits
        t0 = time.perf_counter()
        pyhf.infer.hypotest(mu, data, model, test_stat="qtilde", calctype="toybased", ntoys=toys, track_progress=False)
        toys_s = time.perf_counter() - t0
        print(json.dumps({
            "workspace": file, "device": str(jax.devices()[0]), "fit_s": fit, "scan21_s": scan,
            "ranking_s": ranking, "ranking_refits": refits, "ranking_refits_timed": len(timed),
            "toys_timed": toys, "toys_per_1000_s": toys_s * 1000 / toys,
        }), flush=True)


if __name__ == "__main__":
    main()
