"""Toy fits on published likelihoods: `nextstat hypotest-toys` at μ = 1 on every workspace of a
folder (the stress corpus of `scripts/stress_corpus.py`, `../shared/likelihoods/*/workspace.json`),
on each device asked, and a table of how many toy fits failed and the toy CLs per device.

    python bench/stress_toys.py [--toys 1000] [--devices cpu,cuda] [--bin target/release/nextstat]
                                [--out stress_toys.json] [--clip-negative-yields] [--jobs N]
                                [--timeout S] [--threads N] [--shard I/N] FOLDER_OR_FILE ...

A run with failed fits beyond 1% of an ensemble ends in the engine's refusal, whose message
carries the counts; below that, the result's `n_failed` does. Each run also writes its toys'
test statistics (a shard part, in a folder beside `--out`), and the table counts the toys
whose q differs between the first device and each other one by more than 1e-6 (compared toy by
toy where both kept the same toys). `--jobs N` runs N (model, device) runs at once: the devices'
seconds then overlap; `--threads N` gives each run N worker threads (nextstat's option).
`--shard I/N` fits only shard I of N of each ensemble (nextstat's option), for ensembles longer
than one sitting: the table then counts that shard's failed fits and differing toys and has no
CLs (a shard alone has none); `nextstat merge` of the N runs' parts (kept beside `--out`, named
by shard) gives the whole result. Writes JSON (one row per model and device) and prints a
Markdown table; where `--gpu auto` ran, the device it chose follows its seconds (the JSON rows
carry its reason).
"""

import argparse
import concurrent.futures
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


def run(binary, ws, toys, device, seed, timeout, parts, shard, extra=()):
    start = time.perf_counter()
    row = {"model": ws.parent.name if ws.name == "workspace.json" else ws.stem, "device": device, "toys": toys, "shard": shard}
    index, count = shard.split("/")
    suffix = "" if count == "1" else f".shard{index}of{count}"
    part = parts / f"{row['model']}.{device}{suffix}.part.json"
    part.unlink(missing_ok=True)
    row["part"] = str(part)
    try:
        proc = subprocess.run([binary, "hypotest-toys", str(ws), "--mu", "1", "--n-toys", str(toys), "--seed", str(seed), "--gpu", device,
                               "--shard", shard, "-o", str(part), *extra],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {**row, "seconds": timeout, "failed": None, "cls": None, "error": f"not finished in {timeout} s"}
    row["seconds"] = round(time.perf_counter() - start, 2)
    if proc.returncode == 0 and part.is_file():
        document = json.loads(part.read_text())
        result = document["result"]
        if "auto" in document:
            row["auto"] = document["auto"]
        ensembles = [result["signal_plus_background"], result["background_only"]]
        row.update(failed=sum(e["n_failed"] for e in ensembles), failures=[e["failures"] for e in ensembles])
        if count != "1":
            row["cls"] = None
            return row
        # The result as one process gives it: `nextstat merge` of the one part (CLs, or the
        # engine's refusal where too many fits failed).
        merged = subprocess.run([binary, "merge", str(part)], capture_output=True, text=True, timeout=timeout)
        row["cls"] = json.loads(merged.stdout).get("CLs_obs") if merged.returncode == 0 else None
        if merged.returncode != 0:
            row["error"] = merged.stderr.strip().splitlines()[-1] if merged.stderr.strip() else f"merge exit {merged.returncode}"
    else:
        failed = sum(int(m.group(1) or m.group(3)) for m in REFUSAL.finditer(proc.stderr))
        row.update(failed=failed, cls=None, error=proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}")
    return row


def differing_toys(first, other):
    """Toys whose q differs by more than 1e-6 between two runs' parts, and the largest |Δq|;
    None where the runs kept different toys (their failed fits differ) or one has no part."""
    try:
        a, b = (json.loads(Path(r["part"]).read_text())["result"] for r in (first, other))
    except (OSError, KeyError, ValueError):
        return None
    count, worst = 0, 0.0
    for ensemble in ("signal_plus_background", "background_only"):
        if a[ensemble]["failures"] != b[ensemble]["failures"]:
            return None
        deltas = [abs(p - q) for p, q in zip(a[ensemble]["teststats"], b[ensemble]["teststats"])]
        count += sum(d > 1e-6 for d in deltas)
        worst = max([worst, *deltas])
    return count, worst


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
    ap.add_argument("--jobs", type=int, default=1, help="(model, device) runs at once")
    ap.add_argument("--threads", type=int, help="worker threads per run (default: nextstat's, all cores)")
    ap.add_argument("--shard", default="0/1", help="fit shard I of N of each ensemble (nextstat's --shard)")
    args = ap.parse_args()
    if not re.fullmatch(r"\d+/\d+", args.shard) or not 0 <= int(args.shard.split("/")[0]) < int(args.shard.split("/")[1]):
        ap.error(f"--shard {args.shard!r}: expected I/N with 0 <= I < N")
    args.shard = "/".join(str(int(v)) for v in args.shard.split("/"))
    devices = args.devices.split(",")
    parts = Path(args.out).resolve().parent / (Path(args.out).stem + "-parts")
    parts.mkdir(parents=True, exist_ok=True)
    extra = ["--clip-negative-yields"] if args.clip_negative_yields else []
    if args.threads:
        extra += ["--threads", str(args.threads)]
    runs = [(ws, device) for ws in workspaces(args.paths) for device in devices]
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run, args.bin, ws, args.toys, device, args.seed, args.timeout, parts, args.shard, extra)
                   for ws, device in runs]
        rows = []
        for future in futures:
            rows.append(future.result())
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "part"}), file=sys.stderr, flush=True)
    Path(args.out).write_text(json.dumps(rows, indent=1))
    print(f"| model | {' | '.join(f'{d} failed fits | {d} CLs | {d} s' for d in devices)} |"
          + "".join(f" toys differing {devices[0]}/{d} |" for d in devices[1:]))
    print("|---|" + "---|---|---|" * len(devices) + "---|" * (len(devices) - 1))
    for model in dict.fromkeys(r["model"] for r in rows):
        cells, of = [], {}
        for d in devices:
            r = next(x for x in rows if x["model"] == model and x["device"] == d)
            of[d] = r
            if r["cls"] is not None:
                cls = f"{r['cls']:.4f}"
            elif "error" in r:
                cls = "not finished" if r["error"].startswith("not finished") else "refused"
            else:
                cls = f"shard {r['shard']}"
            chosen = f" ({r['auto']['device']})" if "auto" in r else ""
            cells += [str(r["failed"]), cls, f"{r['seconds']}{chosen}"]
        for d in devices[1:]:
            differing = differing_toys(of[devices[0]], of[d])
            cells.append("—" if differing is None else f"{differing[0]} (max |Δq| {differing[1]:.1e})")
        print(f"| {model} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
