#!/usr/bin/env python3
"""Builds the "stress corpus": published ATLAS pyhf likelihoods turned into ready-to-fit
signal+background workspaces, for testing toy fits on real models with nearly flat directions.

What it builds
  One pyhf JSON workspace per model, OUT/<name>.json (schema 1.0.0, valid for pyhf 0.7.6), and
  OUT/MANIFEST.json (per model: source repository, commit, paths, how the signal was made, number
  of parameters, channels and bins). The models come from public GitHub repositories pinned at
  fixed commits (SOURCES below); none of them is already in ../shared (likelihoods/, pyhf-ref/).

Why
  Published background-only likelihoods with the control regions stripped (what SModelS does)
  leave background normalisations constrained by little more than the signal regions, so the
  likelihood has long, nearly flat valleys. Those break optimisers and toy fits in ways the
  small synthetic fixtures do not. The corpus is test input: its signals are not physics models.

How a model gets its signal (field "recipe" in MODELS)
  patchset  - the first patch (file order) of the published pyhf PatchSet beside the workspace.
  patchfile - one published RFC 6902 patch file.
  smodels   - no patch is used; a signal is constructed the way SModelS (pyhfInterface) builds its
              models from a background-only workspace and the analysis' globalInfo.txt:
              * each channel is a signal region (SR), control region (CR) or validation region
                (VR): by its entry in globalInfo's jsonFiles where that entry gives a type (new
                format), otherwise by name (starts with CR/VR/SR; otherwise 'CR' anywhere in the
                name means CR; else SR), as SModelS guesses it;
              * VR channels are removed, and CR channels too unless globalInfo says
                `includeCRs: True` (a model may override this: the "_srOnly" variants), together
                with their observations;
              * every SR channel gets a first sample "bsm" with a normfactor "mu_SIG" (the POI),
                a "lumi" modifier (only where the measurement configures "lumi"), and, where
                globalInfo gives signalUncertainty u, a histosys "signalUncertainty" with
                hi/lo = s*(1 +- u);
              * the yields are s_i = round(1.5 * sqrt(max(B_i, 0.1) / N_SR), 4), B_i the summed
                nominal yields of the channel's samples in bin i and N_SR the number of SR bins
                of the model (the recipe ../shared/likelihoods uses for its smodels-patch models);
              * every measurement's POI is set to "mu_SIG".
              Channels are matched by name, not by position (SModelS assumes observations are in
              channel order); signal is put in SR channels only.
  Every workspace: observations without a channel are dropped, a POI that no modifier defines is
  replaced by the only normfactor the patch added, and the file is written as
  json.dumps(ws, indent=1, sort_keys=True) + newline (values unchanged).

Usage
  python3 scripts/stress_corpus.py [--out DIR] [--cache DIR] [--from-mirror DIR]
                                   [--only NAME ...] [--validate] [--fit [--fit-timeout S]
                                   [--jobs N]] [--list]
    --out DIR          where the corpus goes (default: ../stress-corpus beside the repository)
    --cache DIR        where the source repositories are cloned (default: ../stress-corpus-cache);
                       each is a bare, blob-less clone (git clone --bare --filter=blob:none), the
                       pinned commit is fetched if missing and files are read with git show
    --from-mirror DIR  read the sources from existing bare git directories instead of cloning:
                       DIR/<owner>+<name>/repo or DIR/<owner>+<name> (e.g. /work/.mirror)
    --only NAME        build only these models (repeatable)
    --validate         load every workspace with pyhf (pyhf.Workspace(...).model()) and check the
                       parameter count the script computed itself
    --fit              also run pyhf.infer.mle.fit on the observed data (default scipy optimizer,
                       one subprocess per model, --fit-timeout seconds, default 90) and record
                       convergence (scipy's success flag), twice_nll (and at the initial
                       point), the POI's best-fit value, the iteration count and a flag
                       stuck_at_init (success reported after <= 1 iteration or no decrease of
                       twice_nll: a fit that did not really run) in MANIFEST.json;
                       --jobs N runs N fits at once
    --list             print the models and exit
  Needs git and Python 3.8+; pyhf (0.7.6 was used, with numpy<2.4) only for --validate/--fit.
  Without --fit the output is byte-for-byte reproducible.
"""
import argparse
import ast
import json
import math
import os
import pathlib
import re
import subprocess
import sys
import time

SOURCES = {
    "SModelS/smodels-database-release": "342d72bf3809ad12aa5b5e70159450966ca550fe",
    "SModelS/smodels-utils": "cb1e6cfc7f693e44c7b5271742c03e3e01fcbd63",
    "eschanet/pyhf_inference_tools": "9c317d2bd661f4d18998c46d7b8a238bd954040a",
}

DB = "SModelS/smodels-database-release"
UT = "SModelS/smodels-utils"
ES = "eschanet/pyhf_inference_tools"
A = "13TeV/ATLAS/"


def smodels(name, analysis, fname, key="jsonFiles", include_crs=None, note=""):
    folder = A + analysis
    return {"name": name, "repo": DB, "workspace": f"{folder}/{fname}", "recipe": "smodels",
            "globalinfo": f"{folder}/globalInfo.txt", "jsonfiles_key": key,
            "include_crs": include_crs, "note": note}


MODELS = [
    # --- SModelS database (background-only workspaces + SModelS signal recipe) ---
    smodels("atlas_susy2018_05_ewk_full_smodels", "ATLAS-SUSY-2018-05-ewk-eff",
            "ewk_signal_bkgonly.json", key="jsonFiles_FullLikelihood",
            note="2l+jets electroweakinos, full likelihood; CRs removed (4 free background normfactors)"),
    smodels("atlas_susy2018_05_ewk_simplified_smodels", "ATLAS-SUSY-2018-05-ewk-eff",
            "simplified.json", note="2l+jets electroweakinos, simplified likelihood; CRs removed"),
    smodels("atlas_susy2018_14_SRee_smodels", "ATLAS-SUSY-2018-14-eff", "SRee_bkgonly.json",
            note="displaced leptons, single-bin SRee"),
    smodels("atlas_susy2018_14_SRmm_smodels", "ATLAS-SUSY-2018-14-eff", "SRmm_bkgonly.json",
            note="displaced leptons, single-bin SRmm"),
    smodels("atlas_susy2018_16_sleptons_smodels", "ATLAS-SUSY-2018-16-eff", "Sleptons_bkgonly.json",
            note="compressed sleptons; includeCRs: CRs kept; signal histosys 22%"),
    smodels("atlas_susy2018_16_sleptons_srOnly", "ATLAS-SUSY-2018-16-eff", "Sleptons_bkgonly.json",
            include_crs=False, note="as _smodels but CRs removed: 6 nearly free normfactors"),
    smodels("atlas_susy2018_22_MB-C_smodels", "ATLAS-SUSY-2018-22-multibin-eff",
            "simplified_MB-C_noCR_bkgonly.json", note="0l multi-bin C, simplified likelihood"),
    smodels("atlas_susy2018_22_MB-GGd_smodels", "ATLAS-SUSY-2018-22-multibin-eff",
            "simplified_MB-GGd_noCR_bkgonly.json", note="0l multi-bin GGd, simplified likelihood"),
    smodels("atlas_susy2018_31_A_smodels", "ATLAS-SUSY-2018-31-eff", "BkgOnlyA.json",
            key="jsonFiles_FullLikelihood", note="sbottom multi-b SRA; CR and VR removed: mu_ttbar free"),
    smodels("atlas_susy2018_31_B_smodels", "ATLAS-SUSY-2018-31-eff", "BkgOnlyB.json",
            key="jsonFiles_FullLikelihood", note="sbottom multi-b SRB; CR and VR removed: mu_ttbar free"),
    smodels("atlas_susy2018_31_C_smodels", "ATLAS-SUSY-2018-31-eff", "BkgOnlyC.json",
            key="jsonFiles_FullLikelihood",
            note="sbottom multi-b SRC; CRs and VRs removed: mu_ttbar, mu_z free"),
    smodels("atlas_susy2019_09_offshell_smodels", "ATLAS-SUSY-2019-09-eff", "bkg_offshell.json",
            key="jsonFiles_FullLikelihood", note="3l off-shell WZ, full likelihood; includeCRs: CRs kept"),
    smodels("atlas_susy2019_09_offshell_srOnly", "ATLAS-SUSY-2019-09-eff", "bkg_offshell.json",
            key="jsonFiles_FullLikelihood", include_crs=False,
            note="as _smodels but the 2 WZ CRs removed: mu_OFF_WZ0j, mu_OFF_WZnj nearly free"),
    smodels("atlas_susy2019_09_onshell_simplified_smodels", "ATLAS-SUSY-2019-09-eff",
            "bkg_onshell_simplified.json", note="3l on-shell WZ, simplified likelihood; CRs kept"),
    smodels("atlas_susy2019_09_WH_0j_smodels", "ATLAS-SUSY-2019-09-eff", "SR_WH_0j_fake_bkgonly.json",
            note="single-bin 'fake' likelihood SR_WH_0j"),
    smodels("atlas_susy2019_09_WH_nj_smodels", "ATLAS-SUSY-2019-09-eff", "SR_WH_nj_fake_bkgonly.json",
            note="single-bin 'fake' likelihood SR_WH_nj"),
    smodels("atlas_susy2019_09_WH_DFOS_smodels", "ATLAS-SUSY-2019-09-eff",
            "SR_WH_DFOS_fake_bkgonly.json", note="single-bin 'fake' likelihood SR_WH_DFOS"),
    # --- published patches ---
    {"name": "atlas_susy2018_06_3LeRJR_ERJR_100p0_20p0", "repo": UT, "recipe": "patchset",
     "workspace": "pyhfintegration/3L-likelihoods/BkgOnly.json",
     "patchset": "pyhfintegration/3L-likelihoods/patchset.json",
     "note": "3l eRJR (ANA-SUSY-2018-06), full likelihood, first published patch"},
    {"name": "atlas_susy2018_04_highMass_DS_100_1", "repo": UT, "recipe": "patchfile",
     "workspace": "pyhfintegration/SUSY-2018-04_likelihoods/Region-highMass/BkgOnly.json",
     "patch": "pyhfintegration/SUSY-2018-04_likelihoods/Region-highMass/patch.DS_100_1_Staus.json",
     "note": "direct staus, high-mass SR with its QCD and W CRs, published patch"},
    {"name": "atlas_susy2018_04_lowMass_DS_100_1", "repo": UT, "recipe": "patchfile",
     "workspace": "pyhfintegration/SUSY-2018-04_likelihoods/Region-lowMass/BkgOnly.json",
     "patch": "pyhfintegration/SUSY-2018-04_likelihoods/Region-lowMass/patch.DS_100_1_Staus.json",
     "note": "direct staus, low-mass SR with its QCD and W CRs, published patch"},
    {"name": "atlas_susy2018_04_highMass_srOnly", "repo": UT, "recipe": "smodels",
     "workspace": "pyhfintegration/SUSY-2018-04_likelihoods/Region-highMass/BkgOnly.json",
     "include_crs": False,
     "note": "SModelS recipe without globalInfo (CRs by name, removed): mu_QCD, mu_W unconstrained "
             "by any CR"},
    {"name": "atlas_susy2018_04_lowMass_srOnly", "repo": UT, "recipe": "smodels",
     "workspace": "pyhfintegration/SUSY-2018-04_likelihoods/Region-lowMass/BkgOnly.json",
     "include_crs": False,
     "note": "SModelS recipe without globalInfo (CRs by name, removed): mu_QCD, mu_W unconstrained "
             "by any CR"},
    {"name": "atlas_susy2018_31_A_sbottom_1000_131_1", "repo": UT, "recipe": "patchfile",
     "workspace": "pyhfintegration/SUSY-2018-31_likelihoods/RegionA/BkgOnly.json",
     "patch": "pyhfintegration/SUSY-2018-31_likelihoods/RegionA/patch.sbottom_1000_131_1.json",
     "note": "sbottom multi-b SRA, full likelihood, published patch (removes the VR)"},
    {"name": "atlas_susy2018_31_B_sbottom_1000_131_1", "repo": UT, "recipe": "patchfile",
     "workspace": "pyhfintegration/SUSY-2018-31_likelihoods/RegionB/BkgOnly.json",
     "patch": "pyhfintegration/SUSY-2018-31_likelihoods/RegionB/patch.sbottom_1000_131_1.json",
     "note": "sbottom multi-b SRB, full likelihood, published patch (removes the VR)"},
    {"name": "atlas_susy2018_31_C_sbottom_1000_131_1", "repo": UT, "recipe": "patchfile",
     "workspace": "pyhfintegration/SUSY-2018-31_likelihoods/RegionC/BkgOnly.json",
     "patch": "pyhfintegration/SUSY-2018-31_likelihoods/RegionC/patch.sbottom_1000_131_1.json",
     "note": "sbottom multi-b SRC, full likelihood, published patch (removes the VRs)"},
    {"name": "atlas_susy2018_31_A_simplified", "repo": DB, "recipe": "patchset",
     "workspace": A + "ATLAS-SUSY-2018-31-eff/simplifiedA.json", "patch_repo": ES,
     "patchset": "analyses/sbottom/likelihoods/simplified_SRA_patchset.json",
     "note": "sbottom SRA simplified likelihood (SModelS copy: the copy beside the patchset has "
             "no lumi configuration, which pyhf needs; yields agree to 1e-10), first published "
             "patch"},
    {"name": "atlas_susy2018_31_B_simplified", "repo": DB, "recipe": "patchset",
     "workspace": A + "ATLAS-SUSY-2018-31-eff/simplifiedB.json", "patch_repo": ES,
     "patchset": "analyses/sbottom/likelihoods/simplified_SRB_patchset.json",
     "note": "sbottom SRB simplified likelihood (SModelS copy: the copy beside the patchset has "
             "no lumi configuration, which pyhf needs; yields agree to 1e-10), first published "
             "patch"},
    {"name": "atlas_susy2018_31_C_simplified", "repo": DB, "recipe": "patchset",
     "workspace": A + "ATLAS-SUSY-2018-31-eff/simplifiedC.json", "patch_repo": ES,
     "patchset": "analyses/sbottom/likelihoods/simplified_SRC_patchset.json",
     "note": "sbottom SRC simplified likelihood (SModelS copy: the copy beside the patchset has "
             "no lumi configuration, which pyhf needs; yields agree to 1e-10), first published "
             "patch"},
    {"name": "atlas_susy2019_09_offshell_simplified", "repo": ES, "recipe": "patchset",
     "workspace": "analyses/3Loffshell/likelihoods/simplified_BkgOnly.json",
     "patchset": "analyses/3Loffshell/likelihoods/simplified_patchset.json",
     "note": "3l off-shell WZ simplified likelihood, first published patch"},
    {"name": "atlas_susy2018_04_simplified_smodels", "repo": ES, "recipe": "smodels",
     "workspace": "analyses/directstaus/likelihoods/simplified_combined_BkgOnly.json",
     "include_crs": False,
     "note": "direct staus region-combined simplified likelihood; SModelS recipe without "
             "globalInfo (QCR/WCR removed by name, as SRcombined's globalInfo does)"},
]


# ----------------------------------------------------------------------------- sources

class Source:
    """Reads files at a pinned commit from a bare git directory."""

    def __init__(self, repo, commit, gitdir, lazy_fetch=False):
        self.repo, self.commit, self.gitdir, self.lazy_fetch = repo, commit, gitdir, lazy_fetch

    def git(self, *args):
        return subprocess.run(["git", "--git-dir", str(self.gitdir), *args], check=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE).stdout

    def has_commit(self):
        r = subprocess.run(["git", "--git-dir", str(self.gitdir), "cat-file", "-e",
                            self.commit + "^{commit}"], stderr=subprocess.DEVNULL)
        return r.returncode == 0

    def read(self, path):
        try:
            return self.git("show", f"{self.commit}:{path}")
        except subprocess.CalledProcessError as e:
            raise SystemExit(f"cannot read {self.repo}@{self.commit[:10]}:{path}: "
                             f"{e.stderr.decode(errors='replace').strip()}")

    def json(self, path):
        return json.loads(self.read(path))


def open_sources(args, needed):
    out = {}
    for repo in sorted(needed):
        commit = SOURCES[repo]
        slug = repo.replace("/", "+")
        if args.from_mirror:
            base = pathlib.Path(args.from_mirror)
            cands = [base / slug / "repo", base / slug]
            gitdir = next((c for c in cands if (c / "HEAD").exists() and (c / "objects").exists()),
                          None)
            if gitdir is None:
                raise SystemExit(f"no bare git directory for {repo} under {base} "
                                 f"(looked for {', '.join(map(str, cands))})")
            src = Source(repo, commit, gitdir)
            if not src.has_commit():
                raise SystemExit(f"{gitdir} does not contain the pinned commit {commit} of {repo}")
        else:
            cache = pathlib.Path(args.cache)
            cache.mkdir(parents=True, exist_ok=True)
            gitdir = cache / (slug + ".git")
            url = f"https://github.com/{repo}.git"
            if not (gitdir / "HEAD").exists():
                print(f"cloning {url} -> {gitdir}", file=sys.stderr)
                r = subprocess.run(["git", "clone", "--bare", "--filter=blob:none", url,
                                    str(gitdir)])
                if r.returncode != 0:  # server without partial clone: full clone
                    subprocess.run(["git", "clone", "--bare", url, str(gitdir)], check=True)
            src = Source(repo, commit, gitdir)
            if not src.has_commit():
                subprocess.run(["git", "--git-dir", str(gitdir), "fetch", "origin", commit],
                               check=True)
        out[repo] = src
    return out


# ----------------------------------------------------------------------------- JSON patch

def _ptr(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError(f"bad JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc, parts):
    for p in parts:
        doc = doc[int(p)] if isinstance(doc, list) else doc[p]
    return doc


def apply_patch(doc, ops):
    """RFC 6902 (add, remove, replace, move, copy, test) on a JSON document, in place."""
    for op in ops:
        kind, parts = op["op"], _ptr(op["path"])
        if kind in ("move", "copy"):
            src = _ptr(op["from"])
            value = json.loads(json.dumps(_walk(doc, src)))
            if kind == "move":
                apply_patch(doc, [{"op": "remove", "path": op["from"]}])
            apply_patch(doc, [{"op": "add", "path": op["path"], "value": value}])
            continue
        if kind == "test":
            if _walk(doc, parts) != op["value"]:
                raise ValueError(f"JSON patch test failed at {op['path']}")
            continue
        parent, key = _walk(doc, parts[:-1]), parts[-1]
        if isinstance(parent, list):
            idx = len(parent) if key == "-" else int(key)
            if kind == "add":
                parent.insert(idx, op["value"])
            elif kind == "remove":
                del parent[idx]
            elif kind == "replace":
                parent[idx] = op["value"]
            else:
                raise ValueError(f"unknown JSON patch op {kind}")
        else:
            if kind in ("add", "replace"):
                if kind == "replace" and key not in parent:
                    raise ValueError(f"replace of a missing member {op['path']}")
                parent[key] = op["value"]
            elif kind == "remove":
                del parent[key]
            else:
                raise ValueError(f"unknown JSON patch op {kind}")
    return doc


# ----------------------------------------------------------------------------- globalInfo

def globalinfo_field(text, key):
    """Value of a `key: value` field of an SModelS globalInfo.txt (values may span lines)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(key + ":"):
            value = [line[len(key) + 1:]]
            for nxt in lines[i + 1:]:
                if re.match(r"^[A-Za-z_][A-Za-z0-9_]*\s*:", nxt):
                    break
                value.append(nxt)
            return "\n".join(value).strip()
    return None


def read_globalinfo(src, path, key, fname):
    text = src.read(path).decode()
    raw = globalinfo_field(text, key)
    if raw is None:
        raise SystemExit(f"{path}: no field {key}")
    table = ast.literal_eval(raw)
    if fname not in table:
        raise SystemExit(f"{path}: {key} does not list {fname}")
    inc = globalinfo_field(text, "includeCRs")
    unc = globalinfo_field(text, "signalUncertainty")
    return {"regions": table[fname],
            "includeCRs": inc is not None and inc.strip() == "True",
            "signalUncertainty": float(unc) if unc else None}


# ----------------------------------------------------------------------------- recipes

def guess_type(name):
    for prefix in ("CR", "VR", "SR"):
        if name.startswith(prefix):
            return prefix
    return "CR" if "CR" in name else "SR"


def poi_of(ws):
    return ws["measurements"][0]["config"]["poi"]


def modifier_names(ws):
    return {m["name"] for c in ws["channels"] for s in c["samples"] for m in s["modifiers"]}


def drop_orphans(ws):
    names = {c["name"] for c in ws["channels"]}
    dropped = [o["name"] for o in ws["observations"] if o["name"] not in names]
    ws["observations"] = [o for o in ws["observations"] if o["name"] in names]
    return dropped


def smodels_signal(ws, info, include_crs):
    """The SModelS-style signal (see the module docstring). Returns a description."""
    typed = {}
    if info:
        for r in info["regions"]:
            if isinstance(r, dict) and "pyhf" in r:
                typed[r["pyhf"]] = r.get("type", "SR")
    kinds = {c["name"]: typed.get(c["name"], guess_type(c["name"])) for c in ws["channels"]}
    keep_cr = include_crs if include_crs is not None else bool(info and info["includeCRs"])
    removed = [n for n, k in kinds.items() if k == "VR" or (k == "CR" and not keep_cr)]
    ws["channels"] = [c for c in ws["channels"] if c["name"] not in removed]
    ws["observations"] = [o for o in ws["observations"] if o["name"] not in removed]
    srs = [c for c in ws["channels"] if kinds[c["name"]] == "SR"]
    n_sr = sum(len(c["samples"][0]["data"]) for c in srs)
    if n_sr == 0:
        raise SystemExit("no signal region left")
    has_lumi = any(p["name"] == "lumi" for m in ws["measurements"]
                   for p in m["config"].get("parameters", []))
    unc = info["signalUncertainty"] if info else None
    for c in srs:
        nbins = len(c["samples"][0]["data"])
        bkg = [sum(s["data"][i] for s in c["samples"]) for i in range(nbins)]
        sig = [round(1.5 * math.sqrt(max(b, 0.1) / n_sr), 4) for b in bkg]
        mods = [{"data": None, "name": "mu_SIG", "type": "normfactor"}]
        if has_lumi:
            mods.append({"data": None, "name": "lumi", "type": "lumi"})
        if unc:
            mods.append({"data": {"hi_data": [x * (1 + unc) for x in sig],
                                  "lo_data": [x * (1 - unc) for x in sig]},
                         "name": "signalUncertainty", "type": "histosys"})
        c["samples"].insert(0, {"data": sig, "modifiers": mods, "name": "bsm"})
    for m in ws["measurements"]:
        m["config"]["poi"] = "mu_SIG"
    n_listed = None
    if info:
        n_listed = sum(1 for r in info["regions"]
                       if not isinstance(r, dict) or r.get("type", "SR") == "SR")
    return {
        "sr_channels": [c["name"] for c in srs],
        "removed_channels": removed,
        "kept_control_regions": [n for n, k in kinds.items() if k == "CR" and n not in removed],
        "include_crs": keep_cr,
        "lumi_modifier": has_lumi,
        "signal_uncertainty": unc,
        "n_sr_bins": n_sr,
        "globalinfo_sr_entries": n_listed,
        "signal_total": round(sum(sum(c["samples"][0]["data"]) for c in srs), 4),
    }


def build(model, srcs):
    src = srcs[model["repo"]]
    psrc = srcs[model.get("patch_repo", model["repo"])]
    ws = src.json(model["workspace"])
    paths = [(src, model["workspace"])]
    recipe = model["recipe"]
    if recipe == "smodels":
        info = None
        if model.get("globalinfo"):
            fname = model["workspace"].rsplit("/", 1)[-1]
            info = read_globalinfo(src, model["globalinfo"], model["jsonfiles_key"], fname)
            paths.append((src, model["globalinfo"]))
        detail = smodels_signal(ws, info, model.get("include_crs"))
        how = ("constructed (SModelS recipe): sample 'bsm' with normfactor mu_SIG"
               + (" and lumi" if detail["lumi_modifier"] else "")
               + (f" and histosys signalUncertainty {detail['signal_uncertainty']}"
                  if detail["signal_uncertainty"] else "")
               + " in every SR channel, s_i = round(1.5*sqrt(max(B_i,0.1)/N_SR),4); "
               + ("CRs kept" if detail["include_crs"] else "CRs removed") + ", VRs removed; POI mu_SIG"
               + ("" if info else "; no globalInfo: region types from channel names"))
    else:
        if recipe == "patchset":
            ps = psrc.json(model["patchset"])
            patch = ps["patches"][0]
            ops, pname = patch["patch"], patch["metadata"]["name"]
            paths.append((psrc, model["patchset"]))
            how = f"published patch '{pname}' (first patch of the patchset)"
        elif recipe == "patchfile":
            ops = psrc.json(model["patch"])
            pname = model["patch"].rsplit("/", 1)[-1]
            paths.append((psrc, model["patch"]))
            how = f"published patch file {pname}"
        else:
            raise SystemExit(f"unknown recipe {recipe}")
        before = modifier_names(ws)
        apply_patch(ws, ops)
        detail = {"patch_name": pname, "patch_ops": sorted({o["op"] for o in ops})}
        if poi_of(ws) not in modifier_names(ws):
            added = sorted({m["name"] for c in ws["channels"] for s in c["samples"]
                            for m in s["modifiers"] if m["type"] == "normfactor"} - before)
            if len(added) != 1:
                raise SystemExit(f"{model['name']}: POI {poi_of(ws)} undefined, patch adds {added}")
            for m in ws["measurements"]:
                m["config"]["poi"] = added[0]
            how += f"; POI set to the patch's normfactor {added[0]}"
    dropped = drop_orphans(ws)
    if dropped:
        detail["dropped_orphan_observations"] = dropped
    return ws, paths, how, detail


# ----------------------------------------------------------------------------- summary

def count_parameters(ws):
    """Number of pyhf parameters (pyhf 0.7.6 conventions), without pyhf."""
    sizes = {}
    for c in ws["channels"]:
        nb = len(c["samples"][0]["data"])
        for s in c["samples"]:
            for m in s["modifiers"]:
                n = nb if m["type"] in ("shapesys", "staterror", "shapefactor") else 1
                sizes[m["name"]] = max(sizes.get(m["name"], 0), n)
    return sum(sizes.values())


def summary(ws):
    mods = {}
    for c in ws["channels"]:
        for s in c["samples"]:
            for m in s["modifiers"]:
                mods[m["type"]] = mods.get(m["type"], 0) + 1
    free_nf = sorted({m["name"] for c in ws["channels"] for s in c["samples"] for m in s["modifiers"]
                      if m["type"] == "normfactor"} - {poi_of(ws)})
    return {
        "poi": poi_of(ws),
        "npars": count_parameters(ws),
        "n_channels": len(ws["channels"]),
        "channels": {c["name"]: len(c["samples"][0]["data"]) for c in ws["channels"]},
        "nbins": sum(len(c["samples"][0]["data"]) for c in ws["channels"]),
        "n_samples": len({s["name"] for c in ws["channels"] for s in c["samples"]}),
        "modifier_entries": dict(sorted(mods.items())),
        "other_normfactors": free_nf,
    }


# ----------------------------------------------------------------------------- pyhf checks

def pyhf_validate(path):
    import pyhf
    ws = pyhf.Workspace(json.loads(pathlib.Path(path).read_text()))
    model = ws.model()
    return {"npars": model.config.npars, "poi": model.config.poi_name,
            "nbins": model.config.nmaindata, "n_auxdata": len(model.config.auxdata)}


def fit_one(path):
    """Run in a subprocess: observed-data MLE fit with pyhf's default (scipy SLSQP) optimizer."""
    import warnings
    warnings.filterwarnings("ignore")
    import pyhf
    ws = pyhf.Workspace(json.loads(pathlib.Path(path).read_text()))
    model = ws.model()
    data = ws.data(model)
    init = pyhf.tensorlib.astensor(model.config.suggested_init())
    nll_init = float(-2 * model.logpdf(init, data)[0])
    t0 = time.time()
    out = {}
    try:
        pars, twice_nll, res = pyhf.infer.mle.fit(data, model, return_fitted_val=True,
                                                  return_result_obj=True)
        nit = int(getattr(res, "nit", -1))
        out = {"converged": bool(res.success), "twice_nll": float(twice_nll),
               "twice_nll_init": nll_init, "poi_hat": float(pars[model.config.poi_index]),
               "nit": nit, "message": str(res.message),
               # scipy may report success without leaving the starting point
               "stuck_at_init": bool(nit <= 1 or float(twice_nll) >= nll_init - 1e-9)}
    except Exception as e:  # pyhf raises FailedMinimization when scipy reports failure
        out = {"converged": False, "error": f"{type(e).__name__}: {str(e)[:300]}"}
    out["seconds"] = round(time.time() - t0, 2)
    print(json.dumps(out))


def pyhf_fit(path, timeout):
    try:
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--_fit-one", str(path)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"converged": None, "error": f"not finished within {timeout} s"}
    try:
        return json.loads(r.stdout.decode().strip().splitlines()[-1])
    except Exception:
        return {"converged": None, "error": r.stderr.decode(errors="replace")[-500:]}


# ----------------------------------------------------------------------------- main

def main():
    repo_root = pathlib.Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(repo_root.parent / "stress-corpus"))
    ap.add_argument("--cache", default=str(repo_root.parent / "stress-corpus-cache"))
    ap.add_argument("--from-mirror", metavar="DIR")
    ap.add_argument("--only", action="append", metavar="NAME")
    ap.add_argument("--validate", action="store_true")
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--fit-timeout", type=float, default=90)
    ap.add_argument("--jobs", type=int, default=1, help="fits run at once (default 1)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--_fit-one", dest="fit_one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.fit_one:
        fit_one(args.fit_one)
        return
    models = [m for m in MODELS if not args.only or m["name"] in args.only]
    if args.only and len(models) != len(set(args.only)):
        raise SystemExit(f"unknown model(s): {set(args.only) - {m['name'] for m in models}}")
    if args.list:
        for m in models:
            print(f"{m['name']:48s} {m['recipe']:9s} {m['repo']}:{m['workspace']}")
        return
    srcs = open_sources(args, {r for m in models for r in (m["repo"], m.get("patch_repo", m["repo"]))})
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    for m in models:
        ws, paths, how, detail = build(m, srcs)
        f = out / f"{m['name']}.json"
        f.write_text(json.dumps(ws, indent=1, sort_keys=True) + "\n")
        e = {"name": m["name"], "file": f.name, "repository": f"https://github.com/{m['repo']}",
             "commit": SOURCES[m["repo"]],
             "sources": [{"repository": f"https://github.com/{s.repo}", "commit": s.commit,
                          "path": p} for s, p in paths],
             "recipe": m["recipe"],
             "signal": how, "note": m.get("note", "")}
        e.update(summary(ws))
        e["recipe_detail"] = detail
        if args.validate or args.fit:
            v = pyhf_validate(f)
            if v["npars"] != e["npars"] or v["nbins"] != e["nbins"] or v["poi"] != e["poi"]:
                raise SystemExit(f"{m['name']}: pyhf disagrees: {v} vs npars {e['npars']}")
            e["pyhf_n_auxdata"] = v["n_auxdata"]
        entries.append(e)
        print(f"{m['name']:48s} npars {e['npars']:4d} bins {e['nbins']:3d} channels "
              f"{e['n_channels']:3d}", file=sys.stderr)
    if args.fit:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            fits = pool.map(lambda e: pyhf_fit(out / e["file"], args.fit_timeout), entries)
            for e, fit in zip(entries, fits):
                e["fit_observed"] = fit
                print(f"{e['name']:48s} fit converged={fit.get('converged')} "
                      f"stuck_at_init={fit.get('stuck_at_init')} {fit.get('seconds', '')}s "
                      f"{fit.get('error', '')}", file=sys.stderr)
    manifest = {
        "description": "Stress corpus of published ATLAS pyhf likelihoods made ready to fit "
                       "(signal + background); built by scripts/stress_corpus.py of nextstat. "
                       "Signals are test inputs, not physics models.",
        "generator": "scripts/stress_corpus.py",
        "sources": {f"https://github.com/{r}": c for r, c in sorted(SOURCES.items())},
        "models": entries,
    }
    if args.fit:
        try:
            import numpy
            import pyhf
            import scipy
            manifest["fit_env"] = {"pyhf": pyhf.__version__, "numpy": numpy.__version__,
                                   "scipy": scipy.__version__, "call":
                                   "pyhf.infer.mle.fit(ws.data(model), model) with default "
                                   "scipy SLSQP, model = ws.model() (code4/code4p)"}
        except ImportError:
            pass
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{len(entries)} models -> {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
