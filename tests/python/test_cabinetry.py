"""cabinetry on nextstat (`nextstat.cabinetry`): cabinetry's results for the example analysis,
computed by the engine, against cabinetry running on pyhf, and cabinetry's own tables and
figures drawn from them."""

import json

import cabinetry
import matplotlib
import numpy as np
import pyhf
import pytest

from conftest import ROOT
from nextstat import cabinetry as ns_cabinetry

matplotlib.use("Agg")
SPEC = json.loads((ROOT / "examples" / "analysis.json").read_text())


@pytest.fixture(scope="module")
def both():
    pyhf.set_backend("numpy", "scipy")
    theirs = cabinetry.model_utils.model_and_data(SPEC)
    ours = ns_cabinetry.model_and_data(SPEC)
    assert list(ours[1]) == pytest.approx(list(theirs[1]), rel=1e-12)
    return theirs, ours


def test_fit_ranking_scan_limit_and_significance_match_cabinetry_on_pyhf(both, tmp_path):
    (mp, dp), (mn, dn) = both
    fit_p = cabinetry.fit.fit(mp, dp, goodness_of_fit=True, minos=["mu_sig"])
    fit_n = ns_cabinetry.fit(mn, dn, goodness_of_fit=True, minos=["mu_sig"])
    assert fit_n.labels == fit_p.labels
    # cabinetry runs Minuit at its default tolerance: agreement to 1e-2 σ, and nextstat's
    # minimum at least as deep.
    sigma = fit_p.uncertainty
    assert np.all(np.abs(fit_n.bestfit - fit_p.bestfit) <= 1e-2 * np.where(sigma > 0, sigma, 1.0))
    np.testing.assert_allclose(fit_n.uncertainty, fit_p.uncertainty, rtol=1e-2, atol=1e-9)
    np.testing.assert_allclose(fit_n.corr_mat, fit_p.corr_mat, atol=1e-2)
    assert fit_n.best_twice_nll <= fit_p.best_twice_nll + 1e-6
    assert fit_n.goodness_of_fit == pytest.approx(fit_p.goodness_of_fit, abs=1e-4)
    np.testing.assert_allclose(fit_n.minos_uncertainty["mu_sig"], fit_p.minos_uncertainty["mu_sig"], rtol=5e-3)

    rank_p = cabinetry.fit.ranking(mp, dp, fit_results=fit_p)
    rank_n = ns_cabinetry.ranking(mn, dn, fit_results=fit_n)
    assert rank_n.labels == rank_p.labels
    # Impacts are differences of POI fits: to 1e-2 σ of the POI, Minuit's convergence at
    # cabinetry's settings (its nominal POI itself is 5e-3 σ from the minimum here).
    poi_sigma = fit_p.uncertainty[fit_p.labels.index("mu_sig")]
    for field in ("prefit_up", "prefit_down", "postfit_up", "postfit_down"):
        np.testing.assert_allclose(getattr(rank_n, field), getattr(rank_p, field), atol=1e-2 * poi_sigma, err_msg=field)

    scan_p = cabinetry.fit.scan(mp, dp, "mu_sig", par_range=(0.0, 2.5))
    scan_n = ns_cabinetry.scan(mn, dn, "mu_sig", par_range=(0.0, 2.5))
    np.testing.assert_allclose(scan_n.parameter_values, scan_p.parameter_values, atol=2e-2)
    np.testing.assert_allclose(scan_n.delta_nlls, scan_p.delta_nlls, atol=1e-2)

    # The limit on the published 1ℓbb likelihood (cabinetry on pyhf takes 35 s for the example's).
    published = json.loads((ROOT.parent / "shared" / "likelihoods" / "atlas_1Lbb_simplified" / "workspace.json").read_text())
    limit_p = cabinetry.fit.limit(*cabinetry.model_utils.model_and_data(published))
    limit_n = ns_cabinetry.limit(*ns_cabinetry.model_and_data(published))
    # cabinetry's root finding stops within 0.01 in the POI (its `tolerance`).
    assert limit_n.observed_limit == pytest.approx(limit_p.observed_limit, abs=1e-2)
    np.testing.assert_allclose(limit_n.expected_limit, limit_p.expected_limit, atol=1e-2)

    sig_p = cabinetry.fit.significance(mp, dp)
    sig_n = ns_cabinetry.significance(mn, dn)
    assert sig_n.observed_significance == pytest.approx(sig_p.observed_significance, rel=1e-3)
    assert sig_n.expected_significance == pytest.approx(sig_p.expected_significance, rel=1e-3)

    # cabinetry's own figures and tables take the engine's results.
    figures = [
        cabinetry.visualize.pulls(fit_n, figure_folder=tmp_path, close_figure=True),
        cabinetry.visualize.correlation_matrix(fit_n, figure_folder=tmp_path, close_figure=True),
        cabinetry.visualize.ranking(rank_n, figure_folder=tmp_path, close_figure=True),
        cabinetry.visualize.scan(scan_n, figure_folder=tmp_path, close_figure=True),
        cabinetry.visualize.limit(limit_n, figure_folder=tmp_path, close_figure=True),
    ]
    assert all(f is not None for f in figures)
    assert len(list(tmp_path.glob("*.pdf"))) == 5


SWAPPED = r'''
import json, sys
import nextstat
nextstat.install_as_pyhf()
import cabinetry, matplotlib, pyhf
matplotlib.use("Agg")
assert pyhf is nextstat
spec = json.loads(open(sys.argv[1]).read())
model, data = cabinetry.model_utils.model_and_data(spec)
prefit = cabinetry.model_utils.prediction(model)
table = cabinetry.tabulate.yields(prefit, data, save_tables=False)
cabinetry.visualize.data_mc(prefit, data, figure_folder=sys.argv[2], close_figure=True)
fit = cabinetry.fit.fit(model, data, minos=["mu_sig"], goodness_of_fit=True)
postfit = cabinetry.model_utils.prediction(model, fit_results=fit)
ranking = cabinetry.fit.ranking(model, data, fit_results=fit)
scan = cabinetry.fit.scan(model, data, "mu_sig", par_range=(0.0, 2.5))
limit = cabinetry.fit.limit(model, data)
significance = cabinetry.fit.significance(model, data)
print(json.dumps({
    "labels": fit.labels, "bestfit": fit.bestfit.tolist(), "uncertainty": fit.uncertainty.tolist(),
    "best_twice_nll": fit.best_twice_nll, "goodness_of_fit": fit.goodness_of_fit,
    "minos": list(fit.minos_uncertainty["mu_sig"]), "prefit": [list(map(list, y)) for y in prefit.model_yields],
    "postfit": [list(map(list, y)) for y in postfit.model_yields], "table": table,
    "impacts": ranking.postfit_up.tolist(), "ranking_labels": ranking.labels,
    "scan": scan.delta_nlls.tolist(), "observed_limit": limit.observed_limit,
    "expected_limit": list(limit.expected_limit), "significance": significance.observed_significance,
}))
'''


def test_cabinetry_runs_unchanged_on_nextstat_as_pyhf(both, tmp_path):
    """`nextstat.install_as_pyhf()`, then cabinetry's own workflow, untouched: yields tables and
    data/MC plots, the fit with MINOS, rankings, scans, limits, significances — on nextstat's
    engine, against cabinetry on pyhf and against `nextstat.cabinetry`."""
    import subprocess
    import sys

    script = tmp_path / "swapped.py"
    script.write_text(SWAPPED)
    done = subprocess.run([sys.executable, str(script), str(ROOT / "examples" / "analysis.json"), str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    (mp, dp), (mn, dn) = both
    fit_p = cabinetry.fit.fit(mp, dp, minos=["mu_sig"], goodness_of_fit=True)
    assert got["labels"] == fit_p.labels
    sigma = np.where(fit_p.uncertainty > 0, fit_p.uncertainty, 1.0)
    assert np.all(np.abs(np.array(got["bestfit"]) - fit_p.bestfit) <= 1e-2 * sigma)
    np.testing.assert_allclose(got["uncertainty"], fit_p.uncertainty, rtol=1e-2, atol=1e-9)
    assert got["best_twice_nll"] <= fit_p.best_twice_nll + 1e-6
    assert got["goodness_of_fit"] == pytest.approx(fit_p.goodness_of_fit, abs=1e-4)
    np.testing.assert_allclose(got["minos"], fit_p.minos_uncertainty["mu_sig"], rtol=5e-3)
    prefit_p = cabinetry.model_utils.prediction(mp)
    for ours, theirs in zip(got["prefit"], prefit_p.model_yields):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10)
    assert got["table"] == cabinetry.tabulate.yields(prefit_p, dp, save_tables=False)
    postfit_p = cabinetry.model_utils.prediction(mp, fit_results=fit_p)
    for ours, theirs in zip(got["postfit"], postfit_p.model_yields):
        np.testing.assert_allclose(ours, theirs, rtol=2e-3)
    assert (tmp_path / "SR_prefit.pdf").exists()
    # Rankings, scans and limits against the adapter (itself checked against cabinetry on pyhf above).
    rank_n = ns_cabinetry.ranking(mn, dn, fit_results=ns_cabinetry.fit(mn, dn))
    assert got["ranking_labels"] == rank_n.labels
    poi_sigma = fit_p.uncertainty[fit_p.labels.index("mu_sig")]
    np.testing.assert_allclose(got["impacts"], rank_n.postfit_up, atol=1e-2 * poi_sigma)
    np.testing.assert_allclose(got["scan"], ns_cabinetry.scan(mn, dn, "mu_sig", par_range=(0.0, 2.5)).delta_nlls, atol=1e-2)
    limit_n = ns_cabinetry.limit(mn, dn)
    assert got["observed_limit"] == pytest.approx(limit_n.observed_limit, abs=1e-2)
    np.testing.assert_allclose(got["expected_limit"], limit_n.expected_limit, atol=1e-2)
    assert got["significance"] == pytest.approx(cabinetry.fit.significance(mp, dp).observed_significance, rel=1e-3)


def test_cabinetry_tables_and_figures_from_the_adapters_model(both, tmp_path):
    """cabinetry's own prediction, yield table and data/MC figures on `nextstat.cabinetry`'s model
    (the model's `main_model` gives the per-sample yields from the engine)."""
    (mp, dp), (mn, dn) = both
    ours, theirs = cabinetry.model_utils.prediction(mn), cabinetry.model_utils.prediction(mp)
    for a, b in zip(ours.model_yields, theirs.model_yields):
        np.testing.assert_allclose(a, b, rtol=1e-10)
    assert cabinetry.tabulate.yields(ours, dn, save_tables=False) == cabinetry.tabulate.yields(theirs, dp, save_tables=False)
    post = cabinetry.model_utils.prediction(mn, fit_results=ns_cabinetry.fit(mn, dn))
    assert len(cabinetry.visualize.data_mc(post, dn, figure_folder=tmp_path, close_figure=True)) == 2
    assert len(list(tmp_path.glob("*.pdf"))) == 2
