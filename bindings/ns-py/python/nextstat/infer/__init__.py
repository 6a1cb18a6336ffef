"""Drop-in for ``pyhf.infer``: the same function and argument names and the same return types,
computed by nextstat. Change ``pyhf.infer`` to ``nextstat.infer``; ``pdf`` is a
``nextstat.Model``. Extra keyword: ``device="cpu"|"cuda"|"auto"``.
"""

from __future__ import annotations

from typing import Any, Tuple, Union

import numpy as np

from .. import InvalidInputError, hypotest as _hypotest, hypotest_toys as _hypotest_toys
from . import calculators, intervals, mle, test_statistics, utils
from .calculators import _toy_seed

__all__ = ["hypotest", "mle", "intervals", "calculators", "test_statistics", "utils"]

_TOY_KWARGS = {"ntoys", "track_progress"}


def hypotest(
    poi_test: float,
    data: Any,
    pdf: Any,
    init_pars=None,
    par_bounds=None,
    fixed_params=None,
    calctype: str = "asymptotics",
    return_tail_probs: bool = False,
    return_expected: bool = False,
    return_expected_set: bool = False,
    return_calculator: bool = False,
    test_stat: str = "qtilde",
    device: str = "cpu",
    **kwargs: Any,
) -> Union[np.ndarray, Tuple[Any, ...]]:
    """CLs at ``poi_test`` as ``pyhf.infer.hypotest`` returns it: ``CLs_obs``, then ``[CLsb, CLb]``
    if ``return_tail_probs``, the median expected CLs if ``return_expected``, the five expected
    values (−2σ…+2σ, a list of 0-d arrays) if ``return_expected_set``, the calculator (with its
    test statistic, distributions and fits) if ``return_calculator``. ``calc_base_dist`` and
    ``ntoys``/``track_progress``/``seed`` go to the calculator, as in pyhf."""
    unknown = set(kwargs) - _TOY_KWARGS - {"seed", "calc_base_dist"}
    if unknown:
        raise InvalidInputError(f"hypotest: unsupported arguments {sorted(unknown)}")
    _require_free_poi(pdf, fixed_params)
    calc_base_dist = kwargs.get("calc_base_dist", "normal")
    if calc_base_dist != "normal":
        # The engine's expected CLs use the full normal; the clipped one changes only them.
        from .calculators import AsymptoticCalculator

        if calctype != "asymptotics":
            raise InvalidInputError("calc_base_dist is an option of the asymptotic calculator")
        calc = AsymptoticCalculator(data, pdf, init_pars, par_bounds, fixed_params, test_stat=test_stat,
                                    calc_base_dist=calc_base_dist, device=device)
        teststat = calc.teststatistic(poi_test)
        sb, b = calc.distributions(poi_test)
        clsb, clb, cls = calc.pvalues(teststat, sb, b)
        clsb_exp, _, cls_exp = calc.expected_pvalues(sb, b)
        is_q0 = test_stat == "q0"
        returns = [clsb if is_q0 else cls]
        if return_tail_probs:
            returns.append([clb] if is_q0 else [clsb, clb])
        expected = clsb_exp if is_q0 else cls_exp
        if return_expected:
            returns.append(expected[2])
        if return_expected_set:
            returns.append(expected)
        if return_calculator:
            returns.append(calc)
        return tuple(returns) if len(returns) > 1 else returns[0]
    calc = None
    if calctype == "asymptotics":
        r = _hypotest(poi_test, pdf, data, test_stat, init_pars, par_bounds, fixed_params, device=device)
    elif calctype == "toybased":
        r = _hypotest_toys(poi_test, pdf, int(kwargs.get("ntoys", 2000)), _toy_seed(kwargs.get("seed")), data, test_stat, init_pars, par_bounds, fixed_params, device=device,
                           progress=bool(kwargs.get("track_progress", True)))
    else:
        raise InvalidInputError(f"calctype must be 'asymptotics' or 'toybased', not '{calctype}'")
    # For q0 pyhf returns the discovery p-value p0 (CLsb) where it returns CLs otherwise, and only
    # CLb as the tail probability.
    is_q0 = test_stat == "q0"
    returns = [np.asarray(r.p0_obs if is_q0 else r.cls_obs)]
    if return_tail_probs:
        returns.append([np.asarray(r.clb)] if is_q0 else [np.asarray(r.clsb), np.asarray(r.clb)])
    # An ensemble too small for an expected band gives null there: NaN, as numbers.
    expected = [np.asarray(np.nan if v is None else v, dtype=float) for v in (r.p0_exp if is_q0 else r.cls_exp)]
    if return_expected:
        returns.append(expected[2])
    if return_expected_set:
        returns.append(expected)
    if return_calculator:
        returns.append(_calculator_of(r, calctype, data, pdf, init_pars, par_bounds, fixed_params, test_stat, device, kwargs))
    return tuple(returns) if len(returns) > 1 else returns[0]


def _require_free_poi(pdf: Any, fixed_params: Any) -> None:
    """A hypothesis test needs a POI that is not fixed (the settings given, else the model
    config's, which follow ``model.config.param_set(...)`` edits, as in pyhf)."""
    from ..exceptions import InvalidModel, UnspecifiedPOI

    poi = getattr(pdf.config, "poi_index", None)
    if poi is None:
        raise UnspecifiedPOI("No POI is defined. A POI is required to run a hypothesis test.")
    fixed = pdf.config.suggested_fixed() if fixed_params is None else fixed_params
    if fixed[poi]:
        raise InvalidModel(f"POI at index [{poi}] is set as fixed, which makes inference impossible. Please unfix the POI to continue.")


def _calculator_of(result, calctype, data, pdf, init_pars, par_bounds, fixed_params, test_stat, device, kwargs):
    """The calculator of a hypotest the engine ran, in the state pyhf's would be in after it:
    the asymptotic one with √q_A and the five fits, the toy one with its settings."""
    from .calculators import AsymptoticCalculator, HypoTestFitResults, ToyCalculator

    if calctype == "asymptotics":
        calc = AsymptoticCalculator(data, pdf, init_pars, par_bounds, fixed_params, test_stat=test_stat, device=device)
        report = result.to_dict()
        calc.sqrtqmuA_v = np.asarray(report["sqrt_q_asimov"])
        fits = report["fitted_pars"]
        calc.fitted_pars = HypoTestFitResults(**{k: np.asarray(fits[k]) for k in HypoTestFitResults.__dataclass_fields__})
        return calc
    return ToyCalculator(data, pdf, init_pars, par_bounds, fixed_params, test_stat=test_stat,
                         ntoys=int(kwargs.get("ntoys", 2000)), track_progress=kwargs.get("track_progress", True),
                         seed=kwargs.get("seed"), device=device)
