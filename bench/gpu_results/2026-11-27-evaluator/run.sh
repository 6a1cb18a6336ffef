set -x
nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep "Model name"
W=dist-gpu/pyhf-ref/workspaces
for m in nextstat_tHu synthetic_large_2000bins nextstat_tttt_prod; do
  n=5000; [ $m = synthetic_large_2000bins ] && n=1000
  for cap in best baseline; do
    for r in 1 2 3 4 5 6; do for v in old new; do
      if [ $cap = best ]; then taskset -c 3 dist-gpu/eval_$v $W/$m.json $n; else NEXTSTAT_CPU_SIMD=baseline taskset -c 3 dist-gpu/eval_$v $W/$m.json $n; fi | sed "s/^/$m $cap $v /"
    done; done
  done
done > $OUT/eval_loop.txt 2>&1
export NEXTSTAT_PYHF_REF=$PWD/dist-gpu/pyhf-ref NEXTSTAT_LIKELIHOODS=$PWD/dist-gpu/likelihoods NEXTSTAT_KERNEL_CACHE=/tmp/nextstat-kernels
dist-gpu/backend_parity --include-ignored --test-threads 1 --nocapture --skip vulkan --skip metal > $OUT/backend_parity.log 2>&1; echo "backend_parity exit $?"
dist-gpu/differentiable --include-ignored --test-threads 1 --nocapture > $OUT/differentiable.log 2>&1; echo "differentiable exit $?"
grep -E "^test result" $OUT/*.log
python3 - <<'PY'
import collections, os
best = collections.defaultdict(lambda: 1e9)
for line in open(os.environ['OUT'] + '/eval_loop.txt'):
    p = line.split()
    if len(p) > 5 and p[4] == 'evaluations,':
        best[tuple(p[:3])] = min(best[tuple(p[:3])], float(p[5]))
for k, v in sorted(best.items()): print(*k, v)
PY
