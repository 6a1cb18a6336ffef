"""nextstat.distributed on a Dask LocalCluster (2 worker processes): a toy ensemble, a scan, a
ranking, a CLs-scan limit and a published patchset grid give one process's answer exactly; a
worker killed mid-job has its shards run again with the answer unchanged; a cancelled shard stops
the engine on its worker."""

import json
import os
import threading
import time

import pytest

import nextstat
import nextstat.distributed as nsd
from conftest import ROOT

distributed = pytest.importorskip("distributed")

GRID = ROOT.parent / "shared" / "likelihoods" / "patchsets" / "atlas_1Lbb_simplified"


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


@pytest.fixture(scope="module")
def model():
    return nextstat.Workspace(str(ROOT / "examples" / "analysis.json")).model()


def test_a_toy_ensemble_is_one_process_result(client, model):
    one = nextstat.hypotest_toys(1.0, model, n_toys=600, seed=5, teststats=True, progress=False)
    many = nsd.hypotest_toys(client, 1.0, model, n_toys=600, seed=5, teststats=True, progress=False)
    assert many.to_dict() == one.to_dict()
    assert len(many.teststats["background_only"]) == 600


def test_scans_rankings_and_limits_are_one_process_results(client, model):
    values = [0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0]
    assert nsd.profile_scan(client, model, values, shards=3, progress=False).to_dict() == nextstat.profile_scan(model, values, progress=False).to_dict()
    assert nsd.ranking(client, model, progress=False).to_dict() == nextstat.ranking(model, progress=False).to_dict()
    grid = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
    assert nsd.upper_limit(client, model, grid, progress=False).to_dict() == nextstat.upper_limit(model, scan=grid, progress=False).to_dict()


def test_a_published_patchset_grid_is_the_cli_table(client):
    from conftest import run_cli

    assert GRID.exists(), f"{GRID} is missing: the published patchsets live in ../shared"
    bkg, patchset = GRID / "bkgonly.json", GRID / "patchset.json"
    with pytest.warns(UserWarning, match="skip_verify"):
        table = nsd.patchset_grid(client, bkg, patchset, skip_verify=True, progress=False)
    cli = json.loads(run_cli("upper-limit", bkg, "--patchset", patchset, "--all", "--skip-verify")[1])
    assert table == cli and len(table["points"]) == 125
    with pytest.raises(nextstat.InvalidInputError, match="skip_verify=True"):
        nsd.patchset_grid(client, bkg, patchset, progress=False)


def _processing(client, prefix):
    """Worker addresses running a task whose key starts with ``prefix``."""
    return [w for w, keys in client.processing().items() if any(str(k).startswith(prefix) for k in keys)]


def test_a_worker_killed_mid_job_is_retried_and_the_answer_is_unchanged(client, model):
    one = nextstat.hypotest_toys(1.0, model, n_toys=4000, seed=9, progress=False)
    result = {}
    job = threading.Thread(target=lambda: result.setdefault("many", nsd.hypotest_toys(client, 1.0, model, n_toys=4000, seed=9, shards=8, progress=False)))
    job.start()
    killed = None
    for _ in range(6000):
        busy = _processing(client, "nextstat-hypotest_toys")
        if busy:
            killed = busy[0]
            try:  # the worker dies under the call: its answer never comes
                client.run(os._exit, 1, workers=[killed])
            except Exception:
                pass
            break
        time.sleep(0.01)
    job.join(timeout=600)
    assert killed is not None, "no shard was seen running"
    assert result["many"].to_dict() == one.to_dict()
    client.wait_for_workers(2, timeout=120)


def test_a_cancelled_shard_stops_the_engine_on_its_worker(client, model):
    call = nextstat._verbs._call_text("hypotest_toys", model, None, None, None, None, None, "cpu", mu=1.0, n_toys=2_000_000, seed=0, test_stat="qtilde", teststats=False)
    called = json.loads(nextstat._core.call_json(model._model, call))
    model_ref = json.dumps(called.pop("model"))
    future = client.submit(nsd._model_shard, model_ref, "cancel-test", json.dumps(called), 0, 1, key="nextstat-cancel-0/1", pure=False)
    for _ in range(6000):
        if _processing(client, "nextstat-cancel"):
            break
        time.sleep(0.01)
    assert _processing(client, "nextstat-cancel"), "the shard never started"
    client.cancel(future, force=True)

    def executing():
        return sum(client.run(lambda dask_worker: dask_worker.state.executing_count).values())

    # Two million toys take many minutes; a stopped engine frees its worker at its next check.
    for _ in range(1200):
        if executing() == 0:
            break
        time.sleep(0.05)
    assert executing() == 0, "the cancelled shard kept running"
