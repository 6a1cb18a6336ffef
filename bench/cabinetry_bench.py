"""cabinetry on pyhf against cabinetry on nextstat (`nextstat.cabinetry`), side by side in one
process: fit (with goodness of fit), ranking, upper limit and significance of one workspace,
best of REPEAT runs each. Usage:

    .venv/bin/python bench/cabinetry_bench.py [WORKSPACE.json ...] [--repeat 3]
"""

import argparse
import json
import logging
import time
from pathlib import Path

import cabinetry
import pyhf

from nextstat import cabinetry as ns_cabinetry

ROOT = Path(__file__).resolve().parents[1]


def best_of(repeat, fn):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("workspaces", nargs="*", default=[str(ROOT / "examples" / "analysis.json")])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    logging.getLogger("cabinetry").setLevel(logging.WARNING)
    logging.getLogger("pyhf").setLevel(logging.WARNING)
    pyhf.set_backend("numpy", "scipy")
    print("| workspace | step | cabinetry + pyhf | cabinetry + nextstat | ratio |")
    print("|---|---|---|---|---|")
    for path in args.workspaces:
        spec = json.loads(Path(path).read_text())
        mp, dp = cabinetry.model_utils.model_and_data(spec)
        mn, dn = ns_cabinetry.model_and_data(spec)
        fit_p, fit_n = cabinetry.fit.fit(mp, dp), ns_cabinetry.fit(mn, dn)
        steps = [
            ("fit + goodness of fit", lambda: cabinetry.fit.fit(mp, dp, goodness_of_fit=True), lambda: ns_cabinetry.fit(mn, dn, goodness_of_fit=True)),
            ("ranking", lambda: cabinetry.fit.ranking(mp, dp, fit_results=fit_p), lambda: ns_cabinetry.ranking(mn, dn, fit_results=fit_n)),
            ("upper limit", lambda: cabinetry.fit.limit(mp, dp), lambda: ns_cabinetry.limit(mn, dn)),
            ("significance", lambda: cabinetry.fit.significance(mp, dp), lambda: ns_cabinetry.significance(mn, dn)),
        ]
        name = Path(path).parent.name if Path(path).name == "workspace.json" else Path(path).stem
        for step, theirs, ours in steps:
            t_p, t_n = best_of(args.repeat, theirs), best_of(args.repeat, ours)
            print(f"| {name} ({mn.config.npars} p) | {step} | {t_p:.3f} s | {t_n:.4f} s | {t_p / t_n:.0f}× |", flush=True)


if __name__ == "__main__":
    main()
