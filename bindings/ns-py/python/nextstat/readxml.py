"""HistFactory XML with its ROOT files as a pyhf workspace, read by nextstat itself (no ROOT, no
uproot): ``pyhf.readxml.parse``'s call and result, value for value (docs/histfactory-xml.md).

    >>> spec = nextstat.readxml.parse("config/example.xml", ".")
    >>> model = nextstat.Workspace(spec).model()

``semantics="root"`` reads the model ROOT's hist2workspace builds instead (its terms travel in the
workspace under ``"nextstat:root_semantics"``, which nextstat reads and pyhf does not):

    >>> root_model = nextstat.Workspace(nextstat.readxml.parse("config/example.xml", ".", semantics="root")).model()
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

from . import _core

__all__ = ["parse"]


def parse(configfile: str | Path, rootdir: str | Path, mounts: Any = None, track_progress: bool = False, validation_as_error: bool = True, semantics: str = "pyhf") -> Dict[str, Any]:
    """The pyhf workspace (a dict) of the combination XML ``configfile``, whose paths are read
    from the folder ``rootdir`` — what ``pyhf.readxml.parse`` returns. The workspace is always
    validated (``validation_as_error`` is accepted for pyhf's signature); ``track_progress`` is
    accepted and ignored (reading takes milliseconds). ``mounts`` (pyhf's path remapping) is not
    supported: give ``rootdir`` as the folder the XML's paths start from. ``semantics``: "pyhf"
    (pyhf's reading, the default here) or "root" (ROOT's, as ``nextstat fit combination.xml``
    reads it)."""
    if mounts:
        raise NotImplementedError("nextstat.readxml.parse: mounts are not supported; give rootdir as the folder the XML's paths start from")
    if not isinstance(configfile, (str, Path)):
        raise TypeError(f"configfile must be a path (str or pathlib.Path), not {type(configfile).__name__}: nextstat reads the XML and its ROOT files from disk")
    if not isinstance(rootdir, (str, Path)):
        raise TypeError(f"rootdir must be a path (str or pathlib.Path), not {type(rootdir).__name__}")
    return json.loads(_core.readxml(str(configfile), str(rootdir), semantics))
