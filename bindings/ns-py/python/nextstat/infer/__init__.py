"""Drop-in for ``pyhf.infer``: the same function and argument names and the same return types,
computed by nextstat. Change ``pyhf.infer`` to ``nextstat.infer``; ``pdf`` is a
``nextstat.Model``. Extra keyword: ``device="cpu"|"cuda"|"auto"``.
"""

from __future__ import annotations

from typing import Any, Tuple, Union

import numpy as np

from .. import InvalidInputError, hypotest as _hypotest, hypotest_toys as _hypotest_toys
from . import intervals, mle

__all__ = ["hypotest", "mle", "intervals"]

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
    test_stat: str = "qtilde",
    device: str = "cpu",
    **kwargs: Any,
) -> Union[np.ndarray, Tuple[Any, ...]]:
    """CLs at ``poi_test`` as ``pyhf.infer.hypotest`` returns it: ``CLs_obs``, then ``[CLsb, CLb]``
    if ``return_tail_probs``, the median expected CLs if ``return_expected``, the five expected
    values (−2σ…+2σ order of pyhf) if ``return_expected_set``."""
    unknown = set(kwargs) - _TOY_KWARGS - {"seed"}
    if unknown:
        raise InvalidInputError(f"hypotest: unsupported arguments {sorted(unknown)}")
    if calctype == "asymptotics":
        r = _hypotest(poi_test, pdf, data, test_stat, init_pars, par_bounds, fixed_params, device=device)
    elif calctype == "toybased":
        r = _hypotest_toys(poi_test, pdf, int(kwargs.get("ntoys", 2000)), int(kwargs.get("seed", 0)), data, test_stat, init_pars, par_bounds, fixed_params, device=device)
    else:
        raise InvalidInputError(f"calctype must be 'asymptotics' or 'toybased', not '{calctype}'")
    # For q0 pyhf returns the discovery p-value p0 (CLsb) where it returns CLs otherwise, and only
    # CLb as the tail probability.
    is_q0 = test_stat == "q0"
    returns = [np.asarray(r.p0_obs if is_q0 else r.cls_obs)]
    if return_tail_probs:
        returns.append([np.asarray(r.clb)] if is_q0 else [np.asarray(r.clsb), np.asarray(r.clb)])
    expected = np.asarray(r.p0_exp if is_q0 else r.cls_exp)
    if return_expected_set:
        if return_expected:
            returns.append(np.asarray(expected[2]))
        returns.append(expected)
    elif return_expected:
        returns.append(np.asarray(expected[2]))
    return tuple(returns) if len(returns) > 1 else returns[0]
