"""Sample yields clipped at zero as ROOT's HistFactory clips them (`clip_negative_yields`), against
ROOT 6.40 itself: a sample's product of normsys factors is ROOT's FlexibleInterpVar (codes 4 and 5
are pyhf's code4), which returns the smallest positive double where the product falls to or below
zero. pyhf's model (the default) keeps the negative product."""

import json

import pytest

import nextstat
from conftest import cli_json

R = pytest.importorskip("ROOT")

HI_LO = {"k": (0.998, 230.5), "b": (1.2, 0.8)}
SPEC = {
    "channels": [{"name": "sr", "samples": [{"name": "small", "data": [0.5], "modifiers": [
        {"name": "mu", "type": "normfactor", "data": None},
        {"name": "k", "type": "normsys", "data": {"hi": HI_LO["k"][0], "lo": HI_LO["k"][1]}},
        {"name": "b", "type": "normsys", "data": {"hi": HI_LO["b"][0], "lo": HI_LO["b"][1]}},
    ]}]}],
    "observations": [{"name": "sr", "data": [1.0]}],
    "measurements": [{"name": "m", "config": {"poi": "mu", "parameters": []}}],
    "version": "1.0.0",
}
POINTS = [(-0.3, 0.5), (0.2, -0.7), (0.35, 0.0), (0.1, 0.9), (1.7, 0.3), (-2.0, -1.5), (0.9, 0.1), (0.5, 2.5)]


def root_yields(code):
    """0.5 × ROOT's FlexibleInterpVar of the two normsys at each point."""
    k, b = R.RooRealVar("k", "k", 0, -5, 5), R.RooRealVar("b", "b", 0, -5, 5)
    lows = [HI_LO["k"][1], HI_LO["b"][1]]
    highs = [HI_LO["k"][0], HI_LO["b"][0]]
    product = R.RooStats.HistFactory.FlexibleInterpVar(f"f{code}", "f", R.RooArgList(k, b), 1.0, lows, highs, [code, code])
    out = []
    for alpha_k, alpha_b in POINTS:
        k.setVal(alpha_k)
        b.setVal(alpha_b)
        out.append(0.5 * product.getVal())
    return out


@pytest.mark.parametrize("code", [4, 5])
def test_the_clipped_normsys_product_is_roots(code):
    ws = nextstat.Workspace(SPEC)
    clipped, pyhf_model = ws.model(clip_negative_yields=True), ws.model()
    names = clipped.config.par_names
    negative = 0
    for (alpha_k, alpha_b), theirs in zip(POINTS, root_yields(code)):
        pars = [{"mu": 1.0, "k": alpha_k, "b": alpha_b}[n] for n in names]
        ours = clipped.expected_actualdata(pars)[0]
        unclipped = pyhf_model.expected_actualdata(pars)[0]
        if unclipped <= 0:
            negative += 1
            # ROOT returns the smallest positive double; the engine's clip is zero.
            assert theirs < 1e-300 and ours == 0.0, (alpha_k, alpha_b, theirs, ours)
        else:
            assert ours == pytest.approx(theirs, rel=1e-12), (alpha_k, alpha_b)
            assert unclipped == ours
    assert negative >= 2, "the points must reach the negative stretch of the product"


def test_the_cli_flag_clips(tmp_path):
    spec = json.loads(json.dumps(SPEC))
    spec["observations"][0]["data"] = [0.0]
    path = tmp_path / "ws.json"
    path.write_text(json.dumps(spec))
    pars = tmp_path / "pars.json"
    pars.write_text(json.dumps({"mu": 1.0, "k": 0.2, "b": -0.7}))
    pyhf_twice_nll = cli_json("eval", str(path), "--pars", str(pars))["twice_nll"]
    clipped_twice_nll = cli_json("eval", str(path), "--pars", str(pars), "--clip-negative-yields")["twice_nll"]
    # An empty bin: pyhf's term is 2λ with λ = −5.78; clipped, λ = 0 and only the constraints
    # remain.
    constraints = 0.2**2 + 0.7**2
    assert clipped_twice_nll == pytest.approx(pyhf_twice_nll + 2 * 5.7783601612374875, rel=1e-9)
    assert clipped_twice_nll - constraints == pytest.approx(2 * 0.91893853320467274 * 2, rel=1e-9)
