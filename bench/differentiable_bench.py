"""Timings of nextstat.torch on the 8-parameter and the 184-parameter (tHq) models, the signal being
the samples that carry the POI's normfactor: NLL + ∂/∂s per call and for a batch of 1000
histograms, the profiled q0 + gradient per call with the signal moved by 0.1% between calls
(warm-started fits, as in training) and for a batch of 100 histograms (each yield scaled by
|1 + 0.05·N(0,1)|); with --peer, pyhf 0.7.6's JAX backend for the same NLL + ∂/∂s
(jax.jit(jax.value_and_grad) through pyhf's logpdf, tests/python/pyhf_signal.py; its batch by
jax.vmap) on JAX's default device. One JSON line per model and device; medians of repeated calls.

    python bench/differentiable_bench.py ../shared/pyhf-ref [--device cuda] [--peer]
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

import nextstat
import nextstat.torch as nt

ROOT = Path(__file__).resolve().parent.parent


def median_seconds(step, repeats, sync=lambda: None):
    step()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def signal_samples(spec):
    poi = spec["measurements"][0]["config"]["poi"]
    return [
        (c["name"], s["name"])
        for c in spec["channels"]
        for s in c["samples"]
        if any(m["type"] == "normfactor" and m["name"] == poi for m in s["modifiers"])
    ]


def bench(path, label, device):
    spec = json.load(open(path))
    model = nextstat.Workspace(spec).model()
    samples = signal_samples(spec)
    nominal = torch.tensor(nt._session(model, samples).nominal_signal(), dtype=torch.float64, device=device)
    generator = torch.Generator(device=device).manual_seed(1)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def nll_step():
        s = nominal.clone().requires_grad_(True)
        nt.nll(model, s, samples).backward()

    batch = nominal.repeat(1000, 1)

    def nll_batch():
        s = batch.clone().requires_grad_(True)
        nt.nll(model, s, samples).sum().backward()

    rows = nominal * (1 + 0.05 * torch.randn((100, nominal.numel()), generator=generator, dtype=torch.float64, device=device)).abs()

    def q0_batch():
        s = rows.clone().requires_grad_(True)
        nt.q0(model, s, samples).sum().backward()

    def q0_step():
        noise = torch.randn(nominal.shape, generator=generator, dtype=torch.float64, device=device)
        s = (nominal * (1 + 1e-3 * noise)).requires_grad_(True)
        nt.q0(model, s, samples).backward()

    # The engine alone (no autograd, buffers allocated once): what the Python layer adds is the
    # difference to nll_grad_per_call_s.
    session = nt._session(model, samples, device)
    pars = torch.tensor(model.config.suggested_init(), dtype=torch.float64, device=device)
    if device == "cuda":
        s1, d_s, d_p = nominal.reshape(1, -1).contiguous(), torch.empty_like(nominal), torch.empty_like(pars)
        value = torch.empty(1, dtype=torch.float64, device=device)
        where = lambda t: (t.data_ptr(), t.numel())
        engine = lambda: session.nll_in_place(where(s1), where(pars), model.observed, where(value), where(d_s), where(d_p))
    else:
        s1, p1 = nominal.reshape(1, -1).numpy(), pars.reshape(1, -1).numpy()
        engine = lambda: session.nll(s1, p1, model.observed)

    def torch_floor():
        # The same autograd round trip around a trivial function: what torch itself costs.
        s = nominal.clone().requires_grad_(True)
        (s * s).sum().backward()

    row = {}
    if device == "cuda":
        # The device time of one engine call (CUDA events on the stream it runs on).
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def device_time():
            begin.record()
            engine()
            end.record()
            end.synchronize()
            return begin.elapsed_time(end) / 1e3

        times = sorted(device_time() for _ in range(201))
        row["engine_device_time_per_call_s"] = times[100]
    return {
        "model": label,
        "engine": "nextstat",
        "engine_nll_grad_per_call_s": median_seconds(engine, 1000, sync),
        **row,
        "torch_autograd_floor_per_call_s": median_seconds(torch_floor, 300, sync),
        "device": torch.cuda.get_device_name() if device == "cuda" else f"CPU, {torch.get_num_threads()} threads",
        "n_params": len(model.config.par_names),
        "n_signal": nominal.numel(),
        "nll_grad_per_call_s": median_seconds(nll_step, 300, sync),
        "nll_grad_batch1000_s": median_seconds(nll_batch, 10, sync),
        "q0_grad_per_call_s": median_seconds(q0_step, 30, sync),
        "q0_grad_batch100_s": median_seconds(q0_batch, 3, sync),
    }


def peer(path, label):
    """pyhf + JAX on JAX's default device: the same NLL + ∂/∂s per call and per batch of 1000."""
    sys.path.insert(0, str(ROOT / "tests" / "python"))
    import jax
    import pyhf
    from pyhf_signal import jax_model, signal_nll

    spec = json.load(open(path))
    model, data = jax_model(spec)
    samples = signal_samples(spec)
    f = signal_nll(model, samples, model.config.suggested_init(), data, fixed_staterror=True)
    nominal = jax.numpy.concatenate([
        jax.numpy.asarray(model.main_model.nominal_rates[0, model.config.samples.index(s), 0, model.config.channel_slices[c]])
        for c, s in samples
    ])
    one = jax.jit(jax.value_and_grad(f))
    many = jax.jit(jax.vmap(jax.value_and_grad(f)))
    batch = jax.numpy.tile(nominal, (1000, 1))
    block = lambda out: jax.block_until_ready(out)
    row = {
        "model": label,
        "engine": f"pyhf {pyhf.__version__} + JAX {jax.__version__}",
        "device": str(jax.devices()[0]),
        "nll_grad_per_call_s": median_seconds(lambda: block(one(nominal)), 300),
    }
    try:
        row["nll_grad_batch1000_s"] = median_seconds(lambda: block(many(batch)), 10)
    except Exception as e:  # vmap through pyhf's logpdf is not guaranteed
        row["nll_grad_batch1000_s"] = None
        row["batch_error"] = f"{type(e).__name__}: {str(e)[:200]}"
    pyhf.set_backend("numpy")
    return row


def training_step(device):
    run = __import__("subprocess").run(
        [sys.executable, str(ROOT / "examples" / "train_significance.py"), "--epochs", "40", "--device", device],
        capture_output=True, text=True, check=True,
    )
    last = run.stdout.strip().splitlines()[-1]
    return {"example": "examples/train_significance.py", "device": device, "median_training_step_s": float(last.split("median training step ")[1].split()[0]) / 1e3}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ref", help="the pyhf-ref folder (its workspaces/)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--peer", action="store_true", help="also time pyhf + JAX")
    args = parser.parse_args()
    for file, label in [("nextstat_complex_workspace.json", "complex (8 params)"), ("nextstat_tHu.json", "tHq (184 params)")]:
        path = f"{args.ref}/workspaces/{file}"
        print(json.dumps(bench(path, label, args.device)), flush=True)
        if args.peer:
            print(json.dumps(peer(path, label)), flush=True)
    print(json.dumps(training_step(args.device)), flush=True)
