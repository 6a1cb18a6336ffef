"""Markdown table from bench/gpu_run.sh's results folder (gpu_bench.jsonl, optional pyhf_jax.json)."""

import json
import sys
from pathlib import Path

out = Path(sys.argv[1])
rows = [json.loads(line) for line in (out / "gpu_bench.jsonl").read_text().splitlines() if line.startswith("{")]
peer = {}
if (out / "pyhf_jax.json").exists():
    for line in (out / "pyhf_jax.json").read_text().splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            peer[Path(r["workspace"]).name] = r
if rows:
    print(f"GPU: {rows[0]['gpu']}; CPU: {rows[0]['cpu_threads']} threads on the same machine\n")
print("| model | params | task | CPU | CUDA | CPU/CUDA | pyhf+JAX (GPU) |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    name = Path(r["workspace"]).name.replace(".json", "")
    p = peer.get(Path(r["workspace"]).name, {})
    c, g = r["cpu"], r["cuda"]
    def row(task, cpu, gpu, pyhf=None):
        pyhf_s = f"{pyhf:.3g} s" if pyhf else "—"
        print(f"| {name} | {r['n_params']} | {task} | {cpu:.3g} s | {gpu:.3g} s | {cpu / gpu:.2f}× | {pyhf_s} |")
    row("MLE fit", c["fit_s"], g["fit_s"], p.get("fit_s"))
    row("profile scan, 21 points", c["scan21_s"], g["scan21_s"], p.get("scan21_s"))
    row("ranking (every ±σ refit)", c["ranking_s"], g["ranking_s"], p.get("ranking_s"))
    if "limit_scan21_s" in c:
        row("upper limit, 21-point μ grid", c["limit_scan21_s"], g["limit_scan21_s"])
    row(f"toy CLs at μ={r['mu']}, 1000 toys/hypothesis", c["toys_per_1000_s"], g["toys_per_1000_s"], p.get("toys_per_1000_s"))
    if "cuda_big" in r:
        b = r["cuda_big"]
        print(f"| {name} | {r['n_params']} | toy CLs, {b['toys']} toys/hypothesis (CUDA) | — | {b['toys_s']:.3g} s | — | — |")
    if "cuda_all" in r:
        a = r["cuda_all"]
        same = "the same bits" if a["cls_bit_identical"] else "DIFFERENT CLs"
        print(f"| {name} | {r['n_params']} | the same on {a['gpus']} GPUs (`--gpu cuda:all`) | — | {a['toys_s']:.3g} s | {a['speedup']:.2f}× over 1 GPU, {same} | — |")
        print(f"| {name} | {r['n_params']} | ranking on {a['gpus']} GPUs | — | {a['ranking_s']:.3g} s | | |")
    print(f"| {name} | {r['n_params']} | CLs_obs (1000 toys) | {c['cls_obs']:.4f} | {g['cls_obs']:.4f} | | |")
    print(f"| {name} | {r['n_params']} | `--gpu auto` picks | fit: {r['auto_for_fit']} | toys: {r['auto_for_toys']} | | |")
if (out / "cold_start.txt").exists():
    print("\nWhole `nextstat fit` processes on tHq, wall seconds (bench/cold_start.sh):\n")
    print("```")
    print((out / "cold_start.txt").read_text().split("cpu     f64")[0].rstrip())
    print("```")
