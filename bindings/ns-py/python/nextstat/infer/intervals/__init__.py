"""Drop-in for ``pyhf.infer.intervals``."""

import warnings

from . import upper_limits
from .upper_limits import upper_limit

__all__ = ["upper_limit", "upper_limits"]


def upperlimit(*args, **kwargs):
    """Deprecated name of ``upper_limits.upper_limit`` (as in pyhf 0.7)."""
    warnings.warn(
        "pyhf.infer.intervals.upperlimit is deprecated in favor of pyhf.infer.intervals.upper_limits.upper_limit "
        "as of pyhf v0.7.0 and will be removed in release v0.9.0. Please use pyhf.infer.intervals.upper_limits.upper_limit.",
        DeprecationWarning,
        stacklevel=2,
    )
    return upper_limit(*args, **kwargs)
