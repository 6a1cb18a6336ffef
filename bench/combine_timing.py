"""nextstat's CLI against CMS Combine's own wall times on the shared Combine cards, step by step.

Each nextstat command is a whole process (start-up, card and ROOT files read, the work), as each
Combine step in ../shared/combine/reference.json (`timings_s`, measured on a 2-core machine) is
a whole `combine` process on the workspace text2workspace made (its own 3–4 s not counted).
Prints a markdown table: per card and step, nextstat's median of `--repeat` runs, Combine's time,
and the ratio.

    python3 bench/combine_timing.py --bin target/release/nextstat [--repeat 5]
"""

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("NEXTSTAT_COMBINE", ROOT.parent / "shared" / "combine"))
# Combine's step → nextstat's command (arguments after the card).
STEPS = {
    "singles": ["fit"],
    "scan": ["scan"],  # 21 points, as Combine's scan
    "asymptotic": ["upper-limit"],
    "significance_obs": ["significance"],
}


def mass_of(card):
    """text2workspace's -m, where the reference's command gives one."""
    words = card["commands"]["text2workspace"].split()
    return words[words.index("-m") + 1] if "-m" in words else None


def timed(command, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", default=str(ROOT / "target" / "release" / "nextstat"))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cards", help="comma-separated card ids (default: every card nextstat builds)")
    args = parser.parse_args()
    reference = json.loads((CORPUS / "reference.json").read_text())["cards"]
    ids = args.cards.split(",") if args.cards else sorted(reference)
    print("| card | step | nextstat (s) | Combine (s) | Combine / nextstat |")
    print("|---|---|---|---|---|")
    for card_id in ids:
        card = reference[card_id]
        path = CORPUS / card["card"]
        base = [args.bin]
        mass = mass_of(card)
        extra = ["-m", mass] if mass else []
        probe = subprocess.run(base + ["fit", str(path)] + extra, capture_output=True, text=True)
        if probe.returncode != 0:
            continue  # a card nextstat refuses (docs/combine.md lists what is not built)
        for step, verb in STEPS.items():
            theirs = card["timings_s"].get(step)
            if theirs is None:
                continue
            ours = timed(base + [verb[0], str(path)] + verb[1:] + extra, args.repeat)
            ratio = theirs / ours
            shown = f"{ratio:.1f}×" if ratio < 10 else f"{ratio:.0f}×"
            print(f"| {card_id} | {step} | {ours:.3f} | {theirs:.2f} | {shown} |")


if __name__ == "__main__":
    main()
