"""pyhf's documentation notebooks (docs/examples/notebooks of a pyhf checkout) executed cell by cell
as a user runs them, twice: on pyhf, and on nextstat with only the import swapped
(`nextstat.install_as_pyhf()` before the first cell). Counts the code cells that run under each,
and compares every number the cells print (their output and the value of their last expression)
where both ran: differences beyond a relative 1e-4 are listed, cell by cell.

    python scripts/pyhf_notebooks.py PYHF_CHECKOUT [--out pyhf-notebooks.json] [--timeout 120]
                                     [NOTEBOOK ...]

Each notebook runs in its own interpreter, in a copy of its folder (its data files beside it);
IPython magics and shell lines (`%…`, `!…`) are skipped, as they are no Python (a `%%timeit`
cell's body runs once). Both runs seed numpy's global generator alike. A cell that raises, or
runs past the timeout, has failed; the later cells still run. Writes JSON and prints
a Markdown table.
"""

import argparse
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

RUNNER = r'''
import ast, contextlib, io, json, signal, sys, traceback
import matplotlib
matplotlib.use("Agg")
notebook, mode, out = sys.argv[1], sys.argv[2], sys.argv[3]
timeout = int(sys.argv[4])
if mode == "nextstat":
    import nextstat
    nextstat.install_as_pyhf()
# Both runs start from one state of numpy's global generator: cells that draw random inputs
# without a seed (and pyhf's toys, which draw from it) see the same numbers in both.
import numpy
numpy.random.seed(0)
cells = [c for c in json.load(open(notebook))["cells"] if c.get("cell_type") == "code"]
namespace = {"__name__": "__main__"}
results = []

def expired(*_):
    raise TimeoutError(f"cell ran past {timeout} s")

signal.signal(signal.SIGALRM, expired)
for cell in cells:
    source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    lines = [l for l in source.splitlines() if not l.lstrip().startswith(("%", "!"))]
    code = "\n".join(lines)
    printed = io.StringIO()
    entry = {"ok": True, "output": "", "error": None}
    try:
        tree = ast.parse(code)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        signal.alarm(timeout)
        with contextlib.redirect_stdout(printed):
            exec(compile(tree, "<cell>", "exec"), namespace)
            if last is not None:
                value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace)
                if value is not None:
                    print(repr(value))
    except BaseException as e:  # noqa: B036 (a cell may raise anything, SystemExit included)
        entry["ok"] = False
        entry["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
    finally:
        signal.alarm(0)
    entry["output"] = printed.getvalue()[-20000:]
    results.append(entry)
json.dump(results, open(out, "w"))
'''

NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
# Object addresses in reprs (`<… object at 0x7f…>`) are no results.
ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def numbers(text):
    return [float(x) for x in NUMBER.findall(ADDRESS.sub("", text))]


def run(notebook, mode, timeout, work):
    folder = Path(tempfile.mkdtemp(dir=work))
    shutil.copytree(notebook.parent, folder, dirs_exist_ok=True)
    out = folder / f"{mode}.json"
    try:
        subprocess.run([sys.executable, "-c", RUNNER, str(folder / notebook.name), mode, str(out), str(timeout)],
                       cwd=folder, capture_output=True, text=True, timeout=timeout * 40)
    except subprocess.TimeoutExpired:
        pass
    if not out.exists():
        return None
    return json.loads(out.read_text())


def compare(theirs, ours):
    """Cells that printed numbers in both runs whose numbers differ beyond 1e-4 (relative)."""
    differences = []
    for index, (a, b) in enumerate(zip(theirs, ours)):
        if not (a["ok"] and b["ok"]):
            continue
        x, y = numbers(a["output"]), numbers(b["output"])
        if len(x) != len(y):
            if x or y:
                differences.append({"cell": index, "what": f"{len(x)} numbers under pyhf, {len(y)} under nextstat"})
            continue
        worst = max((abs(p - q) / max(abs(p), 1e-12) for p, q in zip(x, y) if not (math.isnan(p) and math.isnan(q))), default=0.0)
        if worst > 1e-4:
            pairs = [(p, q) for p, q in zip(x, y) if abs(p - q) > 1e-4 * max(abs(p), 1e-12)][:4]
            differences.append({"cell": index, "what": f"relative difference up to {worst:.2e}: {pairs}"})
    return differences


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkout")
    ap.add_argument("notebooks", nargs="*")
    ap.add_argument("--out", default="pyhf-notebooks.json")
    ap.add_argument("--timeout", type=int, default=120, help="seconds one cell may take")
    args = ap.parse_args()
    root = Path(args.checkout) / "docs" / "examples" / "notebooks"
    notebooks = [Path(n) for n in args.notebooks] or sorted(root.rglob("*.ipynb"))
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for notebook in notebooks:
            theirs = run(notebook, "pyhf", args.timeout, work)
            ours = run(notebook, "nextstat", args.timeout, work)
            if theirs is None or ours is None:
                rows.append({"notebook": notebook.name, "error": "the runner did not finish"})
                continue
            both = sum(a["ok"] and b["ok"] for a, b in zip(theirs, ours))
            rows.append({
                "notebook": str(notebook.relative_to(root)) if root in notebook.parents else notebook.name,
                "cells": len(theirs), "pyhf": sum(a["ok"] for a in theirs), "nextstat": sum(b["ok"] for b in ours),
                "both": both,
                "only_pyhf": [{"cell": i, "error": b["error"]} for i, (a, b) in enumerate(zip(theirs, ours)) if a["ok"] and not b["ok"]],
                "differences": compare(theirs, ours),
            })
            print(f"{rows[-1]['notebook']}: {rows[-1]['pyhf']} / {rows[-1]['nextstat']} of {rows[-1]['cells']}", file=sys.stderr)
    Path(args.out).write_text(json.dumps(rows, indent=1))
    ok = [r for r in rows if "cells" in r]
    print("| notebook | code cells | run under pyhf | under nextstat | both | numbers differing > 1e-4 |")
    print("|---|---|---|---|---|---|")
    for r in ok:
        print(f"| {r['notebook']} | {r['cells']} | {r['pyhf']} | {r['nextstat']} | {r['both']} | {len(r['differences'])} cells |")
    pyhf_cells = sum(r["pyhf"] for r in ok)
    both_cells = sum(r["both"] for r in ok)
    print(f"| **all** | {sum(r['cells'] for r in ok)} | {pyhf_cells} | {sum(r['nextstat'] for r in ok)} | {both_cells} "
          f"({100 * both_cells / max(pyhf_cells, 1):.0f}% of pyhf's) | {sum(len(r['differences']) for r in ok)} cells |")
    for r in rows:
        if "error" in r:
            print(f"- {r['notebook']}: {r['error']}")
        for miss in r.get("only_pyhf", []):
            print(f"- {r['notebook']} cell {miss['cell']} runs under pyhf only: {miss['error']}")
        for d in r.get("differences", []):
            print(f"- {r['notebook']} cell {d['cell']}: {d['what']}")


if __name__ == "__main__":
    main()
