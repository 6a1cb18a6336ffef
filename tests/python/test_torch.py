"""nextstat.torch: gradchecks of every autograd function in float64, parity with pyhf (values, and
gradients against finite differences of pyhf's own NLL and q0), batching, dtypes and refusals."""

import copy

import numpy as np
import pytest
import torch

import nextstat
import nextstat.torch as nt

SAMPLES = [("SR", "signal"), ("CR", "signal")]


def spec():
    """Two channels; the signal carries normfactor, lumi, normsys and histosys, the background
    staterror, shapesys, normsys, histosys and lumi."""
    return {
        "channels": [
            {"name": "SR", "samples": [
                {"name": "signal", "data": [6.0, 9.0, 4.0], "modifiers": [
                    {"name": "mu", "type": "normfactor", "data": None},
                    {"name": "lumi", "type": "lumi", "data": None},
                    {"name": "sig_xsec", "type": "normsys", "data": {"hi": 1.05, "lo": 0.94}},
                    {"name": "sig_shape", "type": "histosys", "data": {"hi_data": [6.6, 9.5, 4.1], "lo_data": [5.5, 8.4, 3.9]}}]},
                {"name": "bkg", "data": [30.0, 22.0, 11.0], "modifiers": [
                    {"name": "bkg_norm", "type": "normsys", "data": {"hi": 1.1, "lo": 0.92}},
                    {"name": "shape", "type": "histosys", "data": {"hi_data": [33.0, 23.0, 11.5], "lo_data": [28.0, 21.5, 10.2]}},
                    {"name": "staterror_SR", "type": "staterror", "data": [2.0, 1.5, 1.2]},
                    {"name": "lumi", "type": "lumi", "data": None}]}]},
            {"name": "CR", "samples": [
                {"name": "signal", "data": [1.0, 0.5], "modifiers": [
                    {"name": "mu", "type": "normfactor", "data": None},
                    {"name": "lumi", "type": "lumi", "data": None}]},
                {"name": "bkg", "data": [80.0, 60.0], "modifiers": [
                    {"name": "bkg_norm", "type": "normsys", "data": {"hi": 1.1, "lo": 0.92}},
                    {"name": "cr_stat", "type": "shapesys", "data": [5.0, 4.0]},
                    {"name": "lumi", "type": "lumi", "data": None}]}]},
        ],
        "observations": [{"name": "SR", "data": [40, 33, 15]}, {"name": "CR", "data": [82, 58]}],
        "measurements": [{"name": "m", "config": {"poi": "mu", "parameters": [
            {"name": "lumi", "auxdata": [1.0], "sigmas": [0.02], "bounds": [[0.9, 1.1]], "inits": [1.0]}]}}],
        "version": "1.0.0",
    }


@pytest.fixture(scope="module")
def model():
    return nextstat.Workspace(spec()).model()


def signal_tensor(values=(8.0, 12.0, 5.0, 1.5, 0.8), dtype=torch.float64):
    return torch.tensor(values, dtype=dtype, requires_grad=True)


def pyhf_with_signal(s):
    """pyhf's model and data of the workspace with the signal samples' data replaced by `s`."""
    pyhf = pytest.importorskip("pyhf")

    w = copy.deepcopy(spec())
    w["channels"][0]["samples"][0]["data"] = list(map(float, s[:3]))
    w["channels"][1]["samples"][0]["data"] = list(map(float, s[3:]))
    ws = pyhf.Workspace(w)
    m = ws.model()
    return m, ws.data(m)


def test_gradcheck_nll_in_signal_and_parameters(model):
    pars = torch.tensor(model.config.suggested_init(), dtype=torch.float64)
    for name, value in [("mu", 1.4), ("sig_shape", 0.6), ("sig_xsec", -0.8), ("shape", -1.3), ("lumi", 1.03)]:
        pars[model.config.par_names.index(name)] = value
    pars.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda s, p: nt.nll(model, s, SAMPLES, pars=p), (signal_tensor(), pars))


@pytest.mark.parametrize("function", [
    lambda m, s: nt.q0(m, s, SAMPLES),
    lambda m, s: nt.qmu(m, s, SAMPLES, mu=1.0),
    lambda m, s: nt.qmu(m, s, SAMPLES, mu=2.0, tilde=False),
    lambda m, s: nt.z0(m, s, SAMPLES, asimov=True),
    lambda m, s: nt.z0(m, s, SAMPLES, asimov=False),
], ids=["q0", "qmu_tilde", "qmu", "z0_asimov", "z0_observed"])
def test_gradcheck_profiled_statistics(model, function):
    s = signal_tensor()
    assert function(model, s).item() > 0
    # Finite differences of refitted statistics: a step large enough for the fits' precision.
    assert torch.autograd.gradcheck(lambda x: function(model, x), (s,), eps=1e-4, atol=1e-5, rtol=1e-3)


def test_nll_and_its_signal_gradient_match_pyhf(model):
    s = np.array([8.0, 12.0, 5.0, 1.5, 0.8])
    pars_list = model.config.suggested_init()
    pars_list[model.config.poi_index] = 1.3
    pm, data = pyhf_with_signal(s)
    # pyhf's parameter order is ours (par_order): compare NLL values directly.
    assert pm.config.par_order == model.config.par_order
    want = -float(pm.logpdf(np.array(pars_list), data)[0])
    x = torch.tensor(s, requires_grad=True)
    got = nt.nll(model, x, SAMPLES, pars=torch.tensor(pars_list, dtype=torch.float64), data=data)
    assert got.item() == pytest.approx(want, rel=1e-10)
    got.backward()
    h = 1e-5
    fd = []
    for k in range(len(s)):
        up, down = s.copy(), s.copy()
        up[k] += h
        down[k] -= h
        m_up, d_up = pyhf_with_signal(up)
        m_down, d_down = pyhf_with_signal(down)
        fd.append((-float(m_up.logpdf(np.array(pars_list), d_up)[0]) + float(m_down.logpdf(np.array(pars_list), d_down)[0])) / (2 * h))
    np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-5, atol=1e-7)


def test_nll_and_its_signal_gradient_match_jax_grad_through_pyhf(model):
    """jax.grad through pyhf's logpdf (JAX backend, the signal patched into the built model:
    pyhf_signal.py) against nextstat's analytic ∂NLL/∂s, at pulled parameters."""
    pyhf = pytest.importorskip("pyhf")
    jax = pytest.importorskip("jax")
    from pyhf_signal import jax_model, signal_nll

    try:
        pm, data = jax_model(spec())
        pars = np.array(model.config.suggested_init())
        for name, value in [("mu", 1.4), ("sig_shape", 0.6), ("sig_xsec", -0.8), ("shape", -1.3), ("lumi", 1.03)]:
            pars[model.config.par_names.index(name)] = value
        f = jax.jit(jax.value_and_grad(signal_nll(pm, SAMPLES, pars, data)))
        for s in ([8.0, 12.0, 5.0, 1.5, 0.8], [6.0, 9.0, 4.0, 1.0, 0.5], [0.5, 30.0, 2.0, 4.0, 0.05]):
            want, want_grad = f(jax.numpy.array(s))
            x = torch.tensor(s, dtype=torch.float64, requires_grad=True)
            got = nt.nll(model, x, SAMPLES, pars=torch.tensor(pars), data=list(map(float, data)))
            got.backward()
            assert got.item() == pytest.approx(float(want), rel=1e-12)
            np.testing.assert_allclose(x.grad.numpy(), np.asarray(want_grad), rtol=1e-10, atol=1e-12)
    finally:
        pyhf.set_backend("numpy")


def test_an_external_sample_with_staterror_matches_pyhf(model):
    """The background as the external sample: its staterror width follows its yields, as pyhf
    computes it from the replaced data; its histosys deltas move against fixed templates."""
    pyhf = pytest.importorskip("pyhf")

    b = np.array([26.0, 25.0, 9.0])
    w = copy.deepcopy(spec())
    w["channels"][0]["samples"][1]["data"] = list(b)
    pm = pyhf.Workspace(w).model()
    data = pyhf.Workspace(w).data(pm)
    pars = np.array(model.config.suggested_init())
    for name, value in [("staterror_SR[0]", 1.04), ("staterror_SR[2]", 0.93), ("shape", 0.7)]:
        pars[model.config.par_names.index(name)] = value
    want = -float(pm.logpdf(pars, data)[0])
    got = nt.nll(model, torch.tensor(b), [("SR", "bkg")], pars=torch.tensor(pars), data=data).item()
    assert got == pytest.approx(want, rel=1e-10)


def test_q0_matches_pyhf_with_tight_fits(model):
    pyhf = pytest.importorskip("pyhf")

    s = np.array([8.0, 12.0, 5.0, 1.5, 0.8])
    pm, data = pyhf_with_signal(s)
    pyhf.set_backend("numpy", pyhf.optimize.scipy_optimizer(tolerance=1e-12))
    try:
        want = float(pyhf.infer.test_statistics.q0(0.0, data, pm, pm.config.suggested_init(), pm.config.suggested_bounds(), pm.config.suggested_fixed()))
    finally:
        pyhf.set_backend("numpy", pyhf.optimize.scipy_optimizer())
    got = nt.q0(model, torch.tensor(s), SAMPLES, data=data).item()
    assert got == pytest.approx(want, rel=1e-5)


def test_batches_dtypes_and_devices_follow_the_input(model):
    rows = torch.tensor([[8.0, 12.0, 5.0, 1.5, 0.8], [6.0, 9.0, 4.0, 1.0, 0.5]], dtype=torch.float64, requires_grad=True)
    z = nt.z0(model, rows, SAMPLES)
    assert z.shape == (2,)
    z.sum().backward()
    for i in range(2):
        single = signal_tensor(rows[i].detach().tolist())
        z_i = nt.z0(model, single, SAMPLES)
        z_i.backward()
        assert z_i.item() == pytest.approx(z[i].item(), rel=1e-9)
        np.testing.assert_allclose(single.grad.numpy(), rows.grad[i].numpy(), rtol=1e-6, atol=1e-9)
    f32 = signal_tensor(dtype=torch.float32)
    value = nt.nll(model, f32, SAMPLES)
    assert value.dtype == torch.float32 and value.shape == ()
    value.backward()
    assert f32.grad.dtype == torch.float32 and torch.isfinite(f32.grad).all()


def test_parameter_gradients_follow_the_parameters_shape_and_device(model):
    rows = torch.tensor([[8.0, 12.0, 5.0, 1.5, 0.8], [6.0, 9.0, 4.0, 1.0, 0.5]], dtype=torch.float64)
    init = torch.tensor(model.config.suggested_init(), dtype=torch.float64)
    shared = init.clone().requires_grad_(True)
    nt.nll(model, rows, SAMPLES, pars=shared).sum().backward()
    per_row = init.repeat(2, 1).requires_grad_(True)
    nt.nll(model, rows, SAMPLES, pars=per_row).sum().backward()
    assert shared.grad.shape == init.shape and per_row.grad.shape == (2, len(init))
    torch.testing.assert_close(shared.grad, per_row.grad.sum(0))
    with pytest.raises(nextstat.InvalidInputError, match="give one row"):
        nt.nll(model, rows, SAMPLES, pars=init.repeat(3, 1))


def test_bad_inputs_are_named(model):
    with pytest.raises(nextstat.InvalidInputError, match="last dimension must be the 5 bins"):
        nt.nll(model, torch.ones(4, dtype=torch.float64), SAMPLES)
    with pytest.raises(nextstat.InvalidInputError, match="no sample 'nope'"):
        nt.nll(model, torch.ones(3, dtype=torch.float64), [("SR", "nope")])
    with pytest.raises(nextstat.InvalidInputError, match="shapesys"):
        nt.nll(model, torch.ones(2, dtype=torch.float64), [("CR", "bkg")])
    with pytest.raises(nextstat.InvalidInputError, match="is NaN"):
        nt.nll(model, torch.tensor([1.0, float("nan"), 1.0, 1.0, 1.0], dtype=torch.float64), SAMPLES)
    with pytest.raises(TypeError, match="torch.Tensor"):
        nt.nll(model, [1.0] * 5, SAMPLES)
    with pytest.raises(nextstat.InvalidInputError, match="floating-point"):
        nt.nll(model, torch.tensor([8, 12, 5, 1, 1]), SAMPLES)
    for samples in ("SR", ("SR", "signal"), [("SR",)]):
        with pytest.raises(nextstat.InvalidInputError, match="list of \\(channel, sample\\) name pairs"):
            nt.nll(model, torch.ones(5, dtype=torch.float64), samples)
    with pytest.raises(nextstat.InvalidInputError, match="outside the bounds"):
        nt.qmu(model, signal_tensor(), SAMPLES, mu=-5.0)


def test_soft_histogram_tends_to_the_histogram():
    x = torch.tensor([0.05, 0.3, 0.31, 0.62, 0.9, 0.97], dtype=torch.float64)
    w = torch.tensor([1.0, 2.0, 1.0, 1.0, 3.0, 1.0], dtype=torch.float64)
    edges = [0.0, 0.25, 0.5, 0.75, 1.0]
    hard = torch.tensor([1.0, 3.0, 1.0, 4.0], dtype=torch.float64)
    for kernel in ("sigmoid", "kde"):
        sharp = nt.SoftHistogram(edges, bandwidth=1e-4, kernel=kernel)(x, w)
        torch.testing.assert_close(sharp, hard, rtol=0, atol=1e-6)
        soft = nt.SoftHistogram(edges, bandwidth=0.05, kernel=kernel)
        values = x.clone().requires_grad_(True)
        assert torch.autograd.gradcheck(lambda v: soft(v, w), (values,))
    # Integer inputs are promoted to floats: half-integer edges keep their values.
    counts = torch.tensor([0, 1, 1, 2], dtype=torch.int64)
    half = nt.SoftHistogram([-0.5, 0.5, 1.5, 2.5], bandwidth=1e-4)(counts)
    torch.testing.assert_close(half, torch.tensor([1.0, 2.0, 1.0]), rtol=0, atol=1e-6)
    with pytest.raises(nextstat.InvalidInputError, match="increasing"):
        nt.SoftHistogram([0.0, 0.0])
    with pytest.raises(nextstat.InvalidInputError, match="bandwidth"):
        nt.SoftHistogram(edges, bandwidth=0.0)


def test_the_training_example_raises_the_significance():
    import subprocess
    import sys
    from conftest import ROOT

    run = subprocess.run([sys.executable, str(ROOT / "examples" / "train_significance.py"), "--epochs", "15"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    z = [float(line.split("Z_A = ")[1].split()[0]) for line in run.stdout.splitlines() if line.startswith("epoch")]
    assert len(z) == 15 and z[-1] > 2 * z[0], z


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() is False)")
def test_cuda_tensors_give_cuda_gradients(model):
    """A CUDA signal tensor: values and gradients come back on its device, equal to the CPU's."""
    s_cpu = signal_tensor()
    s_gpu = signal_tensor().detach().cuda().requires_grad_(True)
    for f in (lambda x: nt.nll(model, x, SAMPLES), lambda x: nt.z0(model, x, SAMPLES)):
        s_cpu.grad = None
        a, b = f(s_cpu), f(s_gpu)
        a.backward()
        b.backward()
        assert b.device.type == "cuda" and s_gpu.grad.device.type == "cuda"
        assert b.item() == pytest.approx(a.item(), rel=1e-12)
        torch.testing.assert_close(s_gpu.grad.cpu(), s_cpu.grad, rtol=1e-9, atol=1e-12)
        s_gpu.grad = None
    assert torch.autograd.gradcheck(lambda x: nt.z0(model, x, SAMPLES), (s_gpu,), eps=1e-4, atol=1e-5, rtol=1e-3)


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() is False)")


@needs_cuda
def test_the_cuda_engine_reads_cuda_tensors_in_place(model):
    """The NLL of a CUDA tensor runs on the CUDA engine (not a host copy): gradcheck in signal and
    parameters there; batches with per-row parameters and float32 match the CPU engine."""
    pars = torch.tensor(model.config.suggested_init(), dtype=torch.float64)
    for name, value in [("mu", 1.4), ("sig_shape", 0.6), ("shape", -1.3)]:
        pars[model.config.par_names.index(name)] = value
    s = signal_tensor().detach().cuda().requires_grad_(True)
    p = pars.cuda().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x, q: nt.nll(model, x, SAMPLES, pars=q), (s, p))
    sessions = model.__dict__["_differentiable"]
    assert sessions[(tuple(SAMPLES), "cuda")].device == "cuda"
    batch = torch.stack([s.detach(), s.detach() * 0.5, s.detach() * 2.0])
    rows = torch.stack([p.detach()] * 3)
    rows[1, model.config.poi_index] = 0.3
    for dtype, rtol in [(torch.float64, 1e-12), (torch.float32, 1e-6)]:
        x_gpu = batch.detach().to(dtype).clone().requires_grad_(True)
        x_cpu = batch.detach().cpu().to(dtype).requires_grad_(True)
        a, b = nt.nll(model, x_cpu, SAMPLES, pars=rows.cpu().to(dtype)), nt.nll(model, x_gpu, SAMPLES, pars=rows.to(dtype))
        assert b.dtype == dtype and b.device.type == "cuda"
        a.sum().backward()
        b.sum().backward()
        torch.testing.assert_close(b.cpu(), a, rtol=rtol, atol=0.0)
        torch.testing.assert_close(x_gpu.grad.cpu(), x_cpu.grad, rtol=max(rtol, 1e-9), atol=1e-12)


@needs_cuda
def test_device_memory_the_driver_does_not_vouch_for_is_refused(model):
    """Addresses are checked against the driver's allocations: a made-up address, a tensor too
    short for its claimed length, or host memory are errors, never a crash."""
    session = nt._session(model, SAMPLES, "cuda")
    data = list(model.observed)
    n, p = session.n_signal, len(model.config.suggested_init())
    s, q = torch.ones(n, dtype=torch.float64, device="cuda"), torch.ones(p, dtype=torch.float64, device="cuda")
    ds, dp, value = torch.empty_like(s), torch.empty_like(q), torch.empty(1, dtype=torch.float64, device="cuda")
    args = lambda **k: {**dict(signal=(s.data_ptr(), n), pars=(q.data_ptr(), p), nll=(value.data_ptr(), 1), d_signal=(ds.data_ptr(), n), d_pars=(dp.data_ptr(), p)), **k}
    call = lambda session, a: session.nll_in_place(a["signal"], a["pars"], data, a["nll"], a["d_signal"], a["d_pars"])
    for bad in [dict(signal=(0x1234, n)), dict(signal=(s.data_ptr(), n * 10**6)), dict(signal=(torch.ones(n, dtype=torch.float64).data_ptr(), n)), dict(nll=(value.data_ptr() + 4, 1))]:
        with pytest.raises(nextstat.NextStatError):
            call(session, args(**bad))
    a = args()
    call(session, a)
    torch.cuda.synchronize()
    assert torch.isfinite(value).all() and torch.isfinite(ds).all()
    assert value.item() == pytest.approx(nt.nll(model, s.cpu(), SAMPLES, pars=q.cpu()).item(), rel=1e-12)
    with pytest.raises(nextstat.NextStatError, match="host memory only"):
        call(nt._session(model, SAMPLES, "cpu"), a)


@needs_cuda
def test_a_cuda_batch_of_profiled_statistics_fits_on_the_gpu(model):
    """A batch of CUDA histograms: both fits of every row on the GPU's device optimizer, the
    statistics and gradients those of the CPU engine's host fits."""
    rows = torch.stack([signal_tensor().detach() * f for f in (0.7, 1.0, 1.6)])
    for f in (lambda x: nt.q0(model, x, SAMPLES), lambda x: nt.z0(model, x, SAMPLES), lambda x: nt.qmu(model, x, SAMPLES, mu=2.0)):
        x_cpu, x_gpu = rows.clone().requires_grad_(True), rows.cuda().requires_grad_(True)
        a, b = f(x_cpu), f(x_gpu)
        a.sum().backward()
        b.sum().backward()
        assert b.device.type == "cuda" and x_gpu.grad.device.type == "cuda"
        torch.testing.assert_close(b.cpu(), a, rtol=1e-6, atol=1e-8)
        torch.testing.assert_close(x_gpu.grad.cpu(), x_cpu.grad, rtol=1e-4, atol=1e-6)
    assert model.__dict__["_differentiable"][(tuple(SAMPLES), "cuda")].device == "cuda"


def test_ctrl_c_stops_a_large_profiled_batch():
    """A real SIGINT during q0 on a batch of a million signal rows (minutes of fits): the fits run
    on a worker thread that checks the stop flag every iteration, so KeyboardInterrupt comes
    before the batch could have finished, and the session still works afterwards."""
    import pathlib
    import signal
    import subprocess
    import sys
    import time

    here = pathlib.Path(__file__).parent
    script = f"""
import signal, sys, time
sys.path.insert(0, {str(here)!r})
signal.signal(signal.SIGINT, signal.default_int_handler)
import torch, nextstat, nextstat.torch as nt
from test_torch import spec, SAMPLES
model = nextstat.Workspace(spec()).model()
rows = torch.tensor([8.0, 12.0, 5.0, 1.5, 0.8], dtype=torch.float64).repeat(1_000_000, 1)
rows = rows * torch.linspace(0.5, 1.5, 1_000_000, dtype=torch.float64)[:, None]
print("ready", flush=True)
try:
    nt.q0(model, rows, SAMPLES)
    print("not interrupted", flush=True)
except KeyboardInterrupt:
    print("interrupted", time.perf_counter(), flush=True)
    print("still works", float(nt.q0(model, rows[:1], SAMPLES)[0]) >= 0.0, flush=True)
"""
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    time.sleep(1.0)
    sent = time.perf_counter()
    child.send_signal(signal.SIGINT)
    out, _ = child.communicate(timeout=300)
    lines = out.split("\n")
    assert lines[0].startswith("interrupted"), out
    print(f"{float(lines[0].split()[1]) - sent:.3f} s from SIGINT to KeyboardInterrupt")
    assert lines[1] == "still works True", out


def test_ctrl_c_stops_only_its_own_call_on_a_shared_session():
    """Two threads on one model and samples (one engine session): the main thread's Ctrl-C stops
    its own profiled batch; the other thread's batch on the same session completes."""
    import pathlib
    import signal
    import subprocess
    import sys
    import time

    here = pathlib.Path(__file__).parent
    script = f"""
import signal, sys, threading
sys.path.insert(0, {str(here)!r})
signal.signal(signal.SIGINT, signal.default_int_handler)
import torch, nextstat, nextstat.torch as nt
from test_torch import spec, SAMPLES
model = nextstat.Workspace(spec()).model()
base = torch.tensor([8.0, 12.0, 5.0, 1.5, 0.8], dtype=torch.float64)
def rows(n):
    return base.repeat(n, 1) * torch.linspace(0.5, 1.5, n, dtype=torch.float64)[:, None]
other = {{}}
def background():
    other["q0"] = nt.q0(model, rows(2000), SAMPLES)
thread = threading.Thread(target=background)
thread.start()
print("ready", flush=True)
try:
    nt.q0(model, rows(1_000_000), SAMPLES)
    print("not interrupted", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
thread.join()
print("other", tuple(other["q0"].shape), flush=True)
"""
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    time.sleep(1.0)
    child.send_signal(signal.SIGINT)
    out, _ = child.communicate(timeout=300)
    lines = out.split("\n")
    assert lines[0] == "interrupted", out
    assert lines[1] == "other (2000,)", out
