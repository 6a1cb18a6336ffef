"""Toy fits on published likelihoods: `nextstat hypotest-toys` at μ = 1 on every workspace of a
folder (the stress corpus of `scripts/stress_corpus.py`, `../shared/likelihoods/*/workspace.json`),
on each device asked, and a table of how many toy fits failed and the toy CLs per device.

    python bench/stress_toys.py [--toys 1000] [--devices cpu,cuda] [--bin target/release/nextstat]
                                [--out stress_toys.json] [--clip-negative-yields] FOLDER_OR_FILE ...

A run with failed fits beyond 1% of an ensemble ends in the engine's refusal, whose message
carries the counts; below that, the result's `n_failed` does. Writes JSON (one row per model
and device) and prints a Markdown table.
"""

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

REFUSAL = re.compile(r"(\d+) of (\d+) signal-plus-background toys|(\d+) of (\d+) background-only toys")


def workspaces(paths):
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob("*/workspace.json")) or sorted(q for q in p.glob("*.json") if q.name != "MANIFEST.json")
            yield from found
        else:
            yield p


def run(binary, ws, toys, device, seed, timeout, extra=()):
    start = time.perf_counter()
    row = {"model": ws.parent.name if ws.name == "workspace.json" else ws.stem, "device": device, "toys": toys}
    try:
        proc = subprocess.run([binary, "hypotest-toys", str(ws), "--mu", "1", "--n-toys", str(toys), "--seed", str(seed), "--gpu", device, *extra],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {**row, "seconds": timeout, "failed": None, "cls": None, "error": f"not finished in {timeout} s"}
    row["seconds"] = round(time.perf_counter() - start, 2)
    if proc.returncode == 0:
        result = json.loads(proc.stdout)
        row.update(failed=result.get("n_failed", 0), cls=result.get("CLs_obs"), failures=result.get("failures"))
    else:
        failed = sum(int(m.group(1) or m.group(3)) for m in REFUSAL.finditer(proc.stderr))
        row.update(failed=failed, cls=None, error=proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}")
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--toys", type=int, default=1000)
    ap.add_argument("--devices", default="cpu")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bin", default=str(Path(__file__).resolve().parents[1] / "target" / "release" / "nextstat"))
    ap.add_argument("--out", default="stress_toys.json")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds one run may take")
    ap.add_argument("--clip-negative-yields", action="store_true",
                    help="clip each sample's yield at zero as ROOT does (nextstat's option of that name)")
    args = ap.parse_args()
    rows = []
    for ws in workspaces(args.paths):
        for device in args.devices.split(","):
            extra = ["--clip-negative-yields"] if args.clip_negative_yields else []
            row = run(args.bin, ws, args.toys, device, args.seed, args.timeout, extra)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    Path(args.out).write_text(json.dumps(rows, indent=1))
    devices = args.devices.split(",")
    print(f"| model | {' | '.join(f'{d} failed fits | {d} CLs | {d} s' for d in devices)} |")
    print("|---|" + "---|---|---|" * len(devices))
    for model in dict.fromkeys(r["model"] for r in rows):
        cells = []
        for d in devices:
            r = next(x for x in rows if x["model"] == model and x["device"] == d)
            cls = "refused" if r["cls"] is None else f"{r['cls']:.4f}"
            cells += [str(r["failed"]), cls, str(r["seconds"])]
        print(f"| {model} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
