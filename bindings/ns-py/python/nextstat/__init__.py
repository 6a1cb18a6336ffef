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
    "NextStatError", "InvalidInputError", "ComputationError", "Workspace", "Model", "PatchSet", "Patch", "fit", "fixed_poi_fit", "hypotest",
    "hypotest_toys", "upper_limit", "significance", "profile_scan", "ranking", "gof",
    "fit_toys_batch_gpu", "fit_toys_from_data_gpu", "hypotest_qtilde_toys_gpu", "has_cuda",
    "build_info", "has_metal", "devices", "infer", "run_call", "exceptions", "utils", "tensor", "set_backend", "get_backend",
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


class Patch:
    """One patch of a patchset (``pyhf.patchset.Patch``): ``name``, ``values``, ``metadata``,
    the operations in ``patch``; ``apply(workspace)`` returns the patched workspace."""

    def __init__(self, spec: dict):
        self.metadata = spec["metadata"]
        self.patch = spec["patch"]

    name = property(lambda self: self.metadata["name"])
    values = property(lambda self: tuple(self.metadata["values"]))

    def apply(self, workspace: Any) -> "Workspace":
        ws = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
        return Workspace._wrap(ws._ws.apply_patch(json.dumps(self.patch)))

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Patch) and (self.metadata, self.patch) == (other.metadata, other.patch)

    __hash__ = None

    def __repr__(self) -> str:
        return f"<nextstat.Patch object '{self.name}{self.values}' at {hex(id(self))}>"


class PatchSet:
    """A HEPData patchset (``pyhf.PatchSet``): its patches by name or by values,
    ``verify(workspace)`` (the digest of the background-only workspace), ``apply(workspace,
    name or values)`` (verifies, then patches)."""

    def __init__(self, spec: Spec, **config_kwargs: Any):
        from .exceptions import InvalidPatchSet, InvalidSpecification, Unsupported

        if config_kwargs:
            raise Unsupported(f"PatchSet: unsupported options {sorted(config_kwargs)}")
        if isinstance(spec, Workspace):
            raise TypeError("PatchSet takes a patchset (dict, JSON text or path), not a Workspace")
        self._text, origin = _json_text(spec, "patchset")
        try:
            self.spec = json.loads(self._text)
        except json.JSONDecodeError as e:
            raise InvalidInputError(f"invalid JSON at {origin}: {e}") from None
        if not isinstance(self.spec, dict) or "patches" not in self.spec or "metadata" not in self.spec:
            looks_like = " (it looks like a workspace)" if isinstance(self.spec, dict) and "channels" in self.spec else ""
            raise InvalidSpecification(f"{origin}: a patchset needs 'metadata' and 'patches'{looks_like}")
        try:
            self._patches = [Patch(p) for p in self.spec["patches"]]
            labels = self.labels
            self.digests  # noqa: B018 - required, as in pyhf's schema
        except (KeyError, TypeError) as e:
            raise InvalidSpecification(f"{origin}: a patch or the metadata lacks {e}") from None
        if "version" not in self.spec:
            raise InvalidSpecification(f"{origin}: a patchset has a 'version'")
        if not self._patches:
            raise InvalidSpecification(f"{origin}: the patchset has no patches")
        for p in self._patches:
            if not all(isinstance(v, (int, float, str)) and not isinstance(v, bool) for v in p.values):
                raise InvalidSpecification(f"{origin}: patch '{p.name}' has values {list(p.values)}; values are numbers or strings")
        names, values = set(), set()
        for p in self._patches:
            if p.name in names:
                raise InvalidPatchSet(f"Multiple patches were defined by name for {p}.")
            if p.values in values:
                raise InvalidPatchSet(f"Multiple patches were defined by values for {p}.")
            if len(p.values) != len(labels):
                raise InvalidPatchSet(f"Incompatible number of values ({len(p.values)}) for {p} in patchset. Expected {len(labels)}.")
            names.add(p.name)
            values.add(p.values)

    metadata = property(lambda self: self.spec["metadata"])
    version = property(lambda self: self.spec.get("version"))
    labels = property(lambda self: list(self.metadata["labels"]))
    digests = property(lambda self: dict(self.metadata["digests"]))
    description = property(lambda self: self.metadata.get("description"))
    references = property(lambda self: self.metadata.get("references"))

    @property
    def patches(self) -> List[Patch]:
        return list(self._patches)

    def __len__(self) -> int:
        return len(self._patches)

    def __iter__(self):
        return iter(self._patches)

    def __getitem__(self, key: Any) -> Patch:
        """A patch by name, or by its values (a tuple or list)."""
        from .exceptions import InvalidPatchLookup

        if isinstance(key, Patch):
            key = key.name
        values = None if isinstance(key, str) else tuple(key) if isinstance(key, (list, tuple)) else tuple(np.ravel(key).tolist())
        for p in self._patches:
            if p.name == key or p.values == values:
                return p
        raise InvalidPatchLookup(f"No patch associated with input key={key}.")

    def verify(self, workspace: Any) -> None:
        """Checks the patchset's digests of the background-only workspace (a ``Workspace``, any
        JSON document, its text or path), as the engine does before applying a patch
        (``PatchSetVerificationError``)."""
        from .exceptions import PatchSetVerificationError

        try:
            _core.verify_patchset(self._text, _json_text(workspace, "workspace")[0])
        except InvalidInputError as e:
            raise PatchSetVerificationError(str(e)) from None

    def apply(self, workspace: Any, key: Any) -> "Workspace":
        """The workspace with the patch ``key`` (name or values), after ``verify``."""
        self.verify(workspace)
        return self[key].apply(workspace)

    def __repr__(self) -> str:
        n = len(self)
        return f"<nextstat.PatchSet object with {n} patch{'es' if n != 1 else ''} at {hex(id(self))}>"


class Workspace(dict):
    """A pyhf workspace from a dict, a JSON string or a path. As pyhf's, it is the workspace
    document itself (a ``dict``: ``ws["channels"]``, ``json.dumps(ws)``, edits seen by later
    operations), validated by the engine; besides pyhf's operations it has pyhf's summary
    attributes (``channels``, ``samples``, ``modifiers``, ``parameters``, ``measurement_names``,
    ``observations``, ``version``, ``channel_nbins``, ``channel_slices``)."""

    valid_joins = ["none", "outer", "left outer", "right outer"]

    def __init__(self, spec: Spec, validate: bool = True, **config_kwargs: Any):
        if config_kwargs:
            from .exceptions import Unsupported

            raise Unsupported(f"Workspace: unsupported options {sorted(config_kwargs)} (nextstat validates every workspace)")
        text, origin = _json_text(spec, "workspace")
        try:
            core = _core.Workspace.from_json(text, origin)
        except InvalidInputError as e:
            raise _as_pyhf_error(e) from None
        super().__init__(json.loads(text) if not isinstance(spec, dict) else json.loads(json.dumps(spec)))
        self._adopt(core)

    def _adopt(self, core_ws: Any) -> None:
        """Keep the engine's workspace of this document, and pyhf's attributes read at creation."""
        self._core_ws, self._core_text = core_ws, json.dumps(self, sort_keys=True)
        self.version = self.get("version")
        self.measurement_names = [m["name"] for m in self.get("measurements", [])]

    @classmethod
    def _wrap(cls, core_ws: Any) -> "Workspace":
        ws = cls.__new__(cls)
        dict.__init__(ws, json.loads(core_ws.to_json()))
        ws._adopt(core_ws)
        return ws

    @property
    def _ws(self) -> Any:
        """The engine's workspace of the document as it is now (rebuilt after edits, which also
        refresh ``version`` and ``measurement_names``)."""
        text = json.dumps(self, sort_keys=True)
        if text != self._core_text:
            try:
                core_ws = _core.Workspace.from_json(json.dumps(self), "workspace")
            except InvalidInputError as e:
                raise _as_pyhf_error(e) from None
            self._adopt(core_ws)
        return self._core_ws

    def _refresh(self) -> None:
        """``version`` and ``measurement_names`` follow edits of the document (set by hand, they
        stand until the document changes)."""
        if json.dumps(self, sort_keys=True) != self._core_text:
            self.version = self.get("version")
            self.measurement_names = [m.get("name") for m in self.get("measurements", []) if isinstance(m, dict)]

    @property
    def spec(self) -> dict:
        """The document as a plain dict (a copy)."""
        return json.loads(json.dumps(self))

    def __reduce__(self):
        # Copies and pickles carry the document; the engine's workspace is made again from it.
        return (type(self), (json.loads(json.dumps(self)),))

    def __copy__(self) -> "Workspace":
        return type(self)(self)

    def __deepcopy__(self, memo: Any) -> "Workspace":
        return type(self)(self)

    # pyhf's summary of the channels (sorted, as pyhf's _ChannelSummaryMixin).
    @property
    def observations(self) -> Dict[str, List[float]]:
        return {o["name"]: o["data"] for o in self.get("observations", [])}

    @property
    def channels(self) -> List[str]:
        return sorted({c["name"] for c in self["channels"]})

    @property
    def samples(self) -> List[str]:
        return sorted({s["name"] for c in self["channels"] for s in c["samples"]})

    @property
    def modifiers(self) -> List[Tuple[str, str]]:
        return sorted({(m["name"], m["type"]) for c in self["channels"] for s in c["samples"] for m in s["modifiers"]})

    @property
    def parameters(self) -> List[str]:
        """The names of the parameter sets the modifiers declare."""
        return sorted({name for name, _ in self.modifiers})

    @property
    def channel_nbins(self) -> Dict[str, int]:
        nbins = {c["name"]: len(c["samples"][0]["data"]) for c in self["channels"]}
        return {c: nbins[c] for c in sorted(nbins)}

    @property
    def channel_slices(self) -> Dict[str, slice]:
        return _slices(self.channel_nbins)

    def get_measurement(self, measurement_name: Optional[str] = None, measurement_index: Optional[int] = None) -> dict:
        """The measurement named, or at the index, or the first (pyhf's rules and errors)."""
        from .exceptions import InvalidMeasurement

        self._refresh()
        measurements = self.get("measurements", [])
        names = list(self.measurement_names)
        if not names:
            raise InvalidMeasurement("No measurements have been defined.")
        if measurement_name is not None:
            found = [m for m in measurements if m.get("name") == measurement_name]
            if measurement_name not in names or not found:
                raise InvalidMeasurement(f"no measurement by name '{measurement_name}' was found in the workspace, pick from one of the valid ones: {names}")
            return found[0]
        index = 0 if measurement_index is None else measurement_index
        if not -len(names) <= index < len(names):
            raise InvalidMeasurement(f"The measurement index {index} is out of bounds as only {len(names)} measurement(s) have been defined.")
        return measurements[index]

    def model(
        self,
        measurement_name: Optional[str] = None,
        measurement_index: Optional[int] = None,
        patches: Optional[Iterable[Any]] = None,
        modifier_settings: Optional[Dict[str, Dict[str, str]]] = None,
        **config_kwargs: Any,
    ) -> "Model":
        """The model of a measurement (by name, index, or the first), after ``patches`` (JSON
        patches: lists of operations, dicts with a ``"patch"`` key as in a patchset, or
        ``jsonpatch``/``Patch`` objects). ``modifier_settings`` (``{"normsys": {"interpcode":
        "code1"}}``) replaces pyhf's default codes as in pyhf: a type it leaves out takes its
        modifier's own default (normsys code1, histosys code0). pyhf's ``poi_name`` (a parameter,
        or ``None`` for a model without POI), ``validate`` and ``batch_size=None`` are taken."""
        from .exceptions import InvalidModel, Unsupported

        poi_override = config_kwargs.pop("poi_name", _UNSET)
        config_kwargs.pop("validate", None)
        if config_kwargs.pop("batch_size", None) is not None:
            raise Unsupported("batch_size: nextstat evaluates batches through its own API (nextstat.fit_toys_batch_gpu, Model.nll_grad per point)")
        if config_kwargs:
            raise Unsupported(f"Workspace.model: unsupported options {sorted(config_kwargs)}")
        # One measurement, by name, for the engine's model and the spec alike.
        measurement_name = self.get_measurement(measurement_name, measurement_index)["name"]
        ws = self
        for patch in patches or []:
            ops = getattr(patch, "patch", None)
            if ops is None:
                ops = patch.get("patch") if isinstance(patch, dict) else patch
            ws = Workspace._wrap(ws._ws.apply_patch(json.dumps(list(ops))))
        if poi_override is not _UNSET:
            spec = ws.spec
            measurement = ws.get_measurement(measurement_name)
            known = {name for name, _ in ws.modifiers}
            if poi_override is not None and poi_override not in known:
                raise InvalidModel(f"The parameter of interest '{poi_override}' cannot be fit as it is not declared in the model specification.")
            for m in spec["measurements"]:
                if m["name"] == measurement["name"]:
                    m["config"]["poi"] = "" if poi_override is None else poi_override
            ws = Workspace(spec)
        try:
            core_model = ws._ws.model(measurement_name, *_interp_codes(modifier_settings))
        except InvalidInputError as e:
            raise _as_pyhf_error(e) from None
        measurement = ws.get_measurement(measurement_name)
        spec = ws.spec
        model_spec = {"channels": spec["channels"], "parameters": measurement["config"].get("parameters", [])}
        return Model(core_model, ws._ws.data(core_model, True), spec=model_spec)

    def data(self, model: "Model", include_auxdata: bool = True) -> List[float]:
        return self._ws.data(model._model, include_auxdata)

    def digest(self) -> str:
        return self._ws.digest()

    def prune(self, modifiers=(), modifier_types=(), samples=(), channels=(), measurements=()) -> "Workspace":
        """pyhf's ``prune`` (same keyword order; lists of names: a string is its characters, as
        in pyhf)."""
        names = lambda v: list(v or ())  # noqa: E731
        try:
            return type(self)._wrap(self._ws.prune(names(channels), names(samples), names(modifiers), names(modifier_types), names(measurements)))
        except InvalidInputError as e:
            raise _as_pyhf_error(e) from None

    def rename(self, modifiers=None, samples=None, channels=None, measurements=None) -> "Workspace":
        """pyhf's ``rename`` (same keyword order)."""
        try:
            return type(self)._wrap(self._ws.rename(channels or {}, samples or {}, modifiers or {}, measurements or {}))
        except InvalidInputError as e:
            raise _as_pyhf_error(e) from None

    @classmethod
    def combine(cls, left: "Workspace", right: "Workspace", join: str = "none", merge_channels: bool = False) -> "Workspace":
        """pyhf's ``combine``; an outer join warns that it is unsafe, as pyhf does."""
        from .exceptions import InvalidWorkspaceOperation

        if join not in cls.valid_joins:
            raise ValueError(f"Workspaces must be joined using one of the valid join operations ({cls.valid_joins}); not {join}")
        if merge_channels and join not in ["outer", "left outer", "right outer"]:
            raise ValueError(f"You can only merge channels using the 'outer', 'left outer', or 'right outer' join operations; not {join}")
        versions = [w.get("version") if isinstance(w, dict) else None for w in (left, right)]
        if versions[0] != versions[1]:
            raise InvalidWorkspaceOperation(f"Workspaces of different versions cannot be combined: {versions[0]} != {versions[1]}")
        if join in ("left outer", "right outer"):
            import logging

            logging.getLogger("pyhf.workspace").warning(
                "You are using an unsafe join operation. This will silence exceptions that might be raised during a normal 'outer' operation."
            )
        try:
            left, right = (w if isinstance(w, Workspace) else Workspace(w) for w in (left, right))
            return cls._wrap(_core.Workspace.combine(left._ws, right._ws, join, merge_channels))
        except InvalidInputError as e:
            # A workspace edited into an invalid one cannot be combined (pyhf's error class).
            raise InvalidWorkspaceOperation(str(e)) from None

    @classmethod
    def sorted(cls, workspace: "Workspace") -> "Workspace":
        return cls._wrap(workspace._ws.sorted())

    @classmethod
    def build(cls, model: "Model", data: Any, name: str = "measurement", validate: bool = True) -> "Workspace":
        """A workspace of ``model`` (its spec and parameter settings) with ``data`` as the
        observations (the main data; auxiliary entries after them are ignored)."""
        config = model.config
        data = list(data)
        parameters = [
            {"name": set_name, "bounds": [list(b) for b in p.suggested_bounds], "inits": list(p.suggested_init),
             "fixed": bool(all(p.suggested_fixed))}
            for set_name, entry in config.par_map.items() for p in [entry["paramset"]]
        ]
        spec = {
            "channels": model.spec["channels"],
            "measurements": [{"name": name, "config": {"poi": config.poi_name or "", "parameters": parameters}}],
            "observations": [{"name": c, "data": data[config.channel_slices[c]]} for c in config.channels],
            "version": "1.0.0",
        }
        return cls(spec)

    def __repr__(self) -> str:
        try:
            return f"Workspace(digest={self.digest()[:12]}…)"
        except InvalidInputError:
            return "Workspace(not a valid workspace as edited)"


_UNSET = object()


def _interp_codes(modifier_settings: Optional[Dict[str, Dict[str, str]]]) -> Tuple[Optional[str], Optional[str]]:
    """The (normsys, histosys) codes of pyhf's ``modifier_settings``: none given, pyhf's
    defaults (code4, code4p; the engine's own); given, they replace the defaults wholesale and
    a type they leave out takes its modifier's own default (normsys code1, histosys code0), as in
    pyhf."""
    if modifier_settings is None:
        return None, None
    return (modifier_settings.get("normsys", {}).get("interpcode", "code1"),
            modifier_settings.get("histosys", {}).get("interpcode", "code0"))


def _slices(nbins: Dict[str, int]) -> Dict[str, slice]:
    """Consecutive slices of the given lengths, in the dict's order."""
    out, begin = {}, 0
    for name, n in nbins.items():
        out[name] = slice(begin, begin + n)
        begin += n
    return out


class _ParamSet:
    """One named set of parameters (``model.config.param_set(name)``), as pyhf's paramsets:
    ``n_parameters``, ``is_scalar``, ``suggested_init``, ``suggested_bounds``, ``suggested_fixed``
    (settable: later fits through ``nextstat.infer`` see it), ``constrained``, ``pdf_type``,
    ``auxdata``, ``sigmas`` (Gaussian) or ``factors`` (Poisson)."""

    def __init__(self, info: dict, init: list, bounds: list, fixed: list):
        self.name = info["name"]
        self.modifier_type = info["modifier_type"]
        self.n_parameters = info["n_parameters"]
        self.is_scalar = info["is_scalar"]
        self.pdf_type = info["constraint"]
        self.constrained = self.pdf_type is not None
        self.auxdata = info["auxdata"]
        if self.pdf_type == "normal":
            self.sigmas = info["sigmas"]
        if self.pdf_type == "poisson":
            self.factors = info["factors"]
        self.suggested_init = init
        self.suggested_bounds = bounds
        self.suggested_fixed = fixed

    @property
    def suggested_fixed_as_bool(self) -> List[bool]:
        return [bool(f) for f in self.suggested_fixed]

    def width(self) -> List[float]:
        """The constraint widths: σ (Gaussian) or 1/√τ (Poisson)."""
        if self.pdf_type == "normal":
            return list(self.sigmas)
        if self.pdf_type == "poisson":
            return [f ** -0.5 for f in self.factors]
        from .exceptions import InvalidModel

        raise InvalidModel(f"parameter set '{self.name}' is unconstrained: it has no width")

    def __repr__(self) -> str:
        return f"ParamSet({self.name!r}, n_parameters={self.n_parameters}, constraint={self.pdf_type})"


class _Config:
    """``model.config``: pyhf's names for the parameter layout. The parameter sets
    (``par_map``, ``param_set``) are the source of ``suggested_init/bounds/fixed()``."""

    def __init__(self, core_model: Any, spec: Optional[dict] = None):
        self._m = core_model
        self._spec = spec
        init, bounds, fixed = core_model.suggested_init(), core_model.suggested_bounds(), core_model.suggested_fixed()
        self.par_map: Dict[str, Dict[str, Any]] = {}
        for info in json.loads(core_model.parameter_sets_json()):
            part = slice(info["offset"], info["offset"] + info["n_parameters"])
            paramset = _ParamSet(info, list(init[part]), [list(b) for b in bounds[part]], list(fixed[part]))
            self.par_map[info["name"]] = {"slice": part, "paramset": paramset}
        self.parameters = sorted(self.par_map)
        self.auxdata_order = [name for name in self.par_order if self.par_map[name]["paramset"].constrained]

    par_names = property(lambda self: list(self._m.par_names))
    par_order = property(lambda self: list(self._m.par_order))
    npars = property(lambda self: self._m.npars)
    channels = property(lambda self: list(self._m.channels))
    channel_nbins = property(lambda self: dict(zip(self._m.channels, self._m.channel_nbins)))
    channel_slices = property(lambda self: _slices(self.channel_nbins))
    samples = property(lambda self: list(self._m.samples))
    auxdata = property(lambda self: list(self._m.auxdata))
    nmaindata = property(lambda self: sum(self._m.channel_nbins))
    nauxdata = property(lambda self: len(self._m.auxdata))

    @property
    def poi_index(self) -> Optional[int]:
        return self._m.poi_index

    @property
    def poi_name(self) -> Optional[str]:
        """The POI's name, ``None`` for a model without one (as pyhf)."""
        return None if self._m.poi_index is None else self._m.poi_name

    @property
    def modifiers(self) -> List[Tuple[str, str]]:
        """(name, type) of every modifier, sorted (as pyhf's)."""
        if self._spec is None:
            return sorted({(name, p["paramset"].modifier_type) for name, p in self.par_map.items()})
        return sorted({(m["name"], m["type"]) for c in self._spec["channels"] for s in c["samples"] for m in s["modifiers"]})

    def par_slice(self, name: str) -> slice:
        return self._entry(name)["slice"]

    def param_set(self, name: str) -> _ParamSet:
        return self._entry(name)["paramset"]

    def _entry(self, name: str) -> Dict[str, Any]:
        try:
            return self.par_map[name]
        except KeyError:
            raise InvalidInputError(f"the model has no parameter set '{name}' (sets: {', '.join(self.par_order)})") from None

    def _concat(self, attribute: str) -> list:
        return [v for name in self.par_order for v in getattr(self.par_map[name]["paramset"], attribute)]

    def suggested_init(self) -> List[float]:
        return self._concat("suggested_init")

    def _edited(self, init_pars: Any, par_bounds: Any, fixed_params: Any) -> Tuple[Any, Any, Any]:
        """The settings a call runs with: those given, else the config's where a parameter set
        was edited (``param_set(...).suggested_fixed = [True]``, as pyhf honours), else None (the
        engine's own, which are the config's unedited)."""
        ours = (self.suggested_init(), self.suggested_bounds(), self.suggested_fixed())
        engine = (list(self._m.suggested_init()), [list(b) for b in self._m.suggested_bounds()], list(self._m.suggested_fixed()))
        given = (init_pars, par_bounds, fixed_params)
        return tuple(g if g is not None else (o if o != e else None) for g, o, e in zip(given, ours, engine))

    def suggested_bounds(self) -> List[List[float]]:
        return [list(b) for b in self._concat("suggested_bounds")]

    def suggested_fixed(self) -> List[bool]:
        return [bool(f) for f in self._concat("suggested_fixed")]


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


def _as_pyhf_error(error: Exception) -> Exception:
    """An engine error about a workspace or model spec as pyhf's exception class for it (each
    is an InvalidInputError, so nextstat's own handlers still catch it)."""
    from . import exceptions

    text = str(error)
    if "the result is not a valid workspace" in text:
        return exceptions.InvalidSpecification(text)
    if "unknown type" in text or ("modifiers[" in text and ("data has" in text or "data." in text)):
        kind = exceptions.InvalidModifier
    elif "'paramset_type' differ" in text:
        kind = exceptions.InvalidNameReuse
    elif text.startswith(("invalid model", "invalid workspace: model spec")) or "bins but" in text:
        kind = exceptions.InvalidModel
    elif text.startswith(("invalid JSON", "invalid workspace")):
        kind = exceptions.InvalidSpecification
    elif text.startswith("workspace operation failed"):
        kind = exceptions.InvalidWorkspaceOperation
    else:
        return error
    return kind(text)


def _model_of_spec(spec: dict, config_kwargs: Dict[str, Any]) -> Any:
    """The engine's model of a pyhf model spec (``{"channels": …, "parameters": …}``): a
    workspace with one measurement and placeholder observations (never used: such a model has
    no observed data)."""
    from .exceptions import InvalidSpecification, Unsupported

    if not isinstance(spec, dict) or not isinstance(spec.get("channels"), list):
        raise InvalidSpecification("a model spec is a dict with a 'channels' list")
    poi = config_kwargs.pop("poi_name", "mu")
    codes = _interp_codes(config_kwargs.pop("modifier_settings", None))
    config_kwargs.pop("validate", None)
    if config_kwargs.pop("batch_size", None) is not None:
        raise Unsupported("batch_size: nextstat evaluates batches through its own API (nextstat.fit_toys_batch_gpu, Model.nll_grad per point)")
    if config_kwargs:
        raise Unsupported(f"Model: unsupported options {sorted(config_kwargs)}")
    try:
        observations = [{"name": c["name"], "data": [0.0] * len(c["samples"][0]["data"])} for c in spec["channels"]]
    except (KeyError, IndexError, TypeError) as e:
        raise InvalidSpecification(f"a channel of the model spec has no samples with data ({e})") from None
    workspace = {
        "channels": spec["channels"],
        "observations": observations,
        "measurements": [{"name": "measurement", "config": {"poi": "" if poi is None else poi, "parameters": spec.get("parameters", [])}}],
        "version": "1.0.0",
    }
    try:
        ws = _core.Workspace.from_json(*_json_text(workspace, "model spec"))
        core_model = ws.model(None, *codes)
    except InvalidInputError as e:
        raise _as_pyhf_error(e) from None
    if poi is not None and poi != "" and core_model.poi_index is None:
        from .exceptions import InvalidModel

        raise InvalidModel(f"The parameter of interest '{poi}' cannot be fit as it is not declared in the model specification.")
    return core_model


class Model:
    """A HistFactory model (``Workspace.model()``); it remembers its workspace's observations."""

    def __init__(self, core_model: Any, observed: Optional[Sequence[float]] = None, spec: Optional[dict] = None, **config_kwargs: Any):
        if isinstance(core_model, dict):
            # pyhf's Model(spec, poi_name=..., modifier_settings=...): the channels and parameter
            # configurations, no observations (data is passed to every call).
            core_model, spec = _model_of_spec(core_model, config_kwargs), core_model
        elif not isinstance(core_model, _core.Model):
            raise TypeError(f"Model takes a model spec (a dict with 'channels', as pyhf's Model), not {type(core_model).__name__}; "
                            "a workspace gives its model with Workspace(...).model()")
        elif config_kwargs:
            raise TypeError(f"Model: unexpected arguments {sorted(config_kwargs)}")
        self._model = core_model
        self._spec = spec
        self.config = _Config(core_model, spec)
        self.observed = None if observed is None else list(observed)

    @property
    def spec(self) -> dict:
        """pyhf's model spec: the channels and the measurement's parameter configurations."""
        if self._spec is None:
            raise InvalidInputError("this model was not built from a workspace (Workspace.model()) and has no spec")
        return json.loads(json.dumps(self._spec))

    def pdf(self, pars: Any, data: Any) -> np.ndarray:
        """The likelihood (``exp(logpdf)``), shaped ``(1,)``."""
        return np.exp(self.logpdf(pars, data))

    def expected_actualdata(self, pars: Any) -> np.ndarray:
        """The expected main data (the bins), without the auxiliary data."""
        return self.expected_data(pars, include_auxdata=False)

    def expected_auxdata(self, pars: Any) -> np.ndarray:
        """The expected auxiliary data (the constraint terms' centres at ``pars``)."""
        return self.expected_data(pars, include_auxdata=True)[self.config.nmaindata:]

    def logpdf(self, pars: Any, data: Any) -> np.ndarray:
        """log-likelihood, shaped ``(1,)`` as pyhf's."""
        from .exceptions import InvalidPdfData, InvalidPdfParameters

        pars, data = _array(pars, "pars"), _array(data, "data")
        if len(pars) != self.config.npars:
            raise InvalidPdfParameters(f"eval failed as pars has len {len(pars)} but {self.config.npars} was expected "
                                       f"(the model's parameters: {', '.join(self.config.par_names[:4])}{'…' if self.config.npars > 4 else ''})")
        expected = self.config.nmaindata + self.config.nauxdata
        if len(data) != expected:
            raise InvalidPdfData(f"eval failed as data has len {len(data)} but {expected} was expected "
                                 f"({self.config.nmaindata} main data + {self.config.nauxdata} auxiliary data)")
        nll, _ = self._model.nll_grad(pars, data)
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
    call_text = _call_text(verb, model, data, init_pars, par_bounds, fixed_params, tolerance, device, **extra)
    if save_call is not None:
        Path(save_call).write_text(_core.call_json(model._model, call_text) + "\n", encoding="utf-8")
    return _core.infer(model._model, call_text, progress)


def _call_text(verb: str, model: Model, data, init_pars, par_bounds, fixed_params, tolerance, device, **extra) -> str:
    """The engine's call of ``verb`` on ``model`` (without the model) as JSON text: the request,
    the fit options, the device and the data (observed unless given)."""
    from .unbinned import UnbinnedModel

    if not isinstance(model, (Model, UnbinnedModel)):
        raise TypeError(f"{verb}: model must be a nextstat.Model (Workspace(...).model()) or a nextstat.unbinned.UnbinnedModel, not {type(model).__name__}")
    data = model.observed if data is None else data
    if data is None and isinstance(model, Model):
        raise InvalidInputError("this model was built from a spec and has no observations: pass the data")
    if isinstance(model, Model):
        init_pars, par_bounds, fixed_params = model.config._edited(init_pars, par_bounds, fixed_params)
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
        call["data"] = dict(values=_finite_list(data, "data"))
    try:
        return json.dumps(call, allow_nan=False)
    except ValueError:
        raise ValueError(f"{verb}: tolerance, mu, level and scan values must be finite numbers") from None


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


def fit(model: Model, data=None, init_pars=None, par_bounds=None, fixed_params=None, *, tolerance=None, device="cpu", save_call=None, yields=False, minos=None) -> FitResult:
    """Maximum-likelihood fit with uncertainties (observed data unless ``data`` is given);
    ``yields=True`` adds pre- and post-fit yields per channel and sample with the uncertainty of
    the total (``result.yields``; what ``nextstat.plot.yields`` draws); ``minos`` (parameter
    names) adds their profile-likelihood intervals (``result.minos``)."""
    names = [minos] if isinstance(minos, str) else list(minos or [])
    return _infer("fit", FitResult, model, data, init_pars, par_bounds, fixed_params, tolerance, device, None, save_call, uncertainties=True, yields=bool(yields), minos=names)


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


def build_info() -> dict:
    """What this build is, as ``nextstat version --json`` prints it: ``version``, ``git_commit``,
    ``features`` (``"cuda"``, ``"wgpu"``), ``cuda_archs`` (the GPU architectures whose kernels are
    embedded, e.g. ``[80, 90, 100, 120]``; others compile them at first use), ``cpu_simd`` (the
    instruction set the CPU evaluator uses here), ``target``, ``profile`` and ``rustc``."""
    return json.loads(_core.build_info())


def has_metal() -> bool:
    """Whether a Metal adapter is present for the f32 backend (``device="metal"``; macOS)."""
    return _core.has_metal()


def devices() -> dict:
    """What this machine offers — CPU threads, CUDA GPUs, Vulkan/Metal adapters — as
    ``nextstat devices --json`` prints it: the names ``device=`` takes ("cpu", "cuda",
    "vulkan", "metal") and why one is missing."""
    return json.loads(_core.devices())


# pyhf's backend interface, for scripts that name the numpy backend (`import nextstat as pyhf`).
from . import exceptions, simplemodels, tensor, utils  # noqa: E402

_backend = tensor.numpy_backend()


class _Optimizer:
    """The optimizer every fit runs: nextstat's own L-BFGS-B (pyhf's `optimizer` slot)."""

    name = "nextstat-lbfgsb"

    def __repr__(self) -> str:
        return "nextstat's L-BFGS-B (analytic gradients)"


_optimizer = _Optimizer()


def set_backend(backend: Any, custom_optimizer: Any = None, precision: Optional[str] = None, default: bool = False) -> None:
    """pyhf's ``set_backend`` for the numpy backend (by name or object); any optimizer is
    accepted and nextstat's own runs. Other backends raise ``exceptions.InvalidBackend`` naming
    the alternative."""
    global _backend
    name = backend.decode() if isinstance(backend, bytes) else getattr(backend, "name", backend)
    if not isinstance(name, str) or name.lower() != "numpy":
        raise exceptions.InvalidBackend(
            f"the {name!r} backend: nextstat computes in its own engine and offers the numpy tensor backend only; "
            "for GPUs pass device='cuda' (or 'vulkan', 'metal'), for autograd use nextstat.torch"
        )
    if isinstance(backend, tensor.numpy_backend) and precision is None:
        _backend = backend
    else:
        _backend = tensor.numpy_backend(precision=precision or "64b")


def get_backend(default: bool = False) -> Tuple[Any, Any]:
    """``(tensorlib, optimizer)``: the numpy backend and nextstat's optimizer."""
    return (_backend, _optimizer)


def __getattr__(name: str) -> Any:
    # pyhf.tensorlib / pyhf.optimizer / pyhf.default_backend follow set_backend.
    if name == "tensorlib":
        return _backend
    if name == "optimizer":
        return _optimizer
    if name == "default_backend":
        return tensor.numpy_backend()
    raise AttributeError(f"module 'nextstat' has no attribute {name!r}")


from . import infer  # noqa: E402  (needs the names above)
from . import unbinned  # noqa: E402
