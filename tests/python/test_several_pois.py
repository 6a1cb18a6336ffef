"""Models with several parameters of interest (`--poi a,b`, Python `poi=`, a call's
`"fit": {"poi": [...]}`, a datacard's multiSignalModel maps): the POI each verb tests against
pyhf with that POI set (`Workspace.model(poi_name=…)`), the others floating or fixed as asked, on
every front end; careless lists refused by name."""

import json

import numpy as np
import pyhf
import pytest

import nextstat
from conftest import cli_json, run_cli

# Two production modes in two signal regions, each with its own signal strength, a background
# with a normalisation uncertainty and MC statistics.
TWO_SIGNALS = {
    "channels": [
        {"name": "SR_a", "samples": [
            {"name": "ggH", "data": [6.0, 3.0], "modifiers": [{"name": "mu_ggH", "type": "normfactor", "data": None}]},
            {"name": "VBF", "data": [1.0, 2.0], "modifiers": [{"name": "mu_VBF", "type": "normfactor", "data": None}]},
            {"name": "bkg", "data": [30.0, 12.0], "modifiers": [
                {"name": "bkg_norm", "type": "normsys", "data": {"hi": 1.1, "lo": 0.9}},
                {"name": "stat_a", "type": "staterror", "data": [2.0, 1.5]}]},
        ]},
        {"name": "SR_b", "samples": [
            {"name": "ggH", "data": [1.0], "modifiers": [{"name": "mu_ggH", "type": "normfactor", "data": None}]},
            {"name": "VBF", "data": [5.0], "modifiers": [{"name": "mu_VBF", "type": "normfactor", "data": None}]},
            {"name": "bkg", "data": [9.0], "modifiers": [{"name": "bkg_norm", "type": "normsys", "data": {"hi": 1.15, "lo": 0.85}}]},
        ]},
    ],
    "observations": [{"name": "SR_a", "data": [40.0, 17.0]}, {"name": "SR_b", "data": [13.0]}],
    "measurements": [{"name": "m", "config": {"poi": "mu_ggH", "parameters": [
        {"name": "mu_ggH", "bounds": [[0, 10]]}, {"name": "mu_VBF", "bounds": [[0, 10]]}]}}],
    "version": "1.0.0",
}


@pytest.fixture
def tight_pyhf():
    pyhf.set_backend("numpy", pyhf.optimize.minuit_optimizer(strategy=2, tolerance=1e-10))
    yield
    pyhf.set_backend("numpy", pyhf.optimize.scipy_optimizer())


def pyhf_model(poi, spec=TWO_SIGNALS, **settings):
    ws = pyhf.Workspace(spec)
    model = ws.model(poi_name=poi, **settings)
    return model, ws.data(model)


@pytest.mark.parametrize("poi", ["mu_ggH", "mu_VBF"])
def test_each_poi_is_tested_as_pyhf_tests_it(tmp_path, tight_pyhf, poi):
    """CLs (observed and expected band) at μ = 1 of each POI, the other floating, within 1e-5 of
    pyhf with that POI set; the CLI, Python and a saved call agree and name the POI tested."""
    ours = nextstat.hypotest(1.0, nextstat.Workspace(TWO_SIGNALS).model(), poi=poi)
    assert ours.poi == poi
    model, data = pyhf_model(poi)
    obs, exp = pyhf.infer.hypotest(1.0, data, model, test_stat="qtilde", return_expected_set=True)
    assert ours.cls_obs == pytest.approx(float(obs), abs=1e-5)
    np.testing.assert_allclose(ours.cls_exp, np.ravel(exp), atol=1e-5)
    path = tmp_path / "ws.json"
    path.write_text(json.dumps(TWO_SIGNALS))
    saved = tmp_path / "call.json"
    cli = cli_json("hypotest", path, "--poi", poi, "--save-call", saved)
    assert cli["poi"] == poi and cli == ours.to_dict()
    assert json.loads(saved.read_text())["fit"]["poi"] == [poi]
    assert cli_json("run", saved) == cli


def test_the_other_poi_fixed_as_asked(tight_pyhf):
    """μ_VBF tested with μ_ggH fixed at 1.5: pyhf's CLs with the same fixed parameter; an upper
    limit where pyhf's CLs equals the level; a fit reports both POIs in the order given."""
    model = nextstat.Workspace(TWO_SIGNALS).model()
    names = model.config.par_names
    fixed = [n == "mu_ggH" for n in names]
    init = [1.5 if n == "mu_ggH" else v for n, v in zip(names, model.config.suggested_init())]
    ours = nextstat.hypotest(1.0, model, init_pars=init, fixed_params=fixed, poi=["mu_VBF", "mu_ggH"])
    theirs_model, data = pyhf_model("mu_VBF")
    order = theirs_model.config.par_names
    theirs_init = [1.5 if n == "mu_ggH" else v for n, v in zip(order, theirs_model.config.suggested_init())]
    theirs_fixed = [n == "mu_ggH" for n in order]
    obs = pyhf.infer.hypotest(1.0, data, theirs_model, init_pars=theirs_init, fixed_params=theirs_fixed, test_stat="qtilde")
    assert ours.cls_obs == pytest.approx(float(obs), abs=1e-5)
    limit = nextstat.upper_limit(model, init_pars=init, fixed_params=fixed, poi=["mu_VBF", "mu_ggH"])
    assert limit.poi == "mu_VBF"
    at_limit = pyhf.infer.hypotest(limit.obs, data, theirs_model, init_pars=theirs_init, fixed_params=theirs_fixed, test_stat="qtilde")
    assert float(at_limit) == pytest.approx(0.05, abs=1e-4)
    fit = nextstat.fit(model, poi=["mu_VBF", "mu_ggH"])
    assert [p["name"] for p in fit.pois] == ["mu_VBF", "mu_ggH"]
    _, best = pyhf.infer.mle.fit(data, theirs_model, return_fitted_val=True)
    pars = pyhf.infer.mle.fit(data, theirs_model)
    for p in fit.pois:
        assert p["bestfit"] == pytest.approx(float(pars[order.index(p["name"])]), abs=1e-4)
        assert p["bestfit"] == fit[p["name"]] and p["uncertainty"] > 0


CARD = """imax 2
jmax 2
kmax *
---
bin a b
observation 12 7
---
bin a a a b b b
process ggH qqH bkg ggH qqH bkg
process -1 0 1 -1 0 1
rate 4 1 5 1 3 3
---
lumi lnN 1.02 1.02 1.02 1.02 1.02 1.02
bg lnN - - 1.1 - - 1.2
"""
MAPS = ["--po", "map=.*/ggH:r_ggH[1,0,10]", "--po", "map=.*/qqH:r_qqH[1,0,10]"]


def test_a_datacards_maps_declare_its_pois(tmp_path, tight_pyhf):
    """multiSignalModel maps declare both POIs (the first is tested); `--poi r_qqH` tests the
    other: against pyhf on the card's own pyhf export (normsys code1, exact for lnN)."""
    card = tmp_path / "card.txt"
    card.write_text(CARD)
    fit = cli_json("fit", card, *MAPS)
    assert [p["name"] for p in fit["pois"]] == ["r_ggH", "r_qqH"]
    assert cli_json("hypotest", card, *MAPS)["poi"] == "r_ggH"
    ours = cli_json("hypotest", card, *MAPS, "--poi", "r_qqH")
    assert ours["poi"] == "r_qqH"
    spec = json.loads(run_cli("datacard2json", card, *MAPS)[1])
    model, data = pyhf_model("r_qqH", spec, modifier_settings={"normsys": {"interpcode": "code1"}, "histosys": {"interpcode": "code0"}})
    obs, exp = pyhf.infer.hypotest(1.0, data, model, test_stat="qtilde", return_expected_set=True)
    assert ours["CLs_obs"] == pytest.approx(float(obs), abs=1e-5)
    np.testing.assert_allclose(ours["CLs_exp"], np.ravel(exp), atol=1e-5)
    # A datacard read from Python declares the same POIs.
    dc = nextstat.Datacard(card, physics=[MAPS[1], MAPS[3]]).model()
    assert nextstat.hypotest(1.0, dc, poi="r_qqH").cls_obs == pytest.approx(ours["CLs_obs"], abs=1e-9)


def test_careless_poi_lists_are_refused_by_name(tmp_path):
    path = tmp_path / "ws.json"
    path.write_text(json.dumps(TWO_SIGNALS))
    cases = [
        (["--poi", "bkg_norm"], "'bkg_norm' is a constrained nuisance parameter"),
        (["--poi", "mu_VBF,mu_VBF"], "'mu_VBF' is named twice"),
        (["--poi", "mu_H"], "poi: unknown parameter 'mu_H'"),
        (["--poi", "mu_VBF", "--fix", "mu_VBF=1"], "the POI 'mu_VBF' is fixed"),
    ]
    for args, message in cases:
        code, _, err = run_cli("hypotest", path, *args, expect_ok=False)
        assert code == 2 and message in err, (args, err)
    call = tmp_path / "call.json"
    call.write_text(json.dumps({"model": {"workspace": str(path)}, "request": {"verb": "hypotest", "mu": 1.0}, "fit": {"poi": []}}))
    code, _, err = run_cli("run", call, expect_ok=False)
    assert code == 2 and "poi: an empty list" in err, err
    model = nextstat.Workspace(TWO_SIGNALS).model()
    with pytest.raises(TypeError, match="poi must be a parameter name or a list of names"):
        nextstat.hypotest(1.0, model, poi=3)
    with pytest.raises(nextstat.InvalidInputError, match="constrained nuisance"):
        nextstat.upper_limit(model, poi="stat_a[0]")


def test_the_server_tests_the_poi_a_call_names():
    from test_server import Server

    server = Server("--workers", "1")
    try:
        status, model, _ = server.call("POST", "/v1/models", {"workspace": TWO_SIGNALS})
        assert status == 201 and model["pois"] == ["mu_ggH"]
        body = {"model": {"id": model["id"]}, "request": {"mu": 1.0}, "fit": {"poi": ["mu_VBF"]}}
        status, answer, _ = server.call("POST", "/v1/hypotest", body)
        assert status == 200 and answer["poi"] == "mu_VBF"
        assert answer["CLs_obs"] == nextstat.hypotest(1.0, nextstat.Workspace(TWO_SIGNALS).model(), poi="mu_VBF").cls_obs
        body["fit"]["poi"] = ["bkg_norm"]
        status, error, _ = server.call("POST", "/v1/hypotest", body)
        assert status == 400 and "constrained nuisance" in error["error"]["message"]
    finally:
        server.stop()


def test_the_pois_of_a_datacards_maps_reach_roofit_through_hs3(tmp_path):
    """`export-hs3` writes every POI the maps declare into the analysis (and the POI domain);
    ROOT 6.40's importer makes them its ModelConfig's POIs, and nextstat reads them back."""
    R = pytest.importorskip("ROOT", reason="RooFit (PyPI 'root') is in requirements-test.txt")
    card = tmp_path / "card.txt"
    card.write_text(CARD)
    hs3 = tmp_path / "card.hs3.json"
    run_cli("export-hs3", card, *MAPS, "-o", hs3)
    ws = R.RooWorkspace("w")
    assert R.RooJSONFactoryWSTool(ws).importJSON(str(hs3))
    assert [p.GetName() for p in ws.obj("ModelConfig").GetParametersOfInterest()] == ["r_ggH", "r_qqH"]
    back = cli_json("fit", hs3)
    assert [p["name"] for p in back["pois"]] == ["r_ggH", "r_qqH"]
    assert cli_json("hypotest", hs3, "--poi", "r_qqH")["CLs_obs"] == pytest.approx(cli_json("hypotest", card, *MAPS, "--poi", "r_qqH")["CLs_obs"], abs=1e-9)


def test_a_grid_over_two_pois_is_roofits_profile(tmp_path):
    """Combine's `MultiDimFit --algo grid` over two POIs, as RooFit computes it: the card's two
    signal strengths written as HS3 and imported by ROOT 6.40; at each point of a 4 × 4 grid,
    RooFit's minimum with both fixed (Minuit2, strategy 2), 2ΔNLL from RooFit's own best fit —
    within 1e-6 of ours."""
    R = pytest.importorskip("ROOT", reason="RooFit (PyPI 'root') is in requirements-test.txt")
    R.RooMsgService.instance().setGlobalKillBelow(R.RooFit.ERROR)
    card = tmp_path / "card.txt"
    card.write_text(CARD)
    ours = cli_json("scan", card, *MAPS, "--parameters", "r_ggH,r_qqH", "--grid", "0", "3", "4", "0", "3", "4")
    hs3 = tmp_path / "card.hs3.json"
    run_cli("export-hs3", card, *MAPS, "-o", hs3)
    ws = R.RooWorkspace("w")
    assert R.RooJSONFactoryWSTool(ws).importJSON(str(hs3))
    mc = ws.obj("ModelConfig")
    nll = mc.GetPdf().createNLL(ws.data("obsData"), R.RooFit.Constrain(mc.GetNuisanceParameters()), R.RooFit.GlobalObservables(mc.GetGlobalObservables()))
    start = R.RooArgSet()
    mc.GetPdf().getParameters(ws.data("obsData")).snapshot(start)

    def minimum(**fixed):
        params = mc.GetPdf().getParameters(ws.data("obsData"))
        params.assign(start)
        for name in ("r_ggH", "r_qqH"):
            var = ws.var(name)
            var.setConstant(name in fixed)
            if name in fixed:
                var.setVal(fixed[name])
        minimizer = R.RooMinimizer(nll)
        minimizer.setPrintLevel(-1)
        minimizer.setStrategy(2)
        minimizer.setEps(1e-9)
        minimizer.minimize("Minuit2", "Migrad")
        return nll.getVal()

    best = minimum()
    k = 0
    for a in ours["grid"][0]:
        for b in ours["grid"][1]:
            theirs = 2 * (minimum(r_ggH=a, r_qqH=b) - best)
            assert ours["delta_twice_nll"][k] == pytest.approx(theirs, abs=1e-6), (a, b)
            k += 1
