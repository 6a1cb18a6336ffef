"""Drop-in for ``pyhf.workspace``: ``Workspace``."""

from ._workspace import Workspace

__all__ = ["Workspace"]
