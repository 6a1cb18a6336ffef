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

from pathlib import Path
from typing import Any, List, Optional, Tuple

import numpy as np

from . import _Config, _core

__all__ = ["UnbinnedModel", "load"]


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
