"""CMS Combine datacards, read by nextstat itself (no Combine, no ROOT): the model has Combine's
likelihood (docs/combine.md), and every verb of nextstat takes it.

    >>> model = nextstat.Datacard("card.txt").model()
    >>> nextstat.fit(model).bestfit
"""

from __future__ import annotations

import json
from pathlib import Path

from . import _core
from ._model import Model


class Datacard:
    """A datacard from its file, or from its text (``Datacard(text="imax 1\\n…")``); ``mass``
    is what ``$MASS`` in its template names stands for (text2workspace's ``-m``); ``physics``
    lists multiSignalModel's options (text2workspace's ``--PO``: ``"map=.*/ggH:r_ggH[1,0,10]"``,
    ``"turnoff=ttH"``), one POI per map instead of ``r`` on every signal process."""

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        text: str | None = None,
        mass: str | float | None = None,
        physics: list[str] | tuple[str, ...] = (),
    ) -> None:
        if (path is None) == (text is None):
            raise TypeError("Datacard: give the card's path or its text (text=...), one of them")
        if path is not None and not isinstance(path, (str, Path)):
            raise TypeError(f"Datacard: path must be a str or pathlib.Path, not {type(path).__name__}")
        if text is not None and not isinstance(text, str):
            raise TypeError(f"Datacard: text must be a str, not {type(text).__name__}")
        if mass is not None and (isinstance(mass, bool) or not isinstance(mass, (str, int, float))):
            raise TypeError(f"Datacard: mass must be a str or a number, not {type(mass).__name__}")
        if isinstance(physics, str) or not all(isinstance(o, str) for o in physics):
            raise TypeError("Datacard: physics must be a list of option strings ('map=…', 'turnoff=…')")
        self._reference = {"format": "datacard", **({"card": str(path)} if path is not None else {"text": text})}
        if physics:
            self._reference["physics"] = list(physics)
        if mass is not None:
            # As names spell it: 125 and 125.0 are both "125".
            if isinstance(mass, str):
                self._reference["mass"] = mass
            else:
                self._reference["mass"] = str(int(mass)) if float(mass).is_integer() else repr(float(mass))

    def model(self) -> Model:
        """The model of the card (a ``nextstat.Model`` holding the card's observations): the POI
        ``r`` on the signal processes (or the maps' POIs), Combine's terms as docs/combine.md
        lists them."""
        core = _core.load_model_ref(json.dumps(self._reference))
        return Model(core, observed=core.observations)
