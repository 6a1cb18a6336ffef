"""The same unbinned model fitted again and again from Python, per device: what a call costs
once the process has its device (CUDA's driver and context are paid by the first call only).

    python bench/unbinned_python_calls.py [EVENTS ...] [--devices cpu,cuda] [--calls 10]

A Gauss + exponential model (bench/unbinned_vs_roofit.py's) with its events in a Parquet file;
prints a Markdown table of the first call and the median of the others, per device and size.
"""
import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import nextstat


def events(n: int) -> np.ndarray:
    rng = np.random.default_rng(1)
    xs = np.concatenate([np.clip(rng.normal(5, 1, n // 10), 0, 10), rng.exponential(1 / 0.3, n - n // 10)])
    return xs[xs < 10]


def model_file(folder: Path, n: int) -> Path:
    pq.write_table(pa.table({"x": events(n)}), folder / "events.parquet")
    doc = {
        "metadata": {"hs3_version": "0.2"},
        "distributions": [
            {"name": "sig", "type": "gaussian_dist", "x": "x", "mean": "mean", "sigma": "sigma"},
            {"name": "bkg", "type": "exponential_dist", "x": "x", "c": "c"},
            {"name": "model", "type": "mixture_dist", "summands": ["sig", "bkg"], "coefficients": ["nsig", "nbkg"], "extended": True},
        ],
        "data": [{"name": "obs", "type": "nextstat:parquet", "path": "events.parquet", "axes": [{"name": "x", "min": 0, "max": 10}]}],
        "likelihoods": [{"name": "L", "distributions": ["model"], "data": ["obs"]}],
        "parameter_points": [{"name": "default_values", "parameters": [
            {"name": "mean", "value": 4.8, "min": 0, "max": 10}, {"name": "sigma", "value": 1.1, "min": 0.1, "max": 5},
            {"name": "c", "value": 0.25, "min": -1, "max": 2}, {"name": "nsig", "value": 0.1 * n, "min": 0, "max": 1e9},
            {"name": "nbkg", "value": 0.9 * n, "min": 0, "max": 1e9}]}],
        "analyses": [{"name": "A", "likelihood": "L", "parameters_of_interest": ["nsig"]}],
    }
    path = folder / "model.json"
    path.write_text(json.dumps(doc))
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("events", nargs="*", type=float, default=[1e5, 1e6])
    ap.add_argument("--devices", default="cpu,cuda")
    ap.add_argument("--calls", type=int, default=10)
    args = ap.parse_args()
    print("| device | events | first call | each further call (median) |")
    print("|---|---|---|---|")
    for n in args.events:
        with tempfile.TemporaryDirectory() as tmp:
            model = nextstat.load_hs3(model_file(Path(tmp), int(n)))
            for device in args.devices.split(","):
                seconds = []
                for _ in range(args.calls):
                    start = time.perf_counter()
                    fit = nextstat.fit(model, device=device)
                    seconds.append(time.perf_counter() - start)
                    assert fit.converged, fit
                print(f"| {device} | {n:.0e} | {seconds[0] * 1e3:.1f} ms | {statistics.median(seconds[1:]) * 1e3:.1f} ms |")


if __name__ == "__main__":
    main()
