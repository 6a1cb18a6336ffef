"""``pyhf.writexml``: HistFactory XML export is not part of nextstat. ``writexml`` raises
``exceptions.Unsupported`` naming what to use instead (the module exists so that scripts
importing it run up to the call)."""

from __future__ import annotations

from typing import Any

from .exceptions import Unsupported

__all__ = ["writexml"]


def writexml(spec: Any, specdir: Any, data_rootdir: Any, resultprefix: Any) -> None:
    raise Unsupported(
        "HistFactory XML export (pyhf.writexml) is not part of nextstat: `nextstat export-hs3` (or "
        "Model.to_hs3()) writes the model as HS3 JSON, which ROOT 6.30+ reads with RooJSONFactoryWSTool"
    )
