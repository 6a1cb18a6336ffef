"""Typed result objects of the native API, built from the engine's JSON reports.

Every result keeps the report it came from: ``.to_dict()`` returns it with the same key names as
the ``nextstat`` CLI's JSON output, so a script can switch between the two.
"""

from __future__ import annotations

import json
import warnings
from typing import Any, Dict, List

import numpy as np


class _Result:
    """Attributes from a report; array-valued entries become NumPy float64 arrays."""

    _arrays: tuple = ()

    def __init__(self, report: Dict[str, Any]):
        self._report = report

    @classmethod
    def _from_json(cls, text: str) -> "_Result":
        report = json.loads(text)
        # What the CLI prints on stderr (failed toy fits left out, limits outside the range)
        # reaches Python users as a warning; the text stays in ``.warning`` / ``to_dict()``.
        if cls in _WARNS and report.get("warning"):
            warnings.warn(report["warning"], RuntimeWarning, stacklevel=3)
        return cls(report)

    def to_dict(self) -> Dict[str, Any]:
        """The report, with the CLI's JSON key names."""
        return json.loads(json.dumps(self._report))

    def _get(self, key: str) -> Any:
        value = self._report.get(key)
        if key in self._arrays and value is not None:
            return np.asarray(value, dtype=np.float64)
        return value

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={self._short(self._report[k])}" for k in self._repr_keys if k in self._report)
        return f"{type(self).__name__}({shown})"

    _repr_keys: tuple = ()

    @staticmethod
    def _short(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.6g}"
        if isinstance(value, list) and len(value) > 6:
            return f"[{len(value)} values]"
        if isinstance(value, list):
            return "[" + ", ".join(_Result._short(v) for v in value) + "]"
        return repr(value)


class FitResult(_Result):
    """A maximum-likelihood fit: ``bestfit``, ``uncertainties``, ``twice_nll``, ``converged``, …"""

    _arrays = ("bestfit", "uncertainties", "correlation", "covariance")
    #: Pre- and post-fit yields per channel (with ``yields=True``; else ``None``).
    yields = property(lambda self: self._report.get("yields"))
    #: Profile-likelihood intervals by parameter name (with ``minos=[...]``; else ``{}``):
    #: ``{"lower", "upper", "error_down", "error_up"}``.
    minos = property(lambda self: dict(self._report.get("minos") or {}))
    _repr_keys = ("twice_nll", "converged", "iterations")

    parameter_names = property(lambda self: list(self._report["parameter_names"]))
    bestfit = property(lambda self: self._get("bestfit"))
    uncertainties = property(lambda self: self._get("uncertainties"))
    correlation = property(lambda self: self._get("correlation"))
    covariance = property(lambda self: self._get("covariance"))
    twice_nll = property(lambda self: float(self._report["twice_nll"]))
    nll = property(lambda self: float(self._report["nll"]))
    converged = property(lambda self: bool(self._report["converged"]))
    termination_reason = property(lambda self: self._report["termination_reason"])
    iterations = property(lambda self: int(self._report["iterations"]))
    #: Evaluations of the NLL (each with its gradient).
    evaluations = property(lambda self: int(self._report["evaluations"]))
    at_bound = property(lambda self: list(self._report["at_bound"]))
    warning = property(lambda self: self._report.get("warning"))
    #: The parameters of interest (the one tests test first): ``[{"name", "bestfit",
    #: "uncertainty"}, ...]``.
    pois = property(lambda self: list(self._report.get("pois") or []))

    def __getitem__(self, name: str) -> float:
        """Best-fit value of a parameter by name (``fit["mu"]``)."""
        return float(self.bestfit[self.parameter_names.index(name)])


def _number_or_nan(value) -> float:
    """A p-value the engine could not give (null: e.g. a toy ensemble too small) is NaN."""
    return float("nan") if value is None else float(value)


class HypotestResult(_Result):
    """CLs at one POI value: ``cls_obs``, ``cls_exp`` (−2σ…+2σ), ``clsb``, ``clb``; for the
    discovery statistic q0, ``p0_obs`` and ``p0_exp`` instead of CLs (as pyhf's ``hypotest``)."""

    _arrays = ("CLs_exp", "CLsb_exp", "CLb_exp", "p0_exp")

    @property
    def _repr_keys(self):
        if self._report.get("test_stat") == "q0":
            return ("test_stat", "p0_obs", "p0_exp")
        return ("mu", "test_stat", "CLs_obs", "CLs_exp")

    def _cls(self, key):
        if key not in self._report:
            raise AttributeError(f"a {self._report.get('test_stat')} test gives p0 (p0_obs, p0_exp), not CLs")
        return self._report[key]

    mu = property(lambda self: float(self._report["mu"]))
    #: The parameter of interest tested.
    poi = property(lambda self: self._report.get("poi"))
    test_stat = property(lambda self: self._report["test_stat"])
    cls_obs = property(lambda self: _number_or_nan(self._cls("CLs_obs")))
    cls_exp = property(lambda self: (self._cls("CLs_exp"), self._get("CLs_exp"))[1])
    p0_obs = property(lambda self: float(self._report["p0_obs"]))
    p0_exp = property(lambda self: self._get("p0_exp"))
    clsb = property(lambda self: _number_or_nan(self._report["CLsb"]))
    clb = property(lambda self: _number_or_nan(self._report["CLb"]))
    clsb_exp = property(lambda self: self._get("CLsb_exp"))
    clb_exp = property(lambda self: self._get("CLb_exp"))


class AsymptoticHypotestResult(HypotestResult):
    sqrt_q = property(lambda self: float(self._report["sqrt_q"]))
    sqrt_q_asimov = property(lambda self: float(self._report["sqrt_q_asimov"]))
    fits_converged = property(lambda self: bool(self._report["fits_converged"]))


class ToyHypotestResult(HypotestResult):
    _repr_keys = ("mu", "test_stat", "CLs_obs", "n_toys", "n_failed")

    teststat_obs = property(lambda self: float(self._report["teststat_obs"]))
    #: Every toy's test statistic, ``{"signal_plus_background": [...], "background_only": [...]}``
    #: (with ``teststats=True``; else ``None``).
    teststats = property(lambda self: self._report.get("teststats"))
    n_toys = property(lambda self: int(self._report["n_toys"]))
    n_failed = property(lambda self: int(self._report["n_failed"]))
    seed = property(lambda self: int(self._report["seed"]))
    failures = property(lambda self: dict(self._report["failures"]))
    warning = property(lambda self: self._report.get("warning"))


class UpperLimitResult(_Result):
    """Observed and expected (−2σ…+2σ) upper limits, with every CLs point computed."""

    _arrays = ("exp",)
    _repr_keys = ("obs", "exp", "level")

    # A limit outside the range examined (the POI's bounds, or the scan) has no value: NaN here,
    # and ``obs_outside`` / ``exp_outside`` say on which side ({"above": μ} or {"below": μ}).
    obs = property(lambda self: float("nan") if self._report["obs"] is None else float(self._report["obs"]))
    exp = property(lambda self: self._get("exp"))
    obs_outside = property(lambda self: self._report.get("obs_outside"))
    exp_outside = property(lambda self: list(self._report.get("exp_outside") or []))
    warning = property(lambda self: self._report.get("warning"))
    level = property(lambda self: float(self._report["level"]))
    #: The parameter of interest the limit is on.
    poi = property(lambda self: self._report.get("poi"))
    points = property(lambda self: list(self._report["points"]))
    # Toy-based limits: "toys" (asymptotic: "asymptotic"), and the Monte-Carlo errors of the
    # limits (NaN where a limit lies outside the grid; None for asymptotic limits).
    method = property(lambda self: self._report.get("method", "asymptotic"))
    obs_error = property(lambda self: float(self._report["obs_error"]) if "obs_error" in self._report else None)
    exp_error = property(lambda self: [float(e) for e in self._report["exp_error"]] if "exp_error" in self._report else None)


class SignificanceResult(_Result):
    _arrays = ("p0_exp", "Z_exp")
    _repr_keys = ("p0_obs", "Z_obs")

    p0_obs = property(lambda self: float(self._report["p0_obs"]))
    #: The parameter of interest tested.
    poi = property(lambda self: self._report.get("poi"))
    z_obs = property(lambda self: float(self._report["Z_obs"]))
    p0_exp = property(lambda self: self._get("p0_exp"))
    z_exp = property(lambda self: self._get("Z_exp"))


class ProfileScanResult(_Result):
    _arrays = ("values", "twice_nll", "delta_twice_nll")
    _repr_keys = ("parameter", "values")

    parameter = property(lambda self: self._report["parameter"])
    values = property(lambda self: self._get("values"))
    twice_nll = property(lambda self: self._get("twice_nll"))
    delta_twice_nll = property(lambda self: self._get("delta_twice_nll"))
    converged = property(lambda self: list(self._report["converged"]))


class GridScanResult(_Result):
    """A profile scan over a grid of parameters: ``delta_twice_nll`` shaped as the grid (one axis
    per parameter), and for two parameters ``contours``: per confidence level, its 2ΔNLL and its
    lines (each an array of (x, y) points; closed where first == last)."""

    _repr_keys = ("parameters", "cl")

    parameters = property(lambda self: list(self._report["parameters"]))
    grid = property(lambda self: [np.asarray(a, dtype=np.float64) for a in self._report["grid"]])
    cl = property(lambda self: list(self._report["cl"]))
    bestfit_twice_nll = property(lambda self: float(self._report["bestfit_twice_nll"]))
    twice_nll = property(lambda self: self._shaped("twice_nll"))
    delta_twice_nll = property(lambda self: self._shaped("delta_twice_nll"))
    converged = property(lambda self: np.asarray(self._report["converged"], dtype=bool).reshape([len(a) for a in self._report["grid"]]))
    contours = property(lambda self: [
        {"cl": c["cl"], "delta_twice_nll": c["delta_twice_nll"], "lines": [np.asarray(line, dtype=np.float64).reshape(-1, 2) for line in c["lines"]]}
        for c in self._report["contours"]
    ])

    def _shaped(self, key):
        values = np.array([float(v) for v in self._report[key]], dtype=np.float64)
        return values.reshape([len(a) for a in self._report["grid"]])


class RankingResult(_Result):
    """Pulls, constraints and impacts, sorted by post-fit impact (largest first)."""

    _repr_keys = ("poi", "poi_bestfit")

    poi = property(lambda self: self._report["poi"])
    poi_bestfit = property(lambda self: float(self._report["poi_bestfit"]))
    entries = property(lambda self: list(self._report["entries"]))
    names = property(lambda self: [e["name"] for e in self._report["entries"]])
    failed_refits = property(lambda self: list(self._report["failed_refits"]))


class PosteriorResult(_Result):
    """A Bayesian posterior by NUTS: the POI's credible ``upper_limit`` (± ``upper_limit_error``,
    its Monte-Carlo error) and ``central_interval`` at ``cl``; per free parameter its summary
    (``parameters``: mean, sd, quantiles, R̂, bulk and tail ESS); the draws by name as
    ``(chains, draws)`` arrays (``draws``; ``to_arviz()`` for an ArviZ InferenceData)."""

    _repr_keys = ("poi", "cl", "upper_limit", "central_interval")

    poi = property(lambda self: self._report["poi"])
    cl = property(lambda self: float(self._report["cl"]))
    upper_limit = property(lambda self: float(self._report["upper_limit"]))
    upper_limit_error = property(lambda self: float(self._report["upper_limit_error"]))
    central_interval = property(lambda self: tuple(float(v) for v in self._report["central_interval"]))
    #: What each chain's sampler did after warmup (divergences, step size, tree depth, acceptance).
    sampler = property(lambda self: list(self._report["sampler"]))
    warning = property(lambda self: self._report.get("warning"))

    @property
    def parameters(self) -> Dict[str, Dict[str, Any]]:
        """Per free parameter: ``mean``, ``sd``, ``quantiles`` (at ``quantile_levels``),
        ``r_hat``, ``ess_bulk``, ``ess_tail``."""
        return {p["name"]: {k: v for k, v in p.items() if k != "name"} for p in self._report["parameters"]}

    r_hat = property(lambda self: {n: float(p["r_hat"]) for n, p in self.parameters.items()})
    ess_bulk = property(lambda self: {n: float(p["ess_bulk"]) for n, p in self.parameters.items()})

    @property
    def draws(self) -> Dict[str, np.ndarray]:
        """Every free parameter's draws, ``(chains, draws)`` (the CLI keeps them with
        ``--keep-draws``)."""
        kept = self._report.get("draws_by_chain")
        if kept is None:
            raise AttributeError("this posterior was run without keeping its draws (keep_draws=True)")
        values = np.asarray(kept["values"], dtype=np.float64)
        return {name: values[:, :, k] for k, name in enumerate(kept["names"])}

    def to_arviz(self):
        """The draws as an ArviZ ``InferenceData`` (its ``posterior`` group, chains × draws)."""
        try:
            import arviz
        except ImportError:
            raise ImportError("to_arviz needs ArviZ: pip install arviz (the draws are in .draws)") from None
        return arviz.from_dict(posterior=self.draws)


class GofResult(_Result):
    _repr_keys = ("minus_two_log_lambda", "ndof", "p_value")

    minus_two_log_lambda = property(lambda self: float(self._report["minus_two_log_lambda"]))
    ndof = property(lambda self: int(self._report["ndof"]))
    p_value = property(lambda self: float(self._report["p_value"]))


class ToyFits:
    """Toy datasets (rows of main then auxiliary data) and their fits."""

    def __init__(self, data: np.ndarray, fits: List[FitResult]):
        self.data = data
        self.fits = fits

    @property
    def bestfit(self) -> np.ndarray:
        return np.array([f.bestfit for f in self.fits])

    @property
    def twice_nll(self) -> np.ndarray:
        return np.array([f.twice_nll for f in self.fits])

    @property
    def converged(self) -> np.ndarray:
        return np.array([f.converged for f in self.fits])

    def to_dict(self) -> Dict[str, Any]:
        return {"data": self.data.tolist(), "fits": [f.to_dict() for f in self.fits]}

    def __len__(self) -> int:
        return len(self.fits)

    def __repr__(self) -> str:
        return f"ToyFits({len(self.fits)} fits, {int(self.converged.sum())} converged)"



# Results whose ``warning`` qualifies the numbers themselves.
_WARNS = (ToyHypotestResult, UpperLimitResult, PosteriorResult)
