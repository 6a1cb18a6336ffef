"""`nextstat export-hs3`: every shared pyhf workspace and published likelihood written as HS3,
imported by RooFit 6.40 (PyPI `root`), gives nextstat's likelihood: RooFit's NLL minus nextstat's
is one constant over random points (to 1e-9 relative; the constant is RooFit's N_obs·ln
N_channels, its category term, plus the constraint terms RooFit drops for constant parameters)
and RooFit's fit from the file's start ends at nextstat's minimum. Read back by nextstat, the
file is the same likelihood (to 1e-12 relative) under the same parameter names.

Random points keep every sample's yield positive (α within ±1.5, the rest within ±20% of the
start): ROOT clips a sample's yield at zero, pyhf does not (docs/hs3-binned.md)."""

import json
import math

import numpy as np
import pytest

import nextstat
from conftest import ROOT as REPO, WORKSPACES, cli_json, run_cli

R = pytest.importorskip("ROOT", reason="RooFit (PyPI 'root') is in requirements-test.txt")
R.RooMsgService.instance().setGlobalKillBelow(R.RooFit.ERROR)
R.gErrorIgnoreLevel = R.kWarning

LIKELIHOODS = REPO.parent / "shared" / "likelihoods"
# Where RooFit's fit from the file's start stops above nextstat's minimum (docs/hs3-binned.md has
# the table, from bench/hs3_export_roofit.py): the higher of two minima of the coupled-histosys
# model (../shared/hs3-binned/README.md), and Migrad stopping short on three large models (RooFit's
# NLL at nextstat's minimum is the lower, checked above).
ROOFIT_STOPS_ABOVE = {
    "pyhf_validation_2bin_2channel_coupledhistosys",
    "synthetic_large_2000bins",
    "atlas_ttbar_ljets_xsec",
    "atlas_compressed_EWKinos_2018-16_smodels",
}
SOURCES = sorted(p for p in WORKSPACES.glob("*.json") if p.name not in ("manifest.json", "pyhf_testpatchset_patchset.json"))
SOURCES += sorted(LIKELIHOODS.glob("*/workspace.json"))




def roofit_nll(path):
    ws = R.RooWorkspace("w")
    assert R.RooJSONFactoryWSTool(ws).importJSON(str(path))
    analysis = json.loads(path.read_text())["analyses"][0]["name"]
    mc = ws.obj("ModelConfig")
    assert mc, f"no ModelConfig for analysis {analysis}"
    # Every parameter's constraint, the POI's too (pyhf's POI may be a constrained α).
    constrained = R.RooArgSet(mc.GetNuisanceParameters())
    constrained.add(mc.GetParametersOfInterest())
    nll = mc.GetPdf().createNLL(ws.data("obsData"), R.RooFit.Constrain(constrained), R.RooFit.GlobalObservables(mc.GetGlobalObservables()))
    return ws, mc, nll


def roofit_fit(nll):
    """RooFit's minimum of `nll` from where its parameters stand (Minuit2, strategy 1, EDM
    tolerance 1e-6; Minuit may report that machine precision limits its EDM: the value is what
    counts)."""
    # Minuit's precision is a process-wide default that other tests change (test_unbinned_roofit):
    # this fit runs with ROOT's own (-1: computed), as bench/hs3_export_roofit.py does.
    options = R.Math.MinimizerOptions
    precision = options.DefaultPrecision()
    options.SetDefaultPrecision(-1)
    try:
        minimizer = R.RooMinimizer(nll)
        minimizer.setPrintLevel(-1)
        minimizer.setStrategy(1)
        minimizer.setEps(1e-6)
        minimizer.minimize("Minuit2", "Migrad")
        return minimizer.save().minNll()
    finally:
        options.SetDefaultPrecision(precision)


def names_in_hs3(model):
    """nextstat's parameter names → export-hs3's (ROOT's conventions)."""
    out = {}
    for set_name in model.config.par_order:
        ps = model.config.param_set(set_name)
        sl = model.config.par_slice(set_name)
        for i, index in enumerate(range(sl.start, sl.stop)):
            name = model.config.par_names[index]
            channel = set_name.removeprefix("staterror_")
            if ps.modifier_type == "lumi" and set_name == "lumi":
                out[name] = "Lumi"
            elif ps.modifier_type in ("normfactor", "lumi"):
                out[name] = set_name
            elif ps.modifier_type == "staterror" and channel != set_name and channel in model.config.channels:
                out[name] = f"gamma_stat_{channel}_bin_{i}"
            elif ps.modifier_type in ("normsys", "histosys"):
                out[name] = f"alpha_{set_name}"
            else:
                out[name] = f"gamma_{set_name}_bin_{i}"
    return out


def random_points(model, rng, n):
    init = np.array(model.config.suggested_init(), dtype=float)
    bounds = model.config.suggested_bounds()
    fixed = model.config.suggested_fixed()
    kinds = {}
    for set_name in model.config.par_order:
        sl = model.config.par_slice(set_name)
        for index in range(sl.start, sl.stop):
            kinds[index] = model.config.param_set(set_name).modifier_type
    points = [init]
    for _ in range(n):
        p = init.copy()
        for i, kind in kinds.items():
            if fixed[i]:
                continue
            p[i] = rng.uniform(-1.5, 1.5) if kind in ("normsys", "histosys") else init[i] * rng.uniform(0.8, 1.2)
            p[i] = min(max(p[i], bounds[i][0]), bounds[i][1])
        points.append(p)
    return points


def source_id(path):
    """A source's name: the published likelihood's folder, or the workspace file's stem."""
    return path.parent.name if path.name == "workspace.json" else path.stem


CASES = [pytest.param(p, None, id=source_id(p)) for p in SOURCES]
# pyhf's code1 normsys is ROOT's code 1.
CASES += [pytest.param(WORKSPACES / f"{n}.json", "code1", id=f"{n}-normsys-code1") for n in ("nextstat_complex_workspace", "pyhf_validation_1bin_normsys", "nextstat_tttt_prod")]


@pytest.mark.parametrize("source,normsys", CASES)
def test_roofit_imports_the_same_likelihood(source, normsys, tmp_path):
    spec = json.loads(source.read_text())
    out = tmp_path / "model.hs3.json"
    codes = ["--interp-codes", f"normsys={normsys}"] if normsys else []
    run_cli("export-hs3", str(source), *codes, "-o", str(out))
    workspace = nextstat.Workspace(spec)
    # The file means ROOT's likelihood, which clips each sample's yield at zero: nextstat's
    # model with that option (pyhf's wherever no yield turns negative).
    settings = {"normsys": {"interpcode": normsys}, "histosys": {"interpcode": "code4p"}} if normsys else None
    model = workspace.model(clip_negative_yields=True, modifier_settings=settings)
    data = workspace.data(model)
    roofit_reads_the_same_likelihood(out, model, data, reaches_minimum=source_id(source) not in ROOFIT_STOPS_ABOVE or normsys)


def roofit_reads_the_same_likelihood(out, model, data, reaches_minimum=True):
    """RooFit's NLL of the file `out` minus `model`'s is one constant at random points and at
    nextstat's minimum; RooFit's fit from the file's start ends there (or, where it is known to
    stop short, above it, never below)."""
    ws, mc, nll = roofit_nll(out)
    names = names_in_hs3(model)
    variables = {n: ws.var(h) for n, h in names.items()}
    missing = [h for n, h in names.items() if not variables[n]]
    assert not missing, f"RooFit's import lacks {missing[:5]}"

    rng = np.random.default_rng(7)
    best = nextstat.fit(model)
    diffs, scale = [], 1.0
    for point in random_points(model, rng, 12) + [np.array(best.bestfit)]:
        for name, value in zip(model.config.par_names, point):
            variables[name].setVal(float(value))
        ours, theirs = model.twice_nll(point, data) / 2, nll.getVal()
        diffs.append(theirs - ours)
        scale = max(scale, abs(ours), abs(theirs))
    spread = max(diffs) - min(diffs)
    assert spread <= 1e-9 * scale, (diffs[0], spread)

    # RooFit's fit from the file's start ends at nextstat's minimum, or above it.
    for name, value in zip(model.config.par_names, model.config.suggested_init()):
        variables[name].setVal(float(value))
    theirs = roofit_fit(nll) - diffs[0]
    assert theirs >= best.twice_nll / 2 - 1e-6
    if reaches_minimum:
        # Migrad's tolerance (EDM 1e-6, strategy 1) leaves up to 2e-4 on the larger models.
        assert theirs == pytest.approx(best.twice_nll / 2, abs=1e-3)


COMBINE = REPO.parent / "shared" / "combine"
DATACARDS = ["counting_simple", "counting_realistic", "counting_multichannel", "cat23001_counting", "groups_counting", "statroutines_counting"]


@pytest.mark.parametrize("name", DATACARDS)
def test_datacards_written_as_hs3_are_their_likelihood_in_roofit(name, tmp_path):
    """A CMS Combine card that pyhf expresses exactly (datacard2json's six of the 18 shared
    cards), written by `export-hs3` from the card itself: RooFit reads the likelihood of its pyhf
    form (symmetric lnN as code1 normsys), which is Combine's (test_combine_datacards.py)."""
    card = COMBINE / json.loads((COMBINE / "reference.json").read_text())["cards"][name]["card"]
    out = tmp_path / "card.hs3.json"
    run_cli("export-hs3", str(card), "-o", str(out))
    pyhf_form = tmp_path / "card.json"
    run_cli("datacard2json", str(card), "-o", str(pyhf_form))
    workspace = nextstat.Workspace(json.loads(pyhf_form.read_text()))
    model = workspace.model(clip_negative_yields=True, modifier_settings={"normsys": {"interpcode": "code1"}, "histosys": {"interpcode": "code4p"}})
    roofit_reads_the_same_likelihood(out, model, workspace.data(model))


CODELESS_SOURCES = [WORKSPACES / "nextstat_tHu.json", LIKELIHOODS / "atlas_staus_2018-04_comb_DS_100_1" / "workspace.json", LIKELIHOODS / "atlas_3Lonshell_2019-09_smodels" / "workspace.json"]


@pytest.mark.parametrize("source", CODELESS_SOURCES, ids=source_id)
def test_a_normsys_without_a_code_is_roofits(source, tmp_path):
    """A normsys without an `interpolation` key (ATLAS's ROOT 6.32 exports) is the FlexibleInterpVar
    code 4 in ROOT 6.40, which it evaluates as code 5 (pyhf's code4, docs/hs3-binned.md). Files
    with several normsys (and histosys) per sample, stripped of their keys, read by RooFit and by
    nextstat: one likelihood up to a constant at random points inside and outside ±1, and
    RooFit's fit ends at nextstat's minimum."""
    written = tmp_path / "code5.hs3.json"
    run_cli("export-hs3", str(source), "--clip-negative-yields", "-o", str(written))
    document = json.loads(written.read_text())
    stripped = 0
    for dist in document["distributions"]:
        for sample in dist.get("samples", []):
            counts = [m["type"] for m in sample["modifiers"]].count("normsys")
            for m in sample["modifiers"]:
                if m["type"] == "normsys":
                    stripped += m.pop("interpolation") == 5 and counts > 1
    assert stripped > 0, "samples with several normsys"
    out = tmp_path / "codeless.hs3.json"
    out.write_text(json.dumps(document))
    # nextstat reads the file without codes as the file with them...
    assert "normsys=code4" in run_cli("eval", str(out))[1]
    assert cli_json("eval", str(out))["nll"] == cli_json("eval", str(written))["nll"]
    # ...and RooFit reads it as the source model.
    workspace = nextstat.Workspace(json.loads(source.read_text()))
    model = workspace.model(clip_negative_yields=True)
    roofit_reads_the_same_likelihood(out, model, workspace.data(model), reaches_minimum=source_id(source) not in ROOFIT_STOPS_ABOVE)


HS3 = REPO.parent / "shared" / "hs3-binned"


@pytest.mark.parametrize("name", sorted(p.name.removesuffix(".hs3.json") for p in HS3.glob("*.hs3.json")))
def test_roots_files_through_nextstat_give_roofits_numbers(name, tmp_path):
    """ROOT's file → nextstat → HS3 → RooFit: RooFit's NLL at the reference's default point and
    its minimum are those of the reference (for the `_gaussstat` files those of the workspace
    ROOT exported: ROOT misreads its own file's Gaussian staterror, nextstat's file it reads
    right)."""
    reference = json.loads((HS3 / f"{name}.reference.json").read_text())
    roofit = reference[reference["oracle_for_this_file"]]
    out = tmp_path / "model.hs3.json"
    run_cli("export-hs3", str(HS3 / f"{name}.hs3.json"), "-o", str(out))
    ws, mc, nll = roofit_nll(out)
    for theirs, value in roofit["default_point"].items():
        if ws.var(theirs) and not ws.var(theirs).isConstant():
            ws.var(theirs).setVal(value[0] if isinstance(value, list) else value)
    assert nll.getVal() == pytest.approx(roofit["nll_default"], abs=1e-6)
    # At RooFit's minimum of ROOT's own file, or lower (Migrad stops within its tolerance on
    # the nearly flat directions of these models).
    best = roofit_fit(nll)
    assert best <= roofit["nll_best"] + 1e-6
    assert best == pytest.approx(roofit["nll_best"], abs=1e-3)


XML = REPO.parent / "shared" / "histfactory-xml"


def xml_measurements():
    cases = []
    for ref in sorted(XML.glob("*/*/reference.json")) + [XML / "allmodifiers" / "reference.json"]:
        for top in json.loads(ref.read_text())["tops"]:
            for m in top.get("measurements", []):
                if m.get("roofit_root_defaults"):
                    cases.append(pytest.param(ref.parent / top["top"], m["name"], m["roofit_root_defaults"], id=f"{ref.parent.name}/{top['top']}/{m['name']}"))
    return cases


@pytest.mark.parametrize("top,measurement,roofit", xml_measurements())
def test_histfactory_xml_written_as_hs3_gives_roofits_numbers(top, measurement, roofit, tmp_path):
    """HistFactory XML (ROOT's semantics) → HS3 → RooFit: the NLL at the point
    MakeModelAndMeasurementFast leaves and the minimum of the workspace RooFit builds from the
    XML itself; measurements whose ConstraintTerms HS3 cannot carry yet are refused by name."""
    out = tmp_path / "model.hs3.json"
    code, _, stderr = run_cli("export-hs3", str(top), "--measurement", measurement, "-o", str(out), expect_ok=False)
    if code != 0:
        assert "ConstraintTerms" in stderr and measurement in stderr, stderr
        return
    ws, mc, nll = roofit_nll(out)
    for name, value in roofit["init"].items():
        if ws.var(name):
            ws.var(name).setVal(value)
    assert nll.getVal() == pytest.approx(roofit["nll_init"], abs=1e-6)
    best = roofit_fit(nll)
    assert best <= roofit["nll_best"] + 1e-6
    assert best == pytest.approx(roofit["nll_best"], abs=1e-3)


def test_python_model_to_hs3_is_the_cli_file_and_reads_back(tmp_path):
    source = WORKSPACES / "nextstat_complex_workspace.json"
    model = nextstat.Workspace(json.loads(source.read_text())).model(clip_negative_yields=True)
    document = model.to_hs3()
    out = tmp_path / "cli.hs3.json"
    run_cli("export-hs3", str(source), "-o", str(out))
    assert document == json.loads(out.read_text())
    path = tmp_path / "python.hs3.json"
    path.write_text(json.dumps(document))
    back = nextstat.load_hs3(path)
    assert sorted(back.config.par_names) == sorted(model.config.par_names)
    assert nextstat.fit(back).twice_nll == pytest.approx(nextstat.fit(model).twice_nll, abs=1e-8)


def test_what_hs3_cannot_carry_is_refused_by_name(tmp_path):
    source = WORKSPACES / "pyhf_validation_2bin_histosys.json"
    code, _, stderr = run_cli("export-hs3", str(source), "--interp-codes", "histosys=code0", expect_ok=False)
    assert code != 0 and "histosys" in stderr and "code4p" in stderr
    code, _, stderr = run_cli("export-hs3", str(REPO.parent / "shared" / "combine" / "own" / "counting_extras.txt"), expect_ok=False)
    assert code != 0 and "'effS' is an asymmetric lnN" in stderr and "not as HS3 either" in stderr
