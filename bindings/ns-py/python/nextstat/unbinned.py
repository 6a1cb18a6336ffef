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
from pathlib import Path
from typing import Any, List, Optional, Tuple

import numpy as np

from . import _Config, _core

__all__ = ["UnbinnedModel", "load", "Flow", "load_flow", "export_flow"]


class _UnbinnedConfig(_Config):
    """``model.config``: the parameter layout, with the names pyhf's ``config`` uses (the
    binned model's ``samples``, ``auxdata`` and bins have no meaning here)."""

    par_order = property(lambda self: list(self._m.par_names))
    channels = property(lambda self: list(self._m.channels))


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
