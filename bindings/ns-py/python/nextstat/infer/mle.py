"""Drop-in for ``pyhf.infer.mle``: ``fit`` and ``fixed_poi_fit`` with pyhf's return shapes."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import InvalidInputError, fit as _fit

__all__ = ["fit", "fixed_poi_fit", "twice_nll"]


def twice_nll(pars: Any, data: Any, pdf: Any) -> np.ndarray:
    """Twice the negative log-likelihood of ``data`` at ``pars``, shaped ``(1,)`` as pyhf's
    ``pyhf.infer.mle.twice_nll`` (the engine's NLL, through ``pdf.logpdf``)."""
    return -2.0 * pdf.logpdf(pars, data)


class OptimizeResult(dict):
    """The fit as pyhf's ``return_result_obj=True`` gives it (scipy's OptimizeResult fields, and
    those pyhf's Minuit optimizer adds): ``x``, ``fun`` (twice the NLL), ``success``, ``status``,
    ``message``, ``nit``, ``nfev`` and ``njev`` (NLL evaluations, each with its gradient),
    ``unc``, ``corr`` and ``hess_inv`` (the parameters' covariance)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            if name == "minuit":
                raise AttributeError(
                    "minuit: a result carries an iminuit.Minuit while pyhf's Minuit optimizer is set "
                    "(set_backend('numpy', 'minuit'), as in pyhf); this result's x, unc and hess_inv "
                    "hold the values, errors and covariance, and nextstat.fit(model, minos=[names]) "
                    "gives MINOS intervals"
                ) from None
            raise AttributeError(name) from None


def _minuit_at(pdf: Any, data: Any, best: np.ndarray, unc: np.ndarray, bounds: Any, fixed: Any, optimizer: Any) -> Any:
    """An ``iminuit.Minuit`` on twice the engine's NLL (analytic gradient), as pyhf's Minuit
    optimizer builds it, that has run MIGRAD and HESSE from the engine's minimum ``best``: what
    pyhf's result object carries as ``minuit`` (its ``fmin``, ``fixed``, ``minos()``)."""
    try:
        import iminuit
    except ImportError:
        from ..exceptions import Unsupported

        raise Unsupported("the Minuit optimizer's result object needs iminuit (pip install iminuit), as pyhf's does") from None
    data = np.asarray(data, dtype=float)
    last: dict = {}

    def evaluated(pars):
        # Minuit asks for the value and the gradient at the same point; the engine gives both.
        pars = np.asarray(pars, dtype=float)
        if last.get("pars") is None or not np.array_equal(last["pars"], pars):
            nll, grad = pdf.nll_grad(pars, data)
            last.update(pars=pars.copy(), value=2.0 * nll, grad=2.0 * np.asarray(grad))
        return last

    def twice_nll(pars):
        return evaluated(pars)["value"]

    def gradient(pars):
        return evaluated(pars)["grad"]

    m = iminuit.Minuit(twice_nll, np.asarray(best, dtype=float), grad=gradient, name=list(pdf.config.par_names))
    m.errordef = getattr(optimizer, "errordef", 1)
    m.limits = [tuple(b) for b in bounds]
    m.fixed = [bool(f) for f in fixed]
    m.errors = [u if u > 0 else 0.01 for u in np.asarray(unc, dtype=float)]
    strategy = getattr(optimizer, "strategy", None)
    m.strategy = 1 if strategy is None else strategy
    m.tol = getattr(optimizer, "tolerance", 0.1)
    m.print_level = int(bool(getattr(optimizer, "verbose", 0)))
    maxiter = getattr(optimizer, "maxiter", None)
    m.migrad(ncall=maxiter)
    if m.valid:
        m.hesse()
    return m


# Options of pyhf's optimizers that nextstat's L-BFGS-B has its own answer to: gradients are
# always analytic (do_grad), fixed parameters are always removed from the problem and put back
# (do_stitch), and it stops on its projected-gradient tolerance (maxiter, strategy, verbose).
_OPTIMIZER_OPTIONS = {"do_grad", "do_stitch", "maxiter", "strategy", "verbose", "solver_options"}


def _bounds_holding_fixed_values(pdf: Any, init_pars: Any, par_bounds: Any, fixed_params: Any) -> Any:
    """pyhf fits a parameter fixed outside its bounds (cabinetry's scans do, past μ = 0) at that
    value; nextstat's fits refuse it, so the drop-in widens such a parameter's bounds to its
    value (it does not move). Other bounds are left as given."""
    if init_pars is None or fixed_params is None:
        return par_bounds
    bounds = [list(b) for b in (pdf.config.suggested_bounds() if par_bounds is None else par_bounds)]
    widened = False
    for i, (value, fixed) in enumerate(zip(init_pars, fixed_params)):
        low, high = bounds[i]
        if fixed and not low <= float(value) <= high:
            bounds[i], widened = [min(low, float(value)), max(high, float(value))], True
    return bounds if widened else par_bounds


def fit(
    data: Any,
    pdf: Any,
    init_pars=None,
    par_bounds=None,
    fixed_params=None,
    return_uncertainties: bool = False,
    return_correlations: bool = False,
    return_fitted_val: bool = False,
    return_result_obj: bool = False,
    device: str = "cpu",
    **kwargs: Any,
):
    """Best-fit parameters (``(n, 2)`` with uncertainties when ``return_uncertainties``); then the
    correlation matrix, twice the NLL at the minimum and the result object when asked, as pyhf
    returns them. A fit that does not converge raises ``exceptions.FailedMinimization``, as
    pyhf's."""
    from ..exceptions import FailedMinimization

    unknown = set(kwargs) - {"tolerance"} - _OPTIMIZER_OPTIONS
    if unknown:
        raise InvalidInputError(f"fit: unsupported arguments {sorted(unknown)}")
    par_bounds = _bounds_holding_fixed_values(pdf, init_pars, par_bounds, fixed_params)
    r = _fit(pdf, data, init_pars, par_bounds, fixed_params, tolerance=kwargs.get("tolerance"), device=device)
    result_obj = OptimizeResult(x=r.bestfit, fun=np.asarray(r.twice_nll), success=r.converged,
                                status=0 if r.converged else 1, message=r.termination_reason, nit=r.iterations,
                                nfev=r.evaluations, njev=r.evaluations, unc=r.uncertainties,
                                corr=r.correlation, hess_inv=r.covariance)
    if not r.converged:
        raise FailedMinimization(result_obj)
    from .. import optimizer

    if return_result_obj and getattr(optimizer, "name", None) == "minuit":
        bounds = pdf.config.suggested_bounds() if par_bounds is None else par_bounds
        fixed = pdf.config.suggested_fixed() if fixed_params is None else fixed_params
        result_obj["minuit"] = _minuit_at(pdf, data, r.bestfit, r.uncertainties, bounds, fixed, optimizer)
    pars = r.bestfit
    if return_uncertainties:
        pars = np.stack([pars, r.uncertainties], axis=1)
    extra = []
    if return_correlations:
        extra.append(r.correlation)
    if return_fitted_val:
        extra.append(np.asarray(r.twice_nll))
    if return_result_obj:
        extra.append(result_obj)
    return (pars, *extra) if extra else pars


def fixed_poi_fit(poi_val: float, data: Any, pdf: Any, init_pars=None, par_bounds=None, fixed_params=None, **kwargs: Any):
    """``fit`` with the POI fixed at ``poi_val``."""
    poi = pdf.config.poi_index
    if poi is None:
        from ..exceptions import UnspecifiedPOI

        raise UnspecifiedPOI("No POI is defined. A POI is required for profile likelihood based test statistics.")
    init = list(pdf.config.suggested_init() if init_pars is None else init_pars)
    fixed = list(pdf.config.suggested_fixed() if fixed_params is None else fixed_params)
    init[poi], fixed[poi] = float(poi_val), True
    return fit(data, pdf, init, par_bounds, fixed, **kwargs)
