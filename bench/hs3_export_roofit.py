"""RooFit 6.40 fits of `nextstat export-hs3` files: every shared pyhf workspace and published
likelihood, exported, imported by RooFit and fitted with Minuit2 from the file's start; the table
compares RooFit's minimum (less the file's constant, taken at nextstat's start) with nextstat's.
The suite (tests/python/test_hs3_export.py) asserts the same; this prints the table with the
times.

    NEXTSTAT_BIN=target/release/nextstat python bench/hs3_export_roofit.py [--only NAME ...]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))
os.environ.setdefault("NEXTSTAT_BIN", str(REPO / "target" / "release" / "nextstat"))

import nextstat  # noqa: E402
from test_hs3_export import SOURCES, names_in_hs3, roofit_fit, roofit_nll, source_id  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    rows = []
    for source in SOURCES:
        name = source_id(source)
        if args.only and name not in args.only:
            continue
        spec = json.loads(source.read_text())
        workspace = nextstat.Workspace(spec)
        model = workspace.model(clip_negative_yields=True)
        data = workspace.data(model)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "model.hs3.json"
            subprocess.run([os.environ["NEXTSTAT_BIN"], "export-hs3", str(source), "-o", str(out)], check=True)
            ws, mc, nll = roofit_nll(out)
        variables = {n: ws.var(h) for n, h in names_in_hs3(model).items()}
        init = model.config.suggested_init()
        for n, v in zip(model.config.par_names, init):
            variables[n].setVal(float(v))
        constant = nll.getVal() - model.twice_nll(np.array(init), data) / 2
        started = time.perf_counter()
        best = nextstat.fit(model)
        ours_seconds = time.perf_counter() - started
        started = time.perf_counter()
        theirs = roofit_fit(nll) - constant
        roofit_seconds = time.perf_counter() - started
        ours = best.twice_nll / 2
        rows.append((name, model.config.npars, ours, theirs - ours, ours_seconds, roofit_seconds))
        print(f"| {name} | {model.config.npars} | {ours:.6f} | {theirs - ours:+.2e} | {ours_seconds:.3f} | {roofit_seconds:.1f} |", flush=True)
    print("\n| model | parameters | nextstat NLL at its minimum | RooFit's minimum − nextstat's | nextstat fit (s) | RooFit fit (s) |")
    print("|---|---|---|---|---|---|")
    for name, n, ours, diff, a, b in rows:
        print(f"| {name} | {n} | {ours:.6f} | {diff:+.2e} | {a:.3f} | {b:.1f} |")


if __name__ == "__main__":
    main()
