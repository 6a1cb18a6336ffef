#!/usr/bin/env bash
# pyhf's own API-level tests (scikit-hep/pyhf at v0.7.6) run against nextstat: `import pyhf`
# loads nextstat (`nextstat.install_as_pyhf()` in tests/pyhf_suite/conftest.py, which otherwise
# only gives pyhf's fixtures for the numpy backend). pyhf's tests are
# read from a checkout given as the argument (they are not part of this repository):
#   git clone --depth 1 --branch v0.7.6 https://github.com/scikit-hep/pyhf /tmp/pyhf-v0.7.6
#   bash scripts/pyhf_suite.sh /tmp/pyhf-v0.7.6 [RESULTS_DIR]
# Prints a table per module (passed, failed, errors, skipped, xfailed) and the failure reasons,
# and writes them to RESULTS_DIR (default: pyhf-suite-results/) with pytest's junit XML.
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:?usage: bash scripts/pyhf_suite.sh PYHF_v0.7.6_CHECKOUT [RESULTS_DIR]}
out=$(realpath -m "${2:-pyhf-suite-results}")
python=${PYTHON:-.venv/bin/python}
python="$(cd "$(dirname "$python")" && pwd)/$(basename "$python")"
[ -f "$src/tests/test_pdf.py" ] || { echo "error: $src has no tests/test_pdf.py: give a checkout of scikit-hep/pyhf v0.7.6" >&2; exit 2; }
"$python" -c 'import pytest_mock' 2>/dev/null || "$python" -m pip install --quiet --disable-pip-version-check pytest-mock
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/tests" "$out"
modules="test_workspace test_patchset test_pdf test_validation test_infer test_calculator test_teststats test_simplemodels test_modifiers"
for m in $modules; do
  cp -L "$src/tests/$m.py" "$work/tests/"
  if [ -d "$src/tests/$m" ]; then cp -rL "$src/tests/$m" "$work/tests/"; fi
done
cp -rL "$src/validation" "$work/validation"
cp tests/pyhf_suite/conftest.py "$work/tests/conftest.py"
cp tests/pyhf_suite/pytest.ini "$work/pytest.ini"
(cd "$work" && "$python" -m pytest tests -q -p no:cacheprovider --continue-on-collection-errors --junitxml="$out/junit.xml" -o junit_family=xunit2 >"$out/pytest.log" 2>&1) || true
"$python" tests/pyhf_suite/summarise.py "$out/junit.xml" | tee "$out/summary.md"
