"""nextstat: HistFactory binned-likelihood inference on pyhf JSON workspaces, in Rust.

Load a workspace, build a model, and run fits, CLs, limits, scans, rankings and toys — on the CPU
or, with ``device="cuda"``, on an NVIDIA GPU. ``nextstat.infer`` mirrors ``pyhf.infer``, so an
existing pyhf script changes one import.

>>> import nextstat
>>> ws = nextstat.Workspace("examples/analysis.json")
>>> model = ws.model()
>>> result = nextstat.fit(model)
>>> result.converged
True
"""

from __future__ import annotations

import json
import sys
import os
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from importlib import metadata as _metadata


def _find_onnxruntime() -> None:
    """Flow PDFs run on the ONNX Runtime library of the ``onnxruntime`` package of this
    interpreter (found without importing it); ``ORT_DYLIB_PATH`` takes precedence. Read by the
    engine once, when ``_core`` is imported."""
    import importlib.util

    if os.environ.get("ORT_DYLIB_PATH"):
        return
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        return
    for folder in spec.submodule_search_locations:
        libs = sorted((Path(folder) / "capi").glob("libonnxruntime.so.*")) + sorted(
            (Path(folder) / "capi").glob("libonnxruntime*.dylib")
        )
        if libs:
            os.environ["ORT_DYLIB_PATH"] = str(libs[-1])
            return


_find_onnxruntime()

from . import _core
from ._core import ComputationError, InvalidInputError, NextStatError
from ._results import (
    AsymptoticHypotestResult,
    FitResult,
    GofResult,
    ProfileScanResult,
    RankingResult,
    SignificanceResult,
    ToyFits,
    ToyHypotestResult,
    UpperLimitResult,
)

try:
    __version__ = _metadata.version("nextstat")
except _metadata.PackageNotFoundError:  # imported from a source tree
    __version__ = "0+unknown"

__all__ = [
    "NextStatError", "InvalidInputError", "ComputationError", "Workspace", "Model", "PatchSet", "fit", "fixed_poi_fit", "hypotest",
    "hypotest_toys", "upper_limit", "significance", "profile_scan", "ranking", "gof",
    "fit_toys_batch_gpu", "fit_toys_from_data_gpu", "hypotest_qtilde_toys_gpu", "has_cuda",
    "has_metal", "devices", "infer", "run_call",
]

Spec = Union[dict, str, os.PathLike]


def _json_text(spec: Spec, what: str) -> Tuple[str, str]:
    """A dict, a JSON string, a path to a JSON file or "-" (standard input), as (JSON text, where
    it came from: the file name, or `what`)."""
    if isinstance(spec, (dict, list)):
        try:
            return json.dumps(spec, allow_nan=False), what
        except (TypeError, ValueError) as e:
            raise InvalidInputError(f"{what}: not representable as JSON ({e})") from None
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


class PatchSet:
    """A HEPData patchset; ``apply(workspace, name)`` verifies the digest and patches."""

    def __init__(self, spec: Spec):
        if isinstance(spec, Workspace):
            raise TypeError("PatchSet takes a patchset (dict, JSON text or path), not a Workspace")
        self._text, origin = _json_text(spec, "patchset")
        try:
            self.spec = json.loads(self._text)
        except json.JSONDecodeError as e:
            raise InvalidInputError(f"invalid JSON at {origin}: {e}") from None
        if not isinstance(self.spec, dict) or "patches" not in self.spec or "metadata" not in self.spec:
            looks_like = " (it looks like a workspace)" if isinstance(self.spec, dict) and "channels" in self.spec else ""
            raise InvalidInputError(f"{origin}: a patchset needs 'metadata' and 'patches'{looks_like}")

    @property
    def patches(self) -> List[str]:
        return [p["metadata"]["name"] for p in self.spec.get("patches", [])]

    def apply(self, workspace: "Workspace", name: str) -> "Workspace":
        return Workspace._wrap(workspace._ws.apply_patchset(self._text, name))


class Workspace:
    """A pyhf workspace from a dict, a JSON string or a path."""

    def __init__(self, spec: Spec):
        self._ws = _core.Workspace.from_json(*_json_text(spec, "workspace"))

    @classmethod
    def _wrap(cls, core_ws: Any) -> "Workspace":
        ws = cls.__new__(cls)
        ws._ws = core_ws
        return ws

    @property
    def spec(self) -> dict:
        return json.loads(self._ws.to_json())

    def model(
        self,
        measurement_name: Optional[str] = None,
        patches: Optional[Iterable[Any]] = None,
        modifier_settings: Optional[Dict[str, Dict[str, str]]] = None,
    ) -> "Model":
        """The model of a measurement (the first by default), after ``patches`` (JSON patches:
        lists of operations, or dicts with a ``"patch"`` key as in a patchset). ``modifier_settings``
        (``{"normsys": {"interpcode": "code1"}}``) overrides only the modifier types it names."""
        ws = self
        for patch in patches or []:
            ops = patch.get("patch") if isinstance(patch, dict) else patch
            ws = Workspace._wrap(ws._ws.apply_patch(json.dumps(ops)))
        settings = modifier_settings or {}
        unknown = set(settings) - {"normsys", "histosys"}
        if unknown:
            raise InvalidInputError(f"modifier_settings: {sorted(unknown)} have no interpolation code (only normsys and histosys do)")
        code = lambda kind: settings.get(kind, {}).get("interpcode")  # noqa: E731
        core_model = ws._ws.model(measurement_name, code("normsys"), code("histosys"))
        return Model(core_model, ws._ws.data(core_model, True))

    def data(self, model: "Model", include_auxdata: bool = True) -> List[float]:
        return self._ws.data(model._model, include_auxdata)

    def digest(self) -> str:
        return self._ws.digest()

    def prune(self, channels=(), samples=(), modifiers=(), modifier_types=(), measurements=()) -> "Workspace":
        return Workspace._wrap(self._ws.prune(list(channels), list(samples), list(modifiers), list(modifier_types), list(measurements)))

    def rename(self, channels=None, samples=None, modifiers=None, measurements=None) -> "Workspace":
        return Workspace._wrap(self._ws.rename(channels or {}, samples or {}, modifiers or {}, measurements or {}))

    @classmethod
    def combine(cls, left: "Workspace", right: "Workspace", join: str = "none", merge_channels: bool = False) -> "Workspace":
        return cls._wrap(_core.Workspace.combine(left._ws, right._ws, join, merge_channels))

    @classmethod
    def sorted(cls, workspace: "Workspace") -> "Workspace":
        return cls._wrap(workspace._ws.sorted())

    def __repr__(self) -> str:
        return f"Workspace(digest={self.digest()[:12]}…)"


class _Config:
    """``model.config``: pyhf's names for the parameter layout."""

    def __init__(self, core_model: Any):
        self._m = core_model

    par_names = property(lambda self: list(self._m.par_names))
    par_order = property(lambda self: list(self._m.par_order))
    poi_index = property(lambda self: self._m.poi_index)
    poi_name = property(lambda self: self._m.poi_name)
    npars = property(lambda self: self._m.npars)
    channels = property(lambda self: list(self._m.channels))
    channel_nbins = property(lambda self: dict(zip(self._m.channels, self._m.channel_nbins)))
    samples = property(lambda self: list(self._m.samples))
    auxdata = property(lambda self: list(self._m.auxdata))

    def suggested_init(self) -> List[float]:
        return list(self._m.suggested_init())

    def suggested_bounds(self) -> List[Tuple[float, float]]:
        return [tuple(b) for b in self._m.suggested_bounds()]

    def suggested_fixed(self) -> List[bool]:
        return list(self._m.suggested_fixed())


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
    """A real number (not a string, bool, complex or None)."""
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


def _finite_list(values: Any, what: str) -> List[float]:
    array = _array(values, what)
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        raise ValueError(f"{what}[{bad[0]}] is {array[bad[0]]}; give finite numbers")
    return array.tolist()


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


class Model:
    """A HistFactory model (``Workspace.model()``); it remembers its workspace's observations."""

    def __init__(self, core_model: Any, observed: Sequence[float]):
        self._model = core_model
        self.config = _Config(core_model)
        self.observed = list(observed)

    def logpdf(self, pars: Any, data: Any) -> np.ndarray:
        """log-likelihood, shaped ``(1,)`` as pyhf's."""
        nll, _ = self._model.nll_grad(_array(pars, "pars"), _array(data, "data"))
        return np.array([-nll])

    def twice_nll(self, pars: Any, data: Any) -> float:
        return 2.0 * self._model.nll_grad(_array(pars, "pars"), _array(data, "data"))[0]

    def nll_grad(self, pars: Any, data: Any) -> Tuple[float, np.ndarray]:
        """NLL and its gradient with respect to every parameter (analytic)."""
        return self._model.nll_grad(_array(pars, "pars"), _array(data, "data"))

    def expected_data(self, pars: Any, include_auxdata: bool = True) -> np.ndarray:
        return self._model.expected_data(_array(pars, "pars"), include_auxdata)

    def __repr__(self) -> str:
        return f"Model({self.config.npars} parameters, POI {self.config.poi_name!r}, channels {self.config.channels})"


def _progress_label(progress: Any, label: str) -> Optional[str]:
    """The label of a progress bar, where one is wanted: ``progress=True`` (the default) in an
    interactive session (stderr a terminal, or a notebook); never with ``progress=False``."""
    if not isinstance(progress, bool):
        raise TypeError(f"progress must be True or False, not {progress!r}")
    if not progress:
        return None
    interactive = getattr(sys.stderr, "isatty", lambda: False)() or "ipykernel" in sys.modules
    return label if interactive else None


def _infer(verb: str, result_type, model: Model, data, init_pars, par_bounds, fixed_params, tolerance, device, progress=None, save_call=None, **extra):
    """Run an inference verb in the engine as one call (``ns_inference::call``, JSON) and wrap its
    report (observed data by default); with ``save_call``, first write that call to the path."""
    return result_type._from_json(_run(verb, model, data, init_pars, par_bounds, fixed_params, tolerance, device, progress, save_call, **extra))


def _run(verb: str, model: Model, data, init_pars, par_bounds, fixed_params, tolerance, device, progress=None, save_call=None, **extra) -> str:
    """The report JSON of the engine's call of ``verb`` (see ``_infer``); the engine's default
    tolerance where ``tolerance`` is None."""
    from .unbinned import UnbinnedModel

    if not isinstance(model, (Model, UnbinnedModel)):
        raise TypeError(f"{verb}: model must be a nextstat.Model (Workspace(...).model()) or a nextstat.unbinned.UnbinnedModel, not {type(model).__name__}")
    data = model.observed if data is None else data
    if not isinstance(device, str):
        raise TypeError(f"device must be a string ('cpu', 'cuda' or 'auto'), not {device!r}")
    fit_options = dict(
        init=None if init_pars is None else _finite_list(init_pars, "init_pars"),
        bounds=None if par_bounds is None else _bounds(par_bounds),
        fixed=None if fixed_params is None else _flags(fixed_params),
        tolerance=None if tolerance is None else _number(tolerance, "tolerance"),
    )
    call = dict(
        request=dict(verb=verb, **{k: v for k, v in extra.items() if v is not None}),
        fit={k: v for k, v in fit_options.items() if v is not None},
        device=device,
    )
    if data is not None:  # an unbinned model's observed events stay in the engine
        call["data"] = dict(values=_array(data, "data").tolist())
    try:
        call_text = json.dumps(call, allow_nan=False)
    except ValueError:
        raise ValueError(f"{verb}: tolerance, mu, level and scan values must be finite numbers") from None
    if save_call is not None:
        Path(save_call).write_text(_core.call_json(model._model, call_text) + "\n", encoding="utf-8")
    return _core.infer(model._model, call_text, progress)


_RESULT_OF_VERB = {}


def run_call(call: Spec, *, progress=True):
    """Run a saved call (a path, JSON text or a dict, as ``save_call=`` or ``nextstat --save-call``
    write it); returns what the verb's function returns. Relative paths in a call file are read
    from the file's folder."""
    text, origin = _json_text(call, "call")
    base = str(Path(origin).parent) if Path(origin).is_file() else None
    verb, report = _core.run_call(text, base, _progress_label(progress, "call"))
    if verb == "eval":
        return json.loads(report)
    if verb == "fit_toys":
        fits = json.loads(report)
        n_data = len(fits["toys"][0]) if fits["toys"] else 0
        return _toy_fits(report, n_data)
    if verb == "fit_datasets":
        return _fits(report)
    return _RESULT_OF_VERB[verb]._from_json(report)


def _test_stat(name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(f"test_stat must be a string ('qtilde', 'q', 'q0'), not {name!r}")
    return name


def fit(model: Model, data=None, init_pars=None, par_bounds=None, fixed_params=None, *, tolerance=None, device="cpu", save_call=None, yields=False) -> FitResult:
    """Maximum-likelihood fit with uncertainties (observed data unless ``data`` is given);
    ``yields=True`` adds pre- and post-fit yields per channel and sample with the uncertainty of
    the total (``result.yields``; what ``nextstat.plot.yields`` draws)."""
    return _infer("fit", FitResult, model, data, init_pars, par_bounds, fixed_params, tolerance, device, None, save_call, uncertainties=True, yields=bool(yields))


def fixed_poi_fit(poi_value: float, model: Model, data=None, init_pars=None, par_bounds=None, fixed_params=None, *, tolerance=None, device="cpu", save_call=None) -> FitResult:
    """Fit with the POI fixed at ``poi_value``."""
    poi = model.config.poi_index
    if poi is None:
        raise InvalidInputError(f"the model has no POI (measurement POI '{model.config.poi_name}' is not a parameter)")
    init = list(model.config.suggested_init() if init_pars is None else _array(init_pars, "init_pars"))
    fixed = list(model.config.suggested_fixed() if fixed_params is None else fixed_params)
    init[poi], fixed[poi] = float(poi_value), True
    return fit(model, data, init, par_bounds, fixed, tolerance=tolerance, device=device, save_call=save_call)


def hypotest(poi_value: float, model: Model, data=None, test_stat="qtilde", init_pars=None, par_bounds=None, fixed_params=None, *, tolerance=None, device="cpu", save_call=None) -> AsymptoticHypotestResult:
    """Asymptotic CLs at ``poi_value``."""
    return _infer("hypotest", AsymptoticHypotestResult, model, data, init_pars, par_bounds, fixed_params, tolerance, device, None, save_call, mu=_number(poi_value, "poi_value"), test_stat=_test_stat(test_stat))


def hypotest_toys(poi_value: float, model: Model, n_toys: int = 2000, seed: int = 0, data=None, test_stat="qtilde", init_pars=None, par_bounds=None, fixed_params=None, *, tolerance=None, device="cpu", save_call=None, progress=True, teststats=False) -> ToyHypotestResult:
    """Toy-based CLs at ``poi_value``; the same seed gives the same toys on any device.
    ``teststats=True`` keeps every toy's test statistic (``result.teststats``; what
    ``nextstat.plot.toys`` draws)."""
    return _infer("hypotest_toys", ToyHypotestResult, model, data, init_pars, par_bounds, fixed_params, tolerance, device, _progress_label(progress, "toys"), save_call, mu=_number(poi_value, "poi_value"), n_toys=_integer(n_toys, "n_toys"), seed=_integer(seed, "seed"), test_stat=_test_stat(test_stat), teststats=bool(teststats))


def upper_limit(model: Model, data=None, level: Optional[float] = None, scan=None, init_pars=None, par_bounds=None, fixed_params=None, *, tolerance=None, device="cpu", save_call=None, progress=True) -> UpperLimitResult:
    """Observed and expected CLs upper limits: root finding, or a scan over ``scan``."""
    grid = None if scan is None else _array(scan, "scan").tolist()
    return _infer("upper_limit", UpperLimitResult, model, data, init_pars, par_bounds, fixed_params, tolerance, device, _progress_label(progress, "CLs scan"), save_call, level=None if level is None else _number(level, "level"), scan=grid)


def significance(model: Model, data=None, init_pars=None, par_bounds=None, fixed_params=None, *, tolerance=None, device="cpu", save_call=None) -> SignificanceResult:
    """Discovery p0 and Z (asymptotic q0), observed and expected."""
    return _infer("significance", SignificanceResult, model, data, init_pars, par_bounds, fixed_params, tolerance, device, None, save_call)


def profile_scan(model: Model, mu_values, data=None, parameter: Optional[str] = None, init_pars=None, par_bounds=None, fixed_params=None, *, tolerance=None, device="cpu", save_call=None, progress=True) -> ProfileScanResult:
    """Profile likelihood of the POI (or ``parameter``) at ``mu_values``."""
    values = _array(mu_values, "mu_values").tolist()
    return _infer("profile_scan", ProfileScanResult, model, data, init_pars, par_bounds, fixed_params, tolerance, device, _progress_label(progress, "scan"), save_call, values=values, parameter=parameter)


def ranking(model: Model, data=None, init_pars=None, par_bounds=None, fixed_params=None, *, tolerance=None, device="cpu", save_call=None, progress=True) -> RankingResult:
    """Pulls, constraints and pre/post-fit impacts on the POI of every nuisance parameter."""
    return _infer("ranking", RankingResult, model, data, init_pars, par_bounds, fixed_params, tolerance, device, _progress_label(progress, "ranking refits"), save_call)


def gof(model: Model, data=None, init_pars=None, par_bounds=None, fixed_params=None, *, tolerance=None, device="cpu", save_call=None) -> GofResult:
    """Goodness of fit against the saturated model."""
    return _infer("gof", GofResult, model, data, init_pars, par_bounds, fixed_params, tolerance, device, None, save_call)


def fit_toys_batch_gpu(model: Model, params, n_toys: int, seed: int = 0, *, tolerance=None, device="cuda", save_call=None) -> ToyFits:
    """Draw ``n_toys`` toys at ``params`` and fit each, all in one batch on the GPU."""
    report = _run("fit_toys", model, None, None, None, None, tolerance, device, None, save_call, pars=_finite_list(params, "params"), n_toys=_integer(n_toys, "n_toys"), seed=_integer(seed, "seed"))
    return _toy_fits(report, len(model.observed))


def _toy_fits(report: str, n_data: int) -> ToyFits:
    """The ``fit_toys`` report as toy rows and their fits."""
    report = json.loads(report)
    data = np.array(report["toys"], dtype=np.float64).reshape(-1, n_data)
    return ToyFits(data, [FitResult._from_json(json.dumps(f)) for f in report["fits"]])


def _fits(report: str) -> List[FitResult]:
    """The ``fit_datasets`` report as fits."""
    return [FitResult._from_json(json.dumps(f)) for f in json.loads(report)["fits"]]


def fit_toys_from_data_gpu(model: Model, data, init=None, bounds=None, *, tolerance=None, device="cuda", save_call=None) -> List[FitResult]:
    """Fit each row of ``data`` (main then aux) in one batch; ``init``/``bounds`` one per row or one for all."""
    rows = np.ascontiguousarray(data, dtype=np.float64)
    if rows.ndim != 2:
        raise InvalidInputError(f"data must be 2-dimensional (one dataset per row), not shape {rows.shape}")
    if not np.isfinite(rows).all():
        raise InvalidInputError("data holds a value that is not a finite number")
    init_rows = None if init is None else [_finite_list(r, "init") for r in np.atleast_2d(np.asarray(init, dtype=np.float64))]
    bound_rows = None if bounds is None else ([_bounds(bounds)] if np.ndim(bounds) == 2 else [_bounds(row) for row in bounds])
    return _fits(_run("fit_datasets", model, None, None, None, None, tolerance, device, None, save_call, datasets=rows.tolist(), init=init_rows, bounds=bound_rows))


def hypotest_qtilde_toys_gpu(poi_value: float, model: Model, n_toys: int, seed: int = 0, data=None, *, tolerance=None, device="cuda", save_call=None) -> ToyHypotestResult:
    """Toy-based CLs with q̃_μ on the GPU (observed data unless ``data`` is given)."""
    return hypotest_toys(poi_value, model, n_toys, seed, data, "qtilde", tolerance=tolerance, device=device, save_call=save_call)


_RESULT_OF_VERB.update(
    fit=FitResult, hypotest=AsymptoticHypotestResult, hypotest_toys=ToyHypotestResult, upper_limit=UpperLimitResult,
    significance=SignificanceResult, profile_scan=ProfileScanResult, ranking=RankingResult, gof=GofResult,
)


def has_cuda() -> bool:
    """Whether an NVIDIA driver and GPU are present (never raises)."""
    return _core.has_cuda()


def has_metal() -> bool:
    """Whether a Metal adapter is present for the f32 backend (``device="metal"``; macOS)."""
    return _core.has_metal()


def devices() -> dict:
    """What this machine offers — CPU threads, CUDA GPUs, Vulkan/Metal adapters — as
    ``nextstat devices --json`` prints it: the names ``device=`` takes ("cpu", "cuda",
    "vulkan", "metal") and why one is missing."""
    return json.loads(_core.devices())


from . import infer  # noqa: E402  (needs the names above)
from . import unbinned  # noqa: E402
