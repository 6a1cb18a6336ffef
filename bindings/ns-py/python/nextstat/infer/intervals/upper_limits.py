"""Drop-in for ``pyhf.infer.intervals.upper_limits``."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import InvalidInputError, upper_limit as _upper_limit

__all__ = ["upper_limit"]


def upper_limit(data: Any, model: Any, scan=None, level: float = 0.05, return_results: bool = False, device: str = "cpu", **hypotest_kwargs: Any):
    """``(observed limit, expected limits −2σ…+2σ)`` at CLs ``level``; with ``scan`` a linear
    scan (pyhf's interpolation), otherwise root finding. ``return_results`` adds
    ``(scan points, [CLs_obs, CLs_exp] per point)``."""
    test_stat = hypotest_kwargs.pop("test_stat", "qtilde")
    if test_stat != "qtilde" or set(hypotest_kwargs) - {"init_pars", "par_bounds", "fixed_params"}:
        raise InvalidInputError(f"upper_limit: unsupported arguments {sorted(set(hypotest_kwargs) | ({'test_stat'} if test_stat != 'qtilde' else set()))}")
    r = _upper_limit(model, data, level, scan, hypotest_kwargs.get("init_pars"), hypotest_kwargs.get("par_bounds"), hypotest_kwargs.get("fixed_params"), device=device)
    obs, exp = np.asarray(r.obs), np.asarray(r.exp)
    if not return_results:
        return obs, exp
    points = r.points
    mus = np.array([p["mu"] for p in points])
    results = [(np.asarray(p["CLs_obs"]), np.asarray(p["CLs_exp"])) for p in points]
    return obs, exp, (mus, results)
