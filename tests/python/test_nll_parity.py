"""Live parity with pyhf 0.7.6: twice_nll, expected data and gradients on every shared workspace,
for every interpolation pair pyhf accepts, at pyhf's init and at random points."""

import json
import zlib

import numpy as np
import pyhf
import pytest

from conftest import REFERENCE_NAMES, TOL, cli_json, workspace_file

CODE_PAIRS = [(n, h) for n in ("code1", "code4") for h in ("code0", "code2", "code4p")]
N_RANDOM_POINTS = 5


def pyhf_model(name, normsys, histosys):
    ws = pyhf.Workspace(json.loads(workspace_file(name).read_text()))
    # pyhf's modifier_settings replaces the defaults wholesale: always pass both types.
    settings = {"normsys": {"interpcode": normsys}, "histosys": {"interpcode": histosys}}
    model = ws.model(modifier_settings=settings, poi_name=None)
    return ws, model, np.asarray(ws.data(model))


def random_points(model, n, seed):
    """α ~ N(0,1) away from the kinks at 0 and ±1, γ in 1 ± 2σ, normfactors in [0, 2]."""
    rng = np.random.default_rng(seed)
    cfg = model.config
    points = []
    for _ in range(n):
        pars = np.array(cfg.suggested_init(), dtype=float)
        for name in cfg.par_order:
            ps = cfg.param_set(name)
            sl = cfg.par_slice(name)
            size = ps.n_parameters
            if not ps.constrained:
                vals = rng.uniform(0.0, 2.0, size)
            elif ps.pdf_type == "poisson":
                width = np.sqrt(1.0 / np.asarray(ps.factors))
                vals = np.clip(1.0 + rng.uniform(-2, 2, size) * width, 1e-3, None)
            elif list(ps.auxdata) == [0.0] * size:
                vals = rng.normal(0.0, 1.0, size)
                bad = (np.abs(vals) < 0.01) | (np.abs(np.abs(vals) - 1.0) < 0.01)
                vals[bad] += 0.05
            else:
                widths = np.asarray(ps.width())
                vals = np.clip(np.asarray(ps.auxdata) + rng.uniform(-2, 2, size) * widths, 1e-3, None)
            fixed = np.asarray(ps.suggested_fixed)
            pars[sl] = np.where(fixed, pars[sl], vals)
        points.append(pars)
    return points


def assert_nll_close(ours, theirs, what):
    if np.isnan(theirs):
        assert ours == "NaN", f"{what}: pyhf gives NaN, nextstat {ours}"
        return
    if np.isinf(theirs):
        assert ours in ("inf", "-inf"), f"{what}: pyhf gives {theirs}, nextstat {ours}"
        return
    assert ours == pytest.approx(theirs, rel=TOL["nll_rtol_vs_pyhf"], abs=0), what


@pytest.mark.parametrize("normsys,histosys", CODE_PAIRS)
@pytest.mark.parametrize("name", REFERENCE_NAMES)
def test_twice_nll_and_expected_data(name, normsys, histosys, tmp_path):
    _, model, data = pyhf_model(name, normsys, histosys)
    points = [np.array(model.config.suggested_init(), dtype=float)]
    points += random_points(model, N_RANDOM_POINTS, seed=zlib.crc32(f"{name}/{normsys}/{histosys}".encode()))
    pars_file = tmp_path / "points.json"
    pars_file.write_text(json.dumps([p.tolist() for p in points]))
    ours = cli_json("eval", workspace_file(name), "--pars", pars_file, "--interp-codes", f"normsys={normsys},histosys={histosys}")
    assert ours["parameter_names"] == model.config.par_names
    for i, (p, result) in enumerate(zip(points, ours["points"])):
        what = f"{name} {normsys}/{histosys} point {i}"
        with np.errstate(all="ignore"):
            theirs = float(-2.0 * model.logpdf(p, data)[0])
            expected = np.asarray(model.expected_data(p, include_auxdata=True), dtype=float)
        assert_nll_close(result["twice_nll"], theirs, what)
        main = np.array([float(x) for x in result["expected_data"]["main"]] + result["expected_data"]["aux"])
        scale = np.maximum(np.abs(expected), 1.0)
        assert np.all(np.abs(main - expected) <= TOL["expected_data_rtol_vs_pyhf"] * scale), what


# JAX's gradient is exact away from kinks for the smooth codes (code4, code4p and code2 inside ±1).
SMOOTH_PAIRS = [("code4", "code4p"), ("code4", "code2")]


@pytest.mark.parametrize("normsys,histosys", SMOOTH_PAIRS)
@pytest.mark.parametrize("name", REFERENCE_NAMES)
def test_gradient_matches_jax(name, normsys, histosys, tmp_path):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    pyhf.set_backend("jax")
    try:
        _, model, data = pyhf_model(name, normsys, histosys)
        points = random_points(model, 2, seed=7)
        pars_file = tmp_path / "points.json"
        pars_file.write_text(json.dumps([p.tolist() for p in points]))
        ours = cli_json("eval", workspace_file(name), "--pars", pars_file, "--interp-codes", f"normsys={normsys},histosys={histosys}")
        # Compiled once: tracing pyhf's model eagerly costs seconds per call.
        grad_fn = jax.jit(jax.grad(lambda p: -model.logpdf(p, data)[0]))
        for i, (p, result) in enumerate(zip(points, ours["points"])):
            if result["nll"] in ("NaN", "inf"):
                continue
            theirs = np.asarray(grad_fn(jax.numpy.asarray(p)))
            mine = np.asarray(result["gradient"], dtype=float)
            scale = np.maximum(np.abs(theirs), 1.0)
            assert np.all(np.abs(mine - theirs) <= TOL["gradient_jax_rel"] * scale), (
                f"{name} {normsys}/{histosys} point {i}: worst {np.max(np.abs(mine - theirs) / scale):.3g} "
                f"at {model.config.par_names[int(np.argmax(np.abs(mine - theirs) / scale))]}"
            )
    finally:
        pyhf.set_backend("numpy")
