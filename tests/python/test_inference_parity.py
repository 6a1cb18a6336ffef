"""Live parity of CPU inference with pyhf 0.7.6 run tightly (JAX gradients, minuit strategy 2),
and of the ranking with cabinetry given our fit results."""

import json
import shutil

import numpy as np
import pyhf
import pytest

from conftest import REFERENCE_NAMES, SHARED, cli_json, pyhf_hypotest_given_fits, run_cli, workspace_file

# The four large models are compared with pyhf's stored numbers in Rust (inference_stored.rs);
# a tight JAX+minuit fit of each takes minutes.
LARGE = {"nextstat_tHu", "nextstat_tttt_prod", "nextstat_synthetic_shapesys_256", "synthetic_large_2000bins"}
SMALL = [n for n in REFERENCE_NAMES if n not in LARGE]
WITH_POI = [n for n in SMALL if n != "tutorial_bkg_only_1Lbb_CRs"]


@pytest.fixture()
def tight_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    pyhf.set_backend("jax", pyhf.optimize.minuit_optimizer(strategy=2, tolerance=1e-6))
    yield
    pyhf.set_backend("numpy", pyhf.optimize.scipy_optimizer())


def model_and_data(name):
    ws = pyhf.Workspace(json.loads(workspace_file(name).read_text()))
    model = ws.model(poi_name=None) if name == "tutorial_bkg_only_1Lbb_CRs" else ws.model()
    return model, ws.data(model)


@pytest.mark.parametrize("name", SMALL)
def test_fit_matches_tight_pyhf(name, tight_jax):
    model, data = model_and_data(name)
    result = pyhf.infer.mle.fit(data, model, return_uncertainties=True, return_fitted_val=True, return_result_obj=True)
    pars_unc, twice_nll, obj = result
    pars, _ = np.asarray(pars_unc)[:, 0], np.asarray(pars_unc)[:, 1]
    ours = cli_json("fit", workspace_file(name), "--tolerance", "1e-9")
    assert ours["parameter_names"] == model.config.par_names
    assert ours["converged"], ours["termination_reason"]
    assert ours["twice_nll"] <= float(twice_nll) + 1e-6, f"{name}: {ours['twice_nll']} vs tight pyhf {float(twice_nll)}"
    if ours["twice_nll"] < float(twice_nll) - 1e-3:
        # A lower minimum than the one pyhf's fit stops in (the coupled-histosys model has two):
        # the fit says so, and its parameters are another minimum's.
        assert "several minima" in (ours["warning"] or ""), ours["warning"]
        return
    cov = np.asarray(obj.minuit.covariance)
    # The exact covariance at our minimum: C = 2·H⁻¹ with H = jax.hessian(twice_nll) over the free parameters.
    import jax

    free = [i for i, f in enumerate(model.config.suggested_fixed()) if not f]
    best = jax.numpy.asarray(ours["bestfit"])
    hess = np.asarray(jax.jit(jax.hessian(lambda p: -2 * model.logpdf(p, jax.numpy.asarray(data))[0]))(best))[np.ix_(free, free)]
    exact = np.zeros(len(ours["bestfit"]))
    exact[free] = np.sqrt(np.diag(2 * np.linalg.inv(hess)))
    sigma = np.sqrt(np.diag(cov))
    fixed = model.config.suggested_fixed()
    bounds = model.config.suggested_bounds()
    at_bound = any(ours["at_bound"])
    for i, pname in enumerate(model.config.par_names):
        # At a bound minuit (which cannot reach it) reports a point inside and a meaningless σ.
        if fixed[i] or sigma[i] == 0 or ours["at_bound"][i]:
            continue
        assert abs(ours["bestfit"][i] - pars[i]) <= 1e-3 * sigma[i] + 1e-9, f"{name} {pname}: {ours['bestfit'][i]} vs {pars[i]} (σ {sigma[i]})"
        far = bounds[i][0] < pars[i] - 3 * sigma[i] and pars[i] + 3 * sigma[i] < bounds[i][1]
        if far and not at_bound:
            # minuit's HESSE takes second differences of function values (~1e-3 accurate).
            assert ours["uncertainties"][i] == pytest.approx(sigma[i], rel=5e-3), f"{name} {pname}"
            assert ours["uncertainties"][i] == pytest.approx(exact[i], rel=1e-4), f"{name} {pname} vs exact Hessian"


@pytest.mark.parametrize("name", WITH_POI)
def test_cls_formula_from_our_fits_matches_pyhf(name, monkeypatch):
    """Feed our fitted parameters to pyhf's test statistics and calculator: same CLs to 1e-9."""
    pyhf.set_backend("numpy")
    model, data = model_and_data(name)
    ours = cli_json("hypotest", workspace_file(name), "--mu", "1", "--tolerance", "1e-9")
    cls_obs, cls_exp = pyhf_hypotest_given_fits(model, data, ours["fitted_pars"], 1.0, monkeypatch)
    # When μ̂ ≈ μ, q is the difference of two equal minima: pyhf's and our summation orders give
    # ~1e-13 of noise there, whose square root moves CLs by ~1e-6. Elsewhere the formula is exact.
    rel = 1e-9 if ours["sqrt_q"] > 1e-4 else 1e-5
    assert ours["CLs_obs"] == pytest.approx(float(cls_obs), rel=rel, abs=1e-300)
    for a, b in zip(ours["CLs_exp"], cls_exp):
        assert a == pytest.approx(float(b), rel=1e-9, abs=1e-300)


def test_ranking_matches_cabinetry_given_our_fit():
    cabinetry = pytest.importorskip("cabinetry")
    pyhf.set_backend("numpy", pyhf.optimize.minuit_optimizer(strategy=2, tolerance=1e-7))
    try:
        name = "nextstat_multichannel_workspace"
        model, data = model_and_data(name)
        fit = cli_json("fit", workspace_file(name), "--tolerance", "1e-9", "--covariance")
        ours = cli_json("ranking", workspace_file(name), "--tolerance", "1e-9")
        labels = model.config.par_names
        fit_results = cabinetry.fit.FitResults(
            np.asarray(fit["bestfit"]), np.asarray(fit["uncertainties"]), labels, np.asarray(fit["correlation"]), fit["twice_nll"]
        )
        theirs = cabinetry.fit.ranking(model, data, fit_results=fit_results, strategy=2, tolerance=1e-7)
        sigma_mu = ours["poi_uncertainty"]
        by_name = {e["name"]: e for e in ours["entries"]}
        worst = 0.0
        for i, label in enumerate(theirs.labels):
            e = by_name[label]
            for ours_key, arr in [
                ("impact_postfit_up", theirs.postfit_up),
                ("impact_postfit_down", theirs.postfit_down),
                ("impact_prefit_up", theirs.prefit_up),
                ("impact_prefit_down", theirs.prefit_down),
            ]:
                diff = abs(e[ours_key] - arr[i]) / sigma_mu
                worst = max(worst, diff)
                assert diff <= 1e-3, f"{label} {ours_key}: {e[ours_key]} vs cabinetry {arr[i]}"
        print(f"worst |Δ impact| / σ_μ = {worst:.2e}")
    finally:
        pyhf.set_backend("numpy", pyhf.optimize.scipy_optimizer())


@pytest.mark.parametrize("name", ["pyhf_validation_2bin_histosys", "pyhf_validation_1bin_shapesys"])
def test_toy_cls_agrees_with_pyhf_toys(name, monkeypatch):
    """CLsb and CLb from 1000 toys each side: within 4 binomial standard errors of pyhf's."""
    import numpy

    from pyhf.tensor.numpy_backend import numpy_backend

    # pyhf 0.7.6 calls np.percentile(interpolation=), removed in numpy 2.4.
    monkeypatch.setattr(numpy_backend, "percentile", lambda self, t, q, axis=None, interpolation="linear": numpy.percentile(t, q, axis=axis, method=interpolation))
    pyhf.set_backend("numpy", pyhf.optimize.scipy_optimizer())
    model, data = model_and_data(name)
    numpy.random.seed(0)
    n = 1000
    cls, (clsb, clb) = pyhf.infer.hypotest(1.0, data, model, test_stat="qtilde", calctype="toybased", ntoys=n, return_tail_probs=True, track_progress=False)
    ours = cli_json("hypotest-toys", workspace_file(name), "--mu", "1", "--n-toys", str(n), "--seed", "3")
    assert ours["n_failed"] == 0, ours["failures"]
    for key, theirs in [("CLsb", float(clsb)), ("CLb", float(clb))]:
        p = ours[key]
        se = np.sqrt(p * (1 - p) / n + theirs * (1 - theirs) / n)
        assert abs(p - theirs) <= 4 * max(se, 1e-12), f"{name} {key}: {p} vs pyhf {theirs} (σ {se:.4f})"


@pytest.mark.parametrize("name", WITH_POI)
def test_asymptotic_cls_matches_tight_pyhf(name, tight_jax):
    """End to end against pyhf with tight fits: √q and √q_A to 1e-6, CLs to 1e-5 relative."""
    model, data = model_and_data(name)
    cls_obs, cls_exp, calc = pyhf.infer.hypotest(1.0, data, model, test_stat="qtilde", return_expected_set=True, return_calculator=True)
    ours = cli_json("hypotest", workspace_file(name), "--mu", "1", "--tolerance", "1e-9")
    teststat = float(calc.teststatistic(1.0))
    sqrt_qa = float(calc.sqrtqmuA_v)
    assert ours["sqrt_q_asimov"] == pytest.approx(sqrt_qa, abs=1e-6)
    # Where μ̂ = μ, q is the difference of two equal minima and √q the root of each optimizer's
    # residual (~1e-5 for minuit at tolerance 1e-6): compare at that resolution there.
    degenerate = ours["sqrt_q"] < 1e-4
    assert ours["asymptotic_teststat"] == pytest.approx(teststat, abs=1e-4 if degenerate else 1e-6)
    assert ours["CLs_obs"] == pytest.approx(float(cls_obs), rel=1e-4 if degenerate else 1e-5)
    for a, b in zip(ours["CLs_exp"], cls_exp):
        assert a == pytest.approx(float(b), rel=1e-5)


@pytest.fixture()
def tight_numpy():
    # pyhf's toms748_scan caches by POI value, which JAX arrays cannot be: numpy + tight minuit.
    pyhf.set_backend("numpy", pyhf.optimize.minuit_optimizer(strategy=2, tolerance=1e-6))
    yield
    pyhf.set_backend("numpy", pyhf.optimize.scipy_optimizer())


@pytest.mark.parametrize("name", ["pyhf_docs_2bin_1channel", "pyhf_validation_2bin_histosys", "nextstat_simple_workspace"])
def test_upper_limit_matches_tight_pyhf(name, tight_numpy):
    model, data = model_and_data(name)
    low, high = model.config.suggested_bounds()[model.config.poi_index]
    obs, exp = pyhf.infer.intervals.upper_limits.toms748_scan(data, model, low, high, level=0.05, rtol=1e-7)[:2]
    ours = cli_json("upper-limit", workspace_file(name), "--tolerance", "1e-9")
    assert ours["obs"] == pytest.approx(float(obs), rel=1e-4)
    for a, b in zip(ours["exp"], exp):
        assert a == pytest.approx(float(b), rel=1e-4)


def test_gpu_flag_fails_cleanly_without_a_gpu_and_auto_falls_back_to_the_cpu():
    ws = SHARED / "workspaces" / "nextstat_complex_workspace.json"
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has an NVIDIA driver: the CUDA path is tested by crates/ns-tests/tests/cuda_parity.rs")
    code, _, err = run_cli("fit", ws, "--gpu", "cuda", expect_ok=False)
    assert code != 0 and "CUDA" in err and "panicked" not in err
    auto = cli_json("fit", ws, "--gpu", "auto")
    cpu = cli_json("fit", ws)
    assert auto["bestfit"] == cpu["bestfit"]


def test_pulls_and_constraints_follow_cabinetry_for_every_constraint_type():
    """Pull (θ̂ − θ₀)/σ₀ and constraint σ̂/σ₀ with cabinetry's pre-fit widths and pyhf's init as θ₀,
    on the example analysis: normsys, histosys, lumi, staterror and shapesys (whose γ is centred
    on 1, not on its auxiliary datum τ)."""
    cabinetry = pytest.importorskip("cabinetry")
    from conftest import ROOT

    path = ROOT / "examples" / "analysis.json"
    model = pyhf.Workspace(json.loads(path.read_text())).model()
    fit = cli_json("fit", path)
    ours = {e["name"]: e for e in cli_json("ranking", path)["entries"]}
    init = np.asarray(model.config.suggested_init())
    prefit = cabinetry.model_utils.prefit_uncertainties(model)
    types = set()
    for i, name in enumerate(model.config.par_names):
        if name not in ours:
            continue
        entry = ours[name]
        if prefit[i] == 0:
            assert entry["pull"] is None and entry["constraint"] is None, name
            continue
        types.add(model.config.param_set(name.split("[")[0]).pdf_type + ":" + name.split("[")[0])
        assert entry["pull"] == pytest.approx((fit["bestfit"][i] - init[i]) / prefit[i], rel=1e-6, abs=1e-9), name
        assert entry["constraint"] == pytest.approx(fit["uncertainties"][i] / prefit[i], rel=1e-6), name
        assert abs(entry["pull"]) < 5, f"{name}: pull {entry['pull']}"
    assert {t.split(":")[0] for t in types} == {"normal", "poisson"}
    assert any("fakes_stat" in t for t in types) and any("staterror" in t for t in types) and any("lumi" in t for t in types)
