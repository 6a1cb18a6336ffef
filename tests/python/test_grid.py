"""`upper-limit BKG --patchset PS --all`: every signal point of a patchset in one table, each
point the limit the single-patch call gives, and pyhf's limits on a published grid (whose
patchset carries another file's digest: refused by default, applied with --skip-verify)."""

import json

import pytest

from conftest import ROOT, TOL, run_cli

GRID = ROOT.parent / "shared" / "likelihoods" / "patchsets" / "atlas_1Lbb_simplified"


def test_every_point_is_the_limit_of_its_patch_alone():
    bkg, patchset = ROOT / "examples" / "bkgonly.json", ROOT / "examples" / "patchset.json"
    table = json.loads(run_cli("upper-limit", bkg, "--patchset", patchset, "--all")[1])
    names = [p["metadata"]["name"] for p in json.loads(patchset.read_text())["patches"]]
    assert [p["patch"] for p in table["points"]] == names and table["errors"] == []
    assert table["labels"] == ["mass"]
    for point in table["points"][:3]:
        alone = json.loads(run_cli("upper-limit", bkg, "--patchset", patchset, "--patch-name", point["patch"])[1])
        assert (point["obs"], point["exp"]) == (alone["obs"], alone["exp"]), point["patch"]


def test_a_published_grid_gives_pyhfs_limits_with_skip_verify(tmp_path):
    assert GRID.exists(), f"{GRID} is missing: the published patchsets live in ../shared"
    bkg, patchset = GRID / "bkgonly.json", GRID / "patchset.json"
    code, _, err = run_cli("upper-limit", bkg, "--patchset", patchset, "--all", expect_ok=False)
    assert code == 2 and "digest verification failed" in err and "--skip-verify" in err
    code, out, err = run_cli("upper-limit", bkg, "--patchset", patchset, "--all", "--skip-verify")
    assert err.count("--skip-verify") == 1, "the warning is said once for the grid"
    table = json.loads(out)
    reference = json.loads((GRID / "reference.json").read_text())
    assert table["labels"] == reference["labels"]
    assert len(table["points"]) + len(table["errors"]) == reference["n_patches"] == 125
    by_patch = {p["patch"]: p for p in table["points"]}
    compared = 0
    for ref in reference["points"]:
        if "upper_limit_obs" not in ref:
            continue
        ours = by_patch[ref["patch"]]
        assert ours["values"] == ref["values"]
        assert ours["obs"] == pytest.approx(ref["upper_limit_obs"], rel=TOL["upper_limit_rtol"]), ref["patch"]
        assert ours["exp"] == pytest.approx(ref["upper_limit_exp"], rel=TOL["upper_limit_rtol"]), ref["patch"]
        compared += 1
    assert compared >= 10
    # One patch with --skip-verify: the same limit as the grid's row.
    name = reference["points"][0]["patch"]
    alone = json.loads(run_cli("upper-limit", bkg, "--patchset", patchset, "--patch-name", name, "--skip-verify")[1])
    assert alone["obs"] == by_patch[name]["obs"]
    code, _, err = run_cli("upper-limit", bkg, "--skip-verify", expect_ok=False)
    assert code == 2 and "--patchset" in err
