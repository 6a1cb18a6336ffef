"""Profile scans over a grid of two parameters (`nextstat scan WS --parameters a,b --grid …`,
`nextstat.profile_scan_grid`): the grid's 2ΔNLL against pyhf's fits with the two parameters
fixed, the contours against a likelihood whose level sets are known exactly, the front ends and
careless requests (shards: test_shards.py)."""

import json

import numpy as np
import pyhf
import pytest
from scipy.optimize import brentq

from conftest import cli_json, run_cli, workspace_file


def write(tmp_path, spec, name="ws.json"):
    path = tmp_path / name
    path.write_text(json.dumps(spec))
    return path


def test_grid_values_are_pyhfs_fits_with_both_parameters_fixed():
    """On the 8-parameter complex workspace, μ × ttbar_norm (5 × 4 points): each point's twice_nll
    within 1e-6 of pyhf's (MINUIT, strategy 2, tolerance 1e-10) with the two fixed there, and the
    best fit's too."""
    path = workspace_file("nextstat_complex_workspace")
    ours = cli_json("scan", path, "--parameters", "mu,ttbar_norm", "--grid", "0", "2", "5", "-1.5", "1.5", "4")
    assert ours["parameters"] == ["mu", "ttbar_norm"] and all(ours["converged"])
    pyhf.set_backend("numpy", pyhf.optimize.minuit_optimizer(strategy=2, tolerance=1e-10))
    try:
        ws = pyhf.Workspace(json.loads(path.read_text()))
        model = ws.model()
        data = ws.data(model)
        names = model.config.par_names
        i, j = names.index("mu"), names.index("ttbar_norm")
        _, best = pyhf.infer.mle.fit(data, model, return_fitted_val=True)
        assert ours["bestfit_twice_nll"] == pytest.approx(float(best), abs=1e-6)
        k = 0
        for a in ours["grid"][0]:
            for b in ours["grid"][1]:
                init = model.config.suggested_init()
                init[i], init[j] = a, b
                fixed = model.config.suggested_fixed()
                fixed[i] = fixed[j] = True
                _, theirs = pyhf.infer.mle.fit(data, model, init_pars=init, fixed_params=fixed, return_fitted_val=True)
                assert ours["twice_nll"][k] == pytest.approx(float(theirs), abs=1e-6), (a, b)
                assert ours["delta_twice_nll"][k] == pytest.approx(float(theirs) - float(best), abs=2e-6)
                k += 1
    finally:
        pyhf.set_backend("numpy", pyhf.optimize.scipy_optimizer())


# Two channels, each with its own normalisation (a on SR1, b on SR2) and nothing else: 2ΔNLL is
# f1(a) + f2(b) with f the Poisson deviance of one count, so its level sets are known exactly.
TWO_COUNTS = {
    "channels": [
        {"name": "SR1", "samples": [{"name": "s1", "data": [20.0], "modifiers": [{"name": "a", "type": "normfactor", "data": None}]}]},
        {"name": "SR2", "samples": [{"name": "s2", "data": [50.0], "modifiers": [{"name": "b", "type": "normfactor", "data": None}]}]},
    ],
    "observations": [{"name": "SR1", "data": [24.0]}, {"name": "SR2", "data": [45.0]}],
    "measurements": [{"name": "m", "config": {"poi": "a", "parameters": [{"name": "b", "bounds": [[0, 10]]}]}}],
    "version": "1.0.0",
}


def deviance(x, s, n):
    lam = x * s
    return 2 * (lam - n - n * np.log(lam / n))


def exact(a, b):
    return deviance(a, 20.0, 24.0) + deviance(b, 50.0, 45.0)


def test_contours_lie_on_the_exact_level_sets(tmp_path):
    """Every vertex of the 68.27% and 95.45% contours (41 × 41 grid) within the linear
    interpolation's error of the exact level 2.30 / 6.18, each contour one closed line around the
    minimum (1.2, 0.9), and its extent in a the exact one's to a grid step's tenth."""
    path = write(tmp_path, TWO_COUNTS)
    ours = cli_json("scan", path, "--parameters", "a,b", "--grid", "0.4", "2.2", "41", "0.5", "1.3", "41")
    assert [c["cl"] for c in ours["contours"]] == [0.6827, 0.9545]
    for contour in ours["contours"]:
        level = contour["delta_twice_nll"]
        assert level == pytest.approx(-2 * np.log(1 - contour["cl"]), rel=1e-12)
        assert len(contour["lines"]) == 1
        line = np.asarray(contour["lines"][0])
        assert np.allclose(line[0], line[-1]), "a contour inside the grid closes"
        values = exact(line[:, 0], line[:, 1])
        assert np.max(np.abs(values - level)) < 0.02 * level, np.max(np.abs(values - level))
        # The contour's extent in a: where f1(a) alone reaches the level (b at its minimum).
        low = brentq(lambda x: deviance(x, 20.0, 24.0) - level, 0.4, 1.2)
        high = brentq(lambda x: deviance(x, 20.0, 24.0) - level, 1.2, 2.2)
        step = 1.8 / 40
        assert line[:, 0].min() == pytest.approx(low, abs=0.1 * step)
        assert line[:, 0].max() == pytest.approx(high, abs=0.1 * step)


def test_python_and_text_agree(tmp_path):
    import nextstat

    path = write(tmp_path, TWO_COUNTS)
    args = ["scan", path, "--parameters", "a,b", "--grid", "0.5", "2", "7", "0.6", "1.2", "5", "--cl", "0.9"]
    whole = cli_json(*args)
    model = nextstat.Workspace(str(path)).model()
    result = nextstat.profile_scan_grid(model, ["a", "b"], [np.linspace(0.5, 2, 7), np.linspace(0.6, 1.2, 5)], cl=[0.9], progress=False)
    assert result.delta_twice_nll.shape == (7, 5)
    np.testing.assert_array_equal(result.delta_twice_nll.ravel(), whole["delta_twice_nll"])
    assert result.cl == [0.9] and len(result.contours) == 1
    np.testing.assert_array_equal(result.contours[0]["lines"][0], whole["contours"][0]["lines"][0])
    text = run_cli(*args, "--format", "text")[1].splitlines()
    assert text[0].split()[:2] == ["a", "b"] and len(text) == 1 + 7 * 5


@pytest.mark.parametrize("extra, message", [
    (["--parameters", "a,b", "--grid", "0", "2", "1000", "0", "2", "1000"], "at most 250000"),
    (["--parameters", "a,b", "--grid", "0.5", "2", "5", "0.5", "2", "5", "--cl", "0"], "strictly between 0 and 1"),
    (["--parameters", "a,b", "--grid", "0.5", "2", "5", "0.5", "2", "5", "--cl", "1"], "strictly between 0 and 1"),
    (["--parameters", "a,b", "--grid", "0.5", "2", "5"], "3 numbers for 2 parameters"),
    (["--parameters", "a,a", "--grid", "0.5", "2", "5", "0.5", "2", "5"], "named twice"),
    (["--parameters", "a,c", "--grid", "0.5", "2", "5", "0.5", "2", "5"], "'c'"),
    (["--parameters", "a,b", "--grid", "0.5", "2", "5", "-1", "2", "5"], "outside the bounds of 'b'"),
    (["--parameters", "a,b", "--grid", "0.5", "2", "5", "0.5", "2", "5", "--parameter", "a"], "cannot be used with"),
    (["--parameters", "a,b", "--grid", "0.5", "2", "5", "0.5", "2", "5", "--range", "0", "1", "3"], "cannot be used with"),
])
def test_careless_grid_scans_are_refused_by_name(tmp_path, extra, message):
    path = write(tmp_path, TWO_COUNTS)
    code, _, err = run_cli("scan", path, *extra, expect_ok=False)
    assert code == 2 and message in err, err


def test_a_fixed_parameter_is_not_scanned(tmp_path):
    spec = json.loads(json.dumps(TWO_COUNTS))
    spec["measurements"][0]["config"]["parameters"][0]["fixed"] = True
    path = write(tmp_path, spec)
    code, _, err = run_cli("scan", path, "--parameters", "a,b", "--grid", "0.5", "2", "5", "0.5", "2", "5", expect_ok=False)
    assert code == 2 and "'b' is fixed" in err, err


def test_contour_figures_draw_the_scans_lines(tmp_path):
    """`nextstat plot contour` and `nextstat.plot.contour` draw the JSON's lines, the same
    numbers; a one-parameter scan is refused by name."""
    import matplotlib

    matplotlib.use("Agg")
    import nextstat.plot

    path = write(tmp_path, TWO_COUNTS)
    scan = tmp_path / "grid.json"
    run_cli("scan", path, "--parameters", "a,b", "--grid", "0.4", "2.2", "19", "0.5", "1.3", "17", "-o", scan)
    drawn = json.loads(run_cli("plot", "contour", scan, "-o", tmp_path / "c.png")[1])
    result = json.loads(scan.read_text())
    assert [lv["lines"] for lv in drawn["figure"]["levels"]] == [c["lines"] for c in result["contours"]]
    assert drawn["figure"]["best"] == pytest.approx([1.2, 0.9], abs=0.06)
    assert nextstat.plot.figure_data("contour", str(scan)) == drawn["figure"]
    fig = nextstat.plot.contour(str(scan))
    lines = [l for l in fig.axes[0].get_lines() if l.get_label() != "lowest grid point"]
    assert len(lines) == sum(len(c["lines"]) for c in result["contours"])
    np.testing.assert_array_equal(lines[0].get_xdata(), [p[0] for p in result["contours"][0]["lines"][0]])
    one = tmp_path / "scan.json"
    run_cli("scan", path, "--parameter", "b", "--range", "0.5", "1.5", "5", "-o", one)
    code, _, err = run_cli("plot", "contour", one, "-o", tmp_path / "x.png", expect_ok=False)
    assert code == 2 and "scan --parameters a,b --grid" in err, err


def test_refining_near_the_contours_brings_them_onto_the_level_sets(tmp_path):
    """`--refine 3` on a coarse 9 × 9 grid: each round halves the cells a contour crosses and fits
    only the added points (those of the coarse grid keep their fits exactly); the 68.27% contour's
    worst vertex lies at least four times closer to the exact level set than the coarse grid's, with
    fewer points than the uniform grid of the finest spacing."""
    path = write(tmp_path, TWO_COUNTS)
    args = ["scan", path, "--parameters", "a,b", "--grid", "0.4", "2.2", "9", "0.5", "1.3", "9", "--cl", "0.6827"]
    coarse = cli_json(*args)
    fine = cli_json(*args, "--refine", "3")
    xs, ys = fine["grid"]
    assert len(xs) > 9 and len(ys) > 9 and len(xs) * len(ys) < 65 * 65
    # The coarse points keep their numbers.
    k = 0
    for a in coarse["grid"][0]:
        for b in coarse["grid"][1]:
            assert fine["delta_twice_nll"][xs.index(a) * len(ys) + ys.index(b)] == coarse["delta_twice_nll"][k]
            k += 1

    def worst(result):
        contour = result["contours"][0]
        line = np.asarray(contour["lines"][0])
        return np.max(np.abs(exact(line[:, 0], line[:, 1]) - contour["delta_twice_nll"]))

    assert worst(fine) < worst(coarse) / 4, (worst(fine), worst(coarse))
    code, _, err = run_cli(*args, "--refine", "3", "--shard", "0/2", expect_ok=False)
    assert code == 2 and "refined" in err, err
    code, _, err = run_cli(*args, "--refine", "6", expect_ok=False)
    assert code == 2 and "at most 5 rounds" in err, err
