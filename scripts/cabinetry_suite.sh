#!/usr/bin/env bash
# cabinetry's own test suite (scikit-hep/cabinetry at v0.6.0, the version in the test
# requirements) twice: on pyhf, then on nextstat through `nextstat.install_as_pyhf()` (every
# `import pyhf` loads nextstat; cabinetry and its tests unchanged). The tests are read from a
# checkout given as the argument (they are not part of this repository):
#   git clone --depth 1 --branch v0.6.0 https://github.com/scikit-hep/cabinetry /tmp/cabinetry-v0.6.0
#   bash scripts/cabinetry_suite.sh /tmp/cabinetry-v0.6.0 [RESULTS_DIR]
# Prints a table per test module for each run and the failure reasons, and writes them to
# RESULTS_DIR (default: cabinetry-suite-results/) with pytest's junit XML.
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:?usage: bash scripts/cabinetry_suite.sh CABINETRY_v0.6.0_CHECKOUT [RESULTS_DIR]}
out=$(realpath -m "${2:-cabinetry-suite-results}")
python=${PYTHON:-.venv/bin/python}
python="$(cd "$(dirname "$python")" && pwd)/$(basename "$python")"
[ -f "$src/tests/test_model_utils.py" ] || { echo "error: $src has no tests/test_model_utils.py: give a checkout of scikit-hep/cabinetry v0.6.0" >&2; exit 2; }
"$python" -c 'import pytest_mock' 2>/dev/null || "$python" -m pip install --quiet --disable-pip-version-check pytest-mock
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The installed cabinetry is the one tested: the checkout's tests and data, not its sources.
cp -rL "$src/." "$work/"
rm -rf "$work/src" "$work/.git"
echo 'import nextstat; nextstat.install_as_pyhf()' > "$work/nextstat_as_pyhf.py"
mkdir -p "$out"
for run in pyhf nextstat; do
  plugin=()
  [ $run = nextstat ] && plugin=(-p nextstat_as_pyhf)
  # cabinetry's addopts ask for coverage and typeguard plugins the test environment lacks.
  (cd "$work" && PYTHONPATH="$work" MPLBACKEND=Agg "$python" -m pytest tests -q -p no:cacheprovider "${plugin[@]}" \
      -o addopts="" --junitxml="$out/$run.xml" -o junit_family=xunit2 >"$out/$run.log" 2>&1) || true
  echo "## cabinetry's suite on $run"
  "$python" tests/pyhf_suite/summarise.py "$out/$run.xml" | tee "$out/$run.md"
done
