"""Sharded nextstat jobs on a Dask cluster (``dask.distributed``).

The jobs that outgrow one machine — toy ensembles, profile scans, rankings, CLs-scan limits and
patchset grids — split into shards that run on Dask workers and merge into exactly the result one
process gives (the engine's ``--shard I/N`` and ``nextstat merge``: docs/scale-out.md)::

    from dask.distributed import Client, LocalCluster
    import nextstat, nextstat.distributed as nsd

    client = Client(LocalCluster(n_workers=4))          # or Client("tcp://scheduler:8786")
    model = nextstat.Workspace("analysis.json").model()
    result = nsd.hypotest_toys(client, 1.0, model, n_toys=1_000_000)
    table = nsd.patchset_grid(client, "bkgonly.json", "patchset.json", skip_verify=True)

The model (or a grid's background and patchset) is shipped once — a task of the job's own that
workers fetch from each other, recomputed if the workers holding it die — and kept loaded on each
worker by digest; and every shard is one task named
``nextstat-<verb>-<digest>-<job>-<i>/<n>`` on the dashboard. A task that fails, or whose worker dies, is
run again: a shard is a pure function of the job, so the answer does not change. Ctrl-C while
waiting cancels the shards, and a cancelled shard stops the engine on its worker. With
``device="cuda"`` each shard runs on its worker's GPU; ``"cuda:all"`` shares a shard among the GPUs
of the worker's node.
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
import warnings
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional

from . import _core
from ._validate import _array, _integer, _json_text, _number
from ._verbs import _call_text, _test_stat
from ._results import ProfileScanResult, RankingResult, ToyHypotestResult, UpperLimitResult

__all__ = ["hypotest_toys", "profile_scan", "ranking", "upper_limit", "patchset_grid"]

#: Loaded models a worker keeps, by digest.
_CACHE_SIZE = 4
_cache: "OrderedDict[str, Any]" = OrderedDict()
_cache_lock = threading.Lock()


def _loaded(digest: str, model_ref: str) -> Any:
    """The model of ``model_ref``, loaded once per worker process (a few kept)."""
    with _cache_lock:
        if digest not in _cache:
            _cache[digest] = _core.load_model_ref(model_ref)
            while len(_cache) > _CACHE_SIZE:
                _cache.popitem(last=False)
        _cache.move_to_end(digest)
        return _cache[digest]


#: What each client has shipped to its cluster, by (client, digest): kept, so that the next job
#: of the same model reuses it.
_shipped: "OrderedDict[tuple, Any]" = OrderedDict()


def _text(text: str) -> str:
    return text


def _ship(client: Any, text: str) -> Any:
    """``text`` on the cluster of ``client``, once: the future of a task that returns it. A
    task, not scattered data: workers fetch it from each other, and when the workers holding it
    die the scheduler computes it again (scattered data would be lost, and the job with it)."""
    digest = hashlib.sha256(text.encode()).hexdigest()
    key = (client.id, digest)
    with _cache_lock:
        if key in _shipped and _shipped[key].status in ("pending", "finished"):
            _shipped.move_to_end(key)
            return _shipped[key]
    future = client.submit(_text, text, key=f"nextstat-input-{digest[:16]}-{uuid.uuid4().hex[:8]}", pure=False)
    with _cache_lock:
        _shipped[key] = future
        while len(_shipped) > 2 * _CACHE_SIZE:
            _shipped.popitem(last=False)
    return future


def _cancel_check() -> Optional[Callable[[], bool]]:
    """On a Dask worker, a function telling whether this task was cancelled (its future released
    by the client); the engine asks it while it runs and stops. ``None`` elsewhere."""
    try:
        from distributed import get_worker
        from distributed.worker import thread_state

        worker, key = get_worker(), thread_state.key
    except (ImportError, ValueError, AttributeError):
        return None

    def cancelled() -> bool:
        task = worker.state.tasks.get(key)
        return task is None or task.state in ("cancelled", "released", "forgotten")

    return cancelled


def _model_shard(model_ref: str, digest: str, call: str, index: int, count: int) -> str:
    """Worker side: shard ``index`` of ``count`` of ``call`` on the shipped model."""
    return _core.run_part(_loaded(digest, model_ref), call, index, count, _cancel_check())


def _grid_shard(background: str, patchset: str, call: str, index: int, count: int, skip_verify: bool, measurement: Optional[str]) -> str:
    """Worker side: shard ``index`` of ``count`` of a patchset grid."""
    return _core.run_grid_part(background, patchset, call, index, count, skip_verify, measurement, _cancel_check())


def _shard_count(client: Any, units: int, shards: Optional[int]) -> int:
    """``shards``, or two per worker thread (balance, and cheap retries), at most one per unit."""
    if shards is not None:
        shards = _integer(shards, "shards")
        if not 1 <= shards <= max(units, 1):
            raise ValueError(f"shards = {shards}: give from 1 to {max(units, 1)} (the job has {units} units)")
        return shards
    workers = client.scheduler_info().get("workers", {})
    threads = max(1, sum(w.get("nthreads", 1) for w in workers.values()))
    return max(1, min(units, 2 * threads))


def _merged(client: Any, futures: List[Any], name: str, progress: bool) -> str:
    """Wait for every shard's part (a progress bar where wanted) and merge them as ``nextstat
    merge`` does. Any exception while waiting — Ctrl-C included — cancels the shards."""
    from distributed import as_completed

    bar = None
    if progress:
        try:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(futures), desc=f"{name} shards", leave=False)
        except ImportError:
            bar = None
    position = {f.key: i for i, f in enumerate(futures)}
    parts: Dict[int, str] = {}
    try:
        for future in as_completed(futures):
            parts[position[future.key]] = future.result()
            if bar is not None:
                bar.update(1)
    except BaseException:
        client.cancel(futures, force=True)
        raise
    finally:
        if bar is not None:
            bar.close()
    count = len(futures)
    return _core.merge_parts([(f"shard {i}/{count}", parts[i]) for i in range(count)])


def _check_client(client: Any) -> None:
    """A Dask client, or a TypeError saying what was given instead."""
    if not callable(getattr(client, "submit", None)) or not callable(getattr(client, "gather", None)):
        raise TypeError(f"client must be a dask.distributed.Client (Client(cluster)), not {type(client).__name__}")


def _model_job(client: Any, verb: str, model: Any, call: str, shards: Optional[int], progress: bool, retries: int) -> str:
    """Ship ``model`` once (by content), run ``call``'s shards on the workers, merge: the JSON of
    the result one process gives."""
    _check_client(client)
    if not hasattr(model, "_model"):
        raise TypeError(f"model must be a nextstat model (nextstat.Workspace(...).model()), not {type(model).__name__}")
    called = json.loads(_core.call_json(model._model, call))
    model_ref = json.dumps(called.pop("model"), sort_keys=True)
    digest = hashlib.sha256(model_ref.encode()).hexdigest()
    request = json.dumps(called, allow_nan=False)
    count = _shard_count(client, _core.shard_units(model._model, request), shards)
    shipped = _ship(client, model_ref)
    # A key of this job alone: another job's shards (another μ, seed or split) never stand in.
    name = f"nextstat-{verb}-{digest[:8]}-{uuid.uuid4().hex[:8]}"
    futures = [
        client.submit(_model_shard, shipped, digest, request, i, count, key=f"{name}-{i}/{count}", retries=retries, pure=False)
        for i in range(count)
    ]
    return _merged(client, futures, verb, progress)


def hypotest_toys(client: Any, poi_value: float, model: Any, n_toys: int = 2000, seed: int = 0, data=None, test_stat="qtilde", init_pars=None, par_bounds=None, fixed_params=None, *, tolerance=None, device="cpu", teststats=False, shards: Optional[int] = None, progress: bool = True, retries: int = 2) -> ToyHypotestResult:
    """``nextstat.hypotest_toys`` with its toys split into ``shards`` (default: two per worker
    thread) on the Dask cluster of ``client``: the same result, bit for bit."""
    call = _call_text("hypotest_toys", model, data, init_pars, par_bounds, fixed_params, tolerance, device, mu=_number(poi_value, "poi_value"), n_toys=_integer(n_toys, "n_toys"), seed=_integer(seed, "seed"), test_stat=_test_stat(test_stat), teststats=bool(teststats))
    return ToyHypotestResult._from_json(_model_job(client, "hypotest_toys", model, call, shards, progress, retries))


def profile_scan(client: Any, model: Any, mu_values, data=None, parameter: Optional[str] = None, init_pars=None, par_bounds=None, fixed_params=None, *, tolerance=None, device="cpu", shards: Optional[int] = None, progress: bool = True, retries: int = 2) -> ProfileScanResult:
    """``nextstat.profile_scan`` with its values split into shards on the Dask cluster."""
    values = _array(mu_values, "mu_values").tolist()
    call = _call_text("profile_scan", model, data, init_pars, par_bounds, fixed_params, tolerance, device, values=values, parameter=parameter)
    return ProfileScanResult._from_json(_model_job(client, "profile_scan", model, call, shards, progress, retries))


def ranking(client: Any, model: Any, data=None, init_pars=None, par_bounds=None, fixed_params=None, *, tolerance=None, device="cpu", shards: Optional[int] = None, progress: bool = True, retries: int = 2) -> RankingResult:
    """``nextstat.ranking`` with its ranked parameters split into shards on the Dask cluster."""
    call = _call_text("ranking", model, data, init_pars, par_bounds, fixed_params, tolerance, device)
    return RankingResult._from_json(_model_job(client, "ranking", model, call, shards, progress, retries))


def upper_limit(client: Any, model: Any, scan, data=None, level: Optional[float] = None, init_pars=None, par_bounds=None, fixed_params=None, *, tolerance=None, device="cpu", shards: Optional[int] = None, progress: bool = True, retries: int = 2) -> UpperLimitResult:
    """``nextstat.upper_limit`` over the CLs scan ``scan``, its μ values split into shards on the
    Dask cluster (root finding is sequential: give the scan)."""
    grid = _array(scan, "scan").tolist()
    call = _call_text("upper_limit", model, data, init_pars, par_bounds, fixed_params, tolerance, device, level=None if level is None else _number(level, "level"), scan=grid)
    return UpperLimitResult._from_json(_model_job(client, "upper_limit", model, call, shards, progress, retries))


def patchset_grid(client: Any, background: Any, patchset: Any, *, verb: str = "upper_limit", level: Optional[float] = None, scan=None, mu: float = 1.0, test_stat: str = "qtilde", measurement: Optional[str] = None, skip_verify: bool = False, tolerance=None, device: str = "cpu", shards: Optional[int] = None, progress: bool = True, retries: int = 2) -> dict:
    """Every signal point of a HEPData patchset on the Dask cluster: the table ``nextstat
    upper-limit BKG --patchset PS --all`` writes (``labels``, ``points`` with each patch's name,
    metadata ``values`` and its limits — or, with ``verb="hypotest"``, its CLs at ``mu`` — and
    ``errors`` for points that failed). ``background`` and ``patchset`` are paths, JSON text or
    dicts, shipped once per worker. ``skip_verify=True`` applies patchsets made for another
    background file (the digest is not checked), with a warning."""
    _check_client(client)
    if verb == "upper_limit":
        request: Dict[str, Any] = dict(verb=verb, scan=None if scan is None else _array(scan, "scan").tolist())
        if level is not None:
            request["level"] = _number(level, "level")
    elif verb == "hypotest":
        request = dict(verb=verb, mu=_number(mu, "mu"), test_stat=_test_stat(test_stat))
    else:
        raise ValueError(f"verb must be 'upper_limit' or 'hypotest', not {verb!r}")
    call = dict(request={k: v for k, v in request.items() if v is not None}, device=device)
    if tolerance is not None:
        call["fit"] = dict(tolerance=_number(tolerance, "tolerance"))
    if skip_verify:
        warnings.warn("skip_verify=True: the patchset's digest of the background-only workspace is not checked", stacklevel=2)
    background_text = _json_text(background, "background")[0]
    patchset_text = _json_text(patchset, "patchset")[0]
    units = len(json.loads(patchset_text).get("patches", []))
    count = _shard_count(client, max(units, 1), shards)
    call_text = json.dumps(call, allow_nan=False)
    digest = hashlib.sha256((background_text + patchset_text).encode()).hexdigest()
    shipped_background = _ship(client, background_text)
    shipped_patchset = _ship(client, patchset_text)
    name = f"nextstat-grid-{digest[:8]}-{uuid.uuid4().hex[:8]}"
    futures = [
        client.submit(_grid_shard, shipped_background, shipped_patchset, call_text, i, count, bool(skip_verify), measurement, key=f"{name}-{i}/{count}", retries=retries, pure=False)
        for i in range(count)
    ]
    return json.loads(_merged(client, futures, "grid", progress))
