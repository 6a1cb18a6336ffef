"""Every shared CMS Combine card on each device against the CPU: the fit's twice_nll, the
asymptotic CLs at r = 1 and, on the template cards, toy CLs with the failed toy fits and the time.
Each number is a whole `nextstat` process, as a user runs it.

    python3 bench/combine_devices.py [--bin target/release/nextstat] [--devices cuda,vulkan]
                                     [--toys 500] [--out combine_devices.json] [--cards A,B]

Prints a markdown table (differences against the CPU) and writes every row as JSON.
"""

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("NEXTSTAT_COMBINE", ROOT.parent / "shared" / "combine"))


def mass_of(card):
    """text2workspace's -m, where the reference's command gives one."""
    words = card["commands"]["text2workspace"].split()
    return ["-m", words[words.index("-m") + 1]] if "-m" in words else []


def run(command):
    """(the JSON result or None, the last stderr line, seconds)."""
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return None, lines[-1] if lines else f"exit {proc.returncode}", seconds
    return json.loads(proc.stdout), None, seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=str(ROOT / "target" / "release" / "nextstat"))
    ap.add_argument("--devices", default="cuda,vulkan")
    ap.add_argument("--toys", type=int, default=500, help="toys per hypothesis on template cards")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--out", default="combine_devices.json")
    ap.add_argument("--cards", help="comma-separated card ids (default: every card)")
    args = ap.parse_args()
    devices = ["cpu"] + [d for d in args.devices.split(",") if d and d != "cpu"]
    reference = json.loads((CORPUS / "reference.json").read_text())["cards"]
    rows = []
    for card_id in args.cards.split(",") if args.cards else sorted(reference):
        card = reference[card_id]
        base = [str(CORPUS / card["card"])] + mass_of(card)
        row = {"card": card_id, "templates": bool(card["shape_files"])}
        for device in devices:
            gpu = ["--gpu", device]
            fit, error, _ = run([args.bin, "fit", *base, *gpu])
            row[f"{device}_twice_nll"] = fit["twice_nll"] if fit else error
            cls, error, _ = run([args.bin, "hypotest", *base, "--mu", "1", *gpu])
            row[f"{device}_cls"] = cls["CLs_obs"] if cls else error
            if row["templates"]:
                toys, error, seconds = run([args.bin, "hypotest-toys", *base, "--mu", "1", "--n-toys",
                                            str(args.toys), "--seed", str(args.seed), *gpu])
                row[f"{device}_toy_cls"] = toys["CLs_obs"] if toys else error
                row[f"{device}_toy_failed"] = toys.get("n_failed", 0) if toys else None
                row[f"{device}_toy_seconds"] = round(seconds, 2)
        rows.append(row)
        print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps(rows, indent=1))

    def diff(row, device, key):
        a, b = row[f"cpu_{key}"], row[f"{device}_{key}"]
        if isinstance(a, float) and isinstance(b, float):
            return f"{abs(b - a):.1e}"
        return "refused on both" if a == b else f"CPU: {a} / {device}: {b}"

    for device in devices[1:]:
        print(f"\n| card | twice_nll, |{device} − CPU| | asymptotic CLs, |Δ| | toy CLs CPU / {device} "
              f"| failed toy fits CPU / {device} (of {2 * args.toys}) | toy seconds CPU / {device} |")
        print("|---|---|---|---|---|---|")
        for row in rows:
            toys = ("—", "—", "—")
            if row["templates"]:
                a, b = row["cpu_toy_cls"], row[f"{device}_toy_cls"]
                shown = (f"{a:.4f} / {b:.4f}" if isinstance(a, float) and isinstance(b, float)
                         else f"{a} / {b}")
                toys = (shown, f"{row['cpu_toy_failed']} / {row[f'{device}_toy_failed']}",
                        f"{row['cpu_toy_seconds']} / {row[f'{device}_toy_seconds']}")
            print(f"| {row['card']} | {diff(row, device, 'twice_nll')} | {diff(row, device, 'cls')} | "
                  + " | ".join(toys) + " |")


if __name__ == "__main__":
    main()
