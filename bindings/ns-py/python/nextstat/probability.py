"""Drop-in for ``pyhf.probability``: the distribution objects of ``model.make_pdf(pars)``,
``model.main_model.make_pdf(pars)`` and ``model.constraint_model.make_pdf(pars)`` —
``log_prob(value)``, ``sample(sample_shape)`` and ``expected_data()``.

They are pyhf's composition of a HistFactory likelihood at fixed parameters: the main bins
Poisson about the engine's expected data, each Gaussian constraint a Normal about its parameter,
each Poisson constraint a Poisson about τ·γ. Samples come from numpy's global generator in pyhf's
order (main bins, Gaussian constraints, Poisson constraints), so ``np.random.seed`` gives pyhf's
draws; the engine's own toys (every inference verb's) come from ``nextstat.hypotest_toys`` and
``Model.sample_toys``."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

import numpy as np

__all__ = ["Poisson", "Normal", "Independent", "Simultaneous"]


def _tensorlib():
    from . import tensorlib

    return tensorlib


class _Terms:
    """Independent terms of one distribution of the numpy backend: ``expected_data`` (their
    centres), ``sample`` and ``log_prob`` entry by entry."""

    def __init__(self, centres: np.ndarray, dist: Any):
        self._centres, self._dist = centres, dist

    def expected_data(self) -> np.ndarray:
        return self._centres

    def sample(self, sample_shape: Sequence[int] = ()) -> np.ndarray:
        return self._dist.sample(tuple(sample_shape))

    def log_prob(self, value: Any) -> np.ndarray:
        return self._dist.log_prob(value)


class Poisson(_Terms):
    """Poisson terms of rates ``rate`` (one per entry of the last axis)."""

    def __init__(self, rate: Any):
        self.rate = np.asarray(rate, dtype=float)
        super().__init__(self.rate, _tensorlib().poisson_dist(self.rate))


class Normal(_Terms):
    """Gaussian terms of means ``loc`` and widths ``scale``."""

    def __init__(self, loc: Any, scale: Any):
        self.loc, self.scale = np.asarray(loc, dtype=float), np.asarray(scale, dtype=float)
        super().__init__(self.loc, _tensorlib().normal_dist(self.loc, self.scale))


class Independent:
    """A product of independent terms: ``log_prob`` sums the terms' log-probabilities over the
    last axis."""

    def __init__(self, batched_pdf: Any, batch_size: Optional[int] = None):
        self._pdf, self.batch_size = batched_pdf, batch_size

    def expected_data(self) -> np.ndarray:
        return self._pdf.expected_data()

    def sample(self, sample_shape: Sequence[int] = ()) -> np.ndarray:
        return self._pdf.sample(sample_shape)

    def log_prob(self, value: Any) -> np.ndarray:
        return np.sum(self._pdf.log_prob(value), axis=-1)


class Simultaneous:
    """Several distributions over disjoint entries of one data vector: ``positions[k]`` holds
    where distribution ``k``'s entries sit in it. ``log_prob`` adds the parts' log-probabilities
    (each a product over its entries), ``sample`` draws them in order and places them."""

    def __init__(self, pdfobjs: List[Any], positions: List[Sequence[int]], batch_size: Optional[int] = None):
        if len(pdfobjs) != len(positions):
            raise ValueError(f"{len(pdfobjs)} distributions for {len(positions)} position lists")
        self._pdfs = list(pdfobjs)
        self._positions = [np.asarray(p, dtype=int) for p in positions]
        self._size = int(sum(p.size for p in self._positions))
        self.batch_size = batch_size

    def __iter__(self):
        return iter(self._pdfs)

    def __getitem__(self, index: int) -> Any:
        return self._pdfs[index]

    def _stitch(self, parts: List[np.ndarray], leading: tuple) -> np.ndarray:
        out = np.zeros(leading + (self._size,))
        for where, part in zip(self._positions, parts):
            out[..., where] = part
        return out

    def expected_data(self) -> np.ndarray:
        return self._stitch([np.asarray(p.expected_data(), dtype=float) for p in self._pdfs], ())

    def sample(self, sample_shape: Sequence[int] = ()) -> np.ndarray:
        return self._stitch([p.sample(sample_shape) for p in self._pdfs], tuple(sample_shape))

    def log_prob(self, value: Any) -> np.ndarray:
        value = np.asarray(value, dtype=float)
        if value.shape[-1] != self._size:
            raise ValueError(f"log_prob: the data have {value.shape[-1]} entries, this distribution {self._size}")
        return sum(p.log_prob(value[..., where]) for p, where in zip(self._pdfs, self._positions))
