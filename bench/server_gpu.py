"""nextstat-server on a GPU machine: N toy requests (`hypotest-toys`) and N rankings on one model,
sent one after the other, then all at once by N clients, with `--gpu-runners 1` (the queue merges
what waits into one device batch) and `--gpu-runners 2` (two batches at once). Every answer must be
identical to the serial one; the server's counters say how many device batches ran and how many
requests shared one. Also the latency of one request on a fresh server (device session opened,
kernels loaded) against the next (session kept).

    python bench/server_gpu.py SERVER_BINARY WORKSPACE.json [--requests 8] [--toys 1000] [--mu 0.3]
"""

import argparse
import json
import subprocess
import threading
import time
import urllib.request


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=900) as r:
        return json.loads(r.read())


def counters(url):
    with urllib.request.urlopen(url + "/metrics") as r:
        lines = r.read().decode().splitlines()
    wanted = ("nextstat_device_batches_total", "nextstat_device_merged_calls_total", "nextstat_gpu_busy_seconds_total")
    return {l.split()[0]: float(l.split()[1]) for l in lines if l.startswith(wanted)}


def concurrently(url, path, calls):
    answers = [None] * len(calls)

    def one(i):
        answers[i] = post(url, path, calls[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers, time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("workspace")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--toys", type=int, default=1000)
    ap.add_argument("--mu", type=float, default=0.3)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    workspace = json.load(open(args.workspace))
    toys = lambda model, seed: {"model": {"id": model}, "device": args.device, "request": {"mu": args.mu, "n_toys": args.toys, "seed": seed}}  # noqa: E731
    ranking = lambda model, i: {"model": {"id": model}, "device": args.device, "request": {}, "data": {"asimov": 0.1 * i}}  # noqa: E731
    rows, reference = [], {}
    for runners in (1, 2):
        proc = subprocess.Popen([args.server, "--port", "0", "--gpu-runners", str(runners)], stdout=subprocess.PIPE, text=True)
        url = proc.stdout.readline().split()[-1]
        try:
            model = post(url, "/v1/models", {"workspace": workspace})["id"]
            start = time.perf_counter()
            post(url, "/v1/hypotest-toys", toys(model, 999))
            first = time.perf_counter() - start
            start = time.perf_counter()
            post(url, "/v1/hypotest-toys", toys(model, 998))
            second = time.perf_counter() - start
            rows.append({"runners": runners, "what": "one toy request: fresh session, then kept", "first_s": first, "next_s": second})
            for verb, make in (("hypotest-toys", toys), ("ranking", ranking)):
                calls = [make(model, i) for i in range(args.requests)]
                start = time.perf_counter()
                serial = [post(url, f"/v1/{verb}", c) for c in calls]
                t_serial = time.perf_counter() - start
                before = counters(url)
                together, t_together = concurrently(url, f"/v1/{verb}", calls)
                after = counters(url)
                reference.setdefault(verb, serial)
                rows.append({
                    "runners": runners, "verb": verb, "requests": args.requests,
                    "toys_each": args.toys if verb == "hypotest-toys" else None,
                    "serial_s": t_serial, "concurrent_s": t_together, "speedup": t_serial / t_together,
                    "device_batches": after["nextstat_device_batches_total"] - before["nextstat_device_batches_total"],
                    "merged_requests": after["nextstat_device_merged_calls_total"] - before["nextstat_device_merged_calls_total"],
                    "identical_to_serial": together == serial, "identical_across_servers": serial == reference[verb],
                })
        finally:
            proc.terminate()
            proc.wait()
    print(json.dumps(rows, indent=1))
    if not all(r.get("identical_to_serial", True) and r.get("identical_across_servers", True) for r in rows):
        raise SystemExit("answers differ")


if __name__ == "__main__":
    main()
