"""Drop-in for ``pyhf.infer.intervals``."""

from . import upper_limits
from .upper_limits import upper_limit

__all__ = ["upper_limit", "upper_limits"]
