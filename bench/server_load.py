"""Load test of nextstat-server on loopback (docs/benchmarks.md, "Server"): 64 concurrent clients
mixing fits on 4 models, first on an idle server, then while a 20,000-toy job runs on a published
likelihood; bounded in count. Reports p50/p99 latency and throughput of both phases, the time of
the first fit of a fresh model during the job, and checks every answer against the CLI's for the
same request. The target: p99 during the job within 50 ms of the idle p99.

    python bench/server_load.py [--clients 64] [--requests 1024] [--server target/release/nextstat-server]
"""

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WS = ROOT.parent / "shared" / "pyhf-ref" / "workspaces"
MODELS = ["nextstat_simple_workspace.json", "nextstat_complex_workspace.json", "nextstat_shape_workspace.json", "nextstat_multichannel_workspace.json"]
# The long job's model: a published likelihood (docs/validation.md).
JOB_MODEL = ROOT.parent / "shared" / "likelihoods" / "atlas_3Lonshell_2019-09_smodels" / "workspace.json"


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return r.status, json.loads(r.read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--requests", type=int, default=1024)
    ap.add_argument("--server", default=str(ROOT / "target" / "release" / "nextstat-server"))
    ap.add_argument("--cli", default=str(ROOT / "target" / "release" / "nextstat"))
    args = ap.parse_args()
    proc = subprocess.Popen([args.server, "--port", "0", "--queue", str(4 * args.clients)], stdout=subprocess.PIPE, text=True)
    url = proc.stdout.readline().split()[-1]
    try:
        ids = [post(url, "/v1/models", {"workspace": json.loads((WS / m).read_text())})[1]["id"] for m in MODELS]
        want = [json.loads(subprocess.run([args.cli, "fit", str(WS / m)], capture_output=True, text=True, check=True).stdout) for m in MODELS]

        def phase():
            """`args.requests` fits from `args.clients` clients: (latencies, errors, mismatches, wall)."""
            latencies, errors, mismatches = [], [], []
            lock = threading.Lock()
            counter = iter(range(args.requests))

            def client():
                while True:
                    with lock:
                        i = next(counter, None)
                    if i is None:
                        return
                    k = i % len(MODELS)
                    start = time.perf_counter()
                    try:
                        status, answer = post(url, "/v1/fit", {"model": {"id": ids[k]}, "request": {"uncertainties": True}})
                    except Exception as e:  # noqa: BLE001 - reported
                        with lock:
                            errors.append(repr(e))
                        continue
                    elapsed = time.perf_counter() - start
                    with lock:
                        latencies.append(elapsed)
                        if status != 200 or answer != want[k]:
                            mismatches.append((i, status))

            start = time.perf_counter()
            threads = [threading.Thread(target=client) for _ in range(args.clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return sorted(latencies), errors, mismatches, time.perf_counter() - start

        def summary(latencies, errors, mismatches, wall):
            q = lambda p: latencies[min(len(latencies) - 1, int(p * len(latencies)))]  # noqa: E731
            return {"errors": len(errors), "mismatches": len(mismatches), "wall_s": wall,
                    "throughput_per_s": len(latencies) / wall, "p50_ms": 1e3 * q(0.5), "p99_ms": 1e3 * q(0.99),
                    "mean_ms": 1e3 * statistics.fmean(latencies)}

        idle = phase()
        _, job = post(url, "/v1/jobs", {"verb": "hypotest-toys", "model": {"workspace": json.loads(JOB_MODEL.read_text())},
                                        "request": {"mu": 1.0, "n_toys": 20000}})
        while True:
            with urllib.request.urlopen(f"{url}/v1/jobs/{job['id']}") as r:
                if json.loads(r.read())["status"] == "running":
                    break
            time.sleep(0.05)
        # A model the server has never seen (loaded, then fitted) while the job runs.
        fresh = json.loads((WS / MODELS[0]).read_text())
        fresh["observations"][0]["data"] = [v + 3 for v in fresh["observations"][0]["data"]]
        start = time.perf_counter()
        post(url, "/v1/fit", {"model": {"workspace": fresh}})
        first_fit = time.perf_counter() - start
        busy = phase()
        with urllib.request.urlopen(f"{url}/v1/jobs/{job['id']}") as r:
            job_state = json.loads(r.read())
        result = {
            "clients": args.clients, "requests": args.requests,
            "idle": summary(*idle), "during_toy_job": summary(*busy),
            "first_fit_of_a_fresh_model_during_the_job_ms": 1e3 * first_fit,
            "toy_job": {"model": str(JOB_MODEL.relative_to(ROOT.parent)), "status": job_state["status"], "progress": job_state["progress"]},
        }
        result["p99_increase_ms"] = result["during_toy_job"]["p99_ms"] - result["idle"]["p99_ms"]
        result["target_met"] = result["p99_increase_ms"] <= 50.0
        print(json.dumps(result, indent=1))
        errors = idle[1] + busy[1]
        mismatches = idle[2] + busy[2]
        if errors or mismatches:
            print("errors:", errors[:5], "mismatches:", mismatches[:5], file=sys.stderr)
            sys.exit(1)
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
