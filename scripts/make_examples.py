#!/usr/bin/env python3
"""Writes the repository's own example analysis and fuzz seeds (nothing is copied from ../shared):

  examples/bkgonly.json    background-only workspace of a small search: a signal region (4 bins) and a
                           ttbar control region (3 bins); ttbar normalised in the control region
                           (normfactor + histosys), W+jets (normsys), fakes (shapesys), staterror, lumi;
                           its measurement names the POI `mu_sig`, which the signal patches add
  examples/patchset.json   HEPData-style patchset: seven signal hypotheses (sig_m400 … sig_m1000, by
                           mass) with the background-only workspace's pyhf digest
  examples/analysis.json   bkgonly.json with the sig_m500 patch applied: the README's main job
  fuzz/seeds/*.json        seeds for cargo fuzz: the three above and small variants

Run: python3 scripts/make_examples.py (standard library only)."""

import copy
import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def digest(obj):
    """pyhf.utils.digest: sha256 of json.dumps(obj, sort_keys=True, ensure_ascii=False)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode("utf8")).hexdigest()


def background_only():
    lumi = {"name": "lumi", "type": "lumi", "data": None}

    def stat(name, values):
        return {"name": name, "type": "staterror", "data": values}

    cr = {"name": "CR_ttbar", "samples": [
        {"name": "fakes", "data": [20.0, 10.0, 5.0], "modifiers": [
            {"name": "fakes_norm", "type": "normsys", "data": {"hi": 1.3, "lo": 0.7}},
            {"name": "fakes_stat_CR", "type": "shapesys", "data": [6.0, 3.5, 2.0]}]},
        {"name": "ttbar", "data": [300.0, 180.0, 90.0], "modifiers": [
            {"name": "k_ttbar", "type": "normfactor", "data": None},
            {"name": "ttbar_shape", "type": "histosys", "data": {"hi_data": [309.0, 183.6, 90.0], "lo_data": [291.0, 176.4, 90.0]}},
            stat("staterror_CR_ttbar", [6.0, 4.5, 3.2]), lumi]},
        {"name": "wjets", "data": [60.0, 30.0, 15.0], "modifiers": [
            {"name": "wjets_norm", "type": "normsys", "data": {"hi": 1.15, "lo": 0.87}},
            stat("staterror_CR_ttbar", [3.0, 2.2, 1.5]), lumi]},
    ]}
    sr = {"name": "SR", "samples": [
        {"name": "fakes", "data": [8.0, 5.0, 3.0, 1.5], "modifiers": [
            {"name": "fakes_norm", "type": "normsys", "data": {"hi": 1.3, "lo": 0.7}},
            {"name": "fakes_stat_SR", "type": "shapesys", "data": [2.4, 1.6, 1.1, 0.7]}]},
        {"name": "ttbar", "data": [40.0, 25.0, 12.0, 5.0], "modifiers": [
            {"name": "k_ttbar", "type": "normfactor", "data": None},
            {"name": "ttbar_shape", "type": "histosys", "data": {"hi_data": [42.0, 26.5, 13.0, 5.6], "lo_data": [38.2, 23.6, 11.1, 4.5]}},
            stat("staterror_SR", [2.1, 1.6, 1.1, 0.7]), lumi]},
        {"name": "wjets", "data": [20.0, 11.0, 6.0, 2.0], "modifiers": [
            {"name": "wjets_norm", "type": "normsys", "data": {"hi": 1.15, "lo": 0.87}},
            stat("staterror_SR", [1.5, 1.1, 0.8, 0.5]), lumi]},
    ]}
    return {
        "channels": [cr, sr],
        "observations": [{"name": "CR_ttbar", "data": [385, 222, 108]}, {"name": "SR", "data": [72, 45, 28, 12]}],
        "measurements": [{"name": "NormalMeasurement", "config": {"poi": "mu_sig", "parameters": [
            {"name": "lumi", "auxdata": [1.0], "sigmas": [0.017], "bounds": [[0.9, 1.1]], "inits": [1.0]},
            {"name": "mu_sig", "bounds": [[0.0, 10.0]], "inits": [1.0]}]}}],
        "version": "1.0.0",
    }


def signal(yields):
    return {"name": "signal", "data": yields, "modifiers": [
        {"name": "mu_sig", "type": "normfactor", "data": None},
        {"name": "sig_theory", "type": "normsys", "data": {"hi": 1.08, "lo": 0.93}},
        {"name": "staterror_SR", "type": "staterror", "data": [0.1 * y for y in yields]},
        {"name": "lumi", "type": "lumi", "data": None}]}


# Signal yields per SR bin by mass: heavier signals are rarer and sit in higher bins. sig_m500
# comes first (analysis.json applies it).
SIGNALS = {
    "sig_m500": ([500], [1.0, 4.0, 9.0, 6.0]),
    "sig_m400": ([400], [2.0, 6.0, 9.0, 3.0]),
    "sig_m600": ([600], [0.7, 2.8, 7.5, 6.0]),
    "sig_m700": ([700], [0.5, 1.9, 5.5, 5.6]),
    "sig_m800": ([800], [0.3, 1.2, 4.0, 5.0]),
    "sig_m900": ([900], [0.2, 0.8, 2.8, 4.2]),
    "sig_m1000": ([1000], [0.15, 0.5, 1.9, 3.4]),
}


def patchset(bkgonly):
    sr_index = [c["name"] for c in bkgonly["channels"]].index("SR")
    return {
        "metadata": {
            "description": "signal hypotheses of the nextstat example search",
            "digests": {"sha256": digest(bkgonly)},
            "labels": ["mass"],
            "references": {"hepdata": "ins0000000"},
        },
        "patches": [
            {"metadata": {"name": name, "values": values},
             "patch": [{"op": "add", "path": f"/channels/{sr_index}/samples/-", "value": signal(yields)}]}
            for name, (values, yields) in SIGNALS.items()
        ],
        "version": "1.0.0",
    }


def apply(workspace, patch):
    """The `add ... /samples/-` operations the patchset uses (enough for these patches)."""
    out = copy.deepcopy(workspace)
    for op in patch:
        assert op["op"] == "add" and op["path"].endswith("/samples/-")
        channel = int(op["path"].split("/")[2])
        out["channels"][channel]["samples"].append(copy.deepcopy(op["value"]))
    return out


def write(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1) + "\n")


def main():
    bkg = background_only()
    ps = patchset(bkg)
    analysis = apply(bkg, ps["patches"][0]["patch"])
    write(ROOT / "examples" / "bkgonly.json", bkg)
    write(ROOT / "examples" / "patchset.json", ps)
    write(ROOT / "examples" / "analysis.json", analysis)

    seeds = ROOT / "fuzz" / "seeds"
    for old in seeds.glob("*.json"):
        old.unlink()
    write(seeds / "analysis.json", analysis)
    write(seeds / "bkgonly.json", bkg)
    write(seeds / "patchset.json", ps)
    one_bin = {
        "channels": [{"name": "SR", "samples": [
            {"name": "signal", "data": [5.0], "modifiers": [{"name": "mu", "type": "normfactor", "data": None}, {"name": "lumi", "type": "lumi", "data": None}]},
            {"name": "background", "data": [50.0], "modifiers": [{"name": "unc", "type": "shapesys", "data": [7.0]}]}]}],
        "observations": [{"name": "SR", "data": [53]}],
        "measurements": [{"name": "m", "config": {"poi": "mu", "parameters": [{"name": "lumi", "auxdata": [1.0], "sigmas": [0.02], "bounds": [[0.5, 1.5]], "inits": [1.0]}]}}],
        "version": "1.0.0",
    }
    write(seeds / "one_bin_lumi_shapesys.json", one_bin)
    shapefactor = copy.deepcopy(analysis)
    for channel in shapefactor["channels"]:
        for sample in channel["samples"]:
            if sample["name"] == "fakes":
                sample["modifiers"] = [{"name": f"fakes_shape_{channel['name']}", "type": "shapefactor", "data": None}]
    write(seeds / "shapefactor.json", shapefactor)
    print(f"wrote examples/ (bkgonly digest {ps['metadata']['digests']['sha256'][:12]}…) and {len(list(seeds.glob('*.json')))} fuzz seeds")


if __name__ == "__main__":
    main()
