"""The inference functions (`fit`, `hypotest`, `hypotest_toys`, `upper_limit`, …): each builds the
engine's call and returns its result class."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, List, Optional, Tuple

import numpy as np

from . import _core, _results
from ._core import InvalidInputError
from ._model import Model
from ._results import (
    AsymptoticHypotestResult,
    FitResult,
    GofResult,
    GridScanResult,
    PosteriorResult,
    ProfileScanResult,
    RankingResult,
    SignificanceResult,
    ToyFits,
    ToyHypotestResult,
    UpperLimitResult,
)
from ._validate import Spec, _array, _bounds, _finite_array, _finite_list, _flags, _integer, _json_text, _number



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
    """Run an inference verb in the engine as one call (``ns_api::call``, JSON) and wrap its
    report (observed data by default); with ``save_call``, first write that call to the path."""
    return result_type._from_json(_run(verb, model, data, init_pars, par_bounds, fixed_params, tolerance, device, progress, save_call, **extra))


def _run(verb: str, model: Model, data, init_pars, par_bounds, fixed_params, tolerance, device, progress=None, save_call=None, **extra) -> str:
    """The report JSON of the engine's call of ``verb`` (see ``_infer``); the engine's default
    tolerance where ``tolerance`` is None."""
    call, values = _call(verb, model, data, init_pars, par_bounds, fixed_params, tolerance, device, **extra)
    call_text = _json(verb, call)
    if save_call is not None:
        Path(save_call).write_text(_core.call_json(model._model, call_text, values) + "\n", encoding="utf-8")
    return _core.infer(model._model, call_text, progress, values)


def _call_text(verb: str, model: Model, data, init_pars, par_bounds, fixed_params, tolerance, device, **extra) -> str:
    """The engine's call of ``verb`` on ``model`` (without the model) as JSON text: the request,
    the fit options, the device and the data (observed unless given)."""
    call, values = _call(verb, model, data, init_pars, par_bounds, fixed_params, tolerance, device, **extra)
    if values is not None:
        call["data"] = dict(values=values.tolist())
    return _json(verb, call)


def _call(verb: str, model: Model, data, init_pars, par_bounds, fixed_params, tolerance, device, **extra) -> Tuple[dict, Optional[np.ndarray]]:
    """``_call_text``'s call as a dict without its data, and the data apart (observed unless
    given; None for an unbinned model's own events, which stay in the engine) as a finite
    float64 array, which crosses to the engine as memory."""
    from ._hs3 import JointModel
    from .unbinned import UnbinnedModel

    if not isinstance(model, (Model, UnbinnedModel, JointModel)):
        raise TypeError(f"{verb}: model must be a nextstat.Model (Workspace(...).model()), a nextstat.unbinned.UnbinnedModel or a nextstat.JointModel, not {type(model).__name__}")
    data = model.observed if data is None else data
    if data is None and isinstance(model, Model):
        raise InvalidInputError("this model was built from a spec and has no observations: pass the data")
    if isinstance(model, Model):
        init_pars, par_bounds, fixed_params = model.config._edited(init_pars, par_bounds, fixed_params)
    if not isinstance(device, str):
        raise TypeError(f"device must be a string ('cpu', 'cuda' or 'auto'), not {device!r}")
    fit_options = dict(
        poi=_poi_names(extra.pop("poi", None)),
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
    return call, None if data is None else _finite_array(data, "data")


def _json(verb: str, call: dict) -> str:
    """A call as JSON text; JSON has no NaN or infinity."""
    try:
        return json.dumps(call, allow_nan=False)
    except ValueError:
        raise ValueError(f"{verb}: tolerance, mu, level and scan values must be finite numbers") from None


#: The engine's verb registry (``ns_api::verbs``): name, route, summary and result class of each.
_VERBS = json.loads(_core.verbs())


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


def _prior(name: Any) -> str:
    if name not in ("flat", "inverse_sqrt"):
        raise ValueError(f"prior must be 'flat' or 'inverse_sqrt' (∝ 1/sqrt(mu)), not {name!r}")
    return name


def _poi_names(poi: Any) -> Optional[List[str]]:
    """The call's parameters of interest (``poi=``): a name or a sequence of names, the first
    the one each verb tests; None keeps the model's."""
    if poi is None:
        return None
    names = [poi] if isinstance(poi, str) else poi
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"poi must be a parameter name or a list of names, not {poi!r}")
    return list(names)


def _test_stat(name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(f"test_stat must be a string ('qtilde', 'q', 'q0'), not {name!r}")
    return name


def fit(model: Model, data=None, init_pars=None, par_bounds=None, fixed_params=None, *, tolerance=None, device="cpu", save_call=None, poi=None, yields=False, minos=None) -> FitResult:
    """Maximum-likelihood fit with uncertainties (observed data unless ``data`` is given);
    ``yields=True`` adds pre- and post-fit yields per channel and sample with the uncertainty of
    the total (``result.yields``; what ``nextstat.plot.yields`` draws); ``minos`` (parameter
    names) adds their profile-likelihood intervals (``result.minos``)."""
    names = [minos] if isinstance(minos, str) else list(minos or [])
    return _infer("fit", FitResult, model, data, init_pars, par_bounds, fixed_params, tolerance, device, None, save_call, uncertainties=True, yields=bool(yields), minos=names, poi=poi)


def fixed_poi_fit(poi_value: float, model: Model, data=None, init_pars=None, par_bounds=None, fixed_params=None, *, tolerance=None, device="cpu", save_call=None) -> FitResult:
    """Fit with the POI fixed at ``poi_value``."""
    poi = model.config.poi_index
    if poi is None:
        raise InvalidInputError(f"the model has no POI (measurement POI '{model.config.poi_name}' is not a parameter)")
    init = list(model.config.suggested_init() if init_pars is None else _array(init_pars, "init_pars"))
    fixed = list(model.config.suggested_fixed() if fixed_params is None else fixed_params)
    init[poi], fixed[poi] = float(poi_value), True
    return fit(model, data, init, par_bounds, fixed, tolerance=tolerance, device=device, save_call=save_call)


def hypotest(poi_value: float, model: Model, data=None, test_stat="qtilde", init_pars=None, par_bounds=None, fixed_params=None, *, tolerance=None, device="cpu", save_call=None, poi=None) -> AsymptoticHypotestResult:
    """Asymptotic CLs at ``poi_value``."""
    return _infer("hypotest", AsymptoticHypotestResult, model, data, init_pars, par_bounds, fixed_params, tolerance, device, None, save_call, mu=_number(poi_value, "poi_value"), test_stat=_test_stat(test_stat), poi=poi)


def hypotest_toys(poi_value: float, model: Model, n_toys: int = 2000, seed: int = 0, data=None, test_stat="qtilde", init_pars=None, par_bounds=None, fixed_params=None, *, tolerance=None, device="cpu", save_call=None, poi=None, progress=True, teststats=False) -> ToyHypotestResult:
    """Toy-based CLs at ``poi_value``; the same seed gives the same toys on any device.
    ``teststats=True`` keeps every toy's test statistic (``result.teststats``; what
    ``nextstat.plot.toys`` draws)."""
    return _infer("hypotest_toys", ToyHypotestResult, model, data, init_pars, par_bounds, fixed_params, tolerance, device, _progress_label(progress, "toys"), save_call, mu=_number(poi_value, "poi_value"), n_toys=_integer(n_toys, "n_toys"), seed=_integer(seed, "seed"), test_stat=_test_stat(test_stat), teststats=bool(teststats), poi=poi)


def upper_limit(model: Model, data=None, level: Optional[float] = None, scan=None, init_pars=None, par_bounds=None, fixed_params=None, *, n_toys: Optional[int] = None, seed: int = 0, tolerance=None, device="cpu", save_call=None, poi=None, progress=True) -> UpperLimitResult:
    """Observed and expected CLs upper limits: root finding, or a scan over ``scan``. With
    ``n_toys``, CLs from that many toys per hypothesis at each μ (of ``scan``, or of a grid built
    around the asymptotic limits and refined near each crossing), every μ drawing from ``seed``;
    the result then carries each limit's Monte-Carlo error (``obs_error``, ``exp_error``)."""
    grid = None if scan is None else _array(scan, "scan").tolist()
    toys = {} if n_toys is None else {"n_toys": _integer(n_toys, "n_toys"), "seed": _integer(seed, "seed")}
    label = "CLs scan" if n_toys is None else "toys"
    return _infer("upper_limit", UpperLimitResult, model, data, init_pars, par_bounds, fixed_params, tolerance, device, _progress_label(progress, label), save_call, level=None if level is None else _number(level, "level"), scan=grid, **toys, poi=poi)


def significance(model: Model, data=None, init_pars=None, par_bounds=None, fixed_params=None, *, tolerance=None, device="cpu", save_call=None, poi=None) -> SignificanceResult:
    """Discovery p0 and Z (asymptotic q0), observed and expected."""
    return _infer("significance", SignificanceResult, model, data, init_pars, par_bounds, fixed_params, tolerance, device, None, save_call, poi=poi)


def profile_scan_grid(model: Model, parameters, grid, data=None, cl=None, init_pars=None, par_bounds=None, fixed_params=None, *, refine: int = 0, tolerance=None, device="cpu", save_call=None, poi=None, progress=True) -> GridScanResult:
    """Profile likelihood over the grid of ``parameters``' values (``grid``: one list of values per
    parameter), each point fitted with them fixed there; for two parameters the 2ΔNLL contours at
    the confidence levels ``cl`` (68.27% and 95.45% unless given), with ``refine`` rounds of
    refinement near them (each halves the grid intervals a contour crosses)."""
    names = [str(p) for p in parameters]
    axes = [_array(axis, f"grid[{k}]").tolist() for k, axis in enumerate(grid)]
    levels = None if cl is None else [_number(c, "cl") for c in cl]
    return _infer("profile_scan", GridScanResult, model, data, init_pars, par_bounds, fixed_params, tolerance, device, _progress_label(progress, "scan"), save_call, parameters=names, grid=axes, cl=levels, refine=_integer(refine, "refine") or None, poi=poi)


def profile_scan(model: Model, mu_values, data=None, parameter: Optional[str] = None, init_pars=None, par_bounds=None, fixed_params=None, *, tolerance=None, device="cpu", save_call=None, poi=None, progress=True) -> ProfileScanResult:
    """Profile likelihood of the POI (or ``parameter``) at ``mu_values``."""
    values = _array(mu_values, "mu_values").tolist()
    return _infer("profile_scan", ProfileScanResult, model, data, init_pars, par_bounds, fixed_params, tolerance, device, _progress_label(progress, "scan"), save_call, values=values, parameter=parameter, poi=poi)


def ranking(model: Model, data=None, init_pars=None, par_bounds=None, fixed_params=None, *, tolerance=None, device="cpu", save_call=None, poi=None, progress=True) -> RankingResult:
    """Pulls, constraints and pre/post-fit impacts on the POI of every nuisance parameter."""
    return _infer("ranking", RankingResult, model, data, init_pars, par_bounds, fixed_params, tolerance, device, _progress_label(progress, "ranking refits"), save_call, poi=poi)


def gof(model: Model, data=None, init_pars=None, par_bounds=None, fixed_params=None, *, tolerance=None, device="cpu", save_call=None) -> GofResult:
    """Goodness of fit against the saturated model."""
    return _infer("gof", GofResult, model, data, init_pars, par_bounds, fixed_params, tolerance, device, None, save_call)


def posterior(model: Model, data=None, init_pars=None, par_bounds=None, fixed_params=None, *, chains: int = 4, warmup: int = 1000, draws: int = 1000, seed: int = 0, cl: float = 0.95, target_accept: float = 0.8, max_tree_depth: int = 10, prior: str = "flat", tolerance=None, device="cpu", save_call=None, poi=None, progress=True) -> PosteriorResult:
    """The Bayesian posterior by NUTS (``nextstat posterior``): ``chains`` chains in parallel of
    ``warmup`` adaptation iterations and ``draws`` kept draws each; priors flat within the free
    parameters' bounds (``par_bounds`` sets the POI's range; ``prior="inverse_sqrt"`` makes the
    POI's ∝ 1/sqrt(mu)), the constraint terms as the nuisance parameters' priors. The POI's credible upper limit and central interval at ``cl``,
    each parameter's R̂ and effective sample sizes, and every draw (``.draws``, ``.to_arviz()``)."""
    return _infer("posterior", PosteriorResult, model, data, init_pars, par_bounds, fixed_params, tolerance, device, _progress_label(progress, "NUTS"), save_call,
                  chains=_integer(chains, "chains"), warmup=_integer(warmup, "warmup"), draws=_integer(draws, "draws"), seed=_integer(seed, "seed"),
                  cl=_number(cl, "cl"), target_accept=_number(target_accept, "target_accept"), max_tree_depth=_integer(max_tree_depth, "max_tree_depth"), keep_draws=True, prior=_prior(prior), poi=poi)


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


#: Request verbs → the result class their report is read into.
_RESULT_OF_VERB = {v["name"]: getattr(_results, v["result"]) for v in _VERBS if v["result"]}


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


