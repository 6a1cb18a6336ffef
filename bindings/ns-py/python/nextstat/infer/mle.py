"""Drop-in for ``pyhf.infer.mle``: ``fit`` and ``fixed_poi_fit`` with pyhf's return shapes."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import InvalidInputError, fit as _fit

__all__ = ["fit", "fixed_poi_fit"]


def fit(
    data: Any,
    pdf: Any,
    init_pars=None,
    par_bounds=None,
    fixed_params=None,
    return_uncertainties: bool = False,
    return_correlations: bool = False,
    return_fitted_val: bool = False,
    device: str = "cpu",
    **kwargs: Any,
):
    """Best-fit parameters (``(n, 2)`` with uncertainties when ``return_uncertainties``); then the
    correlation matrix and twice the NLL at the minimum when asked, as pyhf returns them."""
    unknown = set(kwargs) - {"tolerance"}
    if unknown:
        raise InvalidInputError(f"fit: unsupported arguments {sorted(unknown)}")
    r = _fit(pdf, data, init_pars, par_bounds, fixed_params, tolerance=kwargs.get("tolerance"), device=device)
    pars = r.bestfit
    if return_uncertainties:
        pars = np.stack([pars, r.uncertainties], axis=1)
    extra = []
    if return_correlations:
        extra.append(r.correlation)
    if return_fitted_val:
        extra.append(np.asarray(r.twice_nll))
    return (pars, *extra) if extra else pars


def fixed_poi_fit(poi_val: float, data: Any, pdf: Any, init_pars=None, par_bounds=None, fixed_params=None, **kwargs: Any):
    """``fit`` with the POI fixed at ``poi_val``."""
    poi = pdf.config.poi_index
    if poi is None:
        raise InvalidInputError("fixed_poi_fit: the model has no POI")
    init = list(pdf.config.suggested_init() if init_pars is None else init_pars)
    fixed = list(pdf.config.suggested_fixed() if fixed_params is None else fixed_params)
    init[poi], fixed[poi] = float(poi_val), True
    return fit(data, pdf, init, par_bounds, fixed, **kwargs)
