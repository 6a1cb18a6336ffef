"""``pyhf.utils``: the JSON digest that patchsets and workspaces are identified by."""

import hashlib
import json
from typing import Any

__all__ = ["digest", "citation"]


def digest(obj: Any, algorithm: str = "sha256") -> str:
    """The hex digest of ``obj`` as pyhf computes it: ``json.dumps(obj, sort_keys=True,
    ensure_ascii=False)`` encoded as UTF-8, hashed with ``algorithm`` (any of hashlib's).
    ``Workspace`` objects are digested through their JSON document."""
    if hasattr(obj, "spec") and hasattr(obj, "digest") and not isinstance(obj, dict):
        obj = obj.spec
    try:
        text = json.dumps(obj, sort_keys=True, ensure_ascii=False)
    except TypeError as e:
        raise ValueError(f"the object cannot be digested: it is not JSON-serialisable ({e})") from None
    try:
        h = hashlib.new(algorithm)
    except (ValueError, TypeError):
        raise ValueError(f"{algorithm!r} is not an algorithm hashlib knows (e.g. 'sha256', 'md5')") from None
    h.update(text.encode("utf8"))
    return h.hexdigest()


def citation(oneline: bool = False) -> str:
    """The BibTeX entry to cite nextstat by (``pyhf.utils.citation``'s call; under
    ``install_as_pyhf`` a script that prints pyhf's citation prints the software that computed
    its results). ``oneline`` joins its lines."""
    from . import __version__

    entry = "\n".join([
        "@software{nextstat,",
        "  title = {{nextstat: v%s}}," % __version__,
        "  version = {%s}," % __version__,
        "  note = {likelihood inference for HistFactory, HS3 and CMS Combine models}",
        "}",
    ])
    return "".join(entry.splitlines()) if oneline else entry
