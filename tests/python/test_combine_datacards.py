"""CMS Combine datacards from Python: ``nextstat.Datacard(path).model()`` is the CLI's model of
the card (the same fit), from its file or its text; a careless card is an InvalidInputError naming
its line (docs/combine.md)."""

import json
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
