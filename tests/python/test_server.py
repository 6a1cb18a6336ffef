"""nextstat-server (docs/server.md): every endpoint and every error class against servers the
tests start on loopback ports, answers identical to the CLI's, concurrency shown by the server's
own counters (never by timing), the Python client."""

import json
import subprocess
import time
import urllib.error
import urllib.request

import pytest

import nextstat
from conftest import BIN, ROOT, WORKSPACES, run_cli
from nextstat.remote import Client, ServerError

SERVER = BIN.parent / "nextstat-server"
SIMPLE = WORKSPACES / "nextstat_simple_workspace.json"
COMPLEX = WORKSPACES / "nextstat_complex_workspace.json"


class Server:
    def __init__(self, *args):
        if not SERVER.exists():
            pytest.fail(f"{SERVER} is missing: `cargo build --release --bin nextstat-server` (scripts/test.sh does)")
        self.proc = subprocess.Popen([str(SERVER), "--port", "0", *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert "listening on" in line, (line, self.proc.stderr.read() if self.proc.poll() is not None else "")
        self.url = line.split()[-1]

    def call(self, method, path, body=None, key=None, raw=None, timeout=120):
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        request = urllib.request.Request(self.url + path, data=data, method=method, headers={"Content-Type": "application/json"})
        if key:
            request.add_header("Authorization", f"Bearer {key}")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as r:
                text = r.read()
                return r.status, (json.loads(text) if text and r.headers.get("Content-Type", "").startswith("application/json") else text.decode()), r.headers
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read()), e.headers

    def wait_until(self, predicate, what, limit=60):
        """Poll the server's own state (not a timing assertion): `limit` seconds at most."""
        end = time.monotonic() + limit
        while time.monotonic() < end:
            if predicate():
                return
            time.sleep(0.02)
        pytest.fail(f"the server never reached: {what}")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def server():
    s = Server("--workers", "4")
    yield s
    s.stop()


def workspace(path):
    return json.loads(path.read_text())


def long_toys(model_id, n=100_000):
    """A toy request that runs long enough to be seen running (it is cancelled)."""
    return {"model": {"id": model_id}, "request": {"mu": 1.0, "n_toys": n}}


def test_health_devices_openapi_and_metrics(server):
    status, health, _ = server.call("GET", "/v1/health")
    assert status == 200 and health["status"] == "ok"
    status, devices, _ = server.call("GET", "/v1/devices")
    assert status == 200 and "cpu" in json.dumps(devices).lower()
    status, doc, _ = server.call("GET", "/v1/openapi.json")
    assert status == 200 and doc["openapi"].startswith("3.1")
    for path in ["/v1/fit", "/v1/hypotest", "/v1/hypotest-toys", "/v1/upper-limit", "/v1/significance", "/v1/scan", "/v1/ranking", "/v1/gof", "/v1/eval", "/v1/models", "/v1/models/{id}", "/v1/jobs", "/v1/jobs/{id}", "/v1/batch"]:
        assert path in doc["paths"], path
    assert "request" in doc["components"]["schemas"]["Call"]["properties"]
    status, text, headers = server.call("GET", "/metrics")
    assert status == 200 and 'nextstat_requests_total{route="/v1/health",status="200"}' in text
    assert "nextstat_queue_depth" in text and "nextstat_cache_hits_total" in text


def test_models_by_digest_and_verbs_answer_as_the_cli_does(server):
    status, first, _ = server.call("POST", "/v1/models", {"workspace": workspace(SIMPLE)})
    assert status == 201 and first["kind"] == "binned"
    status, again, _ = server.call("POST", "/v1/models", {"workspace": workspace(SIMPLE)})
    assert again["id"] == first["id"]
    status, other, _ = server.call("POST", "/v1/models", {"workspace": workspace(SIMPLE), "interpolation": {"defaults": "legacy"}})
    assert status == 201 and other["id"] != first["id"]
    status, got, _ = server.call("GET", f"/v1/models/{first['id']}")
    assert status == 200 and got["parameter_names"] == first["parameter_names"]
    model = {"id": first["id"]}
    cases = [
        ("fit", {"uncertainties": True}, ["fit", SIMPLE]),
        ("hypotest", {"mu": 1.0}, ["hypotest", SIMPLE, "--mu", "1.0"]),
        ("hypotest-toys", {"mu": 1.0, "n_toys": 200, "seed": 3}, ["hypotest-toys", SIMPLE, "--mu", "1.0", "--n-toys", "200", "--seed", "3"]),
        ("upper-limit", {}, ["upper-limit", SIMPLE]),
        ("upper-limit", {"scan": [0.5, 1.0, 1.5, 2.0], "n_toys": 100, "seed": 2}, ["upper-limit", SIMPLE, "--scan", "0.5", "2", "4", "--toys", "100", "--seed", "2"]),
        ("significance", {}, ["significance", SIMPLE]),
        ("scan", {"values": [0.0, 1.0, 2.0]}, ["scan", SIMPLE, "--range", "0", "2", "3"]),
        ("ranking", {}, ["ranking", SIMPLE]),
        ("gof", {}, ["gof", SIMPLE]),
    ]
    for path, request, cli in cases:
        status, answer, _ = server.call("POST", f"/v1/{path}", {"model": model, "request": request})
        assert status == 200, (path, answer)
        assert answer == json.loads(run_cli(*cli)[1]), path
        assert "auto" not in answer, path
    status, answer, _ = server.call("POST", "/v1/eval", {"model": model, "request": {"pars": None}})
    assert status == 200 and "twice_nll" in json.dumps(answer)
    # `auto` answers as the CLI does, saying what it chose and why.
    status, answer, _ = server.call("POST", "/v1/hypotest-toys", {"model": model, "device": "auto", "request": {"mu": 1.0, "n_toys": 200, "seed": 3}})
    cli = json.loads(run_cli("hypotest-toys", SIMPLE, "--mu", "1.0", "--n-toys", "200", "--seed", "3", "--gpu", "auto")[1])
    assert status == 200 and answer == cli, answer
    assert answer["auto"]["device"] == "cpu" and "too few" in answer["auto"]["reason"], answer["auto"]
    # An inline model runs the same, and lands in the cache under the same id.
    status, answer, _ = server.call("POST", "/v1/fit", {"model": {"workspace": workspace(SIMPLE)}, "request": {"uncertainties": True}})
    assert answer == json.loads(run_cli("fit", SIMPLE)[1])
    status, _, _ = server.call("DELETE", f"/v1/models/{first['id']}")
    assert status == 204
    status, error, _ = server.call("GET", f"/v1/models/{first['id']}")
    assert status == 404 and error["error"]["kind"] == "not_found"


def test_errors_are_json_naming_the_problem(server):
    status, e, _ = server.call("POST", "/v1/fit", raw=b"{not json")
    assert status == 400 and e["error"]["kind"] == "invalid_json"
    status, e, _ = server.call("POST", "/v1/fit", [1, 2])
    assert status == 400 and "a list" in e["error"]["message"]
    status, e, _ = server.call("POST", "/v1/fit", {"request": {}})
    assert status == 400 and "names no model" in e["error"]["message"]
    status, e, _ = server.call("POST", "/v1/fit", {"model": {"workspace": "/etc/passwd"}})
    assert status == 400 and "reads no files for its clients" in e["error"]["message"]
    status, e, _ = server.call("POST", "/v1/fit", {"model": {"id": "0" * 32}})
    assert status == 404 and "POST /v1/models" in e["error"]["message"]
    status, e, _ = server.call("POST", "/v1/teleport", {"model": {"id": "x"}})
    assert status == 404 and "no verb 'teleport'" in e["error"]["message"]
    status, e, _ = server.call("GET", "/v2/anything")
    assert status == 404 and "no endpoint" in e["error"]["message"]
    ws = {"model": {"workspace": workspace(SIMPLE)}}
    status, e, _ = server.call("POST", "/v1/fit", {**ws, "request": {"verb": "ranking"}})
    assert status == 400 and "endpoint is /v1/fit" in e["error"]["message"]
    status, e, _ = server.call("POST", "/v1/hypotest", {**ws, "request": {"mu": "one"}})
    assert status == 400 and "request" in e["error"]["message"] and "expected f64" in e["error"]["message"]
    status, e, _ = server.call("POST", "/v1/fit", {**ws, "device": "warp"})
    assert status == 400 and "unknown device 'warp'" in e["error"]["message"]
    status, e, _ = server.call("POST", "/v1/hypotest-toys", {**ws, "request": {"mu": 1.0, "n_toys": 10**9}})
    assert status == 400 and "--max-toys" in e["error"]["message"]
    status, e, _ = server.call("POST", "/v1/models", {"workspace": {"channels": 3}})
    assert status == 400 and e["error"]["kind"].startswith("invalid")
    status, e, _ = server.call("GET", "/v1/jobs/job-999999")
    assert status == 404


def test_no_file_a_client_names_is_ever_opened(server, tmp_path):
    """A canary FIFO (whose open blocks: a request that opened it would never answer) named as
    the workspace, a patch, a patchset, a Parquet event source and a flow manifest — inline, added
    by a JSON patch after the model was checked, inside a patchset's patch, through /v1/batch and
    jobs: every way is refused with one message, the same as for a file that exists (/etc/passwd)
    and one that does not, so the answers tell nothing of the server's disk."""
    import os
    canary = tmp_path / "canary"
    os.mkfifo(canary)
    hs3 = json.loads((ROOT / "examples" / "unbinned" / "resonance.json").read_text())
    background = workspace(WORKSPACES / "pyhf_testpatchset_bkgonly.json")

    def parquet(path):
        return {"name": hs3["data"][0]["name"], "type": "nextstat:parquet", "path": path, "axes": hs3["data"][0]["axes"]}

    def flow(path):
        return {"name": "flow", "type": "nextstat:flow_dist", "manifest": path}

    def models(path):
        yield {"workspace": path}
        yield {"workspace": workspace(SIMPLE), "patches": [path]}
        yield {"workspace": background, "patchset": {"patchset": path, "patch": "x"}}
        yield {"workspace": {**hs3, "data": [parquet(path)]}}
        yield {"workspace": hs3, "patches": [[{"op": "replace", "path": "/data/0", "value": parquet(path)}]]}
        yield {"workspace": hs3, "patches": [[{"op": "add", "path": "/distributions/-", "value": flow(path)},
                                              {"op": "replace", "path": "/likelihoods/0/distributions/0", "value": "flow"}]]}
        uses_flow = json.loads(json.dumps(hs3))
        uses_flow["distributions"].append(flow(path))
        uses_flow["likelihoods"][0]["distributions"][0] = "flow"
        yield {"workspace": uses_flow}
        # References that name their format.
        yield {"format": "pyhf", "workspace": path}
        yield {"format": "hs3", "document": path}
        yield {"format": "hs3", "document": {**hs3, "data": [parquet(path)]}}
        yield {"format": "hs3", "document": hs3, "patches": [path]}
        yield {"format": "xml", "top": path}
        yield {"format": "datacard", "card": path}
        # A patchset whose patch turns the background into an HS3 model reading the file.
        into_hs3 = [{"op": "add", "path": f"/{k}", "value": v} for k, v in {**hs3, "data": [parquet(path)]}.items()]
        patchset = {"metadata": {"references": {}, "description": "", "digests": {"sha256": "0" * 64}, "labels": ["x"]}, "version": "1.0.0",
                    "patches": [{"metadata": {"name": "p", "values": [1]}, "patch": into_hs3}]}
        yield {"workspace": background, "patchset": {"patchset": patchset, "patch": "p", "skip_verify": True}}

    paths = [str(canary), "/etc/passwd", str(tmp_path / "missing.parquet")]
    # Per way a model names the file, per route: the answers for the three paths.
    answers = {}
    for path in paths:
        for k, model in enumerate(models(path)):
            routes = [
                ("models", lambda: server.call("POST", "/v1/models", model, timeout=30)),
                ("fit", lambda: server.call("POST", "/v1/fit", {"model": model}, timeout=30)),
                ("jobs", lambda: server.call("POST", "/v1/jobs", {"verb": "fit", "model": model}, timeout=30)),
                # The device queue's way: the model is loaded before the device is looked at.
                ("cuda", lambda: server.call("POST", "/v1/hypotest-toys", {"model": model, "device": "cuda", "request": {"mu": 1.0, "n_toys": 10}}, timeout=30)),
            ]
            if "patchset" in model:
                routes.append(("batch", lambda: server.call("POST", "/v1/batch", {"model": model, "patches": [model["patchset"]["patch"]], "verb": "fit"}, timeout=30)))
            for route, call in routes:
                status, e, _ = call()
                assert status == 400, (route, model, e)
                answers.setdefault((k, route), set()).add(e["error"]["message"])
    for key, messages in answers.items():
        # The same answer whichever file is named, and nothing of the path in it.
        assert len(messages) == 1, (key, messages)
        (message,) = messages
        assert "canary" not in message and "passwd" not in message and "missing" not in message, message
    refusals = {next(iter(m)) for m in answers.values()}
    assert any("the server reads no files for its clients" in m for m in refusals), refusals


def test_a_gpu_the_machine_lacks_is_a_clear_error(server):
    status, e, _ = server.call("POST", "/v1/hypotest-toys", {"model": {"workspace": workspace(SIMPLE)}, "device": "cuda:63", "request": {"mu": 1.0, "n_toys": 10}})
    assert status == 400 and e["error"]["kind"] == "device" and "cuda:63" in e["error"]["message"]


@pytest.mark.skipif(not nextstat.has_cuda(), reason="no CUDA device on this machine")
def test_gpu_requests_of_one_model_merge_into_one_device_batch_with_the_bits_of_separate_ones():
    """Toy requests queued behind a running GPU job run as one merged device batch (the server's
    merge counter says so), and each answer equals the one the request gets alone."""
    import threading

    s = Server("--gpu-runners", "1", "--max-toys", 10**7)
    try:
        _, m, _ = s.call("POST", "/v1/models", {"workspace": workspace(COMPLEX)})
        calls = [{"model": {"id": m["id"]}, "device": "cuda", "request": {"mu": mu, "n_toys": n, "seed": seed}}
                 for mu, n, seed in [(1.0, 300, 1), (2.0, 200, 2), (0.5, 250, 3), (1.0, 100, 4)]]
        alone = [s.call("POST", "/v1/hypotest-toys", c)[1] for c in calls]
        _, long, _ = s.call("POST", "/v1/jobs", {"verb": "hypotest-toys", "device": "cuda", **long_toys(m["id"], 10**6)})
        s.wait_until(lambda: s.call("GET", "/v1/health")[1]["running"] == 1, "the long GPU job running")
        together = [None] * len(calls)

        def send(i):
            together[i] = s.call("POST", "/v1/hypotest-toys", calls[i])[1]

        threads = [threading.Thread(target=send, args=(i,)) for i in range(len(calls))]
        for t in threads:
            t.start()
        depth = lambda: float(next(l.split()[-1] for l in s.call("GET", "/metrics")[1].splitlines() if l.startswith("nextstat_device_queue_depth")))  # noqa: E731
        s.wait_until(lambda: depth() == len(calls), "every request waiting for the GPU")
        s.call("DELETE", f"/v1/jobs/{long['id']}")
        for t in threads:
            t.join()
        assert together == alone
        metrics = s.call("GET", "/metrics")[1]
        merged = float(next(l.split()[-1] for l in metrics.splitlines() if l.startswith("nextstat_device_merged_calls_total")))
        assert merged == len(calls)
    finally:
        s.stop()


def test_jobs_report_progress_and_cancel(server):
    _, m, _ = server.call("POST", "/v1/models", {"workspace": workspace(COMPLEX)})
    status, job, _ = server.call("POST", "/v1/jobs", {"verb": "hypotest-toys", "model": {"id": m["id"]}, "request": {"mu": 1.0, "n_toys": 300, "seed": 1}})
    assert status == 202
    server.wait_until(lambda: server.call("GET", f"/v1/jobs/{job['id']}")[1]["status"] == "done", "the job done")
    _, done, _ = server.call("GET", f"/v1/jobs/{job['id']}")
    assert done["progress"]["done"] == done["progress"]["total"] > 0
    assert done["result"] == json.loads(run_cli("hypotest-toys", COMPLEX, "--mu", "1.0", "--n-toys", "300", "--seed", "1")[1])
    status, job, _ = server.call("POST", "/v1/jobs", {"verb": "hypotest-toys", **long_toys(m["id"])})
    server.wait_until(lambda: server.call("GET", f"/v1/jobs/{job['id']}")[1]["status"] == "running", "the long job running")
    status, cancelled, _ = server.call("DELETE", f"/v1/jobs/{job['id']}")
    assert status == 200 and cancelled["status"] == "cancelled"
    server.wait_until(lambda: server.call("GET", "/v1/health")[1]["running"] == 0, "the cancelled job stopped")
    assert server.call("GET", f"/v1/jobs/{job['id']}")[1]["status"] == "cancelled"
    status, e, _ = server.call("POST", "/v1/jobs", {"model": {"id": m["id"]}})
    assert status == 400 and "names its \"verb\"" in e["error"]["message"]


def test_requests_on_different_models_run_at_once(server):
    """Two long computations on two models are both running at the same moment (the server's
    running counter says 2): no global lock."""
    ids = [server.call("POST", "/v1/models", {"workspace": workspace(p)})[1]["id"] for p in (SIMPLE, COMPLEX)]
    jobs = [server.call("POST", "/v1/jobs", {"verb": "hypotest-toys", **long_toys(i)})[1]["id"] for i in ids]
    server.wait_until(lambda: server.call("GET", "/v1/health")[1]["running"] == 2, "two computations running together")
    for j in jobs:
        server.call("DELETE", f"/v1/jobs/{j}")
    server.wait_until(lambda: server.call("GET", "/v1/health")[1]["running"] == 0, "both stopped")


def test_batch_over_a_patchset(server):
    background = workspace(WORKSPACES / "pyhf_testpatchset_bkgonly.json")
    patchset = workspace(WORKSPACES / "pyhf_testpatchset_patchset.json")
    names = [p["metadata"]["name"] for p in patchset["patches"]][:3]
    status, answer, _ = server.call("POST", "/v1/batch", {"model": {"workspace": background, "patchset": {"patchset": patchset, "patch": names[0]}}, "patches": names, "verb": "hypotest", "request": {"mu": 1.0}})
    assert status == 200, answer
    assert [r["patch"] for r in answer["results"]] == names
    for r in answer["results"]:
        assert 0 <= r["result"]["CLs_obs"] <= 1
    # A list longer than the limit, names twice or not in the patchset: refused before any work
    # (a 50,000-entry list once copied the model 50,000 times until the memory cap).
    model = {"workspace": background, "patchset": {"patchset": patchset, "patch": names[0]}}
    for patches, says in [
        ([names[0]] * 50_000, "at most 10000"),
        ([names[0], names[0]], f"'{names[0]}' is named twice"),
        (["no-such-point"], "the patchset has no patch 'no-such-point'"),
    ]:
        status, e, _ = server.call("POST", "/v1/batch", {"model": model, "patches": patches, "verb": "hypotest", "request": {"mu": 1.0}})
        assert status == 400 and says in e["error"]["message"], e
    hs3 = json.loads((ROOT / "examples" / "unbinned" / "resonance.json").read_text())
    status, e, _ = server.call("POST", "/v1/batch", {"model": {"workspace": hs3, "patchset": {"patchset": patchset, "patch": names[0]}}, "patches": names[:1], "verb": "fit"})
    assert status == 400 and "patchsets apply to pyhf workspaces" in e["error"]["message"], e


def test_keys_rate_limits_body_limit_queue_and_timeout(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# one key a line\nsecret-one\n\nsecret-two\n")
    s = Server("--api-key-file", keys, "--rate-limit", "0.01", "--max-body-mb", "1")
    try:
        status, e, _ = s.call("GET", "/v1/devices")
        assert status == 401 and e["error"]["kind"] == "unauthorized"
        status, e, _ = s.call("GET", "/v1/devices", key="secret-three")
        assert status == 401
        assert s.call("GET", "/v1/health")[0] == 200  # open to probes
        status, _, _ = s.call("GET", "/v1/devices", key="secret-one")
        assert status == 200
        status, e, headers = s.call("GET", "/v1/devices", key="secret-one")
        assert status == 429 and int(headers["Retry-After"]) >= 1
        # Each key has its own bucket.
        status, e, _ = s.call("POST", "/v1/fit", raw=b"{" + b" " * (2 << 20) + b"}", key="secret-two")
        assert status == 413 and e["error"]["kind"] == "too_large"
    finally:
        s.stop()
    s = Server("--timeout", "0.5")
    try:
        _, m, _ = s.call("POST", "/v1/models", {"workspace": workspace(COMPLEX)})
        status, e, _ = s.call("POST", "/v1/hypotest-toys", long_toys(m["id"]))
        assert status == 504 and e["error"]["kind"] == "timeout"
    finally:
        s.stop()
    s = Server("--workers", "1", "--queue", "0")
    try:
        _, m, _ = s.call("POST", "/v1/models", {"workspace": workspace(COMPLEX)})
        # One worker busy and no queue: the next request is turned away with Retry-After.
        _, job, _ = s.call("POST", "/v1/jobs", {"verb": "hypotest-toys", **long_toys(m["id"])})
        s.wait_until(lambda: s.call("GET", "/v1/health")[1]["running"] == 1, "the job running")
        status, e, headers = s.call("POST", "/v1/fit", {"model": {"id": m["id"]}})
        assert status == 503 and e["error"]["kind"] == "busy" and headers["Retry-After"] == "1"
        s.call("DELETE", f"/v1/jobs/{job['id']}")
    finally:
        s.stop()


def test_a_fit_answers_while_a_long_toy_job_runs():
    """A toy job fills the CPU threads of its pool; a fit of a fresh model (loaded, then fitted)
    submitted meanwhile answers while the job is still running (they no longer share one pool,
    where the fit waited for the job's tasks: 94–297 s seen)."""
    s = Server("--workers", "2")
    try:
        _, m, _ = s.call("POST", "/v1/models", {"workspace": workspace(COMPLEX)})
        _, job, _ = s.call("POST", "/v1/jobs", {"verb": "hypotest-toys", **long_toys(m["id"], 100_000)})
        s.wait_until(lambda: s.call("GET", f"/v1/jobs/{job['id']}")[1]["status"] == "running", "the job running")
        fresh = workspace(SIMPLE)
        fresh["observations"][0]["data"] = [v + 1 for v in fresh["observations"][0]["data"]]
        status, fit, _ = s.call("POST", "/v1/fit", {"model": {"workspace": fresh}}, timeout=600)
        assert status == 200 and "bestfit" in json.dumps(fit)
        assert s.call("GET", f"/v1/jobs/{job['id']}")[1]["status"] == "running"
        s.call("DELETE", f"/v1/jobs/{job['id']}")
    finally:
        s.stop()


def test_jobs_beyond_the_queue_are_refused_and_queued_cancels_read_cancelled():
    s = Server("--workers", "1", "--queue", "1")
    try:
        _, m, _ = s.call("POST", "/v1/models", {"workspace": workspace(COMPLEX)})
        status, running, _ = s.call("POST", "/v1/jobs", {"verb": "hypotest-toys", **long_toys(m["id"])})
        assert status == 202
        s.wait_until(lambda: s.call("GET", f"/v1/jobs/{running['id']}")[1]["status"] == "running", "the first job running")
        status, queued, _ = s.call("POST", "/v1/jobs", {"verb": "hypotest-toys", **long_toys(m["id"])})
        assert status == 202 and queued["status"] == "queued"
        # One worker and a queue of one are full: the third job is refused now, not failed later.
        status, e, headers = s.call("POST", "/v1/jobs", {"verb": "hypotest-toys", **long_toys(m["id"])})
        assert status == 503 and e["error"]["kind"] == "busy" and "Retry-After" in headers, e
        # Cancelled while it waits, it reads `cancelled`, also once the worker frees up.
        status, cancelled, _ = s.call("DELETE", f"/v1/jobs/{queued['id']}")
        assert status == 200 and cancelled["status"] == "cancelled"
        s.call("DELETE", f"/v1/jobs/{running['id']}")
        s.wait_until(lambda: s.call("GET", "/v1/health")[1]["running"] == 0, "both stopped")
        for j in (queued, running):
            got = s.call("GET", f"/v1/jobs/{j['id']}")[1]
            assert got["status"] == "cancelled" and got["error"] is None, got
    finally:
        s.stop()


def test_a_request_stopped_by_shutdown_says_so():
    import threading

    s = Server()
    _, m, _ = s.call("POST", "/v1/models", {"workspace": workspace(COMPLEX)})
    answer = {}
    thread = threading.Thread(target=lambda: answer.update(r=s.call("POST", "/v1/hypotest-toys", long_toys(m["id"]))))
    thread.start()
    s.wait_until(lambda: s.call("GET", "/v1/health")[1]["running"] == 1, "the request running")
    s.proc.terminate()
    thread.join(timeout=120)
    status, e, _ = answer["r"]
    assert status == 503 and e["error"]["kind"] == "shutdown" and "shutting down" in e["error"]["message"], e
    assert "--timeout" not in e["error"]["message"]
    s.proc.wait(timeout=60)


def test_options_out_of_range_are_refused_at_start_and_405_is_json(server):
    for args, says in [
        (["--rate-limit", "5"], "--rate-limit limits the requests of each API key"),
        (["--max-body-mb", str(2**44)], "--max-body-mb must be between 1 and"),
        (["--max-body-mb", "0"], "--max-body-mb must be between 1 and"),
        (["--cache-mb", str(2**50)], "--cache-mb must be between 1 and"),
        (["--timeout", "1e300"], "not 1e300"),
        (["--job-ttl=-1"], "--job-ttl must be a number of seconds"),
        (["--gpu-runners", "100000"], "--gpu-runners must be between 1 and 64"),
    ]:
        proc = subprocess.run([str(SERVER), "--port", "0", *args], capture_output=True, text=True, timeout=30)
        assert proc.returncode != 0 and says in proc.stderr and len(proc.stderr) < 400, (args, proc.stderr)
    status, e, _ = server.call("GET", "/v1/fit")
    assert status == 405 and e["error"]["kind"] == "method_not_allowed" and "/v1/fit" in e["error"]["message"]
    status, e, _ = server.call("PUT", "/v1/models")
    assert status == 405 and e["error"]["kind"] == "method_not_allowed"


def test_a_server_without_keys_refuses_to_listen_beyond_loopback():
    proc = subprocess.run([str(SERVER), "--host", "0.0.0.0", "--port", "0"], capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "--api-key-file" in proc.stderr


def test_python_client_returns_the_local_result_objects(server):
    client = Client(server.url)
    assert client.health()["status"] == "ok"
    remote = client.upload(str(SIMPLE))
    assert remote.parameter_names == nextstat.Workspace(str(SIMPLE)).model().config.par_names
    local_model = nextstat.Workspace(str(SIMPLE)).model()
    fit, local = client.fit(remote), nextstat.fit(local_model)
    assert isinstance(fit, nextstat.FitResult) and fit.twice_nll == local.twice_nll
    assert client.hypotest(1.0, remote).cls_obs == nextstat.hypotest(1.0, local_model).cls_obs
    limit = client.upper_limit(remote)
    assert limit.obs == nextstat.upper_limit(local_model).obs
    job = client.submit("hypotest_toys", remote, mu=1.0, n_toys=100, seed=2)
    toys = client.wait(job, timeout=120)
    assert toys.cls_obs == nextstat.hypotest_toys(1.0, local_model, n_toys=100, seed=2, progress=False).cls_obs
    with pytest.raises(ServerError, match="404 not_found"):
        client.job("job-0")
    client.forget(remote)
    with pytest.raises(ServerError, match="no model"):
        client.fit(remote)


def test_schema_driven_fuzz_finds_no_server_error(tmp_path):
    """schemathesis against the OpenAPI document, bounded (25 examples an operation, fixed seed):
    no 5xx answer, and the server still healthy afterwards."""
    import shutil
    import sys
    from pathlib import Path

    runner = shutil.which("schemathesis") or str(Path(sys.executable).parent / "schemathesis")
    s = Server("--timeout", "20")
    try:
        proc = subprocess.run([runner, "run", f"{s.url}/v1/openapi.json", "--max-examples", "25", "--seed", "1",
                               "--checks", "not_a_server_error", "--request-timeout", "60"],
                              capture_output=True, text=True, timeout=900, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert "generated" in proc.stdout and "passed" in proc.stdout
        assert s.call("GET", "/v1/health")[1]["status"] == "ok"
    finally:
        s.stop()


def test_tls_with_a_certificate(tmp_path):
    """HTTPS through rustls with a self-signed certificate (made here by openssl)."""
    import ssl

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert, "-days", "1"],
                   check=True, capture_output=True)
    s = Server("--tls-cert", cert, "--tls-key", key)
    try:
        assert s.url.startswith("https://")
        context = ssl.create_default_context(cafile=str(cert))
        with urllib.request.urlopen(s.url + "/v1/health", context=context, timeout=30) as r:
            assert json.loads(r.read())["status"] == "ok"
        client = Client(s.url)
        with pytest.raises(ServerError):  # the certificate is not trusted by default
            client.health()
    finally:
        s.stop()
    proc = subprocess.run([str(SERVER), "--port", "0", "--tls-cert", cert, "--tls-key", tmp_path / "missing.pem"], capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "missing.pem" in proc.stderr


def test_shutdown_stops_running_work():
    s = Server()
    _, m, _ = s.call("POST", "/v1/models", {"workspace": workspace(COMPLEX)})
    s.call("POST", "/v1/jobs", {"verb": "hypotest-toys", **long_toys(m["id"])})
    s.wait_until(lambda: s.call("GET", "/v1/health")[1]["running"] == 1, "the job running")
    s.proc.terminate()
    assert s.proc.wait(timeout=60) == 0
    assert "shutting down" in s.proc.stderr.read()


def test_a_batch_larger_than_the_queue_still_runs():
    """A batch shares the pool: with one worker and no queue, every patch still runs (one at a
    time), instead of the batch turning itself away."""
    s = Server("--workers", "1", "--queue", "0")
    try:
        background = workspace(WORKSPACES / "pyhf_testpatchset_bkgonly.json")
        patchset = workspace(WORKSPACES / "pyhf_testpatchset_patchset.json")
        # Five signal points: copies of the one patch under other names and values.
        first = patchset["patches"][0]
        patchset["patches"] = [
            {**first, "metadata": {**first["metadata"], "name": f"{first['metadata']['name']}_{i}",
                                   "values": [v + i for v in first["metadata"]["values"]]}}
            for i in range(5)
        ]
        names = [p["metadata"]["name"] for p in patchset["patches"]]
        status, answer, _ = s.call("POST", "/v1/batch", {"model": {"workspace": background, "patchset": {"patchset": patchset, "patch": names[0]}}, "verb": "hypotest", "request": {"mu": 1.0}})
        assert status == 200, answer
        assert [r["patch"] for r in answer["results"]] == names
    finally:
        s.stop()


def test_an_xml_model_is_sent_with_its_files(server):
    """HistFactory XML reaches the server as files sent with the reference (base64), never as a
    path on the server's disk; the fit is the CLI's of the same files."""
    import base64
    import os
    from pathlib import Path
    folder = Path(os.environ.get("NEXTSTAT_HISTFACTORY_XML", ROOT.parent / "shared" / "histfactory-xml")) / "pyhf-validation" / "xmlimport_input"
    names = ["config/example.xml", "config/example_channel.xml", "data/example.root"]
    files = {name: base64.b64encode((folder / name).read_bytes()).decode() for name in names}
    model = {"format": "xml", "top": "config/example.xml", "files": files}
    status, answer, _ = server.call("POST", "/v1/fit", {"model": model})
    assert status == 200, answer
    cli = json.loads(subprocess.run([str(BIN), "fit", str(folder / "config/example.xml")], capture_output=True, text=True, check=True).stdout)
    assert answer["bestfit"] == cli["bestfit"] and answer["twice_nll"] == cli["twice_nll"]
    status, e, _ = server.call("POST", "/v1/fit", {"model": {**model, "files": {k: v for k, v in files.items() if k != "data/example.root"}}})
    assert status == 400 and "'data/example.root' is not among the files sent with the XML" in e["error"]["message"], e
    status, e, _ = server.call("POST", "/v1/fit", {"model": {**model, "files": {**files, "data/example.root": "not base64!"}}})
    assert status == 400 and "not base64" in e["error"]["message"], e


def test_a_datacard_is_sent_as_its_text(server):
    """A CMS Combine datacard reaches the server as its text; the fit is the CLI's of the file."""
    import os
    from pathlib import Path
    card = Path(os.environ.get("NEXTSTAT_COMBINE", ROOT.parent / "shared" / "combine")) / "data/tutorials/counting/realistic-counting-experiment.txt"
    status, answer, _ = server.call("POST", "/v1/fit", {"model": {"format": "datacard", "text": card.read_text()}})
    assert status == 200, answer
    cli = json.loads(subprocess.run([str(BIN), "fit", str(card)], capture_output=True, text=True, check=True).stdout)
    assert answer["bestfit"] == cli["bestfit"] and answer["twice_nll"] == cli["twice_nll"]
    status, e, _ = server.call("POST", "/v1/fit", {"model": {"format": "datacard", "text": "imax 1\nbin b\nobservation 3\n"}})
    assert status == 400 and "no rate line" in e["error"]["message"], e
