"""Flow PDFs (docs/unbinned.md, "Flow PDFs"): small flows built here in PyTorch, exported with
torch.onnx.export, evaluated by nextstat through ONNX Runtime (the PyPI onnxruntime's library),
compared with the torch model; fits of a flow + Gaussian model against the same fit done with
torch's log-probabilities; normalisation, sampling, providers and careless inputs."""

import json
import math
import os
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnxruntime = pytest.importorskip("onnxruntime")
from scipy import integrate, optimize, stats  # noqa: E402

import flowlib  # noqa: E402
import nextstat  # noqa: E402
from conftest import BIN, ROOT, TOL, run_cli  # noqa: E402
from nextstat import unbinned  # noqa: E402

# The CLI finds ONNX Runtime through ORT_DYLIB_PATH (the Python package sets it on import).
assert os.environ.get("ORT_DYLIB_PATH"), "nextstat's import sets ORT_DYLIB_PATH from onnxruntime"

BOX = [("x", 0.0, 10.0), ("y", -2.0, 3.0)]
F32_RTOL = TOL["f32_nll_rtol"]


@pytest.fixture(scope="module")
def flows(tmp_path_factory):
    root = tmp_path_factory.mktemp("flows")
    coupling = flowlib.Coupling2D([5.0, 0.5], [2.0, 1.0])
    spline = flowlib.Spline1D(5.0, 2.5)
    shifted = flowlib.Affine1D(5.0, 1.5, conditional=True)
    made = {
        "coupling": (coupling, unbinned.export_flow(coupling, root / "coupling", BOX, sample=flowlib.Coupling2DSample(coupling))),
        "coupling32": (coupling, unbinned.export_flow(coupling, root / "coupling32", BOX, sample=flowlib.Coupling2DSample(coupling), dtype=torch.float32)),
        "spline": (spline, unbinned.export_flow(spline, root / "spline", BOX[:1])),
        "spline32": (spline, unbinned.export_flow(spline, root / "spline32", BOX[:1], dtype=torch.float32)),
        "unit": (flowlib.LogitNormal1D(0.0, 10.0), unbinned.export_flow(flowlib.LogitNormal1D(0.0, 10.0), root / "unit", BOX[:1], normalization="unit")),
        "shifted": (shifted, unbinned.export_flow(shifted, root / "shifted", BOX[:1], context=["shift"], sample=flowlib.Affine1DSample(shifted))),
    }
    made["root"] = root
    return made


def torch_log_prob(module, x, context=None, dtype=torch.float64):
    module = module.to(dtype)
    with torch.no_grad():
        args = [torch.as_tensor(x, dtype=dtype)]
        if context is not None:
            args.append(torch.as_tensor(context, dtype=dtype))
        return module(*args).double().numpy()


def points(n, dims, seed=0):
    rng = np.random.default_rng(seed)
    return np.column_stack([rng.uniform(lo, hi, n) for _, lo, hi in BOX[:dims]])


@pytest.mark.parametrize("name,dims", [("coupling", 2), ("spline", 1)])
def test_log_prob_matches_torch_in_f64(flows, name, dims):
    module, manifest = flows[name]
    flow = unbinned.load_flow(manifest)
    assert flow.precision == "float64" and flow.provider == "CPUExecutionProvider"
    x = points(5000, dims)
    ours = flow.log_prob(x)
    theirs = torch_log_prob(module, x)
    assert np.max(np.abs(ours - theirs)) < 1e-6 * max(1.0, np.max(np.abs(theirs)))


@pytest.mark.parametrize("name,dims", [("coupling32", 2), ("spline32", 1)])
def test_log_prob_matches_torch_in_f32(flows, name, dims):
    module, manifest = flows[name]
    flow = unbinned.load_flow(manifest)
    assert flow.precision == "float32"
    x = points(5000, dims)
    ours = flow.log_prob(x)
    # Against torch in f64: the f32 tier (relative to the size of the values).
    theirs = torch_log_prob(module, x)
    scale = np.max(np.abs(theirs))
    assert np.max(np.abs(ours - theirs)) < F32_RTOL * scale * 10, np.max(np.abs(ours - theirs))


def test_truncation_integral_of_an_affine_flow_is_erf(tmp_path):
    affine = flowlib.Affine1D(7.0, 2.0)
    flow = unbinned.load_flow(unbinned.export_flow(affine, tmp_path, BOX[:1]))
    exact = stats.norm.cdf(10.0, 7.0, 2.0) - stats.norm.cdf(0.0, 7.0, 2.0)
    assert abs(flow.log_norm() - math.log(exact)) < 1e-10
    narrower = unbinned.load_flow(tmp_path / "flow.json", bounds=[(6.0, 9.0)])
    exact = stats.norm.cdf(9.0, 7.0, 2.0) - stats.norm.cdf(6.0, 7.0, 2.0)
    assert abs(narrower.log_norm() - math.log(exact)) < 1e-10


def test_truncation_integrals_match_scipy(flows):
    spline, manifest = flows["spline"]
    density = lambda x: math.exp(torch_log_prob(spline, [[x]])[0])  # noqa: E731
    z, _ = integrate.quad(density, 0.0, 10.0, limit=400, epsabs=1e-13, epsrel=1e-12, points=[5.0])
    assert abs(unbinned.load_flow(manifest).log_norm() - math.log(z)) < 1e-7
    coupling, manifest = flows["coupling"]
    grid_x, grid_y = np.linspace(0, 10, 1001), np.linspace(-2, 3, 1001)
    xx, yy = np.meshgrid(grid_x, grid_y, indexing="ij")
    d = np.exp(torch_log_prob(coupling, np.column_stack([xx.ravel(), yy.ravel()]))).reshape(xx.shape)
    z = integrate.simpson(integrate.simpson(d, x=grid_y, axis=1), x=grid_x)
    assert abs(unbinned.load_flow(manifest).log_norm() - math.log(z)) < 1e-6


def test_unit_flows_are_checked(flows, tmp_path):
    _, manifest = flows["unit"]
    assert unbinned.load_flow(manifest).log_norm() == 0.0
    # A flow that does not integrate to one over its box may not call itself "unit".
    affine = flowlib.Affine1D(7.0, 2.0)
    path = unbinned.export_flow(affine, tmp_path, BOX[:1], normalization="unit")
    with pytest.raises(nextstat.NextStatError, match="declares normalization 'unit' but integrates to 0.93"):
        unbinned.load_flow(path)


def hs3_model(path, manifest, events, conditional=False):
    """A Gaussian signal over a flow background in x ∈ [0, 10], yields extended."""
    flow = {"name": "background", "type": "nextstat:flow_dist", "manifest": str(manifest), "x": ["x"]}
    params = [
        {"name": "nsig", "value": 50.0, "min": 0.0, "max": 1000.0},
        {"name": "nbkg", "value": 900.0, "min": 0.0, "max": 5000.0},
        {"name": "mean", "value": 6.0, "min": 3.0, "max": 8.0},
        {"name": "width", "value": 0.5, "min": 0.1, "max": 2.0},
    ]
    if conditional:
        flow["context"] = {"shift": "shift"}
        params.append({"name": "shift", "value": 0.0, "min": -2.0, "max": 2.0})
    doc = {
        "metadata": {"hs3_version": "0.2"},
        "distributions": [
            {"name": "model", "type": "mixture_dist", "summands": ["signal", "background"], "coefficients": ["nsig", "nbkg"], "extended": True},
            {"name": "signal", "type": "gaussian_dist", "x": "x", "mean": "mean", "sigma": "width"},
            flow,
        ],
        "likelihoods": [{"name": "L", "distributions": ["model"], "data": ["obs"]}],
        "analyses": [{"name": "A", "likelihood": "L", "parameters_of_interest": ["nsig"]}],
        "parameter_points": [{"name": "default_values", "parameters": params}],
        "data": [{"name": "obs", "type": "unbinned", "axes": [{"name": "x", "min": 0.0, "max": 10.0}], "entries": [[float(v)] for v in events]}],
    }
    path.write_text(json.dumps(doc))
    return path


def torch_nll(module, events, names, conditional=False):
    """The same extended NLL with torch's log-probabilities: the flow normalised by scipy's
    quadrature of torch's density, the Gaussian by its CDF."""
    x = events[:, None]

    def log_z(context):
        f = lambda v: math.exp(torch_log_prob(module, [[v]], context)[0])  # noqa: E731
        return math.log(integrate.quad(f, 0.0, 10.0, limit=200, epsabs=1e-14, epsrel=1e-13)[0])

    fixed_lf = None if conditional else torch_log_prob(module, x) - log_z(None)

    def nll(theta):
        p = dict(zip(names, theta))
        if conditional:
            lf = torch_log_prob(module, x, [[p["shift"]]] * len(events)) - log_z([[p["shift"]]])
        else:
            lf = fixed_lf
        norm = stats.norm.cdf(10.0, p["mean"], p["width"]) - stats.norm.cdf(0.0, p["mean"], p["width"])
        lg = stats.norm.logpdf(events, p["mean"], p["width"]) - math.log(norm)
        mix = np.logaddexp(math.log(p["nsig"]) + lg, math.log(p["nbkg"]) + lf)
        return p["nsig"] + p["nbkg"] - mix.sum()

    return nll


@pytest.mark.parametrize("name,conditional", [("spline", False), ("shifted", True)])
def test_flow_fit_matches_the_fit_with_torch_log_probs(flows, tmp_path, name, conditional):
    module, manifest = flows[name]
    flow = unbinned.load_flow(manifest, context=[0.3] if conditional else None)
    rng = np.random.default_rng(5)
    background = flow.sample(1500, [0.3] if conditional else None, seed=11)[:, 0]
    signal = rng.normal(6.2, 0.4, 120)
    events = np.concatenate([background, signal[(signal > 0) & (signal < 10)]])
    model = unbinned.load(hs3_model(tmp_path / "model.json", manifest, events, conditional))
    names = model.config.par_names
    fit = nextstat.fit(model)
    assert fit.converged
    nll = torch_nll(module, events, names, conditional)
    best = np.asarray(fit.bestfit)
    # The NLL itself at nextstat's minimum: same function.
    assert abs(model.nll_grad(best)[0] - nll(best)) < 1e-8 * abs(nll(best))
    ref = optimize.minimize(nll, best * 1.01, method="Nelder-Mead", bounds=model.config.suggested_bounds(),
                            options={"xatol": 1e-9, "fatol": 1e-11, "maxiter": 40000, "maxfev": 40000})
    assert nll(best) <= ref.fun + 1e-7
    sigma = np.asarray(fit.uncertainties)
    for i, n in enumerate(names):
        assert abs(best[i] - ref.x[i]) < 2e-3 * sigma[i], (n, best[i], ref.x[i], sigma[i])
    if conditional:
        assert abs(best[names.index("shift")] - 0.3) < 4 * sigma[names.index("shift")]
        # The context gradient (central differences through ONNX Runtime) against a
        # finer central difference of torch's NLL.
        theta = best + np.array([3.0, -5.0, 0.05, 0.02, 0.1])
        g = model.nll_grad(theta)[1]
        k = names.index("shift")
        h = 1e-4
        up, down = theta.copy(), theta.copy()
        up[k] += h
        down[k] -= h
        fd = (nll(up) - nll(down)) / (2 * h)
        assert abs(g[k] - fd) < 1e-5 * max(1.0, abs(fd)), (g[k], fd)


@pytest.mark.parametrize("name,dims", [("coupling", 2), ("spline", 1)])
def test_samples_follow_the_truncated_density(flows, name, dims):
    """sample.onnx (coupling, redrawing outside the box) and accept–reject (spline): the
    per-observable means against the density's, by quadrature."""
    module, manifest = flows[name]
    flow = unbinned.load_flow(manifest)
    n = 40000
    drawn = flow.sample(n, seed=3)
    assert drawn.shape == (n, dims)
    for d, (_, lo, hi) in enumerate(BOX[:dims]):
        assert drawn[:, d].min() >= lo and drawn[:, d].max() <= hi
    if dims == 1:
        grid = np.linspace(0, 10, 20001)[:, None]
        w = np.exp(torch_log_prob(module, grid))
        mean = integrate.simpson(w * grid[:, 0], x=grid[:, 0]) / integrate.simpson(w, x=grid[:, 0])
        var = integrate.simpson(w * (grid[:, 0] - mean) ** 2, x=grid[:, 0]) / integrate.simpson(w, x=grid[:, 0])
        means, sds = [mean], [math.sqrt(var)]
    else:
        gx, gy = np.linspace(0, 10, 801), np.linspace(-2, 3, 801)
        xx, yy = np.meshgrid(gx, gy, indexing="ij")
        w = np.exp(torch_log_prob(module, np.column_stack([xx.ravel(), yy.ravel()]))).reshape(xx.shape)
        total = integrate.simpson(integrate.simpson(w, x=gy, axis=1), x=gx)
        means, sds = [], []
        for v in (xx, yy):
            m = integrate.simpson(integrate.simpson(w * v, x=gy, axis=1), x=gx) / total
            s2 = integrate.simpson(integrate.simpson(w * (v - m) ** 2, x=gy, axis=1), x=gx) / total
            means.append(m)
            sds.append(math.sqrt(s2))
    for d in range(dims):
        assert abs(drawn[:, d].mean() - means[d]) < 5 * sds[d] / math.sqrt(n), (d, drawn[:, d].mean(), means[d])
        assert abs(drawn[:, d].std() / sds[d] - 1) < 0.03


def test_toys_and_limits_run_on_flow_models(flows, tmp_path):
    _, manifest = flows["spline"]
    flow = unbinned.load_flow(manifest)
    events = flow.sample(800, seed=2)[:, 0]
    path = hs3_model(tmp_path / "model.json", manifest, events)
    _, out, _ = run_cli("hypotest-toys", path, "--mu", "5", "--n-toys", "100", "--seed", "4")
    result = json.loads(out)
    assert 0.0 < result["CLs_obs"] <= 1.0 and result["n_failed"] == 0
    assert result["flows"][0]["provider"] == "CPUExecutionProvider"
    _, out, _ = run_cli("upper-limit", path)
    limit = json.loads(out)
    assert 0 < limit["exp"][0] < limit["exp"][2] < limit["exp"][4] and limit["obs"] > 0


def test_providers_fall_back_with_their_reasons(flows, tmp_path):
    """On the CPU-only onnxruntime wheel, TensorRT and CUDA cannot register: the flow runs on
    the CPU provider and the output says why the others were not used."""
    _, manifest = flows["spline"]
    path = hs3_model(tmp_path / "model.json", manifest, np.linspace(0.5, 9.5, 200))
    env = dict(os.environ, NEXTSTAT_FLOW_PROVIDERS="tensorrt,cuda,cpu")
    proc = subprocess.run([str(BIN), "fit", str(path)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    flows_out = json.loads(proc.stdout)["flows"]
    assert flows_out[0]["provider"] == "CPUExecutionProvider"
    tried = {f["provider"]: f["reason"] for f in flows_out[0]["fallbacks"]}
    assert set(tried) == {"TensorrtExecutionProvider", "CUDAExecutionProvider"}
    assert all(len(reason) > 10 for reason in tried.values()), tried


def test_a_missing_onnxruntime_is_a_clear_error_and_parametric_models_still_fit(flows, tmp_path):
    _, manifest = flows["spline"]
    path = hs3_model(tmp_path / "model.json", manifest, np.linspace(0.5, 9.5, 200))
    env = {k: v for k, v in os.environ.items() if k not in ("ORT_DYLIB_PATH", "VIRTUAL_ENV")}
    env["ORT_DYLIB_PATH"] = str(tmp_path / "no" / "libonnxruntime.so.1.30.0")
    proc = subprocess.run([str(BIN), "fit", str(path)], capture_output=True, text=True, env=env)
    assert proc.returncode != 0
    assert "ONNX Runtime's library" in proc.stderr and "does not exist" in proc.stderr
    del env["ORT_DYLIB_PATH"]
    proc = subprocess.run([str(BIN), "fit", str(path)], capture_output=True, text=True, env=env)
    assert proc.returncode != 0 and "pip install onnxruntime" in proc.stderr
    example = ROOT / "examples" / "unbinned" / "resonance.json"
    proc = subprocess.run([str(BIN), "fit", str(example)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and json.loads(proc.stdout)["converged"]


def test_careless_manifests_and_references_are_errors_naming_the_problem(flows, tmp_path):
    _, manifest = flows["spline"]
    manifest = manifest.resolve()
    events = np.linspace(0.5, 9.5, 50)

    def fails(doc_change, match, manifest_text=None):
        target = manifest
        if manifest_text is not None:
            target = tmp_path / "bad.json"
            target.write_text(manifest_text)
        path = hs3_model(tmp_path / "m.json", target, events)
        doc = json.loads(path.read_text())
        doc_change(doc)
        path.write_text(json.dumps(doc))
        with pytest.raises(nextstat.NextStatError, match=match):
            unbinned.load(path)

    def flow_of(doc):
        return doc["distributions"][2]

    good = json.loads(manifest.read_text())
    fails(lambda d: None, "its \"type\" must be \"nextstat:flow\"", json.dumps({**good, "type": "flow"}))
    fails(lambda d: None, "no 'log_prob' model", json.dumps({k: v for k, v in good.items() if k != "log_prob"}))
    fails(lambda d: None, "does not exist", json.dumps({**good, "log_prob": str(manifest.parent / "missing.onnx")}))
    fails(lambda d: None, "normalization 'box'", json.dumps({**good, "log_prob": str(manifest.parent / "log_prob.onnx"), "normalization": "box"}))
    four = [{"name": f"v{i}", "min": 0, "max": 1} for i in range(4)]
    fails(lambda d: None, "4 observables", json.dumps({**good, "observables": four}))
    # The model's input is x [events, 1]: a manifest with two observables does not fit it.
    two = {**good, "log_prob": str(manifest.parent / "log_prob.onnx"), "observables": [{"name": "x", "min": 0, "max": 10}, {"name": "y", "min": 0, "max": 10}]}
    fails(lambda d: flow_of(d).update(x=["x", "x"]), "ONNX|shape|dimension|Got invalid", json.dumps(two))
    fails(lambda d: flow_of(d).update(x=["mass"]), "'mass' is not an observable of its data")
    fails(lambda d: flow_of(d).update(context={"alpha": 1.0}), "has no context 'alpha'")
    fails(lambda d: flow_of(d).pop("manifest"), "has no 'manifest' path")
    fails(lambda d: d["data"][0]["axes"][0].update(max=12.0), "beyond the flow's range")
    _, shifted = flows["shifted"]
    fails(lambda d: flow_of(d).update(manifest=str(shifted.resolve())), "no value for the flow's context 'shift'")


def numpy_mixture_nll(logp, yields, weights=None):
    w = np.ones(logp.shape[1]) if weights is None else weights
    s = (yields[:, None] * np.exp(logp)).sum(0)
    return yields.sum() - (w * np.log(s)).sum(), 1 - (w * np.exp(logp) / s).sum(1)


def test_mixture_nll_from_log_probabilities_on_the_cpu():
    rng = np.random.default_rng(0)
    logp = rng.uniform(-9, -1, (3, 50_001))
    yields = np.array([100.0, 2000.0, 30.0])
    weights = rng.uniform(0.5, 1.5, 50_001)
    nll, grad = unbinned.mixture_nll(logp, yields, weights=weights, constraints=[(0.0, 0.5)], values=[0.2])
    want, want_grad = numpy_mixture_nll(logp, yields, weights)
    assert abs(nll - (want + 0.5 * 0.4**2)) < 1e-10 * abs(want)
    np.testing.assert_allclose(grad[:3], want_grad, rtol=1e-10, atol=1e-9)
    assert abs(grad[3] - 0.2 / 0.25) < 1e-12
    # Toys side by side: each dataset as if alone.
    offsets = [0, 10_000, 10_000, 50_001]
    ys = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    nlls, grads = unbinned.mixture_nll(logp, ys, offsets=offsets)
    for t in range(3):
        part = logp[:, offsets[t]:offsets[t + 1]]
        if part.shape[1]:
            want, want_grad = numpy_mixture_nll(part, ys[t])
        else:
            want, want_grad = ys[t].sum(), np.ones(3)
        assert abs(nlls[t] - want) < 1e-10 * max(1, abs(want))
        np.testing.assert_allclose(grads[t], want_grad, rtol=1e-10, atol=1e-10)
    with pytest.raises(nextstat.NextStatError, match="7 yields"):
        unbinned.mixture_nll(logp, np.ones(7))
    with pytest.raises(nextstat.NextStatError, match="processes: the mixture reduction takes 1 to 16"):
        unbinned.mixture_nll(np.zeros((17, 3)), np.ones(17))


needs_cuda = pytest.mark.skipif(not (torch.cuda.is_available() and nextstat.has_cuda()), reason="needs a CUDA GPU with PyTorch's CUDA build")


@needs_cuda
def test_a_torch_flow_on_the_gpu_hands_its_log_probs_over_without_a_copy(flows):
    """Log-probabilities computed by a torch flow on the GPU, reduced where they lie (f64 and
    f32), against the same values reduced from the host."""
    coupling, _ = flows["coupling"]
    rng = np.random.default_rng(4)
    x = torch.tensor(points(400_000, 2, seed=4), device="cuda")
    for dtype, rtol in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
        module = coupling.to("cuda", dtype)
        with torch.no_grad():
            lp_signal = module(x.to(dtype))
            lp_background = torch.full_like(lp_signal, -math.log(50.0))
            logp = torch.stack([lp_signal, lp_background])
        yields = np.array([3.0e4, 3.7e5])
        nll, grad = unbinned.mixture_nll(logp, yields, constraints=[(0.0, 1.0)], values=[0.1])
        host = logp.double().cpu().numpy()
        want, want_grad = unbinned.mixture_nll(host, yields, constraints=[(0.0, 1.0)], values=[0.1], device="cuda")
        cpu, _ = unbinned.mixture_nll(host, yields, constraints=[(0.0, 1.0)], values=[0.1])
        assert abs(nll - want) <= rtol * abs(want), (dtype, nll, want)
        np.testing.assert_allclose(grad, want_grad, rtol=max(rtol, 1e-10), atol=1e-9)
        assert abs(want - cpu) <= 1e-10 * abs(cpu)
    coupling.to("cpu", torch.float64)
    # Toys side by side on the GPU, one reduction.
    logp = torch.randn(2, 30_000, device="cuda", dtype=torch.float64) - 3
    offsets = [0, 1000, 1000, 30_000]
    ys = rng.uniform(10, 100, (3, 2))
    nlls, grads = unbinned.mixture_nll(logp, ys, offsets=offsets)
    want, want_grads = unbinned.mixture_nll(logp.cpu().numpy(), ys, offsets=offsets)
    np.testing.assert_allclose(nlls, want, rtol=1e-10)
    np.testing.assert_allclose(grads, want_grads, rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match="2-d float32 or float64"):
        unbinned.mixture_nll(logp[0].to(torch.float16), ys[0])


@needs_cuda
def test_a_flow_model_fits_on_cuda_as_on_the_cpu(flows, tmp_path):
    """A flow without context is a column of the data: the CUDA event kernel reads it."""
    _, manifest = flows["spline"]
    flow = unbinned.load_flow(manifest)
    events = np.concatenate([flow.sample(20_000, seed=8)[:, 0], np.random.default_rng(8).normal(6.2, 0.4, 500)])
    model = unbinned.load(hs3_model(tmp_path / "model.json", manifest, events[(events > 0) & (events < 10)]))
    cpu, gpu = nextstat.fit(model), nextstat.fit(model, device="cuda")
    assert gpu.converged and abs(gpu.twice_nll - cpu.twice_nll) < 1e-8 * abs(cpu.twice_nll)
    np.testing.assert_allclose(gpu.bestfit, cpu.bestfit, rtol=1e-5, atol=1e-6)
    _, shifted = flows["shifted"]
    conditional = unbinned.load(hs3_model(tmp_path / "c.json", shifted, events[(events > 0) & (events < 10)], conditional=True))
    with pytest.raises(nextstat.NextStatError, match="flows with context are evaluated on the CPU"):
        nextstat.fit(conditional, device="cuda")


def test_results_and_shard_parts_of_a_flow_model_name_its_flows_as_the_cli_does(flows, tmp_path):
    _, manifest = flows["spline"]
    events = np.random.default_rng(2).uniform(0.0, 10.0, 300)
    path = hs3_model(tmp_path / "model.json", manifest, events)
    model = unbinned.load(path)
    cli = json.loads(subprocess.run([str(BIN), "fit", str(path)], capture_output=True, text=True, check=True).stdout)
    assert cli["flows"] and cli["flows"] == nextstat.fit(model).to_dict()["flows"]
    part = json.loads(nextstat._core.run_part(model._model, json.dumps({"request": {"verb": "profile_scan", "values": [10.0, 50.0]}}), 0, 2))
    assert part["flows"] == cli["flows"]
