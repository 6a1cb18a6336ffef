"""``pyhf.utils``: the JSON digest that patchsets and workspaces are identified by."""

import hashlib
import json
from typing import Any

__all__ = ["digest"]


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
