"""Unbinned (event-level) models read from HS3 JSON, as ROOT's RooJSONFactoryWSTool writes them
(docs/unbinned.md). Every inference function of ``nextstat`` takes an ``UnbinnedModel``; data
default to the file's events, and a NumPy array of events may replace them (one channel with
one observable)::

    import nextstat
    from nextstat import unbinned

    model = unbinned.load("examples/unbinned/resonance.json")
    fit = nextstat.fit(model)
    cls = nextstat.hypotest(1.0, model)
    nll, grad = model.nll_grad(model.config.suggested_init())
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from . import _core
from ._model import _Config

__all__ = ["UnbinnedModel", "load", "Flow", "load_flow", "export_flow", "mixture_nll"]


class _UnbinnedConfig(_Config):
    """``model.config``: the parameter layout, with the names pyhf's ``config`` uses (the
    binned model's ``samples``, ``auxdata`` and bins have no meaning here)."""

    par_order = property(lambda self: list(self._m.par_names))
    channels = property(lambda self: list(self._m.channels))

    def __init__(self, core: Any):
        # No HistFactory parameter sets: the layout is the engine's, parameter by parameter.
        self._m = core
        self._spec = None

    def suggested_init(self) -> List[float]:
        return list(self._m.suggested_init())

    def suggested_bounds(self) -> List[Tuple[float, float]]:
        return [tuple(b) for b in self._m.suggested_bounds()]

    def suggested_fixed(self) -> List[bool]:
        return list(self._m.suggested_fixed())


class UnbinnedModel:
    """An unbinned model: channels of events, parametric densities, constraints."""

    #: The data inference uses by default: the model's own events (kept in the engine).
    observed = None

    def __init__(self, core: Any):
        self._model = core
        self.config = _UnbinnedConfig(core)

    @property
    def flows(self) -> List[dict]:
        """The model's flow PDFs: per flow its channel, manifest, precision, context, the
        execution provider it runs on and the providers tried before it (with why they were
        not used). Empty for a model without flows."""
        text = self._model.flows_json()
        return json.loads(text) if text else []

    @property
    def observables(self) -> List[List[Tuple[str, float, float]]]:
        """Per channel, each observable as (name, low, high)."""
        return [list(map(tuple, c)) for c in self._model.observables]

    def observed_events(self) -> List[List[np.ndarray]]:
        """Per channel, one array per observable."""
        return self._model.observed_events()

    def nll_grad(self, pars: Any, events: Any = None) -> Tuple[float, np.ndarray]:
        """RooFit's NLL and its analytic gradient at ``pars``, on the file's events or on
        ``events`` (a 1-D array: one channel, one observable)."""
        pars = np.ascontiguousarray(pars, dtype=np.float64)
        if pars.ndim != 1:
            raise ValueError("pars must be one-dimensional")
        bad = np.flatnonzero(~np.isfinite(pars))
        if bad.size:
            raise ValueError(f"pars[{bad[0]}] is {pars[bad[0]]}: parameters must be finite numbers")
        if events is not None:
            events = np.ascontiguousarray(events, dtype=np.float64)
            if events.ndim != 1:
                raise ValueError("events must be one-dimensional (one observable)")
        return self._model.nll_grad(pars, events)

    def twice_nll(self, pars: Any, events: Any = None) -> float:
        return 2.0 * self.nll_grad(pars, events)[0]

    def __repr__(self) -> str:
        return repr(self._model)


def load(path: Optional[str | Path] = None, *, text: Optional[str] = None, analysis: Optional[str] = None) -> UnbinnedModel:
    """Read an HS3 model from a file (Parquet data paths relative to it) or from JSON text;
    ``analysis`` picks one of the file's analyses (default: the first)."""
    if (path is None) == (text is None):
        raise TypeError("give either path or text")
    core = _core.load_unbinned(None if path is None else str(path), text, analysis)
    return UnbinnedModel(core)


#: A flow PDF of a manifest (``load_flow``): ``log_prob(x, context)``, ``log_norm(context)``,
#: ``sample(n, context, seed)``, ``provider``, ``fallbacks``, ``precision``.
Flow = _core.Flow


def load_flow(manifest: str | Path, bounds: Optional[List[Tuple[float, float]]] = None, context: Optional[List[float]] = None) -> "Flow":
    """The flow of ``manifest`` (docs/unbinned.md, "Flow PDFs"), normalised over ``bounds``
    (default: the manifest's observable ranges)."""
    return _core.load_flow(str(manifest), bounds, context)


def export_flow(log_prob: Any, directory: str | Path, observables: List[Tuple[str, float, float]], *, context: Sequence[str] = (), sample: Any = None, dtype: Any = None, normalization: str = "quadrature") -> Path:
    """Export a PyTorch flow for nextstat: ``log_prob`` a ``torch.nn.Module`` mapping ``x``
    [events, observables] (and ``context`` [events, len(context)]) to log-densities [events];
    ``sample`` optionally one mapping standard-normal ``z`` (and ``context``) to ``x``. Writes
    ``log_prob.onnx`` (``sample.onnx``) and ``flow.json`` into ``directory`` with
    ``torch.onnx.export`` (the TorchScript exporter: no onnxscript needed) and returns the
    manifest's path, ready for ``{"type": "nextstat:flow_dist", "manifest": ...}``."""
    import torch

    dtype = dtype or torch.float64
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    d, k = len(observables), len(context)

    def export(module: Any, first: str, output: str, path: Path) -> None:
        args = [torch.zeros(4, d, dtype=dtype)]
        names = [first]
        if k:
            args.append(torch.zeros(4, k, dtype=dtype))
            names.append("context")
        axes = {n: {0: "events"} for n in names}
        axes[output] = {0: "events"}
        module = module.to(dtype).eval()
        torch.onnx.export(module, tuple(args), str(path), input_names=names, output_names=[output], dynamic_axes=axes, dynamo=False, opset_version=17)

    export(log_prob, "x", "log_prob", directory / "log_prob.onnx")
    manifest = {
        "type": "nextstat:flow",
        "observables": [{"name": n, "min": lo, "max": hi} for n, lo, hi in observables],
        "log_prob": "log_prob.onnx",
        "normalization": normalization,
    }
    if k:
        manifest["context"] = list(context)
    if sample is not None:
        export(sample, "z", "x", directory / "sample.onnx")
        manifest["sample"] = "sample.onnx"
    path = directory / "flow.json"
    path.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return path


def mixture_nll(logp: Any, yields: Any, *, offsets: Optional[Sequence[int]] = None, weights: Any = None, constraints: Optional[Sequence[Tuple[float, float]]] = None, values: Any = None, device: Optional[str] = None) -> Tuple[Any, np.ndarray]:
    """The extended mixture NLL and its gradient from per-event log-probabilities
    (docs/unbinned.md, "The NLL from log-probabilities"):
    NLL = Σₚ νₚ − Σₑ wₑ ln Σₚ νₚ exp(logp[p, e]) + Σ_c ½((θ_c − μ_c)/σ_c)².

    ``logp`` [processes, events]: a NumPy array (reduced on ``device``: "cpu", default, or
    "cuda[:N]") or a PyTorch CUDA tensor (float32 or float64), read in place on its GPU: no copy
    to the host. ``yields`` [processes] (or [datasets, processes] with ``offsets``, the datasets'
    event boundaries [0, …, events]: toys side by side); ``constraints`` [(mean, sigma)] with
    their parameters' ``values`` [constraints] (or [datasets, constraints]); ``weights`` [events].
    Returns (nll, gradient): the gradient in the yields, then the constrained parameters; one
    value and one row per dataset where ``offsets`` is given."""
    batched = offsets is not None
    yields = np.atleast_2d(np.ascontiguousarray(yields, dtype=np.float64))
    k = len(constraints or ())
    values = np.ascontiguousarray(values if values is not None else np.zeros((yields.shape[0], 0)), dtype=np.float64)
    if values.size != yields.shape[0] * k:
        raise ValueError(f"values must hold one value per constraint ({k}) for each of the {yields.shape[0]} dataset(s), "
                         f"[datasets, constraints]; it has shape {values.shape}")
    values = values.reshape(yields.shape[0], k)
    if offsets is not None:
        offsets = [int(o) for o in offsets]
        negative = [o for o in offsets if o < 0]
        if negative:
            raise ValueError(f"offsets must be event positions ≥ 0 (the datasets' boundaries), not {negative[0]}")
    weights = None if weights is None else np.ascontiguousarray(weights, dtype=np.float64)
    if weights is not None:
        bad = np.flatnonzero(~np.isfinite(weights))
        if bad.size:
            raise ValueError(f"weights[{bad[0]}] is {weights[bad[0]]}: event weights must be finite")
    constraints = None if constraints is None else [(float(m), float(s)) for m, s in constraints]
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(logp, torch.Tensor) and logp.is_cuda:
        if device not in (None, "cuda", f"cuda:{logp.device.index}"):
            raise ValueError(f"logp lies on {logp.device}; device={device!r} names another")
        if logp.dtype not in (torch.float32, torch.float64) or logp.dim() != 2:
            raise ValueError(f"logp must be a 2-d float32 or float64 tensor [processes, events], not {logp.dtype} of shape {tuple(logp.shape)}")
        logp = logp.contiguous()
        # The kernels run on the engine's stream: the tensor must be written first.
        torch.cuda.current_stream(logp.device).synchronize()
        nll, grad = _core.mixture_nll_device(logp.data_ptr(), str(logp.dtype).removeprefix("torch."), logp.shape[0], logp.shape[1], logp.device.index, yields, offsets, weights, constraints, values)
    else:
        if torch is not None and isinstance(logp, torch.Tensor):
            logp = logp.detach().numpy()
        logp = np.ascontiguousarray(logp, dtype=np.float64)
        if logp.ndim != 2:
            raise ValueError(f"logp must be 2-d [processes, events], not of shape {logp.shape}")
        nll, grad = _core.mixture_nll_host(logp, yields, offsets, weights, constraints, values, device or "cpu")
    return (nll, grad) if batched else (float(nll[0]), grad[0])
