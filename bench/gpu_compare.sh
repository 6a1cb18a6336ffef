#!/usr/bin/env bash
# On the GPU machine: this build (dist-gpu/) against an older one (its nextstat and gpu_bench in
# OLD_DIR, built the same way): the CLI's output on CUDA, byte for byte, for the batched verbs on
# tHq and a published likelihood, and the GPU benchmark of both on tHq and the 8-parameter model.
# For refactors that must not change a number. `bash bench/gpu_compare.sh OLD_DIR`; results in
# $OUT (or ./gpu-results).
set -uo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: gpu_compare.sh OLD_DIR}
out=${OUT:-gpu-results}
mkdir -p "$out"
ws=dist-gpu/pyhf-ref/workspaces
export NEXTSTAT_KERNEL_CACHE=/tmp/nextstat-kernels
same=0; differ=0
compare() {  # label, args...
  local label=$1; shift
  "$old/nextstat" "$@" > /tmp/old.out 2>/tmp/old.err; local a=$?
  local t0=$(date +%s.%N)
  dist-gpu/nextstat "$@" > /tmp/new.out 2>/tmp/new.err; local b=$?
  local t=$(awk "BEGIN { printf \"%.2f\", $(date +%s.%N) - $t0 }")
  if [ $a = $b ] && cmp -s /tmp/old.out /tmp/new.out; then
    same=$((same + 1)); echo "same      ${t}s  $label"
  else
    differ=$((differ + 1)); echo "DIFFERENT ${t}s  $label (exit $a / $b)"; diff /tmp/old.out /tmp/new.out | head -6
  fi
}
{
  tthq=$ws/nextstat_tHu.json
  compare "tHq hypotest-toys 1000" hypotest-toys $tthq --mu 0.3 --n-toys 1000 --gpu cuda
  compare "tHq ranking" ranking $tthq --gpu cuda
  compare "tHq scan 21" scan $tthq --range 0 1 21 --gpu cuda
  compare "tHq upper-limit scan" upper-limit $tthq --scan 0 1 11 --gpu cuda
  compare "tHq fit" fit $tthq --gpu cuda
  compare "8-par hypotest-toys 2000" hypotest-toys $ws/nextstat_complex_workspace.json --mu 2.5 --n-toys 2000 --gpu cuda
  lik=dist-gpu/likelihoods/atlas_ttbar_ljets_xsec/workspace.json
  compare "tt ℓ+jets hypotest-toys 500" hypotest-toys $lik --n-toys 500 --gpu cuda
  compare "tt ℓ+jets ranking" ranking $lik --gpu cuda
  echo "CLI on CUDA: $same same, $differ different"
} | tee "$out/compare_cli.txt"
for build in old new; do
  bin=$old/gpu_bench; [ $build = new ] && bin=dist-gpu/gpu_bench
  while read -r file mu toys cpu_toys; do
    echo "== $build $file" >&2
    $bin "$ws/$file" --mu "$mu" --toys "$toys" --cpu-toys "$cpu_toys" --big-toys 0 \
      | python3 -c "import json,sys; d=json.load(sys.stdin); d['build']='$build'; print(json.dumps(d))"
  done <<'MODELS'
nextstat_complex_workspace.json 2.5 1000 1000
nextstat_tHu.json 0.30 1000 300
MODELS
done | tee "$out/compare_bench.jsonl"
