#!/usr/bin/env bash
# Byte for byte, and in time: every inference verb of one nextstat binary against another's (an
# older build, for refactors that must not change a number) on the example analysis, four shared
# workspaces, three published likelihoods, a patchset grid (whole and sharded), the unbinned
# example and — where .venv has torch and onnxruntime — an unbinned model with a flow PDF
# (bench/flow_model.py). `bash bench/cpu_compare.sh OLD_NEXTSTAT
# [NEW_NEXTSTAT]` from the repository root, ../shared beside it; prints one line per run
# (same/DIFF, seconds before and after) and the count.
set -u
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
OLD=${1:?usage: cpu_compare.sh OLD_NEXTSTAT [NEW_NEXTSTAT]}; NEW=${2:-target/release/nextstat}
W=../shared/pyhf-ref/workspaces; L=../shared/likelihoods
export XDG_RUNTIME_DIR=/tmp
same=0; diff=0
run() {  # label, args...
  local label=$1; shift
  local t0=$(date +%s.%N); "$OLD" "$@" > $tmp/old.out 2>$tmp/old.err; local rc_old=$?
  local t1=$(date +%s.%N); "$NEW" "$@" > $tmp/new.out 2>$tmp/new.err; local rc_new=$?
  local t2=$(date +%s.%N)
  local to=$(awk "BEGIN { print $t1 - $t0 }"); local tn=$(awk "BEGIN { print $t2 - $t1 }")
  if cmp -s $tmp/old.out $tmp/new.out && [ $rc_old = $rc_new ]; then
    same=$((same+1)); printf "same  %6.2fs %6.2fs  %s\n" $to $tn "$label"
  else
    diff=$((diff+1)); printf "DIFF  %6.2fs %6.2fs  %s (rc %s/%s)\n" $to $tn "$label" $rc_old $rc_new
    diff <(head -c 3000 $tmp/old.out) <(head -c 3000 $tmp/new.out) | head -8
  fi
}
for ws in examples/analysis.json $W/nextstat_complex_workspace.json $W/nextstat_tHu.json $W/pyhf_validation_1bin_shapesys.json $W/tutorial_bkg_only_1Lbb_CRs.json; do
  b=$(basename $ws)
  run "$b eval" eval $ws
  run "$b fit" fit $ws --covariance --minos all
  run "$b fit text" fit $ws --format text
  run "$b hypotest" hypotest $ws --mu 1
  run "$b hypotest q" hypotest $ws --mu 0.5 --test-stat q
  run "$b hypotest q0" hypotest $ws --test-stat q0
  run "$b toys" hypotest-toys $ws --n-toys 100 --seed 4
  run "$b upper-limit" upper-limit $ws
  run "$b upper-limit scan" upper-limit $ws --scan 0 3 7
  run "$b significance" significance $ws
  run "$b scan" scan $ws --range 0 2 5
  run "$b ranking" ranking $ws
  run "$b gof" gof $ws
  run "$b asimov fit" fit $ws --asimov 1
  run "$b vulkan fit" fit $ws --gpu vulkan
done
for d in atlas_ttbar_ljets_xsec atlas_staus_2018-04_comb_DS_100_1 atlas_1Lbb_simplified; do
  ws=$L/$d/workspace.json
  run "$d fit" fit $ws
  run "$d hypotest" hypotest $ws
  run "$d toys" hypotest-toys $ws --n-toys 40
  run "$d ranking" ranking $ws
done
report() {  # label, model: `nextstat report` of both builds, every file of the two folders compared
  "$OLD" report "$2" -o $tmp/report_old > /dev/null 2>&1; "$NEW" report "$2" -o $tmp/report_new > /dev/null 2>&1
  if diff -r $tmp/report_old $tmp/report_new > /dev/null; then same=$((same+1)); echo "same  $1 report ($(ls $tmp/report_new | wc -l) files)"
  else diff=$((diff+1)); echo "DIFF  $1 report"; diff -rq $tmp/report_old $tmp/report_new | head -5; fi
  rm -rf $tmp/report_old $tmp/report_new
}
report analysis examples/analysis.json
report resonance examples/unbinned/resonance.json
grid="examples/bkgonly.json --patchset examples/patchset.json --all"
run "grid upper-limit" upper-limit $grid
run "grid hypotest" hypotest $grid --mu 1
run "grid shard 1/2" upper-limit $grid --shard 1/2
run "toys shard 0/2" hypotest-toys examples/analysis.json --n-toys 100 --seed 4 --shard 0/2
run "ranking shard 1/3" ranking examples/analysis.json --shard 1/3
run "patchset patch fit" fit examples/bkgonly.json --patchset examples/patchset.json --patch-name "$(python3 -c 'import json; print(json.load(open("examples/patchset.json"))["patches"][0]["metadata"]["name"])')"
unbinned_verbs() {  # label, model
  run "$1 eval" eval $2
  run "$1 fit" fit $2
  run "$1 hypotest" hypotest $2 --mu 1
  run "$1 toys" hypotest-toys $2 --mu 1 --n-toys 40 --seed 3
  run "$1 upper-limit" upper-limit $2
  run "$1 scan" scan $2 --range 0 2 5
  run "$1 ranking" ranking $2
}
unbinned_verbs resonance examples/unbinned/resonance.json
if [ -x .venv/bin/python ] && .venv/bin/python -c "import torch, onnxruntime" 2>/dev/null; then
  .venv/bin/python bench/flow_model.py $tmp/flow > /dev/null
  export ORT_DYLIB_PATH=$(.venv/bin/python -c "import onnxruntime, glob, os; print(glob.glob(os.path.join(os.path.dirname(onnxruntime.__file__), 'capi', 'libonnxruntime.so*'))[0])")
  unbinned_verbs flow $tmp/flow/model.json
fi
echo "same $same, different $diff"
