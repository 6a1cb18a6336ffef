"""User inputs: JSON documents (a dict, JSON text, a file or standard input) and values (arrays,
numbers, bounds, flags), each error naming what is wrong."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, List, Tuple, Union

import numpy as np

from ._core import InvalidInputError


Spec = Union[dict, str, os.PathLike]


def _plain(value: Any) -> Any:
    """numpy arrays and scalars inside a spec as JSON lists and numbers (pyhf takes them)."""
    if isinstance(value, (np.ndarray, np.generic)):
        return value.tolist()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _json_text(spec: Spec, what: str) -> Tuple[str, str]:
    """A dict, a JSON string, a path to a JSON file or "-" (standard input), as (JSON text, where
    it came from: the file name, or `what`)."""
    if isinstance(spec, (dict, list)):
        try:
            return json.dumps(spec, allow_nan=False, default=_plain), what
        except (TypeError, ValueError) as e:
            raise InvalidInputError(f"{what}: not representable as JSON ({e})") from None
        except RecursionError:
            raise InvalidInputError(f"{what}: nested too deeply to be a workspace, model or patchset") from None
    if isinstance(spec, (str, os.PathLike)) and not (isinstance(spec, str) and spec.lstrip().startswith(("{", "["))):
        if str(spec) == "-":
            import sys

            return sys.stdin.read().lstrip("\ufeff"), "standard input"
        path = Path(spec)
        if not path.is_file():
            raise InvalidInputError(f"{what}: '{spec}' is neither JSON text nor an existing file")
        # utf-8-sig: a byte-order mark, as some editors write, is skipped.
        return path.read_text(encoding="utf-8-sig"), str(path)
    if isinstance(spec, str):
        return spec, what
    raise TypeError(f"{what} must be a dict, a JSON string or a path, not {type(spec).__name__}")



def _array(values: Any, what: str) -> np.ndarray:
    """A flat float64 array of real numbers, or a TypeError/ValueError saying what is wrong:
    no silent flattening, complex-to-real casts, strings or None inside."""
    if values is None or isinstance(values, (str, bytes, dict)):
        raise TypeError(f"{what} must be a sequence of numbers, not {type(values).__name__}")
    array = np.asarray(values)
    kind = array.dtype.kind
    if kind == "c":
        raise TypeError(f"{what} holds complex numbers; give real numbers")
    if kind in "OUSV":
        for i, v in enumerate(array.reshape(-1)):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise TypeError(f"{what}[{i}] is {v!r}; give numbers")
    elif kind == "b":
        raise TypeError(f"{what} holds booleans; give numbers")
    if array.ndim != 1:
        raise ValueError(f"{what} has shape {array.shape}; give a flat sequence of numbers")
    return np.ascontiguousarray(array, dtype=np.float64)


def _number(value: Any, what: str) -> float:
    """A real number (not a string, bool, complex or None); a 0-d array of one is one."""
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        value = value.item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{what} must be a number, not {value!r}")
    return float(value)


def _integer(value: Any, what: str) -> int:
    """A whole number: an int, or a float with no fractional part."""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return int(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be a whole number, not {value!r}")
    return int(value)


def _finite_array(values: Any, what: str) -> np.ndarray:
    array = _array(values, what)
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        raise ValueError(f"{what}[{bad[0]}] is {array[bad[0]]}; give finite numbers")
    return array


def _finite_list(values: Any, what: str) -> List[float]:
    return _finite_array(values, what).tolist()


def _bounds(bounds: Any) -> List[Tuple[float, float]]:
    pairs = []
    for i, b in enumerate(bounds):
        if isinstance(b, (str, bytes)) or np.ndim(b) != 1 or len(b) != 2:
            raise ValueError(f"par_bounds[{i}] is {b!r}; give a (low, high) pair")
        low, high = (_number(x, f"par_bounds[{i}]") for x in b)
        if np.isnan(low) or np.isnan(high):
            raise ValueError(f"par_bounds[{i}] is ({low}, {high}); a bound is not a number")
        # JSON has no infinities: a call writes them as "inf" and "-inf", as the engine reads them.
        pairs.append(tuple(_json_number(x) for x in (low, high)))
    return pairs


def _json_number(x: float):
    """A number as a call's JSON holds it: ±inf as "inf"/"-inf" (``ns_inference::params``)."""
    return ("inf" if x > 0 else "-inf") if np.isinf(x) else float(x)


def _flags(flags: Any) -> List[bool]:
    if isinstance(flags, (str, bytes)):
        raise TypeError(f"fixed_params must be a sequence of booleans, not {type(flags).__name__}")
    out = []
    for i, f in enumerate(flags):
        if not isinstance(f, (bool, np.bool_)):
            raise TypeError(f"fixed_params[{i}] is {f!r}; give True or False")
        out.append(bool(f))
    return out


