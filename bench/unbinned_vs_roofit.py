"""Gauss + exponential, 10^N events, fitted by RooFit 6.40 (EvalBackend "cpu", Minuit2, in
process: its first fit, and warm) and by the nextstat CLI (whole process, the faster of three),
side by side in one run. Events travel as Parquet (the HS3 extension), so the file is read, not
parsed as JSON.

    .venv/bin/python bench/unbinned_vs_roofit.py [N_EVENTS ...]     (default 1e5 1e6)
"""

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import ROOT as R

R.RooMsgService.instance().setGlobalKillBelow(R.RooFit.ERROR)
NEXTSTAT = Path(__file__).resolve().parents[1] / "target" / "release" / "nextstat"


def hs3(path):
    return {
        "metadata": {"hs3_version": "0.2"},
        "distributions": [
            {"name": "sig", "type": "gaussian_dist", "x": "x", "mean": "mean", "sigma": "sigma"},
            {"name": "bkg", "type": "exponential_dist", "x": "x", "c": "c"},
            {"name": "model", "type": "mixture_dist", "summands": ["sig", "bkg"], "coefficients": ["nsig", "nbkg"], "extended": True},
        ],
        "data": [{"name": "obs", "type": "nextstat:parquet", "path": path, "axes": [{"name": "x", "min": 0, "max": 10}]}],
        "likelihoods": [{"name": "L", "distributions": ["model"], "data": ["obs"]}],
        "domains": [{"name": "d", "type": "product_domain", "axes": [
            {"name": "mean", "min": 0, "max": 10}, {"name": "sigma", "min": 0.1, "max": 5},
            {"name": "c", "min": -1, "max": 2}, {"name": "nsig", "min": 0, "max": 1e8}, {"name": "nbkg", "min": 0, "max": 1e8}]}],
        "parameter_points": [{"name": "default_values", "parameters": [
            {"name": "mean", "value": 4.8}, {"name": "sigma", "value": 1.1}, {"name": "c", "value": 0.25},
            {"name": "nsig", "value": 0}, {"name": "nbkg", "value": 0}]}],
        "analyses": [{"name": "A", "likelihood": "L", "parameters_of_interest": ["nsig"], "domains": ["d"]}],
    }


def main(sizes):
    print("| events | RooFit 6.40 cpu (Minuit2), first fit | RooFit, warm | nextstat fit (whole process) | ratio to first | ratio to warm |")
    print("|---|---|---|---|---|---|")
    for n in sizes:
        rng = np.random.default_rng(1)
        ns = n // 10
        xs = np.concatenate([rng.normal(5, 1, ns), rng.exponential(1 / 0.3, 3 * n)])
        xs = xs[(xs >= 0) & (xs <= 10)][:n]
        with tempfile.TemporaryDirectory() as tmp:
            pq.write_table(pa.table({"x": xs}), Path(tmp) / "ev.parquet")
            doc = hs3("ev.parquet")
            for p in doc["parameter_points"][0]["parameters"]:
                if p["name"] == "nsig":
                    p["value"] = 0.12 * n
                if p["name"] == "nbkg":
                    p["value"] = 0.85 * n
            (Path(tmp) / "m.json").write_text(json.dumps(doc))
            x = R.RooRealVar("x", "", 0, 10)
            mean, sigma = R.RooRealVar("mean", "", 4.8, 0, 10), R.RooRealVar("sigma", "", 1.1, 0.1, 5)
            c = R.RooRealVar("c", "", -0.25, -2, 1)
            nsig, nbkg = R.RooRealVar("nsig", "", 0.12 * n, 0, 1e8), R.RooRealVar("nbkg", "", 0.85 * n, 0, 1e8)
            g, e = R.RooGaussian("g", "", x, mean, sigma), R.RooExponential("e", "", x, c)
            model = R.RooAddPdf("m", "", R.RooArgList(g, e), R.RooArgList(nsig, nbkg))
            data = R.RooDataSet.from_numpy({"x": xs}, R.RooArgSet(x))
            start = [(v, v.getVal()) for v in (mean, sigma, c, nsig, nbkg)]

            def roofit_fit():
                for v, value in start:
                    v.setVal(value)
                t0 = time.perf_counter()
                r = model.fitTo(data, R.RooFit.EvalBackend("cpu"), R.RooFit.Save(), R.RooFit.PrintLevel(-1), R.RooFit.Extended(True))
                return time.perf_counter() - t0, r

            def nextstat_fit():
                t0 = time.perf_counter()
                out = json.loads(subprocess.check_output([str(NEXTSTAT), "fit", str(Path(tmp) / "m.json")]))
                return time.perf_counter() - t0, out

            # RooFit's first fit in the process (what a script fitting once pays, its set-up
            # included) and the faster of two more from the same starting values; nextstat's
            # whole process, the faster of three.
            first, r = roofit_fit()
            warm = min(roofit_fit()[0] for _ in range(2))
            ours, out = min((nextstat_fit() for _ in range(3)), key=lambda t: t[0])
            got = dict(zip(out["parameter_names"], out["bestfit"]))
            for p in r.floatParsFinal():
                # RooExponential is exp(c·x); HS3's exponential_dist exp(−c·x).
                want = -p.getVal() if p.GetName() == "c" else p.getVal()
                assert abs(got[p.GetName()] - want) < 0.05 * p.getError(), (p.GetName(), got[p.GetName()], want)
            print(f"| {n:.0e} | {first:.3f} s | {warm:.3f} s | {ours:.3f} s | {first / ours:.1f}× | {warm / ours:.1f}× |")


if __name__ == "__main__":
    main([int(float(a)) for a in sys.argv[1:]] or [100_000, 1_000_000])
