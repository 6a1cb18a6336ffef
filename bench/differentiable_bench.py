"""Timings of nextstat.torch on the 8-parameter and the 184-parameter (tHq) models, the signal being
the samples that carry the POI's normfactor: NLL + ∂/∂s per call and for a batch of 1000
histograms, and the profiled q0 + gradient per call with the signal moved by 0.1% between calls
(warm-started fits, as in training). One JSON line per model; medians of repeated calls.

    python bench/differentiable_bench.py ../shared/pyhf-ref
"""

import json
import statistics
import sys
import time

import torch

import nextstat
import nextstat.torch as nt


def median_seconds(step, repeats):
    step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench(path, label):
    spec = json.load(open(path))
    model = nextstat.Workspace(spec).model()
    poi = model.config.poi_name
    samples = [
        (c["name"], s["name"])
        for c in spec["channels"]
        for s in c["samples"]
        if any(m["type"] == "normfactor" and m["name"] == poi for m in s["modifiers"])
    ]
    nominal = torch.tensor(nt._session(model, samples).nominal_signal(), dtype=torch.float64)
    generator = torch.Generator().manual_seed(1)

    def nll_step():
        s = nominal.clone().requires_grad_(True)
        nt.nll(model, s, samples).backward()

    batch = nominal.repeat(1000, 1)

    def nll_batch():
        s = batch.clone().requires_grad_(True)
        nt.nll(model, s, samples).sum().backward()

    def q0_step():
        s = (nominal * (1 + 1e-3 * torch.randn(nominal.shape, generator=generator, dtype=torch.float64))).requires_grad_(True)
        nt.q0(model, s, samples).backward()

    print(json.dumps({
        "model": label,
        "n_params": len(model.config.par_names),
        "n_signal": nominal.numel(),
        "cpu_threads": torch.get_num_threads(),
        "nll_grad_per_call_s": median_seconds(nll_step, 200),
        "nll_grad_batch1000_s": median_seconds(nll_batch, 5),
        "q0_grad_per_call_s": median_seconds(q0_step, 30),
    }))


if __name__ == "__main__":
    ref = sys.argv[1]
    bench(f"{ref}/workspaces/nextstat_complex_workspace.json", "complex (8 params)")
    bench(f"{ref}/workspaces/nextstat_tHu.json", "tHq (184 params)")
