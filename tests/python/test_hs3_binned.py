"""Binned HS3 files written by ROOT 6.40 (../shared/hs3-binned) from Python: ``nextstat.load_hs3``
gives a Model whose fit reaches RooFit's minimum (the NLL offset is RooFit's N_obs·ln N_channels,
the README's constant) and whose every verb runs; the CLI reads the same file to the same
numbers."""

import json
import math
from pathlib import Path

import pytest

import nextstat
from conftest import cli_json

HS3 = Path(__file__).resolve().parents[2].parent / "shared" / "hs3-binned"


@pytest.mark.parametrize("name", ["nextstat_simple", "nextstat_multichannel", "pyhf_validation_2bin_2channel_coupledhistosys"])
def test_fit_reaches_roofits_minimum(name):
    reference = json.loads((HS3 / f"{name}.reference.json").read_text())
    roofit = reference[reference["oracle_for_this_file"]]
    document = json.loads((HS3 / f"{name}.hs3.json").read_text())
    observed = next(d for d in document["data"] if d["name"].startswith("obsData"))
    channels = [d for d in document["distributions"] if d["type"] == "histfactory_dist"]
    n_obs = sum(sum(d["contents"]) for d in document["data"] if d["name"].startswith("obsData"))
    offset = n_obs * math.log(len(channels))
    assert observed["type"] == "binned"
    model = nextstat.load_hs3(HS3 / f"{name}.hs3.json")
    assert isinstance(model, nextstat.Model)
    best = nextstat.fit(model)
    ours = best.twice_nll / 2 + offset
    # RooFit's fit of the coupled-histosys model stops in the higher of its two minima.
    minima = [m["nll"] for m in reference.get("multimodality", {}).get("minima", [])] or [roofit["nll_best"]]
    assert ours == pytest.approx(min(minima + [roofit["nll_best"]]), abs=1e-6)
    cli = cli_json("fit", str(HS3 / f"{name}.hs3.json"))
    assert cli["nll"] == pytest.approx(best.twice_nll / 2, abs=1e-9)
    assert nextstat.upper_limit(model).obs > 0


def test_load_hs3_refuses_what_it_cannot_read(tmp_path):
    with pytest.raises(TypeError):
        nextstat.load_hs3(3)
    document = json.loads((HS3 / "nextstat_simple.hs3.json").read_text())
    for dist in document["distributions"]:
        for sample in dist.get("samples", []):
            for m in sample["modifiers"]:
                if m["type"] == "shapesys":
                    m["type"] = "lumisys"
    path = tmp_path / "bad.hs3.json"
    path.write_text(json.dumps(document))
    with pytest.raises(nextstat.NextStatError, match="modifier type 'lumisys'"):
        nextstat.load_hs3(path)


def test_variable_bin_edges_read_as_roofit_reads_them(tmp_path):
    """Axes with `edges` (variable bins, as ATLAS's published files give them) instead of
    min/max/nbins: RooFit reads the same likelihood as with uniform bins, and so does nextstat;
    edges that do not increase are refused by name."""
    ROOT = pytest.importorskip("ROOT", reason="RooFit (PyPI 'root') is in requirements-test.txt")
    ROOT.RooMsgService.instance().setGlobalKillBelow(ROOT.RooFit.ERROR)
    source = HS3 / "nextstat_complex.hs3.json"
    document = json.loads(source.read_text())
    for entry in document["distributions"] + document["data"]:
        for axis in entry.get("axes", []):
            n = axis.pop("nbins")
            del axis["min"], axis["max"]
            axis["edges"] = [0.0] + [1.0 + 2.0**i for i in range(n)]
    for domain in document["domains"]:
        for axis in domain["axes"]:
            if axis["name"].startswith("obs_x"):
                axis["min"], axis["max"] = 0.0, 3.0
    edges = tmp_path / "edges.hs3.json"
    edges.write_text(json.dumps(document))

    def roofit(path):
        ws = ROOT.RooWorkspace("w")
        assert ROOT.RooJSONFactoryWSTool(ws).importJSON(str(path))
        mc = ws.obj("ModelConfig")
        nll = mc.GetPdf().createNLL(ws.data("obsData"), ROOT.RooFit.Constrain(mc.GetNuisanceParameters()), ROOT.RooFit.GlobalObservables(mc.GetGlobalObservables()))
        ws.var("mu").setVal(0.5)
        ws.var("alpha_bkg_shape").setVal(0.7)
        return nll.getVal()

    assert roofit(edges) == pytest.approx(roofit(source), abs=1e-9)
    ours = nextstat.load_hs3(edges)
    assert nextstat.fit(ours).twice_nll == pytest.approx(nextstat.fit(nextstat.load_hs3(source)).twice_nll, abs=1e-12)
    document["distributions"][0]["axes"][0]["edges"] = [0.0, 2.0, 1.0]
    edges.write_text(json.dumps(document))
    with pytest.raises(nextstat.NextStatError, match="edges must be at least two finite numbers, increasing"):
        nextstat.load_hs3(edges)


@pytest.mark.parametrize("name", sorted(p.name.removesuffix(".hs3.json") for p in HS3.glob("*.hs3.json") if "gaussstat" not in p.name))
def test_errors_are_those_of_roofits_likelihood(name):
    """Every uncertainty against the inverse Hessian of RooFit's own NLL of the file (central
    differences, steps of 10⁻³ σ) at nextstat's minimum, within 10⁻⁴. Not against the
    reference's errors: Minuit's HESSE maps them through its sine transform near bounds and is
    itself accurate only to a few 10⁻³ (σ(μ) of `simple`: HESSE 0.8768 unbounded, 0.8515 bounded;
    the Hessian of RooFit's NLL 0.873656, nextstat 0.873656). The `_gaussstat` files are left out:
    RooFit's import of them is another likelihood (a Poisson staterror, README)."""
    ROOT = pytest.importorskip("ROOT", reason="RooFit (PyPI 'root') is in requirements-test.txt")
    import numpy as np
    from test_hs3_export import names_in_hs3

    ROOT.RooMsgService.instance().setGlobalKillBelow(ROOT.RooFit.ERROR)
    path = HS3 / f"{name}.hs3.json"
    model = nextstat.load_hs3(path)
    fit = nextstat.fit(model)
    ws = ROOT.RooWorkspace("w")
    assert ROOT.RooJSONFactoryWSTool(ws).importJSON(str(path))
    mc = ws.obj("ModelConfig")
    nll = mc.GetPdf().createNLL(ws.data("obsData"), ROOT.RooFit.Constrain(mc.GetNuisanceParameters()), ROOT.RooFit.GlobalObservables(mc.GetGlobalObservables()))
    names = names_in_hs3(model)
    for ours, value in zip(model.config.par_names, fit.bestfit):
        ws.var(names[ours]).setVal(float(value))
    fixed = model.config.suggested_fixed()
    free = [i for i, ours in enumerate(model.config.par_names) if not fixed[i] and not ws.var(names[ours]).isConstant()]
    assert len(free) >= 2
    variables = [ws.var(names[model.config.par_names[i]]) for i in free]
    x0 = np.array([fit.bestfit[i] for i in free])
    h = np.array([1e-3 * fit.uncertainties[i] for i in free])

    def at(shift):
        for var, x in zip(variables, x0 + shift):
            var.setVal(float(x))
        return nll.getVal()

    n = len(free)
    hessian = np.zeros((n, n))
    for a in range(n):
        for b in range(a, n):
            e_a, e_b = np.eye(n)[a] * h[a], np.eye(n)[b] * h[b]
            hessian[a, b] = hessian[b, a] = (at(e_a + e_b) - at(e_a - e_b) - at(e_b - e_a) + at(-e_a - e_b)) / (4 * h[a] * h[b])
    sigma = np.sqrt(np.diag(np.linalg.inv(hessian)))
    for k, i in enumerate(free):
        assert fit.uncertainties[i] == pytest.approx(sigma[k], rel=1e-4), f"{name}: σ({names[model.config.par_names[i]]})"
