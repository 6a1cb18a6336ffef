"""CMS Combine datacards from Python: ``nextstat.Datacard(path).model()`` is the CLI's model of
the card (the same fit), from its file or its text; a careless card is an InvalidInputError naming
its line (docs/combine.md)."""

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

import nextstat
from conftest import BIN, ROOT

CORPUS = Path(os.environ.get("NEXTSTAT_COMBINE", ROOT.parent / "shared" / "combine"))
CARD = CORPUS / "data" / "tutorials" / "counting" / "realistic-counting-experiment.txt"


def test_a_card_from_its_file_or_text_fits_as_the_cli_does():
    from_file = nextstat.Datacard(CARD).model()
    from_text = nextstat.Datacard(text=CARD.read_text()).model()
    assert from_file.config.par_names == ["r", "lumi", "xs_ggH", "WW_norm", "xs_ggWW", "bg_others"]
    ours = nextstat.fit(from_file)
    assert nextstat.fit(from_text).twice_nll == ours.twice_nll
    cli = json.loads(subprocess.run([str(BIN), "fit", str(CARD)], capture_output=True, text=True, check=True).stdout)
    assert ours.twice_nll == pytest.approx(cli["twice_nll"], rel=1e-12, abs=1e-12)
    # WW_norm (gmN 4) starts at N + 1, as text2workspace starts it.
    assert from_file.config.suggested_init()[3] == 5.0


def test_careless_calls_are_refused_clearly():
    with pytest.raises(nextstat.InvalidInputError, match="line 11: the rate of 'bkg' in 'b1' is negative"):
        nextstat.Datacard(text="imax 1\njmax 1\nkmax 0\nbin b1\nobservation 3\nbin b1 b1\nprocess s bkg\n"
                          "process 0 1\n\n\nrate 1 -2\n").model()
    with pytest.raises(TypeError, match="one of them"):
        nextstat.Datacard()


def test_mass_and_channel_patterns_name_the_templates():
    """`$MASS` in template names takes `-m` (text2workspace's option): without it the card says
    so; with it the card fits; `-m` on a model that is no datacard is refused."""
    card = CORPUS / "data" / "ci" / "htt_multiple_regions.txt"
    missing = subprocess.run([str(BIN), "fit", str(card)], capture_output=True, text=True)
    assert missing.returncode != 0 and "names $MASS: give the mass (-m MASS" in missing.stderr
    fit = json.loads(subprocess.run([str(BIN), "fit", str(card), "-m", "125"], capture_output=True, text=True, check=True).stdout)
    reference = json.loads((CORPUS / "reference.json").read_text())["cards"]["ci_htt_multiple_regions"]
    assert fit["converged"] and abs(fit["bestfit"][0] - reference["multidimfit_singles"]["r_hat"]) < 1e-3
    other = subprocess.run([str(BIN), "fit", str(ROOT / "examples" / "analysis.json"), "-m", "125"], capture_output=True, text=True)
    assert other.returncode != 0 and "applies to CMS Combine datacards" in other.stderr


def test_python_takes_the_mass_as_the_cli_does():
    """`Datacard(path, mass=…)` is the CLI's `-m`: 125, 125.0 and "125" name the same templates,
    and the fit is the CLI's; a mass that is neither text nor a number is refused."""
    card = CORPUS / "data" / "ci" / "htt_multiple_regions.txt"
    with pytest.raises(nextstat.InvalidInputError, match=r"names \$MASS"):
        nextstat.Datacard(card).model()
    cli = json.loads(subprocess.run([str(BIN), "fit", str(card), "-m", "125"], capture_output=True, text=True, check=True).stdout)
    for mass in (125, 125.0, "125"):
        fit = nextstat.fit(nextstat.Datacard(card, mass=mass).model())
        assert fit.twice_nll == pytest.approx(cli["twice_nll"], rel=1e-12), mass
    with pytest.raises(TypeError, match="mass must be"):
        nextstat.Datacard(card, mass=[125])


@pytest.mark.parametrize("card_id", ["counting_realistic", "counting_multichannel", "statroutines_counting"])
def test_datacard2json_gives_pyhf_combines_likelihood(tmp_path, card_id):
    """`nextstat datacard2json` writes a card pyhf expresses exactly as a pyhf workspace: pyhf
    0.7.6 itself (normsys code1, as the note on stderr says) gives Combine's NLL at every
    reference point (plus the ln√(2π) of each Gaussian constraint, which Combine leaves out);
    a card with an asymmetric lnN is refused, naming it, and nothing is written."""
    import pyhf

    card = json.loads((CORPUS / "reference.json").read_text())["cards"][card_id]
    out = tmp_path / "ws.json"
    run = subprocess.run([str(BIN), "datacard2json", str(CORPUS / card["card"]), "-o", str(out)],
                         capture_output=True, text=True, check=True)
    assert "normsys=code1" in run.stderr
    ws = pyhf.Workspace(json.loads(out.read_text()))
    model = ws.model(modifier_settings={"normsys": {"interpcode": "code1"}, "histosys": {"interpcode": "code4p"}})
    data = ws.data(model)
    gmn = {}
    for line in (CORPUS / card["card"]).read_text().splitlines():
        words = line.split()
        if len(words) > 2 and words[1] == "gmN":
            gmn[words[0]] = float(words[2])
    gaussians = sum(1 for name in model.config.par_order if getattr(model.config.param_set(name), "pdf_type", None) == "normal")
    for point in card["nll_points"]:
        pars = model.config.suggested_init()
        for name, value in point["parameters"].items():
            lo, hi = model.config.suggested_bounds()[model.config.par_slice(name).start]
            value = value / gmn.get(name, 1.0)
            pars[model.config.par_slice(name).start] = min(max(value, lo), hi)
        nll = -float(model.logpdf(pars, data)[0]) - gaussians * 0.5 * math.log(2 * math.pi)
        assert nll == pytest.approx(point["nll_total"], rel=1e-9), point["point"]
    refused = subprocess.run([str(BIN), "datacard2json", str(CORPUS / json.loads((CORPUS / "reference.json").read_text())["cards"]["asymm_lnN"]["card"]), "-o", str(tmp_path / "no.json")],
                             capture_output=True, text=True)
    assert refused.returncode != 0 and "'theta1' is an asymmetric lnN" in refused.stderr
    assert not (tmp_path / "no.json").exists()


TWO_SIGNALS = ("imax 1\njmax 2\nkmax *\n---\nbin a\nobservation 12\n---\nbin a a a\nprocess ggH qqH bkg\n"
               "process -1 0 1\nrate 3 2 6\n---\nlumi lnN 1.02 1.02 1.02\n")


def test_physics_maps_give_one_poi_per_map_as_the_cli(tmp_path):
    """multiSignalModel's maps (`physics=[…]`, the CLI's `--po`): the first POI is the model's,
    the fit is the CLI's; an option that is not a map is refused by name."""
    maps = ["map=a/ggH:r_ggH[1,0,10]", "map=a/qqH:r_qqH[1,0,10]"]
    model = nextstat.Datacard(text=TWO_SIGNALS, physics=maps).model()
    assert model.config.par_names == ["r_ggH", "r_qqH", "lumi"]
    assert model.config.poi_name == "r_ggH"
    ours = nextstat.fit(model)
    card = tmp_path / "card.txt"
    card.write_text(TWO_SIGNALS)
    cli = json.loads(subprocess.run([str(BIN), "fit", str(card), "--po", maps[0], "--po", maps[1]],
                                    capture_output=True, text=True, check=True).stdout)
    assert ours.twice_nll == pytest.approx(cli["twice_nll"], rel=1e-12, abs=1e-12)
    with pytest.raises(nextstat.InvalidInputError, match="physics-model option 'squash'"):
        nextstat.Datacard(text=TWO_SIGNALS, physics=["squash"]).model()
    with pytest.raises(TypeError, match="physics must be a list"):
        nextstat.Datacard(text=TWO_SIGNALS, physics="map=a/ggH:r[1,0,2]")
