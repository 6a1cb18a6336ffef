"""nextstat-server on a GPU machine: N toy requests (`hypotest-toys`, device cuda) on one model,
sent one after the other, then all at once by N clients; the answers must be identical, and the
wall times show what concurrency on one GPU gives (requests are not merged into one device
batch yet: each runs its own batches).

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("workspace")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--toys", type=int, default=1000)
    ap.add_argument("--mu", type=float, default=0.3)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    proc = subprocess.Popen([args.server, "--port", "0", "--workers", str(args.requests)], stdout=subprocess.PIPE, text=True)
    url = proc.stdout.readline().split()[-1]
    try:
        model = post(url, "/v1/models", {"workspace": json.load(open(args.workspace))})["id"]
        call = lambda seed: {"model": {"id": model}, "device": args.device, "request": {"mu": args.mu, "n_toys": args.toys, "seed": seed}}  # noqa: E731
        post(url, "/v1/hypotest-toys", call(999))  # compile and cache the kernels
        start = time.perf_counter()
        serial = [post(url, "/v1/hypotest-toys", call(s)) for s in range(args.requests)]
        t_serial = time.perf_counter() - start
        together = [None] * args.requests

        def one(s):
            together[s] = post(url, "/v1/hypotest-toys", call(s))

        threads = [threading.Thread(target=one, args=(s,)) for s in range(args.requests)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        t_together = time.perf_counter() - start
        print(json.dumps({
            "requests": args.requests, "toys_each": args.toys, "device": args.device,
            "serial_s": t_serial, "concurrent_s": t_together, "speedup": t_serial / t_together,
            "identical": serial == together, "cls": [r["CLs_obs"] for r in serial],
        }, indent=1))
        with urllib.request.urlopen(url + "/metrics") as r:
            print("\n".join(l for l in r.read().decode().splitlines() if "busy" in l and not l.startswith("#")))
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
