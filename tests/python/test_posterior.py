"""Bayesian posteriors by NUTS (`nextstat posterior`, `nextstat.posterior`, `/v1/posterior`,
docs/inference.md): the closed form of a counting experiment under a flat prior, RooStats'
BayesianCalculator on a counting experiment with a constrained background (ROOT 6.40 from PyPI),
quadrature of an unbinned likelihood; the front ends agree; careless requests get clear errors or
honest warnings. Sampled numbers are compared within four of their own Monte-Carlo errors."""

import json
import math

import numpy as np
import pytest
from scipy.special import gammaincc

import nextstat
from conftest import ROOT, cli_json, run_cli

# n = 2 observed, s = 1 signal, b = 3 background: the posterior of μ under a flat prior on
# [0, 30] is ∝ (μs + b)^n e^−(μs + b).
COUNT = {
    "channels": [{"name": "SR", "samples": [
        {"name": "sig", "data": [1.0], "modifiers": [{"name": "mu", "type": "normfactor", "data": None}]},
        {"name": "bkg", "data": [3.0], "modifiers": []}]}],
    "observations": [{"name": "SR", "data": [2.0]}],
    "measurements": [{"name": "m", "config": {"poi": "mu", "parameters": [{"name": "mu", "bounds": [[0, 30]]}]}}],
    "version": "1.0.0",
}
# The same with a background known to ±20% (a normsys, its Gaussian constraint the prior).
CONSTRAINED = {
    "channels": [{"name": "SR", "samples": [
        {"name": "sig", "data": [2.0], "modifiers": [{"name": "mu", "type": "normfactor", "data": None}]},
        {"name": "bkg", "data": [5.0], "modifiers": [{"name": "bkg_unc", "type": "normsys", "data": {"hi": 1.2, "lo": 0.8}}]}]}],
    "observations": [{"name": "SR", "data": [6.0]}],
    "measurements": [{"name": "m", "config": {"poi": "mu", "parameters": [{"name": "mu", "bounds": [[0, 20]]}]}}],
    "version": "1.0.0",
}


def counting_cdf(x, n=2, s=1.0, b=3.0, hi=30.0):
    """P(μ ≤ x) of the counting posterior: regularised upper incomplete gammas."""
    q = lambda m: gammaincc(n + 1, m * s + b)
    return (q(0.0) - q(x)) / (q(0.0) - q(hi))


def binomial_error(p, ess):
    return math.sqrt(p * (1 - p) / ess)


def test_a_counting_experiment_has_the_closed_forms_posterior():
    r = nextstat.posterior(nextstat.Workspace(COUNT).model(), draws=5000, seed=1, progress=False)
    mu = r.parameters["mu"]
    assert r.poi == "mu" and r.warning is None and mu["r_hat"] < 1.01
    # The credibility at our limit and interval ends, against the exact CDF.
    for x, p in [(r.upper_limit, 0.95), (r.central_interval[0], 0.025), (r.central_interval[1], 0.975)]:
        assert abs(counting_cdf(x) - p) < 4 * binomial_error(p, mu["ess_tail"]), (x, p, counting_cdf(x))
    exact = 4.443163334024236  # counting_cdf(x) = 0.95
    assert abs(counting_cdf(exact) - 0.95) < 1e-12
    assert abs(r.upper_limit - exact) < 4 * r.upper_limit_error and r.upper_limit_error < 0.1
    grid = np.linspace(0, 30, 300001)
    density = (grid + 3.0) ** 2 * np.exp(-(grid + 3.0))
    exact_mean = np.trapezoid(grid * density, grid) / np.trapezoid(density, grid)
    assert abs(mu["mean"] - exact_mean) < 4 * mu["sd"] / math.sqrt(mu["ess_bulk"])
    assert r.draws["mu"].shape == (4, 5000)


def test_r_hat_and_effective_sizes_are_arviz_s():
    """ArviZ's rank-normalised split-R̂ and bulk and tail ESS of the same draws equal ours."""
    import arviz

    r = nextstat.posterior(nextstat.Workspace(CONSTRAINED).model(), draws=801, seed=4, progress=False)
    data = r.to_arviz()
    for name, ours in r.parameters.items():
        assert float(arviz.rhat(data, var_names=[name])[name]) == pytest.approx(ours["r_hat"], rel=1e-9)
        assert float(arviz.ess(data, var_names=[name], method="bulk")[name]) == pytest.approx(ours["ess_bulk"], rel=1e-9)
        assert float(arviz.ess(data, var_names=[name], method="tail")[name]) == pytest.approx(ours["ess_tail"], rel=1e-9)
        assert float(arviz.mcse(data, var_names=[name], method="quantile", prob=0.95)[name]) > 0


def test_a_constrained_background_is_integrated_as_roostats_does(tmp_path):
    """RooStats' BayesianCalculator (flat prior on μ, the constraint as the nuisance's prior,
    numerical integration) on the file `export-hs3` writes: the 95% upper limit within four
    Monte-Carlo errors of ours."""
    R = pytest.importorskip("ROOT", reason="RooFit (PyPI 'root') is in requirements-test.txt")
    R.RooMsgService.instance().setGlobalKillBelow(R.RooFit.ERROR)
    ws_path = tmp_path / "ws.json"
    ws_path.write_text(json.dumps(CONSTRAINED))
    hs3 = tmp_path / "ws.hs3.json"
    run_cli("export-hs3", ws_path, "-o", hs3)
    ws = R.RooWorkspace("w")
    assert R.RooJSONFactoryWSTool(ws).importJSON(str(hs3))
    mc = ws.obj("ModelConfig")
    mu = mc.GetParametersOfInterest().first()
    ws.Import(R.RooUniform("flat", "", R.RooArgSet(mu)))
    mc.SetPriorPdf(ws.pdf("flat"))
    calculator = R.RooStats.BayesianCalculator(ws.data("obsData"), mc)
    calculator.SetConfidenceLevel(0.95)
    calculator.SetLeftSideTailFraction(0.0)
    theirs = calculator.GetInterval().UpperLimit()
    ours = nextstat.posterior(nextstat.Workspace(CONSTRAINED).model(), draws=5000, seed=2, progress=False)
    assert abs(ours.upper_limit - theirs) < 4 * ours.upper_limit_error + 1e-3, (ours.upper_limit, ours.upper_limit_error, theirs)
    assert set(ours.parameters) == {"mu", "bkg_unc"}
    # The nuisance's posterior stays near its prior, N(0, 1), pulled a little by the data.
    assert abs(ours.parameters["bkg_unc"]["sd"] - 1.0) < 0.1


def test_an_unbinned_posterior_is_the_quadrature_of_its_likelihood():
    """The resonance example with every parameter but μ fixed: the posterior CDF by quadrature of
    the engine's own likelihood (checked against RooFit elsewhere) at our limit and interval."""
    from nextstat import unbinned

    model = unbinned.load(ROOT / "examples" / "unbinned" / "resonance.json")
    names = model.config.par_names
    init = model.config.suggested_init()
    fixed = [n != "mu" for n in names]
    r = nextstat.posterior(model, init_pars=init, fixed_params=fixed, draws=3000, seed=3, progress=False)
    assert list(r.parameters) == ["mu"]
    k = names.index("mu")
    grid = np.linspace(0.0, 20.0, 4001)
    nll = []
    for m in grid:
        point = list(init)
        point[k] = m
        nll.append(model.nll_grad(point)[0])
    density = np.exp(-(np.array(nll) - min(nll)))
    cdf = np.concatenate([[0.0], np.cumsum((density[1:] + density[:-1]) / 2 * np.diff(grid))])
    cdf /= cdf[-1]
    ess = r.parameters["mu"]["ess_tail"]
    for x, p in [(r.upper_limit, 0.95), (r.central_interval[0], 0.025), (r.central_interval[1], 0.975)]:
        assert abs(np.interp(x, grid, cdf) - p) < 4 * binomial_error(p, ess), (x, p)


def test_the_front_ends_give_one_answer(tmp_path):
    from test_server import Server

    path = tmp_path / "count.json"
    path.write_text(json.dumps(COUNT))
    saved = tmp_path / "call.json"
    cli = cli_json("posterior", path, "--draws", "300", "--warmup", "300", "--seed", "5", "--keep-draws", "--save-call", saved)
    python = nextstat.posterior(nextstat.Workspace(COUNT).model(), draws=300, warmup=300, seed=5, progress=False)
    assert python.to_dict() == cli
    assert cli_json("run", saved) == cli
    text = run_cli("posterior", path, "--draws", "300", "--warmup", "300", "--seed", "5", "--format", "text")[1]
    assert "95% credible upper limit on mu" in text and "R̂" in text
    server = Server("--workers", "1")
    try:
        body = {"model": {"workspace": COUNT}, "request": {"draws": 300, "warmup": 300, "seed": 5, "keep_draws": True}}
        status, answer, _ = server.call("POST", "/v1/posterior", body)
        assert status == 200 and answer == cli
    finally:
        server.stop()


def test_careless_requests_get_clear_errors_or_honest_warnings(tmp_path):
    path = tmp_path / "count.json"
    path.write_text(json.dumps(COUNT))
    cases = [
        (["--chains", "0"], "chains = 0: give from 1 to 1024 chains"),
        (["--draws", "0"], "give from 1 to 1000000 draws"),
        (["--cl", "1"], "cl = 1: a credibility lies strictly between 0 and 1"),
        (["--target-accept", "1.5"], "target_accept = 1.5"),
        (["--max-tree-depth", "0"], "max_tree_depth = 0"),
        (["--chains", "1000", "--draws", "1000000"], "a posterior holds at most 50000000"),
        (["--fix", "mu=1"], "the POI 'mu' is fixed"),
    ]
    for args, message in cases:
        code, _, err = run_cli("posterior", path, *args, expect_ok=False)
        assert code == 2 and message in err, (args, err)
    model = nextstat.Workspace(COUNT).model()
    with pytest.raises(TypeError, match="chains must be a whole number"):
        nextstat.posterior(model, chains=2.5)
    # A parameter the likelihood does not see (a normalisation of an empty sample): its posterior
    # is its flat prior, and the result says so by name.
    flat = json.loads(json.dumps(COUNT))
    flat["channels"][0]["samples"].append({"name": "empty", "data": [0.0], "modifiers": [{"name": "k", "type": "normfactor", "data": None}]})
    flat_path = tmp_path / "flat.json"
    flat_path.write_text(json.dumps(flat))
    code, out, err = run_cli("posterior", flat_path, "--draws", "400", "--warmup", "400")
    assert "the posterior of 'k' [0, 10] fills its bounds" in err and "'k'" in json.loads(out)["warning"]
    with pytest.warns(RuntimeWarning, match="fills its bounds"):
        nextstat.posterior(nextstat.Workspace(flat).model(), draws=400, warmup=400, progress=False)


def test_chains_gathered_into_one_device_batch_sample_the_same_posterior():
    """On a backend that batches (Vulkan: lavapipe here, in f32) every chain's evaluation of a
    step is one batch, each chain on its own thread: the limit agrees with the CPU's within their
    Monte-Carlo errors (the CUDA run: docs/benchmarks.md)."""
    model = nextstat.Workspace(CONSTRAINED).model()
    cpu = nextstat.posterior(model, warmup=300, draws=500, seed=6, progress=False)
    f32 = nextstat.posterior(model, warmup=300, draws=500, seed=6, device="vulkan", progress=False)
    error = math.hypot(cpu.upper_limit_error, f32.upper_limit_error)
    assert abs(cpu.upper_limit - f32.upper_limit) < 4 * error, (cpu.upper_limit, f32.upper_limit, error)
    assert f32.parameters["mu"]["r_hat"] < 1.05 and len(f32.sampler) == 4


def test_the_inverse_sqrt_prior_has_its_closed_form():
    """Combine's `--prior "1/sqrt(r)"` (`prior="inverse_sqrt"`): the posterior ∝ μ^(−1/2)
    (μs + b)^n e^−(μs + b) on [0, 30], by quadrature; the CDF at our limit and interval ends
    within four binomial errors. A POI that may turn negative is refused that prior."""
    from scipy.integrate import quad

    model = nextstat.Workspace(COUNT).model()
    r = nextstat.posterior(model, draws=4000, seed=7, prior="inverse_sqrt", progress=False)
    density = lambda m: m ** -0.5 * (m + 3.0) ** 2 * np.exp(-(m + 3.0))
    total = quad(density, 0, 30, limit=200)[0]
    cdf = lambda x: quad(density, 0, x, limit=200)[0] / total
    ess = r.parameters["mu"]["ess_tail"]
    for x, p in [(r.upper_limit, 0.95), (r.central_interval[0], 0.025), (r.central_interval[1], 0.975)]:
        assert abs(cdf(x) - p) < 4 * binomial_error(p, ess), (x, p, cdf(x))
    assert r.to_dict()["prior"] == "inverse_sqrt" and r.upper_limit < 4.4432
    bounds = [[-1.0, 30.0]]
    with pytest.raises(nextstat.InvalidInputError, match="needs the bounds of 'mu' at or above 0"):
        nextstat.posterior(model, par_bounds=bounds, prior="inverse_sqrt", progress=False)
    with pytest.raises(ValueError, match="prior must be 'flat' or 'inverse_sqrt'"):
        nextstat.posterior(model, prior="jeffreys")
    code, _, err = run_cli("posterior", ROOT / "examples" / "analysis.json", "--prior", "jeffreys", expect_ok=False)
    assert code == 2 and "the POI's prior is flat or inverse_sqrt" in err
