"""Toy-based upper limits (`nextstat upper-limit --toys N`, `nextstat.upper_limit(n_toys=)`):
against the exact CLs of a counting experiment and against pyhf's toy-based upper_limit, each
within its Monte-Carlo errors; the front ends and the careless requests."""

import json

import numpy as np
import pyhf
import pytest
from scipy.stats import poisson

from conftest import cli_json, run_cli

# One bin: signal 1 per unit μ, background 3 known exactly, 2 observed. For such a counting
# experiment q̃ falls as the count N rises (and is 0 from N = μ + 3 on, where μ̂ ≥ μ), so toy CLs
# tends to the exact CLs(μ; n) = P(N ≤ n | μ + 3) / P(N ≤ n | 3) for n < μ + 3, and 1 above; the
# expected band to CLs at the background-only count's quantiles (0, 1, 3, 5, 7 events: each well
# inside its step of Poisson(3)'s CDF).
COUNTING = {
    "channels": [{"name": "SR", "samples": [
        {"name": "sig", "data": [1.0], "modifiers": [{"name": "mu", "type": "normfactor", "data": None}]},
        {"name": "bkg", "data": [3.0], "modifiers": []},
    ]}],
    "observations": [{"name": "SR", "data": [2.0]}],
    "measurements": [{"name": "m", "config": {"poi": "mu", "parameters": [{"name": "mu", "bounds": [[0, 20]]}]}}],
    "version": "1.0.0",
}
BAND_COUNTS = [0, 1, 3, 5, 7]


def exact_cls(mu, n):
    return np.where(n >= mu + 3, 1.0, poisson.cdf(n, mu + 3) / poisson.cdf(n, 3))


def write(tmp_path, spec, name="ws.json"):
    path = tmp_path / name
    path.write_text(json.dumps(spec))
    return path


def test_toy_limit_of_a_counting_experiment_is_the_exact_one(tmp_path):
    """Every CLs point within 4 of its Monte-Carlo errors of the exact CLs, and every limit within
    4 errors of the exact curve interpolated on the same grid (so both the values and the stated
    errors are tested: errors too small fail)."""
    path = write(tmp_path, COUNTING)
    ours = cli_json("upper-limit", path, "--toys", "2000", "--seed", "4")
    assert ours["method"] == "toys" and ours["n_toys"] == 2000 and ours["warning"] is None
    mus = np.array([p["mu"] for p in ours["points"]])
    assert np.all(np.diff(mus) > 0) and len(mus) >= 10
    curves = [exact_cls(mus, 2)] + [exact_cls(mus, n) for n in BAND_COUNTS]
    for i, p in enumerate(ours["points"]):
        values = [p["CLs_obs"], *p["CLs_exp"]]
        errors = [p["CLs_obs_error"], *p["CLs_exp_error"]]
        for k, (v, e) in enumerate(zip(values, errors)):
            assert e > 0
            assert abs(v - curves[k][i]) <= 4 * e + 1e-12, f"μ = {mus[i]}, curve {k}: {v} ± {e} vs exact {curves[k][i]}"
    limits = [ours["obs"], *ours["exp"]]
    errors = [ours["obs_error"], *ours["exp_error"]]
    for k, (limit, error) in enumerate(zip(limits, errors)):
        exact = np.interp(0.05, curves[k][::-1], mus[::-1])
        assert 0 < error < 0.2 * limit
        assert abs(limit - exact) <= 4 * error, f"limit {k}: {limit} ± {error} vs exact on the grid {exact}"
    # The grid is refined where each limit lies: a point within 5% of it on either side.
    for limit in limits:
        j = np.searchsorted(mus, limit)
        assert mus[j] - mus[j - 1] <= 0.05 * limit + 1e-12, (limit, mus[j - 1], mus[j])


def test_toy_limit_agrees_with_pyhfs_toy_based_upper_limit(tmp_path, monkeypatch):
    """pyhf.infer.intervals.upper_limits.upper_limit(..., calctype="toybased") on the same grid,
    100 toys a side (pyhf's toys take seconds a μ) against our 2000: each CLs point within 4
    combined errors, each limit too, for the observed and the −1σ, median and +1σ expected values.
    A normsys's Gaussian constraint makes the test statistic continuous (with only Poisson terms
    its ties make 100-toy percentiles jump between atoms); the ±2σ bands are 2 of pyhf's 100 toys,
    where the background-only toys with q̃ = 0 (CLs 1) begin: too few to compare."""
    from pyhf.tensor.numpy_backend import numpy_backend

    # pyhf 0.7.6 calls np.percentile(interpolation=), removed in numpy 2.4.
    monkeypatch.setattr(numpy_backend, "percentile", lambda self, t, q, axis=None, interpolation="linear": np.percentile(t, q, axis=axis, method=interpolation))
    pyhf.set_backend("numpy", pyhf.optimize.scipy_optimizer())
    spec = {
        "channels": [{"name": "SR", "samples": [
            {"name": "sig", "data": [4.0], "modifiers": [{"name": "mu", "type": "normfactor", "data": None}]},
            {"name": "bkg", "data": [6.0], "modifiers": [{"name": "bkg_norm", "type": "normsys", "data": {"hi": 1.3, "lo": 0.7}}]},
        ]}],
        "observations": [{"name": "SR", "data": [5.0]}],
        "measurements": [{"name": "m", "config": {"poi": "mu", "parameters": []}}],
        "version": "1.0.0",
    }
    workspace = pyhf.Workspace(spec)
    model = workspace.model()
    data = workspace.data(model)
    scan = np.linspace(0.5, 3.5, 4)
    np.random.seed(1)
    n_pyhf = 100
    obs, exp, (_, results) = pyhf.infer.intervals.upper_limits.upper_limit(data, model, scan, level=0.05, return_results=True, calctype="toybased", ntoys=n_pyhf, track_progress=False)
    path = write(tmp_path, spec)
    ours = cli_json("upper-limit", path, "--scan", "0.5", "3.5", "4", "--toys", "2000", "--seed", "1")
    assert [p["mu"] for p in ours["points"]] == pytest.approx(scan.tolist())
    scale = np.sqrt(1 + 2000 / n_pyhf)
    compared = [0, 2, 3, 4]  # observed, expected −1σ, median, +1σ
    for p, (theirs_obs, theirs_exp) in zip(ours["points"], results):
        values, errors, theirs = [p["CLs_obs"], *p["CLs_exp"]], [p["CLs_obs_error"], *p["CLs_exp_error"]], [theirs_obs, *theirs_exp]
        for k in compared:
            assert abs(values[k] - float(theirs[k])) <= 4 * errors[k] * scale + 1e-9, (p["mu"], k, values[k], errors[k], float(theirs[k]))
    limits, errors, theirs = [ours["obs"], *ours["exp"]], [ours["obs_error"], *ours["exp_error"]], [obs, *exp]
    for k in compared:
        assert abs(limits[k] - float(theirs[k])) <= 4 * errors[k] * scale, (k, limits[k], errors[k], float(theirs[k]))


def test_python_api(tmp_path):
    """nextstat.upper_limit(n_toys=) is the CLI's answer (shards: test_shards.py)."""
    import nextstat

    path = write(tmp_path, COUNTING)
    args = ["upper-limit", path, "--scan", "1", "8", "8", "--toys", "300", "--seed", "9"]
    whole = cli_json(*args)
    model = nextstat.Workspace(str(path)).model()
    result = nextstat.upper_limit(model, scan=np.linspace(1, 8, 8), n_toys=300, seed=9, progress=False)
    assert result.method == "toys"
    nan = float("nan")
    assert result.obs == whole["obs"]
    np.testing.assert_array_equal(result.exp, [nan if e is None else e for e in whole["exp"]])
    assert result.obs_error == whole["obs_error"]
    np.testing.assert_array_equal(result.exp_error, [float(e) for e in whole["exp_error"]])
    assert nextstat.upper_limit(model).method == "asymptotic" and nextstat.upper_limit(model).obs_error is None


@pytest.mark.parametrize("extra, message", [
    (["--toys", "0"], "n_toys = 0"),
    (["--toys", "2000000", "--scan", "0", "5", "100"], "at most 100000000 toys"),
    (["--toys", "10", "--level", "1"], "between 0 and 1"),
    (["--toys", "10", "--scan", "3", "1", "3"], "must increase"),
    (["--seed", "3"], "--toys"),
])
def test_careless_toy_limits_are_refused_by_name(tmp_path, extra, message):
    path = write(tmp_path, COUNTING)
    code, _, err = run_cli("upper-limit", path, *extra, expect_ok=False)
    assert code == 2 and message in err, err


def test_an_undefined_cls_is_refused_not_interpolated(tmp_path):
    """0 observed on a background of 10: no background-only toy of 100 reaches the observed
    statistic (CLb = 0), so CLs has no value there; it is refused, naming μ, not interpolated
    through as NaN. A seed without toys in a call is refused too."""
    spec = json.loads(json.dumps(COUNTING))
    spec["channels"][0]["samples"][1]["data"] = [10.0]
    spec["observations"][0]["data"] = [0.0]
    path = write(tmp_path, spec)
    code, out, err = run_cli("upper-limit", path, "--scan", "0.5", "5", "4", "--toys", "100", "--seed", "1", expect_ok=False)
    assert code != 0 and out == "" and "CLs at μ = 0.5 is undefined" in err and "CLb = 0" in err, err
    call = tmp_path / "call.json"
    call.write_text(json.dumps({"model": {"workspace": str(path)}, "request": {"verb": "upper_limit", "seed": 5}}))
    code, _, err = run_cli("run", call, expect_ok=False)
    assert code == 2 and "seed 5 without n_toys" in err, err


def test_toy_limits_refuse_patchset_grids(tmp_path):
    from conftest import SHARED

    grid = SHARED.parent / "likelihoods" / "patchsets"
    patchset = next(p for p in sorted(grid.rglob("patchset.json")))
    bkg = patchset.parent / "bkgonly.json"
    code, _, err = run_cli("upper-limit", bkg, "--patchset", patchset, "--all", "--toys", "10", expect_ok=False)
    assert code == 2 and "--toys" in err and "--all" in err, err


def test_observed_toy_limit_agrees_with_roostats_hypotestinverter(tmp_path):
    """RooStats' HypoTestInverter with a FrequentistCalculator (one-sided profile-likelihood
    statistic, μ ≥ 0: q̃) on the counting experiment, 500 toys a side at μ = 2…7: the observed
    limit within 4 combined Monte-Carlo errors of ours (2000 toys on the same grid). RooStats'
    expected limits take the background-only quantiles without interpolating between toys, which
    on a Poisson count lands on other atoms than pyhf's percentiles; the exact test above checks
    ours."""
    R = pytest.importorskip("ROOT", reason="RooStats (PyPI 'root') is in requirements-test.txt")
    R.RooMsgService.instance().setGlobalKillBelow(R.RooFit.ERROR)
    w = R.RooWorkspace("w")
    w.factory("Poisson::pdf(n[2,0,100], sum::lam(prod::sig(mu[1,0,20], s[1]), b[3]))")
    n = w.var("n")
    n.setVal(2)
    data = R.RooDataSet("d", "d", R.RooArgSet(n))
    data.add(R.RooArgSet(n))
    sb = R.RooStats.ModelConfig("sb", w)
    sb.SetPdf("pdf")
    sb.SetObservables("n")
    sb.SetParametersOfInterest("mu")
    w.var("mu").setVal(1)
    sb.SetSnapshot(R.RooArgSet(w.var("mu")))
    b_only = sb.Clone("b")
    w.var("mu").setVal(0)
    b_only.SetSnapshot(R.RooArgSet(w.var("mu")))
    calculator = R.RooStats.FrequentistCalculator(data, b_only, sb)
    statistic = R.RooStats.ProfileLikelihoodTestStat(sb.GetPdf())
    statistic.SetOneSided(True)
    sampler = calculator.GetTestStatSampler()
    sampler.SetTestStatistic(statistic)
    sampler.SetNEventsPerToy(1)
    calculator.SetToys(500, 500)
    R.RooRandom.randomGenerator().SetSeed(5)
    inverter = R.RooStats.HypoTestInverter(calculator)
    inverter.SetConfidenceLevel(0.95)
    inverter.UseCLs(True)
    inverter.SetFixedScan(6, 2.0, 7.0)
    result = inverter.GetInterval()
    theirs, their_error = result.UpperLimit(), result.UpperLimitEstimatedError()
    path = write(tmp_path, COUNTING)
    ours = cli_json("upper-limit", path, "--scan", "2", "7", "6", "--toys", "2000", "--seed", "6")
    combined = np.hypot(ours["obs_error"], their_error)
    assert abs(ours["obs"] - theirs) <= 4 * combined, (ours["obs"], ours["obs_error"], theirs, their_error)
    exact = 4.443163334182116
    assert abs(ours["obs"] - exact) <= 4 * ours["obs_error"] + 0.05, (ours["obs"], exact)
