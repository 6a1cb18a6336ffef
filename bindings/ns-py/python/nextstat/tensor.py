"""The numpy tensor backend for scripts written against ``pyhf.tensorlib``
(``pyhf.set_backend("numpy")``, ``pyhf.tensorlib.astensor(...)``). nextstat computes in its own
engine; this backend only gives such scripts numpy arrays and the handful of tensor helpers they
call. Other backends (jax, pytorch, tensorflow) are refused by ``set_backend`` with the
alternative named (``device="cuda"`` for GPUs, ``nextstat.torch`` for autograd)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["numpy_backend"]

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
