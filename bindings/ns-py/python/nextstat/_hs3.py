"""HS3 JSON models read by nextstat itself: binned ones (``histfactory_dist``, as ROOT writes
them: docs/hs3-binned.md) as a ``nextstat.Model`` with ROOT's semantics, unbinned ones as a
``nextstat.unbinned.UnbinnedModel``.

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
    ``UnbinnedModel`` otherwise."""
    if not isinstance(path, (str, Path)):
        raise TypeError(f"load_hs3: path must be a str or pathlib.Path, not {type(path).__name__}")
    if analysis is not None and not isinstance(analysis, str):
        raise TypeError(f"load_hs3: analysis must be a str, not {type(analysis).__name__}")
    reference = {"format": "hs3", "document": str(path), **({"analysis": analysis} if analysis else {})}
    core = _core.load_model_ref(json.dumps(reference))
    if isinstance(core, _core.Model):
        return Model(core, observed=core.observations)
    from .unbinned import UnbinnedModel

    return UnbinnedModel(core)
