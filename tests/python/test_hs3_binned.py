"""Binned HS3 files written by ROOT 6.40 (../shared/hs3-binned) from Python: ``nextstat.load_hs3``
gives a Model whose fit reaches RooFit's minimum (the NLL offset is RooFit's N_obs·ln N_channels,
the README's constant) and whose every verb runs; the CLI reads the same file to the same
numbers."""

import json
import math
from pathlib import Path

import pytest

import nextstat
from conftest import cli_json

HS3 = Path(__file__).resolve().parents[2].parent / "shared" / "hs3-binned"


@pytest.mark.parametrize("name", ["nextstat_simple", "nextstat_multichannel", "pyhf_validation_2bin_2channel_coupledhistosys"])
def test_fit_reaches_roofits_minimum(name):
    reference = json.loads((HS3 / f"{name}.reference.json").read_text())
    roofit = reference[reference["oracle_for_this_file"]]
    document = json.loads((HS3 / f"{name}.hs3.json").read_text())
    observed = next(d for d in document["data"] if d["name"].startswith("obsData"))
    channels = [d for d in document["distributions"] if d["type"] == "histfactory_dist"]
    n_obs = sum(sum(d["contents"]) for d in document["data"] if d["name"].startswith("obsData"))
    offset = n_obs * math.log(len(channels))
    assert observed["type"] == "binned"
    model = nextstat.load_hs3(HS3 / f"{name}.hs3.json")
    assert isinstance(model, nextstat.Model)
    best = nextstat.fit(model)
    ours = best.twice_nll / 2 + offset
    # RooFit's fit of the coupled-histosys model stops in the higher of its two minima.
    minima = [m["nll"] for m in reference.get("multimodality", {}).get("minima", [])] or [roofit["nll_best"]]
    assert ours == pytest.approx(min(minima + [roofit["nll_best"]]), abs=1e-6)
    cli = cli_json("fit", str(HS3 / f"{name}.hs3.json"))
    assert cli["nll"] == pytest.approx(best.twice_nll / 2, abs=1e-9)
    assert nextstat.upper_limit(model).obs > 0


def test_load_hs3_refuses_what_it_cannot_read(tmp_path):
    with pytest.raises(TypeError):
        nextstat.load_hs3(3)
    document = json.loads((HS3 / "nextstat_simple.hs3.json").read_text())
    for dist in document["distributions"]:
        for sample in dist.get("samples", []):
            for m in sample["modifiers"]:
                if m["type"] == "shapesys":
                    m["type"] = "lumisys"
    path = tmp_path / "bad.hs3.json"
    path.write_text(json.dumps(document))
    with pytest.raises(nextstat.NextStatError, match="modifier type 'lumisys'"):
        nextstat.load_hs3(path)
