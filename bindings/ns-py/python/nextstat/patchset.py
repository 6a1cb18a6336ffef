"""Drop-in for ``pyhf.patchset``: ``PatchSet`` and ``Patch``."""

from ._workspace import Patch, PatchSet

__all__ = ["Patch", "PatchSet"]
