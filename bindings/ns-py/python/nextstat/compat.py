"""Drop-in for ``pyhf.compat``: between pyhf's parameter names and the names ROOT's HistFactory
gives the same parameters (``Lumi``, ``alpha_X`` for a constrained scalar, ``gamma_X_i`` for
element i of a vector) — the names nextstat's HS3 export writes too."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Union

__all__ = ["interpret_rootname", "paramset_to_rootnames"]

_GAMMA = re.compile(r"^gamma_(.+)_(\d+)$")


def paramset_to_rootnames(paramset: Any) -> Union[str, List[str]]:
    """ROOT's name of a scalar parameter set (``Lumi``, ``alpha_X`` when constrained, else its
    own name), or the list of ROOT's names of a vector's elements (``gamma_X_0``, …)."""
    if paramset.name == "lumi":
        return "Lumi"
    if paramset.is_scalar:
        return f"alpha_{paramset.name}" if paramset.constrained else paramset.name
    return [f"gamma_{paramset.name}_{i}" for i in range(paramset.n_parameters)]


def interpret_rootname(rootname: str) -> Dict[str, Any]:
    """What a ROOT parameter name says: ``constrained``, ``is_scalar``, ``name`` (pyhf's) and
    ``element`` (a vector's index), ``"n/a"`` where the name does not tell."""
    gamma = rootname.startswith("gamma_")
    alpha = rootname.startswith("alpha_")
    out: Dict[str, Any] = {"constrained": "n/a", "is_scalar": not gamma, "name": "n/a", "element": "n/a"}
    if gamma:
        match = _GAMMA.match(rootname)
        if match is None:
            raise ValueError(f"'{rootname}' starts with gamma_ but does not end in _<bin index>")
        out["name"], out["element"] = match.group(1), int(match.group(2))
    elif alpha:
        if rootname == "alpha_":
            raise ValueError("'alpha_' names no parameter")
        out["constrained"], out["name"] = True, rootname[len("alpha_"):]
    else:
        out["constrained"], out["name"] = False, "lumi" if rootname == "Lumi" else rootname
    return out
