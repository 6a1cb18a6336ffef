"""Drop-in for ``pyhf.infer.test_statistics``: the profile-likelihood test statistics of Cowan,
Cranmer, Gross and Vitells (arXiv:1007.1727) from two engine fits (the POI fixed, then free),
with pyhf's signatures, return types, warnings and errors."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..exceptions import UnspecifiedPOI
from .mle import fit, fixed_poi_fit

__all__ = ["q0", "qmu", "qmu_tilde", "tmu", "tmu_tilde"]

log = logging.getLogger(__name__)

_NO_POI = "No POI is defined. A POI is required for profile likelihood based test statistics."


def _poi(pdf: Any) -> int:
    if pdf.config.poi_index is None:
        raise UnspecifiedPOI(_NO_POI)
    return pdf.config.poi_index


def _poi_low(pdf: Any, par_bounds: Any) -> float:
    bounds = pdf.config.suggested_bounds() if par_bounds is None else par_bounds
    return float(bounds[_poi(pdf)][0])


def _warn_unless(pdf, par_bounds, bounded_at_zero: bool, message: str) -> None:
    """pyhf's warning when the POI's lower bound is not what the statistic is meant for."""
    if (_poi_low(pdf, par_bounds) == 0) != bounded_at_zero:
        log.warning(message)


def _tmu_like(mu, data, pdf, init_pars, par_bounds, fixed_params, return_fitted_pars=False):
    """−2 ln λ(μ) = twice_nll(μ, θ̂̂) − twice_nll(μ̂, θ̂), clipped at 0 (fits are not exact)."""
    mubhathat, fixed_val = fixed_poi_fit(mu, data, pdf, init_pars, par_bounds, fixed_params, return_fitted_val=True)
    muhatbhat, free_val = fit(data, pdf, init_pars, par_bounds, fixed_params, return_fitted_val=True)
    stat = np.asarray(max(float(fixed_val) - float(free_val), 0.0))
    return (stat, (mubhathat, muhatbhat)) if return_fitted_pars else stat


def _qmu_like(mu, data, pdf, init_pars, par_bounds, fixed_params, return_fitted_pars=False):
    """t-like, but 0 where μ̂ > μ (an upward fluctuation is no evidence against μ)."""
    stat, (mubhathat, muhatbhat) = _tmu_like(mu, data, pdf, init_pars, par_bounds, fixed_params, True)
    if muhatbhat[_poi(pdf)] > mu:
        stat = np.asarray(0.0)
    return (stat, (mubhathat, muhatbhat)) if return_fitted_pars else stat


def qmu(mu, data, pdf, init_pars, par_bounds, fixed_params, return_fitted_pars=False):
    """q_μ (eq. 14): −2 ln λ(μ) for μ̂ ≤ μ, else 0; for a POI not bounded at zero."""
    _warn_unless(pdf, par_bounds, False,
                 "qmu test statistic used for fit configuration with POI bounded at zero.\n"
                 "Use the qmu_tilde test statistic (pyhf.infer.test_statistics.qmu_tilde) instead.\n"
                 'If you called this from pyhf.infer.mle or pyhf.infer.hypotest, set test_stat="qtilde".')
    return _qmu_like(mu, data, pdf, init_pars, par_bounds, fixed_params, return_fitted_pars)


def qmu_tilde(mu, data, pdf, init_pars, par_bounds, fixed_params, return_fitted_pars=False):
    """q̃_μ (eq. 16): q_μ with the POI bounded below at zero."""
    _warn_unless(pdf, par_bounds, True,
                 "qmu_tilde test statistic used for fit configuration with POI not bounded at zero.\n"
                 "Use the qmu test statistic (pyhf.infer.test_statistics.qmu) instead.\n"
                 'If you called this from pyhf.infer.mle or pyhf.infer.hypotest, set test_stat="q".')
    return _qmu_like(mu, data, pdf, init_pars, par_bounds, fixed_params, return_fitted_pars)


def tmu(mu, data, pdf, init_pars, par_bounds, fixed_params, return_fitted_pars=False):
    """t_μ (eq. 8): −2 ln λ(μ), two-sided; for a POI not bounded at zero."""
    _warn_unless(pdf, par_bounds, False,
                 "tmu test statistic used for fit configuration with POI bounded at zero.\n"
                 "Use the tmu_tilde test statistic (pyhf.infer.test_statistics.tmu_tilde) instead.")
    return _tmu_like(mu, data, pdf, init_pars, par_bounds, fixed_params, return_fitted_pars)


def tmu_tilde(mu, data, pdf, init_pars, par_bounds, fixed_params, return_fitted_pars=False):
    """t̃_μ (eq. 11): −2 ln λ̃(μ), two-sided, with the POI bounded below at zero."""
    _warn_unless(pdf, par_bounds, True,
                 "tmu_tilde test statistic used for fit configuration with POI not bounded at zero.\n"
                 "Use the tmu test statistic (pyhf.infer.test_statistics.tmu) instead.")
    return _tmu_like(mu, data, pdf, init_pars, par_bounds, fixed_params, return_fitted_pars)


def q0(mu, data, pdf, init_pars, par_bounds, fixed_params, return_fitted_pars=False):
    """q_0 (eq. 12): −2 ln λ(0) for μ̂ ≥ 0, else 0 (discovery)."""
    _poi(pdf)
    if mu != 0.0:
        log.warning("q0 test statistic only used for fit configuration with POI set to zero. Setting mu=0.")
        mu = 0.0
    stat, (mubhathat, muhatbhat) = _tmu_like(mu, data, pdf, init_pars, par_bounds, fixed_params, True)
    if muhatbhat[_poi(pdf)] < 0.0:
        stat = np.asarray(0.0)
    return (stat, (mubhathat, muhatbhat)) if return_fitted_pars else stat
