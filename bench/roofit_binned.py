"""Fit + Hesse on four published HistFactory models, RooFit 6.40 (EvalBackend "cpu", Minuit2,
in process) against the nextstat CLI (whole process, one thread), side by side in one run.

The root wheel reads neither pyhf JSON nor HistFactory XML, so each pyhf workspace is rebuilt
through the HistFactory C++ API, one TH1 bin per pyhf bin and the pyhf modifiers mapped one to one.
Where ROOT 6.40's HistFactory departs from pyhf (OverallSys interpolation code 5, histograms clipped
at zero, Lumi on every sample, Gaussian constraints truncated at a gamma's global-observable range)
the built workspace is set to pyhf's conventions, after which the two NLLs (differences between
parameter points, checked against `nextstat eval`) agree to 1e-11. RooFit times only fitTo (best of 3, parameters reset before each); nextstat the
whole `nextstat fit` process (best of 5). The POI's best fit and Hesse error from both are the
evidence that the two fitted the same model.

    .venv/bin/python bench/roofit_binned.py [MODEL ...]     (default: staus tHq EWKinos tttt)

Results also go to bench/roofit_binned_results.json. NEXTSTAT_BIN overrides the binary.
"""

import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import ROOT as R

REPO = Path(__file__).resolve().parents[1]
NEXTSTAT = Path(os.environ.get("NEXTSTAT_BIN", REPO / "target" / "release" / "nextstat"))
MODELS = {
    "staus": "../shared/likelihoods/atlas_staus_2018-04_comb_DS_100_1/workspace.json",
    "tHq": "../shared/pyhf-ref/workspaces/nextstat_tHu.json",
    "EWKinos": "../shared/likelihoods/atlas_compressed_EWKinos_2018-16_smodels/workspace.json",
    "tttt": "../shared/pyhf-ref/workspaces/nextstat_tttt_prod.json",
}
HF = R.RooStats.HistFactory
R.RooMsgService.instance().setGlobalKillBelow(R.RooFit.WARNING)
R.gErrorIgnoreLevel = R.kWarning
R.TH1.AddDirectory(False)


@contextmanager
def silenced_stdout():
    """HistFactory reports its progress with std::cout, below Python's sys.stdout."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 1)
    try:
        yield
    finally:
        R.std.cout.flush()
        ctypes.CDLL(None).fflush(None)
        os.dup2(saved, 1)
        os.close(saved)


def histogram(values, errors=None):
    """A TH1D handed to HistFactory, which takes ownership of it (HistRef)."""
    histogram.count += 1
    h = R.TH1D(f"h{histogram.count}", "", len(values), 0, len(values))
    for i, v in enumerate(values):
        h.SetBinContent(i + 1, v)
        h.SetBinError(i + 1, 0 if errors is None else errors[i])
    R.SetOwnership(h, False)
    return h


histogram.count = 0


def measurement(spec):
    """The pyhf workspace's first measurement as a HistFactory Measurement."""
    config = spec["measurements"][0]["config"]
    settings = {p["name"]: p for p in config["parameters"]}
    observed = {o["name"]: o["data"] for o in spec["observations"]}
    meas = HF.Measurement("meas", "")
    meas.SetPOI(config["poi"])
    meas.SetLumi(1.0)
    meas.SetLumiRelErr(settings.get("lumi", {}).get("sigmas", [0.0])[0])
    for ch in spec["channels"]:
        channel = HF.Channel(ch["name"])
        channel.SetData(histogram(observed[ch["name"]]))
        # pyhf keeps a gamma for every bin; HistFactory's default threshold (5%) would fix some.
        channel.SetStatErrorConfig(0.0, "Gauss")
        for s in ch["samples"]:
            sample = HF.Sample(s["name"])
            sample.SetNormalizeByTheory(False)
            nominal, stat_errors = s["data"], None
            for m in s["modifiers"]:
                kind, name, data = m["type"], m["name"], m["data"]
                if kind == "normfactor":
                    p = settings.get(name, {})
                    lo, hi = p.get("bounds", [[0.0, 10.0]])[0]
                    sample.AddNormFactor(name, p.get("inits", [1.0])[0], lo, hi)
                elif kind == "lumi":
                    sample.SetNormalizeByTheory(True)
                elif kind == "normsys":
                    sample.AddOverallSys(name, data["lo"], data["hi"])
                elif kind == "histosys":
                    sys_ = HF.HistoSys()
                    sys_.SetName(name)
                    sys_.SetHistoLow(histogram(data["lo_data"]))
                    sys_.SetHistoHigh(histogram(data["hi_data"]))
                    sample.AddHistoSys(sys_)
                elif kind == "staterror":
                    # HistFactory reads absolute stat errors off the nominal histogram and combines
                    # them per channel as pyhf does: sqrt(sum of squares) / sum of nominals.
                    stat_errors = data
                    sample.ActivateStatError()
                elif kind == "shapesys":
                    sys_ = HF.ShapeSys()
                    sys_.SetName(name)
                    sys_.SetConstraintType(HF.Constraint.Poisson)
                    # pyhf's shapesys data are absolute, HistFactory's relative.
                    sys_.SetErrorHist(histogram([d / v if v > 0 else 0.0 for d, v in zip(data, nominal)]))
                    sample.AddShapeSys(sys_)
                elif kind == "shapefactor":
                    sample.AddShapeFactor(name)
                else:
                    raise ValueError(f"modifier type {kind} ({name})")
            sample.SetHisto(histogram(nominal, stat_errors))
            channel.AddSample(sample)
        meas.AddChannel(channel)
    return meas


def roofit_names(spec):
    """pyhf parameter name -> RooFit variable name, for the scalar parameters."""
    names = {"lumi": "Lumi"}
    for ch in spec["channels"]:
        for s in ch["samples"]:
            for m in s["modifiers"]:
                if m["type"] in ("normsys", "histosys"):
                    names[m["name"]] = f"alpha_{m['name']}"
                elif m["type"] == "normfactor":
                    names[m["name"]] = m["name"]
    return names


def build_roofit(spec):
    with silenced_stdout():
        ws = HF.HistoToWorkspaceFactoryFast.MakeCombinedModel(measurement(spec))
    # pyhf's defaults are normsys code4 and histosys code4p, RooFit's code 4 for both; ROOT 6.40
    # builds OverallSys with code 5 (linear extrapolation). pyhf does not clip a sample's
    # interpolated histogram at zero either.
    for obj in ws.components():
        if isinstance(obj, (HF.FlexibleInterpVar, R.PiecewiseInterpolation)):
            obj.setAllInterpCodes(4)
        if isinstance(obj, R.PiecewiseInterpolation):
            obj.setPositiveDefinite(False)
    # ROOT 6.40 scales every sample by Lumi, NormalizeByTheory or not (HistoToWorkspaceFactoryFast
    # only resets Lumi's value for the others); pyhf only those with a lumi modifier.
    # (A distinct name: the "cpu" backend tells nodes apart by name.)
    one = R.RooConstVar("no_lumi", "", 1.0)
    one.setAttribute("ORIGNAME:Lumi")
    R.SetOwnership(one, False)
    for ch in spec["channels"]:
        for s in ch["samples"]:
            if not any(m["type"] == "lumi" for m in s["modifiers"]):
                ws.function(f"{s['name']}_{ch['name']}_scaleFactors").redirectServers(R.RooArgSet(one), False, True)
    # RooFit normalises each constraint over its global observable's range: [0, 10] for the gammas'
    # would truncate the Gaussian of a large stat error and shift the likelihood; pyhf's is whole.
    for glob in ws.obj("ModelConfig").GetGlobalObservables():
        glob.removeMin()
        glob.removeMax()
    # The measurement's settings (HistFactory's Lumi spans [0, 10] otherwise).
    names = roofit_names(spec)
    for p in spec["measurements"][0]["config"]["parameters"]:
        var = ws.var(names.get(p["name"], p["name"]))
        if not var:  # a setting for a parameter no modifier uses (EWKinos' mu_BG)
            continue
        if "inits" in p:
            var.setVal(p["inits"][0])
        if "bounds" in p:
            var.setRange(*p["bounds"][0])
        if p.get("fixed"):
            var.setConstant(True)
    return ws


def fit_roofit(ws, repetitions=3):
    mc = ws.obj("ModelConfig")
    pdf, data = mc.GetPdf(), ws.data("obsData")
    params = pdf.getParameters(data)
    ws.saveSnapshot("initial", params)
    best = float("inf")
    for _ in range(repetitions):
        ws.loadSnapshot("initial")
        t0 = time.perf_counter()
        res = pdf.fitTo(
            data, R.RooFit.EvalBackend("cpu"), R.RooFit.Minimizer("Minuit2"), R.RooFit.Strategy(1),
            R.RooFit.Hesse(True), R.RooFit.Save(), R.RooFit.PrintLevel(-1),
            R.RooFit.GlobalObservables(mc.GetGlobalObservables()),
            R.RooFit.Constrain(mc.GetNuisanceParameters()),
        )
        best = min(best, time.perf_counter() - t0)
    pars = res.floatParsFinal()
    i = pars.index(mc.GetParametersOfInterest().first().GetName())
    # The error from the covariance (the inverse Hessian), as nextstat reports it: Minuit2's own
    # getError() of a bounded parameter maps ±σ through the bound's sine transform, which near a
    # bound (staus' mu_SIG = 0.42 ± 0.52 in [0, 10]) comes out 1% smaller.
    return best, res, pars[i].getVal(), res.covarianceMatrix()[i][i] ** 0.5


def fit_nextstat(path, repetitions=5):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "fit.json"
        best = float("inf")
        for _ in range(repetitions):
            t0 = time.perf_counter()
            subprocess.run([str(NEXTSTAT), "fit", str(path), "--threads", "1", "-o", str(out)], check=True)
            best = min(best, time.perf_counter() - t0)
        return best, json.loads(out.read_text())


def main(models):
    rows = []
    setup = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "root": R.gROOT.GetVersion(),
        "nextstat": str(NEXTSTAT), "nextstat_built": time.ctime(NEXTSTAT.stat().st_mtime),
    }
    print(", ".join(f"{k}: {v}" for k, v in setup.items()))
    print("| model | params | RooFit build s | RooFit fitTo+Hesse s | nextstat fit (whole process) s "
          "| ratio RooFit/nextstat | POI RooFit ± σ | POI nextstat ± σ | Δ/σ |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model in models:
        path = REPO / MODELS[model]
        spec = json.loads(path.read_text())
        t0 = time.perf_counter()
        ws = build_roofit(spec)
        build = time.perf_counter() - t0
        roofit, res, poi, poi_err = fit_roofit(ws)
        ours, out = fit_nextstat(path)
        i = out["parameter_names"].index(spec["measurements"][0]["config"]["poi"])
        ns_poi, ns_err = out["bestfit"][i], out["uncertainties"][i]
        row = {
            "model": model, "params": res.floatParsFinal().getSize(),
            "roofit_build_s": build, "roofit_fit_hesse_s": roofit, "nextstat_fit_s": ours, "ratio": roofit / ours,
            "poi_roofit": poi, "poi_roofit_err": poi_err, "poi_nextstat": ns_poi, "poi_nextstat_err": ns_err,
            "delta_over_sigma": (poi - ns_poi) / ns_err, "poi_at_bound": out["at_bound"][i],
            "roofit_status": res.status(), "roofit_cov_qual": res.covQual(), "roofit_edm": res.edm(),
        }
        rows.append(row)
        # At a bound the two σ differ by construction: Minuit's sine transform has zero slope there.
        bound = " (POI at its bound)" if row["poi_at_bound"] else ""
        print(f"| {model} | {row['params']} | {build:.2f} | {roofit:.3f} | {ours:.3f} | {roofit / ours:.0f}× "
              f"| {poi:.4f} ± {poi_err:.4f} | {ns_poi:.4f} ± {ns_err:.4f} | {row['delta_over_sigma']:+.1e}{bound} |",
              flush=True)
    (REPO / "bench" / "roofit_binned_results.json").write_text(json.dumps({**setup, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:] or list(MODELS))
