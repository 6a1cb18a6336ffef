"""`import nextstat as pyhf`: the pyhf 0.7 API surface scripts call, each call checked live against
pyhf 0.7.6 on the same workspaces — workspace summaries and measurements, the model config and
its parameter sets, expected data, the test statistics, the calculators, the root-finding limit,
simplemodels, digests, the numpy backend and the exception names."""

import json
import logging

import numpy as np
import pyhf
import pytest

import nextstat
from conftest import ROOT, WORKSPACES
from test_inference_parity import tight_numpy  # noqa: F401 (fixture)

PUBLISHED = ROOT.parent / "shared" / "likelihoods" / "atlas_1Lbb_simplified" / "workspace.json"
FILES = [ROOT / "examples" / "analysis.json", PUBLISHED, WORKSPACES / "pyhf_validation_2bin_histosys.json",
         WORKSPACES / "pyhf_docs_2bin_1channel.json"]


def pair(path):
    spec = json.loads(path.read_text())
    return pyhf.Workspace(spec), nextstat.Workspace(spec)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.parent.name if p.name == "workspace.json" else p.stem)
def test_workspace_and_model_config_are_pyhfs(path):
    theirs, ours = pair(path)
    for attr in ("channels", "samples", "modifiers", "measurement_names", "version", "channel_nbins", "channel_slices"):
        assert getattr(ours, attr) == getattr(theirs, attr), attr
    assert ours.observations == {k: list(v) for k, v in theirs.observations.items()}
    assert ours.get_measurement() == theirs.get_measurement()
    assert ours["channels"] == theirs["channels"] and ours == dict(theirs)
    name = theirs.measurement_names[-1]
    assert ours.get_measurement(measurement_name=name) == theirs.get_measurement(measurement_name=name)
    assert ours.get_measurement(measurement_index=0) == theirs.get_measurement(measurement_index=0)

    m_theirs, m_ours = theirs.model(), ours.model()
    c_theirs, c_ours = m_theirs.config, m_ours.config
    for attr in ("parameters", "auxdata_order", "nmaindata", "nauxdata", "modifiers", "channel_slices", "poi_name",
                 "poi_index", "par_order", "par_names", "npars", "channels", "samples", "channel_nbins", "auxdata"):
        assert getattr(c_ours, attr) == getattr(c_theirs, attr), attr
    assert c_ours.suggested_init() == c_theirs.suggested_init()
    assert c_ours.suggested_bounds() == [list(b) for b in c_theirs.suggested_bounds()]
    assert c_ours.suggested_fixed() == c_theirs.suggested_fixed()
    for set_name in c_theirs.parameters:
        a, b = c_theirs.param_set(set_name), c_ours.param_set(set_name)
        assert c_ours.par_slice(set_name) == c_theirs.par_slice(set_name)
        assert (b.n_parameters, b.is_scalar, b.suggested_init, b.suggested_fixed) == (a.n_parameters, a.is_scalar, list(a.suggested_init), list(a.suggested_fixed))
        assert b.suggested_bounds == [list(x) for x in a.suggested_bounds]
        assert b.constrained == (getattr(a, "pdf_type", None) is not None)
        if b.constrained:
            assert b.pdf_type == a.pdf_type and b.auxdata == pytest.approx(list(a.auxdata), rel=1e-12)
            assert b.width() == pytest.approx(list(a.width()), rel=1e-12), set_name
            if a.pdf_type == "poisson":
                assert b.factors == pytest.approx(list(a.factors), rel=1e-12), set_name
            elif hasattr(a, "sigmas"):  # pyhf keeps sigmas where they are configured
                assert b.sigmas == pytest.approx(list(a.sigmas), rel=1e-12), set_name
    assert m_ours.spec == m_theirs.spec

    pars = np.asarray(c_theirs.suggested_init()) * 1.05
    np.testing.assert_allclose(m_ours.expected_actualdata(pars), m_theirs.expected_actualdata(pars), rtol=1e-10)
    np.testing.assert_allclose(m_ours.expected_auxdata(pars), m_theirs.expected_auxdata(pars), rtol=1e-10)
    data = theirs.data(m_theirs)
    np.testing.assert_allclose(m_ours.pdf(pars, data), m_theirs.pdf(pars, data), rtol=1e-9)
    assert pyhf.utils.digest(theirs) == nextstat.utils.digest(ours) == ours.digest()


def test_measurements_patches_and_workspace_operations_the_pyhf_way():
    theirs, ours = pair(ROOT / "examples" / "analysis.json")
    for kwargs in ({"measurement_name": "nope"}, {"measurement_index": 7}):
        with pytest.raises(pyhf.exceptions.InvalidMeasurement):
            theirs.get_measurement(**kwargs)
        with pytest.raises(nextstat.exceptions.InvalidMeasurement) as info:
            ours.get_measurement(**kwargs)
        assert isinstance(info.value, ValueError)
    # pyhf's keyword order of prune and rename, positionally.
    mod = theirs.modifiers[0][0]
    assert ours.prune([mod]) == dict(theirs.prune([mod]))
    assert ours.rename({mod: "renamed"}) == dict(theirs.rename({mod: "renamed"}))
    # A jsonpatch-style patch object and a measurement by index.
    patch = pyhf.patchset.Patch({"metadata": {"name": "p", "values": [1]},
                                 "patch": [{"op": "replace", "path": "/channels/0/samples/0/data/0", "value": 7.0}]})
    mp, mn = theirs.model(measurement_index=0, patches=[patch]), ours.model(measurement_index=0, patches=[patch])
    init = mp.config.suggested_init()
    np.testing.assert_allclose(mn.expected_actualdata(init), mp.expected_actualdata(init), rtol=1e-12)
    assert mn.expected_actualdata(init)[0] != ours.model().expected_actualdata(init)[0]
    # poi_name=None: a model without POI; a POI that is no parameter is refused.
    assert ours.model(poi_name=None).config.poi_index is None and ours.model(poi_name=None).config.poi_name is None
    with pytest.raises(nextstat.exceptions.InvalidModel):
        ours.model(poi_name="not_a_parameter")
    with pytest.raises(nextstat.exceptions.Unsupported, match="batch_size"):
        ours.model(batch_size=2)


@pytest.mark.parametrize("stat", ["q0", "qmu", "qmu_tilde", "tmu", "tmu_tilde"])
def test_test_statistics_are_pyhfs(stat, tight_numpy, caplog):
    theirs, ours = pair(ROOT / "examples" / "analysis.json")
    mp, mn = theirs.model(), ours.model()
    data = theirs.data(mp)
    init, bounds, fixed = mp.config.suggested_init(), mp.config.suggested_bounds(), mp.config.suggested_fixed()
    if stat in ("qmu", "tmu"):  # the statistics for a POI not bounded at zero
        bounds[mp.config.poi_index] = (-5.0, 10.0)
    mu = 0.0 if stat == "q0" else 1.0
    expected, (fixed_t, free_t) = getattr(pyhf.infer.test_statistics, stat)(mu, data, mp, init, bounds, fixed, return_fitted_pars=True)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        got, (fixed_o, free_o) = getattr(nextstat.infer.test_statistics, stat)(mu, data, mn, init, bounds, fixed, return_fitted_pars=True)
    assert isinstance(got, np.ndarray) and got.shape == ()
    assert float(got) == pytest.approx(float(expected), rel=1e-5, abs=1e-7)
    np.testing.assert_allclose(free_o, free_t, atol=2e-3)
    np.testing.assert_allclose(fixed_o, fixed_t, atol=2e-3)
    assert not caplog.records, "no warning for the statistic's own configuration"
    # The other bound configuration warns, as pyhf does.
    other = list(mp.config.suggested_bounds())
    if stat not in ("qmu", "tmu"):
        other[mp.config.poi_index] = (-5.0, 10.0)
    with caplog.at_level(logging.WARNING):
        getattr(nextstat.infer.test_statistics, stat)(0.5, data, mn, init, other, fixed)
    assert caplog.records and caplog.records[0].name == "nextstat.infer.test_statistics"
    without_poi = ours.model(poi_name=None)
    with pytest.raises(nextstat.exceptions.UnspecifiedPOI, match="No POI is defined"):
        getattr(nextstat.infer.test_statistics, stat)(mu, data, without_poi, init, bounds, fixed)
    assert nextstat.infer.utils.get_test_stat("q") is nextstat.infer.test_statistics.qmu
    with pytest.raises(nextstat.exceptions.InvalidTestStatistic):
        nextstat.infer.utils.get_test_stat("t")


@pytest.mark.parametrize("test_stat", ["qtilde", "q", "q0"])
def test_asymptotic_calculator_is_pyhfs(test_stat, tight_numpy):
    theirs, ours = pair(ROOT / "examples" / "analysis.json")
    mp, mn = theirs.model(), ours.model()
    data = theirs.data(mp)
    mu = 0.0 if test_stat == "q0" else 1.0
    kwargs = {} if test_stat != "q" else {"par_bounds": [(-5.0, 10.0) if i == mp.config.poi_index else b for i, b in enumerate(mp.config.suggested_bounds())]}
    for base in ("normal", "clipped_normal"):
        cp = pyhf.infer.calculators.AsymptoticCalculator(data, mp, test_stat=test_stat, calc_base_dist=base, **kwargs)
        cn = nextstat.infer.calculators.AsymptoticCalculator(data, mn, test_stat=test_stat, calc_base_dist=base, **kwargs)
        with pytest.raises(RuntimeError):
            cn.distributions(mu)
        tp, tn = cp.teststatistic(mu), cn.teststatistic(mu)
        assert float(tn) == pytest.approx(float(tp), rel=1e-4, abs=1e-6)
        assert float(cn.sqrtqmuA_v) == pytest.approx(float(cp.sqrtqmuA_v), rel=1e-4)
        for field in ("asimov_pars", "free_fit_to_data", "free_fit_to_asimov", "fixed_poi_fit_to_data", "fixed_poi_fit_to_asimov"):
            np.testing.assert_allclose(getattr(cn.fitted_pars, field), getattr(cp.fitted_pars, field), atol=2e-3, err_msg=field)
        sbp, bp = cp.distributions(mu)
        sbn, bn = cn.distributions(mu)
        for got, expected in zip(cn.pvalues(tn, sbn, bn), cp.pvalues(tp, sbp, bp)):
            assert float(got) == pytest.approx(float(expected), rel=1e-4)
        for got_row, expected_row in zip(cn.expected_pvalues(sbn, bn), cp.expected_pvalues(sbp, bp)):
            np.testing.assert_allclose([float(v) for v in got_row], [float(v) for v in expected_row], rtol=1e-4, equal_nan=True)
        # hypotest with the calculator and the base distribution, pyhf's types.
        r_p = pyhf.infer.hypotest(mu, data, mp, test_stat=test_stat, calc_base_dist=base, return_expected_set=True, return_calculator=True, **kwargs)
        r_n = nextstat.infer.hypotest(mu, data, mn, test_stat=test_stat, calc_base_dist=base, return_expected_set=True, return_calculator=True, **kwargs)
        assert float(r_n[0]) == pytest.approx(float(r_p[0]), rel=1e-4)
        assert isinstance(r_n[1], list) and len(r_n[1]) == 5 and all(np.ndim(v) == 0 for v in r_n[1])
        np.testing.assert_allclose([float(v) for v in r_n[1]], [float(v) for v in r_p[1]], rtol=1e-4)
        assert float(r_n[2].sqrtqmuA_v) == pytest.approx(float(r_p[2].sqrtqmuA_v), rel=1e-4)


def test_toy_calculator_on_the_engines_toys(monkeypatch):
    # pyhf 0.7.6's numpy backend calls np.percentile(interpolation=), which numpy ≥ 2.4 removed.
    pyhf.set_backend("numpy")
    monkeypatch.setattr(type(pyhf.tensorlib), "percentile",
                        lambda self, t, q, axis=None, interpolation="linear": np.percentile(t, q, axis=axis, method=interpolation))
    model = nextstat.simplemodels.uncorrelated_background([6.0], [50.0], [5.0])
    data = [58.0] + model.config.auxdata
    calc = nextstat.infer.calculators.ToyCalculator(data, model, ntoys=400, track_progress=False, seed=5)
    sb, b = calc.distributions(1.0)
    assert sb.samples.shape == b.samples.shape == (400,)
    teststat = calc.teststatistic(1.0)
    clsb, clb, cls = calc.pvalues(teststat, sb, b)
    assert float(clsb) == np.mean(sb.samples >= teststat) and float(cls) == float(clsb) / float(clb)
    # The engine's own toy test of the same seed: the same ensembles, the same CLs.
    engine = nextstat.hypotest_toys(1.0, model, 400, 5, data, teststats=True, progress=False)
    np.testing.assert_array_equal(sb.samples, engine.teststats["signal_plus_background"])
    assert float(cls) == pytest.approx(engine.cls_obs, rel=1e-6)
    expected = calc.expected_pvalues(sb, b)
    assert len(expected) == 3 and all(len(row) == 5 for row in expected)
    assert list(np.asarray(expected[2], dtype=float)) == sorted(np.asarray(expected[2], dtype=float))
    got = nextstat.infer.hypotest(1.0, data, model, calctype="toybased", ntoys=400, seed=5, track_progress=False, return_calculator=True)
    assert isinstance(got[1], nextstat.infer.calculators.ToyCalculator)
    # pyhf's ToyCalculator with numpy's RNG: the same CLs within the toys' statistical spread.
    np.random.seed(0)
    theirs = pyhf.infer.hypotest(1.0, data, pyhf.simplemodels.uncorrelated_background([6.0], [50.0], [5.0]),
                                 calctype="toybased", ntoys=400, track_progress=False)
    assert abs(float(theirs) - float(cls)) < 4 * np.sqrt(float(cls) * (1 - float(cls)) / 400) + 0.02


def test_simplemodels_and_the_root_finding_limit(tight_numpy):
    for build, args in ((lambda m: m.uncorrelated_background, ([5.0, 10.0], [50.0, 60.0], [5.0, 12.0])),
                        (lambda m: m.correlated_background, ([5.0, 10.0], [50.0, 60.0], [55.0, 63.0], [45.0, 57.0]))):
        mp, mn = build(pyhf.simplemodels)(*args), build(nextstat.simplemodels)(*args)
        for attr in ("channels", "samples", "par_order", "par_names", "auxdata", "parameters"):
            assert getattr(mn.config, attr) == getattr(mp.config, attr), attr
        assert mn.config.suggested_init() == mp.config.suggested_init()
        data = [56.0, 66.0] + mp.config.auxdata
        assert float(nextstat.infer.hypotest(1.0, data, mn)) == pytest.approx(float(pyhf.infer.hypotest(1.0, data, mp)), rel=1e-5)
        theirs = pyhf.infer.intervals.upper_limits.toms748_scan(data, mp, 0.1, 5.0, rtol=1e-6)
        ours = nextstat.infer.intervals.upper_limits.toms748_scan(data, mn, 0.1, 5.0, rtol=1e-6)
        assert float(ours[0]) == pytest.approx(float(theirs[0]), rel=1e-4)
        np.testing.assert_allclose([float(v) for v in ours[1]], [float(v) for v in theirs[1]], rtol=1e-4)
        obs, exp, (mus, results) = nextstat.infer.intervals.upper_limits.upper_limit(data, mn, rtol=1e-6, return_results=True)
        assert float(obs) == pytest.approx(float(theirs[0]), rel=1e-4) and len(mus) == len(results) > 6
        obs_q, _ = nextstat.infer.intervals.upper_limits.upper_limit(data, mn, test_stat="q")
        assert float(obs_q) == pytest.approx(float(pyhf.infer.intervals.upper_limits.upper_limit(data, mp, test_stat="q")[0]), rel=1e-4)
    with pytest.raises(nextstat.InvalidInputError, match="no observations"):
        nextstat.fit(mn)


def test_digest_backend_and_exceptions():
    for obj in ({"b": [1, 2.5], "a": "é"}, [1, 2, 3], {"nested": {"x": None}}):
        for algorithm in ("sha256", "md5"):
            assert nextstat.utils.digest(obj, algorithm) == pyhf.utils.digest(obj, algorithm)
    with pytest.raises(ValueError, match="JSON-serialisable"):
        nextstat.utils.digest({"x": object()})
    with pytest.raises(ValueError, match="hashlib"):
        nextstat.utils.digest({}, "nope")

    nextstat.set_backend("numpy")
    tensorlib, optimizer = nextstat.get_backend()
    assert tensorlib is nextstat.tensorlib and tensorlib.name == "numpy" and tensorlib.precision == "64b"
    nextstat.set_backend(nextstat.tensor.numpy_backend(), custom_optimizer="minuit")
    t = nextstat.tensorlib
    np.testing.assert_array_equal(t.astensor([1, 2]), np.array([1.0, 2.0]))
    assert t.tolist(t.astensor([1, 2])) == [1.0, 2.0] and t.shape(t.ones((2, 3))) == (2, 3)
    pt = pyhf.tensorlib
    for name, args in (("poisson_logpdf", ([3.0, 0.0, 5.5], [2.5, 1.0, 4.0])), ("normal_logpdf", ([0.3, -1.0], [0.0, 0.5], [1.0, 2.0])),
                       ("normal_cdf", ([0.5, -3.0],)), ("poisson", ([2.0], [3.0])), ("normal", ([1.0], [0.0], [2.0]))):
        arrays = [np.asarray(a) for a in args]
        np.testing.assert_allclose(getattr(t, name)(*arrays), getattr(pt, name)(*arrays), rtol=1e-12, err_msg=name)
    for backend in ("jax", "pytorch", b"tensorflow"):
        with pytest.raises(nextstat.exceptions.InvalidBackend, match="device='cuda'"):
            nextstat.set_backend(backend)
    with pytest.raises(nextstat.exceptions.Unsupported, match="64-bit"):
        nextstat.set_backend("numpy", precision="32b")
    for name in nextstat.exceptions.__all__:
        assert hasattr(pyhf.exceptions, name), name
        assert issubclass(getattr(nextstat.exceptions, name), nextstat.NextStatError)


def test_patchsets_the_pyhf_way():
    bkg_path, ps_path = WORKSPACES / "pyhf_testpatchset_bkgonly.json", WORKSPACES / "pyhf_testpatchset_patchset.json"
    bkg, spec = json.loads(bkg_path.read_text()), json.loads(ps_path.read_text())
    theirs, ours = pyhf.PatchSet(spec), nextstat.PatchSet(spec)
    assert (ours.labels, ours.digests, ours.version, len(ours)) == (theirs.labels, theirs.digests, theirs.version, len(theirs))
    assert [(p.name, p.values) for p in ours] == [(p.name, tuple(p.values)) for p in theirs.patches]
    first = theirs.patches[0]
    assert ours[first.name] == ours[first.values] == ours[list(first.values)]
    for key in (first.name, first.values):
        assert ours.apply(bkg, key) == dict(theirs.apply(bkg, key))
        assert ours.apply(nextstat.Workspace(bkg), key).digest() == pyhf.utils.digest(theirs.apply(bkg, key))
    with pytest.raises(nextstat.exceptions.InvalidPatchLookup):
        ours["no_such_patch"]
    other = dict(bkg, observations=[dict(o, data=[d + 1 for d in o["data"]]) for o in bkg["observations"]])
    with pytest.raises(pyhf.exceptions.PatchSetVerificationError):
        theirs.verify(other)
    with pytest.raises(nextstat.exceptions.PatchSetVerificationError, match="digest verification failed"):
        ours.apply(other, first.name)
    duplicated = dict(spec, patches=spec["patches"] + spec["patches"][:1])
    with pytest.raises(nextstat.exceptions.InvalidPatchSet, match="Multiple patches"):
        nextstat.PatchSet(duplicated)
    with pytest.raises(nextstat.exceptions.InvalidSpecification):
        nextstat.PatchSet({"metadata": {}})


def test_the_code_of_docs_pyhf_compat_runs(capsys, tmp_path):
    """The pyhf script and the cabinetry workflows of docs/pyhf-compat.md (the one under
    `install_as_pyhf()` in a fresh interpreter: pyhf is imported here)."""
    import os
    import re
    import subprocess
    import sys

    import matplotlib

    matplotlib.use("Agg")
    text = (ROOT / "docs" / "pyhf-compat.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    script = blocks[0]
    workflow = next(b for b in blocks if "ns_cabinetry" in b)
    aliased = next(b for b in blocks if "install_as_pyhf()" in b)
    done = subprocess.run([sys.executable, "-c", aliased], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "MPLBACKEND": "Agg"})
    assert done.returncode == 0, done.stderr[-2000:]
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        exec(compile(script, "docs/pyhf-compat.md", "exec"), {})
        exec(compile(workflow, "docs/pyhf-compat.md", "exec"), {"folder": tmp_path})
    finally:
        os.chdir(cwd)
    assert len(list(tmp_path.glob("*.pdf"))) == 3
    out = capsys.readouterr().out
    cls = float(re.search(r"CLs = ([0-9.]+)", out).group(1))
    ws = pyhf.Workspace(json.loads((ROOT / "examples" / "analysis.json").read_text()))
    model = ws.model()
    assert cls == pytest.approx(float(pyhf.infer.hypotest(1.0, ws.data(model), model)), abs=2e-4)


PYHF_README_SCRIPT = '''
import numpy as np
import pyhf

pyhf.set_backend("numpy")
model = pyhf.simplemodels.uncorrelated_background(
    signal=[12.0, 11.0], bkg=[50.0, 52.0], bkg_uncertainty=[3.0, 7.0]
)
data = [51, 48] + model.config.auxdata

test_mu = 1.0
CLs_obs, CLs_exp = pyhf.infer.hypotest(
    test_mu, data, model, test_stat="qtilde", return_expected=True
)
print(f"Observed: {CLs_obs:.8f}, Expected: {CLs_exp:.8f}")

poi_values = np.linspace(0.1, 5, 50)
obs_limit, exp_limits, (scan, results) = pyhf.infer.intervals.upper_limits.upper_limit(
    data, model, poi_values, level=0.05, return_results=True
)
print(f"Upper limit (obs): mu = {obs_limit:.4f}")
print(f"Upper limit (exp): mu = {exp_limits[2]:.4f}")
'''


def test_a_script_from_pyhfs_docs_runs_with_only_the_import_changed(capsys):
    """pyhf's README example (hypotest, then the upper limit on a scan), run by real pyhf and by
    nextstat as `pyhf`: the same printed numbers to the precision of the fits."""
    import re
    import sys

    outputs = []
    for module in (pyhf, nextstat):
        saved = sys.modules["pyhf"]
        sys.modules["pyhf"] = module
        try:
            exec(compile(PYHF_README_SCRIPT, "pyhf README", "exec"), {})
        finally:
            sys.modules["pyhf"] = saved
        outputs.append([float(x) for x in re.findall(r"[-+]?\d+\.\d+", capsys.readouterr().out)])
    theirs, ours = outputs
    assert len(ours) == len(theirs) == 4
    assert ours == pytest.approx(theirs, rel=2e-4)


def test_review_cases_edits_measurements_and_keys():
    """An edited document, a parameter set fixed through the config, a POI that is no
    parameter, a Patch as a key: each as pyhf treats it."""
    spec = json.loads((ROOT / "examples" / "analysis.json").read_text())
    first = spec["measurements"][0]
    other = json.loads(json.dumps(first))
    other["name"] = "other"
    other["config"]["parameters"] = [p for p in other["config"]["parameters"] if p["name"] != first["config"]["poi"]]
    other["config"]["parameters"].append({"name": first["config"]["poi"], "bounds": [[0, 3]]})
    spec["measurements"] = [first, other]
    ws = nextstat.Workspace(spec)
    ws["measurements"].reverse()  # edited after creation: names and lookups follow the document
    assert ws.get_measurement(first["name"])["name"] == first["name"]
    model = ws.model(measurement_name=first["name"])
    assert model.spec["parameters"] == first["config"]["parameters"]
    assert model.config.suggested_bounds()[model.config.poi_index] != [0.0, 3.0]
    with pytest.raises(nextstat.exceptions.InvalidMeasurement):
        ws.model(measurement_name="nope")

    mp = pyhf.simplemodels.uncorrelated_background([5.0, 10.0], [50.0, 60.0], [5.0, 12.0])
    mn = nextstat.simplemodels.uncorrelated_background([5.0, 10.0], [50.0, 60.0], [5.0, 12.0])
    for m in (mp, mn):
        m.config.param_set("uncorr_bkguncrt").suggested_fixed = [True, True]
    data = [56.0, 66.0] + mp.config.auxdata
    theirs = float(pyhf.infer.intervals.upper_limits.toms748_scan(data, mp, 0.1, 5.0, rtol=1e-6)[0])
    assert float(nextstat.infer.intervals.upper_limits.upper_limit(data, mn)[0]) == pytest.approx(theirs, rel=1e-3)
    fitted = nextstat.fit(mn, data)
    assert fitted["uncorr_bkguncrt[0]"] == 1.0 and fitted.uncertainties[1] == 0.0

    with pytest.raises(nextstat.exceptions.InvalidModel, match="'mU'"):
        nextstat.Model(mn.spec, poi_name="mU")
    with pytest.raises(TypeError, match="model spec"):
        nextstat.Model("not a spec")
    ps = nextstat.PatchSet(ROOT / "examples" / "patchset.json")
    bkg = nextstat.Workspace(ROOT / "examples" / "bkgonly.json")
    assert ps.apply(bkg, ps.patches[0]) == ps.apply(bkg, ps.patches[0].name)
    bkg["channels"] = 3
    assert "not a valid workspace" in repr(bkg)


@pytest.mark.parametrize("path", FILES[1:], ids=lambda p: p.stem)
def test_mle_twice_nll_is_pyhfs(path):
    theirs_ws, ours_ws = pair(path)
    theirs, ours = theirs_ws.model(), ours_ws.model()
    init = theirs.config.suggested_init()
    for pars in (init, [v * 1.1 if v else 0.3 for v in init]):
        expected = pyhf.infer.mle.twice_nll(np.asarray(pars), theirs_ws.data(theirs), theirs)
        got = nextstat.infer.mle.twice_nll(pars, ours_ws.data(ours), ours)
        assert got.shape == expected.shape == (1,)
        assert got[0] == pytest.approx(float(expected[0]), rel=1e-10)


def test_config_set_poi_is_pyhfs(tmp_path):
    """`model.config.set_poi(name)`: the fit at a fixed POI is pyhf's, and a saved call names the
    new POI; a name that is no parameter, or names several, is refused as pyhf refuses it."""
    theirs_ws, ours_ws = pair(FILES[0])
    theirs, ours = theirs_ws.model(), ours_ws.model()
    name = next(n for n in ours.config.par_order if ours.config.param_set(n).n_parameters == 1 and n != ours.config.poi_name)
    theirs.config.set_poi(name)
    ours.config.set_poi(name)
    assert ours.config.poi_name == name and ours.config.poi_index == theirs.config.poi_index
    at = 0.5
    expected = pyhf.infer.mle.fixed_poi_fit(at, theirs_ws.data(theirs), theirs, return_fitted_val=True)[1]
    got = nextstat.infer.mle.fixed_poi_fit(at, ours_ws.data(ours), ours, return_fitted_val=True)[1]
    assert float(got) == pytest.approx(float(expected), abs=1e-5)
    call = tmp_path / "call.json"
    nextstat.fit(ours, save_call=call)
    assert name in call.read_text() and json.loads(call.read_text())["model"]["workspace"]["measurements"][0]["config"]["poi"] == name
    vector = next(n for n in ours.config.par_order if ours.config.param_set(n).n_parameters > 1)
    with pytest.raises(nextstat.NextStatError, match="components"):
        ours.config.set_poi(vector)
    with pytest.raises(nextstat.NextStatError, match="not a parameter"):
        ours.config.set_poi("nope")


def test_tensorlib_distributions_and_erfinv_are_pyhfs():
    """`tensorlib.poisson_dist`/`normal_dist` (log_prob; samples from numpy's global generator,
    so `np.random.seed` reproduces pyhf's draws) and `tensorlib.erfinv`."""
    pyhf.set_backend("numpy")
    theirs, ours = pyhf.tensorlib, nextstat.tensorlib
    rates, values = [5.0, 8.0, 0.5], [4.0, 9.0, 0.0]
    assert np.allclose(ours.poisson_dist(rates).log_prob(values), theirs.poisson_dist(theirs.astensor(rates)).log_prob(theirs.astensor(values)), rtol=1e-14)
    mus, sigmas = [5.0, 8.0], [1.0, 0.5]
    assert np.allclose(ours.normal_dist(mus, sigmas).log_prob([4.0, 9.0]), theirs.normal_dist(theirs.astensor(mus), theirs.astensor(sigmas)).log_prob(theirs.astensor([4.0, 9.0])), rtol=1e-14)
    for make in (lambda t: t.poisson_dist(t.astensor(rates)), lambda t: t.normal_dist(t.astensor(mus), t.astensor(sigmas))):
        np.random.seed(11)
        expected = make(theirs).sample((3,))
        np.random.seed(11)
        got = make(ours).sample((3,))
        assert got.shape == expected.shape and np.array_equal(got, expected)
    y = np.concatenate([np.linspace(-0.999999, 0.999999, 2001), [1 - 2**-53, -1 + 2**-53, 0.0]])
    assert np.allclose(ours.erfinv(y), theirs.erfinv(y), rtol=4e-15, atol=0)
    assert ours.erfinv([1.0, -1.0]).tolist() == [np.inf, -np.inf]
