#!/usr/bin/env bash
# The figures of docs/plots.md, from the example analysis: each verb's JSON, then `nextstat plot`
# on it. Run from anywhere after `cargo build --release --bin nextstat`.
set -euo pipefail
cd "$(dirname "$0")/.."
ns=./target/release/nextstat
out=docs/plots
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

$ns fit examples/analysis.json --covariance --yields -o "$work/fit.json"
$ns ranking examples/analysis.json -o "$work/ranking.json"
$ns scan examples/analysis.json --range 0 2.5 26 -o "$work/scan.json"
$ns scan examples/analysis.json --parameters mu_sig,k_ttbar --grid 0 2.6 27 0.8 1.25 19 -o "$work/grid_scan.json"
$ns upper-limit examples/analysis.json --scan 0 3 31 -o "$work/cls.json"
$ns upper-limit examples/bkgonly.json --patchset examples/patchset.json --all -o "$work/grid.json"
$ns hypotest-toys examples/analysis.json --mu 1 --n-toys 2000 --seed 1 --teststats -o "$work/toys.json"
$ns hypotest examples/analysis.json --mu 1 -o "$work/hypotest.json"

$ns plot limit "$work/grid.json" -o "$out/limit.svg" > /dev/null
$ns plot limit "$work/cls.json" -o "$out/cls.svg" > /dev/null
$ns plot ranking "$work/ranking.json" -o "$out/ranking.svg" > /dev/null
$ns plot pulls "$work/fit.json" -o "$out/pulls.svg" > /dev/null
$ns plot correlation "$work/fit.json" -o "$out/correlation.svg" > /dev/null
$ns plot scan "$work/scan.json" -o "$out/scan.svg" > /dev/null
$ns plot contour "$work/grid_scan.json" -o "$out/contour.svg" > /dev/null
$ns plot yields "$work/fit.json" -o "$out/yields_postfit.svg" > /dev/null
$ns plot yields "$work/fit.json" --prefit -o "$out/yields_prefit.svg" > /dev/null
$ns plot toys "$work/toys.json" --asymptotic "$work/hypotest.json" -o "$out/toys.svg" > /dev/null
echo "figures written to $out/"
