#!/usr/bin/env bash
# The CPU-speed table of docs/benchmarks.md, in one run on this machine (from the repository root,
# ../shared beside it): NLL + gradient per instruction set and fit (+ Hessian) on one thread
# (criterion), instructions per whole `nextstat fit` of an older build and this one (callgrind:
# exact, unlike times on a shared machine), and RooFit 6.40 against the whole nextstat process.
#   bash bench/cpu_speed.sh [OLD_NEXTSTAT]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p ns-cli --bin nextstat
cargo bench -p ns-compute --bench nll -- --warm-up-time 1 --measurement-time 3 2>/dev/null | grep -E "^[a-zA-Z_0-9]+/|time:"
cargo bench -p ns-inference --bench fit -- --warm-up-time 1 --measurement-time 5 2>/dev/null | grep -E "^fit/|time:"
L=../shared/likelihoods W=../shared/pyhf-ref/workspaces
for model in $L/atlas_staus_2018-04_comb_DS_100_1/workspace.json $W/nextstat_tHu.json \
    $L/atlas_compressed_EWKinos_2018-16_smodels/workspace.json $W/nextstat_tttt_prod.json \
    $W/synthetic_large_2000bins.json; do
  for binary in ${1:-} target/release/nextstat; do
    instructions=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$binary" fit "$model" \
      --threads 1 -o /dev/null 2>&1 | sed -n 's/.*Collected : //p')
    echo "instructions $(basename "$(dirname "$model")")/$(basename "$model") $binary $instructions"
  done
done
.venv/bin/python bench/roofit_binned.py
