"""Flow PDFs, measured (docs/benchmarks.md, "Flow PDFs"):

1. flow evaluation on the CPU: events per second of nextstat's log_prob (ONNX Runtime, the PyPI
   wheel's CPU provider) against the same torch module on the CPU, f32 and f64;
2. a flow-background fit (RQ-spline background + Gaussian signal, extended) on 10⁵ and 10⁶ events:
   whole nextstat.fit, the flow evaluated once per dataset;
3. where a CUDA GPU and PyTorch's CUDA build are present: the mixture NLL from log-probabilities a
   torch flow computed on the GPU, reduced where they lie (f32 device pointer), against the host
   paths (the log-probs copied to the host, then reduced on the GPU or on the CPU), 10³–10⁷ events.

    python bench/flow_bench.py [--out DIR] [--quick]

Prints a Markdown table and writes flow_bench.json to DIR (default: .)."""

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
import flowlib  # noqa: E402
import nextstat  # noqa: E402
from nextstat import unbinned  # noqa: E402


def best_of(f, repeat=5, min_time=0.2):
    """The fastest of `repeat` timings of f(), each averaged over enough calls for min_time."""
    f()
    calls, t = 1, 0.0
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            f()
        t = time.perf_counter() - start
        if t > min_time / repeat or calls > 1 << 16:
            break
        calls *= 4
    best = t / calls
    for _ in range(repeat - 1):
        start = time.perf_counter()
        for _ in range(calls):
            f()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def model_file(path, manifest, events):
    doc = {
        "metadata": {"hs3_version": "0.2"},
        "distributions": [
            {"name": "model", "type": "mixture_dist", "summands": ["signal", "background"], "coefficients": ["nsig", "nbkg"], "extended": True},
            {"name": "signal", "type": "gaussian_dist", "x": "x", "mean": "mean", "sigma": "width"},
            {"name": "background", "type": "nextstat:flow_dist", "manifest": str(manifest), "x": ["x"]},
        ],
        "likelihoods": [{"name": "L", "distributions": ["model"], "data": ["obs"]}],
        "analyses": [{"name": "A", "likelihood": "L", "parameters_of_interest": ["nsig"]}],
        "parameter_points": [{"name": "default_values", "parameters": [
            {"name": "nsig", "value": 100.0, "min": 0.0, "max": 1e7},
            {"name": "nbkg", "value": float(len(events)), "min": 0.0, "max": 1e8},
            {"name": "mean", "value": 6.0, "min": 3.0, "max": 8.0},
            {"name": "width", "value": 0.5, "min": 0.1, "max": 2.0}]}],
        "data": [{"name": "obs", "type": "unbinned", "axes": [{"name": "x", "min": 0.0, "max": 10.0}], "entries": [[float(v)] for v in events]}],
    }
    path.write_text(json.dumps(doc))
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp())
    results = {"threads": os.cpu_count(), "torch": torch.__version__}
    lines = []

    # 1. Flow evaluation on the CPU.
    coupling = flowlib.Coupling2D([5.0, 0.5], [2.0, 1.0])
    spline = flowlib.Spline1D(5.0, 2.5)
    lines += ["| flow (CPU) | events | nextstat (ONNX Runtime) | torch CPU | ratio |", "|---|---|---|---|---|"]
    evals = []
    n = 100_000 if args.quick else 1_000_000
    rng = np.random.default_rng(1)
    for name, module, box in (("coupling 2-d", coupling, [("x", 0.0, 10.0), ("y", -2.0, 3.0)]), ("RQ spline 1-d", spline, [("x", 0.0, 10.0)])):
        x = np.column_stack([rng.uniform(lo, hi, n) for _, lo, hi in box])
        for dtype in (torch.float32, torch.float64):
            manifest = unbinned.export_flow(module, tmp / f"{name[:5]}{dtype}", box, dtype=dtype)
            flow = unbinned.load_flow(manifest)
            ours = best_of(lambda: flow.log_prob(x), repeat=3)
            tx = torch.as_tensor(x, dtype=dtype)
            module.to(dtype)

            def theirs():
                with torch.no_grad():
                    module(tx)

            t_torch = best_of(theirs, repeat=3)
            row = {"flow": name, "dtype": str(dtype), "events": n, "nextstat_events_per_s": n / ours, "torch_events_per_s": n / t_torch}
            evals.append(row)
            lines.append(f"| {name}, {str(dtype)[6:]} | {n:.0e} | {n / ours / 1e6:.1f} M/s | {n / t_torch / 1e6:.1f} M/s | {t_torch / ours:.2f}× |")
        module.to(torch.float64)
    results["evaluation"] = evals

    # 2. Flow-background fits.
    lines += ["", "| flow-background fit (CPU) | events | nextstat.fit (whole) | of which the flow, once | evaluations |", "|---|---|---|---|---|"]
    manifest = unbinned.export_flow(spline, tmp / "fitspline", [("x", 0.0, 10.0)])
    flow = unbinned.load_flow(manifest)
    fits = []
    for n in ((100_000,) if args.quick else (100_000, 1_000_000)):
        events = np.concatenate([flow.sample(n, seed=5)[:, 0], np.random.default_rng(5).normal(6.2, 0.4, n // 100)])
        events = events[(events > 0) & (events < 10)]
        model = unbinned.load(model_file(tmp / f"fit{n}.json", manifest, events))
        start = time.perf_counter()
        fit = nextstat.fit(model)
        t_fit = time.perf_counter() - start
        t_flow = best_of(lambda: flow.log_prob(events[:, None]), repeat=1, min_time=0.0)
        fits.append({"events": len(events), "fit_s": t_fit, "flow_eval_s": t_flow, "converged": fit.converged, "evaluations": fit.result.get("evaluations") if hasattr(fit, "result") else None})
        lines.append(f"| RQ spline + Gaussian | {len(events):.2e} | {t_fit:.3f} s | {t_flow:.3f} s | converged={fit.converged} |")
    results["fits"] = fits

    # 3. The GPU reduction: zero-copy from a torch flow against the host paths.
    if torch.cuda.is_available() and nextstat.has_cuda():
        lines += ["", "| mixture NLL on the GPU | events | f32 pointer (torch tensor in place) | f64 pointer | host f64 → GPU | host → CPU reduce | torch .cpu() + CPU reduce | pointer vs .cpu()+CPU |", "|---|---|---|---|---|---|---|---|"]
        coupling.to("cuda", torch.float32)
        rows = []
        sizes = [1_000, 10_000, 100_000, 1_000_000] if args.quick else [1_000, 10_000, 100_000, 1_000_000, 10_000_000]
        for n in sizes:
            x = torch.rand(n, 2, device="cuda", dtype=torch.float32) * torch.tensor([10.0, 5.0], device="cuda") - torch.tensor([0.0, 2.0], device="cuda")
            with torch.no_grad():
                lp = coupling(x)
            logp32 = torch.stack([lp, torch.full_like(lp, -math.log(50.0))]).contiguous()
            logp64 = logp32.double()
            host = logp64.cpu().numpy()
            yields = np.array([0.1 * n, 0.9 * n])
            t32 = best_of(lambda: unbinned.mixture_nll(logp32, yields))
            t64 = best_of(lambda: unbinned.mixture_nll(logp64, yields))
            t_host_gpu = best_of(lambda: unbinned.mixture_nll(host, yields, device="cuda"))
            t_host_cpu = best_of(lambda: unbinned.mixture_nll(host, yields))
            t_copy_cpu = best_of(lambda: unbinned.mixture_nll(logp32.cpu().numpy(), yields))
            rows.append({"events": n, "f32_pointer_s": t32, "f64_pointer_s": t64, "host_to_gpu_s": t_host_gpu, "host_cpu_s": t_host_cpu, "copy_then_cpu_s": t_copy_cpu})
            lines.append(f"| 2 processes | {n:.0e} | {t32 * 1e6:.0f} µs | {t64 * 1e6:.0f} µs | {t_host_gpu * 1e6:.0f} µs | {t_host_cpu * 1e6:.0f} µs | {t_copy_cpu * 1e6:.0f} µs | {t_copy_cpu / t32:.1f}× |")
        results["gpu_reduction"] = rows
        results["gpu"] = torch.cuda.get_device_name(0)
    text = "\n".join(lines)
    print(text)
    (out / "flow_bench.md").write_text(text + "\n")
    (out / "flow_bench.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
