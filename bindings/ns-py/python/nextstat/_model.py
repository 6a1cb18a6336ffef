"""The binned model: `Model` with its pyhf-style `config` (parameter sets, slices, suggested
init, bounds and fixed flags)."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import _core
from ._core import InvalidInputError
from ._validate import _array, _json_text



def _interp_codes(modifier_settings: Optional[Dict[str, Dict[str, str]]]) -> Tuple[Optional[str], Optional[str]]:
    """The (normsys, histosys) codes of pyhf's ``modifier_settings``: none given, pyhf's
    defaults (code4, code4p; the engine's own); given, they replace the defaults wholesale and
    a type they leave out takes its modifier's own default (normsys code1, histosys code0), as in
    pyhf."""
    if modifier_settings is None:
        return None, None
    return (modifier_settings.get("normsys", {}).get("interpcode", "code1"),
            modifier_settings.get("histosys", {}).get("interpcode", "code0"))


def _modifier_settings(modifier_settings: Optional[Dict[str, Dict[str, str]]]) -> Dict[str, Dict[str, str]]:
    """pyhf's ``config.modifier_settings``: the settings given, or pyhf's defaults."""
    if modifier_settings is None:
        return {"normsys": {"interpcode": "code4"}, "histosys": {"interpcode": "code4p"}}
    return json.loads(json.dumps(modifier_settings))


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

    def __init__(self, core_model: Any, spec: Optional[dict] = None, owner: Any = None):
        self._m = core_model
        # The Model whose core set_poi replaces along with this one's.
        self._owner = owner
        self._spec = spec
        init, bounds, fixed = core_model.suggested_init(), core_model.suggested_bounds(), core_model.suggested_fixed()
        self.par_map: Dict[str, Dict[str, Any]] = {}
        for info in json.loads(core_model.parameter_sets_json()):
            part = slice(info["offset"], info["offset"] + info["n_parameters"])
            paramset = _ParamSet(info, list(init[part]), [list(b) for b in bounds[part]], list(fixed[part]))
            self.par_map[info["name"]] = {"slice": part, "paramset": paramset}
        self.parameters = sorted(self.par_map)
        self._keep_written_numbers(spec)
        self.auxdata_order = [name for name in self.par_order if self.par_map[name]["paramset"].constrained]

    def _keep_written_numbers(self, spec: Optional[dict]) -> None:
        """Inits and bounds as pyhf writes them where they are the model's: a spec's parameter
        configuration as written (``[[0, 10]]`` stays integers), and a normfactor's default
        bounds as pyhf's integers ``[[0, 10]]``. ``Workspace.build`` (and so the digest of what
        it builds) shows them."""
        given_bounds = {p.get("name") for p in (spec or {}).get("parameters") or [] if isinstance(p, dict) and "bounds" in p}
        for name, entry in self.par_map.items():
            paramset = entry["paramset"]
            if paramset.modifier_type == "normfactor" and name not in given_bounds and paramset.suggested_bounds == [[0.0, 10.0]]:
                paramset.suggested_bounds = [[0, 10]]
        for given in (spec or {}).get("parameters") or []:
            entry = self.par_map.get(given.get("name")) if isinstance(given, dict) else None
            if entry is None:
                continue
            paramset = entry["paramset"]
            for key, attribute in (("inits", "suggested_init"), ("bounds", "suggested_bounds")):
                written = given.get(key)
                ours = getattr(paramset, attribute)
                try:
                    same = np.array_equal(np.asarray(written, dtype=float), np.asarray(ours, dtype=float))
                except (TypeError, ValueError):
                    same = False
                if same:
                    setattr(paramset, attribute, json.loads(json.dumps(written)))

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

    def set_poi(self, name: str) -> None:
        """Make the scalar parameter ``name`` the POI (pyhf's ``config.set_poi``): every verb then
        tests it, and a saved call names it."""
        if not isinstance(name, str):
            raise TypeError(f"set_poi: name must be a str, not {type(name).__name__}")
        self._m = self._m.with_poi(name)
        if self._owner is not None:
            self._owner._model = self._m

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
    if poi is not None and poi != "" and core_model.poi_index is None and poi not in core_model.par_order:
        from .exceptions import InvalidModel

        raise InvalidModel(f"The parameter of interest '{poi}' cannot be fit as it is not declared in the model specification.")
    return core_model


class _MainModel:
    """pyhf's ``model.main_model``: the Poisson terms of the main bins about the engine's
    expected data."""

    def __init__(self, model: "Model"):
        self._model = model

    def expected_data(self, pars: Any, return_by_sample: bool = False) -> np.ndarray:
        """The expected main data, or with ``return_by_sample`` one row per sample
        (``model.config.samples`` order; zeros where a channel has no such sample)."""
        pars = self._model._pars(pars)
        if return_by_sample:
            return self._model._model.expected_by_sample(pars)
        return self._model._model.expected_data(pars, False)

    def make_pdf(self, pars: Any) -> Any:
        from .probability import Independent, Poisson

        return Independent(Poisson(self.expected_data(pars)))

    def has_pdf(self) -> bool:
        """Whether the model has main bins."""
        return self._model.config.nmaindata > 0

    def logpdf(self, maindata: Any, pars: Any) -> np.ndarray:
        return self.make_pdf(pars).log_prob(_array(maindata, "maindata"))


class _PoissonConstraints:
    """pyhf's ``constraint_model.constraints_poisson``: ``batched_factors`` (one batch), the τ of
    every Poisson-constrained parameter; absent, as in pyhf, where there is none."""

    def __init__(self, factors: List[float]):
        if factors:
            self.batched_factors = np.asarray([factors], dtype=float)


class _DataView:
    """pyhf's ``model.fullpdf_tv``: ``split(data)`` into the main and the auxiliary data."""

    def __init__(self, n_main: int):
        self._n_main = n_main

    def split(self, data: Any) -> List[np.ndarray]:
        data = np.asarray(data, dtype=float)
        return [data[..., : self._n_main], data[..., self._n_main :]]


class _ConstraintModel:
    """pyhf's ``model.constraint_model`` (``has_pdf``, ``make_pdf``, ``logpdf``): each Gaussian
    constraint a Normal about its parameter (the engine's expected auxiliary data) with its width, each Poisson constraint a Poisson
    about τ·γ. ``gaussian_positions`` and ``poisson_positions`` say where their entries sit in
    the auxiliary data."""

    def __init__(self, model: "Model"):
        self._model = model
        config = model.config
        self.gaussian_positions: List[int] = []
        self.poisson_positions: List[int] = []
        self._sigmas: List[float] = []
        factors: List[float] = []
        at = 0
        for name in config.auxdata_order:
            paramset = config.param_set(name)
            width = len(paramset.auxdata)
            if paramset.pdf_type == "normal":
                self.gaussian_positions += range(at, at + width)
                self._sigmas += list(paramset.sigmas)
            else:
                self.poisson_positions += range(at, at + width)
                factors += list(paramset.factors)
            at += width
        # pyhf's combined Poisson constraint: its factors τ, batched (cabinetry reads them).
        self.constraints_poisson = _PoissonConstraints(factors)
        if at != config.nauxdata:
            raise InvalidInputError(f"the constrained parameter sets hold {at} auxiliary data, the model {config.nauxdata}")

    def has_pdf(self) -> bool:
        """Whether the model has constraint terms."""
        return bool(self.gaussian_positions or self.poisson_positions)

    def parts(self, pars: Any) -> List[Tuple[Any, List[int]]]:
        """The Gaussian and the Poisson terms at ``pars`` (those the model has), each with the
        positions of its entries in the auxiliary data."""
        from .probability import Independent, Normal, Poisson

        centres = self._model.expected_auxdata(pars)
        parts = []
        if self.gaussian_positions:
            parts.append((Independent(Normal(centres[self.gaussian_positions], self._sigmas)), self.gaussian_positions))
        if self.poisson_positions:
            parts.append((Independent(Poisson(centres[self.poisson_positions])), self.poisson_positions))
        return parts

    def make_pdf(self, pars: Any) -> Any:
        from .probability import Simultaneous

        parts = self.parts(pars)
        return Simultaneous([p for p, _ in parts], [where for _, where in parts])

    def logpdf(self, auxdata: Any, pars: Any) -> np.ndarray:
        return self.make_pdf(pars).log_prob(_array(auxdata, "auxdata"))


class Model:
    """A HistFactory model (``Workspace.model()``); it remembers its workspace's observations."""

    #: pyhf's schema of a model spec, and its version (``None``: the current one).
    schema = "model.json"
    version = None

    def __init__(self, core_model: Any, observed: Optional[Sequence[float]] = None, spec: Optional[dict] = None, **config_kwargs: Any):
        settings = config_kwargs.get("modifier_settings")
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
        self.config = _Config(core_model, spec, owner=self)
        self.config.modifier_settings = _modifier_settings(settings)
        self.observed = None if observed is None else list(observed)
        poi = core_model.poi_name
        if poi and core_model.poi_index is None and poi in self.config.par_map:
            from .exceptions import InvalidModel

            # pyhf refuses the model itself; the engine would refuse the first verb that needs a POI.
            raise InvalidModel(f"The parameter '{poi}' contains multiple components and is not currently supported as parameter of interest.")

    @property
    def spec(self) -> dict:
        """pyhf's model spec: the channels and the measurement's parameter configurations."""
        if self._spec is None:
            raise InvalidInputError("this model was not built from a workspace (Workspace.model()) and has no spec")
        return json.loads(json.dumps(self._spec))

    def to_hs3(self) -> dict:
        """The model as an HS3 document in ROOT 6.40's HistFactory dialect: ROOT's
        ``RooJSONFactoryWSTool.importJSON`` builds the same likelihood (ROOT clips each sample's
        yield at zero, as ``Workspace.model(clip_negative_yields=True)`` does), and
        ``nextstat.load_hs3`` reads it back (docs/hs3-binned.md)."""
        return json.loads(self._model.to_hs3())

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
        return self._model.expected_data(self._pars(pars), include_auxdata)

    def _pars(self, pars: Any) -> np.ndarray:
        """``pars`` for the expected data: values beyond the model's parameters are left out, as
        pyhf's ``expected_data`` leaves them (said in a warning); too few is an error."""
        from .exceptions import InvalidPdfParameters

        pars, n = _array(pars, "pars"), self.config.npars
        if len(pars) < n:
            raise InvalidPdfParameters(f"pars has len {len(pars)} but {n} was expected")
        if len(pars) > n:
            import warnings

            warnings.warn(f"pars has len {len(pars)} for {n} parameters: the last {len(pars) - n} are ignored, "
                          "as pyhf's expected_data ignores them", stacklevel=3)
            pars = pars[:n]
        return pars

    @property
    def fullpdf_tv(self) -> _DataView:
        """pyhf's view of the data vector: ``split(data)`` gives ``[main data, auxiliary data]``."""
        return _DataView(self.config.nmaindata)

    def mainlogpdf(self, maindata: Any, pars: Any) -> np.ndarray:
        """The main bins' log-likelihood (``main_model.logpdf``)."""
        return self.main_model.logpdf(maindata, pars)

    def constraint_logpdf(self, auxdata: Any, pars: Any) -> np.ndarray:
        """The constraint terms' log-likelihood (``constraint_model.logpdf``)."""
        return self.constraint_model.logpdf(auxdata, pars)

    @property
    def main_model(self) -> _MainModel:
        """pyhf's main model: ``expected_data(pars, return_by_sample=False)``, ``has_pdf``,
        ``make_pdf``, ``logpdf``."""
        return _MainModel(self)

    @property
    def constraint_model(self) -> _ConstraintModel:
        """pyhf's constraint model: ``has_pdf``, ``make_pdf``, ``logpdf`` (its layout of the
        auxiliary data, read from the parameter sets once per model)."""
        if getattr(self, "_constraint_model", None) is None:
            self._constraint_model = _ConstraintModel(self)
        return self._constraint_model

    def make_pdf(self, pars: Any) -> Any:
        """pyhf's ``make_pdf``: the likelihood at ``pars`` as a distribution over the data vector
        (main data, then auxiliary data) — ``log_prob(data)``, ``sample(sample_shape)`` drawn from
        numpy's global generator as pyhf draws (``nextstat.probability``)."""
        from .probability import Simultaneous

        self._finite(pars)
        n_main = self.config.nmaindata
        parts, positions = [self.main_model.make_pdf(pars)], [list(range(n_main))]
        for part, where in self.constraint_model.parts(pars):
            parts.append(part)
            positions.append([n_main + i for i in where])
        return Simultaneous(parts, positions)

    def sample_toys(self, pars: Any, n_toys: int, seed: int = 0) -> np.ndarray:
        """``n_toys`` datasets (rows of main then auxiliary data) drawn at ``pars`` by the engine's
        toy generator: the toys ``hypotest_toys`` fits, the same on every device and thread count."""
        if isinstance(n_toys, bool) or not isinstance(n_toys, (int, np.integer)) or n_toys < 0:
            raise InvalidInputError(f"n_toys = {n_toys!r}: a number of toys is a whole number ≥ 0")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
            raise InvalidInputError(f"seed = {seed!r}: a seed is a whole number in [0, 2^64)")
        from .exceptions import InvalidPdfParameters

        pars = _array(pars, "pars")
        if len(pars) != self.config.npars:
            raise InvalidPdfParameters(f"pars has len {len(pars)} but {self.config.npars} was expected")
        self._finite(pars)
        return self._model.sample_toys(pars, int(n_toys), int(seed))

    def _finite(self, pars: Any) -> None:
        """Distributions are drawn at finite parameters only: the first that is not, named."""
        from .exceptions import InvalidPdfParameters

        values = self._pars(pars)
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            i = int(bad[0])
            raise InvalidPdfParameters(f"pars[{i}] ('{self.config.par_names[i]}') is {values[i]}: a distribution is drawn at finite parameters")

    def __repr__(self) -> str:
        return f"Model({self.config.npars} parameters, POI {self.config.poi_name!r}, channels {self.config.channels})"


