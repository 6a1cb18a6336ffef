"""HS3 JSON models read by nextstat itself: binned ones (``histfactory_dist``, as ROOT writes
them: docs/hs3-binned.md) as a ``nextstat.Model`` with ROOT's semantics, unbinned ones as a
``nextstat.unbinned.UnbinnedModel``, and a likelihood of both kinds of channels as a
``JointModel``.

    >>> model = nextstat.load_hs3("workspace.hs3.json")
    >>> nextstat.fit(model).bestfit
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Union

from . import _core
from ._model import Model


def load_hs3(path: Union[str, Path], *, analysis: Optional[str] = None):
    """The model of an HS3 file's analysis (default: for binned files the first not on Asimov
    data, else the first): a ``Model`` where its channels are ``histfactory_dist``, an
    ``UnbinnedModel`` where none is, a ``JointModel`` where some are."""
    if not isinstance(path, (str, Path)):
        raise TypeError(f"load_hs3: path must be a str or pathlib.Path, not {type(path).__name__}")
    if analysis is not None and not isinstance(analysis, str):
        raise TypeError(f"load_hs3: analysis must be a str, not {type(analysis).__name__}")
    reference = {"format": "hs3", "document": str(path), **({"analysis": analysis} if analysis else {})}
    core = _core.load_model_ref(json.dumps(reference))
    if isinstance(core, _core.Model):
        return Model(core, observed=core.observations)
    if isinstance(core, _core.JointModel):
        return JointModel(core)
    from .unbinned import UnbinnedModel

    return UnbinnedModel(core)


class _JointConfig:
    """``model.config``: the parameter layout (the file's names)."""

    def __init__(self, core):
        self._m = core

    par_order = property(lambda self: list(self._m.par_names))
    par_names = par_order
    npars = property(lambda self: self._m.npars)
    poi_index = property(lambda self: self._m.poi_index)
    poi_name = property(lambda self: self._m.poi_name)

    def suggested_init(self):
        return list(self._m.suggested_init())

    def suggested_bounds(self):
        return [tuple(b) for b in self._m.suggested_bounds()]

    def suggested_fixed(self):
        return list(self._m.suggested_fixed())


class JointModel:
    """An HS3 likelihood of binned (``histfactory_dist``) and unbinned channels, parameters
    shared by the file's names (docs/hs3-binned.md). Every inference function takes it; its
    data are the file's."""

    #: The data inference uses: the file's own (kept in the engine).
    observed = None

    def __init__(self, core):
        self._model = core
        self.config = _JointConfig(core)

    def nll_grad(self, pars):
        """The NLL (the unbinned channels' in RooFit's convention) and its analytic gradient at
        ``pars``, on the file's data."""
        import numpy as np

        return self._model.nll_grad(np.ascontiguousarray(pars, dtype=np.float64))

    def __repr__(self):
        return repr(self._model)
