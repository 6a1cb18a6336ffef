"""Drop-in for ``pyhf.optimize``: ``scipy_optimizer`` and ``minuit_optimizer``, pyhf's optimizer
objects, for ``set_backend(..., custom_optimizer)`` and ``pyhf.optimizer``.

nextstat fits every model with its own bounded quasi-Newton minimiser (L-BFGS-B with analytic
gradients, then a Newton polish on the analytic Hessian), whichever object is set. The objects
keep pyhf's settings so that scripts reading or setting them (``pyhf.optimizer.tolerance``,
``.maxiter``, ``.name``) run, but the fits do not follow them: pyhf's ``tolerance`` means a
different thing for each optimizer (scipy's ``ftol``, Minuit's EDM goal), while nextstat's
convergence test is its projected-gradient tolerance, given to a fit as ``tolerance=``."""

from __future__ import annotations

from typing import Any

from .exceptions import Unsupported

__all__ = ["scipy_optimizer", "minuit_optimizer"]


class _Optimizer:
    """Settings every pyhf optimizer has: ``maxiter`` (100000) and ``verbose`` (0)."""

    name = "nextstat"

    def __init__(self, **kwargs: Any) -> None:
        self.maxiter = kwargs.pop("maxiter", 100000)
        self.verbose = kwargs.pop("verbose", 0)
        if kwargs:
            raise Unsupported(f"Unsupported kwargs were passed in: {sorted(kwargs)}.")

    def __repr__(self) -> str:
        settings = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({settings}) — fits run on nextstat's L-BFGS-B"


class scipy_optimizer(_Optimizer):  # noqa: N801 (pyhf's name)
    """pyhf's SciPy optimizer object: ``tolerance`` (``None``) and ``solver_options`` are kept."""

    name = "scipy"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.tolerance = kwargs.pop("tolerance", None)
        self.solver_options = dict(kwargs.pop("solver_options", {}) or {})
        super().__init__(*args, **kwargs)


class minuit_optimizer(_Optimizer):  # noqa: N801 (pyhf's name)
    """pyhf's Minuit optimizer object: ``errordef`` (1), ``steps`` (1000), ``strategy``
    (``None``) and ``tolerance`` (0.1) are kept. While it is set, a fit's result object
    (``return_result_obj=True``) carries ``minuit``: an ``iminuit.Minuit`` on the engine's NLL
    (with its analytic gradient) that has run MIGRAD and HESSE from nextstat's minimum, so
    ``fmin``, ``fixed``, ``merrors`` and ``minos()`` work as on pyhf's."""

    name = "minuit"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.errordef = kwargs.pop("errordef", 1)
        self.steps = kwargs.pop("steps", 1000)
        self.strategy = kwargs.pop("strategy", None)
        self.tolerance = kwargs.pop("tolerance", 0.1)
        super().__init__(*args, **kwargs)
