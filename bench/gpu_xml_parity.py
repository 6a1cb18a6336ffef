"""CPU against CUDA on every HistFactory XML set of ../shared/histfactory-xml, read with ROOT's
semantics (the default) or pyhf's (`--semantics pyhf`: the sets pyhf reads), or on every CMS
Combine datacard of ../shared/combine (`--combine`; cards whose model is not built are listed as
refused alike): `nextstat fit`, `hypotest --mu 1` and `hypotest-toys --mu 1 --n-toys N` of each
model on both devices, and the largest relative difference of twice_nll, the best fit, CLs and
the toys' CLs. Run on the GPU machine:

    python3 bench/gpu_xml_parity.py --bin dist-gpu/nextstat --sets PATH/histfactory-xml [--toys 1000] [--semantics pyhf]
    python3 bench/gpu_xml_parity.py --bin dist-gpu/nextstat --combine PATH/combine [--toys 1000]

Prints a Markdown table; exits 1 when a difference exceeds 1e-6 or a run fails on one device only.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path


def run(binary, args, device):
    out = subprocess.run([binary, *args, "--gpu", device], capture_output=True, text=True)
    if out.returncode != 0:
        return None, out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"
    return json.loads(out.stdout), None


def rel(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-300) if a != b else 0.0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", default="target/release/nextstat")
    p.add_argument("--sets", default="../shared/histfactory-xml")
    p.add_argument("--toys", type=int, default=1000)
    p.add_argument("--semantics", default="root", choices=["root", "pyhf"])
    p.add_argument("--combine", help="the folder of the Combine corpus: compare its datacards instead")
    a = p.parse_args()
    rows = []
    if a.combine:
        cards = json.loads((Path(a.combine) / "reference.json").read_text())["cards"]
        for name, card in sorted(cards.items()):
            rows.append(compare(a, str(Path(a.combine) / card["card"]), [], name))
    else:
        sets = Path(a.sets)
        for reference in sorted(sets.glob("*/*/reference.json")) + sorted(sets.glob("*/reference.json")):
            for top in json.loads(reference.read_text())["tops"]:
                if "pyhf_readxml_error" in top and a.semantics == "pyhf":
                    continue
                xml = str(reference.parent / top["top"])
                for measurement in [m["name"] for m in top.get("measurements", [])] or [None]:
                    chosen = ["--semantics", a.semantics] + (["--measurement", measurement] if measurement else [])
                    rows.append(compare(a, xml, chosen, f"{reference.parent.name}:{top['top']} {measurement or ''}".strip()))
    worst = max([0.0] + [d for _, diffs, _, _ in rows for _, d in diffs])
    print("| model | fit (Δ) | hypotest (Δ CLs) | toys (Δ CLs) | notes |\n|---|---|---|---|---|")
    for name, diffs, errors, refusals in rows:
        cells = {v: f"{d:.1e}" for v, d in diffs}
        print(f"| {name} | {cells.get('fit', '—')} | {cells.get('hypotest', '—')} | {cells.get('hypotest-toys', '—')} | {'; '.join(errors + refusals)} |")
    print(f"\nlargest difference: {worst:.2e} over {len(rows)} models")
    failed = sum(bool(errors) for _, _, errors, _ in rows)
    if failed:
        print(f"{failed} models with errors")
    sys.exit(0 if worst <= 1e-6 and not failed else 1)


def compare(a, model, options, name):
    """One model (a file and its options) on both devices: (name, diffs, errors, refusals)."""
    diffs, errors, refusals = [], [], []
    for verb in (["fit"], ["hypotest", "--mu", "1"], ["hypotest-toys", "--mu", "1", "--n-toys", str(a.toys), "--seed", "1"]):
        args = [verb[0], model, *options, *verb[1:]]
        cpu, e1 = run(a.bin, args, "cpu")
        cuda, e2 = run(a.bin, args, "cuda")
        if e1 and e1 == e2:
            # Both devices refuse the request alike (as pyhf or ROOT's reading does).
            refusals.append(f"{verb[0]}: both refuse ({e1[:90]}…)")
            continue
        if e1 or e2:
            errors.append(f"{verb[0]}: cpu {e1 or 'ok'} / cuda {e2 or 'ok'}")
            continue
        if verb[0] == "fit":
            d = max([rel(cpu["twice_nll"], cuda["twice_nll"])] + [abs(x - y) for x, y in zip(cpu["bestfit"], cuda["bestfit"])])
        elif verb[0] == "hypotest":
            d = max(rel(cpu["CLs_obs"], cuda["CLs_obs"]), *(abs(x - y) for x, y in zip(cpu["CLs_exp"], cuda["CLs_exp"])))
        else:
            d = max(abs(cpu["CLs_obs"] - cuda["CLs_obs"]), *(abs(x - y) for x, y in zip(cpu["CLs_exp"], cuda["CLs_exp"])))
        diffs.append((verb[0], d))
    return (name, diffs, errors, refusals)


if __name__ == "__main__":
    main()
