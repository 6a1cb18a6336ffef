"""Drop-in for ``pyhf.infer.intervals.upper_limits``."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ... import InvalidInputError, upper_limit as _upper_limit

__all__ = ["upper_limit", "toms748_scan", "linear_grid_scan"]


def toms748_scan(data: Any, model: Any, bounds_low: float, bounds_up: float, level: float = 0.05,
                 atol: float = 2e-12, rtol: float = 1e-4, from_upper_limit_fn: bool = False, **hypotest_kwargs: Any):
    """pyhf's root-finding limit: for the observed CLs and each of the five expected ones, the μ
    where it crosses ``level``, by TOMS 748 (scipy) on the engine's ``hypotest``, the bracket
    widened (low halved, high doubled) until it holds the crossing. Returns ``(obs, [exp × 5])``,
    and with ``from_upper_limit_fn`` also ``(μ values tried, their hypotest results)``."""
    try:
        from scipy.optimize import toms748
    except ImportError:  # pragma: no cover - scipy is in every pyhf environment
        raise ImportError("toms748_scan needs scipy; nextstat.infer.intervals.upper_limits.upper_limit "
                          "finds limits in the engine without it") from None
    from .. import hypotest

    tried = {}

    def cls_minus_level(mu: float, which: int) -> float:
        if mu not in tried:
            tried[mu] = hypotest(mu, data, model, return_expected_set=True, **hypotest_kwargs)
        obs, exp = tried[mu]
        return float(obs if which == 0 else exp[which - 1]) - level

    def bracket(which: int):
        low, high = float(bounds_low), float(bounds_up)
        for _ in range(60):
            if cls_minus_level(low, which) >= 0:
                break
            low /= 2
        for _ in range(60):
            if cls_minus_level(high, which) < 0:
                break
            high *= 2
        # The tightest bracket among the points tried so far.
        above = [mu for mu in tried if cls_minus_level(mu, which) >= 0]
        below = [mu for mu in tried if cls_minus_level(mu, which) < 0]
        if not above or not below:
            raise InvalidInputError(f"toms748_scan: CLs does not cross {level} between {low} and {high}")
        return max(above, key=lambda m: -cls_minus_level(m, which)), min(below, key=lambda m: -cls_minus_level(m, which))

    limits = []
    for which in range(6):
        low, high = bracket(which)
        limits.append(np.asarray(toms748(cls_minus_level, low, high, args=(which,), k=2, xtol=atol, rtol=rtol)))
    obs, exp = limits[0], limits[1:]
    if from_upper_limit_fn:
        return obs, exp, (list(tried.keys()), list(tried.values()))
    return obs, exp


def linear_grid_scan(data: Any, model: Any, scan: Any, level: float = 0.05, return_results: bool = False, **hypotest_kwargs: Any):
    """The limits interpolated linearly on a grid of μ values (``upper_limit`` with ``scan``)."""
    return upper_limit(data, model, scan=scan, level=level, return_results=return_results, **hypotest_kwargs)


def upper_limit(data: Any, model: Any, scan=None, level: float = 0.05, return_results: bool = False, device: str = "cpu", **hypotest_kwargs: Any):
    """``(observed limit, expected limits −2σ…+2σ)`` at CLs ``level``; with ``scan`` a linear
    scan (pyhf's interpolation), otherwise root finding in the engine (or ``toms748_scan``,
    pyhf's, where ``rtol``/``atol`` or a test statistic other than q̃ is asked for).
    ``return_results`` adds ``(scan points, [CLs_obs, CLs_exp] per point)``."""
    if scan is None and ({"rtol", "atol"} & set(hypotest_kwargs) or hypotest_kwargs.get("test_stat", "qtilde") != "qtilde"):
        poi = model.config.poi_index
        bounds = hypotest_kwargs.get("par_bounds") or model.config.suggested_bounds()
        obs, exp, results = toms748_scan(data, model, bounds[poi][0], bounds[poi][1], level,
                                         from_upper_limit_fn=True, device=device, **hypotest_kwargs)
        return (obs, exp, results) if return_results else (obs, exp)
    test_stat = hypotest_kwargs.pop("test_stat", "qtilde")
    if test_stat != "qtilde" or set(hypotest_kwargs) - {"init_pars", "par_bounds", "fixed_params"}:
        raise InvalidInputError(f"upper_limit: unsupported arguments {sorted(set(hypotest_kwargs) | ({'test_stat'} if test_stat != 'qtilde' else set()))}")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        r = _upper_limit(model, data, level, scan, hypotest_kwargs.get("init_pars"), hypotest_kwargs.get("par_bounds"), hypotest_kwargs.get("fixed_params"), device=device)
    for w in said:
        # On a scan, limits beyond it are said below, with the value pyhf gives.
        if scan is None or "outside the scanned" not in str(w.message):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    obs, exp = np.asarray(r.obs), np.asarray(r.exp)
    points = r.points
    mus = np.array([p["mu"] for p in points])
    results = [(np.asarray(p["CLs_obs"]), np.asarray(p["CLs_exp"])) for p in points]
    if scan is not None:
        obs, exp = _grid_edges(obs, exp, mus, results, level)
    if not return_results:
        return obs, exp
    return obs, exp, (mus, results)


def _grid_edges(obs: np.ndarray, exp: np.ndarray, mus: np.ndarray, results: list, level: float):
    """Where a CLs curve does not cross ``level`` on the scan the engine's limit is NaN; pyhf's
    interpolation (``np.interp`` on the reversed curve) gives the grid's edge there, and so does
    the drop-in, with a warning that says so."""
    curves = [np.array([float(o) for o, _ in results])] + [np.array([float(e[k]) for _, e in results]) for k in range(5)]
    limits = [obs] + [exp[k] for k in range(5)]
    names = ["observed"] + [f"expected ({k:+d}σ)" for k in (-2, -1, 0, 1, 2)]
    edged = []
    for limit, curve, name in zip(limits, curves, names):
        if np.isnan(limit):
            limit = np.asarray(np.interp(level, curve[::-1], mus[::-1]))
            warnings.warn(
                f"upper_limit: the {name} CLs does not cross {level} on the scan [{mus.min():g}, {mus.max():g}]; "
                f"the limit given is pyhf's, the scan's edge {float(limit):g} (nextstat.upper_limit gives NaN: "
                "widen the scan)", stacklevel=3)
        edged.append(np.asarray(limit))
    return edged[0], np.asarray(edged[1:])
