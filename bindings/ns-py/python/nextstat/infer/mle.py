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
                    "minuit: nextstat fits with its own minimiser, not iminuit, so there is no Minuit "
                    "object; its values, errors and covariance are this result's x, unc and hess_inv, "
                    "and MINOS intervals come from nextstat.fit(model, minos=[names]) (or "
                    "nextstat.profile_scan)"
                ) from None
            raise AttributeError(name) from None


# Options of pyhf's optimizers that nextstat's L-BFGS-B has its own answer to: gradients are
# always analytic (do_grad), fixed parameters are always removed from the problem and put back
# (do_stitch), and it stops on its projected-gradient tolerance (maxiter, strategy, verbose).
_OPTIMIZER_OPTIONS = {"do_grad", "do_stitch", "maxiter", "strategy", "verbose", "solver_options"}


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
    r = _fit(pdf, data, init_pars, par_bounds, fixed_params, tolerance=kwargs.get("tolerance"), device=device)
    result_obj = OptimizeResult(x=r.bestfit, fun=np.asarray(r.twice_nll), success=r.converged,
                                status=0 if r.converged else 1, message=r.termination_reason, nit=r.iterations,
                                nfev=r.evaluations, njev=r.evaluations, unc=r.uncertainties,
                                corr=r.correlation, hess_inv=r.covariance)
    if not r.converged:
        raise FailedMinimization(result_obj)
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
