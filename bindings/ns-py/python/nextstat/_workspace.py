"""Workspaces, patches and patchsets: pyhf's `Workspace`, `Patch` and `PatchSet`, read from a
dict, JSON text, a file or standard input."""

from __future__ import annotations

import json
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np

from . import _core
from ._core import InvalidInputError
from ._model import Model, _as_pyhf_error, _interp_codes, _modifier_settings, _slices
from ._validate import Spec, _json_text



class Patch:
    """One patch of a patchset (``pyhf.patchset.Patch``): ``name``, ``values``, ``metadata``,
    the operations in ``patch`` (also by iterating the patch); ``apply(workspace)`` returns the
    patched workspace."""

    def __init__(self, spec: dict):
        self.metadata = spec["metadata"]
        self.patch = spec["patch"]

    name = property(lambda self: self.metadata["name"])
    values = property(lambda self: tuple(self.metadata["values"]))

    def apply(self, workspace: Any) -> "Workspace":
        ws = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
        return Workspace._wrap(ws._ws.apply_patch(json.dumps(self.patch)))

    def __iter__(self):
        """The patch's operations, as iterating pyhf's ``Patch`` (a ``jsonpatch.JsonPatch``)
        gives them: ``jsonpatch.apply_patch(spec, patch)`` takes either."""
        return iter(json.loads(json.dumps(self.patch)))

    def __len__(self) -> int:
        return len(self.patch)

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
        super().__init__(json.loads(text))
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
        clip_negative_yields: bool = False,
        **config_kwargs: Any,
    ) -> "Model":
        """The model of a measurement (by name, index, or the first), after ``patches`` (JSON
        patches: lists of operations, dicts with a ``"patch"`` key as in a patchset, or
        ``jsonpatch``/``Patch`` objects). ``modifier_settings`` (``{"normsys": {"interpcode":
        "code1"}}``) replaces pyhf's default codes as in pyhf: a type it leaves out takes its
        modifier's own default (normsys code1, histosys code0). ``clip_negative_yields`` clips
        each sample's yield at zero as ROOT's HistFactory does, and gives an empty bin expecting a
        negative count a wall (a nextstat option; pyhf lets yields turn negative, which leaves
        some published likelihoods without a minimum; docs/pyhf-semantics.md). pyhf's ``poi_name`` (a parameter,
        or ``None`` for a model without POI), ``validate`` and ``batch_size=None`` are taken."""
        from .exceptions import InvalidModel, Unsupported

        poi_override = config_kwargs.pop("poi_name", _UNSET)
        config_kwargs.pop("validate", None)
        if config_kwargs.pop("batch_size", None) is not None:
            raise Unsupported("batch_size: nextstat evaluates batches through its own API (nextstat.fit_toys_batch_gpu, Model.nll_grad per point)")
        clipping = sorted({"clip_sample_data", "clip_bin_data"} & set(config_kwargs))
        if clipping:
            raise Unsupported(
                f"{', '.join(clipping)}: pyhf's clipping of sample or bin data is not offered; "
                "clip_negative_yields=True clips each sample's negative yield at zero, as ROOT's HistFactory does"
            )
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
            core_model = ws._ws.model(measurement_name, *_interp_codes(modifier_settings), clip_negative_yields)
        except InvalidInputError as e:
            raise _as_pyhf_error(e) from None
        measurement = ws.get_measurement(measurement_name)
        spec = ws.spec
        model_spec = {"channels": spec["channels"], "parameters": measurement["config"].get("parameters", [])}
        model = Model(core_model, ws._ws.data(core_model, True), spec=model_spec)
        model.config.modifier_settings = _modifier_settings(modifier_settings)
        return model

    def data(self, model: "Model", include_auxdata: bool = True) -> List[float]:
        """The model's observations in this workspace, then (``include_auxdata``) its auxiliary
        data. The observations are the numbers as written (``385`` stays an integer), as pyhf's."""
        values = self._ws.data(model._model, include_auxdata)
        written = [x for c in model.config.channels for x in (self.observations.get(c) or [])]
        n_main = model.config.nmaindata
        if len(written) == n_main and all(float(w) == v for w, v in zip(written, values[:n_main])):
            return written + list(values[n_main:])
        return values

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
            "measurements": [{"name": name, "config": {"poi": config.poi_name, "parameters": parameters}}],
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


