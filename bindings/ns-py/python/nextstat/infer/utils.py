"""Drop-in for ``pyhf.infer.utils``: the test statistic by name and the calculator by type."""

from __future__ import annotations

from typing import Any, Callable

from ..exceptions import InvalidTestStatistic

__all__ = ["create_calculator", "get_test_stat", "all_pois_floating"]


def get_test_stat(name: str) -> Callable:
    """``'q0'`` → q0, ``'q'`` → qmu, ``'qtilde'`` → qmu_tilde."""
    from . import test_statistics

    statistics = {"q0": test_statistics.q0, "q": test_statistics.qmu, "qtilde": test_statistics.qmu_tilde}
    try:
        return statistics[name]
    except (KeyError, TypeError):
        raise InvalidTestStatistic(f"test statistic {name!r} is not one of 'q0', 'q', 'qtilde'") from None


def create_calculator(calctype: str, *args: Any, **kwargs: Any):
    """``'asymptotics'`` → AsymptoticCalculator, ``'toybased'`` → ToyCalculator."""
    from .calculators import AsymptoticCalculator, ToyCalculator

    calculators = {"asymptotics": AsymptoticCalculator, "toybased": ToyCalculator}
    if calctype not in calculators:
        raise ValueError(f"calctype must be 'asymptotics' or 'toybased', not {calctype!r}")
    return calculators[calctype](*args, **kwargs)


def all_pois_floating(pdf: Any, fixed_params: Any) -> bool:
    """Whether the POI is free (not fixed) under ``fixed_params``."""
    return not fixed_params[pdf.config.poi_index]
