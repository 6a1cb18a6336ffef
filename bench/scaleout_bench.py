"""Scale-out showcase (docs/scale-out.md, docs/benchmarks.md): every signal point of a published
HEPData patchset — nextstat in one process (the CLI), on a Dask LocalCluster, and pyhf's own loop
over the same patchset (the workflow pyhf ran on funcX) — and a toy ensemble split over workers.

    .venv/bin/python bench/scaleout_bench.py [--pyhf-points N] [--workers 2] [--out bench/scaleout_results.json]

Wall times of whole jobs on this machine; the cluster's start-up is reported apart."""

import argparse
import json
import os
import platform
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRIDS = ROOT.parent / "shared" / "likelihoods" / "patchsets"
BIN = Path(os.environ.get("NEXTSTAT_BIN", ROOT / "target" / "release" / "nextstat"))


def timed(f):
    t = time.perf_counter()
    value = f()
    return value, time.perf_counter() - t


def cli(*args):
    out = subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def pyhf_loop(grid, points, verb):
    """pyhf's loop over the patchset: each patch applied to the background, the model built and
    its CLs at μ = 1 (hypotest) or its upper limit (toms748), one point after another."""
    import pyhf

    pyhf.set_backend("numpy")
    bkg = pyhf.Workspace(json.loads((grid / "bkgonly.json").read_text()))
    patchset = pyhf.PatchSet(json.loads((grid / "patchset.json").read_text()))
    results = []
    for patch in patchset.patches[:points]:
        model = bkg.model(patches=[patch])
        data = bkg.data(model)
        if verb == "hypotest":
            cls_obs, cls_exp = pyhf.infer.hypotest(1.0, data, model, test_stat="qtilde", return_expected_set=True)
            results.append(float(cls_obs))
        else:
            obs, exp = pyhf.infer.intervals.upper_limits.upper_limit(data, model)
            results.append(float(obs))
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pyhf-points", type=int, default=125, help="points of the 1Lbb grid pyhf's hypotest loop runs (its limit loop runs a tenth)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "bench" / "scaleout_results.json"))
    args = parser.parse_args()

    import nextstat
    import nextstat.distributed as nsd
    from dask.distributed import Client, LocalCluster

    rows = []
    (cluster, client), startup = timed(lambda: (lambda c: (c, Client(c)))(LocalCluster(n_workers=args.workers, threads_per_worker=os.cpu_count() // args.workers or 1, processes=True, dashboard_address=None)))
    for name in ("atlas_1Lbb_simplified", "atlas_2L0J_simplified"):
        grid = GRIDS / name
        n = len(json.loads((grid / "patchset.json").read_text())["patches"])
        for verb, flag in (("hypotest", "hypotest"), ("upper_limit", "upper-limit")):
            one, t_one = timed(lambda: cli(flag, grid / "bkgonly.json", "--patchset", grid / "patchset.json", "--all", "--skip-verify"))
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                many, t_many = timed(lambda: nsd.patchset_grid(client, grid / "bkgonly.json", grid / "patchset.json", verb=verb, skip_verify=True, progress=False))
            assert many == one, f"{name} {verb}: the cluster's table differs from the CLI's"
            row = dict(grid=name, verb=verb, points=n, ok=len(one["points"]), nextstat_process_s=t_one, nextstat_cluster_s=t_many)
            if name == "atlas_1Lbb_simplified":
                k = args.pyhf_points if verb == "hypotest" else max(1, args.pyhf_points // 10)
                values, t_pyhf = timed(lambda: pyhf_loop(grid, k, verb))
                row.update(pyhf_points=k, pyhf_s=t_pyhf, pyhf_per_point_s=t_pyhf / k, nextstat_per_point_s=t_one / n,
                           per_point_ratio=(t_pyhf / k) / (t_one / n))
                key = "CLs_obs" if verb == "hypotest" else "obs"
                ours = [p[key] for p in one["points"][:k]]
                row["max_rel_diff_vs_pyhf"] = max(abs(a - b) / abs(b) for a, b in zip(ours, values) if b)
            rows.append(row)
            print(json.dumps(row), flush=True)

    # A toy ensemble: one process against the cluster's shards, the same bits.
    model = nextstat.Workspace(str(ROOT.parent / "shared" / "pyhf-ref" / "workspaces" / "nextstat_tHu.json")).model()
    n_toys = int(os.environ.get("SCALEOUT_TOYS", "2000"))
    one, t_one = timed(lambda: nextstat.hypotest_toys(0.3, model, n_toys=n_toys, progress=False))
    many, t_many = timed(lambda: nsd.hypotest_toys(client, 0.3, model, n_toys=n_toys, progress=False))
    assert many.to_dict() == one.to_dict()
    toys = dict(model="tHq (184 parameters)", n_toys=n_toys, process_s=t_one, cluster_s=t_many, CLs_obs=one.to_dict()["CLs_obs"])
    print(json.dumps(toys), flush=True)
    client.close()
    cluster.close()
    Path(args.out).write_text(json.dumps(dict(machine=platform.node(), cpus=os.cpu_count(), workers=args.workers, cluster_startup_s=startup, grids=rows, toys=toys), indent=1) + "\n")


if __name__ == "__main__":
    main()
