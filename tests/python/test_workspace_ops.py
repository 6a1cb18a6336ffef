"""Workspace operations: our outputs, loaded by pyhf, give the same workspace (digest) and model
as pyhf's own operation; inspect, digest and patchset verbs print what pyhf prints."""

import json
import subprocess
import sys
from pathlib import Path

import pyhf
import pytest

from conftest import BIN, WORKSPACES, run_cli

SMALL = [
    "pyhf_testpatchset_bkgonly.json",
    "nextstat_complex_workspace.json",
    "nextstat_multichannel_workspace.json",
    "pyhf_validation_2bin_2channel_coupledhistosys.json",
    "tutorial_bkg_only_1Lbb_CRs.json",
]


def load(path):
    return pyhf.Workspace(json.loads(path.read_text()))


def ours(*args):
    out = json.loads(run_cli(*args)[1])
    return pyhf.Workspace(out)  # pyhf must load it unchanged


def same(ws_ours, ws_pyhf):
    assert pyhf.utils.digest(ws_ours) == pyhf.utils.digest(ws_pyhf)
    m1, m2 = ws_ours.model(poi_name=None), ws_pyhf.model(poi_name=None)
    assert m1.config.par_names == m2.config.par_names
    assert m1.config.suggested_init() == m2.config.suggested_init()


@pytest.mark.parametrize("file", SMALL)
def test_sort_and_digest(file):
    path = WORKSPACES / file
    same(ours("sort", path), pyhf.Workspace.sorted(load(path)))
    digest = run_cli("digest", path)[1].strip()
    assert digest == f"sha256:{pyhf.utils.digest(json.loads(path.read_text()))}"


@pytest.mark.parametrize("file", SMALL)
def test_prune_each_kind(file):
    path = WORKSPACES / file
    ws = load(path)
    channel, sample = ws.channels[0], ws.samples[-1]
    modifier, modifier_type = ws.modifiers[0]
    if len(ws.channels) > 1:
        same(ours("prune", path, "-c", channel), ws.prune(channels=[channel]))
    if all(len(c["samples"]) > 1 or sample not in [s["name"] for s in c["samples"]] for c in ws["channels"]):
        same(ours("prune", path, "-s", sample), ws.prune(samples=[sample]))
    same(ours("prune", path, "-m", modifier), ws.prune(modifiers=[modifier]))
    same(ours("prune", path, "-t", modifier_type), ws.prune(modifier_types=[modifier_type]))


@pytest.mark.parametrize("file", SMALL)
def test_rename(file):
    path = WORKSPACES / file
    ws = load(path)
    c, s, (m, _) = ws.channels[0], ws.samples[0], ws.modifiers[-1]
    meas = ws.measurement_names[0]
    ours_ws = ours("rename", path, "-c", c, "c_new", "-s", s, "s_new", "-m", m, "m_new", "--measurement", meas, "meas_new")
    same(ours_ws, ws.rename(channels={c: "c_new"}, samples={s: "s_new"}, modifiers={m: "m_new"}, measurements={meas: "meas_new"}))


@pytest.mark.parametrize("join", ["none", "outer", "left outer", "right outer"])
def test_combine(join, tmp_path):
    left_path = WORKSPACES / "pyhf_testpatchset_bkgonly.json"
    left = load(left_path)
    if join == "none":
        right = left.rename(channels={c: c + "_2" for c in left.channels}, measurements={m: m + "_2" for m in left.measurement_names})
    else:
        right = left.rename(channels={left.channels[0]: "other"})
    right_path = tmp_path / "right.json"
    right_path.write_text(json.dumps(right))
    same(ours("combine", left_path, right_path, "--join", join), pyhf.Workspace.combine(left, right, join=join))
    if join != "none":
        merged = ours("combine", left_path, right_path, "--join", join, "--merge-channels")
        same(merged, pyhf.Workspace.combine(left, right, join=join, merge_channels=True))


def test_combine_conflict_is_an_error():
    path = WORKSPACES / "pyhf_testpatchset_bkgonly.json"
    code, _, err = run_cli("combine", path, path, expect_ok=False)
    assert code == 2 and "in common" in err


@pytest.mark.parametrize("file", SMALL + ["nextstat_tHu.json"])
def test_inspect_text_and_json_match_pyhf(file, tmp_path):
    path = WORKSPACES / file
    theirs_json = tmp_path / "theirs.json"
    theirs = subprocess.run(
        # pyhf's command line, installed beside this interpreter.
        [str(Path(sys.executable).parent / "pyhf"), "inspect", str(path), "--output-file", str(theirs_json)],
        capture_output=True,
        text=True,
    )
    if theirs.returncode != 0:
        pytest.skip(f"pyhf inspect could not run: {theirs.stderr[-200:]}")
    ours_json = tmp_path / "ours.json"
    _, text, _ = run_cli("inspect", path, "-o", ours_json)
    assert text == theirs.stdout
    assert ours_json.read_text() == theirs_json.read_text()


def test_patchset_verify_apply_extract_inspect(tmp_path):
    bkg = WORKSPACES / "pyhf_testpatchset_bkgonly.json"
    ps_path = WORKSPACES / "pyhf_testpatchset_patchset.json"
    patchset = pyhf.PatchSet(json.loads(ps_path.read_text()))
    assert run_cli("patchset", "verify", bkg, ps_path)[1] == "All good.\n"
    name = patchset.patches[0].name
    same(ours("patchset", "apply", bkg, ps_path, "--name", name), patchset.apply(load(bkg), name))
    extracted = json.loads(run_cli("patchset", "extract", ps_path, "--name", name)[1])
    assert extracted == patchset[name].patch
    with_meta = json.loads(run_cli("patchset", "extract", ps_path, "--name", name, "--with-metadata")[1])
    assert with_meta["patch"] == patchset[name].patch and with_meta["metadata"]["name"] == name
    assert run_cli("patchset", "inspect", ps_path)[1] == f"\n    {len(patchset)} patches found in Patchset\n---------------------------------\n\n{name}\n"
    # A workspace the patchset was not made for fails verification.
    other = WORKSPACES / "nextstat_complex_workspace.json"
    code, _, err = run_cli("patchset", "verify", other, ps_path, expect_ok=False)
    assert code == 2 and "digest verification failed" in err


def test_patchset_flags_on_eval_give_the_patched_model(tmp_path):
    bkg = WORKSPACES / "pyhf_testpatchset_bkgonly.json"
    ps_path = WORKSPACES / "pyhf_testpatchset_patchset.json"
    patchset = pyhf.PatchSet(json.loads(ps_path.read_text()))
    name = patchset.patches[0].name
    ws = patchset.apply(load(bkg), name)
    model = ws.model()
    out = json.loads(run_cli("eval", bkg, "--patchset", ps_path, "--patch-name", name)[1])
    assert out["twice_nll"] == pytest.approx(float(-2 * model.logpdf(model.config.suggested_init(), ws.data(model))[0]), rel=1e-10)
    patch_file = tmp_path / "patch.json"
    patch_file.write_text(json.dumps(patchset[name].patch))
    out_p = json.loads(run_cli("eval", bkg, "-p", patch_file)[1])
    assert out_p["twice_nll"] == out["twice_nll"]
