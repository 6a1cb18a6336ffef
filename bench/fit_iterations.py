"""Iterations, evaluations and the minimum of `nextstat fit` on every shared and published model,
for two nextstat binaries side by side (an older build and this one): what a change of the
optimizer or its scaling does to the work per fit, and proof that no fit ends higher.

    python3 bench/fit_iterations.py OLD_NEXTSTAT [NEW_NEXTSTAT]      (from the repository root)

NEW defaults to target/release/nextstat. Prints a markdown table; a row is marked `HIGHER` where
the new minimum lies more than 1e-6 above the old one; "max |Δθ|/σ" is the largest move of a
parameter (matched by name) in units of its old uncertainty, and "max |Δσ|/σ" that of an
uncertainty; the last column says whether the two results are the same document (every field
but the timing: the same bits).
"""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def models():
    """Every pyhf workspace (patchsets and the manifest are not)."""
    paths = sorted((SHARED / "pyhf-ref" / "workspaces").glob("*.json"))
    paths += sorted((SHARED / "likelihoods").glob("*/workspace.json"))
    for path in paths:
        doc = json.loads(path.read_text())
        if isinstance(doc, dict) and "channels" in doc:
            yield path


def fit(binary, path):
    run = subprocess.run([binary, "fit", str(path), "--threads", "1"], capture_output=True, text=True)
    if run.returncode != 0:
        return None
    return json.loads(run.stdout)


def largest_moves(a, b):
    """max |Δθ|/σ and max |Δσ|/σ over the parameters of `b`, matched to `a`'s by name."""
    old = dict(zip(a["parameter_names"], zip(a["bestfit"], a["uncertainties"] or [])))
    moved, widened = 0.0, 0.0
    for k, name in enumerate(b["parameter_names"]):
        theta, sigma = old.get(name, (None, None))
        if theta is None or not sigma or not b["uncertainties"]:
            continue
        moved = max(moved, abs(b["bestfit"][k] - theta) / sigma)
        widened = max(widened, abs(b["uncertainties"][k] - sigma) / sigma)
    return moved, widened


def main(old, new):
    print("| model | iterations old → new | evaluations old → new | twice_nll old | new − old "
          "| max \\|Δθ\\|/σ | max \\|Δσ\\|/σ | same bits |")
    print("|---|---|---|---|---|---|---|---|")
    totals = [0, 0, 0, 0]
    identical = 0
    for path in models():
        a, b = fit(old, path), fit(new, path)
        name = path.parent.name if path.name == "workspace.json" else path.stem
        if a is None or b is None:
            print(f"| {name} | not a fit ({'old' if a is None else 'new'} refused it) | | | | | | |")
            continue
        delta = b["twice_nll"] - a["twice_nll"]
        flag = " HIGHER" if delta > 1e-6 else ""
        same = {k: v for k, v in a.items() if k != "timing"} == {k: v for k, v in b.items() if k != "timing"}
        identical += same
        moved, widened = largest_moves(a, b)
        print(f"| {name} | {a['iterations']} → {b['iterations']} | {a['evaluations']} → {b['evaluations']} "
              f"| {a['twice_nll']:.6f} | {delta:+.1e}{flag} | {moved:.1e} | {widened:.1e} "
              f"| {'yes' if same else 'no'} |")
        for k, v in enumerate([a["iterations"], b["iterations"], a["evaluations"], b["evaluations"]]):
            totals[k] += v
    print(f"| all | {totals[0]} → {totals[1]} | {totals[2]} → {totals[3]} | | | | | {identical} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else str(REPO / "target" / "release" / "nextstat"))
