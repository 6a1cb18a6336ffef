"""A likelihood of binned and unbinned channels (HS3 `histfactory_dist` beside an unbinned
mixture, parameters shared by name), written by ROOT 6.40 (PyPI `root`) from a RooSimultaneous
of both, against RooFit on the same file: the NLL at several points up to one constant
(RooFit's N·ln K of the channel category), the minimum, the fitted values within 1e-3 σ, the
uncertainties within Minuit's HESSE accuracy; then every kind of verb on the CLI."""

import json
from pathlib import Path

import pytest

from conftest import cli_json, run_cli

ROOT = pytest.importorskip("ROOT", reason="RooFit (PyPI 'root') is in requirements-test.txt")
R = ROOT
R.RooMsgService.instance().setGlobalKillBelow(R.RooFit.WARNING)
R.gErrorIgnoreLevel = R.kWarning

HS3 = Path(__file__).resolve().parents[2].parent / "shared" / "hs3-binned"
KEEP = []  # PyROOT objects stay alive while the workspaces refer to them


def write_hybrid(path, signal_per_mu=40, seed=7):
    """ROOT's binned `simple` channel and an unbinned Gauss + exponential channel whose signal
    yield is `signal_per_mu`·μ, μ shared with the binned signal's normfactor."""
    src = R.RooWorkspace("src")
    assert R.RooJSONFactoryWSTool(src).importJSON(str(HS3 / "nextstat_simple.hs3.json"))
    binned = src.pdf("model_singlechannel")
    obs = src.var("obs_x_singlechannel")
    binned_data = src.data("obsData").reduce(R.RooArgSet(obs))
    x = R.RooRealVar("x", "x", 0, 10)
    mean = R.RooRealVar("mean", "", 5, 0, 10)
    sigma = R.RooRealVar("sigma", "", 0.8, 0.1, 5)
    c = R.RooRealVar("c", "", -0.3, -2, 0)
    nbkg = R.RooRealVar("nbkg", "", 200, 0, 1000)
    nsig = R.RooFormulaVar("nsig", f"mu*{signal_per_mu}", R.RooArgList(src.var("mu")))
    sig = R.RooGaussian("sig", "", x, mean, sigma)
    bkg = R.RooExponential("bkg", "", x, c)
    unbinned = R.RooAddPdf("model_unb", "", R.RooArgList(sig, bkg), R.RooArgList(nsig, nbkg))
    R.RooRandom.randomGenerator().SetSeed(seed)
    events = unbinned.generate(R.RooArgSet(x))
    weight = R.RooRealVar("weight", "", 1)
    weighted = R.RooDataSet("u", "", R.RooArgSet(x, weight), R.RooFit.WeightVar(weight))
    for i in range(events.numEntries()):
        weighted.add(events.get(i), 1.0)
    cat = R.RooCategory("channelCat", "")
    cat.defineType("singlechannel", 0)
    cat.defineType("unb", 1)
    sim = R.RooSimultaneous("simPdf", "", {"singlechannel": binned, "unb": unbinned}, cat)
    ws = R.RooWorkspace("w")
    ws.Import(sim)
    data = R.RooDataSet("obsData", "", R.RooArgSet(obs, x, weight), R.RooFit.Index(cat), R.RooFit.Import({"singlechannel": binned_data, "unb": weighted}), R.RooFit.WeightVar(weight))
    ws.Import(data)
    mc = R.RooStats.ModelConfig("ModelConfig", ws)
    mc.SetPdf(ws.pdf("simPdf"))
    mc.SetParametersOfInterest("mu")
    mc.SetObservables("obs_x_singlechannel,x,channelCat")
    mc.SetGlobalObservables("nom_gamma_uncorr_bkguncrt_bin_0,nom_gamma_uncorr_bkguncrt_bin_1")
    ws.Import(mc)
    KEEP.extend([src, x, mean, sigma, c, nbkg, nsig, sig, bkg, unbinned, events, weight, weighted, cat, sim, ws, data, mc])
    path.write_text(str(R.RooJSONFactoryWSTool(ws).exportJSONtoString()))
    return path


class RooFit:
    """The file imported by RooFit: its NLL over the free parameters, and Minuit's fit."""

    def __init__(self, path):
        self.ws = R.RooWorkspace("back")
        assert R.RooJSONFactoryWSTool(self.ws).importJSON(str(path))
        mc = self.ws.obj("ModelConfig")
        globs = R.RooArgSet(mc.GetGlobalObservables())
        self.nll = mc.GetPdf().createNLL(self.ws.data("obsData"), R.RooFit.GlobalObservables(globs), R.RooFit.EvalBackend("cpu"))
        self.params = {p.GetName(): p for p in self.nll.getParameters(R.RooArgSet()) if not p.isConstant()}

    def at(self, point):
        for k, v in point.items():
            self.params[k].setVal(v)
        return self.nll.getVal()

    def fit(self):
        # Unbounded, so that Minuit's covariance is the inverse Hessian (through bounds Minuit
        # maps its errors by the sine transform, which moves them by tenths of a percent here).
        for p in self.params.values():
            p.removeMin()
            p.removeMax()
        # Minuit's precision is a process-wide default another test may have set
        # (test_unbinned_roofit): this fit runs with ROOT's own (-1: computed), and leaves it.
        options = R.Math.MinimizerOptions
        precision = options.DefaultPrecision()
        options.SetDefaultPrecision(-1)
        try:
            m = R.RooMinimizer(self.nll)
            m.setStrategy(2)
            m.setEps(1e-8)
            m.setPrintLevel(-1)
            m.minimize("Minuit2", "Migrad")
            m.hesse()
            r = m.save()
        finally:
            options.SetDefaultPrecision(precision)
        assert r.status() == 0 and r.covQual() == 3, f"RooFit's fit: status {r.status()}, covariance quality {r.covQual()}"
        return {p.GetName(): (p.getVal(), p.getError()) for p in r.floatParsFinal()}, r.minNll()


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    return write_hybrid(tmp_path_factory.mktemp("hybrid") / "hybrid.hs3.json")


def test_roots_hybrid_file_is_binned_and_unbinned(hybrid):
    document = json.loads(hybrid.read_text())
    (likelihood,) = document["likelihoods"]
    kinds = {d["name"]: d["type"] for d in document["distributions"] if d["name"] in likelihood["distributions"]}
    assert sorted(kinds.values()) == ["histfactory_dist", "mixture_dist"], kinds


def test_nll_and_fit_are_roofits(hybrid, tmp_path):
    roofit = RooFit(hybrid)
    start = {k: p.getVal() for k, p in roofit.params.items()}
    evaluated = cli_json("eval", hybrid)
    # The same free parameters by the file's names; nextstat also lists the constant luminosity
    # (a fixed parameter of the binned channel), which RooFit holds as a constant.
    assert sorted(set(evaluated["parameter_names"]) - {"Lumi"}) == sorted(start)
    offsets = []
    for shift in ({}, {"mu": 1.6, "mean": 4.6}, {"gamma_uncorr_bkguncrt_bin_0": 1.07, "c": -0.2, "nbkg": 230.0}, {"mu": 0.3, "sigma": 1.1, "gamma_uncorr_bkguncrt_bin_1": 0.93}):
        point = {**start, **shift}
        pars = tmp_path / "pars.json"
        pars.write_text(json.dumps(point))
        ours = cli_json("eval", hybrid, "--pars", pars)["nll"]
        offsets.append(roofit.at(point) - ours)
    # The shared parameter moves both channels: one constant at every point means every term
    # and the sharing are RooFit's.
    assert max(offsets) - min(offsets) < 1e-8 * abs(offsets[0]) + 1e-9, offsets
    roofit.at(start)
    fitted, minimum = roofit.fit()
    fit = cli_json("fit", hybrid)
    assert fit["converged"]
    assert fit["nll"] + offsets[0] == pytest.approx(minimum, abs=1e-6)
    for name, (value, error) in fitted.items():
        i = fit["parameter_names"].index(name)
        assert abs(fit["bestfit"][i] - value) <= 1e-3 * error, f"{name}: {fit['bestfit'][i]} against RooFit's {value} ± {error}"
        assert fit["uncertainties"][i] == pytest.approx(error, rel=2e-3), f"σ({name}) against Minuit's HESSE"


def test_every_kind_of_verb_runs_on_the_hybrid(hybrid, tmp_path):
    fit = cli_json("fit", hybrid)
    mu = fit["bestfit"][fit["parameter_names"].index("mu")]
    scan = cli_json("scan", hybrid, "--range", "0", "2", "5")
    assert len(scan["delta_twice_nll"]) == 5 and min(scan["delta_twice_nll"]) >= -1e-6
    asymptotic = cli_json("hypotest", hybrid, "--mu", "2")
    toys = cli_json("hypotest-toys", hybrid, "--mu", "2", "--n-toys", "200", "--seed", "5")
    assert 0 < asymptotic["CLs_obs"] < 1 and 0 < toys["CLs_obs"] < 1
    assert toys["CLs_obs"] == pytest.approx(asymptotic["CLs_obs"], abs=0.1)
    limit = cli_json("upper-limit", hybrid)
    assert limit["obs"] > mu
    ranking = cli_json("ranking", hybrid)
    assert {e["name"] for e in ranking["entries"]} >= {"nbkg", "gamma_uncorr_bkguncrt_bin_0"}
    # Toys are drawn independently per part: the same seed gives the same toys, another seed others.
    again = cli_json("hypotest-toys", hybrid, "--mu", "2", "--n-toys", "200", "--seed", "5")
    assert again["CLs_obs"] == toys["CLs_obs"]
    # A list of values names no channel of a joint likelihood.
    values = tmp_path / "values.json"
    values.write_text("[1, 2, 3]")
    code, _, stderr = run_cli("fit", hybrid, "--data", values, expect_ok=False)
    assert code != 0 and "binned and unbinned" in stderr, stderr


def test_python_reads_the_hybrid_and_every_verb_takes_it(hybrid):
    import numpy as np

    import nextstat

    model = nextstat.load_hs3(hybrid)
    assert isinstance(model, nextstat.JointModel)
    assert model.config.poi_name == "mu"
    fit = nextstat.fit(model)
    cli = cli_json("fit", hybrid)
    assert fit.twice_nll == pytest.approx(2 * cli["nll"], rel=1e-10)
    nll, grad = model.nll_grad(np.asarray(fit.bestfit))
    assert nll == pytest.approx(cli["nll"], rel=1e-10)
    free = ~np.asarray(model.config.suggested_fixed())
    assert np.max(np.abs(grad[free])) < 1e-2
    assert 0 < nextstat.hypotest(2.0, model).cls_obs < 1
