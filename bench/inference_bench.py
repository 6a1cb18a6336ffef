"""nextstat vs pyhf 0.7.6 on the same machine, in one run: fit + Hessian, asymptotic CLs and toy
CLs on the large shared models. Writes a markdown table to stdout (and JSON to bench/results.json).

    cargo build --release -p ns-inference --example bench_inference
    .venv/bin/python bench/inference_bench.py [--pyhf-toys 20] [--toys 200]

pyhf timings are warm medians (the first call, which compiles, is reported separately); pyhf's
toy CLs is timed on --pyhf-toys toys and scaled to the same toy count as nextstat's.
"""

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pyhf
from pyhf.tensor.numpy_backend import numpy_backend

# pyhf 0.7.6 calls np.percentile(interpolation=), which numpy 2.4 removed (its toy expected set).
numpy_backend.percentile = lambda self, t, q, axis=None, interpolation="linear": np.percentile(t, q, axis=axis, method=interpolation)

ROOT = Path(__file__).resolve().parents[1]
WS = ROOT.parent / "shared" / "pyhf-ref" / "workspaces"
BENCH = ROOT / "target" / "release" / "examples" / "bench_inference"
# μ near the expected limit, so that CLs is neither 0 nor 1 (from `nextstat upper-limit`).
MODELS = [("docs_2bin_3", "pyhf_docs_2bin_1channel.json", 2.0), ("tHq_184", "nextstat_tHu.json", 0.30), ("tttt_249", "nextstat_tttt_prod.json", 0.92), ("synthetic_2000bins", "synthetic_large_2000bins.json", 0.135)]


def timed(fn, repeat):
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return first, float(np.median(times))


def nextstat(path, mu, toys, threads):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    out = subprocess.run([str(BENCH), str(path), "--toys", str(toys), "--mu", str(mu)], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--toys", type=int, default=200)
    parser.add_argument("--pyhf-toys", type=int, default=0, help="pyhf toys per model (0: skip; a toy takes minutes on tHq)")
    parser.add_argument("--models", nargs="*", default=[m[0] for m in MODELS])
    args = parser.parse_args()
    rows = []
    for label, file, mu in MODELS:
        if label not in args.models:
            continue
        spec = json.loads((WS / file).read_text())
        ours_1 = nextstat(WS / file, mu, args.toys, 1)
        ours_n = nextstat(WS / file, mu, args.toys, os.cpu_count())
        row = {"model": label, "mu": mu, "nextstat_1thread": ours_1, "nextstat_all_threads": ours_n}

        pyhf.set_backend("numpy", pyhf.optimize.minuit_optimizer())
        ws = pyhf.Workspace(spec)
        model = ws.model()
        data = ws.data(model)
        row["pyhf_numpy_minuit_fit_hessian_s"] = timed(lambda: pyhf.infer.mle.fit(data, model, return_uncertainties=True), 1)
        pyhf.set_backend("numpy", pyhf.optimize.scipy_optimizer())
        row["pyhf_numpy_cls_s"] = timed(lambda: pyhf.infer.hypotest(mu, data, model, test_stat="qtilde"), 1)
        # On small models pyhf runs the same number of toys; on large ones a toy takes minutes.
        n_pyhf_toys = args.toys if model.config.npars <= 20 else args.pyhf_toys
        if n_pyhf_toys > 0:
            t0 = time.perf_counter()
            pyhf.infer.hypotest(mu, data, model, test_stat="qtilde", calctype="toybased", ntoys=n_pyhf_toys, track_progress=False)
            row["pyhf_numpy_toys_per_toy_s"] = (time.perf_counter() - t0) / n_pyhf_toys

        import jax

        jax.config.update("jax_enable_x64", True)
        pyhf.set_backend("jax", pyhf.optimize.scipy_optimizer())
        model_j = pyhf.Workspace(spec).model()
        data_j = jax.numpy.asarray(pyhf.Workspace(spec).data(model_j))
        row["pyhf_jax_scipy_fit_s"] = timed(lambda: pyhf.infer.mle.fit(data_j, model_j), 3)
        pyhf.set_backend("numpy", pyhf.optimize.scipy_optimizer())
        rows.append(row)
        print(json.dumps(row), flush=True, file=__import__("sys").stderr)

    (ROOT / "bench" / "results.json").write_text(json.dumps(rows, indent=2))
    print(f"| model | nextstat fit + Hessian (1 thread) | pyhf numpy+minuit fit + Hessian | ratio | pyhf JAX+scipy fit | ratio | nextstat asymptotic CLs | pyhf numpy CLs | ratio | nextstat {args.toys}-toy CLs (1 thread / {os.cpu_count()} threads) | pyhf toys (scaled) | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        o1, on = r["nextstat_1thread"], r["nextstat_all_threads"]
        fit_h = o1["fit_hessian_s"]
        minuit = r["pyhf_numpy_minuit_fit_hessian_s"][1]
        jaxfit = r["pyhf_jax_scipy_fit_s"][1]
        cls = o1["asymptotic_cls_s"]
        pcls = r["pyhf_numpy_cls_s"][1]
        ptoys = r.get("pyhf_numpy_toys_per_toy_s")
        toys_cell = f"{ptoys * args.toys:.0f} s | {ptoys * args.toys / o1['toy_cls_s']:.0f}×" if ptoys else "not run | –"
        print(
            f"| {r['model']} | {fit_h*1e3:.1f} ms | {minuit:.2f} s | {minuit/fit_h:.0f}× | {jaxfit:.2f} s (first {r['pyhf_jax_scipy_fit_s'][0]:.1f} s) | {jaxfit/o1['fit_s']:.0f}× (vs fit alone) "
            f"| {cls*1e3:.0f} ms | {pcls:.1f} s | {pcls/cls:.0f}× | {o1['toy_cls_s']:.1f} s / {on['toy_cls_s']:.1f} s (CLs {o1['toy_cls']:.3f}) | {toys_cell} |"
        )


if __name__ == "__main__":
    main()
