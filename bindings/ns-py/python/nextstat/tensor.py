"""The numpy tensor backend for scripts written against ``pyhf.tensorlib``
(``pyhf.set_backend("numpy")``, ``pyhf.tensorlib.astensor(...)``). nextstat computes in its own
engine; this backend only gives such scripts numpy arrays and the handful of tensor helpers they
call. Other backends (jax, pytorch, tensorflow) are refused by ``set_backend`` with the
alternative named (``device="cuda"`` for GPUs, ``nextstat.torch`` for autograd)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["numpy_backend", "jax_backend", "pytorch_backend", "tensorflow_backend"]

_SQRT2 = math.sqrt(2.0)


class numpy_backend:  # noqa: N801 - pyhf's name
    """pyhf's numpy backend interface in 64-bit precision."""

    name = "numpy"
    default_do_grad = False

    def __init__(self, precision: str = "64b", **kwargs: Any):
        from .exceptions import Unsupported

        if precision != "64b":
            raise Unsupported(f"precision {precision!r}: nextstat's numpy backend is 64-bit (the engine computes in f64)")
        if kwargs:
            raise Unsupported(f"numpy_backend: unsupported arguments {sorted(kwargs)}")
        self.precision = precision
        self.dtypemap = {"float": np.float64, "int": np.int64, "bool": np.bool_}

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, numpy_backend) and other.precision == self.precision

    def __hash__(self) -> int:
        return hash((self.name, self.precision))

    def __repr__(self) -> str:
        return "nextstat.tensor.numpy_backend(precision='64b')"

    # Conversions and shapes.
    def astensor(self, tensor_in: Any, dtype: str = "float") -> np.ndarray:
        return np.asarray(tensor_in, dtype=self.dtypemap[dtype])

    def tolist(self, tensor_in: Any) -> Any:
        return np.asarray(tensor_in).tolist()

    def to_numpy(self, tensor_in: Any) -> np.ndarray:
        return np.asarray(tensor_in)

    def shape(self, tensor: Any) -> tuple:
        return np.shape(tensor)

    def reshape(self, tensor: Any, newshape: Any) -> np.ndarray:
        return np.reshape(tensor, newshape)

    def ravel(self, tensor: Any) -> np.ndarray:
        return np.ravel(tensor)

    def transpose(self, tensor_in: Any) -> np.ndarray:
        return np.transpose(tensor_in)

    def tile(self, tensor_in: Any, repeats: Any) -> np.ndarray:
        return np.tile(tensor_in, repeats)

    def ones(self, shape: Any, dtype: str = "float") -> np.ndarray:
        return np.ones(shape, dtype=self.dtypemap[dtype])

    def zeros(self, shape: Any, dtype: str = "float") -> np.ndarray:
        return np.zeros(shape, dtype=self.dtypemap[dtype])

    def stack(self, sequence: Any, axis: int = 0) -> np.ndarray:
        return np.stack(sequence, axis=axis)

    def concatenate(self, sequence: Any, axis: int = 0) -> np.ndarray:
        return np.concatenate(sequence, axis=axis)

    def simple_broadcast(self, *args: Any) -> list:
        return list(np.broadcast_arrays(*args))

    def gather(self, tensor: Any, indices: Any) -> np.ndarray:
        return np.asarray(tensor)[indices]

    def boolean_mask(self, tensor: Any, mask: Any) -> np.ndarray:
        return np.asarray(tensor)[np.asarray(mask, dtype=bool)]

    # Arithmetic.
    def sum(self, tensor_in: Any, axis: Any = None) -> np.ndarray:
        return np.sum(tensor_in, axis=axis)

    def product(self, tensor_in: Any, axis: Any = None) -> np.ndarray:
        return np.prod(tensor_in, axis=axis)

    def abs(self, tensor: Any) -> np.ndarray:
        return np.abs(tensor)

    def sqrt(self, tensor_in: Any) -> np.ndarray:
        return np.sqrt(tensor_in)

    def log(self, tensor_in: Any) -> np.ndarray:
        return np.log(tensor_in)

    def exp(self, tensor_in: Any) -> np.ndarray:
        return np.exp(tensor_in)

    def power(self, tensor_in_1: Any, tensor_in_2: Any) -> np.ndarray:
        return np.power(tensor_in_1, tensor_in_2)

    def divide(self, tensor_in_1: Any, tensor_in_2: Any) -> np.ndarray:
        return np.divide(tensor_in_1, tensor_in_2)

    def outer(self, tensor_in_1: Any, tensor_in_2: Any) -> np.ndarray:
        return np.outer(tensor_in_1, tensor_in_2)

    def einsum(self, subscripts: str, *operands: Any) -> np.ndarray:
        return np.einsum(subscripts, *operands)

    def clip(self, tensor_in: Any, min_value: Any, max_value: Any) -> np.ndarray:
        return np.clip(tensor_in, min_value, max_value)

    def where(self, mask: Any, tensor_in_1: Any, tensor_in_2: Any) -> np.ndarray:
        return np.where(mask, tensor_in_1, tensor_in_2)

    def conditional(self, predicate: Any, true_callable: Any, false_callable: Any) -> Any:
        return true_callable() if predicate else false_callable()

    def isfinite(self, tensor: Any) -> np.ndarray:
        return np.isfinite(tensor)

    def percentile(self, tensor_in: Any, q: Any, axis: Any = None, interpolation: str = "linear") -> np.ndarray:
        return np.percentile(tensor_in, q, axis=axis, method=interpolation)

    # Distributions: the Poisson continued to real n through lgamma, as pyhf's.
    def erf(self, tensor_in: Any) -> np.ndarray:
        return np.vectorize(math.erf, otypes=[float])(tensor_in)

    def normal_cdf(self, x: Any, mu: Any = 0.0, sigma: Any = 1.0) -> np.ndarray:
        z = (np.asarray(x, dtype=float) - mu) / (sigma * _SQRT2)
        return 0.5 * np.vectorize(math.erfc, otypes=[float])(-z)

    def normal_logpdf(self, x: Any, mu: Any, sigma: Any) -> np.ndarray:
        x, mu, sigma = (np.asarray(v, dtype=float) for v in (x, mu, sigma))
        return -0.5 * ((x - mu) / sigma) ** 2 - np.log(sigma) - 0.5 * math.log(2.0 * math.pi)

    def normal(self, x: Any, mu: Any, sigma: Any) -> np.ndarray:
        return np.exp(self.normal_logpdf(x, mu, sigma))

    def poisson_logpdf(self, n: Any, lam: Any) -> np.ndarray:
        n, lam = np.broadcast_arrays(np.asarray(n, dtype=float), np.asarray(lam, dtype=float))
        lgamma = np.vectorize(math.lgamma, otypes=[float])
        with np.errstate(divide="ignore", invalid="ignore"):
            n_log_lam = np.where(n == 0, 0.0, n * np.log(lam))
        return n_log_lam - lam - lgamma(n + 1.0)

    def poisson(self, n: Any, lam: Any) -> np.ndarray:
        return np.exp(self.poisson_logpdf(n, lam))

    def poisson_dist(self, rate: Any) -> "_Poisson":
        """pyhf's Poisson of rate ``rate``: ``log_prob(value)``, ``sample(shape)``."""
        return _Poisson(np.asarray(rate, dtype=float), self)

    def normal_dist(self, mu: Any, sigma: Any) -> "_Normal":
        """pyhf's Normal of mean ``mu`` and width ``sigma``: ``log_prob(value)``,
        ``sample(shape)``."""
        return _Normal(np.asarray(mu, dtype=float), np.asarray(sigma, dtype=float), self)

    def erfinv(self, tensor_in: Any) -> np.ndarray:
        """The inverse of the error function (±inf at ±1, nan beyond)."""
        return np.vectorize(_erfinv, otypes=[float])(np.asarray(tensor_in, dtype=float))


# pyhf's numpy backend samples through scipy.stats with numpy's global generator: the same
# draws, so np.random.seed reproduces a script's samples as under pyhf.
class _Poisson:
    def __init__(self, rate: np.ndarray, tensorlib: numpy_backend):
        self.rate, self._tensorlib = rate, tensorlib

    def sample(self, sample_shape: tuple = ()) -> np.ndarray:
        return np.random.poisson(self.rate, size=tuple(sample_shape) + self.rate.shape).astype(float)

    def log_prob(self, value: Any) -> np.ndarray:
        return self._tensorlib.poisson_logpdf(value, self.rate)


class _Normal:
    def __init__(self, loc: np.ndarray, scale: np.ndarray, tensorlib: numpy_backend):
        self.loc, self.scale, self._tensorlib = loc, scale, tensorlib

    def sample(self, sample_shape: tuple = ()) -> np.ndarray:
        return self.loc + self.scale * np.random.standard_normal(size=tuple(sample_shape) + self.loc.shape)

    def log_prob(self, value: Any) -> np.ndarray:
        return self._tensorlib.normal_logpdf(value, self.loc, self.scale)


def _erfinv(y: float) -> float:
    """erf⁻¹(y): Giles' single-precision approximation refined by Newton steps on erf."""
    if not -1.0 <= y <= 1.0:
        return math.nan
    if abs(y) == 1.0:
        return math.copysign(math.inf, y)
    w = -math.log((1.0 - y) * (1.0 + y))
    if w < 5.0:
        w -= 2.5
        p = 2.81022636e-08
        for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                  -0.00417768164, 0.246640727, 1.50140941):
            p = c + p * w
    else:
        w = math.sqrt(w) - 3.0
        p = -0.000200214257
        for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                  0.00943887047, 1.00167406, 2.83297682):
            p = c + p * w
    # Newton on erf near 0, on erfc in the tails (1 − |y| is exact there; erf(x) − y cancels).
    x, a = abs(p * y), abs(y)
    for _ in range(12):
        slope = 2.0 / math.sqrt(math.pi) * math.exp(-x * x)
        step = (math.erf(x) - a) / slope if a < 0.5 else -(math.erfc(x) - (1.0 - a)) / slope
        x -= step
        if abs(step) <= 1e-17 * x:
            break
    return math.copysign(x, y)


class _OtherBackend:
    """pyhf's jax, pytorch and tensorflow backends: constructible (scripts and pyhf's tests build
    them), refused by ``set_backend`` with ``InvalidBackend``, which names what nextstat offers
    instead (devices through ``device=``, gradients through ``nextstat.torch``)."""

    def __init__(self, name: str, **kwargs: Any):
        self.name = name
        self.precision = kwargs.get("precision", "64b")

    def __repr__(self) -> str:
        return f"<{self.name} backend: not available in nextstat>"


def jax_backend(**kwargs: Any) -> _OtherBackend:
    return _OtherBackend("jax", **kwargs)


def pytorch_backend(**kwargs: Any) -> _OtherBackend:
    return _OtherBackend("pytorch", **kwargs)


def tensorflow_backend(**kwargs: Any) -> _OtherBackend:
    return _OtherBackend("tensorflow", **kwargs)
