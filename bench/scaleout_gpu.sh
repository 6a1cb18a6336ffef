#!/usr/bin/env bash
# Sharded toys over GPUs, on the GPU machine. Build here first:
#   eval "$(bash scripts/prebuild_kernels.sh)"; cargo build --release --bin nextstat; (wheel, wheelhouse: docs/scale-out.md)
# into dist-gpu/scaleout, carry it, and run:  bash bench/scaleout_gpu.sh  (tables in $OUT)
# 1. 100k tHq toys: one process on GPU 0 against 4 shards spread over the GPUs, merged: the bytes.
# 2. 10^6 tHq toys: one shard per GPU, in parallel, merged.
# 3. The same 10^6 toys through nextstat.distributed: a Dask scheduler and one worker per GPU.
# 4. The published 1Lbb grid on the CPU cores: one process, and a Dask LocalCluster.
set -uo pipefail
D=${D:-dist-gpu/scaleout}
OUT=${OUT:-/tmp/scaleout-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --target /tmp/py "$D"/wheelhouse/*.whl >/dev/null 2>&1
python3 -m pip install -q --no-index --no-deps --target /tmp/py "$D"/nextstat-*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/py
B=$D/nextstat
W=$D/nextstat_tHu.json
nvidia-smi -L | tee "$OUT/gpus.txt"
NG=$(nvidia-smi -L | wc -l)
N=${TOYS:-$((NG > 1 ? 1000000 : 400000))}
now() { date +%s.%N; }
log() { echo "$*" | tee -a "$OUT/table.txt"; }
el() { python3 -c "print(f'{$2 - $1:.1f}')"; }
log "gpus=$NG cpus=$(nproc) toys=$N"

t0=$(now); $B hypotest-toys "$W" --mu 0.3 --n-toys 100000 --seed 1 --gpu cuda:0 -o "$OUT/whole100k.json"; t1=$(now)
for i in 0 1 2 3; do
  $B hypotest-toys "$W" --mu 0.3 --n-toys 100000 --seed 1 --gpu "cuda:$((i % NG))" --shard "$i/4" -o "/tmp/p100k-$i.json" &
done
wait; t2=$(now)
$B merge /tmp/p100k-*.json -o "$OUT/merged100k.json"
if cmp -s "$OUT/whole100k.json" "$OUT/merged100k.json"; then same=identical; else same=DIFFERENT; fi
log "100k toys: one process on cuda:0 $(el "$t0" "$t1") s; 4 shards over $NG GPUs $(el "$t1" "$t2") s; merged file $same"

t0=$(now)
for ((g = 0; g < NG; g++)); do
  $B hypotest-toys "$W" --mu 0.3 --n-toys "$N" --seed 2 --gpu "cuda:$g" --shard "$g/$NG" -o "/tmp/pbig-$g.json" &
done
wait; t1=$(now)
$B merge /tmp/pbig-*.json -o "$OUT/cli_big.json"
log "$N toys, CLI: $NG shards on $NG GPUs in parallel $(el "$t0" "$t1") s; CLs_obs $(python3 -c "import json; print(json.load(open('$OUT/cli_big.json'))['CLs_obs'])")"

if [ -z "${SKIP_DASK_TOYS:-}" ]; then
python3 -m distributed.cli.dask_scheduler --port 8786 --no-dashboard >"$OUT/scheduler.log" 2>&1 &
sleep 5
for ((g = 0; g < NG; g++)); do
  CUDA_VISIBLE_DEVICES=$g python3 -m distributed.cli.dask_worker tcp://127.0.0.1:8786 --nthreads 1 --no-dashboard >"$OUT/worker$g.log" 2>&1 &
done
python3 - "$W" "$N" "$NG" "$OUT" <<'PY' 2>&1 | tee -a "$OUT/table.txt"
import json, sys, time
from dask.distributed import Client
import nextstat, nextstat.distributed as nsd
path, n, ng, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
client = Client("tcp://127.0.0.1:8786")
client.wait_for_workers(ng, timeout=120)
model = nextstat.Workspace(path).model()
t = time.perf_counter()
result = nsd.hypotest_toys(client, 0.3, model, n_toys=n, seed=2, device="cuda", shards=4 * ng, progress=False)
wall = time.perf_counter() - t
cli = json.load(open(f"{out}/cli_big.json"))
print(f"{n} toys, Dask: {4 * ng} shards on {ng} GPU workers {wall:.1f} s; same result as the CLI's {ng} shards: {result.to_dict() == cli}")
PY
fi

# A file, not stdin: LocalCluster's worker processes re-import the main script.
cat > /tmp/grid_bench.py <<'PY'
import json, os, subprocess, sys, time, warnings
from dask.distributed import Client, LocalCluster
import nextstat.distributed as nsd


def main():
    grid, binary = sys.argv[1], sys.argv[2]
    t = time.perf_counter()
    args = [binary, "upper-limit", f"{grid}/bkgonly.json", "--patchset", f"{grid}/patchset.json", "--all", "--skip-verify"]
    one = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
    t_one = time.perf_counter() - t
    cores = os.cpu_count()
    warnings.simplefilter("ignore")
    with LocalCluster(n_workers=4, threads_per_worker=max(1, cores // 4), dashboard_address=None) as cluster, Client(cluster) as client:
        nsd.patchset_grid(client, f"{grid}/bkgonly.json", f"{grid}/patchset.json", skip_verify=True, progress=False)
        t = time.perf_counter()
        many = nsd.patchset_grid(client, f"{grid}/bkgonly.json", f"{grid}/patchset.json", skip_verify=True, progress=False)
        t_many = time.perf_counter() - t
    print(f"1Lbb grid (125 limits), {cores} cores: one process {t_one:.2f} s; LocalCluster 4 workers {t_many:.2f} s (warm); same table: {many == one}")


if __name__ == "__main__":
    main()
PY
python3 /tmp/grid_bench.py "$D/atlas_1Lbb_simplified" "$B" 2>/dev/null | tee -a "$OUT/table.txt"
