"""The Python front door of unbinned models: nextstat.unbinned.load, every inference function
on an UnbinnedModel, NumPy events as data, saved calls, and the errors a careless script meets.
The numbers are the CLI's (the same engine call)."""

import json

import numpy as np
import pytest

import nextstat
from conftest import ROOT, cli_json
from nextstat import unbinned

EXAMPLE = ROOT / "examples" / "unbinned" / "resonance.json"


@pytest.fixture(scope="module")
def model():
    return unbinned.load(EXAMPLE)


def test_load_describes_the_model(model):
    assert model.config.par_names == cli_json("eval", EXAMPLE)["parameter_names"]
    assert model.config.poi_name == "mu"
    assert model.observables == [[("mass", 100.0, 150.0)]]
    (mass,) = model.observed_events()[0]
    assert len(mass) == len(json.loads(EXAMPLE.read_text())["data"][0]["entries"])
    assert "UnbinnedModel(5 parameters" in repr(model)
    assert unbinned.load(text=EXAMPLE.read_text()).config.par_names == model.config.par_names


def test_verbs_match_the_cli(model):
    fit = nextstat.fit(model)
    cli = cli_json("fit", EXAMPLE)
    assert fit.twice_nll == cli["twice_nll"]
    assert list(fit.bestfit) == cli["bestfit"]
    assert list(fit.uncertainties) == cli["uncertainties"]
    assert nextstat.hypotest(1.0, model).cls_obs == cli_json("hypotest", EXAMPLE, "--mu", 1)["CLs_obs"]
    assert nextstat.upper_limit(model).obs == cli_json("upper-limit", EXAMPLE)["obs"]


def test_nll_grad_is_the_engine_nll(model, tmp_path):
    init = model.config.suggested_init()
    nll, grad = model.nll_grad(init)
    assert nll == cli_json("eval", EXAMPLE)["nll"]
    assert grad.shape == (5,)
    # The observed events given back as an array are the same data.
    (mass,) = model.observed_events()[0]
    assert model.nll_grad(init, mass)[0] == nll
    assert nextstat.fit(model, data=mass).twice_nll == nextstat.fit(model).twice_nll


def test_saved_calls_run_anywhere(model, tmp_path):
    path = tmp_path / "call.json"
    fit = nextstat.fit(model, save_call=path)
    assert nextstat.run_call(path).twice_nll == fit.twice_nll
    assert json.loads(path.read_text())["model"]["workspace"] == str(EXAMPLE.resolve())


def test_careless_calls_are_clear_errors(model):
    with pytest.raises(nextstat.InvalidInputError, match="pyhf workspace, not an HS3 model"):
        unbinned.load(ROOT / "examples" / "analysis.json")
    with pytest.raises(nextstat.InvalidInputError, match="pars has length 2"):
        model.nll_grad([1.0, 2.0])
    with pytest.raises(nextstat.InvalidInputError, match="outside its range"):
        nextstat.fit(model, data=[99.0])
    with pytest.raises(nextstat.NextStatError, match="not on vulkan"):
        nextstat.fit(model, device="vulkan")
    with pytest.raises(ValueError, match="one-dimensional"):
        model.nll_grad(model.config.suggested_init(), np.ones((2, 2)))
    with pytest.raises(TypeError, match="either path or text"):
        unbinned.load()
    with pytest.raises(nextstat.InvalidInputError, match="no analysis 'nope'"):
        unbinned.load(EXAMPLE, analysis="nope")
