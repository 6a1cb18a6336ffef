#!/usr/bin/env python3
"""The published-likelihood table of docs/validation.md: nextstat (release CLI) on every model of
../shared/likelihoods against the pyhf 0.7.6 numbers stored beside it.

    cargo build --release && python3 bench/corpus_table.py [--bin target/release/nextstat]

Prints a Markdown table: twice_nll at pyhf's init, the fit minimum against pyhf's scipy and minuit
minima, CLs_obs at μ = 1, the observed upper limit, and the wall time of one `nextstat hypotest`
process; with --pyhf (run with the test venv's python), also pyhf's `infer.hypotest` (numpy,
scipy, default settings) timed in this process, and their ratio."""

import argparse
import json
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(binary, *args):
    start = time.perf_counter()
    out = subprocess.run([binary, *map(str, args)], capture_output=True, text=True, check=True).stdout
    return json.loads(out), time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default=str(ROOT / "target" / "release" / "nextstat"))
    parser.add_argument("--likelihoods", default=str(ROOT.parent / "shared" / "likelihoods"))
    parser.add_argument("--pyhf", action="store_true", help="time pyhf's hypotest too")
    args = parser.parse_args()
    header = "| model | pars | twice_nll at init: ours − pyhf | fit min: ours − min(scipy, minuit) | converged | CLs_obs μ=1: ours / pyhf | obs. limit | nextstat hypotest |"
    print(header + (" pyhf hypotest | ratio |" if args.pyhf else ""))
    print("|---" * (header.count("|") - 1 + (2 if args.pyhf else 0)) + "|")
    for ref_path in sorted(Path(args.likelihoods).glob("*/reference.json")):
        ref = json.loads(ref_path.read_text())
        ws = ref_path.parent / "workspace.json"
        digest_ok = subprocess.run([args.bin, "digest", ref_path.parent / "bkgonly.json"], capture_output=True,
                                   text=True).stdout.strip() == "sha256:" + ref["digest_bkgonly"]["value"]
        init, _ = run(args.bin, "eval", ws)
        fit, _ = run(args.bin, "fit", ws)
        hypo, seconds = run(args.bin, "hypotest", ws, "--mu", "1")
        limit, _ = run(args.bin, "upper-limit", ws)
        best = min(ref["fit_scipy"]["twice_nll"], ref["fit_minuit"]["twice_nll"])
        print(f"| `{ref['name']}`{'' if digest_ok else ' (digest differs!)'} | {ref['npars']} "
              f"| {init['twice_nll'] - ref['at_init']['twice_nll']:+.1e} | {fit['twice_nll'] - best:+.2e} "
              f"| {fit['converged']} | {hypo['CLs_obs']:.7f} / {ref['hypotest_mu1']['CLs_obs']:.7f} "
              f"| {limit['obs']:.4g} | {seconds * 1e3:.0f} ms |", end="")
        if args.pyhf:
            theirs = pyhf_hypotest_seconds(ws)
            print(f" {theirs:.2f} s | {theirs / seconds:.0f}× |", end="")
        print()


def pyhf_hypotest_seconds(path):
    import pyhf

    pyhf.set_backend("numpy", pyhf.optimize.scipy_optimizer())
    ws = pyhf.Workspace(json.loads(Path(path).read_text()))
    model = ws.model()
    data = ws.data(model)
    start = time.perf_counter()
    pyhf.infer.hypotest(1.0, data, model, test_stat="qtilde", return_expected_set=True)
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
