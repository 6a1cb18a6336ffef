"""cabinetry on nextstat: cabinetry's fit, ranking, scan, limit and significance computed by the
engine, returned as cabinetry's own result containers, so cabinetry's tables and figures
(``cabinetry.tabulate``, ``cabinetry.visualize.pulls/ranking/correlation_matrix/scan/limit``) work
on them unchanged::

    import cabinetry
    from nextstat import cabinetry as ns_cabinetry

    model, data = ns_cabinetry.model_and_data(workspace)           # instead of cabinetry.model_utils
    fit_results = ns_cabinetry.fit(model, data)                     # instead of cabinetry.fit.fit
    cabinetry.visualize.pulls(fit_results)
    ranking = ns_cabinetry.ranking(model, data, fit_results=fit_results)
    cabinetry.visualize.ranking(ranking)

cabinetry drives pyhf through pyhf's optimizer objects (iminuit's ``Minuit`` for MINOS and its
fit status); this adapter calls the engine instead and keeps cabinetry's conventions: the same
parameter labels and order, impacts of ±1σ pre- and post-fit, scans over ±3σ in 11 steps, limits
at 95 % CL, and ``device=`` for a GPU. cabinetry itself is needed only for its containers (and
figures).
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import numpy as np

from . import Workspace, fit as _fit, gof as _gof, profile_scan as _scan, ranking as _ranking, significance as _significance, upper_limit as _upper_limit

__all__ = ["model_and_data", "fit", "ranking", "scan", "limit", "significance"]


def _containers():
    try:
        from cabinetry.fit import results_containers
    except ImportError as e:  # pragma: no cover - exercised where cabinetry is absent
        raise ImportError("nextstat.cabinetry returns cabinetry's result containers: pip install cabinetry") from e
    return results_containers


def model_and_data(spec: Any, asimov: bool = False, include_auxdata: bool = True) -> Tuple[Any, List[float]]:
    """The model of a workspace (a dict, JSON text, a path or a ``Workspace``) and its data — the
    Asimov data at the suggested parameters with ``asimov`` — as ``cabinetry.model_utils.model_and_data``."""
    ws = spec if isinstance(spec, Workspace) else Workspace(spec)
    model = ws.model()
    if asimov:
        data = list(model.expected_data(model.config.suggested_init(), include_auxdata=include_auxdata))
    else:
        data = list(ws.data(model, include_auxdata=include_auxdata))
    return model, data


def fit(model: Any, data: Any, *, minos: Optional[Any] = None, goodness_of_fit: bool = False,
        init_pars: Optional[List[float]] = None, fix_pars: Optional[List[bool]] = None,
        par_bounds: Optional[List[Tuple[float, float]]] = None, device: str = "cpu"):
    """``cabinetry.fit.fit``: best fit, uncertainties, labels, correlations, −2 ln L at the minimum,
    the goodness-of-fit p-value (saturated model) and MINOS intervals for ``minos`` (names)."""
    names = [minos] if isinstance(minos, str) else list(minos or [])
    r = _fit(model, data, init_pars, par_bounds, fix_pars, device=device, minos=names)
    # cabinetry reports fixed parameters with zero uncertainty.
    fixed = fix_pars or model.config.suggested_fixed()
    uncertainty = np.where(np.asarray(fixed, dtype=bool), 0.0, r.uncertainties)
    intervals = {name: (iv["lower"] - r[name], iv["upper"] - r[name]) for name, iv in r.minos.items()}
    p_value = _gof(model, data, init_pars, par_bounds, fix_pars, device=device).p_value if goodness_of_fit else -1
    return _containers().FitResults(np.asarray(r.bestfit), uncertainty, list(r.parameter_names), np.asarray(r.correlation),
                                    float(r.twice_nll), p_value, intervals)


def ranking(model: Any, data: Any, *, fit_results: Any = None, init_pars=None, fix_pars=None, par_bounds=None, device: str = "cpu"):
    """``cabinetry.fit.ranking``: pre- and post-fit impacts on the POI of every other parameter
    (model order, the POI left out; a fixed parameter has no impact). The impacts come from the
    engine's own nominal fit with the same settings; ``fit_results`` gives the best fits and
    uncertainties shown beside them (pass the one made with these settings)."""
    r = _ranking(model, data, init_pars, par_bounds, fix_pars, device=device, progress=False)
    if fit_results is None:
        fit_results = fit(model, data, init_pars=init_pars, fix_pars=fix_pars, par_bounds=par_bounds, device=device)
    poi = model.config.poi_index
    by_name = {e["name"]: e for e in r.entries}
    labels = [name for i, name in enumerate(fit_results.labels) if i != poi]
    impact = lambda key: np.array([(by_name[n][key] if n in by_name and by_name[n][key] is not None else 0.0) for n in labels])  # noqa: E731
    return _containers().RankingResults(np.delete(fit_results.bestfit, poi), np.delete(fit_results.uncertainty, poi), labels,
                                        impact("impact_prefit_up"), impact("impact_prefit_down"),
                                        impact("impact_postfit_up"), impact("impact_postfit_down"))


def scan(model: Any, data: Any, par_name: str, *, par_range: Optional[Tuple[float, float]] = None, n_steps: int = 11,
         init_pars=None, fix_pars=None, par_bounds=None, device: str = "cpu"):
    """``cabinetry.fit.scan``: −2 Δln L of the profile likelihood of ``par_name`` over
    ``par_range`` (default: its best fit ± 3σ) in ``n_steps`` points."""
    best = _fit(model, data, init_pars, par_bounds, fix_pars, device=device)
    value, sigma = best[par_name], float(best.uncertainties[best.parameter_names.index(par_name)])
    low, high = par_range if par_range is not None else (value - 3 * sigma, value + 3 * sigma)
    values = np.linspace(low, high, n_steps)
    r = _scan(model, values.tolist(), data, par_name, init_pars, par_bounds, fix_pars, device=device, progress=False)
    return _containers().ScanResults(par_name, value, sigma, np.asarray(r.values), np.asarray(r.delta_twice_nll))


def limit(model: Any, data: Any, *, confidence_level: float = 0.95, init_pars=None, fix_pars=None, par_bounds=None, device: str = "cpu"):
    """``cabinetry.fit.limit``: observed and expected (−2σ…+2σ) upper limits on the POI with the
    CLs of every point the root finding evaluated."""
    r = _upper_limit(model, data, 1 - confidence_level, None, init_pars, par_bounds, fix_pars, device=device, progress=False)
    points = sorted(r.points, key=lambda p: p["mu"])
    return _containers().LimitResults(r.obs, np.asarray(r.exp), np.array([p["CLs_obs"] for p in points]),
                                      np.array([p["CLs_exp"] for p in points]), np.array([p["mu"] for p in points]),
                                      confidence_level)


def significance(model: Any, data: Any, *, init_pars=None, fix_pars=None, par_bounds=None, device: str = "cpu"):
    """``cabinetry.fit.significance``: discovery p-value and significance, observed and expected."""
    r = _significance(model, data, init_pars, par_bounds, fix_pars, device=device)
    # The median of the expected band (−2σ…+2σ) is cabinetry's expected value.
    median = lambda values: float("nan") if values is None or values[2] is None else float(values[2])  # noqa: E731
    return _containers().SignificanceResults(r.p0_obs, r.z_obs, median(list(r.p0_exp)), median(list(r.z_exp)))
