"""Drop-in for ``pyhf.infer.calculators``: the asymptotic and toy-based calculators with pyhf's
methods (``teststatistic``, ``distributions``, ``pvalues``, ``expected_pvalues``) and return
types. The fits, Asimov data and toys are the engine's: one ``nextstat.hypotest`` call gives an
asymptotic calculator its test statistic, √q_A and the five fits; one ``hypotest_toys`` call
gives a toy calculator both ensembles (nextstat's counter-based RNG: ``seed=``, the same toys on
every device, not numpy's global RNG)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..tensor import numpy_backend
from .mle import fixed_poi_fit
from .utils import get_test_stat

__all__ = [
    "AsymptoticCalculator", "AsymptoticTestStatDistribution", "EmpiricalDistribution",
    "HypoTestFitResults", "ToyCalculator", "generate_asimov_data",
]

_tensorlib = numpy_backend()


def generate_asimov_data(asimov_mu, data, pdf, init_pars, par_bounds, fixed_params, return_fitted_pars=False):
    """The expected data at the fit with the POI fixed at ``asimov_mu`` (and those parameters)."""
    pars = fixed_poi_fit(asimov_mu, data, pdf, init_pars, par_bounds, fixed_params)
    asimov = pdf.expected_data(pars)
    return (asimov, pars) if return_fitted_pars else asimov


class AsymptoticTestStatDistribution:
    """The test statistic's distribution in the asymptotic limit: a unit normal shifted by
    ``shift``, undefined below ``cutoff``."""

    def __init__(self, shift, cutoff=float("-inf")):
        self.shift = shift
        self.cutoff = cutoff

    def cdf(self, value):
        return np.asarray(_tensorlib.normal_cdf(np.asarray(value) - self.shift))

    def pvalue(self, value):
        # Φ(−x) rather than 1 − Φ(x): right tails stay accurate far out.
        p = _tensorlib.normal_cdf(-(np.asarray(value, dtype=float) - self.shift))
        return np.asarray(np.where(np.asarray(value) >= self.cutoff, p, np.nan))

    def expected_value(self, nsigma):
        return np.asarray(np.where(self.shift + nsigma > self.cutoff, self.shift + nsigma, self.cutoff))


class EmpiricalDistribution:
    """A test statistic's distribution sampled by toys."""

    def __init__(self, samples):
        self.samples = np.ravel(np.asarray(samples, dtype=float))

    def pvalue(self, value):
        """The fraction of samples at least as large as ``value``."""
        return np.asarray(np.sum(self.samples >= value) / self.samples.shape[0])

    def expected_value(self, nsigma):
        """The sample quantile at Φ(nsigma)."""
        return np.percentile(self.samples, _tensorlib.normal_cdf(nsigma) * 100, method="linear")


@dataclass(frozen=True)
class HypoTestFitResults:
    """The five fits behind an asymptotic test statistic."""

    asimov_pars: Any
    free_fit_to_data: Any
    free_fit_to_asimov: Any
    fixed_poi_fit_to_data: Any
    fixed_poi_fit_to_asimov: Any


def _set_problem(calculator, data, pdf, init_pars, par_bounds, fixed_params, test_stat) -> None:
    """A calculator's data, model, fit settings (the model's where not given) and statistic."""
    get_test_stat(test_stat)
    calculator.data, calculator.pdf, calculator.test_stat = data, pdf, test_stat
    calculator.init_pars = init_pars or pdf.config.suggested_init()
    calculator.par_bounds = par_bounds or pdf.config.suggested_bounds()
    calculator.fixed_params = fixed_params or pdf.config.suggested_fixed()


def _clsb_clb_cls(teststat, sig_plus_bkg_distribution, bkg_only_distribution):
    clsb = sig_plus_bkg_distribution.pvalue(teststat)
    clb = bkg_only_distribution.pvalue(teststat)
    return clsb, clb, np.asarray(clsb / clb)


class AsymptoticCalculator:
    """pyhf's asymptotic calculator (Wald approximation, arXiv:1007.1727 §3) on the engine's
    ``hypotest``. Extra keyword: ``device``."""

    def __init__(self, data, pdf, init_pars=None, par_bounds=None, fixed_params=None,
                 test_stat="qtilde", calc_base_dist="normal", device="cpu"):
        if calc_base_dist not in ("normal", "clipped_normal"):
            raise ValueError(f"unknown base distribution {calc_base_dist!r}: 'normal' or 'clipped_normal'")
        _set_problem(self, data, pdf, init_pars, par_bounds, fixed_params, test_stat)
        self.calc_base_dist = calc_base_dist
        self.device = device
        self.sqrtqmuA_v = None
        self.fitted_pars = None

    def teststatistic(self, poi_test):
        """The observed test statistic in √q space (−(√q − √q_A), or its q̃ form beyond q_A);
        sets ``sqrtqmuA_v`` and ``fitted_pars``."""
        from .. import hypotest

        report = hypotest(poi_test, self.pdf, self.data, self.test_stat, self.init_pars,
                          self.par_bounds, self.fixed_params, device=self.device).to_dict()
        self.sqrtqmuA_v = np.asarray(report["sqrt_q_asimov"])
        fits = report["fitted_pars"]
        self.fitted_pars = HypoTestFitResults(**{k: np.asarray(fits[k]) for k in HypoTestFitResults.__dataclass_fields__})
        return np.asarray(report["asymptotic_teststat"])

    def distributions(self, poi_test):
        """The signal-plus-background and background-only distributions (after
        ``teststatistic``)."""
        if self.sqrtqmuA_v is None:
            raise RuntimeError("need to call .teststatistic(poi_test) first")
        cutoff = float("-inf") if self.calc_base_dist == "normal" else -self.sqrtqmuA_v
        return (AsymptoticTestStatDistribution(-self.sqrtqmuA_v, cutoff),
                AsymptoticTestStatDistribution(0.0, cutoff))

    def pvalues(self, teststat, sig_plus_bkg_distribution, bkg_only_distribution):
        """(CLsb, CLb, CLs) of ``teststat``."""
        return _clsb_clb_cls(teststat, sig_plus_bkg_distribution, bkg_only_distribution)

    def expected_pvalues(self, sig_plus_bkg_distribution, bkg_only_distribution):
        """[CLsb, CLb, CLs], each at the background-only +2σ…−2σ quantiles of the statistic
        (so the expected CLs run −2σ…+2σ in μ)."""
        rows = [self.pvalues(bkg_only_distribution.expected_value(n), sig_plus_bkg_distribution, bkg_only_distribution)
                for n in (2, 1, 0, -1, -2)]
        return [list(column) for column in zip(*rows)]


def _toy_seed(seed: Any) -> int:
    """``seed``, or where none is given one drawn from numpy's global generator: pyhf's toys come
    from that generator, so ``np.random.seed`` makes a run repeat, and without it each run draws
    new toys."""
    if seed is None:
        return int(np.random.randint(0, 2**63 - 1, dtype=np.int64))
    return int(seed)


class ToyCalculator:
    """pyhf's toy calculator on the engine's toys (``hypotest_toys``). Extra keywords: ``seed``
    (the engine's counter-based generator; without one, a seed is drawn from numpy's global
    generator at each ``distributions`` call, so ``np.random.seed`` reproduces runs as with
    pyhf) and ``device``."""

    def __init__(self, data, pdf, init_pars=None, par_bounds=None, fixed_params=None,
                 test_stat="qtilde", ntoys=2000, track_progress=True, seed=None, device="cpu"):
        _set_problem(self, data, pdf, init_pars, par_bounds, fixed_params, test_stat)
        self.ntoys = ntoys
        self.track_progress = track_progress
        self.seed = seed
        self.device = device

    def distributions(self, poi_test, track_progress=None):
        """The test statistic of every toy under signal-plus-background and background-only."""
        from .. import hypotest_toys

        progress = self.track_progress if track_progress is None else track_progress
        result = hypotest_toys(poi_test, self.pdf, self.ntoys, _toy_seed(self.seed), self.data, self.test_stat,
                               self.init_pars, self.par_bounds, self.fixed_params, device=self.device,
                               progress=progress, teststats=True)
        stats = result.teststats
        return (EmpiricalDistribution(stats["signal_plus_background"]),
                EmpiricalDistribution(stats["background_only"]))

    def teststatistic(self, poi_test):
        """The observed test statistic (q, q̃ or q0 itself)."""
        return get_test_stat(self.test_stat)(poi_test, self.data, self.pdf, self.init_pars,
                                             self.par_bounds, self.fixed_params)

    def pvalues(self, teststat, sig_plus_bkg_distribution, bkg_only_distribution):
        """(CLsb, CLb, CLs) of ``teststat``: the fractions of toys at or above it."""
        return _clsb_clb_cls(teststat, sig_plus_bkg_distribution, bkg_only_distribution)

    def expected_pvalues(self, sig_plus_bkg_distribution, bkg_only_distribution):
        """[CLsb, CLb, CLs] at the −2σ…+2σ quantiles of their values over the background-only
        toys."""
        pvalues = np.asarray([self.pvalues(t, sig_plus_bkg_distribution, bkg_only_distribution)
                              for t in bkg_only_distribution.samples])
        quantiles = _tensorlib.normal_cdf(np.array([-2.0, -1.0, 0.0, 1.0, 2.0])) * 100
        band = np.percentile(pvalues, quantiles, axis=0).T
        return [[np.asarray(v) for v in row] for row in band]
